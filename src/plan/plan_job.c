/* job.c - JOB frames and the plan's model table as JSON. */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "mk/hash.h"
#include "mk/plan.h"

static int get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
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
	}
	free(j->inputs);
	free(j->method);
	json_decref(j->json);
	free(j);
}

int mk_plan_job_decode(const void *buf, size_t len, struct mk_plan_job **out, struct mk_err *err)
{
	json_error_t je;
	json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je), *ins, *v;
	struct mk_plan_job *j = NULL;
	uint64_t u;
	size_t i;
	int rc = 0;

	*out = NULL;
	if (!o || !json_is_object(o)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB: not a JSON object%s%s", o ? "" : ": ", o ? "" : je.text);
		goto out;
	}
	j = calloc(1, sizeof(*j));
	if (!j) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (get_u64(json_object_get(o, "id"), &u) || u > UINT32_MAX) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB: missing or bad \"id\"");
		goto out;
	}
	j->id = (uint32_t)u;
	if (get_u64(json_object_get(o, "output"), &u)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: missing or bad \"output\"", j->id);
		goto out;
	}
	j->output = (size_t)u;
	v = json_object_get(o, "method");
	if (!json_is_string(v) || !(j->method = strdup(json_string_value(v)))) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: missing \"method\"", j->id);
		goto out;
	}
	u = 0;
	if (json_object_get(o, "passes") && get_u64(json_object_get(o, "passes"), &u)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"passes\"", j->id);
		goto out;
	}
	j->passes = (unsigned)u;
	u = 1;
	if (json_object_get(o, "sends") && get_u64(json_object_get(o, "sends"), &u)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"sends\"", j->id);
		goto out;
	}
	j->sends = (unsigned)u;
	if (j->passes > 64 || (j->sends != 1 && j->sends != j->passes + 1)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: sends %u with %u passes (must be 1 or passes + 1)",
				j->id, j->sends, j->passes);
		goto out;
	}
	v = json_object_get(o, "spill");
	if (v && !json_is_boolean(v)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"spill\"", j->id);
		goto out;
	}
	j->spill = json_is_true(v);
	if (j->spill && (j->sends != 1 || !j->passes)) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: spill with sends %u and %u passes (must be 1 and > 0)",
				j->id, j->sends, j->passes);
		goto out;
	}
	v = json_object_get(o, "base");
	j->base = -1;
	if (v && !json_is_null(v)) {
		if (get_u64(v, &u)) {
			rc = mk_err_set(err, MK_EFORMAT, "JOB %u: bad \"base\"", j->id);
			goto out;
		}
		j->base = (long)u;
	}
	ins = json_object_get(o, "inputs");
	if (!json_is_array(ins) || json_array_size(ins) > 65535) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: \"inputs\" is not an array", j->id);
		goto out;
	}
	j->ninputs = json_array_size(ins);
	if (j->base >= (long)j->ninputs) {
		rc = mk_err_set(err, MK_EFORMAT, "JOB %u: base %ld is not an input", j->id, j->base);
		goto out;
	}
	j->inputs = calloc(j->ninputs ? j->ninputs : 1, sizeof(*j->inputs));
	if (!j->inputs) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	json_array_foreach(ins, i, v) {
		struct mk_plan_input *in = &j->inputs[i];
		json_t *t = json_object_get(v, "tensor"), *dt = json_object_get(v, "dtype"),
		       *sh = json_object_get(v, "shape"), *d;
		size_t k;
		uint64_t bytes;

		if (get_u64(json_object_get(v, "model"), &u) || !json_is_string(t) || !json_is_string(dt) ||
		    mk_dtype_from_name(json_string_value(dt), &in->dtype) || !json_is_array(sh) ||
		    json_array_size(sh) > MK_MAX_DIMS) {
			rc = mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu needs model, tensor, dtype and shape",
					j->id, i);
			goto out;
		}
		in->model = (size_t)u;
		in->load_dtype = in->dtype;
		if (json_object_get(v, "load_dtype") &&
		    (!json_is_string(json_object_get(v, "load_dtype")) ||
		     mk_dtype_from_name(json_string_value(json_object_get(v, "load_dtype")), &in->load_dtype))) {
			rc = mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad load_dtype", j->id, i);
			goto out;
		}
		in->ndim = (unsigned)json_array_size(sh);
		in->nelem = 1;
		json_array_foreach(sh, k, d) {
			if (get_u64(d, &in->shape[k]) ||
			    __builtin_mul_overflow(in->nelem, in->shape[k], &in->nelem)) {
				rc = mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad shape", j->id, i);
				goto out;
			}
		}
		if (mk_dtype_nbytes(in->dtype, in->nelem, &bytes)) {
			rc = mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: size is not whole bytes", j->id, i);
			goto out;
		}
		in->tensor = strdup(json_string_value(t));
		if (!in->tensor) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		json_t *as = json_object_get(v, "assembly");
		if (as) {
			json_t *kind = json_object_get(as, "kind"), *srcs = json_object_get(as, "sources"), *sv;
			size_t q;
			if (!json_is_string(kind) || !json_is_array(srcs) || !json_array_size(srcs) ||
			    (strcmp(json_string_value(kind), "stack") && strcmp(json_string_value(kind), "stack_concat") &&
			     strcmp(json_string_value(kind), "rename"))) {
				rc = mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad assembly", j->id, i);
				goto out;
			}
			in->assembly = strdup(json_string_value(kind));
			in->sources = calloc(json_array_size(srcs), sizeof(*in->sources));
			if (!in->assembly || !in->sources) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			json_array_foreach(srcs, q, sv) {
				if (!json_is_string(sv) || !(in->sources[q] = strdup(json_string_value(sv)))) {
					rc = mk_err_set(err, MK_EFORMAT, "JOB %u: input %zu: bad assembly source", j->id, i);
					goto out;
				}
				in->nsources = q + 1;
			}
		}
	}
	j->json = o;
	o = NULL;
out:
	json_decref(o);
	if (rc)
		mk_plan_job_free(j);
	else
		*out = j;
	return rc;
}

int mk_plan_job_encode(const struct mk_plan_job *j, char **out, size_t *len, struct mk_err *err)
{
	json_t *o = j->json ? json_deep_copy(j->json) : json_object(), *ins = json_array();
	int rc = 0;

	*out = NULL;
	if (!o || !ins)
		goto oom;
	json_object_set_new(o, "id", json_integer(j->id));
	json_object_set_new(o, "output", json_integer((json_int_t)j->output));
	json_object_set_new(o, "method", json_string(j->method));
	for (size_t i = 0; i < j->ninputs; i++) {
		const struct mk_plan_input *in = &j->inputs[i];
		json_t *sh = json_array();
		for (unsigned d = 0; d < in->ndim; d++)
			json_array_append_new(sh, json_integer((json_int_t)in->shape[d]));
		json_t *e = json_pack("{s:I,s:s,s:s,s:o}", "model", (json_int_t)in->model, "tensor", in->tensor,
				      "dtype", mk_dtype_name(in->dtype), "shape", sh);
		if (e && in->load_dtype != in->dtype)
			json_object_set_new(e, "load_dtype", json_string(mk_dtype_name(in->load_dtype)));
		if (e && in->nsources) {
			json_t *sv = json_array();
			for (size_t q = 0; q < in->nsources; q++)
				json_array_append_new(sv, json_string(in->sources[q]));
			json_object_set_new(e, "assembly", json_pack("{s:s,s:o}", "kind", in->assembly, "sources", sv));
		}
		json_array_append_new(ins, e);
	}
	json_object_set_new(o, "inputs", ins);
	ins = NULL;
	json_object_set_new(o, "base", j->base >= 0 ? json_integer(j->base) : json_null());
	json_object_set_new(o, "passes", json_integer(j->passes));
	json_object_set_new(o, "sends", json_integer(j->sends));
	if (j->spill)
		json_object_set_new(o, "spill", json_true());
	else
		json_object_del(o, "spill");
	*out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!*out)
		goto oom;
	*len = strlen(*out);
	goto out;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	json_decref(ins);
	json_decref(o);
	return rc;
}

void mk_plan_models_free(struct mk_plan_models *pm)
{
	if (!pm)
		return;
	for (size_t i = 0; i < pm->n; i++) {
		for (size_t s = 0; s < pm->m[i].nshards; s++)
			free(pm->m[i].shards[s].name);
		free(pm->m[i].shards);
		free(pm->m[i].ref);
	}
	free(pm->m);
	free(pm);
}

static int unhex(const char *s, uint8_t out[32])
{
	if (strlen(s) != 64)
		return -1;
	for (int i = 0; i < 32; i++) {
		unsigned v = 0;
		for (int k = 0; k < 2; k++) {
			char c = s[2 * i + k];
			v <<= 4;
			if (c >= '0' && c <= '9')
				v |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				v |= (unsigned)(c - 'a' + 10);
			else
				return -1;
		}
		out[i] = (uint8_t)v;
	}
	return 0;
}

int mk_plan_models_decode(const struct mk_manifest *head, struct mk_plan_models **out,
			  struct mk_err *err)
{
	json_t *ms = head->json ? json_object_get(head->json, "models") : NULL, *v;
	struct mk_plan_models *pm = calloc(1, sizeof(*pm));
	size_t i;
	int rc = 0;

	*out = NULL;
	if (!pm)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!json_is_array(ms)) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: a '%s' stream needs a \"models\" table", head->kind);
		goto out;
	}
	pm->m = calloc(json_array_size(ms) + 1, sizeof(*pm->m));
	if (!pm->m) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	json_array_foreach(ms, i, v) {
		struct mk_plan_model *m = &pm->m[i];
		json_t *ref = json_object_get(v, "ref"), *sh = json_object_get(v, "shards"), *s;
		size_t k;

		pm->n = i + 1;
		if (!json_is_string(ref) || !json_is_array(sh)) {
			rc = mk_err_set(err, MK_EFORMAT, "HEAD: model #%zu needs \"ref\" and \"shards\"", i);
			goto out;
		}
		m->ref = strdup(json_string_value(ref));
		m->shards = calloc(json_array_size(sh) + 1, sizeof(*m->shards));
		if (!m->ref || !m->shards) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		json_array_foreach(sh, k, s) {
			json_t *nm = json_object_get(s, "name"), *hh = json_object_get(s, "header_sha256");
			m->nshards = k + 1;
			if (!json_is_string(nm) || get_u64(json_object_get(s, "size"), &m->shards[k].size) ||
			    !json_is_string(hh) || unhex(json_string_value(hh), m->shards[k].header_sha256)) {
				rc = mk_err_set(err, MK_EFORMAT, "HEAD: model '%s': shard #%zu needs name, size and header_sha256",
						m->ref, k);
				goto out;
			}
			m->shards[k].name = strdup(json_string_value(nm));
			if (!m->shards[k].name) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
		}
	}
out:
	if (rc)
		mk_plan_models_free(pm);
	else
		*out = pm;
	return rc;
}
