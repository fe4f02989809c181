"""A training script that profiles itself with torch.cuda's memory calls, as many do: under
`oomscope run` with emulation (no GPU), they answer with the emulated device's figures.
Prints one `name value` line per figure; writes a memory snapshot to argv[1]."""
import pickle
import sys

import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.cuda.memory._record_memory_history(max_entries=100_000)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(device)
opt = torch.optim.AdamW(model.parameters())


def step(batch):
    x = torch.randn(batch, 256, device=device)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


step(512)
torch.cuda.synchronize()
print("after_big", torch.cuda.max_memory_allocated(), flush=True)
print("reserved", torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved(), flush=True)
torch.cuda.reset_peak_memory_stats()
print("after_reset", torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated(), flush=True)
step(8)
print("after_small", torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated(), flush=True)
torch.cuda.memory._dump_snapshot(sys.argv[1])
with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
print("snapshot_segments", len(snap["segments"]), flush=True)
