"""Dumps a program asks for stay within the dump directory's limit, and setting a device's
memory fraction opens no device: run by tests/integration/abi.rs."""
import json
import os

from oomscope_ctypes import lib, last_error

MiB = 1 << 20
dumps = os.environ["OOMSCOPE_DUMP_DIR"]
limit = int(os.environ["OOMSCOPE_DUMP_DIR_LIMIT"])


def check(ok, what):
    if not ok:
        raise SystemExit(f"FAILED: {what}")


# A fraction for device 1, on which nothing is allocated: no allocator for it appears.
lib.oomscope_set_memory_fraction(0.5, 1)
p = lib.oomscope_malloc(4 * MiB, 0, None)
check(p, "device 0 allocates")

# A program that runs out of memory, catches it and dumps its state, in a loop: each state
# dump has a new name (the OOMs so far); the dump directory's limit stops them, with the reason.
written = 0
error = ""
for _ in range(400):
    check(lib.oomscope_malloc(2048 * MiB, 0, None) is None, "2 GiB does not fit")
    if lib.oomscope_dump(None) != 0:
        error = last_error()
        break
    written += 1
check(error, f"the limit stopped the dumps ({written} written)")
check("already holds" in error and "OOMSCOPE_DUMP_DIR_LIMIT" in error, error)
names = [n for n in os.listdir(dumps) if n.endswith(".dump.json")]
held = sum(os.path.getsize(os.path.join(dumps, n)) for n in names)
# The check runs before each write: at most one dump past the limit.
largest = max(os.path.getsize(os.path.join(dumps, n)) for n in names)
check(held < limit + largest, f"{held} bytes held, limit {limit}")
check(all("-gpu0-" in n for n in names), f"only device 0 is dumped: {names}")
check(any("-state" in n for n in names), f"state dumps were written: {names}")
d = json.load(open(os.path.join(dumps, names[0])))
check(d["device"]["name"] == "cuda:0", d["device"])

# The fraction applies once device 1 is used: a half of 1 GiB.
check(lib.oomscope_malloc(600 * MiB, 1, None) is None, "600 MiB over half of 1 GiB fails on device 1")
check("512.00 MiB allowed" in last_error(), last_error())
check(lib.oomscope_malloc(400 * MiB, 1, None), "400 MiB fits")
print(f"abi_dump_limits: every check holds ({written} dumps written before the limit)")
