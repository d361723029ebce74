/* json.c - the small JSON helper behind HEAD and JOB frames. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsonscan.h"
#include "core/sbuf.h"
#include "json.h"

int sj_load(const void *buf, size_t len, const char *what, json_t **out, struct mk_err *err)
{
	json_error_t je;
	json_t *o = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);

	*out = NULL;
	if (!o)
		return mk_err_set(err, MK_EFORMAT, "%s: invalid JSON at position %d: %s", what, je.position, je.text);
	if (!json_is_object(o)) {
		json_decref(o);
		return mk_err_set(err, MK_EFORMAT, "%s: not a JSON object", what);
	}
	*out = o;
	return 0;
}

/* A scanner (core/jsonscan.h) at the walk's position; walk_done moves
 * the walk to where the scanner stopped and returns rc. */
static struct mk_jscan walk_scan(struct sj_walk *w, struct mk_err *err)
{
	return (struct mk_jscan){ .start = w->s, .p = w->s + w->at, .end = w->s + w->len, .label = w->what,
				  .what = "the frame", .err = err };
}

static int walk_done(struct sj_walk *w, const struct mk_jscan *j, int rc)
{
	w->at = (size_t)(j->p - w->s);
	return rc < 0 ? j->rc : rc;
}

int sj_walk_open(struct sj_walk *w, char open, struct sj_list *l, struct mk_err *err)
{
	struct mk_jscan j = walk_scan(w, err);

	l->close = open == '{' ? '}' : ']';
	l->started = false;
	return walk_done(w, &j, mk_jscan_expect(&j, open));
}

int sj_walk_next(struct sj_walk *w, struct sj_list *l, struct mk_err *err)
{
	struct mk_jscan j = walk_scan(w, err);
	bool first = !l->started;

	l->started = true;
	return walk_done(w, &j, mk_jscan_more(&j, l->close, &first));
}

int sj_walk_key(struct sj_walk *w, char **key, struct mk_err *err)
{
	struct mk_jscan j = walk_scan(w, err);
	const char *at;
	size_t n;

	*key = NULL;
	mk_jscan_peek(&j);
	at = j.p;
	/* checked and measured, then decoded into a buffer of that size */
	if (mk_jscan_string(&j, NULL, &n) < 0)
		return walk_done(w, &j, -1);
	if (!(*key = malloc(n + 1)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	j.p = at;
	if (mk_jscan_string(&j, *key, &n) < 0 || mk_jscan_expect(&j, ':') < 0) {
		free(*key);
		*key = NULL;
		return walk_done(w, &j, -1);
	}
	return walk_done(w, &j, 0);
}

int sj_walk_value(struct sj_walk *w, size_t max, const char *name, json_t **out, struct mk_err *err)
{
	struct mk_jscan j = walk_scan(w, err);
	json_error_t je;
	size_t at, end;

	*out = NULL;
	mk_jscan_peek(&j);
	at = (size_t)(j.p - w->s);
	if (mk_jscan_skip(&j) < 0)
		return walk_done(w, &j, -1);
	end = (size_t)(j.p - w->s);
	if (end - at > max)
		return mk_err_set(err, MK_EFORMAT, "%s: %s (at position %zu): %zu bytes of JSON, over the %zu bytes left for it",
				  w->what, name, at, end - at, max);
	*out = json_loadb(w->s + at, end - at, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	if (!*out)
		return mk_err_set(err, MK_EFORMAT, "%s: invalid JSON at position %zu: %s", w->what,
				  at + (size_t)(je.position > 0 ? je.position : 0), je.text);
	w->at = end;
	return 0;
}

int sj_walk_end(struct sj_walk *w, struct mk_err *err)
{
	struct mk_jscan j = walk_scan(w, err);

	return walk_done(w, &j, mk_jscan_finish(&j, 0));
}

static void put_value(struct mk_sbuf *b, json_t *v)
{
	char *t = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY) : NULL;

	json_decref(v);
	if (!t) {
		b->oom = true;
		return;
	}
	mk_sbuf_str(b, t);
	free(t);
}

void sj_put_member(struct mk_sbuf *b, bool *first, const char *key, json_t *v)
{
	if (!*first)
		mk_sbuf_add(b, ",", 1);
	*first = false;
	put_value(b, json_string(key));
	mk_sbuf_add(b, ":", 1);
	if (v)
		put_value(b, v);
	else
		mk_sbuf_add(b, "[", 1);
}

void sj_put_entry(struct mk_sbuf *b, size_t i, json_t *v)
{
	if (i)
		mk_sbuf_add(b, ",", 1);
	put_value(b, v);
}

int sj_load_bounded(const void *buf, size_t len, const char *what, const char *const *known, size_t extra_max,
		    json_t **out, struct mk_err *err)
{
	struct sj_walk w = { .s = buf, .len = len, .what = what };
	struct sj_list l;
	json_t *o = json_object();
	size_t extra = 0;
	int rc;

	*out = NULL;
	if (!o)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = sj_walk_open(&w, '{', &l, err))) {
		if (w.at < w.len)
			rc = mk_err_set(err, MK_EFORMAT, "%s: not a JSON object", what);
		goto out;
	}
	while ((rc = sj_walk_next(&w, &l, err)) > 0) {
		char *key;
		json_t *v;
		size_t at, k;
		if ((rc = sj_walk_key(&w, &key, err)))
			goto out;
		for (k = 0; known[k] && strcmp(known[k], key); k++)
			;
		at = w.at;
		char name[80];
		snprintf(name, sizeof(name), "unknown key \"%.40s\"", key);
		if (json_object_get(o, key))
			rc = mk_err_set(err, MK_EFORMAT, "%s: duplicate key \"%s\"", what, key);
		else if (!(rc = sj_walk_value(&w, known[k] ? len : extra_max - extra, known[k] ? key : name,
					      &v, err)) && json_object_set_new(o, key, v))
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		if (!known[k])
			extra += w.at - at;
		free(key);
		if (rc)
			goto out;
	}
	if (!rc)
		rc = sj_walk_end(&w, err);
out:
	if (rc)
		json_decref(o);
	else
		*out = o;
	return rc;
}

int sj_dump(json_t *o, char **out, size_t *len, struct mk_err *err)
{
	*out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!*out)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*len = strlen(*out);
	return 0;
}

int sj_u64(json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int sj_opt_u64(json_t *obj, const char *key, uint64_t def, uint64_t *out)
{
	json_t *v = json_object_get(obj, key);

	if (!v) {
		*out = def;
		return 0;
	}
	return sj_u64(v, out);
}

const char *sj_str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

int sj_opt_bool(json_t *obj, const char *key, bool *out)
{
	json_t *v = json_object_get(obj, key);

	*out = false;
	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return -1;
	*out = json_is_true(v);
	return 0;
}

int sj_desc(json_t *dtype, json_t *shape, struct mk_tensor_desc *d, uint64_t *nelem)
{
	size_t k;
	json_t *v;

	memset(d, 0, sizeof(*d));
	if (!json_is_string(dtype) || mk_dtype_from_name(json_string_value(dtype), &d->dtype) ||
	    !json_is_array(shape) || json_array_size(shape) > MK_MAX_DIMS)
		return -1;
	d->ndim = (unsigned)json_array_size(shape);
	json_array_foreach(shape, k, v)
		if (sj_u64(v, &d->shape[k]))
			return -2;
	return mk_tensor_desc_nelem(d, nelem) ? -3 : 0;
}

const char *sj_desc_error(int rc)
{
	return rc == -3 ? "shape overflows" : rc == -2 ? "bad shape" : "needs a known dtype and a shape (at most 8 dims)";
}

json_t *sj_shape(unsigned ndim, const uint64_t *shape)
{
	json_t *a = json_array();

	for (unsigned d = 0; a && d < ndim; d++)
		json_array_append_new(a, json_integer((json_int_t)shape[d]));
	return a;
}

int sj_sha256(json_t *v, uint8_t out[32])
{
	const char *s = json_string_value(v);

	if (!s || strlen(s) != 64)
		return -1;
	for (int i = 0; i < 32; i++) {
		unsigned b = 0;
		for (int k = 0; k < 2; k++) {
			char c = s[2 * i + k];
			b <<= 4;
			if (c >= '0' && c <= '9')
				b |= (unsigned)(c - '0');
			else if (c >= 'a' && c <= 'f')
				b |= (unsigned)(c - 'a' + 10);
			else
				return -1;
		}
		out[i] = (uint8_t)b;
	}
	return 0;
}

int sj_pval(json_t *v, struct mk_pval *out)
{
	if (json_is_boolean(v))
		*out = mk_pval_bool(json_is_true(v));
	else if (json_is_integer(v))
		*out = mk_pval_int(json_integer_value(v));
	else if (json_is_real(v))
		*out = mk_pval_float(json_real_value(v));
	else if (json_is_null(v))
		memset(out, 0, sizeof(*out));
	else
		return -1;
	return 0;
}

json_t *sj_from_pval(const struct mk_pval *v)
{
	if (!v->set)
		return json_null();
	switch (v->type) {
	case MK_PT_BOOL: return json_boolean(v->b);
	case MK_PT_INT: return json_integer(v->i);
	default: return json_real(v->f);
	}
}

json_t *sj_extra(json_t *o, const char *const *known)
{
	json_t *x = NULL, *v;
	const char *key;

	json_object_foreach(o, key, v) {
		size_t k = 0;
		while (known[k] && strcmp(known[k], key))
			k++;
		if (known[k])
			continue;
		if (!x && !(x = json_object()))
			return NULL;
		json_object_set(x, key, v);
	}
	return x;
}

void sj_add_extra(json_t *o, json_t *extra)
{
	const char *key;
	json_t *v;

	json_object_foreach(extra, key, v)
		if (!json_object_get(o, key))
			json_object_set(o, key, v);
}
