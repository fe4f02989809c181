"""An MLP trained with AdamW that runs out of memory in the forward pass of a large batch,
under `oomscope run` (OOMSCOPE_TORCH_EMULATE=1). It prints, as one JSON line, the true bytes
of what was live at the failure, from PyTorch's own bookkeeping: the weights, AdamW's state,
the input, and the activations (what autograd saved for the backward pass, and the output
the failing layer was computing from), for the test to hold the dump's breakdown to."""
import json
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 512))
opt = torch.optim.AdamW(model.parameters())
saved = {}  # storage address -> bytes, of what autograd saved in this forward
consumed = [None]  # the input of the layer running now: (address, bytes)


def storage(t):
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def pack(t):
    ptr, n = storage(t)
    saved[ptr] = n
    return t


for m in model:
    m.register_forward_pre_hook(lambda mod, args: consumed.__setitem__(0, storage(args[0])))


def step(batch):
    saved.clear()
    opt.zero_grad()
    x = torch.randn(batch, 512)
    inputs[0] = storage(x)[0]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(x).square().mean()
    loss.backward()
    opt.step()


inputs = [None]
step(64)  # AdamW's state exists from here on
big = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
try:
    step(big)
    print(json.dumps({"fits": True}))
except torch.cuda.OutOfMemoryError:
    params = {storage(p)[0]: storage(p)[1] for p in model.parameters()}
    live = dict(saved)
    live[consumed[0][0]] = consumed[0][1]
    activation = sum(n for ptr, n in live.items() if ptr not in params and ptr != inputs[0])
    state = sum(storage(t)[1] for s in opt.state.values() for t in s.values() if t.dim() > 0)
    print(json.dumps({"weight": sum(params.values()), "optimizer": state, "input": big * 512 * 4, "activation": activation}))
