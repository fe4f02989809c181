"""Hugging Face's Trainer on a GPT-2 built from a config (nothing downloaded), trained on
random tokens: `oomscope fit`'s test program.

    python trainer.py --batch 8 [--steps 10]
"""
import argparse
import os
import tempfile

os.environ.setdefault("USE_TF", "0")  # transformers would import TensorFlow when present

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.utils import logging

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--seq", type=int, default=64)
args = ap.parse_args()

logging.set_verbosity_error()
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=2000, n_positions=args.seq)
model = GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        ids = torch.randint(0, config.vocab_size, (args.seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


with tempfile.TemporaryDirectory() as out:
    training = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=args.batch,
        max_steps=args.steps,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    Trainer(model=model, args=training, train_dataset=Tokens()).train()
print("trained", args.batch, flush=True)
