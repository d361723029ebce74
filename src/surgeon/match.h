/* match.h - mk-tokensurgeon's token matching: which row of the model
 * each of the donor's tokens takes, as mergekit-tokensurgeon (0.1.5)
 * decides it.
 *
 * Tokens are compared normalised, as mergekit's normalized_vocabulary
 * does: a token starting with the tokenizer's word-start mark ("Ġ" for
 * byte-level tokenizers, "▁" for SentencePiece ones) is that mark and the
 * rest; else a token that is one of the named special tokens (bos, eos,
 * unk, sep, pad, cls, mask: transformers' special_tokens_map) is that
 * name, whatever its text ("<s>" and "<|begin_of_text|>" both are
 * bos_token); else its text.  A key (char *) holds a normalised token as
 * one tag byte and a text: 'T' text, 'W' word start + the rest, 'S'
 * special + the attribute name ("Sbos_token").
 *
 * Ownership: mk_surgeon_vocab_build gives the caller one struct
 * mk_surgeon_vocab (mk_surgeon_vocab_free); arrays marked malloc'ed are
 * the caller's.  Errors are returned (mk_err), never printed.
 */
#ifndef MK_SURGEON_MATCH_H
#define MK_SURGEON_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

/* the word-start mark */
enum mk_surgeon_space { MK_SURGEON_SPACE_BYTELEVEL, MK_SURGEON_SPACE_METASPACE };

/* The mark mergekit picks for a tokenizer transformers loads as class
 * `cls` (its Python class name, "LlamaTokenizer"; a name ending in Fast
 * the same): GPT2, OpenAIGPT and Qwen2 tokenizers are byte-level; Llama,
 * T5 and Gemma ones SentencePiece unless the vocabulary has "Ġhello"
 * (DeepSeek's); any other class (PreTrainedTokenizerFast, which
 * transformers 5 loads as TokenizersBackend, included) byte-level. */
enum mk_surgeon_space mk_surgeon_space_of(const char *cls, bool has_g_hello);

/* the named special tokens, in transformers' order */
#define MK_SURGEON_NSPECIAL 7
extern const char *const mk_surgeon_special_names[MK_SURGEON_NSPECIAL];

struct mk_surgeon_vocab {
	size_t n;      /* ids 0 .. n-1 */
	char **key;    /* key[id]: the normalised token, NULL where the id has none */
	/* private: key -> id + 1, open addressing */
	size_t hcap;
	uint32_t *hslot;
};

/* token[id] (n of them; NULL: no token) normalised with the mark and
 * special[k] (the text of mk_surgeon_special_names[k], NULL: unset).
 * Refused: two ids whose tokens normalise alike (the text given twice). */
int mk_surgeon_vocab_build(const char *const *token, size_t n, const char *const *special,
			   enum mk_surgeon_space space, struct mk_surgeon_vocab **out, struct mk_err *err);
void mk_surgeon_vocab_free(struct mk_surgeon_vocab *v);
/* a key's id, or -1 */
long long mk_surgeon_vocab_find(const struct mk_surgeon_vocab *v, const char *key);

/* The text mergekit gives the model's tokenizer for a key (the subword
 * method): a word start is " " and the rest; a special token its
 * attribute name ("bos_token"); a text itself.  A pointer into key, or
 * into buf (cap bytes) for a word start; NULL when buf is too short. */
const char *mk_surgeon_key_text(const char *key, char *buf, size_t cap);

/* ---------------------------------------------------------- matching */
#define MK_SURGEON_APPROX (-1)  /* approximate this token's row */
#define MK_SURGEON_ZERO   (-2)  /* a zero row: no token, past the donor's rows, or junk */

struct mk_surgeon_match_opts {
	size_t model_rows, donor_rows;  /* the embedding's rows: ids at or past them are left out */
	bool byte_match;     /* "a" takes the model's "<0x61>", "<0x61>" its "a" */
	bool prefix_match;   /* else the longest prefix the model has (not a blank one) */
	const uint8_t *model_keep; /* per model id, 0: not a match (--magikarp); NULL: all */
	const uint8_t *junk;       /* per donor id, 1: zeroed after all (--magikarp); NULL: none */
};

struct mk_surgeon_stats {
	size_t exact, byte, prefix, approx, zero;
};

/* row[id] for every donor id (donor->n of them): the model's row to copy,
 * MK_SURGEON_APPROX or MK_SURGEON_ZERO.  The output embedding has
 * donor->n rows. */
int mk_surgeon_match(const struct mk_surgeon_vocab *model, const struct mk_surgeon_vocab *donor,
		     const struct mk_surgeon_match_opts *o, int64_t *row, struct mk_surgeon_stats *st,
		     struct mk_err *err);

/* The approximation basis: the tokens both have (exact key matches, ids
 * within the rows and kept), in the donor's id order: donor_ids and
 * model_ids (*n each, malloc'ed; NULL when *n is 0). */
int mk_surgeon_shared(const struct mk_surgeon_vocab *model, const struct mk_surgeon_vocab *donor,
		      const struct mk_surgeon_match_opts *o, size_t *n, int64_t **donor_ids, int64_t **model_ids,
		      struct mk_err *err);

/* --magikarp (magikarp.c): good[id] (v->n of them) 1 for the tokens of
 * v whose rows look trained, as mergekit's well_trained_tokens judges
 * them: embed (and lm_head, NULL when the model has none) rows x d.
 * The program then keeps, as matches and shared tokens, the model's
 * tokens good in both models (model_keep), and zeroes the donor's
 * tokens good in neither (junk). */
int mk_surgeon_well_trained(const struct mk_surgeon_vocab *v, const float *embed, const float *lm_head, size_t rows,
			    size_t d, uint8_t *good, struct mk_err *err);

#endif
