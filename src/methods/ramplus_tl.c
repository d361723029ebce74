/* ramplus_tl.c - RAM+ with tensor-local statistics
 * (https://arxiv.org/abs/2601.13572).
 *
 * As ram (active_i = |delta_i| > epsilon, c = active count per element),
 * with one statistics pass counting, per non-base input i over the whole
 * tensor, shared_i (elements where i is active and c >= 2) and unique_i
 * (i active and c = 1).  Then, in float32 as mergekit (its lambda is a
 * float32 tensor):
 *   rho_i    = shared_i / max(unique_i, epsilon)
 *   lambda_i = 1 + r * clamp(rho_i, 0, alpha)
 * and per element: merged = lambda_i * delta_i for the single active
 * input (c = 1), the sum over active i of delta_i / c (c >= 2), 0 (c = 0);
 * out = B + merged.
 *
 * Globals r (0.1), alpha (0.2), epsilon (1e-5).  Base required; base
 * alone -> the base.  Output dtype: float64 for float64 inputs, else
 * float32 (mergekit's float32 lambda promotes bf16/f16 results).
 *
 * Deliberate difference: when max(unique_i, epsilon) <= 0 (epsilon <= 0)
 * and shared_i = 0, mergekit computes 0/0 = NaN and its NaN lambda turns
 * every element where some other input is the only active one into NaN;
 * mk takes rho_i = 0 (no shared elements, no boost).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "misc_methods.h"
#include "core/pool.h"

enum { P_R, P_ALPHA, P_EPSILON, NPARAMS };

#define FLOATDEF(v) { .set = true, .type = MK_PT_FLOAT, .f = (v) }

static const struct mk_param_spec params[NPARAMS] = {
	[P_R] = { .name = "r", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		  .def = FLOATDEF(0.1), .doc = "strength of the boost of unique deltas" },
	[P_ALPHA] = { .name = "alpha", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		      .def = FLOATDEF(0.2), .doc = "cap of the shared/unique ratio" },
	[P_EPSILON] = { .name = "epsilon", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
			.def = FLOATDEF(1e-5),
			.doc = "a delta counts only where its magnitude exceeds this" },
};

struct state {
	size_t n;                /* inputs */
	uint64_t *shared, *unique; /* [n], by input index */
	float *lam;              /* [n] */
};

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	enum mk_dtype prom, comp;
	int rc;

	if (misc_nonbase(d) == 0) {
		po->out = d->in[d->base];
		po->compute = po->out.dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		return 0;
	}
	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		return rc;
	rc = misc_same_shapes(m, d, used, &po->out, err);
	if (rc)
		return rc;
	misc_dtypes(d, used, &prom, &comp);
	po->out.dtype = prom == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
	po->compute = comp;
	return 0;
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return misc_nonbase(d) ? 1 : 0;
}

static void free_state(struct state *s)
{
	if (!s)
		return;
	free(s->shared);
	free(s->unique);
	free(s->lam);
	free(s);
}

static int init(struct mk_job *job, struct mk_err *err)
{
	size_t n = job->d.ninputs;
	struct state *s;

	if (misc_nonbase(&job->d) == 0) {
		job->copy_input = job->d.base;
		return 0;
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->shared = calloc(n, sizeof(uint64_t))) ||
	    !(s->unique = calloc(n, sizeof(uint64_t))) || !(s->lam = calloc(n, sizeof(float)))) {
		free_state(s);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	s->n = n;
	job->state = s;
	return 0;
}

/* Statistics pass: shared_i and unique_i (counts: the same in any order,
 * so a chunk is cut into tasks of RP_TASK elements for the job's threads,
 * each counting into its own row of counts, added up after). */
#define RP_TASK 8192u

struct rp_step {
	struct state *s;
	const struct mk_job *job;
	const void *const *in;
	uint64_t n;
	uint64_t *cnt;           /* per task [stride]: shared [n], then unique [n] */
	size_t stride;           /* 2 * n rounded up to a cache line: no two
				    threads' counts share one */
};

#define RP_COUNT(NAME, T, FABS)							\
static void NAME(const struct state *s, const struct mk_job *job, const void *const *in, \
		 uint64_t e0, uint64_t e1, uint64_t *shared, uint64_t *unique)	\
{										\
	const T *b = in[job->d.base];						\
	T eps = (T)mk_job_param(job, P_EPSILON)->f;				\
	for (uint64_t e = e0; e < e1; e++) {					\
		unsigned c = 0;							\
		size_t last = 0;						\
		for (size_t i = 0; i < s->n; i++) {				\
			T dl;							\
			if ((int)i == job->d.base)				\
				continue;					\
			dl = ((const T *)in[i])[e] - b[e];			\
			if (FABS(dl) > eps) {					\
				c++;						\
				last = i;					\
			}							\
		}								\
		if (c == 1) {							\
			unique[last]++;						\
		} else if (c >= 2) {						\
			for (size_t i = 0; i < s->n; i++) {			\
				T dl;						\
				if ((int)i == job->d.base)			\
					continue;				\
				dl = ((const T *)in[i])[e] - b[e];		\
				if (FABS(dl) > eps)				\
					shared[i]++;				\
			}							\
		}								\
	}									\
}										\
static void NAME##_task(void *p, unsigned k, unsigned slot)			\
{										\
	const struct rp_step *a = p;						\
	uint64_t e0 = (uint64_t)k * RP_TASK, e1 = a->n - e0 < RP_TASK ? a->n : e0 + RP_TASK; \
	uint64_t *row = a->cnt + (size_t)k * a->stride;				\
										\
	(void)slot;								\
	NAME(a->s, a->job, a->in, e0, e1, row, row + a->s->n);			\
}
RP_COUNT(count_f32, float, fabsf)
RP_COUNT(count_f64, double, fabs)

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	struct state *s = job->state;
	bool f64 = job->compute == MK_DT_F64;
	uint64_t ntasks = (c->count + RP_TASK - 1) / RP_TASK;
	struct rp_step st = { .s = s, .job = job, .in = c->in, .n = c->count, .stride = (2 * s->n + 7) & ~(size_t)7 };

	if (job->threads > 1 && ntasks > 1 && ntasks <= UINT_MAX &&
	    !posix_memalign((void **)&st.cnt, 64, (size_t)ntasks * st.stride * sizeof(uint64_t))) {
		memset(st.cnt, 0, (size_t)ntasks * st.stride * sizeof(uint64_t));
		mk__pool_run(job->threads, (unsigned)ntasks, f64 ? count_f64_task : count_f32_task, &st);
		for (uint64_t k = 0; k < ntasks; k++)
			for (size_t i = 0; i < s->n; i++) {
				s->shared[i] += st.cnt[k * st.stride + i];
				s->unique[i] += st.cnt[k * st.stride + s->n + i];
			}
		free(st.cnt);
	} else if (f64) {
		count_f64(s, job, c->in, 0, c->count, s->shared, s->unique);
	} else {
		count_f32(s, job, c->in, 0, c->count, s->shared, s->unique);
	}
	(void)pass;
	(void)err;
	return 0;
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	float r = (float)mk_job_param(job, P_R)->f;
	float alpha = (float)mk_job_param(job, P_ALPHA)->f;
	float eps = (float)mk_job_param(job, P_EPSILON)->f;

	for (size_t i = 0; i < s->n; i++) {
		float den = (float)s->unique[i], rho, cl, t;
		if (!(den >= eps))
			den = eps;
		if (den <= 0 && s->shared[i] == 0)
			rho = 0;       /* mergekit: 0/0 = NaN (see the top) */
		else
			rho = (float)s->shared[i] / den;
		cl = rho;
		if (cl < 0)
			cl = 0;
		if (cl > alpha)
			cl = alpha;
		t = r * cl;
		s->lam[i] = 1.0f + t;
	}
	return 0;
}

#define RP_KERNEL(NAME, T, FABS)						\
static void NAME(const struct state *s, const struct mk_job *job, const void *const *in, \
		 uint64_t n, T *o)						\
{										\
	const T *b = in[job->d.base];						\
	T eps = (T)mk_job_param(job, P_EPSILON)->f;				\
	for (uint64_t e = 0; e < n; e++) {					\
		unsigned c = 0;							\
		size_t last = 0;						\
		T acc = 0, first = 0;						\
		for (size_t i = 0; i < s->n; i++) {				\
			T dl;							\
			if ((int)i == job->d.base)				\
				continue;					\
			dl = ((const T *)in[i])[e] - b[e];			\
			if (FABS(dl) > eps) {					\
				if (!c) {					\
					first = dl;				\
					last = i;				\
				}						\
				c++;						\
			}							\
		}								\
		if (c == 1)							\
			acc = first * (T)s->lam[last];				\
		else if (c >= 2)						\
			for (size_t i = 0; i < s->n; i++) {			\
				T dl;						\
				if ((int)i == job->d.base)			\
					continue;				\
				dl = ((const T *)in[i])[e] - b[e];		\
				if (FABS(dl) > eps)				\
					acc = acc + dl / (T)c;			\
			}							\
		o[e] = b[e] + acc;						\
	}									\
}
RP_KERNEL(rp_f32, float, fabsf)
RP_KERNEL(rp_f64, double, fabs)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	if (job->compute == MK_DT_F64)
		rp_f64(job->state, job, c->in, c->count, out);
	else
		rp_f32(job->state, job, c->in, c->count, out);
	return 0;
}

static void release(struct mk_job *job)
{
	free_state(job->state);
	job->state = NULL;
}

const struct mk_method mk_method_ramplus_tl = {
	.abi = MK_METHOD_ABI,
	.name = "ramplus_tl",
	.pretty_name = "Reinforced Agent Merging Plus (Tensor-Local)",
	.reference_url = "https://arxiv.org/abs/2601.13572",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
