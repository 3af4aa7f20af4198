#!/usr/bin/env bash
# Prepares .gpu/ for a run on a lent machine with torch wheels (not Debian: no Boost, spdlog or
# fmt there). rankrun itself comes from the release build alone (make wheel: dist/): the wheel,
# which bench/gpu/wheel_check.sh installs there with pip, and the tarball's rankrun and
# rankrun-store, which need nothing but glibc. The store benchmark's load generator is a
# developer build's, with the shared libraries it loads from this machine. Then, on that
# machine, from the repository root:
#   OUT=<folder that comes back> bench/gpu/wheel_check.sh     (pip install of the wheel, a torch NCCL job, --check)
#   OUT=<folder that comes back> bench/gpu/store_vs_libuv.sh
#   OUT=<folder that comes back> bench/gpu/gpu_leftovers.sh   (the GPU check: an orphan, a restart)
# (the device run is given `.gpu` to carry).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
dist="$(cd "${2:-$root/dist}" && pwd)"
dest="$root/.gpu"
version="$(sed -n 's/^project(rankrun VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")"
tarball="$dist/rankrun-$version-linux-x86_64.tar.gz"
wheel="$(ls "$dist"/rankrun-"$version"-py3-none-manylinux_*_x86_64.whl 2>/dev/null | tail -n 1)"
if [[ ! -f "$tarball" || -z "$wheel" ]]; then
  echo "prepare.sh: no rankrun $version wheel and tarball in $dist: run make wheel first" >&2
  exit 1
fi
rm -rf "$dest"
mkdir -p "$dest/build/rendezvous" "$dest/build/bench" "$dest/build/launcher" "$dest/lib" "$dest/dist"
cp "$wheel" "$tarball" "$dest/dist/"
tar -xzf "$tarball" -C "$dest" --strip-components=2 "rankrun-$version/bin/rankrun" "rankrun-$version/bin/rankrun-store"
mv "$dest/rankrun" "$dest/build/launcher/"
mv "$dest/rankrun-store" "$dest/build/rendezvous/"
cp "$build/bench/store_loadgen" "$dest/build/bench/"
strip "$dest/build/bench/store_loadgen"
# Every library outside glibc's that the load generator loads (libspdlog, libfmt, ...).
ldd "$dest/build/bench/store_loadgen" | awk '$3 ~ /^\// {print $3}' |
  grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -nL "$lib" "$dest/lib/"; done
strip "$dest"/lib/* 2>/dev/null || true
du -sh "$dest"
