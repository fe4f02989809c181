"""A rank of a job driving the C ABI that allocates, says `ready`, and waits (as a rank
blocked in a collective does) until the test ends it."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from oomscope_ctypes import check, lib, last_error  # noqa: E402

lib.oomscope_scope_push(b"Net.fc/weight")
check(lib.oomscope_malloc(8 << 20, 0, None), last_error())
print("ready", flush=True)
time.sleep(60)
