"""GPT-2 (Hugging Face transformers, built from a config: nothing is downloaded) trained with
AdamW on random token ids, for measuring and predicting peak GPU memory by batch size.

    python examples/torch/fit_gpt2.py --batch 8
    oomscope fit --device h100 -- python examples/torch/fit_gpt2.py --batch {batch}

It prints one JSON line at the end: the run's settings and, on CUDA with PyTorch's own
allocator, torch.cuda.max_memory_allocated() and max_memory_reserved(). With FIT_SNAPSHOT=PATH
on CUDA it also records the allocator's history and dumps a snapshot to PATH.
"""
import argparse
import json
import os

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--amp", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--steps", type=int, default=3)
    a = p.parse_args()

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    dev = "cuda" if cuda else "cpu"
    snapshot = os.environ.get("FIT_SNAPSHOT") if cuda else None
    if snapshot:
        torch.cuda.memory._record_memory_history(max_entries=200000)

    os.environ.setdefault("USE_TF", "0")  # keep transformers from importing TensorFlow
    from transformers import GPT2Config, GPT2LMHeadModel

    kw = dict(vocab_size=a.vocab, n_positions=max(a.seq, 1024), n_embd=a.d_model,
              n_layer=a.layers, n_head=a.heads)
    try:
        config = GPT2Config(attn_implementation="sdpa", **kw)
        model = GPT2LMHeadModel(config)
    except Exception:
        config = GPT2Config(**kw)
        model = GPT2LMHeadModel(config)
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)

    for _ in range(a.steps):
        if a.amp == "bf16":
            with torch.autocast(device_type=dev, dtype=torch.bfloat16):
                out = model(input_ids=x, labels=x)
        else:
            out = model(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize()
    if snapshot:
        torch.cuda.memory._dump_snapshot(snapshot)

    res = {"model": "gpt2", "batch": a.batch, "seq": a.seq, "amp": a.amp, "steps": a.steps,
           "device": torch.cuda.get_device_name(0) if cuda else "cpu",
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
