/* geom.c - per-vector Gram matrices in a fixed order (see geom.h). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "core/blas.h"
#include "geom.h"

void mk_geom_layout(enum mk_geom_mode mode, const struct mk_tensor_desc *t,
		    enum mk_geom_mode *eff, uint64_t *nvec, uint64_t *veclen)
{
	uint64_t n = mk_tensor_desc_count(t);

	if (t->ndim <= 1)
		mode = MK_GEOM_WHOLE;
	*eff = mode;
	switch (mode) {
	case MK_GEOM_ROWS:
		*veclen = t->shape[t->ndim - 1];
		*nvec = *veclen ? n / *veclen : 0;
		break;
	case MK_GEOM_COLS:
		*veclen = t->shape[0];
		*nvec = *veclen ? n / *veclen : 0;
		break;
	default:
		*veclen = n;
		*nvec = 1;
		break;
	}
}

int mk_geom_init(struct mk_geom *g, enum mk_geom_mode mode, const struct mk_tensor_desc *out,
		 enum mk_dtype compute, size_t k, const int *idx, int base,
		 mk_geom_done_fn done, void *ctx, struct mk_err *err)
{
	size_t nacc;

	memset(g, 0, sizeof(*g));
	mk_geom_layout(mode, out, &g->mode, &g->nvec, &g->veclen);
	g->nelem = mk_tensor_desc_count(out);
	g->compute = compute;
	g->k = k;
	g->npairs = k * (k + 1) / 2;
	g->idx = idx;
	g->base = base;
	g->done = done;
	g->ctx = ctx;
	nacc = g->mode == MK_GEOM_COLS ? (size_t)g->nvec * g->npairs : g->npairs;
	g->acc = calloc(nacc + 1, sizeof(*g->acc));
	g->part = calloc(g->npairs + 1, sizeof(*g->part));
	g->sig = calloc(k + 1, sizeof(*g->sig));
	g->g = calloc(k * k + 1, sizeof(*g->g));
	g->blas = g->mode != MK_GEOM_COLS && k >= MK_GEOM_BLAS_K &&
		  g->veclen >= MK_GEOM_BLAS_RUN;
	if (g->blas) {
		g->blk = malloc(k * MK_SUM_BLOCK * sizeof(*g->blk));
		g->bg = calloc(k * k, sizeof(*g->bg));
		mk__blas_one_thread();   /* mk runs one job per thread */
	}
	if (!g->acc || !g->part || !g->sig || !g->g || (g->blas && (!g->blk || !g->bg))) {
		mk_geom_release(g);
		return mk_err_set(err, MK_ENOMEM, "out of memory (statistics of %llu vectors)",
				  (unsigned long long)g->nvec);
	}
	return 0;
}

void mk_geom_release(struct mk_geom *g)
{
	free(g->acc);
	free(g->part);
	free(g->sig);
	free(g->g);
	free(g->blk);
	free(g->bg);
	g->acc = NULL;
	g->part = g->sig = g->g = g->blk = g->bg = NULL;
}

/* Hand vector v's sums (acc[0..npairs)) to the method. */
static int emit(struct mk_geom *g, uint64_t v, const struct mk_fsum *acc, struct mk_err *err)
{
	size_t p = 0, k = g->k;

	for (size_t a = 0; a < k; a++)
		for (size_t b = a; b < k; b++, p++) {
			double x = mk_fsum_value(&acc[p]);
			g->g[a * k + b] = x;
			g->g[b * k + a] = x;
		}
	return g->done(g->ctx, v, g->g, err);
}

/* The Gram of the segment in g->blk (n columns) into the open block sums
 * (their part is 0: a segment starts a block or a vector). */
static void segment_gram(struct mk_geom *g, uint64_t n)
{
	size_t k = g->k, p = 0;

	memset(g->bg, 0, k * k * sizeof(*g->bg));
	cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)k, (blasint)k, (blasint)n,
		    1.0, g->blk, MK_SUM_BLOCK, g->blk, MK_SUM_BLOCK, 0.0, g->bg, (blasint)k);
	for (size_t a = 0; a < k; a++)
		for (size_t b = a; b < k; b++, p++)
			g->acc[p].part = g->bg[a * k + b];
}

#define GEOM_KERNELS(SUF, T)							\
static inline void signals_##SUF(const struct mk_geom *g, const void *const *in, \
				 uint64_t e, double *sig)			\
{										\
	const T *b = g->base >= 0 ? in[g->base] : NULL;				\
	for (size_t a = 0; a < g->k; a++) {					\
		const T *x = in[g->idx[a]];					\
		T d = b ? (T)(x[e] - b[e]) : x[e];				\
		sig[a] = (double)d;						\
	}									\
}										\
/* Signals of elements [e, e + n) of the chunk into the segment scratch	\
 * from column `off` on. */						\
static void gather_##SUF(struct mk_geom *g, const void *const *in, uint64_t e,	\
			 uint64_t n, uint64_t off)				\
{										\
	const T *b = g->base >= 0 ? (const T *)in[g->base] + e : NULL;		\
	for (size_t a = 0; a < g->k; a++) {					\
		const T *x = (const T *)in[g->idx[a]] + e;			\
		double *d = g->blk + a * MK_SUM_BLOCK + off;			\
		if (b)								\
			for (uint64_t i = 0; i < n; i++)			\
				d[i] = (double)(T)(x[i] - b[i]);		\
		else								\
			for (uint64_t i = 0; i < n; i++)			\
				d[i] = (double)x[i];				\
	}									\
}										\
/* scalar_run for two signals: the same sums, same order, in registers. */	\
static void pair_run_##SUF(struct mk_geom *g, const struct mk_job_chunk *c,	\
			   uint64_t e, uint64_t run)				\
{										\
	uint64_t o = e - c->elem_begin;						\
	const T *x0 = (const T *)c->in[g->idx[0]] + o;				\
	const T *x1 = (const T *)c->in[g->idx[1]] + o;				\
	double p00 = g->acc[0].part, p01 = g->acc[1].part, p11 = g->acc[2].part; \
	if (g->base >= 0) {							\
		const T *b = (const T *)c->in[g->base] + o;			\
		for (uint64_t i = 0; i < run; i++) {				\
			double s0 = (double)(T)(x0[i] - b[i]);			\
			double s1 = (double)(T)(x1[i] - b[i]);			\
			double t00 = s0 * s0, t01 = s0 * s1, t11 = s1 * s1;	\
			p00 += t00;						\
			p01 += t01;						\
			p11 += t11;						\
		}								\
	} else {								\
		for (uint64_t i = 0; i < run; i++) {				\
			double s0 = (double)x0[i], s1 = (double)x1[i];		\
			double t00 = s0 * s0, t01 = s0 * s1, t11 = s1 * s1;	\
			p00 += t00;						\
			p01 += t01;						\
			p11 += t11;						\
		}								\
	}									\
	g->acc[0].part = p00;							\
	g->acc[1].part = p01;							\
	g->acc[2].part = p11;							\
	for (size_t p = 0; p < 3; p++)						\
		mk_fsum_step(&g->acc[p], e + run);				\
}										\
/* Elements [e, e + run) of the chunk, in one block and one vector, added	\
 * to the open block sums in element order. */					\
static void scalar_run_##SUF(struct mk_geom *g, const struct mk_job_chunk *c,	\
			     uint64_t e, uint64_t run)				\
{										\
	size_t k = g->k, np = g->npairs;					\
	double *sig = g->sig, *part = g->part;					\
	if (k == 2) {								\
		pair_run_##SUF(g, c, e, run);					\
		return;								\
	}									\
	for (size_t p = 0; p < np; p++)						\
		part[p] = g->acc[p].part;					\
	for (uint64_t i = 0; i < run; i++) {					\
		size_t p = 0;							\
		signals_##SUF(g, c->in, e - c->elem_begin + i, sig);		\
		for (size_t a = 0; a < k; a++) {				\
			double sa = sig[a];					\
			for (size_t b = a; b < k; b++, p++) {			\
				double t = sa * sig[b];				\
				part[p] += t;					\
			}							\
		}								\
	}									\
	for (size_t p = 0; p < np; p++) {					\
		g->acc[p].part = part[p];					\
		mk_fsum_step(&g->acc[p], e + run);				\
	}									\
}										\
/* The same run of segment [s0, s1) into the scratch; the segment's Gram	\
 * once it is complete. */							\
static void blas_run_##SUF(struct mk_geom *g, const struct mk_job_chunk *c,	\
			   uint64_t e, uint64_t run, uint64_t s0, uint64_t s1)	\
{										\
	gather_##SUF(g, c->in, e - c->elem_begin, run, e - s0);			\
	if (e + run == s1) {							\
		segment_gram(g, s1 - s0);					\
		for (size_t p = 0; p < g->npairs; p++)				\
			mk_fsum_step(&g->acc[p], s1);				\
	}									\
}										\
static int contiguous_##SUF(struct mk_geom *g, const struct mk_job_chunk *c,	\
			    struct mk_err *err)					\
{										\
	uint64_t e = c->elem_begin, end = e + c->count;				\
	while (e < end) {							\
		uint64_t vend = (g->cur + 1) * g->veclen;			\
		uint64_t stop = vend < end ? vend : end;			\
		uint64_t run = mk_fsum_run(e, stop - e);			\
		/* e's segment: its block within its vector */			\
		uint64_t s0 = e - e % MK_SUM_BLOCK, s1 = s0 + MK_SUM_BLOCK;	\
		if (s0 < vend - g->veclen)					\
			s0 = vend - g->veclen;					\
		if (s1 > vend)							\
			s1 = vend;						\
		if (g->blas && s1 - s0 >= MK_GEOM_BLAS_RUN)			\
			blas_run_##SUF(g, c, e, run, s0, s1);			\
		else								\
			scalar_run_##SUF(g, c, e, run);				\
		e += run;							\
		if (e == vend) {						\
			int rc = emit(g, g->cur, g->acc, err);			\
			if (rc)							\
				return rc;					\
			memset(g->acc, 0, g->npairs * sizeof(*g->acc));		\
			g->cur++;						\
		}								\
	}									\
	return 0;								\
}										\
static void columns_##SUF(struct mk_geom *g, const struct mk_job_chunk *c)	\
{										\
	uint64_t v = c->elem_begin % g->nvec;					\
	size_t k = g->k, np = g->npairs;					\
	double *sig = g->sig;							\
	for (uint64_t i = 0; i < c->count; i++) {				\
		struct mk_fsum *acc = &g->acc[v * np];				\
		size_t p = 0;							\
		signals_##SUF(g, c->in, i, sig);				\
		for (size_t a = 0; a < k; a++) {				\
			double sa = sig[a];					\
			for (size_t b = a; b < k; b++, p++) {			\
				double t = sa * sig[b];				\
				acc[p].part += t;				\
			}							\
		}								\
		if (++v == g->nvec)						\
			v = 0;							\
	}									\
}
GEOM_KERNELS(f32, float)
GEOM_KERNELS(f64, double)

int mk_geom_accumulate(struct mk_geom *g, const struct mk_job_chunk *c, struct mk_err *err)
{
	if (!c->count)
		return 0;
	if (g->mode == MK_GEOM_COLS) {
		if (g->compute == MK_DT_F64)
			columns_f64(g, c);
		else
			columns_f32(g, c);
		return 0;
	}
	return g->compute == MK_DT_F64 ? contiguous_f64(g, c, err) : contiguous_f32(g, c, err);
}

int mk_geom_finish(struct mk_geom *g, struct mk_err *err)
{
	int rc = 0;

	if (g->mode == MK_GEOM_COLS) {
		for (uint64_t v = 0; v < g->nvec && !rc; v++)
			rc = emit(g, v, &g->acc[v * g->npairs], err);
		return rc;
	}
	/* vectors not reached: a tensor without elements */
	for (; g->cur < g->nvec && !rc; g->cur++) {
		memset(g->acc, 0, g->npairs * sizeof(*g->acc));
		rc = emit(g, g->cur, g->acc, err);
	}
	return rc;
}

double mk_geom_dot(size_t k, const double *g, const double *a, const double *b)
{
	double s = 0.0;

	for (size_t i = 0; i < k; i++) {
		double r = 0.0;
		if (a[i] == 0.0)
			continue;
		for (size_t j = 0; j < k; j++) {
			double t = g[i * k + j] * b[j];
			r += t;
		}
		s += a[i] * r;
	}
	return s;
}

const char *mk_geom_label(const struct mk_job_desc *d, size_t i, char *buf, size_t len)
{
	if (d->labels && d->labels[i])
		snprintf(buf, len, "input %zu ('%s')", i, d->labels[i]);
	else
		snprintf(buf, len, "input %zu", i);
	return buf;
}
