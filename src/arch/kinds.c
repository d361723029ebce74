/* kinds.c - layers of more than one kind: which kind each layer of a model
 * is (read from its config.json as transformers reads it), and the output
 * config.json's record of the kinds its layers came out with. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "arch/arch.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "arch_impl.h"

static const char *const kind_names[] = {
	[MK_LK_ANY] = "", [MK_LK_DENSE] = "dense", [MK_LK_SPARSE] = "sparse",
	[MK_LK_LINEAR_ATTN] = "linear_attention", [MK_LK_FULL_ATTN] = "full_attention",
	[MK_LK_SLIDING_ATTN] = "sliding_attention",
};

const char *mk_layer_kind_name(enum mk_layer_kind k)
{
	return (size_t)k < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[k] : "";
}

static enum mk_layer_kind kind_of_word(const char *s)
{
	for (size_t k = 1; k < sizeof(kind_names) / sizeof(kind_names[0]); k++)
		if (!strcmp(s, kind_names[k]))
			return (enum mk_layer_kind)k;
	return MK_LK_ANY;
}

/* The shortest p with kinds[i] == kinds[i % p] for every i < n. */
static size_t period_of(const unsigned char *kinds, size_t n)
{
	for (size_t p = 1; p < n; p++) {
		size_t i = p;
		while (i < n && kinds[i] == kinds[i % p])
			i++;
		if (i == n)
			return p;
	}
	return n;
}

enum mk_layer_kind mk_arch_layer_kind(const struct mk_arch *a, int64_t layer)
{
	if (!a || !a->nkinds || layer < 0)
		return MK_LK_ANY;
	if ((uint64_t)layer < a->nkinds)
		return (enum mk_layer_kind)a->kinds[layer];
	if (!a->kinds_periodic)
		return (enum mk_layer_kind)a->kinds[a->nkinds - 1];
	return (enum mk_layer_kind)a->kinds[(uint64_t)layer % period_of(a->kinds, a->nkinds)];
}

/* kinds from a list of words in the config (key), n layers; the words
 * allowed are `ok1` and `ok2`. */
static int kinds_from_list(const struct mk_hfconfig *cfg, const char *key, size_t n, enum mk_layer_kind ok1,
			   enum mk_layer_kind ok2, unsigned char *kinds, struct mk_err *err)
{
	json_t *v = json_object_get(mk_hfconfig_json(cfg), key);

	if (!json_is_array(v) || json_array_size(v) != n)
		return mk_err_set(err, MK_EFORMAT, "%s: \"%s\" is not a list of %zu layer types (one per layer)",
				  mk_hfconfig_label(cfg), key, n);
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(v, i);
		enum mk_layer_kind k = json_is_string(e) ? kind_of_word(json_string_value(e)) : MK_LK_ANY;
		if (k != ok1 && k != ok2)
			return mk_err_set(err, MK_EFORMAT, "%s: \"%s\"[%zu] is not \"%s\" or \"%s\"",
					  mk_hfconfig_label(cfg), key, i, kind_names[ok1], kind_names[ok2]);
		kinds[i] = (unsigned char)k;
	}
	return 0;
}

/* An integer config value with a default when absent. */
static int int_or(const struct mk_hfconfig *cfg, const char *key, int64_t dflt, int64_t *out, struct mk_err *err)
{
	if (!mk_hfconfig_has(cfg, key) || json_is_null(json_object_get(mk_hfconfig_json(cfg), key))) {
		*out = dflt;
		return 0;
	}
	return mk_hfconfig_int(cfg, key, out, err);
}

int mk_arch_read_kinds(struct mk_arch *a, const struct mk_hfconfig *cfg, struct mk_err *err)
{
	const char *cls = a->narchitectures ? a->architectures[0] : "";
	json_t *root = mk_hfconfig_json(cfg);
	unsigned char *kinds = NULL;
	int64_t n = 0, v = 0;
	int rc = 0;

	free(a->kinds);
	a->kinds = NULL;
	a->nkinds = 0;
	a->kinds_key = MK_KK_NONE;
	if (a->kind != MK_ARCH_GLM4MOE && a->kind != MK_ARCH_HYBRID && strcmp(cls, "GptOssForCausalLM"))
		return 0;
	if ((rc = mk_arch_num_layers(a, 0, cfg, &n, err)))
		return rc;
	if (!(kinds = malloc(n ? (size_t)n : 1)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (a->kind == MK_ARCH_GLM4MOE) {
		/* dense then sparse: mlp_layer_types when given (glm4_moe_lite),
		 * else first_k_dense_replace (glm4_moe: required; deepseek_v3:
		 * 3 by default; glm4_moe_lite: one dense layer by default) */
		a->kinds_periodic = false;
		if (json_is_array(json_object_get(root, "mlp_layer_types"))) {
			a->kinds_key = MK_KK_MLP_LAYER_TYPES;
			rc = kinds_from_list(cfg, "mlp_layer_types", (size_t)n, MK_LK_DENSE, MK_LK_SPARSE, kinds, err);
			for (v = 0; !rc && v < n && kinds[v] == MK_LK_DENSE; v++)
				;
		} else if (!strcmp(a->model_type, "glm4_moe_lite")) {
			a->kinds_key = MK_KK_MLP_LAYER_TYPES;
			v = 1;
		} else {
			a->kinds_key = MK_KK_FIRST_K_DENSE;
			rc = !strcmp(a->model_type, "deepseek_v3") ? int_or(cfg, "first_k_dense_replace", 3, &v, err)
								    : mk_hfconfig_int(cfg, "first_k_dense_replace", &v, err);
			if (!rc && v < 0)
				rc = mk_err_set(err, MK_EFORMAT, "%s: \"first_k_dense_replace\" is negative",
						mk_hfconfig_label(cfg));
		}
		if (!rc && a->kinds_key == MK_KK_FIRST_K_DENSE)
			for (int64_t i = 0; i < n; i++)
				kinds[i] = i < v ? MK_LK_DENSE : MK_LK_SPARSE;
		if (!rc && !json_is_array(json_object_get(root, "mlp_layer_types")) && a->kinds_key == MK_KK_MLP_LAYER_TYPES)
			for (int64_t i = 0; i < n; i++)
				kinds[i] = i < v ? MK_LK_DENSE : MK_LK_SPARSE;
		a->first_k_dense = v;
	} else {
		/* attention kinds, a repeating pattern: layer_types when given,
		 * else every full_attention_interval-th layer full (qwen3_next,
		 * 4 by default) or every second one (gpt_oss, sliding between) */
		bool q3n = a->kind == MK_ARCH_HYBRID;
		enum mk_layer_kind other = q3n ? MK_LK_LINEAR_ATTN : MK_LK_SLIDING_ATTN;
		a->kinds_periodic = true;
		a->kinds_key = MK_KK_LAYER_TYPES;
		if (json_is_array(json_object_get(root, "layer_types"))) {
			rc = kinds_from_list(cfg, "layer_types", (size_t)n, other, MK_LK_FULL_ATTN, kinds, err);
		} else {
			rc = q3n ? int_or(cfg, "full_attention_interval", 4, &v, err) : (v = 2, 0);
			if (!rc && v < 1)
				rc = mk_err_set(err, MK_EFORMAT, "%s: \"full_attention_interval\" is not positive",
						mk_hfconfig_label(cfg));
			for (int64_t i = 0; !rc && i < n; i++)
				kinds[i] = (i + 1) % v ? other : MK_LK_FULL_ATTN;
		}
		if (!rc && q3n) {
			/* dense MLP layers (mlp_only_layers, decoder_sparse_step)
			 * are not described: no release uses them */
			json_t *mo = json_object_get(root, "mlp_only_layers");
			if (!rc && (json_is_array(mo) && json_array_size(mo)))
				rc = mk_err_set(err, MK_EFORMAT, "%s: \"mlp_only_layers\" is not empty; mk describes "
						"Qwen3-Next models whose every layer is sparse (MoE) only",
						mk_hfconfig_label(cfg));
			if (!rc && !(rc = int_or(cfg, "decoder_sparse_step", 1, &v, err)) && v != 1)
				rc = mk_err_set(err, MK_EFORMAT, "%s: \"decoder_sparse_step\" is %" PRId64 "; mk "
						"describes Qwen3-Next models whose every layer is sparse (1) only",
						mk_hfconfig_label(cfg), v);
		}
	}
	if (rc) {
		free(kinds);
		return rc;
	}
	a->kinds = kinds;
	a->nkinds = (size_t)n;
	return 0;
}

int mk_hfconfig_set_layer_kinds(const struct mk_arch *a, const unsigned char *kinds, size_t n, char **text,
				size_t *len, struct mk_err *err)
{
	struct mk_hfconfig *cfg = NULL;
	struct mk_jsondoc *doc = NULL;
	struct mk_arch *now = NULL;
	struct mk_sbuf b = { 0 };
	char *out = NULL;
	size_t olen = 0;
	bool same = true;
	int rc = 0;

	if (!a->nkinds || a->kinds_key == MK_KK_NONE)
		return 0;
	/* what the config as edited says (its layer count already the
	 * output's): unchanged when that is already right */
	if ((rc = mk_hfconfig_parse(*text, *len, "config.json", &cfg, err)) || (rc = mk_arch_clone(a, &now, err)) ||
	    (rc = mk_arch_read_kinds(now, cfg, err))) {
		if (rc == -MK_EFORMAT && now) {
			same = false;   /* a list of the old length: rewritten below */
			mk_err_clear(err);
			rc = 0;
		} else {
			goto out;
		}
	}
	if (same) {
		if (now->nkinds != n)
			same = false;
		for (size_t i = 0; same && i < n; i++)
			same = now->kinds[i] == kinds[i];
	}
	if (same)
		goto out;
	if ((rc = mk_jsondoc_parse(*text, *len, "config.json", &doc, err)))
		goto out;
	if (a->kinds_key == MK_KK_FIRST_K_DENSE) {
		size_t k = 0;
		while (k < n && kinds[k] == MK_LK_DENSE)
			k++;
		for (size_t i = k; i < n; i++)
			if (kinds[i] == MK_LK_DENSE) {
				rc = mk_err_set(err, MK_EINVAL,
						"output layer %zu is a dense layer after sparse (MoE) layer %zu: %s "
						"config.json says only how many layers come first as dense "
						"(first_k_dense_replace), so dense layers must all come before the "
						"sparse ones; choose layer ranges that keep them first",
						i, k, a->model_type);
				goto out;
			}
		mk_sbuf_fmt(&b, "%zu", k);
		if (b.oom || (rc = mk_jsondoc_set(doc, "first_k_dense_replace", b.p, err)))
			goto set_failed;
	} else {
		const char *key = a->kinds_key == MK_KK_LAYER_TYPES ? "layer_types" : "mlp_layer_types";
		mk_sbuf_fmt(&b, "[");
		for (size_t i = 0; i < n; i++)
			mk_sbuf_fmt(&b, "%s\"%s\"", i ? ", " : "", mk_layer_kind_name((enum mk_layer_kind)kinds[i]));
		mk_sbuf_fmt(&b, "]");
		if (b.oom || (rc = mk_jsondoc_set(doc, key, b.p, err)))
			goto set_failed;
	}
	if ((rc = mk_jsondoc_write_python(doc, &out, &olen, err)))
		goto out;
	free(*text);
	*text = out;
	*len = olen;
	goto out;
set_failed:
	if (!rc)
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	free(b.p);
	mk_jsondoc_free(doc);
	mk_arch_free(now);
	mk_hfconfig_free(cfg);
	return rc;
}
