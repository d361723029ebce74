/* fuzz_vocab.c - mk_vocab_parse (a tokenizer.json's vocabulary) on
 * arbitrary bytes: a refusal says why; an accepted vocabulary is equal to
 * itself, every id it names is below n, and every added token's content
 * is the token of its id, found again by mk_vocab_find.  Then the merged
 * vocabulary of it with itself cut short (union, extra tokens): every
 * map entry names that token; and the tokenizer.json written for it
 * parses back to the merged vocabulary. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/vocab.h"

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
	for (size_t i = 0; i < v->n; i++) {
		long long at = v->token[i] ? mk_vocab_find(v, v->token[i]) : 0;
		if (at < 0 || (size_t)at >= v->n || (v->token[i] && strcmp(v->token[at], v->token[i])))
			abort();
	}
	/* the merged vocabulary: v as the base, v with a smaller vocab size */
	const struct mk_vocab *vs[2] = { v, v };
	long long sizes[2] = { (long long)v->n, (long long)(v->n / 2) };
	static const char *const labels[2] = { "a", "b" };
	static const char *const extra[2] = { "<fuzz-new>", "a" };
	struct mk_tokmerge_in in = { .nmodels = 2, .vocab = vs, .vocab_size = sizes, .label = labels,
				     .source = (n & 1) ? MK_TOKMERGE_UNION : MK_TOKMERGE_BASE, .nextra = 2, .extra = extra };
	struct mk_tokmerge *t = NULL;
	if (!mk_tokmerge_build(&in, &t, &err)) {
		for (size_t m = 0; m < 2; m++)
			for (size_t id = 0; id < t->n; id++) {
				int32_t old = t->map[m][id];
				long long size = sizes[m] > 0 ? sizes[m] : (long long)v->ntok; /* <= 0: unknown */
				if (old >= 0 && (old >= size || !t->token[id] || !v->token[old] ||
						 strcmp(v->token[old], t->token[id])))
					abort();
			}
		char *out = NULL;
		size_t olen;
		struct mk_vocab *w = NULL;
		if (!mk_tokmerge_tokenizer_json(t, (const char *)d, n, "fuzz/tokenizer.json", &out, &olen, &err)) {
			if (mk_vocab_parse(out, olen, "fuzz/out.json", &w, &err) || w->n != t->n)
				abort();
			for (size_t id = 0; id < t->n; id++)
				if (!t->token[id] != !w->token[id] || (t->token[id] && strcmp(t->token[id], w->token[id])))
					abort();
			mk_vocab_free(w);
		}
		free(out);
		mk_tokmerge_free(t);
	}
	mk_vocab_free(v);
	return 0;
}
