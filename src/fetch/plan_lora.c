/* plan_lora.c - mk-fetch's plan mode: LoRA inputs, W + s·B·A or an adapter's
 * replacement of W, made from what was read. */
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include "core/fsutil.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

/* A LoRA input's adapter tensors against the plan: A and B 2-dimensional
 * floats whose delta has W's shape, or a replacement of W's element count
 * (whose place is then the input's: *rep). */
int mk__pf_lora_check(const struct mk_manifest *head, struct mk_model **models, const struct mk_plan_job *jb,
		      size_t i, const struct mk_plan_input *in, const struct mk_model_tensor **rep, struct mk_err *err)
{
	const struct mk_plan_lora *l = in->lora;
	const struct mk_model *am = models[l->model];
	const char *ref = head->models[l->model].ref;

	*rep = NULL;
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
				  ws[0] == b->t->desc.shape[0] && ws[1] == a->t->desc.shape[1]);
	if (!ok)
		return mk_err_set(err, MK_EMISMATCH,
				  "job %u: input %zu ('%s'): adapter '%s''s '%s' and '%s' do not make a delta of its shape as the plan says; run mk-plan again",
				  jb->id, i, in->tensor, ref, l->a, l->b);
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

/* The chunk of a LoRA input (t), read as `data`, made into what mk-fetch
 * sends: a replacement converted to W's dtype; else W + s·B·A over the
 * chunk's elements, in float32: the delta of every row the chunk touches
 * by one sgemm (B's rows times A; transposed, A's columns times B's
 * rows), scaled, then added to W and rounded to W's dtype. */
int mk__pf_lora_apply(struct lora_work *lw, const struct pf *p, struct mk_model **models, int **fds,
		      const struct tag *t, const void *data, const void **sent, struct mk_err *err)
{
	const struct mk_plan_job *jb = p->jobs[t->job];
	const struct mk_plan_input *in = mk_plan_job_input(jb, t->input);
	const struct mk_plan_lora *l = in->lora;
	enum mk_dtype wdt = in->desc.dtype;
	uint64_t n = t->c.elem_count, bytes;
	size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);

	(void)mk_dtype_nbytes(wdt, n, &bytes);
	if (mk__pf_grow((void **)&lw->out, &lw->ocap, (size_t)bytes + 1, 1) ||
	    mk__pf_grow((void **)&lw->w, &lw->wcap, n + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*sent = lw->out;
	if (l->replace) {        /* loaded into W, in W's dtype */
		if (mk_dtype_convert(wdt, lw->out, p->src[t->job][t->input].rdt, data, n))
			return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot convert the adapter's '%s' to %s", jb->id,
					  l->replace, mk_dtype_name(wdt));
		if (!l->a)
			return 0;
		data = lw->out;  /* W, to which the delta is added */
	}
	/* A and B of this job's input, read once per job */
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
		const struct mk_st_tensor *ta = mk_model_find(am, l->a)->t, *tb = mk_model_find(am, l->b)->t;
		free(ab->a);
		free(ab->b);
		*ab = (struct lora_ab){ .job = t->job, .input = t->input, .r = ta->desc.shape[0], .a1 = ta->desc.shape[1],
					.b0 = tb->desc.shape[0] };
		int rc = read_f32(am, fds[l->model], l->a, &ab->a, err);
		if (!rc)
			rc = read_f32(am, fds[l->model], l->b, &ab->b, err);
		if (rc)
			return mk_err_prefix(err, "job %u: ", jb->id);
		ab->live = true;
	}
	uint64_t rl = in->desc.shape[1], first = t->at / rl, last = (t->at + n - 1) / rl, nrows = last - first + 1;
	uint64_t nd = nrows * rl;
	if (mk__pf_grow((void **)&lw->d, &lw->dcap, (size_t)nd + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!l->transpose)       /* delta rows first..last = B[first..last] · A */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nrows, (blasint)rl, (blasint)ab->r, 1.0f,
			    ab->b + first * ab->r, (blasint)ab->r, ab->a, (blasint)ab->a1, 0.0f, lw->d, (blasint)rl);
	else                     /* (B·A)ᵀ rows first..last = A[:, first..last]ᵀ · Bᵀ */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)nrows, (blasint)rl, (blasint)ab->r, 1.0f,
			    ab->a + first, (blasint)ab->a1, ab->b, (blasint)ab->r, 0.0f, lw->d, (blasint)rl);
	float s = (float)l->scale, *d = lw->d + (t->at - first * rl);
	for (uint64_t e = 0; e < n; e++)
		d[e] *= s;
	if (mk_dtype_convert(MK_DT_F32, lw->w, wdt, data, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: input %zu is %s: cannot add a LoRA delta to it", jb->id,
				  t->input, mk_dtype_name(wdt));
	/* an embedding's delta goes to W's dtype before the add (PEFT) */
	if (l->embedding && wdt != MK_DT_F32 &&
	    (mk_dtype_convert(wdt, lw->out, MK_DT_F32, d, n) || mk_dtype_convert(MK_DT_F32, d, wdt, lw->out, n)))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(wdt));
	for (uint64_t e = 0; e < n; e++)
		lw->w[e] += d[e];
	if (mk_dtype_convert(wdt, lw->out, MK_DT_F32, lw->w, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(wdt));
	return 0;
}
