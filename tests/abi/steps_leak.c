/* A training loop that leaks, for `oomscope run --device sim:SIZE`: the library is the one
 * OOMSCOPE_LIB names. Weights of 16 MiB live throughout; each of the 5 steps keeps a 4 MiB
 * "cache/keep" allocation that is never freed, then takes 32 MiB of "model/forward"
 * activations and frees them. Steps are marked 0 to 4; the process exits 0. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

typedef void* (*malloc_fn)(ssize_t, int, void*);
typedef void (*free_fn)(void*, ssize_t, int, void*);
typedef void (*push_fn)(const char*);
typedef void (*void_fn)(void);
typedef void (*step_fn)(long);

#define MIB ((ssize_t)1 << 20)

int main(void) {
    const char* path = getenv("OOMSCOPE_LIB");
    void* lib = path ? dlopen(path, RTLD_NOW) : NULL;
    if (!lib) {
        printf("dlopen: %s\n", path ? dlerror() : "OOMSCOPE_LIB is not set");
        return 2;
    }
    malloc_fn gpu_malloc = (malloc_fn)dlsym(lib, "oomscope_malloc");
    free_fn gpu_free = (free_fn)dlsym(lib, "oomscope_free");
    push_fn push = (push_fn)dlsym(lib, "oomscope_scope_push");
    void_fn pop = (void_fn)dlsym(lib, "oomscope_scope_pop");
    step_fn step = (step_fn)dlsym(lib, "oomscope_step");

    push("model/weights");
    void* weights = gpu_malloc(16 * MIB, 0, NULL);
    pop();
    void* kept[5];
    for (long s = 0; s < 5; s++) {
        step(s);
        push("cache/keep");
        kept[s] = gpu_malloc(4 * MIB, 0, NULL);
        pop();
        push("model/forward");
        void* activations = gpu_malloc(32 * MIB, 0, NULL);
        pop();
        if (!weights || !kept[s] || !activations) {
            printf("step %ld: an allocation failed\n", s);
            return 1;
        }
        gpu_free(activations, 32 * MIB, 0, NULL);
    }
    printf("trained 5 steps\n");
    return 0;
}
