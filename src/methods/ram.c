/* ram.c - Reinforced Agent Merging (https://arxiv.org/abs/2601.13572).
 *
 * Per element, with B the base and delta_i = M_i - B over the non-base
 * inputs in input order (compute dtype):
 *   active_i = |delta_i| > epsilon  (strict; epsilon rounded to the
 *              compute dtype, as torch compares)
 *   c = number of active inputs
 *   merged = 0 (c = 0), delta_i of the active input (c = 1),
 *            sum over active i of (delta_i / c), in input order (c >= 2;
 *            mergekit divides each delta before summing)
 *   out = B + merged
 * Inactive deltas are dropped.  Global `epsilon` (default 1e-5).  Base
 * required; base alone -> the base.  No statistics passes.  Shapes must
 * agree.  Output: the inputs' promoted dtype.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "misc_methods.h"

enum { P_EPSILON, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_EPSILON] = { .name = "epsilon", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
			.def = { .set = true, .type = MK_PT_FLOAT, .f = 1e-5 },
			.doc = "a delta counts only where its magnitude exceeds this" },
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
	po->out.dtype = prom;
	po->compute = comp;
	return 0;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	if (misc_nonbase(&job->d) == 0)
		job->copy_input = job->d.base;
	return 0;
}

#define RAM_KERNEL(NAME, T, FABS)						\
/* Two non-base inputs x0, x1 (input order): the same results as the	\
 * general loop, chosen without branches so the loop vectorises. */	\
static void NAME##_2(const T *b, const T *x0, const T *x1, T eps, \
				      uint64_t n, T *o)				\
{										\
	for (uint64_t e = 0; e < n; e++) {					\
		T d0 = x0[e] - b[e], d1 = x1[e] - b[e];				\
		bool a0 = FABS(d0) > eps, a1 = FABS(d1) > eps;			\
		T h0 = d0 / (T)2, h1 = d1 / (T)2;				\
		T two = (T)0 + h0, one = a0 ? d0 : d1, acc;			\
		two = two + h1;							\
		acc = (a0 & a1) ? two : ((a0 | a1) ? one : (T)0);		\
		o[e] = b[e] + acc;						\
	}									\
}										\
static void NAME(const struct mk_job *job, const void *const *in, uint64_t n, T *o) \
{										\
	const T *b = in[job->d.base];						\
	T eps = (T)mk_job_param(job, P_EPSILON)->f;				\
	size_t ni = job->d.ninputs;						\
	if (ni == 3) {								\
		int i0 = job->d.base == 0 ? 1 : 0, i1 = job->d.base == 2 ? 1 : 2; \
		NAME##_2(b, in[i0], in[i1], eps, n, o);				\
		return;								\
	}									\
	for (uint64_t e = 0; e < n; e++) {					\
		unsigned c = 0;							\
		T acc = 0, first = 0;						\
		for (size_t i = 0; i < ni; i++) {				\
			T dl;							\
			if ((int)i == job->d.base)				\
				continue;					\
			dl = ((const T *)in[i])[e] - b[e];			\
			if (FABS(dl) > eps) {					\
				if (!c)						\
					first = dl;				\
				c++;						\
			}							\
		}								\
		if (c == 1)							\
			acc = first;						\
		else if (c >= 2)						\
			for (size_t i = 0; i < ni; i++) {			\
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
RAM_KERNEL(ram_f32, float, fabsf)
RAM_KERNEL(ram_f64, double, fabs)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	if (job->compute == MK_DT_F64)
		ram_f64(job, c->in, c->count, out);
	else
		ram_f32(job, c->in, c->count, out);
	return 0;
}

const struct mk_method mk_method_ram = {
	.abi = MK_METHOD_ABI,
	.name = "ram",
	.pretty_name = "Reinforced Agent Merging",
	.reference_url = "https://arxiv.org/abs/2601.13572",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.output = output,
	.init = init,
	.apply = apply,
};
