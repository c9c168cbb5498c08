/* Fork churn (issue 32): two workers, each forking N short children one after another; a child
 * spins about a millisecond in its own call chain and exits (with `exec` as a second argument, it
 * execs this binary again first), while its parent spins a little between the fork and the wait.
 * So processes fork and exit within a round, on both cpus. perf 6.1 does not unwind the samples of
 * exec'd children (its libunwind reads their stacks as garbage), so the unwind test forks only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) unsigned long churn_leaf_add(unsigned long n) {
    unsigned long s = 0;
    for (unsigned long i = 0; i < n; i++) s += i ^ (s >> 3);
    return s;
}

__attribute__((noinline)) unsigned long churn_leaf_mul(unsigned long n) {
    unsigned long s = 1;
    for (unsigned long i = 1; i < n; i++) s = s * 2654435761u + i;
    return s;
}

__attribute__((noinline)) unsigned long churn_middle(int which, unsigned long n) {
    return which == 0 ? churn_leaf_add(n) : churn_leaf_mul(n);
}

__attribute__((noinline)) void churn_worker(const char *self, int children, int exec) {
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            char which[16];
            snprintf(which, sizeof which, "%d", i % 2);
            if (exec) {
                execl(self, self, "child", which, (char *)NULL);
                _exit(127);
            }
            sink += churn_middle(i % 2, 1000000);
            _exit(0);
        }
        sink += churn_middle(1, 100000);
        waitpid(pid, NULL, 0);
    }
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "child") == 0) {
        sink += churn_middle(atoi(argv[2]), 1000000);
        return 0;
    }
    int children = argc > 1 ? atoi(argv[1]) : 200;
    int exec = argc > 2 && strcmp(argv[2], "exec") == 0;
    for (int w = 0; w < 2; w++) {
        if (fork() == 0) {
            churn_worker(argv[0], children, exec);
            _exit(0);
        }
    }
    while (wait(NULL) > 0) {}
    return 0;
}
