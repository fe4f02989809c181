"""Imports (fake) torch under `oomscope run`: the hook must install the allocator and name
allocations by module path; a program that never imports torch is left alone."""
import ctypes
import json
import os
import sys

from oomscope_ctypes import check, lib

import torch  # the fake, first on PYTHONPATH after oomscope's hook
from torch.nn import Module
from torch.nn.modules.module import call
from torch.optim.optimizer import step

path, malloc_name, free_name = torch.installed["allocator"]
check(path == os.environ["OOMSCOPE_LIB"], path)
check((malloc_name, free_name) == ("oomscope_torch_malloc", "oomscope_free"), (malloc_name, free_name))
check(torch.installed["record_stream_fn"], "the record_stream hook is set")
# torch.cuda.empty_cache() and set_per_process_memory_fraction reach oomscope's allocator.
check(torch.installed["reset_fn"] == ctypes.cast(lib.oomscope_empty_cache, ctypes.c_void_p).value, "empty_cache hook")
check(
    torch.installed["memory_fraction_fn"] == ctypes.cast(lib.oomscope_set_memory_fraction, ctypes.c_void_p).value,
    "memory fraction hook",
)
check("current" in torch.installed, "the allocator is made current")

conv = Module()
layer1 = Module(conv1=conv)
model = Module(layer1=layer1)
type(model).__name__  # noqa: B018
ptrs = []


class Adam:
    pass


def forward():
    def layer():
        call(conv, lambda: ptrs.append(lib.oomscope_malloc(1 << 20, 0, None)))
        ptrs.append(lib.oomscope_malloc(2 << 20, 0, None))
    call(layer1, layer)


call(model, forward)
step(Adam(), lambda: ptrs.append(lib.oomscope_malloc(3 << 20, 0, None)))
ptrs.append(lib.oomscope_malloc(4 << 20, 0, None))
out = os.path.join(os.environ["TEST_OUT"], "fake.dump.json")
check(lib.oomscope_dump(out.encode()) == 0, "dump")
d = json.load(open(out))
names = {n["op"]: n["requested"] for n in d["usage_by_node"]}
check(names == {
    "Module.layer1.conv1": 1 << 20,
    "Module.layer1": 2 << 20,
    "Adam": 3 << 20,
    "unknown": 4 << 20,
}, names)
check([m["step"] for m in d["steps"]] == [0, 1], d["steps"])
print("fake torch: every check holds")
