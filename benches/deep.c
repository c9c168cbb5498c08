/* Deep-stack workload for DWARF-unwinding benchmarks.
 * Recursion 60..150 frames deep through three mutually recursive functions
 * (not tail calls: work after each call), leaf does qsort (libc, with a
 * callback) and memcpy. Build: gcc -O2 -fomit-frame-pointer -g -o deep deep.c
 * Usage: ./deep [seconds]   (default 4 s of CPU). Recorded by benches/unwind.sh with
 * BENCH_WORKLOAD=deep: perf record -e cpu-clock -F 4000 -m 1024 --call-graph dwarf[,65528] -- ./deep 5
 * Long frame-pointer stacks (benches/flamegraph.sh's long-stack recording):
 *   gcc -O2 -fno-omit-frame-pointer -DOWN_LEAF -o deep-fp deep.c
 *   perf record -e cpu-clock -c 20000 -g -o - -- ./deep-fp 30 > deep.pipe
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static unsigned long long sink;
static unsigned int rng = 12345;

static unsigned int next_rand(void) { rng = rng * 1103515245u + 12345u; return rng >> 8; }

__attribute__((unused)) static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

#ifdef OWN_LEAF
/* -DOWN_LEAF: the leaf's work stays in this file (no libc call), so a frame-pointer build
 * (-fno-omit-frame-pointer, perf record -g) gives whole 60..150-frame chains: the long-stack
 * recording of benches/flamegraph.sh. */
__attribute__((noinline)) static unsigned long long leaf(int depth) {
    unsigned long long h = (unsigned long long)depth;
    for (int i = 0; i < 4096; i++) h = h * 6364136223846793005ull + next_rand();
    return h;
}
#else
__attribute__((noinline)) static unsigned long long leaf(int depth) {
    int arr[256];
    char src[2048], dst[2048];
    for (int i = 0; i < 256; i++) arr[i] = (int)next_rand();
    qsort(arr, 256, sizeof arr[0], cmp_int);
    memset(src, depth, sizeof src);
    for (int k = 0; k < 8; k++) {
        memcpy(dst, src, sizeof dst);
        src[k] ^= dst[2047 - k];
    }
    return (unsigned long long)arr[depth & 255] + (unsigned char)dst[depth & 2047];
}
#endif

__attribute__((noinline)) static unsigned long long fa(int n, int depth);
__attribute__((noinline)) static unsigned long long fb(int n, int depth);
__attribute__((noinline)) static unsigned long long fc(int n, int depth);

__attribute__((noinline)) static unsigned long long fa(int n, int depth) {
    volatile int pad[4] = {n, depth, n ^ depth, 1};
    unsigned long long r;
    if (n <= 0) r = leaf(depth);
    else if (n % 3 == 0) r = fb(n - 1, depth + 1);
    else r = fc(n - 1, depth + 1);
    return r + pad[2];
}

__attribute__((noinline)) static unsigned long long fb(int n, int depth) {
    volatile long pad[3] = {n, depth, 7};
    unsigned long long r;
    if (n <= 0) r = leaf(depth);
    else if (n & 1) r = fc(n - 1, depth + 1);
    else r = fa(n - 1, depth + 1);
    return r * 3 + pad[0];
}

__attribute__((noinline)) static unsigned long long fc(int n, int depth) {
    volatile char pad[24];
    pad[n % 24] = (char)depth;
    unsigned long long r;
    if (n <= 0) r = leaf(depth);
    else r = fa(n - 1, depth + 1);
    return (r ^ 0x5a5a) + pad[n % 24];
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 4.0;
    struct timespec t0, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    long iters = 0;
    for (;;) {
        for (int i = 0; i < 64; i++) {
            int n = 60 + (int)(next_rand() % 91); /* 60..150 */
            sink += fa(n, 0);
            iters++;
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= secs) break;
    }
    printf("iters %ld sink %llu\n", iters, sink);
    return 0;
}
