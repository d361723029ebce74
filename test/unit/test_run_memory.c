/* test_run_memory.c - methods from callbacks (mk_method_register_callback)
 * and merges into memory (mk_run_opts.sink), under the sanitizers too. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "io/safetensors.h"
#include "mk/run.h"
#include "mk/tensors.h"

/* ---- a callback method: out = scale * sum_i weight_i * in_i */

static int calls;
static char last_tensor[128];
static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;
static bool fail_next;

static int axpy(void *ctx, const struct mk_callback_call *c, struct mk_err *err)
{
	uint64_t n = mk_tensor_desc_count(c->out);
	const float *const *in = (const float *const *)c->in;
	float *out = c->result;
	double scale = c->global[0].f;

	assert_int_equal(c->out->dtype, MK_DT_F32);
	assert_ptr_equal(ctx, &calls);
	/* (pieces come from several merge threads at once) */
	__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&last_mu);
	snprintf(last_tensor, sizeof(last_tensor), "%s", c->d->tensor);
	pthread_mutex_unlock(&last_mu);
	if (fail_next)
		return mk_err_set(err, MK_EINVAL, "boom at %s", c->d->tensor);
	for (uint64_t k = 0; k < n; k++) {
		float acc = 0;
		for (size_t i = 0; i < c->d->ninputs; i++)
			acc += in[i][k] * (float)c->input[i * 2 + 1].f;
		out[k] = acc * (float)scale;
	}
	return 0;
}

static const struct mk_param_spec axpy_params[] = {
	{ .name = "scale", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT, .flags = MK_PF_MIN, .min = 0,
	  .def = { .set = true, .type = MK_PT_FLOAT, .f = 1.0 }, .doc = "factor" },
	{ .name = "weight", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
	  .def = { .set = true, .type = MK_PT_FLOAT, .f = 1.0 }, .doc = "per input" },
};
static const struct mk_contract any_inputs = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
					       .max_non_base = MK_ARITY_ANY };

static int group_setup(void **state)
{
	struct mk_err err = { 0 };
	int rc = mk_method_register_callback("unit_axpy", "Unit AXPY", NULL, axpy_params, 2, &any_inputs, 0, axpy,
					     &calls, &err);
	if (!rc)
		rc = mk_method_register_callback("unit_axpy_pieces", NULL, NULL, axpy_params, 2, &any_inputs,
						 MK_CALLBACK_PIECES, axpy, &calls, &err);
	if (rc)
		fprintf(stderr, "%s\n", err.msg);
	return rc;
}

static void test_callback_method(void **state)
{
	float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 6, 5, 4, 3, 2, 1 };
	struct mk_tensor in[2] = {
		{ .desc = { .dtype = MK_DT_F32, .ndim = 2, .shape = { 2, 3 } }, .data = a },
		{ .desc = { .dtype = MK_DT_F32, .ndim = 2, .shape = { 2, 3 } }, .data = b },
	}, out;
	struct mk_param_values *pv = mk_param_values_new();
	struct mk_err err = { 0 };
	const struct mk_method *m = mk_method_find("unit_axpy");

	assert_non_null(m);
	assert_true(m->whole_tensor);
	assert_string_equal(m->pretty_name, "Unit AXPY");
	calls = 0;
	assert_int_equal(mk_param_values_set(pv, "scale", -1, mk_pval_float(0.5), &err), 0);
	assert_int_equal(mk_param_values_set(pv, "weight", 1, mk_pval_float(3), &err), 0);
	assert_int_equal(mk_merge_tensors("unit_axpy", in, 2, -1, pv, MK_DT_COUNT, "w.x", 0, &out, &err), 0);
	assert_int_equal(calls, 1);
	assert_string_equal(last_tensor, "w.x");
	assert_int_equal(out.desc.dtype, MK_DT_F32);
	for (int k = 0; k < 6; k++)
		assert_true(((float *)out.data)[k] == (a[k] + 3 * b[k]) * 0.5f);
	mk_tensor_release(&out);
	/* the bounds are libmk's: refused before the kernel runs */
	assert_int_equal(mk_param_values_set(pv, "scale", -1, mk_pval_float(-1), &err), 0);
	assert_int_not_equal(mk_merge_tensors("unit_axpy", in, 2, -1, pv, MK_DT_COUNT, "w.x", 0, &out, &err), 0);
	assert_non_null(strstr(err.msg, "scale"));
	assert_int_equal(calls, 1);
	/* the kernel's error, its message kept */
	assert_int_equal(mk_param_values_set(pv, "scale", -1, mk_pval_float(1), &err), 0);
	fail_next = true;
	assert_int_equal(mk_merge_tensors("unit_axpy", in, 2, -1, pv, MK_DT_COUNT, "w.y", 0, &out, &err), -MK_EINVAL);
	fail_next = false;
	assert_non_null(strstr(err.msg, "boom at w.y"));
	mk_param_values_free(pv);
}

static void test_callback_registration_refused(void **state)
{
	struct mk_err err = { 0 };

	assert_int_equal(mk_method_register_callback("unit_axpy", NULL, NULL, axpy_params, 2, &any_inputs, 0, axpy,
						      &calls, &err), -MK_EEXIST);
	assert_int_equal(mk_method_register_callback("linear", NULL, NULL, NULL, 0, &any_inputs, 0, axpy, &calls, &err),
			 -MK_EEXIST);
	assert_int_equal(mk_method_register_callback("Bad-Name", NULL, NULL, NULL, 0, &any_inputs, 0, axpy, &calls,
						      &err), -MK_EINVAL);
	assert_int_equal(mk_method_register_callback("unit_none", NULL, NULL, NULL, 0, &any_inputs, 0, NULL, NULL, &err),
			 -MK_EINVAL);
	assert_int_equal(mk_method_register_callback("unit_flags", NULL, NULL, NULL, 0, &any_inputs, 0x80, axpy,
						      &calls, &err), -MK_EINVAL);
	assert_null(mk_method_find("Bad-Name"));
	assert_null(mk_method_find("unit_flags"));
}

/* ---- merges into memory */

struct got {
	size_t n;
	char *name[64];
	size_t nbytes[64];
	uint8_t *data[64];
	int stop_at;                 /* return an error at this tensor (-1: never) */
};

static int sink(void *ctx, const char *name, const struct mk_tensor_desc *desc, const void *data, struct mk_err *err)
{
	struct got *g = ctx;
	uint64_t nb;

	assert_true(g->n < 64);
	if ((int)g->n == g->stop_at)
		return mk_err_set(err, MK_EIO, "enough at %s", name);
	assert_int_equal(mk_tensor_desc_nbytes(desc, &nb), 0);
	g->name[g->n] = strdup(name);
	g->nbytes[g->n] = nb;
	g->data[g->n] = malloc(nb ? nb : 1);
	memcpy(g->data[g->n], data, nb);
	g->n++;
	return 0;
}

static void got_free(struct got *g)
{
	for (size_t i = 0; i < g->n; i++) {
		free(g->name[i]);
		free(g->data[i]);
	}
	g->n = 0;
}

/* The merge of the tests: `method` over tiny-a and tiny-b. */
static const char config_fmt[] =
	"merge_method: %s\n"
	"models:\n"
	"  - model: testdata/models/tiny-a\n"
	"  - model: testdata/models/tiny-b\n"
	"    parameters:\n"
	"      weight: [0.5, 2.0]\n"
	"parameters:\n"
	"  scale: 0.25\n"
	"dtype: float32\n";
static char config[512], config_pieces[512];

/* Every tensor the sink got equals the one written into out/. */
static void same_as_written(const struct got *g, const char *out)
{
	char path[512];
	struct mk_st_file *f;
	struct mk_err err = { 0 };

	snprintf(path, sizeof(path), "%s/model.safetensors", out);
	assert_int_equal(mk_st_open(path, &f, &err), 0);
	assert_int_equal(g->n, f->ntensors);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	for (size_t i = 0; i < g->n; i++) {
		const struct mk_st_tensor *t = mk_st_find(f, g->name[i]);
		assert_non_null(t);
		assert_int_equal(t->end - t->begin, g->nbytes[i]);
		uint8_t *buf = malloc(g->nbytes[i] + 1);
		assert_int_equal(pread(fd, buf, g->nbytes[i], (off_t)(f->data_start + t->begin)), (ssize_t)g->nbytes[i]);
		assert_memory_equal(buf, g->data[i], g->nbytes[i]);
		free(buf);
	}
	close(fd);
	mk_st_file_free(f);
}

static void test_merge_into_memory(void **state)
{
	struct got g = { .stop_at = -1 };
	struct mk_diags d = { 0 };
	struct mk_err err = { 0 };
	char tmp[] = "/tmp/mk-unit-memory.XXXXXX", out[600];
	struct mk_run_opts o = { .label = "config.yml", .sink = sink, .sink_ctx = &g, .no_copy_tokenizer = true,
				 .no_model_card = true };

	snprintf(config, sizeof(config), config_fmt, "unit_axpy");
	snprintf(config_pieces, sizeof(config_pieces), config_fmt, "unit_axpy_pieces");
	o.text = config;
	o.len = strlen(config);

	assert_non_null(mkdtemp(tmp));
	snprintf(out, sizeof(out), "%s/out", tmp);
	calls = 0;
	assert_int_equal(mk_run_merge(&o, &d, &err), 0);
	mk_diags_free(&d);
	assert_true(g.n > 10);
	assert_int_equal(calls, (int)g.n);   /* the kernel once per tensor */
	/* the same merge written */
	struct mk_run_opts w = o;
	w.sink = NULL;
	w.out_dir = out;
	assert_int_equal(mk_run_merge(&w, &d, &err), 0);
	mk_diags_free(&d);
	same_as_written(&g, out);
	got_free(&g);
	/* a budget the tensors fit: the same */
	o.max_memory = 256ull << 20;
	assert_int_equal(mk_run_merge(&o, &d, &err), 0);
	mk_diags_free(&d);
	same_as_written(&g, out);
	got_free(&g);
	/* the kernel on pieces: the same bytes, no whole tensor, calls per chunk */
	assert_false(mk_method_find("unit_axpy_pieces")->whole_tensor);
	calls = 0;
	o.text = config_pieces;
	o.len = strlen(config_pieces);
	o.max_memory = 0;
	assert_int_equal(mk_run_merge(&o, &d, &err), 0);
	mk_diags_free(&d);
	assert_true(calls >= (int)g.n);
	same_as_written(&g, out);
	got_free(&g);
	o.text = config;
	o.len = strlen(config);
	/* the sink stops the run, its message kept */
	o.max_memory = 0;
	g.stop_at = 3;
	assert_int_not_equal(mk_run_merge(&o, &d, &err), 0);
	mk_diags_free(&d);
	assert_non_null(strstr(err.msg, "enough at "));
	assert_int_equal(g.n, 3);
	got_free(&g);
	/* a sink with an output directory, or resume: refused */
	o.out_dir = out;
	assert_int_equal(mk_run_merge(&o, &d, &err), -MK_EINVAL);
	mk_diags_free(&d);
	o.out_dir = NULL;
	o.resume = true;
	assert_int_equal(mk_run_merge(&o, &d, &err), -MK_EINVAL);
	mk_diags_free(&d);
	assert_int_equal(mk_rmtree(tmp, &err), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_callback_method),
		cmocka_unit_test(test_callback_registration_refused),
		cmocka_unit_test(test_merge_into_memory),
	};
	return cmocka_run_group_tests(tests, group_setup, NULL);
}
