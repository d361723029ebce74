/* test_card.c - the README.md model card, against texts written out by
 * hand from mergekit's template (card_text.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "card/card.h"
#include "top.h"

static char *render(const char *method, const char *const *models, size_t n, long base,
		    const char *name, const char *yaml)
{
	struct mk_card_input in = { .name = name, .method = method, .models = models, .nmodels = n,
				    .base_index = base, .config_text = yaml };
	struct mk_err err = { 0 };
	char *out = NULL;
	size_t len = 0;

	assert_int_equal(mk_card_render(&in, &out, &len, &err), 0);
	assert_int_equal(len, strlen(out));
	return out;
}

static void test_task_arithmetic_with_base(void **state)
{
	const char *models[] = { "org/base", "org/ft1", "./testdata/nowhere/../local" };
	char *out = render("task_arithmetic", models, 3, 0, "my-merge",
			   "merge_method: task_arithmetic\nbase_model: org/base\n");
	const char *want =
		"---\n"
		"base_model:\n"
		"- org/base\n"
		"- org/ft1\n"
		"library_name: transformers\n"
		"tags:\n"
		"- mergekit\n"
		"- merge\n"
		"\n"
		"---\n"
		"# my-merge\n"
		"\n"
		"This is a merge of pre-trained language models created using [mergekit](https://github.com/cg123/mergekit).\n"
		"\n"
		"## Merge Details\n"
		"### Merge Method\n"
		"\n"
		"This model was merged using the [Task Arithmetic](https://arxiv.org/abs/2212.04089) merge method using [org/base](https://huggingface.co/org/base) as a base.\n"
		"\n"
		"### Models Merged\n"
		"\n"
		"The following models were included in the merge:\n"
		"* [org/ft1](https://huggingface.co/org/ft1)\n"
		"* ./testdata/nowhere/../local\n"
		"\n"
		"### Configuration\n"
		"\n"
		"The following YAML configuration was used to produce this model:\n"
		"\n"
		"```yaml\n"
		"merge_method: task_arithmetic\n"
		"base_model: org/base\n"
		"\n"
		"```\n";
	assert_string_equal(out, want);
	free(out);
}

static void test_slerp_lists_base_and_no_hub(void **state)
{
	const char *models[] = { "/abs/a", "/abs/b" };
	char *out = render("slerp", models, 2, 0, NULL, "x: 1");
	assert_non_null(strstr(out, "---\nbase_model: []\nlibrary_name: transformers\n"));
	assert_non_null(strstr(out, "# Untitled Model (1)\n"));
	assert_non_null(strstr(out, "using the [SLERP](https://en.wikipedia.org/wiki/Slerp) merge method.\n"));
	assert_non_null(strstr(out, "merge:\n* /abs/a\n* /abs/b\n\n### Configuration"));
	assert_non_null(strstr(out, "```yaml\nx: 1\n```\n"));
	free(out);
}

static void test_method_without_url_and_unknown(void **state)
{
	const char *models[] = { "/m" };
	char *out = render("passthrough", models, 1, -1, "p", "");
	assert_non_null(strstr(out, "using the Passthrough merge method.\n"));
	free(out);
	out = render("my_plugin", models, 1, -1, "p", "");
	assert_non_null(strstr(out, "using the my_plugin merge method.\n"));
	free(out);
}

static void test_hub_rule_and_title(void **state)
{
	assert_true(mk_card_looks_like_hub("org/name"));
	assert_true(mk_card_looks_like_hub("gpt2-nonexistent-here"));
	assert_false(mk_card_looks_like_hub("/abs/path"));
	assert_false(mk_card_looks_like_hub("~/x"));
	assert_false(mk_card_looks_like_hub("a/b/c"));
	assert_false(mk_card_looks_like_hub("."));   /* exists locally */
	assert_string_equal(mk_card_title("out/merged"), "merged");
	assert_string_equal(mk_card_title("merged"), "merged");
	assert_string_equal(mk_card_title("out/"), "Untitled Model (1)");
}

static void test_yaml_quoting(void **state)
{
	/* names PyYAML would not leave plain are single-quoted */
	const char *models[] = { "org/true", "yes", "1.5" };
	char *out = render("linear", models, 3, -1, "q", "");
	assert_non_null(strstr(out, "base_model:\n- org/true\n- 'yes'\n- '1.5'\nlibrary_name"));
	free(out);
}

/* A LoRA adapter's card against mergekit's generate_card_lora on the same
 * inputs (testdata/card-lora/, scripts/card-lora-golden.py). */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

static void split_ref(const char *ref, char *path, char *lora, size_t cap)
{
	const char *plus = strchr(ref, '+');

	snprintf(path, cap, "%.*s", plus ? (int)(plus - ref) : (int)strlen(ref), ref);
	snprintf(lora, cap, "%s", plus ? plus + 1 : "");
}

static void test_lora_cards_are_mergekits(void **state)
{
	static const char *const cases[] = { "hub", "local", "lora-extended", "reduced" };
	const char *root = test_top("testdata/card-lora/hub.json");

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		char path[4096], b[256], bl[256], m[256], ml[256];
		json_error_t je;
		snprintf(path, sizeof(path), "%s/testdata/card-lora/%s.json", root, cases[k]);
		json_t *o = json_load_file(path, 0, &je);
		assert_non_null(o);
		split_ref(json_string_value(json_object_get(o, "base")), b, bl, sizeof(b));
		split_ref(json_string_value(json_object_get(o, "model")), m, ml, sizeof(m));
		struct mk_card_lora in = { .name = json_string_value(json_object_get(o, "name")), .base = b,
					   .base_lora = bl[0] ? bl : NULL, .model = m, .model_lora = ml[0] ? ml : NULL,
					   .invocation = json_string_value(json_object_get(o, "invocation")),
					   .base_vocab = (unsigned long long)json_integer_value(json_object_get(o, "base_vocab")),
					   .final_vocab = (unsigned long long)json_integer_value(json_object_get(o, "final_vocab")) };
		struct mk_err err = { 0 };
		char *out = NULL;
		size_t len = 0;
		assert_int_equal(mk_card_render_lora(&in, &out, &len, &err), 0);
		snprintf(path, sizeof(path), "%s/testdata/card-lora/%s.md", root, cases[k]);
		char *want = slurp(path);
		if (strcmp(out, want))
			fail_msg("%s: mk's card\n%s\n---- mergekit's\n%s", cases[k], out, want);
		assert_int_equal(len, strlen(want));
		free(want);
		free(out);
		json_decref(o);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_task_arithmetic_with_base),
		cmocka_unit_test(test_slerp_lists_base_and_no_hub),
		cmocka_unit_test(test_method_without_url_and_unknown),
		cmocka_unit_test(test_hub_rule_and_title),
		cmocka_unit_test(test_yaml_quoting),
		cmocka_unit_test(test_lora_cards_are_mergekits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
