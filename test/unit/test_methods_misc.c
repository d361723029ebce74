/* test_methods_misc.c - the methods sce, ram, ramplus_tl, nearswap and
 * arcee_fusion.
 *
 * Reference values: mergekit's own float32 outputs on method_harness.h's
 * inputs.  Metric: max |mk - ref| <= 1e-6 * max(1, max |ref|);
 * arcee_fusion may differ from mergekit only on elements whose importance
 * lies within 1% of its threshold (mergekit's float32 KL is that
 * imprecise).  Besides: exact top-k selection with the lower-index tie
 * rule against a brute-force sort, chunk-size independence (bit-identical
 * output for chunks of 1, 7, one row, 4096, 4097 and the whole tensor),
 * the output rules, parameter and contract errors, and arcee_fusion's
 * sampled quantiles on a tensor over 1,000,000 elements.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "method_harness.h"

float mk_arcee_fusion_threshold(const struct mk_job *job, float q[3]);


/* ------------------------------------------------------------ fixtures */

static int setup_inputs(void **st)
{
	fixtures_init();
	return 0;
}

#define run_job tj_run_printed
#define assert_close(got, ref, n) tj_assert_close(got, ref, n, 1e-6)


static float R1[12], R2[12];
static const float Z1[12] = { 0.0f, 0.0f, 0.046875f, 0.296875f, -0.15625f, 1e-06f, -0.0625f, 0.0f,
			      0.40625f, -0.109375f, 0.0f, 0.0f };
static const float Z2[12] = { -0.078125f, 0.0f, 0.0f, 0.21875f, 0.0f, 0.0f, 0.0f, 0.0f,
			      0.3125f, 0.265625f, -0.046875f, -0.390625f };

static int setup_all(void **st)
{
	setup_inputs(st);
	for (int i = 0; i < 12; i++) {
		R1[i] = W0[i] + Z1[i];
		R2[i] = W0[i] + Z2[i];
	}
	return 0;
}

/* Run t on the views at chunk sizes whole, 1, 5: all must agree bitwise,
 * and the whole-tensor output goes to out (float32 compute). */
static void run3(struct tj *t, const void *const *v, float *out)
{
	float alt[12];

	assert_int_equal(run_job(t, MK_DT_F32, v, 0, out, NULL), 0);
	assert_int_equal(run_job(t, MK_DT_F32, v, 1, alt, NULL), 0);
	assert_memory_equal(out, alt, sizeof(alt));
	assert_int_equal(run_job(t, MK_DT_F32, v, 5, alt, NULL), 0);
	assert_memory_equal(out, alt, sizeof(alt));
}

/* ------------------------------------------------------------ nearswap */

static void test_nearswap_appendix(void **st)
{
	static const float ref[12] = { 0.59375f, -0.35000002f, 1.046875f, 0.225f, -0.85f, 0.47500002f,
				       -0.0625f, 2.0f, 1.6f, -1.35f, 0.725f, -0.6f };
	const void *v[2] = { W0, M1 };
	float out[12];
	struct tj t;

	tj_init(&t, "nearswap", 2, 0);
	set_g(&t, "t", mk_pval_float(0.1));
	run3(&t, v, out);
	assert_close(out, ref, 12);
	/* t <= 0: the base; huge t: the other model */
	set_g(&t, "t", mk_pval_float(-1.0));
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
	set_g(&t, "t", mk_pval_float(100.0));
	run3(&t, v, out);
	assert_memory_equal(out, M1, sizeof(out));
	/* base position does not matter */
	{
		const void *v2[2] = { M1, W0 };
		float out2[12];
		tj_init(&t, "nearswap", 2, 1);
		set_g(&t, "t", mk_pval_float(0.1));
		run3(&t, v2, out2);
		assert_close(out2, ref, 12);
	}
}

/* nearswap's element loop (branch-free, vectorised): bitwise the rule
 * written out here, over every pair of values from a set with signed
 * zeros, near-equal values, infinities and NaN, for several t. */
static void test_nearswap_bits(void **st)
{
	static const float vals[] = { 0.0f, -0.0f, 1e-7f, -1e-7f, 0.25f, 0.2500001f, -3.0f,
				      INFINITY, -INFINITY, NAN };
	static const double ts[] = { 0.001, 0.0, -1.0, 1e30 };
	enum { V = sizeof(vals) / sizeof(vals[0]), N = V * V };
	float a[N], b[N], ref[N], got[N];
	const void *v[2] = { a, b };
	struct tj t;

	for (int e = 0; e < N; e++) {
		a[e] = vals[e % V];
		b[e] = vals[e / V];
	}
	for (size_t k = 0; k < sizeof(ts) / sizeof(ts[0]); k++) {
		float tf = (float)ts[k];
		for (int e = 0; e < N; e++) {
			float d = fabsf(a[e] - b[e]), w;
			if (d < 1e-6f)
				d = 1e-6f;
			w = (1.0f / d) * tf;
			if (w < 0)
				w = 0;
			if (w > 1)
				w = 1;
			ref[e] = w * b[e] + (1.0f - w) * a[e];
		}
		tj_init(&t, "nearswap", 2, 0);
		t.in[0] = t.in[1] = td(MK_DT_F32, 1, N, 0);
		set_g(&t, "t", mk_pval_float(ts[k]));
		assert_int_equal(run_job(&t, MK_DT_F32, v, 0, got, NULL), 0);
		assert_memory_equal(ref, got, sizeof(got));
	}
}

/* ----------------------------------------------------------------- sce */

static void sce_job(struct tj *t, size_t n, double topk)
{
	tj_init(t, "sce", n, 0);
	set_g(t, "select_topk", mk_pval_float(topk));
}

static void test_sce_appendix(void **st)
{
	static const float ref10[12] = { 0.60092705f, -0.42374712f, 0.8125f, 0.41595668f,
					 -0.96366656f, 0.57476056f, -0.14328916f, 2.015625f,
					 1.8621832f, -0.984375f, 0.81967705f, -0.86578333f };
	static const float ref05[12] = { 0.5f, -0.25f, 0.8125f, 0.125f, -0.96299374f, 0.375f,
					 -0.15939748f, 2.0f, 1.8533968f, -0.984375f, 0.625f,
					 -0.87017655f };
	static const float ref025[12] = { 0.5f, -0.25f, 1.0f, 0.125f, -0.9584681f, 0.375f, 0.0f, 2.0f,
					  1.8615961f, -1.25f, 0.625f, -0.86607707f };
	static const float reftiny[12] = { 0.50009376f, -0.2501719f, 1.000086f, 0.12525782f,
					   -0.7498281f, 0.37525f, -0.0001484375f, 2.0000157f,
					   1.5003593f, -1.2497344f, 0.6251875f, -0.50036716f };
	const void *v[4] = { W0, M1, M2, M3 };
	float out[12], t1[12], t2[12];
	const void *vt[3] = { W0, t1, t2 };
	struct tj t;

	sce_job(&t, 4, 1.0);
	run3(&t, v, out);
	assert_close(out, ref10, 12);
	sce_job(&t, 4, 0.5);
	run3(&t, v, out);
	assert_close(out, ref05, 12);
	sce_job(&t, 4, 0.25);
	run3(&t, v, out);
	assert_close(out, ref025, 12);
	for (int i = 0; i < 12; i++) {
		t1[i] = W0[i] + D1[i] / 64.0f / 1000.0f;
		t2[i] = W0[i] + D2[i] / 64.0f / 1000.0f;
	}
	sce_job(&t, 3, 1.0);
	run3(&t, vt, out);
	assert_close(out, reftiny, 12);
	/* the default select_topk is 1.0 */
	tj_init(&t, "sce", 4, 0);
	run3(&t, v, out);
	assert_close(out, ref10, 12);
}

/* Degenerate selection: the base, with the tensor's own shape (mergekit
 * 0.1.4 returned an [n, ...] tensor here). */
static void test_sce_degenerate(void **st)
{
	const void *same[3] = { W0, M1, M1 }, *v[4] = { W0, M1, M2, M3 };
	float out[12];
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	sce_job(&t, 3, 0.5);           /* identical task vectors: var = 0, k = 0 */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.ndim, 2);
	assert_int_equal(po.out.shape[0], 3);
	assert_int_equal(po.out.shape[1], 4);
	assert_int_equal(po.npasses, 3);
	run3(&t, same, out);
	assert_memory_equal(out, W0, sizeof(out));
	sce_job(&t, 4, 0.0);           /* select_topk <= 0 */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.npasses, 0);
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
	sce_job(&t, 4, -2.0);
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
	sce_job(&t, 4, 0.05);          /* int(12 * 0.05) = 0 */
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
	sce_job(&t, 4, 0.09);          /* int(12 * 0.09) = 1: one element kept */
	run3(&t, v, out);
	{
		int changed = 0;
		for (int i = 0; i < 12; i++)
			changed += out[i] != W0[i];
		assert_int_equal(changed, 1);
	}
	/* base alone */
	sce_job(&t, 1, 0.5);
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
}

/* Exact top-k with ties: variances from a few levels, so many tie; the
 * kept set must be the k largest with lower indices first among equals,
 * i.e. a stable sort by (-var, index). */
struct vi {
	float var;
	uint32_t idx;
};

static int cmp_vi(const void *x, const void *y)
{
	const struct vi *a = x, *b = y;
	if (a->var != b->var)
		return a->var > b->var ? -1 : 1;
	return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (uint32_t)(rs >> 32);
}

static float var_ref(float a, float b)
{
	/* two inputs: Welford in float64 */
	double mean = 0, m2 = 0, x, dd, d2;
	x = a; dd = x - mean; mean += dd / 1; d2 = x - mean; m2 += dd * d2;
	x = b; dd = x - mean; mean += dd / 2; d2 = x - mean; m2 += dd * d2;
	return (float)(m2 / 2);
}

static void test_sce_topk_ties(void **st)
{
	enum { R = 61, C = 157, N = R * C };
	float *b = calloc(N, 4), *x1 = malloc(N * 4), *x2 = malloc(N * 4), *out = malloc(N * 4),
	      *alt = malloc(N * 4);
	struct vi *vi = malloc(N * sizeof(*vi));
	const void *v[3] = { b, x1, x2 };
	static const double fr[] = { 0.5, 0.3, 0.77, 0.013 };
	static const uint64_t chunks[] = { 1, 7, C, 4096, 4097, 0 };
	struct tj t;

	assert_true(b && x1 && x2 && out && alt && vi);
	for (int i = 0; i < N; i++) {
		/* levels of 1/8: variance takes few distinct values, some zero */
		x1[i] = (float)((int)(rnd() % 9) - 4) / 8.0f;
		x2[i] = (float)((int)(rnd() % 9) - 4) / 8.0f;
		b[i] = 0.0f;
	}
	for (size_t f = 0; f < sizeof(fr) / sizeof(fr[0]); f++) {
		uint64_t nz = 0, k;
		sce_job(&t, 3, fr[f]);
		t.in[0] = t.in[1] = t.in[2] = td(MK_DT_F32, 2, R, C);
		assert_int_equal(run_job(&t, MK_DT_F32, v, 0, out, NULL), 0);
		for (int i = 0; i < N; i++) {
			vi[i].var = var_ref(x1[i], x2[i]);
			vi[i].idx = (uint32_t)i;
			nz += vi[i].var != 0;
		}
		k = (uint64_t)((float)nz * (float)fr[f]);
		qsort(vi, N, sizeof(*vi), cmp_vi);
		/* an element is kept iff its task vectors survive: with b = 0
		 * and x1 != x2 wherever var != 0, a kept element differs from
		 * the base unless both deltas are erased (never: the majority
		 * sign agrees with at least one nonzero delta) */
		{
			char *keep = calloc(N, 1);
			assert_non_null(keep);
			for (uint64_t j = 0; j < k; j++)
				keep[vi[j].idx] = 1;
			for (int i = 0; i < N; i++)
				if ((out[i] != 0.0f) != keep[i])
					fail_msg("topk %.3f: element %d kept %d, expected %d",
						 fr[f], i, out[i] != 0.0f, keep[i]);
			free(keep);
		}
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			memset(alt, 0x55, N * 4);
			assert_int_equal(run_job(&t, MK_DT_F32, v, chunks[c], alt, NULL), 0);
			assert_memory_equal(out, alt, N * 4);
		}
	}
	free(b);
	free(x1);
	free(x2);
	free(out);
	free(alt);
	free(vi);
}

/* Two models, nothing selected (sce's fast path): bitwise the
 * description's arithmetic, written out here element by element (tau^2
 * sums over mk_fsum's blocks, omega, the sign election, num / den), on
 * deltas with zeros, both signs and opposite pairs, for any chunking. */
static void test_sce_two_models_bits(void **st)
{
	enum { N = 3 * 4096 + 77 };
	float *b = malloc(N * 4), *x[2] = { malloc(N * 4), malloc(N * 4) };
	float *ref = malloc(N * 4), *got = malloc(N * 4), om[2];
	const void *v[3] = { b, x[0], x[1] };
	struct mk_fsum q[2] = { { 0 } };
	double od[2], E = 0.0;
	struct tj t;

	assert_true(b && x[0] && x[1] && ref && got);
	for (int e = 0; e < N; e++) {
		b[e] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
		for (int j = 0; j < 2; j++) {
			unsigned r = rnd() % 8;
			x[j][e] = r == 0 ? b[e] : b[e] + ((float)(rnd() % 2001) - 1000.0f) * 1e-4f;
		}
		if (e % 97 == 0)   /* opposite deltas: sum 0 */
			x[1][e] = b[e] - (x[0][e] - b[e]);
	}
	for (int e = 0; e < N; e++) {
		for (int j = 0; j < 2; j++) {
			float d = x[j][e] - b[e], sq = d * d;
			q[j].part += (double)sq;
			mk_fsum_step(&q[j], (uint64_t)e + 1);
		}
	}
	for (int j = 0; j < 2; j++) {
		od[j] = mk_fsum_value(&q[j]) / (double)N;
		E += od[j];
	}
	for (int j = 0; j < 2; j++)
		om[j] = fabs(E) < 1e-6 ? 0.5f : (float)(od[j] / E);
	for (int e = 0; e < N; e++) {
		float d[2], sw = 0, num = 0, den = 0;
		for (int j = 0; j < 2; j++) {
			d[j] = x[j][e] - b[e];
			sw = sw + d[j];
		}
		for (int j = 0; j < 2; j++) {
			bool agree = sw >= 0 ? d[j] > 0 : d[j] < 0;
			float ew = om[j] * (agree ? 1.0f : 0.0f), p = d[j] * ew;
			num = num + p;
			den = den + ew;
		}
		if (den < 1e-6f)
			den = 1e-6f;
		ref[e] = b[e] + num / den;
	}
	sce_job(&t, 3, 1.0);
	for (int i = 0; i < 3; i++)
		t.in[i] = td(MK_DT_F32, 2, N, 1);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, got, NULL), 0);
	assert_memory_equal(ref, got, N * 4);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 1001, got, NULL), 0);
	assert_memory_equal(ref, got, N * 4);
	free(b);
	free(x[0]);
	free(x[1]);
	free(ref);
	free(got);
}

/* ------------------------------------------------------- ram, ramplus_tl */

static void test_ram_appendix(void **st)
{
	static const float ram[12] = { 0.421875f, -0.25f, 1.046875f, 0.3828125f, -0.90625f, 0.375f,
				       -0.0625f, 2.0f, 1.859375f, -1.171875f, 0.578125f, -0.890625f };
	static const float rp1[12] = { 0.4203125f, -0.25f, 1.0478125f, 0.3828125f, -0.909375f,
				       0.375f, -0.06375f, 2.0f, 1.859375f, -1.171875f, 0.5771875f,
				       -0.8984375f };
	static const float rp2[12] = { 0.3828125f, -0.25f, 1.0703125f, 0.3828125f, -0.984375f,
				       0.375f, -0.09375f, 2.0f, 1.859375f, -1.171875f, 0.5546875f,
				       -1.0859375f };
	const void *v[3] = { W0, R1, R2 };
	float out[12];
	struct tj t;

	tj_init(&t, "ram", 3, 0);
	run3(&t, v, out);              /* epsilon default 1e-5 */
	assert_close(out, ram, 12);
	set_g(&t, "epsilon", mk_pval_float(1e-5));
	run3(&t, v, out);
	assert_close(out, ram, 12);
	tj_init(&t, "ramplus_tl", 3, 0);
	run3(&t, v, out);              /* defaults r 0.1, alpha 0.2, eps 1e-5 */
	assert_close(out, rp1, 12);
	set_g(&t, "r", mk_pval_float(0.5));
	set_g(&t, "alpha", mk_pval_float(1.0));
	run3(&t, v, out);
	assert_close(out, rp2, 12);
	/* epsilon large: nothing active -> base */
	tj_init(&t, "ram", 3, 0);
	set_g(&t, "epsilon", mk_pval_float(10.0));
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
	/* base alone */
	tj_init(&t, "ramplus_tl", 1, 0);
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
}

/* ramplus_tl's statistics pass on 2, 3 and 7 threads (tasks of 8192
 * elements, each counting apart): the same bits as one thread, at chunks
 * of the whole tensor and of odd sizes.  x1 is active almost everywhere
 * and x2 seldom, so x1's boost (rho = shared / unique, under alpha) and
 * with it every element only x1 moves depends on the exact counts. */
static void test_ramplus_threads(void **st)
{
	enum { R = 3529, C = 7, N = R * C };    /* three tasks and a part */
	static float z[N], x1[N], x2[N], one[N], alt[N];
	const void *v[3] = { z, x1, x2 };
	static const unsigned threads[] = { 2, 3, 7 };
	static const uint64_t chunks[] = { 0, 5000, 8193 };
	struct tj t;

	(void)st;
	for (int i = 0; i < N; i++) {
		x1[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
		x2[i] = rnd() % 9 == 0 ? ((float)(rnd() % 2001) - 1000.0f) * 1e-3f : 0.0f;
	}
	tj_init(&t, "ramplus_tl", 3, 0);
	t.in[0] = t.in[1] = t.in[2] = td(MK_DT_F32, 2, R, C);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, one, NULL), 0);
	for (size_t q = 0; q < sizeof(threads) / sizeof(threads[0]); q++)
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			tj_threads = threads[q];
			memset(alt, 0x55, sizeof(alt));
			assert_int_equal(run_job(&t, MK_DT_F32, v, chunks[c], alt, NULL), 0);
			tj_threads = 0;
			assert_memory_equal(one, alt, sizeof(alt));
		}
}

/* ramplus_tl, epsilon 0 and an input without shared elements: mergekit's
 * 0/0 lambda would be NaN; mk takes rho = 0. */
static void test_ramplus_eps0(void **st)
{
	float x1[12], x2[12], out[12];
	const void *v[3] = { W0, x1, x2 };
	struct tj t;

	for (int i = 0; i < 12; i++) {
		x1[i] = W0[i] + (i < 6 ? 0.5f : 0.0f);   /* unique to x1 */
		x2[i] = W0[i];                           /* never active */
	}
	tj_init(&t, "ramplus_tl", 3, 0);
	set_g(&t, "epsilon", mk_pval_float(0.0));
	run3(&t, v, out);
	for (int i = 0; i < 12; i++) {
		assert_false(isnan(out[i]));
		/* x1: shared 0, unique 6 -> rho 0 -> lambda 1 */
		assert_true(out[i] == W0[i] + (i < 6 ? 0.5f : 0.0f));
	}
}

/* Two models (ram's fast path, the base in the middle): bitwise the
 * description's per-element rule written out here, over every triple of
 * (base, model, model) values from a set with signed zeros, values on
 * both sides of epsilon, infinities and NaN, for three epsilons. */
static void test_ram_two_models_bits(void **st)
{
	static const float vals[] = { 0.0f, -0.0f, 1e-6f, -1e-6f, 3e-5f, 0.5f, -0.5f,
				      INFINITY, -INFINITY, NAN };
	static const double epss[] = { 1e-5, 0.0, -1.0 };
	enum { V = sizeof(vals) / sizeof(vals[0]), N = V * V * V };
	float b[N], x0[N], x1[N], ref[N], got[N];
	const void *v[3] = { x0, b, x1 };
	struct tj t;

	for (int e = 0; e < N; e++) {
		b[e] = vals[e % V];
		x0[e] = vals[e / V % V];
		x1[e] = vals[e / (V * V)];
	}
	for (size_t k = 0; k < sizeof(epss) / sizeof(epss[0]); k++) {
		float eps = (float)epss[k];
		for (int e = 0; e < N; e++) {
			float d[2] = { x0[e] - b[e], x1[e] - b[e] }, acc = 0, first = 0;
			unsigned c = 0;
			for (int j = 0; j < 2; j++)
				if (fabsf(d[j]) > eps) {
					if (!c)
						first = d[j];
					c++;
				}
			if (c == 1)
				acc = first;
			else if (c == 2)
				for (int j = 0; j < 2; j++)
					acc = acc + d[j] / 2.0f;
			ref[e] = b[e] + acc;
		}
		tj_init(&t, "ram", 3, 1);
		for (int i = 0; i < 3; i++)
			t.in[i] = td(MK_DT_F32, 1, N, 0);
		set_g(&t, "epsilon", mk_pval_float(epss[k]));
		assert_int_equal(run_job(&t, MK_DT_F32, v, 0, got, NULL), 0);
		assert_memory_equal(ref, got, sizeof(got));
	}
}

/* -------------------------------------------------------- arcee_fusion */

/* mergekit's importance in float32 (softmax by torch's max-subtract,
 * float32 sums in element order): the reference the 1% rule is about. */
static void importance_f32(const float *a, const float *b, size_t rows, size_t L, float *imp)
{
	for (size_t r = 0; r < rows; r++) {
		const float *x = b + r * L, *y = a + r * L;
		float mx = x[0], my = y[0], sx = 0, sy = 0, kl = 0;
		for (size_t j = 1; j < L; j++) {
			if (x[j] > mx)
				mx = x[j];
			if (y[j] > my)
				my = y[j];
		}
		for (size_t j = 0; j < L; j++) {
			sx += expf(x[j] - mx);
			sy += expf(y[j] - my);
		}
		for (size_t j = 0; j < L; j++) {
			float p = expf(x[j] - mx) / sx + 1e-8f, q = expf(y[j] - my) / sy + 1e-8f;
			kl += p * logf(p / q);
		}
		for (size_t j = 0; j < L; j++)
			imp[r * L + j] = fabsf(x[j] - y[j]) * kl;
	}
}

static int cmp_f(const void *x, const void *y)
{
	float a = *(const float *)x, b = *(const float *)y;
	return a < b ? -1 : a > b;
}

static float threshold_ref(const float *imp, size_t n)
{
	float *s = malloc(n * sizeof(float)), q1, med, q3, thr;
	assert_non_null(s);
	memcpy(s, imp, n * sizeof(float));
	qsort(s, n, sizeof(float), cmp_f);
	q1 = s[(size_t)(0.25f * (float)(n - 1))];
	med = s[(size_t)(0.5f * (float)(n - 1))];
	q3 = s[(size_t)(0.75f * (float)(n - 1))];
	thr = med + 1.5f * (q3 - q1);
	free(s);
	return thr;
}

/* Every element where out differs from ref's choice must have an
 * importance within 1% of the threshold. */
static void check_fusion(const float *a, const float *b, const float *out, const float *imp,
			 float thr, size_t n, size_t *ndiff)
{
	*ndiff = 0;
	for (size_t i = 0; i < n; i++) {
		float want = imp[i] >= thr ? a[i] + (b[i] - a[i]) : a[i];
		if (out[i] == want)
			continue;
		(*ndiff)++;
		if (!(fabsf(imp[i] - thr) <= 0.01f * fabsf(thr)))
			fail_msg("element %zu: importance %.9g, threshold %.9g, got %.9g want %.9g",
				 i, imp[i], thr, out[i], want);
	}
}

static void test_arcee_fusion_appendix(void **st)
{
	static const float ref[12] = { 0.5f, -0.25f, 1.0f, 0.125f, -0.75f, 0.375f, 0.0f, 2.0f,
				       1.90625f, -1.25f, 0.625f, -0.84375f };
	static const float imp_ref[12] = { 0.0008686306f, 0.001882033f, 0.0004343153f, 0.0027506636f,
					   0.0008401231f, 0.001344197f, 0.00033604924f, 0.0f,
					   0.007875018f, 0.0021201973f, 0.0036346237f, 0.006663477f };
	const float thr_ref = 0.0048187193f;
	const void *v[2] = { W0, M1 };
	float out[12], imp[12], q[3];
	struct mk_job job;
	struct tj t;
	size_t nd;

	tj_init(&t, "arcee_fusion", 2, 0);
	run3(&t, v, out);
	assert_close(out, ref, 12);
	/* mk's threshold vs mergekit's; importance reference in float32 */
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, out, &job), 0);
	{
		float thr = mk_arcee_fusion_threshold(&job, q);
		/* mergekit sums KL in float32: ~3e-6 relative here */
		if (!(fabsf(thr - thr_ref) <= 1e-4f * thr_ref))
			fail_msg("threshold %.9g, mergekit %.9g", thr, thr_ref);
		if (getenv("MK_TEST_VERBOSE"))
			print_message("threshold %.9g, mergekit %.9g\n", thr, thr_ref);
	}
	mk_job_release(&job);
	importance_f32(W0, M1, 3, 4, imp);
	for (int i = 0; i < 12; i++)
		if (!(fabsf(imp[i] - imp_ref[i]) <= 1e-4f * imp_ref[i] + 1e-12f))
			fail_msg("importance %d: %.9g vs %.9g", i, imp[i], imp_ref[i]);
	check_fusion(W0, M1, out, imp_ref, thr_ref, 12, &nd);
	assert_int_equal(nd, 0);
	/* identical inputs: threshold 0, every element "taken" = the base */
	{
		const void *same[2] = { W0, W0 };
		run3(&t, same, out);
		assert_memory_equal(out, W0, sizeof(out));
	}
	/* one input: copied */
	tj_init(&t, "arcee_fusion", 1, 0);
	run3(&t, v, out);
	assert_memory_equal(out, W0, sizeof(out));
}

/* A larger matrix: mk vs the float32 mergekit-like reference, differing
 * only within 1% of the threshold; chunk-size independence. */
static void test_arcee_fusion_random(void **st)
{
	enum { R = 53, C = 211, N = R * C };
	float *a = malloc(N * 4), *b = malloc(N * 4), *out = malloc(N * 4), *alt = malloc(N * 4),
	      *imp = malloc(N * 4);
	const void *v[2] = { a, b };
	static const uint64_t chunks[] = { 1, 7, C, 4096, 4097, 0 };
	size_t nd, taken = 0;
	struct tj t;
	float thr;

	assert_true(a && b && out && alt && imp);
	for (int i = 0; i < N; i++) {
		a[i] = ((float)(rnd() % 20001) - 10000.0f) * 1e-4f;
		b[i] = a[i] + ((float)(rnd() % 2001) - 1000.0f) * 1e-5f * (i % 5 == 0 ? 10.0f : 1.0f);
	}
	tj_init(&t, "arcee_fusion", 2, 0);
	t.in[0] = t.in[1] = td(MK_DT_F32, 2, R, C);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, out, NULL), 0);
	importance_f32(a, b, R, C, imp);
	thr = threshold_ref(imp, N);
	check_fusion(a, b, out, imp, thr, N, &nd);
	for (int i = 0; i < N; i++)
		taken += out[i] != a[i];
	if (getenv("MK_TEST_VERBOSE"))
		print_message("arcee_fusion: %zu of %d taken, %zu differ from float32 reference\n",
			      taken, N, nd);
	assert_true(taken > N / 100 && taken < N / 2);
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		memset(alt, 0x55, N * 4);
		assert_int_equal(run_job(&t, MK_DT_F32, v, chunks[c], alt, NULL), 0);
		assert_memory_equal(out, alt, N * 4);
	}
	/* the first pass's whole rows on 2, 3 and 7 threads (four rows a
	 * task: 14 tasks for the whole tensor), at chunks of whole rows and
	 * of rows cut across chunks: the same bits as one thread */
	static const unsigned threads[] = { 2, 3, 7 };
	for (size_t q = 0; q < sizeof(threads) / sizeof(threads[0]); q++)
		for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
			tj_threads = threads[q];
			memset(alt, 0x55, N * 4);
			assert_int_equal(run_job(&t, MK_DT_F32, v, chunks[c], alt, NULL), 0);
			tj_threads = 0;
			assert_memory_equal(out, alt, N * 4);
		}
	/* 1-D: one row */
	t.in[0] = t.in[1] = td(MK_DT_F32, 1, N, 0);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, out, NULL), 0);
	importance_f32(a, b, 1, N, imp);
	thr = threshold_ref(imp, N);
	check_fusion(a, b, out, imp, thr, N, &nd);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 4097, alt, NULL), 0);
	assert_memory_equal(out, alt, N * 4);
	free(a);
	free(b);
	free(out);
	free(alt);
	free(imp);
}

/* Over 1,000,000 elements: the quantiles come from a 1,000,000 sample
 * (with replacement).  Same seed -> bit-identical for any chunking;
 * another seed -> another sample; the sampled threshold is close to the
 * exact one (its quantiles within a few sampling standard errors). */
static void test_arcee_fusion_sampled(void **st)
{
	enum { R = 1100, C = 1000, N = R * C };
	float *a = malloc(N * 4), *b = malloc(N * 4), *o1 = malloc(N * 4), *o2 = malloc(N * 4),
	      *imp = malloc(N * 4);
	const void *v[2] = { a, b };
	struct mk_job job;
	float q1[3], q2[3], thr1, thr2, thr_exact;
	struct tj t;
	size_t nd;

	assert_true(a && b && o1 && o2 && imp);
	for (int i = 0; i < N; i++) {
		a[i] = ((float)(rnd() % 20001) - 10000.0f) * 1e-4f;
		b[i] = a[i] + ((float)(rnd() % 2001) - 1000.0f) * 1e-5f;
	}
	tj_init(&t, "arcee_fusion", 2, 0);
	t.in[0] = t.in[1] = td(MK_DT_F32, 2, R, C);
	t.d.seed = 42;
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, o1, &job), 0);
	thr1 = mk_arcee_fusion_threshold(&job, q1);
	mk_job_release(&job);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 65537, o2, NULL), 0);
	assert_memory_equal(o1, o2, (size_t)N * 4);
	t.d.seed = 43;
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, o2, &job), 0);
	thr2 = mk_arcee_fusion_threshold(&job, q2);
	mk_job_release(&job);
	assert_true(thr1 != thr2);
	importance_f32(a, b, R, C, imp);
	thr_exact = threshold_ref(imp, N);
	if (getenv("MK_TEST_VERBOSE"))
		print_message("sampled thresholds %.9g %.9g, exact %.9g\n", thr1, thr2, thr_exact);
	/* quantile standard error at 1e6 samples is ~1e-3 in rank: allow 2% */
	assert_true(fabsf(thr1 - thr_exact) <= 0.02f * thr_exact);
	assert_true(fabsf(thr2 - thr_exact) <= 0.02f * thr_exact);
	/* the mask is the threshold's: outputs differ from the exact-threshold
	 * choice only on elements between the two thresholds */
	check_fusion(a, b, o1, imp, thr1, N, &nd);
	free(a);
	free(b);
	free(o1);
	free(o2);
	free(imp);
}

/* A row a chunk holds whole has its KL summed in pass 0, reusing the
 * softmax's exp terms; a row split over chunks takes passes 0 and 1 one
 * element at a time.  Both must give the same bits, also for rows with a
 * NaN first, an infinite maximum, a repeated maximum or the maximum last. */
static void test_arcee_fusion_rows_nonfinite(void **st)
{
	enum { R = 6, C = 9, N = R * C };
	float a[N], b[N], whole[N], split[N];
	const void *v[2] = { a, b };
	static const uint64_t chunks[] = { 1, 4, 13 };
	struct tj t;

	for (int i = 0; i < N; i++) {
		a[i] = ((float)(rnd() % 2001) - 1000.0f) * 1e-3f;
		b[i] = a[i] + ((float)(rnd() % 2001) - 1000.0f) * 1e-4f;
	}
	a[0] = NAN;                  /* row 0: NaN first */
	b[C + 3] = INFINITY;         /* row 1: infinite maximum */
	a[2 * C + 5] = -INFINITY;
	a[3 * C + 2] = a[3 * C + 6] = 3.0f;   /* row 3: repeated maximum */
	b[4 * C + C - 1] = 5.0f;     /* row 4: maximum last */
	tj_init(&t, "arcee_fusion", 2, 0);
	t.in[0] = t.in[1] = td(MK_DT_F32, 2, R, C);
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, whole, NULL), 0);
	for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
		memset(split, 0x55, sizeof(split));
		assert_int_equal(run_job(&t, MK_DT_F32, v, chunks[k], split, NULL), 0);
		assert_memory_equal(whole, split, sizeof(split));
	}
}

/* ---------------------------------------------- rules, errors, chunking */

static void test_output_rules_misc(void **st)
{
	static const struct {
		const char *method;
		size_t n;
		enum mk_dtype in[3], out, compute;
		unsigned passes;
	} cases[] = {
		{ "ram", 3, { MK_DT_BF16, MK_DT_BF16, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32, 0 },
		{ "ram", 2, { MK_DT_F64, MK_DT_F64 }, MK_DT_F64, MK_DT_F64, 0 },
		{ "ram", 2, { MK_DT_F16, MK_DT_BF16 }, MK_DT_F32, MK_DT_F32, 0 },
		{ "ramplus_tl", 3, { MK_DT_BF16, MK_DT_BF16, MK_DT_BF16 }, MK_DT_F32, MK_DT_F32, 1 },
		{ "ramplus_tl", 2, { MK_DT_F16, MK_DT_F16 }, MK_DT_F32, MK_DT_F32, 1 },
		{ "ramplus_tl", 2, { MK_DT_F64, MK_DT_F64 }, MK_DT_F64, MK_DT_F64, 1 },
		{ "sce", 3, { MK_DT_BF16, MK_DT_BF16, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32, 1 },
		{ "sce", 2, { MK_DT_F64, MK_DT_F64 }, MK_DT_F64, MK_DT_F64, 1 },
		{ "nearswap", 2, { MK_DT_BF16, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32, 0 },
		{ "nearswap", 2, { MK_DT_F16, MK_DT_F32 }, MK_DT_F32, MK_DT_F32, 0 },
		{ "arcee_fusion", 2, { MK_DT_BF16, MK_DT_BF16 }, MK_DT_F32, MK_DT_F32, 4 },
		{ "arcee_fusion", 2, { MK_DT_F16, MK_DT_F16 }, MK_DT_F32, MK_DT_F32, 4 },
		{ "arcee_fusion", 2, { MK_DT_F64, MK_DT_F64 }, MK_DT_F64, MK_DT_F64, 4 },
		{ "arcee_fusion", 1, { MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32, 0 },
	};
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		tj_init(&t, cases[k].method, cases[k].n, 0);
		for (size_t i = 0; i < cases[k].n; i++)
			t.in[i].dtype = cases[k].in[i];
		if (!strcmp(cases[k].method, "nearswap"))
			set_g(&t, "t", mk_pval_float(0.5));
		if (mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err))
			fail_msg("case %zu: %s", k, err.msg);
		if (po.out.dtype != cases[k].out || po.compute != cases[k].compute ||
		    po.npasses != cases[k].passes)
			fail_msg("case %zu (%s): out %s compute %s passes %u", k, cases[k].method,
				 mk_dtype_name(po.out.dtype), mk_dtype_name(po.compute), po.npasses);
		assert_int_equal(po.out.ndim, 2);
		assert_int_equal(po.out.shape[0], 3);
		assert_int_equal(po.out.shape[1], 4);
	}
	/* select_topk < 1: three passes */
	sce_job(&t, 3, 0.3);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.npasses, 3);
	/* base alone: a byte copy of the base, no pass */
	{
		static const char *m[] = { "sce", "ram", "ramplus_tl", "nearswap", "arcee_fusion" };
		for (size_t k = 0; k < 5; k++) {
			struct mk_job job;
			tj_init(&t, m[k], 1, 0);
			t.in[0].dtype = MK_DT_BF16;
			if (!strcmp(m[k], "nearswap"))
				set_g(&t, "t", mk_pval_float(0.5));
			if (mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err))
				fail_msg("%s: %s", m[k], err.msg);
			assert_int_equal(job.npasses, 0);
			assert_int_equal(job.copy_input, 0);
			assert_true(job.byte_copy);
			mk_job_release(&job);
		}
	}
	/* arcee_fusion rectifies embeddings; the others need one shape */
	tj_init(&t, "arcee_fusion", 2, 0);
	t.d.is_embed = true;
	t.in[1] = td(MK_DT_F32, 2, 5, 4);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.shape[0], 3);
	{
		static const char *m[] = { "sce", "ram", "ramplus_tl", "nearswap" };
		for (size_t k = 0; k < 4; k++) {
			tj_init(&t, m[k], 2, 0);
			t.d.is_embed = true;
			t.in[1] = td(MK_DT_F32, 2, 5, 4);
			if (!strcmp(m[k], "nearswap"))
				set_g(&t, "t", mk_pval_float(0.5));
			assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err),
					 -MK_EMISMATCH);
			assert_non_null(strstr(err.msg, "model-b"));
			assert_non_null(strstr(err.msg, "[5, 4]"));
		}
	}
	/* non-float inputs */
	tj_init(&t, "ram", 2, 0);
	t.in[1].dtype = MK_DT_I32;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EUNSUPPORTED);
}

static void test_errors_misc(void **st)
{
	static const char *m[] = { "sce", "ram", "ramplus_tl", "nearswap", "arcee_fusion" };
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	/* every one needs a base */
	for (size_t k = 0; k < 5; k++) {
		tj_init(&t, m[k], 2, -1);
		if (!strcmp(m[k], "nearswap"))
			set_g(&t, "t", mk_pval_float(0.5));
		assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
		assert_non_null(strstr(err.msg, "needs a base model"));
	}
	/* nearswap: t required */
	tj_init(&t, "nearswap", 2, 0);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "'t'"));
	/* nearswap, arcee_fusion: one other model at most */
	tj_init(&t, "nearswap", 3, 0);
	set_g(&t, "t", mk_pval_float(0.5));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "at most 2"));
	tj_init(&t, "arcee_fusion", 3, 0);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "at most 2"));
	/* wrong parameter types */
	tj_init(&t, "sce", 3, 0);
	set_g(&t, "select_topk", mk_pval_bool(true));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "select_topk"));
	tj_init(&t, "ramplus_tl", 3, 0);
	set_g(&t, "alpha", mk_pval_bool(true));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "alpha"));
	/* the declared parameters and defaults */
	{
		static const struct {
			const char *m, *p;
			double def;
		} defs[] = {
			{ "sce", "select_topk", 1.0 }, { "ram", "epsilon", 1e-5 },
			{ "ramplus_tl", "r", 0.1 }, { "ramplus_tl", "alpha", 0.2 },
			{ "ramplus_tl", "epsilon", 1e-5 },
		};
		for (size_t k = 0; k < sizeof(defs) / sizeof(defs[0]); k++) {
			const struct mk_method *mm = mk_method_find(defs[k].m);
			int p = mk_method_param_index(mm, defs[k].p);
			assert_true(p >= 0);
			assert_true(mm->params[p].def.set);
			assert_true(mm->params[p].def.f == defs[k].def);
		}
		assert_true(mk_method_param_index(mk_method_find("sce"), "int8_mask") >= 0);
		assert_int_equal(mk_method_param_index(mk_method_find("sce"), "weight"), -1);
		assert_int_equal(mk_method_find("arcee_fusion")->nparams, 0);
		assert_true(mk_method_find("nearswap")->params[0].flags & MK_PF_REQUIRED);
	}
}

#define CR 37
#define CC 300
#define CN (CR * CC)

static float frand(void)
{
	return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0);
}

static void check_chunking(struct tj *t, const void *const *v, size_t esz)
{
	static const uint64_t sizes[] = { 1, 7, CC, 4096, 4097, CN };
	char *ref = malloc(CN * esz), *got = malloc(CN * esz);

	assert_non_null(ref);
	assert_non_null(got);
	assert_int_equal(run_job(t, MK_DT_COUNT, v, CN, ref, NULL), 0);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		memset(got, 0x55, CN * esz);
		assert_int_equal(run_job(t, MK_DT_COUNT, v, sizes[k], got, NULL), 0);
		if (memcmp(ref, got, CN * esz))
			fail_msg("%s: chunks of %llu elements change the output", t->m->name,
				 (unsigned long long)sizes[k]);
	}
	free(ref);
	free(got);
}

static void test_chunk_independence_misc(void **st)
{
	float *f[4];
	double *d[4];
	const void *vf[4], *vd[4];
	static const char *m[] = { "sce", "sce", "ram", "ramplus_tl", "nearswap", "arcee_fusion" };
	struct tj t;

	for (int i = 0; i < 4; i++) {
		f[i] = malloc(CN * sizeof(float));
		d[i] = malloc(CN * sizeof(double));
		assert_true(f[i] && d[i]);
		vf[i] = f[i];
		vd[i] = d[i];
	}
	for (int e = 0; e < CN; e++) {
		f[0][e] = frand();
		for (int i = 1; i < 4; i++)   /* some deltas below epsilon */
			f[i][e] = f[0][e] + (rnd() % 4 ? frand() * 0.01f : 0.0f);
		for (int i = 0; i < 4; i++)
			d[i][e] = (double)f[i][e] + 1e-10 * frand();
	}
	for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
		size_t n = !strcmp(m[k], "nearswap") || !strcmp(m[k], "arcee_fusion") ? 2 : 4;
		for (int dt = 0; dt < 2; dt++) {
			tj_init(&t, m[k], n, 0);
			for (size_t i = 0; i < n; i++)
				t.in[i] = td(dt ? MK_DT_F64 : MK_DT_F32, 2, CR, CC);
			if (!strcmp(m[k], "nearswap"))
				set_g(&t, "t", mk_pval_float(0.004));
			if (k == 1)
				set_g(&t, "select_topk", mk_pval_float(0.37));
			if (!strcmp(m[k], "ram") || !strcmp(m[k], "ramplus_tl"))
				set_g(&t, "epsilon", mk_pval_float(1e-3));
			check_chunking(&t, dt ? vd : vf, dt ? 8 : 4);
		}
	}
	for (int i = 0; i < 4; i++) {
		free(f[i]);
		free(d[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nearswap_appendix),
		cmocka_unit_test(test_nearswap_bits),
		cmocka_unit_test(test_sce_appendix),
		cmocka_unit_test(test_sce_degenerate),
		cmocka_unit_test(test_sce_topk_ties),
		cmocka_unit_test(test_sce_two_models_bits),
		cmocka_unit_test(test_ram_appendix),
		cmocka_unit_test(test_ram_two_models_bits),
		cmocka_unit_test(test_ramplus_threads),
		cmocka_unit_test(test_ramplus_eps0),
		cmocka_unit_test(test_arcee_fusion_appendix),
		cmocka_unit_test(test_arcee_fusion_random),
		cmocka_unit_test(test_arcee_fusion_sampled),
		cmocka_unit_test(test_arcee_fusion_rows_nonfinite),
		cmocka_unit_test(test_output_rules_misc),
		cmocka_unit_test(test_errors_misc),
		cmocka_unit_test(test_chunk_independence_misc),
	};
	return cmocka_run_group_tests(tests, setup_all, NULL);
}
