/* Frame-pointer workload: forks 3 children, each spinning in its own call chain. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long fp_leaf_add(unsigned long n) {
    unsigned long s = 0;
    for (unsigned long i = 0; i < n; i++) s += i ^ (s >> 3);
    return s;
}

__attribute__((noinline)) unsigned long fp_leaf_mul(unsigned long n) {
    unsigned long s = 1;
    for (unsigned long i = 1; i < n; i++) s = s * 2654435761u + i;
    return s;
}

__attribute__((noinline)) unsigned long fp_recurse(int depth, unsigned long n) {
    if (depth == 0) return fp_leaf_add(n) + fp_leaf_mul(n);
    return fp_recurse(depth - 1, n) + (unsigned long)depth;
}

__attribute__((noinline)) unsigned long fp_middle(int which, unsigned long n) {
    switch (which) {
    case 0: return fp_leaf_add(n);
    case 1: return fp_leaf_mul(n);
    default: return fp_recurse(6, n / 2);
    }
}

__attribute__((noinline)) void fp_child(int which, int rounds) {
    for (int r = 0; r < rounds; r++) sink += fp_middle(which, 1000000);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    for (int c = 0; c < 3; c++) {
        if (fork() == 0) {
            fp_child(c, rounds);
            _exit(0);
        }
    }
    while (wait(NULL) > 0) {}
    return 0;
}
