/* test_moe.c - mk-moe's configuration (parse, pre-checks), its choice of
 * output architecture, the seeded random routers and the condition
 * number behind the degenerate-router warning. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "moe/moe.h"

static struct mk_moe_config *parse(const char *y, struct mk_err *err)
{
	struct mk_moe_config *c = NULL;
	if (mk_moe_parse(y, strlen(y), "t.yml", &c, err))
		return NULL;
	return c;
}

static void test_parse_full(void **state)
{
	(void)state;
	struct mk_err err = { 0 };
	struct mk_moe_config *c = parse("base_model: base\n"
					"gate_mode: cheap_embed\n"
					"dtype: bfloat16\n"
					"experts_per_token: 1\n"
					"architecture: qwen\n"
					"unknown_key: ignored\n"
					"experts:\n"
					"  - source_model: a\n"
					"    positive_prompts: [\"x\", 'y']\n"
					"    negative_prompts:\n      - z\n"
					"    residual_scale: 0.5\n"
					"  - source_model: b@rev\n"
					"    positive_prompts: [w]\n"
					"    noise_scale: 1e-3\n"
					"shared_experts:\n"
					"  - source_model: s\n",
					&err);
	assert_non_null(c);
	assert_string_equal(c->base_model, "base");
	assert_int_equal(c->gate, MK_MOE_GATE_CHEAP_EMBED);
	assert_true(c->has_dtype);
	assert_int_equal(c->dtype, MK_DT_BF16);
	assert_int_equal(c->experts_per_token, 1);
	assert_string_equal(c->architecture, "qwen");
	assert_int_equal(c->nexperts, 2);
	assert_string_equal(c->experts[0].source_model, "a");
	assert_int_equal(c->experts[0].npositive, 2);
	assert_string_equal(c->experts[0].positive[1], "y");
	assert_int_equal(c->experts[0].nnegative, 1);
	assert_string_equal(c->experts[0].negative[0], "z");
	assert_true(c->experts[0].has_residual);
	assert_true(c->experts[0].residual_scale == 0.5);
	assert_false(c->experts[0].has_noise);
	assert_string_equal(c->experts[1].source_model, "b@rev");
	assert_true(c->experts[1].has_noise);
	assert_true(c->experts[1].noise_scale == 1e-3);
	assert_int_equal(c->experts[1].line, 13);
	assert_int_equal(c->nshared, 1);
	assert_string_equal(c->shared[0].source_model, "s");
	mk_moe_config_free(c);
}

static void test_parse_defaults(void **state)
{
	(void)state;
	struct mk_err err = { 0 };
	struct mk_moe_config *c = parse("base_model: b\nexperts:\n  - source_model: a\n", &err);
	assert_non_null(c);
	assert_int_equal(c->gate, MK_MOE_GATE_HIDDEN);
	assert_int_equal(c->experts_per_token, 2);
	assert_false(c->has_dtype);
	assert_null(c->architecture);
	assert_int_equal(c->nshared, 0);
	mk_moe_config_free(c);
}

/* a repeated key: its last value, as PyYAML reads it (nothing leaks) */
static void test_parse_repeated_keys(void **state)
{
	(void)state;
	struct mk_err err = { 0 };
	struct mk_moe_config *c = parse("base_model: a\nbase_model: b\narchitecture: x\narchitecture: null\n"
					"dtype: float16\ndtype: null\n"
					"experts:\n  - source_model: a\n    positive_prompts: [x]\n"
					"    positive_prompts: [y, z]\n    residual_scale: 2\n    residual_scale: null\n"
					"experts:\n  - source_model: c\n    positive_prompts: [p]\n"
					"    positive_prompts: [q, r]\n    residual_scale: 3\n"
					"shared_experts: [{source_model: s}]\nshared_experts: null\n",
					&err);
	assert_non_null(c);
	assert_string_equal(c->base_model, "b");
	assert_null(c->architecture);
	assert_false(c->has_dtype);
	assert_int_equal(c->nexperts, 1);
	assert_string_equal(c->experts[0].source_model, "c");
	assert_int_equal(c->experts[0].npositive, 2);
	assert_string_equal(c->experts[0].positive[1], "r");
	assert_true(c->experts[0].has_residual && c->experts[0].residual_scale == 3);
	assert_int_equal(c->nshared, 0);
	mk_moe_config_free(c);
}

static void test_parse_refusals(void **state)
{
	(void)state;
	static const struct { const char *y, *msg; } cases[] = {
		{ "experts:\n  - source_model: a\n", "base_model: required" },
		{ "base_model: b\n", "experts: required" },
		{ "base_model: b\nexperts:\n  - positive_prompts: [x]\n", "every expert needs a source_model" },
		{ "base_model: b\ngate_mode: fancy\nexperts: []\n", "'fancy' is not one of" },
		{ "base_model: b\ndtype: int8\nexperts: []\n", "expected bfloat16, float16 or float32" },
		{ "base_model: b\nexperts_per_token: two\nexperts: []\n", "experts_per_token: expected an integer" },
		{ "base_model: b\nexperts:\n  - source_model: a\n    residual_scale: big\n", "residual_scale: expected a number" },
		{ "base_model: [b]\nexperts: []\n", "base_model: expected a string" },
		{ "base_model: b\nexperts: {a: 1}\n", "expected a list of experts" },
		{ "- 1\n", "the configuration is a mapping" },
		{ "base_model: b\nexperts: [\n", "YAML" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mk_err err = { 0 };
		assert_null(parse(cases[i].y, &err));
		if (!strstr(err.msg, cases[i].msg))
			fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].msg);
		assert_non_null(strstr(err.msg, "t.yml:"));
	}
}

static int check(const char *y, bool allow, const char *msg)
{
	struct mk_err err = { 0 };
	struct mk_moe_config *c = parse(y, &err);
	assert_non_null(c);
	int rc = mk_moe_check(c, allow, &err);
	mk_moe_config_free(c);
	if (msg && (!rc || !strstr(err.msg, msg)))
		fail_msg("'%s' lacks '%s'", err.msg, msg);
	return rc;
}

static void test_checks(void **state)
{
	(void)state;
	const char *two = "base_model: b\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n"
			  "  - source_model: c\n    positive_prompts: [y]\n";
	assert_int_equal(check(two, false, NULL), 0);
	check("base_model: b\nexperts_per_token: 0\nexperts: []\n", false, "must be at least 1");
	check("base_model: b\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n", false,
	      "give at least as many experts");
	check("base_model: b\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n  - source_model: c\n", false,
	      "expert 1 (c, line 5) has no positive_prompts");
	/* the same prompts, and a lone expert (always "the same") */
	check("base_model: b\nexperts_per_token: 1\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n",
	      false, "(there is one expert)");
	check("base_model: b\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n    negative_prompts: []\n"
	      "  - source_model: c\n    positive_prompts: [x]\n",
	      false, "prompts are the same for every expert");
	/* negatives set them apart */
	assert_int_equal(check("base_model: b\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n"
			       "    negative_prompts: [z]\n  - source_model: c\n    positive_prompts: [x]\n",
			       false, NULL),
			 0);
	const char *same = "base_model: b\nexperts:\n  - source_model: a\n    positive_prompts: [x]\n"
			   "  - source_model: a\n    positive_prompts: [y]\n";
	check(same, false, "--i-understand-this-is-not-useful-without-training");
	assert_int_equal(check(same, true, NULL), 0);
	/* random needs no prompts at all, and may repeat models */
	assert_int_equal(check("base_model: b\ngate_mode: random\nexperts:\n  - source_model: a\n  - source_model: a\n",
			       false, NULL),
			 0);
	check("base_model: b\ngate_mode: uniform_random\nexperts:\n  - source_model: a\n  - source_model: c\n", false,
	      "has no positive_prompts");
}

static int pick(const char *y, const char *const *types, enum mk_moe_arch *a, const char *msg)
{
	struct mk_err err = { 0 };
	struct mk_moe_config *c = parse(y, &err);
	assert_non_null(c);
	int rc = mk_moe_select_arch(c, types, a, &err);
	mk_moe_config_free(c);
	if (msg && (!rc || !strstr(err.msg, msg)))
		fail_msg("'%s' lacks '%s'", err.msg, msg);
	return rc;
}

static void test_select_arch(void **state)
{
	(void)state;
	enum mk_moe_arch a;
	const char *llama3[] = { "llama", "llama", "llama" }, *mixed[] = { "llama", "mistral", "llama" },
		   *qwen2_4[] = { "qwen2", "qwen2", "qwen2", "qwen2" }, *llama4[] = { "llama", "llama", "llama", "llama" },
		   *qwen3[] = { "qwen3", "qwen3", "qwen3" }, *gpt[] = { "gpt2", "gpt2", "gpt2" };
	const char *plain = "base_model: b\nexperts:\n  - source_model: a\n  - source_model: c\n";
	assert_int_equal(pick(plain, llama3, &a, NULL), 0);
	assert_int_equal(a, MK_MOE_MIXTRAL);
	assert_int_equal(pick(plain, qwen3, &a, NULL), 0);
	assert_int_equal(a, MK_MOE_QWEN3);
	pick(plain, mixed, &a, "Mixtral needs all models of one model_type");
	pick(plain, gpt, &a, "Qwen3 MoE needs qwen3 models");
	/* models of a type no output takes (a DeepSeek-V3 base): the type is
	 * what each architecture says, not the recipe's shared experts */
	const char *ds3[] = { "deepseek_v3", "deepseek_v3", "deepseek_v3" };
	pick(plain, ds3, &a, "Mixtral needs llama or mistral models; DeepSeek MoE needs llama or mistral models; "
			     "Qwen MoE needs qwen2, llama or mistral models; Qwen3 MoE needs qwen3 models");
	const char *shared = "base_model: b\nexperts:\n  - source_model: a\n  - source_model: c\n"
			     "shared_experts:\n  - source_model: s\n";
	/* a shared expert without prompts: DeepSeek (Qwen MoE wants prompts) */
	assert_int_equal(pick(shared, llama4, &a, NULL), 0);
	assert_int_equal(a, MK_MOE_DEEPSEEK);
	const char *sharedp = "base_model: b\nexperts:\n  - source_model: a\n  - source_model: c\n"
			      "shared_experts:\n  - source_model: s\n    positive_prompts: [x]\n";
	assert_int_equal(pick(sharedp, llama4, &a, NULL), 0);
	assert_int_equal(a, MK_MOE_QWEN2);
	assert_int_equal(pick(sharedp, qwen2_4, &a, NULL), 0);
	assert_int_equal(a, MK_MOE_QWEN2);
	/* architecture: a case-insensitive prefix */
	assert_int_equal(pick("base_model: b\narchitecture: DEEP\nexperts:\n  - source_model: a\n  - source_model: c\n",
			      llama3, &a, NULL),
			 0);
	assert_int_equal(a, MK_MOE_DEEPSEEK);
	pick("base_model: b\narchitecture: qwen\nexperts:\n  - source_model: a\n  - source_model: c\n", llama3, &a,
	     "Qwen MoE needs exactly one shared expert; Qwen3 MoE needs qwen3 models");
	pick("base_model: b\narchitecture: llama\nexperts:\n  - source_model: a\n", llama3, &a, "names no output architecture");
}

static void test_random_gates(void **state)
{
	(void)state;
	enum { L = 3, E = 4, H = 256 };
	float *a = malloc(L * E * H * sizeof(float)), *b = malloc(L * E * H * sizeof(float));
	struct mk_err err = { 0 };
	assert_non_null(a);
	assert_non_null(b);
	/* normal: reproducible for a seed, another for another seed; the
	 * sample mean and variance of 3072 draws within 4 standard errors
	 * of 0 and 1 (se 0.018 and 0.026) */
	assert_int_equal(mk_moe_gates_random(MK_MOE_GATE_RANDOM, 42, L, E, H, a, &err), 0);
	assert_int_equal(mk_moe_gates_random(MK_MOE_GATE_RANDOM, 42, L, E, H, b, &err), 0);
	assert_memory_equal(a, b, L * E * H * sizeof(float));
	double s = 0, s2 = 0;
	for (size_t i = 0; i < L * E * H; i++) {
		assert_true(isfinite(a[i]));
		s += a[i];
		s2 += (double)a[i] * a[i];
	}
	double mean = s / (L * E * H), var = s2 / (L * E * H) - mean * mean;
	assert_true(fabs(mean) < 4 * 0.018);
	assert_true(fabs(var - 1) < 4 * 0.026);
	assert_int_equal(mk_moe_gates_random(MK_MOE_GATE_RANDOM, 43, L, E, H, b, &err), 0);
	assert_true(memcmp(a, b, L * E * H * sizeof(float)) != 0);
	/* layers differ from each other */
	assert_true(memcmp(a, a + E * H, E * H * sizeof(float)) != 0);
	/* uniform: inside (-1/sqrt(H), 1/sqrt(H)), mean near 0 */
	assert_int_equal(mk_moe_gates_random(MK_MOE_GATE_UNIFORM_RANDOM, 1, L, E, H, a, &err), 0);
	float bound = 1.0f / 16.0f, mx = 0;
	s = 0;
	for (size_t i = 0; i < L * E * H; i++) {
		assert_true(fabsf(a[i]) <= bound);
		mx = fabsf(a[i]) > mx ? fabsf(a[i]) : mx;
		s += a[i];
	}
	assert_true(mx > 0.9f * bound);
	assert_true(fabs(s / (L * E * H)) < 4 * bound / sqrt(3.0 * L * E * H));
	assert_int_not_equal(mk_moe_gates_random(MK_MOE_GATE_HIDDEN, 1, L, E, H, a, &err), 0);
	free(a);
	free(b);
}

static void test_cond(void **state)
{
	(void)state;
	/* rows e0 and e0 + e1: singular values sqrt((3 +- sqrt 5) / 2), the
	 * golden ratio squared apart: cond 2.618034 */
	float g[2 * 3] = { 1, 0, 0, 1, 1, 0 };
	assert_true(fabs(mk_moe_gate_cond(g, 2, 3) - 2.6180339887) < 1e-9);
	/* its transpose: the same */
	float t[3 * 2] = { 1, 1, 0, 1, 0, 0 };
	assert_true(fabs(mk_moe_gate_cond(t, 3, 2) - 2.6180339887) < 1e-9);
	/* orthonormal rows: 1; a repeated row: infinite */
	float o[2 * 2] = { 1, 0, 0, 1 }, r[2 * 2] = { 1, 2, 1, 2 };
	assert_true(fabs(mk_moe_gate_cond(o, 2, 2) - 1) < 1e-12);
	assert_true(isinf(mk_moe_gate_cond(r, 2, 2)) || mk_moe_gate_cond(r, 2, 2) > 1e6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_full),   cmocka_unit_test(test_parse_defaults),
		cmocka_unit_test(test_parse_repeated_keys),
		cmocka_unit_test(test_parse_refusals), cmocka_unit_test(test_checks),
		cmocka_unit_test(test_select_arch),  cmocka_unit_test(test_random_gates),
		cmocka_unit_test(test_cond),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
