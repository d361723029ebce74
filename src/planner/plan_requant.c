/* plan_requant.c - what mk-pack --quantize needs from the plan: the
 * output tensors to be written quantized again, marked "requant" in the
 * HEAD with the format, and the donor's quantization_config beside them
 * (mk-stream(5)).  The donor is the model whose config.json the output
 * keeps (the base, else the first model); its format (block FP8 or
 * MXFP4) is the output's.  Nothing else changes: mk-merge still writes
 * them as floats; mk-pack quantizes them again when asked.
 *
 * A weight is marked when the donor stores a tensor of its name and
 * shape in that format (so the output is quantized where the donor's
 * architecture is), or when an input of the job that makes it was read
 * from that format (a layer a frankenmerge adds past the donor's, fused
 * experts assembled from per-expert FP8 tensors); for mxfp4 only
 * [E, C, R] weights with C a multiple of 32 can be.
 *
 * Experts the donor stores one by one, block FP8 (DeepSeek-V3's and
 * Qwen3's FP8 releases), are fused in the output; quantized again they
 * are written as the donor stores them ("requant_parts": the sources'
 * names, moved to the output's layer), since that is the form
 * transformers reads as block FP8 (it fuses them as it loads). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "io/model.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "planner/quant.h"
#include "planner_impl.h"

/* The donor stores tensor t in format kind. */
static bool donor_stores(const struct pmodel *donor, enum mk_requant kind, const struct mk_manifest_tensor *t)
{
	const struct mk_tensor_desc *d = &t->desc;
	struct mk_tensor_desc dd;
	const struct mk_model_tensor *mt;
	struct mk_plan_quant *pq = NULL;
	struct mk_err ignored = { 0 };
	bool yes;

	if (kind == MK_REQUANT_MXFP4) {
		if (!mk_quant_packed(donor->quant, donor->m, t->name, &dd))
			return false;
	} else {
		if (!(mt = mk_model_find(donor->m, t->name)))
			return false;
		dd = mt->t->desc;
	}
	if (dd.ndim != d->ndim || memcmp(dd.shape, d->shape, d->ndim * sizeof(d->shape[0])))
		return false;
	if (kind == MK_REQUANT_MXFP4)
		return true;
	/* (a weight that is not block FP8 as config.json says was refused
	 * when it was planned) */
	if (mk_quant_find(donor->quant, donor->m, t->name, donor->display, &pq, &ignored) || !pq)
		return false;
	yes = pq->kind == MK_QUANT_FP8;
	mk_plan_quant_free(pq);
	return yes;
}

/* The parts of fp8 output t made by job jb from the donor's input in,
 * assembled from per-expert block-FP8 tensors: the sources' names with
 * the input's prefix replaced by the output's (the names differ in the
 * layer only).  0 and nothing set when they do not. */
static int set_parts(struct mk_manifest_tensor *t, const struct mk_plan_input *in, struct mk_err *err)
{
	size_t li = strlen(in->tensor), lo = strlen(t->name), suf = 0, n = in->nsources;
	char **names;
	int rc = 0;

	if (!n || !in->quant || in->quant->nscales != n)
		return 0;
	while (suf < li && suf < lo && in->tensor[li - 1 - suf] == t->name[lo - 1 - suf])
		suf++;
	size_t pi = li - suf, po = lo - suf;   /* the differing prefixes */
	if (!(names = calloc(n, sizeof(*names))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; !rc && k < n; k++) {
		const char *src = in->sources[k];
		if (strncmp(src, in->tensor, pi))
			goto out;        /* not named after the input: leave it fused */
		if (!(names[k] = malloc(po + strlen(src + pi) + 1))) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		memcpy(names[k], t->name, po);
		strcpy(names[k] + po, src + pi);
	}
	if (!rc)
		rc = mk_manifest_set_requant_parts(t, names, n, err);
out:
	for (size_t k = 0; k < n; k++)
		free(names[k]);
	free(names);
	return rc;
}

static bool can_hold(enum mk_requant kind, const struct mk_tensor_desc *d)
{
	if (!mk_dtype_is_float(d->dtype) || d->ndim < 2)
		return false;
	return kind == MK_REQUANT_FP8 || (d->ndim == 3 && d->shape[1] && d->shape[1] % 32 == 0);
}

int plan_mark_requant(struct mk_plan *p, const struct pmodel *donor, struct mk_err *err)
{
	struct mk_jsondoc *d;
	enum mk_requant kind = MK_REQUANT_NONE;
	enum mk_quant_kind qk;
	char *qc, *method;
	size_t n;
	int rc;

	if (!donor->quant)
		return 0;
	if ((rc = mk_jsondoc_parse(donor->hf_text, donor->hf_len, "config.json", &d, err)))
		return rc;
	method = mk_jsondoc_string(d, "quantization_config.quant_method", &n);
	if (method && mk_requant_parse(method, &kind))
		kind = MK_REQUANT_NONE;
	free(method);
	qc = kind ? mk_jsondoc_text(d, "quantization_config") : NULL;
	mk_jsondoc_free(d);
	if (!qc)
		return 0;
	rc = mk_manifest_set_quant(p->man, qc, strlen(qc), err);
	free(qc);
	if (rc)
		return mk_err_prefix(err, "model '%s': config.json: ", donor->display);
	qk = kind == MK_REQUANT_FP8 ? MK_QUANT_FP8 : MK_QUANT_MXFP4;
	/* outputs made from an input read from that format */
	for (size_t j = 0; !rc && j < p->njobs; j++) {
		const struct mk_plan_job *jb = p->jobs[j];
		const struct mk_plan_input *din = NULL;
		bool from = false;
		for (size_t i = 0; i < jb->ninputs; i++) {
			from |= jb->inputs[i].quant && jb->inputs[i].quant->kind == qk;
			if (jb->inputs[i].model == (size_t)(donor - p->models))
				din = &jb->inputs[i];
		}
		for (unsigned o = 0; from && o <= jb->nmore; o++) {
			struct mk_manifest_tensor *t = &p->man->tensors[o ? jb->more[o - 1] : jb->output];
			if (!can_hold(kind, &t->desc))
				continue;
			t->requant = kind;
			if (kind == MK_REQUANT_FP8 && din && !jb->nmore && !jb->has_part)
				rc = set_parts(t, din, err);
		}
	}
	if (rc)
		return rc;
	/* and those the donor stores so */
	for (size_t i = 0; i < p->man->ntensors; i++) {
		struct mk_manifest_tensor *t = &p->man->tensors[i];
		if (!t->requant && can_hold(kind, &t->desc) && donor_stores(donor, kind, t))
			t->requant = kind;
	}
	return 0;
}
