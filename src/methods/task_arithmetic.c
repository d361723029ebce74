/* task_arithmetic.c - the generalized task arithmetic family without
 * sparsification or sign consensus: `task_arithmetic` (methods.md 2.7).
 *
 * With B the base and, for each used non-base input m in input order,
 *   delta_m = M_m - B,  v_m = w_m * delta_m   (each rounded to the compute dtype)
 *   mix = sum_m v_m                           (input order)
 *   div = sum_m w_m;  div = 1 when |div| < 1e-8
 *   normalize: mix = mix / div;  lambda != 1: mix = mix * lambda
 *   out = B + mix
 * Weights are rounded to the compute dtype.  The compute dtype is the
 * base's (float64 for a float64 base, else float32); the output has the
 * base's dtype.  The base's own weight and density are not used (1.3).
 *
 * Shapes: a non-base input whose shape differs from the base's is, for an
 * embedding (is_embed), read through its top-left block of the base's
 * shape (an input smaller than the base is an error; mergekit crashes),
 * and otherwise dropped for this tensor (not read, not in div).  With no
 * non-base input left, the output is the base (copy_input).
 *
 * `density` and `rescale` are declared for compatibility and have no
 * effect without sparsification; `int8_mask` never has a numeric effect.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"

enum { P_WEIGHT, P_DENSITY, P_INT8_MASK, P_NORMALIZE, P_RESCALE, P_LAMBDA, NPARAMS };

#define BOOLDEF(v) { .set = true, .type = MK_PT_BOOL, .b = (v) }
#define FLOATDEF(v) { .set = true, .type = MK_PT_FLOAT, .f = (v) }

static const struct mk_param_spec params[NPARAMS] = {
	[P_WEIGHT] = { .name = "weight", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,
		       .flags = MK_PF_REQUIRED | MK_PF_COEF,
		       .doc = "weight of each model's task vector" },
	[P_DENSITY] = { .name = "density", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,
			.def = FLOATDEF(1.0), .doc = "fraction of each task vector kept (no effect here)" },
	[P_INT8_MASK] = { .name = "int8_mask", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = BOOLDEF(false), .doc = "no numeric effect (mergekit memory option)" },
	[P_NORMALIZE] = { .name = "normalize", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = BOOLDEF(false), .doc = "divide the sum of task vectors by the sum of weights" },
	[P_RESCALE] = { .name = "rescale", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			.def = BOOLDEF(false), .doc = "no effect without sparsification" },
	[P_LAMBDA] = { .name = "lambda", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		       .def = FLOATDEF(1.0), .doc = "scale of the merged task vector" },
};

struct state {
	size_t nused;              /* used non-base inputs */
	int *idx;                  /* [nused] their input indices */
	float *wf, divf, lamf;
	double *wd, divd, lamd;
	bool normalize, scale;
};

static void shape_str(const struct mk_tensor_desc *t, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "[");
	for (unsigned k = 0; k < t->ndim && o < len; k++)
		o += (size_t)snprintf(buf + o, len - o, "%s%llu", k ? ", " : "",
				      (unsigned long long)t->shape[k]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

static bool same_shape(const struct mk_tensor_desc *a, const struct mk_tensor_desc *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (unsigned k = 0; k < a->ndim; k++)
		if (a->shape[k] != b->shape[k])
			return false;
	return true;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	const struct mk_tensor_desc *b = &d->in[d->base];
	char sa[128], sb[128];
	int rc;

	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < d->ninputs; i++) {
		const struct mk_tensor_desc *x = &d->in[i];
		if ((int)i == d->base || same_shape(x, b))
			continue;
		if (!d->is_embed) {
			used[i] = false;   /* mergekit: "skipping ... due to size mismatch" */
			continue;
		}
		if (x->ndim == 2 && b->ndim == 2 && x->shape[0] >= b->shape[0] &&
		    x->shape[1] >= b->shape[1])
			continue;          /* read through the top-left block */
		shape_str(x, sa, sizeof(sa));
		shape_str(b, sb, sizeof(sb));
		rc = mk_err_set(err, MK_EMISMATCH,
				"method '%s', tensor '%s': input %zu%s%s%s has shape %s, which cannot be cut "
				"to the base's %s",
				m->name, d->tensor ? d->tensor : "?", i,
				d->labels && d->labels[i] ? " ('" : "",
				d->labels && d->labels[i] ? d->labels[i] : "",
				d->labels && d->labels[i] ? "')" : "", sa, sb);
		goto out;
	}
	po->out = *b;
	po->compute = b->dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
out:
	return rc;
}

static void free_state(struct state *s)
{
	if (!s)
		return;
	free(s->idx);
	free(s->wf);
	free(s->wd);
	free(s);
}

static int init(struct mk_job *job, struct mk_err *err)
{
	size_t n = job->d.ninputs;
	struct state *s = calloc(1, sizeof(*s));
	int rc = 0;

	if (!s || !(s->idx = calloc(n, sizeof(int))) || !(s->wf = calloc(n, sizeof(float))) ||
	    !(s->wd = calloc(n, sizeof(double)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		double w;
		if ((int)i == job->d.base || !job->used[i])
			continue;
		w = mk_job_input_param(job, i, P_WEIGHT)->f;
		s->idx[s->nused] = (int)i;
		s->wf[s->nused] = (float)w;
		s->wd[s->nused] = w;
		s->divf += s->wf[s->nused];
		s->divd += s->wd[s->nused];
		s->nused++;
	}
	if (fabsf(s->divf) < (float)1e-8)
		s->divf = 1.0f;
	if (fabs(s->divd) < 1e-8)
		s->divd = 1.0;
	s->normalize = mk_job_param(job, P_NORMALIZE)->b;
	s->lamd = mk_job_param(job, P_LAMBDA)->f;
	s->lamf = (float)s->lamd;
	s->scale = s->lamd != 1.0;
	if (!s->nused)
		job->copy_input = job->d.base;
	job->state = s;
out:
	if (rc)
		free_state(s);
	return rc;
}

#define TA_KERNEL(NAME, T, W, DIV, LAM)						\
static void NAME(const struct state *s, int base, uint64_t n,			\
		 const void *const *in, T *o)					\
{										\
	const T *b = in[base];							\
	if (!s->nused) {							\
		memcpy(o, b, n * sizeof(T));					\
		return;								\
	}									\
	for (size_t j = 0; j < s->nused; j++) {					\
		const T *x = in[s->idx[j]];					\
		T w = s->W[j];							\
		for (uint64_t e = 0; e < n; e++) {				\
			T delta = x[e] - b[e];					\
			T v = delta * w;					\
			o[e] = j ? o[e] + v : v;				\
		}								\
	}									\
	if (s->normalize)							\
		for (uint64_t e = 0; e < n; e++)				\
			o[e] = o[e] / s->DIV;					\
	if (s->scale)								\
		for (uint64_t e = 0; e < n; e++)				\
			o[e] = o[e] * s->LAM;					\
	for (uint64_t e = 0; e < n; e++)					\
		o[e] = b[e] + o[e];						\
}
TA_KERNEL(ta_f32, float, wf, divf, lamf)
TA_KERNEL(ta_f64, double, wd, divd, lamd)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	if (job->compute == MK_DT_F64)
		ta_f64(job->state, job->d.base, c->count, c->in, out);
	else
		ta_f32(job->state, job->d.base, c->count, c->in, out);
	return 0;
}

static void release(struct mk_job *job)
{
	free_state(job->state);
	job->state = NULL;
}

const struct mk_method mk_method_task_arithmetic = {
	.abi = MK_METHOD_ABI,
	.name = "task_arithmetic",
	.pretty_name = "Task Arithmetic",
	.reference_url = "https://arxiv.org/abs/2212.04089",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.uses_accelerator = true,
	.output = output,
	.init = init,
	.apply = apply,
	.release = release,
};
