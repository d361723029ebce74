/* test_methods_geom.c - the geometric methods: nuslerp, multislerp,
 * karcher, model_stock.
 *
 * Reference values: mergekit's own float32 outputs on method_harness.h's
 * inputs.  Metric: max |mk - ref| <= tol * max(1, max |ref|), tol 1e-6
 * for nuslerp and model_stock, 1e-5 for multislerp and karcher (their
 * float32 iterations / tangent step add rounding noise in mergekit).
 * Then: bit-identical output for chunks of 1, 7, one row and the whole
 * tensor in every vector layout; parameter and contract errors; output
 * rules (dtype, shape, passes, single-input copies); degenerate inputs
 * (antipodal, zero, identical, singular) against the decided behaviour.
 * The Gram pass itself (geom.c): with k >= MK_GEOM_BLAS_K signals its
 * OpenBLAS segments give bit-identical matrices for every chunking, close
 * to the scalar sums.
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
#include "methods/geom.h"


/* ------------------------------------------------------------ fixtures */

static float WP[12], WM[12];

static int setup_inputs(void **st)
{
	fixtures_init();
	for (int i = 0; i < 12; i++) {
		WP[i] = W0[i] + D1[i] / 64.0f;
		WM[i] = W0[i] - D1[i] / 64.0f;
	}
	return 0;
}

static int run_job_err(struct tj *t, enum mk_dtype out_dtype, const void *const *views,
		       uint64_t chunk, void *out, struct mk_job *keep, struct mk_err *err)
{
	return tj_run(t, out_dtype, views, chunk, out, false, keep, NULL, err);
}

static void run_job(struct tj *t, const void *const *views, uint64_t chunk, void *out)
{
	struct mk_err err;
	int rc = run_job_err(t, MK_DT_COUNT, views, chunk, out, NULL, &err);
	if (rc)
		fail_msg("job failed: %s", err.msg);
}

#define assert_close_tol tj_assert_close

static void expect_plan_error(struct tj *t, int code, const char *needle1, const char *needle2)
{
	struct mk_plan_out po;
	struct mk_err err;

	mk_err_clear(&err);
	assert_int_equal(mk_method_plan(t->m, &t->d, &po, NULL, NULL, NULL, &err), -code);
	if (!strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2)))
		fail_msg("message '%s' lacks '%s' / '%s'", err.msg, needle1, needle2 ? needle2 : "");
}

/* ------------------------------------------------------------- nuslerp */

/* models [M1 w0.4, M2 w0.6], optional base W0 (first input) */
static void nuslerp_case(bool base, bool row_wise, bool flatten, const float *ref)
{
	struct tj t;
	float out[12];
	size_t o = base ? 1 : 0;
	const void *v[3];

	tj_init(&t, "nuslerp", base ? 3 : 2, base ? 0 : -1);
	if (base)
		v[0] = W0;
	v[o] = M1;
	v[o + 1] = M2;
	set_in(&t, o, "weight", mk_pval_float(0.4));
	set_in(&t, o + 1, "weight", mk_pval_float(0.6));
	set_g(&t, "nuslerp_row_wise", mk_pval_bool(row_wise));
	set_g(&t, "nuslerp_flatten", mk_pval_bool(flatten));
	run_job(&t, v, 0, out);
	assert_close_tol(out, ref, 12, 1e-6);
}

static void test_nuslerp_appendix(void **st)
{
	static const float r1[12] = { 0.49238917f, -0.4171f, 1.0975747f, 0.37633595f,
				      -0.71194446f, 0.4579191f, -0.16616663f, 2.0164316f,
				      1.8565222f, -1.1384487f, 0.6742907f, -0.87492746f };
	static const float r2[12] = { 0.492118f, -0.4168733f, 1.0969869f, 0.37613058f,
				      -0.71291035f, 0.45854655f, -0.16637024f, 2.0190845f,
				      1.8543309f, -1.1370801f, 0.6734791f, -0.8739019f };
	static const float r3[12] = { 0.49184915f, -0.41624212f, 1.1006256f, 0.37507576f,
				      -0.711158f, 0.4569483f, -0.16659863f, 2.0097752f,
				      1.8545259f, -1.1360793f, 0.67621773f, -0.87204814f };
	static const float r4[12] = { 0.49094388f, -0.4372706f, 1.1050031f, 0.4075299f,
				      -0.707089f, 0.46907446f, -0.18520752f, 2.0104315f,
				      1.8954043f, -1.122949f, 0.6799085f, -0.91882765f };
	static const float r5[12] = { 0.49072778f, -0.4234112f, 1.0978056f, 0.3867025f,
				      -0.7001421f, 0.51594335f, -0.25453702f, 2.0141485f,
				      1.8807167f, -1.1266193f, 0.67729574f, -0.9036485f };
	static const float r6[12] = { 0.4909318f, -0.49308008f, 1.117715f, 0.3762904f,
				      -0.7071611f, 0.5026828f, -0.20730549f, 2.009417f,
				      1.8939103f, -1.0943956f, 0.68917006f, -0.87373936f };

	nuslerp_case(false, false, true, r1);
	nuslerp_case(false, false, false, r2);
	nuslerp_case(false, true, false, r3);
	nuslerp_case(true, false, true, r4);
	nuslerp_case(true, false, false, r5);
	nuslerp_case(true, true, false, r6);
	/* flatten wins over row_wise */
	nuslerp_case(false, true, true, r1);
}

static void test_nuslerp_zero_weight_sum(void **st)
{
	static const float ref[12] = { 0.5081857f, -0.43008485f, 1.0900425f, 0.39512727f,
				       -0.737434f, 0.5509232f, -0.23875296f, 2.0125659f,
				       1.8916559f, -1.1648574f, 0.7016283f, -0.90017027f };
	struct tj t;
	float out[12];
	const void *v[3] = { W0, M1, M2 };

	tj_init(&t, "nuslerp", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(-0.5));
	set_in(&t, 2, "weight", mk_pval_float(0.5));
	set_g(&t, "nuslerp_flatten", mk_pval_bool(false));
	run_job(&t, v, 0, out);
	assert_close_tol(out, ref, 12, 1e-6);
}

static void test_nuslerp_degenerate(void **st)
{
	struct tj t;
	float out[12], zero[12] = { 0 }, twice[12], neg[12];
	const void *v[3];

	/* anti-parallel (no base): the lerp path, finite (mergekit 0.1.4 exploded) */
	for (int i = 0; i < 12; i++) {
		neg[i] = -W0[i];
		twice[i] = 2 * W0[i];
	}
	tj_init(&t, "nuslerp", 2, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.7));
	set_in(&t, 1, "weight", mk_pval_float(0.3));
	v[0] = W0;
	v[1] = neg;
	run_job(&t, v, 0, out);
	for (int i = 0; i < 12; i++)
		assert_float_equal(out[i], 0.7f * W0[i] + 0.3f * neg[i], 1e-6);
	/* parallel: lerp too */
	v[1] = twice;
	run_job(&t, v, 0, out);
	for (int i = 0; i < 12; i++)
		assert_float_equal(out[i], 0.7f * W0[i] + 0.3f * twice[i], 1e-6);
	/* base with M1 == base: v0 = 0 -> c = 0, theta = pi/2, the ordinary formula */
	tj_init(&t, "nuslerp", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	set_in(&t, 2, "weight", mk_pval_float(0.5));
	v[0] = W0;
	v[1] = W0;
	v[2] = M2;
	run_job(&t, v, 0, out);
	for (int i = 0; i < 12; i++) {
		float d = M2[i] - W0[i];
		float r = (float)sin(M_PI / 4) * d;
		assert_float_equal(out[i], W0[i] + r, 1e-6);
	}
	/* both zero: zeros */
	tj_init(&t, "nuslerp", 2, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	v[0] = zero;
	v[1] = zero;
	run_job(&t, v, 0, out);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == 0.0f);
}

static void test_nuslerp_rules(void **st)
{
	struct tj t;
	struct mk_plan_out po;
	struct mk_err err;
	struct mk_job job;
	bool used[3];
	float out[12];
	const void *v[1] = { M1 };

	/* a missing weight names the model */
	tj_init(&t, "nuslerp", 2, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	expect_plan_error(&t, MK_EINVAL, "'weight' is required", "model-b");
	/* the base needs no weight */
	tj_init(&t, "nuslerp", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	set_in(&t, 2, "weight", mk_pval_float(0.5));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_int_equal(po.npasses, 1);
	assert_int_equal(po.out.dtype, MK_DT_F32);
	assert_int_equal(po.compute, MK_DT_F32);
	/* the base as one of the two models: base + 1 model */
	tj_init(&t, "nuslerp", 2, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	expect_plan_error(&t, MK_EINVAL, "exactly two models besides the base", "cannot be one of them");
	/* three models without a base */
	tj_init(&t, "nuslerp", 3, -1);
	for (int i = 0; i < 3; i++)
		set_in(&t, (size_t)i, "weight", mk_pval_float(0.5));
	expect_plan_error(&t, MK_EINVAL, "inputs besides the base, it takes at most 2", NULL);
	/* one input: returned as is, no pass */
	tj_init(&t, "nuslerp", 1, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.npasses, 0);
	assert_int_equal(job.copy_input, 0);
	assert_true(job.byte_copy);
	mk_job_release(&job);
	run_job(&t, v, 0, out);
	assert_memory_equal(out, M1, sizeof(out));
	/* bf16 inputs: bf16 output, float32 compute; float64: float64 */
	tj_init(&t, "nuslerp", 2, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	t.in[0].dtype = t.in[1].dtype = MK_DT_BF16;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.dtype, MK_DT_BF16);
	assert_int_equal(po.compute, MK_DT_F32);
	t.in[0].dtype = t.in[1].dtype = MK_DT_F64;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.dtype, MK_DT_F64);
	assert_int_equal(po.compute, MK_DT_F64);
	t.in[0].dtype = MK_DT_I64;
	expect_plan_error(&t, MK_EUNSUPPORTED, "only float tensors", NULL);
	/* embeddings: the common top-left block (base included) */
	tj_init(&t, "nuslerp", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	set_in(&t, 2, "weight", mk_pval_float(0.5));
	t.in[0] = td(MK_DT_F32, 2, 5, 4);
	t.in[1] = td(MK_DT_F32, 2, 3, 6);
	t.in[2] = td(MK_DT_F32, 2, 4, 4);
	t.d.is_embed = true;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.ndim, 2);
	assert_int_equal(po.out.shape[0], 3);
	assert_int_equal(po.out.shape[1], 4);
	t.d.is_embed = false;
	expect_plan_error(&t, MK_EMISMATCH, "size mismatch", NULL);
}

/* ---------------------------------------------------------- multislerp */

static void test_multislerp_appendix(void **st)
{
	static const float r_nobase[12] = { 0.55044657f, -0.3806047f, 1.0324671f, 0.41619843f,
					    -0.84175986f, 0.5203055f, -0.08623445f, 2.0255563f,
					    1.7281054f, -1.2547377f, 0.75223535f, -0.7861889f };
	static const float r_base[12] = { 0.5612899f, -0.42801383f, 1.0302562f, 0.52192116f,
					  -0.86314183f, 0.5701226f, -0.119247f, 2.0021272f,
					  1.7966541f, -1.2371534f, 0.78973925f, -0.8881103f };
	static const float r_nonorm[12] = { 0.6143444f, -0.8576392f, 1.2477038f, 1.0284421f,
					    -0.89218503f, 0.88557154f, -0.40890372f, 2.0181458f,
					    2.7515697f, -1.180773f, 0.9807099f, -1.7055833f };
	static const double w3[3] = { 0.5, 0.3, 0.2 };
	struct tj t;
	float out[12];

	{
		const void *v[3] = { M1, M2, M3 };
		tj_init(&t, "multislerp", 3, -1);
		for (size_t i = 0; i < 3; i++)
			set_in(&t, i, "weight", mk_pval_float(w3[i]));
		run_job(&t, v, 0, out);
		assert_close_tol(out, r_nobase, 12, 1e-5);
	}
	{
		const void *v[4] = { W0, M1, M2, M3 };
		tj_init(&t, "multislerp", 4, 0);
		for (size_t i = 0; i < 3; i++)
			set_in(&t, i + 1, "weight", mk_pval_float(w3[i]));
		run_job(&t, v, 0, out);
		assert_close_tol(out, r_base, 12, 1e-5);
	}
	{
		const void *v[3] = { W0, M1, M2 };
		tj_init(&t, "multislerp", 3, 0);
		set_in(&t, 1, "weight", mk_pval_float(2));
		set_in(&t, 2, "weight", mk_pval_float(1));
		set_g(&t, "normalize_weights", mk_pval_bool(false));
		run_job(&t, v, 0, out);
		assert_close_tol(out, r_nonorm, 12, 1e-5);
	}
}

static void test_multislerp_zero_mean(void **st)
{
	struct tj t;
	float out[12];
	struct mk_err err;

	/* two antipodal models with equal weights: the linear fallback (== W0) */
	{
		const void *v[3] = { W0, WP, WM };
		tj_init(&t, "multislerp", 3, 0);
		set_in(&t, 1, "weight", mk_pval_float(0.5));
		set_in(&t, 2, "weight", mk_pval_float(0.5));
		run_job(&t, v, 0, out);
		assert_close_tol(out, W0, 12, 1e-6);
	}
	/* three models whose weighted directions cancel: a clear error */
	{
		const void *v[4] = { W0, WP, WM, WP };
		tj_init(&t, "multislerp", 4, 0);
		set_in(&t, 1, "weight", mk_pval_float(0.25));
		set_in(&t, 2, "weight", mk_pval_float(0.5));
		set_in(&t, 3, "weight", mk_pval_float(0.25));
		assert_int_equal(run_job_err(&t, MK_DT_COUNT, v, 0, out, NULL, &err), -MK_EINVAL);
		assert_non_null(strstr(err.msg, "weighted mean of the 3 models' directions is zero"));
		assert_non_null(strstr(err.msg, "model.layers.0.mlp.down_proj.weight"));
	}
	/* three models equal to the base: the base (mergekit raises) */
	{
		const void *v[4] = { W0, W0, W0, W0 };
		tj_init(&t, "multislerp", 4, 0);
		for (size_t i = 1; i < 4; i++)
			set_in(&t, i, "weight", mk_pval_float(1));
		run_job(&t, v, 0, out);
		assert_memory_equal(out, W0, sizeof(out));
	}
}

static void test_multislerp_closed_form(void **st)
{
	/* out = (sum w_i u_i / |sum w_i u_i|) * sum w_i |x_i| + base */
	enum { N = 300 };
	static float b[N], x[3][N], out[N], ref[N];
	static const double w[3] = { 0.2, 0.5, 0.3 };
	double m[N] = { 0 }, mn = 0.0, sc = 0.0;
	struct tj t;
	const void *v[4] = { b, x[0], x[1], x[2] };

	for (int e = 0; e < N; e++) {
		b[e] = (float)sin(e * 0.37);
		for (int i = 0; i < 3; i++)
			x[i][e] = b[e] + (float)(0.01 * cos(e * (0.11 + 0.07 * i) + i));
	}
	for (int i = 0; i < 3; i++) {
		double nn = 0.0;
		for (int e = 0; e < N; e++) {
			double d = (double)(x[i][e] - b[e]);
			nn += d * d;
		}
		nn = sqrt(nn);
		sc += w[i] * nn;
		for (int e = 0; e < N; e++)
			m[e] += w[i] * (double)(x[i][e] - b[e]) / nn;
	}
	for (int e = 0; e < N; e++)
		mn += m[e] * m[e];
	mn = sqrt(mn);
	for (int e = 0; e < N; e++)
		ref[e] = (float)((double)b[e] + m[e] / mn * sc);
	tj_init(&t, "multislerp", 4, 0);
	for (int i = 0; i < 4; i++)
		t.in[i] = td(MK_DT_F32, 1, N, 0);
	for (size_t i = 0; i < 3; i++)
		set_in(&t, i + 1, "weight", mk_pval_float(w[i]));
	run_job(&t, v, 0, out);
	assert_close_tol(out, ref, N, 1e-6);
}

static void test_multislerp_rules(void **st)
{
	struct tj t;
	struct mk_plan_out po;
	struct mk_err err;
	bool used[3];
	float out[12];
	const void *v[2] = { W0, M1 };

	tj_init(&t, "multislerp", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	expect_plan_error(&t, MK_EINVAL, "'weight' is required", "model-c");
	set_in(&t, 2, "weight", mk_pval_float(-0.5));
	expect_plan_error(&t, MK_EINVAL, "weights sum to 0", "normalize_weights");
	set_g(&t, "normalize_weights", mk_pval_bool(false));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.npasses, 1);
	set_g(&t, "eps", mk_pval_float(0));
	expect_plan_error(&t, MK_EINVAL, "'eps'", "must be > 0");
	set_g(&t, "eps", mk_pval_float(1e-6));
	/* different shapes are an error, even for embeddings */
	t.in[2] = td(MK_DT_F32, 2, 4, 4);
	t.d.is_embed = true;
	expect_plan_error(&t, MK_EMISMATCH, "size mismatch", NULL);
	/* the base alone: no model to merge */
	tj_init(&t, "multislerp", 1, 0);
	expect_plan_error(&t, MK_EINVAL, "at least one model besides the base", NULL);
	/* one model besides the base: that model's tensor, base unread */
	tj_init(&t, "multislerp", 2, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.3));
	t.in[0] = td(MK_DT_F32, 2, 9, 9);   /* not read: its shape does not matter */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_false(used[0]);
	assert_true(used[1]);
	assert_int_equal(po.npasses, 0);
	run_job(&t, v, 0, out);
	assert_memory_equal(out, M1, sizeof(out));
	/* bf16 in, bf16 out */
	tj_init(&t, "multislerp", 3, -1);
	for (int i = 0; i < 3; i++) {
		t.in[i].dtype = MK_DT_BF16;
		set_in(&t, (size_t)i, "weight", mk_pval_float(1));
	}
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.dtype, MK_DT_BF16);
	assert_int_equal(po.compute, MK_DT_F32);
}

/* ------------------------------------------------------------- karcher */

static void test_karcher_appendix(void **st)
{
	static const float r1[12] = { 0.5070628f, -0.3631531f, 1.0659432f, 0.29272795f,
				      -0.74687505f, 0.4454547f, -0.09905012f, 2.0231202f,
				      1.7458279f, -1.2049066f, 0.67294073f, -0.74402833f };
	static const float r2[12] = { 0.54956096f, -0.34285647f, 1.0050076f, 0.4240634f,
				      -0.852748f, 0.49879104f, -0.071583845f, 2.0300498f,
				      1.6214585f, -1.2460109f, 0.7502372f, -0.7374151f };
	struct tj t;
	float out[12];

	{
		/* the base is an ordinary input, averaged with the others */
		const void *v[3] = { M1, M2, W0 };
		tj_init(&t, "karcher", 3, 2);
		run_job(&t, v, 0, out);
		assert_close_tol(out, r1, 12, 1e-5);
	}
	{
		const void *v[3] = { M1, M2, M3 };
		tj_init(&t, "karcher", 3, -1);
		set_g(&t, "max_iter", mk_pval_int(5));
		run_job(&t, v, 0, out);
		assert_close_tol(out, r2, 12, 1e-5);
	}
}

static void test_karcher_properties(void **st)
{
	struct tj t;
	float out[12], zero[12] = { 0 }, twice[12], ref[12];
	struct mk_job job;
	struct mk_err err;

	/* all zero: zeros */
	{
		const void *v[2] = { zero, zero };
		tj_init(&t, "karcher", 2, -1);
		run_job(&t, v, 0, out);
		for (int i = 0; i < 12; i++)
			assert_true(out[i] == 0.0f);
	}
	/* parallel inputs: the common direction times the mean norm (1.5 W0);
	 * a zero input counts in the mean norm but not in the direction */
	for (int i = 0; i < 12; i++) {
		twice[i] = 2 * W0[i];
		ref[i] = 1.5f * W0[i];
	}
	{
		const void *v[2] = { W0, twice };
		tj_init(&t, "karcher", 2, -1);
		run_job(&t, v, 0, out);
		assert_close_tol(out, ref, 12, 1e-6);
	}
	{
		const void *v[3] = { W0, twice, zero };
		tj_init(&t, "karcher", 3, -1);
		run_job(&t, v, 0, out);
		for (int i = 0; i < 12; i++)
			ref[i] = W0[i];
		assert_close_tol(out, ref, 12, 1e-6);
	}
	/* max_iter = 0: the normalized mean of the unit vectors */
	{
		const void *v[3] = { M1, M2, M3 };
		tj_init(&t, "karcher", 3, -1);
		set_g(&t, "max_iter", mk_pval_int(0));
		run_job(&t, v, 0, out);
	}
	/* parameters */
	tj_init(&t, "karcher", 2, -1);
	set_g(&t, "max_iter", mk_pval_int(-1));
	expect_plan_error(&t, MK_EINVAL, "'max_iter'", "must be >= 0");
	set_g(&t, "max_iter", mk_pval_float(2.5));
	expect_plan_error(&t, MK_EINVAL, "'max_iter'", "integer");
	set_g(&t, "max_iter", mk_pval_float(3));
	set_g(&t, "tol", mk_pval_float(-1e-3));
	expect_plan_error(&t, MK_EINVAL, "'tol'", "must be >= 0");
	/* one input: copied */
	tj_init(&t, "karcher", 1, 0);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.npasses, 0);
	assert_int_equal(job.copy_input, 0);
	mk_job_release(&job);
	/* embeddings of different vocabulary sizes: the common block */
	tj_init(&t, "karcher", 2, -1);
	t.in[0] = td(MK_DT_F32, 2, 6, 4);
	t.d.is_embed = true;
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.out.shape[0], 3);
	assert_int_equal(job.npasses, 1);
	mk_job_release(&job);
	t.d.is_embed = false;
	expect_plan_error(&t, MK_EMISMATCH, "size mismatch", NULL);
	/* float64 in: float64 compute */
	tj_init(&t, "karcher", 2, -1);
	t.in[0].dtype = t.in[1].dtype = MK_DT_F64;
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.compute, MK_DT_F64);
	assert_int_equal(job.out.dtype, MK_DT_F64);
	mk_job_release(&job);
}

/* --------------------------------------------------------- model_stock */

static void test_model_stock_appendix(void **st)
{
	static const float r1[12] = { 0.5092342f, -0.27077693f, 0.9988457f, 0.18963929f,
				      -0.7696227f, 0.4015483f, -0.016159821f, 2.0f,
				      1.5253941f, -1.2453828f, 0.65039396f, -0.5519423f };
	static const float r2[12] = { 0.53338754f, -0.32512188f, 0.9958266f, 0.3587124f,
				      -0.7273601f, 0.34436965f, 0.018644549f, 2.0f,
				      1.4307983f, -1.2625821f, 0.5557982f, -0.35845083f };
	static const float r3[12] = { 0.50560004f, -0.37320048f, 1.0616002f, 0.30980074f,
				      -0.74439996f, 0.4534003f, -0.10640043f, 2.0056f,
				      1.757601f, -1.1939998f, 0.6754002f, -0.7632011f };
	struct tj t;
	float out[12];
	const void *v[4] = { W0, M1, M2, M3 };

	tj_init(&t, "model_stock", 4, 0);
	run_job(&t, v, 0, out);
	assert_close_tol(out, r1, 12, 1e-6);
	set_g(&t, "filter_wise", mk_pval_bool(true));
	run_job(&t, v, 0, out);
	assert_close_tol(out, r2, 12, 1e-6);
	tj_init(&t, "model_stock", 3, 0);
	run_job(&t, v, 0, out);
	assert_close_tol(out, r3, 12, 1e-6);
}

static void test_model_stock_rules(void **st)
{
	struct tj t;
	struct mk_plan_out po;
	struct mk_err err;
	struct mk_job job;
	float out[12];

	/* identical models: t = 0, the base */
	{
		const void *v[3] = { W0, M1, M1 };
		float ref[12];
		tj_init(&t, "model_stock", 3, 0);
		run_job(&t, v, 0, out);   /* cos = 1: t = 2/2 = 1 -> the average M1 */
		assert_close_tol(out, M1, 12, 1e-6);
		v[1] = W0;
		v[2] = W0;
		run_job(&t, v, 0, out);
		assert_memory_equal(out, W0, sizeof(out));
		/* opposite offsets, N = 2: c = -1, 1 + c = 0: singular, the base */
		v[1] = WP;
		v[2] = WM;
		run_job(&t, v, 0, out);
		for (int i = 0; i < 12; i++)
			ref[i] = W0[i];
		assert_close_tol(out, ref, 12, 0);
	}
	/* no base */
	tj_init(&t, "model_stock", 3, -1);
	expect_plan_error(&t, MK_EINVAL, "needs a base model", NULL);
	/* base + 1 */
	tj_init(&t, "model_stock", 2, 0);
	expect_plan_error(&t, MK_EINVAL, "at least 2 other models", NULL);
	/* base alone: the base */
	tj_init(&t, "model_stock", 1, 0);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.npasses, 0);
	assert_int_equal(job.copy_input, 0);
	mk_job_release(&job);
	/* embeddings: the common block; otherwise a mismatch */
	tj_init(&t, "model_stock", 3, 0);
	t.in[1] = td(MK_DT_F32, 2, 7, 4);
	t.d.is_embed = true;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.shape[0], 3);
	t.d.is_embed = false;
	expect_plan_error(&t, MK_EMISMATCH, "size mismatch", NULL);
	/* bf16 */
	tj_init(&t, "model_stock", 3, 0);
	for (int i = 0; i < 3; i++)
		t.in[i].dtype = MK_DT_BF16;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.dtype, MK_DT_BF16);
	assert_int_equal(po.compute, MK_DT_F32);
	assert_int_equal(po.npasses, 1);
}

/* ---------------------------------------------------- chunk independence */

#define CR 97
#define CC 131
#define CN (CR * CC)   /* 12707 elements: > 3 summation blocks */

static float cbuf[5][CN];

static void fill_chunk_inputs(void)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (int i = 0; i < 5; i++)
		for (int e = 0; e < CN; e++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			float r = (float)((double)(x >> 11) / 9007199254740992.0 - 0.5);
			cbuf[i][e] = i == 0 ? r : cbuf[0][e] + 0.05f * r;
		}
}

/* Output of t for chunks of 1, 7, one row, the whole tensor: identical. */
static void check_chunks(struct tj *t)
{
	static float ref[CN], out[CN];
	static const uint64_t chunks[] = { 1, 7, CC, 0 };
	const void *v[5] = { cbuf[0], cbuf[1], cbuf[2], cbuf[3], cbuf[4] };

	for (size_t i = 0; i < t->d.ninputs; i++)
		t->in[i] = td(MK_DT_F32, 2, CR, CC);
	run_job(t, v, 0, ref);
	for (int e = 0; e < CN; e++)
		assert_true(isfinite(ref[e]));
	for (size_t k = 0; k < 3; k++) {
		run_job(t, v, chunks[k], out);
		if (memcmp(out, ref, sizeof(out)))
			fail_msg("%s: chunks of %llu differ from one chunk", t->m->name,
				 (unsigned long long)chunks[k]);
	}
}

static void test_chunk_independence(void **st)
{
	struct tj t;

	fill_chunk_inputs();
	for (int mode = 0; mode < 3; mode++) {
		tj_init(&t, "nuslerp", 3, 0);
		set_in(&t, 1, "weight", mk_pval_float(0.3));
		set_in(&t, 2, "weight", mk_pval_float(0.7));
		set_g(&t, "nuslerp_flatten", mk_pval_bool(mode == 0));
		set_g(&t, "nuslerp_row_wise", mk_pval_bool(mode == 2));
		check_chunks(&t);
		tj_init(&t, "nuslerp", 2, -1);
		set_in(&t, 0, "weight", mk_pval_float(0.3));
		set_in(&t, 1, "weight", mk_pval_float(0.7));
		set_g(&t, "nuslerp_flatten", mk_pval_bool(mode == 0));
		set_g(&t, "nuslerp_row_wise", mk_pval_bool(mode == 2));
		check_chunks(&t);
	}
	tj_init(&t, "multislerp", 5, 0);
	for (size_t i = 1; i < 5; i++)
		set_in(&t, i, "weight", mk_pval_float(0.1 * (double)i));
	check_chunks(&t);
	tj_init(&t, "multislerp", 3, -1);
	for (size_t i = 0; i < 3; i++)
		set_in(&t, i, "weight", mk_pval_float(1.0));
	check_chunks(&t);
	tj_init(&t, "karcher", 4, 0);
	check_chunks(&t);
	for (int fw = 0; fw < 2; fw++) {
		tj_init(&t, "model_stock", 5, 0);
		set_g(&t, "filter_wise", mk_pval_bool(fw));
		check_chunks(&t);
	}
}

/* Row-wise layouts agree with the flattened one on a single-row tensor,
 * and per-row results agree with whole-tensor runs on each row alone. */
static void test_row_layouts(void **st)
{
	enum { R = 5, C = 9000 };   /* rows cross summation blocks */
	static float in[3][R * C], whole[R * C], row[C];
	struct tj t;
	uint64_t x = 12345;

	for (int i = 0; i < 3; i++)
		for (int e = 0; e < R * C; e++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			in[i][e] = (float)((double)(x >> 40) / 16777216.0 - 0.5) + (i ? in[0][e] : 0.0f);
		}
	for (int method = 0; method < 2; method++) {
		const void *v[3] = { in[0], in[1], in[2] };
		tj_init(&t, method ? "model_stock" : "nuslerp", 3, 0);
		for (int i = 0; i < 3; i++)
			t.in[i] = td(MK_DT_F32, 2, R, C);
		if (method)
			set_g(&t, "filter_wise", mk_pval_bool(true));
		else {
			set_in(&t, 1, "weight", mk_pval_float(0.25));
			set_in(&t, 2, "weight", mk_pval_float(0.75));
			set_g(&t, "nuslerp_flatten", mk_pval_bool(false));
		}
		run_job(&t, v, 1000, whole);
		for (int r = 0; r < R; r++) {
			const void *rv[3] = { in[0] + r * C, in[1] + r * C, in[2] + r * C };
			for (int i = 0; i < 3; i++)
				t.in[i] = td(MK_DT_F32, 1, C, 0);
			run_job(&t, rv, 0, row);
			assert_close_tol(whole + r * C, row, C, 1e-6);
		}
	}
}

/* ------------------------------------------------------ the Gram pass */

#define GK 7                 /* signals at most */
#define GN (3 * 4096 + 1000) /* elements: blocks and a partial one */
#define GV 3000              /* vectors at most */

struct gram_out {
	size_t k;
	uint64_t next;       /* vectors received, in order */
	double g[GV][GK * GK];
};

static int gram_done(void *ctx, uint64_t v, const double *g, struct mk_err *err)
{
	struct gram_out *o = ctx;

	assert_true(v == o->next && v < GV);
	memcpy(o->g[v], g, o->k * o->k * sizeof(*g));
	o->next++;
	return 0;
}

/* Gram matrices of k signals (inputs idx[0..k), minus input `base` when
 * >= 0) of a tensor of shape [r, c] (r 0: 1-D [c]) in chunks of `chunk`
 * (0: one); `scalar` clears the BLAS path after init. */
static void gram_run(enum mk_geom_mode mode, enum mk_dtype compute, uint64_t r, uint64_t c,
		     size_t k, int base, uint64_t chunk, bool scalar, const void *const *in,
		     struct gram_out *o)
{
	static const int idx[GK] = { 1, 2, 3, 4, 5, 6, 7 };
	struct mk_tensor_desc d = r ? td(compute, 2, r, c) : td(compute, 1, c, 0);
	uint64_t n = r ? r * c : c;
	size_t esz = compute == MK_DT_F64 ? 8 : 4;
	struct mk_geom g;
	struct mk_err err;

	memset(o, 0, sizeof(*o));
	o->k = k;
	assert_int_equal(mk_geom_init(&g, mode, &d, compute, k, idx, base, gram_done, o, &err), 0);
	assert_true(g.blas == (g.mode != MK_GEOM_COLS && k >= MK_GEOM_BLAS_K &&
			       g.veclen >= MK_GEOM_BLAS_RUN));
	if (scalar)
		g.blas = false;
	if (!chunk)
		chunk = n;
	for (uint64_t e = 0; e < n; e += chunk) {
		const void *p[GK + 1];
		for (size_t i = 0; i <= GK; i++)
			p[i] = (const char *)in[i] + e * esz;
		struct mk_job_chunk ch = { .elem_begin = e, .count = n - e < chunk ? n - e : chunk,
					   .in = p };
		assert_int_equal(mk_geom_accumulate(&g, &ch, &err), 0);
	}
	assert_int_equal(mk_geom_finish(&g, &err), 0);
	mk_geom_release(&g);
	assert_true(o->next == g.nvec);
}

static void test_gram_blas(void **st)
{
	static float f[GK + 1][GN];
	static double dd[GK + 1][GN];
	static struct gram_out ref, got, sc;
	/* [r, c]: one vector; rows across blocks; rows of 40 (segments of
	 * 40, 16 and 24: BLAS and scalar in one row); one short vector */
	static const uint64_t shapes[][2] = { { 0, GN }, { 4, 3000 }, { 300, 40 }, { 0, 20 } };
	static const uint64_t chunks[] = { 1, 7, 1000, 4095, 4096, 4097 };
	const void *inf[GK + 1], *ind[GK + 1];
	uint64_t x = 0x2545F4914F6CDD1Dull;
	double worst = 0.0;

	for (int i = 0; i <= GK; i++) {
		for (int e = 0; e < GN; e++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			double u = (double)(x >> 11) / 9007199254740992.0 - 0.5;
			f[i][e] = (float)u + (i ? f[0][e] : 0.0f);
			dd[i][e] = u + (i ? dd[0][e] : 0.0);
		}
		inf[i] = f[i];
		ind[i] = dd[i];
	}
	for (int dt = 0; dt < 2; dt++)
	for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); sh++)
	for (size_t k = MK_GEOM_BLAS_K - 1; k <= GK; k++)
	for (int base = -1; base <= 0; base++)
	for (int mode = MK_GEOM_WHOLE; mode <= MK_GEOM_COLS; mode++) {
		enum mk_dtype cd = dt ? MK_DT_F64 : MK_DT_F32;
		const void *const *in = dt ? ind : inf;
		uint64_t r = shapes[sh][0], c = shapes[sh][1];

		if (k > 4 && k < GK)
			continue;
		if (mode == MK_GEOM_COLS && k > MK_GEOM_BLAS_K)
			continue;
		gram_run(mode, cd, r, c, k, base, 0, false, in, &ref);
		for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
			gram_run(mode, cd, r, c, k, base, chunks[ci], false, in, &got);
			if (memcmp(got.g, ref.g, sizeof(got.g)))
				fail_msg("%s [%llu, %llu] k %zu base %d mode %d: chunks of %llu differ "
					 "from one chunk", dt ? "f64" : "f32", (unsigned long long)r,
					 (unsigned long long)c, k, base, mode,
					 (unsigned long long)chunks[ci]);
		}
		/* the scalar sums, element order inside a block: float64
		 * rounding apart, |diff| <= 1e-12 sqrt(G_aa G_bb) */
		gram_run(mode, cd, r, c, k, base, 0, true, in, &sc);
		for (uint64_t v = 0; v < ref.next; v++)
			for (size_t a = 0; a < k; a++)
				for (size_t b = 0; b < k; b++) {
					double q = ref.g[v][a * k + b], s = sc.g[v][a * k + b];
					double bound = sqrt(sc.g[v][a * k + a] * sc.g[v][b * k + b]);
					assert_true(q == ref.g[v][b * k + a]);
					if (!(fabs(q - s) <= 1e-12 * bound))
						fail_msg("k %zu vector %llu G[%zu][%zu]: %.17g, scalar %.17g",
							 k, (unsigned long long)v, a, b, q, s);
					if (bound > 0 && fabs(q - s) / bound > worst)
						worst = fabs(q - s) / bound;
				}
	}
	if (getenv("MK_TEST_VERBOSE"))
		print_message("max |blas - scalar| / sqrt(G_aa G_bb) = %.3g\n", worst);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nuslerp_appendix),
		cmocka_unit_test(test_nuslerp_zero_weight_sum),
		cmocka_unit_test(test_nuslerp_degenerate),
		cmocka_unit_test(test_nuslerp_rules),
		cmocka_unit_test(test_multislerp_appendix),
		cmocka_unit_test(test_multislerp_zero_mean),
		cmocka_unit_test(test_multislerp_closed_form),
		cmocka_unit_test(test_multislerp_rules),
		cmocka_unit_test(test_karcher_appendix),
		cmocka_unit_test(test_karcher_properties),
		cmocka_unit_test(test_model_stock_appendix),
		cmocka_unit_test(test_model_stock_rules),
		cmocka_unit_test(test_chunk_independence),
		cmocka_unit_test(test_row_layouts),
		cmocka_unit_test(test_gram_blas),
	};
	return cmocka_run_group_tests(tests, setup_inputs, NULL);
}
