/* gguf_meta.h - the GGUF key-value pairs llama.cpp's convert_hf_to_gguf.py
 * (0c1e57098) writes before the tokenizer's, from a Hugging Face model
 * directory, for the text models of llama (and mistral), qwen2, qwen3,
 * gemma2, gemma3 and phi3; and the facts about the config the tensor side
 * needs (heads for the Q/K permutation, Llama 3's rope_freqs.weight,
 * phi3's rope factor tensors).
 *
 * Keys, in convert's order:
 *   general.architecture, general.type ("model");
 *   general.sampling.* from generation_config.json (top_k, top_p, min_p,
 *     xtc_probability, xtc_threshold, temperature, penalty_last_n,
 *     repetition_penalty, mirostat, mirostat_tau, mirostat_eta, sequence);
 *   general.name, author, version, organization, finetune, basename,
 *     description, size_label, license(.name/.link), source.*,
 *     base_model.*, dataset.*, tags, languages: README.md's front matter
 *     (gguf_card.h) first, then gguf-py's Metadata heuristics on
 *     config.json's _name_or_path (when it has at most one '/') and then
 *     the directory's name; size_label else from the parameter count
 *     ("191K", "8.0B");
 *   the architecture's hyperparameters (ARCH.block_count, context_length,
 *     embedding_length, feed_forward_length, attention.head_count(_kv),
 *     rope scaling, rope.freq_base, layer_norm_rms_epsilon, key/value
 *     length, vocab_size, rope.dimension_count, sliding_window, the
 *     softcappings ...), general.file_type among them where convert puts it;
 *   general.quantization_version (2).
 * Refused: Qwen3 rerankers (convert writes rank pooling for them),
 * mixture-of-experts configs, mrope; convert's --metadata override file
 * is not taken.
 *
 * convert reads config.json through transformers (AutoConfig ...
 * to_dict()): what a config leaves out takes transformers' (5.25)
 * default for the architecture (head_dim = hidden_size / heads for llama
 * and mistral, gemma2's softcappings, ...), and text_config is merged over
 * the root.  phi3 with a long rope gets phi3.rope.scaling.attn_factor
 * right after general.architecture (convert sets it while it makes the
 * rope factor tensors).
 */
#ifndef MK_GGUF_META_H
#define MK_GGUF_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mk_err;
struct mk_gguf;

/* What the tensor side needs from config.json. */
struct mk_gguf_hparams {
	char arch[16];             /* "llama", "qwen2", ... */
	char hf_arch[64];          /* architectures[0] */
	unsigned n_layer, n_head, n_head_kv, head_dim, n_embd;
	unsigned long long vocab_size;
	/* Q/K permutation (gguf_names.h PERMUTE_Q/K): llama only */
	bool permute_qk;
	/* Llama 3 rope scaling: rope_freqs.weight of head_dim/2 floats */
	bool llama3_rope;
	float rope_theta, rope_factor, rope_low_freq, rope_high_freq, rope_orig_ctx;
	/* phi3 long rope (rope_scaling with long_factor): the tensors
	 * rope_factors_long.weight and rope_factors_short.weight, F32, 1-D
	 * of n_rope_factors (rope dimensions / 2), the lists' values as
	 * float32; and phi3.rope.scaling.attn_factor (written by
	 * mk_gguf_meta_add), computed in double as convert does */
	bool phi3_longrope;
	size_t n_rope_factors;
	float *rope_long, *rope_short;  /* malloc'ed (mk_gguf_hparams_clear) */
	double rope_attn_factor;
};

/* Read dir/config.json.  Refused, by name: an architecture outside the
 * seven; a config missing a key convert needs. */
int mk_gguf_hparams_read(const char *dir, struct mk_gguf_hparams *hp, struct mk_err *err);
void mk_gguf_hparams_clear(struct mk_gguf_hparams *hp);

/* The tensors convert writes that no checkpoint holds, computed from the
 * config, in the order convert writes them (before every checkpoint
 * tensor): llama with Llama 3 rope scaling, "rope_freqs.weight" (head_dim
 * / 2 factors, gguf_names.h's mk_gguf_llama3_rope_freqs); phi3 with a
 * long rope, "rope_factors_long.weight" then "rope_factors_short.weight".
 * All F32 and 1-D, whatever the file type.  *out malloc'ed
 * (mk_gguf_extra_free); *n may be 0. */
struct mk_gguf_extra {
	char name[32];
	size_t n;
	float *v;
};
int mk_gguf_extra_tensors(const struct mk_gguf_hparams *hp, struct mk_gguf_extra **out, size_t *n,
			  struct mk_err *err);
void mk_gguf_extra_free(struct mk_gguf_extra *x, size_t n);

/* Add the keys above to g (which must have none yet) for the model
 * directory dir: file_type is general.file_type (llama.cpp's
 * LlamaFileType: 0 F32, 1 F16, 7 Q8_0, 32 BF16, ...); n_params the
 * number of elements of every tensor the file will hold (synthesized ones
 * included), for the size label (0: none); name, when not NULL, general.name
 * as convert's --model-name gives it.  Then mk_gguf_vocab_add
 * (gguf_vocab.h) adds the tokenizer's keys. */
int mk_gguf_meta_add(struct mk_gguf *g, const char *dir, int file_type, uint64_t n_params,
		     const char *name, struct mk_err *err);

/* gguf-py's reading of a model id ("org/Name-7B-Instruct-v0.2") into its
 * parts, each malloc'ed or NULL: what Metadata.get_model_id_components
 * gives (name: the part after '/', org, basename, finetune, version,
 * size_label), with n_params (0: unknown) deciding whether a size like
 * "128k" is a size or a context length. */
struct mk_gguf_model_id {
	char *name, *org, *basename, *finetune, *version, *size_label;
};
int mk_gguf_model_id_parse(const char *id, uint64_t n_params, struct mk_gguf_model_id *out,
			   struct mk_err *err);
void mk_gguf_model_id_clear(struct mk_gguf_model_id *m);
/* Metadata.id_to_title: '-' to ' ', all-lowercase words title-cased
 * unless a version or starting with a digit; malloc'ed. */
char *mk_gguf_id_to_title(const char *s);
/* gguf.size_label for a dense model: "191K", "1.2M", "7.2B" into buf. */
void mk_gguf_size_label(uint64_t n_params, char *buf, size_t cap);

#endif
