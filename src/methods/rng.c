/* rng.c - counter-based random numbers for the merge methods (rng.h). */
#include "rng.h"

uint64_t mk_rng_fnv1a64(const char *s)
{
	uint64_t h = 0xCBF29CE484222325ull;

	for (; s && *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001B3ull;
	}
	return h;
}

uint64_t mk_rng_stream(uint64_t seed, const char *tensor, uint64_t input)
{
	uint64_t z = mk_rng_mix64(seed + MK_RNG_GOLDEN);

	z = mk_rng_mix64(z ^ mk_rng_fnv1a64(tensor));
	return mk_rng_mix64(z + (input + 1) * 0xD1B54A32D192ED03ull);
}
