// The one thing Rust cannot do for PyTorch: throw a C++ exception. `oomscope_torch_malloc`
// (Rust, `extern "C-unwind"`) calls this after its own work is done, so the exception unwinds
// only through a frame that allows it.
//
// An OOM is thrown as PyTorch's own allocator throws it, a `c10::OutOfMemoryError`, when the
// process has PyTorch's libc10 loaded: PyTorch's code catches that type where it can do with
// less memory (cuDNN's convolutions try another algorithm when a workspace does not fit:
// `try_all` in Conv_v7.cpp, `try_plans` in Conv_v8.cpp) and Python gets
// `torch.OutOfMemoryError`. A `std::runtime_error` would end such a program where PyTorch's
// allocator lets it train. We cannot link against libc10 (any PyTorch version must do), so
// the exception is made from libc10's exported pieces: c10::Error's constructor, then
// OutOfMemoryError's vtable and type_info (it adds no members to c10::Error), thrown with
// __cxa_throw. Anything missing, or no libc10 at all: a std::runtime_error with the same text,
// which PyTorch turns into a RuntimeError (the Python side raises torch.OutOfMemoryError for
// it).
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <typeinfo>

namespace {

// c10::SourceLocation as c10/util/Exception.h lays it out (unchanged since PyTorch 1.x).
struct SourceLocation {
    const char* function;
    const char* file;
    uint32_t line;
};

// c10::Error::Error(SourceLocation, std::string): a member constructor takes `this` first, as
// a free function with this signature does (Itanium C++ ABI).
using ErrorCtor = void (*)(void*, SourceLocation, std::string);
using Dtor = void (*)(void*);

const char* const kCtor[] = {
    "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
    "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
};
const char kTypeInfo[] = "_ZTIN3c1016OutOfMemoryErrorE";
const char kVtable[] = "_ZTVN3c1016OutOfMemoryErrorE";
// More than c10::Error's size in any PyTorch (about 200 bytes): the runtime never reads it.
const size_t kObjectSize = 1024;

struct C10 {
    ErrorCtor ctor = nullptr;
    std::type_info* type = nullptr;
    void** vtable = nullptr;  // the address point: past offset-to-top and the type_info
    Dtor dtor = nullptr;
};

// PyTorch's libraries as loaded: Python loads them locally (RTLD_LOCAL), so their symbols
// are not global; a handle to each loaded library finds them. libc10.so has c10::Error's
// constructor; OutOfMemoryError's vtable and type_info are weak symbols of whichever
// libraries construct one (libc10.so in newer releases; libc10_cuda.so, libtorch_cuda.so in
// older ones, whose OutOfMemoryError only inherits its constructors), so each is looked up
// in every one of them.
const size_t kMaxLibraries = 16;
struct Libraries {
    const char* names[kMaxLibraries] = {};  // the loader's own strings, as long as loaded
    void* handles[kMaxLibraries] = {};
    size_t n = 0;
};

int find_torch(struct dl_phdr_info* info, size_t, void* out) {
    auto* libs = static_cast<Libraries*>(out);
    const char* name = info->dlpi_name;
    if (!name || !*name || libs->n == kMaxLibraries) return 0;
    const char* slash = std::strrchr(name, '/');
    const char* base = slash ? slash + 1 : name;
    if (std::strncmp(base, "libc10", 6) == 0 || std::strncmp(base, "libtorch", 8) == 0) {
        libs->names[libs->n++] = name;
    }
    return 0;
}

void* symbol(const Libraries& libs, const char* name) {
    for (size_t i = 0; i < libs.n; i++) {
        if (void* p = dlsym(libs.handles[i], name)) return p;
    }
    return nullptr;
}

C10 load() {
    C10 c;
    Libraries libs;
    dl_iterate_phdr(find_torch, &libs);
    // Opened after the walk, not in it: the walk holds the loader's lock.
    size_t opened = 0;
    for (size_t i = 0; i < libs.n; i++) {
        if (void* h = dlopen(libs.names[i], RTLD_LAZY | RTLD_NOLOAD)) libs.handles[opened++] = h;
    }
    libs.n = opened;
    for (const char* name : kCtor) {
        if (!c.ctor) c.ctor = reinterpret_cast<ErrorCtor>(symbol(libs, name));
    }
    c.type = static_cast<std::type_info*>(symbol(libs, kTypeInfo));
    void** table = static_cast<void**>(symbol(libs, kVtable));
    if (table) {
        c.vtable = table + 2;
        // std::exception's first virtual function is its destructor: slot 0 is the
        // complete-object destructor, what __cxa_throw wants.
        c.dtor = reinterpret_cast<Dtor>(c.vtable[0]);
    }
    for (size_t i = 0; i < libs.n; i++) dlclose(libs.handles[i]);
    return c;
}

}  // namespace

// 1 when an OOM would be thrown as c10::OutOfMemoryError now (PyTorch's libc10 is loaded and
// has every piece), else 0: for tests and `oomscope run`'s diagnostics.
extern "C" int oomscope_cxx_c10_available(void) {
    C10 c = load();
    return c.ctor && c.type && c.vtable && c.dtor ? 1 : 0;
}

extern "C" [[noreturn]] void oomscope_cxx_throw(const char* message, int oom) {
    const char* text = message ? message : "CUDA out of memory. (oomscope: no message)";
    if (oom) {
        // Looked up at each OOM, not once: libc10 may be loaded after the first.
        C10 c = load();
        if (c.ctor && c.type && c.vtable && c.dtor) {
            void* e = __cxxabiv1::__cxa_allocate_exception(kObjectSize);
            std::memset(e, 0, kObjectSize);
            c.ctor(e, SourceLocation{"oomscope_torch_malloc", "liboomscope.so", 0}, std::string(text));
            *static_cast<void***>(e) = c.vtable;
            __cxxabiv1::__cxa_throw(e, c.type, c.dtor);
        }
    }
    throw std::runtime_error(text);
}
