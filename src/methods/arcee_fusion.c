/* arcee_fusion.c - take the other model's values where they matter most.
 *
 * With a the base and b the other input (after rectify_embed_sizes):
 *   1. importance I = |b - a| * KL_row, where along the last axis
 *      p = softmax(b_row) + 1e-8, q = softmax(a_row) + 1e-8,
 *      KL_row = sum p * ln(p / q)  (float64, each row summed in element
 *      order: the softmax statistics by the online max/sum update in
 *      pass 0, KL in pass 1); I is rounded to float32 as mergekit's.
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
 * element floor(u64(s) * N / 2^64); the sorted sample indices (8 MB) are
 * walked alongside the ordered chunks of passes 2 and 3, an element
 * counting once per time it was drawn.
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
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "misc_methods.h"
#include "rng.h"

#define SAMPLE_SIZE 1000000u
#define KL_EPS 1e-8

struct row {
	double ma, sa, mb, sb;     /* softmax max and sum of exp(x - max) */
	double kl;
};

struct state {
	int other;                 /* -1: copy the single input */
	uint64_t L, nrows;
	struct row *rows;
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
	free(s->samp);
	free(s->hist);
	for (int t = 0; t < 3; t++)
		if (!t || s->lo[t] != s->lo[t - 1])
			free(s->lo[t]);   /* equal neighbours share one array */
	free(s);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
	return a < b ? -1 : a > b;
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
	if (n > SAMPLE_SIZE) {
		uint64_t st = mk_rng_stream(job->d.seed, job->d.tensor, (uint64_t)s->other);
		if (!(s->samp = malloc(SAMPLE_SIZE * sizeof(uint64_t))))
			goto nomem;
		for (uint64_t i = 0; i < SAMPLE_SIZE; i++)
			s->samp[i] = (uint64_t)(((unsigned __int128)mk_rng_u64(st, i) * n) >> 64);
		qsort(s->samp, SAMPLE_SIZE, sizeof(uint64_t), cmp_u64);
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

/* How many times element g was drawn (1 without sampling).  Elements
 * arrive in increasing order within a pass. */
static uint64_t mult(struct state *s, uint64_t g)
{
	uint64_t m = 0;

	if (!s->samp)
		return 1;
	while (s->cur < s->nsamp && s->samp[s->cur] < g)
		s->cur++;
	while (s->cur < s->nsamp && s->samp[s->cur] == g) {
		s->cur++;
		m++;
	}
	return m;
}

static void softmax_step(double x, bool first, double *m, double *sum)
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

#define AF_IMP(T, FABS)								\
	((float)((double)FABS(b[e] - a[e]) * s->rows[(e0 + e) / s->L].kl))

#define AF_PASS(NAME, T, FABS)							\
static void NAME(struct state *s, unsigned pass, const T *a, const T *b,	\
		 uint64_t e0, uint64_t n)					\
{										\
	if (e0 == 0)								\
		s->cur = 0;							\
	for (uint64_t e = 0; e < n; e++) {					\
		uint64_t g = e0 + e;						\
		struct row *r = &s->rows[g / s->L];				\
		if (pass == 0) {						\
			bool first = g % s->L == 0;				\
			softmax_step((double)a[e], first, &r->ma, &r->sa);	\
			softmax_step((double)b[e], first, &r->mb, &r->sb);	\
		} else if (pass == 1) {						\
			double p = exp((double)b[e] - r->mb) / r->sb + KL_EPS;	\
			double q = exp((double)a[e] - r->ma) / r->sa + KL_EPS;	\
			double t = p * log(p / q);				\
			r->kl = r->kl + t;					\
		} else {							\
			uint64_t m = mult(s, g);				\
			uint32_t key;						\
			if (!m)							\
				continue;					\
			key = misc_fkey(AF_IMP(T, FABS));			\
			if (pass == 2) {					\
				s->hist[key >> 16] += m;			\
				continue;					\
			}							\
			for (int t = 0; t < 3; t++)				\
				if (key >> 16 == s->bucket[t] &&		\
				    (t == 0 || s->lo[t] != s->lo[t - 1]))	\
					s->lo[t][key & 0xffffu] += m;		\
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

	if (job->compute == MK_DT_F64)
		pass_f64(s, pass, a, b, c->elem_begin, c->count);
	else
		pass_f32(s, pass, a, b, c->elem_begin, c->count);
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
	for (uint64_t e = 0; e < n; e++) {					\
		float imp = AF_IMP(T, FABS);					\
		T mask = imp >= s->thr ? (T)1 : (T)0;				\
		T d = b[e] - a[e];						\
		T p = d * mask;							\
		o[e] = a[e] + p;						\
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
