/* passthrough.c - copy the one input, optionally with noise and scaled.
 *
 * Exactly one input (a configured base that is not that input makes two:
 * an error, as in mergekit).  With a `scale` the output is x * scale in
 * the compute dtype (scale rounded to it, as torch does with a Python
 * float), else x itself: the job's copy_input is 0 and byte_copy tells
 * the caller it may copy bytes when the output dtype is the input's.
 * With a `noise_scale` s (mk-moe's expert key of that name; an mk
 * extension for mk-yaml), s * z is added before the scale: z standard
 * normal from rng.h's generator, stream (seed, output tensor name, input
 * 0), element e of the output's flat index (mk_rng_normal), the product
 * taken in float64 and rounded to the compute dtype, so the noise of an
 * element is the same for any chunking and thread count (and machine,
 * where libm's log, sqrt and cos give the same bits); 0 is
 * no noise.  Any dtype may pass through plain; scale and noise need a
 * float tensor.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <string.h>
#include "mk/method.h"
#include "rng.h"
#include "methods/builtin.h"

enum { P_SCALE, P_NOISE, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_SCALE] = { .name = "scale", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
		      .doc = "multiply the tensor by this (none: copy it)" },
	[P_NOISE] = { .name = "noise_scale", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
		      .doc = "add normal noise of this standard deviation before the scale (seeded by "
			     "the random seed, the tensor and the element; none or 0: no noise)" },
};

/* the noise's standard deviation; 0: none */
static double noise_of(const struct mk_pval *v)
{
	return v->set ? v->f : 0.0;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	const struct mk_tensor_desc *x = &d->in[0];
	int rc = 0;

	po->out = *x;
	if (d->input[P_SCALE].set || noise_of(&d->input[P_NOISE]) != 0) {
		rc = mk_require_float_inputs(m, d, used, err);
		if (rc)
			goto out;
	}
	po->compute = x->dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
out:
	return rc;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	if (!mk_job_input_param(job, 0, P_SCALE)->set && noise_of(mk_job_input_param(job, 0, P_NOISE)) == 0)
		job->copy_input = 0;
	return 0;
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct mk_pval *scale = mk_job_input_param(job, 0, P_SCALE);
	uint64_t n = c->count;

	if (!mk_dtype_is_float(job->d.in[0].dtype))
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "passthrough, tensor '%s': %s data is copied as bytes, not through apply",
				  job->d.tensor ? job->d.tensor : "?", mk_dtype_name(job->d.in[0].dtype));
	double ns = noise_of(mk_job_input_param(job, 0, P_NOISE));
	uint64_t st = ns != 0 ? mk_rng_stream(job->d.seed, job->d.tensor, 0) : 0, e0 = job->d.elem_base + c->elem_begin;
	if (job->compute == MK_DT_F64) {
		const double *x = c->in[0];
		double *o = out, sc = scale->set ? scale->f : 1.0;
		if (!scale->set && ns == 0)
			memcpy(o, x, n * sizeof(*o));
		else if (ns == 0)
			for (uint64_t e = 0; e < n; e++)
				o[e] = x[e] * sc;
		else
			for (uint64_t e = 0; e < n; e++)
				o[e] = (x[e] + ns * mk_rng_normal(st, e0 + e)) * sc;
	} else {
		const float *x = c->in[0];
		float *o = out, sc = scale->set ? (float)scale->f : 1.0f;
		if (!scale->set && ns == 0)
			memcpy(o, x, n * sizeof(*o));
		else if (ns == 0)
			for (uint64_t e = 0; e < n; e++)
				o[e] = x[e] * sc;
		else
			for (uint64_t e = 0; e < n; e++)
				o[e] = (x[e] + (float)(ns * mk_rng_normal(st, e0 + e))) * sc;
	}
	return 0;
}

const struct mk_method mk_method_passthrough = {
	.abi = MK_METHOD_ABI,
	.name = "passthrough",
	.pretty_name = "Passthrough",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = 1,
		      .min_non_base = 0, .max_non_base = 1 },
	.output = output,
	.init = init,
	.apply = apply,
};
