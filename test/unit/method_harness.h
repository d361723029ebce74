/* method_harness.h - what the method unit tests share: the reference
 * inputs below (the tests named *_appendix compare mk's outputs on them
 * with vectors mergekit's own kernels computed in float32) and a builder
 * for job descriptions.  Included by test/unit/test_methods*.c after
 * <cmocka.h>; not part of libmk. */
#ifndef MK_METHOD_HARNESS_H
#define MK_METHOD_HARNESS_H

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"

/* The reference inputs: a base W0 and three fine-tunes M_k = W0 + D_k / 64. */
static const float W0[12] = { 0.5f, -0.25f, 1.0f, 0.125f, -0.75f, 0.375f, 0.0f, 2.0f,
			      1.5f, -1.25f, 0.625f, -0.5f };
static const float D1[12] = { 6, -13, 3, 19, -10, 16, -4, 0, 26, -7, 12, -22 };
static const float D2[12] = { -5, -9, 8, 14, 11, -2, -15, 1, 20, 17, -3, -25 };
static const float D3[12] = { 7, 4, -12, 23, -18, 9, 5, -1, -24, -6, 13, 2 };
static float M1[12], M2[12], M3[12];

static inline void fixtures_init(void)
{
	for (int i = 0; i < 12; i++) {
		M1[i] = W0[i] + D1[i] / 64.0f;
		M2[i] = W0[i] + D2[i] / 64.0f;
		M3[i] = W0[i] + D3[i] / 64.0f;
	}
}

#define MAXIN 6
#define MAXP 8

/* A job description being built by a test. */
struct tj {
	const struct mk_method *m;
	struct mk_tensor_desc in[MAXIN];
	struct mk_pval g[MAXP];
	struct mk_pval pin[MAXIN * MAXP];
	const char *labels[MAXIN];
	struct mk_job_desc d;
};

static inline struct mk_tensor_desc td(enum mk_dtype dt, unsigned ndim, uint64_t a, uint64_t b)
{
	struct mk_tensor_desc t = { .dtype = dt, .ndim = ndim };
	t.shape[0] = a;
	t.shape[1] = b;
	return t;
}

/* n inputs of F32 [3, 4], labelled model-a, model-b, ...; seed 42. */
static inline void tj_method(struct tj *t, const struct mk_method *m, size_t n, int base)
{
	static const char *names[MAXIN] = { "model-a", "model-b", "model-c", "model-d", "model-e", "model-f" };

	memset(t, 0, sizeof(*t));
	t->m = m;
	assert_non_null(t->m);
	assert_true(t->m->nparams <= MAXP);
	assert_true(n <= MAXIN);
	for (size_t i = 0; i < n; i++) {
		t->in[i] = td(MK_DT_F32, 2, 3, 4);
		t->labels[i] = names[i];
	}
	t->d.tensor = "model.layers.0.mlp.down_proj.weight";
	t->d.seed = 42;
	t->d.ninputs = n;
	t->d.base = base;
	t->d.in = t->in;
	t->d.labels = t->labels;
	t->d.global = t->g;
	t->d.input = t->pin;
}

static inline void tj_init(struct tj *t, const char *method, size_t n, int base)
{
	tj_method(t, mk_method_find(method), n, base);
}

static inline void set_g(struct tj *t, const char *name, struct mk_pval v)
{
	int p = mk_method_param_index(t->m, name);
	assert_true(p >= 0);
	t->g[p] = v;
}

static inline void set_in(struct tj *t, size_t i, const char *name, struct mk_pval v)
{
	int p = mk_method_param_index(t->m, name);
	assert_true(p >= 0);
	t->pin[i * t->m->nparams + (size_t)p] = v;
}

/* Run a whole job over views (compute-dtype arrays of the output's
 * element count; NULL for unused inputs) with chunks of `chunk` elements
 * (0: one chunk): statistics passes in element order, then apply over the
 * chunks in order, or last to first with `reverse` (apply has no order
 * rule).  Returns the first failure with `err` filled.  On success *keep
 * (if not NULL) receives the job, which the caller releases, and *npasses
 * (if not NULL) its pass count. */
/* Statistics-pass chunks tj_run passed unread (in = NULL, as mk-merge
 * does once mk_job_wants says false), over all runs. */
static uint64_t tj_skipped;
/* When set: the inputs as BF16 (the views' values, which must be BF16
 * values widened), passed as they are to the statistics passes and the
 * apply of a job that takes them (accumulate_bf16, apply_bf16), as
 * mk-merge does; tj_bf16_chunks counts those chunks. */
static const void *const *tj_bf16;
static uint64_t tj_bf16_chunks;
/* mk_job.threads for the jobs tj_run runs (0: the default, one) */
static unsigned tj_threads;
/* mk_job.held for the jobs tj_run runs (the views are there for any pass
 * the kernel adds); tj_added counts the passes added, over all runs */
static bool tj_held;
static uint64_t tj_added;
/* When set: the chunk size of the statistics passes after the first (the
 * API does not ask a caller to cut every pass alike) */
static uint64_t tj_later_chunk;
/* mk_job_desc.spare_pass for the jobs tj_run runs (the plan's spare pass) */
static bool tj_spare;
/* When set: a statistics pass ends (mk_job_finish) at the first chunk
 * mk_job_wants declines, the rest not passed at all, as mk-merge ends one
 * whose rest the mk-fetch beside it did not send (mk_merge_opts.skip);
 * tj_ended_early counts those passes, over all runs */
static bool tj_end_early;
static uint64_t tj_ended_early;

static inline int tj_run(struct tj *t, enum mk_dtype out_dtype, const void *const *views, uint64_t chunk,
			 void *out, bool reverse, struct mk_job *keep, unsigned *npasses, struct mk_err *err)
{
	struct mk_job job;
	uint64_t nch;
	size_t esz;
	int rc;

	mk_err_clear(err);
	t->d.spare_pass = tj_spare;
	rc = mk_job_init(&job, t->m, &t->d, out_dtype, err);
	if (rc)
		return rc;
	job.threads = tj_threads;
	job.held = tj_held;
	if (npasses)
		*npasses = job.npasses;
	unsigned planned = job.npasses;
	esz = job.compute == MK_DT_F64 ? 8 : 4;
	if (!chunk)
		chunk = job.nelem ? job.nelem : 1;
	for (unsigned pass = 0; pass <= job.npasses; pass++) {
		uint64_t ch = pass && pass < job.npasses && tj_later_chunk ? tj_later_chunk : chunk;
		nch = (job.nelem + ch - 1) / ch;
		for (uint64_t k = 0; k < nch; k++) {
			uint64_t q = pass == job.npasses && reverse ? nch - 1 - k : k, e = q * ch;
			const void *ptr[MAXIN];
			struct mk_job_chunk c = { .elem_begin = e, .in = ptr };
			c.count = job.nelem - e < ch ? job.nelem - e : ch;
			for (size_t i = 0; i < t->d.ninputs; i++)
				ptr[i] = views[i] && job.used[i] ? (const char *)views[i] + e * esz : NULL;
			if (tj_bf16 && (pass < job.npasses ? job.accumulate_bf16 : job.apply_bf16)) {
				for (size_t i = 0; i < t->d.ninputs; i++)
					ptr[i] = tj_bf16[i] && job.used[i] ? (const char *)tj_bf16[i] + e * 2 : NULL;
				c.bf16 = true;
				tj_bf16_chunks++;
			}
			if (pass < job.npasses && !mk_job_wants(&job)) {
				if (tj_end_early) {
					tj_ended_early++;
					break;   /* none of the rest passed */
				}
				c.in = NULL;   /* the method has what the pass gathers */
				tj_skipped++;
			}
			/* a statistic may be judged when its last element arrives:
			 * errors can come from accumulate */
			rc = pass < job.npasses ? mk_job_accumulate(&job, pass, &c, err) :
						  mk_job_apply(&job, &c, (char *)out + e * esz, err);
			if (rc)
				goto fail;
		}
		if (pass < job.npasses && (rc = mk_job_finish(&job, pass, err)))
			goto fail;
	}
	tj_added += job.npasses - planned;
	if (keep)
		*keep = job;
	else
		mk_job_release(&job);
	return 0;
fail:
	mk_job_release(&job);
	return rc;
}

/* got within tol * max(1, max |ref|) of ref, element by element (the
 * metric of the conformance cases); MK_TEST_VERBOSE=1 prints the largest
 * difference. */
static inline void tj_assert_close(const float *got, const float *ref, size_t n, double tol)
{
	double maxref = 1.0, maxdiff = 0.0;

	for (size_t i = 0; i < n; i++)
		if (fabs(ref[i]) > maxref)
			maxref = fabs(ref[i]);
	for (size_t i = 0; i < n; i++) {
		double dd = fabs((double)got[i] - (double)ref[i]);
		if (!(dd <= maxdiff))
			maxdiff = dd;
		if (!(dd <= tol * maxref))
			fail_msg("element %zu: got %.9g, reference %.9g (diff %.3g)", i, got[i], ref[i], dd);
	}
	if (getenv("MK_TEST_VERBOSE"))
		print_message("max |mk - ref| = %.3g (bound %.3g)\n", maxdiff, tol * maxref);
}

/* tj_run, chunks in order, its error printed when it fails. */
static inline int tj_run_printed(struct tj *t, enum mk_dtype out_dtype, const void *const *views, uint64_t chunk,
				 void *out, struct mk_job *keep)
{
	struct mk_err err;
	int rc = tj_run(t, out_dtype, views, chunk, out, false, keep, NULL, &err);

	if (rc)
		print_message("%s\n", err.msg);
	return rc;
}

#endif
