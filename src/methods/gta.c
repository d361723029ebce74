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
 * (struct lsum below), rounded to the compute dtype before the division,
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
#include "rng.h"
#include "core/simd.h"
#include "core/pool.h"
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

/* ----------------------------------------------------------------- state */

#define NBUCKET 65536u
#define RANK_TABLE 4096u        /* DELLA: rank_row32's buckets */

/* The window (struct target): opened once the first digit pass reaches
 * an eighth of tensors of at least WIN_MIN elements; its buckets hold the
 * ranks within WIN_FRAC of the target's, as the first eighth has them
 * (for about 2 * WIN_FRAC of the elements, 8 bytes each, the arrays grown
 * as they fill; at most a sixteenth of them and WIN_CAP, else it is
 * dropped and the last digit pass reads everything).  (1/64 held four
 * times as many and took mk-merge over its budget in test/cli/memory.sh.)
 * A held job's windows also count (state.wcount): past w0 the first
 * digit pass counts no histogram, only the elements below each window;
 * its finish takes the window's keys into the histogram of [0, w0) when
 * the rank lies among the window's buckets, else adds a pass that counts
 * [w0, N) into the histogram (level_of).  So do a streamed job's when the
 * plan offered a spare pass (spare_wanted): that pass is the one added.  mk-yaml ties on three 7B-like
 * BF16 models of two layers: 1.32 -> 1.22 s, medians of 9 interleaved
 * runs (the embeddings, streamed, not held, keep the full histogram). */
#define WIN_MIN (1ull << 18)
#define WIN_FRAC (1.0 / 256)
#define WIN_CAP (2ull << 20)    /* entries: 16 MiB */

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

enum kind { K_DENSE, K_ZERO, K_MAG, K_OUTL, K_RAND, K_DELLA };


/* One order statistic being selected: the element of ascending rank
 * `rank` by (|delta| bits, index). */
struct target {
	uint64_t rank;
	uint64_t prefix;    /* digits chosen so far, then the key V itself */
	uint64_t below;     /* elements whose key is below the prefix's range */
	uint64_t eq;        /* elements whose key equals V */
	uint64_t need;      /* cut pass: which tie (1-based) sets the cut; 0: none */
	uint64_t seen;      /* cut pass: ties met so far */
	uint64_t cut1;      /* index + 1 of the need-th tie (0 when need = 0) */
	uint64_t *hist;     /* [NBUCKET] */
	/* float32: four histograms counted round robin (element k into
	 * sub[k % 4]), so that a run of equal digits (common: a bf16 model's
	 * deltas have few distinct values, their low digits mostly 0) makes
	 * four chains of increments instead of one; added into hist at the
	 * end of the pass, or before a count could pass 2^32 */
	uint32_t *sub;      /* [4][NBUCKET] */
	uint64_t since;     /* elements counted into sub since it was added */
	/* float32 without a rescale, when the last digit's bucket is small:
	 * its elements (index, low digit) in order, recorded by the last
	 * digit pass so that it finds the cut itself and the cut pass has
	 * nothing to do.  NULL: none (the cut pass finds it) */
	uint32_t *ridx;     /* [rcap + TILE + 16] */
	uint16_t *rlo;      /* [rcap + TILE + 16] */
	uint64_t nrec, rcap;
	/* float32 without a rescale, the first digit pass: from element w0
	 * on, the elements whose key's upper half lies in [wlo, whi] (the
	 * buckets around where the histogram of [0, w0) puts the rank), index
	 * and key in order.  When the cut's bucket is among them (wuse), the
	 * last digit pass reads only [0, w0) and takes [w0, N) from here
	 * (wdone).  w0 0: not opened yet; widx NULL: none (dropped, or taken
	 * in); wuse is set by the first digit pass's finish */
	uint64_t w0;
	uint32_t wlo, whi;
	uint32_t *widx;     /* [wroom] */
	uint32_t *wkey;     /* [wroom] */
	uint64_t nw, wcap, wroom;
	bool wuse, wdone;
	/* the elements of [w0, N) whose key's upper half is below wlo; when
	 * the job's windows count (state.wcount) these and the window stand
	 * for the histogram of [w0, N), which the first digit pass then does
	 * not count.  redo: they did not hold the rank (or the window was
	 * dropped), so the pass finish added counts [w0, N) into it */
	uint64_t wbelow;
	bool redo;
};

struct gin {
	int idx;
	enum kind kind;
	float wf;
	double wd;
	double density, extra;
	uint64_t k;                 /* MAG: elements kept; OUTL: target */
	struct target t[2];         /* MAG: t[0]; OUTL: t[0] lower, t[1] upper end */
	unsigned nt;
	struct lsum before, after;
	bool scale;                 /* rescale factor applies */
	float ff;
	double fd;
	uint64_t stream;            /* RAND, DELLA */
	float pf;                   /* RAND: density in the compute dtype */
	double pd;
	uint64_t thr;               /* RAND: kept when (mk_rng_u64 >> 11) < thr */
	uint8_t *mask;              /* DELLA, RAND with rescale: kept bits [N] (+ 8 bytes) */
	uint64_t *slab;             /* DELLA float64: keys of the current slab */
	uint32_t *key32;            /* DELLA float32: keys of the current slab */
	double *prob;               /* DELLA: keep probability by rank [L] */
	struct rk *rk;              /* DELLA: one row being ranked, and room to sort [2L] */
	uint64_t *dthr;             /* DELLA float32: kept when (mk_rng_u64 >> 11) < thr[rank] [L] */
	uint64_t dstep;             /* DELLA float32: the largest |dthr[r + 1] - dthr[r]| */
	bool dmono;                 /* DELLA float32: dthr monotone in rank (della_settle_row) */
	uint32_t *cnt;              /* DELLA float32: rank_row32's two count tables, then
				     * della_settle_row's sorted classes [3][2 * RANK_TABLE] */
	uint32_t *flag;             /* DELLA float32: the row's draws to check [L + 8] */
	uint64_t *w64;              /* DELLA float32: words to sort [2L + 1] */
	uint32_t *rank;             /* DELLA float32: each row element's rank [L] */
	uint32_t *bix;              /* DELLA float32: each row element's class [L], then
				     * the indices of the nonzero lower halves [L + 16] */
	float *mf;                  /* DELLA float32: a row's keys, kept |delta| [L] */
};

struct rk {
	uint64_t key;
	uint64_t j;
};

struct state {
	const struct cfg *cfg;
	size_t n;                   /* used non-base inputs */
	struct gin *g;
	bool f64, normalize, rescale, scale_lam;
	float lamf, divf;
	double lamd, divd;
	unsigned nlevels, keybits;
	bool win;                   /* the selections open windows (struct target) */
	bool wcount;                /* ... and count past them (a held job: a pass added costs
				     * no input read again; or the plan's spare pass) */
	bool spare;                 /* the plan's spare pass is pass 1 (spare_wanted) */
	unsigned extra;             /* 1: pass 1 repeats the first digit pass (level_of) */
	uint64_t nelem;
	uint64_t L, S, slab;        /* DELLA rows: length, stride, slab = L*S */
	struct mk_device_input *ex;       /* the device hook's inputs [n] */
	struct gta_mix mix;         /* the float32 merge's parameters, for gta_simd.h */
	float *wf;                  /* mix.w: each input's weight [n] */
};


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

static inline bool fast_f32(const struct state *s, const struct gin *g);

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

/* ------------------------------------------------------------ primitives */

/* delta and its key (the bits of |delta|; ordered like |delta|, NaN last). */
static inline double delta_key(bool f64, const void *x, const void *b, uint64_t k, uint64_t *key)
{
	if (f64) {
		double d = ((const double *)x)[k] - ((const double *)b)[k], a = fabs(d);
		memcpy(key, &a, sizeof(a));
		return d;
	} else {
		float d = ((const float *)x)[k] - ((const float *)b)[k], a = fabsf(d);
		uint32_t u;
		memcpy(&u, &a, sizeof(u));
		*key = u;
		return d;
	}
}

static inline double key_value(bool f64, uint64_t key)
{
	if (f64) {
		double a;
		memcpy(&a, &key, sizeof(a));
		return a;
	} else {
		uint32_t u = (uint32_t)key;
		float a;
		memcpy(&a, &u, sizeof(a));
		return a;
	}
}

static inline void fsum_add(struct lsum *s, uint64_t e, double v)
{
	s->lane[e % LSUM_LANES] += v;
	if ((e + 1) % MK_SUM_BLOCK == 0)
		lsum_close(s);
}

static inline bool getbit(const uint8_t *m, uint64_t e)
{
	return (m[e >> 3] >> (e & 7)) & 1;
}

float mk_gta_della_prob_f32(uint64_t rank0, uint64_t len, double density, double epsilon)
{
	float q;

	if (len < 2)
		return (float)density;
	q = ((float)(rank0 + 1) - 1.0f) / ((float)len - 1.0f);
	if (q < 0.0f)
		q = 0.0f;
	if (q > 1.0f)
		q = 1.0f;
	return (float)(density - epsilon) + q * 2.0f * (float)epsilon;
}

double mk_gta_della_prob_f64(uint64_t rank0, uint64_t len, double density, double epsilon)
{
	double q;

	if (len < 2)
		return density;
	q = ((double)(rank0 + 1) - 1.0) / ((double)len - 1.0);
	if (q < 0.0)
		q = 0.0;
	if (q > 1.0)
		q = 1.0;
	return (density - epsilon) + q * 2.0 * epsilon;
}

/* Kept by a selection, in apply (cuts known). */
static inline bool sel_keep(const struct gin *g, uint64_t key, uint64_t e)
{
	const struct target *a = &g->t[0], *z = &g->t[1];

	if (g->kind == K_MAG)
		return key > a->prefix || (key == a->prefix && e < a->cut1);
	return (key > a->prefix || (key == a->prefix && e >= a->cut1)) &&
	       (key < z->prefix || (key == z->prefix && e < z->cut1));
}

/* Kept by a selection, during the cut pass (elements in order). */
static inline bool sel_keep_scan(struct gin *g, uint64_t key, uint64_t e)
{
	struct target *a = &g->t[0], *z = &g->t[1];
	bool lo, hi;

	if (g->kind == K_MAG) {
		if (key != a->prefix)
			return key > a->prefix;
		if (++a->seen == a->need)
			a->cut1 = e + 1;
		return a->seen <= a->need;
	}
	lo = key > a->prefix;
	if (key == a->prefix) {
		if (++a->seen == a->need)
			a->cut1 = e + 1;
		lo = a->seen > a->need;    /* the first `need` ties are dropped */
	}
	hi = key < z->prefix;
	if (key == z->prefix) {
		if (++z->seen == z->need)
			z->cut1 = e + 1;
		hi = z->seen <= z->need;
	}
	return lo && hi;
}

/* Add a target's four float32 histograms into its hist, and clear them. */
/* No record: the cut pass finds the cut. */
static void rec_drop(struct target *tg)
{
	free(tg->ridx);
	free(tg->rlo);
	tg->ridx = NULL;
	tg->rlo = NULL;
	tg->nrec = tg->rcap = 0;
}

/* The most elements a selection records (6 bytes each): a sixteenth of
 * the tensor's, at most 4 Mi (24 MiB). */
#define REC_MAX (4ull << 20)

static void win_drop(struct target *tg)
{
	free(tg->widx);
	free(tg->wkey);
	tg->widx = tg->wkey = NULL;
	tg->nw = tg->wcap = tg->wroom = 0;
}

static void sub_flush(struct target *tg)
{
	uint32_t *h = tg->sub;

	for (size_t b = 0; b < NBUCKET; b++)
		tg->hist[b] += (uint64_t)h[b] + h[b + NBUCKET] + h[b + 2 * NBUCKET] + h[b + 3 * NBUCKET];
	memset(h, 0, 4 * (size_t)NBUCKET * sizeof(uint32_t));
	tg->since = 0;
}

/* DELLA: rank one slab's rows, draw the mask, sum |kept delta|.  A row
 * is ranked by a stable LSD radix sort on its keys, 8 bits a digit (the
 * digits all elements share skipped): the rows start in index order, so
 * equal keys keep the lower index first, the order (key, index) a
 * comparison sort would give, in a few linear passes instead of
 * L log L comparisons. */
static const struct rk *rank_sort(struct rk *r, struct rk *tmp, uint64_t L, unsigned keybits)
{
	uint64_t cnt[8][256];
	unsigned nd = keybits / 8;

	memset(cnt, 0, nd * sizeof(cnt[0]));
	for (uint64_t i = 0; i < L; i++)
		for (unsigned d = 0; d < nd; d++)
			cnt[d][(r[i].key >> (8 * d)) & 0xff]++;
	for (unsigned d = 0; d < nd; d++) {
		unsigned sh = 8 * d;
		uint64_t pos = 0, *c = cnt[d];
		struct rk *t;
		if (c[(r[0].key >> sh) & 0xff] == L)
			continue;           /* one digit for all: the order stays */
		for (unsigned v = 0; v < 256; v++) {
			uint64_t x = c[v];
			c[v] = pos;
			pos += x;
		}
		for (uint64_t i = 0; i < L; i++)
			tmp[c[(r[i].key >> sh) & 0xff]++] = r[i];
		t = r, r = tmp, tmp = t;
	}
	return r;
}

/* The float32 rows: (key << 32 | index) sorted as one 64-bit word on its
 * upper half (rank_sort's order), the mask then drawn in index order. */
static const uint64_t *rank_sort32(uint64_t *r, uint64_t *tmp, uint64_t L)
{
	uint64_t cnt[4][256];

	memset(cnt, 0, sizeof(cnt));
	for (uint64_t i = 0; i < L; i++)
		for (unsigned d = 0; d < 4; d++)
			cnt[d][(r[i] >> (32 + 8 * d)) & 0xff]++;
	for (unsigned d = 0; d < 4; d++) {
		unsigned sh = 32 + 8 * d;
		uint64_t pos = 0, *c = cnt[d], *t;
		if (c[(r[0] >> sh) & 0xff] == L)
			continue;
		for (unsigned v = 0; v < 256; v++) {
			uint64_t x = c[v];
			c[v] = pos;
			pos += x;
		}
		for (uint64_t i = 0; i < L; i++)
			tmp[c[(r[i] >> sh) & 0xff]++] = r[i];
		t = r, r = tmp, tmp = t;
	}
	return r;
}

/* The least nonzero and the greatest upper halves (key >> 16) of a
 * row's float32 keys (lo > hi when all keys are 0). */
MK_HOT_CLONES
static void row_span16(const uint32_t *restrict key, uint64_t L, uint32_t *lo, uint32_t *hi)
{
	uint32_t mn = UINT32_MAX, mx = 0;

	for (uint64_t j = 0; j < L; j++) {
		uint32_t k = key[j], u = k >> 16, v = u | (0u - (uint32_t)(k == 0));
		mn = v < mn ? v : mn;
		mx = u > mx ? u : mx;
	}
	*lo = mn, *hi = mx;
}

/* rank[j] += start[bix[j]]. */
MK_HOT_CLONES
static void row_rank_add(uint32_t *restrict rank, const uint32_t *restrict bix,
			 const uint32_t *restrict start, uint64_t L)
{
	for (uint64_t j = 0; j < L; j++)
		rank[j] += start[bix[j]];
}

/* Sort the words x[0..nb) (key << 32 | index) ascending: insertion when
 * few, else rank_sort32 (w: room for nb). */
static void bucket_sort32(uint64_t *x, uint64_t *w, uint32_t nb)
{
	uint32_t i = 1;

	while (i < nb && x[i - 1] < x[i])
		i++;
	if (i >= nb)
		return;
	if (nb > 64) {
		const uint64_t *r = rank_sort32(x, w, nb);
		if (r != x)
			memcpy(x, r, nb * sizeof(uint64_t));
		return;
	}
	for (; i < nb; i++) {
		uint64_t y = x[i];
		uint32_t q = i;
		for (; q && x[q - 1] > y; q--)
			x[q] = x[q - 1];
		x[q] = y;
	}
}

/* What rank_row32 leaves for the draw and della_settle_row: the row's
 * nonzero lower halves (nd, their indices after bix[L]), its classes (nc,
 * their starts in g->cnt) and the most elements a class of nonzero lower
 * halves holds (most; 0 when every rank is exact). */
struct row_ranked {
	uint64_t nd;
	uint32_t nc, most;
	bool narrow;                /* the starts are 16-bit words */
};

/* Class x's start (rank_row32's tables). */
static inline uint32_t class_start(const struct gin *g, struct row_ranked rr, uint32_t x)
{
	return rr.narrow ? ((const uint16_t *)(const void *)g->cnt)[x] : g->cnt[x];
}

/* The ranks of a row's float32 keys key[0..L) (contiguous) in the order
 * (key, index), rank_sort32's order, into g->rank.  When the keys' upper
 * halves span at most RANK_TABLE - 1 values (bfloat16 models' deltas: a
 * few octaves, few mantissa bits), not many more than L, and L < 2^31,
 * by counting on the classes of row_classes: one pass gives each element
 * its place among its class's (index order) and counts the classes, the
 * two halves of the row into two tables (two chains of increments, not
 * one, where runs of one class are common); the classes' starts then
 * make the ranks.  A class of nonzero lower halves may hold several
 * keys in another order than their indices': its elements' ranks are
 * then places in the class's range, not yet their own, and
 * della_settle_row sorts the class where its draws need that.  The
 * counts are 16-bit words where L <= 65535 (rr.narrow; g->cnt has room
 * past the two tables for row_rank_add16_avx2's wider reads), else
 * 32-bit.  Else rank_sort32 on the whole row (every rank exact). */
/* Each element's place among its class's (index order), the counts of
 * the first half's classes into T0 and the second's into T1. */
#define COUNT_CLASSES(T0, T1) do {						\
		for (uint64_t j = 0; j < h; j++) {				\
			uint32_t a = bix[j], b = bix[h + j];			\
			rank[j] = (T0)[a]++;					\
			rank[h + j] = (T1)[b]++;				\
		}								\
		if (L % 2)							\
			rank[L - 1] = (T1)[bix[L - 1]]++;			\
	} while (0)

static struct row_ranked rank_row32(struct gin *g, const uint32_t *restrict key, uint64_t L)
{
	uint64_t *w = g->w64, *tmp = w + L;
	uint32_t *rank = g->rank, *bix = g->bix, *c0 = g->cnt, *c1;
	uint32_t lo, hi, span, nc, most, *dl = g->bix + L;
	uint64_t h = L / 2, nd;

	row_span16(key, L, &lo, &hi);
	span = lo > hi ? 1 : hi - lo + 2;
	if (span > RANK_TABLE || span > L + 1024 || L > INT32_MAX) {
		/* (a short row of keys spread wide: its classes would cost
		 * more than the row) */
		const uint64_t *r;
		for (uint64_t j = 0; j < L; j++)
			w[j] = (uint64_t)key[j] << 32 | j;
		r = rank_sort32(w, tmp, L);
		for (uint64_t i = 0; i < L; i++)
			rank[(uint32_t)r[i]] = (uint32_t)i;
		return (struct row_ranked){ 0, 0, 0, false };
	}
	nc = (2 * span + 15) & ~15u;     /* class_starts takes 16 at a time */
	nd = mk_gta_simd.row_classes(key, L, lo, bix, dl);
	if (L <= UINT16_MAX) {
		/* 16-bit counts: the tables' clearing and scan, which grow with
		 * the span, not the row (about 2.5 classes an element in rows
		 * of 1024), take half the bytes (with AVX-512 too: on an AMD
		 * Zen 5 mk-bench-kernels -c 1024 della 1.23-1.24 -> 1.32-1.36
		 * GB/s against the 32-bit tables, the AVX-512 scan included) */
		uint16_t *s0 = (uint16_t *)(void *)g->cnt, *s1 = s0 + nc;
		memset(s0, 0, 2 * nc * sizeof(uint16_t));
		COUNT_CLASSES(s0, s1);
		most = mk_gta_simd.class_starts16(s0, s1, nc);
		mk_gta_simd.rank_add16(rank, bix, s0, h);
		mk_gta_simd.rank_add16(rank + h, bix + h, s1, L - h);
		return (struct row_ranked){ nd, nc, most > 1 ? most : 0, true };
	}
	c1 = c0 + nc;
	memset(c0, 0, 2 * nc * sizeof(uint32_t));
	COUNT_CLASSES(c0, c1);
	most = mk_gta_simd.class_starts(c0, c1, nc);
	row_rank_add(rank, bix, c0, h);
	row_rank_add(rank + h, bix + h, c1, L - h);
	return (struct row_ranked){ nd, nc, most > 1 ? most : 0, false };
}
#undef COUNT_CLASSES

/* How far a draw's threshold may be from the one of its element's own
 * rank: the ranks of a class of rr.most elements differ by at most
 * rr.most - 1, neighbouring thresholds by at most dstep (the bound holds
 * for any thresholds, not only monotone ones); at least 2^54 (every
 * draw checked) where it is larger than that. */
static uint64_t della_margin(const struct gin *g, struct row_ranked rr)
{
	if (rr.most < 2 || !g->dstep)
		return 0;
	if (rr.most - 1 > (UINT64_C(1) << 54) / g->dstep)
		return UINT64_C(1) << 54;
	return (uint64_t)(rr.most - 1) * g->dstep;
}

/* The flagged draws of a row (flag[0..nf), indices into it; element j is
 * element e0 + j * stride of the tensor), drawn against the threshold of
 * a rank in its class's range: where the element's class holds several
 * nonzero lower halves, it is drawn again on its own rank (its class
 * sorted, once, among the nonzero lower halves placed by their ranks),
 * the mask bit set or cleared and m[j] (when m) set -- unless the
 * thresholds are monotone and its random number lies outside those at
 * the range's two ends (then every rank of the range draws the same). */
static void della_settle_row(struct gin *g, const uint32_t *restrict key, uint64_t L, struct row_ranked rr,
			     uint64_t e0, uint64_t stride, const uint32_t *flag, uint32_t nf, float *m)
{
	const uint32_t *bix = g->bix, *dl = g->bix + L;
	const uint64_t *thr = g->dthr;
	uint8_t *sorted = (uint8_t *)(void *)(g->cnt + 2 * rr.nc);
	uint64_t *w = g->w64, *tmp = w + L;
	uint32_t *rank = g->rank;
	bool placed = false;

	for (uint32_t q = 0; q < nf; q++) {
		uint32_t j = flag[q], x = bix[j], b0 = class_start(g, rr, x);
		uint32_t nb = (x + 1 < rr.nc ? class_start(g, rr, x + 1) : (uint32_t)L) - b0;
		uint64_t e = e0 + j * stride, u = mk_rng_u64(g->stream, e) >> 11, ta, tb;
		bool keep;
		if (!(x & 1) || nb < 2)
			continue;               /* its rank is its own */
		ta = thr[b0], tb = thr[b0 + nb - 1];
		if (g->dmono && (u < (ta < tb ? ta : tb) || u >= (ta < tb ? tb : ta)))
			continue;               /* the same draw at every rank of the class */
		if (!placed) {
			for (uint64_t p = 0; p < rr.nd; p++)
				tmp[rank[dl[p]]] = (uint64_t)key[dl[p]] << 32 | dl[p];
			memset(sorted, 0, rr.nc);
			placed = true;
		}
		if (!sorted[x]) {
			bucket_sort32(tmp + b0, w, nb);
			for (uint32_t i = 0; i < nb; i++)
				rank[(uint32_t)tmp[b0 + i]] = b0 + i;
			sorted[x] = 1;
		}
		keep = u < thr[rank[j]];
		g->mask[e >> 3] = (uint8_t)((g->mask[e >> 3] & ~(1u << (e & 7))) | (unsigned)keep << (e & 7));
		if (m) {
			float a;
			memcpy(&a, &key[j], sizeof(a));
			m[j] = keep ? a : 0.0f;
		}
	}
}

/* DELLA float32: rank the slab's rows, draw the mask, sum |kept delta|
 * (in element order). */
static void della_slab32(struct state *s, struct gin *g, uint64_t start)
{
	const uint64_t L = s->L, S = s->S;

	if (S == 1) {
		struct row_ranked rr = rank_row32(g, g->key32, L);
		uint32_t nf = mk_gta_simd.della_draw_row(g->stream, start, 0, L, g->rank, g->dthr, g->key32, g->mask,
							 g->mf, della_margin(g, rr), g->flag, 0);
		della_settle_row(g, g->key32, L, rr, start, 1, g->flag, nf, g->mf);
		mk_gta_fsum_run_f32(&g->after, start, g->mf, L);   /* x + 0.0 is x: terms >= 0 */
		return;
	}
	for (uint64_t c = 0; c < S; c++) {
		uint32_t *row = (uint32_t *)(void *)g->mf;
		for (uint64_t j = 0; j < L; j++)
			row[j] = g->key32[j * S + c];
		struct row_ranked rr = rank_row32(g, row, L);
		uint64_t margin = della_margin(g, rr);
		uint32_t nf = 0;
		for (uint64_t j = 0; j < L; j++) {
			uint64_t e = start + j * S + c, u = mk_rng_u64(g->stream, e) >> 11, t = g->dthr[g->rank[j]];
			if (u < t)
				g->mask[e >> 3] |= (uint8_t)(1u << (e & 7));
			g->flag[nf] = (uint32_t)j;
			nf += della_near(u, t, margin);
		}
		della_settle_row(g, row, L, rr, start + c, S, g->flag, nf, NULL);
	}
	for (uint64_t p = 0; p < s->slab; p += TILE) {
		uint64_t cnt = s->slab - p < TILE ? s->slab - p : TILE;
		float m[TILE];
		for (uint64_t k = 0; k < cnt; k++)
			m[k] = getbit(g->mask, start + p + k) ? (float)key_value(false, g->key32[p + k]) : 0.0f;
		mk_gta_fsum_run_f32(&g->after, start + p, m, cnt);
	}
}

/* DELLA float64: the same with rank_sort on (key, index) pairs and the
 * probabilities as doubles. */
static void della_slab(struct state *s, struct gin *g, uint64_t start)
{
	for (uint64_t c = 0; c < s->S; c++) {
		const struct rk *r;
		for (uint64_t j = 0; j < s->L; j++) {
			g->rk[j].key = g->slab[j * s->S + c];
			g->rk[j].j = j;
		}
		r = rank_sort(g->rk, g->rk + s->L, s->L, s->keybits);
		for (uint64_t i = 0; i < s->L; i++) {
			uint64_t e = start + r[i].j * s->S + c;
			if (mk_rng_uniform(g->stream, e) < g->prob[i])
				g->mask[e >> 3] |= (uint8_t)(1u << (e & 7));
		}
	}
	for (uint64_t p = 0; p < s->slab; p++)
		if (getbit(g->mask, start + p))
			fsum_add(&g->after, start + p, key_value(s->f64, g->slab[p]));
}
/* ------------------------------------------------------------- passes */

/* How many of a tile's keys equal P. */
MK_HOT_CLONES
static uint64_t tile_count_eq(const uint32_t *restrict key, uint64_t cnt, uint32_t P)
{
	uint64_t n = 0;

	for (uint64_t k = 0; k < cnt; k++)
		n += key[k] == P;
	return n;
}

/* The first bucket whose running total of t0's counts (hist and the four
 * sub-histograms) passes rank r. */
static uint32_t bucket_of_rank(const struct target *t0, uint64_t r)
{
	const uint32_t *h = t0->sub;
	uint64_t below = 0;

	for (uint32_t b = 0; b < NBUCKET; b++) {
		below += t0->hist[b] + (uint64_t)h[b] + h[b + NBUCKET] + h[b + 2 * NBUCKET] + h[b + 3 * NBUCKET];
		if (below > r)
			return b;
	}
	return NBUCKET - 1;
}

/* Open target tg's window at element e0 of the first digit pass, from the
 * histogram of [0, e0) that t0 (the gin's first target) has counted. */
static void win_open(const struct state *s, struct target *tg, const struct target *t0, uint64_t e0)
{
	uint64_t N = s->nelem, cap = N / 16 < WIN_CAP ? N / 16 : WIN_CAP;
	double at = (double)tg->rank * (double)e0 / (double)N, d = WIN_FRAC * (double)e0;
	uint64_t rlo = at - d > 0 ? (uint64_t)(at - d) : 0, rhi = (uint64_t)(at + d);

	tg->w0 = e0;
	if (rhi >= e0)
		rhi = e0 - 1;
	tg->wlo = bucket_of_rank(t0, rlo);
	tg->whi = bucket_of_rank(t0, rhi);
	tg->wroom = (cap < (1u << 16) ? cap : (1u << 16)) + TILE + 16;
	if (!(tg->widx = malloc(tg->wroom * sizeof(uint32_t))) || !(tg->wkey = malloc(tg->wroom * sizeof(uint32_t)))) {
		win_drop(tg);
		return;
	}
	tg->wcap = cap;
	tg->nw = 0;
}

/* Room in tg's window for a tile more (TILE + 16 entries past nw), or
 * the window dropped. */
static void win_room(struct target *tg)
{
	if (tg->nw + TILE + 16 <= tg->wroom)
		return;
	uint64_t room = tg->wroom * 2, top = tg->wcap + TILE + 16;
	if (room > top)
		room = top;
	uint32_t *a = realloc(tg->widx, room * sizeof(uint32_t));
	if (a)
		tg->widx = a;
	uint32_t *k = a ? realloc(tg->wkey, room * sizeof(uint32_t)) : NULL;
	if (!k) {
		win_drop(tg);
		return;
	}
	tg->wkey = k;
	tg->wroom = room;
}

/* The last digit pass has read [0, w0): take the window's elements of the
 * bucket in, as the pass would have counted and recorded them. */
static void win_take(struct target *tg)
{
	uint32_t P = (uint32_t)tg->prefix;
	uint32_t *h0 = tg->sub;

	if (tg->since + tg->nw > UINT32_MAX)
		sub_flush(tg);
	tg->since += tg->nw;
	for (uint64_t q = 0; q < tg->nw; q++) {
		uint32_t k = tg->wkey[q];
		if (k >> 16 != P)
			continue;
		h0[k & 0xffff]++;
		if (tg->ridx) {
			if (tg->nrec == tg->rcap) {
				rec_drop(tg);   /* more than pass 0 counted */
				continue;
			}
			tg->ridx[tg->nrec] = tg->widx[q];
			tg->rlo[tg->nrec++] = (uint16_t)k;
		}
	}
	win_drop(tg);
	tg->wdone = true;
}

/* RAND's statistics over the elements e0 .. e0 + cnt of a tile (element
 * t0 on of the chunk's x and b, float32 or BF16): each element's draw (its
 * bit into g->mask when there is one) and the L1 lane sums before and
 * after, in element order (gta_simd.h's rand_tile). */
static void rand_stats_tile(struct gin *g, uint64_t e0, uint64_t cnt, const void *x, const void *b, bool bf16,
			    uint64_t t0)
{
	size_t es = bf16 ? 2 : 4;

	mk_gta_simd.rand_tile(g->stream, g->thr, g->mask, e0, cnt, (const char *)x + t0 * es,
			      (const char *)b + t0 * es, bf16, &g->before, &g->after);
}

void mk_gta_rand_sums(uint64_t stream, uint64_t thr, uint64_t e0, uint64_t n, const void *x, const void *b, bool bf16,
		      uint8_t *mask, double before[LSUM_LANES + 1], double after[LSUM_LANES + 1])
{
	struct gin g = { .kind = K_RAND, .stream = stream, .thr = thr, .mask = mask };

	mk_gta_simd_init();
	for (uint64_t t0 = 0; t0 < n; t0 += TILE)
		rand_stats_tile(&g, e0 + t0, n - t0 < TILE ? n - t0 : TILE, x, b, bf16, t0);
	memcpy(before, g.before.lane, sizeof(g.before.lane));
	before[LSUM_LANES] = g.before.total;
	memcpy(after, g.after.lane, sizeof(g.after.lane));
	after[LSUM_LANES] = g.after.total;
}

/* The level of digit pass a statistics pass is: pass 1 repeats the
 * first (level 0) when pass 0's finish added it for a window that did
 * not hold its rank (state.extra). */
static inline unsigned level_of(const struct state *s, unsigned pass)
{
	return pass ? pass - s->extra : 0;
}

/* A tile's keys into target tg's first-digit histograms. */
static void hist_tile(struct target *tg, const uint32_t *restrict key, uint64_t cnt)
{
	uint32_t *h0 = tg->sub, *h1 = h0 + NBUCKET, *h2 = h1 + NBUCKET, *h3 = h2 + NBUCKET;
	uint64_t k = 0;

	if (tg->since + cnt > UINT32_MAX)
		sub_flush(tg);
	tg->since += cnt;
	for (; k + 4 <= cnt; k += 4) {
		h0[key[k] >> 16]++;
		h1[key[k + 1] >> 16]++;
		h2[key[k + 2] >> 16]++;
		h3[key[k + 3] >> 16]++;
	}
	for (; k < cnt; k++)
		h0[key[k] >> 16]++;
}

/* A tile's keys (elements e0 on) whose upper half lies in tw's window
 * into it, those below it counted; the window dropped when it cannot
 * grow or holds more than it may. */
static void window_tile(struct target *tw, const uint32_t *restrict key, uint64_t cnt, uint64_t e0)
{
	win_room(tw);
	if (!tw->widx)
		return;
	tw->nw += mk_gta_simd.window(key, cnt, tw->wlo, tw->whi, (uint32_t)e0, tw->widx + tw->nw, tw->wkey + tw->nw,
				     &tw->wbelow);
	if (tw->nw > tw->wcap)
		win_drop(tw);
}

/* A tile of the first digit pass (elements e0 on, their keys): into the
 * first target's histograms (both ends of OUTL count the same: copied in
 * finish), and from a window's w0 on, the keys in the window into it.
 * When the windows count (state.wcount), the histogram stops at w0: the
 * windows count the rest as below them or in them.  In the pass repeating
 * it (redo): the elements from w0 on into the histograms of the targets
 * whose windows did not hold the rank. */
static void level0_tile(const struct state *s, struct gin *g, bool redo, uint64_t e0, uint64_t cnt,
			const uint32_t *restrict key)
{
	if (redo) {
		/* (a later pass's chunks need not be pass 0's: a tile may
		 * straddle w0) */
		for (unsigned t = 0; t < g->nt; t++)
			if (g->t[t].redo && e0 + cnt > g->t[t].w0) {
				uint64_t s0 = g->t[t].w0 > e0 ? g->t[t].w0 - e0 : 0;
				hist_tile(&g->t[t], key + s0, cnt - s0);
			}
		return;
	}
	if (!s->wcount || !g->t[0].w0 || e0 < g->t[0].w0)
		hist_tile(&g->t[0], key, cnt);
	for (unsigned u = 0; u < g->nt; u++)
		if (g->t[u].widx && e0 >= g->t[u].w0)
			window_tile(&g->t[u], key, cnt, e0);
}

/* A tile of the first digit pass past w0 whose windows count (state.wcount):
 * its keys only into the windows (the histogram stops at w0); none made
 * when every window was dropped.  (Making the keys in tile_window's loop,
 * without the arrays, was no faster: mk-yaml ties on 7B-like models,
 * 1.50 s against 1.47 s.) */
static void counted_tile(struct gin *g, const void *x, const void *b, bool bf16, uint64_t t0, uint64_t e0,
			 uint64_t cnt)
{
	float a[TILE];
	uint32_t key[TILE];
	bool keys = false;

	for (unsigned u = 0; u < g->nt; u++) {
		if (!g->t[u].widx)
			continue;   /* dropped: the pass added counts [w0, N) */
		if (!keys)
			tile_abs(x, b, bf16, t0, cnt, a, key);
		keys = true;
		window_tile(&g->t[u], key, cnt, e0);
	}
}

/* The float32 statistics of the selections and of RAND, tile by tile: the
 * same counts and sums as the generic loop below, without a sum nobody
 * reads (L1 norms only for the rescale) and, once a cut is found, without
 * looking at the rest. */
static void accumulate_f32(struct state *s, struct gin *g, unsigned pass, const struct mk_job_chunk *c,
			   const void *x, const void *b)
{
	float a[TILE], m[TILE];
	uint32_t key[TILE];
	unsigned lv = level_of(s, pass);
	bool redo = s->extra && pass == 1;

	for (uint64_t t0 = 0; t0 < c->count; t0 += TILE) {
		uint64_t cnt = c->count - t0 < TILE ? c->count - t0 : TILE, e0 = c->elem_begin + t0;
		if (lv == s->nlevels && !s->rescale && (g->kind == K_MAG || g->kind == K_OUTL)) {
			/* the cut pass without a rescale: done once the cuts are */
			bool done = true;
			for (unsigned t = 0; t < g->nt; t++)
				done &= g->t[t].seen >= g->t[t].need;
			if (done)
				return;
		}
		if (redo) {
			/* only [w0, N) of the targets that missed */
			bool any = false;
			for (unsigned t = 0; t < g->nt; t++)
				any |= g->t[t].redo && e0 + cnt > g->t[t].w0;
			if (!any)
				continue;
		}
		if (g->kind == K_DELLA && e0 % s->slab + cnt <= s->slab) {
			/* the tile within one slab: its keys straight into it */
			uint64_t p = e0 % s->slab;
			tile_abs(x, b, c->bf16, t0, cnt, a, g->key32 + p);
			mk_gta_fsum_run_f32(&g->before, e0, a, cnt);
			if (p + cnt == s->slab)
				della_slab32(s, g, e0 + cnt - s->slab);
			continue;
		}
		if (g->kind == K_RAND) {
			rand_stats_tile(g, e0, cnt, x, b, c->bf16, t0);
			continue;
		}
		if (pass == 0 && s->wcount && g->t[0].w0 && e0 >= g->t[0].w0) {
			counted_tile(g, x, b, c->bf16, t0, e0, cnt);
			continue;
		}
		tile_abs(x, b, c->bf16, t0, cnt, a, key);
		if (g->kind == K_DELLA) {
			mk_gta_fsum_run_f32(&g->before, e0, a, cnt);
			for (uint64_t k = 0; k < cnt;) {
				uint64_t e = e0 + k, p = e % s->slab, r = s->slab - p;
				if (r > cnt - k)
					r = cnt - k;
				memcpy(g->key32 + p, key + k, r * sizeof(uint32_t));
				k += r;
				if (p + r == s->slab)
					della_slab32(s, g, e + r - s->slab);
			}
			continue;
		}
		if (lv < s->nlevels) {
			if (pass == 0 && s->rescale)
				mk_gta_fsum_run_f32(&g->before, e0, a, cnt);
			/* the windows open on the histogram of the elements
			 * before this tile */
			for (unsigned t = 0; pass == 0 && s->win && t < g->nt; t++)
				if (!g->t[t].w0 && e0 >= s->nelem / 8)
					win_open(s, &g->t[t], &g->t[0], e0);
			if (lv == 0) {
				level0_tile(s, g, redo, e0, cnt, key);
				continue;
			}
			for (unsigned t = 0; t < g->nt; t++) {
				struct target *tg = &g->t[t];
				uint32_t *h0 = tg->sub, *h1 = h0 + NBUCKET, *h2 = h1 + NBUCKET, *h3 = h2 + NBUCKET;
				uint64_t k = 0, ct = cnt;
				if (tg->wuse) {
					/* the window has [w0, N) */
					if (tg->wdone)
						continue;
					if (e0 >= tg->w0) {
						win_take(tg);
						continue;
					}
					if (e0 + cnt > tg->w0)
						ct = tg->w0 - e0;
				}
				if (tg->since + ct > UINT32_MAX)
					sub_flush(tg);
				tg->since += ct;
				/* the low digits of the keys under the prefix,
				 * gathered without a branch, then counted;
				 * recorded: the low digits straight into the
				 * record, counted from there */
				uint16_t lo_tile[TILE + 16], *lo = tg->ridx ? tg->rlo + tg->nrec : lo_tile;
				uint64_t nl = mk_gta_simd.under_prefix(key, ct, (uint32_t)tg->prefix, lo);
				if (tg->ridx) {
					(void)mk_gta_simd.index_under_prefix(key, ct, (uint32_t)tg->prefix, (uint32_t)e0,
									     tg->ridx + tg->nrec);
					tg->nrec += nl;
					if (tg->nrec > tg->rcap)
						rec_drop(tg);   /* more than pass 0 counted */
				}
				for (; k + 4 <= nl; k += 4) {
					h0[lo[k]]++;
					h1[lo[k + 1]]++;
					h2[lo[k + 2]]++;
					h3[lo[k + 3]]++;
				}
				for (; k < nl; k++)
					h0[lo[k]]++;
				if (tg->wuse && e0 + ct == tg->w0)
					win_take(tg);
			}
		} else if (s->rescale) {
			for (uint64_t k = 0; k < cnt; k++)
				m[k] = sel_keep_scan(g, key[k], e0 + k) ? a[k] : 0.0f;
			mk_gta_fsum_run_f32(&g->after, e0, m, cnt);
		} else {
			/* only the cuts: the index of the need-th tie */
			for (unsigned t = 0; t < g->nt; t++) {
				struct target *tg = &g->t[t];
				uint32_t P = (uint32_t)tg->prefix;
				uint64_t ne;
				if (tg->seen >= tg->need)
					continue;
				ne = tile_count_eq(key, cnt, P);
				if (tg->seen + ne < tg->need) {
					tg->seen += ne;     /* the cut lies further on */
					continue;
				}
				for (uint64_t k = 0; k < cnt; k++)
					if (key[k] == P && ++tg->seen == tg->need) {
						tg->cut1 = e0 + k + 1;
						break;
					}
			}
		}
	}
}

struct acc_arg {
	struct state *s;
	unsigned pass;
	const struct mk_job_chunk *c;
	const void *b;
	unsigned n;
	size_t gi[16];   /* the fast_f32 inputs, one task each */
};

static void acc_task(void *p, unsigned k, unsigned slot)
{
	struct acc_arg *a = p;
	struct gin *g = &a->s->g[a->gi[k]];

	(void)slot;
	accumulate_f32(a->s, g, a->pass, a->c, a->c->in[g->idx], a->b);
}

static inline bool fast_f32(const struct state *s, const struct gin *g)
{
	return !s->f64 && (g->kind == K_MAG || g->kind == K_OUTL || g->kind == K_RAND || g->kind == K_DELLA);
}

static bool cuts_found(const struct state *s);

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	struct state *s = job->state;
	const void *b = c->in[job->d.base];
	unsigned lv = level_of(s, pass);

	/* a held job's windows count past them (pass 0's finish adds a pass
	 * for any that did not hold its rank: only memory read again) */
	if (pass == 0 && c->elem_begin == 0)
		s->wcount = s->win && (job->held || s->spare);
	/* each input's statistics are its own: on large chunks (a held
	 * job's whole tensor) the inputs are tasks for the job's threads */
	bool par = c->count >= (1u << 20) && s->n > 1 && s->n <= 16 && job->threads > 1;
	if (par) {
		struct acc_arg a = { .s = s, .pass = pass, .c = c, .b = b };
		for (size_t j = 0; j < s->n; j++)
			if (fast_f32(s, &s->g[j]))
				a.gi[a.n++] = j;
		mk__pool_run(job->threads, a.n, acc_task, &a);
	}
	for (size_t j = 0; j < s->n; j++) {
		struct gin *g = &s->g[j];
		if (fast_f32(s, g)) {
			if (!par)
				accumulate_f32(s, g, pass, c, c->in[g->idx], b);
			continue;
		}
		const void *x = c->in[g->idx];
		uint64_t key;
		double dv;

		switch (g->kind) {
		case K_MAG:
		case K_OUTL:
			if (lv < s->nlevels) {
				unsigned lo = s->keybits - 16 * (lv + 1);
				for (uint64_t k = 0; k < c->count; k++) {
					uint64_t e = c->elem_begin + k;
					dv = delta_key(s->f64, x, b, k, &key);
					if (lv == 0)
						fsum_add(&g->before, e, fabs(dv));
					for (unsigned t = 0; t < g->nt; t++) {
						struct target *tg = &g->t[t];
						if (lv && (key >> (lo + 16)) != tg->prefix)
							continue;
						tg->hist[(key >> lo) & 0xffff]++;
					}
				}
			} else {
				for (uint64_t k = 0; k < c->count; k++) {
					uint64_t e = c->elem_begin + k;
					dv = delta_key(s->f64, x, b, k, &key);
					if (sel_keep_scan(g, key, e))
						fsum_add(&g->after, e, fabs(dv));
				}
			}
			break;
		case K_RAND:
			for (uint64_t k = 0; k < c->count; k++) {
				uint64_t e = c->elem_begin + k;
				bool keep = (mk_rng_u64(g->stream, e) >> 11) < g->thr;
				if (keep && g->mask)
					g->mask[e >> 3] |= (uint8_t)(1u << (e & 7));
				dv = delta_key(s->f64, x, b, k, &key);
				fsum_add(&g->before, e, fabs(dv));
				if (keep)
					fsum_add(&g->after, e, fabs(dv));
			}
			break;
		case K_DELLA:
			for (uint64_t k = 0; k < c->count; k++) {
				uint64_t e = c->elem_begin + k, p = e % s->slab;
				dv = delta_key(s->f64, x, b, k, &key);
				fsum_add(&g->before, e, fabs(dv));
				g->slab[p] = key;
				if (p == s->slab - 1)
					della_slab(s, g, e + 1 - s->slab);
			}
			break;
		default:
			break;
		}
	}
	/* the rest of the last digit pass is in the windows */
	if (s->win && lv + 1 == s->nlevels) {
		bool all = true;
		for (size_t j = 0; j < s->n; j++)
			for (unsigned t = 0; (s->g[j].kind == K_MAG || s->g[j].kind == K_OUTL) && t < s->g[j].nt; t++)
				all &= s->g[j].t[t].wdone;
		if (all)
			job->pass_enough = true;
	}
	/* the rest of the cut pass has nothing to find */
	if (lv == s->nlevels && cuts_found(s))
		job->pass_enough = true;
	return 0;
}

static void set_factor(struct state *s, struct gin *g)
{
	double before = g->before.total + lsum_block(&g->before), after = g->after.total + lsum_block(&g->after);

	if (!s->rescale)
		return;
	if (s->f64) {
		g->scale = !(before < 1e-7 || after < 1e-7);
		g->fd = before / after;
	} else {
		float bf = (float)before, af = (float)after;
		g->scale = !(bf < (float)1e-7 || af < (float)1e-7);
		g->ff = bf / af;
	}
}

/* Whether the cut pass (no rescale) has what it looks for: every
 * selection's cuts found, or known without it. */
static bool cuts_found(const struct state *s)
{
	if (s->rescale)
		return false;
	for (size_t j = 0; j < s->n; j++) {
		const struct gin *g = &s->g[j];
		if (g->kind != K_MAG && g->kind != K_OUTL)
			continue;
		for (unsigned t = 0; t < g->nt; t++)
			if (g->t[t].seen < g->t[t].need)
				return false;
	}
	return true;
}

/* The end of a first digit pass whose window counted past it: whether
 * the rank lies among the window's buckets (the histogram of [0, w0) and
 * the window's keys, all that the pass counted there).  If so the
 * window's keys join the histogram, tg->below counts every element below
 * the window, and the search for the rank's bucket starts at *bk; if not
 * (or the window was dropped), the histogram is left as it is, for the
 * pass that counts [w0, N) again. */
static bool win_settle(struct target *tg, uint64_t *bk)
{
	uint64_t below = tg->wbelow, in = tg->nw;

	if (!tg->widx)
		return false;
	for (uint32_t b = 0; b < tg->wlo; b++)
		below += tg->hist[b];
	for (uint32_t b = tg->wlo; b <= tg->whi; b++)
		in += tg->hist[b];
	if (tg->rank < below || tg->rank - below >= in)
		return false;
	for (uint64_t q = 0; q < tg->nw; q++)
		tg->hist[tg->wkey[q] >> 16]++;
	tg->below = below;
	*bk = tg->wlo;
	return true;
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	uint64_t N = s->nelem;
	unsigned lv = level_of(s, pass);
	bool redo = s->extra && pass == 1, add = false;

	for (size_t j = 0; j < s->n; j++) {
		struct gin *g = &s->g[j];
		switch (g->kind) {
		case K_MAG:
		case K_OUTL:
			if (lv < s->nlevels) {
				if (pass == 0 && g->nt == 2 && g->t[0].sub) {
					sub_flush(&g->t[0]);
					memcpy(g->t[1].hist, g->t[0].hist, NBUCKET * sizeof(uint64_t));
				}
				for (unsigned t = 0; t < g->nt; t++) {
					struct target *tg = &g->t[t];
					uint64_t bk = 0;
					if (redo && !tg->redo)
						continue;   /* its bucket found in pass 0 */
					if (tg->sub)
						sub_flush(tg);
					if (pass == 0 && s->wcount && !win_settle(tg, &bk)) {
						/* the next pass counts [w0, N) into the histogram */
						win_drop(tg);
						tg->redo = add = true;
						continue;
					}
					for (; bk < NBUCKET; bk++) {
						if (tg->below + tg->hist[bk] > tg->rank)
							break;
						tg->below += tg->hist[bk];
					}
					if (bk == NBUCKET)
						MK_BUG("gta: rank %llu not found",
						       (unsigned long long)tg->rank);
					tg->prefix = (tg->prefix << 16) | bk;
					tg->eq = tg->hist[bk];
					/* the window holds the bucket's elements from w0 on,
					 * or is of no use */
					if (tg->widx && pass == 0 && bk >= tg->wlo && bk <= tg->whi)
						tg->wuse = true;
					else
						win_drop(tg);
					memset(tg->hist, 0, NBUCKET * sizeof(uint64_t));
					/* before the last digit pass: record its elements
					 * when they are few (else the cut pass runs) */
					if (lv + 2 == s->nlevels && !s->f64 && !s->rescale && N <= UINT32_MAX &&
					    tg->eq && tg->eq <= REC_MAX && tg->eq <= N / 16) {
						tg->ridx = malloc((tg->eq + TILE + 16) * sizeof(uint32_t));
						tg->rlo = malloc((tg->eq + TILE + 16) * sizeof(uint16_t));
						tg->rcap = tg->eq;
						tg->nrec = 0;
						if (!tg->ridx || !tg->rlo)
							rec_drop(tg);
					}
				}
				if (lv + 1 == s->nlevels) {
					struct target *a = &g->t[0], *z = &g->t[1];
					if (g->kind == K_MAG) {
						uint64_t greater = N - a->below - a->eq;
						a->need = g->k - greater;
					} else {
						a->need = a->rank - a->below;       /* ties dropped */
						z->need = z->rank - z->below + 1;   /* ties kept */
					}
					for (unsigned t = 0; t < g->nt; t++) {
						struct target *tg = &g->t[t];
						/* the cut from the record: the need-th tie
						 * in element order */
						if (tg->ridx && tg->nrec == tg->rcap) {
							uint16_t L = (uint16_t)tg->prefix;
							uint64_t ties = 0;
							tg->cut1 = 0;
							for (uint64_t q = 0; q < tg->nrec && ties < tg->need; q++)
								if (tg->rlo[q] == L && ++ties == tg->need)
									tg->cut1 = (uint64_t)tg->ridx[q] + 1;
							if (ties == tg->need)
								tg->seen = tg->need;
						}
						rec_drop(tg);
						/* all ties on the cut's side: the cut is past
						 * the last one, found without a pass (the one
						 * the pass would find, as no later tie is);
						 * with a rescale the pass counts them anew */
						if (!s->rescale && tg->need == tg->eq && tg->need) {
							tg->cut1 = UINT64_MAX;
							tg->seen = tg->need;
						}
						free(tg->hist);
						free(tg->sub);
						tg->hist = NULL;
						tg->sub = NULL;
					}
				}
			} else {
				set_factor(s, g);
			}
			break;
		case K_RAND:
		case K_DELLA:
			set_factor(s, g);
			break;
		default:
			break;
		}
	}
	/* a window that did not hold its rank: one pass more, counting
	 * [w0, N) again (the job is held: wcount), or the plan's spare pass;
	 * which, when every window held, is skipped */
	if (add && !s->spare) {
		s->extra = 1;
		job->npasses++;
	} else if (s->spare && pass == 0 && !add) {
		job->pass_enough = true;
	}
	/* the cut pass, when it is next and has nothing to find */
	if (lv + 1 == s->nlevels && cuts_found(s))
		job->pass_enough = true;
	(void)err;
	return 0;
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
	.accumulate = accumulate,							\
	.finish = finish,								\
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
