/* method.c - the merge-method registry, parameter checks, planning and
 * the job wrappers every caller goes through. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "core/pool.h"
#include "core/simd.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "core/bug.h"
#include "methods/builtin.h"
#define FSUM_X86 1
#else
#define FSUM_X86 0
#endif

/* ------------------------------------------------------------- registry */

static const struct mk_method **reg;
static size_t nreg, capreg;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

/* In mergekit's registration order (its static registry first, then the
 * methods defined with its merge_method decorator). */
static const struct mk_method *const builtins[] = {
	&mk_method_linear,
	&mk_method_slerp,
	&mk_method_nuslerp,
	&mk_method_passthrough,
	&mk_method_model_stock,
	&mk_method_arcee_fusion,
	&mk_method_karcher,
	&mk_method_task_arithmetic,
	&mk_method_ties,
	&mk_method_dare_ties,
	&mk_method_dare_linear,
	&mk_method_breadcrumbs,
	&mk_method_breadcrumbs_ties,
	&mk_method_della,
	&mk_method_della_linear,
	&mk_method_multislerp,
	&mk_method_nearswap,
	&mk_method_ram,
	&mk_method_ramplus_tl,
	&mk_method_sce,
};

static int do_register(const struct mk_method *m, struct mk_err *err);

static bool builtins_short;   /* out of memory while registering them */

static void register_builtins(void)
{
	struct mk_err e;

	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
		if (do_register(builtins[i], &e)) {
			if (e.code != MK_ENOMEM)
				MK_BUG("built-in method '%s' does not register: %s", builtins[i]->name, e.msg);
			builtins_short = true;
			return;
		}
}

static void ensure_builtins(void)
{
	pthread_once(&builtins_once, register_builtins);
}

static bool valid_name(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
			return false;
	return true;
}

static bool pval_in_bounds(const struct mk_param_spec *ps, double v)
{
	if (ps->flags & MK_PF_MIN) {
		if (ps->flags & MK_PF_MIN_EXCL ? !(v > ps->min) : !(v >= ps->min))
			return false;
	}
	if (ps->flags & MK_PF_MAX) {
		if (ps->flags & MK_PF_MAX_EXCL ? !(v < ps->max) : !(v <= ps->max))
			return false;
	}
	return true;
}

static int check_spec(const struct mk_method *m, struct mk_err *err)
{
	const struct mk_contract *c = &m->contract;

	if (c->min_inputs > c->max_inputs || c->min_non_base > c->max_non_base)
		return mk_err_set(err, MK_EINVAL, "method '%s': arity bounds are inverted", m->name);
	if (m->nparams && !m->params)
		return mk_err_set(err, MK_EINVAL, "method '%s': %zu parameters but no table",
				  m->name, m->nparams);
	for (size_t p = 0; p < m->nparams; p++) {
		const struct mk_param_spec *ps = &m->params[p];
		if (!valid_name(ps->name))
			return mk_err_set(err, MK_EINVAL, "method '%s': parameter %zu: bad name",
					  m->name, p);
		for (size_t q = 0; q < p; q++)
			if (!strcmp(m->params[q].name, ps->name))
				return mk_err_set(err, MK_EINVAL,
						  "method '%s': parameter '%s' declared twice",
						  m->name, ps->name);
		if (ps->scope > MK_SCOPE_PER_NON_BASE || ps->type > MK_PT_BOOL)
			return mk_err_set(err, MK_EINVAL, "method '%s': parameter '%s': bad scope or type",
					  m->name, ps->name);
		if ((ps->flags & MK_PF_REQUIRED) && ps->def.set)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s': parameter '%s' is required and has a default",
					  m->name, ps->name);
		if (ps->def.set) {
			if (ps->def.type != ps->type)
				return mk_err_set(err, MK_EINVAL,
						  "method '%s': parameter '%s': default of the wrong type",
						  m->name, ps->name);
			if (ps->type != MK_PT_BOOL &&
			    !pval_in_bounds(ps, ps->type == MK_PT_FLOAT ? ps->def.f : (double)ps->def.i))
				return mk_err_set(err, MK_EINVAL,
						  "method '%s': parameter '%s': default out of bounds",
						  m->name, ps->name);
		}
	}
	return 0;
}

static int do_register(const struct mk_method *m, struct mk_err *err)
{
	int rc;

	if (!m)
		return mk_err_set(err, MK_EINVAL, "no method given");
	if (m->abi != MK_METHOD_ABI)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s': built for method ABI %u, this libmk has ABI %u",
				  m->name ? m->name : "?", (unsigned)m->abi, (unsigned)MK_METHOD_ABI);
	if (!valid_name(m->name))
		return mk_err_set(err, MK_EINVAL, "method name '%s' is not [a-z0-9_]+",
				  m->name ? m->name : "");
	if (!m->apply || !m->output)
		return mk_err_set(err, MK_EINVAL, "method '%s': no apply kernel or output rule", m->name);
	rc = check_spec(m, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < nreg; i++)
		if (!strcmp(reg[i]->name, m->name))
			return mk_err_set(err, MK_EEXIST, "merge method '%s' is already registered",
					  m->name);
	if (nreg == capreg) {
		size_t cap = capreg ? capreg * 2 : 16;
		const struct mk_method **p = realloc(reg, cap * sizeof(*reg));
		if (!p)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		reg = p;
		capreg = cap;
	}
	reg[nreg++] = m;
	return 0;
}

int mk_method_register(const struct mk_method *m, struct mk_err *err)
{
	ensure_builtins();
	return do_register(m, err);
}

const struct mk_method *mk_method_find(const char *name)
{
	ensure_builtins();
	if (!name)
		return NULL;
	for (size_t i = 0; i < nreg; i++)
		if (!strcmp(reg[i]->name, name))
			return reg[i];
	return NULL;
}

size_t mk_method_count(void)
{
	ensure_builtins();
	return nreg;
}

const struct mk_method *mk_method_at(size_t i)
{
	ensure_builtins();
	return i < nreg ? reg[i] : NULL;
}

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

size_t mk_edit_distance(const char *a, const char *b)
{
	/* Optimal string alignment: insert, delete, substitute, swap two
	 * neighbours; three rows of the dynamic programme. */
	size_t la = strlen(a), lb = strlen(b), d = SIZE_MAX;
	size_t *buf = malloc(3 * (lb + 1) * sizeof(*buf));
	size_t *pp, *prev, *cur;

	if (!buf)
		goto out;
	pp = buf;
	prev = buf + lb + 1;
	cur = buf + 2 * (lb + 1);
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		int ca = tolower((unsigned char)a[i - 1]);
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			int cb = tolower((unsigned char)b[j - 1]);
			size_t v = prev[j - 1] + (ca != cb);
			if (prev[j] + 1 < v)
				v = prev[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb && pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			cur[j] = v;
		}
		size_t *t = pp;
		pp = prev;
		prev = cur;
		cur = t;
	}
	d = prev[lb];
out:
	free(buf);
	return d;
}

const char *mk_method_closest(const char *name)
{
	const char *best = NULL;
	size_t bestd = SIZE_MAX, limit;

	ensure_builtins();
	if (!name)
		return NULL;
	limit = strlen(name) / 3;
	if (limit < 1)
		limit = 1;
	for (size_t i = 0; i < nreg; i++) {
		size_t d = mk_edit_distance(name, reg[i]->name);
		if (d < bestd) {
			bestd = d;
			best = reg[i]->name;
		}
	}
	return bestd <= limit ? best : NULL;
}

int mk_method_lookup(const char *name, const struct mk_method **out, struct mk_err *err)
{
	const struct mk_method *m = mk_method_find(name);
	const char *near;

	*out = m;
	if (m)
		return 0;
	if (builtins_short)
		return mk_err_set(err, MK_ENOMEM, "out of memory registering the built-in merge methods");
	near = mk_method_closest(name);
	if (near)
		return mk_err_set(err, MK_ENOENT, "unknown merge method '%s' (did you mean '%s'?)",
				  name ? name : "", near);
	return mk_err_set(err, MK_ENOENT,
			  "unknown merge method '%s' (mk-merge --list-methods lists them)",
			  name ? name : "");
}

int mk_method_param_index(const struct mk_method *m, const char *name)
{
	for (size_t p = 0; p < m->nparams; p++)
		if (!strcmp(m->params[p].name, name))
			return (int)p;
	return -1;
}

/* --------------------------------------------------------- parameters */

static const char *type_name(enum mk_param_type t)
{
	switch (t) {
	case MK_PT_FLOAT: return "a number";
	case MK_PT_INT: return "an integer";
	case MK_PT_BOOL: return "true or false";
	}
	return "?";
}

/* "input 2 ('model-b')" into buf. */
static const char *input_label(const struct mk_job_desc *d, size_t i, char *buf, size_t len)
{
	if (d->labels && d->labels[i])
		snprintf(buf, len, " for input %zu ('%s')", i, d->labels[i]);
	else
		snprintf(buf, len, " for input %zu", i);
	return buf;
}

/* Check and normalise one value; `where` names the input ("" for global). */
static int resolve_one(const struct mk_method *m, const struct mk_job_desc *d,
		       const struct mk_param_spec *ps, const struct mk_pval *in,
		       struct mk_pval *outv, const char *where, struct mk_err *err)
{
	struct mk_pval v = in ? *in : (struct mk_pval){ .set = false };
	const char *tn = d->tensor ? d->tensor : "?";

	if (!v.set) {
		if (ps->flags & MK_PF_REQUIRED)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter '%s' is required%s",
					  m->name, tn, ps->name, where);
		v = ps->def;
		goto out;
	}
	switch (ps->type) {
	case MK_PT_FLOAT:
		if (v.type == MK_PT_INT) {
			v.f = (double)v.i;
			v.type = MK_PT_FLOAT;
		}
		if (v.type != MK_PT_FLOAT)
			goto bad_type;
		if (!isfinite(v.f))
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter '%s'%s must be a finite number",
					  m->name, tn, ps->name, where);
		break;
	case MK_PT_INT:
		if (v.type == MK_PT_FLOAT) {
			if (!isfinite(v.f) || v.f != floor(v.f) || v.f < -0x1p63 || v.f >= 0x1p63)
				return mk_err_set(err, MK_EINVAL,
						  "method '%s', tensor '%s': parameter '%s'%s must be an integer (got %g)",
						  m->name, tn, ps->name, where, v.f);
			v.i = (int64_t)v.f;
			v.type = MK_PT_INT;
		}
		if (v.type != MK_PT_INT)
			goto bad_type;
		break;
	case MK_PT_BOOL:
		if (v.type != MK_PT_BOOL)
			goto bad_type;
		break;
	}
	if (ps->type != MK_PT_BOOL) {
		double x = ps->type == MK_PT_FLOAT ? v.f : (double)v.i;
		if (!pval_in_bounds(ps, x)) {
			char lo[64] = "", hi[64] = "";
			if (ps->flags & MK_PF_MIN)
				snprintf(lo, sizeof(lo), " %s %g", ps->flags & MK_PF_MIN_EXCL ? ">" : ">=",
					 ps->min);
			if (ps->flags & MK_PF_MAX)
				snprintf(hi, sizeof(hi), "%s %s %g", *lo ? " and" : "",
					 ps->flags & MK_PF_MAX_EXCL ? "<" : "<=", ps->max);
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter '%s'%s is %g; it must be%s%s",
					  m->name, tn, ps->name, where, x, lo, hi);
		}
	}
	goto out;
bad_type:
	return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': parameter '%s'%s must be %s",
			  m->name, tn, ps->name, where, type_name(ps->type));
out:
	*outv = v;
	return 0;
}

int mk_method_check_params(const struct mk_method *m, const struct mk_job_desc *d,
			   struct mk_pval *global_out, struct mk_pval *input_out,
			   struct mk_err *err)
{
	size_t np = m->nparams;
	char where[512];
	int rc = 0;

	for (size_t p = 0; p < np; p++) {
		const struct mk_param_spec *ps = &m->params[p];
		struct mk_pval v;

		if (global_out)
			global_out[p] = (struct mk_pval){ .set = false };
		for (size_t i = 0; input_out && i < d->ninputs; i++)
			input_out[i * np + p] = (struct mk_pval){ .set = false };
		if (ps->scope == MK_SCOPE_GLOBAL) {
			rc = resolve_one(m, d, ps, d->global ? &d->global[p] : NULL, &v, "", err);
			if (rc)
				goto out;
			if (global_out)
				global_out[p] = v;
			continue;
		}
		for (size_t i = 0; i < d->ninputs; i++) {
			if (ps->scope == MK_SCOPE_PER_NON_BASE && (int)i == d->base)
				continue;
			rc = resolve_one(m, d, ps, d->input ? &d->input[i * np + p] : NULL, &v,
					 input_label(d, i, where, sizeof(where)), err);
			if (rc)
				goto out;
			if (input_out)
				input_out[i * np + p] = v;
		}
	}
out:
	return rc;
}

static int check_contract(const struct mk_method *m, const struct mk_job_desc *d,
			  struct mk_err *err)
{
	const struct mk_contract *c = &m->contract;
	const char *tn = d->tensor ? d->tensor : "?";
	size_t n = d->ninputs, nb;

	if (d->base < -1 || (d->base >= 0 && (size_t)d->base >= n))
		return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': base index %d out of range",
				  m->name, tn, d->base);
	if (n && !d->in)
		return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': no input descriptions",
				  m->name, tn);
	if (c->base == MK_BASE_REQUIRED && d->base < 0)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s' needs a base model, and tensor '%s' has none",
				  m->name, tn);
	if (c->base == MK_BASE_FORBIDDEN && d->base >= 0)
		return mk_err_set(err, MK_EINVAL, "method '%s' takes no base model (tensor '%s')",
				  m->name, tn);
	nb = n - (d->base >= 0);
	if (n < c->min_inputs || n > c->max_inputs) {
		if (c->min_inputs == c->max_inputs)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s' expects exactly %u input tensor%s, tensor '%s' has %zu",
					  m->name, (unsigned)c->min_inputs, c->min_inputs == 1 ? "" : "s", tn, n);
		if (n < c->min_inputs)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s' expects at least %u input tensors, tensor '%s' has %zu",
					  m->name, (unsigned)c->min_inputs, tn, n);
		return mk_err_set(err, MK_EINVAL,
				  "method '%s' expects at most %u input tensors, tensor '%s' has %zu",
				  m->name, (unsigned)c->max_inputs, tn, n);
	}
	if (nb < c->min_non_base)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s': tensor '%s' has %zu inputs besides the base, it needs at least %u",
				  m->name, tn, nb, (unsigned)c->min_non_base);
	if (nb > c->max_non_base)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s': tensor '%s' has %zu inputs besides the base, it takes at most %u",
				  m->name, tn, nb, (unsigned)c->max_non_base);
	for (size_t i = 0; i < n; i++)
		if (d->in[i].ndim > MK_MAX_DIMS)
			return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': input %zu has %u dimensions",
					  m->name, tn, i, d->in[i].ndim);
	return 0;
}

/* ------------------------------------------------------------- planning */

int mk_method_plan(const struct mk_method *m, const struct mk_job_desc *d,
		   struct mk_plan_out *po, struct mk_pval *global_out,
		   struct mk_pval *input_out, bool *used, struct mk_err *err)
{
	size_t np = m->nparams, n = d->ninputs;
	struct mk_pval *g = global_out, *in = input_out;
	bool *u = used;
	struct mk_job_desc rd;
	int rc;

	if (!g)
		g = calloc(np + 1, sizeof(*g));
	if (!in)
		in = calloc(np * n + 1, sizeof(*in));
	if (!u)
		u = calloc(n + 1, sizeof(*u));
	if (!g || !in || !u) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = check_contract(m, d, err);
	if (rc)
		goto out;
	rc = mk_method_check_params(m, d, g, in, err);
	if (rc)
		goto out;
	rd = *d;
	rd.global = g;
	rd.input = in;
	memset(po, 0, sizeof(*po));
	po->compute = MK_DT_F32;
	for (size_t i = 0; i < n; i++)
		u[i] = true;
	rc = m->output(m, &rd, po, u, err);
	if (rc)
		goto out;
	if (po->compute != MK_DT_F32 && po->compute != MK_DT_F64)
		MK_BUG("method '%s': compute dtype %d", m->name, po->compute);
	po->npasses = m->npasses ? m->npasses(m, &rd, u) : 0;
out:
	if (g != global_out)
		free(g);
	if (in != input_out)
		free(in);
	if (u != used)
		free(u);
	return rc;
}

/* ------------------------------------------------------------------ jobs */

void mk_job_release(struct mk_job *job)
{
	if (!job)
		return;
	if (job->method && job->method->release)
		job->method->release(job);
	free(job->global);
	free(job->input);
	free(job->used);
	memset(job, 0, sizeof(*job));
}

static bool same_shape(const struct mk_tensor_desc *a, const struct mk_tensor_desc *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (unsigned k = 0; k < a->ndim; k++)
		if (a->shape[k] != b->shape[k])
			return false;
	return true;
}

int mk_job_init(struct mk_job *job, const struct mk_method *m, const struct mk_job_desc *d,
		enum mk_dtype out_dtype, struct mk_err *err)
{
	size_t np = m->nparams, n = d->ninputs;
	struct mk_plan_out po;
	int rc;

	memset(job, 0, sizeof(*job));
	job->method = m;
	job->copy_input = -1;
	job->global = calloc(np + 1, sizeof(*job->global));
	job->input = calloc(np * n + 1, sizeof(*job->input));
	job->used = calloc(n + 1, sizeof(*job->used));
	if (!job->global || !job->input || !job->used) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = mk_method_plan(m, d, &po, job->global, job->input, job->used, err);
	if (rc)
		goto out;
	job->d = *d;
	job->d.global = job->global;
	job->d.input = job->input;
	job->out = po.out;
	job->compute = po.compute;
	job->npasses = po.npasses;
	job->nelem = mk_tensor_desc_count(&po.out);
	if (out_dtype != MK_DT_COUNT && out_dtype != po.out.dtype) {
		if (out_dtype > MK_DT_COUNT || !mk_dtype_is_float(out_dtype) ||
		    !mk_dtype_is_float(po.out.dtype)) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"method '%s', tensor '%s': cannot write %s output as %s",
					m->name, d->tensor ? d->tensor : "?",
					mk_dtype_name(po.out.dtype) ? mk_dtype_name(po.out.dtype) : "?",
					mk_dtype_name(out_dtype) ? mk_dtype_name(out_dtype) : "?");
			goto out;
		}
		job->out.dtype = out_dtype;
	}
	if (m->init) {
		rc = m->init(job, err);
		if (rc) {
			/* a failed init may have set up part of its state */
			if (m->release)
				m->release(job);
			goto out;
		}
	}
	if (job->copy_input >= 0) {
		const struct mk_tensor_desc *src = &d->in[job->copy_input];
		job->byte_copy = src->dtype == job->out.dtype && same_shape(src, &job->out);
	}
out:
	if (rc) {
		/* the method's state is released (or was never made) */
		job->method = NULL;
		mk_job_release(job);
	}
	return rc;
}

int mk_job_accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	if (pass >= job->npasses || pass != job->pass_done)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': statistics pass %u out of order",
				  job->d.tensor ? job->d.tensor : "?", pass);
	if (c->elem_begin != job->next_elem || c->count > job->nelem - job->next_elem)
		return mk_err_set(err, MK_EINVAL,
				  "tensor '%s': pass %u chunk at element %llu (+%llu), expected element %llu of %llu",
				  job->d.tensor ? job->d.tensor : "?", pass,
				  (unsigned long long)c->elem_begin, (unsigned long long)c->count,
				  (unsigned long long)job->next_elem, (unsigned long long)job->nelem);
	if (!c->count)
		return 0;
	job->next_elem += c->count;
	if (job->pass_enough)
		return 0;   /* the kernel has what this pass gathers */
	if (c->bf16 && c->in && !job->accumulate_bf16)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': BF16 inputs passed to a %s statistics pass, which takes %s",
				  job->d.tensor ? job->d.tensor : "?", job->method->name, mk_dtype_name(job->compute));
	return job->method->accumulate(job, pass, c, err);
}

bool mk_job_wants(const struct mk_job *job)
{
	return job->pass_done < job->npasses && !job->pass_enough;
}

int mk_job_finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	int rc;

	if (pass >= job->npasses || pass != job->pass_done)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': statistics pass %u out of order",
				  job->d.tensor ? job->d.tensor : "?", pass);
	/* (a pass may end early once the kernel said it has what it gathers) */
	if (job->next_elem != job->nelem && !job->pass_enough)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': pass %u saw %llu of %llu elements",
				  job->d.tensor ? job->d.tensor : "?", pass,
				  (unsigned long long)job->next_elem, (unsigned long long)job->nelem);
	job->pass_enough = false;   /* finish may say the next pass needs none */
	unsigned np = job->npasses;
	rc = job->method->finish(job, pass, err);
	if (rc)
		return rc;
	/* a pass added: only to a held job, one at a time */
	if (job->npasses != np && (!job->held || job->npasses != np + 1)) {
		unsigned got = job->npasses;
		job->npasses = np;
		return mk_err_set(err, MK_EINVAL,
				  "tensor '%s': method '%s' changed the job's statistics passes from %u to %u after pass %u (the job is %s)",
				  job->d.tensor ? job->d.tensor : "?", job->method->name, np, got, pass,
				  job->held ? "held" : "not held: its inputs are sent once per planned pass");
	}
	job->pass_done++;
	job->next_elem = 0;
	return 0;
}

int mk_job_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	if (job->pass_done != job->npasses)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': apply before its %u statistics passes",
				  job->d.tensor ? job->d.tensor : "?", job->npasses);
	if (c->elem_begin > job->nelem || c->count > job->nelem - c->elem_begin)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': chunk [%llu, +%llu) outside %llu elements",
				  job->d.tensor ? job->d.tensor : "?",
				  (unsigned long long)c->elem_begin, (unsigned long long)c->count,
				  (unsigned long long)job->nelem);
	if (!c->count)
		return 0;
	if (c->bf16 && !job->apply_bf16)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': BF16 inputs passed to %s's apply, which takes %s",
				  job->d.tensor ? job->d.tensor : "?", job->method->name, mk_dtype_name(job->compute));
	/* the output is one input as it is (the method said so in init) */
	if (job->copy_input >= 0 && c->in[job->copy_input]) {
		memcpy(out, c->in[job->copy_input], c->count * (job->compute == MK_DT_F64 ? 8 : 4));
		return 0;
	}
	return job->method->apply(job, c, out, err);
}

int mk_method_batch(const struct mk_method *m, const struct mk_batch *b, struct mk_err *err)
{
	if (!m->batch)
		return mk_err_set(err, MK_EUNSUPPORTED, "method '%s' has no batch kernel", m->name);
	if (b->compute != MK_DT_F32 && b->compute != MK_DT_F64)
		return mk_err_set(err, MK_EINVAL, "method '%s': batch compute dtype must be F32 or F64",
				  m->name);
	if (!b->B || !b->nelem)
		return 0;
	return m->batch(m, b, err);
}

const struct mk_pval *mk_job_input_param(const struct mk_job *job, size_t i, size_t p)
{
	return &job->input[i * job->method->nparams + p];
}

/* -------------------------------------------------------- dtype helpers */

enum mk_dtype mk_compute_dtype_of(size_t n, const enum mk_dtype *dts)
{
	for (size_t i = 0; i < n; i++)
		if (dts[i] == MK_DT_F64)
			return MK_DT_F64;
	return MK_DT_F32;
}

static int float_rank(enum mk_dtype dt)
{
	switch (dt) {
	case MK_DT_F64: return 4;
	case MK_DT_F32: return 3;
	case MK_DT_F16: case MK_DT_BF16: return 2;
	default: return 1;   /* F8 variants */
	}
}

enum mk_dtype mk_promote_dtypes(size_t n, const enum mk_dtype *dts)
{
	enum mk_dtype r;

	if (!n)
		return MK_DT_F32;
	r = dts[0];
	for (size_t i = 1; i < n; i++) {
		enum mk_dtype x = dts[i];
		int a = float_rank(r), b = float_rank(x);
		if (x == r)
			continue;
		if (a == b)
			r = MK_DT_F32;   /* F16 + BF16, or two F8 variants */
		else if (b > a)
			r = x;
	}
	return r;
}

/* --------------------------------------------------------- embeddings */

static void shape_str(const struct mk_tensor_desc *t, char *buf, size_t len)
{
	size_t o = 0;

	o += (size_t)snprintf(buf + o, len - o, "[");
	for (unsigned k = 0; k < t->ndim && o < len; k++)
		o += (size_t)snprintf(buf + o, len - o, "%s%llu", k ? ", " : "",
				      (unsigned long long)t->shape[k]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

int mk_rectify_shapes(const struct mk_method *m, const struct mk_job_desc *d, const bool *used,
		      struct mk_tensor_desc *out_desc, bool *rectified, struct mk_err *err)
{
	const struct mk_tensor_desc *first = NULL;
	bool all2d = true;
	uint64_t r = UINT64_MAX, c = UINT64_MAX;
	char a[128], b[128];

	*rectified = false;
	for (size_t i = 0; i < d->ninputs; i++) {
		if (used && !used[i])
			continue;
		if (!first)
			first = &d->in[i];
		if (d->in[i].ndim != 2) {
			all2d = false;
			continue;
		}
		if (d->in[i].shape[0] < r)
			r = d->in[i].shape[0];
		if (d->in[i].shape[1] < c)
			c = d->in[i].shape[1];
	}
	if (!first)
		MK_BUG("rectify over no inputs");
	out_desc->ndim = first->ndim;
	memcpy(out_desc->shape, first->shape, sizeof(out_desc->shape));
	if (d->is_embed && all2d) {
		out_desc->shape[0] = r;
		out_desc->shape[1] = c;
	}
	for (size_t i = 0; i < d->ninputs; i++) {
		if (used && !used[i])
			continue;
		if (same_shape(&d->in[i], out_desc))
			continue;
		if (d->is_embed && all2d) {
			*rectified = true;
			continue;
		}
		shape_str(first, a, sizeof(a));
		shape_str(&d->in[i], b, sizeof(b));
		return mk_err_set(err, MK_EMISMATCH,
				  "method '%s', tensor '%s': tensor size mismatch: input %zu%s%s%s has shape %s, expected %s",
				  m->name, d->tensor ? d->tensor : "?", i,
				  d->labels && d->labels[i] ? " ('" : "",
				  d->labels && d->labels[i] ? d->labels[i] : "",
				  d->labels && d->labels[i] ? "')" : "", b, a);
	}
	return 0;
}

int mk_require_float_inputs(const struct mk_method *m, const struct mk_job_desc *d,
			    const bool *used, struct mk_err *err)
{
	for (size_t i = 0; i < d->ninputs; i++) {
		const char *dn;
		if ((used && !used[i]) || mk_dtype_is_float(d->in[i].dtype))
			continue;
		dn = mk_dtype_name(d->in[i].dtype);
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "method '%s', tensor '%s': input %zu is %s; only float tensors can be merged",
				  m->name, d->tensor ? d->tensor : "?", i, dn ? dn : "an unknown dtype");
	}
	return 0;
}
