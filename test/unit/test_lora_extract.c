/* test_lora_extract.c - mk-extract-lora's method through the job API: a
 * planted low-rank delta comes back as B A with its rank and error, the
 * zero rows past a rank an epsilon cuts, an embedding's transpose, BF16
 * differences rounded as mergekit's, and a merge configuration refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include "mk/method.h"
#include "mk/run.h"
#include "gram_schmidt.h"

#define M 24
#define N 16

/* Orthonormal columns from a fixed pattern, x[k * len + i]. */
static void orthonormal(double *x, int len, double f, double g)
{
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < len; i++)
			x[k * len + i] = sin(f * (i + 1) * (k + 1) + g * k);
	gram_schmidt(x, (uint64_t)len, 3);
}

/* base: a fixed pattern; ft = base + U diag(8, 4, s2) V^T, U and V
 * orthonormal: singular values 8, 4, s2, ||delta||^2 = 80 + s2^2 */
static void planted(float *base, float *ft, double s2)
{
	double u[3 * M], v[3 * N];
	const double s[3] = { 8, 4, s2 };

	orthonormal(u, M, 0.7, 0.3);
	orthonormal(v, N, 0.45, 1.1);
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			double d = 0;
			for (int k = 0; k < 3; k++)
				d += s[k] * u[k * M + i] * v[k * N + j];
			base[i * N + j] = (float)(0.01 * (i - j));
			ft[i * N + j] = base[i * N + j] + (float)d;
		}
}

struct run_out {
	float a[M * N], b[M * N], stats[2];
	uint64_t fm, fn, r0;
};

/* One job: passes in two chunks, then the three outputs. */
static int run_job(const float *base, const float *ft, struct mk_pval *g, struct run_out *o, struct mk_err *err)
{
	struct mk_tensor_desc in[2] = { { .dtype = MK_DT_F32, .ndim = 2, .shape = { M, N } },
					{ .dtype = MK_DT_F32, .ndim = 2, .shape = { M, N } } };
	struct mk_job_desc d = { .tensor = "w", .ninputs = 2, .base = 0, .in = in, .global = g };
	const struct mk_method *m = mk_method_find("lora_extract");
	struct mk_job job;
	int rc;

	assert_non_null(m);
	if ((rc = mk_job_init(&job, m, &d, MK_DT_COUNT, err)))
		return rc;
	assert_int_equal(job.nmore, 2);
	assert_int_equal(job.pass_nelem, M * N);
	o->r0 = job.out.shape[0];
	o->fn = job.out.shape[1];
	o->fm = job.more[0].shape[0];
	assert_int_equal(job.more[0].shape[1], o->r0);
	assert_int_equal(job.more[1].dtype, MK_DT_F64);
	const void *c0[2] = { base, ft }, *c1[2] = { base + 100, ft + 100 };
	struct mk_job_chunk p0 = { .elem_begin = 0, .count = 100, .in = c0 },
			    p1 = { .elem_begin = 100, .count = M * N - 100, .in = c1 };
	if (!(rc = mk_job_accumulate(&job, 0, &p0, err)) && !(rc = mk_job_accumulate(&job, 0, &p1, err)) &&
	    !(rc = mk_job_finish(&job, 0, err))) {
		struct mk_job_chunk a = { .count = o->r0 * o->fn, .output = 0 }, b = { .count = o->fm * o->r0, .output = 1 },
				    s = { .count = 2, .output = 2 };
		if (!(rc = mk_job_apply(&job, &a, o->a, err)) && !(rc = mk_job_apply(&job, &b, o->b, err)))
			rc = mk_job_apply(&job, &s, o->stats, err);
	}
	mk_job_release(&job);
	return rc;
}

static void params(struct mk_pval *g, int64_t max_rank, double eps, bool transpose)
{
	const struct mk_method *m = mk_method_find("lora_extract");

	for (size_t p = 0; p < m->nparams; p++)
		g[p] = (struct mk_pval){ 0 };
	g[mk_method_param_index(m, "max_rank")] = mk_pval_int(max_rank);
	g[mk_method_param_index(m, "sv_epsilon")] = mk_pval_float(eps);
	g[mk_method_param_index(m, "transpose")] = mk_pval_bool(transpose);
}

/* max |(B A)_ij - delta_ij| over the planted delta (transposed or not) */
static double recon_error(const struct run_out *o, const float *base, const float *ft, bool t)
{
	double worst = 0;

	for (uint64_t i = 0; i < o->fm; i++)
		for (uint64_t j = 0; j < o->fn; j++) {
			double ba = 0;
			for (uint64_t k = 0; k < o->r0; k++)
				ba += (double)o->b[i * o->r0 + k] * o->a[k * o->fn + j];
			uint64_t e = t ? j * N + i : i * N + j;
			double dl = (double)ft[e] - base[e], err = fabs(ba - dl);
			worst = err > worst ? err : worst;
		}
	return worst;
}

static void test_planted_rank(void **state)
{
	static float base[M * N], ft[M * N];
	struct mk_pval g[16];
	struct run_out o;
	struct mk_err err = { 0 };

	planted(base, ft, 2);
	/* rank 8 asked: all three planted directions, five (near-)zero ones */
	params(g, 8, 0, false);
	assert_int_equal(run_job(base, ft, g, &o, &err), 0);
	assert_int_equal(o.r0, 8);
	assert_int_equal(o.fm, M);
	assert_int_equal(o.fn, N);
	assert_true(o.stats[0] == 8);
	assert_true(o.stats[1] < 1e-5);
	assert_true(recon_error(&o, base, ft, false) < 1e-5);
	/* rank 2: the third direction (sigma 2 of ||D|| = sqrt(84)) is the error */
	params(g, 2, 0, false);
	assert_int_equal(run_job(base, ft, g, &o, &err), 0);
	assert_true(o.stats[0] == 2);
	assert_true(fabs(o.stats[1] - 2 / sqrt(84.0)) < 1e-5);
	/* an epsilon of 1: rank 3 of the plan's 8, rows 3.. of A and columns
	 * 3.. of B zeros */
	params(g, 8, 1.0, false);
	assert_int_equal(run_job(base, ft, g, &o, &err), 0);
	assert_true(o.stats[0] == 3);
	for (uint64_t k = 3; k < 8; k++) {
		for (uint64_t j = 0; j < o.fn; j++)
			assert_true(o.a[k * o.fn + j] == 0);
		for (uint64_t i = 0; i < o.fm; i++)
			assert_true(o.b[i * o.r0 + k] == 0);
	}
	assert_true(recon_error(&o, base, ft, false) < 1e-5);
	/* an embedding: the transpose factored, A [r, M] and B [N, r] */
	params(g, 4, 0, true);
	assert_int_equal(run_job(base, ft, g, &o, &err), 0);
	assert_int_equal(o.fm, N);
	assert_int_equal(o.fn, M);
	assert_true(recon_error(&o, base, ft, true) < 1e-5);
}

static void test_bf16_differences(void **state)
{
	/* two BF16 inputs: each difference rounded to BF16 first, as mergekit's
	 * subtraction of BF16 tensors: 1 - 2^-9 is not a BF16 value */
	float base[4] = { 0, 0, 0, 0 }, ft[4] = { 1.0f - 1.0f / 512, 2, 3, 4 };
	struct mk_tensor_desc in[2] = { { .dtype = MK_DT_BF16, .ndim = 2, .shape = { 2, 2 } },
					{ .dtype = MK_DT_BF16, .ndim = 2, .shape = { 2, 2 } } };
	struct mk_pval g[16];
	struct mk_job_desc d = { .tensor = "w", .ninputs = 2, .base = 0, .in = in, .global = g };
	struct mk_job job;
	struct mk_err err = { 0 };
	float a[4], b[4], s[2];

	params(g, 2, 0, false);
	assert_int_equal(mk_job_init(&job, mk_method_find("lora_extract"), &d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.out.dtype, MK_DT_BF16);
	const void *c[2] = { base, ft };
	struct mk_job_chunk p = { .count = 4, .in = c };
	assert_int_equal(mk_job_accumulate(&job, 0, &p, &err), 0);
	assert_int_equal(mk_job_finish(&job, 0, &err), 0);
	struct mk_job_chunk ca = { .count = 4, .output = 0 }, cb = { .count = 4, .output = 1 },
			    cs = { .count = 2, .output = 2 };
	assert_int_equal(mk_job_apply(&job, &ca, a, &err), 0);
	assert_int_equal(mk_job_apply(&job, &cb, b, &err), 0);
	assert_int_equal(mk_job_apply(&job, &cs, s, &err), 0);
	/* full rank: B A is the rounded delta, whose first element is 1 */
	double ba00 = (double)b[0] * a[0] + (double)b[1] * a[2];
	assert_true(fabs(ba00 - 1.0) < 1e-5);
	mk_job_release(&job);
}

static void test_not_in_merge_configs(void **state)
{
	static const char *const tools[] = { "lora_extract", "delta" };

	for (size_t t = 0; t < 2; t++) {
		char cfg[256], want[128];
		snprintf(cfg, sizeof(cfg), "merge_method: %s\nbase_model: testdata/models/tiny-a\n"
			 "models:\n  - model: testdata/models/tiny-b\n", tools[t]);
		snprintf(want, sizeof(want), "'%s' is one of mk-extract-lora's own methods, not a merge method", tools[t]);
		struct mk_run_opts o = { .text = cfg, .len = strlen(cfg), .label = "c.yml" };
		struct mk_diags d = { 0 };
		struct mk_err err = { 0 };
		bool said = false;

		/* found by name, not listed, not registrable again */
		assert_non_null(mk_method_find(tools[t]));
		for (size_t i = 0; i < mk_method_count(); i++)
			assert_string_not_equal(mk_method_at(i)->name, tools[t]);
		assert_int_not_equal(mk_validate_config(&o, &d, &err), 0);
		for (size_t i = 0; i < d.n; i++)
			said |= strstr(d.v[i].msg, want) != NULL;
		assert_true(said);
		mk_diags_free(&d);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_planted_rank),
		cmocka_unit_test(test_bf16_differences),
		cmocka_unit_test(test_not_in_merge_configs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
