"""The C ABI of liboomscope.so, as ctypes sees it: one place that says each function's
arguments and result (docs/architecture.md, crates/ffi)."""

import ctypes

# What an allocation is for: the C ABI's numbers (oomscope_kind_set, oomscope_tag).
UNKNOWN, WEIGHT, GRADIENT, OPTIMIZER, INPUT, ACTIVATION, TEMPORARY, BACKWARD, COLLECTIVE = range(9)


def load(path: str) -> ctypes.CDLL:
    """The library at `path`, its functions typed."""
    lib = ctypes.CDLL(path)
    lib.oomscope_malloc.restype = ctypes.c_void_p
    lib.oomscope_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.oomscope_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.oomscope_scope_push.argtypes = [ctypes.c_char_p]
    lib.oomscope_scope_pop.argtypes = []
    lib.oomscope_scope_clear.argtypes = []
    lib.oomscope_step.argtypes = [ctypes.c_long]
    lib.oomscope_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.oomscope_last_error.restype = ctypes.c_size_t
    lib.oomscope_empty_cache.argtypes = []
    lib.oomscope_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
    lib.oomscope_dump.argtypes = [ctypes.c_char_p]
    lib.oomscope_dump.restype = ctypes.c_int
    lib.oomscope_dump_at_exit.argtypes = []
    lib.oomscope_dump_at_exit.restype = ctypes.c_int
    lib.oomscope_kind_set.argtypes = [ctypes.c_int]
    lib.oomscope_kind_set.restype = ctypes.c_int
    lib.oomscope_tag.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.oomscope_tag.restype = ctypes.c_int
    lib.oomscope_tag_shape.argtypes = [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_char_p
    ]
    lib.oomscope_tag_shape.restype = ctypes.c_int
    return lib


def last_error(lib: ctypes.CDLL) -> str:
    """This thread's last error from the library ("" when none)."""
    n = lib.oomscope_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.oomscope_last_error(buf, n + 1)
    return buf.value.decode("utf-8", "replace")
