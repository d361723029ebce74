/* model_stock.c - Model Stock: move from the base toward the average of
 * the models by a factor from their offsets' mean pairwise cosine
 * (https://arxiv.org/abs/2403.19522, as mergekit 0.1.5 computes it).
 *
 * Inputs: the base w_0 and N >= 2 models w_1..w_N in plan order; the base
 * alone is returned as is.  Vectors: filter_wise=false -> the whole
 * tensor; filter_wise=true -> along the last axis (a matrix's rows; a
 * 0-/1-D tensor is one vector).  Per vector, with o_i = w_i - w_0
 * (rounded to the compute dtype):
 *   cos_ij = clamp(<o_i,o_j> / max(|o_i| |o_j|, 1e-6), -1, 1)  (i < j)
 *   c = mean of the N(N-1)/2 cos_ij
 *   den = 1 + (N-1) c;  t = |den| < 1e-6 ? 0 : N c / den
 *   out = t * ((w_1 + ... + w_N) / N) + (1 - t) * w_0
 * One statistics pass gathers the offsets' Gram matrix per vector
 * (float64, fixed order: geom.h; for rows only the row being read is
 * held); finish leaves t per vector (float64, rounded to the compute
 * dtype); apply follows torch's operation order in the compute dtype.
 * Embedding inputs of different vocabulary sizes use their common
 * top-left block (mk_rectify_shapes, as mergekit 0.1.4).
 *
 * Deliberate differences: the singular case den = 0 keeps the base, as
 * mergekit 0.1.5 does (0.1.4 divided by zero).  A base with one model
 * (an optional tensor that the other models lack) is an error: mergekit
 * drops such an optional tensor from the output, which the method API
 * cannot express.  Statistics are float64 (mergekit: float32).
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

enum { P_FILTER_WISE, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_FILTER_WISE] = { .name = "filter_wise", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			    .def = { .set = true, .type = MK_PT_BOOL, .b = false },
			    .doc = "one interpolation factor per row (last axis) instead of per tensor" },
};

struct state {
	size_t n;                  /* models besides the base */
	int *idx;                  /* [n] */
	int base;
	enum mk_geom_mode mode;
	uint64_t nvec, veclen;
	double *t;                 /* [nvec] */
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
	if (n == 2)
		return mk_err_set(err, MK_EINVAL,
				  "method 'model_stock', tensor '%s': needs the base and at least 2 other "
				  "models, and has 1 besides the base",
				  d->tensor ? d->tensor : "?");
	return mk_output_promoted(m, d, used, po, err);
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return d->ninputs == 1 ? 0 : 1;
}

static int vec_done(void *ctx, uint64_t v, const double *g, struct mk_err *err)
{
	struct state *s = ctx;
	size_t n = s->n, npairs = 0;
	double sum = 0.0, c, den;

	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			double gi = g[i * n + i], gj = g[j * n + j];
			double ni = sqrt(gi > 0.0 ? gi : 0.0), nj = sqrt(gj > 0.0 ? gj : 0.0);
			double cs = g[i * n + j] / fmax(ni * nj, 1e-6);
			if (cs > 1.0)
				cs = 1.0;
			if (cs < -1.0)
				cs = -1.0;
			sum += cs;
			npairs++;
		}
	c = sum / (double)npairs;
	den = 1.0 + (double)(n - 1) * c;
	s->t[v] = fabs(den) < 1e-6 ? 0.0 : (double)n * c / den;
	return 0;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));
	size_t k = 0;
	int rc;

	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	job->state = s;
	s->base = job->d.base;
	if (job->d.ninputs == 1) {
		job->copy_input = 0;
		return 0;
	}
	s->n = job->d.ninputs - 1;
	s->idx = calloc(s->n, sizeof(*s->idx));
	if (!s->idx)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < job->d.ninputs; i++)
		if ((int)i != s->base)
			s->idx[k++] = (int)i;
	rc = mk_geom_init(&s->geom, mk_job_param(job, P_FILTER_WISE)->b ? MK_GEOM_ROWS : MK_GEOM_WHOLE,
			  &job->out, job->compute, s->n, s->idx, s->base, vec_done, s, err);
	if (rc)
		return rc;
	s->mode = s->geom.mode;
	s->nvec = s->geom.nvec;
	s->veclen = s->geom.veclen;
	s->t = calloc(s->nvec + 1, sizeof(*s->t));
	if (!s->t)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	return 0;
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

/* out = t * ((w_1 + ... + w_N) / N) + (1 - t) * w_0, torch's order */
#define MODEL_STOCK_APPLY(NAME, T)						\
static void NAME(const struct state *s, const struct mk_job_chunk *c, T *o)	\
{										\
	const T *b = c->in[s->base];						\
	T cnt = (T)s->n;							\
	uint64_t v = mk_geom_vec_of(s->mode, s->nvec, s->veclen, c->elem_begin); \
	uint64_t left = s->mode == MK_GEOM_ROWS ? (v + 1) * s->veclen - c->elem_begin : 0; \
	T t = (T)s->t[v], omt = (T)1 - t;					\
	for (size_t i = 0; i < s->n; i++) {					\
		const T *x = c->in[s->idx[i]];					\
		for (uint64_t e = 0; e < c->count; e++)				\
			o[e] = i ? o[e] + x[e] : x[e];				\
	}									\
	for (uint64_t e = 0; e < c->count; e++) {				\
		T avg, p, q;							\
		if (s->mode == MK_GEOM_ROWS && left-- == 0) {			\
			v++;							\
			left = s->veclen - 1;					\
			t = (T)s->t[v];						\
			omt = (T)1 - t;						\
		}								\
		avg = o[e] / cnt;						\
		p = t * avg;							\
		q = omt * b[e];							\
		o[e] = p + q;							\
	}									\
}
MODEL_STOCK_APPLY(apply_f32, float)
MODEL_STOCK_APPLY(apply_f64, double)

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
		free(s->t);
		free(s);
	}
	job->state = NULL;
}

const struct mk_method mk_method_model_stock = {
	.abi = MK_METHOD_ABI,
	.name = "model_stock",
	.pretty_name = "Model Stock",
	.reference_url = "https://arxiv.org/abs/2403.19522",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY,
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
