"""Under `oomscope run` with OOMSCOPE_TORCH_EMULATE=1 (no CUDA; --device sim:64MiB):
torch.cuda.empty_cache() and torch.cuda.set_per_process_memory_fraction() reach oomscope's
caching allocator, as they do through the pluggable allocator's hooks on a GPU."""
import torch

from oomscope_ctypes import check, stats

MiB = 1 << 20
x = torch.randn(MiB)  # 4 MiB: a 20 MiB segment
check(stats().pool_bytes == 20 * MiB, f"one 20 MiB segment: {stats().pool_bytes}")
del x
check(stats().bytes_in_use == 0 and stats().pool_bytes == 20 * MiB, "freed, still cached")
torch.cuda.empty_cache()
check(stats().pool_bytes == 0, f"empty_cache gave it back: {stats().pool_bytes}")
torch.cuda.set_per_process_memory_fraction(0.25)
try:
    y = torch.randn(5 * MiB)  # 20 MiB over a 16 MiB fraction
    check(False, "20 MiB fits under a quarter of 64 MiB")
except torch.cuda.OutOfMemoryError as e:
    check("16.00 MiB allowed" in str(e), str(e))
torch.cuda.set_per_process_memory_fraction(1.0)
y = torch.randn(5 * MiB)
print("torch cache calls: every check holds")
