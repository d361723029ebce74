/* multislerp.c - barycentric interpolation of several models on the
 * hypersphere, optionally relative to a base.
 *
 * With x_i = M_i - base (rounded to the compute dtype) or M_i, the n
 * non-base models in plan order, w the weights rounded to the compute
 * dtype (normalize_weights: w / sum w, in the compute dtype):
 *   n_i = |x_i|, d_i = n_i + eps, u_i = x_i / d_i
 *   m = sum w_i u_i, mu = |m|
 *   mu < eps: n = 2 -> out = w_0 x_0 + w_1 x_1 (+ base); else an error
 *   T = sum w_i (u_i - <u_i, m/mu> m/mu),  nu = |T| + eps
 *   r = (m/mu) cos(nu) + T sin(nu)/nu,  out = r * sum w_i n_i (+ base)
 * Every vector here is a linear combination of the x_i, and every norm or
 * dot product a quadratic form of their Gram matrix G_ij = <x_i, x_j>.
 * One statistics pass gathers G (float64, fixed order: geom.h); finish
 * turns the formulas above into one coefficient per model (float64);
 * apply computes out = base + sum_i gamma_i x_i (products rounded to the
 * compute dtype, summed in model order).  In exact arithmetic T = 0 (the
 * same weights build the mean and the tangent), so the result is
 * (m / mu) * sum w_i n_i; mergekit's float32 T is rounding noise (~1e-7
 * relative), mk's ~1e-16.
 *
 * One non-base model: its tensor, unchanged (even with a base).
 * Deliberate differences: normalize_weights with weights summing to 0 is
 * a planning error (mergekit divides by zero); when every x_i is zero
 * (all models equal the base for this tensor) the result is the base (or
 * zeros) for any number of models, where mergekit raises its "weighted
 * sum is zero" error for three or more; eps must be > 0.  Inputs of
 * different shapes are an error (no embedding rectification, as
 * mergekit).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "geom.h"

enum { P_WEIGHT, P_NORMALIZE, P_EPS, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_WEIGHT] = { .name = "weight", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,
		       .flags = MK_PF_REQUIRED, .doc = "weight of each model" },
	[P_NORMALIZE] = { .name = "normalize_weights", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = { .set = true, .type = MK_PT_BOOL, .b = true },
			  .doc = "divide the weights by their sum" },
	[P_EPS] = { .name = "eps", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		    .flags = MK_PF_MIN | MK_PF_MIN_EXCL, .min = 0.0,
		    .def = { .set = true, .type = MK_PT_FLOAT, .f = 1e-8 },
		    .doc = "numerical guard added to norms; a weighted mean shorter than eps is zero" },
};

struct state {
	size_t n;                  /* non-base models */
	int *idx;                  /* [n] their input indices */
	int base;
	double *w;                 /* [n] weights as the kernel uses them */
	double *gamma;             /* [n] out = base + sum gamma_i x_i */
	double eps;
	bool fallback;             /* the linear fallback was taken */
	struct mk_geom geom;
	const char *tensor;
};

static size_t non_base(const struct mk_job_desc *d)
{
	return d->ninputs - (d->base >= 0);
}

static int single_model(const struct mk_job_desc *d)
{
	if (non_base(d) != 1)
		return -1;
	return d->base == 0 ? 1 : 0;
}

/* The weights in the compute dtype, normalized as mergekit does. */
static bool weights(const struct mk_job_desc *d, enum mk_dtype compute, const struct mk_pval *in,
		    size_t np, double *w)
{
	size_t k = 0;
	bool normalize = d->global[P_NORMALIZE].b;

	if (compute == MK_DT_F64) {
		double sum = 0.0;
		for (size_t i = 0; i < d->ninputs; i++)
			if ((int)i != d->base)
				sum += w[k++] = in[i * np + P_WEIGHT].f;
		if (normalize) {
			if (sum == 0.0)
				return false;
			for (size_t j = 0; j < k; j++)
				w[j] = w[j] / sum;
		}
	} else {
		float sum = 0.0f, wf;
		for (size_t i = 0; i < d->ninputs; i++)
			if ((int)i != d->base) {
				wf = (float)in[i * np + P_WEIGHT].f;
				w[k++] = wf;
				sum += wf;
			}
		if (normalize) {
			if (sum == 0.0f)
				return false;
			for (size_t j = 0; j < k; j++)
				w[j] = (float)w[j] / sum;
		}
	}
	return true;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	size_t n = d->ninputs, nb = non_base(d);
	int one = single_model(d), rc;
	enum mk_dtype dts[n];
	double w[n];
	struct mk_job_desc plain = *d;
	bool rectified;

	if (nb == 0)
		return mk_err_set(err, MK_EINVAL,
				  "method 'multislerp', tensor '%s': only the base model has this tensor; "
				  "multislerp needs at least one model besides the base",
				  d->tensor ? d->tensor : "?");
	if (one >= 0) {
		for (size_t i = 0; i < n; i++)
			used[i] = (int)i == one;
		po->out = d->in[one];
		po->compute = d->in[one].dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		return 0;
	}
	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		return rc;
	plain.is_embed = false;   /* mergekit stacks the tensors: one shape */
	rc = mk_rectify_shapes(m, &plain, used, &po->out, &rectified, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		dts[i] = d->in[i].dtype;
	po->out.dtype = mk_promote_dtypes(n, dts);
	po->compute = mk_compute_dtype_of(n, dts);
	if (!weights(d, po->compute, d->input, m->nparams, w))
		return mk_err_set(err, MK_EINVAL,
				  "method 'multislerp', tensor '%s': the %zu weights sum to 0 in %s, so "
				  "normalize_weights=true would divide by zero; change a 'weight' or set "
				  "normalize_weights: false",
				  d->tensor ? d->tensor : "?", nb, mk_dtype_name(po->compute));
	return 0;
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return single_model(d) >= 0 ? 0 : 1;
}

static int vec_done(void *ctx, uint64_t v, const double *g, struct mk_err *err)
{
	struct state *s = ctx;
	size_t n = s->n;
	double nrm[n], a[n], ga[n];
	double eps = s->eps, mu2, mu, kk = 0.0, scale = 0.0, nu, cs, sc, tfac;
	bool all_zero = true;

	for (size_t i = 0; i < n; i++) {
		double gi = g[i * n + i];
		nrm[i] = sqrt(gi > 0.0 ? gi : 0.0);
		a[i] = s->w[i] / (nrm[i] + eps);
		if (nrm[i] != 0.0)
			all_zero = false;
		scale += s->w[i] * nrm[i];
	}
	if (all_zero) {
		/* every model equals the base (or is zero): so is the result */
		for (size_t i = 0; i < n; i++)
			s->gamma[i] = 0.0;
		return 0;
	}
	mu2 = mk_geom_dot(n, g, a, a);
	mu = sqrt(mu2 > 0.0 ? mu2 : 0.0);
	if (!(mu >= eps)) {
		if (n == 2) {
			s->fallback = true;
			s->gamma[0] = s->w[0];
			s->gamma[1] = s->w[1];
			return 0;
		}
		return mk_err_set(err, MK_EINVAL,
				  "method 'multislerp', tensor '%s': the weighted mean of the %zu models' "
				  "directions is zero (|mean| = %.3g < eps = %g): antipodal models whose weights "
				  "balance out; change a 'weight'",
				  s->tensor ? s->tensor : "?", n, mu, eps);
	}
	for (size_t i = 0; i < n; i++) {
		double r = 0.0;
		for (size_t j = 0; j < n; j++) {
			double t = g[i * n + j] * a[j];
			r += t;
		}
		ga[i] = r;
	}
	/* K = sum_i w_i <u_i, m/mu>;  T = m (1 - K/mu);  |T| = |mu - K| */
	for (size_t i = 0; i < n; i++) {
		double dot = ga[i] / ((nrm[i] + eps) * mu);
		kk += s->w[i] * dot;
	}
	tfac = 1.0 - kk / mu;
	nu = fabs(mu - kk) + eps;
	cs = cos(nu);
	sc = sin(nu) / nu;
	for (size_t i = 0; i < n; i++) {
		double rho = a[i] / mu * cs + a[i] * tfac * sc;
		s->gamma[i] = rho * scale;
	}
	return 0;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));
	size_t k = 0;

	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	job->state = s;
	s->base = job->d.base;
	s->tensor = job->d.tensor;
	job->copy_input = single_model(&job->d);
	if (job->copy_input >= 0) {
		return 0;
	}
	s->n = non_base(&job->d);
	s->eps = mk_job_param(job, P_EPS)->f;
	s->idx = calloc(s->n, sizeof(*s->idx));
	s->w = calloc(s->n, sizeof(*s->w));
	s->gamma = calloc(s->n, sizeof(*s->gamma));
	if (!s->idx || !s->w || !s->gamma)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < job->d.ninputs; i++)
		if ((int)i != s->base)
			s->idx[k++] = (int)i;
	if (!weights(&job->d, job->compute, job->input, job->method->nparams, s->w))
		return mk_err_set(err, MK_EINVAL, "method 'multislerp', tensor '%s': the weights sum to 0",
				  job->d.tensor ? job->d.tensor : "?");
	return mk_geom_init(&s->geom, MK_GEOM_WHOLE, &job->out, job->compute, s->n, s->idx, s->base,
			    vec_done, s, err);
}

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	struct state *s = job->state;
	return mk_geom_accumulate(&s->geom, c, err);
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	int rc = mk_geom_finish(&s->geom, err);
	mk_geom_release(&s->geom);
	return rc;
}

#define MULTISLERP_APPLY(NAME, T)						\
static void NAME(const struct state *s, const struct mk_job_chunk *c, T *o)	\
{										\
	const T *b = s->base >= 0 ? c->in[s->base] : NULL;			\
	for (size_t i = 0; i < s->n; i++) {					\
		const T *x = c->in[s->idx[i]];					\
		T g = (T)s->gamma[i];						\
		for (uint64_t e = 0; e < c->count; e++) {			\
			T d = b ? (T)(x[e] - b[e]) : x[e];			\
			T p = g * d;						\
			o[e] = i ? o[e] + p : p;				\
		}								\
	}									\
	if (b)									\
		for (uint64_t e = 0; e < c->count; e++)				\
			o[e] = o[e] + b[e];					\
}
MULTISLERP_APPLY(apply_f32, float)
MULTISLERP_APPLY(apply_f64, double)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct state *s = job->state;

	if (job->compute == MK_DT_F64)
		apply_f64(s, c, out);
	else
		apply_f32(s, c, out);
	return 0;
}

static void release(struct mk_job *job)
{
	struct state *s = job->state;

	if (s) {
		mk_geom_release(&s->geom);
		free(s->idx);
		free(s->w);
		free(s->gamma);
		free(s);
	}
	job->state = NULL;
}

const struct mk_method mk_method_multislerp = {
	.abi = MK_METHOD_ABI,
	.name = "multislerp",
	.pretty_name = "Multi-SLERP",
	.reference_url = "https://goddard.blog/posts/multislerp-wow-what-a-cool-idea",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_OPTIONAL, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
