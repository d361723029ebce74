/* test_arch_kinds.c - layers of several kinds: read from config.json
 * (lists, intervals, first_k_dense_replace, transformers' defaults), past
 * the config's last layer, the weights of each kind, and the output
 * config.json's record of them. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"

static struct mk_arch_registry *reg;

static int setup(void **state)
{
	struct mk_err err = { 0 };

	(void)state;
	return mk_arch_registry_open(&reg, &err) ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	mk_arch_registry_free(reg);
	return 0;
}

/* The arch chosen for a config text; NULL (and err) on failure. */
static struct mk_arch *arch_for(const char *json, struct mk_err *err)
{
	struct mk_hfconfig *c = NULL;
	struct mk_arch *a = NULL;

	if (mk_hfconfig_parse(json, strlen(json), "config.json", &c, err) ||
	    mk_arch_for_config(reg, c, NULL, &a, NULL, err))
		a = NULL;
	mk_hfconfig_free(c);
	return a;
}

static void kinds_are(const struct mk_arch *a, const char *want)
{
	char got[256] = "";

	for (int64_t i = 0; i < (int64_t)strlen(want); i++) {
		enum mk_layer_kind k = mk_arch_layer_kind(a, i);
		strcat(got, k == MK_LK_DENSE ? "D" : k == MK_LK_SPARSE ? "S" : k == MK_LK_LINEAR_ATTN ? "L" :
			    k == MK_LK_FULL_ATTN ? "F" : k == MK_LK_SLIDING_ATTN ? "W" : "-");
	}
	assert_string_equal(got, want);
}

static void test_read(void **state)
{
	struct mk_err err = { 0 };
	struct mk_arch *a;

	(void)state;
	/* deepseek_v3: 3 dense layers by default; past the end sparse */
	a = arch_for("{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", "
		     "\"num_hidden_layers\": 5, \"n_routed_experts\": 4}", &err);
	assert_non_null(a);
	kinds_are(a, "DDDSSSS");
	mk_arch_free(a);
	/* Kimi K2 says another model_type; first_k_dense_replace given */
	a = arch_for("{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"kimi_k2\", "
		     "\"num_hidden_layers\": 3, \"n_routed_experts\": 4, \"first_k_dense_replace\": 1}", &err);
	assert_non_null(a);
	assert_string_equal(a->file, "deepseek_v3");
	kinds_are(a, "DSSS");
	mk_arch_free(a);
	/* glm4_moe_lite: mlp_layer_types, else one dense layer */
	a = arch_for("{\"architectures\": [\"Glm4MoeLiteForCausalLM\"], \"model_type\": \"glm4_moe_lite\", "
		     "\"num_hidden_layers\": 3, \"n_routed_experts\": 4}", &err);
	assert_non_null(a);
	kinds_are(a, "DSSS");
	mk_arch_free(a);
	a = arch_for("{\"architectures\": [\"Glm4MoeLiteForCausalLM\"], \"model_type\": \"glm4_moe_lite\", "
		     "\"num_hidden_layers\": 3, \"n_routed_experts\": 4, "
		     "\"mlp_layer_types\": [\"dense\", \"dense\", \"sparse\"]}", &err);
	assert_non_null(a);
	kinds_are(a, "DDSS");
	mk_arch_free(a);
	/* qwen3_next: interval 4 by default, the pattern repeats */
	a = arch_for("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"model_type\": \"qwen3_next\", "
		     "\"num_hidden_layers\": 4}", &err);
	assert_non_null(a);
	kinds_are(a, "LLLFLLLF");
	mk_arch_free(a);
	a = arch_for("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"model_type\": \"qwen3_next\", "
		     "\"num_hidden_layers\": 2, \"layer_types\": [\"linear_attention\", \"full_attention\"]}", &err);
	assert_non_null(a);
	kinds_are(a, "LFLFL");
	mk_arch_free(a);
	/* gpt_oss: sliding and full alternate by default */
	a = arch_for("{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\", "
		     "\"num_hidden_layers\": 3}", &err);
	assert_non_null(a);
	kinds_are(a, "WFWF");
	mk_arch_free(a);
	/* one kind: llama */
	a = arch_for("{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
		     "\"num_hidden_layers\": 2}", &err);
	assert_non_null(a);
	kinds_are(a, "---");
	mk_arch_free(a);
	/* refused: a list of the wrong length, an unknown word, dense
	 * Qwen3-Next layers */
	assert_null(arch_for("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"num_hidden_layers\": 3, "
			     "\"layer_types\": [\"full_attention\"]}", &err));
	assert_non_null(strstr(err.msg, "\"layer_types\" is not a list of 3 layer types"));
	assert_null(arch_for("{\"architectures\": [\"GptOssForCausalLM\"], \"num_hidden_layers\": 1, "
			     "\"layer_types\": [\"linear_attention\"]}", &err));
	assert_non_null(strstr(err.msg, "is not \"sliding_attention\" or \"full_attention\""));
	assert_null(arch_for("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"num_hidden_layers\": 1, "
			     "\"mlp_only_layers\": [0]}", &err));
	assert_non_null(strstr(err.msg, "mlp_only_layers"));
}

static bool has(const struct mk_weight_list *l, const char *s)
{
	for (size_t i = 0; i < l->n; i++)
		if (strstr(l->w[i].name, s))
			return true;
	return false;
}

static void test_weights(void **state)
{
	struct mk_err err = { 0 };
	struct mk_weight_list l = { 0 }, m = { 0 };
	struct mk_arch *a;

	(void)state;
	a = arch_for("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"num_hidden_layers\": 2, "
		     "\"full_attention_interval\": 2}", &err);
	assert_non_null(a);
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_LAYER, 2, 0, &l, &err), 0);
	assert_true(has(&l, "layers.0.linear_attn.A_log"));
	assert_false(has(&l, "self_attn"));
	/* layer 0 named as a full-attention layer (a layer moved there) */
	assert_int_equal(mk_arch_layer_weights(a, 0, 2, 0, MK_LK_FULL_ATTN, &m, &err), 0);
	assert_true(has(&m, "layers.0.self_attn.q_norm.weight"));
	assert_false(has(&m, "linear_attn"));
	assert_true(has(&m, "layers.0.mlp.shared_expert_gate.weight"));
	mk_weight_list_free(&l);
	mk_weight_list_free(&m);
	mk_arch_free(a);
	a = arch_for("{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"num_hidden_layers\": 2, "
		     "\"n_routed_experts\": 4, \"first_k_dense_replace\": 1}", &err);
	assert_non_null(a);
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_LAYER, 2, 0, &l, &err), 0);
	assert_true(has(&l, "layers.0.mlp.gate_proj.weight"));
	assert_false(has(&l, "experts"));
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_LAYER, 2, 1, &m, &err), 0);
	assert_true(has(&m, "layers.1.mlp.experts.gate_up_proj"));
	assert_true(has(&m, "layers.1.mlp.gate.e_score_correction_bias"));
	assert_true(has(&m, "layers.1.self_attn.kv_a_proj_with_mqa.weight"));
	assert_false(has(&m, "mlp.gate_proj"));
	mk_weight_list_free(&l);
	mk_weight_list_free(&m);
	mk_arch_free(a);
}

static void test_config_kinds(void **state)
{
	struct mk_err err = { 0 };
	struct mk_arch *a;
	const char *q3n = "{\"architectures\": [\"Qwen3NextForCausalLM\"], \"num_hidden_layers\": 3, "
			  "\"layer_types\": [\"linear_attention\", \"full_attention\"]}";
	const unsigned char k3[] = { MK_LK_LINEAR_ATTN, MK_LK_FULL_ATTN, MK_LK_FULL_ATTN };
	char *t;
	size_t n;

	(void)state;
	a = arch_for("{\"architectures\": [\"Qwen3NextForCausalLM\"], \"num_hidden_layers\": 2, "
		     "\"layer_types\": [\"linear_attention\", \"full_attention\"]}", &err);
	assert_non_null(a);
	/* the list of the old length is rewritten */
	t = strdup(q3n);
	n = strlen(t);
	assert_int_equal(mk_hfconfig_set_layer_kinds(a, k3, 3, &t, &n, &err), 0);
	assert_non_null(strstr(t, "\"full_attention\",\n    \"full_attention\"\n  ]"));
	free(t);
	mk_arch_free(a);
	/* first_k_dense_replace: the leading dense count, or refused */
	a = arch_for("{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"num_hidden_layers\": 2, "
		     "\"n_routed_experts\": 4, \"first_k_dense_replace\": 1}", &err);
	assert_non_null(a);
	{
		const unsigned char dd[] = { MK_LK_DENSE, MK_LK_DENSE, MK_LK_SPARSE };
		const unsigned char bad[] = { MK_LK_DENSE, MK_LK_SPARSE, MK_LK_DENSE };
		const char *ds = "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"num_hidden_layers\": 3, "
				 "\"n_routed_experts\": 4, \"first_k_dense_replace\": 1}";
		t = strdup(ds);
		n = strlen(t);
		assert_int_equal(mk_hfconfig_set_layer_kinds(a, dd, 3, &t, &n, &err), 0);
		assert_non_null(strstr(t, "\"first_k_dense_replace\": 2"));
		free(t);
		t = strdup(ds);
		n = strlen(t);
		assert_int_equal(mk_hfconfig_set_layer_kinds(a, bad, 3, &t, &n, &err), -MK_EINVAL);
		assert_non_null(strstr(err.msg, "output layer 2 is a dense layer after sparse (MoE) layer 1"));
		free(t);
	}
	mk_arch_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read),
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_config_kinds),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
