#!/usr/bin/env bash
# Prepares .gpu/ for a run on a lent machine with torch wheels (not Debian: no Boost, spdlog or
# fmt there): the binaries the store benchmark needs, in the layout of a build tree, with the
# shared libraries they load from this machine. Then, on that machine, from the repository root:
#   OUT=<folder that comes back> bench/gpu/store_vs_libuv.sh
#   OUT=<folder that comes back> bench/gpu/gpu_leftovers.sh   (the GPU check: an orphan, a restart)
# (the device run is given `.gpu` to carry).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
dest="$root/.gpu"
rm -rf "$dest"
mkdir -p "$dest/build/rendezvous" "$dest/build/bench" "$dest/build/launcher" "$dest/lib"
cp "$build/rendezvous/rankrun-store" "$dest/build/rendezvous/"
cp "$build/bench/store_loadgen" "$dest/build/bench/"
cp "$build/launcher/rankrun" "$dest/build/launcher/"
for bin in "$dest"/build/*/*; do
  strip "$bin"
  # Every library outside glibc's that the binaries load (libspdlog, libfmt, Boost's, ...).
  ldd "$bin" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -nL "$lib" "$dest/lib/"; done
done
strip "$dest"/lib/* 2>/dev/null || true
du -sh "$dest"
