"""Step time and peak device memory of one training loop, for comparing PyTorch's own
allocator with oomscope's (scripts/gpu-check.sh runs it both ways, side by side).

    python examples/torch/bench.py --batch 128               # PyTorch's caching allocator
    oomscope run --no-ops -- python examples/torch/bench.py --batch 128
    oomscope run -- python examples/torch/bench.py --batch 128

Prints one JSON line: median step time (ms) and peak reserved / allocated bytes (from
oomscope's statistics when it is the allocator: PyTorch's own counters are unavailable
under a pluggable allocator).
"""
import argparse
import ctypes
import json
import os
import statistics
import time

import torch
import torch.nn as nn

from train import resnet


class Stats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "size", "limit", "bytes_in_use", "peak_bytes_in_use", "pool_bytes", "peak_pool_bytes",
        "largest_free_block", "num_allocs", "num_frees", "num_ooms", "live_allocations")] + [("fragmentation", ctypes.c_double)]


def peaks():
    lib = os.environ.get("OOMSCOPE_LIB")  # set by `oomscope run`: oomscope is the allocator
    if lib:
        s = Stats()
        s.size = ctypes.sizeof(Stats)
        ctypes.CDLL(lib).oomscope_stats(0, ctypes.byref(s))
        return {"allocator": "oomscope", "peak_reserved": s.peak_pool_bytes, "peak_allocated": s.peak_bytes_in_use}
    return {
        "allocator": "pytorch",
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "peak_allocated": torch.cuda.max_memory_allocated(),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--image", type=int, default=224)
    args = ap.parse_args()
    model, what = resnet()
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(args.batch, 3, args.image, args.image, device="cuda")
    y = torch.randint(0, 1000, (args.batch,), device="cuda")
    times = []
    for i in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        if i >= args.warmup:
            times.append((time.perf_counter() - t0) * 1000)
    out = {"model": what, "batch": args.batch, "step_ms": round(statistics.median(times), 2),
           "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    out.update(peaks())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
