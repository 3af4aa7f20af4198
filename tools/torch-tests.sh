#!/usr/bin/env bash
# The tests that run PyTorch (pytest marker `torch`) with the torch of one Debian suite:
#   tools/torch-tests.sh BUILD_DIR SUITE [pytest arguments: files, -m ...]
# SUITE: bookworm (this machine's python3-torch, 1.13), trixie (2.6) or sid (2.14). For trixie
# and sid the root is made or checked first (tools/torch-root.sh) and the workers and the test
# scripts run in it through tests/helpers/torch-python. Without arguments: every test file. A -m
# among the arguments replaces -m torch (pytest keeps the last one): make test gives
# -m "torch and torch_commit and not slow".
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: tools/torch-tests.sh BUILD_DIR SUITE [pytest args]}" && pwd)"
suite="${2:?usage: tools/torch-tests.sh BUILD_DIR SUITE [pytest args]}"
shift 2
cd "$root"
export RANKRUN_BUILD_DIR="$build"
case "$suite" in
  bookworm) ;;
  trixie | sid)
    RANKRUN_TORCH_ROOT="$(tools/torch-root.sh "$suite")"
    export RANKRUN_TORCH_ROOT RANKRUN_TEST_PYTHON="$root/tests/helpers/torch-python"
    ;;
  *) echo "torch-tests.sh: unknown suite '$suite' (bookworm, trixie or sid)" >&2; exit 2 ;;
esac
python="${RANKRUN_TEST_PYTHON:-/usr/bin/python3}"
version="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)" || {
  echo "torch-tests.sh: $python cannot import torch ($suite)" >&2
  exit 1
}
echo "-- torch $version ($suite)"
if [[ $# -eq 0 ]]; then set -- tests/integration; fi
# test_slurm.py runs under CTest (label slurm) with this machine's torch.
exec /usr/bin/python3 -m pytest -p no:cacheprovider -q -n "$(nproc)" -m torch --ignore=tests/integration/test_slurm.py "$@"
