/* karcher.c - the Karcher (Riemannian) mean of the inputs on the unit
 * hypersphere, scaled by their mean norm.
 *
 * Every input counts, a configured base included, with alpha = 1/N; one
 * input is returned as is.  Each tensor is one flattened vector t_i.
 *   n_i = |t_i|, u_i = t_i / n_i (0 when n_i = 0); valid: n_i > tol
 *   no valid input: out = 0
 *   a_i = 1 / |valid|;  u = sum a_i u_i; |u| < tol: u = the first valid
 *   u_i, else u = u / |u|
 *   max_iter times:
 *     T = sum over valid i with theta_i = acos(clamp(<u, u_i>)) >= tol of
 *         a_i theta_i / sin(theta_i) (u_i - <u, u_i> u)
 *     tau = |T|; tau < tol: stop
 *     u = cos(tau) u + sin(tau) T / tau; |u| > tol: u = u / |u|
 *   out = (sum_i alpha_i n_i) u
 * u and T are linear combinations of the t_i, so the iteration runs on
 * the N x N Gram matrix G_ij = <t_i, t_j> alone: one statistics pass
 * gathers G (float64, fixed order: geom.h), finish iterates in float64
 * (O(N^2) per step) and leaves one coefficient per input; apply computes
 * out = sum_i gamma_i t_i (products rounded to the compute dtype, summed
 * in input order).
 *
 * Deliberate differences: mergekit computes norms in float32 and the rest
 * in the input dtype (float32 rounding in every step); mk iterates in
 * float64, which can change where the iteration stops (tau < tol) by one
 * step in borderline cases.  Embedding inputs of different vocabulary
 * sizes use their common top-left block (mk-compat(7); mergekit's call
 * to rectify_embed_sizes has no effect and it crashes).  max_iter and tol
 * must be >= 0.  A point exactly antipodal to the mean (sin theta = 0) is
 * skipped instead of dividing by zero.
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

enum { P_MAX_ITER, P_TOL, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_MAX_ITER] = { .name = "max_iter", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_INT,
			 .flags = MK_PF_MIN, .min = 0,
			 .def = { .set = true, .type = MK_PT_INT, .i = 10 },
			 .doc = "most iterations of the Karcher mean" },
	[P_TOL] = { .name = "tol", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		    .flags = MK_PF_MIN, .min = 0.0,
		    .def = { .set = true, .type = MK_PT_FLOAT, .f = 1e-5 },
		    .doc = "convergence tolerance (also: smallest norm that counts, smallest angle)" },
};

struct state {
	size_t n;
	int *idx;                  /* [n] 0..n-1 */
	int64_t max_iter;
	double tol;
	double *gamma;             /* [n] */
	int iters;                 /* diagnostics: iterations run */
	struct mk_geom geom;
};

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	size_t n = d->ninputs;

	if (n == 1) {
		po->out = d->in[0];
		po->compute = d->in[0].dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		return 0;
	}
	return mk_output_promoted(m, d, used, po, err);
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return d->ninputs == 1 ? 0 : 1;
}

static double qnorm(size_t n, const double *g, const double *a)
{
	double q = mk_geom_dot(n, g, a, a);
	return sqrt(q > 0.0 ? q : 0.0);
}

static int vec_done(void *ctx, uint64_t v, const double *g, struct mk_err *err)
{
	struct state *s = ctx;
	size_t n = s->n, nvalid = 0;
	double nrm[n], u[n], t[n], gu[n];
	double tol = s->tol, alpha = 1.0 / (double)n, a, un, scale = 0.0;
	int first = -1;

	for (size_t i = 0; i < n; i++) {
		double gi = g[i * n + i];
		nrm[i] = sqrt(gi > 0.0 ? gi : 0.0);
		scale += alpha * nrm[i];
		if (nrm[i] > tol) {
			nvalid++;
			if (first < 0)
				first = (int)i;
		}
		s->gamma[i] = 0.0;
	}
	if (!nvalid)
		return 0;   /* zeros */
	a = 1.0 / (double)nvalid;
	/* u = sum a u_i = sum (a / n_i) t_i */
	for (size_t i = 0; i < n; i++)
		u[i] = nrm[i] > tol ? a / nrm[i] : 0.0;
	un = qnorm(n, g, u);
	if (un < tol) {
		memset(u, 0, sizeof(u));
		u[first] = 1.0 / nrm[first];
	} else {
		for (size_t i = 0; i < n; i++)
			u[i] = u[i] / un;
	}
	for (int64_t it = 0; it < s->max_iter; it++) {
		double tau;
		/* gu_i = <u, t_i> */
		for (size_t i = 0; i < n; i++) {
			double r = 0.0;
			for (size_t j = 0; j < n; j++) {
				double p = g[i * n + j] * u[j];
				r += p;
			}
			gu[i] = r;
		}
		memset(t, 0, sizeof(t));
		for (size_t i = 0; i < n; i++) {
			double dd, th, sn, f;
			if (!(nrm[i] > tol))
				continue;
			dd = gu[i] / nrm[i];
			if (dd > 1.0)
				dd = 1.0;
			if (dd < -1.0)
				dd = -1.0;
			th = acos(dd);
			if (th < tol)
				continue;
			sn = sin(th);
			if (sn == 0.0)
				continue;
			f = a * (th / sn);
			/* f (u_i - dd u) */
			t[i] += f / nrm[i];
			for (size_t j = 0; j < n; j++) {
				double p = f * dd * u[j];
				t[j] -= p;
			}
		}
		tau = qnorm(n, g, t);
		s->iters = (int)it + 1;
		if (tau < tol)
			break;
		{
			double c = cos(tau), sf = sin(tau) / tau;
			for (size_t j = 0; j < n; j++)
				u[j] = c * u[j] + sf * t[j];
		}
		un = qnorm(n, g, u);
		if (un > tol)
			for (size_t j = 0; j < n; j++)
				u[j] = u[j] / un;
	}
	for (size_t i = 0; i < n; i++)
		s->gamma[i] = scale * u[i];
	return 0;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));

	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	job->state = s;
	if (job->d.ninputs == 1) {
		job->copy_input = 0;
		return 0;
	}
	s->n = job->d.ninputs;
	s->max_iter = mk_job_param(job, P_MAX_ITER)->i;
	s->tol = mk_job_param(job, P_TOL)->f;
	s->idx = calloc(s->n, sizeof(*s->idx));
	s->gamma = calloc(s->n, sizeof(*s->gamma));
	if (!s->idx || !s->gamma)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < s->n; i++)
		s->idx[i] = (int)i;
	return mk_geom_init(&s->geom, MK_GEOM_WHOLE, &job->out, job->compute, s->n, s->idx, -1,
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

#define KARCHER_APPLY(NAME, T)							\
static void NAME(const struct state *s, const struct mk_job_chunk *c, T *o)	\
{										\
	for (size_t i = 0; i < s->n; i++) {					\
		const T *x = c->in[i];						\
		T g = (T)s->gamma[i];						\
		for (uint64_t e = 0; e < c->count; e++) {			\
			T p = g * x[e];						\
			o[e] = i ? o[e] + p : p;				\
		}								\
	}									\
}
KARCHER_APPLY(apply_f32, float)
KARCHER_APPLY(apply_f64, double)

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
		free(s->gamma);
		free(s);
	}
	job->state = NULL;
}

const struct mk_method mk_method_karcher = {
	.abi = MK_METHOD_ABI,
	.name = "karcher",
	.pretty_name = "Karcher Mean",
	.reference_url = "https://arxiv.org/abs/2603.04972",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_IGNORED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
