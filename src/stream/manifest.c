/* manifest.c - the HEAD frame: encoded from and decoded into struct
 * mk_manifest, checked whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "core/sbuf.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "json.h"

struct mk_manifest *mk_manifest_new(const char *kind, const char *producer)
{
	struct mk_manifest *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->kind = strdup(kind);
	m->producer = strdup(producer ? producer : "");
	if (!m->kind || !m->producer) {
		mk_manifest_free(m);
		return NULL;
	}
	return m;
}

void mk_manifest_free(struct mk_manifest *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->ntensors; i++) {
		free(m->tensors[i].name);
		for (size_t k = 0; k < m->tensors[i].nrequant_parts; k++)
			free(m->tensors[i].requant_parts[k]);
		free(m->tensors[i].requant_parts);
	}
	for (size_t i = 0; i < m->nfiles; i++)
		free(m->files[i].name);
	free(m->tensors);
	free(m->files);
	for (size_t i = 0; i < m->nmodels; i++) {
		for (size_t k = 0; k < m->models[i].nshards; k++)
			free(m->models[i].shards[k].name);
		free(m->models[i].shards);
		free(m->models[i].ref);
		free(m->models[i].commit);
	}
	free(m->models);
	for (size_t i = 0; i < m->nplugins; i++)
		free(m->plugins[i].name);
	free(m->plugins);
	free(m->kind);
	free(m->producer);
	json_decref(m->extra);
	free(m->quant_config);
	free(m);
}

int mk_manifest_add_tensor(struct mk_manifest *m, const char *name, enum mk_dtype dt,
			   unsigned ndim, const uint64_t *shape, struct mk_err *err)
{
	struct mk_manifest_tensor *t;
	uint64_t nelem = 1;

	if (ndim > MK_MAX_DIMS)
		return mk_err_set(err, MK_EUNSUPPORTED, "tensor '%s': %u dimensions (at most %d)", name,
				  ndim, MK_MAX_DIMS);
	if ((m->ntensors & (m->ntensors - 1)) == 0) {
		size_t cap = m->ntensors ? m->ntensors * 2 : 16;
		void *p = realloc(m->tensors, cap * sizeof(*m->tensors));
		if (!p)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		m->tensors = p;
	}
	t = &m->tensors[m->ntensors];
	memset(t, 0, sizeof(*t));
	if (mk_shape_nelem(ndim, shape, &nelem))
		return mk_err_set(err, MK_EFORMAT, "tensor '%s': shape overflows", name);
	if (ndim)
		memcpy(t->desc.shape, shape, ndim * sizeof(*shape));
	t->desc.ndim = ndim;
	t->desc.dtype = dt;
	t->nelem = nelem;
	if (mk_dtype_nbytes(dt, nelem, &t->nbytes))
		return mk_err_set(err, MK_EFORMAT, "tensor '%s': %llu %s elements are not whole bytes", name,
				  (unsigned long long)nelem, mk_dtype_name(dt));
	t->name = strdup(name);
	if (!t->name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->ntensors++;
	return 0;
}

int mk_manifest_add_file(struct mk_manifest *m, const char *name, uint64_t size,
			 struct mk_err *err)
{
	void *p = realloc(m->files, (m->nfiles + 1) * sizeof(*m->files));

	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->files = p;
	m->files[m->nfiles].name = strdup(name);
	if (!m->files[m->nfiles].name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->files[m->nfiles].size = size;
	m->nfiles++;
	return 0;
}

int mk_manifest_add_model(struct mk_manifest *m, const char *ref, const char *commit,
			  struct mk_err *err)
{
	void *p = realloc(m->models, (m->nmodels + 1) * sizeof(*m->models));

	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->models = p;
	memset(&m->models[m->nmodels], 0, sizeof(*m->models));
	m->models[m->nmodels].ref = strdup(ref);
	if (commit)
		m->models[m->nmodels].commit = strdup(commit);
	if (!m->models[m->nmodels].ref || (commit && !m->models[m->nmodels].commit)) {
		free(m->models[m->nmodels].ref);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	m->nmodels++;
	m->planned = true;
	return 0;
}

int mk_manifest_add_shard(struct mk_manifest *m, const char *name, uint64_t size,
			  const uint8_t header_sha256[32], struct mk_err *err)
{
	struct mk_plan_model *pm = m->nmodels ? &m->models[m->nmodels - 1] : NULL;
	void *p;

	if (!pm)
		return mk_err_set(err, MK_EINVAL, "a shard needs a model");
	p = realloc(pm->shards, (pm->nshards + 1) * sizeof(*pm->shards));
	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	pm->shards = p;
	pm->shards[pm->nshards].name = strdup(name);
	if (!pm->shards[pm->nshards].name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	pm->shards[pm->nshards].size = size;
	memcpy(pm->shards[pm->nshards].header_sha256, header_sha256, 32);
	pm->nshards++;
	return 0;
}

int mk_manifest_add_plugin(struct mk_manifest *m, const char *name, unsigned abi, const char *spec_sha256,
			   struct mk_err *err)
{
	void *p = realloc(m->plugins, (m->nplugins + 1) * sizeof(*m->plugins));

	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->plugins = p;
	if (strlen(spec_sha256) != 64)
		return mk_err_set(err, MK_EINVAL, "plugin '%s': a spec hash is 64 hex digits", name);
	m->plugins[m->nplugins].name = strdup(name);
	if (!m->plugins[m->nplugins].name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->plugins[m->nplugins].abi = abi;
	memcpy(m->plugins[m->nplugins].spec_sha256, spec_sha256, 65);
	m->nplugins++;
	m->planned = true;
	return 0;
}

int mk_manifest_set_kind(struct mk_manifest *m, const char *kind, const char *producer, struct mk_err *err)
{
	char *k = strdup(kind), *p = strdup(producer);

	if (!k || !p) {
		free(k);
		free(p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	free(m->kind);
	free(m->producer);
	m->kind = k;
	m->producer = p;
	return 0;
}

int mk_manifest_encode(const struct mk_manifest *m, char **out, size_t *len,
		       struct mk_err *err)
{
	struct mk_sbuf b = { 0 };
	bool first = true;

	/* written a member, and a list entry, at a time: no tree of the
	 * whole (the text is what one compact json_dumps of it would be) */
	*out = NULL;
	mk_sbuf_add(&b, "{", 1);
	sj_put_member(&b, &first, "kind", json_string(m->kind));
	sj_put_member(&b, &first, "producer", json_string(m->producer));
	if (m->chunk_bytes)
		sj_put_member(&b, &first, "chunk_bytes", json_integer((json_int_t)m->chunk_bytes));
	if (m->planned) {
		char hex[65];
		sj_put_member(&b, &first, "models", NULL);
		for (size_t i = 0; i < m->nmodels; i++) {
			json_t *sh = json_array();
			for (size_t k = 0; k < m->models[i].nshards; k++) {
				const struct mk_plan_shard *s = &m->models[i].shards[k];
				mk_hex(s->header_sha256, 32, hex);
				json_array_append_new(sh, json_pack("{s:s,s:I,s:s}", "name", s->name, "size",
								    (json_int_t)s->size, "header_sha256", hex));
			}
			json_t *mo = json_pack("{s:s}", "ref", m->models[i].ref);
			if (mo && m->models[i].commit)
				json_object_set_new(mo, "commit", json_string(m->models[i].commit));
			if (mo && m->models[i].adapter)
				json_object_set_new(mo, "adapter", json_true());
			if (mo)
				json_object_set_new(mo, "shards", sh);
			else
				json_decref(sh);
			sj_put_entry(&b, i, mo);
		}
		mk_sbuf_add(&b, "]", 1);
		sj_put_member(&b, &first, "seed", json_integer((json_int_t)m->seed));
		sj_put_member(&b, &first, "plugins", NULL);
		for (size_t i = 0; i < m->nplugins; i++)
			sj_put_entry(&b, i, json_pack("{s:s,s:i,s:s}", "name", m->plugins[i].name, "abi",
						      (int)m->plugins[i].abi, "spec_sha256", m->plugins[i].spec_sha256));
		mk_sbuf_add(&b, "]", 1);
		sj_put_member(&b, &first, "jobs", json_integer((json_int_t)m->njobs));
		sj_put_member(&b, &first, "held_bytes_max", json_integer((json_int_t)m->held_bytes_max));
		if (m->spilled_jobs)
			sj_put_member(&b, &first, "spilled_jobs", json_integer((json_int_t)m->spilled_jobs));
	}
	if (m->quant_config) {
		json_t *q = json_loads(m->quant_config, 0, NULL);
		if (!q)
			b.oom = true;
		sj_put_member(&b, &first, "quantization_config", q);
	}
	if (m->extra) {
		const char *key;
		json_t *v;
		json_object_foreach((json_t *)m->extra, key, v)
			sj_put_member(&b, &first, key, json_incref(v));
	}
	sj_put_member(&b, &first, "tensors", NULL);
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mk_manifest_tensor *t = &m->tensors[i];
		json_t *e = json_pack("{s:s,s:s,s:o}", "name", t->name, "dtype", mk_dtype_name(t->desc.dtype),
				      "shape", sj_shape(t->desc.ndim, t->desc.shape));
		if (e && t->requant &&
		    json_object_set_new(e, "requant", json_string(mk_requant_name(t->requant))))
			b.oom = true;
		if (e && t->nrequant_parts) {
			json_t *a = json_array();
			for (size_t k = 0; a && k < t->nrequant_parts; k++)
				if (json_array_append_new(a, json_string(t->requant_parts[k])))
					b.oom = true;
			if (!a || json_object_set_new(e, "requant_parts", a))
				b.oom = true;
		}
		sj_put_entry(&b, i, e);
	}
	mk_sbuf_add(&b, "]", 1);
	sj_put_member(&b, &first, "files", NULL);
	for (size_t i = 0; i < m->nfiles; i++)
		sj_put_entry(&b, i, json_pack("{s:s,s:I}", "name", m->files[i].name, "size", (json_int_t)m->files[i].size));
	mk_sbuf_add(&b, "]}", 2);
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

static int strcmp_p(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *const head_keys[] = { "kind", "producer", "chunk_bytes", "models", "seed", "plugins",
					 "jobs", "held_bytes_max", "spilled_jobs", "quantization_config", "tensors",
					 "files", NULL };

/* One entry of "models": a model and its shards. */
static int decode_model(json_t *v, size_t i, struct mk_manifest *m, struct mk_err *err)
{
	const char *ref = sj_str(v, "ref"), *commit = sj_str(v, "commit");
	json_t *sh = json_object_get(v, "shards"), *ad = json_object_get(v, "adapter"), *s;
	size_t k;
	int rc;

	if (!ref || !json_is_array(sh) || (ad && !json_is_boolean(ad)))
		return mk_err_set(err, MK_EFORMAT, "HEAD: model #%zu needs \"ref\" and \"shards\" (and \"adapter\" is a boolean)", i);
	if (json_object_get(v, "commit") && (!commit || !mk_path_stays_inside(commit) || strchr(commit, '/')))
		return mk_err_set(err, MK_EFORMAT, "HEAD: model '%s': \"commit\" is not a commit", ref);
	if ((rc = mk_manifest_add_model(m, ref, commit, err)))
		return rc;
	m->models[m->nmodels - 1].adapter = json_is_true(ad);
	json_array_foreach(sh, k, s) {
		const char *nm = sj_str(s, "name");
		uint64_t size;
		uint8_t hh[32];
		if (!nm || sj_u64(json_object_get(s, "size"), &size) ||
		    sj_sha256(json_object_get(s, "header_sha256"), hh))
			return mk_err_set(err, MK_EFORMAT,
					  "HEAD: model '%s': shard #%zu needs name, size and header_sha256", ref, k);
		if (mk_file_name_check(nm, strlen(nm), err))
			return mk_err_prefix(err, "HEAD: model '%s': shard #%zu: ", ref, k);
		if ((rc = mk_manifest_add_shard(m, nm, size, hh, err)))
			return rc;
	}
	return 0;
}

/* The plan's other keys (the model table is read by then). */
static int decode_plan(json_t *o, struct mk_manifest *m, struct mk_err *err)
{
	json_t *ps = json_object_get(o, "plugins"), *v;
	size_t i;
	int rc;

	m->planned = true;
	if (ps && !json_is_array(ps))
		return mk_err_set(err, MK_EFORMAT, "HEAD: \"plugins\" is not an array");
	json_array_foreach(ps, i, v) {
		const char *nm = sj_str(v, "name"), *h = sj_str(v, "spec_sha256");
		uint64_t abi;
		uint8_t hh[32];
		if (!nm || sj_u64(json_object_get(v, "abi"), &abi) || abi > UINT32_MAX ||
		    sj_sha256(json_object_get(v, "spec_sha256"), hh))
			return mk_err_set(err, MK_EFORMAT, "HEAD: plugin #%zu needs name, abi and spec_sha256", i);
		if ((rc = mk_manifest_add_plugin(m, nm, (unsigned)abi, h, err)))
			return rc;
	}
	if (sj_opt_u64(o, "seed", 0, &m->seed) || sj_opt_u64(o, "jobs", 0, &m->njobs) ||
	    sj_opt_u64(o, "held_bytes_max", 0, &m->held_bytes_max) ||
	    sj_opt_u64(o, "spilled_jobs", 0, &m->spilled_jobs))
		return mk_err_set(err, MK_EFORMAT,
				  "HEAD: \"seed\", \"jobs\", \"held_bytes_max\" and \"spilled_jobs\" are non-negative integers");
	if (m->spilled_jobs > m->njobs)
		return mk_err_set(err, MK_EFORMAT, "HEAD: %llu spilled jobs of %llu",
				  (unsigned long long)m->spilled_jobs, (unsigned long long)m->njobs);
	return 0;
}

/* One entry of "tensors". */
static int decode_tensor(json_t *v, size_t i, struct mk_manifest *m, struct mk_err *err)
{
	struct mk_tensor_desc d;
	uint64_t ne;
	const char *nm = sj_str(v, "name");
	int drc = nm ? sj_desc(json_object_get(v, "dtype"), json_object_get(v, "shape"), &d, &ne) : -1;

	if (drc == -1)
		return mk_err_set(err, MK_EFORMAT, "HEAD: tensor #%zu: needs name, a known dtype and a shape (at most %d dims)",
				  i, MK_MAX_DIMS);
	if (drc)
		return mk_err_set(err, MK_EFORMAT, "HEAD: tensor '%s': %s", nm, sj_desc_error(drc));
	if (!strcmp(nm, "__metadata__"))
		return mk_err_set(err, MK_EFORMAT, "HEAD: a tensor may not be named '__metadata__' (safetensors keeps that key)");
	json_t *rq = json_object_get(v, "requant");
	enum mk_requant kind = MK_REQUANT_NONE;
	bool bad = rq && (!json_is_string(rq) || mk_requant_parse(json_string_value(rq), &kind) || !kind);
	if (rq && (bad || !mk_dtype_is_float(d.dtype) || d.ndim < 2 ||
		   (kind == MK_REQUANT_MXFP4 && (d.ndim != 3 || d.shape[1] % 32))))
		return mk_err_set(err, MK_EFORMAT,
				  "HEAD: tensor '%s': \"requant\" is \"fp8\", of a float tensor of 2 or more axes, or "
				  "\"mxfp4\", of a float tensor [E, C, R] with C a multiple of 32", nm);
	json_t *parts = json_object_get(v, "requant_parts");
	if (parts && (kind != MK_REQUANT_FP8 || !json_is_array(parts) || !json_array_size(parts)))
		return mk_err_set(err, MK_EFORMAT, "HEAD: tensor '%s': \"requant_parts\" is a list of names, with "
				  "\"requant\": \"fp8\"", nm);
	int rc = mk_manifest_add_tensor(m, nm, d.dtype, d.ndim, d.shape, err);
	if (!rc)
		m->tensors[m->ntensors - 1].requant = kind;
	if (!rc && parts) {
		size_t n = json_array_size(parts);
		char **names = calloc(n, sizeof(*names));
		if (!names)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		for (size_t k = 0; !rc && k < n; k++)
			if (!json_is_string(json_array_get(parts, k)))
				rc = mk_err_set(err, MK_EFORMAT, "HEAD: tensor '%s': \"requant_parts\" is a list of names",
						nm);
			else
				names[k] = (char *)json_string_value(json_array_get(parts, k));
		if (!rc)
			rc = mk_manifest_set_requant_parts(&m->tensors[m->ntensors - 1], names, n, err);
		free(names);
		if (rc)
			mk_err_prefix(err, "HEAD: ");
	}
	return rc;
}

/* One entry of "files". */
static int decode_file(json_t *v, size_t i, struct mk_manifest *m, struct mk_err *err)
{
	const char *nm = sj_str(v, "name");
	uint64_t size;

	if (!nm || sj_u64(json_object_get(v, "size"), &size))
		return mk_err_set(err, MK_EFORMAT, "HEAD: file #%zu: needs name and size", i);
	if (mk_file_name_check(nm, strlen(nm), err))
		return mk_err_prefix(err, "HEAD: file #%zu: ", i);
	return mk_manifest_add_file(m, nm, size, err);
}

/* The lists a HEAD may make long, read an entry at a time. */
static const struct {
	const char *key;
	int (*entry)(json_t *v, size_t i, struct mk_manifest *m, struct mk_err *err);
} head_lists[] = {
	{ "tensors", decode_tensor },
	{ "files", decode_file },
	{ "models", decode_model },
};
#define NLISTS (sizeof(head_lists) / sizeof(head_lists[0]))

/* A member of the HEAD: a list, an entry at a time, or any other value,
 * kept in *top (its text counted in *kept). */
static int decode_member(struct sj_walk *w, const char *key, json_t *top, bool *seen, size_t *kept,
			 struct mk_manifest *m, struct mk_err *err)
{
	struct sj_list l;
	size_t k, i, at = w->at;
	json_t *v;
	int rc;

	for (k = 0; k < NLISTS && strcmp(key, head_lists[k].key); k++)
		;
	if ((k < NLISTS && seen[k]) || json_object_get(top, key))
		return mk_err_set(err, MK_EFORMAT, "HEAD: duplicate key \"%s\"", key);
	if (k == NLISTS) {
		if ((rc = sj_walk_value(w, MK_HEAD_VALUE_MAX - *kept, "the values beside its lists", &v, err)))
			return rc;
		*kept += w->at - at;
		return json_object_set_new(top, key, v) ? mk_err_set(err, MK_ENOMEM, "out of memory") : 0;
	}
	seen[k] = true;
	if (sj_walk_open(w, '[', &l, err))
		return mk_err_set(err, MK_EFORMAT, "HEAD: \"%s\" is not an array", key);
	for (i = 0; (rc = sj_walk_next(w, &l, err)) > 0; i++) {
		char what[32];
		snprintf(what, sizeof(what), "%s #%zu", key, i);
		if ((rc = sj_walk_value(w, MK_HEAD_VALUE_MAX, what, &v, err)))
			return rc;
		rc = head_lists[k].entry(v, i, m, err);
		json_decref(v);
		if (rc)
			return rc;
	}
	return rc;
}

int mk_manifest_decode(const void *buf, size_t len, struct mk_manifest **out,
		       struct mk_err *err)
{
	struct sj_walk w = { .s = buf, .len = len, .what = "HEAD" };
	bool seen[NLISTS] = { false };
	struct sj_list l;
	json_t *top = json_object();
	struct mk_manifest *m = mk_manifest_new("", "");
	const char *kind, *producer;
	size_t i, kept = 0;
	int rc;

	*out = NULL;
	if (!top || !m) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	/* a member at a time: no tree of the whole (mk-stream(5), Limits) */
	if ((rc = sj_walk_open(&w, '{', &l, err))) {
		if (w.at < w.len) /* else: empty, "invalid JSON" */
			rc = mk_err_set(err, MK_EFORMAT, "HEAD: not a JSON object");
		goto out;
	}
	while ((rc = sj_walk_next(&w, &l, err)) > 0) {
		char *key;
		if ((rc = sj_walk_key(&w, &key, err)))
			goto out;
		rc = decode_member(&w, key, top, seen, &kept, m, err);
		free(key);
		if (rc)
			goto out;
	}
	if (rc || (rc = sj_walk_end(&w, err)))
		goto out;
	kind = sj_str(top, "kind");
	producer = sj_str(top, "producer");
	if (!kind) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: missing \"kind\"");
		goto out;
	}
	if (strcmp(kind, "tensors") && strcmp(kind, "plan") && strcmp(kind, "inputs")) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: unknown kind '%s' (tensors, plan or inputs)", kind);
		goto out;
	}
	if (json_object_get(top, "producer") && !producer) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: \"producer\" is not a string");
		goto out;
	}
	if ((rc = mk_manifest_set_kind(m, kind, producer ? producer : "", err)))
		goto out;
	if (sj_opt_u64(top, "chunk_bytes", 0, &m->chunk_bytes) || m->chunk_bytes > MK_FRAME_MAX) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: bad \"chunk_bytes\"");
		goto out;
	}
	if (!seen[0]) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: \"tensors\" is not an array");
		goto out;
	}
	/* names must be unique: sort a copy of the pointers */
	if (m->ntensors > 1) {
		const char **names = malloc(m->ntensors * sizeof(*names));
		if (!names) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (i = 0; i < m->ntensors; i++)
			names[i] = m->tensors[i].name;
		qsort(names, m->ntensors, sizeof(*names), strcmp_p);
		for (i = 1; i < m->ntensors; i++)
			if (!strcmp(names[i - 1], names[i])) {
				rc = mk_err_set(err, MK_EFORMAT, "HEAD: tensor '%s' is listed twice", names[i]);
				break;
			}
		free(names);
		if (rc)
			goto out;
	}
	if (seen[2] || strcmp(kind, "tensors")) {
		if (!seen[2]) {
			rc = mk_err_set(err, MK_EFORMAT, "HEAD: a '%s' stream needs a \"models\" table", kind);
			goto out;
		}
		if ((rc = decode_plan(top, m, err)))
			goto out;
	}
	{
		json_t *q = json_object_get(top, "quantization_config");
		size_t any = m->ntensors;
		for (i = 0; i < m->ntensors && any == m->ntensors; i++)
			if (m->tensors[i].requant)
				any = i;
		if (q) {
			char *t = json_dumps(q, JSON_COMPACT | JSON_PRESERVE_ORDER);
			rc = t ? mk_manifest_set_quant(m, t, strlen(t), err) : mk_err_set(err, MK_ENOMEM, "out of memory");
			free(t);
			if (rc) {
				mk_err_prefix(err, "HEAD: ");
				goto out;
			}
			for (i = 0; i < m->ntensors; i++)
				if (m->tensors[i].requant && m->tensors[i].requant != m->quant_kind) {
					rc = mk_err_set(err, MK_EFORMAT,
							"HEAD: tensor '%s' is marked \"requant\" in another format than "
							"the \"quantization_config\"'s quant_method", m->tensors[i].name);
					goto out;
				}
		} else if (any < m->ntensors) {
			rc = mk_err_set(err, MK_EFORMAT, "HEAD: tensors marked \"requant\" without a \"quantization_config\"");
			goto out;
		}
	}
	m->extra = sj_extra(top, head_keys);
out:
	json_decref(top);
	if (rc)
		mk_manifest_free(m);
	else
		*out = m;
	return rc;
}

long mk_manifest_find(const struct mk_manifest *m, const char *name)
{
	for (size_t i = 0; i < m->ntensors; i++)
		if (!strcmp(m->tensors[i].name, name))
			return (long)i;
	return -1;
}

uint64_t mk_manifest_total_bytes(const struct mk_manifest *m)
{
	uint64_t s = 0;

	for (size_t i = 0; i < m->ntensors; i++)
		s += m->tensors[i].nbytes;
	return s;
}

int mk_sr_head(struct mk_stream_reader *r, const char *label, const char *kind, const char *need,
	       struct mk_manifest **man, struct mk_frame *f, struct mk_err *err)
{
	int rc;

	*man = NULL;
	do {
		rc = mk_sr_next(r, f, err);
		if (rc == 0)
			return mk_err_set(err, MK_EFORMAT, "%s: stream has no HEAD frame", label);
		if (rc < 0)
			return rc;
	} while (!f->critical);
	if (strcmp(f->type, MK_FT_HEAD))
		return mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: expected HEAD, got %s", label,
				  (unsigned long long)f->index, f->type);
	rc = mk_manifest_decode(f->payload, f->payload_len, man, err);
	if (rc)
		return mk_err_prefix(err, "%s: frame #%llu: ", label, (unsigned long long)f->index);
	if (kind && strcmp((*man)->kind, kind)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: this is a '%s' stream; %s", label, (*man)->kind, need);
		mk_manifest_free(*man);
		*man = NULL;
	} else {
		mk_sr_bound_by_head(r, *man); /* the frames that follow, by what HEAD says */
	}
	return rc;
}

int mk_manifest_set_requant_parts(struct mk_manifest_tensor *t, char *const *names, size_t n, struct mk_err *err)
{
	uint64_t cols = t->desc.ndim ? t->desc.shape[t->desc.ndim - 1] : 0;

	if (!n || !cols || t->nelem % n || (t->nelem / n) % cols)
		return mk_err_set(err, MK_EFORMAT, "tensor '%s': %zu \"requant_parts\" do not split its %llu elements "
				  "into whole rows", t->name, n, (unsigned long long)t->nelem);
	char **v = calloc(n, sizeof(*v));
	if (!v)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; k < n; k++)
		if (!(v[k] = strdup(names[k]))) {
			while (k--)
				free(v[k]);
			free(v);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
	for (size_t k = 0; k < t->nrequant_parts; k++)
		free(t->requant_parts[k]);
	free(t->requant_parts);
	t->requant_parts = v;
	t->nrequant_parts = n;
	return 0;
}

const char *mk_requant_name(enum mk_requant k)
{
	return k == MK_REQUANT_FP8 ? "fp8" : k == MK_REQUANT_MXFP4 ? "mxfp4" : NULL;
}

int mk_requant_parse(const char *name, enum mk_requant *out)
{
	for (enum mk_requant k = MK_REQUANT_FP8; k <= MK_REQUANT_MXFP4; k++)
		if (!strcmp(name, mk_requant_name(k))) {
			*out = k;
			return 0;
		}
	return -1;
}

int mk_manifest_set_quant(struct mk_manifest *m, const char *text, size_t len, struct mk_err *err)
{
	json_error_t je;
	json_t *q = json_loadb(text, len, 0, &je), *bs = q ? json_object_get(q, "weight_block_size") : NULL;
	const char *qm = q ? sj_str(q, "quant_method") : NULL;
	json_int_t b0 = 0, b1 = 0;
	char *t;

	if (json_is_array(bs) && json_array_size(bs) == 2 && json_is_integer(json_array_get(bs, 0)) &&
	    json_is_integer(json_array_get(bs, 1))) {
		b0 = json_integer_value(json_array_get(bs, 0));
		b1 = json_integer_value(json_array_get(bs, 1));
	}
	bool mx = json_is_object(q) && qm && !strcmp(qm, "mxfp4");
	if (!mx && (!json_is_object(q) || !qm || strcmp(qm, "fp8") || b0 < 1 || b0 > (1 << 20) || b1 < 1 ||
		    b1 > (1 << 20))) {
		json_decref(q);
		return mk_err_set(err, MK_EFORMAT,
				  "\"quantization_config\" is an object with quant_method \"fp8\" and a weight_block_size of "
				  "two sides from 1 to 2^20, or with quant_method \"mxfp4\"");
	}
	t = json_dumps(q, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(q);
	if (!t)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	free(m->quant_config);
	m->quant_config = t;
	m->quant_kind = mx ? MK_REQUANT_MXFP4 : MK_REQUANT_FP8;
	m->quant_block[0] = mx ? 0 : (uint32_t)b0;
	m->quant_block[1] = mx ? 0 : (uint32_t)b1;
	return 0;
}
