/* cfgout.c - the output config.json (see mk-compat(7)): the donor's JSON
 * with dtype, layer counts and vocab size set, written as transformers
 * writes it (json.dumps(indent=2, sort_keys=True) + "\n"). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "mk/arch.h"
#include "arch_impl.h"

struct sbuf {
	char *p;
	size_t n, cap;
	bool oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *t = realloc(b->p, cap);
		if (!t) {
			b->oom = true;
			return;
		}
		b->p = t;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

static void sb_fmt(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(struct sbuf *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		sb_add(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* A double as Python's repr writes it: the shortest digits that read back
 * exactly; fixed notation when the decimal point position is in (-4, 16],
 * with ".0" for integral values; else d[.ddd]e[+-]XX. */
static void fmt_real(struct sbuf *b, double d)
{
	char tmp[40], digits[24];
	int p, exp10, nd = 0, decpt;

	if (isnan(d)) {
		sb_str(b, "NaN");
		return;
	}
	if (isinf(d)) {
		sb_str(b, d < 0 ? "-Infinity" : "Infinity");
		return;
	}
	for (p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof(tmp), "%.*e", p - 1, d);
		if (strtod(tmp, NULL) == d)
			break;
	}
	/* tmp: [-]D[.DDD]e[+-]XX */
	const char *s = tmp;
	if (*s == '-') {
		sb_str(b, "-");
		s++;
	}
	for (; *s && *s != 'e'; s++)
		if (*s != '.')
			digits[nd++] = *s;
	exp10 = atoi(s + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	digits[nd] = '\0';
	decpt = exp10 + 1;
	if (decpt > -4 && decpt <= 16) {
		if (decpt <= 0) {
			sb_str(b, "0.");
			for (int i = 0; i < -decpt; i++)
				sb_str(b, "0");
			sb_str(b, digits);
		} else if (decpt >= nd) {
			sb_str(b, digits);
			for (int i = nd; i < decpt; i++)
				sb_str(b, "0");
			sb_str(b, ".0");
		} else {
			sb_add(b, digits, (size_t)decpt);
			sb_str(b, ".");
			sb_str(b, digits + decpt);
		}
	} else {
		sb_add(b, digits, 1);
		if (nd > 1) {
			sb_str(b, ".");
			sb_str(b, digits + 1);
		}
		sb_fmt(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
	}
}

/* A JSON string as Python's json.dumps(ensure_ascii=True) writes it. */
static void fmt_string(struct sbuf *b, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;

	sb_str(b, "\"");
	for (size_t i = 0; i < len;) {
		unsigned c = u[i];
		uint32_t cp;
		size_t n;

		if (c == '"' || c == '\\') {
			sb_add(b, c == '"' ? "\\\"" : "\\\\", 2);
			i++;
			continue;
		}
		if (c >= 0x20 && c < 0x7f) {
			sb_add(b, (const char *)u + i, 1);
			i++;
			continue;
		}
		switch (c) {
		case '\n': sb_str(b, "\\n"); i++; continue;
		case '\r': sb_str(b, "\\r"); i++; continue;
		case '\t': sb_str(b, "\\t"); i++; continue;
		case '\b': sb_str(b, "\\b"); i++; continue;
		case '\f': sb_str(b, "\\f"); i++; continue;
		}
		/* UTF-8 (jansson has validated it) */
		if (c < 0x80) {
			cp = c;
			n = 1;
		} else if (c < 0xe0) {
			cp = c & 0x1f;
			n = 2;
		} else if (c < 0xf0) {
			cp = c & 0x0f;
			n = 3;
		} else {
			cp = c & 0x07;
			n = 4;
		}
		for (size_t k = 1; k < n && i + k < len; k++)
			cp = cp << 6 | (u[i + k] & 0x3f);
		i += n;
		if (cp >= 0x10000) {
			cp -= 0x10000;
			sb_fmt(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
		} else {
			sb_fmt(b, "\\u%04x", cp);
		}
	}
	sb_str(b, "\"");
}

static int cmp_key(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void indent(struct sbuf *b, int level)
{
	sb_str(b, "\n");
	for (int i = 0; i < level; i++)
		sb_str(b, "  ");
}

static void dump(struct sbuf *b, json_t *v, int level)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT: {
		size_t n = json_object_size(v), k = 0;
		const char **keys;
		const char *key;
		json_t *e;

		if (!n) {
			sb_str(b, "{}");
			return;
		}
		keys = malloc(n * sizeof(*keys));
		if (!keys) {
			b->oom = true;
			return;
		}
		json_object_foreach(v, key, e)
			keys[k++] = key;
		qsort(keys, n, sizeof(*keys), cmp_key);
		sb_str(b, "{");
		for (size_t i = 0; i < n; i++) {
			indent(b, level + 1);
			fmt_string(b, keys[i], strlen(keys[i]));
			sb_str(b, ": ");
			dump(b, json_object_get(v, keys[i]), level + 1);
			if (i + 1 < n)
				sb_str(b, ",");
		}
		free(keys);
		indent(b, level);
		sb_str(b, "}");
		return;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(v);
		if (!n) {
			sb_str(b, "[]");
			return;
		}
		sb_str(b, "[");
		for (size_t i = 0; i < n; i++) {
			indent(b, level + 1);
			dump(b, json_array_get(v, i), level + 1);
			if (i + 1 < n)
				sb_str(b, ",");
		}
		indent(b, level);
		sb_str(b, "]");
		return;
	}
	case JSON_STRING:
		fmt_string(b, json_string_value(v), json_string_length(v));
		return;
	case JSON_INTEGER:
		sb_fmt(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return;
	case JSON_REAL:
		fmt_real(b, json_real_value(v));
		return;
	case JSON_TRUE:
		sb_str(b, "true");
		return;
	case JSON_FALSE:
		sb_str(b, "false");
		return;
	case JSON_NULL:
		sb_str(b, "null");
		return;
	}
}

/* Set an integer at a dotted path; intermediate objects must exist (as
 * mergekit's set_config_value).  false when one does not. */
static bool dotted_set(json_t *root, const char *key, int64_t value, bool *oom)
{
	json_t *v = root;
	const char *p = key, *dot;

	while ((dot = strchr(p, '.'))) {
		v = json_object_getn(v, p, (size_t)(dot - p));
		if (!json_is_object(v))
			return false;
		p = dot + 1;
	}
	if (json_object_set_new(v, p, json_integer(value)))
		*oom = true;
	return true;
}

int mk_hfconfig_edit(const char *donor, size_t len, const char *label, const struct mk_arch *a,
		   const char *dtype, const int64_t *num_layers, int64_t vocab_size, char **out,
		   size_t *out_len, char **warnings, struct mk_err *err)
{
	struct sbuf b = { 0 }, w = { 0 };
	json_t *root = NULL;
	json_error_t jerr;
	bool oom = false;
	int rc = 0;

	*out = NULL;
	*out_len = 0;
	if (warnings)
		*warnings = NULL;
	if (!label)
		label = "config.json";
	root = json_loadb(donor, len, 0, &jerr);
	if (!root || !json_is_object(root)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: %s at line %d: %s", label,
				root ? "not a JSON object" : "invalid JSON", jerr.line, root ? "" : jerr.text);
		goto out;
	}
	if (dtype) {
		oom |= json_object_set_new(root, "dtype", json_string(dtype)) != 0;
		if (json_object_get(root, "torch_dtype"))
			oom |= json_object_set_new(root, "torch_dtype", json_string(dtype)) != 0;
	}
	for (size_t m = 0; a && num_layers && m < a->nmodules; m++) {
		const struct mk_arch_module *mod = &a->modules[m];
		if (num_layers[m] < 0)
			continue;
		if (!mod->num_layers_key) {
			if (num_layers[m] > 0)
				sb_fmt(&w, "%smodule '%s' has no configuration key for its layer count, but the "
				       "count is not zero (%" PRId64 ")", w.n ? "\n" : "", mod->name, num_layers[m]);
			continue;
		}
		if (!dotted_set(root, mod->num_layers_key, num_layers[m], &oom))
			sb_fmt(&w, "%s%s: cannot set \"%s\" (a parent object is missing)", w.n ? "\n" : "", label,
			       mod->num_layers_key);
	}
	if (vocab_size >= 0) {
		const char *vk = a ? mk_arch_vocab_key(a) : "vocab_size";
		if (!dotted_set(root, vk, vocab_size, &oom))
			sb_fmt(&w, "%s%s: cannot set \"%s\" (a parent object is missing)", w.n ? "\n" : "", label, vk);
	}
	dump(&b, root, 0);
	sb_str(&b, "\n");
	if (oom || b.oom || w.oom) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory writing %s", label);
		goto out;
	}
	*out = b.p;
	*out_len = b.n;
	b.p = NULL;
	if (warnings) {
		*warnings = w.p;
		w.p = NULL;
	}
out:
	free(b.p);
	free(w.p);
	json_decref(root);
	return rc;
}
