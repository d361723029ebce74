/* arcee_fusion.c - take the other model's values where they matter most.
 *
 * With a the base and b the other input (after rectify_embed_sizes):
 *   1. importance I = |b - a| * KL_row, where along the last axis
 *      p = softmax(b_row) + 1e-8, q = softmax(a_row) + 1e-8,
 *      KL_row = sum p * ln(p / q)  (float64, each row summed in element
 *      order: the softmax statistics by the online max/sum update in
 *      pass 0, KL in pass 1, or in pass 0 already for a row that one
 *      chunk holds whole, reusing the exp(x - max) terms the online sum
 *      added after the row's last new maximum); I is rounded to float32
 *      as mergekit's.
 *   2. threshold = Q(0.5) + 1.5 * (Q(0.75) - Q(0.25)) (float32), Q(q) =
 *      sorted[int(float32(q) * (n - 1))] over the flattened I, or, for a
 *      tensor of more than 1,000,000 elements, over 1,000,000 elements
 *      drawn uniformly with replacement (mergekit 0.1.5's torch.randint;
 *      0.1.4 drew without replacement).  The three order statistics are
 *      exact: a histogram of the high 16 bits of I's float bits (pass 2),
 *      then of the low 16 bits inside each chosen bucket (pass 3).
 *   3. out = a + (b - a) * [I >= threshold].
 * Output: float32 (float64 for float64 inputs): mergekit's mask is a
 * float32 tensor.  No parameters.  Base required; one input -> copied.
 *
 * The sample is drawn from the counter-based generator of rng.h keyed by
 * (--random-seed, tensor name, the other input's index): sample s is
 * element floor(u64(s) * N / 2^64); the sample indices (8 MB), sorted by
 * radix passes, are walked alongside the ordered chunks of passes 2 and
 * 3, which look at the drawn elements only, an element counting once per
 * time it was drawn.
 *
 * Deliberate differences: mergekit computes the softmaxes and KL in
 * float32, mk in float64, so masks may differ on elements whose
 * importance lies within float32 noise (well under 1%) of the threshold;
 * the sample (large tensors only) is not torch's random stream.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "misc_methods.h"
#include "rng.h"
#include "core/pool.h"

#define SAMPLE_SIZE 1000000u
#define AF_TASK_ROWS 4u           /* whole rows per task of pass 0 */
#define KL_EPS 1e-8

struct row {
	double ma, sa, mb, sb;     /* softmax max and sum of exp(x - max) */
	double kl;
	bool done;                 /* kl summed in pass 0: the row was whole in a chunk */
};

/* Rows up to this long, when a chunk holds the whole row, have their KL
 * summed in pass 0: the exp(x - max) that the softmax sum added after the
 * row's last new maximum are the very terms the KL needs again (same
 * arguments), so they are kept in ea/eb and not computed twice. */
#define ROW_CACHE 65536u

struct state {
	int other;                 /* -1: copy the single input */
	uint64_t L, nrows;
	struct row *rows;
	double *ea;                /* per thread [2 * L]: a row's exp(x - max) of a,
				      then of b, in pass 0; or NULL (rows too long) */
	unsigned nslot;            /* threads ea has room for */
	uint64_t *samp;            /* sorted sample indices, or NULL: all elements */
	uint64_t nsamp, cur;       /* sample size (n), cursor of this pass */
	uint64_t *hist;            /* [MISC_NBUCKET] pass 2 */
	uint64_t *lo[3];           /* [MISC_NBUCKET] pass 3, per quantile */
	uint64_t k[3];             /* 1-based rank from the top of each quantile */
	uint64_t above[3];
	uint32_t bucket[3];
	float q[3];                /* Q(0.25), Q(0.5), Q(0.75) */
	float thr;
};

struct af_rows {                   /* a chunk's whole rows, for the threads */
	struct state *s;
	const void *a, *b;         /* the first row's elements */
	uint64_t row0, nrows;
};

static int other_input(const struct mk_job_desc *d)
{
	if (d->ninputs < 2)
		return -1;
	return d->base == 0 ? 1 : 0;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	enum mk_dtype prom, comp;
	bool rectified;
	int rc;

	if (other_input(d) < 0) {
		po->out = d->in[0];
		po->compute = po->out.dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		return 0;
	}
	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		return rc;
	rc = mk_rectify_shapes(m, d, used, &po->out, &rectified, err);
	if (rc)
		return rc;
	misc_dtypes(d, used, &prom, &comp);
	po->out.dtype = prom == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
	po->compute = comp;
	return 0;
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return other_input(d) >= 0 ? 4 : 0;
}

static void free_state(struct state *s)
{
	if (!s)
		return;
	free(s->rows);
	free(s->ea);
	free(s->samp);
	free(s->hist);
	for (int t = 0; t < 3; t++)
		if (!t || s->lo[t] != s->lo[t - 1])
			free(s->lo[t]);   /* equal neighbours share one array */
	free(s);
}

/* Sort v[n] ascending (values below 2^bits) by least-significant-digit
 * radix passes of 11 bits through tmp[n]; the result is in v. */
static void sort_u64(uint64_t *v, uint64_t *tmp, uint64_t n, unsigned bits)
{
	static const unsigned D = 11;
	uint64_t *src = v, *dst = tmp;

	for (unsigned sh = 0; sh < bits; sh += D) {
		uint64_t cnt[1u << 11] = { 0 }, pos = 0;
		for (uint64_t i = 0; i < n; i++)
			cnt[(src[i] >> sh) & ((1u << D) - 1)]++;
		for (unsigned d = 0; d < (1u << D); d++) {
			uint64_t c = cnt[d];
			cnt[d] = pos;
			pos += c;
		}
		for (uint64_t i = 0; i < n; i++)
			dst[cnt[(src[i] >> sh) & ((1u << D) - 1)]++] = src[i];
		uint64_t *t = src;
		src = dst;
		dst = t;
	}
	if (src != v)
		memcpy(v, src, n * sizeof(*v));
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));
	uint64_t n = job->nelem;

	if (!s)
		goto nomem;
	s->other = other_input(&job->d);
	if (s->other < 0) {
		job->copy_input = 0;
		job->state = s;
		return 0;
	}
	s->L = job->out.ndim ? job->out.shape[job->out.ndim - 1] : 1;
	s->nrows = s->L ? n / s->L : 0;
	if (!(s->rows = calloc(s->nrows + 1, sizeof(*s->rows))) ||
	    !(s->hist = calloc(MISC_NBUCKET, sizeof(uint64_t))))
		goto nomem;
	if (s->L > 1 && s->L <= ROW_CACHE) {
		if (!(s->ea = malloc(2 * s->L * sizeof(double))))
			goto nomem;
		s->nslot = 1;
	}
	if (n > SAMPLE_SIZE) {
		uint64_t st = mk_rng_stream(job->d.seed, job->d.tensor, (uint64_t)s->other);
		uint64_t *tmp = malloc(SAMPLE_SIZE * sizeof(uint64_t));
		unsigned bits = 0;
		if (!tmp || !(s->samp = malloc(SAMPLE_SIZE * sizeof(uint64_t)))) {
			free(tmp);
			goto nomem;
		}
		for (uint64_t i = 0; i < SAMPLE_SIZE; i++)
			s->samp[i] = (uint64_t)(((unsigned __int128)mk_rng_u64(st, i) * n) >> 64);
		while (bits < 64 && (n - 1) >> bits)
			bits++;
		sort_u64(s->samp, tmp, SAMPLE_SIZE, bits);
		free(tmp);
		s->nsamp = SAMPLE_SIZE;
	} else {
		s->nsamp = n;
	}
	if (s->nsamp) {
		static const float qs[3] = { 0.25f, 0.5f, 0.75f };
		for (int t = 0; t < 3; t++) {
			float pos = qs[t] * (float)(s->nsamp - 1);
			s->k[t] = s->nsamp - (uint64_t)pos;
		}
	}
	job->state = s;
	return 0;
nomem:
	free_state(s);
	return mk_err_set(err, MK_ENOMEM, "out of memory");
}

static inline void softmax_step(double x, bool first, double *m, double *sum)
{
	if (first) {
		*m = x;
		*sum = 1.0;
	} else if (x > *m) {
		*sum = *sum * exp(*m - x) + 1.0;
		*m = x;
	} else {
		*sum = *sum + exp(x - *m);
	}
}

/* The histogram passes' step for one drawn element of importance imp,
 * counted m times. */
static inline void count_key(struct state *s, unsigned pass, float imp, uint64_t m)
{
	uint32_t key = misc_fkey(imp);

	if (pass == 2) {
		s->hist[key >> 16] += m;
		return;
	}
	for (int t = 0; t < 3; t++)
		if (key >> 16 == s->bucket[t] && (t == 0 || s->lo[t] != s->lo[t - 1]))
			s->lo[t][key & 0xffffu] += m;
}

/* Each pass walks the chunk by row segments [k0, k1) of row `ri` (no
 * division per element).  Pass 0 of a row whole in the chunk also sums
 * its KL (the same terms in the same order as pass 1 would); pass 1 then
 * skips it.  With a sample, passes 2 and 3 walk the drawn elements of the
 * chunk only. */
#define AF_PASS(NAME, T, FABS)							\
static void NAME##_row(uint64_t L, double *ea, double *eb, struct row *r,	\
		       const T *a, const T *b)					\
{										\
	uint64_t la = 0, lb = 0;						\
	double ma = (double)a[0], mb = (double)b[0], sa = 1.0, sb = 1.0;	\
	double kl = 0.0;							\
	for (uint64_t k = 1; k < L; k++) {					\
		double x = (double)a[k], y = (double)b[k];			\
		if (x > ma) {							\
			sa = sa * exp(ma - x) + 1.0;				\
			ma = x;							\
			la = k;							\
		} else {							\
			double e = exp(x - ma);					\
			ea[k] = e;						\
			sa = sa + e;						\
		}								\
		if (y > mb) {							\
			sb = sb * exp(mb - y) + 1.0;				\
			mb = y;							\
			lb = k;							\
		} else {							\
			double e = exp(y - mb);					\
			eb[k] = e;						\
			sb = sb + e;						\
		}								\
	}									\
	for (uint64_t k = 0; k < L; k++) {					\
		double xa = k > la ? ea[k] : exp((double)a[k] - ma);		\
		double xb = k > lb ? eb[k] : exp((double)b[k] - mb);		\
		double p = xb / sb + KL_EPS;					\
		double q = xa / sa + KL_EPS;					\
		double t = p * log(p / q);					\
		kl = kl + t;							\
	}									\
	r->ma = ma;								\
	r->sa = sa;								\
	r->mb = mb;								\
	r->sb = sb;								\
	r->kl = kl;								\
	r->done = true;								\
}										\
/* Task k of a chunk's whole rows: AF_TASK_ROWS of them from row k *	\
 * AF_TASK_ROWS, with the slot's scratch. */					\
static void NAME##_rows(void *p, unsigned k, unsigned slot)			\
{										\
	const struct af_rows *t = p;						\
	struct state *s = t->s;							\
	uint64_t L = s->L, i0 = (uint64_t)k * AF_TASK_ROWS;			\
	uint64_t i1 = t->nrows - i0 < AF_TASK_ROWS ? t->nrows : i0 + AF_TASK_ROWS; \
	double *ea = s->ea + (size_t)slot * 2 * L;				\
										\
	for (uint64_t i = i0; i < i1; i++)					\
		NAME##_row(L, ea, ea + L, &s->rows[t->row0 + i],		\
			   (const T *)t->a + i * L, (const T *)t->b + i * L);	\
}										\
static void NAME(struct state *s, unsigned pass, const T *a, const T *b,	\
		 uint64_t e0, uint64_t n, unsigned threads)			\
{										\
	uint64_t e = 0;								\
	if (e0 == 0)								\
		s->cur = 0;							\
	if (pass >= 2 && s->samp) {						\
		while (s->cur < s->nsamp && s->samp[s->cur] < e0 + n) {		\
			uint64_t g = s->samp[s->cur], m = 0, x = g - e0;	\
			while (s->cur < s->nsamp && s->samp[s->cur] == g) {	\
				s->cur++;					\
				m++;						\
			}							\
			count_key(s, pass, (float)((double)FABS(b[x] - a[x]) *	\
						   s->rows[g / s->L].kl), m);	\
		}								\
		return;								\
	}									\
	if (pass == 0 && s->ea && e0 % s->L == 0 && n >= s->L) {		\
		/* the chunk's whole rows, on the job's threads: each row's	\
		 * sums are its own, in its own order */			\
		struct af_rows t = { s, a, b, e0 / s->L, n / s->L };		\
		uint64_t nt = (t.nrows + AF_TASK_ROWS - 1) / AF_TASK_ROWS;	\
		if (nt <= UINT_MAX)						\
			mk__pool_run(threads, (unsigned)nt, NAME##_rows, &t);	\
		else	/* (more tasks than a step counts: here, in order) */	\
			for (uint64_t i = 0; i < t.nrows; i++)			\
				NAME##_row(s->L, s->ea, s->ea + s->L,		\
					   &s->rows[t.row0 + i], a + i * s->L,	\
					   b + i * s->L);			\
		e = t.nrows * s->L;						\
	}									\
	while (e < n) {								\
		uint64_t g = e0 + e, off = g % s->L, len = s->L - off;		\
		struct row *r = &s->rows[g / s->L];				\
		const T *ra = a + e, *rb = b + e;				\
		if (len > n - e)						\
			len = n - e;						\
		e += len;							\
		if (pass == 0) {						\
			if (!off && len == s->L && s->ea) {			\
				NAME##_row(s->L, s->ea, s->ea + s->L, r, ra, rb); \
				continue;					\
			}							\
			for (uint64_t k = 0; k < len; k++) {			\
				bool first = off + k == 0;			\
				softmax_step((double)ra[k], first, &r->ma, &r->sa); \
				softmax_step((double)rb[k], first, &r->mb, &r->sb); \
			}							\
		} else if (pass == 1) {						\
			double kl = r->kl;					\
			if (r->done)						\
				continue;					\
			for (uint64_t k = 0; k < len; k++) {			\
				double p = exp((double)rb[k] - r->mb) / r->sb + KL_EPS; \
				double q = exp((double)ra[k] - r->ma) / r->sa + KL_EPS; \
				double t = p * log(p / q);			\
				kl = kl + t;					\
			}							\
			r->kl = kl;						\
		} else {							\
			double kl = r->kl;					\
			for (uint64_t k = 0; k < len; k++)			\
				count_key(s, pass, (float)((double)FABS(rb[k] - ra[k]) * kl), 1); \
		}								\
	}									\
}
AF_PASS(pass_f32, float, fabsf)
AF_PASS(pass_f64, double, fabs)

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	struct state *s = job->state;
	const void *a = c->in[job->d.base], *b = c->in[s->other];

	unsigned threads = job->threads > 1 ? job->threads : 1;

	if (pass == 0 && s->ea && threads > s->nslot) {
		/* scratch for each thread of the job (one until it is known) */
		double *ea = realloc(s->ea, (size_t)threads * 2 * s->L * sizeof(double));
		if (ea) {
			s->ea = ea;
			s->nslot = threads;
		}
	}
	if (threads > s->nslot)
		threads = s->nslot ? s->nslot : 1;
	if (job->compute == MK_DT_F64)
		pass_f64(s, pass, a, b, c->elem_begin, c->count, threads);
	else
		pass_f32(s, pass, a, b, c->elem_begin, c->count, threads);
	return 0;
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;

	if (pass < 2 || !s->nsamp)
		return 0;
	if (pass == 2) {
		for (int t = 0; t < 3; t++) {
			s->bucket[t] = misc_pick_bucket(s->hist, s->k[t], &s->above[t]);
			if (t && s->bucket[t] == s->bucket[t - 1]) {
				s->lo[t] = s->lo[t - 1];   /* shared */
				continue;
			}
			if (!(s->lo[t] = calloc(MISC_NBUCKET, sizeof(uint64_t))))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		free(s->hist);
		s->hist = NULL;
		return 0;
	}
	for (int t = 0; t < 3; t++) {
		uint64_t above;
		uint32_t lo = misc_pick_bucket(s->lo[t], s->k[t] - s->above[t], &above);
		s->q[t] = misc_fkey_value(s->bucket[t] << 16 | lo);
	}
	for (int t = 2; t >= 0; t--) {
		if (t && s->lo[t] == s->lo[t - 1])
			s->lo[t] = NULL;
		else {
			free(s->lo[t]);
			s->lo[t] = NULL;
		}
	}
	{
		float iqr = s->q[2] - s->q[0];
		float w = 1.5f * iqr;
		s->thr = s->q[1] + w;
	}
	return 0;
}

#define AF_APPLY(NAME, T, FABS)							\
static void NAME(const struct state *s, const T *a, const T *b, uint64_t e0,	\
		 uint64_t n, T *o)						\
{										\
	for (uint64_t e = 0; e < n;) {						\
		uint64_t g = e0 + e, len = s->L - g % s->L;			\
		double kl = s->rows[g / s->L].kl;				\
		if (len > n - e)						\
			len = n - e;						\
		for (uint64_t k = e; k < e + len; k++) {			\
			float imp = (float)((double)FABS(b[k] - a[k]) * kl);	\
			T mask = imp >= s->thr ? (T)1 : (T)0;			\
			T d = b[k] - a[k];					\
			T p = d * mask;						\
			o[k] = a[k] + p;					\
		}								\
		e += len;							\
	}									\
}
AF_APPLY(apply_f32, float, fabsf)
AF_APPLY(apply_f64, double, fabs)

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct state *s = job->state;

	if (job->compute == MK_DT_F64)
		apply_f64(s, c->in[job->d.base], c->in[s->other], c->elem_begin, c->count, out);
	else
		apply_f32(s, c->in[job->d.base], c->in[s->other], c->elem_begin, c->count, out);
	return 0;
}

static void release(struct mk_job *job)
{
	free_state(job->state);
	job->state = NULL;
}

/* For tests: the threshold and quantiles of a finished job (NULL-safe). */
float mk_arcee_fusion_threshold(const struct mk_job *job, float q[3]);
float mk_arcee_fusion_threshold(const struct mk_job *job, float q[3])
{
	const struct state *s = job ? job->state : NULL;

	if (!s || s->other < 0)
		return NAN;
	if (q)
		memcpy(q, s->q, sizeof(s->q));
	return s->thr;
}

const struct mk_method mk_method_arcee_fusion = {
	.abi = MK_METHOD_ABI,
	.name = "arcee_fusion",
	.pretty_name = "Arcee Fusion",
	.reference_url = "https://arcee.ai",
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = 2,
		      .min_non_base = 0, .max_non_base = 1 },
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
