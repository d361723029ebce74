/* jsonscan.c - JSON read in place (jsonscan.h).
 *
 * A safetensors header is one JSON object whose members are read once, in
 * order, and kept in compact arrays; a general JSON tree (a node and a malloc per
 * value, a hash table per object) cost 10-30 times the header's bytes and
 * seconds of allocator time for a large one.  This scanner allocates
 * nothing: the caller decodes each string into an arena of its own (a
 * decoded string is never longer than its JSON text, so an arena of the
 * text's length holds them all), reads integers as uint64 (the
 * reference's type: up to 2^64 - 1), and skips what it does not want
 * with its syntax checked.  Its grammar is RFC 8259 as serde_json reads
 * it: no NaN, no raw control character in a string, no \u0000 (the
 * strings are C strings) and no lone surrogate. */
#include <stdio.h>
#include <string.h>
#include "core/jsonscan.h"

#define SJ_MAX_DEPTH 128          /* nesting of a skipped value */

int mk_jscan_fail(struct mk_jscan *j, const char *what)
{
	if (!j->rc)
		j->rc = mk_err_set(j->err, MK_EFORMAT, "%s: %s is not valid JSON: %s at byte %zu%s%s%s", j->label,
				   j->what, what, (size_t)(j->p - j->start), j->kind ? " (" : "",
				   j->kind ? j->kind : "", j->kind ? ")" : "");
	return j->rc;
}

int mk_jscan_peek(struct mk_jscan *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
	return j->p < j->end ? (unsigned char)*j->p : -1;
}

int mk_jscan_at_end(struct mk_jscan *j)
{
	return mk_jscan_peek(j) < 0 ? mk_jscan_fail(j, "the text ends where a value should be") : 0;
}

int mk_jscan_finish(struct mk_jscan *j, int more)
{
	if (more < 0)
		return j->rc;
	return mk_jscan_peek(j) >= 0 ? mk_jscan_fail(j, "bytes after the object") : 0;
}

int mk_jscan_expect(struct mk_jscan *j, char c)
{
	char what[32];

	if (mk_jscan_peek(j) == (unsigned char)c) {
		j->p++;
		return 0;
	}
	snprintf(what, sizeof(what), "expected '%c'", c);
	return mk_jscan_fail(j, what);
}

int mk_jscan_more(struct mk_jscan *j, char close, bool *first)
{
	int c = mk_jscan_peek(j);

	if (*first) {
		*first = false;
		if (c == (unsigned char)close) {
			j->p++;
			return 0;
		}
		return 1;
	}
	if (c == (unsigned char)close) {
		j->p++;
		return 0;
	}
	if (c != ',')
		return mk_jscan_fail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
	j->p++;
	return 1;
}

static int hex4(const char *p, unsigned *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) :
			     c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
		if (d == 16)
			return -1;
		*v = *v << 4 | d;
	}
	return 0;
}

int mk_jscan_string(struct mk_jscan *j, char *dst, size_t *len)
{
	size_t n = 0;

	if (mk_jscan_peek(j) != '"')
		return mk_jscan_fail(j, "expected a string");
	j->p++;
	for (;;) {
		unsigned char c;
		unsigned u, lo;

		if (j->p >= j->end)
			return mk_jscan_fail(j, "unterminated string");
		c = (unsigned char)*j->p++;
		if (c == '"')
			break;
		if (c < 0x20) {
			j->p--;
			return mk_jscan_fail(j, "control character in a string");
		}
		if (c != '\\') {
			if (dst)
				dst[n] = (char)c;
			n++;
			continue;
		}
		if (j->p >= j->end)
			return mk_jscan_fail(j, "unterminated string");
		c = (unsigned char)*j->p++;
		switch (c) {
		case '"': case '\\': case '/': break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'u':
			if (j->end - j->p < 4 || hex4(j->p, &u) < 0)
				return mk_jscan_fail(j, "bad \\u escape");
			j->p += 4;
			if (u >= 0xdc00 && u <= 0xdfff)
				return mk_jscan_fail(j, "lone surrogate in a \\u escape");
			if (u >= 0xd800 && u <= 0xdbff) {
				if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || hex4(j->p + 2, &lo) < 0 ||
				    lo < 0xdc00 || lo > 0xdfff)
					return mk_jscan_fail(j, "lone surrogate in a \\u escape");
				j->p += 6;
				u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
			}
			if (u == 0)
				return mk_jscan_fail(j, "\\u0000 in a string");
			/* UTF-8 of u: at most as long as its escape (6 or 12 bytes) */
			if (dst) {
				if (u < 0x80) {
					dst[n] = (char)u;
				} else if (u < 0x800) {
					dst[n] = (char)(0xc0 | u >> 6);
					dst[n + 1] = (char)(0x80 | (u & 0x3f));
				} else if (u < 0x10000) {
					dst[n] = (char)(0xe0 | u >> 12);
					dst[n + 1] = (char)(0x80 | (u >> 6 & 0x3f));
					dst[n + 2] = (char)(0x80 | (u & 0x3f));
				} else {
					dst[n] = (char)(0xf0 | u >> 18);
					dst[n + 1] = (char)(0x80 | (u >> 12 & 0x3f));
					dst[n + 2] = (char)(0x80 | (u >> 6 & 0x3f));
					dst[n + 3] = (char)(0x80 | (u & 0x3f));
				}
			}
			n += u < 0x80 ? 1 : u < 0x800 ? 2 : u < 0x10000 ? 3 : 4;
			continue;
		default:
			j->p--;
			return mk_jscan_fail(j, "bad escape in a string");
		}
		if (dst)
			dst[n] = (char)c;
		n++;
	}
	if (dst)
		dst[n] = '\0';
	*len = n;
	return 0;
}

/* A number's text, checked against JSON's grammar; *integer when it has
 * no fraction or exponent. */
static int number(struct mk_jscan *j, const char **s, size_t *n, bool *integer)
{
	const char *p = j->p, *b = p;

	*integer = true;
	if (p < j->end && *p == '-')
		p++;
	if (p >= j->end || *p < '0' || *p > '9')
		return mk_jscan_fail(j, "expected a value");
	if (*p == '0')
		p++;
	else
		while (p < j->end && *p >= '0' && *p <= '9')
			p++;
	if (p < j->end && *p == '.') {
		*integer = false;
		if (++p >= j->end || *p < '0' || *p > '9')
			return mk_jscan_fail(j, "bad number");
		while (p < j->end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < j->end && (*p == 'e' || *p == 'E')) {
		*integer = false;
		if (++p < j->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= j->end || *p < '0' || *p > '9')
			return mk_jscan_fail(j, "bad number");
		while (p < j->end && *p >= '0' && *p <= '9')
			p++;
	}
	*s = b;
	*n = (size_t)(p - b);
	j->p = p;
	return 0;
}

int mk_jscan_u64(struct mk_jscan *j, uint64_t *out)
{
	const char *s;
	size_t n;
	bool integer;
	uint64_t v = 0;
	int c = mk_jscan_peek(j);

	if (c != '-' && (c < '0' || c > '9'))
		return 1;
	if (number(j, &s, &n, &integer) < 0)
		return j->rc;
	if (!integer || s[0] == '-')
		return 1;
	for (size_t i = 0; i < n; i++)
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v)) {
			j->p = s;
			return mk_jscan_fail(j, "integer larger than 2^64 - 1");
		}
	*out = v;
	return 0;
}

int mk_jscan_skip(struct mk_jscan *j)
{
	char stack[SJ_MAX_DEPTH];
	unsigned depth = 0;
	bool first = false;

	for (;;) {
		int c = mk_jscan_peek(j);
		const char *s;
		size_t n;
		bool integer;

		/* a value */
		if (c == '{' || c == '[') {
			if (depth == SJ_MAX_DEPTH)
				return mk_jscan_fail(j, "nested too deep");
			stack[depth++] = c == '{' ? '}' : ']';
			j->p++;
			first = true;
		} else {
			if (c == '"') {
				if (mk_jscan_string(j, NULL, &n) < 0)
					return j->rc;
			} else if (c == 't' || c == 'f' || c == 'n') {
				const char *w = c == 't' ? "true" : c == 'f' ? "false" : "null";
				size_t k = strlen(w);
				if ((size_t)(j->end - j->p) < k || memcmp(j->p, w, k))
					return mk_jscan_fail(j, "expected a value");
				j->p += k;
			} else if (number(j, &s, &n, &integer) < 0) {
				return j->rc;
			}
			first = false;
		}
		/* what follows it: the next member or element, or closes */
		for (;;) {
			int more;

			if (!depth)
				return 0;
			more = mk_jscan_more(j, stack[depth - 1], &first);
			if (more < 0)
				return j->rc;
			if (more == 0) {
				depth--;
				continue;
			}
			if (stack[depth - 1] == '}' &&
			    (mk_jscan_string(j, NULL, &n) < 0 || mk_jscan_expect(j, ':') < 0))
				return j->rc;
			break;
		}
	}
}
