"""A small training loop written two ways: `hard` names CUDA itself (`torch.cuda.set_device`,
`.cuda()`, `device=torch.device("cuda", 0)`, `.to("cuda:0")`, `.to(0)`, `.pin_memory()`,
`torch.autocast("cuda")`), `portable` picks its device. Emulated on a CPU, both must run and
allocate the same: it prints the peaks the program's own calls report."""
import sys

import torch

hard = sys.argv[1] == "hard"
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
if hard:
    torch.cuda.set_device(0)
m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512))
m = m.cuda() if hard else m.to(dev)
opt = torch.optim.AdamW(m.parameters())
for step in range(3):
    if hard:
        x = torch.randn(64, 512).pin_memory().cuda(non_blocking=True)
        y = torch.randn(64, 512, device=torch.device("cuda", 0)).to("cuda:0").to(0)
    else:
        x = torch.randn(64, 512).to(dev)
        y = torch.randn(64, 512, device=dev)
    with torch.autocast("cuda" if hard else dev, dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(m(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
print("peak", torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
