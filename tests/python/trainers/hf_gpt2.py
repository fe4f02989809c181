"""Hugging Face's Trainer on a 4-layer GPT-2 built from a config (nothing downloaded), on random
tokens, at a batch too big for the device it is given: its OOM report names each layer.

    python hf_gpt2.py [--batch 64] [--checkpointing] [--peft] [--truth FILE]

--peft trains a LoRA adapter (PEFT) on the frozen model instead of the whole model. --truth
writes what the model and the optimizer hold by PyTorch's own count (JSON) once trained; the
trainer stays alive until the program exits (a dump at exit sees its state).
"""
import argparse
import json
import os
import tempfile

os.environ.setdefault("USE_TF", "0")  # transformers would import TensorFlow when present

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--seq", type=int, default=128)
ap.add_argument("--vocab", type=int, default=4000)
ap.add_argument("--checkpointing", action="store_true")
ap.add_argument("--peft", action="store_true")
ap.add_argument("--truth")
args = ap.parse_args()

logging.set_verbosity_error()
torch.manual_seed(0)
config = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=args.vocab, n_positions=args.seq)
model = GPT2LMHeadModel(config)
if args.peft:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(model, LoraConfig(r=8, target_modules=["c_attn", "c_fc"], fan_in_fan_out=True))


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        ids = torch.randint(0, config.vocab_size, (args.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


training = TrainingArguments(
    output_dir=tempfile.mkdtemp(prefix="hf-gpt2-"),
    per_device_train_batch_size=args.batch,
    max_steps=args.steps,
    report_to=[],
    save_strategy="no",
    logging_strategy="no",
    disable_tqdm=True,
    dataloader_num_workers=0,
    gradient_checkpointing=args.checkpointing,
)
trainer = Trainer(model=model, args=training, train_dataset=Tokens())
trainer.train()
print("trained", args.batch, flush=True)


def nbytes(t):
    return t.numel() * t.element_size()


if args.truth:
    params = list(model.named_parameters())
    state = trainer.optimizer.state
    with open(args.truth, "w") as f:
        json.dump(
            {
                "frozen": sum(nbytes(p) for _, p in params if not p.requires_grad),
                "trainable": sum(nbytes(p) for _, p in params if p.requires_grad),
                "trainable_names": [n for n, p in params if p.requires_grad],
                "optimizer": sum(nbytes(v) for s in state.values() for v in s.values() if hasattr(v, "numel") and v.dim() > 0),
            },
            f,
        )
