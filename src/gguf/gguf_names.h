/* gguf_names.h - Hugging Face tensor names to GGUF's, as llama.cpp's
 * convert_hf_to_gguf.py (0c1e57098) writes them for the text models of
 * llama (and mistral, which it converts as llama), qwen2, qwen3,
 * gemma2, gemma3 and phi3, with the change convert makes to the values:
 *
 *   PERMUTE_Q, PERMUTE_K  llama's q_proj / k_proj rows (weight and bias)
 *                         reordered for ggml's rope: in each head of hd
 *                         rows, the two halves interleaved - output row
 *                         h*hd + 2j + s is input row h*hd + s*hd/2 + j -
 *                         over n_head heads for Q, n_head_kv for K;
 *   PLUS1                 gemma's norms ("...norm.weight") get 1 added,
 *                         in the tensor's own dtype (a bf16 norm's w + 1
 *                         is rounded to bf16 before it is widened).
 *
 * Not covered here: which tensors convert stores as F32 (every 1-D
 * tensor and "_norm.weight"), gemma3 cutting token_embd to the
 * tokenizer's real vocabulary, mixtral's experts stacked into one 3-D
 * tensor, phi3's long/short rope factors.
 */
#ifndef MK_GGUF_NAMES_H
#define MK_GGUF_NAMES_H

#include <stddef.h>
#include <stdint.h>

struct mk_err;

enum mk_gguf_xform {
	MK_GGUF_X_NONE = 0,
	MK_GGUF_X_PERMUTE_Q = 1,
	MK_GGUF_X_PERMUTE_K = 2,
	MK_GGUF_X_PLUS1 = 3,
};

/* GGUF's architecture for config.json's architectures[0]
 * ("MistralForCausalLM" -> "llama"), NULL when not one of the above. */
const char *mk_gguf_arch_for_hf(const char *hf_arch);

/* The GGUF name of HF tensor `hf` of a model of GGUF architecture
 * `arch` into out (cap bytes), its change into *xform.  Returns 1, or 0
 * when convert writes no such tensor (rotary inv_freq, gemma2's
 * lm_head, vision tensors), or -MK_EUNSUPPORTED (an architecture or a
 * name this does not know), -MK_EINVAL (out too small). */
int mk_gguf_name_for_hf(const char *arch, const char *hf, char *out,
			size_t cap, int *xform, struct mk_err *err);

/* PERMUTE_Q/K: the input row of output row r of a tensor of `rows`
 * rows (its first dimension) over n_head heads; rows must be a
 * multiple of 2 * n_head. */
uint64_t mk_gguf_permute_src_row(uint64_t r, uint64_t rows, unsigned n_head);

/* Llama 3's rope_freqs.weight (rope_scaling.rope_type "llama3"): dim/2
 * factors for a head of dim, from rope_theta and rope_scaling's factor,
 * low_freq_factor, high_freq_factor, original_max_position_embeddings:
 * 1 where the wavelength is below orig/high, factor above orig/low, a
 * smooth blend between.  Computed in float32 steps as convert does;
 * convert's pow is torch's, so a factor in the blend may differ from it
 * in the last bits (see test_gguf_names.c for the measured error). */
void mk_gguf_llama3_rope_freqs(unsigned dim, float theta, float factor,
			       float low_freq_factor, float high_freq_factor,
			       float orig_ctx, float *out);

#endif
