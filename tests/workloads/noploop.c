/* The workload of perf's own pipe_test.sh (`perf test -w noploop`): spins in `noploop` for the
 * given number of seconds (default 1), then exits. */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t done;

static void sighandler(int sig) {
    (void)sig;
    done = 1;
}

__attribute__((noinline)) int noploop(int sec) {
    signal(SIGINT, sighandler);
    signal(SIGALRM, sighandler);
    alarm(sec);
    while (!done)
        continue;
    return 0;
}

int main(int argc, char **argv) {
    return noploop(argc > 1 ? atoi(argv[1]) : 1);
}
