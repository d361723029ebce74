/* plan_requant.c - what mk-pack --quantize fp8 needs from the plan: the
 * output tensors the donor model (the base, else the first model: the
 * one whose config.json the output keeps) stores as block FP8, marked
 * "requant" in the HEAD, and its quantization_config beside them
 * (mk-stream(5)).  Nothing else changes: mk-merge still writes them as
 * floats; mk-pack quantizes them again when asked. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "io/model.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "planner/quant.h"
#include "planner_impl.h"

int plan_mark_requant(struct mk_plan *p, const struct pmodel *donor, struct mk_err *err)
{
	struct mk_jsondoc *d;
	char *qc;
	int rc;

	if (!donor->quant)
		return 0;
	if ((rc = mk_jsondoc_parse(donor->hf_text, donor->hf_len, "config.json", &d, err)))
		return rc;
	/* block FP8 only: another format read dequantized (MXFP4) is not
	 * written again */
	size_t n;
	char *method = mk_jsondoc_string(d, "quantization_config.quant_method", &n);
	bool fp8 = method && !strcmp(method, "fp8");
	free(method);
	qc = fp8 ? mk_jsondoc_text(d, "quantization_config") : NULL;
	mk_jsondoc_free(d);
	if (!qc)
		return 0;
	rc = mk_manifest_set_quant(p->man, qc, strlen(qc), err);
	free(qc);
	if (rc)
		return mk_err_prefix(err, "model '%s': config.json: ", donor->display);
	for (size_t i = 0; i < p->man->ntensors; i++) {
		struct mk_manifest_tensor *t = &p->man->tensors[i];
		const struct mk_model_tensor *mt = mk_model_find(donor->m, t->name);
		struct mk_plan_quant *pq = NULL;
		struct mk_err ignored = { 0 };
		if (!mt || !mk_dtype_is_float(t->desc.dtype) || t->desc.ndim < 2 || t->desc.ndim != mt->t->desc.ndim ||
		    memcmp(t->desc.shape, mt->t->desc.shape, t->desc.ndim * sizeof(t->desc.shape[0])))
			continue;
		/* (a weight that is not block FP8 as config.json says was refused
		 * when it was planned) */
		if (mk_quant_find(donor->quant, donor->m, t->name, donor->display, &pq, &ignored) || !pq)
			continue;
		t->requant = pq->kind == MK_QUANT_FP8;
		free(pq->scale);
		free(pq);
	}
	return 0;
}
