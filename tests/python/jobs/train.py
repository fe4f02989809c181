"""A data-parallel training job for oomscope's job tests, run by torchrun on the CPU (gloo)
under `oomscope run` with OOMSCOPE_TORCH_EMULATE=1 (every rank's tensors recorded as if on
its own simulated GPU). What goes wrong is chosen by the arguments:

  --wrap ddp|fsdp         DistributedDataParallel, or FSDP2 (`fully_shard` per layer)
  --batch N               every rank's batch
  --grow-rank R --grow-step S --factor F   rank R's batch is F times larger from step S on
  --leak-rank R           rank R keeps its first layer's output of every step (a forward
                          hook that collects activations, left on)
  --steps N

Each rank prints `rank R step S ok` after each step."""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--wrap", default="ddp")
p.add_argument("--batch", type=int, default=128)
p.add_argument("--hidden", type=int, default=4096)
p.add_argument("--grow-rank", type=int, default=-1)
p.add_argument("--grow-step", type=int, default=0)
p.add_argument("--factor", type=int, default=1)
p.add_argument("--leak-rank", type=int, default=-1)
p.add_argument("--steps", type=int, default=6)
a = p.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, a.hidden), nn.ReLU(), nn.Linear(a.hidden, 512))
if a.wrap == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
else:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(model)
opt = torch.optim.AdamW(model.parameters())
kept = []
if rank == a.leak_rank:
    first = model.module[0] if hasattr(model, "module") else model[0]
    first.register_forward_hook(lambda mod, args, out: kept.append(out.detach()))
for step in range(a.steps):
    batch = a.batch * (a.factor if rank == a.grow_rank and step >= a.grow_step else 1)
    x = torch.randn(batch, 512)
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step} ok", flush=True)
dist.destroy_process_group()
