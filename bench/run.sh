#!/usr/bin/env bash
# `make bench`: every benchmark, on an already built tree. Results go to stdout; docs/benchmarks/
# records them with the command that produced them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build}" && pwd)"
echo "## Launch"
/usr/bin/python3 "$root/bench/launch_bench.py" --build-dir "$build"
echo
echo "## Store"
/usr/bin/python3 "$root/bench/store_bench.py" --build-dir "$build"
echo
echo "## Store barrier with torch's Python clients, including the store rankrun hosts"
/usr/bin/python3 "$root/bench/hosted_store_bench.py" --build-dir "$build"
echo
echo "## Multi-node"
/usr/bin/python3 "$root/bench/multinode_bench.py" --build-dir "$build"
echo
echo "## Scale: 8 to 256 nodes, one native worker each"
/usr/bin/python3 "$root/bench/scale_bench.py" --build-dir "$build" --runs 1
echo
echo "## Elastic rendezvous"
/usr/bin/python3 "$root/bench/elastic_bench.py" --build-dir "$build" --rankrun "$build/launcher/rankrun"
echo
echo "## Elastic rendezvous over etcd"
"$build/bench/rankrun_elastic_etcd_bench"
echo
echo "## The job-wide hang view: node 0's cost per look"
"$build/bench/rankrun_job_view_bench"
echo
echo "## Sampler cost inside a worker"
/usr/bin/python3 "$root/bench/sampler_bench.py" --build-dir "$build"
echo
echo "## Python runtime: rankrun.data and rankrun.progress against torch"
/usr/bin/python3 "$root/bench/python_runtime_bench.py" --build-dir "$build"
