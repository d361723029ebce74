/* tokenize.c - the tokenizer.json encoder (see tokenize.h): added tokens
 * split out, normalizers, pre-tokenizers, BPE, post-processor, in the
 * order and with the rules of the `tokenizers` package. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "mk/tokenize.h"
#include "tokenizer/vocab.h"
#include "core/text.h"

#define TOK_FILE_MAX ((size_t)1 << 30)

/* ------------------------------------------------------------ tables */

/* token text -> id (open addressing; keys may hold NUL bytes) */
struct smap {
	size_t cap, n;
	char **key;
	size_t *klen;
	int32_t *val;
};

static uint64_t bhash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static int32_t smap_get(const struct smap *m, const char *s, size_t n)
{
	if (!m->cap)
		return -1;
	for (size_t k = bhash(s, n) & (m->cap - 1);; k = (k + 1) & (m->cap - 1)) {
		if (!m->key[k])
			return -1;
		if (m->klen[k] == n && !memcmp(m->key[k], s, n))
			return m->val[k];
	}
}

static int smap_grow(struct smap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 64;
	char **key = calloc(cap, sizeof *key);
	size_t *klen = calloc(cap, sizeof *klen);
	int32_t *val = calloc(cap, sizeof *val);

	if (!key || !klen || !val) {
		free(key), free(klen), free(val);
		return -1;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->key[i])
			continue;
		size_t k = bhash(m->key[i], m->klen[i]) & (cap - 1);
		while (key[k])
			k = (k + 1) & (cap - 1);
		key[k] = m->key[i], klen[k] = m->klen[i], val[k] = m->val[i];
	}
	free(m->key), free(m->klen), free(m->val);
	m->key = key, m->klen = klen, m->val = val, m->cap = cap;
	return 0;
}

/* put a copy of s; a key already there gets the new value */
static int smap_put(struct smap *m, const char *s, size_t n, int32_t v)
{
	if ((m->n + 1) * 2 > m->cap && smap_grow(m))
		return -1;
	size_t k = bhash(s, n) & (m->cap - 1);
	for (; m->key[k]; k = (k + 1) & (m->cap - 1))
		if (m->klen[k] == n && !memcmp(m->key[k], s, n)) {
			m->val[k] = v;
			return 0;
		}
	if (!(m->key[k] = malloc(n + 1)))
		return -1;
	memcpy(m->key[k], s, n);
	m->key[k][n] = '\0';
	m->klen[k] = n, m->val[k] = v, m->n++;
	return 0;
}

static void smap_free(struct smap *m)
{
	for (size_t i = 0; i < m->cap; i++)
		free(m->key[i]);
	free(m->key), free(m->klen), free(m->val);
}

/* (left id, right id) -> (rank, merged id) */
struct pmap {
	size_t cap, n;
	uint64_t *key; /* (a << 32 | b) + 1, 0 empty */
	uint32_t *rank;
	int32_t *merged;
};

static uint64_t pkey(int32_t a, int32_t b)
{
	return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static size_t phash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k;
}

static int pmap_put(struct pmap *m, int32_t a, int32_t b, uint32_t rank, int32_t merged)
{
	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		uint64_t *key = calloc(cap, sizeof *key);
		uint32_t *r = calloc(cap, sizeof *r);
		int32_t *mg = calloc(cap, sizeof *mg);
		if (!key || !r || !mg) {
			free(key), free(r), free(mg);
			return -1;
		}
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->key[i])
				continue;
			size_t k = phash(m->key[i]) & (cap - 1);
			while (key[k])
				k = (k + 1) & (cap - 1);
			key[k] = m->key[i], r[k] = m->rank[i], mg[k] = m->merged[i];
		}
		free(m->key), free(m->rank), free(m->merged);
		m->key = key, m->rank = r, m->merged = mg, m->cap = cap;
	}
	uint64_t key = pkey(a, b);
	size_t k = phash(key) & (m->cap - 1);
	while (m->key[k] && m->key[k] != key)
		k = (k + 1) & (m->cap - 1);
	if (!m->key[k])
		m->n++;
	m->key[k] = key, m->rank[k] = rank, m->merged[k] = merged;
	return 0;
}

/* the rank of merging a with b, UINT32_MAX for none */
static uint32_t pmap_get(const struct pmap *m, int32_t a, int32_t b, int32_t *merged)
{
	uint64_t key = pkey(a, b);

	if (!m->cap)
		return UINT32_MAX;
	for (size_t k = phash(key) & (m->cap - 1); m->key[k]; k = (k + 1) & (m->cap - 1))
		if (m->key[k] == key) {
			*merged = m->merged[k];
			return m->rank[k];
		}
	return UINT32_MAX;
}

/* ------------------------------------------------------------ the tokenizer */

enum norm_kind { N_PREPEND, N_REPLACE, N_STRIP, N_UNICODE };
struct norm {
	enum norm_kind kind;
	char *a, *b; /* Prepend: a; Replace: a (literal) -> b */
	size_t alen, blen;
	pcre2_code *re;  /* Replace with a regex */
	bool left, right; /* Strip */
	const UNormalizer2 *unorm;
	char type[8];    /* its type, for messages */
};

enum split_behavior { B_REMOVED, B_ISOLATED, B_PREVIOUS, B_NEXT, B_CONTIGUOUS };
enum pre_kind { P_BYTELEVEL, P_SPLIT, P_METASPACE };
enum prepend_scheme { PS_ALWAYS, PS_FIRST, PS_NEVER };
struct pre {
	enum pre_kind kind;
	bool add_prefix_space, use_regex; /* ByteLevel */
	pcre2_code *re;                   /* Split; ByteLevel: the GPT-2 pattern */
	enum split_behavior behavior;
	bool invert;
	char *repl; /* Metaspace */
	size_t repl_len;
	enum prepend_scheme scheme;
	bool split;
	char bl[256][3]; /* ByteLevel: each byte's character (UTF-8) */
	uint8_t bl_len[256];
	char type[12];   /* its type, for messages */
};

struct atok {
	struct mk_added_token t;
	size_t len;
	char *norm; /* normalized: the content as the normalizers leave it */
	size_t nlen;
};

/* a post-processor: a template of ids with -1 for the sequence */
struct post {
	int32_t *tmpl;
	size_t n;
};

struct mk_tokenizer {
	char *label;
	struct smap vocab;
	struct pmap merges;
	int32_t unk, byte_id[256];
	bool byte_fallback, fuse_unk, ignore_merges;
	size_t nnorm, npre, npost, nadded;
	struct norm *norm;
	struct pre *pre;
	struct post *post;
	struct atok *added;
	struct smap added_map;
	uint8_t first[2][32]; /* [normalized]: the bytes an added token starts with */
	char *bos, *eos;
	size_t vocab_size;
};

static const char GPT2_PAT[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------ UTF-8 */

static size_t u8len(unsigned char c)
{
	return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

static uint32_t u8dec(const char *s, size_t *len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t l = u8len(u[0]);
	uint32_t c = l == 1 ? u[0] : l == 2 ? u[0] & 0x1f : l == 3 ? u[0] & 0x0f : u[0] & 0x07;

	for (size_t i = 1; i < l; i++)
		c = c << 6 | (u[i] & 0x3f);
	*len = l;
	return c;
}

/* the start of the character that ends at s[n] (n > 0) */
static size_t u8prev(const char *s, size_t n)
{
	size_t i = n - 1;

	while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80)
		i--;
	return i;
}

static size_t u8enc(uint32_t c, char *o)
{
	if (c < 0x80) {
		o[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (char)(0xc0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	o[0] = (char)(0xe0 | c >> 12), o[1] = (char)(0x80 | (c >> 6 & 0x3f)), o[2] = (char)(0x80 | (c & 0x3f));
	return 3;
}

/* Rust's char::is_whitespace (Unicode White_Space) */
static bool is_ws(uint32_t c)
{
	return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
	       c == 0x3000;
}

/* ------------------------------------------------------------ regexes */

static pcre2_code *re_compile(const char *pat, size_t len, bool literal, char *msg, size_t cap)
{
	int ec;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP),
				       &ec, &off, NULL);

	if (!re) {
		char buf[256];
		pcre2_get_error_message(ec, (PCRE2_UCHAR *)buf, sizeof buf);
		snprintf(msg, cap, "%s at offset %zu", buf, (size_t)off);
		return NULL;
	}
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* where it fails, the interpreter runs */
	return re;
}

/* The non-empty matches of re in s, non-overlapping, left to right:
 * (*m)[2k], (*m)[2k+1]; else the matcher's error (PCRE2_ERROR_MATCHLIMIT,
 * ...; PCRE2_ERROR_NOMEMORY when out of memory). */
static int re_all(const pcre2_code *re, const char *s, size_t n, size_t **m, size_t *nm)
{
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	size_t cap = 0, at = 0;
	int rc = 0;

	*m = NULL, *nm = 0;
	if (!md)
		return PCRE2_ERROR_NOMEMORY;
	while (at <= n) {
		int r = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
		if (r == PCRE2_ERROR_NOMATCH)
			break;
		if (r < 0) {
			rc = r;
			break;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
		if (ov[1] <= ov[0]) { /* empty: step over one character */
			if (ov[0] >= n)
				break;
			at = ov[0] + u8len((unsigned char)s[ov[0]]);
			continue;
		}
		if (*nm + 1 > cap) {
			size_t nc = cap ? cap * 2 : 16;
			size_t *p = realloc(*m, nc * 2 * sizeof *p);
			if (!p) {
				rc = PCRE2_ERROR_NOMEMORY;
				break;
			}
			*m = p, cap = nc;
		}
		(*m)[2 * *nm] = ov[0], (*m)[2 * *nm + 1] = ov[1], (*nm)++;
		at = ov[1];
	}
	pcre2_match_data_free(md);
	if (rc) {
		free(*m);
		*m = NULL, *nm = 0;
	}
	return rc;
}

/* ------------------------------------------------------------ bounds */

/* What encoding may build from a text of n bytes: at most enc_cap(n)
 * bytes of normalized text, of pieces (each counted with PIECE_COST more
 * for its entry and allocation) after each pre-tokenizer, and tokens.
 * Real tokenizers stay below: NFKC's worst character grows 11 times,
 * ByteLevel doubles a byte at most, Metaspace triples a space, and pieces
 * of one byte each count 33 times.  A text longer than ENC_TEXT_MAX (a
 * prompt is a few KB) is refused, so that no encoding builds more than
 * about 256 MiB in any stage.  What hits a bound names the tokenizer
 * file and the rule. */
#define ENC_GROWTH 64
#define ENC_SLACK ((size_t)64 << 10)
#define ENC_TEXT_MAX ((size_t)4 << 20)
#define PIECE_COST 32

static size_t enc_cap(size_t n)
{
	return n * ENC_GROWTH + ENC_SLACK;
}

/* An encoding under way: the tokenizer, the bound, and whether err
 * already says why it failed (else a failure is out of memory). */
struct enc {
	const struct mk_tokenizer *t;
	struct mk_err *err;
	size_t len, cap;
	bool said;
};

/* rule (its name) built more than the bound allows: say so once */
static int enc_over(struct enc *e, const char *rule, const char *what)
{
	if (!e->said)
		mk_err_set(e->err, MK_EFORMAT,
			   "%s: %s makes more than %zu %s from a text of %zu bytes (at most %d times the text and "
			   "%zu KiB): refused", e->t->label, rule, e->cap, what, e->len, ENC_GROWTH, ENC_SLACK >> 10);
	e->said = true;
	return -1;
}

/* rule's pattern failed on the text (rc from re_all): say why, unless
 * it ran out of memory */
static int enc_re(struct enc *e, const char *rule, int rc)
{
	char why[160];

	if (rc == PCRE2_ERROR_NOMEMORY || e->said)
		return -1;
	pcre2_get_error_message(rc, (PCRE2_UCHAR *)why, sizeof why);
	mk_err_set(e->err, MK_EFORMAT, "%s: %s: its pattern failed on the text: %s (PCRE2 error %d)", e->t->label,
		   rule, why, rc);
	e->said = true;
	return -1;
}

/* ------------------------------------------------------------ pieces */

struct piece {
	char *s;
	size_t n;
	bool first; /* it starts at offset 0 of the original text */
};
struct plist {
	struct piece *p;
	size_t n, cap;
	bool oom;
	size_t bytes, max; /* held, counting PIECE_COST each; the bound (0: none) */
	bool over;         /* the bound was reached (oom set too) */
};

static void pl_add(struct plist *l, const char *s, size_t n, bool first)
{
	if (l->oom)
		return;
	if (l->max && (n + PIECE_COST > l->max - l->bytes || l->bytes > l->max)) {
		l->oom = l->over = true;
		return;
	}
	l->bytes += n + PIECE_COST;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 16;
		struct piece *p = realloc(l->p, nc * sizeof *p);
		if (!p) {
			l->oom = true;
			return;
		}
		l->p = p, l->cap = nc;
	}
	char *c = malloc(n + 1);
	if (!c) {
		l->oom = true;
		return;
	}
	memcpy(c, s, n);
	c[n] = '\0';
	l->p[l->n++] = (struct piece){c, n, first};
}

static void pl_free(struct plist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->p[i].s);
	free(l->p);
	*l = (struct plist){0};
}

/* ------------------------------------------------------------ normalizers */

#define UNORM_PIECE 65536   /* bytes normalized at a time (N_UNICODE) */

/* The normal form of s appended to o: 0; 1 when it would be longer than cap
 * bytes (found before a buffer that large is made); -1 on a failure. */
static int unicode_norm(const UNormalizer2 *nz, const char *s, size_t n, size_t cap, struct mk_sbuf *o)
{
	UErrorCode e = U_ZERO_ERROR;
	int32_t ulen = 0, olen = 0, blen = 0;
	UChar *u = NULL, *w = NULL;
	int rc = -1;

	if (n > INT32_MAX / 4)
		return -1;
	if (!(u = malloc((n + 1) * sizeof *u)))
		goto out;
	u_strFromUTF8(u, (int32_t)n + 1, &ulen, s, (int32_t)n, &e);
	if (U_FAILURE(e))
		goto out;
	int32_t wcap = ulen * 4 + 16; /* NFKC of one unit is at most 18 units; grow if asked */
	for (;;) {
		free(w);
		if (!(w = malloc((size_t)wcap * sizeof *w)))
			goto out;
		e = U_ZERO_ERROR;
		olen = unorm2_normalize(nz, u, ulen, w, wcap, &e);
		if (e == U_BUFFER_OVERFLOW_ERROR && olen >= wcap) {
			if ((size_t)olen > cap) {      /* each unit is a byte or more */
				rc = 1;
				goto out;
			}
			wcap = olen + 1;
			continue;
		}
		break;
	}
	if (U_FAILURE(e))
		goto out;
	e = U_ZERO_ERROR;
	u_strToUTF8(NULL, 0, &blen, w, olen, &e);
	if (e != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(e))
		goto out;
	if ((size_t)blen > cap) {
		rc = 1;
		goto out;
	}
	char *b = malloc((size_t)blen + 1);
	if (!b)
		goto out;
	e = U_ZERO_ERROR;
	u_strToUTF8(b, blen + 1, NULL, w, olen, &e);
	if (!U_FAILURE(e))
		mk_sbuf_add(o, b, (size_t)blen), rc = 0;
	free(b);
out:
	free(u);
	free(w);
	return rc;
}

/* Append n bytes to b unless that takes it past cap (then *over). */
static void capped_add(struct mk_sbuf *b, const void *s, size_t n, size_t cap, bool *over)
{
	if (*over || n > cap - b->n) {
		*over = true;
		return;
	}
	mk_sbuf_add(b, s, n);
}

/* s (n bytes) through the normalizers, into *out (malloc'ed). */
static int normalize(struct enc *e, const char *s, size_t n, char **out, size_t *olen)
{
	const struct mk_tokenizer *t = e->t;
	struct mk_sbuf cur = {0};
	bool over = false;
	size_t k;

	if (n > e->cap)
		return enc_over(e, "the text", "bytes");
	mk_sbuf_add(&cur, s, n);
	if (!n)
		mk_sbuf_str(&cur, "");
	for (k = 0; k < t->nnorm && !cur.oom && !over; k++) {
		const struct norm *z = &t->norm[k];
		struct mk_sbuf nx = {0};
		switch (z->kind) {
		case N_PREPEND:
			if (cur.n)
				capped_add(&nx, z->a, z->alen, e->cap, &over);
			capped_add(&nx, cur.p, cur.n, e->cap, &over);
			break;
		case N_REPLACE:
			if (z->re) {
				size_t *m, nm, at = 0;
				int r = re_all(z->re, cur.p, cur.n, &m, &nm);
				if (r) {
					char rule[64];
					snprintf(rule, sizeof rule, "normalizer %zu (Replace)", k + 1);
					enc_re(e, rule, r);
					nx.oom = true;
					break;
				}
				for (size_t i = 0; i < nm; i++) {
					capped_add(&nx, cur.p + at, m[2 * i] - at, e->cap, &over);
					capped_add(&nx, z->b, z->blen, e->cap, &over);
					at = m[2 * i + 1];
				}
				capped_add(&nx, cur.p + at, cur.n - at, e->cap, &over);
				free(m);
			} else {
				size_t at = 0;
				while (z->alen && at + z->alen <= cur.n && !over) {
					if (!memcmp(cur.p + at, z->a, z->alen)) {
						capped_add(&nx, z->b, z->blen, e->cap, &over);
						at += z->alen;
					} else {
						size_t l = u8len((unsigned char)cur.p[at]);
						capped_add(&nx, cur.p + at, l, e->cap, &over);
						at += l;
					}
				}
				capped_add(&nx, cur.p + at, cur.n - at, e->cap, &over);
			}
			break;
		case N_STRIP: {
			size_t a = 0, b = cur.n, l;
			while (z->left && a < b && is_ws(u8dec(cur.p + a, &l)))
				a += l;
			while (z->right && b > a) {
				size_t p = u8prev(cur.p, b);
				if (!is_ws(u8dec(cur.p + p, &l)))
					break;
				b = p;
			}
			mk_sbuf_add(&nx, cur.p + a, b - a);
			break;
		}
		case N_UNICODE: {
			/* in pieces of about UNORM_PIECE bytes, each cut where the
			 * form has a boundary (so the same text as the whole): what
			 * the pieces made is held to the cap before the next is
			 * made, and ICU's buffers stay the size of a piece's form */
			size_t pos = 0, l;
			while (pos < cur.n && !nx.oom && !over) {
				size_t end = cur.n - pos > UNORM_PIECE ? pos + UNORM_PIECE : cur.n;
				while (end < cur.n && ((unsigned char)cur.p[end] & 0xc0) == 0x80)
					end++;
				while (end < cur.n &&
				       !unorm2_hasBoundaryBefore(z->unorm, (UChar32)u8dec(cur.p + end, &l)))
					end += l;
				int r = unicode_norm(z->unorm, cur.p + pos, end - pos, e->cap - nx.n, &nx);
				if (r < 0)
					nx.oom = true;
				else if (r > 0)
					over = true;
				pos = end;
			}
			break;
		}
		}
		if (!nx.p && !nx.oom)
			mk_sbuf_str(&nx, "");
		free(cur.p);
		cur = nx;
	}
	if (over) {
		char rule[64];
		free(cur.p);
		snprintf(rule, sizeof rule, "normalizer %zu (%s)", k, t->norm[k - 1].type);
		return enc_over(e, rule, "bytes of text");
	}
	if (cur.oom) {
		free(cur.p);
		return -1;
	}
	*out = cur.p, *olen = cur.n;
	return 0;
}

/* ------------------------------------------------------------ pre-tokenizers */

/* split piece p by the ranges m (nm matches) with behavior b */
static void split_piece(struct plist *o, const struct piece *p, const size_t *m, size_t nm, enum split_behavior b,
			bool invert)
{
	/* the pieces in order: (start, end, is_match) */
	size_t cap = 2 * nm + 1, k = 0, at = 0;
	size_t *st = malloc(cap * sizeof *st), *en = malloc(cap * sizeof *en);
	bool *mt = malloc(cap * sizeof *mt);

	if (!st || !en || !mt) {
		o->oom = true;
		goto out;
	}
	for (size_t i = 0; i < nm; i++) {
		if (m[2 * i] > at)
			st[k] = at, en[k] = m[2 * i], mt[k++] = invert;
		st[k] = m[2 * i], en[k] = m[2 * i + 1], mt[k++] = !invert;
		at = m[2 * i + 1];
	}
	if (at < p->n || k == 0)
		st[k] = at, en[k] = p->n, mt[k++] = invert;
	/* merge as the behavior says, into st/en (r entries) */
	size_t r = 0;
	bool prev = false;
	switch (b) {
	case B_ISOLATED:
		r = k;
		break;
	case B_REMOVED:
		for (size_t i = 0; i < k; i++)
			if (!mt[i])
				st[r] = st[i], en[r] = en[i], r++;
		break;
	case B_PREVIOUS:
		for (size_t i = 0; i < k; i++) {
			if (mt[i] && !prev && r)
				en[r - 1] = en[i];
			else
				st[r] = st[i], en[r] = en[i], r++;
			prev = mt[i];
		}
		break;
	case B_NEXT: {
		/* from the right: a match joins the piece after it */
		size_t w = k;
		for (size_t i = k; i-- > 0;) {
			if (mt[i] && !prev && w < k)
				st[w] = st[i];
			else
				w--, st[w] = st[i], en[w] = en[i];
			prev = mt[i];
		}
		for (size_t i = w; i < k; i++)
			st[r] = st[i], en[r] = en[i], r++;
		break;
	}
	case B_CONTIGUOUS:
		for (size_t i = 0; i < k; i++) {
			if (r && mt[i] == prev)
				en[r - 1] = en[i];
			else
				st[r] = st[i], en[r] = en[i], r++;
			prev = mt[i];
		}
		break;
	}
	for (size_t i = 0; i < r; i++)
		if (en[i] > st[i])
			pl_add(o, p->s + st[i], en[i] - st[i], p->first && st[i] == 0);
out:
	free(st), free(en), free(mt);
}

/* the byte-level alphabet: bytes that print stand for themselves, the
 * others, in order, for U+0100 on */
static void bytelevel_table(struct pre *z)
{
	unsigned n = 0;

	for (unsigned i = 0; i < 256; i++) {
		bool print = (i >= '!' && i <= '~') || (i >= 0xa1 && i <= 0xac) || i >= 0xae;
		z->bl_len[i] = (uint8_t)u8enc(print ? i : 256 + n++, z->bl[i]);
	}
}

/* Pre-tokenizer number k (from 0), z, over the pieces in, into o (its
 * bound set): 0, or -1 (e->said when not out of memory). */
static int pre_apply(struct enc *e, size_t k, const struct pre *z, struct plist *in, struct plist *o)
{
	char rule[64];
	int r;

	snprintf(rule, sizeof rule, "pre-tokenizer %zu (%s)", k + 1, z->type);
	for (size_t i = 0; i < in->n && !o->oom; i++) {
		struct piece *p = &in->p[i];
		size_t *m = NULL, nm = 0;
		switch (z->kind) {
		case P_SPLIT:
			if ((r = re_all(z->re, p->s, p->n, &m, &nm)))
				return enc_re(e, rule, r);
			split_piece(o, p, m, nm, z->behavior, z->invert);
			free(m);
			break;
		case P_BYTELEVEL: {
			struct mk_sbuf b = {0};
			struct plist tmp = {.max = e->cap};
			if (z->add_prefix_space && (p->n == 0 || p->s[0] != ' '))
				mk_sbuf_str(&b, " ");
			mk_sbuf_add(&b, p->s, p->n);
			if (b.oom)
				return -1;
			struct piece q = {b.p, b.n, p->first};
			if (z->use_regex) {
				if ((r = re_all(z->re, q.s, q.n, &m, &nm))) {
					free(b.p);
					return enc_re(e, rule, r);
				}
				split_piece(&tmp, &q, m, nm, B_ISOLATED, false);
				free(m);
			} else {
				pl_add(&tmp, q.s, q.n, q.first);
			}
			free(b.p);
			for (size_t j = 0; j < tmp.n; j++) {
				struct mk_sbuf c = {0};
				for (size_t x = 0; x < tmp.p[j].n; x++) {
					unsigned char by = (unsigned char)tmp.p[j].s[x];
					mk_sbuf_add(&c, z->bl[by], z->bl_len[by]);
				}
				if (c.oom) {
					free(c.p);
					pl_free(&tmp);
					return -1;
				}
				pl_add(o, c.p, c.n, tmp.p[j].first);
				free(c.p);
			}
			if (tmp.over)
				o->over = true;
			if (tmp.oom)
				o->oom = true;
			pl_free(&tmp);
			break;
		}
		case P_METASPACE: {
			struct mk_sbuf b = {0};
			bool starts = p->n >= z->repl_len && !memcmp(p->s, z->repl, z->repl_len), over = false;
			/* spaces become the replacement; then the prefix */
			bool space0 = p->n && p->s[0] == ' ';
			if (!starts && !space0 &&
			    (z->scheme == PS_ALWAYS || (z->scheme == PS_FIRST && p->first)))
				capped_add(&b, z->repl, z->repl_len, e->cap, &over);
			for (size_t x = 0; x < p->n && !over; x++) {
				if (p->s[x] == ' ')
					capped_add(&b, z->repl, z->repl_len, e->cap, &over);
				else
					capped_add(&b, p->s + x, 1, e->cap, &over);
			}
			if (over) {
				free(b.p);
				return enc_over(e, rule, "bytes of text");
			}
			if (b.oom)
				return -1;
			struct piece q = {b.p ? b.p : (char *)"", b.n, p->first};
			if (z->split) {
				/* split on the replacement, each joined to what follows */
				size_t cnt = 0, *mm = NULL;
				for (size_t x = 0; x + z->repl_len <= q.n;)
					if (!memcmp(q.s + x, z->repl, z->repl_len))
						cnt++, x += z->repl_len;
					else
						x++;
				if (cnt && !(mm = malloc(2 * cnt * sizeof *mm))) {
					free(b.p);
					return -1;
				}
				cnt = 0;
				for (size_t x = 0; x + z->repl_len <= q.n;)
					if (!memcmp(q.s + x, z->repl, z->repl_len))
						mm[2 * cnt] = x, mm[2 * cnt + 1] = x + z->repl_len, cnt++, x += z->repl_len;
					else
						x++;
				split_piece(o, &q, mm, cnt, B_NEXT, false);
				free(mm);
			} else if (q.n) {
				pl_add(o, q.s, q.n, q.first);
			}
			free(b.p);
			break;
		}
		}
	}
	if (o->over)
		return enc_over(e, rule, "bytes of pieces");
	return o->oom ? -1 : 0;
}

/* ------------------------------------------------------------ BPE */

struct ids {
	int32_t *p;
	size_t n, cap;
	bool oom;
	size_t max; /* the bound (0: none) */
	bool over;  /* it was reached (oom set too) */
};

static void ids_add(struct ids *v, int32_t id)
{
	if (v->oom)
		return;
	if (v->max && v->n == v->max) {
		v->oom = v->over = true;
		return;
	}
	if (v->n == v->cap) {
		size_t nc = v->cap ? v->cap * 2 : 64;
		int32_t *p = realloc(v->p, nc * sizeof *p);
		if (!p) {
			v->oom = true;
			return;
		}
		v->p = p, v->cap = nc;
	}
	v->p[v->n++] = id;
}

static int bpe(const struct mk_tokenizer *t, const char *w, size_t n, struct ids *out)
{
	int32_t id;

	if (!n)
		return 0;
	if (t->ignore_merges && (id = smap_get(&t->vocab, w, n)) >= 0) {
		ids_add(out, id);
		return out->oom ? -1 : 0;
	}
	struct ids s = {0};
	bool unk = false;
	for (size_t i = 0; i < n;) {
		size_t l = u8len((unsigned char)w[i]);
		if (i + l > n)
			l = n - i;
		if ((id = smap_get(&t->vocab, w + i, l)) >= 0) {
			if (unk)
				ids_add(&s, t->unk), unk = false;
			ids_add(&s, id);
		} else {
			bool all = t->byte_fallback;
			for (size_t k = 0; all && k < l; k++)
				all = t->byte_id[(unsigned char)w[i + k]] >= 0;
			if (all) {
				if (unk)
					ids_add(&s, t->unk), unk = false;
				for (size_t k = 0; k < l; k++)
					ids_add(&s, t->byte_id[(unsigned char)w[i + k]]);
			} else if (t->unk >= 0) {
				if (unk && !t->fuse_unk)
					ids_add(&s, t->unk);
				unk = true;
			}
		}
		i += l;
	}
	if (unk)
		ids_add(&s, t->unk);
	/* merge the pair of lowest rank, the leftmost of equals, until none
	 * is left: a heap of (rank, position) over a list of symbols, entries
	 * of pairs since changed skipped as they come up */
	size_t m = s.n, nh = 0;
	int32_t *nx = m ? malloc(m * sizeof *nx) : NULL, *pv = m ? malloc(m * sizeof *pv) : NULL;
	uint64_t *heap = m ? malloc(m * 2 * sizeof *heap) : NULL, hcap = m * 2;
	if (s.oom || (m && (!nx || !pv || !heap))) {
		free(s.p), free(nx), free(pv), free(heap);
		return -1;
	}
#define HKEY(r, pos) ((uint64_t)(r) << 32 | (uint32_t)(pos))
#define HPUSH(key)                                                                                 \
	do {                                                                                       \
		if (nh == hcap) {                                                                  \
			uint64_t *h2 = realloc(heap, (hcap *= 2) * sizeof *heap);                  \
			if (!h2)                                                                   \
				goto oom;                                                          \
			heap = h2;                                                                 \
		}                                                                                  \
		size_t c_ = nh++;                                                                  \
		for (; c_ && heap[(c_ - 1) / 2] > (key); c_ = (c_ - 1) / 2)                        \
			heap[c_] = heap[(c_ - 1) / 2];                                             \
		heap[c_] = (key);                                                                  \
	} while (0)
	for (size_t k = 0; k < m; k++) {
		nx[k] = k + 1 < m ? (int32_t)(k + 1) : -1;
		pv[k] = (int32_t)k - 1;
	}
	for (size_t k = 0; k + 1 < m; k++) {
		int32_t mg;
		uint32_t r = pmap_get(&t->merges, s.p[k], s.p[k + 1], &mg);
		if (r != UINT32_MAX)
			HPUSH(HKEY(r, k));
	}
	while (nh) {
		uint64_t top = heap[0], last = heap[--nh];
		size_t c = 0;
		for (;;) { /* sift the last entry down from the root */
			size_t l = 2 * c + 1;
			if (l >= nh)
				break;
			if (l + 1 < nh && heap[l + 1] < heap[l])
				l++;
			if (heap[l] >= last)
				break;
			heap[c] = heap[l], c = l;
		}
		if (nh)
			heap[c] = last;
		int32_t pos = (int32_t)(uint32_t)top, mg = -1, nxt = nx[pos];
		uint32_t r = (uint32_t)(top >> 32);
		if (s.p[pos] < 0 || nxt < 0 || pmap_get(&t->merges, s.p[pos], s.p[nxt], &mg) != r)
			continue;
		s.p[pos] = mg;
		s.p[nxt] = -1; /* gone */
		nx[pos] = nx[nxt];
		if (nx[pos] >= 0)
			pv[nx[pos]] = pos;
		int32_t m2;
		uint32_t r2;
		if (pv[pos] >= 0 && (r2 = pmap_get(&t->merges, s.p[pv[pos]], s.p[pos], &m2)) != UINT32_MAX)
			HPUSH(HKEY(r2, pv[pos]));
		if (nx[pos] >= 0 && (r2 = pmap_get(&t->merges, s.p[pos], s.p[nx[pos]], &m2)) != UINT32_MAX)
			HPUSH(HKEY(r2, pos));
	}
#undef HPUSH
#undef HKEY
	for (size_t k = 0; k < m; k++)
		if (s.p[k] >= 0)
			ids_add(out, s.p[k]);
	free(s.p), free(nx), free(pv), free(heap);
	return out->oom ? -1 : 0;
oom:
	free(s.p), free(nx), free(pv), free(heap);
	return -1;
}

/* ------------------------------------------------------------ added tokens */

struct seg {
	size_t a, b;
	int32_t id; /* -1: text */
};
struct segs {
	struct seg *p;
	size_t n, cap;
	bool oom;
};

static void seg_add(struct segs *l, size_t a, size_t b, int32_t id)
{
	if (l->oom || (id < 0 && b <= a))
		return;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 16;
		struct seg *p = realloc(l->p, nc * sizeof *p);
		if (!p) {
			l->oom = true;
			return;
		}
		l->p = p, l->cap = nc;
	}
	l->p[l->n++] = (struct seg){a, b, id};
}

/* Is the character at s[a] a word character, as the \\w of Rust's regex
 * crate (single_word's test in `tokenizers`) has it: Alphabetic, a mark,
 * a decimal digit, connector punctuation or a joiner? */
static bool word_at(const char *s, size_t a)
{
	size_t l;
	uint32_t c = u8dec(s + a, &l);
	int8_t ty = u_charType((UChar32)c);

	return u_isUAlphabetic((UChar32)c) || ty == U_NON_SPACING_MARK || ty == U_ENCLOSING_MARK ||
	       ty == U_COMBINING_SPACING_MARK || ty == U_DECIMAL_DIGIT_NUMBER || ty == U_CONNECTOR_PUNCTUATION ||
	       c == 0x200c || c == 0x200d;
}

/* Split s by the added tokens whose normalized flag is `normalized`
 * (matched against their normalized content then), leftmost-longest. */
static void split_added(const struct mk_tokenizer *t, const char *s, size_t n, bool normalized, struct segs *o)
{
	size_t at = 0, from = 0;

	const uint8_t *first = t->first[normalized];

	while (at < n) {
		const struct atok *best = NULL;
		size_t bl = 0;
		unsigned char c0 = (unsigned char)s[at];
		if (!(first[c0 >> 3] & 1u << (c0 & 7))) {
			at += u8len(c0);
			continue;
		}
		for (size_t k = 0; k < t->nadded; k++) {
			const struct atok *a = &t->added[k];
			if (a->t.normalized != normalized)
				continue;
			const char *c = normalized ? a->norm : a->t.content;
			size_t cl = normalized ? a->nlen : a->len;
			if (cl > bl && cl && at + cl <= n && !memcmp(s + at, c, cl))
				best = a, bl = cl;
		}
		if (!best) {
			at += u8len((unsigned char)s[at]);
			continue;
		}
		size_t a = at, b = at + bl, l;
		at = b;
		if (best->t.single_word) {
			bool before = a > 0 && word_at(s, u8prev(s, a));
			bool after = b < n && word_at(s, b);
			if (before || after)
				continue;
		}
		if (best->t.lstrip) {
			while (a > from) {
				size_t p = u8prev(s, a);
				if (!is_ws(u8dec(s + p, &l)))
					break;
				a = p;
			}
		}
		if (best->t.rstrip) {
			while (b < n && is_ws(u8dec(s + b, &l)))
				b += l;
			at = b;
		}
		seg_add(o, from, a, -1);
		seg_add(o, a, b, (int32_t)best->t.id);
		from = b;
	}
	seg_add(o, from, n, -1);
}

/* ------------------------------------------------------------ encode */

static bool utf8_ok(const char *s, size_t n)
{
	/* well-formed, no surrogates, nothing past U+10FFFF */
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t l = c < 0x80 ? 1 : (c >= 0xc2 && c < 0xe0) ? 2 : (c >= 0xe0 && c < 0xf0) ? 3 : (c >= 0xf0 && c < 0xf5) ? 4 : 0;
		if (!l || i + l > n)
			return false;
		for (size_t k = 1; k < l; k++)
			if (((unsigned char)s[i + k] & 0xc0) != 0x80)
				return false;
		if (l == 3) {
			unsigned char d = (unsigned char)s[i + 1];
			if ((c == 0xe0 && d < 0xa0) || (c == 0xed && d >= 0xa0))
				return false;
		}
		if (l == 4) {
			unsigned char d = (unsigned char)s[i + 1];
			if ((c == 0xf0 && d < 0x90) || (c == 0xf4 && d >= 0x90))
				return false;
		}
		i += l;
	}
	return true;
}

static int encode_text(struct enc *e, const char *s, size_t n, bool first, struct ids *out)
{
	const struct mk_tokenizer *t = e->t;
	char *ns = NULL;
	size_t nn;
	struct segs sg = {0};
	int rc = -1;

	if (normalize(e, s, n, &ns, &nn))
		return -1;
	split_added(t, ns, nn, true, &sg);
	if (sg.oom)
		goto out;
	for (size_t i = 0; i < sg.n; i++) {
		if (sg.p[i].id >= 0) {
			ids_add(out, sg.p[i].id);
			continue;
		}
		struct plist a = {.max = e->cap};
		pl_add(&a, ns + sg.p[i].a, sg.p[i].b - sg.p[i].a, first && sg.p[i].a == 0);
		for (size_t k = 0; k < t->npre && !a.oom; k++) {
			struct plist b = {.max = e->cap};
			int r = pre_apply(e, k, &t->pre[k], &a, &b);
			pl_free(&a);
			a = b;
			if (r)
				a.oom = true;
		}
		for (size_t k = 0; k < a.n && !a.oom; k++)
			if (bpe(t, a.p[k].s, a.p[k].n, out))
				a.oom = true;
		bool bad = a.oom;
		pl_free(&a);
		if (bad)
			goto out;
	}
	rc = out->oom ? -1 : 0;
out:
	free(ns);
	free(sg.p);
	return rc;
}

int mk_tokenizer_encode(const struct mk_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
			size_t *n, struct mk_err *err)
{
	struct segs sg = {0};
	struct enc e = {t, err, len, enc_cap(len), false};
	struct ids out = {.max = e.cap};
	const char *rule = "the model";

	*ids = NULL, *n = 0;
	if (len > ENC_TEXT_MAX)
		return mk_err_set(err, MK_EINVAL, "%s: a text of %zu bytes to encode, more than %zu MiB: refused", t->label,
				  len, ENC_TEXT_MAX >> 20);
	if (!utf8_ok(text, len))
		return mk_err_set(err, MK_EINVAL, "%s: the text to encode is not UTF-8", t->label);
	split_added(t, text, len, false, &sg);
	for (size_t i = 0; i < sg.n && !sg.oom && !out.oom; i++) {
		if (sg.p[i].id >= 0)
			ids_add(&out, sg.p[i].id);
		else if (encode_text(&e, text + sg.p[i].a, sg.p[i].b - sg.p[i].a, sg.p[i].a == 0, &out))
			out.oom = true;
	}
	free(sg.p);
	if (sg.oom)
		out.oom = true;
	char post[64];
	for (size_t k = 0; add_special && k < t->npost && !out.oom; k++) {
		const struct post *p = &t->post[k];
		struct ids nx = {.max = e.cap};
		for (size_t j = 0; j < p->n && !nx.oom; j++) {
			if (p->tmpl[j] >= 0)
				ids_add(&nx, p->tmpl[j]);
			else
				for (size_t x = 0; x < out.n && !nx.oom; x++)
					ids_add(&nx, out.p[x]);
		}
		free(out.p);
		out = nx;
		snprintf(post, sizeof post, "post-processor %zu", k + 1);
		rule = post;
	}
	if (out.over)
		enc_over(&e, rule, "tokens");
	if (out.oom) {
		free(out.p);
		return e.said ? -err->code : mk_err_set(err, MK_ENOMEM, "%s: out of memory encoding %zu bytes", t->label, len);
	}
	*ids = out.p, *n = out.n;
	return 0;
}

long long mk_tokenizer_token_id(const struct mk_tokenizer *t, const char *token)
{
	int32_t id = smap_get(&t->added_map, token, strlen(token));

	return id >= 0 ? id : smap_get(&t->vocab, token, strlen(token));
}

size_t mk_tokenizer_vocab_size(const struct mk_tokenizer *t)
{
	return t->vocab_size;
}

int mk_tokenizer_encode_prompts(const struct mk_tokenizer *t, const char *const *prompts, size_t np,
				struct mk_tokbatch *out, struct mk_err *err)
{
	const char *pt = t->bos ? t->bos : t->eos;
	long long pad = pt ? mk_tokenizer_token_id(t, pt) : -1;
	/* mergekit-moe sets the pad id to the BOS id, which transformers
	 * keeps as a token (tokenizers' id_to_token: a normalized added
	 * token's normalized content) and turns back into an id (that
	 * content, else the unknown token's) */
	if (t->bos && pad >= 0) {
		const char *back = NULL;
		size_t blen = 0;
		for (size_t i = 0; i < t->nadded && !back; i++)
			if (t->added[i].t.id == pad)
				back = t->added[i].t.normalized ? t->added[i].norm : t->added[i].t.content,
				blen = t->added[i].t.normalized ? t->added[i].nlen : t->added[i].len;
		if (back) {
			int32_t id = smap_get(&t->added_map, back, blen);
			if (id < 0)
				id = smap_get(&t->vocab, back, blen);
			pad = id >= 0 ? id : t->unk;
		}
	}
	int32_t **row = NULL;
	size_t *len = NULL, cols = 0;
	int rc = 0;

	*out = (struct mk_tokbatch){0};
	if (!pt)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "%s: no BOS and no EOS token to pad the prompts with (tokenizer_config.json "
				  "names neither)", t->label);
	if (pad < 0)
		return mk_err_set(err, MK_EFORMAT, "%s: the %s token '%s' is not in the vocabulary", t->label,
				  t->bos ? "BOS" : "EOS", pt);
	if (np && (!(row = calloc(np, sizeof *row)) || !(len = calloc(np, sizeof *len)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < np; i++) {
		struct mk_sbuf b = {0};
		mk_sbuf_str(&b, t->bos ? t->bos : "");
		mk_sbuf_str(&b, prompts[i]);
		if (b.oom) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		rc = mk_tokenizer_encode(t, b.p, b.n, false, &row[i], &len[i], err);
		free(b.p);
		if (rc) {
			mk_err_prefix(err, "prompt %zu: ", i + 1);
			goto out;
		}
		if (len[i] > cols)
			cols = len[i];
	}
	out->rows = np, out->cols = cols, out->pad_id = (int32_t)pad;
	if (np && cols) {
		out->ids = malloc(np * cols * sizeof *out->ids);
		out->mask = calloc(np * cols, 1);
		if (!out->ids || !out->mask) {
			mk_tokbatch_free(out);
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < np; i++) {
			size_t lead = cols - len[i];
			for (size_t j = 0; j < lead; j++)
				out->ids[i * cols + j] = (int32_t)pad;
			if (len[i]) {
				memcpy(out->ids + i * cols + lead, row[i], len[i] * sizeof *row[i]);
				memset(out->mask + i * cols + lead, 1, len[i]);
			}
		}
	}
out:
	for (size_t i = 0; row && i < np; i++)
		free(row[i]);
	free(row), free(len);
	return rc;
}

void mk_tokbatch_free(struct mk_tokbatch *b)
{
	if (!b)
		return;
	free(b->ids), free(b->mask);
	*b = (struct mk_tokbatch){0};
}

/* ------------------------------------------------------------ loading */

void mk_tokenizer_free(struct mk_tokenizer *t)
{
	if (!t)
		return;
	smap_free(&t->vocab);
	smap_free(&t->added_map);
	free(t->merges.key), free(t->merges.rank), free(t->merges.merged);
	for (size_t i = 0; i < t->nnorm; i++) {
		free(t->norm[i].a), free(t->norm[i].b);
		pcre2_code_free(t->norm[i].re);
	}
	free(t->norm);
	for (size_t i = 0; i < t->npre; i++) {
		pcre2_code_free(t->pre[i].re);
		free(t->pre[i].repl);
	}
	free(t->pre);
	for (size_t i = 0; i < t->npost; i++)
		free(t->post[i].tmpl);
	free(t->post);
	for (size_t i = 0; i < t->nadded; i++)
		free(t->added[i].t.content), free(t->added[i].norm);
	free(t->added);
	free(t->bos), free(t->eos), free(t->label);
	free(t);
}

struct ld {
	struct mk_tokenizer *t;
	const struct mk_jsondoc *d;
	struct mk_err *err;
};

static int bad(struct ld *l, const char *fmt, const char *what)
{
	char w[160];
	return mk_err_set(l->err, MK_EFORMAT, "%s: %s%s", l->t->label, fmt,
			  what ? mk_text_escape(what, (size_t)-1, w, sizeof w) : "");
}

static int unsupported(struct ld *l, const char *what, const char *name)
{
	char w[160];
	return mk_err_set(l->err, MK_EUNSUPPORTED, "%s: %s '%s' is not supported by mk's tokenizer", l->t->label, what,
			  mk_text_escape(name, (size_t)-1, w, sizeof w));
}

/* the string member key of node, malloc'ed, or NULL (missing: *missing) */
static char *str_of(struct ld *l, size_t node, const char *key, size_t *len)
{
	size_t k = mk_jsondoc_get(l->d, node, key);
	if (mk_jsondoc_type(l->d, k) != MK_JSON_STRING)
		return NULL;
	return mk_jsondoc_node_string(l->d, k, len);
}

static bool bool_of(struct ld *l, size_t node, const char *key, bool dflt)
{
	bool v;
	size_t k = mk_jsondoc_get(l->d, node, key);
	return k != SIZE_MAX && !mk_jsondoc_node_bool(l->d, k, &v) ? v : dflt;
}

static bool is_null(struct ld *l, size_t node)
{
	return node == SIZE_MAX || mk_jsondoc_type(l->d, node) == MK_JSON_NULL;
}

static int grow(void **p, size_t *n, size_t sz)
{
	void *q = realloc(*p, (*n + 1) * sz);
	if (!q)
		return -1;
	memset((char *)q + *n * sz, 0, sz);
	*p = q;
	(*n)++;
	return 0;
}

/* a pattern object {"String": s} or {"Regex": r} */
static int pattern_of(struct ld *l, size_t node, const char *what, pcre2_code **re, char **lit, size_t *litlen)
{
	size_t k;
	bool regex = false;
	char msg[300];

	if ((k = mk_jsondoc_get(l->d, node, "pattern")) == SIZE_MAX)
		return bad(l, what, " has no pattern");
	size_t s = mk_jsondoc_get(l->d, k, "String");
	if (s == SIZE_MAX)
		s = mk_jsondoc_get(l->d, k, "Regex"), regex = true;
	size_t len;
	char *p = mk_jsondoc_type(l->d, s) == MK_JSON_STRING ? mk_jsondoc_node_string(l->d, s, &len) : NULL;
	if (!p)
		return bad(l, what, "'s pattern is not {\"String\": ...} or {\"Regex\": ...}");
	if (lit && !regex) {
		*lit = p, *litlen = len;
		return 0;
	}
	*re = re_compile(p, len, !regex, msg, sizeof msg);
	if (!*re) {
		char w[200];
		int rc = mk_err_set(l->err, MK_EUNSUPPORTED, "%s: %s pattern '%s' does not compile with PCRE2: %s",
				    l->t->label, what, mk_text_escape(p, len, w, sizeof w), msg);
		free(p);
		return rc;
	}
	free(p);
	return 0;
}

static int load_normalizer(struct ld *l, size_t node)
{
	struct mk_tokenizer *t = l->t;
	char *type;

	if (is_null(l, node))
		return 0;
	if (!(type = str_of(l, node, "type", NULL)))
		return bad(l, "a normalizer has no type", NULL);
	int rc = 0;
	if (!strcmp(type, "Sequence")) {
		size_t list = mk_jsondoc_get(l->d, node, "normalizers");
		for (size_t k = mk_jsondoc_first(l->d, list); k != SIZE_MAX && !rc; k = mk_jsondoc_next(l->d, k))
			rc = load_normalizer(l, k);
		free(type);
		return rc;
	}
	if (grow((void **)&t->norm, &t->nnorm, sizeof *t->norm)) {
		free(type);
		return mk_err_set(l->err, MK_ENOMEM, "out of memory");
	}
	struct norm *z = &t->norm[t->nnorm - 1];
	UErrorCode e = U_ZERO_ERROR;
	snprintf(z->type, sizeof z->type, "%s", type);
	if (!strcmp(type, "Prepend")) {
		z->kind = N_PREPEND;
		if (!(z->a = str_of(l, node, "prepend", &z->alen)))
			rc = bad(l, "normalizer Prepend has no string 'prepend'", NULL);
	} else if (!strcmp(type, "Replace")) {
		z->kind = N_REPLACE;
		rc = pattern_of(l, node, "normalizer Replace", &z->re, &z->a, &z->alen);
		if (!rc && !(z->b = str_of(l, node, "content", &z->blen)))
			rc = bad(l, "normalizer Replace has no string 'content'", NULL);
	} else if (!strcmp(type, "Strip")) {
		z->kind = N_STRIP;
		z->left = bool_of(l, node, "strip_left", true);
		z->right = bool_of(l, node, "strip_right", true);
	} else if (!strcmp(type, "NFC") || !strcmp(type, "NFKC") || !strcmp(type, "NFD") || !strcmp(type, "NFKD")) {
		z->kind = N_UNICODE;
		z->unorm = !strcmp(type, "NFC")	   ? unorm2_getNFCInstance(&e)
			   : !strcmp(type, "NFKC") ? unorm2_getNFKCInstance(&e)
			   : !strcmp(type, "NFD")  ? unorm2_getNFDInstance(&e)
						   : unorm2_getNFKDInstance(&e);
		if (U_FAILURE(e) || !z->unorm)
			rc = mk_err_set(l->err, MK_EUNSUPPORTED, "%s: normalizer %s: ICU has no data for it (%s)",
					t->label, type, u_errorName(e));
	} else {
		rc = unsupported(l, "normalizer", type);
	}
	free(type);
	return rc;
}

static int load_pre(struct ld *l, size_t node)
{
	struct mk_tokenizer *t = l->t;
	char *type, msg[300];

	if (is_null(l, node))
		return 0;
	if (!(type = str_of(l, node, "type", NULL)))
		return bad(l, "a pre-tokenizer has no type", NULL);
	int rc = 0;
	if (!strcmp(type, "Sequence")) {
		size_t list = mk_jsondoc_get(l->d, node, "pretokenizers");
		for (size_t k = mk_jsondoc_first(l->d, list); k != SIZE_MAX && !rc; k = mk_jsondoc_next(l->d, k))
			rc = load_pre(l, k);
		free(type);
		return rc;
	}
	if (grow((void **)&t->pre, &t->npre, sizeof *t->pre)) {
		free(type);
		return mk_err_set(l->err, MK_ENOMEM, "out of memory");
	}
	struct pre *z = &t->pre[t->npre - 1];
	snprintf(z->type, sizeof z->type, "%s", type);
	if (!strcmp(type, "ByteLevel")) {
		z->kind = P_BYTELEVEL;
		bytelevel_table(z);
		z->add_prefix_space = bool_of(l, node, "add_prefix_space", true);
		z->use_regex = bool_of(l, node, "use_regex", true);
		if (z->use_regex && !(z->re = re_compile(GPT2_PAT, sizeof GPT2_PAT - 1, false, msg, sizeof msg)))
			rc = mk_err_set(l->err, MK_EUNSUPPORTED, "%s: the ByteLevel pattern: %s", t->label, msg);
	} else if (!strcmp(type, "Split")) {
		char *b = str_of(l, node, "behavior", NULL);
		z->kind = P_SPLIT;
		z->invert = bool_of(l, node, "invert", false);
		if (!b)
			rc = bad(l, "pre-tokenizer Split has no behavior", NULL);
		else if (!strcmp(b, "Removed"))
			z->behavior = B_REMOVED;
		else if (!strcmp(b, "Isolated"))
			z->behavior = B_ISOLATED;
		else if (!strcmp(b, "MergedWithPrevious"))
			z->behavior = B_PREVIOUS;
		else if (!strcmp(b, "MergedWithNext"))
			z->behavior = B_NEXT;
		else if (!strcmp(b, "Contiguous"))
			z->behavior = B_CONTIGUOUS;
		else
			rc = unsupported(l, "Split behavior", b);
		free(b);
		if (!rc)
			rc = pattern_of(l, node, "pre-tokenizer Split", &z->re, NULL, NULL);
	} else if (!strcmp(type, "Digits")) {
		static const char pat[] = "\\p{N}";
		z->kind = P_SPLIT;
		z->behavior = bool_of(l, node, "individual_digits", false) ? B_ISOLATED : B_CONTIGUOUS;
		if (!(z->re = re_compile(pat, sizeof pat - 1, false, msg, sizeof msg)))
			rc = mk_err_set(l->err, MK_EUNSUPPORTED, "%s: Digits: %s", t->label, msg);
	} else if (!strcmp(type, "Metaspace")) {
		char *s;
		z->kind = P_METASPACE;
		if (!(z->repl = str_of(l, node, "replacement", &z->repl_len)) || !z->repl_len)
			rc = bad(l, "pre-tokenizer Metaspace has no replacement", NULL);
		z->split = bool_of(l, node, "split", true);
		if ((s = str_of(l, node, "prepend_scheme", NULL))) {
			if (!strcmp(s, "always"))
				z->scheme = PS_ALWAYS;
			else if (!strcmp(s, "first"))
				z->scheme = PS_FIRST;
			else if (!strcmp(s, "never"))
				z->scheme = PS_NEVER;
			else if (!rc)
				rc = unsupported(l, "Metaspace prepend_scheme", s);
			free(s);
		} else {
			z->scheme = bool_of(l, node, "add_prefix_space", true) ? PS_ALWAYS : PS_NEVER;
		}
	} else {
		rc = unsupported(l, "pre-tokenizer", type);
	}
	free(type);
	return rc;
}

static int add_post(struct ld *l, const int32_t *pre, size_t npre, const int32_t *suf, size_t nsuf)
{
	struct mk_tokenizer *t = l->t;
	if (grow((void **)&t->post, &t->npost, sizeof *t->post))
		return mk_err_set(l->err, MK_ENOMEM, "out of memory");
	struct post *p = &t->post[t->npost - 1];
	if (!(p->tmpl = malloc((npre + nsuf + 1) * sizeof *p->tmpl)))
		return mk_err_set(l->err, MK_ENOMEM, "out of memory");
	memcpy(p->tmpl, pre, npre * sizeof *pre);
	p->tmpl[npre] = -1;
	memcpy(p->tmpl + npre + 1, suf, nsuf * sizeof *suf);
	p->n = npre + nsuf + 1;
	return 0;
}

static int load_post(struct ld *l, size_t node)
{
	char *type;
	int rc = 0;

	if (is_null(l, node))
		return 0;
	if (!(type = str_of(l, node, "type", NULL)))
		return bad(l, "a post-processor has no type", NULL);
	if (!strcmp(type, "Sequence")) {
		size_t list = mk_jsondoc_get(l->d, node, "processors");
		for (size_t k = mk_jsondoc_first(l->d, list); k != SIZE_MAX && !rc; k = mk_jsondoc_next(l->d, k))
			rc = load_post(l, k);
	} else if (!strcmp(type, "ByteLevel")) {
		/* offsets only */
	} else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
		long long c = -1, s = -1;
		size_t cn = mk_jsondoc_get(l->d, node, "cls"), sn = mk_jsondoc_get(l->d, node, "sep");
		mk_jsondoc_node_int(l->d, mk_jsondoc_next(l->d, mk_jsondoc_first(l->d, cn)), &c);
		mk_jsondoc_node_int(l->d, mk_jsondoc_next(l->d, mk_jsondoc_first(l->d, sn)), &s);
		if (c < 0 || s < 0 || c > INT32_MAX || s > INT32_MAX)
			rc = mk_err_set(l->err, MK_EFORMAT, "%s: post-processor %s: cls or sep is not [token, id]",
					l->t->label, type);
		else {
			int32_t a = (int32_t)c, b = (int32_t)s;
			rc = add_post(l, &a, 1, &b, 1);
		}
	} else if (!strcmp(type, "TemplateProcessing")) {
		size_t single = mk_jsondoc_get(l->d, node, "single"), sp = mk_jsondoc_get(l->d, node, "special_tokens");
		int32_t pre[64], suf[64];
		size_t npre = 0, nsuf = 0;
		bool seen = false;
		if (mk_jsondoc_type(l->d, single) != MK_JSON_ARRAY)
			rc = bad(l, "TemplateProcessing has no 'single' list", NULL);
		for (size_t k = mk_jsondoc_first(l->d, single); k != SIZE_MAX && !rc; k = mk_jsondoc_next(l->d, k)) {
			size_t st = mk_jsondoc_get(l->d, k, "SpecialToken"), sq = mk_jsondoc_get(l->d, k, "Sequence");
			if (sq != SIZE_MAX) {
				char *id = str_of(l, sq, "id", NULL);
				if (!id || strcmp(id, "A") || seen)
					rc = bad(l, "TemplateProcessing's single template has a sequence other than one $A",
						 NULL);
				seen = true;
				free(id);
				continue;
			}
			char *name = st != SIZE_MAX ? str_of(l, st, "id", NULL) : NULL;
			size_t tok = name ? mk_jsondoc_get(l->d, sp, name) : SIZE_MAX;
			size_t ids = mk_jsondoc_get(l->d, tok, "ids");
			if (!name || mk_jsondoc_type(l->d, ids) != MK_JSON_ARRAY)
				rc = bad(l, "TemplateProcessing names a special token it does not define: ",
					 name ? name : "(none)");
			for (size_t x = mk_jsondoc_first(l->d, ids); x != SIZE_MAX && !rc; x = mk_jsondoc_next(l->d, x)) {
				long long v;
				if (mk_jsondoc_node_int(l->d, x, &v) || v < 0 || v > INT32_MAX)
					rc = bad(l, "TemplateProcessing: a special token id is not an id: ", name);
				else if ((seen ? nsuf : npre) >= 64)
					rc = unsupported(l, "TemplateProcessing with more than 64 special ids", name);
				else if (seen)
					suf[nsuf++] = (int32_t)v;
				else
					pre[npre++] = (int32_t)v;
			}
			free(name);
		}
		if (!rc && !seen)
			rc = bad(l, "TemplateProcessing's single template has no $A", NULL);
		if (!rc)
			rc = add_post(l, pre, npre, suf, nsuf);
	} else {
		rc = unsupported(l, "post-processor", type);
	}
	free(type);
	return rc;
}

static int load_model(struct ld *l, size_t m)
{
	struct mk_tokenizer *t = l->t;
	char *type = str_of(l, m, "type", NULL), *s;
	int rc = 0;
	size_t k;

	if (!type)
		return bad(l, "model has no type (only BPE is supported)", NULL);
	if (strcmp(type, "BPE")) {
		rc = unsupported(l, "model type", type);
		free(type);
		return rc;
	}
	free(type);
	k = mk_jsondoc_get(l->d, m, "dropout");
	if (!is_null(l, k))
		return unsupported(l, "BPE option", "dropout");
	static const char *const nulls[] = {"continuing_subword_prefix", "end_of_word_suffix"};
	for (size_t i = 0; i < 2; i++) {
		if ((s = str_of(l, m, nulls[i], NULL))) {
			bool empty = !*s;
			free(s);
			if (!empty)
				return unsupported(l, "BPE option", nulls[i]);
		}
	}
	t->byte_fallback = bool_of(l, m, "byte_fallback", false);
	t->fuse_unk = bool_of(l, m, "fuse_unk", false);
	t->ignore_merges = bool_of(l, m, "ignore_merges", false);
	size_t v = mk_jsondoc_get(l->d, m, "vocab");
	if (mk_jsondoc_type(l->d, v) != MK_JSON_OBJECT)
		return bad(l, "model.vocab is not an object", NULL);
	for (k = mk_jsondoc_first(l->d, v); k != SIZE_MAX; k = mk_jsondoc_next(l->d, k)) {
		long long id;
		const char *key = mk_jsondoc_key(l->d, k);
		size_t klen = 0;
		if (!key)
			return bad(l, "model.vocab has a key that does not decode", NULL);
		klen = strlen(key);
		if (mk_jsondoc_node_int(l->d, k, &id) || id < 0 || id > INT32_MAX)
			return bad(l, "model.vocab: the id of this token is not an integer id: ", key);
		if (smap_put(&t->vocab, key, klen, (int32_t)id))
			return mk_err_set(l->err, MK_ENOMEM, "out of memory");
		if ((size_t)id + 1 > t->vocab_size)
			t->vocab_size = (size_t)id + 1;
	}
	for (int b = 0; b < 256; b++) {
		char nm[8];
		snprintf(nm, sizeof nm, "<0x%02X>", b);
		t->byte_id[b] = smap_get(&t->vocab, nm, strlen(nm));
	}
	t->unk = -1;
	if ((s = str_of(l, m, "unk_token", NULL))) {
		t->unk = smap_get(&t->vocab, s, strlen(s));
		if (t->unk < 0)
			rc = bad(l, "model.unk_token is not in model.vocab: ", s);
		free(s);
		if (rc)
			return rc;
	}
	size_t ms = mk_jsondoc_get(l->d, m, "merges");
	if (ms != SIZE_MAX && mk_jsondoc_type(l->d, ms) != MK_JSON_ARRAY)
		return bad(l, "model.merges is not a list", NULL);
	uint32_t rank = 0;
	for (k = mk_jsondoc_first(l->d, ms); k != SIZE_MAX; k = mk_jsondoc_next(l->d, k), rank++) {
		char *a = NULL, *b = NULL;
		size_t al = 0, bl = 0;
		if (mk_jsondoc_type(l->d, k) == MK_JSON_STRING) {
			size_t n;
			a = mk_jsondoc_node_string(l->d, k, &n);
			char *sp = a ? memchr(a, ' ', n) : NULL;
			if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - a))) {
				rc = bad(l, "model.merges: a merge is not two tokens separated by a space: ", a);
				free(a);
				return rc;
			}
			*sp = '\0';
			al = (size_t)(sp - a), b = strdup(sp + 1), bl = n - al - 1;
			if (!b) {
				free(a);
				return mk_err_set(l->err, MK_ENOMEM, "out of memory");
			}
		} else if (mk_jsondoc_type(l->d, k) == MK_JSON_ARRAY && mk_jsondoc_count(l->d, k) == 2) {
			size_t x = mk_jsondoc_first(l->d, k), y = mk_jsondoc_next(l->d, x);
			if (mk_jsondoc_type(l->d, x) == MK_JSON_STRING && mk_jsondoc_type(l->d, y) == MK_JSON_STRING)
				a = mk_jsondoc_node_string(l->d, x, &al), b = mk_jsondoc_node_string(l->d, y, &bl);
			if (!a || !b) {
				free(a), free(b);
				return bad(l, "model.merges: a merge is not a pair of strings", NULL);
			}
		} else {
			return bad(l, "model.merges: a merge is not \"a b\" or [a, b]", NULL);
		}
		int32_t ia = smap_get(&t->vocab, a, al), ib = smap_get(&t->vocab, b, bl), im = -1;
		char *c = malloc(al + bl + 1);
		if (c) {
			memcpy(c, a, al), memcpy(c + al, b, bl);
			im = smap_get(&t->vocab, c, al + bl);
		}
		if (!c)
			rc = mk_err_set(l->err, MK_ENOMEM, "out of memory");
		else if (ia < 0 || ib < 0 || im < 0) {
			char w1[80], w2[80];
			rc = mk_err_set(l->err, MK_EFORMAT, "%s: model.merges: merge %u ('%s' '%s') %s", t->label, rank,
					mk_text_escape(a, al, w1, sizeof w1), mk_text_escape(b, bl, w2, sizeof w2),
					im < 0 && ia >= 0 && ib >= 0 ? "makes a token not in model.vocab"
								     : "names a token not in model.vocab");
		} else if (pmap_put(&t->merges, ia, ib, rank, im))
			rc = mk_err_set(l->err, MK_ENOMEM, "out of memory");
		free(a), free(b), free(c);
		if (rc)
			return rc;
	}
	return 0;
}

static int load_added(struct ld *l, size_t list)
{
	struct mk_tokenizer *t = l->t;

	if (is_null(l, list))
		return 0;
	if (mk_jsondoc_type(l->d, list) != MK_JSON_ARRAY)
		return bad(l, "added_tokens is not a list", NULL);
	for (size_t k = mk_jsondoc_first(l->d, list); k != SIZE_MAX; k = mk_jsondoc_next(l->d, k)) {
		long long id;
		size_t len;
		char *c = str_of(l, k, "content", &len);
		if (!c || mk_jsondoc_node_int(l->d, mk_jsondoc_get(l->d, k, "id"), &id) || id < 0 || id > INT32_MAX) {
			free(c);
			return bad(l, "an added token has no string content or no integer id", NULL);
		}
		if (!len) { /* tokenizers ignores empty added tokens */
			free(c);
			continue;
		}
		if (grow((void **)&t->added, &t->nadded, sizeof *t->added)) {
			free(c);
			return mk_err_set(l->err, MK_ENOMEM, "out of memory");
		}
		struct atok *a = &t->added[t->nadded - 1];
		a->t.content = c, a->len = len, a->t.id = id;
		a->t.special = bool_of(l, k, "special", false);
		a->t.normalized = bool_of(l, k, "normalized", !a->t.special);
		a->t.lstrip = bool_of(l, k, "lstrip", false);
		a->t.rstrip = bool_of(l, k, "rstrip", false);
		a->t.single_word = bool_of(l, k, "single_word", false);
		if (smap_put(&t->added_map, c, len, (int32_t)id))
			return mk_err_set(l->err, MK_ENOMEM, "out of memory");
		if ((size_t)id + 1 > t->vocab_size)
			t->vocab_size = (size_t)id + 1;
	}
	return 0;
}

int mk_tokenizer_parse(const char *json, size_t len, const char *label, struct mk_tokenizer **out,
		       struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	struct mk_tokenizer *t = calloc(1, sizeof *t);
	int rc;

	*out = NULL;
	if (!t || !(t->label = strdup(label ? label : "tokenizer.json"))) {
		free(t);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if ((rc = mk_jsondoc_parse(json, len, t->label, &d, err)))
		goto fail;
	struct ld l = {t, d, err};
	if (mk_jsondoc_root_type(d) != MK_JSON_OBJECT) {
		rc = bad(&l, "not a JSON object", NULL);
		goto fail;
	}
	size_t root = mk_jsondoc_at(d, ""), m = mk_jsondoc_get(d, root, "model");
	if (!is_null(&l, mk_jsondoc_get(d, root, "truncation"))) {
		rc = unsupported(&l, "setting", "truncation");
		goto fail;
	}
	/* padding to the longest of a batch leaves one text as it is; a fixed
	 * length or a multiple would pad it */
	size_t pad = mk_jsondoc_get(d, root, "padding");
	if (!is_null(&l, pad)) {
		size_t st = mk_jsondoc_get(d, pad, "strategy");
		char *sv = mk_jsondoc_type(d, st) == MK_JSON_STRING ? mk_jsondoc_node_string(d, st, NULL) : NULL;
		bool longest = sv && !strcmp(sv, "BatchLongest");
		free(sv);
		if (!longest || !is_null(&l, mk_jsondoc_get(d, pad, "pad_to_multiple_of"))) {
			rc = unsupported(&l, "setting", longest ? "padding.pad_to_multiple_of" : "padding to a fixed length");
			goto fail;
		}
	}
	if ((rc = load_model(&l, m)) || (rc = load_added(&l, mk_jsondoc_get(d, root, "added_tokens"))) ||
	    (rc = load_normalizer(&l, mk_jsondoc_get(d, root, "normalizer"))) ||
	    (rc = load_pre(&l, mk_jsondoc_get(d, root, "pre_tokenizer"))) ||
	    (rc = load_post(&l, mk_jsondoc_get(d, root, "post_processor"))))
		goto fail;
	/* the normalized added tokens are matched as the normalizers leave them */
	for (size_t i = 0; i < t->nadded; i++) {
		struct atok *a = &t->added[i];
		struct enc e = {t, err, a->len, enc_cap(a->len), false};
		if (a->t.normalized && normalize(&e, a->t.content, a->len, &a->norm, &a->nlen)) {
			char w[80];
			rc = e.said ? mk_err_prefix(err, "added token '%s': ", mk_text_escape(a->t.content, (size_t)-1, w, sizeof w))
				    : mk_err_set(err, MK_ENOMEM, "out of memory");
			goto fail;
		}
		unsigned char c0 = (unsigned char)(a->t.normalized ? (a->nlen ? a->norm[0] : 0) : a->t.content[0]);
		t->first[a->t.normalized][c0 >> 3] |= (uint8_t)(1u << (c0 & 7));
	}
	mk_jsondoc_free(d);
	*out = t;
	return 0;
fail:
	mk_jsondoc_free(d);
	mk_tokenizer_free(t);
	return rc;
}

int mk_tokenizer_set_bos_eos(struct mk_tokenizer *t, const char *bos, const char *eos, struct mk_err *err)
{
	char *b = bos ? strdup(bos) : NULL, *e = eos ? strdup(eos) : NULL;

	if ((bos && !b) || (eos && !e)) {
		free(b), free(e);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	free(t->bos), free(t->eos);
	t->bos = b, t->eos = e;
	return 0;
}

/* tokenizer_config.json's key (a string, or an {"content": ...} object), or NULL */
static char *config_token(const struct mk_jsondoc *d, const char *key)
{
	size_t n = mk_jsondoc_get(d, mk_jsondoc_at(d, ""), key);
	if (mk_jsondoc_type(d, n) == MK_JSON_OBJECT)
		n = mk_jsondoc_get(d, n, "content");
	if (mk_jsondoc_type(d, n) != MK_JSON_STRING)
		return NULL;
	return mk_jsondoc_node_string(d, n, NULL);
}

int mk_tokenizer_open(const char *path, struct mk_tokenizer **out, struct mk_err *err)
{
	struct stat st;
	struct mk_sbuf f = {0}, c = {0};
	uint8_t *buf = NULL;
	size_t len;
	bool dir = !stat(path, &st) && S_ISDIR(st.st_mode);
	int rc;

	*out = NULL;
	mk_sbuf_str(&f, path);
	if (dir)
		mk_sbuf_str(&f, "/tokenizer.json");
	if (f.oom) {
		free(f.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if ((rc = mk_file_read(f.p, TOK_FILE_MAX, &buf, &len, err)))
		goto out;
	if ((rc = mk_tokenizer_parse((const char *)buf, len, f.p, out, err)))
		goto out;
	free(buf);
	buf = NULL;
	if (!dir)
		goto out;
	mk_sbuf_str(&c, path);
	mk_sbuf_str(&c, "/tokenizer_config.json");
	if (c.oom) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (access(c.p, F_OK) == 0) {
		struct mk_jsondoc *d = NULL;
		if ((rc = mk_file_read(c.p, TOK_FILE_MAX, &buf, &len, err)) ||
		    (rc = mk_jsondoc_parse((const char *)buf, len, c.p, &d, err)))
			goto out;
		char *b = config_token(d, "bos_token"), *e = config_token(d, "eos_token");
		rc = mk_tokenizer_set_bos_eos(*out, b, e, err);
		free(b), free(e);
		mk_jsondoc_free(d);
		free(buf);
		buf = NULL;
		if (rc)
			goto out;
	}
	/* special_tokens_map.json, where there is one, has the last word (as
	 * in transformers 5) */
	{
		struct mk_sbuf m = {0};
		mk_sbuf_str(&m, path);
		mk_sbuf_str(&m, "/special_tokens_map.json");
		if (!m.oom && access(m.p, F_OK) == 0) {
			struct mk_jsondoc *d = NULL;
			if (!(rc = mk_file_read(m.p, TOK_FILE_MAX, &buf, &len, err)) &&
			    !(rc = mk_jsondoc_parse((const char *)buf, len, m.p, &d, err))) {
				char *b = config_token(d, "bos_token"), *e = config_token(d, "eos_token");
				if (!b && (*out)->bos)
					b = strdup((*out)->bos);
				if (!e && (*out)->eos)
					e = strdup((*out)->eos);
				rc = mk_tokenizer_set_bos_eos(*out, b, e, err);
				free(b), free(e);
			}
			mk_jsondoc_free(d);
		}
		free(m.p);
	}
out:
	if (rc) {
		mk_tokenizer_free(*out);
		*out = NULL;
	}
	free(buf);
	free(f.p), free(c.p);
	return rc;
}
