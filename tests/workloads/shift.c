/* Diff workload: `shift A B` spends A rounds in shift_a and B rounds in shift_b (both called
   from shift_work), then a fixed 150 rounds in shift_same: two runs with A and B swapped have
   the same work in all, moved from one hot function to the other. */
#include <stdlib.h>

static volatile unsigned long sink;

/* Called by each hot function once, after its loop: a hot function that calls nothing is a leaf,
   and gcc 12 gives a leaf no frame pointer (even with -fno-omit-frame-pointer), so perf's
   frame-pointer callchains would skip its caller. */
__attribute__((noinline)) unsigned long shift_mix(unsigned long s) {
    return s * 31 + 7;
}

__attribute__((noinline)) unsigned long shift_a(unsigned long n) {
    unsigned long s = 0;
    for (unsigned long i = 0; i < n; i++) s += i ^ (s >> 3);
    return shift_mix(s) + 1;
}

__attribute__((noinline)) unsigned long shift_b(unsigned long n) {
    unsigned long s = 1;
    for (unsigned long i = 1; i < n; i++) s = s * 2654435761u + i;
    return shift_mix(s) + 2;
}

__attribute__((noinline)) unsigned long shift_same(unsigned long n) {
    unsigned long s = 7;
    for (unsigned long i = 0; i < n; i++) s = (s << 1) ^ (s >> 5) ^ i;
    return shift_mix(s) + 3;
}

__attribute__((noinline)) void shift_work(int a, int b) {
    for (int r = 0; r < a; r++) sink += shift_a(1000000 + r);
    for (int r = 0; r < b; r++) sink += shift_b(1000000 + r);
}

int main(int argc, char **argv) {
    int a = argc > 1 ? atoi(argv[1]) : 300;
    int b = argc > 2 ? atoi(argv[2]) : 100;
    shift_work(a, b);
    for (int r = 0; r < 150; r++) sink += shift_same(1000000 + r);
    return 0;
}
