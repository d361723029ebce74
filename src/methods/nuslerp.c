/* nuslerp.c - spherical interpolation of two models, optionally relative
 * to a base, per tensor, row or column.
 *
 * Inputs: the two models A, B (in plan order) and, optionally, a base
 * that is neither of them.  One input alone is returned as is.
 *   t = 0.5 when |w_A + w_B| < 1e-6, else w_B / (w_A + w_B)   (double)
 *   v0 = A - base, v1 = B - base (rounded to the compute dtype), or A, B
 * Vectors: nuslerp_flatten (default) -> the whole tensor; else
 * nuslerp_row_wise -> along axis 0 (a matrix's columns); else along the
 * last axis (a matrix's rows); 0-/1-D tensors are one vector.
 * One statistics pass gathers |v0|^2, |v1|^2, <v0, v1> per vector
 * (float64, fixed order: geom.h).  Per vector:
 *   c = clamp(<v0,v1> / (max(|v0|, 1e-7) * max(|v1|, 1e-7)), -1, 1)
 *   1 - c^2 <= 1e-16 (colinear, mergekit 0.1.5): r = (1-t) v0 + t v1
 *   else theta = acos(c): r = sin((1-t) theta)/sin(theta) v0 + sin(t theta)/sin(theta) v1
 *   out = base + r, or r
 * The two coefficients are computed in float64 and rounded to the compute
 * dtype; products are rounded before the sum.  Embedding inputs of
 * different vocabulary sizes use their common top-left block
 * (mk_rectify_shapes).
 *
 * Deliberate differences: mergekit 0.1.4 missed anti-parallel vectors in
 * float32 (sin(acos(-1)) = -8.7e-8 passes its |sin| < 1e-8 test and the
 * result explodes); mk uses 0.1.5's test on c computed in float64, so
 * exactly (anti-)parallel vectors take the lerp path.  Statistics are
 * float64 sums in a fixed order (mergekit: float32).
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

enum { P_WEIGHT, P_ROW_WISE, P_FLATTEN, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_WEIGHT] = { .name = "weight", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,
		       .flags = MK_PF_REQUIRED,
		       .doc = "relative weight of each of the two models: t = w_B / (w_A + w_B)" },
	[P_ROW_WISE] = { .name = "nuslerp_row_wise", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			 .def = { .set = true, .type = MK_PT_BOOL, .b = false },
			 .doc = "without flatten: interpolate vectors along axis 0 (a matrix's columns) "
				"instead of the last axis (its rows)" },
	[P_FLATTEN] = { .name = "nuslerp_flatten", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			.def = { .set = true, .type = MK_PT_BOOL, .b = true },
			.doc = "interpolate the whole tensor as one vector" },
};

#define NORM_EPS 1e-7
#define COLINEAR_EPS2 1e-16   /* eps^2, eps = 1e-8 */

struct state {
	int idx[2];                /* A, B */
	int base;                  /* -1: none */
	double t;
	struct mk_geom geom;
	enum mk_geom_mode mode;
	uint64_t nvec, veclen;
	double *c0, *c1;           /* [nvec] */
	uint64_t ncolinear;        /* diagnostics */
};

/* The two non-base inputs in plan order; false unless there are exactly 2. */
static bool models(const struct mk_job_desc *d, int *a, int *b)
{
	int k = 0;

	for (size_t i = 0; i < d->ninputs; i++) {
		if ((int)i == d->base)
			continue;
		if (k == 0)
			*a = (int)i;
		else if (k == 1)
			*b = (int)i;
		k++;
	}
	return k == 2;
}

static enum mk_geom_mode mode_of(const struct mk_job_desc *d)
{
	if (d->global[P_FLATTEN].b)
		return MK_GEOM_WHOLE;
	return d->global[P_ROW_WISE].b ? MK_GEOM_COLS : MK_GEOM_ROWS;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	int a, b;

	if (d->ninputs == 1) {
		po->out = d->in[0];
		po->compute = d->in[0].dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		return 0;
	}
	if (!models(d, &a, &b))
		return mk_err_set(err, MK_EINVAL,
				  "method 'nuslerp', tensor '%s': nuslerp merges exactly two models besides the "
				  "base, and the base model cannot be one of them (%zu model%s besides the base)",
				  d->tensor ? d->tensor : "?", d->ninputs - (d->base >= 0),
				  d->ninputs - (d->base >= 0) == 1 ? "" : "s");
	return mk_output_promoted(m, d, used, po, err);
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return d->ninputs == 1 ? 0 : 1;
}

static int vec_done(void *ctx, uint64_t v, const double *g, struct mk_err *err)
{
	struct state *s = ctx;
	double t = s->t;
	double n0 = sqrt(g[0]), n1 = sqrt(g[3]);
	double c = g[1] / (fmax(n0, NORM_EPS) * fmax(n1, NORM_EPS));

	if (c > 1.0)
		c = 1.0;
	if (c < -1.0)
		c = -1.0;
	if (1.0 - c * c <= COLINEAR_EPS2) {
		s->c0[v] = 1.0 - t;
		s->c1[v] = t;
		s->ncolinear++;
	} else {
		double th = acos(c), sn = sin(th);
		s->c0[v] = sin((1.0 - t) * th) / sn;
		s->c1[v] = sin(t * th) / sn;
	}
	return 0;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));
	int rc = 0;

	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	job->state = s;
	s->base = job->d.base;
	if (job->d.ninputs == 1) {
		job->copy_input = 0;
		return 0;
	}
	models(&job->d, &s->idx[0], &s->idx[1]);
	{
		double wa = mk_job_input_param(job, (size_t)s->idx[0], P_WEIGHT)->f;
		double wb = mk_job_input_param(job, (size_t)s->idx[1], P_WEIGHT)->f;
		double tot = wa + wb;
		s->t = fabs(tot) < 1e-6 ? 0.5 : wb / tot;
	}
	s->mode = mode_of(&job->d);
	rc = mk_geom_init(&s->geom, s->mode, &job->out, job->compute, 2, s->idx, s->base,
			  vec_done, s, err);
	if (rc)
		return rc;
	s->mode = s->geom.mode;
	s->nvec = s->geom.nvec;
	s->veclen = s->geom.veclen;
	s->c0 = calloc(s->nvec + 1, sizeof(double));
	s->c1 = calloc(s->nvec + 1, sizeof(double));
	if (!s->c0 || !s->c1)
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

#define NUSLERP_APPLY(NAME, T)							\
/* One vector's elements [0, n) with its coefficients (a loop that	\
 * vectorises). */								\
static void NAME##_seg(T a0, T a1, const T *x0, const T *x1, const T *b,	\
		       uint64_t n, T *o)					\
{										\
	if (b) {								\
		for (uint64_t e = 0; e < n; e++) {				\
			T d0 = x0[e] - b[e], d1 = x1[e] - b[e];			\
			T p = a0 * d0, q = a1 * d1;				\
			T r = p + q;						\
			o[e] = b[e] + r;					\
		}								\
	} else {								\
		for (uint64_t e = 0; e < n; e++) {				\
			T p = a0 * x0[e], q = a1 * x1[e];			\
			o[e] = p + q;						\
		}								\
	}									\
}										\
static void NAME(const struct state *s, const struct mk_job_chunk *c, T *o)	\
{										\
	const T *x0 = c->in[s->idx[0]], *x1 = c->in[s->idx[1]];			\
	const T *b = s->base >= 0 ? c->in[s->base] : NULL;			\
	uint64_t v = mk_geom_vec_of(s->mode, s->nvec, s->veclen, c->elem_begin); \
	if (s->mode != MK_GEOM_COLS) {	/* whole vectors' runs */		\
		uint64_t left = s->mode == MK_GEOM_ROWS ? (v + 1) * s->veclen - c->elem_begin \
							 : c->count;	\
		for (uint64_t e = 0; e < c->count; v++) {			\
			uint64_t len = left < c->count - e ? left : c->count - e; \
			NAME##_seg((T)s->c0[v], (T)s->c1[v], x0 + e, x1 + e,	\
				   b ? b + e : NULL, len, o + e);		\
			e += len;						\
			left = s->veclen;					\
		}								\
		return;								\
	}									\
	/* columns: the coefficients change every element */			\
	for (uint64_t e = 0; e < c->count; e++) {				\
		T a0 = (T)s->c0[v], a1 = (T)s->c1[v];				\
		if (++v == s->nvec)						\
			v = 0;							\
		if (b) {							\
			T d0 = x0[e] - b[e], d1 = x1[e] - b[e];			\
			T p = a0 * d0, q = a1 * d1;				\
			T r = p + q;						\
			o[e] = b[e] + r;					\
		} else {							\
			T p = a0 * x0[e], q = a1 * x1[e];			\
			o[e] = p + q;						\
		}								\
	}									\
}
NUSLERP_APPLY(apply_f32, float)
NUSLERP_APPLY(apply_f64, double)

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
		free(s->c0);
		free(s->c1);
		free(s);
	}
	job->state = NULL;
}

const struct mk_method mk_method_nuslerp = {
	.abi = MK_METHOD_ABI,
	.name = "nuslerp",
	.pretty_name = "NuSLERP",
	.reference_url = NULL,
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_OPTIONAL, .min_inputs = 1, .max_inputs = 3,
		      .min_non_base = 0, .max_non_base = 2 },
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
