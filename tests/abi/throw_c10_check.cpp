// A C++ caller of oomscope_torch_malloc in a process with PyTorch's libc10 loaded as Python
// loads it (RTLD_LOCAL): an OOM must arrive as c10::OutOfMemoryError, the type PyTorch's
// cuDNN convolutions catch to try an algorithm with a smaller workspace; bad input is still
// a std::runtime_error.
//
// The catch clause needs only the type's name: C++ matches a thrown type by its type_info's
// name, so these declarations stand for PyTorch's own (whose vtable, in libc10, answers what()).
#include <dlfcn.h>
#include <sys/types.h>
#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>

namespace c10 {
struct Error : std::exception {};
struct OutOfMemoryError : Error {};
}  // namespace c10

typedef void* (*malloc_fn)(ssize_t, int, void*);

int main(int argc, char** argv) {
    if (argc < 3) return 2;
    void* c10 = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!c10) { std::printf("dlopen libc10: %s\n", dlerror()); return 2; }
    void* lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { std::printf("dlopen: %s\n", dlerror()); return 2; }
    malloc_fn m = (malloc_fn)dlsym(lib, "oomscope_torch_malloc");
    if (!m) { std::printf("no oomscope_torch_malloc\n"); return 2; }
    int ok = 0;
    for (int round = 0; round < 2; round++) {
        try {
            m((ssize_t)1 << 40, 0, nullptr);
            std::printf("no exception\n");
        } catch (const c10::OutOfMemoryError& e) {
            // c10::Error::what() is the message, then where it was thrown.
            const char* w = e.what();
            const char* nl = std::strchr(w, '\n');
            std::printf("caught c10::OutOfMemoryError: %.*s\n", nl ? (int)(nl - w) : (int)std::strlen(w), w);
            ok++;
        } catch (const std::exception& e) {
            std::printf("caught another exception: %s\n", e.what());
        }
    }
    try {
        m(-1, 0, nullptr);
    } catch (const c10::OutOfMemoryError& e) {
        std::printf("bad input as an OOM: %s\n", e.what());
    } catch (const std::runtime_error& e) {
        std::printf("caught std::runtime_error: %s\n", e.what());
        ok++;
    }
    // Still allocates after two OOMs.
    if (m(1 << 20, 0, nullptr)) ok++;
    return ok == 4 ? 0 : 1;
}
