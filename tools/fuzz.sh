#!/usr/bin/env bash
# Builds the store decoder's libFuzzer target in build-fuzz (clang, ASan + UBSan) and runs it.
#   tools/fuzz.sh short   ~20 s, part of `make test`
#   tools/fuzz.sh long    30 min (FUZZ_SECONDS overrides), for changes to rendezvous/wire.*
# The corpus is kept in build-fuzz/corpus/store_decoder between runs; crashes land in
# build-fuzz/artifacts/ and the script exits non-zero.
set -euo pipefail
mode="${1:-short}"
case "$mode" in
  short) seconds="${FUZZ_SECONDS:-20}" ;;
  long) seconds="${FUZZ_SECONDS:-1800}" ;;
  *) echo "usage: $0 short|long" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${FUZZ_BUILD_DIR:-$root/build-fuzz}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
# Everything instrumented for coverage and sanitizers; only the fuzz target links libFuzzer's main.
# RANKRUN_DEV=OFF: warnings stay warnings under clang, the gcc build keeps -Werror.
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DRANKRUN_FUZZ=ON -DRANKRUN_DEV=OFF -DRANKRUN_WITH_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_store_decoder
corpus="$build/corpus/store_decoder"
artifacts="$build/artifacts/"
mkdir -p "$corpus" "$artifacts"
# Seeds: a 2.5+ handshake + ADD (torchrun.md 5.4) and a 1.13 ADD, each behind the two control
# bytes (protocol choice, split point) the target reads first.
printf '\x00\x07\x00\xce\xf7\x85\x3c\x0d\x39\x30\x00\x00\x04\x05\x00\x00\x00\x00\x00\x00\x00init/\x01\x00\x00\x00\x00\x00\x00\x00' >"$corpus/seed-v25-add"
printf '\x01\x03\x03\x05\x00\x00\x00\x00\x00\x00\x00init/\x01\x00\x00\x00\x00\x00\x00\x00' >"$corpus/seed-v113-add"
echo "fuzz: running fuzz_store_decoder for ${seconds}s"
"$build/tests/fuzz_store_decoder" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts" -print_final_stats=1 "$corpus"
