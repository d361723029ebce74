/* fuzz_moe_config.c - mk_moe_parse and mk_moe_check on arbitrary bytes: a
 * refusal says why; an accepted configuration has a base model, every
 * expert a source model and its prompts as counted, experts_per_token as
 * parsed, and the checks and the architecture choice (with model types
 * made up) either pass or say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "moe/moe.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void check_expert(const struct mk_moe_expert *e)
{
	if (!e->source_model)
		abort();
	for (size_t i = 0; i < e->npositive; i++)
		if (!e->positive[i])
			abort();
	for (size_t i = 0; i < e->nnegative; i++)
		if (!e->negative[i])
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_moe_config *c = NULL;
	struct mk_err err = { 0 };

	if (mk_moe_parse((const char *)d, n, "fuzz.yml", &c, &err)) {
		if (err.code == 0 || !err.msg[0] || c)
			abort();
		return 0;
	}
	if (!c->base_model || c->len != n || memcmp(c->text, d, n))
		abort();
	for (size_t i = 0; i < c->nexperts; i++)
		check_expert(&c->experts[i]);
	for (size_t i = 0; i < c->nshared; i++)
		check_expert(&c->shared[i]);
	mk_err_clear(&err);
	if (mk_moe_check(c, n & 1, &err) && (err.code == 0 || !err.msg[0]))
		abort();
	static const char *const kinds[] = { "llama", "mistral", "qwen2", "qwen3" };
	size_t nm = 1 + c->nexperts + c->nshared;
	const char **types = malloc(nm * sizeof(*types));
	if (!types)
		abort();
	for (size_t i = 0; i < nm; i++)
		types[i] = kinds[(n + i * (n > 3 ? d[3] : 0)) % 4];
	enum mk_moe_arch a = MK_MOE_NARCH;
	mk_err_clear(&err);
	if (mk_moe_select_arch(c, types, &a, &err)) {
		if (err.code == 0 || !err.msg[0])
			abort();
	} else if ((unsigned)a >= MK_MOE_NARCH) {
		abort();
	}
	free(types);
	mk_moe_config_free(c);
	return 0;
}
