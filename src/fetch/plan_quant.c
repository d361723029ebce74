/* plan_quant.c - mk-fetch's plan mode: weights a quantized checkpoint
 * stores quantized (the JOB's "quant", mk-stream(5)), dequantized chunk
 * by chunk as they are read: block FP8, each element times its block's
 * scale in float32, rounded to the dtype sent, as transformers
 * dequantizes.  A weight's scales are read whole once per job (one float
 * per 128x128 block: 1/16384 of the weight's elements), so what this
 * holds beside a chunk is the chunk as float32 and as sent.  An input
 * assembled from experts stored one by one ("scales": one tensor per
 * source) is dequantized source by source: a chunk may span sources, and
 * each element takes the scales of the source it comes from, its block
 * counted in that source's matrix.  Only one source's scales are held at
 * a time (read whole when the first chunk that reaches it comes: 1/16384
 * of that source's elements, 2 KB for a DeepSeek-V3 expert's 2048x7168),
 * so memory stays bounded by the largest source, not the assembly; the
 * chunks come in order, so each source's are read once per job.
 *
 * MXFP4 is sent in the dequantized tensor's order [E, C, R], the stored
 * one's [E, R, C] transposed: a chunk's elements are scattered over its
 * expert's codes, so the codes and scales of the expert a chunk is in
 * are read whole (R * C * 21/32 bytes: the codes, the scales as read and
 * as floats; 10.9 MB for gpt-oss-120b's gate_up_proj) and kept,
 * one expert per input of the job, while its chunks stay in it; the
 * chunk the reader read (as many bytes, in stored order) is not used. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

/* The scales' shape for a weight of desc wd and blocks b: the weight's
 * leading axes, then ⌈rows/b0⌉, ⌈cols/b1⌉. */
static bool scale_shape_ok(const struct mk_tensor_desc *wd, const struct mk_tensor_desc *sd, const uint32_t b[2])
{
	if (sd->ndim != wd->ndim || wd->ndim < 2)
		return false;
	for (unsigned k = 0; k < wd->ndim; k++) {
		uint64_t want = wd->shape[k];
		if (k + 2 >= wd->ndim)
			want = (want + b[k + 2 - wd->ndim] - 1) / b[k + 2 - wd->ndim];
		if (sd->shape[k] != want)
			return false;
	}
	return true;
}

bool mk__pf_mxfp4_fits(const struct mk_tensor_desc *sd, const struct mk_tensor_desc *in)
{
	return sd->dtype == MK_DT_U8 && sd->ndim == 4 && in->dtype == MK_DT_F4 && in->ndim == 3 &&
	       sd->shape[3] == 16 && sd->shape[0] == in->shape[0] && sd->shape[1] == in->shape[2] &&
	       in->shape[1] % 32 == 0 && sd->shape[2] == in->shape[1] / 32;
}

uint64_t mk__pf_quant_held(const struct mk_plan_input *in)
{
	if (!in->quant || in->quant->kind != MK_QUANT_MXFP4 || in->desc.ndim != 3)
		return 0;
	return in->desc.shape[2] * (in->desc.shape[1] / 32) * (16 + 1 + sizeof(float));
}

static int mxfp4_check(const struct mk_manifest *head, struct mk_model **models, int **fds,
		       const struct mk_plan_job *jb, size_t i, const struct mk_plan_input *in, struct mk_err *err)
{
	const struct mk_model *m = models[in->model];
	const char *ref = head->models[in->model].ref;
	const struct mk_model_tensor *s = mk_model_find(m, in->quant->scale), *b = mk_model_find(m, in->tensor);
	const uint64_t *sh = in->desc.shape;

	if (!s || s->t->desc.dtype != MK_DT_U8 || s->t->desc.ndim != 3 || s->t->desc.shape[0] != sh[0] ||
	    s->t->desc.shape[1] != sh[2] || s->t->desc.shape[2] != sh[1] / 32)
		return mk_err_set(err, MK_EMISMATCH,
				  "job %u: input %zu ('%s'): model '%s' %s '%s' of one U8 scale per 32 values as the "
				  "plan says; run mk-plan again",
				  jb->id, i, in->tensor, ref, s ? "does not have" : "has no", in->quant->scale);
	if (s->t->stride || fds[in->model][s->shard] < 0 || !b || b->t->stride || fds[in->model][b->shard] < 0)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "job %u: input %zu ('%s'): the MXFP4 codes and scales '%s' of model '%s' must be read "
				  "from a local file; download the model first",
				  jb->id, i, in->tensor, in->quant->scale, ref);
	return 0;
}

int mk__pf_quant_check(const struct mk_manifest *head, struct mk_model **models, int **fds,
		       const struct mk_plan_job *jb, size_t i, const struct mk_plan_input *in, struct mk_err *err)
{
	const struct mk_plan_quant *qz = in->quant;
	const struct mk_model *m = models[in->model];
	const char *ref = head->models[in->model].ref;

	if (!m)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "job %u: input %zu ('%s'): a quantized weight of '%s' must be read from its files (its "
				  "scales beside it), not a stream",
				  jb->id, i, in->tensor, ref);
	if (qz->kind == MK_QUANT_MXFP4)
		return mxfp4_check(head, models, fds, jb, i, in, err);
	for (size_t k = 0; k < (qz->nscales ? qz->nscales : 1); k++) {
		const char *sname = qz->nscales ? qz->scales[k] : qz->scale;
		const struct mk_model_tensor *s = mk_model_find(m, sname);
		const struct mk_model_tensor *w = qz->nscales ? mk_model_find(m, in->sources[k]) : NULL;
		const struct mk_tensor_desc *wd = qz->nscales ? (w ? &w->t->desc : NULL) : &in->desc;
		if (!s || !wd || (s->t->desc.dtype != MK_DT_F32 && s->t->desc.dtype != MK_DT_BF16) ||
		    !scale_shape_ok(wd, &s->t->desc, qz->block))
			return mk_err_set(err, MK_EMISMATCH,
					  "job %u: input %zu ('%s'): model '%s' %s '%s' of one float32 scale per %ux%u block "
					  "as the plan says; run mk-plan again",
					  jb->id, i, in->tensor, ref, s ? "does not have" : "has no", sname, qz->block[0],
					  qz->block[1]);
		if (s->t->stride || fds[in->model][s->shard] < 0)
			return mk_err_set(err, MK_EUNSUPPORTED,
					  "job %u: input %zu ('%s'): the scales '%s' of model '%s' must be read from a local "
					  "file; download the model first",
					  jb->id, i, in->tensor, sname, ref);
	}
	return 0;
}

/* The scales of input t->input of job t->job (of its source src where
 * it is assembled), as float32, read whole. */
static int read_scales(struct quant_work *qw, const struct pf *p, struct mk_model **models, int **fds,
		       const struct tag *t, size_t src, struct mk_err *err)
{
	const struct mk_plan_input *in = mk_plan_job_input(p->jobs[t->job], t->input);
	const struct mk_model *m = models[in->model];
	const char *sname = in->quant->nscales ? in->quant->scales[src] : in->quant->scale;
	const struct mk_model_tensor *s = mk_model_find(m, sname);
	uint64_t bytes = s->t->end - s->t->begin, n = s->t->nelem;
	void *raw = malloc(bytes ? bytes : 1);
	int rc = 0;

	if (!raw || mk__pf_grow((void **)&qw->scale, &qw->scap, (size_t)n + 1, sizeof(float))) {
		free(raw);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	rc = mk_pread_exact(fds[in->model][s->shard], raw, bytes, m->shards[s->shard]->data_start + s->t->begin,
			    m->shards[s->shard]->path, err);
	if (!rc && mk_dtype_convert(MK_DT_F32, qw->scale, s->t->desc.dtype, raw, n))
		rc = mk_err_set(err, MK_EUNSUPPORTED, "scales '%s': cannot convert %s to float32", sname,
				mk_dtype_name(s->t->desc.dtype));
	free(raw);
	if (!rc) {
		qw->job = t->job;
		qw->input = t->input;
		qw->src = src;
		qw->live = true;
	}
	return rc;
}

/* Expert e of MXFP4 input t->input of job t->job: its codes (R * G * 16
 * bytes) and scales (R * G, as the floats 2^(s - 127)) read, in the
 * input's slot. */
static int mxfp4_expert(struct quant_work *qw, const struct pf *p, struct mk_model **models, int **fds,
			const struct tag *t, uint64_t e, struct mxfp4_expert **out, struct mk_err *err)
{
	const struct mk_plan_input *in = mk_plan_job_input(p->jobs[t->job], t->input);
	const struct mk_model *m = models[in->model];
	const struct mk_model_tensor *b = mk_model_find(m, in->tensor), *s = mk_model_find(m, in->quant->scale);
	uint64_t rg = in->desc.shape[2] * (in->desc.shape[1] / 32);
	struct mxfp4_expert *x;
	int rc;

	if (t->input >= qw->nmx) {
		size_t cap = qw->nmx;
		if (mk__pf_grow((void **)&qw->mx, &cap, t->input + 1, sizeof(*qw->mx)))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		memset(qw->mx + qw->nmx, 0, (cap - qw->nmx) * sizeof(*qw->mx));
		qw->nmx = cap;
	}
	*out = x = &qw->mx[t->input];
	if (x->live && x->job == t->job && x->expert == e)
		return 0;
	x->live = false;
	if (mk__pf_grow((void **)&x->codes, &x->ccap, (size_t)(rg * 17) + 1, 1) ||
	    mk__pf_grow((void **)&x->scale, &x->scap, (size_t)rg + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	uint8_t *sc = x->codes + rg * 16;
	if ((rc = mk_pread_exact(fds[in->model][b->shard], x->codes, rg * 16,
				 m->shards[b->shard]->data_start + b->t->begin + e * rg * 16, m->shards[b->shard]->path,
				 err)) ||
	    (rc = mk_pread_exact(fds[in->model][s->shard], sc, rg, m->shards[s->shard]->data_start + s->t->begin + e * rg,
				 m->shards[s->shard]->path, err)))
		return rc;
	/* 2^(s - 127) in float32, as torch.ldexp's power of two (255: inf) */
	for (uint64_t k = 0; k < rg; k++)
		x->scale[k] = sc[k] == 255 ? INFINITY : ldexpf(1.0f, (int)sc[k] - 127);
	x->job = t->job;
	x->expert = e;
	x->live = true;
	return 0;
}

/* An MXFP4 chunk: element (e, c, r) of [E, C, R] is code (e, r, c) times
 * the scale of its block (e, r, c / 32), in float32, rounded to D. */
static int mxfp4_apply(struct quant_work *qw, const struct pf *p, struct mk_model **models, int **fds,
		       const struct tag *t, const void **sent, struct mk_err *err)
{
	static const float fp4[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
				       -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };
	const struct mk_plan_job *jb = p->jobs[t->job];
	const struct mk_plan_input *in = mk_plan_job_input(jb, t->input);
	uint64_t n = t->c.elem_count, cols = in->desc.shape[1], rows = in->desc.shape[2], g = cols / 32, bytes;
	struct mxfp4_expert *x = NULL;
	int rc;

	(void)mk_dtype_nbytes(in->quant->dtype, n, &bytes);
	if (mk__pf_grow((void **)&qw->out, &qw->ocap, (size_t)bytes + 1, 1) ||
	    mk__pf_grow((void **)&qw->w, &qw->wcap, (size_t)n + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	/* a run of r at one (e, c): its codes 16 * g bytes apart */
	for (uint64_t k = 0; k < n;) {
		uint64_t at = t->at + k, r = at % rows, c = (at / rows) % cols, e = at / rows / cols;
		uint64_t end = rows - r < n - k ? rows - r : n - k;
		if ((rc = mxfp4_expert(qw, p, models, fds, t, e, &x, err)))
			return mk_err_prefix(err, "job %u: ", jb->id);
		const uint8_t *cb = x->codes + (c / 32) * 16 + (c % 32) / 2;
		const float *sc = x->scale + c / 32;
		unsigned shift = (c & 1) * 4;
		for (uint64_t j = 0; j < end; j++)
			qw->w[k + j] = fp4[(cb[(r + j) * g * 16] >> shift) & 15] * sc[(r + j) * g];
		k += end;
	}
	if (mk_dtype_convert(in->quant->dtype, qw->out, MK_DT_F32, qw->w, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id,
				  mk_dtype_name(in->quant->dtype));
	*sent = qw->out;
	return 0;
}

/* Elements off .. off+n-1 of a matrix stack of desc sd, at w (float32),
 * times their blocks' scales: element (mat, r, c) times
 * scale[mat][r / b0][c / b1], a row piece at a time. */
static void scale_run(float *w, uint64_t off, uint64_t n, const struct mk_tensor_desc *sd, const uint32_t b[2],
		      const float *scale)
{
	uint64_t rows = sd->shape[sd->ndim - 2], cols = sd->shape[sd->ndim - 1];
	uint64_t srows = (rows + b[0] - 1) / b[0], scols = (cols + b[1] - 1) / b[1];

	for (uint64_t e = 0; e < n;) {
		uint64_t at = off + e, c = at % cols, rr = at / cols, r = rr % rows, mat = rr / rows;
		uint64_t end = cols - c < n - e ? cols - c : n - e;
		const float *srow = scale + (mat * srows + r / b[0]) * scols;
		float *wr = w + e;
		for (uint64_t k = 0; k < end;) {
			uint64_t blk = (c + k) / b[1], stop = (blk + 1) * b[1] - c;
			float sc = srow[blk];
			if (stop > end)
				stop = end;
			for (; k < stop; k++)
				wr[k] *= sc;
		}
		e += end;
	}
}

int mk__pf_quant_apply(struct quant_work *qw, const struct pf *p, struct mk_model **models, int **fds,
		       const struct tag *t, const void *data, const void **sent, struct mk_err *err)
{
	const struct mk_plan_job *jb = p->jobs[t->job];
	const struct mk_plan_input *in = mk_plan_job_input(jb, t->input);
	const struct mk_plan_quant *qz = in->quant;

	if (qz->kind == MK_QUANT_MXFP4)
		return mxfp4_apply(qw, p, models, fds, t, sent, err);
	uint64_t n = t->c.elem_count, bytes, base = 0;
	size_t src = 0;
	int rc;
	(void)mk_dtype_nbytes(qz->dtype, n, &bytes);
	if (mk__pf_grow((void **)&qw->out, &qw->ocap, (size_t)bytes + 1, 1) ||
	    mk__pf_grow((void **)&qw->w, &qw->wcap, (size_t)n + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (mk_dtype_convert(MK_DT_F32, qw->w, in->desc.dtype, data, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: input %zu ('%s'): cannot convert %s to float32", jb->id,
				  t->input, in->tensor, mk_dtype_name(in->desc.dtype));
	/* a source at a time (the input itself where not assembled): the
	 * part of the chunk within it scaled by its scales */
	for (uint64_t e = 0; e < n;) {
		const struct mk_tensor_desc *sd = &in->desc;
		uint64_t at = t->at + e, len;
		if (qz->nscales) {
			for (;;) {      /* the source holding element at */
				const struct mk_model_tensor *mt = mk_model_find(models[in->model], in->sources[src]);
				sd = &mt->t->desc;
				if (at < base + mt->t->nelem || src + 1 == qz->nscales)
					break;
				base += mt->t->nelem;
				src++;
			}
		}
		len = mk_tensor_desc_count(sd) - (at - base);
		if (len > n - e)
			len = n - e;
		if (!qw->live || qw->job != t->job || qw->input != t->input || qw->src != src) {
			qw->live = false;
			if ((rc = read_scales(qw, p, models, fds, t, src, err)))
				return mk_err_prefix(err, "job %u: ", jb->id);
		}
		scale_run(qw->w + e, at - base, len, sd, qz->block, qw->scale);
		e += len;
	}
	if (mk_dtype_convert(qz->dtype, qw->out, MK_DT_F32, qw->w, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(qz->dtype));
	*sent = qw->out;
	return 0;
}
