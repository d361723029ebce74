/* gta.c - the generalized task arithmetic family: one
 * implementation configured eight ways, as mergekit's GeneralizedTask-
 * ArithmeticMerge.
 *
 *   name              consensus  sparsification      normalize  rescale  extra
 *   task_arithmetic   none       none                false      false    -
 *   ties              sum        magnitude (top-k)   true       false    -
 *   dare_linear       none       random (Bernoulli)  false      true     -
 *   dare_ties         sum        random (Bernoulli)  false      true     -
 *   breadcrumbs       none       magnitude_outliers  false      false    gamma 0.01
 *   breadcrumbs_ties  sum        magnitude_outliers  false      false    gamma 0.01
 *   della             sum        della_magprune      true       true     epsilon 0.15
 *   della_linear      none       della_magprune      false      true     epsilon 0.15
 *
 * With B the base and, for each used non-base input m in plan order:
 *   delta_m = M_m - B                                  (compute dtype)
 *   delta'_m = sparsify(delta_m)                       (below; density >= 1: delta_m)
 *   v_m = delta'_m * w_m                               (w rounded to the compute dtype)
 *   consensus: s = sum_m v_m (count: sum_m sign(v_m)); maj = s >= 0 ? +1 : -1;
 *              k_m = sign(v_m) == maj; mix = sum_m v_m*k_m; div = sum_m w_m*k_m,
 *              div == 0 -> 1                       (elementwise)
 *   otherwise: mix = sum_m v_m; div = sum_m w_m, |div| < 1e-8 -> 1
 *   normalize: mix /= div;  lambda != 1: mix *= lambda;  out = B + mix
 * Sums run in plan order, each product rounded to the compute dtype (float32,
 * float64 for a float64 base), as torch does; the output has the base's dtype.
 *
 * Sparsification, per input (each model's task vector has its own mask):
 *   magnitude (ties): keep the k = int(density * N) largest |delta| of the
 *     whole tensor; among equal magnitudes the lower flat index first.
 *   magnitude_outliers (breadcrumbs): sort |delta| ascending (equal values:
 *     lower index first), keep the sorted positions [n_bot, n_bot + target)
 *     with target = int(density*N), n_top = int(gamma*N), n_bot =
 *     max(0, N - target - n_top) (mergekit 0.1.5's rule).
 *   random (dare): keep element e when u(e) < density (density rounded to
 *     the compute dtype), u from the counter-based generator of rng.h keyed
 *     by (seed, tensor, input index, e).
 *   della_magprune: rank |delta| ascending along axis 1 (a 1-D tensor is one
 *     row; equal values: lower index first), q = (r - 1) / (L - 1),
 *     p = (density - epsilon) + 2 q epsilon (float32 arithmetic as mergekit),
 *     keep when u(e) < p.  density <= 0: all zero.
 *   rescale: kept elements times sum|delta| / sum|kept delta| (whole tensor,
 *     L1 norm matching; no scaling when either sum is < 1e-7).
 *
 * Exact whole-tensor statistics by passes over the input stream:
 *   ties, breadcrumbs*: radix selection on the bits of |delta| (non-negative
 *     floats order like their bit patterns): pass l histograms the l-th 16-bit
 *     digit of the elements whose higher digits match the digits chosen so
 *     far (2 passes for float32, 4 for float64), giving the exact magnitude V
 *     at the wanted rank, how many lie below it and how many equal it; a last
 *     pass walks the elements in order and records the index of the last
 *     tied element kept (apply then decides any chunk alone) and sums
 *     |kept delta| for the rescale (without one it stops at the last cut).  sum|delta| is taken in pass 0.
 *     -> 3 passes (float32) / 5 (float64) when some input has density < 1.
 *     Without a rescale the cut pass is often not read (mk_job_wants):
 *     when every tie is kept or none, and, for float32, when the last
 *     digit's bucket holds at most a sixteenth of the elements (4 Mi at
 *     most): the last digit pass records them (index, low digit) and
 *     finds the cut itself.
 *   dare_*: the mask is a pure function of the element, so only the rescale
 *     needs a pass: 1 when rescale and some density < 1, else 0.  That
 *     pass keeps the mask it draws as a bitmap (N bits per input) for
 *     apply to read: each element is drawn once.
 *   della*: the rank needs whole rows, which apply may see cut anywhere: one
 *     pass buffers each row group (a slab of L*S elements), ranks its rows
 *     (a stable radix sort on the keys, so equal keys by index; float32
 *     rows whose keys' upper halves span few values by counting on them,
 *     the same order), draws the mask into a bitmap (N bits per input)
 *     and sums for the rescale.
 *     -> 1 pass when some 0 < density < 1, else 0.
 * Sums are float64 over fixed blocks, each in eight lanes by element index
 * (struct lsum, gta_simd.h), rounded to the compute dtype before the division,
 * so nothing depends on the chunking.
 *
 * Plan-time errors: density < 0 (spec bound); ties/breadcrumbs with
 * density < 1 and int(density*N) = 0; della with 0 < density < 1 and
 * density +/- epsilon outside (0, 1); a missing base (contract).
 *
 * Deliberate differences from mergekit: counter-based randomness instead of
 * torch's global generator; ties in |delta| broken by lower index first
 * (torch: unspecified); int(density*N) = 0 is an error for ties (mergekit
 * 0.1.5 keeps one element, 0.1.4 asserts) and breadcrumbs (mergekit keeps
 * nothing); a DELLA row of length 1 (shape [k, 1], one-element or 0-D
 * tensors) uses p = density (mergekit: 0/0 -> NaN -> error); L1 sums in
 * float64; bf16/f16 merges compute in float32.
 *
 * This file holds the methods, their plan, state and apply; the passes
 * are gta_stats.c's (DELLA's ranking gta_della.c's), over the state of
 * gta_state.h; the loops written once per instruction set are behind the
 * table of gta_simd.h.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/device.h"
#include "mk/method.h"
#include "gta.h"
#include "gta_simd.h"
#include "gta_state.h"
#include "rng.h"
#include "core/simd.h"
#include "core/bug.h"
#include "methods/builtin.h"

enum { P_WEIGHT, P_DENSITY, P_INT8_MASK, P_NORMALIZE, P_RESCALE, P_LAMBDA, P_EXTRA, NPARAMS_MAX };

enum sparsify { SP_NONE, SP_MAG, SP_OUTL, SP_RAND, SP_DELLA };

struct cfg {
	const char *name;
	enum mk_gta_consensus cons;
	enum sparsify sp;
};

static const struct cfg cfgs[] = {
	{ "task_arithmetic", MK_GTA_CONS_NONE, SP_NONE },
	{ "ties", MK_GTA_CONS_SUM, SP_MAG },
	{ "dare_linear", MK_GTA_CONS_NONE, SP_RAND },
	{ "dare_ties", MK_GTA_CONS_SUM, SP_RAND },
	{ "breadcrumbs", MK_GTA_CONS_NONE, SP_OUTL },
	{ "breadcrumbs_ties", MK_GTA_CONS_SUM, SP_OUTL },
	{ "della", MK_GTA_CONS_SUM, SP_DELLA },
	{ "della_linear", MK_GTA_CONS_NONE, SP_DELLA },
	{ "ties_count_consensus", MK_GTA_CONS_COUNT, SP_MAG },
};

static const struct cfg *cfg_of(const struct mk_method *m)
{
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		if (!strcmp(cfgs[i].name, m->name))
			return &cfgs[i];
	MK_BUG("gta: no configuration for method '%s'", m->name);
	return NULL;
}

/* ------------------------------------------------------------ parameters */

#define BOOLDEF(v) { .set = true, .type = MK_PT_BOOL, .b = (v) }
#define FLOATDEF(v) { .set = true, .type = MK_PT_FLOAT, .f = (v) }

#define COMMON_PARAMS(NORM, RESC, DFLAGS, DDOC)						\
	[P_WEIGHT] = { .name = "weight", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,	\
		       .flags = MK_PF_REQUIRED | MK_PF_COEF,					\
		       .doc = "weight of each model's task vector" },				\
	[P_DENSITY] = { .name = "density", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,	\
			.flags = (DFLAGS), .min = 0.0, .def = FLOATDEF(1.0), .doc = DDOC },	\
	[P_INT8_MASK] = { .name = "int8_mask", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,	\
			  .def = BOOLDEF(false), .doc = "no numeric effect (mergekit memory option)" }, \
	[P_NORMALIZE] = { .name = "normalize", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,	\
			  .def = BOOLDEF(NORM),							\
			  .doc = "divide the merged task vector by the sum of the weights that count" }, \
	[P_RESCALE] = { .name = "rescale", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,	\
			.def = BOOLDEF(RESC),							\
			.doc = "match each sparsified task vector's L1 norm to the original's" }, \
	[P_LAMBDA] = { .name = "lambda", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,		\
		       .def = FLOATDEF(1.0), .doc = "scale of the merged task vector" }

#define KEEP_DOC "fraction of each task vector kept (>= 1: all)"
#define GAMMA_PARAM									\
	[P_EXTRA] = { .name = "gamma", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,	\
		      .flags = MK_PF_MIN, .min = 0.0, .def = FLOATDEF(0.01),			\
		      .doc = "fraction of the largest-magnitude entries removed as outliers" }
#define EPSILON_PARAM									\
	[P_EXTRA] = { .name = "epsilon", .scope = MK_SCOPE_PER_NON_BASE, .type = MK_PT_FLOAT,	\
		      .def = FLOATDEF(0.15),							\
		      .doc = "keep probabilities range over density -/+ epsilon by magnitude rank" }

static const struct mk_param_spec p_task_arithmetic[] = {
	COMMON_PARAMS(false, false, 0, "fraction of each task vector kept (no effect here)"),
};
static const struct mk_param_spec p_ties[] = { COMMON_PARAMS(true, false, MK_PF_MIN, KEEP_DOC) };
static const struct mk_param_spec p_dare[] = { COMMON_PARAMS(false, true, MK_PF_MIN, KEEP_DOC) };
static const struct mk_param_spec p_breadcrumbs[] = {
	COMMON_PARAMS(false, false, MK_PF_MIN, KEEP_DOC), GAMMA_PARAM,
};
static const struct mk_param_spec p_della[] = {
	COMMON_PARAMS(true, true, MK_PF_MIN, KEEP_DOC), EPSILON_PARAM,
};
static const struct mk_param_spec p_della_linear[] = {
	COMMON_PARAMS(false, true, MK_PF_MIN, KEEP_DOC), EPSILON_PARAM,
};

/* ------------------------------------------------------------------ plan */

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


/* Python's int(x * n) for 0 <= x, clamped to n. */
static uint64_t int_frac(double x, uint64_t n)
{
	double v = x * (double)n;
	if (!(v < (double)n))
		return n;
	return (uint64_t)v;
}

static double pin(const struct mk_job_desc *d, const struct mk_method *m, size_t i, size_t p)
{
	return d->input[i * m->nparams + p].f;
}

/* The sparsification an input gets for this tensor (SP_NONE: delta as is). */
static enum sparsify input_sp(const struct cfg *c, const struct mk_method *m,
			      const struct mk_job_desc *d, size_t i, uint64_t n)
{
	double rho;

	if (c->sp == SP_NONE || !n)
		return SP_NONE;
	rho = pin(d, m, i, P_DENSITY);
	return rho >= 1.0 ? SP_NONE : c->sp;
}

static const char *lbl(const struct mk_job_desc *d, size_t i, char *buf, size_t len)
{
	if (d->labels && d->labels[i])
		snprintf(buf, len, "input %zu ('%s')", i, d->labels[i]);
	else
		snprintf(buf, len, "input %zu", i);
	return buf;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	const struct cfg *c = cfg_of(m);
	const struct mk_tensor_desc *b = &d->in[d->base];
	const char *tn = d->tensor ? d->tensor : "?";
	char sa[128], sb[128], who[300];
	uint64_t n = mk_tensor_desc_count(b);
	int rc;

	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		return rc;
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
		return mk_err_set(err, MK_EMISMATCH,
				  "method '%s', tensor '%s': %s has shape %s, which cannot be cut "
				  "to the base's %s", m->name, tn, lbl(d, i, who, sizeof(who)), sa, sb);
	}
	for (size_t i = 0; i < d->ninputs; i++) {
		enum sparsify sp;
		double rho, eps;
		if ((int)i == d->base || !used[i])
			continue;
		sp = input_sp(c, m, d, i, n);
		rho = pin(d, m, i, P_DENSITY);
		if ((sp == SP_MAG || sp == SP_OUTL) && int_frac(rho, n) == 0)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter 'density' for %s is %g, "
					  "which keeps int(%g * %llu) = 0 elements; use a larger density "
					  "(>= 1 keeps everything)", m->name, tn,
					  lbl(d, i, who, sizeof(who)), rho, rho, (unsigned long long)n);
		if (sp == SP_DELLA && rho > 0.0) {
			eps = pin(d, m, i, P_EXTRA);
			if (rho + eps >= 1.0 || rho - eps <= 0.0)
				return mk_err_set(err, MK_EINVAL,
						  "method '%s', tensor '%s': parameters 'density' %g and "
						  "'epsilon' %g for %s: density +/- epsilon must lie in (0, 1)",
						  m->name, tn, rho, eps, lbl(d, i, who, sizeof(who)));
		}
	}
	po->out = *b;
	{
		/* the dtype torch's promotion gives the task-vector sum
		 * (mergekit: a bfloat16 base and a float32 model merge to
		 * float32) */
		enum mk_dtype dts[64];
		size_t nd = 0;
		for (size_t i = 0; i < d->ninputs && nd < 64; i++)
			if (used[i] || (int)i == d->base)
				dts[nd++] = d->in[i].dtype;
		po->out.dtype = mk_promote_dtypes(nd, dts);
	}
	po->compute = b->dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
	return 0;
}

static unsigned nlevels_of(const struct mk_job_desc *d)
{
	return d->in[d->base].dtype == MK_DT_F64 ? 4 : 2;
}

static bool spare_wanted(const struct mk_method *m, const struct mk_job_desc *d, const bool *used);

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	const struct cfg *c = cfg_of(m);
	uint64_t n = mk_tensor_desc_count(&d->in[d->base]);
	bool rescale = d->global[P_RESCALE].b;
	unsigned np = 0;

	for (size_t i = 0; i < d->ninputs; i++) {
		enum sparsify sp;
		unsigned k = 0;
		if ((int)i == d->base || !used[i])
			continue;
		sp = input_sp(c, m, d, i, n);
		if (sp == SP_MAG || sp == SP_OUTL)
			k = nlevels_of(d) + 1;
		else if (sp == SP_RAND)
			k = rescale ? 1 : 0;
		else if (sp == SP_DELLA)
			k = pin(d, m, i, P_DENSITY) > 0.0 ? 1 : 0;
		if (k > np)
			np = k;
	}
	return np + spare_wanted(m, d, used);
}

/* Whether the job takes the plan's spare pass (mk_job_desc.spare_pass): a
 * float32 selection without a rescale, of a tensor whose windows open.
 * Pass 1 is then the pass a window that missed its cut needs (state.extra)
 * whether or not the job is held, and skipped when every window held it. */
static bool spare_wanted(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	const struct cfg *c = cfg_of(m);
	uint64_t n = mk_tensor_desc_count(&d->in[d->base]);
	bool sel = false;

	if (!d->spare_pass || nlevels_of(d) != 2 || d->global[P_RESCALE].b || n < WIN_MIN || n > UINT32_MAX)
		return false;
	for (size_t i = 0; i < d->ninputs; i++) {
		enum sparsify sp = (int)i == d->base || !used[i] ? SP_NONE : input_sp(c, m, d, i, n);
		sel |= sp == SP_MAG || sp == SP_OUTL;
	}
	return sel;
}

/* ----------------------------------------------------------------- state */

static void free_state(struct state *s)
{
	if (!s)
		return;
	for (size_t j = 0; s->g && j < s->n; j++) {
		free(s->g[j].t[0].hist);
		free(s->g[j].t[1].hist);
		free(s->g[j].t[0].sub);
		free(s->g[j].t[1].sub);
		for (unsigned t = 0; t < 2; t++) {
			free(s->g[j].t[t].ridx);
			free(s->g[j].t[t].rlo);
			free(s->g[j].t[t].widx);
			free(s->g[j].t[t].wkey);
		}
		free(s->g[j].mask);
		free(s->g[j].slab);
		free(s->g[j].prob);
		free(s->g[j].rk);
		free(s->g[j].dthr);
		free(s->g[j].flag);
		free(s->g[j].cnt);
		free(s->g[j].key32);
		free(s->g[j].w64);
		free(s->g[j].rank);
		free(s->g[j].bix);
		free(s->g[j].mf);
	}
	free(s->g);
	free(s->ex);
	free(s->wf);
	free(s);
}

static int init(struct mk_job *job, struct mk_err *err)
{
	const struct mk_method *m = job->method;
	const struct mk_job_desc *d = &job->d;
	size_t n = d->ninputs;
	struct state *s = calloc(1, sizeof(*s));
	int rc = 0;

	if (!s || !(s->g = calloc(n, sizeof(*s->g))))
		goto nomem;
	mk_gta_simd_init();
	s->cfg = cfg_of(m);
	s->f64 = job->compute == MK_DT_F64;
	s->nelem = job->nelem;
	s->nlevels = nlevels_of(d);
	s->keybits = 16 * s->nlevels;
	s->normalize = mk_job_param(job, P_NORMALIZE)->b;
	s->rescale = mk_job_param(job, P_RESCALE)->b;
	s->lamd = mk_job_param(job, P_LAMBDA)->f;
	s->lamf = (float)s->lamd;
	s->scale_lam = s->lamd != 1.0;
	if (job->out.ndim <= 1) {
		s->L = job->out.ndim ? job->out.shape[0] : 1;
		s->S = 1;
	} else {
		s->L = job->out.shape[1];
		s->S = mk_shape_count(job->out.ndim - 2, job->out.shape + 2);
	}
	s->slab = s->L * s->S;
	for (size_t i = 0; i < n; i++) {
		struct gin *g;
		uint64_t N = s->nelem;
		if ((int)i == d->base || !job->used[i])
			continue;
		g = &s->g[s->n++];
		g->idx = (int)i;
		g->wd = mk_job_input_param(job, i, P_WEIGHT)->f;
		g->wf = (float)g->wd;
		g->density = mk_job_input_param(job, i, P_DENSITY)->f;
		if (P_EXTRA < m->nparams)
			g->extra = mk_job_input_param(job, i, P_EXTRA)->f;
		s->divf += g->wf;
		s->divd += g->wd;
		switch (input_sp(s->cfg, m, d, i, N)) {
		case SP_NONE:
			g->kind = K_DENSE;
			break;
		case SP_MAG:
			g->kind = K_MAG;
			g->k = int_frac(g->density, N);
			g->nt = 1;
			g->t[0].rank = N - g->k;     /* the k-th largest */
			break;
		case SP_OUTL: {
			uint64_t target = int_frac(g->density, N), ntop = int_frac(g->extra, N);
			uint64_t nbot = target + ntop >= N ? 0 : N - target - ntop;
			g->kind = K_OUTL;
			g->k = target;
			g->nt = 2;
			g->t[0].rank = nbot;
			g->t[1].rank = nbot + target - 1;
			break;
		}
		case SP_RAND:
			g->kind = K_RAND;
			g->stream = mk_rng_stream(d->seed, d->tensor, (uint64_t)i);
			g->pf = (float)g->density;
			g->pd = g->density;
			/* u < p with u = r * 2^-53 (r an integer < 2^53) is r < p * 2^53
			 * (exact scaling), that is r < ceil(p * 2^53) */
			g->thr = (uint64_t)ceil((s->f64 ? g->pd : (double)g->pf) * 0x1p53);
			/* with the rescale, its pass draws every element's mask
			 * and keeps it as one bit, which apply reads back instead
			 * of drawing again (so each element is drawn once): N/8
			 * bytes per input, what DELLA keeps too, 1/32 of the
			 * float32 range that pass reads, against two 64-bit
			 * multiplies per element (AVX2 has no vector one) */
			if (s->rescale && !(g->mask = calloc(N / 8 + 8, 1)))
				goto nomem;
			break;
		case SP_DELLA:
			if (g->density <= 0.0) {
				g->kind = K_ZERO;
				break;
			}
			g->kind = K_DELLA;
			if (!s->f64 && s->L > INT32_MAX) {
				/* the float32 ranks are 32-bit words (rank_row32,
				 * della_draw_row's gather) */
				rc = mk_err_set(err, MK_EINVAL,
						"tensor '%s': della ranks rows of at most 2147483647 elements in float32, its rows have %llu (merge it with dtype: float64)",
						d->tensor ? d->tensor : "?", (unsigned long long)s->L);
				free_state(s);
				return rc;
			}
			g->stream = mk_rng_stream(d->seed, d->tensor, (uint64_t)i);
			if (!(g->mask = calloc(N / 8 + 8, 1)) ||
			    !(g->prob = malloc((s->L ? s->L : 1) * sizeof(double))))
				goto nomem;
			if (s->f64 ? !(g->slab = malloc((s->slab ? s->slab : 1) * sizeof(uint64_t))) ||
				     !(g->rk = malloc(2 * (s->L ? s->L : 1) * sizeof(*g->rk)))
				   : !(g->key32 = malloc((s->slab ? s->slab : 1) * sizeof(uint32_t))) ||
				     !(g->w64 = malloc((2 * (s->L ? s->L : 1) + 1) * sizeof(uint64_t))) ||
				     !(g->rank = malloc((s->L ? s->L : 1) * sizeof(uint32_t))) ||
				     !(g->bix = malloc((2 * (s->L ? s->L : 1) + 16) * sizeof(uint32_t))) ||
				     !(g->mf = malloc((s->L ? s->L : 1) * sizeof(float))))
				goto nomem;
			for (uint64_t r = 0; r < s->L; r++)
				g->prob[r] = s->f64 ? mk_gta_della_prob_f64(r, s->L, g->density, g->extra)
						    : (double)mk_gta_della_prob_f32(r, s->L, g->density, g->extra);
			if (!s->f64) {
				/* u < p with u = r * 2^-53 is r < ceil(p * 2^53), as RAND's thr */
				if (!(g->dthr = malloc((s->L ? s->L : 1) * sizeof(uint64_t))) ||
				    !(g->cnt = malloc(6 * RANK_TABLE * sizeof(uint32_t))) ||
				    !(g->flag = malloc((s->L + 8) * sizeof(uint32_t))))
					goto nomem;
				bool up = false, down = false;
				g->dstep = 0;
				for (uint64_t r = 0; r < s->L; r++) {
					uint64_t t = g->dthr[r] = (uint64_t)ceil(g->prob[r] * 0x1p53);
					uint64_t step = r ? (t > g->dthr[r - 1] ? t - g->dthr[r - 1] : g->dthr[r - 1] - t) : 0;
					g->dstep = step > g->dstep ? step : g->dstep;
					up |= r && t > g->dthr[r - 1];
					down |= r && t < g->dthr[r - 1];
				}
				/* (linear in rank, so monotone; checked, not assumed) */
				g->dmono = !(up && down);
			}
			break;
		}
		for (unsigned t = 0; t < g->nt; t++)
			if (!(g->t[t].hist = calloc(NBUCKET, sizeof(uint64_t))) ||
			    (!s->f64 && !(g->t[t].sub = calloc(4 * (size_t)NBUCKET, sizeof(uint32_t)))))
				goto nomem;
	}
	if (fabsf(s->divf) < (float)1e-8)
		s->divf = 1.0f;
	if (fabs(s->divd) < 1e-8)
		s->divd = 1.0;
	if (!(s->wf = malloc((s->n ? s->n : 1) * sizeof(float))))
		goto nomem;
	for (size_t j = 0; j < s->n; j++)
		s->wf[j] = s->g[j].wf;
	s->mix = (struct gta_mix){ .cons = s->cfg->cons, .n = s->n, .w = s->wf, .normalize = s->normalize,
				   .scale_lam = s->scale_lam, .lam = s->lamf, .div = s->divf };
	if (!s->n)
		job->copy_input = d->base;
	/* accumulate runs the inputs on threads from 1 Mi elements on (see
	 * there): worth it for DELLA's ranking and DARE's draws (mk-yaml on
	 * three 300 MB BF16 models: della 2.21 -> 1.52 s, dare_ties 0.86-0.90
	 * -> 0.80-0.82 s); for the histograms only when the inputs are BF16
	 * (below): converted into buffers first, they were faster on one
	 * thread with their blocks in cache (ties 0.98 -> 1.16 s) */
	for (size_t j = 0; j < s->n; j++)
		if (s->g[j].kind == K_DELLA || s->g[j].kind == K_RAND)
			job->accumulate_chunk = 1u << 20;
	/* the selections' windows: float32, no rescale, the keys' two digits
	 * (every selection's input on the fast path) */
	s->win = !s->f64 && !s->rescale && s->nlevels == 2 && s->nelem >= WIN_MIN && s->nelem <= UINT32_MAX;
	for (size_t j = 0; j < s->n; j++)
		s->win &= fast_f32(s, &s->g[j]) || (s->g[j].kind != K_MAG && s->g[j].kind != K_OUTL);
	/* the plan's spare pass, counted in npasses: pass 1 from the start */
	s->spare = spare_wanted(job->method, &job->d, job->used);
	s->extra = s->spare;
	/* the float32 kernels widen BF16 inputs as they make each tile's
	 * |x - base| (tile_abs_bf16): no conversion pass before them */
	job->accumulate_bf16 = !s->f64 && job->compute == MK_DT_F32;
	for (size_t j = 0; j < s->n; j++)
		job->accumulate_bf16 &= fast_f32(s, &s->g[j]);
	/* and apply, every kind: its fused tiles widen on load, the others
	 * a tile at a time (tile_in) */
	job->apply_bf16 = !s->f64 && job->compute == MK_DT_F32 && s->n;
	/* BF16 inputs read as they are: no conversion buffer to keep in
	 * cache, so the histograms too run the inputs on threads (mk-yaml ties
	 * on three 300 MB BF16 models, six runs each: 0.90-1.09 -> 0.80-0.82 s) */
	bool raw = job->accumulate_bf16;
	for (size_t i = 0; i < d->ninputs; i++)
		raw &= !job->used[i] || d->in[i].dtype == MK_DT_BF16;
	if (raw)
		job->accumulate_chunk = 1u << 20;
	job->state = s;
	return 0;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	free_state(s);
	return rc;
}

/* ---------------------------------------------------------------- apply */

/* Whether element e of input g is kept (masked kinds only). */
static inline bool kept(const struct state *s, const struct gin *g, uint64_t key, uint64_t e)
{
	switch (g->kind) {
	case K_MAG:
	case K_OUTL:
		return sel_keep(g, key, e);
	case K_RAND:
		if (g->mask)
			return getbit(g->mask, e);
		return (mk_rng_u64(g->stream, e) >> 11) < g->thr;
	case K_DELLA:
		return getbit(g->mask, e);
	default:
		return true;
	}
}

#define GTA_APPLY(NAME, T, W, FAC, DIV, LAM, F64)					\
static void NAME(const struct state *s, const struct mk_job_chunk *c, const T *b,	\
		 T *o, T *v)								\
{											\
	const enum mk_gta_consensus cons = s->cfg->cons;				\
	for (uint64_t t0 = 0; t0 < c->count; t0 += TILE) {				\
		uint64_t cnt = c->count - t0 < TILE ? c->count - t0 : TILE;		\
		for (size_t j = 0; j < s->n; j++) {					\
			const struct gin *g = &s->g[j];					\
			const T *x = (const T *)c->in[g->idx] + t0;			\
			T *vj = v + j * TILE;						\
			for (uint64_t k = 0; k < cnt; k++) {				\
				T delta = x[k] - b[t0 + k], mk_;			\
				uint64_t key;						\
				if (g->kind == K_DENSE) {				\
					mk_ = delta;					\
				} else if (g->kind == K_ZERO) {				\
					mk_ = 0;					\
				} else {						\
					(void)delta_key(F64, x, b + t0, k, &key);	\
					mk_ = delta * (kept(s, g, key, c->elem_begin + t0 + k) \
						       ? (T)1 : (T)0);			\
					if (g->scale)					\
						mk_ = mk_ * g->FAC;			\
				}							\
				vj[k] = mk_ * g->W;					\
			}								\
		}									\
		for (uint64_t k = 0; k < cnt; k++) {					\
			T mix = 0, div = s->DIV;					\
			if (cons != MK_GTA_CONS_NONE) {					\
				T sw = cons == MK_GTA_CONS_SUM ? v[k] :		\
					(T)((v[k] > 0) - (v[k] < 0)), maj;		\
				for (size_t j = 1; j < s->n; j++) {			\
					T x_ = v[j * TILE + k];				\
					sw = cons == MK_GTA_CONS_SUM ? sw + x_ :	\
						sw + (T)((x_ > 0) - (x_ < 0));		\
				}							\
				maj = sw >= 0 ? (T)1 : (T)-1;				\
				for (size_t j = 0; j < s->n; j++) {			\
					T x_ = v[j * TILE + k];				\
					T sg = (T)((x_ > 0) - (x_ < 0));		\
					T kk = sg == maj ? (T)1 : (T)0;			\
					T tm = x_ * kk, tw = s->g[j].W * kk;		\
					mix = j ? mix + tm : tm;			\
					div = j ? div + tw : tw;			\
				}							\
				if (div == 0)						\
					div = 1;					\
			} else {							\
				mix = v[k];						\
				for (size_t j = 1; j < s->n; j++)			\
					mix = mix + v[j * TILE + k];			\
			}								\
			if (s->normalize)						\
				mix = mix / div;					\
			if (s->scale_lam)						\
				mix = mix * s->LAM;					\
			o[t0 + k] = b[t0 + k] + mix;					\
		}									\
	}										\
}
GTA_APPLY(apply_f64, double, wd, fd, divd, lamd, true)

/* The float32 apply, the common case, in loops the compiler vectorises:
 * the same operations in the same order as GTA_APPLY (so the same bits),
 * one kind of input at a time, the consensus over whole tiles.  A
 * selection's tie rule depends on the element index only inside the one
 * tile that holds its cut; elsewhere it is a plain comparison. */
static inline uint32_t f32_key(float d)
{
	uint32_t u;
	d = fabsf(d);
	memcpy(&u, &d, sizeof(u));
	return u;
}

/* A mask's bits of elements e0 .. e0 + cnt as 1.0f / 0.0f: whole bytes
 * through a table of the 256 bytes' eight values (mk_gta_byte_f32). */

static inline __attribute__((always_inline)) void tile_bits_f32(const uint8_t *restrict mask, uint64_t e0,
								uint64_t cnt, float *restrict m)
{
	uint64_t k = 0;

	for (; k < cnt && (e0 + k) % 8; k++)
		m[k] = getbit(mask, e0 + k) ? 1.0f : 0.0f;
	for (; k + 8 <= cnt; k += 8)
		memcpy(m + k, mk_gta_byte_f32[mask[(e0 + k) >> 3]], 8 * sizeof(float));
	for (; k < cnt; k++)
		m[k] = getbit(mask, e0 + k) ? 1.0f : 0.0f;
}

MK_HOT_CLONES
static void tile_f32(const struct state *s, const struct gin *g, uint64_t e0, uint64_t cnt,
		     const float *restrict x, const float *restrict b, float *restrict v)
{
	const float w = g->wf, f = g->ff;
	const bool scale = g->scale;

	switch (g->kind) {
	case K_DENSE:
		for (uint64_t k = 0; k < cnt; k++)
			v[k] = (x[k] - b[k]) * w;
		return;
	case K_ZERO:
		for (uint64_t k = 0; k < cnt; k++)
			v[k] = 0.0f * w;
		return;
	case K_MAG: {
		const uint32_t P = (uint32_t)g->t[0].prefix;
		const uint64_t cut = g->t[0].cut1;
		if (e0 < cut && cut < e0 + cnt) {
			for (uint64_t k = 0; k < cnt; k++) {
				float d = x[k] - b[k];
				uint32_t key = f32_key(d);
				v[k] = d * (key > P || (key == P && e0 + k < cut) ? 1.0f : 0.0f);
			}
		} else {
			const uint32_t lo = e0 + cnt <= cut ? P : P + 1;   /* ties kept: key >= P */
			for (uint64_t k = 0; k < cnt; k++) {
				float d = x[k] - b[k];
				v[k] = d * (f32_key(d) >= lo ? 1.0f : 0.0f);
			}
		}
		break;
	}
	case K_OUTL: {
		const uint32_t A = (uint32_t)g->t[0].prefix, Z = (uint32_t)g->t[1].prefix;
		const uint64_t ca = g->t[0].cut1, cz = g->t[1].cut1;
		if ((e0 < ca && ca < e0 + cnt) || (e0 < cz && cz < e0 + cnt)) {
			for (uint64_t k = 0; k < cnt; k++) {
				float d = x[k] - b[k];
				v[k] = d * (sel_keep(g, f32_key(d), e0 + k) ? 1.0f : 0.0f);
			}
		} else {
			/* lower end: ties of A kept from index ca on; upper: ties of Z
			 * kept below cz; as plain bounds lo <= key <= hi (64-bit so
			 * that an empty range stays empty) */
			const uint64_t lo = e0 >= ca ? A : (uint64_t)A + 1;
			const int64_t hi = e0 + cnt <= cz ? (int64_t)Z : (int64_t)Z - 1;
			for (uint64_t k = 0; k < cnt; k++) {
				float d = x[k] - b[k];
				int64_t key = f32_key(d);
				v[k] = d * ((uint64_t)key >= lo && key <= hi ? 1.0f : 0.0f);
			}
		}
		break;
	}
	case K_RAND:
		if (!g->mask) {
			/* no rescale pass: the one draw of each element */
			const uint64_t st = g->stream, thr = g->thr;
			for (uint64_t k = 0; k < cnt; k++) {
				float d = x[k] - b[k];
				v[k] = d * ((mk_rng_u64(st, e0 + k) >> 11) < thr ? 1.0f : 0.0f);
			}
			break;
		}
		/* fall through: the bits its pass drew */
		__attribute__((fallthrough));
	case K_DELLA:
		tile_bits_f32(g->mask, e0, cnt, v);
		for (uint64_t k = 0; k < cnt; k++)
			v[k] = (x[k] - b[k]) * v[k];
		break;
	}
	if (scale)
		for (uint64_t k = 0; k < cnt; k++)
			v[k] = v[k] * f;
	for (uint64_t k = 0; k < cnt; k++)
		v[k] = v[k] * w;
}

/* The fused apply (gta_simd.h's fused_tile, where the CPU has one) takes
 * a tile whose every input's mask is plain: per eight or sixteen
 * elements, each input's delta, mask, rescale and weight (tile_f32's
 * operations, in its order) in registers, then the merge of mix_tile on
 * them, so that the tile is read once and nothing goes through memory in
 * between.  Whether input g's mask is plain over elements e0 .. e0 + cnt
 * (no cut inside, no draw in apply), and how; false: tile_f32 takes it. */
static bool fuse_of(const struct gin *g, uint64_t e0, uint64_t cnt, const void *x, struct fuse_in *fi)
{
	*fi = (struct fuse_in){ .x = x, .scale = g->scale, .f = g->ff, .w = g->wf };
	switch (g->kind) {
	case K_DENSE:
		fi->kind = FU_DENSE;
		return true;
	case K_ZERO:
		fi->kind = FU_ZERO;
		return true;
	case K_MAG: {
		const uint32_t P = (uint32_t)g->t[0].prefix;
		const uint64_t cut = g->t[0].cut1;
		if (e0 < cut && cut < e0 + cnt)
			return false;
		fi->kind = FU_RANGE;
		if (e0 + cnt <= cut)
			fi->lo = P;
		else if (P == UINT32_MAX)
			fi->none = true;
		else
			fi->lo = P + 1;
		fi->hi = UINT32_MAX;
		return true;
	}
	case K_OUTL: {
		const uint32_t A = (uint32_t)g->t[0].prefix, Z = (uint32_t)g->t[1].prefix;
		const uint64_t ca = g->t[0].cut1, cz = g->t[1].cut1;
		uint64_t lo;
		int64_t hi;
		if ((e0 < ca && ca < e0 + cnt) || (e0 < cz && cz < e0 + cnt))
			return false;
		lo = e0 >= ca ? A : (uint64_t)A + 1;
		hi = e0 + cnt <= cz ? (int64_t)Z : (int64_t)Z - 1;
		fi->kind = FU_RANGE;
		if (hi < 0 || lo > UINT32_MAX || (int64_t)lo > hi) {
			fi->none = true;
		} else {
			fi->lo = (uint32_t)lo;
			fi->hi = (uint32_t)hi;
		}
		return true;
	}
	case K_RAND:
		if (!g->mask)
			return false;
		__attribute__((fallthrough));
	case K_DELLA:
		fi->kind = FU_BITS;
		fi->mask = g->mask;
		return true;
	}
	return false;
}

/* Elements [t0, t0 + cnt) of a chunk's input p as float32: where they
 * are, or (bf16) widened into w. */
static const float *tile_in(const void *p, bool bf16, uint64_t t0, uint64_t cnt, float *w)
{
	if (!bf16)
		return (const float *)p + t0;
	mk_dtype_convert(MK_DT_F32, w, MK_DT_BF16, (const uint16_t *)p + t0, cnt);
	return w;
}

/* v: (n + 3) tiles of scratch, and with BF16 inputs n + 1 more. */
static void apply_f32(const struct state *s, const struct mk_job_chunk *c, const void *b,
		      float *o, float *v)
{
	float *sw = v + s->n * TILE, *wide = sw + 3 * TILE;
	const size_t es = c->bf16 ? 2 : 4;

	for (uint64_t t = 0; t < c->count; t += TILE) {
		uint64_t t0 = t, cnt = c->count - t < TILE ? c->count - t : TILE;
		if (mk_gta_simd.fused_tile && s->n <= FUSE_MAX) {
			struct fuse_in fi[FUSE_MAX];
			bool fuse = true;
			for (size_t j = 0; j < s->n && fuse; j++)
				fuse = fuse_of(&s->g[j], c->elem_begin + t0, cnt,
					       (const char *)c->in[s->g[j].idx] + t0 * es, &fi[j]);
			if (fuse) {
				/* (AVX2: to the last multiple of 8; the rest below) */
				uint64_t done = mk_gta_simd.fused_tile(&s->mix, fi, c->elem_begin + t0, cnt,
								       (const char *)b + t0 * es, o + t0, c->bf16);
				t0 += done, cnt -= done;
				if (!cnt)
					continue;
			}
		}
		const float *bt = tile_in(b, c->bf16, t0, cnt, wide + s->n * TILE);
		for (size_t j = 0; j < s->n; j++)
			tile_f32(s, &s->g[j], c->elem_begin + t0, cnt,
				 tile_in(c->in[s->g[j].idx], c->bf16, t0, cnt, wide + j * TILE), bt, v + j * TILE);
		mk_gta_simd.mix_tile(&s->mix, cnt, v, bt, o + t0, sw);
	}
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct state *s = job->state;
	const void *b = c->in[job->d.base];
	void *v;

	v = malloc((2 * s->n + 4) * TILE * (s->f64 ? 8 : 4) + 64);
	if (!v)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (s->f64)
		apply_f64(s, c, b, out, v);
	else
		apply_f32(s, c, b, out, v);
	free(v);
	return 0;
}

/* The device hook: apply_f32 is the device's TASK_ARITHMETIC kernel with
 * each input's selection as its passes left it (or COPY of the base when
 * no input but the base is used). */
static enum mk_device_kernel device_kernel(const struct mk_job *job)
{
	const struct state *s = job->state;

	if (!s || s->f64)
		return MK_DEVICE_NONE;
	return s->n ? MK_DEVICE_TASK_ARITHMETIC : MK_DEVICE_COPY;
}

static int device_state(const struct mk_job *job, struct mk_device_job *dj, struct mk_err *err)
{
	static const enum mk_device_sparsify kinds[] = {
		[K_DENSE] = MK_DEVICE_DENSE, [K_ZERO] = MK_DEVICE_ZERO, [K_MAG] = MK_DEVICE_MAGNITUDE,
		[K_OUTL] = MK_DEVICE_OUTLIERS, [K_RAND] = MK_DEVICE_RANDOM, [K_DELLA] = MK_DEVICE_DELLA,
	};
	static const enum mk_device_consensus cons[] = {
		[MK_GTA_CONS_NONE] = MK_DEVICE_CONS_NONE, [MK_GTA_CONS_SUM] = MK_DEVICE_CONS_SUM,
		[MK_GTA_CONS_COUNT] = MK_DEVICE_CONS_COUNT,
	};
	struct state *s = job->state;

	if (device_kernel(job) == MK_DEVICE_NONE)
		return mk_err_set(err, MK_EUNSUPPORTED, "method '%s', tensor '%s': no device kernel for %s",
				  job->method->name, job->d.tensor ? job->d.tensor : "?", mk_dtype_name(job->compute));
	if (!s->ex && s->n && !(s->ex = calloc(s->n, sizeof(*s->ex))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t j = 0; j < s->n; j++) {
		const struct gin *g = &s->g[j];
		s->ex[j] = (struct mk_device_input){
			.idx = g->idx, .w = g->wf, .kind = kinds[g->kind], .scale = g->scale, .factor = g->ff,
			.lo_key = (uint32_t)g->t[0].prefix, .hi_key = (uint32_t)g->t[1].prefix,
			.lo_cut1 = g->t[0].cut1, .hi_cut1 = g->t[1].cut1,
			.stream = g->stream, .thr = g->thr, .mask = g->mask,
		};
	}
	*dj = (struct mk_device_job){ .kernel = device_kernel(job), .base = job->d.base, .other = -1,
				      .cons = cons[s->cfg->cons], .normalize = s->normalize,
				      .scale_lam = s->scale_lam, .lam = s->lamf, .div = s->divf, .n = s->n,
				      .in = s->ex };
	return 0;
}

static const struct mk_device_hook device_hook = { .kernel = device_kernel, .state = device_state };

static void release(struct mk_job *job)
{
	free_state(job->state);
	job->state = NULL;
}

/* -------------------------------------------------------------- methods */

#define GTA_METHOD(SYM, NAME, PRETTY, URL, PARAMS)					\
const struct mk_method SYM = {								\
	.abi = MK_METHOD_ABI,								\
	.name = NAME,									\
	.pretty_name = PRETTY,								\
	.reference_url = URL,								\
	.params = PARAMS,								\
	.nparams = sizeof(PARAMS) / sizeof(PARAMS[0]),					\
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = MK_ARITY_ANY, \
		      .min_non_base = 0, .max_non_base = MK_ARITY_ANY },		\
	.device = &device_hook,								\
	.output = output,								\
	.npasses = npasses,								\
	.init = init,									\
	.accumulate = mk_gta_accumulate,							\
	.finish = mk_gta_finish,								\
	.apply = apply,									\
	.release = release,								\
}

GTA_METHOD(mk_method_task_arithmetic, "task_arithmetic", "Task Arithmetic",
	   "https://arxiv.org/abs/2212.04089", p_task_arithmetic);
GTA_METHOD(mk_method_ties, "ties", "TIES", "https://arxiv.org/abs/2306.01708", p_ties);
GTA_METHOD(mk_method_dare_linear, "dare_linear", "Linear DARE",
	   "https://arxiv.org/abs/2311.03099", p_dare);
GTA_METHOD(mk_method_dare_ties, "dare_ties", "DARE TIES",
	   "https://arxiv.org/abs/2311.03099", p_dare);
GTA_METHOD(mk_method_breadcrumbs, "breadcrumbs", "Model Breadcrumbs",
	   "https://arxiv.org/abs/2312.06795", p_breadcrumbs);
GTA_METHOD(mk_method_breadcrumbs_ties, "breadcrumbs_ties", "Model Breadcrumbs with TIES",
	   "https://arxiv.org/abs/2312.06795", p_breadcrumbs);
GTA_METHOD(mk_method_della, "della", "DELLA", "https://arxiv.org/abs/2406.11617", p_della);
GTA_METHOD(mk_method_della_linear, "della_linear", "Linear DELLA",
	   "https://arxiv.org/abs/2406.11617", p_della_linear);
/* Not registered: ties with count consensus (mergekit's unreachable
 * ConsensusMethod.count), for tests. */
GTA_METHOD(mk_gta_method_ties_count, "ties_count_consensus", "TIES (count consensus)", NULL,
	   p_ties);
