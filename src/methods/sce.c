/* sce.c - Select, Calculate, Erase (https://arxiv.org/abs/2408.07990).
 *
 * With B the base and tau_i = M_i - B over the n non-base inputs in input
 * order (compute dtype):
 *   1. Select (0 < select_topk < 1): per element the population variance
 *      across the inputs, var = m2 / n by Welford's update in float64
 *      (torch's CPU var kernel), rounded to float32.  nz = #(var != 0),
 *      k = int(float32(nz) * float32(select_topk)).  The k elements of
 *      largest var are kept in every tau_i, the others zeroed (tau * 0).
 *      Exact: radix histograms of var's float bits (pass 0: the high 16
 *      bits and nz; pass 1: the low 16 bits inside the chosen bucket)
 *      give the k-th largest value T and how many lie above it; among
 *      elements equal to T the lower flat index is kept first (pass 2
 *      finds the index of the last tied element kept).
 *   2. Calculate: e_i = mean over the tensor of tau_i^2 (after 1),
 *      float64 sums over fixed blocks; E = sum e_i; omega_i = e_i / E, or
 *      1/n when |E| < 1e-6 (rounded to the compute dtype).
 *   3. Erase: maj = +1 where sum_i tau_i >= 0 else -1; k_i = [sign(tau_i) == maj].
 *   4. num = sum_i omega_i k_i tau_i, den = max(sum_i omega_i k_i, 1e-6),
 *      out = B + num / den.
 * Passes: 3 when selecting (variance histogram, low bits, tie cut-off +
 * the e_i sums), else 1 (the e_i sums).  select_topk <= 0, and k = 0,
 * zero every task vector: the output is the base (mergekit 0.1.4 returned
 * a malformed [n, ...] tensor there; mk returns the base
 * with the right shape, as mergekit 0.1.5 does).
 *
 * Globals select_topk (1.0) and int8_mask (false, no numeric effect).  No
 * per-model parameters (weights in the configuration are not used).  Base
 * required; base alone -> the base.  Shapes must agree.  Output: the
 * inputs' promoted dtype.
 *
 * Deliberate differences: mergekit's top-k tie order is unspecified, mk
 * keeps lower flat indices first; the e_i are float64 fixed-order sums
 * (mergekit: float32); with float64 inputs the variances are ranked as
 * float32 values (ties after that rounding follow the index rule).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "misc_methods.h"

enum { P_SELECT_TOPK, P_INT8_MASK, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_SELECT_TOPK] = { .name = "select_topk", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
			    .def = { .set = true, .type = MK_PT_FLOAT, .f = 1.0 },
			    .doc = "fraction of elements (by variance across the models) kept; "
				   ">= 1: all" },
	[P_INT8_MASK] = { .name = "int8_mask", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = { .set = true, .type = MK_PT_BOOL, .b = false },
			  .doc = "no numeric effect (mergekit memory option)" },
};

enum mode { M_COPY, M_ZERO, M_ALL, M_SELECT };

struct state {
	enum mode mode;
	size_t nn;                 /* non-base inputs */
	int *idx;                  /* [nn] their input indices */
	struct mk_fsum *sq;        /* [nn] sums of tau^2 */
	double *omega_d;           /* [nn] */
	float *omega_f;
	uint64_t *hist;            /* [MISC_NBUCKET] */
	uint64_t nz, k;
	uint32_t bucket;           /* pass 0's bucket */
	uint64_t above;            /* keys above the bucket, then above T */
	uint32_t tkey;             /* the k-th largest key */
	uint64_t ties_keep, ties_seen;
	uint64_t ecut;             /* index of the last tied element kept */
};

static enum mode mode_of(const struct mk_job_desc *d)
{
	double s;

	if (misc_nonbase(d) == 0)
		return M_COPY;
	s = d->global[P_SELECT_TOPK].f;
	if (s >= 1.0)
		return M_ALL;
	if (!(s > 0.0))
		return M_ZERO;
	return M_SELECT;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	enum mk_dtype prom, comp;
	int rc;

	if (mode_of(d) == M_COPY) {
		po->out = d->in[d->base];
		po->compute = po->out.dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		return 0;
	}
	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		return rc;
	rc = misc_same_shapes(m, d, used, &po->out, err);
	if (rc)
		return rc;
	misc_dtypes(d, used, &prom, &comp);
	po->out.dtype = prom;
	po->compute = comp;
	return 0;
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	switch (mode_of(d)) {
	case M_ALL:
		return 1;
	case M_SELECT:
		return 3;
	default:
		return 0;
	}
}

static void free_state(struct state *s)
{
	if (!s)
		return;
	free(s->idx);
	free(s->sq);
	free(s->omega_d);
	free(s->omega_f);
	free(s->hist);
	free(s);
}

static int init(struct mk_job *job, struct mk_err *err)
{
	size_t n = job->d.ninputs;
	struct state *s = calloc(1, sizeof(*s));

	if (!s || !(s->idx = calloc(n, sizeof(int))) || !(s->sq = calloc(n, sizeof(*s->sq))) ||
	    !(s->omega_d = calloc(n, sizeof(double))) || !(s->omega_f = calloc(n, sizeof(float))))
		goto nomem;
	s->mode = mode_of(&job->d);
	for (size_t i = 0; i < n; i++)
		if ((int)i != job->d.base)
			s->idx[s->nn++] = (int)i;
	if (s->mode == M_SELECT && !(s->hist = calloc(MISC_NBUCKET, sizeof(uint64_t))))
		goto nomem;
	if (s->mode == M_COPY || s->mode == M_ZERO)
		job->copy_input = job->d.base;
	job->state = s;
	return 0;
nomem:
	free_state(s);
	return mk_err_set(err, MK_ENOMEM, "out of memory");
}

/* The variance key of element e (torch: Welford in float64, rounded to
 * the tensor's dtype; ranked as float32). */
#define SCE_VAR(NAME, T)							\
static uint32_t NAME(const struct state *s, const void *const *in, const T *b, uint64_t e) \
{										\
	double mean = 0.0, m2 = 0.0;						\
	for (size_t j = 0; j < s->nn; j++) {					\
		T tv = ((const T *)in[s->idx[j]])[e] - b[e];			\
		double x = (double)tv, nf = (double)(j + 1);			\
		double delta = x - mean, d2;					\
		mean = mean + delta / nf;					\
		d2 = x - mean;							\
		m2 = m2 + delta * d2;						\
	}									\
	return misc_fkey((float)(T)(m2 / (double)s->nn));			\
}
SCE_VAR(var_f32, float)
SCE_VAR(var_f64, double)

static const uint32_t ZERO_KEY = 0x80000000u;  /* misc_fkey(+0.0f) */

static bool kept(const struct state *s, uint32_t key, uint64_t e)
{
	return key > s->tkey || (key == s->tkey && e <= s->ecut);
}

#define SCE_PASS(NAME, T, VAR)							\
/* The sums of tau^2 of two inputs, nothing selected: the same terms in	\
 * the same order, in registers. */						\
static void NAME##_sq2(struct state *s, const T *b, const void *const *in,	\
		       uint64_t e0, uint64_t n)					\
{										\
	const T *x0 = in[s->idx[0]], *x1 = in[s->idx[1]];			\
	for (uint64_t i = 0; i < n;) {						\
		uint64_t run = mk_fsum_run(e0 + i, n - i);			\
		double q0 = s->sq[0].part, q1 = s->sq[1].part;			\
		for (uint64_t e = i; e < i + run; e++) {			\
			T t0 = x0[e] - b[e], t1 = x1[e] - b[e];			\
			T sq0 = t0 * t0, sq1 = t1 * t1;				\
			q0 += (double)sq0;					\
			q1 += (double)sq1;					\
		}								\
		s->sq[0].part = q0;						\
		s->sq[1].part = q1;						\
		i += run;							\
		mk_fsum_step(&s->sq[0], e0 + i);				\
		mk_fsum_step(&s->sq[1], e0 + i);				\
	}									\
}										\
static void NAME(struct state *s, unsigned pass, int base, const void *const *in, \
		 uint64_t e0, uint64_t n)					\
{										\
	const T *b = in[base];							\
	if (s->mode == M_SELECT && pass < 2) {					\
		for (uint64_t e = 0; e < n; e++) {				\
			uint32_t key = VAR(s, in, b, e);			\
			if (key == ZERO_KEY || key == 0x7fffffffu)		\
				continue;   /* +0 and -0 */			\
			if (pass == 0) {					\
				s->nz++;					\
				s->hist[key >> 16]++;				\
			} else if (s->k && key >> 16 == s->bucket) {		\
				s->hist[key & 0xffffu]++;			\
			}							\
		}								\
		return;								\
	}									\
	if (s->mode != M_SELECT && s->nn == 2) {				\
		NAME##_sq2(s, b, in, e0, n);					\
		return;								\
	}									\
	for (uint64_t i = 0; i < n;) {						\
		uint64_t run = mk_fsum_run(e0 + i, n - i);			\
		for (uint64_t e = i; e < i + run; e++) {			\
			bool keep = true;					\
			if (s->mode == M_SELECT) {				\
				uint32_t key = s->k ? VAR(s, in, b, e) : 0;	\
				keep = s->k && key > s->tkey;			\
				if (s->k && key == s->tkey &&			\
				    s->ties_seen < s->ties_keep) {		\
					s->ties_seen++;				\
					s->ecut = e0 + e;			\
					keep = true;				\
				}						\
			}							\
			for (size_t j = 0; j < s->nn; j++) {			\
				T tv = ((const T *)in[s->idx[j]])[e] - b[e];	\
				T sq;						\
				if (!keep)					\
					tv = tv * (T)0;				\
				sq = tv * tv;					\
				s->sq[j].part += (double)sq;			\
			}							\
		}								\
		i += run;							\
		for (size_t j = 0; j < s->nn; j++)				\
			mk_fsum_step(&s->sq[j], e0 + i);			\
	}									\
}
SCE_PASS(pass_f32, float, var_f32)
SCE_PASS(pass_f64, double, var_f64)

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	if (job->compute == MK_DT_F64)
		pass_f64(job->state, pass, job->d.base, c->in, c->elem_begin, c->count);
	else
		pass_f32(job->state, pass, job->d.base, c->in, c->elem_begin, c->count);
	return 0;
}

static void weights(struct state *s, uint64_t nelem)
{
	double E = 0.0;

	for (size_t j = 0; j < s->nn; j++) {
		s->omega_d[j] = mk_fsum_value(&s->sq[j]) / (double)nelem;
		E += s->omega_d[j];
	}
	for (size_t j = 0; j < s->nn; j++) {
		if (fabs(E) < 1e-6) {
			s->omega_d[j] = 1.0 / (double)s->nn;
			s->omega_f[j] = 1.0f / (float)s->nn;
		} else {
			s->omega_d[j] = s->omega_d[j] / E;
			s->omega_f[j] = (float)s->omega_d[j];
		}
	}
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	uint64_t above;

	if (s->mode == M_SELECT && pass == 0) {
		float prod = (float)s->nz * (float)mk_job_param(job, P_SELECT_TOPK)->f;
		s->k = (uint64_t)prod;
		if (s->k) {
			s->bucket = misc_pick_bucket(s->hist, s->k, &s->above);
			memset(s->hist, 0, MISC_NBUCKET * sizeof(uint64_t));
		}
		return 0;
	}
	if (s->mode == M_SELECT && pass == 1) {
		if (s->k) {
			uint32_t lo = misc_pick_bucket(s->hist, s->k - s->above, &above);
			s->tkey = s->bucket << 16 | lo;
			s->above += above;
			s->ties_keep = s->k - s->above;
		}
		free(s->hist);
		s->hist = NULL;
		return 0;
	}
	weights(s, job->nelem);
	return 0;
}

#define SCE_APPLY(NAME, T, VAR, OMEGA)						\
/* apply for two inputs, nothing selected: the same operations in the	\
 * same order, on hoisted pointers and weights. */				\
static void NAME##_2(const struct state *s, const T *b, const void *const *in, \
		     uint64_t n, T *o)						\
{										\
	const T *x0 = in[s->idx[0]], *x1 = in[s->idx[1]];			\
	const T w0 = s->OMEGA[0], w1 = s->OMEGA[1];				\
	for (uint64_t e = 0; e < n; e++) {					\
		T t0 = x0[e] - b[e], t1 = x1[e] - b[e];				\
		T sw = (T)0 + t0, num, den, e0w, e1w, p0, p1;			\
		int pos, a0, a1;						\
		sw = sw + t1;							\
		pos = sw >= 0;	/* branch-free, so the loop vectorises */	\
		a0 = (pos & (t0 > 0)) | (!pos & (t0 < 0));			\
		a1 = (pos & (t1 > 0)) | (!pos & (t1 < 0));			\
		e0w = w0 * (T)a0;						\
		e1w = w1 * (T)a1;						\
		p0 = t0 * e0w;							\
		p1 = t1 * e1w;							\
		num = (T)0 + p0;						\
		num = num + p1;							\
		den = (T)0 + e0w;						\
		den = den + e1w;						\
		den = den < (T)1e-6 ? (T)1e-6 : den;				\
		o[e] = b[e] + num / den;					\
	}									\
}										\
static void NAME(const struct state *s, int base, const void *const *in,	\
		 uint64_t e0, uint64_t n, T *o)					\
{										\
	const T *b = in[base];							\
	if (s->mode != M_SELECT && s->nn == 2) {				\
		NAME##_2(s, b, in, n, o);					\
		return;								\
	}									\
	for (uint64_t e = 0; e < n; e++) {					\
		T tv[64], sw = 0, num = 0, den = 0;				\
		bool keep = true;						\
		if (s->mode == M_SELECT)					\
			keep = s->k && kept(s, VAR(s, in, b, e), e0 + e);	\
		for (size_t j = 0; j < s->nn; j++) {				\
			T x = ((const T *)in[s->idx[j]])[e] - b[e];		\
			if (!keep)						\
				x = x * (T)0;					\
			if (j < 64)						\
				tv[j] = x;					\
			sw = sw + x;						\
		}								\
		for (size_t j = 0; j < s->nn; j++) {				\
			T x = j < 64 ? tv[j] : ((const T *)in[s->idx[j]])[e] - b[e]; \
			T ew, p;						\
			bool agree;						\
			if (!keep)						\
				x = x * (T)0;					\
			agree = sw >= 0 ? x > 0 : x < 0;			\
			ew = s->OMEGA[j] * (agree ? (T)1 : (T)0);		\
			p = x * ew;						\
			num = num + p;						\
			den = den + ew;						\
		}								\
		if (den < (T)1e-6)						\
			den = (T)1e-6;						\
		o[e] = b[e] + num / den;					\
	}									\
}
SCE_APPLY(apply_f32, float, var_f32, omega_f)
SCE_APPLY(apply_f64, double, var_f64, omega_d)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct state *s = job->state;

	if (job->compute == MK_DT_F64)
		apply_f64(s, job->d.base, c->in, c->elem_begin, c->count, out);
	else
		apply_f32(s, job->d.base, c->in, c->elem_begin, c->count, out);
	return 0;
}

static void release(struct mk_job *job)
{
	free_state(job->state);
	job->state = NULL;
}

const struct mk_method mk_method_sce = {
	.abi = MK_METHOD_ABI,
	.name = "sce",
	.pretty_name = "SCE",
	.reference_url = "https://arxiv.org/abs/2408.07990",
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
