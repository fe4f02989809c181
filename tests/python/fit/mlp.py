"""A PyTorch MLP trained with AdamW on random data: `oomscope fit`'s test program.

    python mlp.py --batch 64 [--steps 10] [--hidden 1024]
"""
import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--hidden", type=int, default=1024)
ap.add_argument("--features", type=int, default=512)
args = ap.parse_args()

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(args.features, args.hidden), nn.GELU(),
    nn.Linear(args.hidden, args.hidden), nn.GELU(),
    nn.Linear(args.hidden, args.hidden), nn.GELU(),
    nn.Linear(args.hidden, 10),
).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(args.steps):
    x = torch.randn(args.batch, args.features, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("trained", args.batch, flush=True)
