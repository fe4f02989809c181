// A C++ caller of oomscope_torch_malloc, as PyTorch's CUDAPluggableAllocator is: an OOM
// must arrive as a std::runtime_error with PyTorch's words, and bad input too.
#include <dlfcn.h>
#include <sys/types.h>
#include <cstdio>
#include <stdexcept>

typedef void* (*malloc_fn)(ssize_t, int, void*);

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    void* lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { std::printf("dlopen: %s\n", dlerror()); return 2; }
    malloc_fn m = (malloc_fn)dlsym(lib, "oomscope_torch_malloc");
    if (!m) { std::printf("no oomscope_torch_malloc\n"); return 2; }
    if (!m(1 << 20, 0, nullptr)) { std::printf("1 MiB failed\n"); return 1; }
    int caught = 0;
    for (ssize_t size : {(ssize_t)1 << 40, (ssize_t)-1}) {
        try {
            m(size, 0, nullptr);
            std::printf("no exception for %zd\n", size);
        } catch (const std::runtime_error& e) {
            std::printf("caught std::runtime_error: %s\n", e.what());
            caught++;
        }
    }
    return caught == 2 ? 0 : 1;
}
