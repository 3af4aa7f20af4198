"""A transformers Trainer, unmodified library code, on a tiny GPT-2 built from a config (nothing
downloaded) and random tokens, on CPU with gloo: the Trainer reads rankrun's environment itself.

  hf_trainer.py OUTPUT_DIR MAX_STEPS

Every rank prints "rank R world_size W process_zero Z start_step S" when training begins;
rank 0 prints "done global_step N loss L" at the end. FAIL_RANK=r FAIL_STEP=s: rank r raises
at the end of step s in attempt 0 (TORCHELASTIC_RESTART_COUNT=0). A run whose output dir holds
a checkpoint resumes from the last complete one (trainer_state.json is the last file a save
writes: a rank stopped during a save leaves a checkpoint without it).

ACCELERATE_TORCH_DEVICE=cpu: on several CPU processes accelerate gives each the device "cpu:0"
(torch.device("cpu", local_process_index % torch.cpu.device_count())), and the Trainer loads a
checkpoint's optimizer state with map_location=args.device, which torch.load refuses ("don't know
how to restore data location of torch.storage.UntypedStorage (tagged with cpu:0)", torch 1.13 to
2.14): resuming on CPU fails under any launcher without it. ddp_backend="gloo": with use_cpu
accelerate picks "mpi" when torch has it (Debian's does), which needs mpirun."""
import os
import sys

import torch


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n, length, vocab):
        g = torch.Generator().manual_seed(0)
        self.data = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


def last_complete_checkpoint(out):
    steps = []
    for name in os.listdir(out) if os.path.isdir(out) else []:
        if name.startswith("checkpoint-") and os.path.exists(os.path.join(out, name, "trainer_state.json")):
            steps.append(int(name.split("-", 1)[1]))
    return os.path.join(out, f"checkpoint-{max(steps)}") if steps else None


def main():
    os.environ.setdefault("ACCELERATE_TORCH_DEVICE", "cpu")
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    out, max_steps = sys.argv[1], int(sys.argv[2])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    fail_rank = int(os.environ.get("FAIL_RANK", "-1"))
    fail_step = int(os.environ.get("FAIL_STEP", "2"))

    class Probe(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            print(f"rank {args.process_index} world_size {args.world_size} "
                  f"process_zero {int(state.is_world_process_zero)} start_step {state.global_step}", flush=True)

        def on_step_end(self, args, state, control, **kw):
            if attempt == 0 and args.process_index == fail_rank and state.global_step == fail_step:
                raise RuntimeError(f"rank {fail_rank} fails on purpose at step {fail_step}")

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    args = TrainingArguments(
        output_dir=out, max_steps=max_steps, per_device_train_batch_size=4, learning_rate=1e-3,
        save_strategy="steps", save_steps=1, logging_steps=1, report_to="none", use_cpu=True, ddp_backend="gloo",
        ddp_find_unused_parameters=False, dataloader_num_workers=0, disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=RandomTokens(64, 16, config.vocab_size),
                      callbacks=[Probe()])
    result = trainer.train(resume_from_checkpoint=last_complete_checkpoint(out))
    if trainer.is_world_process_zero():
        print(f"done global_step {trainer.state.global_step} loss {result.training_loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
