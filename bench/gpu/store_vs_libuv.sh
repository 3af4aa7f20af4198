#!/usr/bin/env bash
# On a lent machine with torch wheels (their TCPStore server is libuv's), after
# bench/gpu/prepare.sh here: bench/store_bench.py in one run against rankrun-store, the store
# rankrun hosts and torch's libuv server, the barrier from 1,024 to 19,000 clients (200 per
# source address), median (min-max) of 5 with ListenOverflows. Writes $OUT/store_vs_libuv.log.
# A few minutes; the host's somaxconn is printed and left as it is.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-/tmp}"
export LD_LIBRARY_PATH="$root/.gpu/lib:${LD_LIBRARY_PATH:-}"
exec > >(tee "$out/store_vs_libuv.log") 2>&1
echo "=== $(date -Is) $(nproc) cores, $(uname -r); somaxconn $(sysctl -n net.core.somaxconn)," \
  "tcp_max_syn_backlog $(sysctl -n net.ipv4.tcp_max_syn_backlog); python3: $(command -v python3)"
python3 -c 'import torch; print("torch", torch.__version__)'
"$root/.gpu/build/rendezvous/rankrun-store" --help > /dev/null || { echo "rankrun-store does not run here"; exit 1; }
timeout 540 python3 "$root/bench/store_bench.py" --build-dir "$root/.gpu/build" --rounds 1 --seconds 0.3 \
  --barrier 1024,4096,16384,19000 --repeat 5
echo "=== rc=$? $(date -Is)"
