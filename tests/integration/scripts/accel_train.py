"""A plain accelerate training script, unmodified library code: Accelerator() reads rankrun's
environment, prepare() wraps a small model, its optimizer and a dataloader, a few steps, gather,
wait_for_everyone. On CPU with gloo.

Every rank prints "process_index I num_processes N gathered [..] steps S" at the end.
FAIL_RANK=r FAIL_STEP=s FAIL_CODE=c: rank r exits with code c after step s.

The backend is named (gloo): on CPU accelerate picks "mpi" whenever torch has it (Debian's does),
and without mpirun every process is then a world of its own (num_processes 1), under any launcher."""
import os
import sys

import torch


def main():
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
    fail_step = int(os.environ.get("FAIL_STEP", "2"))
    fail_code = int(os.environ.get("FAIL_CODE", "1"))

    accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")])
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=4, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    steps = 0
    model.train()
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        steps += 1
        if accelerator.process_index == fail_rank and steps == fail_step:
            print(f"rank {fail_rank} exits with {fail_code} on purpose after step {steps}", file=sys.stderr,
                  flush=True)
            sys.exit(fail_code)
    gathered = accelerator.gather(torch.tensor([accelerator.process_index], device=accelerator.device))
    accelerator.wait_for_everyone()
    print(f"process_index {accelerator.process_index} num_processes {accelerator.num_processes} "
          f"gathered {gathered.tolist()} steps {steps} loss {loss.item():.4f}", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
