/* lowrank.c - mk_lowrank_factor: the options checked, delta scanned
 * (finite, ||F||_F^2, all zero), the exact or randomized path, the
 * factors scaled by mergekit's rule, the residual measured; and the
 * allocation ledger that peak_bytes and mk_lowrank_working_set count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "lowrank_impl.h"

void *lr_alloc(struct lr_mem *mem, uint64_t bytes)
{
	void *p = malloc(bytes ? bytes : 1);
	if (p) {
		mem->cur += bytes;
		if (mem->cur > mem->peak)
			mem->peak = mem->cur;
	}
	return p;
}

void lr_free(struct lr_mem *mem, void *p, uint64_t bytes)
{
	if (!p)
		return;
	free(p);
	mem->cur -= bytes;
}

void *lr_shrink(struct lr_mem *mem, void *p, uint64_t old, uint64_t bytes)
{
	void *q = realloc(p, bytes ? bytes : 1);
	if (!q)
		return p;       /* the old block still holds it; counted as shrunk */
	mem->cur -= old - bytes;
	return q;
}

void mk_lowrank_opts_default(struct mk_lowrank_opts *o, unsigned max_rank)
{
	memset(o, 0, sizeof *o);
	o->max_rank = max_rank;
	o->distribute_scale = true;
	o->oversample = MK_LOWRANK_OVERSAMPLE;
	o->power_iters = MK_LOWRANK_POWER_ITERS;
}

void mk_lowrank_free(struct mk_lowrank *r)
{
	if (!r)
		return;
	free(r->a);
	free(r->b);
	free(r->s);
	memset(r, 0, sizeof *r);
}

static int check_opts(const struct mk_lowrank_opts *o, struct mk_err *err)
{
	if (o->max_rank < 1)
		return mk_err_set(err, MK_EINVAL, "max_rank must be at least 1");
	if (!(o->sv_epsilon >= 0) || !isfinite(o->sv_epsilon))
		return mk_err_set(err, MK_EINVAL, "sv_epsilon %g: expected a finite number >= 0", o->sv_epsilon);
	if (!(o->energy >= 0 && o->energy <= 1))
		return mk_err_set(err, MK_EINVAL, "energy %g: expected a fraction in [0, 1] (0: off)", o->energy);
	if (!(o->rel_sigma >= 0 && o->rel_sigma <= 1))
		return mk_err_set(err, MK_EINVAL, "rel_sigma %g: expected a fraction in [0, 1] (0: off)", o->rel_sigma);
	if (o->power_iters > 64)
		return mk_err_set(err, MK_EINVAL, "power_iters %u: expected at most 64", o->power_iters);
	return 0;
}

/* k of the randomized path, or 0 for the exact one. */
static unsigned rand_cols(uint64_t m, uint64_t n, const struct mk_lowrank_opts *o)
{
	uint64_t mn = m < n ? m : n, k = (uint64_t)o->max_rank + o->oversample;
	return o->randomized && k < mn ? (unsigned)k : 0;
}

uint64_t mk_lowrank_working_set(uint64_t m, uint64_t n, bool transpose, const struct mk_lowrank_opts *o)
{
	if (!m || !n || check_opts(o, NULL) || m > (1ull << 31) || n > (1ull << 31))
		return 0;
	uint64_t p = transpose ? n : m, q = transpose ? m : n, mn = m < n ? m : n;
	unsigned k = rand_cols(m, n, o);
	uint64_t path = k ? lr_randomized_bytes(m, n, transpose, k, o) : lr_exact_bytes(m, n, transpose, o);
	uint64_t ns = k ? k : mn, r = o->max_rank < ns ? o->max_rank : ns;
	/* then A, B, s and the residual's block */
	uint64_t after = 4 * (p * r + r * q + ns) + lr_residual_bytes(m, n);
	if (!path)
		return 0;
	return path > after ? path : after;
}

/* ||F||_F^2, or the first non-finite element. */
static int scan(const float *d, uint64_t m, uint64_t n, double *fro2, struct mk_err *err)
{
	double sum = 0;
	for (uint64_t i = 0; i < m; i++) {
		const float *row = d + i * n;
		double rs = 0;
		for (uint64_t j = 0; j < n; j++)
			rs += (double)row[j] * row[j];
		if (!isfinite(rs)) {
			for (uint64_t j = 0; j < n; j++)
				if (!isfinite(row[j]))
					return mk_err_set(err, MK_EINVAL, "the delta's element [%llu, %llu] is %g: expected finite values",
							  (unsigned long long)i, (unsigned long long)j, (double)row[j]);
		}
		sum += rs;
	}
	*fro2 = sum;
	return 0;
}

static void scale(struct mk_lowrank *f, bool distribute)
{
	for (unsigned j = 0; j < f->rank; j++) {
		float sa = distribute ? sqrtf(f->s[j]) : f->s[j];
		float *row = f->a + (uint64_t)j * f->n;
		for (uint64_t i = 0; i < f->n; i++)
			row[i] *= sa;
	}
	if (!distribute)
		return;
	for (uint64_t i = 0; i < f->m; i++) {
		float *row = f->b + i * f->rank;
		for (unsigned j = 0; j < f->rank; j++)
			row[j] *= sqrtf(f->s[j]);
	}
}

int mk_lowrank_factor(const float *delta, uint64_t m, uint64_t n, bool transpose,
		      const struct mk_lowrank_opts *o, struct mk_lowrank *out, struct mk_err *err)
{
	struct lr_mem mem = { 0, 0 };
	double fro2 = 0, res2 = 0;
	int rc;

	memset(out, 0, sizeof *out);
	if ((rc = check_opts(o, err)))
		return rc;
	if (!m || !n)
		return mk_err_set(err, MK_EINVAL, "a %llu x %llu delta: expected a matrix with rows and columns",
				  (unsigned long long)m, (unsigned long long)n);
	if (m > (1ull << 31) - 1 || n > (1ull << 31) - 1)
		return mk_err_set(err, MK_EUNSUPPORTED, "a %llu x %llu delta is beyond LAPACK's 32-bit sizes",
				  (unsigned long long)m, (unsigned long long)n);
	out->m = transpose ? n : m;
	out->n = transpose ? m : n;
	if ((rc = scan(delta, m, n, &fro2, err)))
		return rc;
	if (fro2 == 0)           /* zero: rank 0, exactly */
		return 0;

	unsigned k = rand_cols(m, n, o);
	out->randomized = k > 0;
	rc = k ? lr_randomized(&mem, delta, m, n, transpose, k, fro2, o, out, err)
	       : lr_exact(&mem, delta, m, n, transpose, o, out, err);
	if (!rc && out->rank)
		scale(out, o->distribute_scale);
	if (!rc && out->rank)
		rc = lr_residual(&mem, delta, m, n, transpose, out, &res2, err);
	if (rc) {
		mk_lowrank_free(out);
		return rc;
	}
	out->rel_error = out->rank ? sqrt(res2 / fro2) : 1;
	out->peak_bytes = mem.peak;
	return 0;
}
