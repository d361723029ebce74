/* test_vocab.c - tokenizer.json vocabularies: the four model types, added
 * tokens and their flags, equality, and the files refused with why. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include "mk/vocab.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bpe),
		cmocka_unit_test(test_unigram_and_wordpiece),
		cmocka_unit_test(test_equal),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
