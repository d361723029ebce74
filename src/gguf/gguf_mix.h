/* gguf_mix.h - llama.cpp's choice of a type for each tensor of a GGUF
 * file of a given file type (llama-quantize's "mixtures": Q4_K_M keeps
 * some tensors in Q6_K, norms stay F32, ...), without an importance
 * matrix, without overrides, as llama.cpp 0c1e57098's llama-quant.cpp
 * decides it (llama_tensor_get_type and what it calls).
 *
 * The choice depends on the tensor's name, shape and place among the
 * model's tensors (the n-th attn_v of how many), so it is made for a
 * whole model at once, in llama-quantize's order: by layer ("blk.N."),
 * tensors outside a layer first, then by name.
 */
#ifndef MK_GGUF_MIX_H
#define MK_GGUF_MIX_H

#include <stddef.h>
#include <stdint.h>

struct mk_err;

/* llama.cpp's file types (general.file_type), those mk writes. */
enum mk_gguf_ftype {
	MK_GGUF_FT_ALL_F32 = 0,
	MK_GGUF_FT_MOSTLY_F16 = 1,
	MK_GGUF_FT_MOSTLY_Q8_0 = 7,
	MK_GGUF_FT_MOSTLY_Q4_K_M = 15,
	MK_GGUF_FT_MOSTLY_Q5_K_M = 17,
	MK_GGUF_FT_MOSTLY_Q6_K = 18,
	MK_GGUF_FT_MOSTLY_BF16 = 32,
};

/* A file type by llama-quantize's name ("Q4_K_M", "q8_0", "BF16"; any
 * case): its number, or -MK_EINVAL with the names in the message. */
int mk_gguf_ftype_parse(const char *name, struct mk_err *err);
/* llama-quantize's name of a file type ("Q4_K_M"), NULL if not one of
 * the above. */
const char *mk_gguf_ftype_name(int ftype);
/* The type most tensors get (Q4_K for Q4_K_M), -1 if not one above. */
int mk_gguf_ftype_default_type(int ftype);

/* What of the model the choice reads (its GGUF metadata). */
struct mk_gguf_mix_model {
	const char *arch;       /* general.architecture: "llama", "qwen2" */
	unsigned n_layer;       /* ARCH.block_count */
	unsigned n_head;        /* ARCH.attention.head_count */
	unsigned n_head_kv;     /* ARCH.attention.head_count_kv */
	unsigned n_expert;      /* ARCH.expert_count, 0 for a dense model */
};

struct mk_gguf_mix_tensor {
	const char *name;       /* GGUF name: "blk.3.attn_v.weight" */
	unsigned ndim;
	uint64_t ne[4];         /* ggml order: ne[0] is the row length */
	int type;               /* its type as converted (F32 for norms and
				 * 1-D tensors, else F16/BF16/F32): kept
				 * when the tensor is not to be quantized */
};

/* The type of each of the n tensors into types[i].  Returns 0, or
 * -MK_EINVAL (file type not one above; an expert model's tensor with no
 * layer or a layer past n_layer, as llama-quantize refuses it). */
int mk_gguf_mix_types(int ftype, const struct mk_gguf_mix_model *m,
		      const struct mk_gguf_mix_tensor *t, size_t n,
		      int *types, struct mk_err *err);

#endif
