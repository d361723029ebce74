/* fsum_dots.c - the dot products of the geometric methods (slerp,
 * nuslerp, multislerp, karcher, model_stock): x.x, y.y and x.y summed in
 * float64 over the fixed blocks of mk_fsum (mk/method.h), so that the
 * result does not depend on how a tensor was cut into chunks; vectorised
 * (AVX2) across eight blocks at once where the CPU has it, and spread over
 * the worker pool for long inputs.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "core/pool.h"
#include "core/simd.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define FSUM_X86 1
#else
#define FSUM_X86 0
#endif

/* One run of the three sums inside a block, in element order, over
 * elements of type T. */
#define FSUM_DOTS_RUN(NAME, T)								\
static uint64_t NAME(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const T *x, const T *y)	\
{											\
	uint64_t run = mk_fsum_run(e0, n);						\
	double a = sum[0].part, b = sum[1].part, c = sum[2].part;			\
											\
	for (uint64_t k = 0; k < run; k++) {						\
		double p = (double)x[k], q = (double)y[k];				\
		double pp = p * p, qq = q * q, pq = p * q;				\
		a += pp;								\
		b += qq;								\
		c += pq;								\
	}										\
	sum[0].part = a;								\
	sum[1].part = b;								\
	sum[2].part = c;								\
	for (unsigned j = 0; j < 3; j++)						\
		mk_fsum_step(&sum[j], e0 + run);					\
	return run;									\
}
FSUM_DOTS_RUN(fsum_dots_run, float)
FSUM_DOTS_RUN(fsum_dots_run_f64, double)

void mk_fsum_dots_f64(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const double *x, const double *y)
{
	for (uint64_t i = 0; i < n;)
		i += fsum_dots_run_f64(sum, e0 + i, n - i, x + i, y + i);
}

#if FSUM_X86
/* Eight rows of eight floats (row j: block j's elements k .. k + 7) into
 * eight columns (column i: element k + i of blocks 0 .. 7). */
__attribute__((target("avx2")))
static inline void transpose8_ps(__m256 r[8])
{
	__m256 t[8], u[8];

	for (unsigned j = 0; j < 8; j += 2) {
		t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
		t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
	}
	for (unsigned j = 0; j < 8; j += 4) {
		u[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
		u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xee);
		u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
		u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xee);
	}
	for (unsigned i = 0; i < 4; i++) {
		r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
		r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
	}
}

/* Eight whole blocks' parts (part[3 * j + s], every part from 0): lane j
 * sums block j element by element in order, the additions fsum_dots_run
 * makes.  Eight chains at once instead of one.  Eight elements of each
 * block are loaded at a time and transposed (as the AVX2 path does):
 * a gather of one element a block (vgatherdps) for each element, as
 * before, took 1.14 ns a pair of elements in cache on an AMD Zen 5, the
 * loads and shuffles 0.23 ns (two sets of eight blocks at once: the
 * same; the shuffles are the limit). */
__attribute__((target("avx2,avx512f")))
static void fsum_dots_blocks8(double *part8, const float *x, const float *y)
{
	__m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd(), c = _mm512_setzero_pd();
	double part[3][8];

	for (unsigned k = 0; k < MK_SUM_BLOCK; k += 8) {
		__m256 xr[8], yr[8];
		for (unsigned j = 0; j < 8; j++) {
			xr[j] = _mm256_loadu_ps(x + j * MK_SUM_BLOCK + k);
			yr[j] = _mm256_loadu_ps(y + j * MK_SUM_BLOCK + k);
		}
		transpose8_ps(xr);
		transpose8_ps(yr);
		for (unsigned i = 0; i < 8; i++) {
			__m512d p = _mm512_cvtps_pd(xr[i]), q = _mm512_cvtps_pd(yr[i]);
			a = _mm512_add_pd(a, _mm512_mul_pd(p, p));
			b = _mm512_add_pd(b, _mm512_mul_pd(q, q));
			c = _mm512_add_pd(c, _mm512_mul_pd(p, q));
		}
	}
	_mm512_storeu_pd(part[0], a);
	_mm512_storeu_pd(part[1], b);
	_mm512_storeu_pd(part[2], c);
	for (unsigned j = 0; j < 8; j++)
		for (unsigned s = 0; s < 3; s++)
			part8[3 * j + s] = part[s][j];
}

/* The same with AVX2: the eight blocks as two sets of four lanes, four
 * elements of each block loaded at a time and transposed (no gathers),
 * then added in element order, lane by lane. */
__attribute__((target("avx2")))
static void fsum_dots_blocks8_avx2(double *part8, const float *x, const float *y)
{
	__m256d a[2], b[2], c[2];
	double part[3][8];

	for (unsigned g = 0; g < 2; g++)
		a[g] = b[g] = c[g] = _mm256_setzero_pd();
	for (unsigned k = 0; k < MK_SUM_BLOCK; k += 4) {
		for (unsigned g = 0; g < 2; g++) {
			const float *xg = x + 4 * g * MK_SUM_BLOCK + k, *yg = y + 4 * g * MK_SUM_BLOCK + k;
			__m128 x0 = _mm_loadu_ps(xg), x1 = _mm_loadu_ps(xg + MK_SUM_BLOCK);
			__m128 x2 = _mm_loadu_ps(xg + 2 * MK_SUM_BLOCK), x3 = _mm_loadu_ps(xg + 3 * MK_SUM_BLOCK);
			__m128 y0 = _mm_loadu_ps(yg), y1 = _mm_loadu_ps(yg + MK_SUM_BLOCK);
			__m128 y2 = _mm_loadu_ps(yg + 2 * MK_SUM_BLOCK), y3 = _mm_loadu_ps(yg + 3 * MK_SUM_BLOCK);
			_MM_TRANSPOSE4_PS(x0, x1, x2, x3);   /* xi: element k + i of the four blocks */
			_MM_TRANSPOSE4_PS(y0, y1, y2, y3);
			const __m128 xs[4] = { x0, x1, x2, x3 }, ys[4] = { y0, y1, y2, y3 };
			for (unsigned i = 0; i < 4; i++) {
				__m256d p = _mm256_cvtps_pd(xs[i]), q = _mm256_cvtps_pd(ys[i]);
				a[g] = _mm256_add_pd(a[g], _mm256_mul_pd(p, p));
				b[g] = _mm256_add_pd(b[g], _mm256_mul_pd(q, q));
				c[g] = _mm256_add_pd(c[g], _mm256_mul_pd(p, q));
			}
		}
	}
	for (unsigned g = 0; g < 2; g++) {
		_mm256_storeu_pd(part[0] + 4 * g, a[g]);
		_mm256_storeu_pd(part[1] + 4 * g, b[g]);
		_mm256_storeu_pd(part[2] + 4 * g, c[g]);
	}
	for (unsigned j = 0; j < 8; j++)
		for (unsigned s = 0; s < 3; s++)
			part8[3 * j + s] = part[s][j];
}
#endif

/* Which eight-block path this CPU runs: 2 AVX-512, 1 AVX2, 0 none. */
static int fsum_wide(void)
{
#if FSUM_X86
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2"))
		return 2;
	return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
	return 0;
#endif
}

/* The three sums' parts of nb whole blocks (x and y at a block boundary)
 * into part[3 * j + s] (block j, s as sum[s]); fsum_close3 then closes
 * them in block order at a block boundary (every sum[s].part 0): the bits
 * of mk_fsum_dots, with the blocks summed wherever (on threads). */
static void fsum_dots_parts(double *part, uint64_t nb, const float *x, const float *y)
{
	int wide = fsum_wide();
	uint64_t j = 0;

#if FSUM_X86
	for (; wide && j + 8 <= nb; j += 8) {
		if (wide == 2)
			fsum_dots_blocks8(part + 3 * j, x + j * MK_SUM_BLOCK, y + j * MK_SUM_BLOCK);
		else
			fsum_dots_blocks8_avx2(part + 3 * j, x + j * MK_SUM_BLOCK, y + j * MK_SUM_BLOCK);
	}
#else
	(void)wide;
#endif
	for (; j < nb; j++) {
		struct mk_fsum one[3] = { { 0 } };
		fsum_dots_run(one, 0, MK_SUM_BLOCK, x + j * MK_SUM_BLOCK, y + j * MK_SUM_BLOCK);
		for (unsigned s = 0; s < 3; s++)
			part[3 * j + s] = one[s].total;
	}
}

static void fsum_close3(struct mk_fsum sum[3], const double *part, uint64_t nb)
{
	for (uint64_t j = 0; j < nb; j++)
		for (unsigned s = 0; s < 3; s++)
			sum[s].total += part[3 * j + s];
}

void mk_fsum_dots(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const float *x, const float *y)
{
	bool wide = fsum_wide() > 0;
	uint64_t i = 0;

	while (i < n) {
		if (wide && (e0 + i) % MK_SUM_BLOCK == 0 && n - i >= 8 * MK_SUM_BLOCK) {
			double part[3 * 8];
			fsum_dots_parts(part, 8, x + i, y + i);
			fsum_close3(sum, part, 8);
			i += 8 * MK_SUM_BLOCK;
			continue;
		}
		i += fsum_dots_run(sum, e0 + i, n - i, x + i, y + i);
	}
}

/* BF16 elements widened a tile of 8 blocks at a time (in the core's
 * cache) for fsum_dots_parts. */
#define FSUM_TILE (8 * MK_SUM_BLOCK)

/* Whole blocks per task of mk_fsum_dots_bf16 (a multiple of 8). */
#define FSUM_TASK_BLOCKS 32u

struct fsum_arg {
	const uint16_t *x, *y;     /* from a block boundary */
	uint64_t nb;               /* whole blocks */
	double *part;              /* their parts [3 * nb] */
	float *t;                  /* per slot [2 * FSUM_TILE] */
};

MK_HOT_CLONES
static void fsum_widen(float *restrict f, const uint16_t *restrict v, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++)
		f[k] = mk__bf16_widen(v[k]);
}

/* Task k: blocks [k * FSUM_TASK_BLOCKS, ...) into their parts. */
static void fsum_blocks_bf16(void *p, unsigned k, unsigned slot)
{
	struct fsum_arg *a = p;
	float *t = a->t + (size_t)slot * 2 * FSUM_TILE;
	uint64_t j0 = (uint64_t)k * FSUM_TASK_BLOCKS, j1 = a->nb - j0 < FSUM_TASK_BLOCKS ? a->nb : j0 + FSUM_TASK_BLOCKS;

	for (uint64_t j = j0; j < j1; j += 8) {
		uint64_t m = j1 - j < 8 ? j1 - j : 8;
		fsum_widen(t, a->x + j * MK_SUM_BLOCK, m * MK_SUM_BLOCK);
		fsum_widen(t + FSUM_TILE, a->y + j * MK_SUM_BLOCK, m * MK_SUM_BLOCK);
		fsum_dots_parts(a->part + 3 * j, m, t, t + FSUM_TILE);
	}
}

/* A partial block's run, widened into t. */
static void fsum_run_bf16(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const uint16_t *x, const uint16_t *y,
			  float *t)
{
	fsum_widen(t, x, n);
	fsum_widen(t + FSUM_TILE, y, n);
	mk_fsum_dots(sum, e0, n, t, t + FSUM_TILE);
}

int mk_fsum_dots_bf16(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const uint16_t *x, const uint16_t *y,
		      unsigned threads, struct mk_err *err)
{
	uint64_t h = (MK_SUM_BLOCK - e0 % MK_SUM_BLOCK) % MK_SUM_BLOCK, nb, ntasks;
	unsigned nt = threads > 16 ? 16 : threads ? threads : 1;
	float *tile;
	double *part;

	h = h < n ? h : n;
	nb = (n - h) / MK_SUM_BLOCK;
	nt = nb / 16 < nt ? (unsigned)(nb / 16) : nt;   /* 16 blocks a thread at the least */
	nt = nt ? nt : 1;
	ntasks = (nb + FSUM_TASK_BLOCKS - 1) / FSUM_TASK_BLOCKS;
	if (ntasks > UINT_MAX)
		return mk_err_set(err, MK_EINVAL, "%llu elements are too many to sum at once", (unsigned long long)n);
	tile = malloc((size_t)nt * 2 * FSUM_TILE * sizeof(float));
	part = malloc((nb ? (size_t)nb : 1) * 3 * sizeof(double));
	if (!tile || !part) {
		free(tile);
		free(part);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (h)
		fsum_run_bf16(sum, e0, h, x, y, tile);
	struct fsum_arg a = { .x = x + h, .y = y + h, .nb = nb, .part = part, .t = tile };
	mk__pool_run(nt, (unsigned)ntasks, fsum_blocks_bf16, &a);
	fsum_close3(sum, part, nb);
	if (n - h - nb * MK_SUM_BLOCK) {
		uint64_t o = h + nb * MK_SUM_BLOCK;
		fsum_run_bf16(sum, e0 + o, n - o, x + o, y + o, tile);
	}
	free(tile);
	free(part);
	return 0;
}
