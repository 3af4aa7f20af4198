#!/usr/bin/env bash
# On a lent machine with one NVIDIA GPU and a venv with pip's torch, after bench/gpu/prepare.sh
# here: the wheel installed into that venv with pip (from the file, no index), then from the
# venv's PATH `rankrun --check` and a torch NCCL job on the GPU, and `python -m rankrun`.
# Writes $OUT/wheel_check.log. Under a minute.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${OUT:-/tmp}"
exec > >(tee "$out/wheel_check.log") 2>&1
work="$(mktemp -d /tmp/rrwheel.XXXXXX)"
trap 'rm -rf "$work"' EXIT
wheel="$(ls "$root"/.gpu/dist/rankrun-*.whl | tail -n 1)"
echo "=== $(date -Is) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $(ldd --version | head -n 1)"
echo "=== python: $(command -v python3) $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
echo "=== pip install $(basename "$wheel")"
python3 -m pip install --no-index --no-deps --force-reinstall "$wheel" || exit 1
bin="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
echo "=== rankrun from the venv: $(command -v rankrun) ($bin)"
ldd "$(command -v rankrun)"
rankrun --version
echo "=== rankrun --check"
rankrun --check --nproc-per-node 1; echo "rc=$?"
cat > "$work/nccl.py" <<'PY'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
t = torch.ones(1 << 20, device="cuda") * (dist.get_rank() + 1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()}/{dist.get_world_size()} on {torch.cuda.get_device_name()} "
      f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} sum={t[0].item():.0f}", flush=True)
dist.destroy_process_group()
PY
echo "=== rankrun --nproc-per-node 1 nccl.py"
rankrun --nproc-per-node 1 "$work/nccl.py"; echo "rc=$?"
echo "=== python -m rankrun (exit code of a rank that exits 3)"
python3 -m rankrun --nproc-per-node 1 --no-python sh -c 'exit 3'; echo "rc=$?"
echo "=== python -m rankrun --cmake-dir: $(python3 -m rankrun --cmake-dir)"
