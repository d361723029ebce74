/* test_job_outputs.c - jobs with several outputs (mk_plan_out.nmore):
 * the output rule's further outputs reach the job, its passes go over the
 * inputs' own elements, apply hands out each output with no inputs, and
 * what is refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"

/* unit_rowcol: one [m, n] input; output 0 its column sums [n], output 1
 * its row sums [m]; one pass gathers both. */
struct rc_state {
	uint64_t m, n;
	double *col, *row;
};

static int rc_output(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		     struct mk_err *err)
{
	const struct mk_tensor_desc *in = &d->in[0];

	if (in->ndim != 2)
		return mk_err_set(err, MK_EINVAL, "unit_rowcol takes a matrix");
	po->out = (struct mk_tensor_desc){ .dtype = MK_DT_F32, .ndim = 1, .shape = { in->shape[1] } };
	po->nmore = 1;
	po->more[0] = (struct mk_tensor_desc){ .dtype = MK_DT_F32, .ndim = 1, .shape = { in->shape[0] } };
	po->compute = MK_DT_F32;
	return 0;
}

static unsigned passes_one(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return 1;
}

static unsigned passes_none(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return 0;
}

static int rc_init(struct mk_job *job, struct mk_err *err)
{
	struct rc_state *s = calloc(1, sizeof(*s));

	job->state = s;
	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	s->m = job->d.in[0].shape[0];
	s->n = job->d.in[0].shape[1];
	s->col = calloc(s->n, sizeof(double));
	s->row = calloc(s->m, sizeof(double));
	return s->col && s->row ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory");
}

static int rc_accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c, struct mk_err *err)
{
	struct rc_state *s = job->state;
	const float *x = c->in[0];

	for (uint64_t k = 0; k < c->count; k++) {
		uint64_t e = c->elem_begin + k;
		s->row[e / s->n] += x[k];
		s->col[e % s->n] += x[k];
	}
	return 0;
}

static int rc_finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	return 0;
}

static int rc_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	struct rc_state *s = job->state;
	const double *src = c->output ? s->row : s->col;
	float *o = out;

	assert_null(c->in);
	for (uint64_t k = 0; k < c->count; k++)
		o[k] = (float)src[c->elem_begin + k];
	return 0;
}

static void rc_release(struct mk_job *job)
{
	struct rc_state *s = job->state;

	if (s) {
		free(s->col);
		free(s->row);
		free(s);
	}
	job->state = NULL;
}

static const struct mk_method rowcol = {
	.abi = MK_METHOD_ABI, .name = "unit_rowcol", .pretty_name = "row and column sums",
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = 2, .max_non_base = MK_ARITY_ANY },
	.output = rc_output, .npasses = passes_one, .init = rc_init, .accumulate = rc_accumulate,
	.finish = rc_finish, .apply = rc_apply, .release = rc_release,
};

static void test_two_outputs(void **state)
{
	float x[12];
	struct mk_tensor_desc in = { .dtype = MK_DT_F32, .ndim = 2, .shape = { 3, 4 } };
	struct mk_job_desc d = { .tensor = "w", .ninputs = 1, .base = -1, .in = &in };
	struct mk_job job;
	struct mk_err err = { 0 };
	float out[4];

	for (int i = 0; i < 12; i++)
		x[i] = (float)(i + 1);
	assert_int_equal(mk_job_init(&job, &rowcol, &d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.nmore, 1);
	assert_int_equal(job.nelem, 4);         /* output 0: [4] */
	assert_int_equal(job.pass_nelem, 12);   /* the passes: the input's 12 */
	assert_int_equal(job.more[0].shape[0], 3);
	/* the pass in two chunks of the input's elements: 5 + 7 */
	const void *p0[1] = { x }, *p1[1] = { x + 5 };
	struct mk_job_chunk c0 = { .elem_begin = 0, .count = 5, .in = p0 }, c1 = { .elem_begin = 5, .count = 7, .in = p1 };
	assert_int_equal(mk_job_accumulate(&job, 0, &c0, &err), 0);
	assert_int_equal(mk_job_accumulate(&job, 0, &c1, &err), 0);
	assert_int_equal(mk_job_finish(&job, 0, &err), 0);
	/* output 0: column sums 15 18 21 24; output 1: row sums 10 26 42 */
	struct mk_job_chunk a0 = { .elem_begin = 0, .count = 4, .output = 0 };
	assert_int_equal(mk_job_apply(&job, &a0, out, &err), 0);
	assert_true(out[0] == 15 && out[1] == 18 && out[2] == 21 && out[3] == 24);
	struct mk_job_chunk a1 = { .elem_begin = 1, .count = 2, .output = 1 };
	assert_int_equal(mk_job_apply(&job, &a1, out, &err), 0);
	assert_true(out[0] == 26 && out[1] == 42);
	/* outside output 1's 3 elements; an output the job lacks */
	struct mk_job_chunk bad = { .elem_begin = 2, .count = 2, .output = 1 };
	assert_int_equal(mk_job_apply(&job, &bad, out, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "of output 1 outside 3 elements"));
	bad = (struct mk_job_chunk){ .count = 1, .output = 2 };
	assert_int_equal(mk_job_apply(&job, &bad, out, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "output 2 of a job with 2"));
	mk_job_release(&job);
	/* a requested dtype is the first output's: the others keep the rule's */
	assert_int_equal(mk_job_init(&job, &rowcol, &d, MK_DT_BF16, &err), 0);
	assert_int_equal(job.out.dtype, MK_DT_BF16);
	assert_int_equal(job.more[0].dtype, MK_DT_F32);
	mk_job_release(&job);
}

static void test_refusals(void **state)
{
	struct mk_tensor_desc in[2] = { { .dtype = MK_DT_F32, .ndim = 2, .shape = { 3, 4 } },
					{ .dtype = MK_DT_F32, .ndim = 2, .shape = { 4, 3 } } };
	struct mk_job_desc d = { .tensor = "w", .ninputs = 2, .base = -1, .in = in };
	struct mk_job job;
	struct mk_err err = { 0 };
	struct mk_plan_out po;
	struct mk_method nopass = rowcol;

	/* the passes read the inputs' elements: they must have one shape */
	assert_int_equal(mk_job_init(&job, &rowcol, &d, MK_DT_COUNT, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "inputs 0 and 1 differ in shape"));
	/* several outputs need a pass to compute them from */
	nopass.npasses = passes_none;
	d.ninputs = 1;
	assert_int_equal(mk_method_plan(&nopass, &d, &po, NULL, NULL, NULL, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "2 outputs but no statistics pass"));
	/* a method of one output presets none */
	assert_int_equal(mk_method_plan(mk_method_find("passthrough"), &d, &po, NULL, NULL, NULL, &err), 0);
	assert_int_equal(po.nmore, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_outputs),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
