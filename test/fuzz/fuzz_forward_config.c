/* fuzz_forward_config.c - the forward pass's reading of config.json on
 * arbitrary bytes: a config it accepts has the shapes it promises (heads
 * a multiple of the KV heads, an even head_dim, a window per layer) and
 * rotary frequencies it can compute for any batch length. */
#include <stdint.h>
#include <stdlib.h>
#include "forward/forward_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_fwd_config c;
	struct mk_err err;

	if (mk_fwd_config_parse((const char *)d, n, "config.json", &c, &err))
		return 0;
	if (!c.layers || !c.hidden || !c.heads || !c.kv_heads || c.heads % c.kv_heads || c.head_dim % 2 || !c.window)
		abort();
	if (c.head_dim <= 1u << 16) {
		float *inv = malloc(c.head_dim / 2 * sizeof(float) + 1), scale;
		if (!inv)
			abort();
		for (size_t len = 1; len <= 1u << 20; len *= 32)
			mk_fwd_rope_inv_freq(&c, len, inv, &scale);
		free(inv);
	}
	mk_fwd_config_free(&c);
	return 0;
}
