/* linear.c - weighted average (model soups,
 * https://arxiv.org/abs/2203.05482).
 *
 *   S = sum_i w_i * M_i       products rounded to the compute dtype, then
 *                             summed in input order
 *   normalize: S = S / sum_i w_i   (the weight sum in the compute dtype,
 *                             summed in input order)
 *
 * A configured base is an ordinary input and needs a weight (as in
 * mergekit, which crashes without one).
 * Embedding inputs of different vocabulary sizes are cut to their common
 * top-left block (mk_rectify_shapes); any other shape difference is an
 * error.
 * Deliberate difference: a zero weight sum with normalize=true is a
 * planning error here (mergekit divides by zero and writes inf/NaN); the
 * batch kernel, like mergekit's batched weighted_average example, does
 * not check.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <stdlib.h>
#include "mk/device.h"
#include "mk/method.h"
#include "core/simd.h"
#include "methods/builtin.h"

enum { P_WEIGHT, P_NORMALIZE, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_WEIGHT] = { .name = "weight", .scope = MK_SCOPE_PER_INPUT, .type = MK_PT_FLOAT,
		       .flags = MK_PF_REQUIRED | MK_PF_COEF,
		       .doc = "weight of each input (the base included, when one is configured)" },
	[P_NORMALIZE] = { .name = "normalize", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = { .set = true, .type = MK_PT_BOOL, .b = true },
			  .doc = "divide by the sum of the weights" },
};

struct state {
	bool normalize;
	float *wf, sumf;
	double *wd, sumd;
	struct mk_device_input *dev;   /* the device hook's inputs [ninputs] */
};

/* The kernel, per element: out = ((w0*x0 + w1*x1) + ...) [/ sum]. */
#define LINEAR_KERNEL(NAME, T)							\
static void NAME(uint64_t n, size_t ninputs, const void *const *in,		\
		 const T *w, bool normalize, T sum, T *out)			\
{										\
	const T *x = in[0];							\
	for (uint64_t e = 0; e < n; e++)					\
		out[e] = w[0] * x[e];						\
	for (size_t i = 1; i < ninputs; i++) {					\
		T wi = w[i];							\
		x = in[i];							\
		for (uint64_t e = 0; e < n; e++) {				\
			T p = wi * x[e];					\
			out[e] = out[e] + p;					\
		}								\
	}									\
	if (normalize)								\
		for (uint64_t e = 0; e < n; e++)				\
			out[e] = out[e] / sum;					\
}
LINEAR_KERNEL(linear_f32, float)
LINEAR_KERNEL(linear_f64, double)

/* linear_f32 of BF16 inputs, each widened (exactly) as it is read. */
MK_HOT_CLONES
static void linear_bf16(uint64_t n, size_t ninputs, const void *const *in, const float *w, bool normalize,
			float sum, float *out)
{
	const uint16_t *x = in[0];

	for (uint64_t e = 0; e < n; e++)
		out[e] = w[0] * mk__bf16_widen(x[e]);
	for (size_t i = 1; i < ninputs; i++) {
		float wi = w[i];
		x = in[i];
		for (uint64_t e = 0; e < n; e++) {
			float p = wi * mk__bf16_widen(x[e]);
			out[e] = out[e] + p;
		}
	}
	if (normalize)
		for (uint64_t e = 0; e < n; e++)
			out[e] = out[e] / sum;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	enum mk_dtype dts[d->ninputs];
	bool rectified;
	int rc;

	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		goto out;
	rc = mk_rectify_shapes(m, d, used, &po->out, &rectified, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < d->ninputs; i++)
		dts[i] = d->in[i].dtype;
	po->out.dtype = mk_promote_dtypes(d->ninputs, dts);
	po->compute = mk_compute_dtype_of(d->ninputs, dts);
	if (d->global[P_NORMALIZE].b) {
		float sf = 0.0f;
		double sd = 0.0;
		for (size_t i = 0; i < d->ninputs; i++) {
			double w = d->input[i * NPARAMS + P_WEIGHT].f;
			sf += (float)w;
			sd += w;
		}
		if (po->compute == MK_DT_F32 ? sf == 0.0f : sd == 0.0)
			rc = mk_err_set(err, MK_EINVAL,
					"method 'linear', tensor '%s': the weights sum to 0 in %s, so normalize=true "
					"would divide by zero; change a 'weight' or set normalize: false",
					d->tensor ? d->tensor : "?", mk_dtype_name(po->compute));
	}
out:
	return rc;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	size_t n = job->d.ninputs;
	struct state *s = calloc(1, sizeof(*s));
	int rc = 0;

	if (!s || !(s->wf = calloc(n, sizeof(float))) || !(s->wd = calloc(n, sizeof(double)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	s->normalize = mk_job_param(job, P_NORMALIZE)->b;
	job->apply_bf16 = job->compute == MK_DT_F32;   /* linear_bf16 */
	for (size_t i = 0; i < n; i++) {
		double w = mk_job_input_param(job, i, P_WEIGHT)->f;
		s->wf[i] = (float)w;
		s->wd[i] = w;
		s->sumf += s->wf[i];
		s->sumd += s->wd[i];
	}
	job->state = s;
out:
	if (rc && s) {
		free(s->wf);
		free(s);
	}
	return rc;
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct state *s = job->state;

	if (job->compute == MK_DT_F64)
		linear_f64(c->count, job->d.ninputs, c->in, s->wd, s->normalize, s->sumd, out);
	else if (c->bf16)
		linear_bf16(c->count, job->d.ninputs, c->in, s->wf, s->normalize, s->sumf, out);
	else
		linear_f32(c->count, job->d.ninputs, c->in, s->wf, s->normalize, s->sumf, out);
	return 0;
}

static void release(struct mk_job *job)
{
	struct state *s = job->state;

	if (s) {
		free(s->wf);
		free(s->wd);
		free(s->dev);
		free(s);
	}
	job->state = NULL;
}

/* The device hook: linear_f32 is the device's LINEAR kernel over every
 * input in order. */
static enum mk_device_kernel device_kernel(const struct mk_job *job)
{
	return job->state ? MK_DEVICE_LINEAR : MK_DEVICE_NONE;
}

static int device_state(const struct mk_job *job, struct mk_device_job *dj, struct mk_err *err)
{
	struct state *s = job->state;
	size_t n = job->d.ninputs;

	if (!s || job->compute != MK_DT_F32)
		return mk_err_set(err, MK_EUNSUPPORTED, "method 'linear', tensor '%s': no device kernel for %s",
				  job->d.tensor ? job->d.tensor : "?", mk_dtype_name(job->compute));
	if (!s->dev && !(s->dev = calloc(n ? n : 1, sizeof(*s->dev))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		s->dev[i] = (struct mk_device_input){ .idx = (int)i, .w = s->wf[i] };
	*dj = (struct mk_device_job){ .kernel = MK_DEVICE_LINEAR, .base = -1, .other = -1,
				      .normalize = s->normalize, .sum = s->sumf, .n = n, .in = s->dev };
	return 0;
}

static const struct mk_device_hook device_hook = { .kernel = device_kernel, .state = device_state };

static int batch(const struct mk_method *m, const struct mk_batch *b, struct mk_err *err)
{
	size_t n = b->ninputs;
	bool normalize = b->opt[P_NORMALIZE].b;
	const void *xs[n];

	for (size_t k = 0; k < b->B; k++) {
		uint64_t off = (uint64_t)k * b->nelem;
		if (b->compute == MK_DT_F64) {
			const double *w = (const double *)b->coef[P_WEIGHT] + k * n;
			double sum = 0.0;
			for (size_t i = 0; i < n; i++) {
				sum += w[i];
				xs[i] = (const double *)b->in[i] + off;
			}
			linear_f64(b->nelem, n, xs, w, normalize, sum, (double *)b->out + off);
		} else {
			const float *w = (const float *)b->coef[P_WEIGHT] + k * n;
			float sum = 0.0f;
			for (size_t i = 0; i < n; i++) {
				sum += w[i];
				xs[i] = (const float *)b->in[i] + off;
			}
			linear_f32(b->nelem, n, xs, w, normalize, sum, (float *)b->out + off);
		}
	}
	return 0;
}

const struct mk_method mk_method_linear = {
	.abi = MK_METHOD_ABI,
	.name = "linear",
	.pretty_name = "Linear",
	.reference_url = "https://arxiv.org/abs/2203.05482",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.device = &device_hook,
	.output = output,
	.init = init,
	.apply = apply,
	.release = release,
	.batch = batch,
};
