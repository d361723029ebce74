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
#include <stdint.h>
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
	size_t ntok;                /* ids that have a token */
	/* private: token -> id (open addressing, ids + 1, 0 empty) */
	size_t hcap;
	uint32_t *hslot;
};

/* Parse tokenizer.json's text (label names it in messages).  Refused,
 * naming the file and what: JSON that does not parse, a model type other
 * than the four, a vocabulary entry that is not a string -> integer (or
 * [string, number] pair), an id below 0 or past 2^31, one id for two
 * tokens, an added token without content or id. */
int mk_vocab_parse(const char *text, size_t len, const char *label, struct mk_vocab **out, struct mk_err *err);
void mk_vocab_free(struct mk_vocab *v);

/* A SentencePiece model (tokenizer.model, bytes as read): its pieces by
 * id (model_type "SentencePiece"), the control and unknown pieces as
 * special added tokens, as transformers converts them.  Refused, naming
 * the file: bytes libsentencepiece does not load. */
int mk_vocab_parse_spm(const void *buf, size_t len, const char *label, struct mk_vocab **out, struct mk_err *err);
/* A slow tokenizer's vocabulary: vocab.json ({token: id}, GPT-2 style
 * BPE; lines false) or vocab.txt (a token a line, its id the line's
 * number, WordPiece; lines true).  Added tokens come from
 * tokenizer_config.json (mk_vocab_add_decoder).  Refused, naming the
 * file: JSON that is not an object of integer ids, an id twice. */
int mk_vocab_parse_plain(const char *text, size_t len, const char *label, bool lines, struct mk_vocab **out,
			 struct mk_err *err);
/* The added tokens of a tokenizer_config.json (its added_tokens_decoder,
 * {"ID": {content, special, ...}}) added to v: ids past its pieces
 * extend it, one on a piece must be that piece.  No such key: nothing. */
int mk_vocab_add_decoder(struct mk_vocab *v, const char *text, size_t len, const char *label, struct mk_err *err);

/* Do a and b give every token the same id, and have the same added
 * tokens (content, id and flags)?  When not, *why (may be NULL) says the
 * first difference ("'<|im_start|>' is 32000 in one and absent from the
 * other"), in buf of `cap` bytes. */
bool mk_vocab_equal(const struct mk_vocab *a, const struct mk_vocab *b, char *why, size_t cap);

/* A token's id, as transformers' get_vocab() gives it (an added token's
 * id where its content is one), or -1. */
long long mk_vocab_find(const struct mk_vocab *v, const char *token);

/* ---------------------------------------------------- merged vocabulary
 *
 * The output vocabulary of a merge with a tokenizer source and, for
 * every model, where each output token was in its own vocabulary:
 *   - the base's vocabulary is "stripped": ids at or past its configured
 *     vocab size are dropped (a fast BPE tokenizer only, else an error);
 *   - source base: the stripped base; source model k: k's vocabulary as
 *     it is; union: the stripped base, then every other model's regular
 *     tokens the base lacks (model order, then id order; ids past the
 *     model's vocab size left out), then their added tokens (first seen
 *     flags win);
 *   - then each extra token (the keys of `tokens:`) the vocabulary lacks,
 *     as a plain added token;
 *   - map[m][id]: model m's id of output token id, -1 when m lacks it or
 *     has it at or past its vocab size (padding).
 */
enum mk_tokmerge_source { MK_TOKMERGE_BASE, MK_TOKMERGE_UNION, MK_TOKMERGE_MODEL };

struct mk_tokmerge_in {
	size_t nmodels;
	const struct mk_vocab *const *vocab;   /* per model; NULL: unreadable, taken as the base's */
	const long long *vocab_size;           /* per model: config.json's; <= 0 unknown (its length) */
	const char *const *label;              /* per model, for messages */
	size_t base;
	enum mk_tokmerge_source source;
	size_t source_model;                   /* MK_TOKMERGE_MODEL */
	size_t nextra;
	const char *const *extra;
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
};

struct mk_tokmerge {
	size_t n;                    /* output tokens (ids 0 .. n-1) */
	char **token;                /* token[id] */
	const struct mk_vocab *out_from; /* the vocabulary the output starts from (the
					    base's or the source model's) ... */
	size_t from_model;           /* ... that model */
	long long strip_at;          /* ids from here of it dropped (stripped base), -1 none */
	size_t nnew;                 /* tokens added to it, ids from strip_at (or its end) on */
	struct mk_added_token *new_tokens;
	size_t nmodels;
	int32_t **map;               /* map[m][id] */
	struct mk_vocab **orig;      /* per model: the vocabulary model_token lookups use
					(the stripped base for the base); borrowed or owned */
	bool *orig_owned;
	struct mk_vocab *outv;       /* private: the output as a vocabulary (lookups) */
};

int mk_tokmerge_build(const struct mk_tokmerge_in *in, struct mk_tokmerge **out, struct mk_err *err);
void mk_tokmerge_free(struct mk_tokmerge *t);
/* The output's tokenizer.json: the donor's (text, len bytes; the
 * vocabulary t->out_from was read from) with the stripped ids' tokens
 * taken out of model.vocab, model.merges and added_tokens, and the new
 * tokens appended to added_tokens; all else as it was.  malloc'ed. */
int mk_tokmerge_tokenizer_json(const struct mk_tokmerge *t, const char *text, size_t len, const char *label,
			       char **out, size_t *olen, struct mk_err *err);
/* tokenizer_config.json (parsed, edited in place): added_tokens_decoder
 * the same way.  Nothing when the vocabulary is the donor's. */
struct mk_jsondoc;
int mk_tokmerge_edit_config(const struct mk_tokmerge *t, struct mk_jsondoc *doc, struct mk_err *err);
/* The output id of a token, or -1. */
long long mk_tokmerge_find(const struct mk_tokmerge *t, const char *token);

#endif
