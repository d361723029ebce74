/* vocab_rows.c - mk-merge's vocabulary jobs: each input's rows aligned to the
 * merged vocabulary before the method sees them.  A range of such a job
 * (mk-fetch cuts them so) has one fill and every input wholly there or
 * not; the inputs a token is missing from, or all under `force`, take
 * the fill: zeros, another input's row, the average of the inputs that
 * have it (summed in input order, rounded to the vocabulary dtype after
 * every step, as torch does in that dtype), or for padding rows the mean
 * of the input's own aligned rows, summed as the rows pass (float64, in
 * row order) - a statistics pass of its own, never the matrix held. */
#include <stdlib.h>
#include <string.h>
#include "merge_impl.h"

#define TILE 4096u

/* v[0..n) rounded to dtype dt (and back to double) */
static void round_to(enum mk_dtype dt, double *v, size_t n)
{
	uint64_t tmp[TILE];

	if (dt == MK_DT_F64)
		return;
	mk_dtype_convert(dt, tmp, MK_DT_F64, v, n);
	mk_dtype_convert(MK_DT_F64, v, dt, tmp, n);
}

/* n elements of input i's bytes from element off of the range, as
 * doubles, cast to its load dtype first (as mergekit loads it) */
static void load(const struct run *r, size_t i, uint64_t off, size_t n, double *out)
{
	const struct inbuf *ib = &r->ib[i];
	const struct mk_plan_input *in = mk_plan_job_input(r->pj, i);

	mk_dtype_convert(MK_DT_F64, out, ib->dtype, (const char *)ib->data + off * mk_dtype_bits(ib->dtype) / 8, n);
	if (in && in->load_dtype != ib->dtype)
		round_to(in->load_dtype, out, n);
}

/* The fill of n elements from the range's element off (row offset col0
 * within a row of rl) for input i, into dst (dtype D). */
static int fill_tile(struct run *r, const struct mk_vocab_fill *f, size_t i, uint64_t off, uint64_t b, size_t n,
		     void *dst, struct mk_err *err)
{
	const struct mk_plan_vocab *vc = r->pj->vocab;
	enum mk_dtype D = vc->dtype;
	double acc[TILE], x[TILE];
	size_t cnt = 0;

	switch (f->kind) {
	case MK_FILL_ZERO:
		memset(acc, 0, n * sizeof(*acc));
		break;
	case MK_FILL_COPY:
		if (!r->ib[f->from].have)
			return mk_err_set(err, MK_ECORRUPT, "job %u (%s): input %u sent no rows to fill rows from %llu with",
					  r->pj->id, r->name, f->from, (unsigned long long)(b / r->out_row_len));
		load(r, f->from, off, n, acc);
		round_to(D, acc, n);
		break;
	case MK_FILL_AVERAGE:
		memset(acc, 0, n * sizeof(*acc));
		for (size_t k = 0; k < r->pj->ninputs; k++) {
			if (!r->ib[k].have)
				continue;
			load(r, k, off, n, x);
			for (size_t e = 0; e < n; e++)
				acc[e] += x[e];
			round_to(D, acc, n);
			cnt++;
		}
		if (!cnt)
			return mk_err_set(err, MK_ECORRUPT, "job %u (%s): no input sent the rows from %llu to average",
					  r->pj->id, r->name, (unsigned long long)(b / r->out_row_len));
		for (size_t e = 0; e < n; e++)
			acc[e] /= (double)cnt;
		round_to(D, acc, n);
		break;
	case MK_FILL_MEAN: {
		const double *cs = r->vsum + i * r->out_row_len;
		for (size_t e = 0; e < n; e++)
			acc[e] = cs[(b + e) % r->out_row_len] / (double)vc->tokens;
		break;
	}
	}
	mk_dtype_convert(D, dst, MK_DT_F64, acc, n);
	return 0;
}

int mk__vocab_range(struct run *r, uint64_t b, uint64_t n, struct mk_err *err)
{
	const struct mk_plan_vocab *vc = r->pj->vocab;
	uint64_t rl = r->out_row_len ? r->out_row_len : 1, row = b / rl;
	const struct mk_vocab_fill *f = mk_plan_vocab_fill_at(r->pj, row);
	size_t ni = r->pj->ninputs, es = mk_dtype_bits(vc->dtype) / 8;
	int rc = 0;

	if (b == 0) {
		/* a new pass over the rows: the padding's sums begin again */
		if (!r->vsum && !(r->vsum = calloc(ni * rl + 1, sizeof(*r->vsum))))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		memset(r->vsum, 0, ni * rl * sizeof(*r->vsum));
	}
	if (!r->vsum)
		return mk_err_set(err, MK_ECORRUPT, "job %u (%s): rows from %llu came before row 0", r->pj->id, r->name,
				  (unsigned long long)row);
	for (size_t i = 0; i < ni && !rc; i++) {
		struct inbuf *in = &r->ib[i];
		bool own = in->have && !(f && f->force);
		if (in->have != (mk_plan_vocab_src_row(r->pj, i, row) >= 0))
			return mk_err_set(err, MK_ECORRUPT, "job %u (%s): input %zu %s rows from %llu, which the plan %s", r->pj->id,
					  r->name, i, in->have ? "sent" : "did not send", (unsigned long long)row,
					  in->have ? "does not give it" : "gives it");
		if (!own) {
			if (!f)
				return mk_err_set(err, MK_ECORRUPT, "job %u (%s): input %zu lacks rows from %llu and the plan has no fill for them",
						  r->pj->id, r->name, i, (unsigned long long)row);
			if (mk__pool_grow(r->pool, &in->fill, &in->fill_cap, (size_t)n * es + 1))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
	}
	/* fill first (the sources are the raw rows), then switch the inputs;
	 * a fill that is the same for every input is made once */
	const struct inbuf *made = NULL;
	for (size_t i = 0; i < ni && !rc; i++) {
		struct inbuf *in = &r->ib[i];
		if (in->have && !(f && f->force))
			continue;
		if (!r->job.used[i] && f->kind == MK_FILL_MEAN)
			continue;
		if (made && f->kind != MK_FILL_MEAN) {
			memcpy(in->fill, made->fill, (size_t)n * es);
			continue;
		}
		for (uint64_t t = 0; t < n && !rc; t += TILE) {
			size_t k = n - t < TILE ? (size_t)(n - t) : TILE;
			rc = fill_tile(r, f, i, t, b + t, k, (char *)in->fill + t * es, err);
		}
		made = in;
	}
	for (size_t i = 0; i < ni && !rc; i++) {
		struct inbuf *in = &r->ib[i];
		if (in->have && !(f && f->force))
			continue;
		in->data = in->fill;
		in->dtype = vc->dtype;
		in->have = true;
		in->begin = b;
		in->count = n;
	}
	/* the padding's sums: the rows of the vocabulary as aligned */
	if (!rc && row < vc->tokens) {
		double x[TILE];
		for (size_t i = 0; i < ni; i++) {
			if (!r->job.used[i])
				continue;
			double *cs = r->vsum + i * rl;
			for (uint64_t t = 0; t < n; t += TILE) {
				size_t k = n - t < TILE ? (size_t)(n - t) : TILE;
				load(r, i, t, k, x);
				for (size_t e = 0; e < k; e++)
					cs[(b + t + e) % rl] += x[e];
			}
		}
	}
	return rc;
}
