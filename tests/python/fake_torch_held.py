"""Under `oomscope run --dump-at-step 0,2,7 --dump-at-exit` with the hook on the fake torch:
the weights, allocated before the first forward, are in the dump at step 0; a cache held by
a global until the interpreter tears the module down (its __del__ frees it then) is in the
dump at exit. A child process that imports torch and never allocates writes no dump and
says nothing. Step 7 never comes."""
import subprocess
import sys

from oomscope_ctypes import lib

import torch  # noqa: F401  the fake: the hook installs itself
from torch.nn import Module
from torch.nn.modules.module import call
from torch.optim.optimizer import step

MIB = 1 << 20


class Held:
    """GPU memory a global holds, freed when the interpreter tears the module down."""

    def __init__(self, name, sizes):
        self.free = lib.oomscope_free
        lib.oomscope_scope_push(name.encode())
        self.ptrs = [lib.oomscope_malloc(n, 0, None) for n in sizes]
        lib.oomscope_scope_pop()
        assert all(self.ptrs), "allocated"

    def __del__(self):
        for p in self.ptrs:
            self.free(p, 0, 0, None)


class Adam:
    pass


def forward():
    activations = lib.oomscope_malloc(32 * MIB, 0, None)
    assert activations
    lib.oomscope_free(activations, 0, 0, None)


weights = Held("model/weights", [16 * MIB])
model = Module()
for _ in range(3):
    call(model, forward)
    step(Adam(), lambda: None)
cache = Held("cache/keep", [4 * MIB] * 3)
# A DataLoader worker, a launcher: imports torch, never allocates.
subprocess.run([sys.executable, "-c", "import torch"], check=True)
print("holding until exit")
