/* vocab_impl.h - internals shared by src/tokenizer (not installed). */
#ifndef MK_VOCAB_IMPL_H
#define MK_VOCAB_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include "tokenizer/vocab.h"

/* (Re)build v's token -> id index from token[] and the added tokens;
 * -1 when out of memory. */
int mk__vocab_index(struct mk_vocab *v);
/* Index token[id], just set (the index grows when half full); -1 when
 * out of memory. */
int mk__vocab_index_add(struct mk_vocab *v, size_t id);

/* A SentencePiece model's pieces by id: each piece's text and whether it
 * is a control or the unknown piece.  0, or -1 (a model the library
 * refuses; msg says why), -2 (out of memory) or -3 (the helper that reads
 * them cannot be loaded; msg says which files were tried).  *out is
 * malloc'ed, each piece too.  mk__spm_pieces (spm_load.c) calls
 * mk_spm_pieces_v1 of the helper libmk-spm.so (spm.cc, libsentencepiece),
 * loaded on first use. */
struct mk__spm_piece {
	char *piece;
	bool control, unknown;
};
int mk__spm_pieces(const void *data, size_t len, struct mk__spm_piece **out, size_t *n, char *msg, size_t cap);
int mk_spm_pieces_v1(const void *data, size_t len, struct mk__spm_piece **out, size_t *n, char *msg, size_t cap);

#endif
