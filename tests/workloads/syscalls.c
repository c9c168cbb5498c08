/* Kernel-heavy workload: system calls in a loop (read, write, open/close, getppid, stat), so most
 * samples have kernel frames above a short user stack. Built with -O1 -g -fno-omit-frame-pointer. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char buf[65536];

__attribute__((noinline)) void sys_copy(int in, int out) {
    ssize_t n = read(in, buf, sizeof buf);
    if (n > 0 && write(out, buf, (size_t)n) != n) abort();
}

__attribute__((noinline)) void sys_open_close(void) {
    struct stat st;
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) abort();
    close(fd);
}

__attribute__((noinline)) long sys_cheap(void) {
    return syscall(SYS_getppid) + syscall(SYS_getpid);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 20000;
    int in = open("/dev/zero", O_RDONLY), out = open("/dev/null", O_WRONLY);
    if (in < 0 || out < 0) return 1;
    long s = 0;
    for (int i = 0; i < rounds; i++) {
        sys_copy(in, out);
        sys_open_close();
        s += sys_cheap();
    }
    return s == 42;
}
