/* job.c - JOB frames: encoded from and decoded into struct mk_plan_job,
 * checked whole and against the stream's HEAD. */
#include <stdlib.h>
#include <string.h>
#include "mk/plan.h"
#include "json.h"

static void params_free(struct mk_job_params *ps)
{
	for (size_t k = 0; k < ps->n; k++)
		free(ps->p[k].name);
	free(ps->p);
	ps->p = NULL;
	ps->n = 0;
}

void mk_plan_job_free(struct mk_plan_job *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->ninputs; i++) {
		free(j->inputs[i].tensor);
		for (size_t k = 0; k < j->inputs[i].nsources; k++)
			free(j->inputs[i].sources[k]);
		free(j->inputs[i].sources);
		free(j->inputs[i].assembly);
		if (j->input_params)
			params_free(&j->input_params[i]);
	}
	free(j->inputs);
	free(j->input_params);
	params_free(&j->global);
	free(j->method);
	json_decref(j->extra);
	free(j);
}

struct mk_plan_job *mk_plan_job_new(size_t ninputs)
{
	struct mk_plan_job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->inputs = calloc(ninputs ? ninputs : 1, sizeof(*j->inputs));
	j->input_params = calloc(ninputs ? ninputs : 1, sizeof(*j->input_params));
	if (!j->inputs || !j->input_params) {
		free(j->inputs);
		free(j->input_params);
		free(j);
		return NULL;
	}
	j->ninputs = ninputs;
	j->base = -1;
	j->sends = 1;
	return j;
}

int mk_job_params_add(struct mk_job_params *ps, const char *name, struct mk_pval v, struct mk_err *err)
{
	void *p = realloc(ps->p, (ps->n + 1) * sizeof(*ps->p));

	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	ps->p = p;
	ps->p[ps->n].name = strdup(name);
	if (!ps->p[ps->n].name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	ps->p[ps->n].value = v;
	ps->n++;
	return 0;
}

static int decode_params(json_t *obj, struct mk_job_params *ps, uint32_t id, const char *where,
			 struct mk_err *err)
{
	const char *key;
	json_t *v;
	int rc;

	if (obj && !json_is_object(obj))
		return mk_err_set(err, MK_EFORMAT, "JOB %u: %s parameters are not an object", id, where);
	json_object_foreach(obj, key, v) {
		struct mk_pval pv;
		if (sj_pval(v, &pv))
			return mk_err_set(err, MK_EFORMAT, "JOB %u: %s parameter '%s' is not a number, boolean or null",
					  id, where, key);
		if ((rc = mk_job_params_add(ps, key, pv, err)))
			return rc;
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
		return 0;
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
	return 0;
}

/* What a job's inputs must share, since they are read in one range at a
 * time: rows of one length, and a sub-byte dtype (F4, F6) only with
 * itself (a range of such inputs must stay on whole bytes in each). */
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
		if ((mk_dtype_elem_granule(a->desc.dtype) > 1 || mk_dtype_elem_granule(b->desc.dtype) > 1) &&
		    a->desc.dtype != b->desc.dtype)
			return mk_err_set(err, MK_EFORMAT, "JOB %u: inputs 0 and %zu are %s and %s: a %s input goes only with inputs of its own dtype",
					  j->id, i, mk_dtype_name(a->desc.dtype), mk_dtype_name(b->desc.dtype),
					  mk_dtype_elem_granule(a->desc.dtype) > 1 ? mk_dtype_name(a->desc.dtype) :
										       mk_dtype_name(b->desc.dtype));
	}
	return 0;
}

static const char *const job_keys[] = { "id", "output", "method", "inputs", "base", "passes", "sends", "spill",
					"is_embed", "check_equal", "params", NULL };

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
	if ((rc = sj_load(buf, len, "JOB", &o, err)))
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
	method = sj_str(o, "method");
	if (!method || !(j->method = strdup(method))) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: missing \"method\"", j->id);
		goto out;
	}
	if (sj_opt_u64(o, "passes", 0, &passes) || sj_opt_u64(o, "sends", 1, &sends)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"passes\" or \"sends\"", j->id);
		goto out;
	}
	if (passes > 64 || (sends != 1 && sends != passes + 1)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: sends %llu with %llu passes (must be 1 or passes + 1, passes <= 64)",
				j->id, (unsigned long long)sends, (unsigned long long)passes);
		goto out;
	}
	j->passes = (unsigned)passes;
	j->sends = (unsigned)sends;
	if (sj_opt_bool(o, "spill", &j->spill) || sj_opt_bool(o, "is_embed", &j->is_embed) ||
	    sj_opt_bool(o, "check_equal", &j->check_equal)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: \"spill\", \"is_embed\" and \"check_equal\" are booleans", j->id);
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
	if ((rc = check_inputs_agree(j, err)))
		goto out;
	ps = json_object_get(o, "params");
	if (ps && !json_is_object(ps)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: \"params\" is not an object", j->id);
		goto out;
	}
	if ((rc = decode_params(json_object_get(ps, "global"), &j->global, j->id, "global", err)))
		goto out;
	pin = json_object_get(ps, "inputs");
	if (pin && (!json_is_array(pin) || json_array_size(pin) != j->ninputs)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: per-input parameters for %zu inputs, the job has %zu", j->id,
				json_is_array(pin) ? json_array_size(pin) : 0, j->ninputs);
		goto out;
	}
	json_array_foreach(pin, i, v)
		if ((rc = decode_params(v, &j->input_params[i], j->id, "per-input", err)))
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

static json_t *params_json(const struct mk_job_params *ps)
{
	json_t *o = json_object();

	for (size_t k = 0; o && k < ps->n; k++)
		json_object_set_new(o, ps->p[k].name, sj_from_pval(&ps->p[k].value));
	return o;
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
	json_object_set_new(o, "method", json_string(j->method));
	for (size_t i = 0; i < j->ninputs; i++) {
		const struct mk_plan_input *in = &j->inputs[i];
		json_t *e = json_pack("{s:I,s:s,s:s,s:o}", "model", (json_int_t)in->model, "tensor", in->tensor,
				      "dtype", mk_dtype_name(in->desc.dtype), "shape", sj_shape(in->desc.ndim, in->desc.shape));
		if (e && in->load_dtype != in->desc.dtype)
			json_object_set_new(e, "load_dtype", json_string(mk_dtype_name(in->load_dtype)));
		if (e && in->nsources) {
			json_t *sv = json_array();
			for (size_t q = 0; q < in->nsources; q++)
				json_array_append_new(sv, json_string(in->sources[q]));
			json_object_set_new(e, "assembly", json_pack("{s:s,s:o}", "kind", in->assembly, "sources", sv));
		}
		json_array_append_new(ins, e);
		json_array_append_new(pin, params_json(&j->input_params[i]));
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
	json_object_set_new(ps, "global", params_json(&j->global));
	json_object_set_new(ps, "inputs", pin);
	json_object_set_new(o, "params", ps);
	sj_add_extra(o, j->extra);
	rc = sj_dump(o, out, len, err);
	json_decref(o);
	return rc;
}
