/* The off-CPU workload: threads that wait in known functions for known times.
 *
 *   nap        nap() sleeps 100 x 10 ms                      1.0 s off-CPU in S
 *   waitpipe   wait_pipe() blocks reading a pipe             0.3 s off-CPU in S
 *   writer     write_later() sleeps 300 ms, then writes      0.3 s off-CPU in S
 *   spin       spin() burns 300 ms of CPU                    ~0 off-CPU
 *
 * Each waiting function measures its wait and main prints them at the end on stderr
 * (`offcpu: nap=NS wait_pipe=NS write_later=NS`): on a loaded machine a wait lasts longer than
 * asked (the thread waits for a cpu after its wakeup), and the profile must show what it lasted.
 * The waits are raw system calls issued inside the named functions (inline `syscall` on x86-64),
 * so the frame-pointer callchain's first user frame is the function itself, not a libc wrapper
 * without frame pointers that would hide it. Built with -fno-omit-frame-pointer. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
/* What each waiting function measured of its own wait (CLOCK_MONOTONIC, ns): the time from the
 * call to the thread running again, which is the off-CPU time the profile must show, whatever
 * the machine's load adds to the requested times. Printed at the end on stderr. */
static long long waited[3];

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}
/* wait_pipe and write_later start together, so the reader waits the writer's 300 ms whenever
 * the threads are created. */
static pthread_barrier_t pair;

static inline long raw3(long n, long a, long b, long c)
{
#if defined(__x86_64__)
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return r;
#else
	return syscall(n, a, b, c);
#endif
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	raw3(SYS_nanosleep, (long)&ts, 0, 0);
}

__attribute__((noinline)) void nap(void)
{
	long long t0 = now_ns();
	for (int i = 0; i < 100; i++) {
		struct timespec ts = { 0, 10 * 1000000L };
		raw3(SYS_nanosleep, (long)&ts, 0, 0);
	}
	waited[0] = now_ns() - t0;
}

__attribute__((noinline)) void wait_pipe(void)
{
	char c;
	long long t0 = now_ns();
	raw3(SYS_read, fds[0], (long)&c, 1);
	waited[1] = now_ns() - t0;
}

__attribute__((noinline)) void write_later(void)
{
	struct timespec ts = { 0, 300 * 1000000L };
	long long t0 = now_ns();
	raw3(SYS_nanosleep, (long)&ts, 0, 0);
	waited[2] = now_ns() - t0;
	raw3(SYS_write, fds[1], (long)"x", 1);
}

static volatile uint64_t sink;

__attribute__((noinline)) void spin(void)
{
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 100000; i++)
			sink += i;
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 300000000L);
}

static void *run(void *arg)
{
	const char *name = arg;
	prctl(PR_SET_NAME, name);
	switch (name[0]) {
	case 'n': nap(); break;
	case 'w':
		pthread_barrier_wait(&pair);
		if (name[1] == 'a')
			wait_pipe();
		else
			write_later();
		break;
	case 's': spin(); break;
	}
	return NULL;
}

int main(void)
{
	static const char *names[] = { "nap", "waitpipe", "writer", "spin" };
	pthread_t t[4];
	if (pipe(fds) || pthread_barrier_init(&pair, NULL, 2))
		return 1;
	/* Let the recorder settle before the measured waits start. */
	sleep_ms(50);
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, run, (void *)names[i]);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	fprintf(stderr, "offcpu: nap=%lld wait_pipe=%lld write_later=%lld\n", waited[0], waited[1],
		waited[2]);
	return 0;
}
