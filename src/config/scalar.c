/* scalar.c - YAML scalars as PyYAML resolves them (null, booleans,
 * YAML 1.1 integers and floats, strings) and coerced as pydantic's lax
 * mode does, with an error at the node when a value does not fit. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"

/* ------------------------------------------------------------ scalars */

enum skind { SK_NULL, SK_BOOL, SK_INT, SK_FLOAT, SK_STR };

struct scalar {
	enum skind k;
	bool b;
	bool ovf;                   /* SK_INT out of long long range (f holds it) */
	long long i;
	double f;
	const char *s;              /* the text, not NUL-terminated */
	size_t len;
};

static bool is_one_of(const char *s, size_t len, const char *const *words)
{
	for (; *words; words++)
		if (strlen(*words) == len && memcmp(s, *words, len) == 0)
			return true;
	return false;
}

/* A YAML 1.1 integer as PyYAML resolves it: [-+]? then 0b..., 0x..., 0...
 * (octal), or decimal, '_' allowed between digits.  Sexagesimal "1:30" is
 * not supported (it stays a string). */
static bool parse_yaml_int(const char *s, size_t len, struct scalar *out)
{
	size_t i = 0;
	int base = 10, neg = 0;
	unsigned long long v = 0;
	bool digits = false, ovf = false;
	double f = 0;

	if (i < len && (s[i] == '-' || s[i] == '+'))
		neg = s[i++] == '-';
	if (i + 1 < len && s[i] == '0' && (s[i + 1] == 'b' || s[i + 1] == 'x')) {
		base = s[i + 1] == 'b' ? 2 : 16;
		i += 2;
	} else if (i + 1 < len && s[i] == '0') {
		base = 8;
		i++;
	} else if (i < len && s[i] == '0' && i + 1 == len) {
		out->k = SK_INT;
		out->i = 0;
		return true;
	}
	for (; i < len; i++) {
		int dv;
		char c = s[i];
		if (c == '_')
			continue;
		if (c >= '0' && c <= '9')
			dv = c - '0';
		else if (c >= 'a' && c <= 'f')
			dv = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			dv = c - 'A' + 10;
		else
			return false;
		if (dv >= base)
			return false;
		digits = true;
		f = f * base + dv;
		if (v > (ULLONG_MAX - (unsigned)dv) / (unsigned)base)
			ovf = true;
		else
			v = v * (unsigned)base + (unsigned)dv;
	}
	if (!digits)
		return false;
	/* decimal must not start with 0 (then it was octal or a string) */
	out->k = SK_INT;
	if (ovf || v > (unsigned long long)LLONG_MAX + (unsigned)neg) {
		out->ovf = true;
		out->f = neg ? -f : f;
		return true;
	}
	out->i = neg ? (long long)(0 - v) : (long long)v;
	out->f = (double)out->i;
	return true;
}

/* A YAML 1.1 float as PyYAML resolves it: digits '.' digits with an
 * optional signed exponent, ".5", and the .inf/.nan words. */
static bool parse_yaml_float(const char *s, size_t len, struct scalar *out)
{
	static const char *const inf[] = { ".inf", ".Inf", ".INF", "+.inf", "+.Inf",
					   "+.INF", NULL };
	static const char *const ninf[] = { "-.inf", "-.Inf", "-.INF", NULL };
	static const char *const nan[] = { ".nan", ".NaN", ".NAN", NULL };
	char buf[128], *end;
	size_t i = 0, o = 0;
	bool dot = false, mant = false;

	if (is_one_of(s, len, inf) || is_one_of(s, len, ninf) || is_one_of(s, len, nan)) {
		out->k = SK_FLOAT;
		out->f = is_one_of(s, len, nan) ? NAN : is_one_of(s, len, ninf) ? -INFINITY : INFINITY;
		return true;
	}
	if (len >= sizeof(buf))
		return false;
	if (i < len && (s[i] == '-' || s[i] == '+'))
		buf[o++] = s[i++];
	for (; i < len; i++) {
		char c = s[i];
		if (c == '_' && mant)
			continue;
		if (c >= '0' && c <= '9')
			mant = true;
		else if (c == '.' && !dot)
			dot = true;
		else
			break;
		buf[o++] = c;
	}
	if (!dot || !mant)
		return false;
	if (i < len) {
		/* exponent: [eE][-+][0-9]+ (the sign is required in YAML 1.1) */
		if (!(s[i] == 'e' || s[i] == 'E') || i + 2 >= len + 0 ||
		    !(s[i + 1] == '-' || s[i + 1] == '+'))
			return false;
		buf[o++] = s[i++];
		buf[o++] = s[i++];
		if (i >= len)
			return false;
		for (; i < len; i++) {
			if (!(s[i] >= '0' && s[i] <= '9'))
				return false;
			buf[o++] = s[i];
		}
	}
	buf[o] = '\0';
	errno = 0;
	out->k = SK_FLOAT;
	out->f = strtod(buf, &end);
	return *end == '\0';
}

static void resolve(const yaml_node_t *n, struct scalar *out)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL", NULL };
	static const char *const trues[] = { "yes", "Yes", "YES", "true", "True",
					     "TRUE", "on", "On", "ON", NULL };
	static const char *const falses[] = { "no", "No", "NO", "false", "False",
					      "FALSE", "off", "Off", "OFF", NULL };
	const char *s = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;

	memset(out, 0, sizeof(*out));
	out->s = s;
	out->len = len;
	out->k = SK_STR;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return;
	if (is_one_of(s, len, nulls))
		out->k = SK_NULL;
	else if (is_one_of(s, len, trues))
		out->k = SK_BOOL, out->b = true;
	else if (is_one_of(s, len, falses))
		out->k = SK_BOOL, out->b = false;
	else if (!parse_yaml_int(s, len, out) && !parse_yaml_float(s, len, out)) {
		memset(out, 0, sizeof(*out));
		out->s = s;
		out->len = len;
		out->k = SK_STR;
	}
}

bool mk__node_is_null(const yaml_node_t *n)
{
	struct scalar sc;

	if (!n || n->type != YAML_SCALAR_NODE)
		return !n;
	resolve(n, &sc);
	return sc.k == SK_NULL;
}

const char *mk__node_kind(const yaml_node_t *n)
{
	struct scalar sc;

	switch (n->type) {
	case YAML_SEQUENCE_NODE: return "a list";
	case YAML_MAPPING_NODE: return "a map";
	case YAML_SCALAR_NODE:
		resolve(n, &sc);
		switch (sc.k) {
		case SK_NULL: return "null";
		case SK_BOOL: return "a boolean";
		case SK_INT: return "an integer";
		case SK_FLOAT: return "a number";
		case SK_STR: return "a string";
		}
		break;
	default:
		break;
	}
	return "nothing";
}

/* A short, printable excerpt of a scalar for messages. */
const char *mk__node_excerpt(const yaml_node_t *n, char *buf, size_t size)
{
	size_t len = n->data.scalar.length, o = 0;
	const unsigned char *s = n->data.scalar.value;

	for (size_t i = 0; i < len && o + 4 < size; i++)
		buf[o++] = s[i] >= 0x20 && s[i] != 0x7f ? (char)s[i] : '?';
	if (o < len && o + 4 >= size)
		memcpy(buf + o, "...", 3), o += 3;
	buf[o] = '\0';
	return buf;
}

/* Numbers as pydantic's lax float: numbers, booleans, numeric strings. */
static bool parse_numeric_string(const char *s, size_t len, double *out)
{
	char buf[128], *end;
	size_t i = 0, o = 0;

	while (i < len && isspace((unsigned char)s[i]))
		i++;
	while (len > i && isspace((unsigned char)s[len - 1]))
		len--;
	if (len - i == 0 || len - i >= sizeof(buf))
		return false;
	for (; i < len; i++) {
		char c = s[i];
		if (c == '_')
			continue;
		if (!strchr("0123456789+-.eE", c))
			return false;
		buf[o++] = c;
	}
	buf[o] = '\0';
	*out = strtod(buf, &end);
	return end != buf && *end == '\0';
}

bool mk__node_to_num(struct parser *p, const yaml_node_t *n, const char *path, double *out)
{
	struct scalar sc;
	char ex[64];

	if (n->type != YAML_SCALAR_NODE) {
		ERR(p, n, path, "expected a number, found %s", mk__node_kind(n));
		return false;
	}
	resolve(n, &sc);
	switch (sc.k) {
	case SK_NULL:
		ERR(p, n, path, "expected a number, found null");
		return false;
	case SK_BOOL:
		*out = sc.b ? 1.0 : 0.0;
		return true;
	case SK_INT:
		*out = sc.ovf ? sc.f : (double)sc.i;
		break;
	case SK_FLOAT:
		*out = sc.f;
		break;
	case SK_STR:
		if (!parse_numeric_string(sc.s, sc.len, out)) {
			ERR(p, n, path, "expected a number, found the string '%s'",
			    mk__node_excerpt(n, ex, sizeof(ex)));
			return false;
		}
		break;
	}
	if (!isfinite(*out)) {
		ERR(p, n, path, "expected a finite number, found '%s'",
		    mk__node_excerpt(n, ex, sizeof(ex)));
		return false;
	}
	return true;
}

/* Integers as pydantic's lax int: integers, integral floats, integer
 * strings.  Booleans are refused. */
bool mk__node_to_int(struct parser *p, const yaml_node_t *n, const char *path, long long *out)
{
	struct scalar sc;
	char ex[64];
	double f;

	if (n->type != YAML_SCALAR_NODE) {
		ERR(p, n, path, "expected an integer, found %s", mk__node_kind(n));
		return false;
	}
	resolve(n, &sc);
	if (sc.k == SK_INT && !sc.ovf) {
		*out = sc.i;
		return true;
	}
	if (sc.k == SK_STR) {
		/* a decimal string, as Python's int(): "08" is 8, " +3 " is 3 */
		char buf[64], *end;
		size_t a = 0, b = sc.len, o = 0;
		bool bad = false;
		while (a < b && isspace((unsigned char)sc.s[a]))
			a++;
		while (b > a && isspace((unsigned char)sc.s[b - 1]))
			b--;
		for (size_t i = a; i < b && !bad; i++) {
			char c = sc.s[i];
			if (c == '_' && i > a && i + 1 < b)
				continue;
			if (o + 1 >= sizeof(buf) || !(isdigit((unsigned char)c) ||
						      (i == a && (c == '+' || c == '-'))))
				bad = true;
			else
				buf[o++] = c;
		}
		buf[o] = '\0';
		errno = 0;
		if (!bad && o > 0 && isdigit((unsigned char)buf[o - 1])) {
			long long v = strtoll(buf, &end, 10);
			if (*end == '\0' && errno == 0) {
				*out = v;
				return true;
			}
		}
	}
	if (sc.k == SK_FLOAT || sc.k == SK_INT) {
		f = sc.f;
		if (isfinite(f) && f == floor(f) && fabs(f) < 9.2e18) {
			*out = (long long)f;
			return true;
		}
		ERR(p, n, path, "expected an integer, found '%s'", mk__node_excerpt(n, ex, sizeof(ex)));
		return false;
	}
	if (sc.k == SK_STR)
		ERR(p, n, path, "expected an integer, found the string '%s'",
		    mk__node_excerpt(n, ex, sizeof(ex)));
	else
		ERR(p, n, path, "expected an integer, found %s", mk__node_kind(n));
	return false;
}

/* A string: any scalar that resolves to a string.  A number or boolean is
 * refused as pydantic refuses it, with a hint to quote it. */
bool mk__node_to_str(struct parser *p, const yaml_node_t *n, const char *path, char **out)
{
	struct scalar sc;
	char ex[64];

	*out = NULL;
	if (n->type != YAML_SCALAR_NODE) {
		ERR(p, n, path, "expected a string, found %s", mk__node_kind(n));
		return false;
	}
	resolve(n, &sc);
	if (sc.k != SK_STR) {
		ERR(p, n, path, "expected a string, found %s '%s' (quote it to use it "
		    "as a string)", mk__node_kind(n), mk__node_excerpt(n, ex, sizeof(ex)));
		return false;
	}
	if (memchr(sc.s, '\0', sc.len)) {
		ERR(p, n, path, "the string contains a NUL character");
		return false;
	}
	if (!(*out = strndup(sc.s, sc.len))) {
		p->nomem = true;
		return false;
	}
	return true;
}

bool mk__node_to_bool(struct parser *p, const yaml_node_t *n, const char *path, bool *out)
{
	static const char *const t[] = { "true", "True", "TRUE", "yes", "Yes", "YES",
					 "on", "On", "ON", "1", "t", "y", NULL };
	static const char *const f[] = { "false", "False", "FALSE", "no", "No", "NO",
					 "off", "Off", "OFF", "0", "f", "n", NULL };
	struct scalar sc;

	if (n->type == YAML_SCALAR_NODE) {
		resolve(n, &sc);
		if (sc.k == SK_BOOL) {
			*out = sc.b;
			return true;
		}
		if (sc.k == SK_INT && !sc.ovf && (sc.i == 0 || sc.i == 1)) {
			*out = sc.i == 1;
			return true;
		}
		if (sc.k == SK_STR && (is_one_of(sc.s, sc.len, t) || is_one_of(sc.s, sc.len, f))) {
			*out = is_one_of(sc.s, sc.len, t);
			return true;
		}
	}
	ERR(p, n, path, "expected true or false, found %s", mk__node_kind(n));
	return false;
}
