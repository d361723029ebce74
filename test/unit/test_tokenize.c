/* test_tokenize.c - the tokenizer.json encoder against the ids of the
 * `tokenizers` package: testdata/tokenizers/encode/FAMILY/golden.json
 * holds, for every line of the multilingual corpus there, the ids
 * tokenizers 0.23.3 gives with and without special tokens, and the
 * prompt batch transformers gives as mergekit-moe builds it (made by
 * test/tools/mk-gen-tokenizers.py; see testdata/tokenizers/README).  Each
 * line must give exactly those ids.  Then the tokenizers mk refuses, each
 * by the name of what it does not cover. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mk/tokenize.h"

#define DIR "testdata/tokenizers/encode/"

static bool same(json_t *want, const int32_t *ids, size_t n)
{
	if (json_array_size(want) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (json_integer_value(json_array_get(want, i)) != ids[i])
			return false;
	return true;
}

static void family(const char *name)
{
	char path[256];
	json_error_t je;
	struct mk_tokenizer *t;
	struct mk_err err;
	size_t bad = 0, k;
	json_t *c;

	snprintf(path, sizeof path, DIR "%s/golden.json", name);
	json_t *g = json_load_file(path, JSON_ALLOW_NUL, &je);
	if (!g) {
		print_error("%s: %s\n", path, je.text);
		fail();
	}
	snprintf(path, sizeof path, DIR "%s", name);
	if (mk_tokenizer_open(path, &t, &err)) {
		print_error("%s\n", err.msg);
		fail();
	}
	json_t *cases = json_object_get(g, "cases");
	assert_true(json_array_size(cases) >= 40);
	json_array_foreach(cases, k, c) {
		json_t *text = json_object_get(c, "text");
		for (int sp = 0; sp < 2; sp++) {
			int32_t *ids;
			size_t n;
			assert_int_equal(mk_tokenizer_encode(t, json_string_value(text), json_string_length(text), sp,
							     &ids, &n, &err), 0);
			if (!same(json_object_get(c, sp ? "ids_special" : "ids"), ids, n)) {
				print_error("%s line %zu (%s special tokens) differs: %s\n", name, k + 1,
					    sp ? "with" : "without", json_string_value(text));
				bad++;
			}
			free(ids);
		}
	}
	/* mergekit-moe's prompt batch */
	json_t *moe = json_object_get(g, "moe"), *pr = json_object_get(moe, "prompts");
	size_t np = json_array_size(pr);
	const char **p = calloc(np, sizeof *p);
	assert_non_null(p);
	for (k = 0; k < np; k++)
		p[k] = json_string_value(json_array_get(pr, k));
	struct mk_tokbatch b;
	assert_int_equal(mk_tokenizer_encode_prompts(t, p, np, &b, &err), 0);
	json_t *wi = json_object_get(moe, "input_ids"), *wm = json_object_get(moe, "attention_mask");
	assert_int_equal(b.rows, json_array_size(wi));
	for (k = 0; k < b.rows; k++) {
		int32_t mask[4096];
		assert_true(b.cols <= 4096);
		for (size_t x = 0; x < b.cols; x++)
			mask[x] = b.mask[k * b.cols + x];
		if (!same(json_array_get(wi, k), b.ids + k * b.cols, b.cols) || !same(json_array_get(wm, k), mask, b.cols)) {
			print_error("%s: prompt %zu's row differs\n", name, k + 1);
			bad++;
		}
	}
	mk_tokbatch_free(&b);
	free(p);
	mk_tokenizer_free(t);
	json_decref(g);
	assert_int_equal(bad, 0);
}

static void test_gpt2(void **s) { family("gpt2"); }
static void test_llama3(void **s) { family("llama3"); }
static void test_qwen2(void **s) { family("qwen2"); }
static void test_llama2(void **s) { family("llama2"); }
static void test_mistral(void **s) { family("mistral"); }
static void test_misc_a(void **s) { family("misc-a"); }
static void test_misc_b(void **s) { family("misc-b"); }

static void refused(const char *json, int code, const char *what)
{
	struct mk_tokenizer *t = (struct mk_tokenizer *)1;
	struct mk_err err;

	assert_int_equal(mk_tokenizer_parse(json, strlen(json), "x/tokenizer.json", &t, &err), -code);
	assert_null(t);
	if (!strstr(err.msg, what) || !strstr(err.msg, "x/tokenizer.json")) {
		print_error("message '%s' lacks '%s'\n", err.msg, what);
		fail();
	}
}

#define BPE_OK "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}"

static void test_refused(void **s)
{
	refused("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", MK_EUNSUPPORTED, "model type 'WordPiece'");
	refused("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", MK_EUNSUPPORTED, "model type 'Unigram'");
	refused("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", MK_EUNSUPPORTED, "model type 'WordLevel'");
	refused("{\"normalizer\": {\"type\": \"Lowercase\"}, " BPE_OK "}", MK_EUNSUPPORTED, "normalizer 'Lowercase'");
	refused("{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": "
		"\"BertNormalizer\"}]}, " BPE_OK "}", MK_EUNSUPPORTED, "normalizer 'BertNormalizer'");
	refused("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, " BPE_OK "}", MK_EUNSUPPORTED,
		"pre-tokenizer 'Whitespace'");
	refused("{\"post_processor\": {\"type\": \"Fancy\"}, " BPE_OK "}", MK_EUNSUPPORTED, "post-processor 'Fancy'");
	refused("{\"truncation\": {\"max_length\": 5}, " BPE_OK "}", MK_EUNSUPPORTED, "'truncation'");
	refused("{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {}, \"merges\": []}}", MK_EUNSUPPORTED,
		"'dropout'");
	refused("{\"model\": {\"type\": \"BPE\", \"continuing_subword_prefix\": \"##\", \"vocab\": {}, \"merges\": []}}",
		MK_EUNSUPPORTED, "'continuing_subword_prefix'");
	refused("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"((\"}, \"behavior\": "
		"\"Isolated\"}, " BPE_OK "}", MK_EUNSUPPORTED, "does not compile with PCRE2");
	refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}", MK_EFORMAT,
		"makes a token not in model.vocab");
	refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a c\"]}}", MK_EFORMAT,
		"names a token not in model.vocab");
	refused("{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {}, \"merges\": []}}", MK_EFORMAT,
		"unk_token");
	refused("{\"padding\": {\"strategy\": {\"Fixed\": 8}}, " BPE_OK "}", MK_EUNSUPPORTED, "padding to a fixed length");
	refused("{\"padding\": {\"strategy\": \"BatchLongest\", \"pad_to_multiple_of\": 8}, " BPE_OK "}",
		MK_EUNSUPPORTED, "pad_to_multiple_of");
	refused("[1, 2]", MK_EFORMAT, "not a JSON object");
	refused("{\"model\": ", MK_EFORMAT, "");
}

/* a tokenizer.json opened as a file: no BOS/EOS, so no prompt batch;
 * text that is not UTF-8 refused */
static void test_file_and_text(void **s)
{
	struct mk_tokenizer *t;
	struct mk_err err;
	struct mk_tokbatch b;
	int32_t *ids;
	size_t n;
	const char *p[1] = {"hi"};

	assert_int_equal(mk_tokenizer_open(DIR "llama3/tokenizer.json", &t, &err), 0);
	assert_int_equal(mk_tokenizer_encode_prompts(t, p, 1, &b, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "no BOS and no EOS"));
	assert_int_equal(mk_tokenizer_encode(t, "a\xff", 2, false, &ids, &n, &err), -MK_EINVAL);
	assert_int_equal(mk_tokenizer_encode(t, "\xed\xa0\x80", 3, false, &ids, &n, &err), -MK_EINVAL);
	assert_int_equal(mk_tokenizer_encode(t, "", 0, false, &ids, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_int_equal(mk_tokenizer_encode(t, "", 0, true, &ids, &n, &err), 0);
	assert_int_equal(n, 1); /* the BOS alone */
	assert_int_equal(ids[0], mk_tokenizer_token_id(t, "<|begin_of_text|>"));
	free(ids);
	assert_int_equal(mk_tokenizer_vocab_size(t), 1006);
	assert_int_equal(mk_tokenizer_token_id(t, "no such token"), -1);
	/* the EOS pads when there is no BOS */
	assert_int_equal(mk_tokenizer_set_bos_eos(t, NULL, "<|eot_id|>", &err), 0);
	assert_int_equal(mk_tokenizer_encode_prompts(t, p, 1, &b, &err), 0);
	assert_int_equal(b.pad_id, mk_tokenizer_token_id(t, "<|eot_id|>"));
	mk_tokbatch_free(&b);
	assert_int_equal(mk_tokenizer_set_bos_eos(t, "<|nope|>", NULL, &err), 0);
	assert_int_equal(mk_tokenizer_encode_prompts(t, p, 1, &b, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "<|nope|>"));
	mk_tokenizer_free(t);
	assert_int_equal(mk_tokenizer_open(DIR "no-such-dir", &t, &err), -MK_ENOENT);
	assert_null(t);
}

static void put(const char *dir, const char *name, const char *text, size_t len)
{
	char p[512];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
}

/* special_tokens_map.json overrides tokenizer_config.json (transformers
 * 5.24.0 does: bos '</s>' here, with transformers' batch
 * [[2, 2, 2, 2, 386, 346], [2, 866, 331, 590, 424, 327]]) */
static void test_special_tokens_map(void **s)
{
	char dir[] = "/tmp/mk-test-tok.XXXXXX", p[600];
	struct mk_tokenizer *t;
	struct mk_err err;
	struct mk_tokbatch b;
	const char *pr[2] = {"x", "hi there"};
	static const int32_t want[12] = {2, 2, 2, 2, 386, 346, 2, 866, 331, 590, 424, 327};

	assert_non_null(mkdtemp(dir));
	FILE *f = fopen(DIR "llama2/tokenizer.json", "rb");
	assert_non_null(f);
	static char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof buf, f);
	fclose(f);
	put(dir, "tokenizer.json", buf, n);
	static const char conf[] = "{\"bos_token\": \"<s>\", \"eos_token\": null}";
	static const char map[] = "{\"bos_token\": \"</s>\", \"eos_token\": {\"content\": \"</s>\"}}";
	put(dir, "tokenizer_config.json", conf, sizeof conf - 1);
	put(dir, "special_tokens_map.json", map, sizeof map - 1);
	assert_int_equal(mk_tokenizer_open(dir, &t, &err), 0);
	assert_int_equal(mk_tokenizer_encode_prompts(t, pr, 2, &b, &err), 0);
	assert_int_equal(b.rows, 2);
	assert_int_equal(b.cols, 6);
	assert_memory_equal(b.ids, want, sizeof want);
	assert_int_equal(b.mask[2], 0);
	assert_int_equal(b.mask[3], 1);
	mk_tokbatch_free(&b);
	mk_tokenizer_free(t);
	static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpt2),    cmocka_unit_test(test_llama3), cmocka_unit_test(test_qwen2),
		cmocka_unit_test(test_llama2),  cmocka_unit_test(test_mistral), cmocka_unit_test(test_misc_a),
		cmocka_unit_test(test_misc_b),  cmocka_unit_test(test_refused), cmocka_unit_test(test_file_and_text),
		cmocka_unit_test(test_special_tokens_map),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
