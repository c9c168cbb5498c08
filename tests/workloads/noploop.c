/* The workload of perf's own pipe_test.sh (`perf test -w noploop`): spins in `noploop` for the
 * given number of seconds (default 1; fractions too, as `perf test -w noploop 0.1`), then exits. */
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t done;

static void sighandler(int sig) {
    (void)sig;
    done = 1;
}

__attribute__((noinline)) int noploop(double sec) {
    struct itimerval t = {0};
    signal(SIGINT, sighandler);
    signal(SIGALRM, sighandler);
    t.it_value.tv_sec = (time_t)sec;
    t.it_value.tv_usec = (suseconds_t)((sec - (double)t.it_value.tv_sec) * 1e6);
    if (t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0)
        t.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &t, NULL);
    while (!done)
        continue;
    return 0;
}

int main(int argc, char **argv) {
    return noploop(argc > 1 ? strtod(argv[1], NULL) : 1.0);
}
