"""Six Linear layers under bfloat16 autocast, trained with AdamW: a small batch, then one too
large. Autocast casts each weight to bfloat16 for its layer and autograd keeps the copy for
the backward pass: weights' copies, not activations.

    python autocast_mlp.py
"""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(1024, 1024) for _ in range(6)])
optimizer = torch.optim.AdamW(model.parameters())
for batch in (64, 8192):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(batch, 1024)).float().square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    print("trained", batch, flush=True)
