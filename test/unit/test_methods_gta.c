/* test_methods_gta.c - the generalized task arithmetic family (gta.c):
 * ties, dare_linear, dare_ties, breadcrumbs, breadcrumbs_ties, della,
 * della_linear (task_arithmetic itself: test_methods.c).
 *
 * Deterministic references: mergekit's float32 outputs on the inputs of
 * method_harness.h and, where 0.1.5 changed a kernel (breadcrumbs'
 * n_top = 0 case), vectors from mergekit 0.1.5's own sparsify.py and
 * get_mask run on the same inputs.  Metric: max |mk - ref| <=
 * 1e-6 * max(1, max |ref|).  Random methods: statistics (keep fractions,
 * L1 rescaling, DELLA's keep rate by rank: test_random_statistics,
 * test_della_ranks) with fixed seeds, so every run is the same.
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
#include "mk/device.h"
#include "mk/method.h"
#include "method_harness.h"
#include "methods/gta.h"
#include "methods/rng.h"

/* ------------------------------------------------------------ fixtures */

static float Z12[12], E1[12];

static int setup_inputs(void **st)
{
	fixtures_init();
	for (int i = 0; i < 12; i++) {
		E1[i] = D1[i] / 64.0f;      /* D1 over a zero base */
		Z12[i] = 0.0f;
	}
	return 0;
}

/* Same parameter for every non-base input. */
static void set_all(struct tj *t, const char *name, double v)
{
	for (size_t i = 0; i < t->d.ninputs; i++)
		if ((int)i != t->d.base)
			set_in(t, i, name, mk_pval_float(v));
}

static void set_shape(struct tj *t, enum mk_dtype dt, unsigned ndim, const uint64_t *shape)
{
	for (size_t i = 0; i < t->d.ninputs; i++) {
		t->in[i].dtype = dt;
		t->in[i].ndim = ndim;
		for (unsigned k = 0; k < ndim; k++)
			t->in[i].shape[k] = shape[k];
	}
}

/* The harness's tj_run with apply's chunks last to first. */
static int run_job(struct tj *t, const void *const *views, uint64_t chunk, void *out,
		   unsigned *npasses)
{
	struct mk_err err;
	int rc = tj_run(t, MK_DT_COUNT, views, chunk, out, true, NULL, npasses, &err);

	if (rc)
		print_message("%s\n", err.msg);
	return rc;
}

#define assert_close(got, ref, n) tj_assert_close(got, ref, n, 1e-6)

/* base W0, M1/M2/M3 with weights 1.0/0.8/0.6 (the GTA reference cases). */
static void three(struct tj *t, const char *method)
{
	tj_init(t, method, 4, 0);
	set_in(t, 1, "weight", mk_pval_float(1.0));
	set_in(t, 2, "weight", mk_pval_float(0.8));
	set_in(t, 3, "weight", mk_pval_float(0.6));
}

static const void *const V3[4] = { W0, M1, M2, M3 };

/* ------------------------------------------------ reference values: ties */

static void test_ties_appendix(void **st)
{
	static const float ref_norm[12] = { 0.5f, -0.453125f, 0.8125f, 0.4114583f, -1.03125f,
		0.5839844f, -0.234375f, 2.0f, 1.8645834f, -0.984375f, 0.8183594f, -0.8645834f };
	static const float ref_nonorm[12] = { 0.5f, -0.453125f, 0.8875f, 0.8125f, -0.91875f,
		0.709375f, -0.1875f, 2.0f, 2.15625f, -1.0375f, 0.934375f, -1.15625f };
	static const float ref_rescale[12] = { 0.5f, -0.5095486f, 0.7651515f, 0.488523f,
		-1.1022727f, 0.6407039f, -0.29871324f, 2.0f, 1.9654026f, -0.9114583f,
		0.87014675f, -0.9652891f };
	static const float ref_dense[12] = { 0.5996094f, -0.42534724f, 1.0815972f, 0.4114583f,
		-0.953125f, 0.5839844f, -0.1388889f, 2.015625f, 1.8645834f, -0.984375f,
		0.8183594f, -0.8645834f };
	float out[12];
	unsigned np;
	struct tj t;

	three(&t, "ties");
	set_all(&t, "density", 0.5);
	assert_int_equal(run_job(&t, V3, 0, out, &np), 0);   /* normalize defaults to true */
	assert_int_equal(np, 3);
	assert_close(out, ref_norm, 12);
	set_g(&t, "normalize", mk_pval_bool(false));
	assert_int_equal(run_job(&t, V3, 0, out, NULL), 0);
	assert_close(out, ref_nonorm, 12);
	set_g(&t, "normalize", mk_pval_bool(true));
	set_g(&t, "rescale", mk_pval_bool(true));
	assert_int_equal(run_job(&t, V3, 0, out, NULL), 0);
	assert_close(out, ref_rescale, 12);
	/* int8_mask has no numeric effect */
	set_g(&t, "int8_mask", mk_pval_bool(true));
	{
		float o2[12];
		assert_int_equal(run_job(&t, V3, 0, o2, NULL), 0);
		assert_memory_equal(out, o2, sizeof(out));
	}
	/* density 1 (the default): sum consensus without sparsification, no pass */
	three(&t, "ties");
	assert_int_equal(run_job(&t, V3, 0, out, &np), 0);
	assert_int_equal(np, 0);
	assert_close(out, ref_dense, 12);
	/* density above 1: the same */
	set_all(&t, "density", 1.5);
	assert_int_equal(run_job(&t, V3, 0, out, &np), 0);
	assert_int_equal(np, 0);
	assert_close(out, ref_dense, 12);
}

/* The sparsification kernels alone: one input of weight 1 over a zero
 * base, no consensus effect (a single input always agrees with itself). */
static void kernel_run(const char *method, double density, double gamma, bool rescale,
		       float *out)
{
	const void *v[2] = { Z12, E1 };
	struct tj t;

	tj_init(&t, method, 2, 0);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	set_in(&t, 1, "density", mk_pval_float(density));
	if (gamma >= 0)
		set_in(&t, 1, "gamma", mk_pval_float(gamma));
	set_g(&t, "normalize", mk_pval_bool(false));
	set_g(&t, "rescale", mk_pval_bool(rescale));
	assert_int_equal(run_job(&t, v, 0, out, NULL), 0);
}

static void test_kernels_appendix(void **st)
{
	static const float mag[12] = { 0.0f, -0.203125f, 0.0f, 0.296875f, -0.0f, 0.25f, -0.0f,
		0.0f, 0.40625f, -0.0f, 0.1875f, -0.34375f };
	static const float mag_l1[12] = { 0.0f, -0.2595486f, 0.0f, 0.3793403f, -0.0f,
		0.31944445f, -0.0f, 0.0f, 0.5190972f, -0.0f, 0.23958334f, -0.4392361f };
	static const float outl1[12] = { 0.0f, -0.203125f, 0.0f, 0.296875f, -0.15625f, 0.25f,
		-0.0f, 0.0f, 0.0f, -0.0f, 0.1875f, -0.34375f };
	static const float outl2[12] = { 0.09375f, -0.203125f, 0.046875f, 0.296875f, -0.15625f,
		0.25f, -0.0625f, 0.0f, 0.0f, -0.109375f, 0.1875f, -0.0f };
	float out[12];

	kernel_run("ties", 0.5, -1, false, out);
	assert_close(out, mag, 12);
	kernel_run("ties", 0.5, -1, true, out);
	assert_close(out, mag_l1, 12);
	kernel_run("breadcrumbs", 0.5, 0.1, false, out);     /* n_top 1, n_bot 5 */
	assert_close(out, outl1, 12);
	kernel_run("breadcrumbs_ties", 0.75, 0.2, false, out); /* n_top 2, n_bot 1 */
	assert_close(out, outl2, 12);
	/* gamma 0.01: n_top = int(0.12) = 0.  mergekit 0.1.4 zeroed the whole
	 * delta; 0.1.5 keeps the top `target` = magnitude. */
	kernel_run("breadcrumbs", 0.5, 0.01, false, out);
	assert_close(out, mag, 12);
	/* n_bot < 0 adjustment: gamma 0.9 -> n_top = 10 > N - target = 6:
	 * keep the 6 smallest */
	kernel_run("breadcrumbs", 0.5, 0.9, false, out);
	{
		int kept = 0;
		for (int i = 0; i < 12; i++) {
			bool small = fabsf(E1[i]) <= 10.0f / 64;   /* 0, 3, 4, 6, 7, 10 */
			assert_true(small ? out[i] == E1[i] : out[i] == 0.0f);
			kept += small;
		}
		assert_int_equal(kept, 6);
	}
}

static void test_breadcrumbs_appendix(void **st)
{
	static const float ref_b[12] = { 0.565625f, -0.565625f, 0.8875f, 0.8125f, -0.9375f,
		0.709375f, -0.1875f, 2.0f, 1.75f, -1.0375f, 0.934375f, -0.84375f };
	static const float ref_bt[12] = { 0.565625f, -0.565625f, 0.8875f, 0.8125f, -1.075f,
		0.709375f, -0.1875f, 2.0f, 1.75f, -1.0375f, 0.934375f, -0.84375f };
	/* mergekit 0.1.5, gamma 0.01 (n_top 0): no longer the base */
	static const float ref_g001[12] = { 0.5f, -0.453125f, 0.8875f, 0.8125f, -0.78125f,
		0.709375f, -0.1875f, 2.0f, 1.93125f, -1.0375f, 0.934375f, -1.15625f };
	/* mergekit 0.1.5: breadcrumbs_ties w=[1,-0.8,0.6] density 0.75 gamma 0.2
	 * normalize rescale lambda 0.7 */
	static const float ref_mix[12] = { 0.80410504f, -0.46802083f, 2.1841011f, 0.44364583f,
		-1.3867462f, 0.86472726f, -1.283306f, 2.0f, 1.5f, -1.7648095f, 1.10133636f,
		-0.46430922f };
	float out[12];
	unsigned np;
	struct tj t;

	three(&t, "breadcrumbs");
	set_all(&t, "density", 0.5);
	set_all(&t, "gamma", 0.1);
	assert_int_equal(run_job(&t, V3, 0, out, &np), 0);
	assert_int_equal(np, 3);
	assert_close(out, ref_b, 12);
	three(&t, "breadcrumbs_ties");
	set_all(&t, "density", 0.5);
	set_all(&t, "gamma", 0.1);
	assert_int_equal(run_job(&t, V3, 0, out, NULL), 0);
	assert_close(out, ref_bt, 12);
	three(&t, "breadcrumbs");
	set_all(&t, "density", 0.5);                 /* gamma default 0.01 */
	assert_int_equal(run_job(&t, V3, 0, out, NULL), 0);
	assert_close(out, ref_g001, 12);
	three(&t, "breadcrumbs_ties");
	set_in(&t, 2, "weight", mk_pval_float(-0.8));
	set_all(&t, "density", 0.75);
	set_all(&t, "gamma", 0.2);
	set_g(&t, "normalize", mk_pval_bool(true));
	set_g(&t, "rescale", mk_pval_bool(true));
	set_g(&t, "lambda", mk_pval_float(0.7));
	assert_int_equal(run_job(&t, V3, 0, out, NULL), 0);
	assert_close(out, ref_mix, 12);
}

/* get_mask on weighted deltas [[.5,-.1,0],[-.2,-.1,0],[-.2,.3,0]]: with a
 * zero base, weights 1 and normalize off the output is sum_m k_m v_m. */
static void test_consensus_masks(void **st)
{
	static const float v[3][3] = { { .5f, -.1f, 0 }, { -.2f, -.1f, 0 }, { -.2f, .3f, 0 } };
	static const int msum[3][3] = { { 1, 0, 0 }, { 0, 0, 0 }, { 0, 1, 0 } };
	static const int mcount[3][3] = { { 0, 1, 0 }, { 1, 1, 0 }, { 1, 0, 0 } };
	/* mergekit 0.1.5 get_mask(count) inside ties, the reference inputs */
	static const float ref_count[12] = { 0.5f, -0.453125f, 0.8125f, 0.4114583f, -0.578125f,
		0.5839844f, -0.234375f, 2.0f, 1.8645834f, -0.984375f, 0.8183594f, -0.8645834f };
	static const float z[3] = { 0, 0, 0 };
	const void *views[4] = { z, v[0], v[1], v[2] };
	const uint64_t shape[1] = { 3 };
	float out[12];
	struct tj t;

	for (int k = 0; k < 2; k++) {
		if (k == 0)
			tj_init(&t, "ties", 4, 0);
		else
			tj_method(&t, &mk_gta_method_ties_count, 4, 0);
		set_shape(&t, MK_DT_F32, 1, shape);
		set_all(&t, "weight", 1.0);
		set_g(&t, "normalize", mk_pval_bool(false));
		assert_int_equal(run_job(&t, views, 0, out, NULL), 0);
		for (int e = 0; e < 3; e++) {
			float want = 0;
			for (int m = 0; m < 3; m++)
				want = m ? want + (k ? mcount : msum)[m][e] * v[m][e]
					 : (k ? mcount : msum)[m][e] * v[m][e];
			if (out[e] != want)
				fail_msg("%s element %d: %g, want %g", k ? "count" : "sum", e, out[e], want);
		}
	}
	/* count consensus with sparsification on the reference inputs */
	tj_method(&t, &mk_gta_method_ties_count, 4, 0);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	set_in(&t, 2, "weight", mk_pval_float(0.8));
	set_in(&t, 3, "weight", mk_pval_float(0.6));
	set_all(&t, "density", 0.5);
	assert_int_equal(run_job(&t, V3, 0, out, NULL), 0);
	assert_close(out, ref_count, 12);
}

static void test_della_probs(void **st)
{
	/* row [0.3,-0.1,0.05,-0.7,0.2]: ascending ranks 3,1,0,4,2 */
	static const float ref[5] = { 0.55f, 0.45000002f, 0.4f, 0.6f, 0.5f };
	static const uint64_t rank[5] = { 3, 1, 0, 4, 2 };

	for (int i = 0; i < 5; i++) {
		float p = mk_gta_della_prob_f32(rank[i], 5, 0.5, 0.1);
		if (p != ref[i])
			fail_msg("rank %llu: %.9g, want %.9g", (unsigned long long)rank[i], p, ref[i]);
		assert_true(fabs(mk_gta_della_prob_f64(rank[i], 5, 0.5, 0.1) - ref[i]) < 1e-7);
	}
	/* a row of one element: density (mergekit: NaN -> error) */
	assert_true(mk_gta_della_prob_f32(0, 1, 0.3, 0.1) == 0.3f);
}

/* --------------------------------------------------------------- tie rule */

static void test_tie_rule(void **st)
{
	/* 10 equal magnitudes and 2 larger: ties with density 0.5 keeps the 2
	 * larger and the 4 lowest-index ties; breadcrumbs density 0.5 gamma 0.1
	 * (n_top 1, n_bot 5) drops the largest and the 5 lowest-index ties */
	static const float x[12] = { 1, -1, 1, 3, -1, 1, 1, -2, 1, -1, 1, 1 };
	static const float z[12] = { 0 };
	static const float want_t[12] = { 1, -1, 1, 3, -1, 0, 0, -2, 0, 0, 0, 0 };
	static const float want_b[12] = { 0, 0, 0, 0, 0, 0, 1, -2, 1, -1, 1, 1 };
	const void *v[2] = { z, x };
	float out[12];
	static const uint64_t chunks[] = { 0, 1, 5 };

	for (size_t c = 0; c < 3; c++) {
		struct tj t;
		tj_init(&t, "ties", 2, 0);
		set_in(&t, 1, "weight", mk_pval_float(1.0));
		set_in(&t, 1, "density", mk_pval_float(0.5));
		assert_int_equal(run_job(&t, v, chunks[c], out, NULL), 0);
		for (int i = 0; i < 12; i++)
			if (out[i] != want_t[i])
				fail_msg("ties element %d: %g want %g", i, out[i], want_t[i]);
		tj_init(&t, "breadcrumbs", 2, 0);
		set_in(&t, 1, "weight", mk_pval_float(1.0));
		set_in(&t, 1, "density", mk_pval_float(0.5));
		set_in(&t, 1, "gamma", mk_pval_float(0.1));
		assert_int_equal(run_job(&t, v, chunks[c], out, NULL), 0);
		for (int i = 0; i < 12; i++)
			if (out[i] != want_b[i])
				fail_msg("breadcrumbs element %d: %g want %g", i, out[i], want_b[i]);
	}
}

/* The cut pass is not read past the cut it finds, nor at all when every
 * tie is kept (the cut after the last one), with the same output. */
static void test_cut_pass_skipped(void **st)
{
	static const float z[12] = { 0 };
	/* ties at 1 (indices 0 1 2 4 5 6 8 9 10 11), 3 and -2 larger: keep 6,
	 * so the 4 lowest-index ties: the cut at index 4 */
	static const float x1[12] = { 1, -1, 1, 3, -1, 1, 1, -2, 1, -1, 1, 1 };
	static const float w1[12] = { 1, -1, 1, 3, -1, 0, 0, -2, 0, 0, 0, 0 };
	/* the 4 ties at 1 all kept with 3 and -2 */
	static const float x2[12] = { 1, -1, 3, -2, 1, 1, 0.5f, 0.5f, 0.25f, 0.25f, 0.25f, 0.25f };
	static const float w2[12] = { 1, -1, 3, -2, 1, 1, 0, 0, 0, 0, 0, 0 };
	struct { const float *x, *want; uint64_t skipped; } c[] = {
		{ x1, w1, 7 },    /* chunks 5..11 of the cut pass */
		{ x2, w2, 12 },   /* all of it */
	};
	float out[12];

	(void)st;
	for (size_t k = 0; k < 2; k++) {
		const void *v[2] = { z, c[k].x };
		struct tj t;
		unsigned np;
		uint64_t before = tj_skipped;
		tj_init(&t, "ties", 2, 0);
		set_in(&t, 1, "weight", mk_pval_float(1.0));
		set_in(&t, 1, "density", mk_pval_float(0.5));
		assert_int_equal(run_job(&t, v, 1, out, &np), 0);
		assert_int_equal(np, 3);
		for (int i = 0; i < 12; i++)
			if (out[i] != c[k].want[i])
				fail_msg("case %zu element %d: %g want %g", k, i, out[i], c[k].want[i]);
		assert_int_equal(tj_skipped - before, c[k].skipped);
		/* with a rescale the cut pass sums what it keeps: all read */
		before = tj_skipped;
		set_g(&t, "rescale", mk_pval_bool(true));
		assert_int_equal(run_job(&t, v, 1, out, &np), 0);
		assert_int_equal(tj_skipped - before, 0);
	}
}

/* The selection methods (no DARE or DELLA), for the cases below. */
static const char *const sel_methods[] = { "ties", "breadcrumbs", "breadcrumbs_ties" };

/* A selection method over a zero base (input 1: weight 1, the density,
 * and gamma for the breadcrumbs when gamma > 0) on float32 values x32 and
 * on the same values as float64 (x64), shape [N / cols, cols], chunks of
 * ch elements: the outputs must be the same values (the float64 keys
 * order the values as the float32 ones, and the float64 job has neither
 * window nor record).  Returns how many elements the job kept; *skipped:
 * the chunks the float32 job left unread (tj_skipped). */
static uint64_t sel_f32_as_f64(const char *method, double density, double gamma, uint64_t N, uint64_t cols,
			       uint64_t ch, const float *z32, const float *x32, float *o32, const double *z64,
			       const double *x64, double *o64, uint64_t *skipped)
{
	const void *v32[2] = { z32, x32 }, *v64[2] = { z64, x64 };
	uint64_t before, kept = 0;
	struct tj t;

	tj_init(&t, method, 2, 0);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	set_in(&t, 1, "density", mk_pval_float(density));
	if (gamma > 0)
		set_in(&t, 1, "gamma", mk_pval_float(gamma));
	t.in[0] = t.in[1] = td(MK_DT_F32, 2, N / cols, cols);
	before = tj_skipped;
	assert_int_equal(run_job(&t, v32, ch, o32, NULL), 0);
	*skipped = tj_skipped - before;
	t.in[0] = t.in[1] = td(MK_DT_F64, 2, N / cols, cols);
	assert_int_equal(run_job(&t, v64, ch, o64, NULL), 0);
	for (uint64_t i = 0; i < N; i++) {
		if ((double)o32[i] != o64[i])
			fail_msg("%s density %g element %llu: %g (float32) %g (float64)", method, density,
				 (unsigned long long)i, (double)o32[i], o64[i]);
		kept += o32[i] != 0;
	}
	return kept;
}

/* A selection whose last bucket is small records its elements in the
 * last digit pass and finds the cut there (float32, no rescale): the cut
 * pass is not read at all, and the elements kept are those of the
 * float64 job (no record, the cut pass finds the cut), whose keys order
 * the same values the same way. */
static void test_cut_recorded(void **st)
{
	enum { N = 4096, CH = 256 };
	static float z32[N], x32[N], o32[N];
	static double z64[N], x64[N], o64[N];

	(void)st;
	/* 1000 values in [1, 2), each about 4 times (ties), signs mixed: a
	 * 16-bit bucket holds some 30 elements */
	for (int i = 0; i < N; i++) {
		x32[i] = (1.0f + (float)((i * 7919) % 1000) * 0.001f) * (i % 3 ? 1.0f : -1.0f);
		x64[i] = x32[i];
	}
	for (size_t m = 0; m < 3; m++)
		for (int d = 0; d < 3; d++) {
			static const double dens[] = { 0.5, 0.3, 0.77 };
			uint64_t skipped, kept = sel_f32_as_f64(sel_methods[m], dens[d], m ? 0.1 : 0.0, N, 64, CH, z32, x32,
								o32, z64, x64, o64, &skipped);
			/* the cut pass, all its chunks, unread */
			assert_int_equal(skipped, N / CH);
			assert_true(kept > 0 && kept < N);
		}
}

/* The selections' windows (tensors of 2^18 elements and more, float32, no
 * rescale): the first digit pass records the elements around where its
 * first eighth puts each cut, and the last digit pass then reads only
 * that eighth.  The same output as float64 (which has no window) when
 * the window holds the cut (most of the last digit pass unread), when it
 * misses it (a first eighth unlike the rest: the pass reads everything)
 * and when it overflows (a few distinct values: one bucket holds them).
 * Held (mk_job.held), the first digit pass counts no histogram past the
 * window's start and a pass is added where a window did not hold its
 * rank: none when all hold it, one per job when any misses; shape 3
 * enlarges only the first eighth's largest values, which moves the upper
 * end's rank there but not a lower one's (the counts below it are the
 * same): ties and breadcrumbs' lower end hold, breadcrumbs' upper end
 * misses.  Shapes 1 and 4 put every rank below and above the window.
 * Held once more with the later passes cut in chunks of 1000 elements,
 * whose tiles straddle w0 (the API lets each pass be cut its own way);
 * and not held with the plan's spare pass (mk_job_desc.spare_pass), in
 * the same chunks and in those: planned, so never added, read only when
 * a window missed; and held with a spare pass too (mk-yaml's plan gives
 * none to a held job, a hand-made JOB may): the spare used, none added. */
static void test_window(void **st)
{
	enum { N = 1 << 20, CH = 1 << 14 };
	static float z32[N], x32[N], o32[N];
	static double z64[N], x64[N], o64[N];

	(void)st;
	for (int mode = 0; mode < 8; mode++)
		for (int shape = 0; shape < 5; shape++) {
			bool held = mode == 1 || mode == 2 || mode == 5, spare = mode >= 3;
			for (int i = 0; i < N; i++) {
				float v = 1.0f + (float)((uint32_t)i * 7919u % 100003u) * 1e-5f;
				if (shape == 1 && i < N / 8)
					v *= 64.0f;            /* the first eighth larger */
				if (shape == 2)
					v = (float)(1 + i % 3); /* three values */
				if (shape == 3 && i < N / 8 && v > 1.9f)
					v *= 64.0f;            /* its largest tenth larger */
				if (shape == 4 && i < N / 8)
					v /= 64.0f;            /* the first eighth smaller */
				x32[i] = v * (i % 3 ? 1.0f : -1.0f);
				x64[i] = x32[i];
			}
			for (size_t m = 0; m < 3; m++) {
				uint64_t skipped, added = tj_added, kept, ended = tj_ended_early;
				bool hit = shape == 0 || (shape == 3 && m == 0);
				tj_held = held;
				tj_spare = spare;
				tj_later_chunk = mode == 2 || mode == 4 || mode == 7 ? 1000 : 0;
				/* modes 6, 7: each pass ended where the method needs no
				 * more of it, the rest never passed (mk-yaml's fetch
				 * stage sends no more of it) */
				tj_end_early = mode >= 6;
				kept = sel_f32_as_f64(sel_methods[m], 0.4, m ? 0.05 : 0.0, N, 1024, CH, z32, x32, o32, z64,
						      x64, o64, &skipped);
				tj_held = false;
				tj_spare = false;
				tj_later_chunk = 0;
				tj_end_early = false;
				added = tj_added - added;
				ended = tj_ended_early - ended;
				/* every window held: the spare pass, the last digit
				 * pass from w0 on and the cut pass end early (the
				 * float32 run; the float64 one has no windows, but its
				 * cut pass may end early too); a window that missed
				 * reads the spare pass whole */
				if (mode >= 6 && hit)
					assert_true(ended >= 3);
				assert_true(kept > 0 && kept < N);
				/* a pass added only held, when a window missed, and
				 * none offered */
				if (!held || spare || hit)
					assert_int_equal(added, 0);
				else
					assert_int_equal(added, 1);
				/* the spare pass all unread when every window held */
				if (mode == 3 && hit)
					assert_true(skipped >= 3 * (N / CH) - N / 8 / CH - 1);
				if (mode == 3 && !hit)
					assert_true(skipped < 3 * (N / CH) - N / 8 / CH - 1);
				/* the last digit pass: all but its first eighth unread
				 * when the window held the cut, read whole when not; the
				 * cut pass unread (its cuts from the record) but in the
				 * last case, whose bucket is too large to record (a pass
				 * added is read from w0 on, to its end) */
				if (mode >= 2)
					continue;   /* (other chunks, another pass: other counts) */
				if (shape == 0 || (shape == 3 && m == 0))
					assert_true(skipped >= 2 * (N / CH) - N / 8 / CH - 1);
				else if (shape == 1 || shape == 4)
					assert_int_equal(skipped, N / CH);
				else if (shape == 2)
					assert_true(skipped < N / CH);
			}
		}
}

/* The same with BF16 inputs passed as they are (accumulate_bf16), held:
 * the same bits as the float32 job of the same values, when the windows
 * hold every rank and when the first eighth moves them (a pass added). */
static void test_window_bf16(void **st)
{
	enum { N = 1 << 19, CH = 1 << 14 };
	static uint16_t rz[N], rx[N];
	static float z[N], x[N], o32[N], obf[N];
	uint64_t seed = 7;

	(void)st;
	for (int shape = 0; shape < 2; shape++) {
		for (int i = 0; i < N; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			/* a base near 1 and a fine-tune near it: deltas of many
			 * sizes; shape 1 moves the first eighth's up */
			rz[i] = (uint16_t)(0x3f80 + (seed >> 59));
			rx[i] = (uint16_t)(rz[i] + ((seed >> 40) & 0x3f) - 0x20 + (shape && i < N / 8 ? 0x100 : 0));
			if ((seed >> 30) & 1)
				rx[i] ^= 0x8000;
			uint32_t uz = (uint32_t)rz[i] << 16, ux = (uint32_t)rx[i] << 16;
			memcpy(&z[i], &uz, 4);
			memcpy(&x[i], &ux, 4);
		}
		const void *vf[2] = { z, x }, *vb[2] = { rz, rx };
		for (size_t m = 0; m < 3; m++) {
			struct tj t;
			uint64_t added = tj_added, chunks = tj_bf16_chunks;
			tj_init(&t, sel_methods[m], 2, 0);
			set_in(&t, 1, "weight", mk_pval_float(1.0));
			set_in(&t, 1, "density", mk_pval_float(0.4));
			if (m)
				set_in(&t, 1, "gamma", mk_pval_float(0.05));
			t.in[0] = t.in[1] = td(MK_DT_BF16, 2, N / 1024, 1024);
			tj_held = true;
			assert_int_equal(run_job(&t, vf, CH, o32, NULL), 0);
			tj_bf16 = vb;
			int rc = run_job(&t, vf, CH, obf, NULL);
			tj_bf16 = NULL;
			tj_held = false;
			assert_int_equal(rc, 0);
			assert_true(tj_bf16_chunks > chunks);
			/* both runs added a pass, or neither */
			assert_int_equal(tj_added - added, shape ? 2 : 0);
			for (int e = 0; e < N; e++)
				if (memcmp(&o32[e], &obf[e], 4))
					fail_msg("%s shape %d element %d: %a (float32) %a (BF16)", sel_methods[m], shape, e,
						 (double)o32[e], (double)obf[e]);
		}
	}
}

/* Every key of the selection under one upper half (float32 values 1 +
 * k 2^-23: the digit passes gather nearly every key of every tile, the
 * first pass's windows take every key): the same output as float64,
 * whose keys order the same values the same way. */
static void test_dense_bucket(void **st)
{
	enum { N = 1 << 18, CH = 1 << 13 };
	static float z32[N], x32[N], o32[N];
	static double z64[N], x64[N], o64[N];

	(void)st;
	for (int i = 0; i < N; i++) {
		x32[i] = (1.0f + (float)((uint32_t)i * 40503u % 65536u) * 0x1p-23f) * (i % 3 ? 1.0f : -1.0f);
		x64[i] = x32[i];
	}
	for (size_t m = 0; m < 3; m++) {
		uint64_t skipped, kept = sel_f32_as_f64(sel_methods[m], 0.45, m ? 0.2 : 0.0, N, 512, CH, z32, x32, o32,
							z64, x64, o64, &skipped);
		assert_true(kept > N / 4 && kept < N - N / 4);
	}
}

/* BF16 inputs passed to the statistics passes and apply as they are
 * (mk-merge does so for a job that takes them, accumulate_bf16 and
 * apply_bf16) give the bits they give widened to float32 first: the
 * methods of the family (DARE with and without the rescale, whose draws
 * are then apply's), three inputs over a base, NaN and infinities among
 * them, chunks that do and do not split DELLA's rows, DARE's 1 Mi blocks
 * and apply's tiles. */
static void test_stats_bf16(void **st)
{
	enum { R = 96, C = 200, N = R * C };
	static uint16_t raw[4][N];
	static float f[4][N], o32[N], obf[N];
	static const char *methods[] = { "ties", "dare_ties", "dare_linear", "breadcrumbs", "breadcrumbs_ties",
					 "della", "della_linear", "task_arithmetic", "dare_ties" };
	static const uint64_t chunks[] = { 0, 777, C * 3 };
	uint64_t seed = 99;

	(void)st;
	for (int i = 0; i < 4; i++)
		for (int e = 0; e < N; e++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			/* near the base's values, as fine-tunes are: small deltas,
			 * many ties among them */
			uint16_t v = (uint16_t)(0x3f00 + (seed >> 58) * (i ? 1 : 0) + ((e * 31) % 64));
			if ((seed >> 40) & 1)
				v |= 0x8000;
			if (i == 2 && e == 1234)
				v = 0x7fc0;   /* NaN */
			if (i == 3 && e == 4321)
				v = 0xff80;   /* -inf */
			raw[i][e] = v;
			uint32_t u = (uint32_t)v << 16;
			memcpy(&f[i][e], &u, sizeof(u));
		}
	const void *vf[4] = { f[0], f[1], f[2], f[3] }, *vb[4] = { raw[0], raw[1], raw[2], raw[3] };
	for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++)
		for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
			struct tj t;
			tj_init(&t, methods[m], 4, 0);
			for (size_t i = 0; i < 4; i++)
				t.in[i] = td(MK_DT_BF16, 2, R, C);
			set_all(&t, "weight", 0.4);
			set_all(&t, "density", 0.45);
			if (strstr(methods[m], "breadcrumbs"))
				set_all(&t, "gamma", 0.05);
			if (strstr(methods[m], "della"))
				set_all(&t, "epsilon", 0.1);
			if (m == 1)
				set_g(&t, "rescale", mk_pval_bool(false));
			assert_int_equal(run_job(&t, vf, chunks[k], o32, NULL), 0);
			uint64_t before = tj_bf16_chunks;
			tj_bf16 = vb;
			int rc = run_job(&t, vf, chunks[k], obf, NULL);
			tj_bf16 = NULL;
			assert_int_equal(rc, 0);
			assert_true(tj_bf16_chunks > before);
			if (memcmp(o32, obf, sizeof(o32))) {
				for (int e = 0; e < N; e++)
					if (memcmp(&o32[e], &obf[e], 4))
						fail_msg("%s chunk %llu element %d: %a (float32) %a (BF16)", methods[m],
							 (unsigned long long)chunks[k], e, (double)o32[e], (double)obf[e]);
			}
		}
}

/* ------------------------------------------------------ parameters, plan */

static void expect_error(struct tj *t, const char *n1, const char *n2)
{
	struct mk_plan_out po;
	struct mk_err err;

	mk_err_clear(&err);
	if (mk_method_plan(t->m, &t->d, &po, NULL, NULL, NULL, &err) >= 0)
		fail_msg("%s: no error (wanted '%s')", t->m->name, n1);
	if (!strstr(err.msg, n1) || (n2 && !strstr(err.msg, n2)))
		fail_msg("message '%s' lacks '%s' / '%s'", err.msg, n1, n2 ? n2 : "");
}

static unsigned plan_passes(struct tj *t)
{
	struct mk_plan_out po;
	struct mk_err err;

	if (mk_method_plan(t->m, &t->d, &po, NULL, NULL, NULL, &err))
		fail_msg("%s: %s", t->m->name, err.msg);
	return po.npasses;
}

/* The plan's spare pass is counted only where a window could use it: a
 * float32 or BF16 selection of 2^18 elements or more, no rescale. */
static void test_spare_planned(void **st)
{
	static const struct { const char *method; enum mk_dtype dt; uint64_t rows; bool rescale; unsigned want, spare; } c[] = {
		{ "ties", MK_DT_F32, 1024, false, 3, 4 },
		{ "ties", MK_DT_BF16, 1024, false, 3, 4 },
		{ "breadcrumbs", MK_DT_F32, 1024, false, 3, 4 },
		{ "ties", MK_DT_F32, 255, false, 3, 3 },   /* 255 Ki elements: no window */
		{ "ties", MK_DT_F64, 1024, false, 5, 5 },  /* float64: no window */
		{ "ties", MK_DT_F32, 1024, true, 3, 3 },   /* a rescale: no window */
		{ "dare_ties", MK_DT_F32, 1024, false, 0, 0 },
		{ "della", MK_DT_F32, 1024, false, 1, 1 },
	};

	(void)st;
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		struct tj t;
		tj_init(&t, c[k].method, 2, 0);
		set_in(&t, 1, "weight", mk_pval_float(1.0));
		set_in(&t, 1, "density", mk_pval_float(0.5));
		if (!strcmp(c[k].method, "dare_ties") || c[k].rescale)
			set_g(&t, "rescale", mk_pval_bool(c[k].rescale));
		t.in[0] = t.in[1] = td(c[k].dt, 2, c[k].rows, 1024);
		assert_int_equal(plan_passes(&t), c[k].want);
		t.d.spare_pass = true;
		if (plan_passes(&t) != c[k].spare)
			fail_msg("%s %s rows %llu: %u passes with the spare offered, want %u", c[k].method,
				 mk_dtype_name(c[k].dt), (unsigned long long)c[k].rows, plan_passes(&t), c[k].spare);
	}
}

static void test_params(void **st)
{
	static const char *all[] = { "ties", "dare_linear", "dare_ties", "breadcrumbs",
				     "breadcrumbs_ties", "della", "della_linear" };
	static const struct {
		const char *name;
		bool normalize, rescale;
		const char *extra;
		double extra_def;
	} defs[] = {
		{ "task_arithmetic", false, false, NULL, 0 },
		{ "ties", true, false, NULL, 0 },
		{ "dare_linear", false, true, NULL, 0 },
		{ "dare_ties", false, true, NULL, 0 },
		{ "breadcrumbs", false, false, "gamma", 0.01 },
		{ "breadcrumbs_ties", false, false, "gamma", 0.01 },
		{ "della", true, true, "epsilon", 0.15 },
		{ "della_linear", false, true, "epsilon", 0.15 },
	};
	const uint64_t small[1] = { 64 };
	struct tj t;

	/* registered, with mergekit's defaults */
	for (size_t k = 0; k < sizeof(defs) / sizeof(defs[0]); k++) {
		const struct mk_method *m = mk_method_find(defs[k].name);
		int p;
		assert_non_null(m);
		assert_int_equal(m->contract.base, MK_BASE_REQUIRED);
		assert_non_null(m->device);
		p = mk_method_param_index(m, "normalize");
		assert_true(m->params[p].def.b == defs[k].normalize);
		p = mk_method_param_index(m, "rescale");
		assert_true(m->params[p].def.b == defs[k].rescale);
		p = mk_method_param_index(m, "lambda");
		assert_true(m->params[p].def.f == 1.0);
		p = mk_method_param_index(m, "int8_mask");
		assert_false(m->params[p].def.b);
		p = mk_method_param_index(m, "density");
		assert_true(m->params[p].def.f == 1.0 && m->params[p].scope == MK_SCOPE_PER_NON_BASE);
		p = mk_method_param_index(m, "weight");
		assert_true(m->params[p].flags & MK_PF_REQUIRED);
		assert_int_equal(mk_method_param_index(m, "gamma") >= 0,
				 defs[k].extra && !strcmp(defs[k].extra, "gamma"));
		assert_int_equal(mk_method_param_index(m, "epsilon") >= 0,
				 defs[k].extra && !strcmp(defs[k].extra, "epsilon"));
		if (defs[k].extra) {
			p = mk_method_param_index(m, defs[k].extra);
			assert_true(m->params[p].def.f == defs[k].extra_def);
		}
	}
	assert_string_equal(mk_method_find("breadcrumbs_ties")->pretty_name,
			    "Model Breadcrumbs with TIES");

	for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++) {
		/* missing base */
		tj_init(&t, all[k], 2, -1);
		set_all(&t, "weight", 1.0);
		expect_error(&t, "needs a base model", all[k]);
		/* weight required for non-base inputs only */
		tj_init(&t, all[k], 2, 0);
		expect_error(&t, "'weight' is required for input 1 ('model-b')", NULL);
		set_in(&t, 1, "weight", mk_pval_float(1.0));
		assert_int_equal(plan_passes(&t), 0);          /* density 1 */
		/* density < 0 */
		set_in(&t, 1, "density", mk_pval_float(-0.1));
		expect_error(&t, "'density' for input 1 ('model-b') is -0.1; it must be >= 0", all[k]);
		/* the base alone: the base, no pass */
		tj_init(&t, all[k], 1, 0);
		assert_int_equal(plan_passes(&t), 0);
	}

	/* ties / breadcrumbs: int(density * N) = 0 */
	for (int k = 0; k < 2; k++) {
		tj_init(&t, k ? "breadcrumbs" : "ties", 3, 0);
		set_shape(&t, MK_DT_F32, 1, small);
		set_all(&t, "weight", 1.0);
		set_in(&t, 2, "density", mk_pval_float(0.01));
		expect_error(&t, "'density' for input 2 ('model-c') is 0.01", "int(0.01 * 64) = 0");
		set_in(&t, 2, "density", mk_pval_float(0.0));
		expect_error(&t, "int(0 * 64) = 0", NULL);
		set_in(&t, 2, "density", mk_pval_float(1.0 / 64));
		assert_int_equal(plan_passes(&t), 3);
		t.in[0].dtype = MK_DT_F64;
		assert_int_equal(plan_passes(&t), 5);
	}
	/* gamma < 0 */
	tj_init(&t, "breadcrumbs_ties", 2, 0);
	set_all(&t, "weight", 1.0);
	set_all(&t, "gamma", -0.1);
	expect_error(&t, "'gamma' for input 1 ('model-b') is -0.1; it must be >= 0", NULL);

	/* della: density +/- epsilon in (0, 1) when 0 < density < 1 */
	for (int k = 0; k < 2; k++) {
		tj_init(&t, k ? "della_linear" : "della", 2, 0);
		set_all(&t, "weight", 1.0);
		set_all(&t, "density", 0.9);                    /* default epsilon 0.15 */
		expect_error(&t, "'density' 0.9 and 'epsilon' 0.15 for input 1 ('model-b')",
			     "(0, 1)");
		set_all(&t, "density", 0.66);
		set_all(&t, "epsilon", 1.35);                   /* test_della_invalid_epsilon */
		expect_error(&t, "density +/- epsilon must lie in (0, 1)", NULL);
		set_all(&t, "epsilon", 0.66);
		expect_error(&t, "density +/- epsilon", NULL);
		set_all(&t, "epsilon", 0.05);
		assert_int_equal(plan_passes(&t), 1);
		set_all(&t, "epsilon", -0.05);                  /* inverted preference: allowed */
		assert_int_equal(plan_passes(&t), 1);
		set_all(&t, "density", 0.0);                    /* zeros, no check, no pass */
		set_all(&t, "epsilon", 0.5);
		assert_int_equal(plan_passes(&t), 0);
		set_all(&t, "density", 1.0);
		assert_int_equal(plan_passes(&t), 0);
	}
	/* dare: a pass only for the rescale */
	tj_init(&t, "dare_ties", 3, 0);
	set_all(&t, "weight", 1.0);
	set_in(&t, 1, "density", mk_pval_float(0.3));
	assert_int_equal(plan_passes(&t), 1);
	set_g(&t, "rescale", mk_pval_bool(false));
	assert_int_equal(plan_passes(&t), 0);
	/* a dropped (mismatched) input does not count */
	tj_init(&t, "ties", 3, 0);
	set_all(&t, "weight", 1.0);
	set_in(&t, 2, "density", mk_pval_float(0.001));
	t.in[2] = td(MK_DT_F32, 2, 5, 4);
	assert_int_equal(plan_passes(&t), 0);
}

static void test_output_rules(void **st)
{
	static const struct {
		enum mk_dtype base, other, out, compute;
	} cases[] = {
		/* the output: torch's promotion of the inputs (mergekit 0.1.5
		 * run on a bfloat16 base and a float32 model writes float32) */
		{ MK_DT_BF16, MK_DT_BF16, MK_DT_BF16, MK_DT_F32 },
		{ MK_DT_F16, MK_DT_F32, MK_DT_F32, MK_DT_F32 },
		{ MK_DT_F32, MK_DT_BF16, MK_DT_F32, MK_DT_F32 },
		{ MK_DT_F64, MK_DT_F32, MK_DT_F64, MK_DT_F64 },
		{ MK_DT_BF16, MK_DT_F16, MK_DT_F32, MK_DT_F32 },
	};
	static const char *all[] = { "ties", "dare_linear", "dare_ties", "breadcrumbs",
				     "breadcrumbs_ties", "della", "della_linear" };
	struct mk_plan_out po;
	struct mk_err err;
	bool used[3];
	struct tj t;

	for (size_t m = 0; m < 7; m++)
		for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
			tj_init(&t, all[m], 2, 0);
			set_all(&t, "weight", 1.0);
			t.in[0].dtype = cases[k].base;
			t.in[1].dtype = cases[k].other;
			assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
			assert_int_equal(po.out.dtype, cases[k].out);
			assert_int_equal(po.compute, cases[k].compute);
			assert_int_equal(po.out.shape[0], 3);
			assert_int_equal(po.out.shape[1], 4);
		}
	/* shapes: embeddings cut to the base, other mismatches dropped */
	tj_init(&t, "ties", 3, 0);
	set_all(&t, "weight", 1.0);
	set_all(&t, "density", 0.5);
	t.in[1] = td(MK_DT_F32, 2, 5, 4);
	t.in[2] = td(MK_DT_F32, 2, 2, 4);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_true(used[0] && !used[1] && !used[2]);
	t.d.is_embed = true;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "input 2 ('model-c') has shape [2, 4]"));
	t.in[2] = td(MK_DT_F32, 2, 3, 4);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_true(used[0] && used[1] && used[2]);
	/* non-float inputs */
	t.in[2].dtype = MK_DT_I32;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EUNSUPPORTED);
}

/* ---------------------------------------------------- chunk independence */

#define CR 37
#define CC 300
#define CN (CR * CC)

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static double frand(void)
{
	rs ^= rs << 13;
	rs ^= rs >> 7;
	rs ^= rs << 17;
	return (double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void check_chunking(struct tj *t, const void *const *v, size_t esz, uint64_t row)
{
	const uint64_t sizes[] = { 1, 7, row, 4096, 4097, CN };
	char *ref = malloc(CN * esz), *got = malloc(CN * esz);

	assert_non_null(ref);
	assert_non_null(got);
	assert_int_equal(run_job(t, v, CN, ref, NULL), 0);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		memset(got, 0x55, CN * esz);
		assert_int_equal(run_job(t, v, sizes[k], got, NULL), 0);
		if (memcmp(ref, got, CN * esz))
			fail_msg("%s: chunks of %llu elements change the output", t->m->name,
				 (unsigned long long)sizes[k]);
	}
	free(ref);
	free(got);
}

static void test_chunk_independence(void **st)
{
	static const char *all[] = { "ties", "dare_linear", "dare_ties", "breadcrumbs",
				     "breadcrumbs_ties", "della", "della_linear" };
	float *a = malloc(CN * 4), *b = malloc(CN * 4), *c = malloc(CN * 4);
	double *da = malloc(CN * 8), *db = malloc(CN * 8), *dc = malloc(CN * 8);
	const void *v[3] = { a, b, c }, *dv[3] = { da, db, dc };
	const uint64_t s2[2] = { CR, CC }, s3[3] = { CR, 20, 15 };
	struct tj t;

	assert_true(a && b && c && da && db && dc);
	for (int i = 0; i < CN; i++) {
		a[i] = (float)frand();
		/* quantised deltas: many exact ties in |delta| */
		b[i] = a[i] + (float)(round(frand() * 40) / 64);
		c[i] = a[i] + (float)frand() * 1e-3f;
		da[i] = a[i];
		db[i] = b[i];
		dc[i] = (double)c[i] + 1e-12 * frand();
	}
	for (size_t m = 0; m < 7; m++) {
		tj_init(&t, all[m], 3, 0);
		set_shape(&t, MK_DT_F32, 2, s2);
		set_in(&t, 1, "weight", mk_pval_float(0.7));
		set_in(&t, 2, "weight", mk_pval_float(-0.4));
		set_in(&t, 1, "density", mk_pval_float(0.3));
		set_in(&t, 2, "density", mk_pval_float(0.55));
		set_g(&t, "rescale", mk_pval_bool(true));
		set_g(&t, "lambda", mk_pval_float(0.9));
		check_chunking(&t, v, 4, CC);
		/* float64 (4 digit passes) */
		set_shape(&t, MK_DT_F64, 2, s2);
		check_chunking(&t, dv, 8, CC);
		/* 3-D: DELLA rows along axis 1 are strided */
		set_shape(&t, MK_DT_F32, 3, s3);
		check_chunking(&t, v, 4, 300);
	}
	free(a);
	free(b);
	free(c);
	free(da);
	free(db);
	free(dc);
}

/* ------------------------------------------------------------- export */

/* The TASK_ARITHMETIC kernel of mk/device.h, element by element, as a
 * kernel outside gta.c (the GPU) computes it from the device hook's state. */
static float export_ref(const struct mk_device_job *x, const void *const *in, uint64_t e)
{
	float b = ((const float *)in[x->base])[e], v[8], mix = 0, div = x->div;

	assert_true(x->n <= 8);
	for (size_t j = 0; j < x->n; j++) {
		const struct mk_device_input *g = &x->in[j];
		float d = ((const float *)in[g->idx])[e] - b, a = fabsf(d), m;
		uint32_t key;
		bool kept = true;
		memcpy(&key, &a, 4);
		switch (g->kind) {
		case MK_DEVICE_MAGNITUDE: kept = key > g->lo_key || (key == g->lo_key && e < g->lo_cut1); break;
		case MK_DEVICE_OUTLIERS:
			kept = (key > g->lo_key || (key == g->lo_key && e >= g->lo_cut1)) &&
			       (key < g->hi_key || (key == g->hi_key && e < g->hi_cut1));
			break;
		case MK_DEVICE_RANDOM: kept = (mk_rng_u64(g->stream, e) >> 11) < g->thr; break;
		case MK_DEVICE_DELLA: kept = (g->mask[e >> 3] >> (e & 7)) & 1; break;
		default: break;
		}
		if (g->kind == MK_DEVICE_DENSE) {
			m = d;
		} else if (g->kind == MK_DEVICE_ZERO) {
			m = 0;
		} else {
			m = d * (kept ? 1.0f : 0.0f);
			if (g->scale)
				m = m * g->factor;
		}
		v[j] = m * g->w;
	}
	if (x->cons != MK_DEVICE_CONS_NONE) {
		float sw = 0, maj;
		for (size_t j = 0; j < x->n; j++) {
			float t = x->cons == MK_DEVICE_CONS_SUM ? v[j] : (float)((v[j] > 0) - (v[j] < 0));
			sw = j ? sw + t : t;
		}
		maj = sw >= 0 ? 1.0f : -1.0f;
		for (size_t j = 0; j < x->n; j++) {
			float kk = (float)((v[j] > 0) - (v[j] < 0)) == maj ? 1.0f : 0.0f;
			mix = j ? mix + v[j] * kk : v[j] * kk;
			div = j ? div + x->in[j].w * kk : x->in[j].w * kk;
		}
		if (div == 0)
			div = 1;
	} else {
		for (size_t j = 0; j < x->n; j++)
			mix = j ? mix + v[j] : v[j];
	}
	if (x->normalize)
		mix = mix / div;
	if (x->scale_lam)
		mix = mix * x->lam;
	return b + mix;
}

/* What the device hook's state describes is what apply computes, bit for bit, for
 * every method of the family on data with many ties in |delta| (cuts
 * inside apply's tiles), chunks of 1000. */
static void test_export(void **st)
{
	static const char *all[] = { "task_arithmetic", "ties", "dare_linear", "dare_ties", "breadcrumbs",
				     "breadcrumbs_ties", "della", "della_linear" };
	float *a = malloc(CN * 4), *b = malloc(CN * 4), *c = malloc(CN * 4), *out = malloc(CN * 4);
	const void *v[3] = { a, b, c };
	const uint64_t s2[2] = { CR, CC };
	struct mk_device_job x;
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	assert_true(a && b && c && out);
	for (int i = 0; i < CN; i++) {
		a[i] = (float)frand();
		b[i] = a[i] + (float)(round(frand() * 40) / 64);
		c[i] = a[i] + (float)(round(frand() * 8) / 256);
	}
	for (size_t m = 0; m < sizeof(all) / sizeof(all[0]); m++) {
		for (int variant = 0; variant < 2; variant++) {
			tj_init(&t, all[m], 3, 0);
			set_shape(&t, MK_DT_F32, 2, s2);
			set_in(&t, 1, "weight", mk_pval_float(0.7));
			set_in(&t, 2, "weight", mk_pval_float(variant ? 0.4 : -0.4));
			set_in(&t, 1, "density", mk_pval_float(0.3));
			set_in(&t, 2, "density", mk_pval_float(variant ? 1.0 : 0.55));
			set_g(&t, "rescale", mk_pval_bool(variant == 0));
			set_g(&t, "lambda", mk_pval_float(variant ? 1.0 : 0.9));
			assert_int_equal(tj_run(&t, MK_DT_COUNT, v, 1000, out, false, &job, NULL, &err), 0);
			assert_int_equal(job.method->device->kernel(&job), MK_DEVICE_TASK_ARITHMETIC);
			assert_int_equal(job.method->device->state(&job, &x, &err), 0);
			assert_int_equal(x.kernel, MK_DEVICE_TASK_ARITHMETIC);
			assert_int_equal(x.n, 2);
			for (uint64_t e = 0; e < CN; e++) {
				float r = export_ref(&x, v, e);
				if (memcmp(&r, &out[e], 4))
					fail_msg("%s variant %d element %llu: apply %.9g, export %.9g", all[m], variant,
						 (unsigned long long)e, out[e], r);
			}
			mk_job_release(&job);
		}
	}
	/* a whole tensor of 2^20 elements in one chunk runs each input's
	 * statistics on its own thread: the same bits as chunks of 10^5 */
	{
		enum { BN = 1 << 20 };
		static const char *thr[] = { "ties", "dare_ties", "breadcrumbs_ties" };
		const uint64_t sb[2] = { 1024, BN / 1024 };
		float *ba = malloc(BN * 4), *bb = malloc(BN * 4), *bc = malloc(BN * 4);
		float *o1 = malloc(BN * 4), *o2 = malloc(BN * 4);
		const void *bv[3] = { ba, bb, bc };
		assert_true(ba && bb && bc && o1 && o2);
		for (int i = 0; i < BN; i++) {
			ba[i] = (float)frand();
			bb[i] = ba[i] + (float)(round(frand() * 40) / 64);
			bc[i] = ba[i] + (float)frand() * 1e-2f;
		}
		for (size_t m = 0; m < 3; m++) {
			tj_init(&t, thr[m], 3, 0);
			set_shape(&t, MK_DT_F32, 2, sb);
			set_in(&t, 1, "weight", mk_pval_float(0.7));
			set_in(&t, 2, "weight", mk_pval_float(0.4));
			set_in(&t, 1, "density", mk_pval_float(0.3));
			set_in(&t, 2, "density", mk_pval_float(0.6));
			set_g(&t, "rescale", mk_pval_bool(true));
			assert_int_equal(tj_run(&t, MK_DT_COUNT, bv, 0, o1, false, NULL, NULL, &err), 0);
			assert_int_equal(tj_run(&t, MK_DT_COUNT, bv, 100000, o2, false, NULL, NULL, &err), 0);
			assert_memory_equal(o1, o2, (size_t)BN * 4);
		}
		free(ba);
		free(bb);
		free(bc);
		free(o1);
		free(o2);
	}
	/* the base alone: a copy of it; float64: no device kernel */
	tj_init(&t, "ties", 1, 0);
	set_shape(&t, MK_DT_F32, 2, s2);
	assert_int_equal(tj_run(&t, MK_DT_COUNT, v, 0, out, false, &job, NULL, &err), 0);
	assert_int_equal(job.method->device->kernel(&job), MK_DEVICE_COPY);
	assert_int_equal(job.method->device->state(&job, &x, &err), 0);
	assert_true(x.kernel == MK_DEVICE_COPY && x.base == 0 && x.n == 0);
	mk_job_release(&job);
	tj_init(&t, "ties", 2, 0);
	set_shape(&t, MK_DT_F64, 2, s2);
	set_in(&t, 1, "weight", mk_pval_float(0.7));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.method->device->kernel(&job), MK_DEVICE_NONE);
	assert_int_equal(job.method->device->state(&job, &x, &err), -MK_EUNSUPPORTED);
	mk_job_release(&job);
	free(a);
	free(b);
	free(c);
	free(out);
}

/* ------------------------------------------------- vector kernels, edges */

/* apply's vector loops against the element-by-element reference above
 * (export_ref) on sizes that are not a multiple of any vector width,
 * chunks that start anywhere, special values (NaN, inf, -0, exact ties
 * in |delta|, deltas of zero) and densities 0 and 1, with and without a
 * rescale (DARE then keeps its pass's mask bits, else draws in apply):
 * bit for bit, a NaN for a NaN. */
static void test_vector_edges(void **st)
{
	static const char *all[] = { "task_arithmetic", "ties", "dare_linear", "dare_ties", "breadcrumbs",
				     "breadcrumbs_ties", "della", "della_linear", "ties_count_consensus" };
	static const uint64_t sizes[] = { 1, 7, 15, 17, 31, 33, 1023, 1025, 4103 };
	static const uint64_t chunks[] = { 0, 1, 5, 13, 1000 };
	const float special[] = { NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f, -1e-40f, 3.0f };
	enum { N = 4103, NIN = 4 };
	float *in[NIN], *out = malloc(N * 4);
	const void *v[NIN];
	struct mk_device_job x;
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	assert_non_null(out);
	for (int i = 0; i < NIN; i++) {
		assert_non_null(in[i] = malloc(N * 4));
		v[i] = in[i];
	}
	for (int e = 0; e < N; e++) {
		in[0][e] = (float)frand();
		in[1][e] = in[0][e] + (float)(round(frand() * 16) / 64);   /* ties, zeros */
		in[2][e] = in[0][e] - (float)(round(frand() * 8) / 32);
		in[3][e] = in[0][e] + (float)frand() * 1e-3f;
		if (e % 97 == 3)
			in[1 + e % 3][e] = special[(e / 97) % 8];
		if (e % 211 == 5)
			in[0][e] = special[(e / 211) % 8];
	}
	for (size_t m = 0; m < sizeof(all) / sizeof(all[0]); m++) {
		const struct mk_method *meth = strcmp(all[m], "ties_count_consensus") ? mk_method_find(all[m])
										      : &mk_gta_method_ties_count;
		bool sel = strstr(all[m], "ties") || strstr(all[m], "breadcrumbs");
		bool dare = !strncmp(all[m], "dare", 4), della = !strncmp(all[m], "della", 5);
		/* three task vectors, and two (the kernels' unrolled case) */
		for (int nin = NIN; nin >= NIN - 1; nin--)
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			uint64_t n = sizes[si], shape[2] = { 1, n };
			for (int variant = 0; variant < 4; variant++) {
				/* densities: variant 0 mixed, 1 one input 0 (where valid)
				 * and one 1, 2 all 1, 3 small; rescale on in 0 and 3 */
				double dens[3] = { 0.3, 0.55, 0.8 };
				uint64_t ch = chunks[(si + (size_t)variant) % 5];
				if (variant == 1) {
					dens[0] = sel ? 1.0 : 0.0;
					dens[1] = 1.0;
				} else if (variant == 2) {
					dens[0] = dens[1] = dens[2] = 1.0;
				} else if (variant == 3) {
					dens[0] = della ? 0.2 : 0.05;
					dens[1] = 0.6;
				}
				if (sel && n * dens[0] < 1.0)   /* int(density * n) = 0: an error */
					dens[0] = 1.0;
				for (int i = 1; i < 3; i++)
					if (sel && n * dens[i] < 1.0)
						dens[i] = 1.0;
				tj_method(&t, meth, (size_t)nin, 0);
				set_shape(&t, MK_DT_F32, 2, shape);
				set_in(&t, 1, "weight", mk_pval_float(0.7));
				set_in(&t, 2, "weight", mk_pval_float(variant == 1 ? 0.5 : -0.4));
				if (nin > 3)
					set_in(&t, 3, "weight", mk_pval_float(0.25));
				for (int i = 1; i < nin; i++)
					set_in(&t, (size_t)i, "density", mk_pval_float(dens[i - 1]));
				if (dare || della || sel)
					set_g(&t, "rescale", mk_pval_bool(variant == 0 || variant == 3));
				set_g(&t, "lambda", mk_pval_float(variant == 2 ? 1.0 : 0.9));
				if (della)
					for (int i = 1; i < nin; i++)
						set_in(&t, (size_t)i, "epsilon", mk_pval_float(0.01));
				if (tj_run(&t, MK_DT_COUNT, v, ch, out, variant == 3, &job, NULL, &err))
					fail_msg("%s %d inputs n %llu variant %d: %s", all[m], nin, (unsigned long long)n,
						 variant, err.msg);
				assert_int_equal(job.method->device->state(&job, &x, &err), 0);
				for (uint64_t e = 0; e < n; e++) {
					float r = export_ref(&x, v, e);
					/* a NaN's sign and payload are not specified (IEEE
					 * 754 leaves them to the machine; the compiler
					 * may order a NaN's operands either way) */
					if (memcmp(&r, &out[e], 4) && !(isnan(r) && isnan(out[e])))
						fail_msg("%s %d inputs n %llu chunk %llu variant %d element %llu: apply %.9g "
							 "(%08x), reference %.9g", all[m], nin, (unsigned long long)n,
							 (unsigned long long)ch, variant, (unsigned long long)e, out[e],
							 *(uint32_t *)&out[e], r);
				}
				mk_job_release(&job);
			}
		}
	}
	for (int i = 0; i < NIN; i++)
		free(in[i]);
	free(out);
}

/* DELLA's ranks (a radix sort in gta.c) against a comparison sort: over
 * a zero base with weight 1 and no rescale, della_linear's output is the
 * delta where u(e) < p(rank of |delta| in its row, equal values lower
 * index first), computed here with qsort; float32 and float64, rows of
 * 2-D and strided rows of 3-D tensors, many equal magnitudes, NaN and inf. */
struct rank_ref {
	double a;
	uint64_t j;
};

static int rank_ref_cmp(const void *pa, const void *pb)
{
	const struct rank_ref *x = pa, *y = pb;
	uint64_t kx, ky;

	memcpy(&kx, &x->a, 8);
	memcpy(&ky, &y->a, 8);
	if (kx != ky)
		return kx < ky ? -1 : 1;
	return x->j < y->j ? -1 : x->j > y->j;
}

static void della_rank_sort_rs(int L, int R, int S3)
{
	const int N = R * L * S3;
	const double rho = 0.4, eps = 0.1;
	float *zf = calloc(N, 4), *xf = malloc(N * 4), *of = malloc(N * 4);
	double *zd = calloc(N, 8), *xd = malloc(N * 8), *od = malloc(N * 8);
	struct rank_ref *r = malloc(L * sizeof(*r));
	struct tj t;

	assert_true(zf && xf && of && zd && xd && od && r);
	/* set 0: few magnitudes, NaN and -inf (keys spanning everything);
	 * set 1: magnitudes like a bfloat16 model's deltas (float32 ranks by
	 * counting on the keys' upper halves): zeros, values with only upper
	 * bits, and values sharing upper halves that differ below them, in
	 * buckets small (sorted by insertion) and large (> 64, sorted by
	 * radix); set 2: one class, every upper half the same and the lower
	 * halves nonzero (every draw near its threshold: each settled on
	 * the exact rank, which needs every element in the class's sort);
	 * set 3: most of a row in one class of nonzero lower halves whose
	 * upper half is the row's lowest + 14, its class 2 * 15 + 1 (class 0
	 * holds the zeros), the last lane of the first block the vector
	 * scans take 32 at a time (the margin comes from that class's size:
	 * missed, draws go unsettled) */
	for (int set = 0; set < 4; set++) {
	for (int e = 0; e < N; e++) {
		if (set == 3) {
			uint32_t j = (uint32_t)(e % L), bits;
			if (j % 4 == 0)
				bits = (0x3F00u + (j / 4) % 14) << 16;     /* upper halves lo .. lo + 13 */
			else
				bits = 0x3F0E0000u | (1u + (uint32_t)e * 2654435761u % 65535u);
			memcpy(&xf[e], &bits, 4);
			if (e % 2)
				xf[e] = -xf[e];
		} else if (set == 0) {
			xf[e] = (float)(round(frand() * 12) / 16);       /* few magnitudes */
			if (e % 53 == 7)
				xf[e] = e % 2 ? NAN : -INFINITY;
		} else if (set == 2) {
			xf[e] = 0.5f + (float)((1 + (uint32_t)e * 7919u % 65535u) * 0x1p-24);
			if (e % 2)
				xf[e] = -xf[e];
		} else {
			double u = (frand() + 1) / 2, q = round(frand() * 12);
			if (u < 0.15)
				xf[e] = 0.0f;
			else if (u < 0.5)
				xf[e] = (float)(q / 64);
			else if (u < 0.8)                                 /* one large bucket */
				xf[e] = 0.5f + (float)(round(fabs(frand()) * 6) * 0x1p-21);
			else                                              /* small buckets */
				xf[e] = (float)((1.0 + q / 16) * 0x1p-9 + round(frand() * 3) * 0x1p-30);
			if (e % 2)
				xf[e] = -xf[e];
		}
		xd[e] = xf[e];
	}
	for (int f64 = 0; f64 < 2; f64++) {
		for (int nd = 2; nd <= 3; nd++) {
			const uint64_t shape[3] = { nd == 2 ? R * S3 : R, L, S3 };
			uint64_t S = nd == 2 ? 1 : S3, rows = N / (L * S);
			const void *v[2] = { f64 ? (const void *)zd : zf, f64 ? (const void *)xd : xf };
			uint64_t stream;
			tj_init(&t, "della_linear", 2, 0);
			set_shape(&t, f64 ? MK_DT_F64 : MK_DT_F32, (unsigned)nd, shape);
			set_in(&t, 1, "weight", mk_pval_float(1.0));
			set_in(&t, 1, "density", mk_pval_float(rho));
			set_in(&t, 1, "epsilon", mk_pval_float(eps));
			set_g(&t, "rescale", mk_pval_bool(false));
			assert_int_equal(run_job(&t, v, 1000, f64 ? (void *)od : (void *)of, NULL), 0);
			stream = mk_rng_stream(t.d.seed, t.d.tensor, 1);
			for (uint64_t g = 0; g < rows; g++) {
				for (uint64_t c = 0; c < S; c++) {
					uint64_t base = g * L * S + c;
					for (uint64_t j = 0; j < (uint64_t)L; j++) {
						uint64_t e = base + j * S;
						r[j].a = f64 ? fabs(xd[e]) : (double)fabsf(xf[e]);
						r[j].j = j;
					}
					qsort(r, L, sizeof(*r), rank_ref_cmp);
					for (uint64_t i = 0; i < (uint64_t)L; i++) {
						uint64_t e = base + r[i].j * S;
						double p = f64 ? mk_gta_della_prob_f64(i, L, rho, eps)
							       : (double)mk_gta_della_prob_f32(i, L, rho, eps);
						bool keep = mk_rng_uniform(stream, e) < p;
						if (f64) {
							/* the base + (delta * kept) * weight */
							double want = 0.0 + ((xd[e] - 0.0) * (keep ? 1.0 : 0.0)) * 1.0;
							if (memcmp(&want, &od[e], 8))
								fail_msg("f64 %dD element %llu: %g, want %g", nd,
									 (unsigned long long)e, od[e], want);
						} else {
							float want = 0.0f + ((xf[e] - 0.0f) * (keep ? 1.0f : 0.0f)) * 1.0f;
							if (memcmp(&want, &of[e], 4))
								fail_msg("f32 %dD element %llu: %g, want %g", nd,
									 (unsigned long long)e, of[e], want);
						}
					}
				}
			}
		}
	}
	}
	free(zf);
	free(xf);
	free(of);
	free(zd);
	free(xd);
	free(od);
	free(r);
}

static void della_rank_sort(int L)
{
	della_rank_sort_rs(L, 6, 7);
}

/* rows of odd length (row starts anywhere), and of a multiple of 16 (the
 * vector draws whole mask bytes); the longest rows whose class counts
 * are 16-bit (where AVX-512 is not) and the shortest that are not */
static void test_della_rank_sort(void **st)
{
	(void)st;
	della_rank_sort(301);
	della_rank_sort(512);
	della_rank_sort_rs(65535, 2, 2);
	della_rank_sort_rs(65536, 2, 2);
}

/* The same bits from the portable C as from the AVX-512 paths: the
 * vector-edge and rank tests again with the AVX-512 paths off (on a CPU
 * without AVX-512 both runs take the C paths). */
/* DELLA's float32 ranks are 32-bit: a row of 2^31 elements is refused
 * by name before anything its size is allocated (float64 takes it). */
static void test_della_long_rows(void **st)
{
	const uint64_t shape[1] = { 1ull << 31 };
	struct tj t;
	struct mk_job job;
	struct mk_err err = { 0 };

	(void)st;
	tj_init(&t, "della", 2, 0);
	set_shape(&t, MK_DT_F32, 1, shape);
	set_all(&t, "weight", 1.0);
	set_all(&t, "density", 0.5);
	set_all(&t, "epsilon", 0.1);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "della ranks rows of at most 2147483647"));
}

/* DARE's statistics pass on each path this CPU has (one AVX-512 loop,
 * AVX2 draws over the arrays, the portable loops) gives the same mask
 * bytes and the same float64 lanes and totals of both L1 sums, bit for
 * bit: float32 and BF16 inputs with NaN, infinities, zeros and equal
 * values among them, starts off the lanes, the mask bytes and the sum
 * blocks, lengths across tiles and blocks, and no mask. */
static void test_rand_paths(void **st)
{
	enum { N = 9000 };
	static float xf[N], bf[N];
	static uint16_t xh[N], bh[N];
	static const uint64_t starts[] = { 0, 3, 8, 4093, 4096 * 3 - 5, 1000003 };
	enum { MB = (1000003 + N) / 8 + 16 };   /* the mask's bytes: bit e of element e */
	uint8_t *mask[3];
	static const uint64_t lens[] = { 1, 7, 8, 9, 1023, 1024, 1025, 4099, N };
	const float special[] = { NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 1e-40f };
	int was = mk_gta_simd_limit(MK_GTA_SIMD_AVX512);

	(void)st;
	for (int k = 0; k < 3; k++)
		assert_non_null(mask[k] = malloc(MB));
	for (int e = 0; e < N; e++) {
		bf[e] = (float)frand();
		xf[e] = e % 5 == 0 ? bf[e] : bf[e] + (float)frand() * (e % 3 ? 1e-2f : 1.0f);
		/* the special values past element 4200: the shorter lengths'
		 * sums stay finite, and must differ before and after */
		if (e > 4200 && e % 89 == 7)
			xf[e] = special[(e / 89) % 6];
		if (e > 4200 && e % 131 == 11)
			bf[e] = special[(e / 131) % 6];
		uint32_t u, v;
		memcpy(&u, &xf[e], 4);
		memcpy(&v, &bf[e], 4);
		xh[e] = (uint16_t)(u >> 16);
		bh[e] = (uint16_t)(v >> 16);
	}
	for (int h = 0; h < 2; h++)
		for (size_t si = 0; si < sizeof(starts) / sizeof(*starts); si++)
			for (size_t li = 0; li < sizeof(lens) / sizeof(*lens); li++)
				for (int withmask = 0; withmask < 2; withmask++) {
					uint64_t e0 = starts[si], n = lens[li], thr = (1ull << 53) / 3 * (1 + li % 2);
					double sb[3][9], sa[3][9];
					for (int top = MK_GTA_SIMD_AVX512; top >= MK_GTA_SIMD_C; top--) {
						mk_gta_simd_limit(top);
						memset(mask[top], 0, MB);
						mk_gta_rand_sums(0x1234567ull + si, thr, e0, n, h ? (const void *)xh : xf,
								 h ? (const void *)bh : bf, h, withmask ? mask[top] : NULL,
								 sb[top], sa[top]);
					}
					for (int top = MK_GTA_SIMD_AVX2; top <= MK_GTA_SIMD_AVX512; top++) {
						assert_memory_equal(sb[top], sb[MK_GTA_SIMD_C], sizeof(sb[0]));
						assert_memory_equal(sa[top], sa[MK_GTA_SIMD_C], sizeof(sa[0]));
						assert_memory_equal(mask[top], mask[MK_GTA_SIMD_C], MB);
					}
					/* not vacuous: some kept, some not, the sums differ */
					if (n >= 1023 && n < 4200 && withmask) {
						uint64_t kept = 0;
						for (uint64_t e = e0; e < e0 + n; e++)
							kept += (mask[0][e >> 3] >> (e & 7)) & 1;
						assert_true(kept > 0 && kept < n);
						assert_true(memcmp(sb[0], sa[0], sizeof(sb[0])) != 0);
					}
				}
	for (int k = 0; k < 3; k++)
		free(mask[k]);
	mk_gta_simd_limit(was);
}

/* The same cases on the AVX2 paths (where the CPU has AVX2; on a CPU
 * with AVX-512 the default run took those) and on the portable C. */
static void test_lower_paths(void **st)
{
	int was = mk_gta_simd_limit(MK_GTA_SIMD_AVX2);

	for (int top = MK_GTA_SIMD_AVX2; top >= MK_GTA_SIMD_C; top--) {
		mk_gta_simd_limit(top);
		test_vector_edges(st);
		test_della_rank_sort(st);
		test_cut_recorded(st);
		test_stats_bf16(st);
		test_window(st);
		test_window_bf16(st);
		test_dense_bucket(st);
	}
	mk_gta_simd_limit(was);
}

/* ------------------------------------------------------ random statistics */

#define SN (1u << 20)

/* 4 binomial standard deviations of n trials at p. */
static double four_sd(double p, double n)
{
	return 4.0 * sqrt(p * (1.0 - p) * n);
}

/* delta'_m of input `which` (1 or 2) of a method over a zero base:
 * weight 1 for it, 0 for the other, no normalisation. */
static void sparsified(const char *method, uint64_t seed, double density, bool rescale,
		       int which, const float *x1, const float *x2, float *out, uint64_t chunk)
{
	static float *zero;
	const void *v[3];
	const uint64_t shape[2] = { 1024, SN / 1024 };
	struct tj t;

	if (!zero)
		assert_non_null(zero = calloc(SN, 4));
	v[0] = zero;
	v[1] = x1;
	v[2] = x2;
	tj_init(&t, method, 3, 0);
	t.d.seed = seed;
	set_shape(&t, MK_DT_F32, 2, shape);
	set_in(&t, 1, "weight", mk_pval_float(which == 1 ? 1.0 : 0.0));
	set_in(&t, 2, "weight", mk_pval_float(which == 2 ? 1.0 : 0.0));
	set_all(&t, "density", density);
	set_g(&t, "normalize", mk_pval_bool(false));
	set_g(&t, "rescale", mk_pval_bool(rescale));
	assert_int_equal(run_job(&t, v, chunk, out, NULL), 0);
}

static void test_random_statistics(void **st)
{
	static const char *rnd[] = { "dare_linear", "dare_ties", "della", "della_linear" };
	float *x1 = malloc(SN * 4), *x2 = malloc(SN * 4), *o1 = malloc(SN * 4),
	      *o2 = malloc(SN * 4), *o3 = malloc(SN * 4);
	bool verbose = getenv("MK_TEST_VERBOSE") != NULL;

	assert_true(x1 && x2 && o1 && o2 && o3);
	for (uint32_t i = 0; i < SN; i++) {
		double r1 = frand(), r2 = frand();
		x1[i] = (float)(r1 + (r1 >= 0 ? 1e-3 : -1e-3));   /* never zero */
		x2[i] = (float)(r2 + (r2 >= 0 ? 1e-3 : -1e-3));
	}
	for (size_t m = 0; m < 4; m++) {
		static const double dens[] = { 0.1, 0.3, 0.5, 0.66, 0.9 };
		for (size_t k = 0; k < 5; k++) {
			double rho = dens[k], l1 = 0, l1k = 0, factor = -1;
			uint64_t kept = 0, both = 0;
			if (m >= 2 && (rho + 0.15 >= 1 || rho - 0.15 <= 0))
				continue;
			/* without rescale: kept elements bit-identical, others 0 */
			sparsified(rnd[m], 7, rho, false, 1, x1, x2, o1, 0);
			sparsified(rnd[m], 7, rho, false, 2, x1, x2, o2, 0);
			for (uint32_t i = 0; i < SN; i++) {
				assert_true(o1[i] == 0.0f || o1[i] == x1[i]);
				kept += o1[i] != 0.0f;
				both += o1[i] != 0.0f && o2[i] != 0.0f;
			}
			if (fabs((double)kept - rho * SN) > four_sd(rho, SN))
				fail_msg("%s density %g: kept %llu of %u", rnd[m], rho,
					 (unsigned long long)kept, SN);
			/* independent masks per model: overlap rho^2, not rho */
			if (fabs((double)both - rho * rho * SN) > four_sd(rho * rho, SN))
				fail_msg("%s density %g: %llu kept in both", rnd[m], rho,
					 (unsigned long long)both);
			if (verbose)
				print_message("%s density %.2f: keep %.5f (4sd %.5f), overlap %.5f "
					      "(rho^2 %.4f)\n", rnd[m], rho, (double)kept / SN,
					      four_sd(rho, SN) / SN, (double)both / SN, rho * rho);
			/* with rescale: one common factor, L1 matched */
			sparsified(rnd[m], 7, rho, true, 1, x1, x2, o3, 0);
			/* the factor f: o3 = o1 * f in float32 for every kept element;
			 * o3 / o1 of one element is f or a neighbour of it */
			float cand[3] = { 0 };
			int fits = 0;
			for (uint32_t i = 0; i < SN; i++)
				if (o1[i] != 0.0f) {
					cand[0] = o3[i] / o1[i];
					cand[1] = nextafterf(cand[0], INFINITY);
					cand[2] = nextafterf(cand[0], -INFINITY);
					break;
				}
			for (int q = 0; q < 3 && !fits; q++) {
				fits = 1;
				for (uint32_t i = 0; i < SN && fits; i++)
					fits = o3[i] == o1[i] * cand[q];
				if (fits)
					factor = cand[q];
			}
			if (!fits)
				fail_msg("%s density %g: no common rescale factor", rnd[m], rho);
			for (uint32_t i = 0; i < SN; i++) {
				l1 += fabs((double)x1[i]);
				l1k += fabs((double)o3[i]);
			}
			if (fabs(l1k - l1) > 1e-6 * l1)
				fail_msg("%s density %g: L1 %.9g after, %.9g before", rnd[m], rho, l1k, l1);
			if (verbose)
				print_message("   rescale factor %.6f (1/rho %.6f), L1 rel diff %.2g\n",
					      factor, 1 / rho, fabs(l1k - l1) / l1);
		}
		/* same seed: bit-identical, any chunking; another seed differs */
		sparsified(rnd[m], 7, 0.4, true, 1, x1, x2, o1, 0);
		sparsified(rnd[m], 7, 0.4, true, 1, x1, x2, o2, 4097);
		assert_memory_equal(o1, o2, SN * 4);
		sparsified(rnd[m], 8, 0.4, true, 1, x1, x2, o2, 0);
		assert_true(memcmp(o1, o2, SN * 4) != 0);
		/* density 0: all zero */
		sparsified(rnd[m], 7, 0.0, true, 1, x1, x2, o1, 0);
		for (uint32_t i = 0; i < SN; i++)
			assert_true(o1[i] == 0.0f);
	}
	free(x1);
	free(x2);
	free(o1);
	free(o2);
	free(o3);
}

/* DELLA: keep frequency of rank r within rows ~ rho - eps + 2 eps r/(L-1). */
static void test_della_ranks(void **st)
{
	enum { L = 50, ROWS = 20000 };
	float *x = malloc(L * ROWS * 4), *z = calloc(L * ROWS, 4), *o = malloc(L * ROWS * 4);
	const uint64_t shape[2] = { ROWS, L };
	const void *v[2] = { z, x };
	uint64_t cnt[L] = { 0 }, total = 0;
	double worst = 0;
	struct tj t;

	assert_true(x && z && o);
	for (int r = 0; r < ROWS; r++)
		for (int j = 0; j < L; j++) {
			int rank = (j * 7 + r) % L;          /* a permutation per row */
			x[r * L + j] = (float)(rank + 1) * (j & 1 ? -1.0f : 1.0f);
		}
	tj_init(&t, "della_linear", 2, 0);
	set_shape(&t, MK_DT_F32, 2, shape);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	set_in(&t, 1, "density", mk_pval_float(0.5));
	set_in(&t, 1, "epsilon", mk_pval_float(0.2));
	set_g(&t, "rescale", mk_pval_bool(false));
	assert_int_equal(run_job(&t, v, 333, o, NULL), 0);
	for (int r = 0; r < ROWS; r++)
		for (int j = 0; j < L; j++)
			if (o[r * L + j] != 0.0f) {
				cnt[(j * 7 + r) % L]++;
				total++;
			}
	for (int k = 0; k < L; k++) {
		double p = 0.3 + 0.4 * k / (L - 1), z4 = fabs((double)cnt[k] - p * ROWS) /
							  sqrt(p * (1 - p) * ROWS);
		if (z4 > worst)
			worst = z4;
		if (z4 > 4.0)
			fail_msg("rank %d: kept %llu of %d, expected p %.4f", k,
				 (unsigned long long)cnt[k], ROWS, p);
	}
	if (fabs((double)total - 0.5 * L * ROWS) > four_sd(0.5, L * ROWS))
		fail_msg("kept %llu of %d", (unsigned long long)total, L * ROWS);
	if (getenv("MK_TEST_VERBOSE"))
		print_message("della ranks: worst |z| %.2f over %d ranks, overall keep %.5f\n", worst, L,
			      (double)total / (L * ROWS));
	free(x);
	free(z);
	free(o);
}

/* dare_ties: the sign election runs on the sparsified, rescaled deltas
 * exactly: recompute the whole pipeline from the masks. */
static void test_dare_ties_election(void **st)
{
	enum { N = 4096 };
	float *z = calloc(N, 4), *x1 = malloc(N * 4), *x2 = malloc(N * 4), *o = malloc(N * 4),
	      *s1 = malloc(N * 4), *s2 = malloc(N * 4);
	const uint64_t shape[1] = { N };
	const void *v[3] = { z, x1, x2 };
	struct tj t;

	assert_true(z && x1 && x2 && o && s1 && s2);
	for (int i = 0; i < N; i++) {
		x1[i] = (float)frand();
		x2[i] = (float)frand();
	}
	/* the two sparsified deltas alone (weights 1/0 and 0/1) */
	for (int w = 0; w < 3; w++) {
		tj_init(&t, w ? "dare_ties" : "dare_ties", 3, 0);
		set_shape(&t, MK_DT_F32, 1, shape);
		set_in(&t, 1, "weight", mk_pval_float(w == 0 ? 1.0 : w == 1 ? 0.0 : 0.9));
		set_in(&t, 2, "weight", mk_pval_float(w == 0 ? 0.0 : w == 1 ? 1.0 : 0.35));
		set_all(&t, "density", 0.4);
		set_g(&t, "normalize", mk_pval_bool(w == 2));
		assert_int_equal(run_job(&t, v, 0, w == 0 ? s1 : w == 1 ? s2 : o, NULL), 0);
	}
	for (int i = 0; i < N; i++) {
		float v1 = s1[i] * 0.9f, v2 = s2[i] * 0.35f, sum = v1 + v2;
		float maj = sum >= 0 ? 1.0f : -1.0f;
		float k1 = (float)((v1 > 0) - (v1 < 0)) == maj, k2 = (float)((v2 > 0) - (v2 < 0)) == maj;
		float mix = v1 * k1 + v2 * k2, div = 0.9f * k1 + 0.35f * k2;
		if (div == 0)
			div = 1;
		mix = mix / div;
		if (o[i] != 0.0f + mix)
			fail_msg("element %d: %.9g, want %.9g", i, o[i], mix);
	}
	free(z);
	free(x1);
	free(x2);
	free(o);
	free(s1);
	free(s2);
}

static void test_rng(void **st)
{
	uint64_t a = mk_rng_stream(1, "x", 1), b = mk_rng_stream(1, "x", 2),
		 c = mk_rng_stream(2, "x", 1), d = mk_rng_stream(1, "y", 1);
	double mean = 0;

	assert_true(a != b && a != c && a != d && b != c);
	assert_true(mk_rng_fnv1a64("") == 0xCBF29CE484222325ull);
	assert_true(mk_rng_fnv1a64("a") == 0xAF63DC4C8601EC8Cull);
	for (uint64_t e = 0; e < 100000; e++) {
		double u = mk_rng_uniform(a, e);
		assert_true(u >= 0.0 && u < 1.0);
		mean += u;
	}
	mean /= 100000;
	assert_true(fabs(mean - 0.5) < 4 * sqrt(1.0 / 12 / 100000));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ties_appendix),
		cmocka_unit_test(test_kernels_appendix),
		cmocka_unit_test(test_breadcrumbs_appendix),
		cmocka_unit_test(test_consensus_masks),
		cmocka_unit_test(test_della_probs),
		cmocka_unit_test(test_tie_rule),
		cmocka_unit_test(test_cut_pass_skipped),
		cmocka_unit_test(test_cut_recorded),
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_output_rules),
		cmocka_unit_test(test_chunk_independence),
		cmocka_unit_test(test_export),
		cmocka_unit_test(test_vector_edges),
		cmocka_unit_test(test_della_rank_sort),
		cmocka_unit_test(test_stats_bf16),
		cmocka_unit_test(test_window),
		cmocka_unit_test(test_window_bf16),
		cmocka_unit_test(test_spare_planned),
		cmocka_unit_test(test_dense_bucket),
		cmocka_unit_test(test_lower_paths),
		cmocka_unit_test(test_random_statistics),
		cmocka_unit_test(test_della_ranks),
		cmocka_unit_test(test_dare_ties_election),
		cmocka_unit_test(test_rand_paths),
		cmocka_unit_test(test_rng),
		cmocka_unit_test(test_della_long_rows),
	};
	return cmocka_run_group_tests(tests, setup_inputs, NULL);
}
