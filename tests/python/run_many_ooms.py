"""Runs out of memory 16 times, catching each, then ends with os._exit: no exit handler
runs, so the process never says its total. Run under `oomscope run` by
tests/integration/abi.rs."""
import os

from oomscope_ctypes import lib

for _ in range(16):
    assert lib.oomscope_malloc(8 << 30, 0, None) is None, "8 GiB does not fit on 1 GiB"
os._exit(0)
