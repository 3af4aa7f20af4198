#!/bin/sh
# Prints the directory of a Debian root with a newer PyTorch for the tests, building it first
# when it is absent or broken (about 2 minutes and 1.4 GB each; the tests run rankrun's Python
# workers in it through tests/helpers/torch-python).
#
#   tools/torch-root.sh trixie    # python3-torch 2.6
#   tools/torch-root.sh sid       # python3-torch 2.14, with transformers and accelerate
#   tools/torch-root.sh bullseye  # no torch: glibc 2.31 and Python 3.9, where the portable
#                                 # binaries of the release build must run (test_install.py)
#
# The roots live outside the repository, in $RANKRUN_TORCH_ROOTS (default
# /var/cache/rankrun/torch-roots), and are kept between runs: a root is rebuilt only when its
# Python cannot import torch (or the packages asked for changed). Needs root, mmdebstrap, and
# the Debian mirror apt already uses here.
set -eu

suite=${1:?usage: tools/torch-root.sh trixie|sid|bullseye}
check='import torch'
case "$suite" in
  trixie) packages="python3-torch,python3-numpy" ;;
  sid) packages="python3-torch,python3-numpy,python3-transformers,python3-accelerate" ;;
  bullseye) packages="python3,procps" check='import sys' ;;
  *) echo "torch-root.sh: unknown suite '$suite' (trixie, sid or bullseye)" >&2; exit 2 ;;
esac

roots=${RANKRUN_TORCH_ROOTS:-/var/cache/rankrun/torch-roots}
dir="$roots/$suite"
stamp="$dir/.rankrun-root"

healthy() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$packages" ] &&
    chroot "$dir" /usr/bin/python3 -c "$check" >/dev/null 2>&1
}

mkdir -p "$roots"
# One builder at a time (parallel test workers ask for the same root).
exec 9>"$roots/.$suite.lock"
flock 9

if healthy; then
  echo "$dir"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "torch-root.sh: building the $suite root needs root" >&2
  exit 1
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
  echo "torch-root.sh: mmdebstrap is missing (apt-get install mmdebstrap, or: make deps-test)" >&2
  exit 1
fi

# The mirror apt uses for Debian here (deb822 sources first, then sources.list).
mirror=$(sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
if [ -z "$mirror" ]; then
  mirror=$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\/debian\)\/\?[[:space:]].*/\2/p' /etc/apt/sources.list 2>/dev/null | head -n 1)
fi
mirror=${mirror:-http://deb.debian.org/debian}

echo "torch-root.sh: building the $suite root in $dir from $mirror (about 2 minutes)..." >&2
rm -rf "$dir.partial"
# sid's Release file may be past its Valid-Until date on a snapshot mirror.
mmdebstrap --variant=apt --quiet --include="$packages" \
  --aptopt='Acquire::Check-Valid-Until "false"' \
  "$suite" "$dir.partial" "$mirror" >&2
echo "$packages" >"$dir.partial/.rankrun-root"
rm -rf "$dir"
mv "$dir.partial" "$dir"
if ! healthy; then
  echo "torch-root.sh: the $suite root in $dir fails: python3 -c '$check'" >&2
  exit 1
fi
echo "torch-root.sh: $suite root ready: $(chroot "$dir" /usr/bin/python3 -c "$check; print(sys.version.split()[0]) if 'torch' not in dir() else print('torch', torch.__version__)" 2>/dev/null)" >&2
echo "$dir"
