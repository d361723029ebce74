/* vocab.h - a model's vocabulary, as a fast tokenizer (tokenizer.json)
 * holds it: the model's token -> id table (BPE, WordPiece and WordLevel:
 * model.vocab, an object; Unigram: model.vocab, a list of [piece, score]
 * pairs whose index is the id) and the added tokens with their flags.
 * What transformers' get_vocab() gives is the union of the two.
 *
 * Ownership: mk_vocab_parse gives the caller one struct mk_vocab
 * (mk_vocab_free).
 */
#ifndef MK_VOCAB_H
#define MK_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/err.h"

struct mk_added_token {
	char *content;
	long long id;
	bool special, normalized, lstrip, rstrip, single_word;
};

struct mk_vocab {
	char *model_type;           /* "BPE", "Unigram", "WordPiece", "WordLevel" */
	size_t n;                   /* ids 0 .. n-1 ... */
	char **token;               /* ... token[id], NULL for an id nobody has;
				       an added token's content where it has one */
	size_t nadded;
	struct mk_added_token *added; /* in the file's order */
};

/* Parse tokenizer.json's text (label names it in messages).  Refused,
 * naming the file and what: JSON that does not parse, a model type other
 * than the four, a vocabulary entry that is not a string -> integer (or
 * [string, number] pair), an id below 0 or past 2^31, one id for two
 * tokens, an added token without content or id. */
int mk_vocab_parse(const char *text, size_t len, const char *label, struct mk_vocab **out, struct mk_err *err);
void mk_vocab_free(struct mk_vocab *v);

/* Do a and b give every token the same id, and have the same added
 * tokens (content, id and flags)?  When not, *why (may be NULL) says the
 * first difference ("'<|im_start|>' is 32000 in one and absent from the
 * other"), in buf of `cap` bytes. */
bool mk_vocab_equal(const struct mk_vocab *a, const struct mk_vocab *b, char *why, size_t cap);

#endif
