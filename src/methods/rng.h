/* rng.h - the counter-based random numbers of the random merge methods
 * (DARE, DELLA, arcee_fusion), passthrough's noise_scale and mk-moe's
 * random routers.  Internal to libmk.
 *
 * Every random decision is a pure function of (seed, output tensor name,
 * input index in the plan, element index): no generator state, so a mask
 * is bit-identical for any chunk size, thread count, chunk order and
 * machine, and the masks of different inputs (models) are independent,
 * as mergekit draws them (mk-compat(7), "Randomness").
 *
 *   stream = mk_rng_stream(seed, tensor, input)     once per (tensor, input)
 *   u      = mk_rng_uniform(stream, element)        in [0, 1), 53 bits
 *
 * mk_rng_stream hashes the name with FNV-1a 64 and mixes seed, name hash
 * and input through the splitmix64 finaliser (a bijective avalanche
 * mixer); element e then draws the (e+1)-th output of splitmix64 started
 * at that stream state: mix(stream + (e + 1) * 0x9E3779B97F4A7C15).
 * splitmix64 passes BigCrush; distinct streams start at unrelated
 * points of its period of 2^64.  This is not torch's generator: the
 * masks are statistically, not bit-wise, those of mergekit.
 */
#ifndef MK_METHODS_RNG_H
#define MK_METHODS_RNG_H

#include <math.h>
#include <stdint.h>

#define MK_RNG_GOLDEN 0x9E3779B97F4A7C15ull

/* The splitmix64 output function (Stafford's mix 13). */
static inline __attribute__((always_inline)) uint64_t mk_rng_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* FNV-1a 64 of a NUL-terminated string (NULL: of ""). */
uint64_t mk_rng_fnv1a64(const char *s);

/* The stream of one (seed, tensor, input). */
uint64_t mk_rng_stream(uint64_t seed, const char *tensor, uint64_t input);

/* 64 random bits for element `e` of a stream. */
static inline __attribute__((always_inline)) uint64_t mk_rng_u64(uint64_t stream, uint64_t e)
{
	return mk_rng_mix64(stream + (e + 1) * MK_RNG_GOLDEN);
}

/* A uniform double in [0, 1) with 53 random bits. */
static inline double mk_rng_uniform(uint64_t stream, uint64_t e)
{
	return (double)(mk_rng_u64(stream, e) >> 11) * 0x1p-53;
}

/* A standard normal value for element `e` of a stream, by Box-Muller
 * (the cosine branch) from the element's two counters 2e and 2e + 1.
 * Unlike the uniforms, its last bits are libm's (log, sqrt, cos): the
 * same on machines whose libm rounds those alike. */
static inline double mk_rng_normal(uint64_t stream, uint64_t e)
{
	double u1 = 1.0 - mk_rng_uniform(stream, 2 * e), u2 = mk_rng_uniform(stream, 2 * e + 1);
	return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
