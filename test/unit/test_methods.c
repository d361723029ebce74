/* test_methods.c - the merge-method API and the built-in methods linear,
 * passthrough, slerp and task_arithmetic.
 *
 * Reference values: mergekit's own float32 outputs on method_harness.h's
 * inputs.  Metric: max |mk - ref| <= 1e-6 * max(1, max |ref|).  The
 * references are printed float32 values of magnitude <= 4, where one
 * float32 ulp is <= 4.8e-7; mk follows mergekit's operation order (or
 * sums in float64 where mergekit sums in float32: slerp's statistics),
 * so an honest implementation is within a few ulps, while any semantic
 * slip (a weight, the normalisation, t's direction, the lerp fallback,
 * the base's role) moves these dyadic inputs by 1e-3 or more.
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
#include "methods/builtin.h"

/* ------------------------------------------------------------ fixtures */

static int setup_inputs(void **st)
{
	fixtures_init();
	return 0;
}

#define run_job tj_run_printed
#define assert_close(got, ref, n) tj_assert_close(got, ref, n, 1e-6)

/* --------------------------------------------------------------- registry */

static void test_registry_builtins(void **st)
{
	const char *want[] = { "linear", "slerp", "passthrough", "task_arithmetic" };
	size_t n = mk_method_count();

	assert_true(n >= 4);
	for (size_t k = 0; k < 4; k++) {
		const struct mk_method *m = mk_method_find(want[k]);
		bool seen = false;
		assert_non_null(m);
		assert_string_equal(m->name, want[k]);
		assert_int_equal(m->abi, MK_METHOD_ABI);
		for (size_t i = 0; i < n; i++)
			seen |= mk_method_at(i) == m;
		assert_true(seen);
	}
	assert_null(mk_method_at(n));
	assert_null(mk_method_find("Linear"));
	assert_null(mk_method_find("nope"));
	assert_null(mk_method_find("passthrough")->device);
	assert_non_null(mk_method_find("slerp")->device);
	assert_int_equal(mk_method_find("slerp")->contract.base, MK_BASE_REQUIRED);
	assert_int_equal(mk_method_find("task_arithmetic")->contract.base, MK_BASE_REQUIRED);
	assert_int_equal(mk_method_find("linear")->contract.base, MK_BASE_IGNORED);
	assert_non_null(mk_method_find("linear")->batch);
	assert_string_equal(mk_method_find("task_arithmetic")->pretty_name, "Task Arithmetic");
}

static void test_registry_duplicate_and_abi(void **st)
{
	struct mk_method copy = mk_method_linear;
	struct mk_err err;
	size_t n = mk_method_count();

	assert_int_equal(mk_method_register(&copy, &err), -MK_EEXIST);
	assert_non_null(strstr(err.msg, "'linear' is already registered"));
	copy.abi = MK_METHOD_ABI + 1;
	copy.name = "linear_v2";
	assert_int_equal(mk_method_register(&copy, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "ABI"));
	copy.abi = MK_METHOD_ABI;
	copy.name = "Bad-Name";
	assert_int_equal(mk_method_register(&copy, &err), -MK_EINVAL);
	copy.name = "linear_v2";
	copy.apply = NULL;
	assert_int_equal(mk_method_register(&copy, &err), -MK_EINVAL);
	assert_int_equal(mk_method_count(), n);
}

static void test_registry_closest(void **st)
{
	const struct mk_method *m = NULL;
	struct mk_err err;

	assert_string_equal(mk_method_closest("slrep"), "slerp");
	assert_string_equal(mk_method_closest("LINEAR"), "linear");
	assert_string_equal(mk_method_closest("lienar"), "linear");
	assert_string_equal(mk_method_closest("task_arithmatic"), "task_arithmetic");
	assert_string_equal(mk_method_closest("pasthrough"), "passthrough");
	assert_null(mk_method_closest("xyz"));
	assert_null(mk_method_closest("frankenstein_merge"));
	assert_int_equal(mk_edit_distance("kitten", "sitting"), 3);
	assert_int_equal(mk_edit_distance("", "abc"), 3);
	assert_int_equal(mk_edit_distance("Slerp", "slerp"), 0);
	assert_int_equal(mk_edit_distance("slrep", "slerp"), 1);
	assert_int_equal(mk_edit_distance("ca", "abc"), 3);

	assert_int_equal(mk_method_lookup("slerpp", &m, &err), -MK_ENOENT);
	assert_null(m);
	assert_non_null(strstr(err.msg, "did you mean 'slerp'?"));
	assert_int_equal(mk_method_lookup("qqqqqqqq", &m, &err), -MK_ENOENT);
	assert_null(strstr(err.msg, "did you mean"));
	assert_int_equal(mk_method_lookup("slerp", &m, &err), 0);
	assert_ptr_equal(m, &mk_method_slerp);
}

/* A plugin-style method with bounded parameters (apply: out = alpha * x). */
enum { TP_ALPHA, TP_BETA, TP_K, TP_FLAG, TP_REQ, TP_N };
static const struct mk_param_spec test_params[TP_N] = {
	[TP_ALPHA] = { .name = "alpha", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		       .flags = MK_PF_MIN | MK_PF_MAX, .min = 0, .max = 1,
		       .def = { .set = true, .type = MK_PT_FLOAT, .f = 0.5 } },
	[TP_BETA] = { .name = "beta", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
		      .flags = MK_PF_MIN | MK_PF_MIN_EXCL | MK_PF_MAX | MK_PF_MAX_EXCL, .min = 0, .max = 1,
		      .def = { .set = true, .type = MK_PT_FLOAT, .f = 0.25 } },
	[TP_K] = { .name = "k", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_INT, .flags = MK_PF_MIN, .min = 1,
		   .def = { .set = true, .type = MK_PT_INT, .i = 4 } },
	[TP_FLAG] = { .name = "flag", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
		      .def = { .set = true, .type = MK_PT_BOOL, .b = false } },
	[TP_REQ] = { .name = "req", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,
		     .flags = MK_PF_REQUIRED },
};

static int tm_output(const struct mk_method *m, const struct mk_job_desc *d,
		     struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	po->out = d->in[0];
	return 0;
}

static int tm_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const float *x = c->in[0];
	float a = (float)mk_job_param(job, TP_ALPHA)->f;
	for (uint64_t e = 0; e < c->count; e++)
		((float *)out)[e] = a * x[e];
	return 0;
}

static const struct mk_method test_method = {
	.abi = MK_METHOD_ABI, .name = "bounded_test", .pretty_name = "Bounded",
	.params = test_params, .nparams = TP_N,
	.contract = { .base = MK_BASE_OPTIONAL, .min_inputs = 1, .max_inputs = 3,
		      .min_non_base = 1, .max_non_base = 2 },
	.output = tm_output, .apply = tm_apply,
};

static void expect_param_error(struct tj *t, const char *needle1, const char *needle2)
{
	struct mk_plan_out po;
	struct mk_err err;

	mk_err_clear(&err);
	assert_int_equal(mk_method_plan(t->m, &t->d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	if (!strstr(err.msg, needle1) || (needle2 && !strstr(err.msg, needle2)))
		fail_msg("message '%s' lacks '%s' / '%s'", err.msg, needle1, needle2 ? needle2 : "");
}

static void test_param_validation(void **st)
{
	struct mk_err err;
	struct tj t;
	struct mk_plan_out po;
	struct mk_pval g[TP_N], in[2 * TP_N];
	static struct mk_param_spec bad[1];
	struct mk_method bm = test_method;

	if (!mk_method_find("bounded_test"))
		assert_int_equal(mk_method_register(&test_method, &err), 0);
	/* inconsistent specs are refused at registration */
	bad[0] = (struct mk_param_spec){ .name = "x", .type = MK_PT_FLOAT, .flags = MK_PF_REQUIRED,
					 .def = { .set = true, .type = MK_PT_FLOAT, .f = 1 } };
	bm.name = "bad_spec";
	bm.params = bad;
	bm.nparams = 1;
	assert_int_equal(mk_method_register(&bm, &err), -MK_EINVAL);
	bad[0] = (struct mk_param_spec){ .name = "x", .type = MK_PT_FLOAT, .flags = MK_PF_MAX, .max = 1,
					 .def = { .set = true, .type = MK_PT_FLOAT, .f = 2 } };
	assert_int_equal(mk_method_register(&bm, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "default out of bounds"));

	tj_init(&t, "bounded_test", 2, 0);
	/* required per-non-base parameter: the base needs none */
	expect_param_error(&t, "'req' is required for input 1 ('model-b')", NULL);
	set_in(&t, 1, "req", mk_pval_int(3));            /* an INT for a FLOAT: accepted */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, g, in, NULL, &err), 0);
	assert_true(g[TP_ALPHA].set && g[TP_ALPHA].f == 0.5);     /* defaults applied */
	assert_true(g[TP_K].set && g[TP_K].type == MK_PT_INT && g[TP_K].i == 4);
	assert_true(in[0 * TP_N + TP_BETA].set && in[1 * TP_N + TP_BETA].f == 0.25);
	assert_false(in[0 * TP_N + TP_REQ].set);
	assert_true(in[1 * TP_N + TP_REQ].type == MK_PT_FLOAT && in[1 * TP_N + TP_REQ].f == 3.0);

	set_g(&t, "alpha", mk_pval_float(1.5));
	expect_param_error(&t, "'alpha' is 1.5; it must be >= 0 and <= 1", NULL);
	set_g(&t, "alpha", mk_pval_float(1.0));          /* inclusive bound */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	set_g(&t, "alpha", mk_pval_float(NAN));
	expect_param_error(&t, "'alpha' must be a finite number", NULL);
	set_g(&t, "alpha", mk_pval_bool(true));
	expect_param_error(&t, "'alpha' must be a number", NULL);
	set_g(&t, "alpha", mk_pval_float(0.0));

	set_in(&t, 0, "beta", mk_pval_float(0.0));       /* exclusive bound */
	expect_param_error(&t, "'beta' for input 0 ('model-a') is 0; it must be > 0 and < 1", NULL);
	set_in(&t, 0, "beta", mk_pval_float(1.0));
	expect_param_error(&t, "'beta'", "< 1");
	set_in(&t, 0, "beta", mk_pval_float(0.999));

	set_g(&t, "k", mk_pval_float(2.5));
	expect_param_error(&t, "'k' must be an integer (got 2.5)", NULL);
	set_g(&t, "k", mk_pval_int(0));
	expect_param_error(&t, "'k' is 0; it must be >= 1", NULL);
	set_g(&t, "k", mk_pval_float(3.0));              /* integral float: accepted as 3 */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, g, NULL, NULL, &err), 0);
	assert_true(g[TP_K].type == MK_PT_INT && g[TP_K].i == 3);

	set_g(&t, "flag", mk_pval_float(1.0));
	expect_param_error(&t, "'flag' must be true or false", "bounded_test");
	set_g(&t, "flag", mk_pval_bool(true));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);

	/* linear: weight is required for every input, the base included (as in mergekit) */
	tj_init(&t, "linear", 2, 1);
	set_in(&t, 0, "weight", mk_pval_float(1.0));
	expect_param_error(&t, "parameter 'weight' is required for input 1 ('model-b')", "linear");
	/* task_arithmetic: not for the base */
	tj_init(&t, "task_arithmetic", 2, 0);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	/* slerp: t must be a number */
	tj_init(&t, "slerp", 2, 0);
	set_g(&t, "t", mk_pval_bool(true));
	expect_param_error(&t, "'t' must be a number", NULL);
}

static void test_contract(void **st)
{
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	tj_init(&t, "slerp", 2, -1);
	set_g(&t, "t", mk_pval_float(0.5));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "needs a base model"));
	tj_init(&t, "slerp", 3, 0);
	set_g(&t, "t", mk_pval_float(0.5));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "at most 2"));
	tj_init(&t, "passthrough", 2, -1);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "exactly 1 input tensor"));
	tj_init(&t, "task_arithmetic", 2, -1);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	if (!mk_method_find("bounded_test"))
		assert_int_equal(mk_method_register(&test_method, &err), 0);
	tj_init(&t, "bounded_test", 1, 0);               /* non-base arity */
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "0 inputs besides the base, it needs at least"));
	tj_init(&t, "linear", 2, 5);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
}

/* ---------------------------------------------- reference values: linear */

static void linear3(struct tj *t, double w0, double w1, double w2, bool normalize)
{
	tj_init(t, "linear", 3, -1);
	set_in(t, 0, "weight", mk_pval_float(w0));
	set_in(t, 1, "weight", mk_pval_float(w1));
	set_in(t, 2, "weight", mk_pval_float(w2));
	set_g(t, "normalize", mk_pval_bool(normalize));
}

static void test_linear_appendix(void **st)
{
	static const float ref_norm[12] = { 0.5453125f, -0.38125f, 1.0234375f, 0.41093752f,
		-0.8328125f, 0.51875f, -0.0859375f, 2.0015624f, 1.7218751f, -1.2437501f,
		0.74531245f, -0.7828125f };
	static const float ref_sum[12] = { 1.090625f, -0.7625f, 2.046875f, 0.82187504f,
		-1.665625f, 1.0375f, -0.171875f, 4.0031247f, 3.4437501f, -2.4875002f,
		1.4906249f, -1.565625f };
	const void *v[3] = { M1, M2, M3 };
	float out[12];
	struct tj t;

	linear3(&t, 1.0, 0.6, 0.4, true);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	assert_close(out, ref_norm, 12);
	linear3(&t, 1.0, 0.6, 0.4, false);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	assert_close(out, ref_sum, 12);
	/* default normalize is true */
	linear3(&t, 1.0, 0.6, 0.4, true);
	t.g[mk_method_param_index(t.m, "normalize")].set = false;
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	assert_close(out, ref_norm, 12);
}

static void test_linear_bf16(void **st)
{
	/* mergekit's float32 result: mk computes bf16 inputs in float32 and
	 * rounds once (mk-compat(7), "Float32 compute"), so its bf16 output is
	 * this vector rounded to bf16, not mergekit's bf16-pipeline vector. */
	static const float ref_f32[12] = { 0.52500004f, -0.42812502f, 1.078125f, 0.390625f,
		-0.77500004f, 0.5125f, -0.13125f, 2.0062501f, 1.8687501f, -1.209375f,
		0.71875f, -0.8625001f };
	static const float ref_mergekit_bf16[12] = { 0.52734375f, -0.4296875f, 1.078125f,
		0.390625f, -0.77734375f, 0.51171875f, -0.13085938f, 2.015625f, 1.875f,
		-1.2109375f, 0.71875f, -0.8671875f };
	float a[12], b[12], out[12];
	uint16_t h[12];
	const void *v[2] = { a, b };
	struct mk_job job;
	struct tj t;

	for (int i = 0; i < 12; i++) {      /* bf16 inputs, exactly representable */
		a[i] = mk_bf16_to_f32(mk_f32_to_bf16(M1[i]));
		b[i] = mk_bf16_to_f32(mk_f32_to_bf16(M2[i]));
		assert_true(a[i] == M1[i] && b[i] == M2[i]);
	}
	tj_init(&t, "linear", 2, -1);
	t.in[0].dtype = t.in[1].dtype = MK_DT_BF16;
	set_in(&t, 0, "weight", mk_pval_float(0.6));
	set_in(&t, 1, "weight", mk_pval_float(0.4));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, &job), 0);
	assert_int_equal(job.out.dtype, MK_DT_BF16);
	assert_int_equal(job.compute, MK_DT_F32);
	mk_job_release(&job);
	assert_close(out, ref_f32, 12);
	assert_int_equal(mk_dtype_convert(MK_DT_BF16, h, MK_DT_F32, out, 12), 0);
	for (int i = 0; i < 12; i++) {
		float want = mk_bf16_to_f32(mk_f32_to_bf16(ref_f32[i]));
		assert_true(mk_bf16_to_f32(h[i]) == want);
	}
	/* element 0 is where the pipelines differ (mergekit rounds each step) */
	assert_true(mk_bf16_to_f32(h[0]) == 0.5234375f);
	assert_true(ref_mergekit_bf16[0] == 0.52734375f);
}

/* Job t over views vf (float32) into o32, then with vb (the same values as
 * BF16) passed as they are where the job takes them, into obf: the job
 * took them at least once, and both outputs (n floats) are the same bits. */
static void raw_same_bits(struct tj *t, const void *const *vf, const void *const *vb, uint64_t chunk, float *o32,
			  float *obf, size_t n)
{
	struct mk_job job;
	uint64_t before = tj_bf16_chunks;
	int rc;

	assert_int_equal(run_job(t, MK_DT_COUNT, vf, chunk, o32, NULL), 0);
	tj_bf16 = vb;
	rc = run_job(t, MK_DT_COUNT, vf, chunk, obf, &job);
	tj_bf16 = NULL;
	assert_int_equal(rc, 0);
	assert_true(job.apply_bf16);
	mk_job_release(&job);
	assert_true(tj_bf16_chunks > before);
	assert_memory_equal(o32, obf, n * sizeof(float));
}

/* BF16 inputs passed to linear as they are (apply_bf16: mk-merge does so)
 * give the bits of widening them first: three inputs with a NaN and an
 * infinity, normalised and not, whole and in odd chunks. */
static void test_linear_bf16_raw(void **st)
{
	enum { N = 5000 };
	static uint16_t raw[3][N];
	static float f[3][N], o32[N], obf[N];
	uint64_t seed = 7;

	(void)st;
	for (int i = 0; i < 3; i++)
		for (int e = 0; e < N; e++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			raw[i][e] = (uint16_t)(seed >> 48);
			if ((raw[i][e] & 0x7f80) == 0x7f80)
				raw[i][e] &= 0xbfff;     /* finite, but for the two below */
			if (i == 1 && e == 99)
				raw[i][e] = 0x7fc1;       /* NaN */
			if (i == 2 && e == 4000)
				raw[i][e] = 0x7f80;       /* inf */
			f[i][e] = mk_bf16_to_f32(raw[i][e]);
		}
	const void *vf[3] = { f[0], f[1], f[2] }, *vb[3] = { raw[0], raw[1], raw[2] };
	for (int norm = 0; norm < 2; norm++)
		for (uint64_t chunk = 0; chunk < 2000; chunk += 777) {
			struct tj t;
			tj_init(&t, "linear", 3, -1);
			for (int i = 0; i < 3; i++) {
				t.in[i] = td(MK_DT_BF16, 1, N, 0);
				set_in(&t, (size_t)i, "weight", mk_pval_float(0.3 + 0.1 * i));
			}
			set_g(&t, "normalize", mk_pval_bool(norm));
			raw_same_bits(&t, vf, vb, chunk, o32, obf, N);
			assert_true(isnan(o32[99]) && isinf(o32[4000]));
		}
}

/* The same for slerp: the base first and second, t on the arc and near
 * parallel inputs (the lerp branch). */
static void test_slerp_bf16_raw(void **st)
{
	enum { N = 5000 };
	static uint16_t raw[2][N];
	static float f[2][N], o32[N], obf[N];
	uint64_t seed = 11;

	(void)st;
	for (int near = 0; near < 2; near++) {
		for (int e = 0; e < N; e++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			raw[0][e] = (uint16_t)(0x3c00 + (seed >> 54));
			raw[1][e] = near ? (uint16_t)(raw[0][e] + 1) : (uint16_t)(0x3c00 + ((seed >> 40) & 0x3ff));
			if ((seed >> 20) & 1)
				raw[1][e] |= 0x8000;
			for (int i = 0; i < 2; i++)
				f[i][e] = mk_bf16_to_f32(raw[i][e]);
		}
		const void *vf[2] = { f[0], f[1] }, *vb[2] = { raw[0], raw[1] };
		for (int base = 0; base < 2; base++)
			for (uint64_t chunk = 0; chunk < 2000; chunk += 999) {
				struct tj t;
				tj_init(&t, "slerp", 2, base);
				t.in[0] = t.in[1] = td(MK_DT_BF16, 1, N, 0);
				set_g(&t, "t", mk_pval_float(0.3));
				raw_same_bits(&t, vf, vb, chunk, o32, obf, N);
			}
	}
}

/* mk_fsum_dots_bf16: the bits of mk_fsum_dots on the widened values, on
 * 1, 2, 3 and 7 threads, called whole and in pieces that start and end
 * mid-block; magnitudes over many octaves make the order show (closing
 * a thread's blocks out of order, or dropping a partial block's element,
 * fails this). */
static void test_fsum_dots_bf16(void **st)
{
	enum { N = 200 * MK_SUM_BLOCK + 999 };
	uint16_t *x = malloc(N * 2), *y = malloc(N * 2);
	float *fx = malloc(N * 4), *fy = malloc(N * 4);
	uint64_t seed = 77;
	struct mk_fsum want[3] = { { 0 } };
	static const unsigned threads[] = { 1, 2, 3, 7 };
	static const uint64_t cuts[][3] = { { N }, { 1, 150001, N }, { 17 * MK_SUM_BLOCK, 100 * MK_SUM_BLOCK + 5, N } };
	struct mk_err err = { 0 };

	(void)st;
	assert_true(x && y && fx && fy);
	for (uint64_t e = 0; e < N; e++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		x[e] = (uint16_t)(0x3000 + ((seed >> 33) & 0x1fff)) | (uint16_t)((seed >> 20) & 1) << 15;
		y[e] = (uint16_t)(0x3000 + ((seed >> 47) & 0x1fff)) | (uint16_t)((seed >> 21) & 1) << 15;
		fx[e] = mk_bf16_to_f32(x[e]);
		fy[e] = mk_bf16_to_f32(y[e]);
	}
	mk_fsum_dots(want, 0, N, fx, fy);
	for (size_t q = 0; q < 4; q++)
		for (size_t c = 0; c < 3; c++) {
			struct mk_fsum sum[3] = { { 0 } };
			uint64_t b = 0;
			for (size_t k = 0; k < 3 && b < N; k++) {
				assert_int_equal(mk_fsum_dots_bf16(sum, b, cuts[c][k] - b, x + b, y + b, threads[q], &err), 0);
				b = cuts[c][k];
			}
			for (unsigned j = 0; j < 3; j++) {
				double got = mk_fsum_value(&sum[j]), w = mk_fsum_value(&want[j]);
				assert_memory_equal(&got, &w, sizeof(got));
			}
		}
	/* the order shows: summed backwards, other bits */
	{
		double back = 0.0, w = mk_fsum_value(&want[2]);
		for (uint64_t e = N; e-- > 0;)
			back += (double)fx[e] * (double)fy[e];
		assert_true(back != w);
	}
	free(x);
	free(y);
	free(fx);
	free(fy);
}

/* slerp's statistics pass on BF16 chunks as they are, its whole blocks
 * on 1, 2, 3 and 7 threads: the output of widening first and one thread,
 * for chunks of the size mk-merge passes, of odd sizes and the whole
 * tensor at once (1.2 Mi elements: every thread has blocks).  (The
 * output hardly ever shows a last bit of the sums: their order is
 * checked bit for bit by test_fsum_dots_bf16.) */
static void test_slerp_bf16_threads(void **st)
{
	enum { N = 300 * MK_SUM_BLOCK + 1234 };
	static uint16_t raw[2][N];
	static float f[2][N], o32[N], obf[N];
	uint64_t seed = 29;

	(void)st;
	for (int e = 0; e < N; e++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		raw[0][e] = (uint16_t)(0x3000 + (seed >> 53));
		raw[1][e] = (uint16_t)(0x3000 + ((seed >> 30) & 0x7ff)) | (uint16_t)((seed >> 20) & 1) << 15;
		for (int i = 0; i < 2; i++)
			f[i][e] = mk_bf16_to_f32(raw[i][e]);
	}
	const void *vf[2] = { f[0], f[1] }, *vb[2] = { raw[0], raw[1] };
	static const unsigned threads[] = { 1, 2, 3, 7 };
	static const uint64_t chunks[] = { 1u << 20, 300001, 0 };
	for (size_t k = 0; k < 3; k++)
		for (size_t q = 0; q < 4; q++) {
			struct tj t;
			tj_init(&t, "slerp", 2, 0);
			t.in[0] = t.in[1] = td(MK_DT_BF16, 1, N, 0);
			set_g(&t, "t", mk_pval_float(0.3));
			tj_threads = threads[q];
			raw_same_bits(&t, vf, vb, chunks[k], o32, obf, N);
			tj_threads = 0;
		}
}

static void test_linear_embed(void **st)
{
	static const float ref[6] = { 0.5078125f, -0.421875f, 1.0859375f,
				      -0.7421875f, 0.484375f, -0.1484375f };
	float va[6], vb[6], out[6];
	const void *v[2] = { va, vb };
	struct mk_plan_out po;
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	tj_init(&t, "linear", 2, -1);
	t.d.is_embed = true;
	t.in[0] = td(MK_DT_F32, 2, 3, 4);      /* A = M1 */
	t.in[1] = td(MK_DT_F32, 2, 2, 3);      /* B = M2[:2, :3] */
	set_in(&t, 0, "weight", mk_pval_float(1.0));
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.ndim, 2);
	assert_int_equal(po.out.shape[0], 2);
	assert_int_equal(po.out.shape[1], 3);
	/* the caller hands both inputs' top-left 2x3 views */
	for (int r = 0; r < 2; r++)
		for (int c = 0; c < 3; c++) {
			va[r * 3 + c] = M1[r * 4 + c];
			vb[r * 3 + c] = M2[r * 4 + c];
		}
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, &job), 0);
	assert_int_equal(job.nelem, 6);
	mk_job_release(&job);
	assert_close(out, ref, 6);

	/* not an embedding: a size mismatch */
	t.d.is_embed = false;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "tensor size mismatch"));
	assert_non_null(strstr(err.msg, "input 1 ('model-b') has shape [2, 3], expected [3, 4]"));
	/* an embedding that is not 2-D is not rectified */
	t.d.is_embed = true;
	t.in[1] = td(MK_DT_F32, 1, 3, 0);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EMISMATCH);
	/* three embeddings: min rows, min cols */
	tj_init(&t, "linear", 3, -1);
	t.d.is_embed = true;
	t.in[0] = td(MK_DT_F32, 2, 32000, 64);
	t.in[1] = td(MK_DT_F32, 2, 32002, 64);
	t.in[2] = td(MK_DT_F32, 2, 32001, 64);
	for (int i = 0; i < 3; i++)
		set_in(&t, (size_t)i, "weight", mk_pval_float(1.0));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.shape[0], 32000);
	assert_int_equal(po.out.shape[1], 64);
}

static void test_linear_zero_sum(void **st)
{
	float out[12];
	const void *v[2] = { M1, M2 };
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	tj_init(&t, "linear", 2, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	set_in(&t, 1, "weight", mk_pval_float(-0.5));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "weights sum to 0"));
	assert_non_null(strstr(err.msg, "normalize"));
	/* without normalisation a zero sum is fine: 0.5 * (M1 - M2) */
	set_g(&t, "normalize", mk_pval_bool(false));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == 0.5f * M1[i] + -0.5f * M2[i]);
	/* the sum is taken in the compute dtype: float32 */
	set_g(&t, "normalize", mk_pval_bool(true));
	set_in(&t, 0, "weight", mk_pval_float(1e-30));
	set_in(&t, 1, "weight", mk_pval_float(-1e-30));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	/* a single input with normalisation returns w*x/w */
	tj_init(&t, "linear", 1, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.3));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == (0.3f * M1[i]) / 0.3f);
}

static void test_linear_f64(void **st)
{
	double a[12], b[12], out[12];
	const void *v[2] = { a, b };
	struct mk_job job;
	struct tj t;

	for (int i = 0; i < 12; i++) {
		a[i] = M1[i] + 1e-12;
		b[i] = M2[i];
	}
	tj_init(&t, "linear", 2, -1);
	t.in[0].dtype = t.in[1].dtype = MK_DT_F64;
	set_in(&t, 0, "weight", mk_pval_float(0.6));
	set_in(&t, 1, "weight", mk_pval_float(0.4));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, &job), 0);
	assert_int_equal(job.compute, MK_DT_F64);
	assert_int_equal(job.out.dtype, MK_DT_F64);
	mk_job_release(&job);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == (0.6 * a[i] + 0.4 * b[i]) / (0.6 + 0.4));
}

/* ----------------------------------------------- reference values: slerp */

static void slerp_job(struct tj *t, double tv)
{
	tj_init(t, "slerp", 2, 0);
	set_g(t, "t", mk_pval_float(tv));
}

static void test_slerp_appendix(void **st)
{
	static const float ref1[12] = { 0.5296415f, -0.31188574f, 1.0169246f, 0.2147741f,
		-0.7991688f, 0.45135587f, -0.018825993f, 2.00561f, 1.6265765f, -1.2864518f,
		0.6832311f, -0.6049455f };
	static const float ref2[12] = { 0.584448f, -0.20404047f, 0.86319315f, 0.39596534f,
		-0.9648555f, 0.48242775f, 0.058789015f, 1.9968157f, 1.2242429f, -1.3259053f,
		0.7805307f, -0.47862774f };
	static const float ref3[12] = { 0.65f, -0.325f, 1.3f, 0.1625f, -0.975f, 0.4875f, 0.0f,
		2.6f, 1.95f, -1.625f, 0.8125f, -0.65f };
	float twice[12], out[12];
	const void *v1[2] = { W0, M1 }, *v2[2] = { W0, M3 }, *v3[2] = { W0, twice };
	struct mk_job job;
	struct tj t;

	slerp_job(&t, 0.3);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v1, 0, out, &job), 0);
	assert_int_equal(job.npasses, 1);
	assert_false(job.byte_copy);
	assert_int_equal(job.copy_input, -1);
	mk_job_release(&job);
	assert_close(out, ref1, 12);

	slerp_job(&t, 0.75);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v2, 0, out, NULL), 0);
	assert_close(out, ref2, 12);

	/* colinear: |d| > 0.9995 -> lerp of the raw tensors */
	for (int i = 0; i < 12; i++)
		twice[i] = 2 * W0[i];
	slerp_job(&t, 0.3);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v3, 0, out, NULL), 0);
	assert_close(out, ref3, 12);
	for (int i = 0; i < 12; i++)       /* exactly (float)(1-t)*v0 + (float)t*v1 */
		assert_true(out[i] == (float)(1.0 - 0.3) * W0[i] + (float)0.3 * twice[i]);
	/* anti-parallel is caught by |d| as well */
	for (int i = 0; i < 12; i++)
		twice[i] = -W0[i];
	assert_int_equal(run_job(&t, MK_DT_COUNT, v3, 0, out, NULL), 0);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == (float)(1.0 - 0.3) * W0[i] + (float)0.3 * twice[i]);
	/* t = 0 and 1 give the endpoints (within rounding of sin ratios) */
	slerp_job(&t, 0.0);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v1, 0, out, NULL), 0);
	assert_close(out, W0, 12);
	slerp_job(&t, 1.0);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v1, 0, out, NULL), 0);
	assert_close(out, M1, 12);
}

static void test_slerp_base_position(void **st)
{
	/* The base may be input 1: t still runs from the base to the other. */
	static const float ref1[12] = { 0.5296415f, -0.31188574f, 1.0169246f, 0.2147741f,
		-0.7991688f, 0.45135587f, -0.018825993f, 2.00561f, 1.6265765f, -1.2864518f,
		0.6832311f, -0.6049455f };
	const void *v[2] = { M1, W0 };
	float out[12];
	struct tj t;

	tj_init(&t, "slerp", 2, 1);
	set_g(&t, "t", mk_pval_float(0.3));
	t.in[1].dtype = MK_DT_F16;   /* the output: torch's promotion of the two */
	{
		struct mk_plan_out po;
		struct mk_err err;
		assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
		assert_int_equal(po.out.dtype, MK_DT_F32);
		assert_int_equal(po.compute, MK_DT_F32);
	}
	assert_int_equal(run_job(&t, MK_DT_F32, v, 0, out, NULL), 0);
	assert_close(out, ref1, 12);
}

static void test_slerp_t_unset(void **st)
{
	/* mergekit #640: no t for this tensor -> the base, other input not read,
	 * even when its shape is incompatible. */
	float out[12];
	const void *v[2] = { W0, NULL };
	bool used[2];
	struct mk_plan_out po;
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	tj_init(&t, "slerp", 2, 0);
	t.in[0].dtype = MK_DT_BF16;
	t.in[1] = td(MK_DT_F32, 2, 5, 7);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_int_equal(po.npasses, 0);
	assert_true(used[0]);
	assert_false(used[1]);
	assert_int_equal(po.out.dtype, MK_DT_BF16);
	assert_int_equal(po.out.shape[0], 3);
	assert_int_equal(po.out.shape[1], 4);

	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.copy_input, 0);
	assert_true(job.byte_copy);
	mk_job_release(&job);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_F32, &err), 0);
	assert_int_equal(job.copy_input, 0);
	assert_false(job.byte_copy);          /* a dtype change: convert, no byte copy */
	mk_job_release(&job);

	t.in[0].dtype = MK_DT_F32;
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 5, out, NULL), 0);
	assert_memory_equal(out, W0, sizeof(out));

	/* with t set the same shapes are a mismatch */
	set_g(&t, "t", mk_pval_float(0.5));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EMISMATCH);

	/* the base alone (an optional tensor the other model lacks) -> base */
	tj_init(&t, "slerp", 1, 0);
	set_g(&t, "t", mk_pval_float(0.5));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.npasses, 0);
	assert_true(job.byte_copy);
	mk_job_release(&job);
	/* t has no default and is not required */
	assert_false(mk_method_slerp.params[0].def.set);
	assert_false(mk_method_slerp.params[0].flags & MK_PF_REQUIRED);
}

static void test_slerp_embed(void **st)
{
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	slerp_job(&t, 0.5);
	t.d.is_embed = true;
	t.in[0] = td(MK_DT_BF16, 2, 32003, 16);
	t.in[1] = td(MK_DT_F32, 2, 32000, 24);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.out.shape[0], 32000);
	assert_int_equal(po.out.shape[1], 16);
	assert_int_equal(po.out.dtype, MK_DT_F32);  /* bfloat16 and float32: float32 */
	assert_int_equal(po.npasses, 1);
}

/* mk_fsum_dots gives the bits of the order method.h defines (each block
 * of MK_SUM_BLOCK summed in element order, blocks in block order), however
 * the elements are split into calls: whole, at odd places, from mid-block
 * starts, with its several-blocks-at-once path (AVX-512) taken or not.
 * The terms span 2^-30 .. 2^30 with both signs, so another order of the
 * additions gives other bits; the test checks that it does. */
static void fsum_ref(const float *x, const float *y, uint64_t n, double out[3])
{
	double tot[3] = { 0 }, part[3] = { 0 };

	for (uint64_t e = 0; e < n; e++) {
		double p = x[e], q = y[e];
		part[0] += p * p;
		part[1] += q * q;
		part[2] += p * q;
		if ((e + 1) % MK_SUM_BLOCK == 0 || e + 1 == n)
			for (unsigned j = 0; j < 3; j++) {
				tot[j] += part[j];
				part[j] = 0.0;
			}
	}
	memcpy(out, tot, sizeof(tot));
}

static void test_fsum_dots(void **st)
{
	const uint64_t n = 21 * MK_SUM_BLOCK + 777;
	float *x = malloc(n * sizeof(*x)), *y = malloc(n * sizeof(*y));
	uint64_t seed = 12345;
	double want[3];
	/* call boundaries: whole; odd places; a start mid-block; a run of
	 * exactly 8 and of 16 aligned blocks */
	static const uint64_t cuts[][4] = {
		{ 0 }, { 1, 4095, 40000, 0 }, { 12345, 0 }, { 8 * MK_SUM_BLOCK, 16 * MK_SUM_BLOCK, 0 },
		{ 3 * MK_SUM_BLOCK + 5, 11 * MK_SUM_BLOCK + 5, 19 * MK_SUM_BLOCK, 0 },
	};

	(void)st;
	assert_non_null(x);
	assert_non_null(y);
	for (uint64_t e = 0; e < n; e++) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		int ex = (int)((seed >> 33) % 61) - 30;
		float m = 1.0f + (float)((seed >> 40) & 0xffff) / 65536.0f;
		x[e] = ldexpf((seed >> 20) & 1 ? -m : m, ex);
		y[e] = ldexpf((seed >> 21) & 1 ? -m : m, (int)((seed >> 22) % 61) - 30);
	}
	fsum_ref(x, y, n, want);
	for (size_t c = 0; c < sizeof(cuts) / sizeof(cuts[0]); c++) {
		struct mk_fsum sum[3] = { { 0 } };
		uint64_t b = 0;
		for (size_t k = 0; k <= 4; k++) {
			uint64_t e = k < 4 && cuts[c][k] ? cuts[c][k] : n;
			mk_fsum_dots(sum, b, e - b, x + b, y + b);
			b = e;
			if (e == n)
				break;
		}
		for (unsigned j = 0; j < 3; j++) {
			double got = mk_fsum_value(&sum[j]);
			assert_memory_equal(&got, &want[j], sizeof(got));
		}
	}
	/* mk_fsum_dots_f64 on the same values as doubles (exact): the same
	 * bits, called whole and from mid-block */
	{
		double *dx = malloc(n * sizeof(*dx)), *dy = malloc(n * sizeof(*dy));
		assert_true(dx && dy);
		for (uint64_t e = 0; e < n; e++)
			dx[e] = x[e], dy[e] = y[e];
		for (uint64_t cut = 0; cut < n; cut += 3 * MK_SUM_BLOCK + 1001) {
			struct mk_fsum sum[3] = { { 0 } };
			mk_fsum_dots_f64(sum, 0, cut, dx, dy);
			mk_fsum_dots_f64(sum, cut, n - cut, dx + cut, dy + cut);
			for (unsigned k = 0; k < 3; k++) {
				double got = mk_fsum_value(&sum[k]);
				assert_memory_equal(&got, &want[k], sizeof(got));
			}
		}
		free(dx);
		free(dy);
	}
	/* the order matters for these terms: summed backwards, other bits */
	double back = 0.0;
	for (uint64_t e = n; e-- > 0;)
		back += (double)x[e] * (double)y[e];
	assert_true(back != want[2]);
	free(x);
	free(y);
}

/* -------------------------------------- reference values: task arithmetic */

static void test_task_arithmetic_appendix(void **st)
{
	static const float ref1[12] = { 0.5265625f, -0.46249998f, 1.0953125f, 0.4421875f,
		-0.7734375f, 0.534375f, -0.1609375f, 2.0078125f, 1.940625f, -1.19375f,
		0.7328125f, -0.9359375f };
	static const float ref2[12] = { 0.5110677f, -0.33854166f, 1.0397135f, 0.25716144f,
		-0.7597656f, 0.44140625f, -0.06705729f, 2.0032551f, 1.6835938f, -1.2265625f,
		0.6699219f, -0.6816406f };
	const void *v[3] = { W0, M1, M2 };
	float out[12];
	struct mk_job job;
	struct tj t;

	tj_init(&t, "task_arithmetic", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(0.7));
	set_in(&t, 2, "weight", mk_pval_float(0.5));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, &job), 0);   /* defaults */
	assert_int_equal(job.npasses, 0);
	assert_false(job.global[mk_method_param_index(t.m, "normalize")].b);
	assert_true(job.global[mk_method_param_index(t.m, "lambda")].f == 1.0);
	mk_job_release(&job);
	assert_close(out, ref1, 12);

	set_g(&t, "normalize", mk_pval_bool(true));
	set_g(&t, "lambda", mk_pval_float(0.5));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	assert_close(out, ref2, 12);

	/* the base's own weight is never used (as in mergekit) */
	set_in(&t, 0, "weight", mk_pval_float(100.0));
	{
		float out2[12];
		assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out2, NULL), 0);
		assert_memory_equal(out, out2, sizeof(out));
	}
	/* a weight sum below 1e-8 divides by 1 */
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	set_in(&t, 2, "weight", mk_pval_float(-0.5));
	set_g(&t, "lambda", mk_pval_float(1.0));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	for (int i = 0; i < 12; i++) {
		float d1 = (M1[i] - W0[i]) * 0.5f, d2 = (M2[i] - W0[i]) * -0.5f;
		assert_true(out[i] == W0[i] + (d1 + d2));
	}
}

static void test_task_arithmetic_shapes(void **st)
{
	bool used[3];
	float out[12];
	const void *v[3] = { W0, NULL, NULL };
	struct mk_plan_out po;
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	tj_init(&t, "task_arithmetic", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	set_in(&t, 2, "weight", mk_pval_float(1.0));
	t.in[0] = td(MK_DT_BF16, 2, 32000, 8);
	t.in[1] = td(MK_DT_F32, 2, 32002, 8);
	t.in[2] = td(MK_DT_F16, 2, 32000, 8);
	/* embeddings: the larger input is cut to the base's shape */
	t.d.is_embed = true;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_true(used[0] && used[1] && used[2]);
	assert_int_equal(po.out.dtype, MK_DT_F32);  /* bf16, f32, f16 promote to f32 */
	assert_int_equal(po.compute, MK_DT_F32);
	assert_int_equal(po.out.shape[0], 32000);
	/* smaller than the base: an error (mergekit crashes) */
	t.in[1] = td(MK_DT_F32, 2, 31999, 8);
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "input 1 ('model-b') has shape [31999, 8]"));
	/* not an embedding: mismatched inputs are dropped */
	t.d.is_embed = false;
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, used, &err), 0);
	assert_true(used[0] && !used[1] && used[2]);
	/* all dropped: the output is the base */
	tj_init(&t, "task_arithmetic", 3, 0);
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	set_in(&t, 2, "weight", mk_pval_float(1.0));
	t.in[1] = td(MK_DT_F32, 2, 4, 4);
	t.in[2] = td(MK_DT_F32, 1, 12, 0);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.copy_input, 0);
	assert_true(job.byte_copy);
	mk_job_release(&job);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	assert_memory_equal(out, W0, sizeof(out));
	/* float64 base: compute in float64 */
	tj_init(&t, "task_arithmetic", 2, 0);
	t.in[0].dtype = MK_DT_F64;
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.compute, MK_DT_F64);
	assert_int_equal(po.out.dtype, MK_DT_F64);
}

/* ------------------------------------------------------------ passthrough */

static void test_passthrough(void **st)
{
	float out[12];
	const void *v[1] = { M1 };
	struct mk_plan_out po;
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	tj_init(&t, "passthrough", 1, -1);
	t.in[0].dtype = MK_DT_BF16;
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_true(job.byte_copy);
	assert_int_equal(job.copy_input, 0);
	assert_int_equal(job.out.dtype, MK_DT_BF16);
	mk_job_release(&job);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_F16, &err), 0);
	assert_false(job.byte_copy);          /* a dtype change */
	assert_int_equal(job.copy_input, 0);
	mk_job_release(&job);

	t.in[0].dtype = MK_DT_F32;
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 5, out, NULL), 0);
	assert_memory_equal(out, M1, sizeof(out));

	set_in(&t, 0, "scale", mk_pval_float(0.3));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_false(job.byte_copy);
	assert_int_equal(job.copy_input, -1);
	mk_job_release(&job);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == M1[i] * (float)0.3);
	set_in(&t, 0, "scale", mk_pval_int(0));        /* {filter: o_proj, value: 0} */
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, out, NULL), 0);
	for (int i = 0; i < 12; i++)
		assert_true(out[i] == 0.0f);

	/* non-float tensors pass through as bytes, but cannot be scaled */
	tj_init(&t, "passthrough", 1, 0);
	t.in[0] = td(MK_DT_I64, 1, 7, 0);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_true(job.byte_copy);
	mk_job_release(&job);
	set_in(&t, 0, "scale", mk_pval_float(2.0));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "I64"));
}

/* passthrough's noise_scale (mk-moe's expert key): x + s * z, then the
 * scale, z from mk's counter-based generator.  The statistics are of
 * N = 65536 draws of a fixed seed (deterministic: the bounds cannot flake;
 * they catch a generator or transform that is wrong): the sample mean's
 * standard error is s / 256 and the sample standard deviation's about
 * s / 362, so |mean| <= 5 s / 256 and |std / s - 1| <= 5 / 362 are five
 * standard errors; the fraction within one s of 0 is 0.6827 for a normal,
 * standard error 0.0018, bounded at 0.01. */
#define NOISE_N 65536
static void test_passthrough_noise(void **st)
{
	static float zero[NOISE_N], a[NOISE_N], b[NOISE_N], x[NOISE_N];
	const void *v[1] = { zero };
	const double s = 0.02;
	struct mk_job job;
	struct mk_err err;
	struct tj t;

	(void)st;
	tj_init(&t, "passthrough", 1, -1);
	t.in[0] = td(MK_DT_F32, 2, 256, 256);
	set_in(&t, 0, "noise_scale", mk_pval_float(s));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.copy_input, -1);   /* computed, not copied */
	assert_false(job.byte_copy);
	mk_job_release(&job);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, a, NULL), 0);
	double sum = 0, sq = 0;
	size_t in1 = 0;
	for (size_t i = 0; i < NOISE_N; i++) {
		sum += a[i];
		sq += (double)a[i] * a[i];
		in1 += fabs(a[i]) < s;
	}
	double mean = sum / NOISE_N, sd = sqrt(sq / NOISE_N - mean * mean);
	assert_true(fabs(mean) <= 5 * s / 256);
	assert_true(fabs(sd / s - 1) <= 5.0 / 362);
	assert_true(fabs((double)in1 / NOISE_N - 0.6827) <= 0.01);

	/* the same bits for any chunking and chunk order (as -j and
	 * --max-memory cut a tensor), and for another run */
	static const uint64_t chunks[] = { 1, 7, 4096, 65535 };
	for (size_t k = 0; k < sizeof(chunks) / sizeof(*chunks); k++) {
		assert_int_equal(tj_run(&t, MK_DT_COUNT, v, chunks[k], b, k & 1, NULL, NULL, &err), 0);
		assert_memory_equal(a, b, sizeof(a));
	}
	/* another seed, another tensor (another expert's), other noise */
	t.d.seed = 43;
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, b, NULL), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	t.d.seed = 42;
	t.d.tensor = "model.layers.0.mlp.experts.1.w2.weight";
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, b, NULL), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	t.d.tensor = "model.layers.0.mlp.down_proj.weight";

	/* with a scale (residual_scale): (x + noise) * scale, in float32 */
	for (size_t i = 0; i < NOISE_N; i++)
		x[i] = (float)i / NOISE_N - 0.5f;
	v[0] = x;
	set_in(&t, 0, "scale", mk_pval_float(0.5));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 1000, b, NULL), 0);
	for (size_t i = 0; i < NOISE_N; i++)
		assert_true(b[i] == (x[i] + a[i]) * 0.5f);

	/* noise_scale 0 is no noise: the copy path, the input's bits */
	set_in(&t, 0, "scale", (struct mk_pval){ 0 });
	set_in(&t, 0, "noise_scale", mk_pval_float(0));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.copy_input, 0);
	assert_true(job.byte_copy);
	mk_job_release(&job);

	/* float64 tensors: the same draws, added in float64 */
	static double x64[NOISE_N], o64[NOISE_N];
	t.in[0].dtype = MK_DT_F64;
	v[0] = x64;
	set_in(&t, 0, "noise_scale", mk_pval_float(s));
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 333, o64, NULL), 0);
	for (size_t i = 0; i < NOISE_N; i++)
		assert_true((float)o64[i] == a[i]);
}

/* ------------------------------------------------------------ output rules */

static void test_output_rules(void **st)
{
	static const struct {
		const char *method;
		size_t n;
		int base;
		enum mk_dtype in[3], out, compute;
	} cases[] = {
		{ "linear", 2, -1, { MK_DT_BF16, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32 },
		{ "linear", 2, -1, { MK_DT_F16, MK_DT_BF16 }, MK_DT_F32, MK_DT_F32 },
		{ "linear", 3, 0, { MK_DT_F64, MK_DT_F64, MK_DT_F64 }, MK_DT_F64, MK_DT_F64 },
		{ "linear", 2, -1, { MK_DT_F32, MK_DT_F64 }, MK_DT_F64, MK_DT_F64 },
		{ "linear", 2, -1, { MK_DT_F8_E4M3, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32 },
		/* torch's promotion, as mergekit 0.1.5 writes mixed inputs */
		{ "task_arithmetic", 2, 0, { MK_DT_BF16, MK_DT_F32 }, MK_DT_F32, MK_DT_F32 },
		{ "task_arithmetic", 2, 1, { MK_DT_F32, MK_DT_F16 }, MK_DT_F32, MK_DT_F32 },
		{ "task_arithmetic", 2, 0, { MK_DT_BF16, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32 },
		{ "task_arithmetic", 2, 0, { MK_DT_F64, MK_DT_BF16 }, MK_DT_F64, MK_DT_F64 },
		{ "slerp", 2, 0, { MK_DT_F16, MK_DT_F32 }, MK_DT_F32, MK_DT_F32 },
		{ "slerp", 2, 0, { MK_DT_BF16, MK_DT_BF16 }, MK_DT_BF16, MK_DT_F32 },
		{ "slerp", 2, 0, { MK_DT_F64, MK_DT_F64 }, MK_DT_F64, MK_DT_F64 },
		{ "slerp", 2, 0, { MK_DT_F64, MK_DT_F32 }, MK_DT_F64, MK_DT_F32 },
		{ "passthrough", 1, -1, { MK_DT_F64 }, MK_DT_F64, MK_DT_F64 },
		{ "passthrough", 1, -1, { MK_DT_F8_E5M2 }, MK_DT_F8_E5M2, MK_DT_F32 },
	};
	struct mk_plan_out po;
	struct mk_err err;
	struct tj t;

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		tj_init(&t, cases[k].method, cases[k].n, cases[k].base);
		for (size_t i = 0; i < cases[k].n; i++) {
			t.in[i].dtype = cases[k].in[i];
			if (!strcmp(cases[k].method, "linear"))
				set_in(&t, i, "weight", mk_pval_float(1.0));
			else if (!strcmp(cases[k].method, "task_arithmetic") && (int)i != cases[k].base)
				set_in(&t, i, "weight", mk_pval_float(1.0));
		}
		if (!strcmp(cases[k].method, "slerp"))
			set_g(&t, "t", mk_pval_float(0.5));
		if (mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err))
			fail_msg("case %zu: %s", k, err.msg);
		if (po.out.dtype != cases[k].out || po.compute != cases[k].compute)
			fail_msg("case %zu (%s): out %s compute %s", k, cases[k].method,
				 mk_dtype_name(po.out.dtype), mk_dtype_name(po.compute));
		assert_int_equal(po.out.ndim, 2);
		assert_int_equal(po.out.shape[0], 3);
		assert_int_equal(po.out.shape[1], 4);
		assert_int_equal(po.npasses, !strcmp(cases[k].method, "slerp") ? 1 : 0);
	}
	/* non-float inputs cannot be merged */
	tj_init(&t, "linear", 2, -1);
	t.in[1].dtype = MK_DT_I32;
	set_in(&t, 0, "weight", mk_pval_float(1.0));
	set_in(&t, 1, "weight", mk_pval_float(1.0));
	assert_int_equal(mk_method_plan(t.m, &t.d, &po, NULL, NULL, NULL, &err), -MK_EUNSUPPORTED);
	/* out_dtype override: float only */
	{
		struct mk_job job;
		t.in[1].dtype = MK_DT_F32;
		assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_I32, &err), -MK_EUNSUPPORTED);
		assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_BF16, &err), 0);
		assert_int_equal(job.out.dtype, MK_DT_BF16);
		assert_int_equal(job.copy_input, -1);
		mk_job_release(&job);
	}
}

/* ---------------------------------------------------- chunk independence */

#define CR 37
#define CC 300
#define CN (CR * CC)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
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

static void test_chunk_independence(void **st)
{
	float *a = malloc(CN * sizeof(float)), *b = malloc(CN * sizeof(float)),
	      *c = malloc(CN * sizeof(float));
	double *da = malloc(CN * sizeof(double)), *db = malloc(CN * sizeof(double));
	const void *v[3] = { a, b, c }, *dv[2] = { da, db };
	struct tj t;

	assert_true(a && b && c && da && db);
	for (int i = 0; i < CN; i++) {
		a[i] = frand();
		b[i] = a[i] * 0.9f + 0.3f * frand();    /* correlated, not colinear */
		c[i] = frand() * 1e-3f;
		da[i] = (double)frand() + 1e-9 * frand();
		db[i] = (double)frand();
	}
	slerp_job(&t, 0.37);
	t.in[0] = t.in[1] = td(MK_DT_F32, 2, CR, CC);
	check_chunking(&t, v, 4);
	/* float64 compute */
	t.in[0].dtype = t.in[1].dtype = MK_DT_F64;
	check_chunking(&t, dv, 8);

	linear3(&t, 0.5, 0.3, 0.2, true);
	t.in[0] = t.in[1] = t.in[2] = td(MK_DT_F32, 2, CR, CC);
	check_chunking(&t, v, 4);

	tj_init(&t, "task_arithmetic", 3, 0);
	t.in[0] = t.in[1] = t.in[2] = td(MK_DT_F32, 2, CR, CC);
	set_in(&t, 1, "weight", mk_pval_float(0.7));
	set_in(&t, 2, "weight", mk_pval_float(-0.2));
	set_g(&t, "normalize", mk_pval_bool(true));
	set_g(&t, "lambda", mk_pval_float(0.8));
	check_chunking(&t, v, 4);

	free(a);
	free(b);
	free(c);
	free(da);
	free(db);
}

static void test_slerp_large_values(void **st)
{
	/* The statistics pass agrees with a float64 reference computed in one
	 * sweep; the result is the analytic slerp of these vectors. */
	float *a = malloc(CN * sizeof(float)), *b = malloc(CN * sizeof(float)),
	      *out = malloc(CN * sizeof(float));
	const void *v[2] = { a, b };
	double s00 = 0, s11 = 0, s01 = 0, dd, th, c0, c1;
	struct tj t;

	assert_true(a && b && out);
	for (int i = 0; i < CN; i++) {
		a[i] = frand();
		b[i] = frand();
		s00 += (double)a[i] * a[i];
		s11 += (double)b[i] * b[i];
		s01 += (double)a[i] * b[i];
	}
	dd = s01 / sqrt(s00) / sqrt(s11);
	th = acos(dd);
	c0 = sin(th * (1 - 0.25)) / sin(th);
	c1 = sin(th * 0.25) / sin(th);
	slerp_job(&t, 0.25);
	t.in[0] = t.in[1] = td(MK_DT_F32, 2, CR, CC);
	assert_int_equal(run_job(&t, MK_DT_COUNT, v, 1000, out, NULL), 0);
	for (int i = 0; i < CN; i++) {
		double want = c0 * a[i] + c1 * b[i];
		if (fabs(out[i] - want) > 1e-6)
			fail_msg("element %d: %.9g vs %.9g", i, out[i], want);
	}
	free(a);
	free(b);
	free(out);
}

/* --------------------------------------------------------------- batch */

static void test_linear_batch(void **st)
{
	enum { B = 3, N = 2, E = 12 };
	float in0[B * E], in1[B * E], out[B * E], ref[E];
	float w[B * N] = { 0.6f, 0.4f, 1.0f, 3.0f, -2.0f, 0.5f };
	const void *ins[N] = { in0, in1 }, *coef[2] = { w, NULL };
	struct mk_pval opt[2] = { { .set = false }, mk_pval_bool(true) };
	struct mk_batch b = { .B = B, .ninputs = N, .base = -1, .nelem = E, .compute = MK_DT_F32,
			      .in = ins, .coef = coef, .opt = opt, .out = out };
	struct mk_err err;
	struct tj t;

	for (int k = 0; k < B; k++)
		for (int i = 0; i < E; i++) {
			in0[k * E + i] = k == 1 ? M3[i] : M1[i];
			in1[k * E + i] = k == 2 ? W0[i] : M2[i];
		}
	assert_int_equal(mk_method_batch(&mk_method_linear, &b, &err), 0);
	for (int k = 0; k < B; k++) {
		const void *v[2] = { in0 + k * E, in1 + k * E };
		tj_init(&t, "linear", 2, -1);
		set_in(&t, 0, "weight", mk_pval_float(w[k * N]));
		set_in(&t, 1, "weight", mk_pval_float(w[k * N + 1]));
		assert_int_equal(run_job(&t, MK_DT_COUNT, v, 0, ref, NULL), 0);
		assert_memory_equal(out + k * E, ref, sizeof(ref));   /* same kernel, same bits */
	}
	/* a zero weight sum is not checked here: inf/NaN as in torch */
	w[0] = 1.0f;
	w[1] = -1.0f;
	assert_int_equal(mk_method_batch(&mk_method_linear, &b, &err), 0);
	for (int i = 0; i < E; i++)
		assert_true(isinf(out[i]) || isnan(out[i]));
	assert_int_equal(mk_method_batch(&mk_method_slerp, &b, &err), -MK_EUNSUPPORTED);
}

/* ------------------------------------------------------- job misuse */

static void test_job_protocol(void **st)
{
	float out[12];
	const void *ptr[2] = { W0, M1 };
	struct mk_job_chunk c = { .elem_begin = 0, .count = 12, .in = ptr };
	struct mk_job_chunk late = { .elem_begin = 4, .count = 8, .in = ptr };
	struct mk_job_chunk over = { .elem_begin = 8, .count = 8, .in = ptr };
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	slerp_job(&t, 0.5);
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(mk_job_apply(&job, &c, out, &err), -MK_EINVAL);   /* pass not run */
	assert_non_null(strstr(err.msg, "statistics pass"));
	assert_int_equal(mk_job_accumulate(&job, 1, &c, &err), -MK_EINVAL);
	assert_int_equal(mk_job_accumulate(&job, 0, &late, &err), -MK_EINVAL); /* gap */
	assert_int_equal(mk_job_finish(&job, 0, &err), -MK_EINVAL);         /* incomplete */
	assert_int_equal(mk_job_accumulate(&job, 0, &c, &err), 0);
	assert_int_equal(mk_job_finish(&job, 0, &err), 0);
	assert_int_equal(mk_job_apply(&job, &over, out, &err), -MK_EINVAL); /* outside */
	assert_int_equal(mk_job_apply(&job, &c, out, &err), 0);
	mk_job_release(&job);
	mk_job_release(&job);        /* twice is harmless */
}

/* A method that adds statistics passes as they end: `more` of them after
 * pass 0 (the test sets it), each pass adding its count of elements into
 * the job's state, apply writing that total.  The rule it tests:
 * mk_job_finish lets a kernel add one pass at a time to a held job
 * (mk_job.held), and none to a job that is not held. */
static unsigned grow_more;

static unsigned gm_npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	(void)m;
	(void)d;
	(void)used;
	return 1;
}

static int gm_init(struct mk_job *job, struct mk_err *err)
{
	(void)err;
	job->state = calloc(1, sizeof(uint64_t));
	return job->state ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory");
}

static int gm_accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c, struct mk_err *err)
{
	(void)pass;
	(void)err;
	*(uint64_t *)job->state += c->count;
	return 0;
}

static int gm_finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	(void)err;
	if (pass == 0)
		job->npasses += grow_more;
	return 0;
}

static int gm_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	(void)err;
	for (uint64_t e = 0; e < c->count; e++)
		((float *)out)[e] = (float)*(uint64_t *)job->state;
	return 0;
}

static void gm_release(struct mk_job *job)
{
	free(job->state);
	job->state = NULL;
}

static const struct mk_method grow_method = {
	.abi = MK_METHOD_ABI, .name = "grow_test", .pretty_name = "Grow",
	.contract = { .base = MK_BASE_OPTIONAL, .min_inputs = 1, .max_inputs = 1, .min_non_base = 1, .max_non_base = 1 },
	.output = tm_output, .npasses = gm_npasses, .init = gm_init, .accumulate = gm_accumulate,
	.finish = gm_finish, .apply = gm_apply, .release = gm_release,
};

static void test_job_added_pass(void **st)
{
	const void *ptr[1] = { W0 };
	float out[12];
	struct mk_job_chunk c = { .elem_begin = 0, .count = 12, .in = ptr };
	struct mk_err err;
	struct mk_job job;
	struct tj t;

	(void)st;
	tj_method(&t, &grow_method, 1, -1);
	for (int held = 0; held < 2; held++)
		for (unsigned more = 0; more < 3; more++) {
			unsigned p = 0;
			int rc = 0;
			grow_more = more;
			assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
			assert_int_equal(job.npasses, 1);
			job.held = held;
			/* as the callers run them: npasses read after each finish */
			for (; !rc && p < job.npasses; p++)
				if (!(rc = mk_job_accumulate(&job, p, &c, &err)))
					rc = mk_job_finish(&job, p, &err);
			if (more == 0 || (held && more == 1)) {
				assert_int_equal(rc, 0);
				assert_int_equal(job.npasses, 1 + more);
				assert_int_equal(mk_job_apply(&job, &c, out, &err), 0);
				assert_true(out[11] == 12.0f * (float)(1 + more));   /* every pass ran */
			} else {
				/* not held, or two at once: refused at pass 0's end */
				assert_int_equal(rc, -MK_EINVAL);
				assert_int_equal(p, 1);
				assert_int_equal(job.npasses, 1);   /* the change undone */
				assert_non_null(strstr(err.msg, "grow_test"));
				assert_non_null(strstr(err.msg, held ? "is held" : "not held"));
			}
			mk_job_release(&job);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_registry_builtins),
		cmocka_unit_test(test_registry_duplicate_and_abi),
		cmocka_unit_test(test_registry_closest),
		cmocka_unit_test(test_param_validation),
		cmocka_unit_test(test_contract),
		cmocka_unit_test(test_job_added_pass),
		cmocka_unit_test(test_linear_appendix),
		cmocka_unit_test(test_linear_bf16),
		cmocka_unit_test(test_linear_bf16_raw),
		cmocka_unit_test(test_slerp_bf16_raw),
		cmocka_unit_test(test_slerp_bf16_threads),
		cmocka_unit_test(test_fsum_dots_bf16),
		cmocka_unit_test(test_linear_embed),
		cmocka_unit_test(test_linear_zero_sum),
		cmocka_unit_test(test_linear_f64),
		cmocka_unit_test(test_slerp_appendix),
		cmocka_unit_test(test_slerp_base_position),
		cmocka_unit_test(test_slerp_t_unset),
		cmocka_unit_test(test_slerp_embed),
		cmocka_unit_test(test_fsum_dots),
		cmocka_unit_test(test_task_arithmetic_appendix),
		cmocka_unit_test(test_task_arithmetic_shapes),
		cmocka_unit_test(test_passthrough),
		cmocka_unit_test(test_passthrough_noise),
		cmocka_unit_test(test_output_rules),
		cmocka_unit_test(test_chunk_independence),
		cmocka_unit_test(test_slerp_large_values),
		cmocka_unit_test(test_linear_batch),
		cmocka_unit_test(test_job_protocol),
	};
	return cmocka_run_group_tests(tests, setup_inputs, NULL);
}
