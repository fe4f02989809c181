"""Allocates 64 MiB every 50 ms under a few scopes until the simulated GPU is full, then
stops: something to watch with `oomscope run --tui`."""
import time

from oomscope_ctypes import lib

for step in range(1000):
    lib.oomscope_step(step)
    lib.oomscope_scope_push(f"model/block{step % 4}".encode())
    p = lib.oomscope_malloc(64 << 20, 0, None)
    lib.oomscope_scope_pop()
    if not p:
        print(f"out of memory at step {step}")
        break
    time.sleep(0.05)
time.sleep(0.5)
