/* weighted_average.c - an example merge-method plugin (after the
 * "weighted_average" example of mergekit's merge-method API): sum_i w_i
 * x_i, divided by sum_i w_i when `normalize` (default true).  Built
 * outside libmk as a shared object:
 *
 *   cc -fPIC -shared -I/usr/local/include -o weighted_average.so weighted_average.c
 *   mk-yaml --plugin ./weighted_average.so config.yml out/
 *
 * It uses only the method API (include/mk/method.h); the helper
 * mk_job_input_param comes from the mk program that loads it. */
#include <math.h>
#include <string.h>
#include "mk/method.h"
#include "mk/plugin.h"

enum { P_WEIGHT, P_NORMALIZE };

static const struct mk_param_spec params[] = {
	[P_WEIGHT] = { .name = "weight", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
		       .flags = MK_PF_REQUIRED, .doc = "weight of each input" },
	[P_NORMALIZE] = { .name = "normalize", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = { .set = true, .type = MK_PT_BOOL, .b = true },
			  .doc = "divide by the sum of the weights" },
};

static int output(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		  struct mk_err *err)
{
	(void)m;
	(void)used;
	for (size_t i = 1; i < d->ninputs; i++)
		if (d->in[i].ndim != d->in[0].ndim ||
		    memcmp(d->in[i].shape, d->in[0].shape, d->in[0].ndim * sizeof(uint64_t)))
			return mk_err_set(err, MK_EMISMATCH, "weighted_average: tensor '%s': inputs of different shapes",
					  d->tensor);
	po->out = d->in[0];
	po->compute = MK_DT_F32;
	for (size_t i = 0; i < d->ninputs; i++)
		if (d->in[i].dtype == MK_DT_F64)
			po->compute = MK_DT_F64;
	return 0;
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	double wsum = 0;
	bool f64 = job->compute == MK_DT_F64;

	for (size_t i = 0; i < job->d.ninputs; i++)
		wsum += mk_job_input_param(job, i, P_WEIGHT)->f;
	if (job->global[P_NORMALIZE].b && wsum == 0)
		return mk_err_set(err, MK_EINVAL, "weighted_average: tensor '%s': the weights sum to 0", job->d.tensor);
	for (uint64_t e = 0; e < c->count; e++) {
		double acc = 0;
		for (size_t i = 0; i < job->d.ninputs; i++) {
			double x = f64 ? ((const double *)c->in[i])[e] : ((const float *)c->in[i])[e];
			acc += mk_job_input_param(job, i, P_WEIGHT)->f * x;
		}
		if (job->global[P_NORMALIZE].b)
			acc /= wsum;
		if (f64)
			((double *)out)[e] = acc;
		else
			((float *)out)[e] = (float)acc;
	}
	return 0;
}

static const struct mk_method weighted_average = {
	.abi = MK_METHOD_ABI,
	.name = "weighted_average",
	.pretty_name = "Weighted Average",
	.reference_url = "https://example.com/docs",
	.params = params,
	.nparams = sizeof(params) / sizeof(params[0]),
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.output = output,
	.apply = apply,
};

static const struct mk_method *const methods[] = { &weighted_average };

int mk_plugin_init(uint32_t abi, const struct mk_method *const **out, size_t *n)
{
	if (abi != MK_METHOD_ABI)
		return -1;
	*out = methods;
	*n = 1;
	return 0;
}
