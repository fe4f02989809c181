"""Drives the C ABI with its default allocator, PyTorch's caching allocator, on the simulated
device (OOMSCOPE_DEVICE=sim:1GiB), and checks PyTorch's figures: rounding, segment sizes,
streams and record_stream, empty_cache, the memory fraction, the OOM message. The settings
come from PYTORCH_CUDA_ALLOC_CONF as the program sets it before its first allocation."""
import ctypes
import json
import os

MiB = 1 << 20
# Set by the program itself, as scripts do before they import torch.
os.environ["PYTORCH_CUDA_ALLOC_CONF"] = os.environ.get("TEST_CONF", "")

from oomscope_ctypes import check, last_error, lib, stats  # noqa: E402

out = os.environ["TEST_OUT"]
S1, S2, S3 = ctypes.c_void_p(0x51), ctypes.c_void_p(0x52), ctypes.c_void_p(0x53)


def dump(name):
    path = os.path.join(out, name)
    check(lib.oomscope_dump(path.encode()) == 0, last_error())
    return json.load(open(path))


# One byte: 512 bytes allocated in a 2 MiB small-pool segment.
lib.oomscope_scope_push(b"tiny")
one = lib.oomscope_malloc(1, 0, S1)
lib.oomscope_scope_pop()
s = stats()
check(s.bytes_in_use == 512 and s.pool_bytes == 2 * MiB, f"1 byte: {s.bytes_in_use} in use, {s.pool_bytes} reserved")
# 24.5 MiB: a segment of 26 MiB (rounded up to 2 MiB).
big = lib.oomscope_malloc(24 * MiB + MiB // 2, 0, S1)
check(stats().pool_bytes == 28 * MiB, f"24.5 MiB takes a 26 MiB segment: {stats().pool_bytes}")
d = dump("caching.dump.json")
check(d["allocator"]["caching"] is not None and d["allocator"]["settings"] == os.environ["PYTORCH_CUDA_ALLOC_CONF"], d["allocator"])
pools = sorted((r["size"], r["pool"], r["stream"]) for r in d["regions"])
check(pools == [(2 * MiB, "small", 0x51), (26 * MiB, "large", 0x51)], pools)

# Streams: a block freed on stream 0x51 is not handed to stream 0x53.
lib.oomscope_free(big, 0, 0, S1)
other = lib.oomscope_malloc(24 * MiB, 0, S3)
check(other != big and stats().pool_bytes == 52 * MiB, f"stream 0x53 gets its own 24 MiB segment: {stats().pool_bytes}")
lib.oomscope_free(other, 0, 0, S3)
# record_stream: freed, then pending until stream 0x52 has passed.
c = lib.oomscope_malloc(24 * MiB, 0, S1)
check(c == big, "the cached block of stream 0x51 is reused")
lib.oomscope_record_stream(c, S2)
lib.oomscope_free(c, 0, 0, S1)
check(stats().bytes_in_use == 512, "a pending free no longer counts as allocated, as in PyTorch")
pending = [ch for r in dump("pending.dump.json")["regions"] for ch in r["chunks"] if ch.get("pending_free")]
check(len(pending) == 1 and pending[0]["address"] == c, pending)
c2 = lib.oomscope_malloc(24 * MiB, 0, S1)
check(c2 != c, "a pending block is not handed out again")
check(lib.oomscope_synchronize() == 1, "synchronize completes the one pending free")
lib.oomscope_free(c2, 0, 0, S1)
c3 = lib.oomscope_malloc(24 * MiB, 0, S1)
check(c3 == c2, "best fit: c2's 24 MiB segment, not c's block merged back to 26 MiB")
c4 = lib.oomscope_malloc(24 * MiB, 0, S1)
check(c4 == c, "and after synchronize c's block is free again")
lib.oomscope_free(c4, 0, 0, S1)
lib.oomscope_free(c3, 0, 0, S1)

# empty_cache: every whole cached segment goes back; the one with the live byte stays.
before = stats().pool_bytes
lib.oomscope_empty_cache()
check(before > 2 * MiB and stats().pool_bytes == 2 * MiB, f"empty_cache: {before} -> {stats().pool_bytes}")

# The memory fraction: a quarter of 1 GiB is 256 MiB.
lib.oomscope_set_memory_fraction(0.25, 0)
lib.oomscope_scope_push(b"model/head")
p = lib.oomscope_malloc(300 * MiB, 0, S1)
lib.oomscope_scope_pop()
check(p is None, "300 MiB over a 256 MiB fraction fails")
e = last_error()
check(e.startswith("CUDA out of memory. Tried to allocate 300.00 MiB. GPU 0 has a total capacity of 1024.00 MiB"), e)
check("256.00 MiB allowed" in e and "oomscope:" in e and "dump: " in e, e)
dumps = [f for f in os.listdir(os.environ["OOMSCOPE_DUMP_DIR"]) if "-oom1" in f]
check(len(dumps) == 1, dumps)
oom = json.load(open(os.path.join(os.environ["OOMSCOPE_DUMP_DIR"], dumps[0])))
check(oom["oom"]["op"] == "model/head" and oom["oom"]["requested"] == 300 * MiB, oom["oom"])
check(oom["oom"]["segment_request"] == 300 * MiB, oom["oom"])
check(oom["allocator"]["caching"]["allowed"] == 256 * MiB, oom["allocator"]["caching"])
check(oom["allocator"]["caching"]["ooms"] == 1 and stats().num_ooms == 1, "the OOM is counted once")
lib.oomscope_set_memory_fraction(1.0, 0)
check(lib.oomscope_malloc(300 * MiB, 0, S1), "with the whole device it fits")
print("abi_caching: every check holds")
