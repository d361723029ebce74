/* test_vocab.c - tokenizer.json vocabularies: the four model types, added
 * tokens and their flags, equality, and the files refused with why; the
 * merged vocabulary (union, base, a model, stripping, extra tokens), the
 * maps into it, and the tokenizer files written for it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "tokenizer/vocab.h"

#define ADDED "\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"single_word\": false, \"lstrip\": false, " \
	      "\"rstrip\": false, \"normalized\": false, \"special\": true}, {\"id\": 5, \"content\": \"<|im_start|>\", " \
	      "\"single_word\": false, \"lstrip\": true, \"rstrip\": false, \"normalized\": false, \"special\": true}]"
static const char bpe[] = "{\"version\": \"1.0\", " ADDED ", \"model\": {\"type\": \"BPE\", \"vocab\": "
			  "{\"<unk>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"\\u0120c\": 4}, \"merges\": [\"a b\"]}}";

static struct mk_vocab *ok(const char *s)
{
	struct mk_vocab *v = NULL;
	struct mk_err err;

	if (mk_vocab_parse(s, strlen(s), "tokenizer.json", &v, &err)) {
		print_error("%s\n", err.msg);
		fail();
	}
	return v;
}

static void bad(const char *s, const char *msg)
{
	struct mk_vocab *v = (struct mk_vocab *)1;
	struct mk_err err;

	assert_int_equal(mk_vocab_parse(s, strlen(s), "t/tokenizer.json", &v, &err), -MK_EFORMAT);
	assert_null(v);
	if (!strstr(err.msg, msg)) {
		print_error("message '%s' lacks '%s'\n", err.msg, msg);
		fail();
	}
}

static void test_bpe(void **state)
{
	struct mk_vocab *v = ok(bpe);

	(void)state;
	assert_string_equal(v->model_type, "BPE");
	assert_int_equal(v->n, 6);
	assert_string_equal(v->token[0], "<unk>");
	assert_string_equal(v->token[4], "\xc4\xa0" "c");         /* U+0120, decoded */
	assert_string_equal(v->token[5], "<|im_start|>");         /* added past the model's vocab */
	assert_int_equal(v->nadded, 2);
	assert_true(v->added[1].special && v->added[1].lstrip && !v->added[1].rstrip);
	assert_int_equal(v->added[1].id, 5);
	mk_vocab_free(v);
}

static void test_unigram_and_wordpiece(void **state)
{
	struct mk_vocab *v;

	(void)state;
	v = ok("{\"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0.0], [\"\\u2581a\", -1.5], [\"b\", -2]]}}");
	assert_int_equal(v->n, 3);
	assert_string_equal(v->token[1], "\xe2\x96\x81" "a");
	mk_vocab_free(v);
	v = ok("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[PAD]\": 0, \"##a\": 2}}, \"added_tokens\": null}");
	assert_int_equal(v->n, 3);
	assert_null(v->token[1]);                                   /* an id nobody has */
	mk_vocab_free(v);
}

static void test_equal(void **state)
{
	struct mk_vocab *a = ok(bpe), *b = ok(bpe), *c;
	char why[256];
	char *s = strdup(bpe), *p;

	(void)state;
	assert_true(mk_vocab_equal(a, b, why, sizeof(why)));
	/* another id for a token */
	p = strstr(s, "\"ab\": 3");
	p[6] = '7';
	c = ok(s);
	assert_false(mk_vocab_equal(a, c, why, sizeof(why)));
	assert_string_equal(why, "id 3 is 'ab' in one and unused in the other");
	mk_vocab_free(c);
	/* an added token's flag */
	strcpy(s, bpe);
	p = strstr(s, "\"lstrip\": true");
	memcpy(p, "\"lstrip\":false", 14);
	c = ok(s);
	assert_false(mk_vocab_equal(a, c, why, sizeof(why)));
	assert_string_equal(why, "added token '<|im_start|>' (id 5) differs");
	mk_vocab_free(c);
	free(s);
	mk_vocab_free(a);
	mk_vocab_free(b);
}

static void test_refused(void **state)
{
	(void)state;
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1,}}}", "t/tokenizer.json:1:44: a comma before the closing bracket");
	bad("{\"vocab\": {}}", "no \"model\" object");
	bad("{\"model\": {\"type\": \"Char\", \"vocab\": {}}}", "model.type is 'Char', not BPE, Unigram, WordPiece or WordLevel");
	bad("{\"model\": {\"vocab\": {}}}", "model.type is missing");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": [1]}}", "model.vocab of a BPE model is not an object");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1.5}}}", "model.vocab['a'] is not an integer id");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}}}", "a token has id -1, outside 0 .. 2^31");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}}}", "far past the 1 entries");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1, \"b\": 1}}}", "id 1 is both 'a' and 'b'");
	bad("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\"]]}}", "model.vocab[0] is not a [piece, score] pair");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 0}]}",
	    "added_tokens[0] has no string content and integer id");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 0, \"content\": \"x\"}]}",
	    "added token 'x' has id 0, which is 'a' in model.vocab");
	bad("{\"model\": {\"type\": \"BPE\", \"vocab\": {}}, \"added_tokens\": [{\"id\": 0, \"content\": \"x\", \"special\": 1}]}",
	    "added_tokens[0].special is not true or false");
}


/* a BPE tokenizer.json: regular tokens `regs` (space-separated) at 0..,
 * then the added specials `adds` after them */
static char *tokjson(const char *regs, const char *adds)
{
	static char buf[8192];
	char tmp[256];
	size_t n = 0, id = 0;
	char *save, *copy = strdup(regs);

	n += (size_t)snprintf(buf + n, sizeof(buf) - n, "{\"added_tokens\": [");
	/* count the regular ones first: the added ids follow them */
	size_t nreg = 0;
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save))
		nreg++;
	free(copy);
	copy = strdup(adds);
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save), id++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n,
				      "%s{\"id\": %zu, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}",
				      id ? ", " : "", nreg + id, t);
	free(copy);
	n += (size_t)snprintf(buf + n, sizeof(buf) - n, "], \"model\": {\"type\": \"BPE\", \"vocab\": {");
	copy = strdup(regs);
	id = 0;
	for (char *t = strtok_r(copy, " ", &save); t; t = strtok_r(NULL, " ", &save), id++) {
		snprintf(tmp, sizeof(tmp), "%s\"%s\": %zu", id ? ", " : "", t, id);
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s", tmp);
	}
	free(copy);
	snprintf(buf + n, sizeof(buf) - n, "}, \"merges\": [\"a b\", \"x y\"]}}");
	return buf;
}

static int nwarn;
static void count_warn(void *ctx, const char *msg)
{
	(void)ctx;
	(void)msg;
	nwarn++;
}

static struct mk_tokmerge *merge3(struct mk_vocab **v, const long long *vs, enum mk_tokmerge_source src, size_t base,
				  size_t nextra, const char *const *extra)
{
	static const char *const labels[] = { "m0", "m1", "m2" };
	struct mk_tokmerge_in in = { .nmodels = 3, .vocab = (const struct mk_vocab *const *)v, .vocab_size = vs,
				     .label = labels, .base = base, .source = src, .source_model = 1, .nextra = nextra,
				     .extra = extra, .warn = count_warn };
	struct mk_tokmerge *t = NULL;
	struct mk_err err;

	nwarn = 0;
	if (mk_tokmerge_build(&in, &t, &err)) {
		print_error("%s\n", err.msg);
		fail();
	}
	return t;
}

/* union: the base's ids kept, then the others' new regular tokens in
 * model order and id order, then their added tokens (first flags win);
 * every model's map gives its own id or -1 */
static void test_union(void **state)
{
	(void)state;
	struct mk_vocab *v[3];
	v[0] = ok(tokjson("a b c ab", "<s> </s>"));
	v[1] = ok(tokjson("a b c ab", "<s> </s> <|im_start|> <|im_end|>"));
	v[2] = ok(tokjson("c d e a x", "<s>"));
	long long vs[3] = { 6, 8, 6 };
	const char *extra[] = { "<tool>", "a" };
	struct mk_tokmerge *t = merge3(v, vs, MK_TOKMERGE_UNION, 0, 2, extra);
	static const char *const want[] = { "a", "b", "c", "ab", "<s>", "</s>", "d", "e", "x", "<|im_start|>",
					    "<|im_end|>", "<tool>" };
	assert_int_equal(t->n, 12);
	for (size_t i = 0; i < 12; i++)
		assert_string_equal(t->token[i], want[i]);
	assert_int_equal(t->nnew, 6);
	assert_int_equal(t->new_tokens[0].id, 6);
	assert_false(t->new_tokens[0].special);
	assert_true(t->new_tokens[0].normalized);
	assert_true(t->new_tokens[3].special); /* <|im_start|>: its flags */
	assert_false(t->new_tokens[5].special); /* <tool>: a plain added token */
	assert_int_equal(t->strip_at, -1);
	/* maps */
	assert_int_equal(t->map[0][3], 3);
	assert_int_equal(t->map[0][6], -1);
	assert_int_equal(t->map[1][9], 6);
	assert_int_equal(t->map[1][6], -1);
	assert_int_equal(t->map[2][0], 3);  /* 'a' is m2's id 3 */
	assert_int_equal(t->map[2][4], 5);  /* '<s>' */
	assert_int_equal(t->map[2][5], -1); /* '</s>' */
	assert_int_equal(t->map[2][8], 4);  /* 'x' */
	assert_int_equal(mk_tokmerge_find(t, "<tool>"), 11);
	assert_int_equal(mk_tokmerge_find(t, "zz"), -1);
	assert_int_equal(nwarn, 0);
	mk_tokmerge_free(t);
	/* base and a model: no union; extra tokens after */
	t = merge3(v, vs, MK_TOKMERGE_BASE, 0, 1, extra);
	assert_int_equal(t->n, 7);
	assert_string_equal(t->token[6], "<tool>");
	assert_int_equal(t->map[1][6], -1);
	mk_tokmerge_free(t);
	t = merge3(v, vs, MK_TOKMERGE_MODEL, 0, 0, NULL);
	assert_int_equal(t->n, 8);
	assert_int_equal(t->from_model, 1);
	assert_int_equal(t->map[0][7], -1);
	assert_int_equal(t->map[0][5], 5);
	mk_tokmerge_free(t);
	for (int i = 0; i < 3; i++)
		mk_vocab_free(v[i]);
}

/* a base whose tokenizer is longer than its vocab size is cut (a BPE
 * one), its written tokenizer.json without those tokens and their merges;
 * another model's ids past its size count as absent (padding) */
static void test_strip(void **state)
{
	(void)state;
	struct mk_vocab *v[3];
	char *src = strdup(tokjson("a b x y", "<s> </s> <|x|>"));
	v[0] = ok(src);
	v[1] = ok(tokjson("a b x y", "<s> </s> <|x|>"));
	v[2] = ok(tokjson("a b", "<s>"));
	long long vs[3] = { 5, 5, 3 };
	struct mk_tokmerge *t = merge3(v, vs, MK_TOKMERGE_UNION, 0, 0, NULL);
	assert_int_equal(t->strip_at, 5);
	assert_int_equal(t->n, 5); /* '</s>' and '<|x|>' of m1 are past its size too */
	assert_int_equal(t->map[2][2], -1);
	assert_int_equal(t->map[2][4], 2);
	assert_true(nwarn >= 1);
	char *out = NULL;
	size_t len;
	struct mk_err err;
	assert_int_equal(mk_tokmerge_tokenizer_json(t, src, strlen(src), "t.json", &out, &len, &err), 0);
	struct mk_vocab *w = ok(out);
	assert_int_equal(w->n, 5);
	assert_int_equal(w->nadded, 1);
	assert_null(strstr(out, "</s>"));
	assert_non_null(strstr(out, "\"a b\""));
	mk_tokmerge_free(t);
	mk_vocab_free(w);
	free(out);
	free(src);
	/* only a BPE tokenizer can be cut */
	static const char uni[] = "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0], [\"b\", 0], [\"c\", 0]]}}";
	struct mk_vocab *u = ok(uni);
	const struct mk_vocab *uv[1] = { u };
	long long us[1] = { 2 };
	static const char *const l1[] = { "uni" };
	struct mk_tokmerge_in in = { .nmodels = 1, .vocab = uv, .vocab_size = us, .label = l1 };
	assert_int_equal(mk_tokmerge_build(&in, &t, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "only a BPE tokenizer"));
	mk_vocab_free(u);
	for (int i = 0; i < 3; i++)
		mk_vocab_free(v[i]);
}

/* the new tokens written: appended to added_tokens (tokenizer.json) and
 * added_tokens_decoder (tokenizer_config.json), the rest kept */
static void test_files(void **state)
{
	(void)state;
	struct mk_vocab *v[3];
	const char *src = tokjson("a b c", "<s>");
	char *base = strdup(src);
	v[0] = ok(base);
	v[1] = ok(tokjson("a b c d", "<s> <|im_start|>"));
	v[2] = ok(tokjson("a b c", "<s>"));
	struct mk_tokmerge *t = merge3(v, NULL, MK_TOKMERGE_UNION, 0, 0, NULL);
	char *out = NULL;
	size_t len;
	struct mk_err err;
	assert_int_equal(t->n, 6);
	assert_int_equal(mk_tokmerge_tokenizer_json(t, base, strlen(base), "t.json", &out, &len, &err), 0);
	struct mk_vocab *w = ok(out);
	assert_int_equal(w->n, 6);
	assert_string_equal(w->token[4], "d");
	assert_string_equal(w->token[5], "<|im_start|>");
	assert_true(w->added[2].special);
	assert_false(w->added[1].special);
	static const char cfg[] = "{\n  \"added_tokens_decoder\": {\n    \"3\": {\"content\": \"<s>\", \"special\": true}\n  },\n  \"model_max_length\": 1000000000000000019884624838656\n}\n";
	struct mk_jsondoc *d = NULL;
	char *o2 = NULL;
	assert_int_equal(mk_jsondoc_parse(cfg, strlen(cfg), "c.json", &d, &err), 0);
	assert_int_equal(mk_tokmerge_edit_config(t, d, &err), 0);
	assert_int_equal(mk_jsondoc_write(d, &o2, &len, &err), 0);
	assert_non_null(strstr(o2, "\"5\": {\n      \"content\": \"<|im_start|>\""));
	assert_non_null(strstr(o2, "\"3\": {\"content\": \"<s>\", \"special\": true}"));
	assert_non_null(strstr(o2, "1000000000000000019884624838656"));
	mk_jsondoc_free(d);
	free(o2);
	free(out);
	free(base);
	mk_vocab_free(w);
	mk_tokmerge_free(t);
	for (int i = 0; i < 3; i++)
		mk_vocab_free(v[i]);
}

/* a SentencePiece tokenizer.model (testdata/tokenizers/README): its
 * pieces by id, <unk> <s> </s> as special added tokens; the added tokens
 * of a tokenizer_config.json after them; bytes that are not a model */
static void test_spm(void **state)
{
	(void)state;
	FILE *f = fopen("testdata/tokenizers/spm-bpe-48.model", "rb");
	char buf[4096];
	size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
	struct mk_vocab *v = NULL;
	struct mk_err err;

	if (f)
		fclose(f);
	assert_true(n > 100);
	assert_int_equal(mk_vocab_parse_spm(buf, n, "t.model", &v, &err), 0);
	assert_int_equal(v->n, 48);
	assert_string_equal(v->token[0], "<unk>");
	assert_string_equal(v->token[2], "</s>");
	assert_int_equal(v->nadded, 3);
	assert_true(v->added[1].special);
	assert_int_equal(mk_vocab_find(v, "\xe2\x96\x81merge"), 8);
	static const char cfg[] = "{\"added_tokens_decoder\": {\"1\": {\"content\": \"<s>\", \"special\": true}, "
				  "\"48\": {\"content\": \"<|im_start|>\", \"special\": true}, \"49\": {\"content\": \"x y\"}}}";
	assert_int_equal(mk_vocab_add_decoder(v, cfg, strlen(cfg), "c.json", &err), 0);
	assert_int_equal(v->n, 50);
	assert_int_equal(v->nadded, 5);
	assert_int_equal(mk_vocab_find(v, "<|im_start|>"), 48);
	assert_false(v->added[4].special);
	/* an added token on a piece must be that piece */
	static const char clash[] = "{\"added_tokens_decoder\": {\"3\": {\"content\": \"<x>\"}}}";
	assert_int_equal(mk_vocab_add_decoder(v, clash, strlen(clash), "c.json", &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "c.json: added token '<x>' has id 3"));
	mk_vocab_free(v);
	v = (struct mk_vocab *)1;
	assert_int_equal(mk_vocab_parse_spm("not a model", 11, "x/tokenizer.model", &v, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "x/tokenizer.model: not a SentencePiece model"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bpe),
		cmocka_unit_test(test_unigram_and_wordpiece),
		cmocka_unit_test(test_equal),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_union),
		cmocka_unit_test(test_strip),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_spm),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
