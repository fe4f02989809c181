"""Records PyTorch memory snapshots on a real GPU, each from an empty allocator, for
oomscope's tests of its caching allocator (`fixtures/torch-snapshots/`).

    python scripts/record-torch-snapshots.py OUT_DIR            # every scenario
    python scripts/record-torch-snapshots.py OUT_DIR default oom  # some
    WRAP="target/release/oomscope run --" python scripts/record-torch-snapshots.py OUT_DIR
                                                   # the same under oomscope's allocator

Each scenario runs in a fresh process (so its trace starts from an empty allocator, with
the allocator settings of its own environment) and writes OUT_DIR/NAME.pickle
(`torch.cuda.memory._dump_snapshot`) and OUT_DIR/NAME.json: the PyTorch version, the
settings, what PyTorch's own counters said (peak reserved and allocated, the stats), and
the text of every out-of-memory error it caught. Needs a CUDA GPU.

Without one, its training scenarios run on the CPU, for `oomscope fit` to predict their
peaks on the GPU (`tests/integration/fit.rs` compares them with the `.facts.json`):

    PYTORCH_ALLOC_CONF=... oomscope fit --device h100 --steps 4 -- \
        python scripts/record-torch-snapshots.py --one default OUT_DIR
"""
import json
import os
import shlex
import subprocess
import sys
import time

# name: (PYTORCH_ALLOC_CONF, what it exercises)
SCENARIOS = {
    "default": ("", "a transformer trained 4 steps at changing sequence lengths, default settings"),
    "expandable": ("expandable_segments:True", "the same run with expandable segments"),
    "tuned": (
        "max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
        "the same run with max_split_size and per-interval power-of-two rounding, empty_cache after step 2",
    ),
    "streams": ("", "allocations on a side stream, record_stream, a free still pending at the snapshot"),
    "oom": ("", "a memory fraction of 2 GiB filled until PyTorch runs out, then a request that fragmentation refuses"),
    "oom_expandable": ("expandable_segments:True", "the oom scenario with expandable segments"),
    "gc": (
        "garbage_collection_threshold:0.5,max_split_size_mb:32",
        "a memory fraction with garbage collection: cached segments released as the limit nears",
    ),
    "frames": ("", "one training step recorded with C++ and Python frames (stacks='all')"),
    "long": ("", "the transformer trained 22 steps: a trace of about 25 000 entries, for the benchmarks"),
}

GIB = 1 << 30


def device(torch):
    """The GPU; the CPU where there is none, for `oomscope fit` to predict these programs on
    a GPU from a run on the CPU (their training scenarios only)."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def model(torch, d=512, layers=4, vocab=8000):
    nn = torch.nn
    layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True, dropout=0.1)
    return nn.Sequential(nn.Embedding(vocab, d), nn.TransformerEncoder(layer, layers), nn.Linear(d, vocab)).to(device(torch))


def train(torch, m, steps=4, batch=16, seqs=(256, 192, 320, 128), after_step=None):
    F = torch.nn.functional
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    vocab = m[-1].out_features
    for step in range(steps):
        seq = seqs[step % len(seqs)]
        x = torch.randint(0, vocab, (batch, seq), device=device(torch))
        out = m(x)
        loss = F.cross_entropy(out.reshape(-1, vocab), x.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del out, loss, x
        if after_step:
            after_step(step)
    return opt


def fraction_for(torch, nbytes):
    total = torch.cuda.get_device_properties(0).total_memory
    return nbytes / total


def run_one(name, out_dir):
    """One scenario. Under `oomscope run` (OOMSCOPE_LIB set) PyTorch's recorder and counters
    are not available: the state is written as oomscope's dump at the same moments instead,
    so the two allocators' final states can be compared."""
    import torch

    lib = os.environ.get("OOMSCOPE_LIB")
    facts = {"scenario": name, "alloc_conf": os.environ.get("PYTORCH_ALLOC_CONF", ""), "ooms": []}
    facts["allocator"] = "oomscope" if lib else "pytorch"
    if not lib and torch.cuda.is_available():
        stacks = "all" if name == "frames" else "python"
        torch.cuda.memory._record_memory_history(max_entries=200_000, context="all", stacks=stacks)
    torch.manual_seed(0)

    def dump_state():
        if lib:
            import ctypes

            c = ctypes.CDLL(lib)
            c.oomscope_dump.argtypes = [ctypes.c_char_p]
            c.oomscope_dump(os.path.join(out_dir, name + ".dump.json").encode())
        else:
            torch.cuda.memory._dump_snapshot(os.path.join(out_dir, name + ".pickle"))

    def oom(e):
        facts["ooms"].append(str(e))

    if name in ("default", "expandable"):
        m = model(torch)
        opt = train(torch, m)
    elif name == "tuned":
        m = model(torch)
        opt = train(torch, m, after_step=lambda s: torch.cuda.empty_cache() if s == 1 else None)
    elif name == "streams":
        m = model(torch, layers=2)
        side = torch.cuda.Stream()
        train(torch, m, steps=2)
        with torch.cuda.stream(side):
            kept = [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (3, 5, 30)]
        x = torch.randn(8 << 20, device="cuda")  # 32 MiB on the default stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(2_000_000_000)  # keeps the side stream busy past the snapshot
            y = x * 2
        x.record_stream(side)
        del x  # pending free: the side stream has not passed its event
        z = torch.randn(8 << 20, device="cuda")  # cannot reuse x's block yet
        if not lib:
            snap = torch.cuda.memory._snapshot()
            facts["pending_free_blocks"] = sum(
                1 for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_pending_free"
            )
        dump_state()
        facts["skip_dump"] = True
        torch.cuda.synchronize()
        del kept, y, z
    elif name in ("oom", "oom_expandable"):
        facts["fraction_bytes"] = 2 * GIB
        torch.cuda.set_per_process_memory_fraction(fraction_for(torch, 2 * GIB))
        held = []
        try:
            for i in range(1000):
                held.append(torch.empty((3 + i % 5) << 20, dtype=torch.uint8, device="cuda"))
        except torch.cuda.OutOfMemoryError as e:
            oom(e)
        # Free every other tensor: much memory reserved but unallocated, in pieces.
        facts["held_at_first_oom"] = len(held)
        del held[::2]
        try:
            big = torch.empty(400 << 20, dtype=torch.uint8, device="cuda")
            facts["big_fit"] = True
            del big
        except torch.cuda.OutOfMemoryError as e:
            oom(e)
        del held
        if name == "oom":
            dump_state()
            facts["skip_dump"] = True
            # One request larger than the whole card, with no fraction set.
            torch.cuda.set_per_process_memory_fraction(1.0)
            try:
                torch.empty(200 * GIB, dtype=torch.uint8, device="cuda")
            except torch.cuda.OutOfMemoryError as e:
                oom(e)
    elif name == "gc":
        facts["fraction_bytes"] = 1 * GIB
        torch.cuda.set_per_process_memory_fraction(fraction_for(torch, 1 * GIB))
        held = []
        for round_ in range(6):
            # Oversize blocks of changing sizes are cached, then reclaimed by the collector.
            for i in range(4):
                held.append(torch.empty((40 + 13 * ((round_ + i) % 5)) << 20, dtype=torch.uint8, device="cuda"))
            held = held[-3:]
    elif name == "long":
        m = model(torch)
        opt = train(torch, m, steps=22)
    elif name == "frames":
        m = model(torch, d=256, layers=2)
        train(torch, m, steps=1, batch=8, seqs=(64,))
    else:
        raise SystemExit(f"unknown scenario {name}")

    torch.cuda.synchronize()
    if not facts.pop("skip_dump", False):
        dump_state()
    facts.update(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name(0),
        total_memory=torch.cuda.get_device_properties(0).total_memory,
    )
    if lib:
        import ctypes

        class Stats(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in (
                "size", "limit", "bytes_in_use", "peak_bytes_in_use", "pool_bytes", "peak_pool_bytes",
                "largest_free_block", "num_allocs", "num_frees", "num_ooms", "live_allocations")] + [
                ("fragmentation", ctypes.c_double)]

        st = Stats()
        st.size = ctypes.sizeof(Stats)
        ctypes.CDLL(lib).oomscope_stats(0, ctypes.byref(st))
        facts.update(max_memory_reserved=st.peak_pool_bytes, max_memory_allocated=st.peak_bytes_in_use)
    else:
        stats = torch.cuda.memory_stats()
        facts.update(
            max_memory_reserved=torch.cuda.max_memory_reserved(),
            max_memory_allocated=torch.cuda.max_memory_allocated(),
            memory_reserved=torch.cuda.memory_reserved(),
            memory_allocated=torch.cuda.memory_allocated(),
            stats={k: v for k, v in stats.items() if k.endswith(".all.peak") or k.endswith(".all.current") or k.startswith("num_")},
        )
    suffix = ".oomscope.json" if lib else ".json"
    with open(os.path.join(out_dir, name + suffix), "w") as f:
        json.dump(facts, f, indent=1)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--one":
        run_one(sys.argv[2], sys.argv[3])
        return
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "torch-snapshots"
    names = sys.argv[2:] or list(SCENARIOS)
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        conf, what = SCENARIOS[name]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env["PYTORCH_ALLOC_CONF"] = conf
        t0 = time.time()
        try:
            wrap = shlex.split(os.environ.get("WRAP", ""))
            p = subprocess.run(
                wrap + [sys.executable, __file__, "--one", name, out_dir],
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired as e:
            rc, err = "timeout", str(e.stderr)
        print(f"{name}: exit {rc} in {time.time() - t0:.1f} s ({what})", flush=True)
        tag = ".oomscope" if wrap else ""
        with open(os.path.join(out_dir, name + tag + ".stderr"), "w") as f:
            f.write(err)
        if rc != 0:
            print(err[-3000:], flush=True)


if __name__ == "__main__":
    main()
