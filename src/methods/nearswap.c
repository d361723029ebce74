/* nearswap.c - take the other model's value where it is near the base's.
 *
 * With a the base, b the one other input, per element (compute dtype,
 * torch's operation order):
 *   d = |a - b|;  w = (1 / max(d, 1e-6)) * t;  w = clamp(w, 0, 1)
 *   out = w * b + (1 - w) * a
 * (`t / tensor` is reciprocal-then-multiply in torch.)  So where
 * |a - b| <= t the result is b, farther elements move toward b by
 * t / |a - b|, and t <= 0 gives a.
 *
 * t is a required global parameter.  The base is required; base alone ->
 * the base; more than one other input is an error (the contract).  No
 * statistics passes.  Shapes must agree.  Output: the inputs' promoted
 * dtype; compute float32 (float64 when an input is float64).
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

enum { P_T, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_T] = { .name = "t", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		  .flags = MK_PF_REQUIRED,
		  .doc = "distance below which the other model's value is taken whole" },
};

static int other_input(const struct mk_job_desc *d)
{
	if (d->ninputs < 2)
		return -1;
	return d->base == 0 ? 1 : 0;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	enum mk_dtype prom, comp;
	int rc;

	if (other_input(d) < 0) {
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
	if (other_input(&job->d) < 0)
		job->copy_input = job->d.base;
	return 0;
}

#define NS_KERNEL(NAME, T, FABS, EPS)						\
static void NAME(const T *a, const T *b, T t, uint64_t n, T *o) \
{										\
	for (uint64_t e = 0; e < n; e++) {					\
		T d = FABS(a[e] - b[e]);					\
		T w, u, p, q;							\
		d = d < (T)EPS ? (T)EPS : d;					\
		w = ((T)1 / d) * t;						\
		w = w < 0 ? (T)0 : w;						\
		w = w > 1 ? (T)1 : w;						\
		p = w * b[e];							\
		u = (T)1 - w;							\
		q = u * a[e];							\
		o[e] = p + q;							\
	}									\
}
NS_KERNEL(ns_f32, float, fabsf, 1e-6f)
NS_KERNEL(ns_f64, double, fabs, 1e-6)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	int o = other_input(&job->d);
	double t = mk_job_param(job, P_T)->f;

	if (job->compute == MK_DT_F64)
		ns_f64(c->in[job->d.base], c->in[o], t, c->count, out);
	else
		ns_f32(c->in[job->d.base], c->in[o], (float)t, c->count, out);
	return 0;
}

const struct mk_method mk_method_nearswap = {
	.abi = MK_METHOD_ABI,
	.name = "nearswap",
	.pretty_name = "NearSwap",
	.reference_url = "https://huggingface.co/alchemonaut/QuartetAnemoi-70B-t0.0001",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = 2,
		      .min_non_base = 0, .max_non_base = 1 },
	.output = output,
	.init = init,
	.apply = apply,
};
