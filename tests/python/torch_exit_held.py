"""Trains a little under `oomscope run --dump-at-step 0 --dump-at-exit` (emulated), then
holds a cache of tensors in a global until the interpreter frees it: the dump at step 0 holds
the weights, the dump at exit the cache too."""
import torch

model = torch.nn.Linear(512, 512)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    loss = model(torch.randn(64, 512)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
cache = [torch.zeros(256, 1024) for _ in range(4)]
print("holding until exit")
