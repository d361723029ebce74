/* jsondoc.c - JSON read and edited losslessly (see jsondoc.h).
 *
 * The parse keeps a node per value: its type and byte span, and for an
 * object member its key's span and decoded text.  Nothing is rebuilt on
 * write: the original bytes are copied with each edit's span replaced
 * (or its new member inserted). */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "core/bug.h"

struct jnode {
	enum mk_json_type type;
	size_t begin, end;        /* the value's bytes */
	size_t parent;            /* SIZE_MAX for the root */
	size_t key_begin;         /* member of an object: where its key's quote is */
	char *key;                /* ... and the key, decoded (NULL otherwise) */
	size_t nkids;
	size_t first_kid, last_kid; /* SIZE_MAX when none */
	size_t next;              /* the next sibling, SIZE_MAX when none */
};

struct edit {
	char *path;
	size_t at, end;           /* replace [at, end) ... */
	char *text;               /* ... with this */
	size_t seq;               /* edits at one place go in the order made */
};

struct mk_jsondoc {
	char *text;
	size_t len;
	char *label;
	struct jnode *n;
	size_t nn, cap;
	struct edit *e;
	size_t ne;
};

struct parser {
	struct mk_jsondoc *d;
	const char *s;
	size_t len, at;
	struct mk_err *err;
};

/* ------------------------------------------------------------ errors */

static int fail(struct parser *p, size_t at, const char *what)
{
	size_t line = 1, col = 1;

	for (size_t i = 0; i < at && i < p->len; i++) {
		if (p->s[i] == '\n') {
			line++;
			col = 1;
		} else if (((unsigned char)p->s[i] & 0xc0) != 0x80) {
			col++;    /* columns count characters, not bytes */
		}
	}
	return mk_err_set(p->err, MK_EFORMAT, "%s:%zu:%zu: %s", p->d->label, line, col, what);
}

/* ------------------------------------------------------------ lexing */

static void skip_ws(struct parser *p)
{
	while (p->at < p->len &&
	       (p->s[p->at] == ' ' || p->s[p->at] == '\t' || p->s[p->at] == '\n' || p->s[p->at] == '\r'))
		p->at++;
}

static bool lit(struct parser *p, const char *w)
{
	size_t n = strlen(w);

	if (p->len - p->at >= n && !memcmp(p->s + p->at, w, n)) {
		p->at += n;
		return true;
	}
	return false;
}

/* Length of the UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t k;
	uint32_t v;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		k = 2, v = c & 0x1f;
	else if (c >= 0xe0 && c <= 0xef)
		k = 3, v = c & 0x0f;
	else if (c >= 0xf0 && c <= 0xf4)
		k = 4, v = c & 0x07;
	else
		return 0;
	if (n < k)
		return 0;
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	if ((k == 3 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) || (k == 4 && (v < 0x10000 || v > 0x10ffff)))
		return 0;
	return k;
}

static int hex4(const char *s, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		*v <<= 4;
		if (c >= '0' && c <= '9')
			*v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	return 0;
}

static size_t put_utf8(char *o, uint32_t c)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xc0 | c >> 6);
		o[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		o[0] = (char)(0xe0 | c >> 12);
		o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
		o[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | c >> 18);
	o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((c >> 6) & 0x3f));
	o[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* Decode the string token [b, e) (quotes included, already validated) to
 * UTF-8.  A lone surrogate escape becomes U+FFFD (Python keeps it as is,
 * which UTF-8 cannot hold). */
static char *decode_string(const char *s, size_t b, size_t e, size_t *olen)
{
	char *o = malloc(e - b + 1), *w = o;

	if (!o)
		return NULL;
	for (size_t i = b + 1; i + 1 < e;) {
		if (s[i] != '\\') {
			*w++ = s[i++];
			continue;
		}
		char c = s[i + 1];
		i += 2;
		switch (c) {
		case 'b': *w++ = '\b'; break;
		case 'f': *w++ = '\f'; break;
		case 'n': *w++ = '\n'; break;
		case 'r': *w++ = '\r'; break;
		case 't': *w++ = '\t'; break;
		case 'u': {
			uint32_t v, lo;
			hex4(s + i, &v);
			i += 4;
			if (v >= 0xd800 && v <= 0xdbff && i + 6 <= e - 1 && s[i] == '\\' && s[i + 1] == 'u' &&
			    !hex4(s + i + 2, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
				v = 0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00);
				i += 6;
			} else if (v >= 0xd800 && v <= 0xdfff) {
				v = 0xfffd;
			}
			w += put_utf8(w, v);
			break;
		}
		default: *w++ = c; break; /* " \ / */
		}
	}
	*w = '\0';
	if (olen)
		*olen = (size_t)(w - o);
	return o;
}

static int scan_string(struct parser *p)
{
	size_t b = p->at++;

	while (p->at < p->len) {
		unsigned char c = (unsigned char)p->s[p->at];
		if (c == '"') {
			p->at++;
			return 0;
		}
		if (c < 0x20)
			return fail(p, p->at, "a control character inside a string (escape it)");
		if (c == '\\') {
			if (p->at + 1 >= p->len)
				break;
			char e = p->s[p->at + 1];
			if (e == 'u') {
				uint32_t v;
				if (p->len - p->at < 6 || hex4(p->s + p->at + 2, &v))
					return fail(p, p->at, "a \\u escape without four hex digits");
				p->at += 6;
			} else if (strchr("\"\\/bfnrt", e) && e) {
				p->at += 2;
			} else {
				return fail(p, p->at, "an unknown escape in a string");
			}
			continue;
		}
		size_t k = utf8_len((const unsigned char *)p->s + p->at, p->len - p->at);
		if (!k)
			return fail(p, p->at, "bytes that are not UTF-8 inside a string");
		p->at += k;
	}
	return fail(p, b, "a string that never ends");
}

static int scan_number(struct parser *p)
{
	size_t b = p->at;

	if (lit(p, "NaN") || lit(p, "Infinity") || lit(p, "-Infinity"))
		return 0;
	if (p->s[p->at] == '-')
		p->at++;
	if (p->at < p->len && p->s[p->at] == '0') {
		p->at++;
	} else if (p->at < p->len && p->s[p->at] >= '1' && p->s[p->at] <= '9') {
		while (p->at < p->len && p->s[p->at] >= '0' && p->s[p->at] <= '9')
			p->at++;
	} else {
		return fail(p, b, "expected a value");
	}
	if (p->at < p->len && p->s[p->at] == '.') {
		p->at++;
		if (p->at >= p->len || p->s[p->at] < '0' || p->s[p->at] > '9')
			return fail(p, p->at, "expected digits after the decimal point");
		while (p->at < p->len && p->s[p->at] >= '0' && p->s[p->at] <= '9')
			p->at++;
	}
	if (p->at < p->len && (p->s[p->at] == 'e' || p->s[p->at] == 'E')) {
		p->at++;
		if (p->at < p->len && (p->s[p->at] == '+' || p->s[p->at] == '-'))
			p->at++;
		if (p->at >= p->len || p->s[p->at] < '0' || p->s[p->at] > '9')
			return fail(p, p->at, "expected digits in the exponent");
		while (p->at < p->len && p->s[p->at] >= '0' && p->s[p->at] <= '9')
			p->at++;
	}
	return 0;
}

/* ------------------------------------------------------------ parsing */

static size_t add_node(struct parser *p, enum mk_json_type t, size_t parent)
{
	struct mk_jsondoc *d = p->d;

	if (d->nn == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		struct jnode *q = realloc(d->n, cap * sizeof(*q));
		if (!q)
			return SIZE_MAX;
		d->n = q;
		d->cap = cap;
	}
	d->n[d->nn] = (struct jnode){ .type = t, .begin = p->at, .parent = parent, .key_begin = SIZE_MAX,
				      .first_kid = SIZE_MAX, .last_kid = SIZE_MAX, .next = SIZE_MAX };
	if (parent != SIZE_MAX) {
		struct jnode *pn = &d->n[parent];
		if (pn->last_kid != SIZE_MAX)
			d->n[pn->last_kid].next = d->nn;
		else
			pn->first_kid = d->nn;
		pn->nkids++;
		pn->last_kid = d->nn;
	}
	return d->nn++;
}

static int parse_value(struct parser *p, size_t parent, size_t key_begin, char *key, int depth);

static int parse_container(struct parser *p, size_t self, bool object, int depth)
{
	char close = object ? '}' : ']';

	p->at++;
	skip_ws(p);
	if (p->at < p->len && p->s[p->at] == close) {
		p->at++;
		return 0;
	}
	for (;;) {
		size_t kb = SIZE_MAX;
		char *key = NULL;
		int rc;

		skip_ws(p);
		if (object) {
			if (p->at >= p->len || p->s[p->at] != '"')
				return fail(p, p->at, "expected a key (a string in double quotes)");
			kb = p->at;
			if ((rc = scan_string(p)))
				return rc;
			key = decode_string(p->s, kb, p->at, NULL);
			if (!key)
				return mk_err_set(p->err, MK_ENOMEM, "out of memory");
			skip_ws(p);
			if (p->at >= p->len || p->s[p->at] != ':') {
				free(key);
				return fail(p, p->at, "expected ':' after the key");
			}
			p->at++;
			skip_ws(p);
		}
		if ((rc = parse_value(p, self, kb, key, depth + 1)))
			return rc;
		skip_ws(p);
		if (p->at < p->len && p->s[p->at] == ',') {
			p->at++;
			skip_ws(p);
			if (p->at < p->len && p->s[p->at] == close)
				return fail(p, p->at, "a comma before the closing bracket");
			continue;
		}
		if (p->at < p->len && p->s[p->at] == close) {
			p->at++;
			return 0;
		}
		return fail(p, p->at, object ? "expected ',' or '}' after an object member" :
					       "expected ',' or ']' after an array element");
	}
}

static int parse_value(struct parser *p, size_t parent, size_t key_begin, char *key, int depth)
{
	size_t self;
	int rc;

	if (depth > MK_JSONDOC_MAX_DEPTH) {
		free(key);
		return fail(p, p->at, "nested too deeply");
	}
	if (p->at >= p->len) {
		free(key);
		return fail(p, p->at, "expected a value, found the end of the file");
	}
	self = add_node(p, MK_JSON_NULL, parent);
	if (self == SIZE_MAX) {
		free(key);
		return mk_err_set(p->err, MK_ENOMEM, "out of memory");
	}
	p->d->n[self].key = key;
	p->d->n[self].key_begin = key_begin;
	switch (p->s[p->at]) {
	case '{':
		p->d->n[self].type = MK_JSON_OBJECT;
		rc = parse_container(p, self, true, depth);
		break;
	case '[':
		p->d->n[self].type = MK_JSON_ARRAY;
		rc = parse_container(p, self, false, depth);
		break;
	case '"':
		p->d->n[self].type = MK_JSON_STRING;
		rc = scan_string(p);
		break;
	case 't':
		p->d->n[self].type = MK_JSON_TRUE;
		rc = lit(p, "true") ? 0 : fail(p, p->at, "expected a value");
		break;
	case 'f':
		p->d->n[self].type = MK_JSON_FALSE;
		rc = lit(p, "false") ? 0 : fail(p, p->at, "expected a value");
		break;
	case 'n':
		p->d->n[self].type = MK_JSON_NULL;
		rc = lit(p, "null") ? 0 : fail(p, p->at, "expected a value");
		break;
	default:
		p->d->n[self].type = MK_JSON_NUMBER;
		rc = scan_number(p);
	}
	p->d->n[self].end = p->at;
	return rc;
}

void mk_jsondoc_free(struct mk_jsondoc *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nn; i++)
		free(d->n[i].key);
	for (size_t i = 0; i < d->ne; i++) {
		free(d->e[i].path);
		free(d->e[i].text);
	}
	free(d->e);
	free(d->n);
	free(d->text);
	free(d->label);
	free(d);
}

int mk_jsondoc_parse(const char *text, size_t len, const char *label, struct mk_jsondoc **out,
		     struct mk_err *err)
{
	struct mk_jsondoc *d = calloc(1, sizeof(*d));
	struct parser p = { d, NULL, len, 0, err };
	int rc;

	*out = NULL;
	if (!d || !(d->text = malloc(len + 1)) || !(d->label = strdup(label ? label : "JSON"))) {
		mk_jsondoc_free(d);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	memcpy(d->text, text, len);
	d->text[len] = '\0';
	d->len = len;
	p.s = d->text;
	/* a UTF-8 byte order mark is not JSON (Python refuses it too) */
	skip_ws(&p);
	rc = parse_value(&p, SIZE_MAX, SIZE_MAX, NULL, 0);
	if (!rc) {
		skip_ws(&p);
		if (p.at < len)
			rc = fail(&p, p.at, "more after the JSON value");
	}
	if (rc) {
		mk_jsondoc_free(d);
		return rc;
	}
	*out = d;
	return 0;
}

enum mk_json_type mk_jsondoc_root_type(const struct mk_jsondoc *d)
{
	return d->n[0].type;
}

/* ------------------------------------------------------------ lookup */

/* The member `key` (len bytes) of object node o: the last one. */
static size_t member(const struct mk_jsondoc *d, size_t o, const char *key, size_t len)
{
	size_t found = SIZE_MAX;

	if (d->n[o].type != MK_JSON_OBJECT)
		return SIZE_MAX;
	for (size_t i = d->n[o].first_kid; i != SIZE_MAX; i = d->n[i].next)
		if (strlen(d->n[i].key) == len && !memcmp(d->n[i].key, key, len))
			found = i;
	return found;
}

/* Node at path; with `parent`, the object that holds (or would hold) the
 * last key and that key. */
static size_t lookup(const struct mk_jsondoc *d, const char *path, size_t *parent, const char **last,
		     size_t *lastlen)
{
	size_t cur = 0;
	const char *s = path;

	if (parent)
		*parent = SIZE_MAX;
	if (!*path)
		return 0;
	for (;;) {
		const char *dot = strchr(s, '.');
		size_t n = dot ? (size_t)(dot - s) : strlen(s);
		if (!dot && parent) {
			*parent = d->n[cur].type == MK_JSON_OBJECT ? cur : SIZE_MAX;
			*last = s;
			*lastlen = n;
		}
		cur = member(d, cur, s, n);
		if (cur == SIZE_MAX || !dot)
			return cur;
		s = dot + 1;
	}
}

int mk_jsondoc_find(const struct mk_jsondoc *d, const char *path, enum mk_json_type *type)
{
	size_t i = lookup(d, path, NULL, NULL, NULL);

	if (i == SIZE_MAX)
		return -1;
	if (type)
		*type = d->n[i].type;
	return 0;
}

char *mk_jsondoc_text(const struct mk_jsondoc *d, const char *path)
{
	size_t i = lookup(d, path, NULL, NULL, NULL);

	if (i == SIZE_MAX)
		return NULL;
	return strndup(d->text + d->n[i].begin, d->n[i].end - d->n[i].begin);
}

const char *mk_jsondoc_node_text(const struct mk_jsondoc *d, size_t node, size_t *len)
{
	if (node >= d->nn) {
		*len = 0;
		return NULL;
	}
	*len = d->n[node].end - d->n[node].begin;
	return d->text + d->n[node].begin;
}

char *mk_jsondoc_string(const struct mk_jsondoc *d, const char *path, size_t *len)
{
	size_t i = lookup(d, path, NULL, NULL, NULL);

	if (i == SIZE_MAX || d->n[i].type != MK_JSON_STRING)
		return NULL;
	return decode_string(d->text, d->n[i].begin, d->n[i].end, len);
}

/* ------------------------------------------------------------ editing */

char *mk_json_quote(const char *s, size_t n)
{
	char *o = malloc(n * 6 + 3), *w = o;

	if (!o)
		return NULL;
	*w++ = '"';
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': *w++ = '\\'; *w++ = '"'; break;
		case '\\': *w++ = '\\'; *w++ = '\\'; break;
		case '\b': *w++ = '\\'; *w++ = 'b'; break;
		case '\f': *w++ = '\\'; *w++ = 'f'; break;
		case '\n': *w++ = '\\'; *w++ = 'n'; break;
		case '\r': *w++ = '\\'; *w++ = 'r'; break;
		case '\t': *w++ = '\\'; *w++ = 't'; break;
		default:
			if (c < 0x20)
				w += sprintf(w, "\\u%04x", c);
			else
				*w++ = (char)c;
		}
	}
	*w++ = '"';
	*w = '\0';
	return o;
}

/* Where the (valid) string token at b ends, after its closing quote. */
static size_t string_end(const char *s, size_t b)
{
	size_t i = b + 1;

	while (s[i] != '"')
		i += s[i] == '\\' ? 2 : 1;
	return i + 1;
}

/* The whitespace that goes before a new member after member kid of
 * object o: what came between the comma before kid and kid's key (the
 * object's own layout), or for a lone member a new line with its indent
 * when it has one of its own, else one space. */
static void member_lead(const struct mk_jsondoc *d, size_t o, size_t kid, const char **lead, size_t *len,
			bool *newline)
{
	size_t kb = d->n[kid].key_begin, b = kb;

	while (b > d->n[o].begin && strchr(" \t\r\n", d->text[b - 1]))
		b--;
	*newline = false;
	if (d->text[b - 1] == ',') {
		*lead = d->text + b;
		*len = kb - b;
		return;
	}
	/* the first member: its indent, after a new line, if it has one */
	b = kb;
	while (b > d->n[o].begin && (d->text[b - 1] == ' ' || d->text[b - 1] == '\t'))
		b--;
	if (d->text[b - 1] == '\n') {
		*newline = true;
		*lead = d->text + b;
		*len = kb - b;
	} else {
		*lead = " ";
		*len = 1;
	}
}

/* Record the edit of path: [at, end) replaced by text (taken; NULL when
 * its allocation failed), in place of an earlier edit of the same path. */
static int put_edit(struct mk_jsondoc *d, const char *path, size_t at, size_t end, char *text, struct mk_err *err)
{
	char *ptext = NULL;
	struct edit *q;

	if (!text)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; k < d->ne; k++)
		if (!strcmp(d->e[k].path, path)) {
			free(d->e[k].text);
			d->e[k].text = text;
			d->e[k].at = at;
			d->e[k].end = end;
			return 0;
		}
	if (!(ptext = strdup(path)) || !(q = realloc(d->e, (d->ne + 1) * sizeof(*q)))) {
		free(text);
		free(ptext);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	d->e = q;
	d->e[d->ne] = (struct edit){ ptext, at, end, text, d->ne };
	d->ne++;
	return 0;
}

int mk_jsondoc_set(struct mk_jsondoc *d, const char *path, const char *value_json, struct mk_err *err)
{
	struct mk_jsondoc *v = NULL;
	size_t parent, lastlen, at, end;
	const char *last;
	size_t i;
	char *text = NULL;
	int rc;

	if ((rc = mk_jsondoc_parse(value_json, strlen(value_json), "the new value", &v, err))) {
		if (err->code == MK_ENOMEM)
			return rc;
		char why[sizeof(err->msg)];
		snprintf(why, sizeof(why), "%s", err->msg);
		return mk_err_set(err, MK_EINVAL, "setting %s in %s: %s", path, d->label, why);
	}
	mk_jsondoc_free(v);
	i = lookup(d, path, &parent, &last, &lastlen);
	if (i != SIZE_MAX) {
		at = d->n[i].begin;
		end = d->n[i].end;
		text = strdup(value_json);
	} else if (parent == SIZE_MAX || !*path) {
		return mk_err_set(err, MK_EINVAL, "%s: cannot set %s: its parent is missing or not an object", d->label,
				  path);
	} else {
		/* a new last member, laid out as the others */
		const struct jnode *o = &d->n[parent];
		char *key = mk_json_quote(last, lastlen);
		size_t need;
		if (!key)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		need = strlen(key) + strlen(value_json) + 64;
		if (o->last_kid != SIZE_MAX) {
			const struct jnode *k = &d->n[o->last_kid];
			const char *lead;
			size_t leadlen, keyend = string_end(d->text, k->key_begin);
			bool newline;
			/* the separator between key and value as the last member has it */
			size_t seplen = k->begin - keyend;
			member_lead(d, parent, o->last_kid, &lead, &leadlen, &newline);
			at = end = k->end;
			text = malloc(need + leadlen + seplen);
			if (text)
				snprintf(text, need + leadlen + seplen, ",%s%.*s%s%.*s%s", newline ? "\n" : "", (int)leadlen,
					 lead, key, (int)seplen, d->text + keyend, value_json);
		} else {
			/* an empty object: the first new member bare, any later
			 * one after a comma */
			bool more = false;
			at = end = o->begin + 1;
			for (size_t k = 0; k < d->ne; k++)
				more |= d->e[k].at == at && d->e[k].end == at && strcmp(d->e[k].path, path);
			text = malloc(need);
			if (text)
				snprintf(text, need, "%s%s: %s", more ? ", " : "", key, value_json);
		}
		free(key);
	}
	return put_edit(d, path, at, end, text, err);
}

int mk_jsondoc_remove(struct mk_jsondoc *d, const char *path, struct mk_err *err)
{
	size_t i = lookup(d, path, NULL, NULL, NULL), parent, at, end, prev = SIZE_MAX;

	if (i == SIZE_MAX || !*path)
		return 0;
	parent = d->n[i].parent;
	for (size_t k = d->n[parent].first_kid; k != i; k = d->n[k].next)
		prev = k;
	if (prev != SIZE_MAX) {
		/* from the end of the member before: its comma, the layout, the member */
		at = d->n[prev].end;
		end = d->n[i].end;
	} else if (d->n[i].next != SIZE_MAX) {
		/* the first of several: the member, its comma, up to the next key */
		at = d->n[i].key_begin;
		end = d->n[d->n[i].next].key_begin;
	} else {
		/* the only member: the object is left empty, "{}" */
		at = d->n[parent].begin + 1;
		end = d->n[parent].end - 1;
	}
	/* an earlier edit of this member is dropped with it */
	return put_edit(d, path, at, end, strdup(""), err);
}

static int cmp_edit(const void *a, const void *b)
{
	const struct edit *x = a, *y = b;

	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int mk_jsondoc_write(const struct mk_jsondoc *d, char **out, size_t *len, struct mk_err *err)
{
	struct edit *e = NULL;
	size_t total = d->len, w = 0, from = 0;
	char *o;

	if (d->ne && !(e = malloc(d->ne * sizeof(*e))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (d->ne) {
		memcpy(e, d->e, d->ne * sizeof(*e));
		qsort(e, d->ne, sizeof(*e), cmp_edit);
	}
	for (size_t k = 0; k < d->ne; k++)
		total += strlen(e[k].text);
	o = malloc(total + 1);
	if (!o) {
		free(e);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t k = 0; k < d->ne; k++) {
		size_t t = strlen(e[k].text);
		if (e[k].at < from)
			continue; /* inside a value replaced before (a parent set whole) */
		memcpy(o + w, d->text + from, e[k].at - from);
		w += e[k].at - from;
		memcpy(o + w, e[k].text, t);
		w += t;
		from = e[k].end;
	}
	memcpy(o + w, d->text + from, d->len - from);
	w += d->len - from;
	o[w] = '\0';
	free(e);
	*out = o;
	*len = w;
	return 0;
}

/* ------------------------------------------------ Python's json.dumps */

/* A double as Python's repr writes it: the shortest digits that read back
 * exactly; fixed notation when the decimal point position is in (-4, 16],
 * with ".0" for integral values; else d[.ddd]e[+-]XX. */
static void fmt_real(struct mk_sbuf *b, double d)
{
	char tmp[40], digits[24];
	int p, exp10, nd = 0, decpt;

	if (isnan(d)) {
		mk_sbuf_str(b, "NaN");
		return;
	}
	if (isinf(d)) {
		mk_sbuf_str(b, d < 0 ? "-Infinity" : "Infinity");
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
		mk_sbuf_str(b, "-");
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
			mk_sbuf_str(b, "0.");
			for (int i = 0; i < -decpt; i++)
				mk_sbuf_str(b, "0");
			mk_sbuf_str(b, digits);
		} else if (decpt >= nd) {
			mk_sbuf_str(b, digits);
			for (int i = nd; i < decpt; i++)
				mk_sbuf_str(b, "0");
			mk_sbuf_str(b, ".0");
		} else {
			mk_sbuf_add(b, digits, (size_t)decpt);
			mk_sbuf_str(b, ".");
			mk_sbuf_str(b, digits + decpt);
		}
	} else {
		mk_sbuf_add(b, digits, 1);
		if (nd > 1) {
			mk_sbuf_str(b, ".");
			mk_sbuf_str(b, digits + 1);
		}
		mk_sbuf_fmt(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
	}
}

void mk_json_put_ascii_string(struct mk_sbuf *b, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;

	mk_sbuf_str(b, "\"");
	for (size_t i = 0; i < len;) {
		unsigned c = u[i];
		uint32_t cp;
		size_t n;

		if (c == '"' || c == '\\') {
			mk_sbuf_add(b, c == '"' ? "\\\"" : "\\\\", 2);
			i++;
			continue;
		}
		if (c >= 0x20 && c < 0x7f) {
			mk_sbuf_add(b, (const char *)u + i, 1);
			i++;
			continue;
		}
		switch (c) {
		case '\n': mk_sbuf_str(b, "\\n"); i++; continue;
		case '\r': mk_sbuf_str(b, "\\r"); i++; continue;
		case '\t': mk_sbuf_str(b, "\\t"); i++; continue;
		case '\b': mk_sbuf_str(b, "\\b"); i++; continue;
		case '\f': mk_sbuf_str(b, "\\f"); i++; continue;
		}
		/* UTF-8 (the parser has validated it) */
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
			mk_sbuf_fmt(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
		} else {
			mk_sbuf_fmt(b, "\\u%04x", cp);
		}
	}
	mk_sbuf_str(b, "\"");
}


/* Is the number lexeme t (len bytes) an integer (digits, maybe a minus):
 * what Python reads as an int, not a float, NaN or Infinity? */
static bool number_is_int(const char *t, size_t len)
{
	return !memchr(t, '.', len) && !memchr(t, 'e', len) && !memchr(t, 'E', len) &&
	       !memchr(t, 'N', len) && !memchr(t, 'I', len);
}

/* Does the integer lexeme t fit in int64? */
static bool fits_int64(const char *t, size_t len)
{
	bool neg = t[0] == '-';
	const char *dg = t + neg, *lim = neg ? "9223372036854775808" : "9223372036854775807";
	size_t n = len - neg;

	return n < 19 || (n == 19 && memcmp(dg, lim, 19) <= 0);
}

static void py_indent(struct mk_sbuf *b, int level)
{
	mk_sbuf_str(b, "\n");
	for (int i = 0; i < level; i++)
		mk_sbuf_str(b, "  ");
}

struct kid {
	const char *key;
	size_t node;
};

static int cmp_kid(const void *a, const void *b)
{
	const struct kid *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	/* equal keys: the later one last, so it is the one kept */
	return c ? c : (x->node < y->node ? -1 : x->node > y->node);
}

static void py_dump(struct mk_sbuf *b, const struct mk_jsondoc *d, size_t v, int level)
{
	const struct jnode *n = &d->n[v];
	const char *t = d->text + n->begin;
	size_t len = n->end - n->begin;

	switch (n->type) {
	case MK_JSON_OBJECT:
	case MK_JSON_ARRAY: {
		struct kid *k = calloc(n->nkids + 1, sizeof(*k));
		size_t nk = 0;
		bool obj = n->type == MK_JSON_OBJECT;
		if (!k) {
			b->oom = true;
			return;
		}
		for (size_t i = n->first_kid; i != SIZE_MAX; i = d->n[i].next)
			k[nk++] = (struct kid){ d->n[i].key, i };
		if (obj) {
			size_t w = 0;
			qsort(k, nk, sizeof(*k), cmp_kid);
			for (size_t i = 0; i < nk; i++)
				if (i + 1 == nk || strcmp(k[i].key, k[i + 1].key))
					k[w++] = k[i]; /* a repeated key: the last one */
			nk = w;
		}
		if (!nk) {
			mk_sbuf_str(b, obj ? "{}" : "[]");
			free(k);
			return;
		}
		mk_sbuf_str(b, obj ? "{" : "[");
		for (size_t i = 0; i < nk; i++) {
			py_indent(b, level + 1);
			if (obj) {
				mk_json_put_ascii_string(b, k[i].key, strlen(k[i].key));
				mk_sbuf_str(b, ": ");
			}
			py_dump(b, d, k[i].node, level + 1);
			if (i + 1 < nk)
				mk_sbuf_str(b, ",");
		}
		py_indent(b, level);
		mk_sbuf_str(b, obj ? "}" : "]");
		free(k);
		return;
	}
	case MK_JSON_STRING: {
		size_t sl;
		char *s = decode_string(d->text, n->begin, n->end, &sl);
		if (!s) {
			b->oom = true;
			return;
		}
		mk_json_put_ascii_string(b, s, sl);
		free(s);
		return;
	}
	case MK_JSON_NUMBER:
		if (!number_is_int(t, len)) {
			/* a float: what Python's float() reads, as its repr */
			char *z = strndup(t, len);
			if (!z) {
				b->oom = true;
				return;
			}
			fmt_real(b, !strcmp(z, "NaN") ? NAN : !strcmp(z, "Infinity") ? INFINITY :
				    !strcmp(z, "-Infinity") ? -INFINITY : strtod(z, NULL));
			free(z);
		} else if (len == 2 && !memcmp(t, "-0", 2)) {
			mk_sbuf_str(b, "0");  /* Python's int("-0") */
		} else {
			mk_sbuf_add(b, t, len); /* an integer of any size, as it is */
		}
		return;
	default:
		mk_sbuf_add(b, t, len); /* true, false, null */
	}
}

int mk_jsondoc_write_python(const struct mk_jsondoc *d, char **out, size_t *len, struct mk_err *err)
{
	struct mk_jsondoc *e = NULL;
	struct mk_sbuf b = { 0 };
	char *text;
	size_t tlen;
	int rc;

	*out = NULL;
	*len = 0;
	if ((rc = mk_jsondoc_write(d, &text, &tlen, err)))
		return rc;
	rc = mk_jsondoc_parse(text, tlen, d->label, &e, err);
	free(text);
	if (rc)
		return rc;
	py_dump(&b, e, 0, 0);
	mk_sbuf_str(&b, "\n");
	mk_jsondoc_free(e);
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory writing %s", d->label);
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

int mk_jsondoc_int64_text(const struct mk_jsondoc *d, char **out, size_t *len, struct mk_err *err)
{
	struct mk_sbuf b = { 0 };
	size_t from = 0;

	if (d->ne)
		MK_BUG("mk_jsondoc_int64_text on an edited document");
	for (size_t i = 0; i < d->nn; i++) {
		const struct jnode *n = &d->n[i];
		const char *t = d->text + n->begin;
		size_t l = n->end - n->begin;
		if (n->type != MK_JSON_NUMBER || !number_is_int(t, l) || fits_int64(t, l))
			continue;
		mk_sbuf_add(&b, d->text + from, n->end - from);
		mk_sbuf_str(&b, ".0");
		from = n->end;
	}
	mk_sbuf_add(&b, d->text + from, d->len - from);
	if (b.oom || !b.p) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

/* ------------------------------------------------------------ nodes */

size_t mk_jsondoc_at(const struct mk_jsondoc *d, const char *path)
{
	return lookup(d, path, NULL, NULL, NULL);
}

size_t mk_jsondoc_get(const struct mk_jsondoc *d, size_t node, const char *key)
{
	if (node >= d->nn)
		return SIZE_MAX;
	return member(d, node, key, strlen(key));
}

enum mk_json_type mk_jsondoc_type(const struct mk_jsondoc *d, size_t node)
{
	return node < d->nn ? d->n[node].type : MK_JSON_NULL;
}

size_t mk_jsondoc_first(const struct mk_jsondoc *d, size_t node)
{
	return node < d->nn ? d->n[node].first_kid : SIZE_MAX;
}

size_t mk_jsondoc_next(const struct mk_jsondoc *d, size_t node)
{
	return node < d->nn ? d->n[node].next : SIZE_MAX;
}

size_t mk_jsondoc_count(const struct mk_jsondoc *d, size_t node)
{
	return node < d->nn ? d->n[node].nkids : 0;
}

const char *mk_jsondoc_key(const struct mk_jsondoc *d, size_t node)
{
	return node < d->nn ? d->n[node].key : NULL;
}

char *mk_jsondoc_node_string(const struct mk_jsondoc *d, size_t node, size_t *len)
{
	if (node >= d->nn || d->n[node].type != MK_JSON_STRING)
		return NULL;
	return decode_string(d->text, d->n[node].begin, d->n[node].end, len);
}

int mk_jsondoc_node_int(const struct mk_jsondoc *d, size_t node, long long *v)
{
	const char *t;
	size_t l;
	char *end;

	if (node >= d->nn || d->n[node].type != MK_JSON_NUMBER)
		return -1;
	t = d->text + d->n[node].begin;
	l = d->n[node].end - d->n[node].begin;
	if (!number_is_int(t, l) || !fits_int64(t, l))
		return -1;
	*v = strtoll(t, &end, 10);
	return end == t + l ? 0 : -1;
}

int mk_jsondoc_node_bool(const struct mk_jsondoc *d, size_t node, bool *v)
{
	if (node >= d->nn || (d->n[node].type != MK_JSON_TRUE && d->n[node].type != MK_JSON_FALSE))
		return -1;
	*v = d->n[node].type == MK_JSON_TRUE;
	return 0;
}
