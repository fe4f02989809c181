/* The C ABI called from a pthread key's destructor, which runs after the thread's Rust
 * thread-locals are gone: every entry point must work or return an error value; the
 * process must not abort. Prints what each call returned. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

typedef void* (*malloc_fn)(ssize_t, int, void*);
typedef void (*free_fn)(void*, ssize_t, int, void*);
typedef void (*push_fn)(const char*);
typedef void (*void_fn)(void);
typedef void (*step_fn)(long);
typedef int (*dump_fn)(const char*);
typedef size_t (*error_fn)(char*, size_t);

static void* lib;
static pthread_key_t key;
static int calls;

#define SYM(type, name) ((type)dlsym(lib, name))

static void at_thread_exit(void* value) {
    (void)value;
    char err[256] = "";
    SYM(push_fn, "oomscope_scope_push")("exiting");
    void* p = SYM(malloc_fn, "oomscope_malloc")(1 << 20, 0, NULL);
    printf("malloc in destructor: %s\n", p ? "ok" : "null");
    SYM(free_fn, "oomscope_free")(p, 1 << 20, 0, NULL);
    void* huge = SYM(malloc_fn, "oomscope_malloc")((ssize_t)1 << 40, 0, NULL);
    printf("huge malloc in destructor: %s\n", huge ? "ok" : "null");
    size_t n = SYM(error_fn, "oomscope_last_error")(err, sizeof err);
    printf("last error length %zu\n", n);
    SYM(void_fn, "oomscope_scope_pop")();
    SYM(void_fn, "oomscope_scope_clear")();
    SYM(step_fn, "oomscope_step")(7);
    calls++;
}

static void* worker(void* arg) {
    (void)arg;
    /* Touch the thread-locals first so that they are destroyed at exit. */
    SYM(push_fn, "oomscope_scope_push")("worker");
    void* p = SYM(malloc_fn, "oomscope_malloc")(4096, 0, NULL);
    SYM(free_fn, "oomscope_free")(p, 4096, 0, NULL);
    SYM(void_fn, "oomscope_scope_pop")();
    char err[8];
    SYM(error_fn, "oomscope_last_error")(err, sizeof err);
    pthread_setspecific(key, (void*)1);
    return NULL;
}

int main(int argc, char** argv) {
    if (argc < 2) return 2;
    lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { printf("dlopen: %s\n", dlerror()); return 2; }
    pthread_key_create(&key, at_thread_exit);
    for (int i = 0; i < 4; i++) {
        pthread_t t;
        pthread_create(&t, NULL, worker, NULL);
        pthread_join(t, NULL);
    }
    printf("destructor calls: %d\n", calls);
    return calls == 4 ? 0 : 1;
}
