/* test_arch.c - architecture definitions: embedded files, the registry,
 * template substitution, planned weight lists, name resolution, config
 * values, the procedural classes, inference, fused experts and the output
 * config.json. */
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

	if (mk_arch_registry_open(&reg, &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	mk_arch_registry_free(reg);
	return 0;
}

static struct mk_hfconfig *cfg_of(const char *text)
{
	struct mk_hfconfig *c = NULL;
	struct mk_err err = { 0 };

	assert_int_equal(mk_hfconfig_parse(text, strlen(text), "cfg.json", &c, &err), 0);
	return c;
}

/* Names of a list joined by '\n' (static buffer). */
static const char *joined(const struct mk_weight_list *l, size_t from, size_t to)
{
	static char buf[65536];
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = from; i < to && i < l->n; i++)
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s", i > from ? "\n" : "", l->w[i].name);
	return buf;
}

static bool set_has(void *ctx, const char *name)
{
	for (const char *const *p = ctx; *p; p++)
		if (!strcmp(*p, name))
			return true;
	return false;
}

/* ------------------------------------------------------------------ tests */

static void test_embedded(void **state)
{
	const struct mk_arch_file *f;
	struct mk_err err = { 0 };
	size_t n;

	f = mk_arch_files(&n);
	assert_int_equal(n, 66);
	assert_int_equal(mk_arch_registry_count(reg), 66);
	for (size_t i = 0; i < n; i++) {
		struct mk_arch *a = NULL;
		assert_true(f[i].len > 100);
		assert_int_equal(f[i].data[f[i].len], 0);
		assert_int_equal(f[i].data[0], '{');
		if (i)
			assert_true(strcmp(f[i - 1].name, f[i].name) < 0);
		assert_int_equal(mk_arch_parse((const char *)f[i].data, f[i].len, "x", &a, &err), 0);
		assert_true(a->nmodules >= 1);
		assert_true(mk_arch_equal(a, mk_arch_registry_at(reg, i)) ||
			    /* only the file stem differs: equality ignores it */ false);
		mk_arch_free(a);
	}
	assert_string_equal(f[0].name, "afmoe_partial.json");
	assert_string_equal(mk_arch_registry_at(reg, 0)->file, "afmoe_partial");
	/* spot checks of the shipped definitions (src/arch/data) */
	const struct mk_arch *a = mk_arch_registry_file(reg, "bert");
	assert_non_null(a);
	assert_int_equal(a->modules[0].npre, 6);
	assert_int_equal(a->modules[0].nlayer, 16);
	assert_int_equal(a->modules[0].npost, 2);
	a = mk_arch_registry_file(reg, "gemma3vl");
	assert_int_equal(a->nmodules, 3);
	assert_string_equal(a->modules[0].name, "text_decoder");
	assert_string_equal(a->modules[0].weight_prefix, "language_model.");
	assert_string_equal(a->modules[0].num_layers_key, "text_config.num_hidden_layers");
	assert_string_equal(a->modules[1].name, "multi_modal_projector");
	assert_int_equal(a->modules[1].override_num_layers, 0);
	assert_null(a->modules[1].num_layers_key);
	assert_string_equal(mk_arch_vocab_key(a), "text_config.vocab_size");
	assert_int_equal(a->ntagalong, 2);
	assert_string_equal(a->tagalong_files[1], "processor_config.json");
	a = mk_arch_registry_file(reg, "llama");
	assert_string_equal(mk_arch_vocab_key(a), "vocab_size");
	assert_int_equal(a->modules[0].override_num_layers, -1);
	a = mk_arch_registry_file(reg, "bert-masked-lm");
	bool forced = false;
	for (size_t i = 0; i < a->modules[0].npre; i++)
		if (a->modules[0].pre[i].force_dtype) {
			assert_string_equal(a->modules[0].pre[i].force_dtype, "int64");
			forced = true;
		}
	assert_true(forced);
}

static void test_parse_errors(void **state)
{
	static const struct { const char *json, *msg; } bad[] = {
		{ "[]", "top level must be an object" },
		{ "{\"kind\": \"weird\"}", "unknown kind \"weird\"" },
		{ "{\"architectures\": [], \"pre_weights\": [], \"post_weights\": [], "
		  "\"layer_templates\": {\"weights\": []}}", "\"model_type\" is missing" },
		{ "{\"model_type\": \"x\", \"architectures\": [], \"pre_weights\": [{}], \"post_weights\": [], "
		  "\"layer_templates\": {\"weights\": []}}", "\"name\" is missing" },
		{ "{\"model_type\": \"x\", \"architectures\": [], \"pre_weights\": [], \"post_weights\": [], "
		  "\"layer_templates\": {\"weights\": [{\"name\": \"a\", \"optional\": 1}]}}",
		  "\"optional\" must be true or false" },
		{ "{\"model_type\": \"x\", \"architectures\": [], \"pre_weights\": [], \"post_weights\": []}",
		  "\"layer_templates\" is missing" },
		{ "{\"kind\": \"modular\", \"model_type\": \"x\", \"architectures\": [], \"modules\": "
		  "{\"m\": {\"weight_prefix\": 3}}}", "must be a string" },
		{ "{\"a\": 1, \"a\": 2}", "invalid JSON" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct mk_err err = { 0 };
		struct mk_arch *a = (struct mk_arch *)1;
		assert_int_equal(mk_arch_parse(bad[i].json, strlen(bad[i].json), "bad", &a, &err), -MK_EFORMAT);
		assert_null(a);
		if (!strstr(err.msg, bad[i].msg))
			fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
		assert_non_null(strstr(err.msg, "architecture 'bad'"));
	}
}

static void test_registry(void **state)
{
	assert_string_equal(mk_arch_registry_find(reg, "LlamaForCausalLM", NULL)->file, "llama");
	assert_string_equal(mk_arch_registry_find(reg, "LLaMaForCausalLM", "whatever")->file, "llama");
	assert_string_equal(mk_arch_registry_find(reg, "BertForTokenClassification", NULL)->file,
			    "bert-sequence-classification");
	assert_string_equal(mk_arch_registry_find(reg, "PhiForCausalLM", "phi")->file, "phi2");
	assert_string_equal(mk_arch_registry_find(reg, "PhiForCausalLM", "phi-msft")->file, "phi2-old");
	assert_null(mk_arch_registry_find(reg, "PhiForCausalLM", "phi3"));
	assert_null(mk_arch_registry_find(reg, "PhiForCausalLM", NULL));
	assert_null(mk_arch_registry_find(reg, "NoSuchModel", "llama"));
	assert_string_equal(mk_arch_registry_find(reg, "_AfmoePartialForCausalLM", NULL)->file, "afmoe_partial");
	assert_null(mk_arch_registry_file(reg, "nope"));
	/* mixing check */
	assert_true(mk_arch_equal(mk_arch_registry_file(reg, "llama"), mk_arch_registry_file(reg, "llama")));
	assert_false(mk_arch_equal(mk_arch_registry_file(reg, "llama"), mk_arch_registry_file(reg, "mistral")));
}

static void test_subst(void **state)
{
	static const struct { const char *in; int64_t n, l; const char *out; } ok[] = {
		{ "model.layers.${layer_index}.mlp", 4, 3, "model.layers.3.mlp" },
		{ "a.${layer_index+1}.b.${layer_index-1}", 4, 3, "a.4.b.2" },
		{ "layers.${num_layers}.linear", 5, -1, "layers.5.linear" },
		{ "${num_layers+1}/${num_layers-1}", 5, -1, "6/4" },
		{ "cost: $$5 {x}", 1, -1, "cost: $5 {x}" },
		{ "$layer_index.w{}", 9, 7, "7.w{}" },
		{ "$layer_index+1.x{", 9, 7, "8.x{" },
		{ "no braces: $anything $$", 1, -1, "no braces: $anything $$" },
		{ "plain.name", 1, 0, "plain.name" },
	};
	static const struct { const char *in; int64_t l; const char *msg; } bad[] = {
		{ "${foo}", 0, "unknown placeholder 'foo'" },
		{ "x.${layer_index}", -1, "layer_index outside a layer template" },
		{ "${layer_index+2}", 0, "invalid placeholder" },
		{ "${", 0, "invalid placeholder" },
		{ "$ {num_layers}", 0, "invalid placeholder" },
		{ "{$Num_layers}", 0, "unknown placeholder 'Num_layers'" },
	};
	struct mk_err err = { 0 };
	char *s;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(mk_arch_subst(ok[i].in, ok[i].n, ok[i].l, &s, &err), 0);
		assert_string_equal(s, ok[i].out);
		free(s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		s = (char *)1;
		assert_int_equal(mk_arch_subst(bad[i].in, 3, bad[i].l, &s, &err), -MK_EFORMAT);
		assert_null(s);
		if (!strstr(err.msg, bad[i].msg))
			fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
	}
}

static void test_llama_planned(void **state)
{
	const struct mk_arch *a = mk_arch_registry_file(reg, "llama");
	struct mk_weight_list l = { 0 };
	struct mk_err err = { 0 };
	int64_t n = 2;
	static const char *const expect =
		"model.embed_tokens.weight\n"
		"model.layers.0.input_layernorm.weight\n"
		"model.layers.0.self_attn.q_proj.weight\n"
		"model.layers.0.self_attn.k_proj.weight\n"
		"model.layers.0.self_attn.v_proj.weight\n"
		"model.layers.0.self_attn.o_proj.weight\n"
		"model.layers.0.post_attention_layernorm.weight\n"
		"model.layers.0.mlp.up_proj.weight\n"
		"model.layers.0.mlp.gate_proj.weight\n"
		"model.layers.0.mlp.down_proj.weight\n"
		"model.layers.1.input_layernorm.weight\n"
		"model.layers.1.self_attn.q_proj.weight\n"
		"model.layers.1.self_attn.k_proj.weight\n"
		"model.layers.1.self_attn.v_proj.weight\n"
		"model.layers.1.self_attn.o_proj.weight\n"
		"model.layers.1.post_attention_layernorm.weight\n"
		"model.layers.1.mlp.up_proj.weight\n"
		"model.layers.1.mlp.gate_proj.weight\n"
		"model.layers.1.mlp.down_proj.weight\n"
		"model.norm.weight\n"
		"lm_head.weight";

	assert_int_equal(mk_arch_planned(a, &n, &l, &err), 0);
	assert_int_equal(l.n, 21);
	assert_string_equal(joined(&l, 0, l.n), expect);
	assert_true(l.w[0].is_embed);
	assert_false(l.w[0].optional);
	assert_int_equal(l.w[0].section, MK_WS_PRE);
	assert_int_equal(l.w[0].layer, -1);
	assert_int_equal(l.w[11].section, MK_WS_LAYER);
	assert_int_equal(l.w[11].layer, 1);
	assert_int_equal(l.w[19].section, MK_WS_POST);
	assert_true(l.w[20].optional);
	assert_true(l.w[20].is_embed);
	assert_int_equal(l.w[20].ntied, 1);
	assert_string_equal(l.w[20].tied_names[0], "model.embed_tokens.weight");
	for (size_t i = 0; i < l.n; i++)
		assert_int_equal(l.w[i].module, 0);
	mk_weight_list_free(&l);
	assert_null(l.w);

	/* one section alone, appended; a layer count from config.json */
	struct mk_hfconfig *c = cfg_of("{\"num_hidden_layers\": 7}");
	assert_int_equal(mk_arch_num_layers(a, 0, c, &n, &err), 0);
	assert_int_equal(n, 7);
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_LAYER, n, 6, &l, &err), 0);
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_POST, n, -1, &l, &err), 0);
	assert_int_equal(l.n, 11);
	assert_string_equal(l.w[8].name, "model.layers.6.mlp.down_proj.weight");
	assert_string_equal(l.w[9].name, "model.norm.weight");
	mk_weight_list_free(&l);
	mk_hfconfig_free(c);
	c = cfg_of("{\"hidden_size\": 7}");
	assert_int_equal(mk_arch_num_layers(a, 0, c, &n, &err), -MK_ENOENT);
	assert_non_null(strstr(err.msg, "num_hidden_layers"));
	assert_non_null(strstr(err.msg, "cfg.json"));
	mk_hfconfig_free(c);
}

static void test_phi1_num_layers(void **state)
{
	const struct mk_arch *a = mk_arch_registry_file(reg, "phi-1");
	struct mk_weight_list l = { 0 };
	struct mk_err err = { 0 };
	int64_t n = 3;

	/* post weights use ${num_layers}: the output's count */
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_POST, n, -1, &l, &err), 0);
	assert_true(l.n >= 1);
	assert_string_equal(l.w[0].name, "layers.3.linear.bias");
	assert_string_equal(l.w[1].name, "layers.3.linear.weight");
	mk_weight_list_free(&l);
}

static void test_modular(void **state)
{
	const struct mk_arch *a = mk_arch_registry_file(reg, "whisper");
	struct mk_weight_list l = { 0 };
	struct mk_err err = { 0 };
	int64_t n[2] = { 1, 2 };

	assert_int_equal(a->nmodules, 2);
	assert_string_equal(a->modules[0].name, "decoder");
	assert_string_equal(a->modules[1].name, "encoder");
	assert_int_equal(mk_arch_planned(a, n, &l, &err), 0);
	assert_int_equal(l.n, (2 + 24 * 1 + 2) + (5 + 15 * 2 + 2));
	/* the decoder's prefix lacks its dot (the data's quirk, kept) */
	assert_string_equal(l.w[0].name, "model.decoderembed_tokens.weight");
	assert_string_equal(l.w[2].name, "model.decoderlayers.0.encoder_attn.k_proj.weight");
	assert_string_equal(l.w[27].name, "model.decoderlayer_norm.weight");
	assert_int_equal(l.w[27].module, 0);
	assert_string_equal(l.w[28].name, "model.encoder.embed_positions.weight");
	assert_int_equal(l.w[28].module, 1);
	assert_int_equal(l.w[28].section, MK_WS_PRE);
	assert_int_equal(l.w[l.n - 1].module, 1);
	assert_string_equal(l.w[l.n - 1].name, "model.encoder.layer_norm.weight");
	mk_weight_list_free(&l);

	/* prefixes apply to aliases and tied names too */
	a = mk_arch_registry_file(reg, "gemma3vl");
	struct mk_hfconfig *c = cfg_of("{\"text_config\": {\"num_hidden_layers\": 2}, "
				       "\"vision_config\": {\"num_hidden_layers\": 1}}");
	int64_t m[3];
	for (size_t i = 0; i < 3; i++)
		assert_int_equal(mk_arch_num_layers(a, i, c, &m[i], &err), 0);
	assert_int_equal(m[0], 2);
	assert_int_equal(m[1], 0);
	assert_int_equal(m[2], 1);
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_POST, 2, -1, &l, &err), 0);
	bool tied = false;
	for (size_t i = 0; i < l.n; i++) {
		assert_memory_equal(l.w[i].name, "language_model.", 15);
		for (size_t k = 0; k < l.w[i].ntied; k++) {
			assert_memory_equal(l.w[i].tied_names[k], "language_model.", 15);
			tied = true;
		}
	}
	assert_true(tied);
	mk_weight_list_free(&l);
	mk_hfconfig_free(c);

	/* qwen2_vl: the projector plans mlp.0/mlp.2 twice; kept once */
	a = mk_arch_registry_file(reg, "qwen2_vl");
	int64_t q[3] = { 1, 2, 1 };
	assert_int_equal(mk_arch_planned(a, q, &l, &err), 0);
	size_t seen = 0, first = 0;
	for (size_t i = 0; i < l.n; i++) {
		for (size_t j = i + 1; j < l.n; j++)
			assert_string_not_equal(l.w[i].name, l.w[j].name);
		if (!strcmp(l.w[i].name, "visual.merger.mlp.0.weight")) {
			seen++;
			first = i;
		}
	}
	assert_int_equal(seen, 1);
	assert_string_equal(l.w[first - 1].name, "visual.merger.ln_q.bias");
	assert_int_equal(l.w[first].layer, 1);   /* the last copy's fields */
	mk_weight_list_free(&l);
}

static void test_resolve(void **state)
{
	const struct mk_arch *a = mk_arch_registry_file(reg, "gpt2");
	struct mk_weight_list l = { 0 };
	struct mk_err err = { 0 };
	const char *const ck[] = { "wte.weight", "h.0.attn.c_attn.weight", NULL };
	const char *const tied[] = { "model.embed_tokens.weight", NULL };
	const char *const none[] = { NULL };
	int how = -1;

	assert_int_equal(mk_arch_weights(a, 0, MK_WS_PRE, 1, -1, &l, &err), 0);
	assert_string_equal(l.w[0].name, "transformer.wte.weight");
	assert_string_equal(mk_weight_resolve(&l.w[0], set_has, (void *)ck, &how), "wte.weight");
	assert_int_equal(how, 1);
	mk_weight_list_free(&l);
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_LAYER, 1, 0, &l, &err), 0);
	assert_string_equal(l.w[0].name, "transformer.h.0.attn.c_attn.weight");
	assert_string_equal(l.w[0].aliases[0], "h.0.attn.c_attn.weight");
	assert_string_equal(mk_weight_resolve(&l.w[0], set_has, (void *)ck, &how), "h.0.attn.c_attn.weight");
	mk_weight_list_free(&l);

	a = mk_arch_registry_file(reg, "llama");
	assert_int_equal(mk_arch_weights(a, 0, MK_WS_POST, 1, -1, &l, &err), 0);
	assert_string_equal(mk_weight_resolve(&l.w[1], set_has, (void *)tied, &how), "model.embed_tokens.weight");
	assert_int_equal(how, 2);
	assert_null(mk_weight_resolve(&l.w[1], set_has, (void *)none, &how));
	const char *const both[] = { "model.embed_tokens.weight", "lm_head.weight", NULL };
	assert_string_equal(mk_weight_resolve(&l.w[1], set_has, (void *)both, &how), "lm_head.weight");
	assert_int_equal(how, 0);
	mk_weight_list_free(&l);
}

static void test_dotted(void **state)
{
	struct mk_hfconfig *c = cfg_of("{\"text_config\": {\"num_hidden_layers\": 24, \"f\": 3.0, \"g\": 2.5,"
				       " \"s\": \"x\"}, \"model_type\": \"m\", \"n\": null}");
	struct mk_err err = { 0 };
	const char *s;
	int64_t v;

	assert_int_equal(mk_hfconfig_int(c, "text_config.num_hidden_layers", &v, &err), 0);
	assert_int_equal(v, 24);
	assert_int_equal(mk_hfconfig_int(c, "text_config.f", &v, &err), 0);
	assert_int_equal(v, 3);
	assert_int_equal(mk_hfconfig_int(c, "text_config.g", &v, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "\"text_config.g\" is not an integer"));
	assert_int_equal(mk_hfconfig_int(c, "text_config.missing", &v, &err), -MK_ENOENT);
	assert_non_null(strstr(err.msg, "cfg.json has no \"text_config.missing\""));
	assert_int_equal(mk_hfconfig_int(c, "vision_config.depth", &v, &err), -MK_ENOENT);
	assert_non_null(strstr(err.msg, "has no \"vision_config\" (needed: \"vision_config.depth\")"));
	assert_int_equal(mk_hfconfig_int(c, "model_type.x", &v, &err), -MK_ENOENT);
	assert_int_equal(mk_hfconfig_int(c, "n", &v, &err), -MK_EFORMAT);
	assert_int_equal(mk_hfconfig_str(c, "text_config.s", &s, &err), 0);
	assert_string_equal(s, "x");
	assert_int_equal(mk_hfconfig_str(c, "text_config.f", &s, &err), -MK_EFORMAT);
	assert_true(mk_hfconfig_has(c, "text_config"));
	assert_false(mk_hfconfig_has(c, "text_config.nope"));
	assert_string_equal(mk_hfconfig_model_type(c), "m");
	mk_hfconfig_free(c);
	struct mk_hfconfig *c2 = NULL;
	assert_int_equal(mk_hfconfig_parse("[1]", 3, "x.json", &c2, &err), -MK_EFORMAT);
	assert_int_equal(mk_hfconfig_parse("{", 1, "x.json", &c2, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "x.json:1:2: expected a key"));   /* line and column */
}

static void test_for_config(void **state)
{
	struct mk_err err = { 0 };
	struct mk_arch *a = NULL;
	char *unk = NULL;
	struct mk_hfconfig *c;

	c = cfg_of("{\"architectures\": [\"PhiForCausalLM\"], \"model_type\": \"phi-msft\"}");
	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, &unk, &err), 0);
	assert_string_equal(a->file, "phi2-old");
	assert_null(unk);
	mk_arch_free(a);
	/* an override replaces the list */
	assert_int_equal(mk_arch_for_config(reg, c, "MistralForCausalLM", &a, &unk, &err), 0);
	assert_string_equal(a->file, "mistral");
	mk_arch_free(a);
	mk_hfconfig_free(c);

	c = cfg_of("{\"architectures\": [\"PhiForCausalLM\"], \"model_type\": \"phi3\"}");
	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, &unk, &err), 0);
	assert_null(a);
	assert_string_equal(unk, "PhiForCausalLM");
	free(unk);
	mk_hfconfig_free(c);

	c = cfg_of("{\"architectures\": [\"A\", \"B\"]}");
	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, &unk, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "More than one architecture in config?"));
	assert_non_null(strstr(err.msg, "cfg.json"));
	mk_hfconfig_free(c);
	c = cfg_of("{\"model_type\": \"llama\"}");
	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, &unk, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "no \"architectures\" list"));
	mk_hfconfig_free(c);
	c = cfg_of("{\"architectures\": [\"AfmoeForCausalLM\"]}");
	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, &unk, &err), -MK_ENOENT);
	assert_non_null(strstr(err.msg, "AfmoeForCausalLM: cfg.json has no \"num_experts\""));
	assert_null(a);
	mk_hfconfig_free(c);
}

static void test_glm4moe(void **state)
{
	struct mk_hfconfig *c = cfg_of("{\"architectures\": [\"Glm4MoeForCausalLM\"], \"model_type\": \"glm4_moe\","
				       " \"num_hidden_layers\": 2, \"first_k_dense_replace\": 1,"
				       " \"n_routed_experts\": 4}");
	struct mk_weight_list l = { 0 };
	struct mk_err err = { 0 };
	struct mk_arch *a = NULL;
	int64_t n;

	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, NULL, &err), 0);
	assert_int_equal(a->kind, MK_ARCH_GLM4MOE);
	assert_int_equal(a->num_experts, 4);
	assert_int_equal(a->first_k_dense, 1);
	assert_string_equal(a->model_type, "glm4_moe");
	assert_int_equal(mk_arch_num_layers(a, 0, c, &n, &err), 0);
	assert_int_equal(mk_arch_planned(a, &n, &l, &err), 0);
	assert_int_equal(l.n, 1 + 14 + 18 + 2);
	assert_string_equal(l.w[2].name, "model.layers.0.mlp.down_proj.weight");   /* dense layer 0 */
	assert_string_equal(joined(&l, 15, 33),
			    "model.layers.1.mlp.experts.gate_up_proj\n"
			    "model.layers.1.mlp.experts.down_proj\n"
			    "model.layers.1.mlp.gate.weight\n"
			    "model.layers.1.mlp.gate.e_score_correction_bias\n"
			    "model.layers.1.mlp.shared_experts.gate_proj.weight\n"
			    "model.layers.1.mlp.shared_experts.up_proj.weight\n"
			    "model.layers.1.mlp.shared_experts.down_proj.weight\n"
			    "model.layers.1.input_layernorm.weight\n"
			    "model.layers.1.post_attention_layernorm.weight\n"
			    "model.layers.1.self_attn.q_norm.weight\n"
			    "model.layers.1.self_attn.k_norm.weight\n"
			    "model.layers.1.self_attn.q_proj.weight\n"
			    "model.layers.1.self_attn.q_proj.bias\n"
			    "model.layers.1.self_attn.k_proj.weight\n"
			    "model.layers.1.self_attn.k_proj.bias\n"
			    "model.layers.1.self_attn.v_proj.weight\n"
			    "model.layers.1.self_attn.v_proj.bias\n"
			    "model.layers.1.self_attn.o_proj.weight");
	for (size_t i = 15; i < 22; i++)
		assert_false(l.w[i].optional);
	assert_true(l.w[24].optional);   /* q_norm keeps the template's flag */
	mk_weight_list_free(&l);
	/* the same class with another expert count is a different layout */
	struct mk_arch *b = NULL;
	assert_int_equal(mk_arch_clone(a, &b, &err), 0);
	assert_true(mk_arch_equal(a, b));
	b->num_experts = 8;
	assert_false(mk_arch_equal(a, b));
	mk_arch_free(b);
	mk_arch_free(a);
	mk_hfconfig_free(c);
}

static void test_afmoe(void **state)
{
	struct mk_hfconfig *c = cfg_of("{\"architectures\": [\"AfmoeForCausalLM\"], \"model_type\": \"afmoe\","
				       " \"num_hidden_layers\": 2, \"num_experts\": 2}");
	struct mk_weight_list l = { 0 };
	struct mk_err err = { 0 };
	struct mk_arch *a = NULL;
	int64_t n = 2;

	assert_int_equal(mk_arch_for_config(reg, c, NULL, &a, NULL, &err), 0);
	assert_int_equal(a->kind, MK_ARCH_AFMOE);
	assert_string_equal(a->architectures[0], "AfmoeForCausalLM");
	assert_string_equal(a->file, "afmoe_partial");
	assert_int_equal(mk_arch_planned(a, &n, &l, &err), 0);
	assert_int_equal(l.n, 1 + 2 * (19 + 6) + 2);
	assert_string_equal(l.w[19].name, "model.layers.0.post_attention_layernorm.weight");
	assert_string_equal(joined(&l, 20, 26),
			    "model.layers.0.mlp.experts.0.up_proj.weight\n"
			    "model.layers.0.mlp.experts.0.gate_proj.weight\n"
			    "model.layers.0.mlp.experts.0.down_proj.weight\n"
			    "model.layers.0.mlp.experts.1.up_proj.weight\n"
			    "model.layers.0.mlp.experts.1.gate_proj.weight\n"
			    "model.layers.0.mlp.experts.1.down_proj.weight");
	for (size_t i = 20; i < 26; i++) {
		assert_true(l.w[i].optional);
		assert_int_equal(l.w[i].layer, 0);
	}
	assert_string_equal(l.w[26].name, "model.layers.1.input_layernorm.weight");
	mk_weight_list_free(&l);
	mk_arch_free(a);
	mk_hfconfig_free(c);
}

static void test_infer(void **state)
{
	const char *const a_names[] = {
		"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
		"model.layers.0.attn.weight", "model.layers.0.mlp.weight",
		"model.layers.1.attn.weight", "model.layers.1.mlp.weight", "model.layers.1.extra.weight",
	};
	const char *const b_names[] = {
		"model.embed_tokens.weight", "model.norm.weight",
		"model.layers.0.attn.weight", "model.layers.0.mlp.weight",
		"model.layers.1.attn.weight", "model.layers.1.mlp.weight",
	};
	struct mk_arch_names m[2] = { { a_names, NULL, 8, 0 }, { b_names, NULL, 6, 0 } };
	struct mk_err err = { 0 };
	struct mk_arch *a = NULL;

	assert_int_equal(mk_arch_infer(m, 2, &a, &err), 0);
	assert_int_equal(a->kind, MK_ARCH_INFERRED);
	assert_int_equal(a->nmodules, 1);
	const struct mk_arch_module *d = &a->modules[0];
	assert_string_equal(d->name, "default");
	assert_int_equal(d->override_num_layers, 2);
	assert_null(d->num_layers_key);
	assert_null(d->weight_prefix);
	assert_int_equal(d->npre, 3);
	assert_int_equal(d->npost, 0);
	assert_string_equal(d->pre[0].name, "lm_head.weight");
	assert_true(d->pre[0].optional);
	assert_true(d->pre[0].is_embed);
	assert_int_equal(d->pre[0].ntied, 1);
	assert_string_equal(d->pre[0].tied_names[0], "model.embed_tokens.weight");
	assert_string_equal(d->pre[1].name, "model.embed_tokens.weight");
	assert_false(d->pre[1].optional);
	assert_true(d->pre[1].is_embed);
	assert_string_equal(d->pre[2].name, "model.norm.weight");
	assert_false(d->pre[2].is_embed);
	assert_int_equal(d->nlayer, 3);
	assert_string_equal(d->layer[0].name, "model.layers.${layer_index}.attn.weight");
	assert_false(d->layer[0].optional);
	assert_string_equal(d->layer[1].name, "model.layers.${layer_index}.extra.weight");
	assert_true(d->layer[1].optional);   /* missing in layer 0 and in b */
	assert_string_equal(d->layer[2].name, "model.layers.${layer_index}.mlp.weight");
	/* the inferred definition plans like any other */
	struct mk_weight_list l = { 0 };
	int64_t n = 2;
	assert_int_equal(mk_arch_planned(a, &n, &l, &err), 0);
	assert_int_equal(l.n, 3 + 6);
	assert_string_equal(l.w[8].name, "model.layers.1.mlp.weight");
	mk_weight_list_free(&l);
	mk_arch_free(a);

	/* several prefixes: a catch-all first, then one module per prefix;
	 * shape information decides is_embed */
	const char *const v_names[] = {
		"model.embed_tokens.weight", "model.layers.0.x.weight", "model.layers.3.x.weight",
		"vision.blocks.0.y.weight", "vision.embed_positions.weight", "lm_head.weight",
	};
	const uint64_t rows[] = { 32, 8, 8, 8, 32, 8 };
	struct mk_arch_names v = { v_names, rows, 6, 32 };
	assert_int_equal(mk_arch_infer(&v, 1, &a, &err), 0);
	assert_int_equal(a->nmodules, 3);
	assert_string_equal(a->modules[0].name, "default");
	assert_int_equal(a->modules[0].override_num_layers, 0);
	assert_int_equal(a->modules[0].npre, 3);
	assert_string_equal(a->modules[0].pre[0].name, "lm_head.weight");
	assert_false(a->modules[0].pre[0].is_embed);           /* 8 rows, vocab 32 */
	assert_true(a->modules[0].pre[1].is_embed);
	assert_true(a->modules[0].pre[2].is_embed);            /* 32 rows: by shape */
	assert_string_equal(a->modules[1].name, "model.layers");
	assert_int_equal(a->modules[1].override_num_layers, 4);
	assert_int_equal(a->modules[1].nlayer, 1);
	assert_true(a->modules[1].layer[0].optional);          /* layers 1, 2 missing */
	assert_string_equal(a->modules[2].name, "vision.blocks");
	assert_int_equal(a->modules[2].override_num_layers, 1);
	assert_string_equal(a->modules[2].layer[0].name, "vision.blocks.${layer_index}.y.weight");
	mk_arch_free(a);

	struct mk_arch_names e = { NULL, NULL, 0, 0 };
	assert_int_equal(mk_arch_infer(&e, 1, &a, &err), -MK_EINVAL);
	assert_null(a);
}

static void test_fused(void **state)
{
	const char *names[64];
	char buf[64][64];
	size_t n = 0;
	struct mk_err err = { 0 };
	struct mk_fused *f = NULL;

	/* qwen2_moe family, 11 experts listed in string order */
	const char *parts[] = { "gate_proj", "up_proj", "down_proj" };
	for (int e = 10; e >= 0; e--)
		for (int p = 0; p < 3; p++) {
			snprintf(buf[n], sizeof(buf[n]), "model.layers.3.mlp.experts.%d.%s.weight", e, parts[p]);
			names[n] = buf[n];
			n++;
		}
	assert_int_equal(mk_arch_fused("qwen3_moe", "model.layers.3.mlp.experts.gate_up_proj", names, n, &f,
				       &err), 0);
	assert_non_null(f);
	assert_int_equal(f->kind, MK_FUSED_STACK_CONCAT);
	assert_int_equal(f->axis, 0);
	assert_int_equal(f->nexperts, 11);
	assert_int_equal(f->nparts, 2);
	assert_string_equal(f->sources[0], "model.layers.3.mlp.experts.0.gate_proj.weight");
	assert_string_equal(f->sources[1], "model.layers.3.mlp.experts.0.up_proj.weight");
	assert_string_equal(f->sources[2], "model.layers.3.mlp.experts.1.gate_proj.weight");
	assert_string_equal(f->sources[21], "model.layers.3.mlp.experts.10.up_proj.weight");
	mk_fused_free(f);
	assert_int_equal(mk_arch_fused("glm4_moe", "model.layers.3.mlp.experts.down_proj", names, n, &f, &err), 0);
	assert_int_equal(f->kind, MK_FUSED_STACK);
	assert_int_equal(f->nparts, 1);
	assert_int_equal(f->nexperts, 11);
	assert_string_equal(f->sources[9], "model.layers.3.mlp.experts.9.down_proj.weight");
	assert_string_equal(f->sources[10], "model.layers.3.mlp.experts.10.down_proj.weight");
	mk_fused_free(f);
	/* not applicable: other layer, other model type, a plain name */
	assert_int_equal(mk_arch_fused("qwen3_moe", "model.layers.4.mlp.experts.down_proj", names, n, &f, &err), 0);
	assert_null(f);
	assert_int_equal(mk_arch_fused("llama", "model.layers.3.mlp.experts.down_proj", names, n, &f, &err), 0);
	assert_null(f);
	assert_false(mk_arch_fused_known("llama"));
	assert_true(mk_arch_fused_known("minimax"));
	assert_int_equal(mk_arch_fused("qwen3_moe", "model.layers.3.mlp.gate.weight", names, n, &f, &err), 0);
	assert_null(f);

	/* mixtral: w1/w3 rows concatenated, w2 stacked, gate renamed */
	const char *const mx[] = {
		"model.layers.0.block_sparse_moe.experts.0.w1.weight", "model.layers.0.block_sparse_moe.experts.0.w2.weight",
		"model.layers.0.block_sparse_moe.experts.0.w3.weight", "model.layers.0.block_sparse_moe.experts.1.w1.weight",
		"model.layers.0.block_sparse_moe.experts.1.w2.weight", "model.layers.0.block_sparse_moe.experts.1.w3.weight",
		"model.layers.0.block_sparse_moe.gate.weight",
	};
	assert_int_equal(mk_arch_fused("mixtral", "model.layers.0.mlp.experts.gate_up_proj", mx, 7, &f, &err), 0);
	assert_int_equal(f->nexperts, 2);
	assert_string_equal(f->sources[1], "model.layers.0.block_sparse_moe.experts.0.w3.weight");
	assert_string_equal(f->sources[2], "model.layers.0.block_sparse_moe.experts.1.w1.weight");
	mk_fused_free(f);
	assert_int_equal(mk_arch_fused("mixtral", "model.layers.0.mlp.gate.weight", mx, 7, &f, &err), 0);
	assert_int_equal(f->kind, MK_FUSED_RENAME);
	assert_string_equal(f->sources[0], "model.layers.0.block_sparse_moe.gate.weight");
	mk_fused_free(f);

	/* w1 for experts {0,1} with w3 for {1,2}: refused */
	const char *const bad[] = {
		"model.layers.0.mlp.experts.0.w1.weight", "model.layers.0.mlp.experts.1.w1.weight",
		"model.layers.0.mlp.experts.1.w3.weight", "model.layers.0.mlp.experts.2.w3.weight",
	};
	assert_int_equal(mk_arch_fused("mixtral", "model.layers.0.mlp.experts.gate_up_proj", bad, 4, &f, &err),
			 -MK_EMISMATCH);
	assert_null(f);
	assert_non_null(strstr(err.msg, "model.layers.0.mlp.experts.gate_up_proj"));
	const char *const gap[] = { "m.mlp.experts.0.down_proj.weight", "m.mlp.experts.2.down_proj.weight" };
	assert_int_equal(mk_arch_fused("olmoe", "m.mlp.experts.down_proj", gap, 2, &f, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "not numbered 0..1"));
}

static void test_config_edit(void **state)
{
	static const char donor[] =
		"{\"architectures\":[\"LlamaForCausalLM\"],\"rms_norm_eps\":1e-05,\"num_hidden_layers\":32,"
		"\"torch_dtype\":\"float16\",\"text_config\":{\"b\":[],\"a\":{}},\"name\":\"caf\\u00e9 \\ud83d\\ude00\\n\","
		"\"x\":0.02,\"y\":10000.0,\"z\":1e16,\"big\":1.5e300,\"small\":0.0001,\"neg\":-2.5e-07,"
		"\"rope\":{\"factor\":8.0,\"list\":[1,2.5,true,null]},\"third\":0.3333333333333333}";
	static const char expect[] =
		"{\n"
		"  \"architectures\": [\n"
		"    \"LlamaForCausalLM\"\n"
		"  ],\n"
		"  \"big\": 1.5e+300,\n"
		"  \"dtype\": \"bfloat16\",\n"
		"  \"name\": \"caf\\u00e9 \\ud83d\\ude00\\n\",\n"
		"  \"neg\": -2.5e-07,\n"
		"  \"num_hidden_layers\": 16,\n"
		"  \"rms_norm_eps\": 1e-05,\n"
		"  \"rope\": {\n"
		"    \"factor\": 8.0,\n"
		"    \"list\": [\n"
		"      1,\n"
		"      2.5,\n"
		"      true,\n"
		"      null\n"
		"    ]\n"
		"  },\n"
		"  \"small\": 0.0001,\n"
		"  \"text_config\": {\n"
		"    \"a\": {},\n"
		"    \"b\": []\n"
		"  },\n"
		"  \"third\": 0.3333333333333333,\n"
		"  \"torch_dtype\": \"bfloat16\",\n"
		"  \"vocab_size\": 40,\n"
		"  \"x\": 0.02,\n"
		"  \"y\": 10000.0,\n"
		"  \"z\": 1e+16\n"
		"}\n";
	const struct mk_arch *a = mk_arch_registry_file(reg, "llama");
	struct mk_err err = { 0 };
	char *out = NULL, *warn = NULL;
	size_t len;
	int64_t n = 16;

	assert_int_equal(mk_hfconfig_edit(donor, strlen(donor), "donor/config.json", a, "bfloat16", NULL, &n, 40, &out,
					&len, &warn, &err), 0);
	assert_string_equal(out, expect);
	assert_int_equal(len, strlen(expect));
	assert_null(warn);
	free(out);

	/* no edits: only the layout changes; no torch_dtype is added */
	assert_int_equal(mk_hfconfig_edit("{\"b\":1, \"a\":1.0}", 16, NULL, NULL, NULL, NULL, NULL, -1, &out, &len, NULL,
					&err), 0);
	assert_string_equal(out, "{\n  \"a\": 1.0,\n  \"b\": 1\n}\n");
	free(out);
	assert_int_equal(mk_hfconfig_edit("{}", 2, NULL, NULL, "float32", "MistralForCausalLM", NULL, -1, &out, &len, NULL, &err), 0);
	assert_string_equal(out, "{\n  \"architectures\": [\n    \"MistralForCausalLM\"\n  ],\n  \"dtype\": \"float32\"\n}\n");
	free(out);

	/* nested keys; a module without a key; a missing parent object */
	a = mk_arch_registry_file(reg, "gemma3vl");
	int64_t m[3] = { 4, 2, -1 };
	static const char vl[] = "{\"text_config\": {\"num_hidden_layers\": 8, \"vocab_size\": 10}}";
	assert_int_equal(mk_hfconfig_edit(vl, strlen(vl), "vl.json", a, NULL, NULL, m, 12, &out, &len, &warn, &err), 0);
	assert_string_equal(out, "{\n  \"text_config\": {\n    \"num_hidden_layers\": 4,\n"
				 "    \"vocab_size\": 12\n  }\n}\n");
	assert_non_null(warn);
	assert_non_null(strstr(warn, "module 'multi_modal_projector' has no configuration key"));
	free(out);
	free(warn);
	int64_t m2[3] = { 4, 0, 3 };
	assert_int_equal(mk_hfconfig_edit(vl, strlen(vl), "vl.json", a, NULL, NULL, m2, -1, &out, &len, &warn, &err), 0);
	assert_non_null(warn);
	assert_non_null(strstr(warn, "vl.json: cannot set \"vision_config.num_hidden_layers\""));
	assert_null(strstr(warn, "multi_modal_projector"));
	free(out);
	free(warn);

	assert_int_equal(mk_hfconfig_edit("[1]", 3, "c.json", NULL, NULL, NULL, NULL, -1, &out, &len, NULL, &err),
			 -MK_EFORMAT);
	assert_null(out);
	assert_non_null(strstr(err.msg, "c.json"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_embedded),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_registry),
		cmocka_unit_test(test_subst),
		cmocka_unit_test(test_llama_planned),
		cmocka_unit_test(test_phi1_num_layers),
		cmocka_unit_test(test_modular),
		cmocka_unit_test(test_resolve),
		cmocka_unit_test(test_dotted),
		cmocka_unit_test(test_for_config),
		cmocka_unit_test(test_glm4moe),
		cmocka_unit_test(test_afmoe),
		cmocka_unit_test(test_infer),
		cmocka_unit_test(test_fused),
		cmocka_unit_test(test_config_edit),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
