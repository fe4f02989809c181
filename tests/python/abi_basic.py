"""Drives the C ABI on the simulated device (OOMSCOPE_DEVICE=sim:1GiB): allocations, scopes,
steps, statistics, a dump, an OOM, garbage in, streams, threads. Exits 0 when every check
holds; the Rust test reads stderr and the files."""
import ctypes
import json
import os
import sys
import threading

from oomscope_ctypes import Stats, check, last_error, lib, stats

MiB = 1 << 20
check(lib.oomscope_version().decode().startswith("oomscope "), "version")

# Allocations, named by scope.
lib.oomscope_scope_push(b"model")
lib.oomscope_scope_push(b"layer1")
a = lib.oomscope_malloc(64 * MiB, 0, None)
lib.oomscope_scope_pop()
lib.oomscope_scope_push(b"layer2")
b = lib.oomscope_malloc(32 * MiB, 0, None)
lib.oomscope_scope_pop()
lib.oomscope_scope_pop()
check(a and b and a != b, f"two allocations: {a}, {b}")
lib.oomscope_step(7)
s = stats()
check(s is not None, "stats for device 0")
check(s.bytes_in_use == 96 * MiB and s.live_allocations == 2 and s.num_allocs == 2, f"stats: {s.bytes_in_use} {s.live_allocations}")
check(s.limit == 1 << 30, f"limit = the simulated device's free memory: {s.limit}")

# A dump on request names the scoped ops.
out = os.environ["TEST_OUT"]
check(lib.oomscope_dump(os.path.join(out, "state.dump.json").encode()) == 0, "dump: " + last_error())
d = json.load(open(os.path.join(out, "state.dump.json")))
ops = {n["op"]: n["bytes"] for n in d["usage_by_node"]}
check(ops == {"model/layer1": 64 * MiB, "model/layer2": 32 * MiB}, f"usage by node: {ops}")
check(d["steps"][-1]["step"] == 7, "the step mark")

# An OOM: NULL, PyTorch's words in the error, the dump in OOMSCOPE_DUMP_DIR.
lib.oomscope_scope_push(b"model/head")
p = lib.oomscope_malloc(2 << 30, 0, None)
lib.oomscope_scope_pop()
check(p is None, "2 GiB on a 1 GiB device fails")
e = last_error()
check(e.startswith("CUDA out of memory. Tried to allocate 2.00GiB"), e)
check("dump: " in e, e)
dumps = [f for f in os.listdir(os.environ["OOMSCOPE_DUMP_DIR"]) if "-oom1" in f]
check(len(dumps) == 1, f"one OOM dump: {dumps}")
oom = json.load(open(os.path.join(os.environ["OOMSCOPE_DUMP_DIR"], dumps[0])))
check(oom["oom"]["op"] == "model/head" and oom["oom"]["requested"] == 2 << 30, oom["oom"])
check(oom["source"]["kind"] == "run" and "abi_basic.py" in oom["source"]["command"], oom["source"])
check(oom["verdict"]["kind"] == "single_tensor", oom["verdict"]["kind"])
check(stats().num_ooms == 1, "the OOM is counted")

# Garbage in: errors or warnings, never a crash.
check(lib.oomscope_malloc(0, 0, None) is None and stats().num_allocs == 2, "zero bytes: NULL, nothing allocated")
check(lib.oomscope_malloc(-1, 0, None) is None and "negative size" in last_error(), "negative size")
lib.oomscope_free(None, 0, 0, None)  # ignored
lib.oomscope_free(b, 32 * MiB, 0, None)
lib.oomscope_free(b, 32 * MiB, 0, None)  # double free: a warning
lib.oomscope_free(0xDEADBEEF000, 0, 0, None)  # unknown pointer: a warning
lib.oomscope_free(0xDEADBEEF000, 0, 3, None)  # a device never used: a warning
lib.oomscope_scope_push(None)  # a warning
lib.oomscope_scope_pop()  # nothing pushed: a warning
check(lib.oomscope_stats(0, None) == -1 and "NULL" in last_error(), "stats into NULL")
small = Stats()
small.size = 8
check(lib.oomscope_stats(0, ctypes.byref(small)) == -1 and "size" in last_error(), "a struct too small")
check(stats(5) is None and "device 5" in last_error(), "stats of an unused device")
check(lib.oomscope_malloc(1, -4, None) is None and "not a device" in last_error(), "a negative device")
check(lib.oomscope_dump(os.path.join(out, "no/such/dir/x.json").encode()) == 0, "dump creates missing directories")
check(lib.oomscope_last_error(None, 0) > 0, "the length of the last error")
check(stats().bytes_in_use == 64 * MiB, "after the garbage, only `a` is live")

# Streams: memory used on another stream is reused only once that stream is done.
lib.oomscope_scope_push(b"streams")
c = lib.oomscope_malloc(16 * MiB, 0, ctypes.c_void_p(0x51))
lib.oomscope_record_stream(c, ctypes.c_void_p(0x52))
lib.oomscope_free(c, 16 * MiB, 0, ctypes.c_void_p(0x51))
check(stats().bytes_in_use == 80 * MiB, "a free waiting for stream 0x52 holds its memory")
c2 = lib.oomscope_malloc(16 * MiB, 0, ctypes.c_void_p(0x51))
check(c2 != c, "the held chunk is not handed out again before the stream is done")
check(lib.oomscope_synchronize() == 1, "synchronize releases the one held free")
lib.oomscope_free(c2, 0, 0, ctypes.c_void_p(0x51))
check(stats().bytes_in_use == 64 * MiB, "all back")
lib.oomscope_scope_pop()

# Threads: each has its own scopes.
errors = []


def worker(i):
    try:
        name = f"tower{i}".encode()
        lib.oomscope_scope_push(name)
        ptrs = [lib.oomscope_malloc(256 * 1024, 0, None) for _ in range(50)]
        lib.oomscope_scope_pop()
        for q in ptrs:
            lib.oomscope_free(q, 0, 0, None)
        ptrs = [lib.oomscope_malloc(4096, 0, None) for _ in range(20)]
        check(all(ptrs), "thread allocations")
    except Exception as ex:
        errors.append(ex)


threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(not errors, errors)
check(lib.oomscope_dump(os.path.join(out, "threads.dump.json").encode()) == 0, last_error())
d = json.load(open(os.path.join(out, "threads.dump.json")))
named = {n["op"]: n["count"] for n in d["usage_by_node"]}
check(named.get("unknown") == 8 * 20, f"each thread's last 20 allocations are unscoped: {named}")
print("abi_basic: every check holds")
