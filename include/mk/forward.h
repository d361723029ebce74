/* forward.h - a decoder's forward pass, for the hidden states of prompts.
 *
 * The residual stream of a llama, mistral, qwen2 or qwen3 checkpoint for
 * a batch of token ids, as transformers' AutoModelForCausalLM computes it
 * with output_hidden_states=True in float32: what mergekit-moe's `hidden`
 * gate modes average.  Float32 on the CPU (OpenBLAS sgemm), layer by
 * layer: one layer's weights are read (any float dtype, converted to
 * float32), applied to every sequence, and freed before the next, so the
 * weights held at once are one layer's (the embedding rows the tokens use
 * are read alone, not the whole table).
 *
 * What it computes, per family:
 *   - RMSNorm (the config's rms_norm_eps, default 1e-6), SwiGLU MLP (the
 *     config's hidden_act must be silu), grouped-query attention
 *     (num_key_value_heads), head_dim from the config (qwen3's default 128,
 *     else hidden_size / num_attention_heads);
 *   - qwen2: q/k/v biases; qwen3: q_norm and k_norm (RMSNorm over each
 *     head) before the rotation; llama and qwen3: attention_bias, llama:
 *     mlp_bias;
 *   - rotary embeddings as transformers 5 sets them up from rope_scaling
 *     or rope_parameters (rope_type or type): default, linear, dynamic
 *     (NTK, for the batch's padded length), llama3 and yarn (with its
 *     attention factor); any other type is refused by name, as is a
 *     partial_rotary_factor other than 1;
 *   - sliding-window attention where the config asks for it (mistral's
 *     sliding_window; qwen2/qwen3's use_sliding_window with layer_types
 *     or max_window_layers): a query sees the keys less than the window
 *     behind it.
 * Any other model_type is refused (MK_EUNSUPPORTED, naming it).
 *
 * A batch is nseq sequences of len token ids, with an attention mask
 * (1: a token, 0: padding; NULL: all tokens).  As transformers does when
 * given only an attention mask, positions are 0..len-1 whatever the
 * padding (left padding shifts a prompt's positions), padding keys are
 * masked out, and a query that sees no key at all (a left pad) gets a
 * zero attention output, as PyTorch's scaled_dot_product_attention gives
 * (transformers' eager attention would average every value instead).
 *
 * The hidden states come as transformers' tuple: index 0 the embeddings,
 * index l (1..layers-1) the output of layer l-1, index `layers` the last
 * layer's output after the final norm.  mergekit-moe's gate vectors take
 * indexes 0..layers-1 (each layer's input): `hidden`/`hidden_last` the
 * vector at the batch's last position (index len-1, a pad for a shorter
 * prompt when the tokenizer pads on the right), `hidden_avg` the mean
 * over all len positions, pads included; each then averaged over the
 * prompts.  Any padding pattern works here (left or right, as the
 * tokenizer's padding_side says).
 *
 * On a GPU (opts.cuda, a context of mk/cuda.h): the seven matrix
 * products of each layer (q, k, v and o projections, the MLP's gate, up
 * and down) run on the device; the layer's seven matrices are copied to
 * it as the layer is read, into device arrays made once per run (so the
 * device holds one layer's matrices and two activation arrays), and the
 * activations go there and back around each product.  Embeddings, norms,
 * biases, the rotation, attention (its two small products per head
 * included: OpenBLAS) and the MLP's activation stay on the host.  The
 * device sums each product in another order than OpenBLAS (mk/cuda.h's
 * mk_cuda_gemm_nt), so the hidden states differ from the CPU path's by
 * float32 rounding: both stay within the same tolerance of transformers'
 * (test/unit/test_forward.c); an emulated context gives the device's
 * bits on the host.
 */
#ifndef MK_FORWARD_H
#define MK_FORWARD_H
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/err.h"

struct mk_forward;
struct mk_cuda_ctx;

struct mk_forward_opts {
	uint64_t max_memory; /* bytes a run may hold (one layer's float32
				weights, the activations, the read buffers;
				a tensor stored as a view that is not
				contiguous is read through its whole span);
				0: no bound.  A run that needs more fails
				before it reads anything, saying how much */
	struct mk_cuda_ctx *cuda; /* the matrix products on this context's
				     device (mk_cuda_open; an emulated one
				     too); NULL: OpenBLAS.  Borrowed: it
				     must outlive the handle, and is used
				     by one thread at a time */
	const volatile int *cancel; /* set nonzero (a signal handler, another
				thread) to stop: a run checks it before the
				embeddings and before each layer, and then
				returns MK_EIO "cancelled"; NULL: never */
};

struct mk_forward_info {
	const char *model_type;        /* "llama", "mistral", "qwen2", "qwen3" */
	const char *rope_type;         /* "default", "linear", "dynamic", "llama3", "yarn" */
	size_t layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
	uint64_t layer_bytes;          /* the largest layer's weights in float32 */
};

/* Open a model (a reference as mk_model_open takes: a directory or a Hub
 * name in the cache) and read its config.json; no weight is read yet.
 * opts may be NULL.  Free with mk_forward_close. */
MK_API int mk_forward_open(const char *ref, const struct mk_forward_opts *opts, struct mk_forward **out,
		    struct mk_err *err);
MK_API void mk_forward_close(struct mk_forward *f);
MK_API void mk_forward_info(const struct mk_forward *f, struct mk_forward_info *out);

/* Called once per hidden state, index 0..layers in order: hidden holds
 * [nseq][len][hidden] floats, valid during the call.  A nonzero return
 * stops the run and is returned by mk_forward_run (fill err). */
typedef int (*mk_forward_fn)(void *ctx, size_t index, const float *hidden, size_t nseq, size_t len,
			     size_t dim, struct mk_err *err);

/* Run the batch: ids and mask are [nseq][len], row-major (mask may be
 * NULL).  A token id outside the vocabulary is MK_EINVAL. */
MK_API int mk_forward_run(struct mk_forward *f, const int64_t *ids, const int64_t *mask, size_t nseq, size_t len,
		   mk_forward_fn fn, void *ctx, struct mk_err *err);

/* The most weight bytes (float32) the runs so far held at once. */
MK_API uint64_t mk_forward_peak_weights(const struct mk_forward *f);
/* What a run of nseq x len needs at most (the bound max_memory is
 * checked against). */
MK_API uint64_t mk_forward_need(const struct mk_forward *f, size_t nseq, size_t len);

#endif
