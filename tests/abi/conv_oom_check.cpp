// An OOM inside a convolution, in a process with PyTorch's libc10 (as cuDNN's code meets it):
// caught, as cuDNN catches a workspace that does not fit, and the thread allocates again
// ("caught"); caught and then said to have reached the program, as Python's hook says it
// ("escaped"); or caught and the process ends without another allocation ("last").
#include <dlfcn.h>
#include <sys/types.h>
#include <cstdio>
#include <cstring>
#include <exception>

namespace c10 {
struct Error : std::exception {};
struct OutOfMemoryError : Error {};
}  // namespace c10

typedef void* (*malloc_fn)(ssize_t, int, void*);
typedef void (*name_fn)(const char*);
typedef void (*void_fn)(void);

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    void* c10 = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!c10) { std::printf("dlopen libc10: %s\n", dlerror()); return 2; }
    void* lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { std::printf("dlopen: %s\n", dlerror()); return 2; }
    malloc_fn m = (malloc_fn)dlsym(lib, "oomscope_torch_malloc");
    name_fn push = (name_fn)dlsym(lib, "oomscope_scope_push");
    void_fn pop = (void_fn)dlsym(lib, "oomscope_scope_pop");
    void_fn say = (void_fn)dlsym(lib, "oomscope_say_held_report");
    if (!m || !push || !pop || !say) { std::printf("a function is missing\n"); return 2; }
    bool escaped = std::strcmp(argv[3], "escaped") == 0;
    bool last = std::strcmp(argv[3], "last") == 0;
    int ok = 0;
    push("ResNet.layer4.2.conv3/ConvolutionBackward0");
    try {
        m((ssize_t)1 << 40, 0, nullptr);
    } catch (const c10::OutOfMemoryError&) {
        ok++;
        if (escaped) say();
    }
    pop();
    if (last) return ok == 1 ? 0 : 1;
    if (m(1 << 20, 0, nullptr)) ok++;
    // Said after the program went on: nothing is held, nothing is reported.
    if (!escaped) say();
    std::fflush(stdout);
    return ok == 2 ? 0 : 1;
}
