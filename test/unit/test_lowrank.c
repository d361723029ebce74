/* test_lowrank.c - src/methods (lowrank*)'s truncated SVD (methods/lowrank.h): exact
 * reconstruction of planted low-rank matrices, agreement with an
 * independent SVD (one-sided Jacobi in double, here) and with torch's
 * factors per mergekit's rule (testdata/lowrank), the rank rules, the
 * scale rule, transposed deltas, rank 0, the measured error, the
 * randomized path against the exact one, the working-set bound against
 * what a call allocated, and the errors.
 *
 * Metric: relative Frobenius distance ||X - Y||_F / ||Y||_F of B A (A and
 * B themselves are unique only up to the signs of their rows/columns). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "gram_schmidt.h"
#include "top.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cblas.h>
#include "methods/lowrank_impl.h"

/* ---- inputs ---------------------------------------------------------- */

static uint64_t rs = 0x243F6A8885A308D3ull;

static double gauss(void)
{
	rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
	double u1 = ((rs >> 11) + 1) * 0x1p-53;
	rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
	double u2 = (rs >> 11) * 0x1p-53;
	return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static float *gauss_matrix(uint64_t m, uint64_t n, double scale)
{
	float *f = malloc(4 * m * n);
	for (uint64_t i = 0; i < m * n; i++)
		f[i] = (float)(scale * gauss());
	return f;
}

/* rows x k with orthonormal columns, column-major, in double (Gram-Schmidt twice) */
static double *orthonormal(uint64_t rows, unsigned k)
{
	double *a = malloc(8 * rows * k);
	for (uint64_t i = 0; i < rows * k; i++)
		a[i] = gauss();
	gram_schmidt(a, rows, k);
	return a;
}

/* m x n row-major U diag(s) V^T with k planted singular values */
static float *planted(uint64_t m, uint64_t n, unsigned k, const double *s)
{
	double *u = orthonormal(m, k), *v = orthonormal(n, k);
	float *f = malloc(4 * m * n);
	for (uint64_t i = 0; i < m; i++)
		for (uint64_t j = 0; j < n; j++) {
			double x = 0;
			for (unsigned l = 0; l < k; l++)
				x += u[l * m + i] * s[l] * v[l * n + j];
			f[i * n + j] = (float)x;
		}
	free(u);
	free(v);
	return f;
}

static float *transposed(const float *f, uint64_t m, uint64_t n)
{
	float *t = malloc(4 * m * n);
	for (uint64_t i = 0; i < m; i++)
		for (uint64_t j = 0; j < n; j++)
			t[j * m + i] = f[i * n + j];
	return t;
}

/* ---- measures -------------------------------------------------------- */

/* B A (m x n row-major, double) of a result */
static double *product(const struct mk_lowrank *r)
{
	double *p = calloc(r->m * r->n + 1, 8);
	for (uint64_t i = 0; i < r->m; i++)
		for (unsigned l = 0; l < r->rank; l++) {
			double b = r->b[i * r->rank + l];
			for (uint64_t j = 0; j < r->n; j++)
				p[i * r->n + j] += b * r->a[l * r->n + j];
		}
	return p;
}

static double rel_dist(const double *x, const double *y, uint64_t len)
{
	double d = 0, nn = 0;
	for (uint64_t i = 0; i < len; i++) {
		d += (x[i] - y[i]) * (x[i] - y[i]);
		nn += y[i] * y[i];
	}
	return sqrt(d / nn);
}

static double rel_dist_f(const double *x, const float *y, uint64_t len)
{
	double *yd = malloc(8 * len);
	for (uint64_t i = 0; i < len; i++)
		yd[i] = y[i];
	double d = rel_dist(x, yd, len);
	free(yd);
	return d;
}

/* ||F - B A|| / ||F||, directly in double; F = f, or its transpose */
static double direct_error(const float *f, uint64_t m, uint64_t n, bool tr, const struct mk_lowrank *r)
{
	double *p = product(r), d = 0, nn = 0;
	for (uint64_t i = 0; i < r->m; i++)
		for (uint64_t j = 0; j < r->n; j++) {
			double x = tr ? f[j * n + i] : f[i * n + j];
			d += (x - p[i * r->n + j]) * (x - p[i * r->n + j]);
			nn += x * x;
		}
	free(p);
	return sqrt(d / nn);
}

/* The reference: the truncated SVD's B A by one-sided Jacobi (Hestenes)
 * in double on F (m x n row-major): orthogonalise F's columns by plane
 * rotations; the column norms are the singular values. */
static double *jacobi_ba(const float *f, uint64_t m, uint64_t n, unsigned r, double *sv)
{
	bool tall = m >= n;
	uint64_t rows = tall ? m : n, cols = tall ? n : m;   /* work on F or F^T, tall */
	double *g = malloc(8 * rows * cols), *v = calloc(cols * cols, 8);
	for (uint64_t i = 0; i < m; i++)
		for (uint64_t j = 0; j < n; j++) {
			if (tall)
				g[j * rows + i] = f[i * n + j];
			else
				g[i * rows + j] = f[i * n + j];
		}
	for (uint64_t j = 0; j < cols; j++)
		v[j * cols + j] = 1;
	for (int sweep = 0; sweep < 60; sweep++) {
		double off = 0;
		for (uint64_t p = 0; p < cols; p++)
			for (uint64_t q = p + 1; q < cols; q++) {
				double a = 0, b = 0, c = 0;
				for (uint64_t i = 0; i < rows; i++) {
					a += g[p * rows + i] * g[p * rows + i];
					b += g[q * rows + i] * g[q * rows + i];
					c += g[p * rows + i] * g[q * rows + i];
				}
				if (fabs(c) <= 1e-15 * sqrt(a * b))
					continue;
				off = fmax(off, fabs(c) / sqrt(a * b));
				double zeta = (b - a) / (2 * c), t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1 + zeta * zeta));
				double cs = 1 / sqrt(1 + t * t), sn = cs * t;
				for (uint64_t i = 0; i < rows; i++) {
					double x = g[p * rows + i], y = g[q * rows + i];
					g[p * rows + i] = cs * x - sn * y;
					g[q * rows + i] = sn * x + cs * y;
				}
				for (uint64_t i = 0; i < cols; i++) {
					double x = v[p * cols + i], y = v[q * cols + i];
					v[p * cols + i] = cs * x - sn * y;
					v[q * cols + i] = sn * x + cs * y;
				}
			}
		if (off < 1e-14)
			break;
	}
	/* order by norm; G's column j = sigma_j u_j, V's column j = v_j */
	double *nrm = malloc(8 * cols);
	unsigned *ord = malloc(sizeof(unsigned) * cols);
	for (uint64_t j = 0; j < cols; j++) {
		double s = 0;
		for (uint64_t i = 0; i < rows; i++)
			s += g[j * rows + i] * g[j * rows + i];
		nrm[j] = sqrt(s);
		ord[j] = (unsigned)j;
	}
	for (uint64_t a = 0; a < cols; a++)
		for (uint64_t b = a + 1; b < cols; b++)
			if (nrm[ord[b]] > nrm[ord[a]]) {
				unsigned t = ord[a];
				ord[a] = ord[b];
				ord[b] = t;
			}
	for (uint64_t j = 0; sv && j < cols; j++)
		sv[j] = nrm[ord[j]];
	/* (F or F^T) truncated = sum_l g_l v_l^T */
	double *ba = calloc(m * n, 8);
	for (unsigned l = 0; l < r && l < cols; l++) {
		const double *gl = g + ord[l] * rows, *vl = v + ord[l] * cols;
		for (uint64_t i = 0; i < rows; i++)
			for (uint64_t j = 0; j < cols; j++) {
				if (tall)
					ba[i * n + j] += gl[i] * vl[j];
				else
					ba[j * n + i] += gl[i] * vl[j];
			}
	}
	free(g);
	free(v);
	free(nrm);
	free(ord);
	return ba;
}

static struct mk_lowrank_opts opts(unsigned max_rank)
{
	struct mk_lowrank_opts o;
	mk_lowrank_opts_default(&o, max_rank);
	return o;
}

static void factor_ok(const float *f, uint64_t m, uint64_t n, bool tr, const struct mk_lowrank_opts *o,
		      struct mk_lowrank *r)
{
	struct mk_err err = { 0 };
	int rc = mk_lowrank_factor(f, m, n, tr, o, r, &err);
	if (rc)
		fail_msg("mk_lowrank_factor %llux%llu: %s", (unsigned long long)m, (unsigned long long)n, err.msg);
	assert_int_equal(r->m, tr ? n : m);
	assert_int_equal(r->n, tr ? m : n);
}

/* ---- tests ----------------------------------------------------------- */

/* planted rank 5, exact: B A is F to float precision (m > n, m < n,
 * max_rank at and above the true rank) */
static void test_planted(void **state)
{
	const double s[5] = { 3, 2, 1, 0.5, 0.25 };
	const uint64_t shapes[][2] = { { 40, 30 }, { 30, 40 }, { 64, 7 }, { 7, 64 } };
	for (size_t c = 0; c < 4; c++) {
		uint64_t m = shapes[c][0], n = shapes[c][1];
		float *f = planted(m, n, 5, s);
		for (unsigned mr = 5; mr <= 9; mr += 4) {
			struct mk_lowrank_opts o = opts(mr);
			struct mk_lowrank r;
			factor_ok(f, m, n, false, &o, &r);
			assert_int_equal(r.rank, mr < m && mr < n ? mr : (m < n ? m : n));
			assert_false(r.randomized);
			double *p = product(&r), d = rel_dist_f(p, f, m * n);
			if (d > 2e-6 || r.rel_error > 2e-6)
				fail_msg("%llux%llu rank %u: B A off by %g, reported %g", (unsigned long long)m,
					 (unsigned long long)n, mr, d, r.rel_error);
			for (int i = 0; i < 5; i++)
				assert_true(fabs(r.s[i] - s[i]) < 1e-5 * s[0]);
			free(p);
			mk_lowrank_free(&r);
		}
		free(f);
	}
}

/* against the Jacobi SVD: B A truncated at r, on Gaussian matrices */
static void test_reference(void **state)
{
	const uint64_t shapes[][3] = { { 20, 13, 4 }, { 13, 20, 4 }, { 33, 33, 10 }, { 9, 50, 1 }, { 17, 5, 5 } };
	for (size_t c = 0; c < 5; c++) {
		uint64_t m = shapes[c][0], n = shapes[c][1];
		unsigned rk = (unsigned)shapes[c][2];
		float *f = gauss_matrix(m, n, 0.05);
		double sv[64], *ref = jacobi_ba(f, m, n, rk, sv);
		struct mk_lowrank_opts o = opts(rk);
		struct mk_lowrank r;
		factor_ok(f, m, n, false, &o, &r);
		double *p = product(&r), d = rel_dist(p, ref, m * n);
		if (d > 1e-5)
			fail_msg("%llux%llu rank %u: %g from the reference", (unsigned long long)m, (unsigned long long)n, rk, d);
		for (unsigned i = 0; i < r.ns; i++)
			assert_true(fabs(r.s[i] - sv[i]) < 1e-5 * sv[0]);
		free(p);
		free(ref);
		free(f);
		mk_lowrank_free(&r);
	}
}

/* the rank rules on a known spectrum; the strictest wins */
static void test_rank_rules(void **state)
{
	/* sum of squares 185.328125 */
	const double s[8] = { 10, 8, 4, 2, 1, 0.5, 0.25, 0.125 };
	float *f = planted(16, 12, 8, s);
	struct {
		unsigned max_rank;
		double eps, energy, rel;
		unsigned want;
	} cases[] = {
		{ 3, 0, 0, 0, 3 },
		{ 100, 0, 0, 0, 12 },         /* min(m, n): zeros kept, as mergekit does */
		{ 32, 0.9, 0, 0, 5 },         /* s > 0.9 */
		{ 32, 2.5, 0, 0, 3 },
		{ 32, 0, 0.5, 0, 1 },         /* 100 >= 92.66 */
		{ 32, 0, 0.9, 0, 3 },         /* 180 >= 166.80 */
		{ 32, 0, 0.999, 0, 6 },       /* 185.25 >= 185.14 */
		{ 32, 0, 0, 0.15, 4 },        /* s >= 1.5 */
		{ 32, 0, 0, 0.09, 5 },        /* s >= 0.9 */
		{ 32, 0, 0, 1, 1 },
		{ 7, 0.3, 0.99, 0.01, 4 },    /* energy the strictest */
		{ 7, 0.3, 0.999, 0.01, 6 },   /* epsilon and energy */
		{ 2, 0.3, 0.999, 0.01, 2 },   /* max_rank */
		{ 7, 0.01, 0.999, 0.15, 4 },  /* rel_sigma */
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		struct mk_lowrank_opts o = opts(cases[c].max_rank);
		o.sv_epsilon = cases[c].eps;
		o.energy = cases[c].energy;
		o.rel_sigma = cases[c].rel;
		struct mk_lowrank r;
		factor_ok(f, 16, 12, false, &o, &r);
		if (r.rank != cases[c].want)
			fail_msg("case %zu: rank %u, expected %u", c, r.rank, cases[c].want);
		/* the error is the spectrum's tail */
		double tail = 0;
		for (unsigned i = r.rank; i < 8; i++)
			tail += s[i] * s[i];
		assert_true(fabs(r.rel_error - sqrt(tail / 185.328125)) < 1e-5);
		mk_lowrank_free(&r);
	}
	/* energy 1: every non-zero value, the float noise included */
	struct mk_lowrank_opts o = opts(32);
	o.energy = 1;
	struct mk_lowrank r;
	factor_ok(f, 16, 12, false, &o, &r);
	assert_true(r.rank >= 8);
	mk_lowrank_free(&r);
	free(f);
}

/* distribute_scale or not: the same B A; A's rows and B's columns carry
 * sqrt(s) each, or A all of s and B unit columns */
static void test_scale(void **state)
{
	float *f = gauss_matrix(30, 22, 0.1);
	struct mk_lowrank_opts o = opts(6);
	struct mk_lowrank r1, r2;
	factor_ok(f, 30, 22, false, &o, &r1);
	o.distribute_scale = false;
	factor_ok(f, 30, 22, false, &o, &r2);
	double *p1 = product(&r1), *p2 = product(&r2);
	assert_true(rel_dist(p2, p1, 30 * 22) < 1e-6);
	for (unsigned j = 0; j < 6; j++) {
		double na1 = 0, nb1 = 0, na2 = 0, nb2 = 0;
		for (int i = 0; i < 22; i++) {
			na1 += (double)r1.a[j * 22 + i] * r1.a[j * 22 + i];
			na2 += (double)r2.a[j * 22 + i] * r2.a[j * 22 + i];
		}
		for (int i = 0; i < 30; i++) {
			nb1 += (double)r1.b[i * 6 + j] * r1.b[i * 6 + j];
			nb2 += (double)r2.b[i * 6 + j] * r2.b[i * 6 + j];
		}
		assert_true(fabs(sqrt(na1) - sqrt(r1.s[j])) < 1e-5);
		assert_true(fabs(sqrt(nb1) - sqrt(r1.s[j])) < 1e-5);
		assert_true(fabs(sqrt(na2) - r1.s[j]) < 1e-5);
		assert_true(fabs(sqrt(nb2) - 1) < 1e-5);
	}
	assert_true(fabs(r1.rel_error - r2.rel_error) < 1e-6);
	free(p1);
	free(p2);
	free(f);
	mk_lowrank_free(&r1);
	mk_lowrank_free(&r2);
}

/* transpose: the factors of delta^T, the same as factoring a transposed
 * copy; exact and randomized */
static void test_transpose(void **state)
{
	const uint64_t shapes[][2] = { { 25, 40 }, { 40, 25 }, { 300, 120 } };
	for (size_t c = 0; c < 3; c++)
		for (int rnd = 0; rnd < 2; rnd++) {
			uint64_t m = shapes[c][0], n = shapes[c][1];
			float *f = gauss_matrix(m, n, 0.1), *t = transposed(f, m, n);
			struct mk_lowrank_opts o = opts(5);
			o.randomized = rnd;
			o.oversample = 5;
			struct mk_lowrank r1, r2;
			factor_ok(f, m, n, true, &o, &r1);
			factor_ok(t, n, m, false, &o, &r2);
			assert_int_equal(r1.randomized, r2.randomized);
			assert_int_equal(r1.randomized, rnd);
			double *p1 = product(&r1), *p2 = product(&r2);
			double tol = rnd ? 1e-3 : 1e-5;  /* randomized: not the same products */
			assert_true(rel_dist(p1, p2, m * n) < tol);
			assert_true(fabs(r1.rel_error - direct_error(f, m, n, true, &r1)) < 1e-6);
			free(p1);
			free(p2);
			free(f);
			free(t);
			mk_lowrank_free(&r1);
			mk_lowrank_free(&r2);
		}
}

/* rank 0: a zero delta (no SVD: nothing allocated), or every value
 * below the epsilon (the singular values still reported) */
static void test_rank_zero(void **state)
{
	float *z = calloc(20 * 30, 4);
	struct mk_lowrank_opts o = opts(8);
	struct mk_lowrank r;
	for (int tr = 0; tr < 2; tr++)
		for (int rnd = 0; rnd < 2; rnd++) {
			o.randomized = rnd;
			factor_ok(z, 20, 30, tr, &o, &r);
			assert_int_equal(r.rank, 0);
			assert_null(r.a);
			assert_null(r.b);
			assert_null(r.s);
			assert_true(r.rel_error == 0);
			assert_int_equal(r.peak_bytes, 0);
			mk_lowrank_free(&r);
		}
	const double s[3] = { 0.3, 0.2, 0.1 };
	float *f = planted(20, 30, 3, s);
	o.randomized = false;
	o.sv_epsilon = 0.5;
	factor_ok(f, 20, 30, false, &o, &r);
	assert_int_equal(r.rank, 0);
	assert_null(r.a);
	assert_null(r.b);
	assert_int_equal(r.ns, 20);
	assert_true(fabs(r.s[0] - 0.3) < 1e-6);
	assert_true(r.rel_error == 1);
	mk_lowrank_free(&r);
	free(f);
	free(z);
}

/* the reported error is the direct one, exact and randomized, at several
 * ranks and shapes (rel_error in the factors' own float rounding) */
static void test_error_report(void **state)
{
	const uint64_t shapes[][2] = { { 50, 37 }, { 37, 50 }, { 200, 90 } };
	for (size_t c = 0; c < 3; c++)
		for (unsigned mr = 1; mr <= 16; mr *= 4)
			for (int rnd = 0; rnd < 2; rnd++) {
				uint64_t m = shapes[c][0], n = shapes[c][1];
				float *f = gauss_matrix(m, n, 0.02);
				struct mk_lowrank_opts o = opts(mr);
				o.randomized = rnd;
				struct mk_lowrank r;
				factor_ok(f, m, n, false, &o, &r);
				double d = direct_error(f, m, n, false, &r);
				if (fabs(r.rel_error - d) > 1e-6 * d)
					fail_msg("%llux%llu rank %u: reported %.9g, direct %.9g", (unsigned long long)m,
						 (unsigned long long)n, mr, r.rel_error, d);
				free(f);
				mk_lowrank_free(&r);
			}
}

/* randomized on decaying spectra (s_i = i^-alpha, like fine-tune
 * deltas), 512 x 512 and 384 x 640: within 1.1 of the exact error at the
 * same rank with the defaults; deterministic for a seed */
static void test_randomized(void **state)
{
	const double alphas[2] = { 0.5, 1.0 };
	const uint64_t shapes[][2] = { { 512, 512 }, { 384, 640 } };
	for (int a = 0; a < 2; a++) {
		uint64_t m = shapes[a][0], n = shapes[a][1], k = m < n ? m : n;
		double *s = malloc(8 * k);
		for (uint64_t i = 0; i < k; i++)
			s[i] = pow((double)(i + 1), -alphas[a]) * 0.01;
		float *f = planted(m, n, (unsigned)k, s);
		free(s);
		for (unsigned mr = 8; mr <= 64; mr *= 8) {
			struct mk_lowrank_opts o = opts(mr);
			struct mk_lowrank ex, r1, r2;
			factor_ok(f, m, n, false, &o, &ex);
			o.randomized = true;
			o.seed = 7;
			factor_ok(f, m, n, false, &o, &r1);
			assert_true(r1.randomized);
			assert_int_equal(r1.rank, mr);
			assert_int_equal(r1.ns, mr + MK_LOWRANK_OVERSAMPLE);
			double ratio = r1.rel_error / ex.rel_error;
			print_message("randomized %llux%llu alpha %.1f rank %u: error %.5f, exact %.5f, ratio %.4f\n",
				      (unsigned long long)m, (unsigned long long)n, alphas[a], mr, r1.rel_error,
				      ex.rel_error, ratio);
			assert_true(ratio >= 1 - 1e-6 && ratio <= 1.1);
			/* the same seed, the same bytes */
			factor_ok(f, m, n, false, &o, &r2);
			assert_memory_equal(r1.a, r2.a, 4 * mr * n);
			assert_memory_equal(r1.b, r2.b, 4 * m * mr);
			mk_lowrank_free(&r2);
			/* another seed: other factors, as good */
			o.seed = 8;
			factor_ok(f, m, n, false, &o, &r2);
			assert_true(memcmp(r1.a, r2.a, 4 * mr * n) != 0);
			assert_true(r2.rel_error / ex.rel_error <= 1.1);
			mk_lowrank_free(&r2);
			mk_lowrank_free(&r1);
			mk_lowrank_free(&ex);
		}
		free(f);
	}
	/* k = max_rank + oversample reaching min(m, n): exact */
	float *f = gauss_matrix(40, 60, 0.1);
	struct mk_lowrank_opts o = opts(30);
	o.randomized = true;
	o.oversample = 10;
	struct mk_lowrank r;
	factor_ok(f, 40, 60, false, &o, &r);
	assert_false(r.randomized);
	assert_int_equal(r.ns, 40);
	mk_lowrank_free(&r);
	o.oversample = 9;
	factor_ok(f, 40, 60, false, &o, &r);
	assert_true(r.randomized);
	assert_int_equal(r.ns, 39);
	mk_lowrank_free(&r);
	free(f);
}

/* every byte a call allocates goes through one ledger: its peak never
 * passes mk_lowrank_working_set, and meets it when the rank is
 * max_rank */
static void test_working_set(void **state)
{
	const uint64_t shapes[][2] = { { 64, 48 }, { 48, 64 }, { 200, 33 }, { 1, 50 }, { 50, 1 }, { 300, 300 } };
	for (size_t c = 0; c < 6; c++)
		for (int tr = 0; tr < 2; tr++)
			for (int rnd = 0; rnd < 2; rnd++)
				for (int lim = 0; lim < 2; lim++) {
					uint64_t m = shapes[c][0], n = shapes[c][1];
					const double s[4] = { 1, 0.5, 0.01, 0.001 };
					float *f = m > 4 && n > 4 ? planted(m, n, 4, s) : gauss_matrix(m, n, 1);
					struct mk_lowrank_opts o = opts(m > 100 ? 16 : 3);
					o.randomized = rnd;
					o.oversample = 4;
					if (lim)
						o.sv_epsilon = 0.1;   /* rank 2 of 3 */
					uint64_t ws = mk_lowrank_working_set(m, n, tr, &o);
					struct mk_lowrank r;
					factor_ok(f, m, n, tr, &o, &r);
					if (r.peak_bytes > ws || (r.rank == o.max_rank && r.peak_bytes != ws))
						fail_msg("%llux%llu tr %d rnd %d rank %u: peak %llu, bound %llu",
							 (unsigned long long)m, (unsigned long long)n, tr, rnd, r.rank,
							 (unsigned long long)r.peak_bytes, (unsigned long long)ws);
					assert_true(r.peak_bytes > 0);
					free(f);
					mk_lowrank_free(&r);
				}
	struct mk_lowrank_opts o = opts(0);
	assert_int_equal(mk_lowrank_working_set(10, 10, false, &o), 0);
}

static void test_errors(void **state)
{
	float *f = gauss_matrix(10, 12, 1);
	struct mk_lowrank_opts o = opts(4);
	struct mk_lowrank r;
	struct mk_err err = { 0 };

	o.max_rank = 0;
	assert_int_equal(mk_lowrank_factor(f, 10, 12, false, &o, &r, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "max_rank"));
	o = opts(4);
	o.energy = 1.5;
	assert_int_equal(mk_lowrank_factor(f, 10, 12, false, &o, &r, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "energy 1.5"));
	o = opts(4);
	o.rel_sigma = -0.1;
	assert_int_equal(mk_lowrank_factor(f, 10, 12, false, &o, &r, &err), -MK_EINVAL);
	o = opts(4);
	o.sv_epsilon = NAN;
	assert_int_equal(mk_lowrank_factor(f, 10, 12, false, &o, &r, &err), -MK_EINVAL);
	o = opts(4);
	assert_int_equal(mk_lowrank_factor(f, 0, 12, false, &o, &r, &err), -MK_EINVAL);
	f[3 * 12 + 7] = NAN;
	assert_int_equal(mk_lowrank_factor(f, 10, 12, false, &o, &r, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "[3, 7]"));
	f[3 * 12 + 7] = -INFINITY;
	o.randomized = true;
	assert_int_equal(mk_lowrank_factor(f, 10, 12, true, &o, &r, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "[3, 7] is -inf"));
	assert_null(r.a);
	mk_lowrank_free(&r);
	free(f);
}

/* the GPU's SVDs, exact (cuSOLVER's gesvd, for a tall and a wide copy)
 * and randomized (the range finder): the CPU's factors to float rounding
 * where a device (and cuBLAS, cuSOLVER) is there; else MK_EUNSUPPORTED,
 * nothing returned */
static void test_cuda(void **state)
{
	const double alpha = 0.7;
	uint64_t m = 300, n = 520;
	double s[300];
	for (int i = 0; i < 300; i++)
		s[i] = pow(i + 1.0, -alpha);
	float *f = planted(m, n, 300, s);
	struct mk_lowrank_opts o = opts(24);
	struct mk_lowrank cpu, gpu;
	struct mk_err err = { 0 };

	for (int rnd = 0; rnd < 2; rnd++)
		for (int tr = 0; tr < 2; tr++) {
			o.randomized = rnd;
			o.cuda = false;
			factor_ok(f, m, n, tr, &o, &cpu);
			o.cuda = true;
			int rc = mk_lowrank_factor(f, m, n, tr, &o, &gpu, &err);
			if (rc == -MK_EUNSUPPORTED) {
				print_message("no GPU path here: %s\n", err.msg);
				assert_true(err.msg[0] != 0);
				assert_null(gpu.a);
				assert_int_equal(gpu.rank, 0);
			} else {
				if (rc)
					fail_msg("GPU: %s", err.msg);
				assert_int_equal(gpu.randomized, rnd);
				assert_int_equal(gpu.rank, cpu.rank);
				double *pc = product(&cpu), *pg = product(&gpu), d = rel_dist(pg, pc, m * n);
				print_message("GPU %s%s: B A %.2g from the CPU's, error %.6f vs %.6f\n",
					      rnd ? "randomized" : "exact", tr ? ", transposed" : "", d, gpu.rel_error,
					      cpu.rel_error);
				assert_true(d < (rnd ? 1e-3 : 1e-4));
				assert_true(fabs(gpu.rel_error - cpu.rel_error) < 1e-4);
				free(pc);
				free(pg);
			}
			mk_lowrank_free(&gpu);
			mk_lowrank_free(&cpu);
		}
	free(f);
}

/* ---- torch's factors, per mergekit's rule ----------------------------- */

static const char *top(void)
{
	return test_top("testdata/lowrank/cases.txt");
}

static void test_torch(void **state)
{
	char path[PATH_MAX], name[64];
	snprintf(path, sizeof path, "%s/testdata/lowrank/cases.txt", top());
	FILE *cases = fopen(path, "r");
	assert_non_null(cases);
	unsigned long long m, n;
	int tr, dist, ncase = 0;
	unsigned mr, rank;
	double eps;
	while (fscanf(cases, "%63s %llu %llu %d %u %lf %d %u", name, &m, &n, &tr, &mr, &eps, &dist, &rank) == 8) {
		snprintf(path, sizeof path, "%s/testdata/lowrank/%s.bin", top(), name);
		FILE *bin = fopen(path, "rb");
		assert_non_null(bin);
		float *d = malloc(4 * m * n), *ba = malloc(4 * m * n);
		assert_int_equal(fread(d, 4, m * n, bin), m * n);
		assert_int_equal(fread(ba, 4, m * n, bin), m * n);
		fclose(bin);
		struct mk_lowrank_opts o = opts(mr);
		o.sv_epsilon = eps;
		o.distribute_scale = dist;
		struct mk_lowrank r;
		factor_ok(d, m, n, tr, &o, &r);
		assert_int_equal(r.rank, rank);
		double *p = product(&r), dd = rel_dist_f(p, ba, m * n);
		print_message("torch %s: rank %u, B A %.2g from torch's\n", name, r.rank, dd);
		if (dd > 1e-5)
			fail_msg("%s: B A %g from torch's", name, dd);
		free(p);
		free(d);
		free(ba);
		mk_lowrank_free(&r);
		ncase++;
	}
	fclose(cases);
	assert_true(ncase >= 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_planted),
		cmocka_unit_test(test_reference),
		cmocka_unit_test(test_rank_rules),
		cmocka_unit_test(test_scale),
		cmocka_unit_test(test_transpose),
		cmocka_unit_test(test_rank_zero),
		cmocka_unit_test(test_error_report),
		cmocka_unit_test(test_randomized),
		cmocka_unit_test(test_working_set),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_cuda),
		cmocka_unit_test(test_torch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
