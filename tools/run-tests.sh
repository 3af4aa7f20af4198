#!/usr/bin/env bash
# `make test`: every test, on an already built tree.
#   1. CTest: unit tests (launcher, store, worker runtime), the loopback store test, CLI smoke
#      tests, purity checks, and the real-Slurm tests (label slurm).
#   2. The C++ unit tests again under ASan + UBSan.
#   3. A short libFuzzer run of the store decoder (the long one: make fuzz-long).
#   4. Process-level tests with pytest, every file of tests/integration/: the rankrun binary on
#      real processes and real PyTorch, PyTorch's TCPStore clients against the store.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
asan="${2:-$root/build-asan}"
jobs="$(nproc)"
cd "$root"

step() { printf '\n==== %s\n' "$*"; }

step "ctest ($build)"
ctest --test-dir "$build" -j "$jobs" --output-on-failure

step "C++ unit tests under ASan + UBSan ($asan)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in rankrun_launcher_tests rankrun_store_tests rankrun_worker_tests; do
  bin="$asan/tests/$t"
  if [[ -x "$bin" ]]; then
    echo "-- $t"
    "$bin" --minimal
  fi
done

step "fuzz the store decoder (short)"
tools/fuzz.sh short 2>&1 | tail -n 3

step "process-level tests (pytest)"
export RANKRUN_BUILD_DIR="$build"
# test_slurm.py ran under CTest (label slurm).
/usr/bin/python3 -m pytest -p no:cacheprovider -q -n "$jobs" --ignore=tests/integration/test_slurm.py tests/integration
