"""A small CNN with BatchNorm, trained with SGD and momentum on random images: `oomscope
fit`'s test program.

    python cnn.py --batch 32 [--steps 10]
"""
import argparse

import torch
import torch.nn as nn

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--image", type=int, default=64)
args = ap.parse_args()

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


model = nn.Sequential(
    block(3, 32), block(32, 32), nn.MaxPool2d(2),
    block(32, 64), block(64, 64), nn.MaxPool2d(2),
    block(64, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10),
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(args.steps):
    x = torch.randn(args.batch, 3, args.image, args.image, device=dev)
    y = torch.randint(0, 10, (args.batch,), device=dev)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("trained", args.batch, flush=True)
