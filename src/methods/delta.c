/* delta.c - the fine-tune minus the base: mk-extract-lora's method for a
 * bias, whose change PEFT stores whole (lora_B.bias).
 *
 * Inputs: the base (the job's base) and the fine-tune, one shape.  The
 * output is FT - BASE in the inputs' promoted dtype, each difference taken
 * in the compute dtype and rounded once to the output dtype, as torch
 * subtracts two tensors.  Unlisted (builtin.h): a tool's plans name it.
 */
#include "mk/method.h"
#include "methods/builtin.h"

static int output(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		  struct mk_err *err)
{
	return mk_output_promoted(m, d, used, po, err);
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	int b = job->d.base < 0 ? 0 : job->d.base;

	(void)err;
	if (job->compute == MK_DT_F64) {
		const double *base = c->in[b], *ft = c->in[1 - b];
		double *o = out;
		for (uint64_t k = 0; k < c->count; k++)
			o[k] = ft[k] - base[k];
	} else {
		const float *base = c->in[b], *ft = c->in[1 - b];
		float *o = out;
		for (uint64_t k = 0; k < c->count; k++)
			o[k] = ft[k] - base[k];
	}
	return 0;
}

const struct mk_method mk_method_delta = {
	.abi = MK_METHOD_ABI,
	.name = "delta",
	.pretty_name = "Delta",
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 2, .max_inputs = 2, .min_non_base = 1, .max_non_base = 1 },
	.output = output,
	.apply = apply,
};
