"""A process publishing its live feed forks (as a DataLoader worker does) and the child
exits normally: the child must not join the parent's sampler thread, which it does not
have, nor remove the parent's socket. Run by tests/integration/abi.rs."""
import os
import sys

from oomscope_ctypes import lib

p = lib.oomscope_malloc(1 << 20, 0, None)
assert p, "allocated"
pid = os.fork()
if pid == 0:
    # The child: a normal exit, so the library's exit path runs here.
    sys.exit(7)
_, status = os.waitpid(pid, 0)
print(f"child exit status {os.waitstatus_to_exitcode(status)}")
sockets = [n for n in os.listdir(os.environ["OOMSCOPE_LIVE_DIR"]) if str(os.getpid()) in n]
print(f"parent sockets after the child's exit: {len(sockets)}")
lib.oomscope_free(p, 0, 0, None)
