/* gguf_vocab.h - the tokenizer's GGUF keys as llama.cpp's
 * convert_hf_to_gguf.py (0c1e57098) writes them from a Hugging Face model
 * directory, after the model's (gguf_meta.h).
 *
 * Covered: the GPT-2 style BPE path (a tokenizer.json and no
 * tokenizer.model: Llama 3, Qwen2/2.5/3, Gemma 3 without one), in convert's
 * order:
 *   tokenizer.ggml.add_space_prefix  (llama: tokenizer_config.json's
 *                                     add_prefix_space, where set)
 *   tokenizer.ggml.model "gpt2", tokenizer.ggml.pre (the check text's ids
 *     hashed and looked up in convert's table, gguf_pre_hashes.inc),
 *   tokenizer.ggml.tokens / token_type (vocab_size of config.json's,
 *     "[PADn]" UNUSED where no token has the id; added tokens CONTROL
 *     when special or looking special, else USER_DEFINED), merges,
 *   the special token ids (bos, eos, unknown, seperator, padding, mask,
 *     eot, eom: tokenizer_config.json's tokens, then config.json's ids),
 *   add_bos_token / add_eos_token / add_sep_token (the post-processor,
 *     then tokenizer_config.json), tokenizer.chat_template
 *     (tokenizer_config.json's, else chat_template.jinja / .json).
 * Refused, by name: a tokenizer.model (SentencePiece: Llama 2, Mistral,
 * Gemma, Phi-3), Llama's byte-fallback BPE tokenizer.json (convert's
 * LlamaHfVocab path), a pre-tokenizer whose hash is not in the table,
 * chat templates given as a list.
 */
#ifndef MK_GGUF_VOCAB_H
#define MK_GGUF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

struct mk_err;
struct mk_gguf;

/* Add the tokenizer keys of model directory dir, a model of GGUF
 * architecture arch ("llama", "qwen2", ...), to g.  pre_unknown: the
 * tokenizer.ggml.pre to write when the pre-tokenizer's hash is not in the
 * table (NULL: refuse, as convert does; a caller that knows the
 * tokenizer's family - a retrained vocabulary - may name it). */
int mk_gguf_vocab_add(struct mk_gguf *g, const char *dir, const char *arch, const char *pre_unknown,
		      struct mk_err *err);

/* tokenizer.ggml.pre for the ids a tokenizer gives the check text (with
 * its special tokens): convert's name into out (cap bytes), or
 * -MK_EUNSUPPORTED naming the hash.  *hash_hex (65 bytes, may be NULL)
 * gets the hash. */
int mk_gguf_vocab_pre(const int32_t *ids, size_t n, char *out, size_t cap, char *hash_hex,
		      struct mk_err *err);
/* The check text (NUL-terminated UTF-8). */
const char *mk_gguf_vocab_chktxt(void);

#endif
