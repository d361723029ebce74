/* vocab_impl.h - internals shared by src/tokenizer (not installed). */
#ifndef MK_VOCAB_IMPL_H
#define MK_VOCAB_IMPL_H

#include "mk/vocab.h"

/* (Re)build v's token -> id index from token[] and the added tokens;
 * -1 when out of memory. */
int mk__vocab_index(struct mk_vocab *v);
/* Index token[id], just set (the index grows when half full); -1 when
 * out of memory. */
int mk__vocab_index_add(struct mk_vocab *v, size_t id);

#endif
