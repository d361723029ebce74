/* gta.h - internals of the generalized task arithmetic family (gta.c
 * and the gta_*.c beside it), exposed for the unit tests.  Internal to
 * src/methods: what a device computes for these methods is their device
 * hook's (mk/device.h). */
#ifndef MK_METHODS_GTA_H
#define MK_METHODS_GTA_H

#include <stdbool.h>
#include <stdint.h>
#include "mk/method.h"

enum mk_gta_consensus {
	MK_GTA_CONS_NONE,
	MK_GTA_CONS_SUM,     /* majority sign of sum_m v_m (TIES) */
	MK_GTA_CONS_COUNT,   /* majority of the signs: sum_m sign(v_m) */
};

/* DELLA keep probability of the element of 0-based ascending rank rank0 in
 * a row of len elements: (density - epsilon) + 2 epsilon (r - 1)/(L - 1),
 * in float32 as mergekit computes it (or float64); a row of one element
 * gets density. */
float mk_gta_della_prob_f32(uint64_t rank0, uint64_t len, double density, double epsilon);
double mk_gta_della_prob_f64(uint64_t rank0, uint64_t len, double density, double epsilon);

/* The hand-vectorised paths that may run, where the CPU has them: up to
 * AVX-512 (the default), up to AVX2, or none (the portable C
 * everywhere), for the tests that compare them (gta_simd.h's table).  Returns the previous
 * limit.  Not thread-safe: set it while no job runs. */
enum { MK_GTA_SIMD_C, MK_GTA_SIMD_AVX2, MK_GTA_SIMD_AVX512 };
int mk_gta_simd_limit(int top);

/* RAND's (DARE's) statistics pass over elements [e0, e0 + n) of x over
 * the base b (float32, or BF16 when bf16), tile by tile as a chunk gets
 * it, on the path the SIMD limit allows: the kept bits OR'd into mask
 * (all zero before; NULL: none) and the L1 sums' eight lanes then their
 * closed total, before and after the draw, for the tests that compare
 * the paths bit for bit. */
void mk_gta_rand_sums(uint64_t stream, uint64_t thr, uint64_t e0, uint64_t n, const void *x, const void *b, bool bf16,
		      uint8_t *mask, double before[9], double after[9]);

/* `ties` with count consensus (mergekit's ConsensusMethod.count, which no
 * registered method uses); not registered. */
extern const struct mk_method mk_gta_method_ties_count;

#endif
