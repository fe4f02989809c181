// The one thing Rust cannot do for PyTorch: throw a C++ exception. PyTorch turns a
// std::exception thrown by a pluggable allocator's malloc into a Python RuntimeError with
// the same text, and OOM handlers (accelerate's batch-size finder, users' `except`) look for
// "CUDA out of memory." in it. `oomscope_torch_malloc` (Rust, `extern "C-unwind"`) calls
// this after its own work is done, so the exception unwinds only through a frame that
// allows it.
#include <stdexcept>

extern "C" [[noreturn]] void oomscope_cxx_throw(const char* message) {
    throw std::runtime_error(message ? message : "CUDA out of memory. (oomscope: no message)");
}
