/* forward_impl.h - the forward pass's parts (src/forward). */
#ifndef MK_FORWARD_IMPL_H
#define MK_FORWARD_IMPL_H
#include <stdbool.h>
#include <stddef.h>
#include "mk/err.h"
#include "core/jsondoc.h"

enum mk_fwd_family { MK_FWD_LLAMA, MK_FWD_MISTRAL, MK_FWD_QWEN2, MK_FWD_QWEN3 };
enum mk_rope_type { MK_ROPE_DEFAULT, MK_ROPE_LINEAR, MK_ROPE_DYNAMIC, MK_ROPE_LLAMA3, MK_ROPE_YARN };

struct mk_fwd_rope {
	enum mk_rope_type type;
	double theta, factor, mpe, orig_mpe;
	double low_ff, high_ff;                    /* llama3 */
	double attn_factor, mscale, mscale_all_dim; /* yarn */
	double beta_fast, beta_slow;
	bool has_attn_factor, truncate;
};

struct mk_fwd_config {
	enum mk_fwd_family family;
	const char *model_type, *rope_name;
	size_t hidden, layers, heads, kv_heads, head_dim, vocab;
	double eps, mpe_default;
	bool attn_bias, mlp_bias, qkv_bias, qk_norm;
	size_t *window;        /* per layer: the sliding window, 0 none */
	struct mk_fwd_rope rope;
};

/* Parse config.json's text (label names it in messages). */
int mk_fwd_config_parse(const char *text, size_t len, const char *label, struct mk_fwd_config *c,
			struct mk_err *err);
void mk_fwd_config_free(struct mk_fwd_config *c);
/* The head_dim / 2 inverse frequencies for a batch of seq_len positions
 * and the factor cos and sin are scaled by. */
void mk_fwd_rope_inv_freq(const struct mk_fwd_config *c, size_t seq_len, float *inv, float *scale);
#endif
