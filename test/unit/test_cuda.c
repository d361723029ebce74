/* test_cuda.c - the GPU kernels against the CPU methods, bit for bit.
 *
 * Part 1, everywhere: the same comparisons through the host emulation of
 * the kernels (mk_cuda_opts.emulate: the context's packing, pieces and
 * launches, the kernels' element code of src/cuda/kern.h run on the host),
 * so the arithmetic of the kernels and the batching are checked on a
 * machine without a GPU, under the sanitizers too.
 * Part 2, with a CUDA device: every comparison again on the device, the
 * older mk_cuda_linear, larger batches timed against the CPU, and the
 * device's rates (mk_cuda_bench_run): the linear kernel's bytes per
 * second against the device-to-device copy's.  Without a device part 2 is
 * skipped: exit 77 once part 1 has passed.
 *
 * For every method with a kernel (linear, slerp and the eight methods of
 * the task arithmetic family, plus ties with count consensus), on random
 * inputs with exact ties in |delta| and zeros: the job's passes run on the
 * CPU (mk_job_accumulate/finish), then mk_job_apply gives the reference and
 * the GPU path (one chunk at a time, and batched across jobs with small
 * launch limits) must give the same bytes (NaN for NaN).  The same for a
 * method written as a plugin would be, whose device hook (mk/device.h)
 * hands the GPU linear's kernel with its inputs reordered; and methods
 * without a usable hook are refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda/cuda.h"
#include "mk/device.h"
#include "mk/method.h"
#include "mk/tensors.h"
#include "method_harness.h"
#include "methods/builtin.h"

/* in libmk, not registered (src/methods/gta.h) */
extern const struct mk_method mk_gta_method_ties_count;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t rnext(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}
static float frand(void)
{
	return (float)((double)(rnext() >> 11) / 9007199254740992.0 - 0.5);
}

/* ----------------------------------------------------------- the contexts */

static bool on_device;                 /* part 2 */
static uint64_t n_jobs, n_elems, n_launches;
static unsigned n_methods_seen;
static const char *methods_seen[32];

static void seen(const char *name)
{
	for (unsigned i = 0; i < n_methods_seen; i++)
		if (!strcmp(methods_seen[i], name))
			return;
	if (n_methods_seen < 32)
		methods_seen[n_methods_seen++] = name;
}

static struct mk_cuda_ctx *open_ctx(uint64_t max_bytes, size_t max_groups, unsigned streams)
{
	struct mk_cuda_opts o = { .max_bytes = max_bytes, .max_groups = max_groups, .streams = streams,
				  .emulate = !on_device };
	struct mk_cuda_ctx *cx = NULL;
	struct mk_err err = { 0 };

	if (mk_cuda_open(&cx, &o, &err))
		fail_msg("mk_cuda_open: %s", err.msg);
	return cx;
}

static void close_ctx(struct mk_cuda_ctx *cx)
{
	struct mk_cuda_stats st;

	mk_cuda_get_stats(cx, &st);
	n_launches += st.launches;
	mk_cuda_close(cx);
}

/* got == ref bit for bit, or both NaN */
static void assert_same(const float *got, const float *ref, uint64_t n, const char *what)
{
	for (uint64_t e = 0; e < n; e++) {
		uint32_t a, b;
		memcpy(&a, &got[e], 4);
		memcpy(&b, &ref[e], 4);
		if (a != b && !(isnan(got[e]) && isnan(ref[e])))
			fail_msg("%s: element %llu: gpu %a (0x%08x), cpu %a (0x%08x)", what, (unsigned long long)e,
				 (double)got[e], a, (double)ref[e], b);
	}
	n_elems += n;
}

/* ------------------------------------------------------------------ data */

enum { ROWS = 61, COLS = 333, NEL = ROWS * COLS };

/* n inputs of NEL elements: x_0 (the base when base = 0) random; the
 * others base + delta, delta a multiple of 1/64 in [-24/64, 24/64] for
 * about half the elements (exact ties in |delta|, zeros) and a random
 * float otherwise.  INF: a few infinities; COARSE: every delta one of
 * 0, +-1/8, +-2/8 (thousands of ties at every selection cut). */
enum { INF = 1, COARSE = 2 };

static float **make_inputs(size_t n, int base, int flags)
{
	float **x = calloc(n, sizeof(*x));
	if (base < 0)
		base = 0;
	for (size_t i = 0; i < n; i++)
		x[i] = malloc(NEL * sizeof(float));
	for (size_t e = 0; e < NEL; e++)
		x[base][e] = frand() * 2.0f;
	for (size_t i = 0; i < n; i++) {
		if ((int)i == base)
			continue;
		for (size_t e = 0; e < NEL; e++) {
			uint64_t r = rnext();
			float d = r & 1 ? (float)((int)((r >> 8) % 49) - 24) / 64.0f : frand() * 0.75f;
			if (flags & COARSE)
				d = (float)((int)((r >> 8) % 5) - 2) / 8.0f;
			x[i][e] = x[base][e] + d;
		}
	}
	if (flags & INF)
		for (size_t i = 0; i < n; i++)
			for (int k = 0; k < 5; k++)
				x[i][(rnext() >> 12) % NEL] = (k & 1) ? -INFINITY : INFINITY;
	return x;
}

static void free_inputs(float **x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(x[i]);
	free(x);
}

/* ------------------------------------------------------------ test cases */

struct tcase {
	const char *method;          /* registry name; NULL: mk_gta_method_ties_count */
	size_t n;
	int base;
	int variant;
	int flags;                   /* INF, COARSE */
};

/* Parameters of a case: each method with a few settings. */
static void set_params(struct tj *t, const struct tcase *c)
{
	const char *m = t->m->name;
	static const double W[6] = { 0.7, -0.4, 1.2, 0.55, 0.3, 0.9 };
	int v = c->variant;

	if (!strcmp(m, "linear")) {
		for (size_t i = 0; i < c->n; i++)
			set_in(t, i, "weight", mk_pval_float(v == 2 ? 1.0 : W[i]));
		set_g(t, "normalize", mk_pval_bool(v != 1));
		return;
	}
	if (!strcmp(m, "slerp")) {
		if (v != 2)
			set_g(t, "t", mk_pval_float(v == 1 ? 0.71 : 0.3));
		return;
	}
	for (size_t i = 0; i < c->n; i++) {
		if ((int)i == c->base)
			continue;
		set_in(t, i, "weight", mk_pval_float(W[i]));
		if (!strcmp(m, "task_arithmetic"))
			continue;
		if (!strncmp(m, "della", 5)) {
			/* variant 1: one model dropped (density 0) */
			set_in(t, i, "density", mk_pval_float(v == 1 && i == 2 ? 0.0 : 0.35 + 0.1 * (double)i));
			set_in(t, i, "epsilon", mk_pval_float(0.1));
		} else {
			/* variant 1: one model dense (density >= 1) */
			set_in(t, i, "density", mk_pval_float(v == 1 && i == 2 ? 1.0 : 0.3 + 0.15 * (double)i));
		}
		if (!strncmp(m, "breadcrumbs", 11))
			set_in(t, i, "gamma", mk_pval_float(0.02 * (double)i));
	}
	if (v == 1)
		set_g(t, "lambda", mk_pval_float(0.8));
	if (v == 2)
		set_g(t, "normalize", mk_pval_bool(!strcmp(m, "ties") || !strcmp(m, "della") ? false : true));
	if (v == 3 && (!strncmp(m, "dare", 4) || !strncmp(m, "della", 5)))
		set_g(t, "rescale", mk_pval_bool(false));
}

/* Build the case's job (passes run, chunks of `pchunk`) and its CPU
 * output (apply in chunks of 4999, last to first). */
static void build(const struct tcase *c, const char *tensor, float **x, struct tj *t, struct mk_job *job,
		  float *ref)
{
	struct mk_err err = { 0 };
	const void *views[MAXIN];
	const struct mk_method *m = c->method ? mk_method_find(c->method) : &mk_gta_method_ties_count;
	uint64_t pchunk = 4096 + 7;
	int rc;

	tj_method(t, m, c->n, c->base);
	for (size_t i = 0; i < c->n; i++) {
		t->in[i] = td(MK_DT_F32, 2, ROWS, COLS);
		views[i] = x[i];
	}
	t->d.tensor = tensor;
	set_params(t, c);
	/* the passes in pchunk chunks, then apply: tj_run keeps the job */
	rc = tj_run(t, MK_DT_COUNT, views, pchunk, ref, true, job, NULL, &err);
	if (rc)
		fail_msg("%s: %s", t->m->name, err.msg);
	assert_int_equal(job->nelem, NEL);
	assert_true(mk_cuda_job_supported(job));
	seen(t->m->name);
}

static void chunk_of(const struct mk_job *job, float **x, uint64_t e, uint64_t count, const void **ptr,
		     struct mk_job_chunk *c)
{
	for (size_t i = 0; i < job->d.ninputs; i++)
		ptr[i] = job->used[i] ? (const void *)(x[i] + e) : NULL;
	*c = (struct mk_job_chunk){ .elem_begin = e, .count = count, .in = ptr };
}

/* One case: the job's chunks one at a time (mk_cuda_job_apply, chunks of
 * 3001: DELLA mask bytes cut mid-byte), then all submitted before one
 * flush into a context with small launches (chunks cut across launches). */
static void run_case(const struct tcase *c)
{
	struct tj t;
	struct mk_job job;
	struct mk_err err = { 0 };
	float **x = make_inputs(c->n, c->base, c->flags);
	float *ref = malloc(NEL * sizeof(float)), *got = malloc(NEL * sizeof(float));
	char what[160];
	const void *ptr[MAXIN];
	struct mk_job_chunk ch;
	struct mk_cuda_ctx *cx;

	build(c, "model.layers.3.mlp.up_proj.weight", x, &t, &job, ref);
	snprintf(what, sizeof(what), "%s (variant %d, %zu inputs, base %d%s), %s", job.method->name, c->variant, c->n,
		 c->base, c->flags & INF ? ", infinities" : c->flags & COARSE ? ", coarse" : "", on_device ? "device" : "emulated");

	cx = open_ctx(4 << 20, 0, 0);
	memset(got, 0xff, NEL * sizeof(float));
	for (uint64_t e = 0; e < NEL; e += 3001) {
		chunk_of(&job, x, e, NEL - e < 3001 ? NEL - e : 3001, ptr, &ch);
		if (mk_cuda_job_apply(cx, &job, &ch, got + e, &err))
			fail_msg("%s: %s", what, err.msg);
	}
	assert_same(got, ref, NEL, what);
	close_ctx(cx);

	/* 64 KiB launches, 2 pieces each, 2 slots: cut, queued, reused */
	cx = open_ctx(64 << 10, 2, 2);
	memset(got, 0xff, NEL * sizeof(float));
	for (uint64_t e = 0; e < NEL; e += 7777) {
		chunk_of(&job, x, e, NEL - e < 7777 ? NEL - e : 7777, ptr, &ch);
		if (mk_cuda_submit(cx, &job, &ch, got + e, &err))
			fail_msg("%s: %s", what, err.msg);
	}
	if (mk_cuda_flush(cx, &err))
		fail_msg("%s: %s", what, err.msg);
	assert_same(got, ref, NEL, what);
	close_ctx(cx);

	n_jobs++;
	mk_job_release(&job);
	free(ref);
	free(got);
	free_inputs(x, c->n);
}

static const struct tcase cases[] = {
	{ "linear", 3, -1, 0, 0 },
	{ "linear", 4, 1, 1, 0 },
	{ "linear", 2, -1, 2, INF },
	{ "slerp", 2, 0, 0, 0 },
	{ "slerp", 2, 1, 1, 0 },
	{ "slerp", 2, 0, 2, 0 },          /* t unset: the base */
	{ "task_arithmetic", 4, 0, 0, 0 },
	{ "task_arithmetic", 3, 1, 1, INF },
	{ "task_arithmetic", 4, 0, 2, 0 },
	{ "ties", 4, 0, 0, 0 },
	{ "ties", 4, 2, 1, 0 },
	{ "ties", 3, 0, 2, INF },
	{ "dare_linear", 4, 0, 0, 0 },
	{ "dare_linear", 4, 0, 3, 0 },
	{ "dare_ties", 4, 1, 0, 0 },
	{ "dare_ties", 4, 0, 1, 0 },
	{ "dare_ties", 3, 0, 3, INF },
	{ "breadcrumbs", 4, 0, 0, 0 },
	{ "breadcrumbs", 4, 0, 1, 0 },
	{ "breadcrumbs_ties", 4, 0, 0, 0 },
	{ "breadcrumbs_ties", 3, 1, 2, INF },
	{ "della", 4, 0, 0, 0 },
	{ "della", 4, 0, 1, 0 },
	{ "della", 3, 0, 3, 0 },
	{ "della_linear", 4, 0, 0, 0 },
	{ "della_linear", 4, 1, 1, 0 },
	{ "della_linear", 4, 0, 2, 0 },
	{ NULL, 4, 0, 0, 0 },               /* ties, count consensus */
	{ NULL, 4, 0, 1, COARSE },
	{ "ties", 4, 0, 0, COARSE },
	{ "ties", 3, 1, 2, COARSE },
	{ "breadcrumbs", 4, 0, 0, COARSE },
	{ "breadcrumbs_ties", 4, 2, 1, COARSE },
	{ "della", 4, 0, 0, COARSE },
	{ "dare_ties", 4, 0, 1, COARSE },
};

static void test_methods(void **state)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
}

/* The reference inputs of method_harness.h: every family member, one chunk. */
static void test_appendix(void **state)
{
	static const char *ms[] = { "task_arithmetic", "ties", "dare_linear", "dare_ties", "breadcrumbs",
				    "breadcrumbs_ties", "della", "della_linear" };
	const void *v[4] = { W0, M1, M2, M3 };
	struct mk_cuda_ctx *cx = open_ctx(1 << 20, 0, 0);

	fixtures_init();
	for (size_t k = 0; k < sizeof(ms) / sizeof(ms[0]); k++) {
		struct tj t;
		struct mk_job job;
		struct mk_err err = { 0 };
		float ref[12], got[12];
		struct mk_job_chunk ch = { .elem_begin = 0, .count = 12, .in = v };
		tj_init(&t, ms[k], 4, 0);
		for (size_t i = 1; i < 4; i++) {
			set_in(&t, i, "weight", mk_pval_float(1.0 / (double)i));
			if (k)
				set_in(&t, i, "density", mk_pval_float(k >= 6 ? 0.5 : 0.5 + 0.1 * (double)i));
		}
		assert_int_equal(tj_run(&t, MK_DT_COUNT, v, 5, ref, false, &job, NULL, &err), 0);
		memset(got, 0xff, sizeof(got));
		if (mk_cuda_job_apply(cx, &job, &ch, got, &err))
			fail_msg("%s: %s", ms[k], err.msg);
		assert_same(got, ref, 12, ms[k]);
		mk_job_release(&job);
	}
	close_ctx(cx);
}

/* Batched: several jobs of one method (other tensors: other random
 * streams; other weights), their chunks all in one mk_cuda_apply, with
 * limits that make launches of several pieces and cut chunks. */
static void batch_method(const char *method, uint64_t max_bytes, size_t max_groups, bool expect_many)
{
	enum { J = 5, CH = 4096 };
	struct tj t[J];
	struct mk_job job[J];
	float **x[J], *ref[J], *got[J];
	const void *ptr[J][(NEL + CH - 1) / CH][MAXIN];
	struct mk_job_chunk ch[J][(NEL + CH - 1) / CH];
	struct mk_cuda_group g[J * ((NEL + CH - 1) / CH)];
	struct tcase c = { method, strcmp(method, "slerp") ? 4 : 2, 0, 0, 0 };
	struct mk_cuda_ctx *cx = open_ctx(max_bytes, max_groups, 3);
	struct mk_cuda_stats st;
	struct mk_err err = { 0 };
	char name[J][64];
	size_t ng = 0;

	for (int j = 0; j < J; j++) {
		c.variant = j % 2;
		x[j] = make_inputs(c.n, c.base, 0);
		ref[j] = malloc(NEL * sizeof(float));
		got[j] = malloc(NEL * sizeof(float));
		memset(got[j], 0xff, NEL * sizeof(float));
		snprintf(name[j], sizeof(name[j]), "model.layers.%d.self_attn.o_proj.weight", j);
		build(&c, name[j], x[j], &t[j], &job[j], ref[j]);
		for (uint64_t e = 0, k = 0; e < NEL; e += CH, k++) {
			chunk_of(&job[j], x[j], e, NEL - e < CH ? NEL - e : CH, ptr[j][k], &ch[j][k]);
			g[ng++] = (struct mk_cuda_group){ .job = &job[j], .c = &ch[j][k], .out = got[j] + e };
		}
	}
	if (mk_cuda_apply(cx, g, ng, &err))
		fail_msg("%s batch: %s", method, err.msg);
	mk_cuda_get_stats(cx, &st);
	for (int j = 0; j < J; j++) {
		char what[96];
		snprintf(what, sizeof(what), "%s batch, job %d", method, j);
		assert_same(got[j], ref[j], NEL, what);
		mk_job_release(&job[j]);
		free_inputs(x[j], c.n);
		free(ref[j]);
		free(got[j]);
		n_jobs++;
	}
	assert_int_equal(st.submits, ng);
	assert_true(st.pieces >= ng);
	assert_true(st.pieces <= st.launches * (max_groups ? max_groups : 1024));
	if (expect_many)
		assert_true(st.launches > 3);
	else
		assert_true(st.pieces > st.launches);   /* pieces shared launches */
	close_ctx(cx);
}

static void test_batches(void **state)
{
	static const char *ms[] = { "linear", "slerp", "ties", "dare_ties", "della", "breadcrumbs",
				    "task_arithmetic", "della_linear", "dare_linear", "breadcrumbs_ties" };
	for (size_t k = 0; k < sizeof(ms) / sizeof(ms[0]); k++) {
		batch_method(ms[k], 96 << 10, 3, true);       /* small launches */
		batch_method(ms[k], 16 << 20, 64, false);     /* many pieces per launch */
	}
}

/* What has no kernel says so and does nothing; unfinished passes are an
 * error. */
static void test_unsupported(void **state)
{
	struct mk_cuda_ctx *cx = open_ctx(1 << 20, 0, 0);
	struct mk_err err = { 0 };
	float a[12], b[12], out[12];
	const void *v[2] = { a, b };
	struct mk_job_chunk ch = { .elem_begin = 0, .count = 12, .in = v };
	struct mk_cuda_group g = { .c = &ch, .out = out };
	struct tj t;
	struct mk_job job;
	double da[12], db[12], dout[12];
	const void *dv[2] = { da, db };

	for (int i = 0; i < 12; i++) {
		a[i] = frand();
		b[i] = frand();
		da[i] = a[i];
		db[i] = b[i];
	}
	/* nuslerp: no kernel */
	tj_init(&t, "nuslerp", 2, -1);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	assert_int_equal(tj_run(&t, MK_DT_COUNT, v, 0, out, false, &job, NULL, &err), 0);
	assert_false(mk_cuda_job_supported(&job));
	assert_int_equal(mk_cuda_job_apply(cx, &job, &ch, out, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "nuslerp"));
	g.job = &job;
	assert_int_equal(mk_cuda_apply(cx, &g, 1, &err), -MK_EUNSUPPORTED);
	mk_job_release(&job);
	/* linear in float64 */
	tj_init(&t, "linear", 2, -1);
	t.in[0] = td(MK_DT_F64, 2, 3, 4);
	t.in[1] = td(MK_DT_F64, 2, 3, 4);
	set_in(&t, 0, "weight", mk_pval_float(0.5));
	set_in(&t, 1, "weight", mk_pval_float(0.5));
	assert_int_equal(tj_run(&t, MK_DT_COUNT, dv, 0, dout, false, &job, NULL, &err), 0);
	assert_int_equal(job.compute, MK_DT_F64);
	assert_false(mk_cuda_job_supported(&job));
	assert_int_equal(mk_cuda_job_apply(cx, &job, &ch, out, &err), -MK_EUNSUPPORTED);
	mk_job_release(&job);
	/* slerp before its pass */
	tj_init(&t, "slerp", 2, 0);
	set_g(&t, "t", mk_pval_float(0.5));
	assert_int_equal(mk_job_init(&job, t.m, &t.d, MK_DT_COUNT, &err), 0);
	assert_int_equal(job.npasses, 1);
	assert_int_equal(mk_cuda_job_apply(cx, &job, &ch, out, &err), -MK_EINVAL);
	mk_job_release(&job);
	close_ctx(cx);
}

/* ------------------------------------------------ a plugin's device hook */

/* "reverse_linear", written as a plugin would be (mk/method.h and
 * mk/device.h only): out = (w_{n-1} x_{n-1} + ... + w_0 x_0) / sum, summed
 * from the last input to the first in float32, sum = w_{n-1} + ... + w_0.
 * Its device hook hands the GPU linear's kernel with the inputs in that
 * order; a job of one input answers MK_DEVICE_NONE. */
struct rl_state {
	float *w, sum;
	struct mk_device_input *dev;
};

static const struct mk_param_spec rl_params[] = {
	{ .name = "weight", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT, .flags = MK_PF_REQUIRED,
	  .doc = "weight of each input" },
};

static int rl_output(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		     struct mk_err *err)
{
	bool rectified;
	int rc = mk_rectify_shapes(m, d, used, &po->out, &rectified, err);

	if (rc)
		return rc;
	for (size_t i = 0; i < d->ninputs; i++)
		if (d->in[i].dtype != MK_DT_F32)
			return mk_err_set(err, MK_EUNSUPPORTED, "reverse_linear: float32 inputs only");
	po->out.dtype = MK_DT_F32;
	po->compute = MK_DT_F32;
	return 0;
}

static int rl_init(struct mk_job *job, struct mk_err *err)
{
	size_t n = job->d.ninputs;
	struct rl_state *s = calloc(1, sizeof(*s));

	if (!s || !(s->w = calloc(n, sizeof(*s->w))) || !(s->dev = calloc(n, sizeof(*s->dev)))) {
		if (s)
			free(s->w);
		free(s);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t i = n; i-- > 0;) {
		s->w[i] = (float)mk_job_input_param(job, i, 0)->f;
		s->sum = i == n - 1 ? s->w[i] : s->sum + s->w[i];
	}
	job->state = s;
	return 0;
}

static int rl_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct rl_state *s = job->state;
	size_t n = job->d.ninputs;
	float *o = out;

	for (uint64_t e = 0; e < c->count; e++) {
		float acc = s->w[n - 1] * ((const float *)c->in[n - 1])[e];
		for (size_t i = n - 1; i-- > 0;) {
			float p = s->w[i] * ((const float *)c->in[i])[e];
			acc = acc + p;
		}
		o[e] = acc / s->sum;
	}
	return 0;
}

static void rl_release(struct mk_job *job)
{
	struct rl_state *s = job->state;

	if (s) {
		free(s->w);
		free(s->dev);
		free(s);
	}
	job->state = NULL;
}

static enum mk_device_kernel rl_kernel(const struct mk_job *job)
{
	return job->d.ninputs > 1 ? MK_DEVICE_LINEAR : MK_DEVICE_NONE;
}

static int rl_state_of(const struct mk_job *job, struct mk_device_job *dj, struct mk_err *err)
{
	struct rl_state *s = job->state;
	size_t n = job->d.ninputs;

	for (size_t j = 0; j < n; j++)
		s->dev[j] = (struct mk_device_input){ .idx = (int)(n - 1 - j), .w = s->w[n - 1 - j] };
	*dj = (struct mk_device_job){ .kernel = MK_DEVICE_LINEAR, .normalize = true, .sum = s->sum, .n = n,
				      .in = s->dev };
	return 0;
}

static const struct mk_device_hook rl_hook = { .kernel = rl_kernel, .state = rl_state_of };

static const struct mk_method reverse_linear = {
	.abi = MK_METHOD_ABI,
	.name = "reverse_linear",
	.pretty_name = "Reverse linear",
	.params = rl_params,
	.nparams = 1,
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY, .min_non_base = 0,
		      .max_non_base = MK_ARITY_ANY },
	.output = rl_output,
	.init = rl_init,
	.apply = rl_apply,
	.release = rl_release,
	.device = &rl_hook,
};

/* A job of m with n [3, 4] inputs, weights W; its passes (none) run. */
static void small_job(struct tj *t, const struct mk_method *m, size_t n, const void *const *v, float *out,
		      struct mk_job *job)
{
	struct mk_err err = { 0 };

	tj_method(t, m, n, -1);
	for (size_t i = 0; i < n; i++)
		set_in(t, i, "weight", mk_pval_float(0.25 + 0.5 * (double)i));
	if (tj_run(t, MK_DT_COUNT, v, 0, out, false, job, NULL, &err))
		fail_msg("%s: %s", m->name, err.msg);
}

/* The backend knows a method only through its device hook: a registered
 * method of a plugin with one runs on the device (the inputs in the order
 * its hook gives), the same bytes as its apply on the CPU; one without a
 * hook, a hook answering MK_DEVICE_NONE, or a hook lacking state() is
 * reported unsupported and nothing is done. */
static void test_hooks(void **state)
{
	enum { N = 4 };
	static const double W[N] = { 0.7, -0.4, 1.2, 0.55 };
	struct mk_err err = { 0 };
	const struct mk_method *m;
	float **x = make_inputs(N, -1, 0);
	float *ref = malloc(NEL * sizeof(float)), *got = malloc(NEL * sizeof(float));
	float *fwd = malloc(NEL * sizeof(float));
	const void *views[N], *ptr[MAXIN];
	struct mk_job_chunk ch;
	struct mk_job job;
	struct mk_cuda_ctx *cx;
	struct tj t;
	uint64_t ndiff = 0;

	if (!mk_method_find("reverse_linear") && mk_method_register(&reverse_linear, &err))
		fail_msg("register: %s", err.msg);
	m = mk_method_find("reverse_linear");
	assert_ptr_equal(m, &reverse_linear);
	for (int pass = 0; pass < 2; pass++) {
		/* pass 0: reverse_linear, pass 1: linear with the same weights */
		tj_method(&t, pass ? &mk_method_linear : m, N, -1);
		for (size_t i = 0; i < N; i++) {
			t.in[i] = td(MK_DT_F32, 2, ROWS, COLS);
			views[i] = x[i];
			set_in(&t, i, "weight", mk_pval_float(W[i]));
		}
		if (tj_run(&t, MK_DT_COUNT, views, 4999, pass ? fwd : ref, true, &job, NULL, &err))
			fail_msg("%s: %s", t.m->name, err.msg);
		if (pass) {
			mk_job_release(&job);
			break;
		}
		assert_true(mk_cuda_job_supported(&job));
		/* small launches: pieces cut and shared */
		cx = open_ctx(64 << 10, 3, 2);
		memset(got, 0xff, NEL * sizeof(float));
		for (uint64_t e = 0; e < NEL; e += 3001) {
			chunk_of(&job, x, e, NEL - e < 3001 ? NEL - e : 3001, ptr, &ch);
			if (mk_cuda_submit(cx, &job, &ch, got + e, &err))
				fail_msg("reverse_linear: %s", err.msg);
		}
		if (mk_cuda_flush(cx, &err))
			fail_msg("reverse_linear: %s", err.msg);
		assert_same(got, ref, NEL, "reverse_linear (a plugin's hook)");
		close_ctx(cx);
		seen(m->name);
		n_jobs++;
		mk_job_release(&job);
	}
	/* the order matters: had the backend taken the inputs in index order
	 * it would have given linear's bytes, which differ */
	for (uint64_t e = 0; e < NEL; e++)
		ndiff += memcmp(&fwd[e], &ref[e], 4) != 0;
	assert_true(ndiff > 0);

	{
		float a[12], b[12], out[12];
		const void *v[2] = { a, b };
		struct mk_job_chunk c12 = { .elem_begin = 0, .count = 12, .in = v };
		struct mk_method nohook = mk_method_linear, half = reverse_linear;
		const struct mk_device_hook half_hook = { .kernel = rl_kernel };
		struct mk_cuda_group g = { .job = &job, .c = &c12, .out = out };

		for (int i = 0; i < 12; i++) {
			a[i] = frand();
			b[i] = frand();
		}
		cx = open_ctx(1 << 20, 0, 0);
		/* one input: the hook answers MK_DEVICE_NONE */
		small_job(&t, m, 1, v, out, &job);
		assert_false(mk_cuda_job_supported(&job));
		assert_int_equal(mk_cuda_job_apply(cx, &job, &c12, out, &err), -MK_EUNSUPPORTED);
		assert_non_null(strstr(err.msg, "reverse_linear"));
		mk_job_release(&job);
		/* linear's spec and kernels without its hook */
		nohook.name = "linear_without_hook";
		nohook.device = NULL;
		small_job(&t, &nohook, 2, v, out, &job);
		assert_false(mk_cuda_job_supported(&job));
		memset(out, 0xff, sizeof(out));
		assert_int_equal(mk_cuda_job_apply(cx, &job, &c12, out, &err), -MK_EUNSUPPORTED);
		assert_non_null(strstr(err.msg, "linear_without_hook"));
		assert_int_equal(mk_cuda_apply(cx, &g, 1, &err), -MK_EUNSUPPORTED);
		for (int i = 0; i < 12; i++)
			assert_true(isnan(out[i]));         /* nothing written */
		mk_job_release(&job);
		/* a hook without state() is no hook */
		half.name = "reverse_linear_half_hook";
		half.device = &half_hook;
		small_job(&t, &half, 2, v, out, &job);
		assert_false(mk_cuda_job_supported(&job));
		assert_int_equal(mk_cuda_job_apply(cx, &job, &c12, out, &err), -MK_EUNSUPPORTED);
		mk_job_release(&job);
		close_ctx(cx);
	}
	free_inputs(x, N);
	free(ref);
	free(got);
	free(fwd);
}

/* ------------------------------------------------------- matrix products */

/* mk_cuda_gemm_nt's contract: each output summed over k in order from 0,
 * one fmaf per step. */
static void gemm_ref(const float *x, const float *w, float *y, size_t n, size_t in, size_t outd)
{
	for (size_t r = 0; r < n; r++)
		for (size_t c = 0; c < outd; c++) {
			float acc = 0.0f;
			for (size_t k = 0; k < in; k++)
				acc = fmaf(x[r * in + k], w[c * in + k], acc);
			y[r * outd + c] = acc;
		}
}

/* y = x w^T through the context; returns the GPU's output (malloc'd). */
static float *gemm_on(struct mk_cuda_ctx *cx, const float *x, const float *w, size_t n, size_t in, size_t outd)
{
	struct mk_cuda_mat *dx, *dw, *dy;
	struct mk_err err = { 0 };
	float *y = malloc(n * outd * sizeof(float) + 1);

	assert_non_null(y);
	if (mk_cuda_mat_new(cx, n * in, &dx, &err) || mk_cuda_mat_new(cx, outd * in, &dw, &err) ||
	    mk_cuda_mat_new(cx, n * outd, &dy, &err) || mk_cuda_mat_put(cx, dx, x, n * in, &err) ||
	    mk_cuda_mat_put(cx, dw, w, outd * in, &err) || mk_cuda_gemm_nt(cx, dx, n, in, dw, outd, dy, &err) ||
	    mk_cuda_mat_get(cx, dy, y, n * outd, &err))
		fail_msg("gemm %zu x %zu x %zu: %s", n, in, outd, err.msg);
	mk_cuda_mat_free(cx, dx);
	mk_cuda_mat_free(cx, dw);
	mk_cuda_mat_free(cx, dy);
	return y;
}

/* Shapes around the kernel's tiles (64 x 64, k by 16) and off them: the
 * GPU's product = the contract's bit for bit, and within the float32 error
 * bound of the exact product (|d| <= in * 2^-24 * sum |x w|, a float64
 * reference). */
static void test_gemm(void **state)
{
	static const size_t shapes[][3] = { { 1, 1, 1 },   { 7, 16, 64 },   { 64, 64, 64 }, { 37, 131, 70 },
					    { 130, 300, 200 }, { 3, 1000, 5 }, { 65, 17, 129 } };
	struct mk_cuda_ctx *cx = open_ctx(64u << 10, 0, 2);
	double worst = 0;

	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const size_t n = shapes[si][0], in = shapes[si][1], outd = shapes[si][2];
		float *x = malloc(n * in * sizeof(float)), *w = malloc(outd * in * sizeof(float));
		float *ref = malloc(n * outd * sizeof(float));
		assert_true(x && w && ref);
		for (size_t i = 0; i < n * in; i++)
			x[i] = frand() * 4.0f;
		for (size_t i = 0; i < outd * in; i++)
			w[i] = frand();
		if (n * in > 2)
			x[1] = 0.0f, x[2] = -0.0f;
		gemm_ref(x, w, ref, n, in, outd);
		float *got = gemm_on(cx, x, w, n, in, outd);
		assert_same(got, ref, n * outd, "gemm");
		for (size_t r = 0; r < n; r++)
			for (size_t c = 0; c < outd; c++) {
				double e = 0, a = 0;
				for (size_t k = 0; k < in; k++) {
					e += (double)x[r * in + k] * w[c * in + k];
					a += fabs((double)x[r * in + k] * w[c * in + k]);
				}
				double d = fabs(got[r * outd + c] - e), bound = (double)in * 0x1p-24 * a;
				if (d > bound)
					fail_msg("gemm %zu x %zu x %zu [%zu][%zu]: |%.9g - %.9g| > %.3g", n, in, outd, r, c,
						 got[r * outd + c], e, bound);
				if (a > 0)
					worst = fmax(worst, d / (0x1p-24 * a * sqrt((double)in)));
			}
		n_elems += n * outd;
		free(x), free(w), free(ref), free(got);
	}
	printf("gemm: %zu shapes bit for bit with the fmaf loop; worst |d| = %.2f sqrt(in) 2^-24 sum|xw|\n",
	       sizeof(shapes) / sizeof(shapes[0]), worst);
	/* misuse: arrays smaller than the shapes, the output an input */
	{
		struct mk_cuda_mat *a, *b;
		struct mk_err err = { 0 };
		assert_int_equal(mk_cuda_mat_new(cx, 12, &a, &err), 0);
		assert_int_equal(mk_cuda_mat_new(cx, 12, &b, &err), 0);
		assert_int_equal(mk_cuda_gemm_nt(cx, a, 3, 4, a, 3, a, &err), -MK_EINVAL);
		assert_int_equal(mk_cuda_gemm_nt(cx, a, 4, 4, a, 3, b, &err), -MK_EINVAL);
		assert_non_null(strstr(err.msg, "16 floats into an array of 12"));
		assert_int_equal(mk_cuda_mat_put(cx, a, (const float[13]){ 0 }, 13, &err), -MK_EINVAL);
		assert_int_equal(mk_cuda_gemm_nt(cx, a, 3, 4, a, 3, b, &err), 0);
		mk_cuda_mat_free(cx, a);
		mk_cuda_mat_free(cx, b);
	}
	close_ctx(cx);
	(void)state;
}

/* The forward pass's shapes on the device, against OpenBLAS: a 4096 x
 * 4096 projection and a 14336 x 4096 MLP matrix (7B-like), 32 and 512
 * rows; the product alone (device-resident operands, synchronised by a
 * one-float read) and the copies of the activations counted apart. */
static void test_gemm_timings(void **state)
{
	static const size_t shapes[][3] = { { 32, 4096, 4096 }, { 512, 4096, 4096 }, { 32, 4096, 14336 },
					    { 512, 4096, 14336 } };
	struct mk_cuda_ctx *cx = open_ctx(64u << 10, 0, 2);
	struct mk_err err = { 0 };

	for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
		const size_t n = shapes[si][0], in = shapes[si][1], outd = shapes[si][2];
		float *x = malloc(n * in * 4), *w = malloc(outd * in * 4), *y = malloc(n * outd * 4), *yc = malloc(n * outd * 4);
		struct mk_cuda_mat *dx, *dw, *dy;
		float one;
		double t0, t1, t2, t3, t4, best = 1e30;
		assert_true(x && w && y && yc);
		for (size_t i = 0; i < n * in; i++)
			x[i] = frand();
		for (size_t i = 0; i < outd * in; i++)
			w[i] = frand() * 0.05f;
		if (mk_cuda_mat_new(cx, n * in, &dx, &err) || mk_cuda_mat_new(cx, outd * in, &dw, &err) ||
		    mk_cuda_mat_new(cx, n * outd, &dy, &err))
			fail_msg("%s", err.msg);
		assert_int_equal(mk_cuda_mat_put(cx, dx, x, n * in, &err), 0);
		t0 = now();
		assert_int_equal(mk_cuda_mat_put(cx, dw, w, outd * in, &err), 0);
		t1 = now();
		for (int rep = 0; rep < 4; rep++) {
			double a = now();
			assert_int_equal(mk_cuda_gemm_nt(cx, dx, n, in, dw, outd, dy, &err), 0);
			assert_int_equal(mk_cuda_mat_get(cx, dy, &one, 1, &err), 0);
			if (rep && now() - a < best)
				best = now() - a;
		}
		t2 = now();
		assert_int_equal(mk_cuda_mat_put(cx, dx, x, n * in, &err), 0);
		assert_int_equal(mk_cuda_gemm_nt(cx, dx, n, in, dw, outd, dy, &err), 0);
		assert_int_equal(mk_cuda_mat_get(cx, dy, y, n * outd, &err), 0);
		t3 = now();
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)outd, (blasint)in, 1.0f, x,
			    (blasint)in, w, (blasint)in, 0.0f, yc, (blasint)outd);
		t4 = now();
		double md = 0, mr = 0;
		for (size_t i = 0; i < n * outd; i++) {
			md = fmax(md, fabs((double)y[i] - yc[i]));
			mr = fmax(mr, fabs((double)yc[i]));
		}
		printf("timing gemm %zu x %zu x %zu: product %.3f ms (%.0f GFLOP/s), with the activations' copies %.3f ms; "
		       "weights up %.1f ms (%.1f GB/s); OpenBLAS %.1f ms; max |gpu - blas| %.2g of max %.2g\n",
		       n, in, outd, best * 1e3, 2.0 * n * in * outd / best / 1e9, (t3 - t2) * 1e3, (t1 - t0) * 1e3,
		       (double)outd * in * 4 / (t1 - t0) / 1e9, (t4 - t3) * 1e3, md, mr);
		assert_true(md <= 1e-5 * mr);
		mk_cuda_mat_free(cx, dx);
		mk_cuda_mat_free(cx, dw);
		mk_cuda_mat_free(cx, dy);
		free(x), free(w), free(y), free(yc);
	}
	close_ctx(cx);
	(void)state;
}

/* A build without CUDA: no device context, and says why. */
static void test_no_device(void **state)
{
	struct mk_cuda_ctx *cx = NULL;
	struct mk_cuda_opts o = { 0 };
	struct mk_err err = { 0 };
	const char *why = NULL;

	if (mk_cuda_available(&why))
		skip();
	assert_non_null(why);
	assert_int_equal(mk_cuda_open(&cx, &o, &err), -MK_EUNSUPPORTED);
	assert_null(cx);
	printf("no device context: %s\n", err.msg);
	if (!mk_cuda_built())
		assert_non_null(strstr(err.msg, "without CUDA"));
}

/* ---------------------------------------------------------- device only */

/* The older entry point: GPU linear = CPU linear (mk_merge_groups). */
static void test_linear_legacy(void **state)
{
	enum { N = 3, B = 4, E = 1 << 20 };
	float *in[N], w[B * N], *gpu = malloc((size_t)B * E * sizeof(float));
	struct mk_tensor t[B][N];
	struct mk_param_values *pv[B];
	struct mk_group g[B];
	struct mk_err err = { 0 };
	double t0, t1, t2;

	for (int i = 0; i < N; i++) {
		in[i] = malloc((size_t)B * E * sizeof(float));
		for (size_t e = 0; e < (size_t)B * E; e++)
			in[i][e] = frand();
	}
	for (int b = 0; b < B; b++) {
		pv[b] = mk_param_values_new();
		for (int i = 0; i < N; i++) {
			w[b * N + i] = 0.1f + 0.2f * (float)((b + i) % 4);
			mk_param_values_set(pv[b], "weight", i, mk_pval_float(w[b * N + i]), &err);
			t[b][i] = (struct mk_tensor){ .desc.dtype = MK_DT_F32, .desc.ndim = 1, .desc.shape = { E },
						      .data = in[i] + (size_t)b * E };
		}
		g[b] = (struct mk_group){ .name = "t", .in = t[b], .n = N, .base = -1, .pv = pv[b] };
	}
	memset(gpu, 0xff, (size_t)B * E * sizeof(float));
	t0 = now();
	if (mk_cuda_linear((const float *const *)in, N, w, B, E, true, gpu, &err))
		fail_msg("mk_cuda_linear: %s", err.msg);
	t1 = now();
	assert_int_equal(mk_merge_groups("linear", g, B, MK_DT_COUNT, 0, 0, 0, &err), 0);
	t2 = now();
	for (int b = 0; b < B; b++)
		assert_same(gpu + (size_t)b * E, g[b].out.data, E, "mk_cuda_linear");
	printf("mk_cuda_linear %d x %d x %d: bit-identical; gpu %.3f s (context, copies), cpu %.3f s\n", B, N, E,
	       t1 - t0, t2 - t1);
	for (int b = 0; b < B; b++) {
		mk_tensor_release(&g[b].out);
		mk_param_values_free(pv[b]);
	}
	for (int i = 0; i < N; i++)
		free(in[i]);
	free(gpu);
}

/* Large jobs through the context, host to host, against the CPU. */
static void time_method(const char *method, size_t n, uint64_t nel)
{
	struct mk_err err = { 0 };
	struct tj t;
	struct mk_job job;
	float **x = calloc(n, sizeof(*x)), *ref = malloc(nel * 4), *got = malloc(nel * 4);
	const void *ptr[MAXIN];
	struct mk_job_chunk ch;
	struct mk_cuda_ctx *cx = open_ctx(0, 0, 0);
	double t0, t1, t2, t3;
	uint64_t CH = 1 << 20;

	for (size_t i = 0; i < n; i++) {
		x[i] = malloc(nel * 4);
		for (uint64_t e = 0; e < nel; e++)
			x[i][e] = i ? x[0][e] + frand() * 0.1f : frand();
	}
	tj_init(&t, method, n, !strcmp(method, "linear") ? -1 : 0);
	t.in[0] = td(MK_DT_F32, 2, nel / 4096, 4096);
	for (size_t i = 0; i < n; i++) {
		t.in[i] = t.in[0];
		if (!strcmp(method, "linear") || i)
			set_in(&t, i, "weight", mk_pval_float(0.5 + 0.25 * (double)i));
		if (i && strcmp(method, "linear"))
			set_in(&t, i, "density", mk_pval_float(0.4));
	}
	t0 = now();
	assert_int_equal(tj_run(&t, MK_DT_COUNT, (const void *const *)x, CH, ref, false, &job, NULL, &err), 0);
	t1 = now();
	/* the CPU apply alone */
	for (uint64_t e = 0; e < nel; e += CH) {
		chunk_of(&job, x, e, nel - e < CH ? nel - e : CH, ptr, &ch);
		assert_int_equal(mk_job_apply(&job, &ch, ref + e, &err), 0);
	}
	t2 = now();
	for (uint64_t e = 0; e < nel; e += CH) {
		chunk_of(&job, x, e, nel - e < CH ? nel - e : CH, ptr, &ch);
		if (mk_cuda_submit(cx, &job, &ch, got + e, &err))
			fail_msg("%s: %s", method, err.msg);
	}
	if (mk_cuda_flush(cx, &err))
		fail_msg("%s: %s", method, err.msg);
	t3 = now();
	assert_same(got, ref, nel, method);
	printf("timing %-8s %zu inputs x %llu elements: bit-identical; apply cpu %.3f s, gpu %.3f s host to host "
	       "(%.1f GB/s of inputs + output; passes on the cpu %.3f s)\n",
	       method, n, (unsigned long long)nel, t2 - t1, t3 - t2,
	       (double)(n + 1) * (double)nel * 4 / (t3 - t2) / 1e9, t1 - t0 - (t2 - t1));
	close_ctx(cx);
	mk_job_release(&job);
	free_inputs(x, n);
	free(ref);
	free(got);
}

static void test_timings(void **state)
{
	struct mk_cuda_bench r;
	struct mk_err err = { 0 };

	time_method("linear", 3, 16u << 20);
	time_method("ties", 3, 16u << 20);
	if (mk_cuda_bench_run(&r, 0, 3, 0, &err))
		fail_msg("bench: %s", err.msg);
	printf("device: %s; kernel: %d registers, %d blocks of 256 threads per SM\n", r.device, r.regs,
	       r.blocks_per_sm);
	printf("rate d2d copy: %.1f GB/s (cudaMemcpy of %llu MiB, read + write, %.3f ms)\n", r.d2d_gbs,
	       (unsigned long long)(r.bytes >> 20), r.d2d_ms);
	printf("rate linear kernel: %.1f GB/s ((%u inputs + 1 output) x %llu MiB / %.3f ms) = %.0f%% of the copy "
	       "rate (target >= 70%%): %s\n", r.linear_gbs, r.ninputs, (unsigned long long)(r.bytes >> 20),
	       r.linear_ms, 100.0 * r.linear_gbs / r.d2d_gbs, r.linear_gbs >= 0.7 * r.d2d_gbs ? "MET" : "MISSED");
	printf("rate ties kernel: %.1f GB/s = %.0f%% of the copy rate; dare_ties kernel: %.1f GB/s = %.0f%%\n",
	       r.ties_gbs, 100.0 * r.ties_gbs / r.d2d_gbs, r.dare_gbs, 100.0 * r.dare_gbs / r.d2d_gbs);
	printf("rate pinned h2d %.1f GB/s, d2h %.1f GB/s\n", r.h2d_gbs, r.d2h_gbs);
}

/* ------------------------------------------------------------------ main */

static int summary(void)
{
	printf("test_cuda %s: %llu jobs of %u methods (", on_device ? "device" : "emulated",
	       (unsigned long long)n_jobs, n_methods_seen);
	for (unsigned i = 0; i < n_methods_seen; i++)
		printf("%s%s", i ? " " : "", methods_seen[i]);
	printf("), %llu elements compared bit for bit, %llu launches\n", (unsigned long long)n_elems,
	       (unsigned long long)n_launches);
	n_jobs = n_elems = n_launches = 0;
	n_methods_seen = 0;
	return 0;
}

int main(void)
{
	const char *why = NULL;
	const struct CMUnitTest common[] = {
		cmocka_unit_test(test_appendix),
		cmocka_unit_test(test_methods),
		cmocka_unit_test(test_batches),
		cmocka_unit_test(test_unsupported),
		cmocka_unit_test(test_hooks),
		cmocka_unit_test(test_gemm),
	};
	const struct CMUnitTest emu_only[] = {
		cmocka_unit_test(test_no_device),
	};
	const struct CMUnitTest dev_only[] = {
		cmocka_unit_test(test_linear_legacy),
		cmocka_unit_test(test_timings),
		cmocka_unit_test(test_gemm_timings),
	};
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	on_device = false;
	printf("test_cuda: part 1, the kernels' element code emulated on the host\n");
	rc = cmocka_run_group_tests_name("cuda-emulated", common, NULL, NULL);
	rc |= cmocka_run_group_tests_name("cuda-no-device", emu_only, NULL, NULL);
	summary();
	if (rc)
		return 1;
	if (!mk_cuda_available(&why)) {
		printf("test_cuda: part 2 (device) skipped: %s\n", why);
		return 77;
	}
	on_device = true;
	printf("test_cuda: part 2, on the device\n");
	rc = cmocka_run_group_tests_name("cuda-device", common, NULL, NULL);
	summary();
	rc |= cmocka_run_group_tests_name("cuda-device-timings", dev_only, NULL, NULL);
	return rc ? 1 : 0;
}
