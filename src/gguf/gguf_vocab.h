/* gguf_vocab.h - the tokenizer's GGUF keys as llama.cpp's
 * convert_hf_to_gguf.py (0c1e57098) writes them from a Hugging Face model
 * directory, after the model's (gguf_meta.h).
 *
 * Which path convert takes, by architecture: llama a tokenizer.model
 * when there is one, else a tokenizer.json (Llama 3 style; a
 * byte-fallback BPE one without tokenizer.model is refused); qwen2/qwen3
 * and gemma3 likewise; gemma2 and phi3 tokenizer.model only (phi3: a
 * GPT2Tokenizer class takes the tokenizer.json path).  Keys, in convert's
 * order:
 *   tokenizer.ggml.add_space_prefix  llama: tokenizer_config.json's
 *                                    add_prefix_space, where a boolean
 *   GPT-2 style BPE (tokenizer.json): tokenizer.ggml.model "gpt2",
 *     tokenizer.ggml.pre (the check text's ids with special tokens,
 *     hashed, looked up in convert's table, gguf_pre_hashes.inc), tokens
 *     and token_type (config.json's vocab_size of them, "[PADn]" UNUSED
 *     where no token has the id; added tokens CONTROL when special or
 *     looking special, else USER_DEFINED with U+2581 as space), merges;
 *   SentencePiece (tokenizer.model): tokenizer.ggml.model "llama", pre
 *     "default", tokens, scores, token_type from the model's pieces, then
 *     added_tokens.json and tokenizer_config.json's added_tokens_decoder
 *     (phi3: its own variant, tokenizer.json's added_tokens too);
 *   then the special token ids (bos, eos, unknown, seperator, padding,
 *     mask: tokenizer_config.json's tokens by tokenizer.json's added
 *     tokens, then config.json's ids), add_bos / add_eos / add_sep_token
 *     (the post-processor, then tokenizer_config.json), the chat template
 *     (tokenizer_config.json's, else chat_template.jinja or
 *     chat_template.json); gemma: add_space_prefix false last; llama at
 *     vocab_size 49152: add_bos_token false.
 * Refused, by name: a pre-tokenizer whose hash is not in the table
 * (unless the caller names one), a RobertaProcessing post-processor, a
 * template ending in a token other than EOS (convert's EOT/EOM guess),
 * chat templates given as a list or additional_chat_templates/,
 * Lowercase / StripAccents / BertNormalizer normalizers, CodeLlama's
 * 32016 vocabulary.  Assumed: a non-normalized added token decodes to
 * its own text (convert round-trips it through transformers).
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
