/* Lazy binding made hot: the main program loads liblazy.so with dlopen, calls its `lazy_run`,
 * which calls each of the 512 functions of liblazydeps.so once through its PLT, and unloads it
 * again (`dlclose`), ROUNDS times; every load starts with a fresh GOT, so every one of those
 * calls goes through ld.so's lazy-binding trampoline (`_dl_runtime_resolve_xsavec` and
 * `_dl_fixup`, which looks the symbol up). One source, three builds:
 *   cc -shared -fPIC -DLAZY_DEPS -o liblazydeps.so lazy.c
 *   cc -shared -fPIC -DLAZY_LIB -Wl,-z,lazy -o liblazy.so lazy.c -L. -llazydeps -Wl,-rpath,'$ORIGIN'
 *   cc -O2 -fomit-frame-pointer -Wl,-z,lazy -o lazy lazy.c -ldl
 * and `./lazy ROUNDS` run from the directory of the two libraries. */
#define D8(m, p) m(p##0) m(p##1) m(p##2) m(p##3) m(p##4) m(p##5) m(p##6) m(p##7)
#define D64(m, p) D8(m, p##0) D8(m, p##1) D8(m, p##2) D8(m, p##3) \
    D8(m, p##4) D8(m, p##5) D8(m, p##6) D8(m, p##7)
#define D512(m) D64(m, 0) D64(m, 1) D64(m, 2) D64(m, 3) D64(m, 4) D64(m, 5) D64(m, 6) D64(m, 7)

#if defined(LAZY_DEPS)
#define DEF(n) long lazy_dep_##n(long x) { return x * 3 + 0x##n; }
D512(DEF)
#elif defined(LAZY_LIB)
#define DECL(n) long lazy_dep_##n(long x);
D512(DECL)
#define CALL(n) s = lazy_dep_##n(s);
long lazy_run(long s) {
    D512(CALL)
    return s;
}
#else
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static volatile long sink;

__attribute__((noinline)) void lazy_round(const char *lib) {
    void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
    long (*run)(long) = (long (*)(long))dlsym(h, "lazy_run");
    if (!run) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        exit(1);
    }
    sink += run(sink);
    dlclose(h);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    const char *lib = argc > 2 ? argv[2] : "./liblazy.so";
    for (int r = 0; r < rounds; r++) lazy_round(lib);
    return 0;
}
#endif
