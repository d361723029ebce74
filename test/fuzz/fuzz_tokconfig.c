/* fuzz_tokconfig.c - mk_vocab_add_decoder (a tokenizer_config.json's
 * added_tokens_decoder merged into a vocabulary) on arbitrary bytes: a
 * refusal says why; an accepted one leaves every added token on its own
 * id, findable, and the vocabulary's first tokens as they were. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/vocab.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static const char base[] = "{\"added_tokens\": [{\"id\": 3, \"content\": \"<s>\", \"special\": true}], "
			   "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}}";

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_vocab *v = NULL;
	struct mk_err err;

	if (mk_vocab_parse(base, strlen(base), "base.json", &v, &err))
		abort();
	if (mk_vocab_add_decoder(v, (const char *)d, n, "fuzz/tokenizer_config.json", &err)) {
		if (err.code == 0 || !err.msg[0])
			abort();
		mk_vocab_free(v);
		return 0;
	}
	if (strcmp(v->token[0], "a") || strcmp(v->token[2], "ab") || strcmp(v->token[3], "<s>"))
		abort();
	for (size_t i = 0; i < v->nadded; i++) {
		const struct mk_added_token *a = &v->added[i];
		if (a->id < 0 || (size_t)a->id >= v->n || strcmp(v->token[a->id], a->content))
			abort();
		if (mk_vocab_find(v, a->content) < 0)
			abort();
	}
	mk_vocab_free(v);
	return 0;
}
