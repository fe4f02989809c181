"""An MLP trained with Hugging Face accelerate (`Accelerator().prepare`), launched with
`accelerate launch --cpu --num_processes 2` (gloo): rank 1's batch is larger, and runs out
of memory first.

    accelerate launch --cpu --num_processes 2 accelerate_mlp.py [--batch 2048] [--steps 3]
"""
import argparse
import warnings

import torch
import torch.nn as nn
from accelerate import Accelerator

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=2048)
ap.add_argument("--steps", type=int, default=3)
args = ap.parse_args()
warnings.filterwarnings("ignore")
torch.manual_seed(0)

accelerator = Accelerator(cpu=True)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 512))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer = accelerator.prepare(model, optimizer)
# One rank's data is four times the other's: the rank that fails first.
batch = args.batch * (4 if accelerator.process_index == 1 else 1)
for step in range(args.steps):
    x = torch.randn(batch, 512, device=accelerator.device)
    loss = model(x).square().mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
accelerator.wait_for_everyone()
print("trained", accelerator.process_index, batch, flush=True)
