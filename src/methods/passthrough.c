/* passthrough.c - copy the one input, optionally scaled.
 *
 * Exactly one input (a configured base that is not that input makes two:
 * an error, as in mergekit).  With a `scale` the output is x * scale in
 * the compute dtype (scale rounded to it, as torch does with a Python
 * float), else x itself: the job's copy_input is 0 and byte_copy tells
 * the caller it may copy bytes when the output dtype is the input's.
 * Any dtype may pass through unscaled; scaling needs a float tensor.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <string.h>
#include "mk/method.h"

enum { P_SCALE, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_SCALE] = { .name = "scale", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
		      .doc = "multiply the tensor by this (none: copy it)" },
};

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	const struct mk_tensor_desc *x = &d->in[0];
	int rc = 0;

	po->out = *x;
	if (d->input[P_SCALE].set) {
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
	if (!mk_job_input_param(job, 0, P_SCALE)->set)
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
	if (job->compute == MK_DT_F64) {
		const double *x = c->in[0];
		double *o = out, sc = scale->f;
		if (!scale->set)
			memcpy(o, x, n * sizeof(*o));
		else
			for (uint64_t e = 0; e < n; e++)
				o[e] = x[e] * sc;
	} else {
		const float *x = c->in[0];
		float *o = out, sc = (float)scale->f;
		if (!scale->set)
			memcpy(o, x, n * sizeof(*o));
		else
			for (uint64_t e = 0; e < n; e++)
				o[e] = x[e] * sc;
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
