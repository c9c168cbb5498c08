/* Container workload (issue 38): spins in frames of its own and calls into libc (getppid,
 * access) until the file argv[1] exists or argv[2] rounds are done, so its stacks pass through
 * the C library of whichever root it runs in. */
#include <stdlib.h>
#include <unistd.h>

static volatile unsigned long sink;

/* Reads `sink` so that it is not a `const` function: GCC's -O1 hoists a const call with a
 * constant argument out of the loop, and the leaf would run once, not once a round. */
__attribute__((noinline)) unsigned long until_leaf(unsigned long n) {
    unsigned long s = sink;
    for (unsigned long i = 0; i < n; i++) s += i ^ (s >> 3);
    return s;
}

__attribute__((noinline)) void until_syscalls(int n) {
    for (int i = 0; i < n; i++) sink += (unsigned long)getppid();
}

__attribute__((noinline)) int until_stopped(const char *stop) {
    return access(stop, F_OK) == 0;
}

__attribute__((noinline)) void until_loop(const char *stop, long rounds) {
    for (long i = 0; rounds < 0 || i < rounds; i++) {
        sink += until_leaf(20000);
        until_syscalls(100);
        if (until_stopped(stop)) return;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    until_loop(argv[1], argc > 2 ? atol(argv[2]) : -1);
    return 0;
}
