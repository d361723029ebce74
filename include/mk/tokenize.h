/* tokenize.h - text to token ids as a model's tokenizer.json says, with
 * the ids the `tokenizers` package gives, or a refusal naming what is not
 * covered (never an approximation).
 *
 * Covered: model BPE (merges by rank; ignore_merges; byte_fallback with
 * <0xNN> pieces; unk_token with fuse_unk); normalizers Sequence, Prepend,
 * Replace (string or regex), Strip, NFC, NFD, NFKC, NFKD; pre-tokenizers
 * Sequence, ByteLevel (use_regex: the GPT-2 pattern; the byte-to-unicode
 * mapping), Split (string or regex pattern, every behaviour, invert),
 * Metaspace (prepend_scheme always / first / never, split), Digits;
 * added tokens (special or not, normalized or not, lstrip, rstrip,
 * single_word), split out of the text before the model, leftmost-longest;
 * post-processors TemplateProcessing (single sequences), ByteLevel,
 * RobertaProcessing, BertProcessing and Sequence of them.  That is what
 * the GPT-2, Llama 3, Qwen2/2.5/3, Llama 2 and Mistral tokenizer.json
 * files use.  Refused, by name: other model types (WordPiece, Unigram,
 * WordLevel), BPE dropout, continuing_subword_prefix or
 * end_of_word_suffix, other normalizers (Lowercase, BertNormalizer, ...)
 * and pre-tokenizers (Whitespace, BertPreTokenizer, Punctuation, ...), a
 * truncation setting, padding that pads one text (a fixed length,
 * pad_to_multiple_of), a regex PCRE2 does not compile.
 *
 * Regexes are PCRE2's (UTF, Unicode properties) in place of the
 * Oniguruma `tokenizers` uses: the patterns of the families above read
 * the same in both.
 *
 * Ownership: mk_tokenizer_open / mk_tokenizer_parse give the caller one
 * struct mk_tokenizer (mk_tokenizer_free); it is read-only afterwards, and
 * encoding with one tokenizer from several threads at once is safe.
 */
#ifndef MK_TOKENIZE_H
#define MK_TOKENIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/err.h"

struct mk_tokenizer;

/* Open a tokenizer: path a model directory (its tokenizer.json, and the
 * bos_token / eos_token of its tokenizer_config.json and, overriding
 * them, of its special_tokens_map.json, where there are such files) or a
 * tokenizer.json file. */
MK_API int mk_tokenizer_open(const char *path, struct mk_tokenizer **out, struct mk_err *err);
/* The same from tokenizer.json's text (len bytes; label names it in
 * messages); no BOS or EOS text until mk_tokenizer_set_bos_eos. */
MK_API int mk_tokenizer_parse(const char *json, size_t len, const char *label, struct mk_tokenizer **out,
		       struct mk_err *err);
MK_API void mk_tokenizer_free(struct mk_tokenizer *t);

/* The BOS and EOS token texts (as tokenizer_config.json names them;
 * NULL: none) that mk_tokenizer_encode_prompts uses. */
MK_API int mk_tokenizer_set_bos_eos(struct mk_tokenizer *t, const char *bos, const char *eos, struct mk_err *err);

/* Encode len bytes of UTF-8 text: *ids (malloc'ed, the caller's; NULL
 * when *n is 0) and *n.  add_special: the post-processor's special tokens
 * (the BOS of a TemplateProcessing) as `tokenizers`' add_special_tokens.
 * Text that is not UTF-8 is MK_EINVAL. */
MK_API int mk_tokenizer_encode(const struct mk_tokenizer *t, const char *text, size_t len, bool add_special, int32_t **ids,
			size_t *n, struct mk_err *err);

/* A token's id as transformers' convert_tokens_to_ids finds it (an added
 * token first, then the model's vocabulary), or -1. */
MK_API long long mk_tokenizer_token_id(const struct mk_tokenizer *t, const char *token);
/* The number of ids: the largest id of the vocabulary and the added
 * tokens, plus one. */
MK_API size_t mk_tokenizer_vocab_size(const struct mk_tokenizer *t);

/* Prompts tokenised as mergekit-moe tokenises them for its gates: each
 * is the BOS text (none when there is none) followed by the prompt,
 * encoded without special tokens; rows are padded on the left to the
 * longest, with the BOS id, or the EOS id when there is no BOS (refused
 * when there is neither, or its text is not a token).  ids and mask are
 * rows x cols, row-major, malloc'ed (mk_tokbatch_free); mask 1 on a
 * token, 0 on padding. */
struct mk_tokbatch {
	size_t rows, cols;
	int32_t *ids;
	uint8_t *mask;
	int32_t pad_id;
};
MK_API int mk_tokenizer_encode_prompts(const struct mk_tokenizer *t, const char *const *prompts, size_t nprompts,
				struct mk_tokbatch *out, struct mk_err *err);
MK_API void mk_tokbatch_free(struct mk_tokbatch *b);

#endif
