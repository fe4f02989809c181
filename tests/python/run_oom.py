"""A program for `oomscope run --device sim:1GiB`: prints to both streams, starts a child
Python that also runs out of memory, runs out of memory itself, and exits 3."""
import os
import subprocess
import sys

from oomscope_ctypes import check, last_error, lib

print("program: stdout line")
print("program: stderr line", file=sys.stderr)
sys.stdout.flush()
if len(sys.argv) == 1:
    # A child process (a DataLoader worker, a rank) inherits the allocator.
    child = subprocess.run([sys.executable, __file__, "child"])
    check(child.returncode == 0, "the child ran")
name = b"child/Conv2D" if len(sys.argv) > 1 else b"parent/MatMul"
lib.oomscope_scope_push(name)
a = lib.oomscope_malloc(600 << 20, 0, None)
b = lib.oomscope_malloc(600 << 20, 0, None)
check(a and b is None, "the second 600 MiB does not fit in 1 GiB")
check(last_error().startswith(os.environ.get("TEST_EXPECT", "CUDA out of memory. Tried to allocate 600.00")), last_error())
print(f"program: caught the OOM in {'child' if len(sys.argv) > 1 else 'parent'}")
sys.exit(0 if len(sys.argv) > 1 else 3)
