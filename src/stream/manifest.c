/* manifest.c - the HEAD frame's JSON: output manifest and stream kind. */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "mk/manifest.h"
#include "mk/stream.h"

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
	for (size_t i = 0; i < m->ntensors; i++)
		free(m->tensors[i].name);
	for (size_t i = 0; i < m->nfiles; i++)
		free(m->files[i].name);
	free(m->tensors);
	free(m->files);
	free(m->kind);
	free(m->producer);
	json_decref(m->json);
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
	for (unsigned i = 0; i < ndim; i++) {
		t->shape[i] = shape[i];
		if (__builtin_mul_overflow(nelem, shape[i], &nelem))
			return mk_err_set(err, MK_EFORMAT, "tensor '%s': shape overflows", name);
	}
	t->ndim = ndim;
	t->dtype = dt;
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

int mk_manifest_encode(const struct mk_manifest *m, char **out, size_t *len,
		       struct mk_err *err)
{
	json_t *o = m->json ? json_deep_copy(m->json) : json_object();
	json_t *ts = json_array(), *fs = json_array();
	int rc = 0;

	*out = NULL;
	if (!o || !ts || !fs)
		goto oom;
	json_object_set_new(o, "kind", json_string(m->kind));
	json_object_set_new(o, "producer", json_string(m->producer));
	json_object_set_new(o, "chunk_bytes", json_integer((json_int_t)m->chunk_bytes));
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mk_manifest_tensor *t = &m->tensors[i];
		json_t *sh = json_array();
		for (unsigned d = 0; d < t->ndim; d++)
			json_array_append_new(sh, json_integer((json_int_t)t->shape[d]));
		json_array_append_new(ts, json_pack("{s:s,s:s,s:o}", "name", t->name, "dtype",
						    mk_dtype_name(t->dtype), "shape", sh));
	}
	for (size_t i = 0; i < m->nfiles; i++)
		json_array_append_new(fs, json_pack("{s:s,s:I}", "name", m->files[i].name, "size",
						    (json_int_t)m->files[i].size));
	json_object_set_new(o, "tensors", ts);
	json_object_set_new(o, "files", fs);
	ts = fs = NULL;
	*out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!*out)
		goto oom;
	*len = strlen(*out);
	goto out;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	json_decref(ts);
	json_decref(fs);
	json_decref(o);
	return rc;
}

static int strcmp_p(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int get_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int mk_manifest_decode(const void *buf, size_t len, struct mk_manifest **out,
		       struct mk_err *err)
{
	json_error_t je;
	json_t *o, *v, *ts, *fs;
	struct mk_manifest *m = NULL;
	int rc = 0;
	size_t i;

	*out = NULL;
	o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
	if (!o)
		return mk_err_set(err, MK_EFORMAT, "HEAD: invalid JSON at position %d: %s", je.position,
				  je.text);
	if (!json_is_object(o)) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: not a JSON object");
		goto out;
	}
	v = json_object_get(o, "kind");
	if (!json_is_string(v)) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: missing \"kind\"");
		goto out;
	}
	m = mk_manifest_new(json_string_value(v),
			    json_is_string(json_object_get(o, "producer")) ?
				    json_string_value(json_object_get(o, "producer")) : "");
	if (!m) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (get_u64(json_object_get(o, "chunk_bytes"), &m->chunk_bytes))
		m->chunk_bytes = 0;
	ts = json_object_get(o, "tensors");
	if (!json_is_array(ts)) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: \"tensors\" is not an array");
		goto out;
	}
	json_array_foreach(ts, i, v) {
		json_t *nm = json_object_get(v, "name"), *dt = json_object_get(v, "dtype");
		json_t *sh = json_object_get(v, "shape"), *d;
		uint64_t shape[MK_MAX_DIMS];
		enum mk_dtype dtype;
		size_t k;

		if (!json_is_string(nm) || !json_is_string(dt) || !json_is_array(sh) ||
		    mk_dtype_from_name(json_string_value(dt), &dtype) ||
		    json_array_size(sh) > MK_MAX_DIMS) {
			rc = mk_err_set(err, MK_EFORMAT, "HEAD: tensor #%zu: needs name, a known dtype and a shape",
					i);
			goto out;
		}
		json_array_foreach(sh, k, d) {
			if (get_u64(d, &shape[k])) {
				rc = mk_err_set(err, MK_EFORMAT, "HEAD: tensor '%s': bad shape",
						json_string_value(nm));
				goto out;
			}
		}
		rc = mk_manifest_add_tensor(m, json_string_value(nm), dtype, (unsigned)json_array_size(sh),
					    shape, err);
		if (rc)
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
	fs = json_object_get(o, "files");
	if (fs && !json_is_array(fs)) {
		rc = mk_err_set(err, MK_EFORMAT, "HEAD: \"files\" is not an array");
		goto out;
	}
	json_array_foreach(fs, i, v) {
		json_t *nm = json_object_get(v, "name");
		uint64_t size;
		if (!json_is_string(nm) || get_u64(json_object_get(v, "size"), &size)) {
			rc = mk_err_set(err, MK_EFORMAT, "HEAD: file #%zu: needs name and size", i);
			goto out;
		}
		rc = mk_manifest_add_file(m, json_string_value(nm), size, err);
		if (rc)
			goto out;
	}
	/* keep the rest for later stages; the typed fields are re-emitted */
	json_object_del(o, "tensors");
	json_object_del(o, "files");
	m->json = o;
	o = NULL;
out:
	json_decref(o);
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
	if (strcmp((*man)->kind, kind)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: this is a '%s' stream; %s", label, (*man)->kind, need);
		mk_manifest_free(*man);
		*man = NULL;
	}
	return rc;
}
