/*
 * clockskew: an LD_PRELOAD shim that shifts the wall clock of one process.
 *
 * Why not libfaketime: Debian's redis-server and valkey-server link jemalloc, and
 * libfaketime deadlocks at start-up under jemalloc (its initialisation calls dlsym,
 * which allocates, which makes jemalloc call clock_gettime again inside
 * libfaketime's pthread_once; upstream wolfcw/libfaketime#130, unfixed). This shim
 * needs no dlsym and no allocation: it reads the real clocks with raw system calls
 * and adds COORDTORTURE_CLOCK_OFFSET_MS (signed milliseconds) to the wall clock
 * (CLOCK_REALTIME, CLOCK_REALTIME_COARSE, gettimeofday, time). Monotonic clocks are
 * left alone, as they are on a real host whose NTP-disciplined wall clock is off.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
	static int done;
	static long long off;
	if (!done) {
		const char *s = getenv("COORDTORTURE_CLOCK_OFFSET_MS");
		off = s ? strtoll(s, NULL, 10) * 1000000LL : 0;
		done = 1;
	}
	return off;
}

static void shift(struct timespec *ts) {
	long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
	ts->tv_sec = ns / 1000000000LL;
	ts->tv_nsec = ns % 1000000000LL;
	if (ts->tv_nsec < 0) {
		ts->tv_nsec += 1000000000LL;
		ts->tv_sec--;
	}
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
		shift(ts);
	return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	if (tv == NULL)
		return 0;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return -1;
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *out) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	if (out)
		*out = ts.tv_sec;
	return ts.tv_sec;
}
