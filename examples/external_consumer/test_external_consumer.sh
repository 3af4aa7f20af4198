#!/usr/bin/env bash
# Installs the worker runtime from a build tree into a temporary prefix, then builds this
# consumer against it twice: with CMake (find_package(rankrun)) and with plain g++ and
# pkg-config (rankrun-worker.pc), and runs each as a world of one.
#   examples/external_consumer/test_external_consumer.sh <build-dir>
set -euo pipefail
build=$(cd "${1:?usage: $0 <rankrun build dir>}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" --component worker >/dev/null
test -f "$prefix/lib/cmake/rankrun/rankrunConfig.cmake"
test -f "$prefix/lib/pkgconfig/rankrun-worker.pc"

# Nothing of the world outside may help: no launcher variables, and the library found only
# through the prefix (rpath for CMake, LD_LIBRARY_PATH for the pkg-config build).
unset RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_ERROR_FILE

echo "== CMake consumer"
cmake -S "$here" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer" | tee "$work/out1"
grep -q "consumer rank 0/1 reads 10 samples" "$work/out1"
"$work/cmake-build/consumer_c" | grep -q "consumer_c rank 0/1"

echo "== pkg-config consumer"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
g++ -std=c++17 -Wall -Wextra -Werror "$here/main.cpp" -o "$work/consumer_pc" $(pkg-config --cflags --libs rankrun-worker)
gcc -std=c99 -Wall -Wextra -Werror "$here/main.c" -o "$work/consumer_pc_c" $(pkg-config --cflags --libs rankrun-worker)
LD_LIBRARY_PATH=$prefix/lib "$work/consumer_pc" | tee "$work/out2"
grep -q "consumer rank 0/1 reads 10 samples" "$work/out2"
LD_LIBRARY_PATH=$prefix/lib "$work/consumer_pc_c" | grep -q "consumer_c rank 0/1"

# The headers installed are the ones the library was built with, and nothing from the
# source or build tree leaks into the package files.
if grep -rq -e "$build" -e "$(cd "$here/../.." && pwd)/" "$prefix/lib/cmake/rankrun" "$prefix/lib/pkgconfig"; then
  echo "package files refer to the build or source tree" >&2
  exit 1
fi
echo "external consumer: ok"
