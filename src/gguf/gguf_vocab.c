/* gguf_vocab.c - convert_hf_to_gguf.py's tokenizer keys (gguf_vocab.h). */
#include "gguf/gguf_vocab.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/hash.h"
#include "core/jsondoc.h"
#include "gguf/gguf_write.h"
#include "mk/err.h"
#include "mk/tokenize.h"
#include "tokenizer/vocab.h"

#define MK_GGUF_PRE_CHKTXT_WANTED
#include "gguf/gguf_pre_hashes.inc"
#undef MK_GGUF_PRE_CHKTXT_WANTED

static const struct { const char *hash, *name; } pre_table[] = {
#include "gguf/gguf_pre_hashes.inc"
};

#define FILE_MAX (256u << 20)

enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

const char *mk_gguf_vocab_chktxt(void)
{
	return mk_gguf_pre_chktxt;
}

int mk_gguf_vocab_pre(const int32_t *ids, size_t n, char *out, size_t cap, char *hash_hex,
		      struct mk_err *err)
{
	struct mk_sha256 s;
	uint8_t h[32];
	char hex[65], num[16];

	/* str() of a Python list: "[1, 2, 3]" */
	mk_sha256_init(&s);
	mk_sha256_update(&s, "[", 1);
	for (size_t i = 0; i < n; i++) {
		int l = snprintf(num, sizeof num, i ? ", %d" : "%d", (int)ids[i]);
		mk_sha256_update(&s, num, (size_t)l);
	}
	mk_sha256_update(&s, "]", 1);
	mk_sha256_final(&s, h);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", h[i]);
	if (hash_hex)
		memcpy(hash_hex, hex, 65);
	const char *name = NULL;
	for (size_t i = 0; i < sizeof pre_table / sizeof pre_table[0]; i++)
		if (!strcmp(pre_table[i].hash, hex))
			name = pre_table[i].name;   /* the last row wins, as in convert */
	if (!name)
		return mk_err_set(err, MK_EUNSUPPORTED, "BPE pre-tokenizer not recognized: the check text's ids "
				  "hash to %s, which convert_hf_to_gguf.py's table lacks; llama.cpp would not know "
				  "how to pre-tokenize for this model", hex);
	if (strlen(name) >= cap)
		return mk_err_set(err, MK_EINVAL, "pre-tokenizer name %s: buffer too small", name);
	strcpy(out, name);
	return 0;
}

/* ------------------------------------------------------------ files */

static bool is_file(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Read and parse dir/name; *d NULL when the file is absent. */
static int json_open(const char *dir, const char *name, struct mk_jsondoc **d, char *label, size_t cap,
		     struct mk_err *err)
{
	uint8_t *buf = NULL;
	size_t len = 0;

	*d = NULL;
	snprintf(label, cap, "%s/%s", dir, name);
	if (!is_file(label))
		return 0;
	int rc = mk_file_read(label, FILE_MAX, &buf, &len, err);
	if (rc < 0)
		return rc;
	rc = mk_jsondoc_parse((const char *)buf, len, label, d, err);
	free(buf);
	return rc < 0 ? rc : 1;
}

static char *jstr(const struct mk_jsondoc *d, size_t n)
{
	size_t len;
	if (n == SIZE_MAX || mk_jsondoc_type(d, n) != MK_JSON_STRING)
		return NULL;
	return mk_jsondoc_node_string(d, n, &len);
}

/* ------------------------------------------------ the special tokens */

/* SpecialVocab's state: token types in order, their ids and add_ flags
 * in the order set. */
enum { ST_BOS, ST_EOS, ST_UNK, ST_SEP, ST_PAD, ST_CLS, ST_MASK, ST_EOT, ST_EOM, ST_N };
static const char *const st_name[ST_N] = { "bos", "eos", "unk", "sep", "pad", "cls", "mask", "eot", "eom" };
static const char *const st_key[ST_N] = {
	"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
	"tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id", NULL,
	"tokenizer.ggml.mask_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
};

struct special {
	int types[ST_N];
	int ntypes;
	int id_order[ST_N], nid;
	long long id[ST_N];
	int add_order[ST_N], nadd;
	bool add[ST_N];
	/* tokenizer_config.json's token texts (NULL: none or not a string);
	 * tc_tok_dict: that value is an object (its content in tc_tok) */
	char *tc_tok[ST_N];
	bool tc_tok_dict[ST_N];
	bool have_tc;
};

static bool has_add(const struct special *s, int t)
{
	for (int i = 0; i < s->nadd; i++)
		if (s->add_order[i] == t)
			return true;
	return false;
}

static void set_add(struct special *s, int t, bool v, bool only_if_unset)
{
	if (has_add(s, t)) {
		if (!only_if_unset)
			s->add[t] = v;
		return;
	}
	s->add_order[s->nadd++] = t;
	s->add[t] = v;
}

static bool has_id(const struct special *s, int t)
{
	for (int i = 0; i < s->nid; i++)
		if (s->id_order[i] == t)
			return true;
	return false;
}

static int set_id(struct special *s, int t, long long id, const char *label, struct mk_err *err)
{
	if (id < 0)
		return mk_err_set(err, MK_EFORMAT, "%s: invalid value for special token type %s: %lld", label,
				  st_name[t], id);
	if (has_id(s, t))
		return 0;
	s->id_order[s->nid++] = t;
	s->id[t] = id;
	return 0;
}

/* strcmp with NULL as None (equal only to None) */
static bool same(const char *a, const char *b)
{
	return a && b ? !strcmp(a, b) : a == b;
}

static int set_tc(struct special *s, int t, const char *v)
{
	free(s->tc_tok[t]);
	s->tc_tok[t] = v ? strdup(v) : NULL;
	s->tc_tok_dict[t] = false;
	return v && !s->tc_tok[t] ? -1 : 0;
}

/* A string field "id" of obj.key ({"SpecialToken": {"id": ...}}). */
static char *special_token_id(const struct mk_jsondoc *d, size_t item)
{
	size_t st = mk_jsondoc_get(d, item, "SpecialToken");
	if (st == SIZE_MAX || mk_jsondoc_type(d, st) != MK_JSON_OBJECT)
		return NULL;
	return jstr(d, mk_jsondoc_get(d, st, "id"));
}

/* The post-processor's part (SpecialVocab reads tokenizer.json's
 * post_processor or each of its processors). */
static int post_processor(struct special *s, const struct mk_jsondoc *tj, const char *label, struct mk_err *err)
{
	size_t pp = mk_jsondoc_get(tj, mk_jsondoc_at(tj, ""), "post_processor");
	if (pp == SIZE_MAX || mk_jsondoc_type(tj, pp) != MK_JSON_OBJECT || mk_jsondoc_count(tj, pp) == 0)
		return 0;
	size_t list = mk_jsondoc_get(tj, pp, "processors");
	size_t it = list != SIZE_MAX ? mk_jsondoc_first(tj, list) : pp;
	int rc = 0;
	char *first = NULL, *last = NULL, *type = NULL;
	for (; it != SIZE_MAX; it = list != SIZE_MAX ? mk_jsondoc_next(tj, it) : SIZE_MAX) {
		free(type);
		type = jstr(tj, mk_jsondoc_get(tj, it, "type"));
		if (!type)
			continue;
		if (!strcmp(type, "ByteLevel")) {
			set_add(s, ST_BOS, false, true);
			set_add(s, ST_EOS, false, true);
		} else if (!strcmp(type, "RobertaProcessing")) {
			set_add(s, ST_BOS, true, false);
			set_add(s, ST_EOS, true, false);
			set_add(s, ST_SEP, true, false);
			rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: a RobertaProcessing post-processor is not covered",
					label);
			goto out;
		} else if (!strcmp(type, "TemplateProcessing")) {
			size_t single = mk_jsondoc_get(tj, it, "single");
			size_t pair = mk_jsondoc_get(tj, it, "pair");
			free(first);
			free(last);
			first = last = NULL;
			size_t ns = single != SIZE_MAX ? mk_jsondoc_count(tj, single) : 0;
			if (ns > 1) {
				size_t f = mk_jsondoc_first(tj, single), l = f;
				while (mk_jsondoc_next(tj, l) != SIZE_MAX)
					l = mk_jsondoc_next(tj, l);
				if ((first = special_token_id(tj, f)) && *first) {
					const char *bos = s->tc_tok[ST_BOS], *cls = s->tc_tok[ST_CLS];
					if (!s->have_tc) {
						if (set_tc(s, ST_BOS, first) < 0)
							goto oom;
					} else if (!same(first, bos) && !same(first, cls)) {
						if (!bos && set_tc(s, ST_BOS, first) < 0)
							goto oom;
						if (!cls && set_tc(s, ST_CLS, first) < 0)
							goto oom;
					}
					bos = s->tc_tok[ST_BOS];
					cls = s->tc_tok[ST_CLS];
					set_add(s, ST_BOS, same(first, bos) || same(first, cls), false);
				} else if (first && !*first) {
					free(first);
					first = NULL;
				}
				if ((last = special_token_id(tj, l)) && *last) {
					const char *eos = s->tc_tok[ST_EOS];
					if (!s->have_tc) {
						if (set_tc(s, ST_EOS, last) < 0)
							goto oom;
					} else if (!same(last, eos)) {
						rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: a TemplateProcessing that ends "
								"in %s, not the EOS token, is not covered (convert makes "
								"it an EOT/EOM token)", label, last);
						goto out;
					}
					set_add(s, ST_EOS, same(last, s->tc_tok[ST_EOS]), false);
				} else if (last && !*last) {
					free(last);
					last = NULL;
				}
			}
			size_t np = pair != SIZE_MAX ? mk_jsondoc_count(tj, pair) : 0;
			if (np) {
				/* the pair template without the single one's first/last */
				size_t items[64], k = 0;
				for (size_t p = mk_jsondoc_first(tj, pair); p != SIZE_MAX && k < 64; p = mk_jsondoc_next(tj, p))
					items[k++] = p;
				size_t a = 0, b = k;
				char *t0 = special_token_id(tj, items[0]), *tl = special_token_id(tj, items[k - 1]);
				if (first && same(t0, first))
					a = 1;
				if (last && same(tl, last))
					b = k - 1;
				free(t0);
				free(tl);
				if (a < b) {
					size_t sa = mk_jsondoc_get(tj, items[a], "Sequence");
					size_t sb = mk_jsondoc_get(tj, items[b - 1], "Sequence");
					char *ia = sa != SIZE_MAX ? jstr(tj, mk_jsondoc_get(tj, sa, "id")) : NULL;
					char *ib = sb != SIZE_MAX ? jstr(tj, mk_jsondoc_get(tj, sb, "id")) : NULL;
					bool ab = same(ia, "A") && same(ib, "B");
					free(ia);
					free(ib);
					if (ab && b - a > 2) {
						bool add_sep = false;
						const char *sep = s->tc_tok[ST_SEP], *eos = s->tc_tok[ST_EOS];
						char *e1 = special_token_id(tj, items[a + 1]);
						if (e1 && *e1 && (same(e1, sep) || same(e1, eos)) && !last)
							add_sep = true;
						free(e1);
						if (b - a - 2 == 2) {
							char *e2 = special_token_id(tj, items[a + 2]);
							if (e2 && *e2 && (same(e2, sep) || same(e2, eos)))
								add_sep = true;
							free(e2);
						}
						set_add(s, ST_SEP, add_sep, false);
						if (add_sep && !sep && s->have_tc && set_tc(s, ST_SEP, eos) < 0)
							goto oom;
					}
				}
			}
		}
	}
out:
	free(first);
	free(last);
	free(type);
	return rc;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	goto out;
}

/* ------------------------------------------------------------- main */

static bool looks_special(const char *t)
{
	size_t l = strlen(t);
	if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]"))
		return true;
	if (l >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + l - 2, "|>"))
		return true;
	/* "<｜" and "｜>" (U+FF5C) */
	if (l >= 8 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + l - 4, "\xef\xbd\x9c>"))
		return true;
	if (l >= 8 && !strncmp(t, "<unused", 7) && t[l - 1] == '>')
		return true;
	return false;
}

/* "▁" (U+2581) to " " */
static char *unspace(const char *t)
{
	char *o = malloc(strlen(t) + 1), *w = o;
	if (!o)
		return NULL;
	while (*t) {
		if (!strncmp(t, "\xe2\x96\x81", 3)) {
			*w++ = ' ';
			t += 3;
		} else {
			*w++ = *t++;
		}
	}
	*w = 0;
	return o;
}

/* A merge as convert writes it: "a b", a pair's spaces as U+0120. */
static char *merge_text(const struct mk_jsondoc *d, size_t n)
{
	if (mk_jsondoc_type(d, n) == MK_JSON_STRING)
		return jstr(d, n);
	if (mk_jsondoc_type(d, n) != MK_JSON_ARRAY || mk_jsondoc_count(d, n) != 2)
		return NULL;
	size_t a = mk_jsondoc_first(d, n), b = mk_jsondoc_next(d, a);
	char *sa = jstr(d, a), *sb = jstr(d, b), *o = NULL;
	if (sa && sb && (o = malloc(3 * (strlen(sa) + strlen(sb)) + 2))) {
		char *w = o;
		for (int k = 0; k < 2; k++) {
			for (const char *p = k ? sb : sa; *p; p++) {
				if (*p == ' ') {
					*w++ = '\xc4';
					*w++ = '\xa0';
				} else {
					*w++ = *p;
				}
			}
			if (!k)
				*w++ = ' ';
		}
		*w = 0;
	}
	free(sa);
	free(sb);
	return o;
}

static int config_ids(struct special *s, const char *dir, size_t n_vocab, struct mk_err *err)
{
	struct mk_jsondoc *c;
	char label[4096];
	int rc = json_open(dir, "config.json", &c, label, sizeof label, err);
	if (rc <= 0)
		return rc;
	rc = 0;
	size_t root = mk_jsondoc_at(c, ""), text = mk_jsondoc_get(c, root, "text_config");
	for (int i = 0; i < s->ntypes && rc == 0; i++) {
		int t = s->types[i];
		char key[32];
		long long v;
		snprintf(key, sizeof key, "%s_token_id", st_name[t]);
		size_t n = mk_jsondoc_get(c, root, key);
		if ((n == SIZE_MAX || mk_jsondoc_type(c, n) == MK_JSON_NULL) && text != SIZE_MAX &&
		    mk_jsondoc_type(c, text) == MK_JSON_OBJECT)
			n = mk_jsondoc_get(c, text, key);
		if (n != SIZE_MAX && mk_jsondoc_type(c, n) == MK_JSON_NUMBER && mk_jsondoc_node_int(c, n, &v) == 0 &&
		    (v < 0 || (unsigned long long)v < n_vocab))
			rc = set_id(s, t, v, label, err);
	}
	mk_jsondoc_free(c);
	return rc;
}

/* config.json's vocab_size (key; its text_config's first): 1 and *n, 0
 * when absent (or null / 0 where zero_absent), or an error. */
static int config_vocab_size(const char *dir, const char *key, bool zero_absent, size_t *n, struct mk_err *err)
{
	struct mk_jsondoc *c;
	char label[4096];
	int rc = json_open(dir, "config.json", &c, label, sizeof label, err);
	if (rc <= 0)
		return rc;
	size_t root = mk_jsondoc_at(c, ""), text = mk_jsondoc_get(c, root, "text_config"), node = SIZE_MAX;
	if (text != SIZE_MAX && mk_jsondoc_type(c, text) == MK_JSON_OBJECT)
		node = mk_jsondoc_get(c, text, key);
	if (node == SIZE_MAX)
		node = mk_jsondoc_get(c, root, key);
	long long x;
	rc = 0;
	if (node != SIZE_MAX && !(zero_absent && mk_jsondoc_type(c, node) == MK_JSON_NULL)) {
		if (mk_jsondoc_type(c, node) != MK_JSON_NUMBER || mk_jsondoc_node_int(c, node, &x) != 0 || x < 0)
			rc = mk_err_set(err, MK_EFORMAT, "%s: %s must be a non-negative integer", label, key);
		else if (x > 0 || !zero_absent) {
			*n = (size_t)x;
			rc = 1;
		}
	}
	mk_jsondoc_free(c);
	return rc;
}

static int add_strings(struct mk_gguf *g, const char *key, char **v, size_t n, struct mk_err *err)
{
	return mk_gguf_kv_strv(g, key, (const char *const *)v, n, err);
}

/* gguf-py's SpecialVocab(dir, load_merges, n_vocab) and its add_to_gguf:
 * merges, the special ids, add_*_token, the chat template.  n_vocab
 * SIZE_MAX: no bound on the ids. */
static int special_vocab(struct mk_gguf *g, const char *dir, bool load_merges, size_t n_vocab, bool no_bos,
			 struct mk_err *err)
{
	struct mk_jsondoc *tj = NULL, *tc = NULL;
	struct special s;
	char label[4096], tclabel[4096];
	char **merges = NULL, *tmpl = NULL;
	size_t nm = 0;
	int rc;

	memset(&s, 0, sizeof s);
	for (int t = 0; t <= ST_MASK; t++)
		s.types[s.ntypes++] = t;
	if ((rc = json_open(dir, "tokenizer.json", &tj, label, sizeof label, err)) < 0)
		goto out;
	size_t added = SIZE_MAX;
	if (tj) {
		size_t mn = mk_jsondoc_at(tj, "model");
		size_t ml = mn != SIZE_MAX ? mk_jsondoc_get(tj, mn, "merges") : SIZE_MAX;
		if (load_merges && ml != SIZE_MAX && mk_jsondoc_type(tj, ml) == MK_JSON_ARRAY &&
		    mk_jsondoc_count(tj, ml)) {
			size_t cnt = mk_jsondoc_count(tj, ml);
			if (!(merges = calloc(cnt, sizeof *merges)))
				goto oom;
			for (size_t it = mk_jsondoc_first(tj, ml); it != SIZE_MAX; it = mk_jsondoc_next(tj, it)) {
				if (!(merges[nm] = merge_text(tj, it))) {
					rc = mk_err_set(err, MK_EFORMAT, "%s: merge %zu is neither \"a b\" nor [a, b]",
							label, nm);
					goto out;
				}
				nm++;
			}
		}
		size_t nz = mk_jsondoc_get(tj, mk_jsondoc_at(tj, ""), "normalizer");
		if (nz != SIZE_MAX && mk_jsondoc_type(tj, nz) == MK_JSON_OBJECT) {
			/* Lowercase / StripAccents / BertNormalizer set keys convert writes */
			char *nt = jstr(tj, mk_jsondoc_get(tj, nz, "type"));
			bool bad = nt && (!strcmp(nt, "Lowercase") || !strcmp(nt, "StripAccents") ||
					  !strcmp(nt, "BertNormalizer"));
			if (nt && !strcmp(nt, "Sequence")) {
				size_t l = mk_jsondoc_get(tj, nz, "normalizers");
				for (size_t it = l != SIZE_MAX ? mk_jsondoc_first(tj, l) : SIZE_MAX; it != SIZE_MAX;
				     it = mk_jsondoc_next(tj, it)) {
					char *t2 = jstr(tj, mk_jsondoc_get(tj, it, "type"));
					bad |= t2 && (!strcmp(t2, "Lowercase") || !strcmp(t2, "StripAccents") ||
						      !strcmp(t2, "BertNormalizer") || !strcmp(t2, "Sequence"));
					free(t2);
				}
			}
			free(nt);
			if (bad) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: a Lowercase, StripAccents or BertNormalizer "
						"normalizer is not covered", label);
				goto out;
			}
		}
		added = mk_jsondoc_get(tj, mk_jsondoc_at(tj, ""), "added_tokens");
	}
	if ((rc = json_open(dir, "tokenizer_config.json", &tc, tclabel, sizeof tclabel, err)) < 0)
		goto out;
	size_t tcr = tc ? mk_jsondoc_at(tc, "") : SIZE_MAX;
	s.have_tc = tc && mk_jsondoc_type(tc, tcr) == MK_JSON_OBJECT && mk_jsondoc_count(tc, tcr) > 0;
	if (tj) {
		for (int t = 0; s.have_tc && t < ST_N; t++) {
			char key[32];
			snprintf(key, sizeof key, "%s_token", st_name[t]);
			size_t n = mk_jsondoc_get(tc, tcr, key);
			if (n == SIZE_MAX)
				continue;
			if (mk_jsondoc_type(tc, n) == MK_JSON_STRING) {
				s.tc_tok[t] = jstr(tc, n);
			} else if (mk_jsondoc_type(tc, n) == MK_JSON_OBJECT) {
				s.tc_tok[t] = jstr(tc, mk_jsondoc_get(tc, n, "content"));
				s.tc_tok_dict[t] = true;
			}
		}
		/* bos from cls, eos from sep */
		if (s.have_tc && (!s.tc_tok[ST_BOS] || !*s.tc_tok[ST_BOS]) && s.tc_tok[ST_CLS] &&
		    *s.tc_tok[ST_CLS] && !s.tc_tok_dict[ST_CLS] && set_tc(&s, ST_BOS, s.tc_tok[ST_CLS]) < 0)
			goto oom;
		if (s.have_tc && (!s.tc_tok[ST_EOS] || !*s.tc_tok[ST_EOS]) && s.tc_tok[ST_SEP] &&
		    *s.tc_tok[ST_SEP] && !s.tc_tok_dict[ST_SEP] && set_tc(&s, ST_EOS, s.tc_tok[ST_SEP]) < 0)
			goto oom;
		if ((rc = post_processor(&s, tj, label, err)) < 0)
			goto out;
	}
	if (s.have_tc) {
		size_t ct = mk_jsondoc_get(tc, tcr, "chat_template");
		if (ct != SIZE_MAX) {
			if (mk_jsondoc_type(tc, ct) == MK_JSON_STRING)
				tmpl = jstr(tc, ct);
			else if (mk_jsondoc_type(tc, ct) != MK_JSON_NULL) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: a chat_template that is not one string "
						"(named templates) is not covered", tclabel);
				goto out;
			}
		} else {
			char p[4096], ad[4096];
			snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
			snprintf(ad, sizeof ad, "%s/additional_chat_templates", dir);
			struct stat st;
			if (is_file(p)) {
				if (stat(ad, &st) == 0 && S_ISDIR(st.st_mode)) {
					rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: additional chat templates are not "
							"covered", ad);
					goto out;
				}
				uint8_t *tb;
				size_t tl;
				if ((rc = mk_file_read(p, FILE_MAX, &tb, &tl, err)) < 0)
					goto out;
				tmpl = (char *)tb;
			} else {
				struct mk_jsondoc *cj;
				char cl[4096];
				if ((rc = json_open(dir, "chat_template.json", &cj, cl, sizeof cl, err)) < 0)
					goto out;
				if (cj) {
					size_t n = mk_jsondoc_get(cj, mk_jsondoc_at(cj, ""), "chat_template");
					if (n != SIZE_MAX && mk_jsondoc_type(cj, n) == MK_JSON_STRING)
						tmpl = jstr(cj, n);
					else if (n != SIZE_MAX && mk_jsondoc_type(cj, n) != MK_JSON_NULL)
						rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: a chat_template that is not "
								"one string is not covered", cl);
					mk_jsondoc_free(cj);
					if (rc < 0)
						goto out;
				}
			}
		}
		for (int i = 0; i < s.ntypes; i++) {
			int t = s.types[i];
			char key[32];
			bool b;
			snprintf(key, sizeof key, "add_%s_token", st_name[t]);
			size_t n = mk_jsondoc_get(tc, tcr, key);
			if (n != SIZE_MAX && mk_jsondoc_node_bool(tc, n, &b) == 0)
				set_add(&s, t, b, true);
			/* the token text: tokenizer_config.json's (as edited above
			 * where there is a tokenizer.json) */
			char *own = NULL;
			const char *content = s.tc_tok[t];
			if (!tj) {
				snprintf(key, sizeof key, "%s_token", st_name[t]);
				size_t m = mk_jsondoc_get(tc, tcr, key);
				if (m != SIZE_MAX && mk_jsondoc_type(tc, m) == MK_JSON_OBJECT)
					m = mk_jsondoc_get(tc, m, "content");
				content = own = jstr(tc, m);
			}
			for (size_t it = content && added != SIZE_MAX ? mk_jsondoc_first(tj, added) : SIZE_MAX;
			     it != SIZE_MAX; it = mk_jsondoc_next(tj, it)) {
				char *ac = jstr(tj, mk_jsondoc_get(tj, it, "content"));
				bool hit = ac && !strcmp(ac, content);
				free(ac);
				if (!hit)
					continue;
				long long id;
				size_t idn = mk_jsondoc_get(tj, it, "id");
				if (idn != SIZE_MAX && mk_jsondoc_type(tj, idn) == MK_JSON_NUMBER &&
				    mk_jsondoc_node_int(tj, idn, &id) == 0 && (id < 0 || (unsigned long long)id < n_vocab))
					rc = set_id(&s, t, id, label, err);
				break;
			}
			free(own);
			if (rc < 0)
				goto out;
		}
	}
	if ((rc = config_ids(&s, dir, n_vocab, err)) < 0)
		goto out;

	if (nm && (rc = add_strings(g, "tokenizer.ggml.merges", merges, nm, err)) < 0)
		goto out;
	for (int i = 0; i < s.nid; i++) {
		int t = s.id_order[i];
		if (st_key[t] && (rc = mk_gguf_kv_u32(g, st_key[t], (uint32_t)s.id[t], err)) < 0)
			goto out;
	}
	if (no_bos && has_add(&s, ST_BOS))
		s.add[ST_BOS] = false;
	for (int i = 0; i < s.nadd; i++) {
		int t = s.add_order[i];
		char key[64];
		if (t != ST_BOS && t != ST_EOS && t != ST_SEP)
			continue;
		snprintf(key, sizeof key, "tokenizer.ggml.add_%s_token", st_name[t]);
		if ((rc = mk_gguf_kv_bool(g, key, s.add[t], err)) < 0)
			goto out;
	}
	if (tmpl && (rc = mk_gguf_kv_str(g, "tokenizer.chat_template", tmpl, err)) < 0)
		goto out;
	/* llama's small Granite models: add_bos_token false, in its place
	 * when set above, else last */
	if (no_bos && !has_add(&s, ST_BOS) &&
	    (rc = mk_gguf_kv_bool(g, "tokenizer.ggml.add_bos_token", false, err)) < 0)
		goto out;
	rc = 0;
out:
	for (size_t i = 0; merges && i < nm; i++)
		free(merges[i]);
	free(merges);
	for (int t = 0; t < ST_N; t++)
		free(s.tc_tok[t]);
	free(tmpl);
	mk_jsondoc_free(tj);
	mk_jsondoc_free(tc);
	return rc;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	goto out;
}

static int gpt2_vocab(struct mk_gguf *g, const char *dir, const char *pre_unknown, bool no_bos,
		      struct mk_err *err)
{
	struct mk_vocab *v = NULL;
	struct mk_tokenizer *tok = NULL;
	char label[4096], pre[64];
	uint8_t *buf = NULL;
	size_t len = 0, nv = 0;
	char **tokens = NULL;
	int32_t *types = NULL, *ids = NULL;
	size_t nids = 0;
	int rc;

	snprintf(label, sizeof label, "%s/tokenizer.json", dir);
	if ((rc = mk_file_read(label, FILE_MAX, &buf, &len, err)) < 0)
		goto out;
	if ((rc = mk_vocab_parse((const char *)buf, len, label, &v, err)) < 0)
		goto out;
	free(buf);
	buf = NULL;

	/* tokenizer.ggml.pre */
	if ((rc = mk_tokenizer_open(dir, &tok, err)) < 0) {
		mk_err_prefix(err, "%s: the pre-tokenizer's check text", dir);
		goto out;
	}
	const char *chk = mk_gguf_vocab_chktxt();
	if ((rc = mk_tokenizer_encode(tok, chk, strlen(chk), true, &ids, &nids, err)) < 0)
		goto out;
	if ((rc = mk_gguf_vocab_pre(ids, nids, pre, sizeof pre, NULL, err)) < 0) {
		if (rc != -MK_EUNSUPPORTED || !pre_unknown) {
			mk_err_prefix(err, "%s", label);
			goto out;
		}
		mk_err_clear(err);
		snprintf(pre, sizeof pre, "%s", pre_unknown);
	}

	/* tokens and their types: config.json's vocab_size, else the
	 * number of tokens */
	nv = v->ntok;
	if ((rc = config_vocab_size(dir, "vocab_size", false, &nv, err)) < 0)
		goto out;
	if (v->n > nv) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: token id %zu is past config.json's vocab_size %zu", label,
				v->n - 1, nv);
		goto out;
	}
	tokens = calloc(nv ? nv : 1, sizeof *tokens);
	types = calloc(nv ? nv : 1, sizeof *types);
	if (!tokens || !types)
		goto oom;
	for (size_t i = 0; i < nv; i++) {
		const char *t = i < v->n ? v->token[i] : NULL;
		const struct mk_added_token *a = NULL;
		for (size_t k = 0; t && k < v->nadded; k++)
			if (v->added[k].id == (long long)i)
				a = &v->added[k];
		if (!t) {
			char b[32];
			snprintf(b, sizeof b, "[PAD%zu]", i);
			tokens[i] = strdup(b);
			types[i] = TT_UNUSED;
		} else if (a) {
			/* convert round-trips a non-normalized added token through
			 * encode/decode: the same text for the tokenizers covered */
			if (a->special || looks_special(t)) {
				tokens[i] = strdup(t);
				types[i] = TT_CONTROL;
			} else {
				tokens[i] = unspace(t);
				types[i] = TT_USER_DEFINED;
			}
		} else {
			tokens[i] = strdup(t);
			types[i] = TT_NORMAL;
		}
		if (!tokens[i])
			goto oom;
	}

	if ((rc = mk_gguf_kv_str(g, "tokenizer.ggml.model", "gpt2", err)) < 0 ||
	    (rc = mk_gguf_kv_str(g, "tokenizer.ggml.pre", pre, err)) < 0 ||
	    (rc = add_strings(g, "tokenizer.ggml.tokens", tokens, nv, err)) < 0 ||
	    (rc = mk_gguf_kv_array(g, "tokenizer.ggml.token_type", MK_GGUF_V_I32, types, nv, err)) < 0)
		goto out;
	rc = special_vocab(g, dir, true, SIZE_MAX, no_bos, err);
out:
	for (size_t i = 0; tokens && i < nv; i++)
		free(tokens[i]);
	free(tokens);
	free(types);
	free(ids);
	free(buf);
	mk_tokenizer_free(tok);
	mk_vocab_free(v);
	return rc;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	goto out;
}

/* ------------------------------------------------------ SentencePiece */

/* tokenizer.model's pieces (sentencepiece's ModelProto: field 1, each a
 * message of piece 1, score 2, type 3), read from the protobuf: what
 * SentencePieceProcessor's IdToPiece, GetScore and Is* give. */
enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER_DEFINED = 4, SP_UNUSED = 5, SP_BYTE = 6 };

struct sp_piece {
	char *text;
	float score;
	int type;
};

static bool pb_varint(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
	*v = 0;
	for (int sh = 0; sh < 64 && *i < len; sh += 7) {
		uint8_t b = p[(*i)++];
		*v |= (uint64_t)(b & 0x7f) << sh;
		if (!(b & 0x80))
			return true;
	}
	return false;
}

/* Skip a field of wire type wt; false when malformed. */
static bool pb_skip(const uint8_t *p, size_t len, size_t *i, unsigned wt)
{
	uint64_t v;
	switch (wt) {
	case 0: return pb_varint(p, len, i, &v);
	case 1: if (len - *i < 8) return false; *i += 8; return true;
	case 2: if (!pb_varint(p, len, i, &v) || v > len - *i) return false; *i += v; return true;
	case 5: if (len - *i < 4) return false; *i += 4; return true;
	default: return false;
	}
}

static void sp_free(struct sp_piece *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(a[i].text);
	free(a);
}

static int sp_read(const char *path, struct sp_piece **out, size_t *n, struct mk_err *err)
{
	uint8_t *p = NULL;
	size_t len = 0, i = 0, cap = 0;
	struct sp_piece *a = NULL;
	int rc = mk_file_read(path, FILE_MAX, &p, &len, err);
	if (rc < 0)
		return rc;
	*n = 0;
	while (i < len) {
		uint64_t key, l;
		if (!pb_varint(p, len, &i, &key))
			goto bad;
		if ((key >> 3) != 1 || (key & 7) != 2) {
			if (!pb_skip(p, len, &i, key & 7))
				goto bad;
			continue;
		}
		if (!pb_varint(p, len, &i, &l) || l > len - i)
			goto bad;
		size_t end = i + l;
		if (*n == cap) {
			cap = cap ? 2 * cap : 1024;
			struct sp_piece *b = realloc(a, cap * sizeof *b);
			if (!b)
				goto oom;
			a = b;
		}
		struct sp_piece *e = &a[(*n)++];
		memset(e, 0, sizeof *e);
		e->type = SP_NORMAL;
		while (i < end) {
			uint64_t k2, v;
			if (!pb_varint(p, end, &i, &k2))
				goto bad;
			if ((k2 >> 3) == 1 && (k2 & 7) == 2) {
				if (!pb_varint(p, end, &i, &v) || v > end - i)
					goto bad;
				free(e->text);
				if (!(e->text = strndup((const char *)p + i, v)))
					goto oom;
				i += v;
			} else if ((k2 >> 3) == 2 && (k2 & 7) == 5) {
				if (end - i < 4)
					goto bad;
				memcpy(&e->score, p + i, 4);
				i += 4;
			} else if ((k2 >> 3) == 3 && (k2 & 7) == 0) {
				if (!pb_varint(p, end, &i, &v))
					goto bad;
				e->type = (int)v;
			} else if (!pb_skip(p, end, &i, k2 & 7)) {
				goto bad;
			}
		}
		if (!e->text && !(e->text = strdup("")))
			goto oom;
	}
	free(p);
	if (*n == 0) {
		sp_free(a, 0);
		return mk_err_set(err, MK_EFORMAT, "%s: a SentencePiece model with no pieces", path);
	}
	*out = a;
	return 0;
bad:
	free(p);
	sp_free(a, *n);
	return mk_err_set(err, MK_EFORMAT, "%s: not a SentencePiece model (malformed protobuf at byte %zu)", path, i);
oom:
	free(p);
	sp_free(a, *n);
	return mk_err_set(err, MK_ENOMEM, "out of memory");
}

/* Set token id to text with score and type (phi3: no bound check). */
static int sp_put(char **tokens, float *scores, int32_t *types, size_t id, const char *text, float score, int type)
{
	char *t = strdup(text);
	if (!t)
		return -1;
	free(tokens[id]);
	tokens[id] = t;
	scores[id] = score;
	types[id] = type;
	return 0;
}

/* convert's _create_vocab_sentencepiece (llama, gemma) or phi3's own
 * set_vocab (phi3 true): pieces, then added_tokens.json, then
 * tokenizer_config.json's added_tokens_decoder (and, for phi3,
 * tokenizer.json's added_tokens). */
static int spm_vocab(struct mk_gguf *g, const char *dir, bool phi3, bool no_bos, struct mk_err *err)
{
	struct sp_piece *sp = NULL;
	size_t nsp = 0, nv = 0;
	char **tokens = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	struct mk_jsondoc *d = NULL;
	char path[4096], label[4096];
	int rc;

	snprintf(path, sizeof path, "%s/tokenizer.model", dir);
	if ((rc = sp_read(path, &sp, &nsp, err)) < 0)
		return rc;
	nv = nsp;
	if (phi3) {
		if ((rc = config_vocab_size(dir, "vocab_size", false, &nv, err)) < 0)
			goto out;
		if (nv < nsp) {
			rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: config.json's vocab_size %zu is below the %zu "
					"pieces of tokenizer.model (convert fails on it)", dir, nv, nsp);
			goto out;
		}
	} else {
		if ((rc = config_vocab_size(dir, "vocab_size_per_layer_input", true, &nv, err)) < 0)
			goto out;
		if (rc == 0 && (rc = config_vocab_size(dir, "vocab_size", true, &nv, err)) < 0)
			goto out;
	}
	tokens = calloc(nv ? nv : 1, sizeof *tokens);
	scores = calloc(nv ? nv : 1, sizeof *scores);
	types = calloc(nv ? nv : 1, sizeof *types);
	if (!tokens || !scores || !types)
		goto oom;
	for (size_t i = 0; i < nv; i++) {
		char b[32];
		snprintf(b, sizeof b, "[PAD%zu]", i);
		if (sp_put(tokens, scores, types, i, b, -10000.0f, SP_UNUSED) < 0)
			goto oom;
	}
	for (size_t i = 0; i < nsp && i < nv; i++) {
		int t = sp[i].type;
		int tt = t == SP_UNKNOWN ? SP_UNKNOWN : t == SP_CONTROL ? SP_CONTROL : t == SP_UNUSED ? SP_UNUSED :
			 t == SP_BYTE ? SP_BYTE : SP_NORMAL;
		if (sp_put(tokens, scores, types, i, sp[i].text, sp[i].score, tt) < 0)
			goto oom;
	}
	/* added_tokens.json */
	if ((rc = json_open(dir, "added_tokens.json", &d, label, sizeof label, err)) < 0)
		goto out;
	if (d) {
		size_t r = mk_jsondoc_at(d, "");
		for (size_t it = mk_jsondoc_type(d, r) == MK_JSON_OBJECT ? mk_jsondoc_first(d, r) : SIZE_MAX;
		     it != SIZE_MAX; it = mk_jsondoc_next(d, it)) {
			long long id;
			if (mk_jsondoc_node_int(d, it, &id) != 0 || id < 0) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: %s must map to a token id", label,
						mk_jsondoc_key(d, it));
				goto out;
			}
			if ((size_t)id >= nv)
				continue;
			if (sp_put(tokens, scores, types, (size_t)id, mk_jsondoc_key(d, it), -1000.0f,
				   SP_USER_DEFINED) < 0)
				goto oom;
		}
		mk_jsondoc_free(d);
		d = NULL;
	}
	/* tokenizer_config.json's added_tokens_decoder, then (phi3)
	 * tokenizer.json's added_tokens */
	for (int pass = 0; pass < (phi3 ? 2 : 1); pass++) {
		if ((rc = json_open(dir, pass ? "tokenizer.json" : "tokenizer_config.json", &d, label, sizeof label,
				    err)) < 0)
			goto out;
		if (!d)
			continue;
		size_t r = mk_jsondoc_at(d, "");
		size_t list = mk_jsondoc_get(d, r, pass ? "added_tokens" : "added_tokens_decoder");
		for (size_t it = list != SIZE_MAX ? mk_jsondoc_first(d, list) : SIZE_MAX; it != SIZE_MAX;
		     it = mk_jsondoc_next(d, it)) {
			long long id;
			char *end;
			if (pass) {
				if (mk_jsondoc_node_int(d, mk_jsondoc_get(d, it, "id"), &id) != 0)
					id = -1;
			} else {
				id = strtoll(mk_jsondoc_key(d, it), &end, 10);
				if (*end)
					id = -1;
			}
			char *content = jstr(d, mk_jsondoc_get(d, it, "content"));
			bool special = false;
			size_t sn = mk_jsondoc_get(d, it, "special");
			if (sn != SIZE_MAX)
				mk_jsondoc_node_bool(d, sn, &special);
			if (!content || id < 0) {
				free(content);
				rc = mk_err_set(err, MK_EFORMAT, "%s: an added token without content or id", label);
				goto out;
			}
			if ((size_t)id >= nv) {
				free(content);
				if (phi3) {
					rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: added token %lld is past the vocabulary "
							"(%zu; convert fails on it)", label, id, nv);
					goto out;
				}
				continue;
			}
			int tt;
			char *text = content;
			if (phi3) {
				tt = special ? SP_CONTROL : SP_USER_DEFINED;
			} else if (special || looks_special(content)) {
				tt = SP_CONTROL;
			} else {
				tt = SP_USER_DEFINED;
				text = unspace(content);
				free(content);
				if (!text)
					goto oom;
			}
			rc = sp_put(tokens, scores, types, (size_t)id, text, -1000.0f, tt);
			free(text);
			if (rc < 0)
				goto oom;
		}
		mk_jsondoc_free(d);
		d = NULL;
	}
	if ((rc = mk_gguf_kv_str(g, "tokenizer.ggml.model", "llama", err)) < 0 ||
	    (rc = mk_gguf_kv_str(g, "tokenizer.ggml.pre", "default", err)) < 0 ||
	    (rc = add_strings(g, "tokenizer.ggml.tokens", tokens, nv, err)) < 0 ||
	    (rc = mk_gguf_kv_array(g, "tokenizer.ggml.scores", MK_GGUF_V_F32, scores, nv, err)) < 0 ||
	    (rc = mk_gguf_kv_array(g, "tokenizer.ggml.token_type", MK_GGUF_V_I32, types, nv, err)) < 0)
		goto out;
	rc = special_vocab(g, dir, false, nv, no_bos, err);
out:
	mk_jsondoc_free(d);
	for (size_t i = 0; tokens && i < nv; i++)
		free(tokens[i]);
	free(tokens);
	free(scores);
	free(types);
	sp_free(sp, nsp);
	return rc;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	goto out;
}

/* ------------------------------------------------------------- entry */

/* llama's choice between LlamaHfVocab (byte-fallback BPE) and the GPT-2
 * path for a tokenizer.json: 1 when LlamaHfVocab would take it. */
static int llama_hf_vocab(const char *dir, struct mk_err *err)
{
	struct mk_jsondoc *tj;
	char label[4096];
	int rc = json_open(dir, "tokenizer.json", &tj, label, sizeof label, err);
	if (rc <= 0)
		return rc;
	size_t m = mk_jsondoc_at(tj, "model");
	char *mt = m != SIZE_MAX ? jstr(tj, mk_jsondoc_get(tj, m, "type")) : NULL;
	bool is_bpe = mt && !strcmp(mt, "BPE");
	free(mt);
	bool ignore_merges = false, bf_missing = true, bf = false;
	if (m != SIZE_MAX) {
		size_t n = mk_jsondoc_get(tj, m, "ignore_merges");
		if (n != SIZE_MAX && mk_jsondoc_node_bool(tj, n, &ignore_merges) != 0)
			ignore_merges = false;
		n = mk_jsondoc_get(tj, m, "byte_fallback");
		if (n != SIZE_MAX) {
			bf_missing = false;
			if (mk_jsondoc_node_bool(tj, n, &bf) != 0)
				bf = false;
		}
	}
	size_t dec = mk_jsondoc_at(tj, "decoder");
	char *dt = dec != SIZE_MAX ? jstr(tj, mk_jsondoc_get(tj, dec, "type")) : NULL;
	bool seq = dt && !strcmp(dt, "Sequence");
	free(dt);
	mk_jsondoc_free(tj);
	/* Llama 3: BPE, ignore_merges, byte_fallback false (missing: true) */
	if (is_bpe && ignore_merges && !bf_missing && !bf)
		return 0;
	return is_bpe && !bf_missing && bf && seq;
}

int mk_gguf_vocab_add(struct mk_gguf *g, const char *dir, const char *arch, const char *pre_unknown,
		      struct mk_err *err)
{
	char p[4096];
	int rc;
	bool llama = !strcmp(arch, "llama"), gemma = !strcmp(arch, "gemma2") || !strcmp(arch, "gemma3");
	bool phi3 = !strcmp(arch, "phi3"), no_bos = false;

	if (llama) {
		/* llama's set_vocab by config.json's vocab_size (32000 when
		 * absent): CodeLlama's infill tokens at 32016, Granite's small
		 * models' add_bos_token false at 49152 */
		size_t vs = 32000;
		if ((rc = config_vocab_size(dir, "vocab_size", false, &vs, err)) < 0)
			return rc;
		if (vs == 32016)
			return mk_err_set(err, MK_EUNSUPPORTED, "%s: a vocabulary of 32016 (CodeLlama's infill "
					  "tokens, which convert adds by id) is not covered", dir);
		no_bos = vs == 49152;
	}

	snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
	if (llama || phi3) {
		struct mk_jsondoc *tc;
		char label[4096];
		if ((rc = json_open(dir, "tokenizer_config.json", &tc, label, sizeof label, err)) < 0)
			return rc;
		if (tc) {
			size_t r = mk_jsondoc_at(tc, "");
			char *cls = jstr(tc, mk_jsondoc_get(tc, r, "tokenizer_class"));
			rc = 0;
			if (llama) {
				size_t n = mk_jsondoc_get(tc, r, "add_prefix_space");
				bool b;
				if (n != SIZE_MAX && mk_jsondoc_node_bool(tc, n, &b) == 0)
					rc = mk_gguf_kv_bool(g, "tokenizer.ggml.add_space_prefix", b, err);
				if (rc == 0 && cls && !strcmp(cls, "HybridDNATokenizer"))
					rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: HybridDNATokenizer is not covered",
							label);
			} else if (!cls) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: no tokenizer_class (convert reads it for phi3)",
						label);
			} else if (!strcmp(cls, "GPT2Tokenizer")) {
				rc = 1;
			}
			free(cls);
			mk_jsondoc_free(tc);
			if (rc < 0)
				return rc;
			if (rc == 1)
				return gpt2_vocab(g, dir, pre_unknown, no_bos, err);
		}
	}
	snprintf(p, sizeof p, "%s/tokenizer.model", dir);
	if (is_file(p)) {
		if ((rc = spm_vocab(g, dir, phi3, no_bos, err)) < 0)
			return rc;
		if (gemma)
			return mk_gguf_kv_bool(g, "tokenizer.ggml.add_space_prefix", false, err);
		return 0;
	}
	if (phi3 || !strcmp(arch, "gemma2"))
		return mk_err_set(err, MK_ENOENT, "%s: no such file; convert_hf_to_gguf.py reads a %s model's "
				  "vocabulary from it", p, arch);
	snprintf(p, sizeof p, "%s/tokenizer.json", dir);
	if (!is_file(p))
		return mk_err_set(err, MK_ENOENT, "%s: no such file (nor tokenizer.model); GGUF's tokenizer keys "
				  "come from one of them", p);
	if (llama) {
		if ((rc = llama_hf_vocab(dir, err)) < 0)
			return rc;
		if (rc)
			return mk_err_set(err, MK_EUNSUPPORTED, "%s: a byte-fallback BPE vocabulary without "
					  "tokenizer.model (convert's LlamaHfVocab path) is not covered", p);
	}
	return gpt2_vocab(g, dir, pre_unknown, no_bos, err);
}
