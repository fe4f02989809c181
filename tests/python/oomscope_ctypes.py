"""The C ABI of liboomscope.so through ctypes, for the tests (OOMSCOPE_LIB names the library)."""
import ctypes
import os

lib = ctypes.CDLL(os.environ["OOMSCOPE_LIB"])
lib.oomscope_malloc.restype = ctypes.c_void_p
lib.oomscope_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.oomscope_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.oomscope_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
lib.oomscope_scope_push.argtypes = [ctypes.c_char_p]
lib.oomscope_step.argtypes = [ctypes.c_long]
lib.oomscope_dump.argtypes = [ctypes.c_char_p]
lib.oomscope_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
lib.oomscope_last_error.restype = ctypes.c_size_t
lib.oomscope_version.restype = ctypes.c_char_p
lib.oomscope_empty_cache.argtypes = []
lib.oomscope_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
lib.oomscope_dump_at_exit.argtypes = []
lib.oomscope_dump_at_exit.restype = ctypes.c_int


class Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "limit", "bytes_in_use", "peak_bytes_in_use", "pool_bytes", "peak_pool_bytes",
        "largest_free_block", "num_allocs", "num_frees", "num_ooms", "live_allocations")] + [("fragmentation", ctypes.c_double)]


lib.oomscope_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]


def last_error():
    buf = ctypes.create_string_buffer(8192)
    lib.oomscope_last_error(buf, len(buf))
    return buf.value.decode()


def stats(device=0):
    s = Stats()
    s.size = ctypes.sizeof(Stats)
    rc = lib.oomscope_stats(device, ctypes.byref(s))
    return s if rc == 0 else None


def check(cond, what):
    if not cond:
        raise AssertionError(what)
