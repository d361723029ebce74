/* gguf_mix.c - llama-quantize's per-tensor types (see gguf_mix.h).
 *
 * The rules, restricted to the file types mk writes (F32, F16, BF16,
 * Q8_0, Q4_K_M, Q5_K_M, Q6_K) and to no importance matrix, no override
 * and no --pure:
 *   - only tensors of 2 or more dimensions whose name ends in "weight"
 *     are quantized, never norms ("_norm.weight"), an expert router
 *     ("ffn_gate_inp.weight") and a list of small special tensors; the
 *     others keep their converted type;
 *   - F32/F16/BF16 files: every quantizable tensor gets that type;
 *   - output.weight (and token_embd.weight when the model has no
 *     output.weight): Q6_K for the k-quant files, Q8_0 when its rows are
 *     not whole 256-blocks (or on Falcon);
 *   - attn_v (and fused attn_qkv, attn_kv_b): Q6_K in Q4_K_M/Q5_K_M for
 *     the "more bits" layers (the first and last eighth, and every third
 *     between); Q5_K instead of Q4_K on 70B models; Q8_0 with 8 experts;
 *   - attn_k: Q8_0 with 8 experts;
 *   - ffn_down: Q6_K for the "more bits" layers in Q4_K_M and Q5_K_M
 *     (Falcon's Q4_K_M: Q6_K below n/16, else Q5_K or Q4_K);
 *   - attn_output: Q5_K in Q4_K_M with 8 experts;
 *   - then, when a row is no multiple of the type's block: Q4_K -> Q5_0,
 *     Q5_K -> Q5_1, Q6_K -> Q8_0, and F16 if that does not fit either.
 */
#include "gguf/gguf_mix.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/gguf_type.h"
#include "mk/err.h"

static const struct {
	const char *name;
	int ftype, type;
} ftypes[] = {
	{ "F32", MK_GGUF_FT_ALL_F32, MK_GGUF_F32 },
	{ "F16", MK_GGUF_FT_MOSTLY_F16, MK_GGUF_F16 },
	{ "BF16", MK_GGUF_FT_MOSTLY_BF16, MK_GGUF_BF16 },
	{ "Q8_0", MK_GGUF_FT_MOSTLY_Q8_0, MK_GGUF_Q8_0 },
	{ "Q4_K_M", MK_GGUF_FT_MOSTLY_Q4_K_M, MK_GGUF_Q4_K },
	{ "Q5_K_M", MK_GGUF_FT_MOSTLY_Q5_K_M, MK_GGUF_Q5_K },
	{ "Q6_K", MK_GGUF_FT_MOSTLY_Q6_K, MK_GGUF_Q6_K },
};
#define NFT (sizeof ftypes / sizeof ftypes[0])

int mk_gguf_ftype_parse(const char *name, struct mk_err *err)
{
	for (size_t i = 0; name && i < NFT; i++)
		if (!strcasecmp(name, ftypes[i].name))
			return ftypes[i].ftype;
	return mk_err_set(err, MK_EINVAL, "GGUF file type '%s' is not one mk "
			  "writes: F32, F16, BF16, Q8_0, Q4_K_M, Q5_K_M, Q6_K",
			  name ? name : "");
}

const char *mk_gguf_ftype_name(int ftype)
{
	for (size_t i = 0; i < NFT; i++)
		if (ftypes[i].ftype == ftype)
			return ftypes[i].name;
	return NULL;
}

int mk_gguf_ftype_default_type(int ftype)
{
	for (size_t i = 0; i < NFT; i++)
		if (ftypes[i].ftype == ftype)
			return ftypes[i].type;
	return -1;
}

/* ---- what a tensor is, by its name ---- */

enum cat {
	C_OTHER, C_OUTPUT, C_TOKEN_EMBD, C_QKV, C_KV_B, C_V, C_K, C_Q,
	C_ATTN_OUT, C_FFN_UP, C_FFN_GATE, C_FFN_DOWN,
};

static bool has(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

/* the first matching rule wins, in llama.cpp's order */
static enum cat category(const char *name)
{
	if (!strcmp(name, "output.weight"))
		return C_OUTPUT;
	if (!strcmp(name, "token_embd.weight") ||
	    !strcmp(name, "per_layer_token_embd.weight"))
		return C_TOKEN_EMBD;
	if (has(name, "attn_qkv.weight"))
		return C_QKV;
	if (has(name, "attn_kv_b.weight"))
		return C_KV_B;
	if (has(name, "attn_v.weight"))
		return C_V;
	if (has(name, "attn_k.weight"))
		return C_K;
	if (has(name, "attn_q.weight"))
		return C_Q;
	if (has(name, "attn_output.weight"))
		return C_ATTN_OUT;
	if (has(name, "ffn_up"))
		return C_FFN_UP;
	if (has(name, "ffn_gate"))
		return C_FFN_GATE;
	if (has(name, "ffn_down"))
		return C_FFN_DOWN;
	return C_OTHER;
}

static bool value_like(enum cat c) { return c == C_V || c == C_QKV || c == C_KV_B; }

/* dimensions up to the last one above 1, at least 1 (ggml_n_dims) */
static unsigned real_dims(const struct mk_gguf_mix_tensor *t)
{
	unsigned d = 1;

	for (unsigned i = 1; i < t->ndim && i < 4; i++)
		if (t->ne[i] > 1)
			d = i + 1;
	return d;
}

static bool ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), k = strlen(tail);

	return n >= k && !strcmp(s + n - k, tail);
}

/* Name fragments of tensors llama-quantize never quantizes. */
static const char *const keep_parts[] = {
	"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight",
	"altup", "laurel", "per_layer_model_proj", "ssm_conv1d",
	"shortconv.conv.weight", "indexer.k_proj.weight",
	"indexer.q_proj.weight", "time_mix_first.weight",
	"time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
	"time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
	"time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
	"time_mix_g1.weight", "time_mix_g2.weight",
	"time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
	"time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
	"sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd",
	".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
};

static bool quantizable(const struct mk_gguf_mix_tensor *t)
{
	/* llama.cpp asks rfind("weight") == size - 6, which a name of 5
	 * bytes also passes (npos == (size_t)-1) */
	if (real_dims(t) < 2 ||
	    (!ends_with(t->name, "weight") && strlen(t->name) != 5))
		return false;
	if (!strcmp(t->name, "position_embd.weight") ||
	    !strcmp(t->name, "token_types.weight"))
		return false;
	for (size_t i = 0; i < sizeof keep_parts / sizeof keep_parts[0]; i++)
		if (has(t->name, keep_parts[i]))
			return false;
	return true;
}

/* The layer of "blk.N." (sscanf's reading, as llama.cpp's), else -1. */
static int layer_of(const char *name)
{
	int l = -1;

	if (sscanf(name, "blk.%d.", &l) != 1)
		return -1;
	return l;
}

/* ---- the choice ---- */

struct state {
	int ftype;
	const struct mk_gguf_mix_model *m;
	bool tied, falcon, is70b;
	int n_v, i_v, i_down;
};

/* the first and last eighth of the layers, and every third between */
static bool more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static int choose(struct state *s, const struct mk_gguf_mix_tensor *t,
		  int type, struct mk_err *err)
{
	enum cat c = category(t->name);
	int ft = s->ftype;
	unsigned nexp = s->m->n_expert;

	if (c == C_OUTPUT || (s->tied && c == C_TOKEN_EMBD)) {
		if (s->falcon || t->ne[0] % mk_gguf_type_block(type))
			type = MK_GGUF_Q8_0;
		else if (type != MK_GGUF_Q8_0)
			type = MK_GGUF_Q6_K;
	} else if (c == C_TOKEN_EMBD) {
		/* untied embeddings: the default type */
	} else if (value_like(c)) {
		if ((ft == MK_GGUF_FT_MOSTLY_Q4_K_M || ft == MK_GGUF_FT_MOSTLY_Q5_K_M) &&
		    more_bits(s->i_v, s->n_v))
			type = MK_GGUF_Q6_K;
		if (s->is70b && (type == MK_GGUF_Q3_K || type == MK_GGUF_Q4_K))
			type = MK_GGUF_Q5_K;
		if (nexp == 8)
			type = MK_GGUF_Q8_0;
		s->i_v++;
	} else if (c == C_K) {
		if (nexp == 8)
			type = MK_GGUF_Q8_0;
	} else if (c == C_FFN_DOWN) {
		int i = s->i_down, n = (int)s->m->n_layer;

		if (nexp > 1) {
			/* experts need not come in layer order: read the layer */
			i = layer_of(t->name);
			if (i < 0 || i >= n)
				return mk_err_set(err, MK_EINVAL, "tensor '%s': an "
						  "expert model's ffn_down needs a "
						  "layer below the block count %d "
						  "in its name (blk.N.)", t->name, n);
		}
		if (ft == MK_GGUF_FT_MOSTLY_Q4_K_M) {
			if (s->falcon)
				type = i < n / 16 ? MK_GGUF_Q6_K :
				       more_bits(i, n) ? MK_GGUF_Q5_K : MK_GGUF_Q4_K;
			else if (more_bits(i, n))
				type = MK_GGUF_Q6_K;
		} else if (ft == MK_GGUF_FT_MOSTLY_Q5_K_M && more_bits(i, n)) {
			type = MK_GGUF_Q6_K;
		}
		s->i_down++;
	} else if (c == C_ATTN_OUT) {
		if (!s->falcon && nexp == 8 && ft == MK_GGUF_FT_MOSTLY_Q4_K_M)
			type = MK_GGUF_Q5_K;
	}
	return type;
}

/* a row that is no whole number of blocks: the next type down */
static int fall_back(const struct mk_gguf_mix_tensor *t, int type)
{
	if (t->ne[0] % mk_gguf_type_block(type) == 0)
		return type;
	switch (type) {
	case MK_GGUF_Q4_K: type = MK_GGUF_Q5_0; break;
	case MK_GGUF_Q5_K: type = MK_GGUF_Q5_1; break;
	case MK_GGUF_Q6_K: type = MK_GGUF_Q8_0; break;
	default: break;         /* a 32-block type stays, then F16 */
	}
	if (t->ne[0] % mk_gguf_type_block(type))
		type = MK_GGUF_F16;
	return type;
}

struct ord {
	int layer;
	size_t i;
	const char *name;
};

static int by_layer_name(const void *a, const void *b)
{
	const struct ord *x = a, *y = b;
	int c;

	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	c = strcmp(x->name, y->name);
	if (c)
		return c;
	return x->i < y->i ? -1 : x->i > y->i;
}

int mk_gguf_mix_types(int ftype, const struct mk_gguf_mix_model *m,
		      const struct mk_gguf_mix_tensor *t, size_t n,
		      int *types, struct mk_err *err)
{
	int base = mk_gguf_ftype_default_type(ftype);
	struct state s = { .ftype = ftype, .m = m, .tied = true };
	struct ord *o;
	int rc = 0;

	if (base < 0)
		return mk_err_set(err, MK_EINVAL, "GGUF file type %d is not one "
				  "mk writes (F32, F16, BF16, Q8_0, Q4_K_M, "
				  "Q5_K_M, Q6_K)", ftype);
	s.falcon = m->arch && !strcmp(m->arch, "falcon");
	/* llama.cpp's 70B class: llama (not 8 experts) and qwen2 at 80
	 * layers, llama only when its attention is grouped */
	s.is70b = m->arch && m->n_layer == 80 &&
		  ((!strcmp(m->arch, "llama") && m->n_expert != 8 &&
		    m->n_head != m->n_head_kv) || !strcmp(m->arch, "qwen2"));
	o = malloc((n ? n : 1) * sizeof *o);
	if (!o)
		return mk_err_set(err, MK_ENOMEM, "out of memory choosing the "
				  "types of %zu tensors", n);
	for (size_t i = 0; i < n; i++) {
		enum cat c = category(t[i].name);

		o[i] = (struct ord){ layer_of(t[i].name), i, t[i].name };
		if (c == C_OUTPUT)
			s.tied = false;
		if (value_like(c))
			s.n_v++;
	}
	qsort(o, n, sizeof *o, by_layer_name);
	for (size_t k = 0; k < n && rc == 0; k++) {
		const struct mk_gguf_mix_tensor *x = &t[o[k].i];
		int type;

		if (!quantizable(x)) {
			type = x->type;
		} else if (!mk_gguf_type_is_quantized(base)) {
			type = base;
		} else {
			type = choose(&s, x, base, err);
			if (type < 0) {
				rc = type;
				break;
			}
			type = fall_back(x, type);
		}
		types[o[k].i] = type;
	}
	free(o);
	return rc;
}
