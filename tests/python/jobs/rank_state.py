"""One rank of a job driving the C ABI (ctypes; the launcher's variables set by the test):
weights and inputs allocated under their names and kinds, then rank 1 asks for more than its
GPU has (its OOM dump), and the others write their state (`oomscope_dump`)."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from oomscope_ctypes import check, lib, last_error  # noqa: E402

lib.oomscope_kind_set.argtypes = [ctypes.c_int]
lib.oomscope_kind_set.restype = ctypes.c_int
rank, gpu = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
MIB = 1 << 20
WEIGHT, INPUT, ACTIVATION = 1, 4, 5


def alloc(name, kind, mib):
    lib.oomscope_scope_push(name.encode())
    previous = lib.oomscope_kind_set(kind)
    p = lib.oomscope_malloc(mib * MIB, gpu, None)
    lib.oomscope_kind_set(previous)
    lib.oomscope_scope_pop()
    return p


check(alloc("Net.fc/weight", WEIGHT, 24), last_error())
# SAME_DATA=1: rank 1 holds what the others hold, and only its last request is larger (one
# long sequence).
same = os.environ.get("SAME_DATA") == "1"
check(alloc("randn", INPUT, 4 if same or rank != 1 else 40), last_error())
check(alloc("Net.fc/linear", ACTIVATION, 16), last_error())
if rank == 1:
    check(not alloc("Net.head/linear", ACTIVATION, 100 if same else 80), "rank 1 runs out of memory")
else:
    check(lib.oomscope_dump(None) == 0, last_error())
print(f"rank {rank} done", flush=True)
