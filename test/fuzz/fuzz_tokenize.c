/* fuzz_tokenize.c - the tokenizer.json reader and the encoder on
 * arbitrary bytes.
 *
 * An input starting with byte 0, 1 or 2 is text (the rest) for one of
 * three tokenizers built here: 0 byte-level BPE (the Llama 3 split
 * pattern, ignore_merges, a BOS template, plain special tokens), whose
 * ids must spell the text back byte for byte; 1 the same with NFC and
 * added tokens that strip, match single words and are normalized; 2
 * SentencePiece-style BPE (Prepend + Replace, byte fallback, fuse_unk),
 * whose ids must spell the text back but for spaces.  Any other input is
 * a tokenizer.json: a refusal says why; an accepted one encodes a
 * multilingual text.  Every encoding: text that is not UTF-8 refused,
 * else ids below the vocabulary size, the same twice, the ids without
 * special tokens inside those with, and the prompt batch its rows
 * left-padded. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "mk/tokenize.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static const char L3_PAT[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}"
			     "\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* byte b's character in the byte-level alphabet */
static unsigned bl_char(unsigned b)
{
	unsigned n = 0;
	for (unsigned i = 0; i < 256; i++) {
		bool print = (i >= '!' && i <= '~') || (i >= 0xa1 && i <= 0xac) || i >= 0xae;
		if (i == b)
			return print ? i : 256 + n;
		n += !print;
	}
	return 0;
}

static void put_utf8(struct mk_sbuf *s, unsigned c)
{
	char o[3];
	size_t l = c < 0x80 ? 1 : 2;
	if (l == 1)
		o[0] = (char)c;
	else
		o[0] = (char)(0xc0 | c >> 6), o[1] = (char)(0x80 | (c & 0x3f));
	mk_sbuf_add(s, o, l);
}

static void q(struct mk_sbuf *b, const char *s)
{
	char *t = mk_json_quote(s, strlen(s));
	mk_sbuf_str(b, t ? t : "\"\"");
	free(t);
}

/* the tokenizers of the text modes; tok[k][id] their tokens */
static struct mk_tokenizer *tk[3];
static char *tok[3][600];
static size_t ntok[3];

static void add_tok(int k, struct mk_sbuf *v, const char *s)
{
	mk_sbuf_fmt(v, "%s", ntok[k] ? ", " : "");
	q(v, s);
	mk_sbuf_fmt(v, ": %zu", ntok[k]);
	tok[k][ntok[k]++] = strdup(s);
}

static const char *const WORDS[] = {"the", "he", "in", "ing", "er", "an", "on", "is", "at", "or", "es", "en", "de",
				    "un", "的", "是", "ا", "ل", "12", "123"};

static struct mk_tokenizer *build(int k)
{
	struct mk_sbuf v = {0}, m = {0}, j = {0};
	struct mk_tokenizer *t = NULL;
	struct mk_err err;
	bool spm = k == 2;

	if (spm) {
		add_tok(k, &v, "<unk>"), add_tok(k, &v, "<s>"), add_tok(k, &v, "</s>");
		for (int b = 0; b < 256; b++) {
			char nm[8];
			snprintf(nm, sizeof nm, "<0x%02X>", b);
			add_tok(k, &v, nm);
		}
		static const char *const chars[] = {"\xe2\x96\x81", "a", "b", "c", "d", "e", "g", "h", "i", "n", "o",
						    "r", "s", "t", "u", "l", "\xe7\x9a\x84"};
		for (size_t i = 0; i < sizeof chars / sizeof *chars; i++)
			add_tok(k, &v, chars[i]);
	} else {
		for (unsigned b = 0; b < 256; b++) {
			struct mk_sbuf c = {0};
			put_utf8(&c, bl_char(b));
			add_tok(k, &v, c.p);
			free(c.p);
		}
	}
	/* merges: each word built left to right from its characters */
	for (size_t w = 0; w < sizeof WORDS / sizeof *WORDS; w++) {
		struct mk_sbuf pre = {0};
		const char *s = WORDS[w];
		size_t len = strlen(s);
		for (size_t i = 0; i < len;) {
			size_t cl = ((unsigned char)s[i] < 0x80) ? 1 : ((unsigned char)s[i] < 0xe0) ? 2 : 3;
			struct mk_sbuf piece = {0};
			if (spm) {
				bool have = false;
				mk_sbuf_add(&piece, s + i, cl);
				for (size_t x = 0; x < ntok[k]; x++)
					have = have || !strcmp(tok[k][x], piece.p);
				if (!have)
					add_tok(k, &v, piece.p);
			} else {
				for (size_t x = 0; x < cl; x++)
					put_utf8(&piece, bl_char((unsigned char)s[i + x]));
			}
			if (i && pre.p) {
				struct mk_sbuf mg = {0}, whole = {0};
				mk_sbuf_fmt(&mg, "%s %s", pre.p, piece.p);
				mk_sbuf_fmt(&whole, "%s%s", pre.p, piece.p);
				bool have = false;
				for (size_t x = 0; x < ntok[k]; x++)
					have = have || !strcmp(tok[k][x], whole.p);
				if (!have) {
					add_tok(k, &v, whole.p);
					mk_sbuf_str(&m, m.n ? ", " : "");
					q(&m, mg.p);
				}
				free(mg.p), free(whole.p);
			}
			mk_sbuf_str(&pre, piece.p);
			free(piece.p);
			i += cl;
		}
		free(pre.p);
	}
	size_t base = ntok[k];
	mk_sbuf_str(&j, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
	if (spm) {
		mk_sbuf_str(&j, "{\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
				"{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
				"{\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false}");
	} else {
		mk_sbuf_fmt(&j, "{\"id\": %zu, \"content\": \"<|s|>\", \"special\": true, \"normalized\": false},"
				"{\"id\": %zu, \"content\": \"<|e|>\", \"special\": true, \"normalized\": false}",
			    base, base + 1);
		tok[k][ntok[k]++] = strdup("<|s|>");
		tok[k][ntok[k]++] = strdup("<|e|>");
		if (k == 1) {
			mk_sbuf_fmt(&j, ",{\"id\": %zu, \"content\": \"<m>\", \"special\": true, \"normalized\": false, "
					"\"lstrip\": true, \"rstrip\": true}, {\"id\": %zu, \"content\": \"[W]\", "
					"\"special\": false, \"normalized\": true, \"single_word\": true}",
				    base + 2, base + 3);
			tok[k][ntok[k]++] = strdup("<m>");
			tok[k][ntok[k]++] = strdup("[W]");
		}
	}
	mk_sbuf_str(&j, "], \"normalizer\": ");
	if (spm)
		mk_sbuf_str(&j, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "
				"\"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": "
				"\"\\u2581\"}]}, \"pre_tokenizer\": null");
	else {
		mk_sbuf_str(&j, k == 1 ? "{\"type\": \"NFC\"}" : "null");
		mk_sbuf_str(&j, ", \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
				"\"pattern\": {\"Regex\": ");
		q(&j, L3_PAT);
		mk_sbuf_str(&j, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
				"\"add_prefix_space\": false, \"use_regex\": false}]}");
	}
	mk_sbuf_fmt(&j, ", \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": "
			"{\"id\": \"B\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
			"\"special_tokens\": {\"B\": {\"id\": \"B\", \"ids\": [%zu], \"tokens\": [\"B\"]}}}, ",
		    spm ? (size_t)1 : base);
	mk_sbuf_fmt(&j, "\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": %s, \"fuse_unk\": %s, "
			"\"byte_fallback\": %s, \"ignore_merges\": %s, \"vocab\": {%s}, \"merges\": [%s]}}",
		    spm ? "\"<unk>\"" : "null", spm ? "true" : "false", spm ? "true" : "false", spm ? "false" : "true",
		    v.p, m.p ? m.p : "");
	if (j.oom || mk_tokenizer_parse(j.p, j.n, "fuzz/tokenizer.json", &t, &err)) {
		fprintf(stderr, "fuzz_tokenize: %s\n", j.oom ? "out of memory" : err.msg);
		abort();
	}
	free(v.p), free(m.p), free(j.p);
	mk_tokenizer_set_bos_eos(t, spm ? "<s>" : "<|s|>", NULL, &err);
	return t;
}

/* the invariants of every encoding; 1: the text was refused as not UTF-8 */
static int check(const struct mk_tokenizer *t, const char *s, size_t n, int32_t **out, size_t *nout)
{
	struct mk_err err;
	int32_t *a, *b, *c;
	size_t na, nb, nc;

	if (mk_tokenizer_encode(t, s, n, false, &a, &na, &err)) {
		if (err.code != MK_EINVAL || !err.msg[0])
			abort();
		return 1;
	}
	if (mk_tokenizer_encode(t, s, n, false, &c, &nc, &err) || nc != na || (na && memcmp(a, c, na * sizeof *a)))
		abort();
	if (mk_tokenizer_encode(t, s, n, true, &b, &nb, &err) || nb < na)
		abort();
	bool inside = false;
	for (size_t off = 0; off + na <= nb && !inside; off++)
		inside = !na || !memcmp(b + off, a, na * sizeof *a);
	if (!inside)
		abort();
	for (size_t i = 0; i < na; i++)
		if (a[i] < 0 || (size_t)a[i] >= mk_tokenizer_vocab_size(t))
			abort();
	/* the prompt batch: this text and a short one */
	if (!memchr(s, '\0', n)) {
		char *z = strndup(s, n);
		const char *pr[2] = {z, "x"};
		struct mk_tokbatch bt;
		if (z && !mk_tokenizer_encode_prompts(t, pr, 2, &bt, &err)) {
			for (size_t r = 0; r < bt.rows; r++) {
				size_t ones = 0;
				for (size_t col = 0; col < bt.cols; col++) {
					uint8_t mk = bt.mask[r * bt.cols + col];
					if (mk && col + 1 < bt.cols && !bt.mask[r * bt.cols + col + 1])
						abort(); /* padding only on the left */
					if (!mk && bt.ids[r * bt.cols + col] != bt.pad_id)
						abort();
					ones += mk;
				}
				if (!ones)
					abort(); /* the BOS at least */
			}
			mk_tokbatch_free(&bt);
		}
		free(z);
	}
	free(b), free(c);
	*out = a, *nout = na;
	return 0;
}

static const char TEXT[] = "Hello world! 机器学习 日本語 مرحبا 😀👍🏽 1234567 \t\n  x";

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	int32_t *ids;
	size_t nid;

	if (n && d[0] < 3) {
		int k = d[0];
		if (!tk[k])
			tk[k] = build(k);
		const char *s = (const char *)d + 1;
		if (check(tk[k], s, n - 1, &ids, &nid))
			return 0;
		if (k != 1) {
			/* spell the text back from the tokens */
			struct mk_sbuf o = {0};
			for (size_t i = 0; i < nid; i++) {
				const char *p = tok[k][ids[i]];
				unsigned b;
				bool added = !strcmp(p, "<|s|>") || !strcmp(p, "<|e|>");
				if (k == 2 && sscanf(p, "<0x%2X>", &b) == 1 && strlen(p) == 6) {
					char c = (char)b;
					mk_sbuf_add(&o, &c, 1);
				} else if (k == 2 || added) {
					mk_sbuf_str(&o, p);
				} else {
					/* byte-level characters back to bytes */
					for (size_t x = 0; p[x];) {
						unsigned c = (unsigned char)p[x];
						size_t l = 1;
						if (c >= 0xc0)
							c = (c & 0x1f) << 6 | ((unsigned char)p[x + 1] & 0x3f), l = 2;
						for (unsigned y = 0; y < 256; y++)
							if (bl_char(y) == c) {
								char ch = (char)y;
								mk_sbuf_add(&o, &ch, 1);
								break;
							}
						x += l;
					}
				}
			}
			/* SentencePiece: spaces are the meta symbol, with one more at each start */
			struct mk_sbuf want = {0}, got = {0};
			for (size_t x = 0; x < n - 1; x++)
				if (k != 2 || s[x] != ' ')
					mk_sbuf_add(&want, s + x, 1);
			for (size_t x = 0; x < o.n; x++) {
				if (k == 2 && x + 3 <= o.n && !memcmp(o.p + x, "\xe2\x96\x81", 3)) {
					x += 2;
					continue;
				}
				mk_sbuf_add(&got, o.p + x, 1);
			}
			if (k == 2) { /* and the meta symbols of the text itself */
				struct mk_sbuf w2 = {0};
				for (size_t x = 0; x < want.n; x++) {
					if (x + 3 <= want.n && !memcmp(want.p + x, "\xe2\x96\x81", 3)) {
						x += 2;
						continue;
					}
					mk_sbuf_add(&w2, want.p + x, 1);
				}
				free(want.p);
				want = w2;
			}
			if (want.n != got.n || (want.n && memcmp(want.p, got.p, want.n)))
				abort();
			free(o.p), free(want.p), free(got.p);
		}
		free(ids);
		return 0;
	}
	struct mk_tokenizer *t = NULL;
	struct mk_err err;
	if (mk_tokenizer_parse((const char *)d, n, "fuzz/tokenizer.json", &t, &err)) {
		if (t || !err.code || !err.msg[0])
			abort();
		return 0;
	}
	if (!check(t, TEXT, sizeof TEXT - 1, &ids, &nid))
		free(ids);
	if (check(t, "\xff\xfe", 2, &ids, &nid) != 1)
		abort();
	mk_tokenizer_free(t);
	return 0;
}
