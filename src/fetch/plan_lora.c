/* plan_lora.c - mk-fetch's plan mode: LoRA inputs, W + s·B·A (DoRA: its
 * channels rescaled to the adapter's magnitudes), a bias plus s·lora_B's
 * bias, or an adapter's replacement of W, made from what was read. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "core/fsutil.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

/* A 1-dimensional float tensor of n elements in model am, or NULL. */
static const struct mk_model_tensor *vec(const struct mk_model *am, const char *name, uint64_t n)
{
	const struct mk_model_tensor *t = name ? mk_model_find(am, name) : NULL;
	return t && t->t->desc.ndim == 1 && t->t->nelem == n && mk_dtype_is_float(t->t->desc.dtype) ? t : NULL;
}

/* A LoRA input's adapter tensors against the plan: A and B 2-dimensional
 * floats whose delta has W's shape (and a magnitude per output channel),
 * a bias of W's length, or a replacement of W's element count (whose
 * place is then the input's: *rep). */
int mk__pf_lora_check(const struct mk_manifest *head, struct mk_model **models, const struct mk_plan_job *jb,
		      size_t i, const struct mk_plan_input *in, const struct mk_model_tensor **rep, struct mk_err *err)
{
	const struct mk_plan_lora *l = in->lora;
	const struct mk_model *am = models[l->model];
	const char *ref = head->models[l->model].ref;

	*rep = NULL;
	if (!am)
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: input %zu: adapter '%s' must be read from its files, not a stream",
				  jb->id, i, ref);
	if (l->bias) {
		if (!vec(am, l->bias, in->nelem) || in->desc.ndim != 1 || !mk_dtype_is_float(in->desc.dtype))
			return mk_err_set(err, MK_EMISMATCH,
					  "job %u: input %zu ('%s'): adapter '%s' has no float '%s' of %llu elements as the plan says; run mk-plan again",
					  jb->id, i, in->tensor, ref, l->bias, (unsigned long long)in->nelem);
		return 0;
	}
	if (l->replace) {
		const struct mk_model_tensor *t = mk_model_find(am, l->replace);
		if (!t || t->t->nelem != in->nelem || !mk_dtype_is_float(t->t->desc.dtype) ||
		    !mk_dtype_is_float(in->desc.dtype))
			return mk_err_set(err, MK_EMISMATCH,
					  "job %u: input %zu: adapter '%s' %s '%s' of %llu float elements, as the plan says; run mk-plan again",
					  jb->id, i, ref, t ? "does not have" : "has no", l->replace,
					  (unsigned long long)in->nelem);
		*rep = t;
		if (!l->a)
			return 0;
	}
	const struct mk_model_tensor *a = mk_model_find(am, l->a), *b = mk_model_find(am, l->b);
	const uint64_t *ws = in->desc.shape;
	bool ok = a && b && a->t->desc.ndim == 2 && b->t->desc.ndim == 2 && mk_dtype_is_float(a->t->desc.dtype) &&
		  mk_dtype_is_float(b->t->desc.dtype) && mk_dtype_is_float(in->desc.dtype) && in->desc.ndim == 2 &&
		  a->t->desc.shape[0] == b->t->desc.shape[1] &&
		  (l->transpose ? ws[0] == a->t->desc.shape[1] && ws[1] == b->t->desc.shape[0] :
				  ws[0] == b->t->desc.shape[0] && ws[1] == a->t->desc.shape[1]) &&
		  (!l->magnitude || vec(am, l->magnitude, ws[l->transpose ? 1 : 0]));
	if (!ok)
		return mk_err_set(err, MK_EMISMATCH,
				  "job %u: input %zu ('%s'): adapter '%s''s '%s' and '%s'%s%s do not make a delta of its shape as the plan says; run mk-plan again",
				  jb->id, i, in->tensor, ref, l->a, l->b, l->magnitude ? " with " : "",
				  l->magnitude ? l->magnitude : "");
	return 0;
}

/* Read an adapter tensor whole into float32 (malloc'ed). */
static int read_f32(const struct mk_model *m, int *fds, const char *name, float **out, struct mk_err *err)
{
	const struct mk_model_tensor *t = mk_model_find(m, name);
	uint64_t bytes = t->t->end - t->t->begin;
	void *raw = malloc(bytes ? bytes : 1);
	float *f = malloc((t->t->nelem ? t->t->nelem : 1) * sizeof(float));
	int rc = 0;

	*out = NULL;
	if (!raw || !f)
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	else if ((rc = mk_pread_exact(fds[t->shard], raw, bytes, m->shards[t->shard]->data_start + t->t->begin,
				      m->shards[t->shard]->path, err)))
		;
	else if (mk_dtype_convert(MK_DT_F32, f, t->t->desc.dtype, raw, t->t->nelem))
		rc = mk_err_set(err, MK_EUNSUPPORTED, "adapter tensor '%s': cannot convert %s to float32", name,
				mk_dtype_name(t->t->desc.dtype));
	free(raw);
	if (rc)
		free(f);
	else
		*out = f;
	return rc;
}

/* Rows first .. first+nrows-1 of the delta s·B·A (transposed: of
 * s·(B·A)ᵀ), rows of rl elements, into d: one sgemm. */
static void delta_rows(const struct lora_ab *ab, bool transpose, float s, uint64_t first, uint64_t nrows, uint64_t rl,
		       float *d)
{
	if (!transpose)          /* B[first..] · A */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nrows, (blasint)rl, (blasint)ab->r, 1.0f,
			    ab->b + first * ab->r, (blasint)ab->r, ab->a, (blasint)ab->a1, 0.0f, d, (blasint)rl);
	else                     /* A[:, first..]ᵀ · Bᵀ */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)nrows, (blasint)rl, (blasint)ab->r, 1.0f,
			    ab->a + first, (blasint)ab->a1, ab->b, (blasint)ab->r, 0.0f, d, (blasint)rl);
	for (uint64_t e = 0; e < nrows * rl; e++)
		d[e] *= s;
}

#define DORA_BLOCK (1u << 20)    /* bytes of W read at a time for the norms */

/* DoRA's factor per output channel, magnitude / ‖channel of W + s·ΔW‖₂
 * (PEFT's merge: W as the merge's dtype wdt, the sum in float32, the
 * norm of it, the division in float32): a pass over the whole W first,
 * read again from its file a block of rows at a time (so a chunk that
 * cuts rows, or a norm over columns, needs no more than a block held),
 * the squares summed in double. */
static int dora_factors(struct lora_ab *ab, const struct pf *p, struct mk_model **models, int **fds,
			const struct tag *t, enum mk_dtype wdt, struct mk_err *err)
{
	const struct mk_plan_job *jb = p->jobs[t->job];
	const struct mk_plan_input *in = mk_plan_job_input(jb, t->input);
	const struct mk_plan_lora *l = in->lora;
	const struct src *sr = &p->src[t->job][t->input];
	uint64_t rows = in->desc.shape[0], rl = in->desc.shape[1], nch = in->desc.shape[l->transpose ? 1 : 0], rb;
	enum mk_dtype rdt = sr->rdt;
	int rc = 0;

	if (sr->nseg != 1 || sr->seg[0].remote || sr->seg[0].strided || sr->feed >= 0 || sr->seg[0].fd < 0)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "job %u: input %zu ('%s'): a DoRA adapter needs the whole weight read twice (its norms first), "
				  "from a local file: not a stream, a remote shard or a strided view; download the model first",
				  jb->id, t->input, in->tensor);
	(void)mk_dtype_nbytes(rdt, rl, &rb);
	uint64_t blk = rb && DORA_BLOCK / rb ? DORA_BLOCK / rb : 1;
	if (blk > rows)
		blk = rows;
	uint64_t braw;
	(void)mk_dtype_nbytes(rdt, blk * rl, &braw);
	double *sq = calloc(nch ? nch : 1, sizeof(double));
	float *w = malloc((blk * rl + 1) * sizeof(float)), *d = malloc((blk * rl + 1) * sizeof(float)),
	      *mag = NULL;
	uint8_t *raw = malloc(braw + 1), *cw = malloc(braw * 8 + 8);   /* W as wdt (at most 8 bytes an element) */
	if (!sq || !w || !d || !raw || !cw) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (uint64_t r0 = 0; r0 < rows && !rc; r0 += blk) {
		uint64_t nr = rows - r0 < blk ? rows - r0 : blk, nb;
		(void)mk_dtype_nbytes(rdt, nr * rl, &nb);
		uint64_t off;
		(void)mk_dtype_nbytes(rdt, r0 * rl, &off);
		if ((rc = mk_pread_exact(sr->seg[0].fd, raw, nb, sr->seg[0].data_off + off, in->tensor, err)))
			break;
		if (mk_dtype_convert(wdt, cw, rdt, raw, nr * rl) || mk_dtype_convert(MK_DT_F32, w, wdt, cw, nr * rl)) {
			rc = mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot convert '%s' to float32", jb->id, in->tensor);
			break;
		}
		delta_rows(ab, l->transpose, (float)l->scale, r0, nr, rl, d);
		for (uint64_t i = 0; i < nr; i++)
			for (uint64_t j = 0; j < rl; j++) {
				double v = (double)(w[i * rl + j] + d[i * rl + j]);
				sq[l->transpose ? j : r0 + i] += v * v;
			}
	}
	if (rc)
		goto out;
	if ((rc = read_f32(models[l->model], fds[l->model], l->magnitude, &mag, err)))
		goto out;
	if (!(ab->fac = malloc((nch ? nch : 1) * sizeof(float)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (uint64_t c = 0; c < nch; c++)
		ab->fac[c] = mag[c] / (float)sqrt(sq[c]);
out:
	free(sq);
	free(w);
	free(d);
	free(raw);
	free(cw);
	free(mag);
	return rc;
}

/* The chunk of a LoRA input (t), read as `data`, made into what mk-fetch
 * sends, in the input's LoRA dtype wdt (mk__pf_lora_dtype: W's, or
 * --lora-merge-dtype's): W, taken as wdt (a replacement in W's place),
 * then W + s·B·A over the chunk's elements in float32 (the delta of every
 * row the chunk touches by one sgemm: B's rows times A; transposed, A's
 * columns times B's rows), DoRA's factor per output channel applied,
 * rounded to wdt; or a bias plus s·lora_B's bias. */
int mk__pf_lora_apply(struct lora_work *lw, const struct pf *p, struct mk_model **models, int **fds,
		      const struct tag *t, const void *data, const void **sent, struct mk_err *err)
{
	const struct mk_plan_job *jb = p->jobs[t->job];
	const struct mk_plan_input *in = mk_plan_job_input(jb, t->input);
	const struct mk_plan_lora *l = in->lora;
	enum mk_dtype wdt = mk__pf_lora_dtype(in), rdt = p->src[t->job][t->input].rdt;
	uint64_t n = t->c.elem_count, bytes;
	size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);

	(void)mk_dtype_nbytes(wdt, n, &bytes);
	if (mk__pf_grow((void **)&lw->out, &lw->ocap, (size_t)bytes + 1, 1) ||
	    mk__pf_grow((void **)&lw->w, &lw->wcap, n + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*sent = lw->out;
	/* W (or its replacement) as the merge's dtype: a model loaded in it */
	if (mk_dtype_convert(wdt, lw->out, rdt, data, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot convert input %zu ('%s') to %s", jb->id, t->input,
				  l->replace ? l->replace : in->tensor, mk_dtype_name(wdt));
	if (!l->a && !l->bias)
		return 0;
	if (mk_dtype_convert(MK_DT_F32, lw->w, wdt, lw->out, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: input %zu is %s: cannot add a LoRA delta to it", jb->id,
				  t->input, mk_dtype_name(wdt));
	/* A and B (or the bias, DoRA's factors) of this job's input, read once per job */
	if (lw->nab < nin) {
		struct lora_ab *q = realloc(lw->ab, nin * sizeof(*q));
		if (!q)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		memset(q + lw->nab, 0, (nin - lw->nab) * sizeof(*q));
		lw->ab = q;
		lw->nab = nin;
	}
	struct lora_ab *ab = &lw->ab[t->input];
	if (!ab->live || ab->job != t->job || ab->input != t->input) {
		const struct mk_model *am = models[l->model];
		int rc;
		free(ab->a);
		free(ab->b);
		free(ab->fac);
		free(ab->bias);
		*ab = (struct lora_ab){ .job = t->job, .input = t->input };
		if (l->bias)
			rc = read_f32(am, fds[l->model], l->bias, &ab->bias, err);
		else {
			const struct mk_st_tensor *ta = mk_model_find(am, l->a)->t, *tb = mk_model_find(am, l->b)->t;
			ab->r = ta->desc.shape[0];
			ab->a1 = ta->desc.shape[1];
			ab->b0 = tb->desc.shape[0];
			rc = read_f32(am, fds[l->model], l->a, &ab->a, err);
			if (!rc)
				rc = read_f32(am, fds[l->model], l->b, &ab->b, err);
			if (!rc && l->magnitude)
				rc = dora_factors(ab, p, models, fds, t, wdt, err);
		}
		if (rc)
			return mk_err_prefix(err, "job %u: ", jb->id);
		ab->live = true;
	}
	float s = (float)l->scale;
	if (l->bias) {           /* PEFT: bias + lora_B.bias · s, in float32 */
		for (uint64_t e = 0; e < n; e++)
			lw->w[e] += ab->bias[t->at + e] * s;
	} else {
		uint64_t rl = in->desc.shape[1], first = t->at / rl, last = (t->at + n - 1) / rl, nrows = last - first + 1;
		if (mk__pf_grow((void **)&lw->d, &lw->dcap, (size_t)(nrows * rl) + 1, sizeof(float)))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		delta_rows(ab, l->transpose, s, first, nrows, rl, lw->d);
		float *d = lw->d + (t->at - first * rl);
		/* an embedding's delta goes to W's dtype before the add (PEFT's
		 * plain LoRA; its DoRA adds the float32 delta) */
		if (l->embedding && !l->magnitude && wdt != MK_DT_F32 &&
		    (mk_dtype_convert(wdt, lw->out, MK_DT_F32, d, n) || mk_dtype_convert(MK_DT_F32, d, wdt, lw->out, n)))
			return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(wdt));
		for (uint64_t e = 0; e < n; e++)
			lw->w[e] += d[e];
		if (ab->fac)
			for (uint64_t e = 0; e < n; e++) {
				uint64_t at = t->at + e;
				lw->w[e] *= ab->fac[l->transpose ? at % rl : at / rl];
			}
	}
	if (mk_dtype_convert(wdt, lw->out, MK_DT_F32, lw->w, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(wdt));
	return 0;
}
