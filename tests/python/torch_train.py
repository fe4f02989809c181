"""A real PyTorch training loop under `oomscope run` (on CPU, OOMSCOPE_TORCH_EMULATE=1 records
CPU tensors as if on the simulated GPU; on a GPU it runs as is). It starts with a batch that
does not fit (after a warm-up that does) and halves it on `torch.cuda.OutOfMemoryError`, as accelerate's
find_executable_batch_size does, then trains. Prints what happened."""
import sys

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class Net(nn.Module):
    def __init__(self, d=256, n=3):
        super().__init__()
        self.embed = nn.Linear(32, d)
        self.blocks = nn.Sequential(*[Block(d) for _ in range(n)])
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Net().to(device)
opt = torch.optim.Adam(model.parameters())


def train(batch, steps=2):
    for _ in range(steps):
        x = torch.randn(batch, 32, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


train(256)  # a warm-up that fits
print("trained at batch 256", flush=True)
batch = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
while batch >= 1:
    try:
        train(batch)
        print(f"trained at batch {batch}", flush=True)
        break
    except torch.cuda.OutOfMemoryError as e:
        assert isinstance(e, RuntimeError) and str(e).startswith("CUDA out of memory."), e
        print(f"OOM at batch {batch}; halving", flush=True)
        batch //= 2
