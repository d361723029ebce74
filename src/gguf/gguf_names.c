/* gguf_names.c - convert_hf_to_gguf.py's tensor names (gguf_names.h). */
#include "gguf/gguf_names.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mk/err.h"

static const struct {
	const char *hf, *gguf;
} archs[] = {
	{ "LlamaForCausalLM", "llama" },
	{ "MistralForCausalLM", "llama" },
	{ "Qwen2ForCausalLM", "qwen2" },
	{ "Qwen3ForCausalLM", "qwen3" },
	{ "Gemma2ForCausalLM", "gemma2" },
	{ "Gemma3ForCausalLM", "gemma3" },
	{ "Gemma3ForConditionalGeneration", "gemma3" },
	{ "Phi3ForCausalLM", "phi3" },
};

const char *mk_gguf_arch_for_hf(const char *hf_arch)
{
	for (size_t i = 0; hf_arch && i < sizeof archs / sizeof archs[0]; i++)
		if (!strcmp(archs[i].hf, hf_arch))
			return archs[i].gguf;
	return NULL;
}

enum { A_LLAMA = 1, A_QWEN2 = 2, A_QWEN3 = 4, A_GEMMA2 = 8, A_GEMMA3 = 16,
       A_PHI3 = 32, A_ALL = 63, A_GEMMA = A_GEMMA2 | A_GEMMA3 };

static int arch_bit(const char *a)
{
	static const char *const names[] = { "llama", "qwen2", "qwen3",
		"gemma2", "gemma3", "phi3" };

	for (int i = 0; i < 6; i++)
		if (a && !strcmp(a, names[i]))
			return 1 << i;
	return 0;
}

/* Inside "model.layers.N.": the HF module, the GGUF tensor, the
 * architectures that have it. */
static const struct {
	const char *hf, *gguf;
	int archs;
} in_layer[] = {
	{ "input_layernorm", "attn_norm", A_ALL },
	{ "post_attention_layernorm", "ffn_norm", A_ALL & ~A_GEMMA },
	{ "post_attention_layernorm", "post_attention_norm", A_GEMMA },
	{ "pre_feedforward_layernorm", "ffn_norm", A_GEMMA },
	{ "post_feedforward_layernorm", "post_ffw_norm", A_GEMMA },
	{ "self_attn.q_proj", "attn_q", A_ALL & ~A_PHI3 },
	{ "self_attn.k_proj", "attn_k", A_ALL & ~A_PHI3 },
	{ "self_attn.v_proj", "attn_v", A_ALL & ~A_PHI3 },
	{ "self_attn.o_proj", "attn_output", A_ALL },
	{ "self_attn.qkv_proj", "attn_qkv", A_PHI3 },
	{ "self_attn.q_norm", "attn_q_norm", A_QWEN3 | A_GEMMA3 },
	{ "self_attn.k_norm", "attn_k_norm", A_QWEN3 | A_GEMMA3 },
	{ "mlp.gate_proj", "ffn_gate", A_ALL & ~A_PHI3 },
	{ "mlp.up_proj", "ffn_up", A_ALL & ~A_PHI3 },
	{ "mlp.gate_up_proj", "ffn_up", A_PHI3 },
	{ "mlp.down_proj", "ffn_down", A_ALL },
};

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && !strcmp(s + n - k, tail);
}

static bool starts(const char *s, const char *head)
{
	return !strncmp(s, head, strlen(head));
}

/* "language_model." taken out wherever it is, as convert does */
static void strip_lm(const char *in, char *out, size_t cap)
{
	static const char lm[] = "language_model.";
	size_t o = 0;

	while (*in && o + 1 < cap) {
		if (starts(in, lm))
			in += sizeof lm - 1;
		else
			out[o++] = *in++;
	}
	out[o] = 0;
}

int mk_gguf_name_for_hf(const char *arch, const char *hf, char *out,
			size_t cap, int *xform, struct mk_err *err)
{
	int a = arch_bit(arch);
	char name[512], mod[256];
	const char *gg = NULL, *suffix;
	long layer = -1;

	*xform = MK_GGUF_X_NONE;
	if (!a)
		return mk_err_set(err, MK_EUNSUPPORTED, "GGUF architecture '%s': "
				  "mk names tensors of llama, qwen2, qwen3, gemma2, "
				  "gemma3 and phi3", arch ? arch : "");
	if (strlen(hf) >= sizeof name)
		goto unknown;
	strip_lm(hf, name, sizeof name);
	if (ends_with(name, ".rotary_emb.inv_freq") ||
	    starts(name, "vision_tower.") || starts(name, "multi_modal_projector.") ||
	    starts(name, "model.vision_tower.") ||
	    starts(name, "model.multi_modal_projector.") ||
	    (a == A_GEMMA2 && !strcmp(name, "lm_head.weight")))
		return 0;
	if (ends_with(name, ".weight"))
		suffix = ".weight";
	else if (ends_with(name, ".bias"))
		suffix = ".bias";
	else
		goto unknown;
	size_t stem = strlen(name) - strlen(suffix);

	name[stem] = 0;
	if (!strcmp(name, "model.embed_tokens")) {
		gg = "token_embd";
	} else if (!strcmp(name, "model.norm")) {
		gg = "output_norm";
	} else if (!strcmp(name, "lm_head")) {
		gg = "output";
	} else if (starts(name, "model.layers.")) {
		char *end;

		layer = strtol(name + 13, &end, 10);
		if (end == name + 13 || *end != '.' || layer < 0)
			goto unknown;
		snprintf(mod, sizeof mod, "%s", end + 1);
		for (size_t i = 0; i < sizeof in_layer / sizeof in_layer[0]; i++)
			if ((in_layer[i].archs & a) && !strcmp(in_layer[i].hf, mod))
				gg = in_layer[i].gguf;
	}
	if (!gg)
		goto unknown;
	int n = layer >= 0 ? snprintf(out, cap, "blk.%ld.%s%s", layer, gg, suffix)
			   : snprintf(out, cap, "%s%s", gg, suffix);

	if (n < 0 || (size_t)n >= cap)
		return mk_err_set(err, MK_EINVAL, "GGUF name of '%s' does not fit "
				  "%zu bytes", hf, cap);
	if (a == A_LLAMA && !strcmp(gg, "attn_q"))
		*xform = MK_GGUF_X_PERMUTE_Q;
	else if (a == A_LLAMA && !strcmp(gg, "attn_k"))
		*xform = MK_GGUF_X_PERMUTE_K;
	else if ((a & A_GEMMA) && !strcmp(suffix, ".weight") &&
		 ends_with(name, "norm"))
		*xform = MK_GGUF_X_PLUS1;
	return 1;
unknown:
	return mk_err_set(err, MK_EUNSUPPORTED, "tensor '%s' has no GGUF name "
			  "for architecture %s in mk (convert_hf_to_gguf.py's "
			  "names of llama.cpp 0c1e57098)", hf, arch);
}

uint64_t mk_gguf_permute_src_row(uint64_t r, uint64_t rows, unsigned n_head)
{
	uint64_t hd = rows / n_head, half = hd / 2;
	uint64_t h = r / hd, i = r % hd;

	/* output (j, s) with i = 2j + s comes from input s * half + j */
	return h * hd + (i % 2) * half + i / 2;
}

void mk_gguf_llama3_rope_freqs(unsigned dim, float theta, float factor,
			       float low_freq_factor, float high_freq_factor,
			       float orig_ctx, float *out)
{
	float low_wl = orig_ctx / low_freq_factor;
	float high_wl = orig_ctx / high_freq_factor;

	for (unsigned k = 0; k < dim / 2; k++) {
		float freq = 1.0f / powf(theta, (float)(2 * k) / (float)dim);
		float wl = (float)(2 * M_PI) / freq;

		if (wl < high_wl) {
			out[k] = 1.0f;
		} else if (wl > low_wl) {
			out[k] = factor;
		} else {
			float smooth = (orig_ctx / wl - low_freq_factor) /
				       (high_freq_factor - low_freq_factor);

			out[k] = 1.0f / ((1.0f - smooth) / factor + smooth);
		}
	}
}
