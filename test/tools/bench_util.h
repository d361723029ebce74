/* bench_util.h - what the micro-benchmarks in test/tools share: a clock,
 * a comparison for qsort of timings, and a xorshift generator for their
 * inputs (fixed seed: the same input whatever runs). */
#ifndef MK_BENCH_UTIL_H
#define MK_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC (wall) unless a tool sets another (thread CPU time) */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(bench_clock, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static uint64_t rng = 0x9E3779B97F4A7C15u;

static inline uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

#endif
