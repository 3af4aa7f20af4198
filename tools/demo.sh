#!/usr/bin/env bash
# `make demo`: a real 4-worker job on this machine, no GPU needed. Each worker is the C++
# example that sums a vector over rankrun's store (examples/cpp_store_allreduce); then the same
# job with one rank failing, to show the root-cause report and the exit code.
set -uo pipefail
build="${1:-build}"
rankrun="$build/launcher/rankrun"
example="$build/examples/cpp_store_allreduce/cpp_store_allreduce"

echo "== rankrun --nproc-per-node 4 --no-python $example"
"$rankrun" --nproc-per-node 4 --no-python "$example"
rc=$?
echo "== exit code: $rc"
[ "$rc" -eq 0 ] || exit "$rc"

echo
echo "== the same job, with rank 2 throwing on purpose (--throw-on-rank 2)"
"$rankrun" --nproc-per-node 4 --no-python "$example" --throw-on-rank 2
rc=$?
echo "== exit code: $rc (the failing rank's own exit code)"
[ "$rc" -ne 0 ] || { echo "demo: the failing run should not succeed" >&2; exit 1; }
exit 0
