"""torchvision's ResNet-50 (weights=None: nothing is downloaded) trained with SGD on random
images, for measuring and predicting peak GPU memory by batch size.

    python examples/torch/fit_resnet.py --batch 32
    oomscope fit --device h100 -- python examples/torch/fit_resnet.py --batch {batch}

It prints one JSON line at the end: the run's settings and, on CUDA with PyTorch's own
allocator, torch.cuda.max_memory_allocated() and max_memory_reserved(). With FIT_SNAPSHOT=PATH
on CUDA it also records the allocator's history and dumps a snapshot to PATH.
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--amp", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    snapshot = os.environ.get("FIT_SNAPSHOT") if cuda else None
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=200000)

    import torchvision

    model = torchvision.models.resnet50(weights=None, num_classes=1000).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)

    for _ in range(a.steps):
        if a.amp == "bf16":
            with torch.autocast(device_type=dev, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    if snapshot:
        torch.cuda.memory._dump_snapshot(snapshot)

    res = {"model": "resnet50", "batch": a.batch, "image": a.image, "amp": a.amp,
           "steps": a.steps, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
           "torch": torch.__version__}
    if cuda:
        try:
            res["peak_allocated"] = torch.cuda.max_memory_allocated()
            res["peak_reserved"] = torch.cuda.max_memory_reserved()
        except Exception:
            pass  # a pluggable allocator (oomscope's) has no such statistics
    print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
