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
  bad=()
  for f in "${files[@]}"; do
    if ! clang-format --style=file "$f" | cmp -s - "$f"; then bad+=("$f"); fi
  done
  if ((${#bad[@]})); then
    echo "format.sh: ${#bad[@]} file(s) do not follow .clang-format; run tools/format.sh:" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files follow .clang-format"
else
  for f in "${files[@]}"; do
    clang-format --style=file "$f" > "$f.fmt" && mv "$f.fmt" "$f"
  done
fi
