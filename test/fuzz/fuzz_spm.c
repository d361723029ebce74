/* fuzz_spm.c - mk_vocab_parse_spm (a SentencePiece tokenizer.model, read
 * with libsentencepiece) on arbitrary bytes: a refusal says why; an
 * accepted model has a token for every id, every added token on its own
 * piece, and mk_vocab_find gives each piece an id of that text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_vocab *v = NULL;
	struct mk_err err;

	if (mk_vocab_parse_spm(d, n, "fuzz/tokenizer.model", &v, &err)) {
		if (v || err.code == 0 || !err.msg[0])
			abort();
		return 0;
	}
	for (size_t i = 0; i < v->n; i++) {
		long long at;
		if (!v->token[i] || (at = mk_vocab_find(v, v->token[i])) < 0 || strcmp(v->token[at], v->token[i]))
			abort();
	}
	for (size_t i = 0; i < v->nadded; i++)
		if (v->added[i].id < 0 || (size_t)v->added[i].id >= v->n ||
		    strcmp(v->token[v->added[i].id], v->added[i].content))
			abort();
	mk_vocab_free(v);
	return 0;
}
