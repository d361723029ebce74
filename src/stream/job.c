/* job.c - JOB frames: encoded from and decoded into struct mk_plan_job,
 * checked whole and against the stream's HEAD. */
#include <stddef.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include "methods/spec.h"
#include "stream/job.h"
#include "json.h"

static void input_clear(struct mk_plan_input *in)
{
	free(in->tensor);
	for (size_t k = 0; k < in->nsources; k++)
		free(in->sources[k]);
	free(in->sources);
	free(in->assembly);
	free(in->runs);
	if (in->lora) {
		free(in->lora->replace);
		free(in->lora->a);
		free(in->lora->b);
		free(in->lora->magnitude);
		free(in->lora->bias);
		free(in->lora);
	}
	mk_plan_quant_free(in->quant);
}

void mk_plan_quant_free(struct mk_plan_quant *q)
{
	if (!q)
		return;
	for (size_t k = 0; k < q->nscales; k++)
		free(q->scales[k]);
	free(q->scales);
	free(q->scale);
	free(q);
}

/* fp8 "scales" over an assembly: one string per source, no "scale". */
static int decode_scales(json_t *q, struct mk_plan_input *in)
{
	json_t *a = json_object_get(q, "scales"), *sv;
	size_t k;

	if (!(in->quant->scales = calloc(in->nsources, sizeof(*in->quant->scales))))
		return MK_ENOMEM;
	json_array_foreach(a, k, sv) {
		if (!(in->quant->scales[k] = strdup(json_string_value(sv))))
			return MK_ENOMEM;
		in->quant->nscales = k + 1;
	}
	return 0;
}

/* Whether "scales" is absent, or an array of nsources strings. */
static bool scales_fit(json_t *q, const struct mk_plan_input *in)
{
	json_t *a = json_object_get(q, "scales"), *sv;
	size_t k;

	if (!a)
		return true;
	if (!json_is_array(a) || json_array_size(a) != in->nsources || json_object_get(q, "scale"))
		return false;
	json_array_foreach(a, k, sv)
		if (!json_is_string(sv))
			return false;
	return true;
}

/* An input's "quant" (mk_plan_quant): fp8 over a stored F8_E4M3 tensor
 * of 2 or more axes, its scales' name, positive block sides, a float
 * dtype to send; or mxfp4 over an F4 input [E, C, R] (C a multiple of
 * 32), its scales' name, a float dtype; no adapter beside it, and an
 * assembly only with fp8's "scales", one per source. */
static int decode_quant(json_t *v, struct mk_plan_input *in, uint32_t id, size_t i, struct mk_err *err)
{
	json_t *q = json_object_get(v, "quant"), *bl;
	const char *kind, *sc, *dt;
	uint64_t b0 = 0, b1 = 0;
	enum mk_dtype d = MK_DT_F32;

	if (!q)
		return 0;
	kind = sj_str(q, "kind");
	sc = sj_str(q, "scale");
	dt = sj_str(q, "dtype");
	if (json_is_object(q) && kind && !strcmp(kind, "mxfp4")) {
		if (!sc || !dt || mk_dtype_from_name(dt, &d) || !mk_dtype_is_float(d) || mk_dtype_bits(d) < 8 ||
		    json_object_get(q, "block") || in->desc.dtype != MK_DT_F4 || in->desc.ndim != 3 ||
		    in->desc.shape[1] % 32 || in->lora || in->nsources)
			return mk_err_set(err, MK_EFORMAT,
					  "JOB %u: input %zu: bad \"quant\" (kind \"mxfp4\" over an F4 input of 3 axes "
					  "[E, C, R], C a multiple of 32, a \"scale\" tensor, a float \"dtype\", no "
					  "\"block\"; no \"lora\" or \"assembly\" beside it)",
					  id, i);
		if (!(in->quant = calloc(1, sizeof(*in->quant))) || !(in->quant->scale = strdup(sc)))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		in->quant->kind = MK_QUANT_MXFP4;
		in->quant->dtype = d;
		return 0;
	}
	bl = json_object_get(q, "block");
	bool multi = json_is_object(q) && json_object_get(q, "scales");
	if (!json_is_object(q) || !kind || strcmp(kind, "fp8") || (multi ? !in->nsources || !scales_fit(q, in) : !sc) ||
	    !dt || mk_dtype_from_name(dt, &d) ||
	    !mk_dtype_is_float(d) || mk_dtype_bits(d) < 8 || !json_is_array(bl) || json_array_size(bl) != 2 ||
	    sj_u64(json_array_get(bl, 0), &b0) || sj_u64(json_array_get(bl, 1), &b1) || !b0 || !b1 ||
	    b0 > UINT32_MAX || b1 > UINT32_MAX || in->desc.dtype != MK_DT_F8_E4M3 || in->desc.ndim < 2 ||
	    in->lora || (in->nsources && !multi))
		return mk_err_set(err, MK_EFORMAT,
				  "JOB %u: input %zu: bad \"quant\" (kind \"fp8\" over a stored F8_E4M3 tensor of 2 or "
				  "more axes, a \"scale\" tensor (over an \"assembly\": \"scales\", one per source, "
				  "%zu here), a \"block\" of two positive sides, a float \"dtype\"; no \"lora\" beside it)",
				  id, i, in->nsources);
	if (!(in->quant = calloc(1, sizeof(*in->quant))) || (multi ? decode_scales(q, in) : !(in->quant->scale = strdup(sc))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	in->quant->kind = MK_QUANT_FP8;
	in->quant->block[0] = (uint32_t)b0;
	in->quant->block[1] = (uint32_t)b1;
	in->quant->dtype = d;
	return 0;
}

/* An input's "lora" (mk_plan_lora): an adapter model of the table (not
 * the input's own model); A and B with a finite scale (and a magnitude)
 * over a 2-dimensional stored tensor, and/or the tensor that replaces W;
 * or a bias with a finite scale over a 1-dimensional one; a float dtype;
 * no assembly with it. */
static int decode_lora(json_t *v, struct mk_plan_input *in, uint32_t id, size_t i, const struct mk_manifest *head,
		       struct mk_err *err)
{
	json_t *l = json_object_get(v, "lora"), *sc;
	const char *a, *b, *rp, *mg, *bi, *dt;
	uint64_t u;
	bool tr = false, emb = false;
	enum mk_dtype d = MK_DT_F32;

	if (!l)
		return 0;
	a = sj_str(l, "a");
	b = sj_str(l, "b");
	rp = sj_str(l, "replace");
	mg = sj_str(l, "magnitude");
	bi = sj_str(l, "bias");
	dt = sj_str(l, "dtype");
	sc = json_object_get(l, "scale");
	bool scaled = a || bi;
	if (!json_is_object(l) || sj_u64(json_object_get(l, "model"), &u) || !a != !b || (!a && !rp && !bi) ||
	    (bi && (a || rp || mg || in->desc.ndim != 1)) || (mg && !a) ||
	    (json_object_get(l, "replace") && !rp) || (json_object_get(l, "magnitude") && !mg) ||
	    (json_object_get(l, "bias") && !bi) ||
	    (json_object_get(l, "dtype") && (!dt || mk_dtype_from_name(dt, &d) || !mk_dtype_is_float(d))) ||
	    (scaled && (!json_is_number(sc) || !isfinite(json_number_value(sc)))) ||
	    sj_opt_bool(l, "transpose", &tr) || sj_opt_bool(l, "embedding", &emb) || (a && in->desc.ndim != 2) ||
	    in->nsources || u == in->model || (head && u >= head->nmodels) || (head && !head->models[u].adapter))
		return mk_err_set(err, MK_EFORMAT,
				  "JOB %u: input %zu: bad \"lora\" (an adapter model of the table; \"a\", \"b\" and a finite "
				  "\"scale\" over a 2-dimensional stored tensor, and/or \"replace\"; or \"bias\" and a finite "
				  "\"scale\" over a 1-dimensional one; a float \"dtype\")",
				  id, i);
	if (!(in->lora = calloc(1, sizeof(*in->lora))) || (a && !(in->lora->a = strdup(a))) ||
	    (b && !(in->lora->b = strdup(b))) || (rp && !(in->lora->replace = strdup(rp))) ||
	    (mg && !(in->lora->magnitude = strdup(mg))) || (bi && !(in->lora->bias = strdup(bi))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	in->lora->model = (size_t)u;
	in->lora->scale = scaled ? json_number_value(sc) : 0.0;
	in->lora->transpose = tr;
	in->lora->embedding = emb;
	in->lora->has_dtype = dt != NULL;
	in->lora->dtype = dt ? d : in->desc.dtype;
	return 0;
}

void mk_plan_job_free(struct mk_plan_job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->ninputs; i++)
		input_clear(&j->inputs[i]);
	if (j->vocab) {
		for (size_t k = 0; j->vocab->aux && k < j->vocab->naux; k++)
			input_clear(&j->vocab->aux[k]);
		free(j->vocab->aux);
		free(j->vocab->fill);
		free(j->vocab);
	}
	free(j->inputs);
	free(j->params.global);
	free(j->params.input);
	free(j->method);
	free(j->more);
	json_decref(j->extra);
	free(j);
}

struct mk_plan_job *mk_plan_job_new(size_t ninputs)
{
	struct mk_plan_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->inputs = calloc(ninputs ? ninputs : 1, sizeof(*j->inputs));
	if (!j->inputs) {
		free(j);
		return NULL;
	}
	j->ninputs = ninputs;
	j->base = -1;
	j->sends = 1;
	return j;
}

/* The method's parameter arrays, all absent. */
static int params_alloc(struct mk_plan_job *j, const struct mk_method *m, struct mk_err *err)
{
	j->m = m;
	j->params.global = calloc(m->nparams + 1, sizeof(*j->params.global));
	j->params.input = calloc(m->nparams * j->ninputs + 1, sizeof(*j->params.input));
	if (!j->params.global || !j->params.input)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	return 0;
}

int mk_plan_job_set_method(struct mk_plan_job *j, const struct mk_method *m, struct mk_err *err)
{
	if (!(j->method = strdup(m->name)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	return params_alloc(j, m, err);
}

int mk_plan_job_set_param(struct mk_plan_job *j, long input, const char *name, struct mk_pval v,
			  struct mk_err *err)
{
	return mk_method_param_put(j->m, name, input, j->ninputs, false, v, j->params.global, j->params.input,
				   err);
}

/* "global" (input -1) or one input's parameters: each a number, a
 * boolean or null; of a registered method, put in their places. */
static int decode_params(json_t *obj, struct mk_plan_job *j, long input, const struct mk_manifest *head,
			 struct mk_err *err)
{
	const char *key, *where = input < 0 ? "global" : "per-input";
	json_t *v;
	struct mk_err e;

	if (obj && !json_is_object(obj))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: %s parameters are not an object", j->id, where);
	json_object_foreach(obj, key, v) {
		struct mk_pval pv;
		if (sj_pval(v, &pv))
			return mk_err_set(err, MK_EFORMAT, "JOB %u: %s parameter '%s' is not a number, boolean or null",
					  j->id, where, key);
		if (j->m && mk_plan_job_set_param(j, input, key, pv, &e))
			return mk_err_set(err, MK_EFORMAT, "JOB %u%s%s%s: %s; was the plan made by another mk?", j->id,
					  head ? " ('" : "", head ? head->tensors[j->output].name : "", head ? "')" : "",
					  e.msg);
	}
	return 0;
}

static int decode_input(json_t *v, struct mk_plan_input *in, uint32_t id, size_t i,
			const struct mk_manifest *head, struct mk_err *err)
{
	struct mk_tensor_desc d;
	const char *t = sj_str(v, "tensor"), *ld = sj_str(v, "load_dtype");
	json_t *as = json_object_get(v, "assembly");
	uint64_t u, bytes;

	if (!json_is_object(v) || sj_u64(json_object_get(v, "model"), &u) || !t)
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu needs model, tensor, dtype and shape", id, i);
	int drc = sj_desc(json_object_get(v, "dtype"), json_object_get(v, "shape"), &d, &in->nelem);
	if (drc)
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: %s", id, i, sj_desc_error(drc));
	if (head && u >= head->nmodels)
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: model #%llu is not in the HEAD's table (%zu models)",
				  id, i, (unsigned long long)u, head->nmodels);
	in->model = (size_t)u;
	in->desc = d;
	in->load_dtype = in->desc.dtype;
	if (json_object_get(v, "load_dtype") && (!ld || mk_dtype_from_name(ld, &in->load_dtype)))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad load_dtype", id, i);
	if (mk_dtype_nbytes(in->desc.dtype, in->nelem, &bytes))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: size is not whole bytes", id, i);
	if (!(in->tensor = strdup(t)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!as)
		return decode_lora(v, in, id, i, head, err) ? err->code : decode_quant(v, in, id, i, err);
	const char *kind = sj_str(as, "kind");
	json_t *srcs = json_object_get(as, "sources"), *sv;
	size_t q;
	if (!kind || !json_is_array(srcs) || !json_array_size(srcs) ||
	    (strcmp(kind, "stack") && strcmp(kind, "stack_concat") && strcmp(kind, "rename")))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad assembly", id, i);
	in->assembly = strdup(kind);
	in->sources = calloc(json_array_size(srcs), sizeof(*in->sources));
	if (!in->assembly || !in->sources)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	json_array_foreach(srcs, q, sv) {
		if (!json_is_string(sv))
			return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad assembly source", id, i);
		if (!(in->sources[q] = strdup(json_string_value(sv))))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		in->nsources = q + 1;
	}
	return decode_lora(v, in, id, i, head, err) ? err->code : decode_quant(v, in, id, i, err);
}

/* An input's "rows" (vocabulary jobs): runs ascending by output row,
 * disjoint, within the job's rows and the input's stored rows. */
static int decode_runs(json_t *v, struct mk_plan_input *in, uint64_t rows, uint32_t id, size_t i,
		       struct mk_err *err)
{
	json_t *a = json_object_get(v, "rows");
	uint64_t stored = in->desc.ndim ? in->desc.shape[0] : 0, next = 0;

	if (!json_is_array(a) || json_array_size(a) % 3)
		return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: a vocabulary job's input needs \"rows\": [out, src, n, ...]",
				  id, i);
	in->nruns = json_array_size(a) / 3;
	if (in->nruns && !(in->runs = calloc(in->nruns, sizeof(*in->runs))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; k < in->nruns; k++) {
		struct mk_vocab_run *r = &in->runs[k];
		if (sj_u64(json_array_get(a, 3 * k), &r->out) || sj_u64(json_array_get(a, 3 * k + 1), &r->src) ||
		    sj_u64(json_array_get(a, 3 * k + 2), &r->n) || !r->n || r->out < next || r->out > rows ||
		    r->n > rows - r->out || r->src > stored || r->n > stored - r->src)
			return mk_err_set(err, MK_EFORMAT,
					  "JOB %u: input %zu: rows run %zu does not fit (runs ascend, within %llu output and %llu stored rows)",
					  id, i, k, (unsigned long long)rows, (unsigned long long)stored);
		next = r->out + r->n;
	}
	return 0;
}

static const char *const fill_names[] = { [MK_FILL_ZERO] = "zero", [MK_FILL_COPY] = "copy",
					  [MK_FILL_AVERAGE] = "average", [MK_FILL_MEAN] = "mean" };

/* "vocab": {"rows", "tokens", "dtype", "fill", "aux"}; the inputs' runs. */
static int decode_vocab(json_t *o, struct mk_plan_job *j, json_t *ins, const struct mk_manifest *head,
			struct mk_err *err)
{
	json_t *v = json_object_get(o, "vocab"), *fl, *aux, *e;
	struct mk_plan_vocab *vc;
	const char *dt;
	size_t i;
	int rc;

	if (!v)
		return 0;
	if (!(vc = j->vocab = calloc(1, sizeof(*vc))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	dt = sj_str(v, "dtype");
	fl = json_object_get(v, "fill");
	aux = json_object_get(v, "aux");
	if (!json_is_object(v) || sj_u64(json_object_get(v, "rows"), &vc->rows) ||
	    sj_u64(json_object_get(v, "tokens"), &vc->tokens) || !vc->tokens || vc->tokens > vc->rows ||
	    !dt || mk_dtype_from_name(dt, &vc->dtype) || !mk_dtype_is_float(vc->dtype) || !json_is_array(fl) ||
	    (aux && !json_is_array(aux)) || (aux && json_array_size(aux) > 65535 - j->ninputs))
		return mk_err_set(err, MK_EFORMAT,
				  "JOB %u: bad \"vocab\" (rows >= tokens > 0, a float dtype, a fill list, aux inputs)", j->id);
	vc->nfill = json_array_size(fl);
	vc->naux = aux ? json_array_size(aux) : 0;
	if ((vc->nfill && !(vc->fill = calloc(vc->nfill, sizeof(*vc->fill)))) ||
	    (vc->naux && !(vc->aux = calloc(vc->naux, sizeof(*vc->aux))))) {
		vc->nfill = vc->naux = 0;
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	uint64_t next = 0;
	json_array_foreach(fl, i, e) {
		struct mk_vocab_fill *f = &vc->fill[i];
		const char *kind = json_is_array(e) ? json_string_value(json_array_get(e, 2)) : NULL;
		uint64_t from;
		int k = -1;
		for (size_t q = 0; kind && q < sizeof(fill_names) / sizeof(*fill_names); q++)
			if (!strcmp(kind, fill_names[q]))
				k = (int)q;
		if (k < 0 || json_array_size(e) != 5 || sj_u64(json_array_get(e, 0), &f->out) ||
		    sj_u64(json_array_get(e, 1), &f->n) || sj_u64(json_array_get(e, 3), &from) ||
		    !json_is_boolean(json_array_get(e, 4)) || !f->n || f->out < next || f->out > vc->rows ||
		    f->n > vc->rows - f->out || from >= j->ninputs + vc->naux)
			return mk_err_set(err, MK_EFORMAT,
					  "JOB %u: vocab fill %zu is not [out, n, zero|copy|average|mean, input, force] within the rows",
					  j->id, i);
		f->kind = (enum mk_fill_kind)k;
		f->from = (uint32_t)from;
		f->force = json_is_true(json_array_get(e, 4));
		next = f->out + f->n;
	}
	uint64_t rl = mk_shape_row_len(j->inputs[0].desc.ndim, j->inputs[0].desc.shape);
	json_array_foreach(aux, i, e) {
		if ((rc = decode_input(e, &vc->aux[i], j->id, j->ninputs + i, head, err)) ||
		    (rc = decode_runs(e, &vc->aux[i], vc->rows, j->id, j->ninputs + i, err)))
			return rc;
		if (mk_shape_row_len(vc->aux[i].desc.ndim, vc->aux[i].desc.shape) != rl)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: aux input %zu has rows of another length than input 0",
					  j->id, i);
	}
	json_array_foreach(ins, i, e)
		if ((rc = decode_runs(e, &j->inputs[i], vc->rows, j->id, i, err)))
			return rc;
	for (i = 0; i < j->ninputs + vc->naux; i++)
		if (mk_plan_job_input(j, i)->quant)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: \"quant\" in a vocabulary job", j->id, i);
	return 0;
}

/* What a job's inputs must share, since they are read in one range at a
 * time: rows of one length, and a sub-byte dtype (F4, F6) only with
 * itself (a range of such inputs must stay on whole bytes in each),
 * unless it is read dequantized ("quant": sent in load_dtype, element by
 * element). */
static unsigned read_granule(const struct mk_plan_input *in)
{
	return in->quant ? 1 : mk_dtype_elem_granule(in->desc.dtype);
}

static int check_inputs_agree(const struct mk_plan_job *j, struct mk_err *err)
{
	const struct mk_plan_input *a = &j->inputs[0];
	uint64_t rl = mk_shape_row_len(a->desc.ndim, a->desc.shape);

	for (size_t i = 0; i < j->ninputs; i++) {
		const struct mk_plan_input *b = &j->inputs[i];
		if (mk_shape_row_len(b->desc.ndim, b->desc.shape) != rl)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: inputs 0 and %zu have rows of different lengths (%llu and %llu elements)",
					  j->id, i, (unsigned long long)rl,
					  (unsigned long long)mk_shape_row_len(b->desc.ndim, b->desc.shape));
		if ((read_granule(a) > 1 || read_granule(b) > 1) && a->desc.dtype != b->desc.dtype)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: inputs 0 and %zu are %s and %s: a %s input goes only with inputs of its own dtype",
					  j->id, i, mk_dtype_name(a->desc.dtype), mk_dtype_name(b->desc.dtype),
					  mk_dtype_elem_granule(a->desc.dtype) > 1 ? mk_dtype_name(a->desc.dtype) :
										       mk_dtype_name(b->desc.dtype));
	}
	return 0;
}

/* "more_outputs": [K, ...]: the further outputs of a job with several
 * (mk_plan_out.nmore), manifest indices other than "output" and each
 * other. */
static int decode_more(json_t *o, const struct mk_manifest *head, struct mk_plan_job *j, struct mk_err *err)
{
	json_t *mo = json_object_get(o, "more_outputs");
	size_t n;

	if (!mo)
		return 0;
	n = json_is_array(mo) ? json_array_size(mo) : 0;
	if (!n || n > MK_MORE_OUTPUTS_MAX)
		return mk_err_set(err, MK_EFORMAT, "JOB %u: \"more_outputs\" is not an array of 1 to %u outputs", j->id,
				  MK_MORE_OUTPUTS_MAX);
	if (!(j->more = calloc(n, sizeof(*j->more))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; k < n; k++) {
		uint64_t u;
		if (sj_u64(json_array_get(mo, k), &u))
			return mk_err_set(err, MK_EFORMAT, "JOB %u: \"more_outputs\"[%zu] is not an index", j->id, k);
		if (head && u >= head->ntensors)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: output #%llu is not in the manifest (%zu tensors)", j->id,
					  (unsigned long long)u, head->ntensors);
		if (u == j->output)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: output #%llu given twice", j->id, (unsigned long long)u);
		for (size_t q = 0; q < k; q++)
			if (j->more[q] == u)
				return mk_err_set(err, MK_EFORMAT, "JOB %u: output #%llu given twice", j->id,
						  (unsigned long long)u);
		j->more[k] = (size_t)u;
		j->nmore = (unsigned)(k + 1);
	}
	return 0;
}

static const char *const job_keys[] = { "id", "output", "method", "inputs", "base", "passes", "sends", "spill",
					"is_embed", "check_equal", "spare", "params", "vocab", "part", "more_outputs", NULL };

/* "part": {"begin": B} (mk_plan_job.has_part): a passthrough job's of
 * one input, not a vocabulary job's; against the HEAD, its input's
 * elements from B lie within the output tensor. */
static int decode_part(json_t *o, struct mk_plan_job *j, const struct mk_manifest *head, struct mk_err *err)
{
	json_t *pt = json_object_get(o, "part");
	uint64_t b, n;

	if (!pt)
		return 0;
	if (!json_is_object(pt) || sj_u64(json_object_get(pt, "begin"), &b))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"part\" (an object with \"begin\")", j->id);
	if (strcmp(j->method, "passthrough") || j->vocab || j->ninputs != 1)
		return mk_err_set(err, MK_EFORMAT, "JOB %u: a part of a tensor is made by passthrough of one input, not by %s%s",
				  j->id, j->method, j->vocab ? " with a vocabulary" : "");
	n = j->inputs[0].nelem;
	if (head && (b > head->tensors[j->output].nelem || n > head->tensors[j->output].nelem - b))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: part [%llu, +%llu) is outside tensor '%s' (%llu elements)", j->id,
				  (unsigned long long)b, (unsigned long long)n, head->tensors[j->output].name,
				  (unsigned long long)head->tensors[j->output].nelem);
	j->has_part = true;
	j->part_begin = b;
	return 0;
}

int mk_plan_job_decode(const void *buf, size_t len, const struct mk_manifest *head, struct mk_plan_job **out,
		       struct mk_err *err)
{
	json_t *o, *ins, *v, *ps, *pin = NULL;
	struct mk_plan_job *j = NULL;
	const char *method;
	uint64_t u, id, passes, sends;
	size_t i;
	int rc;

	*out = NULL;
	/* its unknown keys kept, bounded (job.h) */
	if ((rc = sj_load_bounded(buf, len, "JOB", job_keys, MK_JOB_EXTRA_MAX, &o, err)))
		return rc;
	if (sj_u64(json_object_get(o, "id"), &id) || id > UINT32_MAX) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB: missing or bad \"id\"");
		goto out;
	}
	ins = json_object_get(o, "inputs");
	if (!json_is_array(ins) || !json_array_size(ins) || json_array_size(ins) > 65535) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: \"inputs\" is not an array of 1 to 65535 inputs",
				(unsigned)id);
		goto out;
	}
	if (!(j = mk_plan_job_new(json_array_size(ins)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	j->id = (uint32_t)id;
	if (sj_u64(json_object_get(o, "output"), &u)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: missing or bad \"output\"", j->id);
		goto out;
	}
	if (head && u >= head->ntensors) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: output #%llu is not in the manifest (%zu tensors)", j->id,
				(unsigned long long)u, head->ntensors);
		goto out;
	}
	j->output = (size_t)u;
	if ((rc = decode_more(o, head, j, err)))
		goto out;
	method = sj_str(o, "method");
	if (!method || !(j->method = strdup(method))) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: missing \"method\"", j->id);
		goto out;
	}
	if (sj_opt_u64(o, "passes", 0, &passes) || sj_opt_u64(o, "sends", 1, &sends)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"passes\" or \"sends\"", j->id);
		goto out;
	}
	if (passes > 64 || (!j->nmore && sends != 1 && sends != passes + 1) ||
	    (j->nmore && (!passes || (sends != 1 && sends != passes)))) {
		rc = mk_err_set(err, MK_EFORMAT,
				j->nmore ? "JOB %u: sends %llu with %llu passes (a job with several outputs: passes >= 1, sends 1 or passes)"
					 : "JOB %u: sends %llu with %llu passes (must be 1 or passes + 1, passes <= 64)",
				j->id, (unsigned long long)sends, (unsigned long long)passes);
		goto out;
	}
	j->passes = (unsigned)passes;
	j->sends = (unsigned)sends;
	if (sj_opt_bool(o, "spill", &j->spill) || sj_opt_bool(o, "is_embed", &j->is_embed) ||
	    sj_opt_bool(o, "check_equal", &j->check_equal) || sj_opt_bool(o, "spare", &j->spare)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: \"spill\", \"is_embed\", \"check_equal\" and \"spare\" are booleans",
				j->id);
		goto out;
	}
	if (j->spill && (j->sends != 1 || !j->passes)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: spill with sends %u and %u passes (must be 1 and > 0)",
				j->id, j->sends, j->passes);
		goto out;
	}
	if (j->check_equal && strcmp(j->method, "passthrough")) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: check_equal goes with passthrough, not %s", j->id, j->method);
		goto out;
	}
	v = json_object_get(o, "base");
	if (v && !json_is_null(v)) {
		if (sj_u64(v, &u)) {
			rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"base\"", j->id);
			goto out;
		}
		if (u >= j->ninputs) {
			rc = mk_err_set(err, MK_EFORMAT, "JOB %u: base %llu is not one of its %zu inputs", j->id,
					(unsigned long long)u, j->ninputs);
			goto out;
		}
		j->base = (long)u;
	}
	json_array_foreach(ins, i, v)
		if ((rc = decode_input(v, &j->inputs[i], j->id, i, head, err)))
			goto out;
	if ((rc = check_inputs_agree(j, err)) || (rc = decode_vocab(o, j, ins, head, err)))
		goto out;
	ps = json_object_get(o, "params");
	if (ps && !json_is_object(ps)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: \"params\" is not an object", j->id);
		goto out;
	}
	j->m = mk_method_find(j->method);
	if (j->m && (rc = params_alloc(j, j->m, err)))
		goto out;
	if ((rc = decode_params(json_object_get(ps, "global"), j, -1, head, err)))
		goto out;
	pin = json_object_get(ps, "inputs");
	if (pin && (!json_is_array(pin) || json_array_size(pin) != j->ninputs)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: per-input parameters for %zu inputs, the job has %zu", j->id,
				json_is_array(pin) ? json_array_size(pin) : 0, j->ninputs);
		goto out;
	}
	json_array_foreach(pin, i, v)
		if ((rc = decode_params(v, j, (long)i, head, err)))
			goto out;
	if ((rc = decode_part(o, j, head, err)))
		goto out;
	j->extra = sj_extra(o, job_keys);
out:
	json_decref(o);
	if (rc)
		mk_plan_job_free(j);
	else
		*out = j;
	return rc;
}

const struct mk_pval *mk_plan_job_param(const struct mk_plan_job *j, long input, size_t p)
{
	const struct mk_pval *v;

	if (!j->m || p >= j->m->nparams || (j->m->params[p].scope == MK_SCOPE_GLOBAL) != (input < 0))
		return NULL;
	v = input < 0 ? &j->params.global[p] : &j->params.input[(size_t)input * j->m->nparams + p];
	return v->set ? v : NULL;
}

/* The job's GLOBAL parameters (input -1) or input i's per-input ones, by
 * name in spec order. */
static json_t *params_json(const struct mk_plan_job *j, long input)
{
	json_t *o = json_object();

	for (size_t p = 0; o && j->m && p < j->m->nparams; p++) {
		const struct mk_pval *v = mk_plan_job_param(j, input, p);
		if (v)
			json_object_set_new(o, j->m->params[p].name, sj_from_pval(v));
	}
	return o;
}

static json_t *input_json(const struct mk_plan_input *in, bool runs)
{
	json_t *e = json_pack("{s:I,s:s,s:s,s:o}", "model", (json_int_t)in->model, "tensor", in->tensor, "dtype",
			      mk_dtype_name(in->desc.dtype), "shape", sj_shape(in->desc.ndim, in->desc.shape));
	if (e && in->load_dtype != in->desc.dtype)
		json_object_set_new(e, "load_dtype", json_string(mk_dtype_name(in->load_dtype)));
	if (e && in->nsources) {
		json_t *sv = json_array();
		for (size_t q = 0; q < in->nsources; q++)
			json_array_append_new(sv, json_string(in->sources[q]));
		json_object_set_new(e, "assembly", json_pack("{s:s,s:o}", "kind", in->assembly, "sources", sv));
	}
	if (e && in->lora) {
		const struct mk_plan_lora *l = in->lora;
		json_t *lo = json_pack("{s:I}", "model", (json_int_t)l->model);
		if (lo && l->a) {
			json_object_set_new(lo, "a", json_string(l->a));
			json_object_set_new(lo, "b", json_string(l->b));
			json_object_set_new(lo, "scale", json_real(l->scale));
			if (l->transpose)
				json_object_set_new(lo, "transpose", json_true());
			if (l->embedding)
				json_object_set_new(lo, "embedding", json_true());
		}
		if (lo && l->magnitude)
			json_object_set_new(lo, "magnitude", json_string(l->magnitude));
		if (lo && l->bias) {
			json_object_set_new(lo, "bias", json_string(l->bias));
			json_object_set_new(lo, "scale", json_real(l->scale));
		}
		if (lo && l->replace)
			json_object_set_new(lo, "replace", json_string(l->replace));
		if (lo && l->has_dtype)
			json_object_set_new(lo, "dtype", json_string(mk_dtype_name(l->dtype)));
		json_object_set_new(e, "lora", lo);
	}
	if (e && in->quant && in->quant->kind == MK_QUANT_MXFP4) {
		json_object_set_new(e, "quant", json_pack("{s:s,s:s,s:s}", "kind", "mxfp4", "scale", in->quant->scale,
							  "dtype", mk_dtype_name(in->quant->dtype)));
	} else if (e && in->quant) {
		const struct mk_plan_quant *q = in->quant;
		json_t *sv = json_array();
		for (size_t k = 0; sv && k < q->nscales; k++)
			json_array_append_new(sv, json_string(q->scales[k]));
		json_object_set_new(e, "quant", json_pack("{s:s,s:o,s:[I,I],s:s}", "kind", "fp8",
							  q->nscales ? "scales" : "scale",
							  q->nscales ? sv : json_string(q->scale),
							  "block", (json_int_t)q->block[0], (json_int_t)q->block[1],
							  "dtype", mk_dtype_name(q->dtype)));
		if (!q->nscales)
			json_decref(sv);
	}
	if (e && runs) {
		json_t *rv = json_array();
		for (size_t k = 0; k < in->nruns; k++) {
			json_array_append_new(rv, json_integer((json_int_t)in->runs[k].out));
			json_array_append_new(rv, json_integer((json_int_t)in->runs[k].src));
			json_array_append_new(rv, json_integer((json_int_t)in->runs[k].n));
		}
		json_object_set_new(e, "rows", rv);
	}
	return e;
}

int mk_plan_job_encode(const struct mk_plan_job *j, char **out, size_t *len, struct mk_err *err)
{
	json_t *o = json_object(), *ins = json_array(), *ps = json_object(), *pin = json_array();
	int rc;

	*out = NULL;
	if (!o || !ins || !ps || !pin) {
		json_decref(o);
		json_decref(ins);
		json_decref(ps);
		json_decref(pin);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	json_object_set_new(o, "id", json_integer(j->id));
	json_object_set_new(o, "output", json_integer((json_int_t)j->output));
	if (j->nmore) {
		json_t *mo = json_array();
		for (unsigned k = 0; k < j->nmore; k++)
			json_array_append_new(mo, json_integer((json_int_t)j->more[k]));
		json_object_set_new(o, "more_outputs", mo);
	}
	json_object_set_new(o, "method", json_string(j->method));
	for (size_t i = 0; i < j->ninputs; i++) {
		json_array_append_new(ins, input_json(&j->inputs[i], j->vocab != NULL));
		json_array_append_new(pin, params_json(j, (long)i));
	}
	if (j->vocab) {
		const struct mk_plan_vocab *vc = j->vocab;
		json_t *fl = json_array(), *aux = json_array();
		for (size_t k = 0; k < vc->nfill; k++) {
			const struct mk_vocab_fill *f = &vc->fill[k];
			json_array_append_new(fl, json_pack("[I,I,s,I,b]", (json_int_t)f->out, (json_int_t)f->n,
							    fill_names[f->kind], (json_int_t)f->from, f->force));
		}
		for (size_t k = 0; k < vc->naux; k++)
			json_array_append_new(aux, input_json(&vc->aux[k], true));
		json_t *vo = json_pack("{s:I,s:I,s:s,s:o}", "rows", (json_int_t)vc->rows, "tokens", (json_int_t)vc->tokens,
				       "dtype", mk_dtype_name(vc->dtype), "fill", fl);
		if (vo && vc->naux)
			json_object_set_new(vo, "aux", aux);
		else
			json_decref(aux);
		json_object_set_new(o, "vocab", vo);
	}
	json_object_set_new(o, "inputs", ins);
	json_object_set_new(o, "base", j->base >= 0 ? json_integer(j->base) : json_null());
	json_object_set_new(o, "passes", json_integer(j->passes));
	json_object_set_new(o, "sends", json_integer(j->sends));
	if (j->spill)
		json_object_set_new(o, "spill", json_true());
	json_object_set_new(o, "is_embed", json_boolean(j->is_embed));
	if (j->check_equal)
		json_object_set_new(o, "check_equal", json_true());
	if (j->spare)
		json_object_set_new(o, "spare", json_true());
	if (j->has_part)
		json_object_set_new(o, "part", json_pack("{s:I}", "begin", (json_int_t)j->part_begin));
	json_object_set_new(ps, "global", params_json(j, -1));
	json_object_set_new(ps, "inputs", pin);
	json_object_set_new(o, "params", ps);
	sj_add_extra(o, j->extra);
	rc = sj_dump(o, out, len, err);
	json_decref(o);
	return rc;
}

/* ------------------------------------------------------------ vocabulary jobs */

const struct mk_plan_input *mk_plan_job_input(const struct mk_plan_job *j, size_t input)
{
	if (input < j->ninputs)
		return &j->inputs[input];
	if (j->vocab && input - j->ninputs < j->vocab->naux)
		return &j->vocab->aux[input - j->ninputs];
	return NULL;
}

bool mk_plan_job_sent_as_read(const struct mk_plan_job *j)
{
	if (j->vocab)
		return false;
	for (size_t i = 0; i < j->ninputs; i++)
		if (j->inputs[i].lora || j->inputs[i].quant)
			return false;
	return true;
}

enum mk_dtype mk_plan_input_sent_dtype(const struct mk_plan_input *in)
{
	if (in->quant)
		return in->quant->dtype;
	if (in->lora && in->lora->has_dtype)
		return in->lora->dtype;
	return in->desc.dtype;
}

/* How many of n spans (runs or fills: structs of `stride` bytes that
 * begin with their first output row, ascending) begin at or before row. */
static size_t spans_upto(const void *v, size_t stride, size_t n, uint64_t row)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (*(const uint64_t *)((const char *)v + mid * stride) <= row)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}
#define runs_upto(v, n, row) spans_upto((v), sizeof(struct mk_vocab_run), (n), (row))
#define fills_upto(v, n, row) spans_upto((v), sizeof(struct mk_vocab_fill), (n), (row))
_Static_assert(offsetof(struct mk_vocab_run, out) == 0 && offsetof(struct mk_vocab_fill, out) == 0,
	       "spans begin with their output row");

int64_t mk_plan_vocab_src_row(const struct mk_plan_job *j, size_t input, uint64_t row)
{
	const struct mk_plan_input *in = mk_plan_job_input(j, input);
	size_t k;

	if (!in || !j->vocab)
		return -1;
	k = runs_upto(in->runs, in->nruns, row);
	if (!k || row >= in->runs[k - 1].out + in->runs[k - 1].n)
		return -1;
	return (int64_t)(in->runs[k - 1].src + (row - in->runs[k - 1].out));
}

const struct mk_vocab_fill *mk_plan_vocab_fill_at(const struct mk_plan_job *j, uint64_t row)
{
	size_t k;

	if (!j->vocab)
		return NULL;
	k = fills_upto(j->vocab->fill, j->vocab->nfill, row);
	if (!k || row >= j->vocab->fill[k - 1].out + j->vocab->fill[k - 1].n)
		return NULL;
	return &j->vocab->fill[k - 1];
}

/* the nearer of best and the first edge after row of a list of spans
 * (k: how many begin at or before row; the one before ends at end_prev) */
static uint64_t next_edge(uint64_t best, uint64_t row, size_t k, size_t n, uint64_t prev_end, uint64_t next_out)
{
	if (k && row < prev_end && prev_end < best)
		best = prev_end;
	if (k < n && next_out < best)
		best = next_out;
	return best;
}

uint64_t mk_plan_vocab_next_cut(const struct mk_plan_job *j, uint64_t row)
{
	const struct mk_plan_vocab *vc = j->vocab;
	uint64_t best;
	size_t k;

	if (!vc)
		return UINT64_MAX;
	best = vc->rows;
	if (row < vc->tokens && vc->tokens < best)
		best = vc->tokens;
	k = fills_upto(vc->fill, vc->nfill, row);
	best = next_edge(best, row, k, vc->nfill, k ? vc->fill[k - 1].out + vc->fill[k - 1].n : 0,
			 k < vc->nfill ? vc->fill[k].out : 0);
	for (size_t i = 0; i < j->ninputs + vc->naux; i++) {
		const struct mk_plan_input *in = mk_plan_job_input(j, i);
		k = runs_upto(in->runs, in->nruns, row);
		best = next_edge(best, row, k, in->nruns, k ? in->runs[k - 1].out + in->runs[k - 1].n : 0,
				 k < in->nruns ? in->runs[k].out : 0);
	}
	return best;
}

uint64_t mk_plan_input_sent_bytes(const struct mk_plan_job *j, size_t input)
{
	const struct mk_plan_input *in = mk_plan_job_input(j, input);
	uint64_t elems = 0, b = 0;

	if (!in)
		return 0;
	if (!j->vocab) {
		elems = in->nelem;
	} else {
		uint64_t rl = mk_shape_row_len(in->desc.ndim, in->desc.shape);
		for (size_t k = 0; k < in->nruns; k++)
			elems += in->runs[k].n * rl;
	}
	(void)mk_dtype_nbytes(mk_plan_input_sent_dtype(in), elems, &b);
	return b;
}
