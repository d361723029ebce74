/* match.c - token normalisation and matching (match.h).
 *
 * Lengths and prefixes count code points, as Python's str does: a
 * prefix is cut at a code point boundary, and a blank prefix (only
 * whitespace as str.isspace() sees it) ends the search. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "surgeon/match.h"
#include "surgeon_impl.h"

const char *const mk_surgeon_special_names[MK_SURGEON_NSPECIAL] = {
	"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
};

#define MARK_G "\xc4\xa0"       /* U+0120 Ġ */
#define MARK_SP "\xe2\x96\x81"  /* U+2581 ▁ */

enum mk_surgeon_space mk_surgeon_space_of(const char *cls, bool has_g_hello)
{
	static const char *const gpt2[] = { "GPT2Tokenizer", "OpenAIGPTTokenizer", "Qwen2Tokenizer" };
	static const char *const spm[] = { "LlamaTokenizer", "T5Tokenizer", "GemmaTokenizer" };
	size_t n = cls ? strlen(cls) : 0;

	if (n > 4 && strcmp(cls + n - 4, "Fast") == 0)
		n -= 4;
	for (size_t i = 0; i < 3; i++)
		if (strlen(gpt2[i]) == n && strncmp(cls, gpt2[i], n) == 0)
			return MK_SURGEON_SPACE_BYTELEVEL;
	for (size_t i = 0; i < 3; i++)
		if (strlen(spm[i]) == n && strncmp(cls, spm[i], n) == 0)
			return has_g_hello ? MK_SURGEON_SPACE_BYTELEVEL : MK_SURGEON_SPACE_METASPACE;
	return MK_SURGEON_SPACE_BYTELEVEL;
}

static uint64_t key_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

long long mk_surgeon_vocab_find(const struct mk_surgeon_vocab *v, const char *key)
{
	if (!v->hcap)
		return -1;
	for (size_t i = key_hash(key) & (v->hcap - 1);; i = (i + 1) & (v->hcap - 1)) {
		uint32_t s = v->hslot[i];
		if (!s)
			return -1;
		if (strcmp(v->key[s - 1], key) == 0)
			return (long long)s - 1;
	}
}

void mk_surgeon_vocab_free(struct mk_surgeon_vocab *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++)
		free(v->key[i]);
	free(v->key);
	free(v->hslot);
	free(v);
}

static char *tagged(char tag, const char *text)
{
	size_t n = strlen(text);
	char *k = malloc(n + 2);
	if (k) {
		k[0] = tag;
		memcpy(k + 1, text, n + 1);
	}
	return k;
}

int mk_surgeon_vocab_build(const char *const *token, size_t n, const char *const *special,
			   enum mk_surgeon_space space, struct mk_surgeon_vocab **out, struct mk_err *err)
{
	const char *mark = space == MK_SURGEON_SPACE_METASPACE ? MARK_SP : MARK_G;
	size_t ml = strlen(mark);
	struct mk_surgeon_vocab *v = calloc(1, sizeof(*v));

	*out = NULL;
	if (n >= UINT32_MAX)
		return free(v), mk_err_set(err, MK_EINVAL, "tokensurgeon: a vocabulary of %zu ids is too large", n);
	if (!v || !(v->key = surgeon_alloc(n, sizeof(char *))))
		goto oom;
	v->n = n;
	v->hcap = 16;
	while (v->hcap < 2 * n)
		v->hcap *= 2;
	if (!(v->hslot = surgeon_alloc(v->hcap, sizeof(uint32_t))))
		goto oom;
	for (size_t id = 0; id < n; id++) {
		const char *t = token[id];
		if (!t)
			continue;
		if (strncmp(t, mark, ml) == 0) {
			v->key[id] = tagged('W', t + ml);
		} else {
			size_t s;
			for (s = 0; s < MK_SURGEON_NSPECIAL; s++)
				if (special && special[s] && strcmp(special[s], t) == 0)
					break;
			v->key[id] = s < MK_SURGEON_NSPECIAL ? tagged('S', mk_surgeon_special_names[s]) : tagged('T', t);
		}
		if (!v->key[id])
			goto oom;
		long long dup = mk_surgeon_vocab_find(v, v->key[id]);
		if (dup >= 0) {
			int rc = mk_err_set(err, MK_EINVAL, "tokensurgeon: tokens %lld and %zu ('%s') normalise alike", dup,
					    id, t);
			mk_surgeon_vocab_free(v);
			return rc;
		}
		size_t i = key_hash(v->key[id]) & (v->hcap - 1);
		while (v->hslot[i])
			i = (i + 1) & (v->hcap - 1);
		v->hslot[i] = (uint32_t)id + 1;
	}
	*out = v;
	return 0;
oom:
	mk_surgeon_vocab_free(v);
	return mk_err_set(err, MK_ENOMEM, "tokensurgeon: out of memory for a vocabulary of %zu ids", n);
}

const char *mk_surgeon_key_text(const char *key, char *buf, size_t cap)
{
	if (key[0] != 'W')
		return key + 1;
	size_t n = strlen(key + 1);
	if (n + 2 > cap)
		return NULL;
	buf[0] = ' ';
	memcpy(buf + 1, key + 1, n + 1);
	return buf;
}

/* one UTF-8 code point at s (len bytes left): its value, *adv its bytes
 * (a stray byte counts as one code point of its own value) */
static unsigned utf8_next(const unsigned char *s, size_t len, size_t *adv)
{
	unsigned c = s[0];
	size_t m = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
	if (m > len)
		m = 1;
	for (size_t i = 1; i < m; i++)
		if ((s[i] & 0xC0) != 0x80)
			m = 1;
	*adv = m;
	if (m == 1)
		return c;
	unsigned v = c & (0x7F >> m);
	for (size_t i = 1; i < m; i++)
		v = (v << 6) | (s[i] & 0x3F);
	return v;
}

/* Python's str.isspace() */
static bool py_space(unsigned c)
{
	return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
	       c == 0x3000;
}

static int hexval(unsigned c)
{
	return c >= '0' && c <= '9' ? (int)c - '0' : c >= 'a' && c <= 'f' ? (int)c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? (int)c - 'A' + 10 : -1;
}

static long long byte_match(const struct mk_surgeon_vocab *m, const char *key, const uint8_t *keep, size_t rows)
{
	const unsigned char *s = (const unsigned char *)key + 1;
	size_t len = strlen(key + 1), adv, cps = 0;
	unsigned cp[7];
	char buf[16];

	if (key[0] != 'T')
		return -1;
	for (size_t i = 0; i < len && cps < 7; i += adv)
		cp[cps++] = utf8_next(s + i, len - i, &adv);
	if (cps == 1 && cp[0] < 256) {
		snprintf(buf, sizeof buf, "T<0x%02X>", cp[0]);
	} else if (cps == 6 && cp[0] == '<' && cp[1] == '0' && cp[2] == 'x' && cp[5] == '>') {
		/* int(text, 16) of two code points: two hex digits, or one
		 * with a sign or blank before it (a blank after it) */
		int h = hexval(cp[3]), l = hexval(cp[4]), v;
		if (h >= 0 && l >= 0)
			v = h * 16 + l;
		else if (l >= 0 && (cp[3] == '+' || py_space(cp[3])))
			v = l;
		else if (h >= 0 && py_space(cp[4]))
			v = h;
		else if (cp[3] == '-' && l == 0)
			v = 0;
		else
			return -1;
		buf[0] = 'T';
		if (v < 0x80)
			buf[1] = (char)v, buf[2] = 0;
		else
			buf[1] = (char)(0xC0 | (v >> 6)), buf[2] = (char)(0x80 | (v & 0x3F)), buf[3] = 0;
	} else {
		return -1;
	}
	long long id = mk_surgeon_vocab_find(m, buf);
	return id >= 0 && (size_t)id < rows && (!keep || keep[id]) ? id : -1;
}

static long long prefix_match(const struct mk_surgeon_vocab *m, const char *key, const uint8_t *keep, size_t rows,
			      char *buf)
{
	size_t len = strlen(key + 1), adv, ncp = 0;
	const unsigned char *s = (const unsigned char *)key + 1;

	if (key[0] == 'S')
		return -1;
	/* ends of the code points: a prefix of i code points is s[0 .. end) */
	size_t *end = surgeon_alloc(len + 1, sizeof(size_t));
	bool *blank = surgeon_alloc(len + 1, sizeof(bool));
	if (!end || !blank) {
		free(end), free(blank);
		return -2;
	}
	bool all_blank = true;
	for (size_t i = 0; i < len; i += adv) {
		unsigned c = utf8_next(s + i, len - i, &adv);
		all_blank = all_blank && py_space(c);
		end[ncp] = i + adv;
		blank[ncp] = all_blank;  /* prefix of ncp + 1 code points all blank */
		ncp++;
	}
	long long found = -1;
	for (size_t i = ncp - (ncp > 0); i-- > 0;) {
		/* the prefix of i + 1 code points */
		if (blank[i])
			break;
		buf[0] = key[0];
		memcpy(buf + 1, s, end[i]);
		buf[1 + end[i]] = 0;
		long long id = mk_surgeon_vocab_find(m, buf);
		if (id >= 0 && (size_t)id < rows && (!keep || keep[id])) {
			found = id;
			break;
		}
	}
	free(end), free(blank);
	return found;
}

static bool usable(const struct mk_surgeon_vocab *v, long long id, size_t rows, const uint8_t *keep)
{
	return id >= 0 && (size_t)id < rows && (!keep || keep[id]);
}

int mk_surgeon_match(const struct mk_surgeon_vocab *model, const struct mk_surgeon_vocab *donor,
		     const struct mk_surgeon_match_opts *o, int64_t *row, struct mk_surgeon_stats *st,
		     struct mk_err *err)
{
	size_t longest = 0;
	struct mk_surgeon_stats z = { 0 };

	for (size_t id = 0; id < donor->n; id++)
		if (donor->key[id] && strlen(donor->key[id]) > longest)
			longest = strlen(donor->key[id]);
	char *buf = malloc(longest + 2);
	if (!buf)
		return mk_err_set(err, MK_ENOMEM, "tokensurgeon: out of memory matching tokens");
	for (size_t id = 0; id < donor->n; id++) {
		const char *key = donor->key[id];
		long long m;
		row[id] = MK_SURGEON_ZERO;
		if (!key || id >= o->donor_rows) {
			z.zero++;
			continue;
		}
		if (usable(model, m = mk_surgeon_vocab_find(model, key), o->model_rows, o->model_keep)) {
			row[id] = m, z.exact++;
		} else if (o->byte_match && (m = byte_match(model, key, o->model_keep, o->model_rows)) >= 0) {
			row[id] = m, z.byte++;
		} else if (o->prefix_match && (m = prefix_match(model, key, o->model_keep, o->model_rows, buf)) != -1) {
			if (m == -2) {
				free(buf);
				return mk_err_set(err, MK_ENOMEM, "tokensurgeon: out of memory matching tokens");
			}
			row[id] = m, z.prefix++;
		} else {
			row[id] = MK_SURGEON_APPROX, z.approx++;
		}
	}
	free(buf);
	if (o->junk)
		for (size_t id = 0; id < donor->n && id < o->donor_rows; id++)
			if (o->junk[id] && donor->key[id] && row[id] != MK_SURGEON_ZERO) {
				/* counted where it was matched; zeroed after all */
				row[id] = MK_SURGEON_ZERO, z.zero++;
			}
	if (st)
		*st = z;
	return 0;
}

int mk_surgeon_shared(const struct mk_surgeon_vocab *model, const struct mk_surgeon_vocab *donor,
		      const struct mk_surgeon_match_opts *o, size_t *n, int64_t **donor_ids, int64_t **model_ids,
		      struct mk_err *err)
{
	size_t cnt = 0, lim = donor->n < o->donor_rows ? donor->n : o->donor_rows;

	*n = 0, *donor_ids = NULL, *model_ids = NULL;
	for (size_t id = 0; id < lim; id++)
		if (donor->key[id] && usable(model, mk_surgeon_vocab_find(model, donor->key[id]), o->model_rows,
					     o->model_keep))
			cnt++;
	if (!cnt)
		return 0;
	int64_t *d = surgeon_alloc(cnt, sizeof(int64_t)), *m = surgeon_alloc(cnt, sizeof(int64_t));
	if (!d || !m) {
		free(d), free(m);
		return mk_err_set(err, MK_ENOMEM, "tokensurgeon: out of memory for %zu shared tokens", cnt);
	}
	cnt = 0;
	for (size_t id = 0; id < lim; id++) {
		long long mi;
		if (donor->key[id] && usable(model, mi = mk_surgeon_vocab_find(model, donor->key[id]), o->model_rows,
					     o->model_keep))
			d[cnt] = (int64_t)id, m[cnt] = mi, cnt++;
	}
	*n = cnt, *donor_ids = d, *model_ids = m;
	return 0;
}
