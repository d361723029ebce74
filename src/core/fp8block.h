/* fp8block.h - block-scaled FP8 (F8_E4M3 with one float32 scale per
 * block of rows x columns), written as transformers' FineGrainedFP8
 * quantizer writes it; the one home of that rule in mk (mk-pack
 * --quantize fp8, the test models of mk-gen-model).
 *
 * Per block of a weight: amax = the largest |value|, the scale
 * k = (1 / amax) * 448 computed in float32 as torch divides a scalar by a
 * tensor (the reciprocal, then the product: two roundings; 1 where amax
 * is 0), each value times k clamped to [-448, 448] and rounded to nearest
 * even to F8_E4M3; the inverse 1 / k is stored (NAME.weight_scale_inv,
 * float32), and a reader's weight is the F8 value times it.
 */
#ifndef MK_FP8BLOCK_H
#define MK_FP8BLOCK_H

#include <stdint.h>

#define MK_FP8_E4M3_MAX 448.0f

/* One block-row of a weight: `rows` (at most the block's rows) by `cols`
 * float32 values v, row-major, into q (rows * cols F8_E4M3 bytes) and
 * inv (⌈cols / bcols⌉ float32 inverse scales, one per block of bcols
 * columns).  v is overwritten (scaled and clamped) on the way. */
void mk_fp8_block_row(float *v, uint64_t rows, uint64_t cols, uint32_t bcols, uint8_t *q, float *inv);

#endif
