"""Just enough of torch's surface for oomscope's hook to install itself, recorded for the
test: the allocator it installs, the hooks it registers. `run_forward` plays a module's
forward the way torch would call the hooks, allocating through the installed library."""
import ctypes


class Tensor:
    grad_fn = None


class OutOfMemoryError(RuntimeError):
    pass


installed = {}


def is_grad_enabled():
    return False


class _Inner:
    def set_record_stream_fn(self, fn):
        installed["record_stream_fn"] = fn

    def set_reset_fn(self, fn):
        installed["reset_fn"] = fn

    def set_memory_fraction_fn(self, fn):
        installed["memory_fraction_fn"] = fn


class _Memory:
    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            installed["allocator"] = (path, alloc_fn_name, free_fn_name)
            self.lib = ctypes.CDLL(path)
            getattr(self.lib, alloc_fn_name)
            getattr(self.lib, free_fn_name)
            self._allocator = _Inner()

    @staticmethod
    def change_current_allocator(allocator):
        installed["current"] = allocator


class cuda:
    memory = _Memory
    OutOfMemoryError = OutOfMemoryError

    @staticmethod
    def is_available():
        return True


from . import nn, optim  # noqa: E402
