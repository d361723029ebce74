/* json.c - the small JSON helper behind HEAD and JOB frames. */
#include <string.h>
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
