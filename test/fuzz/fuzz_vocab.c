/* fuzz_vocab.c - mk_vocab_parse (a tokenizer.json's vocabulary) on
 * arbitrary bytes: a refusal says why; an accepted vocabulary is equal to
 * itself, every id it names is below n, and every added token's content
 * is the token of its id. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_vocab *v = NULL;
	struct mk_err err;
	char why[128];

	if (mk_vocab_parse((const char *)d, n, "fuzz/tokenizer.json", &v, &err)) {
		if (v || err.code == 0 || !err.msg[0])
			abort();
		return 0;
	}
	if (!mk_vocab_equal(v, v, why, sizeof(why)))
		abort();
	for (size_t i = 0; i < v->nadded; i++)
		if (v->added[i].id < 0 || (size_t)v->added[i].id >= v->n ||
		    strcmp(v->token[v->added[i].id], v->added[i].content))
			abort();
	mk_vocab_free(v);
	return 0;
}
