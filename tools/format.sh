#!/usr/bin/env bash
# The layout of the C++ and C sources (.clang-format at the root):
#   tools/format.sh          rewrites every tracked source in place
#   tools/format.sh --check  changes nothing; lists the files that differ and exits 1 (make test)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v clang-format >/dev/null || { echo "format.sh: clang-format is missing (apt-get install clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.c' '*.h' | grep -v '^shared/')
if [[ "${1:-}" == "--check" ]]; then
  # One clang-format per batch of files, the batches side by side; a file that differs gets
  # "FILE:LINE:COL: error: code should be clang-formatted" from --dry-run --Werror.
  rc=0
  out="$(printf '%s\0' "${files[@]}" |
    xargs -0 -n 40 -P "$(nproc)" clang-format --style=file --dry-run --Werror --ferror-limit=1 2>&1)" || rc=$?
  mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<<"$out" | sort -u)
  if ((rc != 0 && ${#bad[@]} == 0)); then  # clang-format failed otherwise (a bad .clang-format, ...)
    printf '%s\n' "$out" >&2
    echo "format.sh: clang-format failed (exit $rc)" >&2
    exit 1
  fi
  if ((${#bad[@]})); then
    echo "format.sh: ${#bad[@]} file(s) do not follow .clang-format; run tools/format.sh:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files follow .clang-format"
else
  # Rewritten in place, one clang-format per batch of files, the batches side by side.
  printf '%s\0' "${files[@]}" | xargs -0 -n 40 -P "$(nproc)" clang-format -i --style=file
fi
