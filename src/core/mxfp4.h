/* mxfp4.h - MXFP4 (OCP microscaling FP4: E2M1 values, one E8M0 scale per
 * 32) written as gpt-oss's checkpoints store it and transformers'
 * Mxfp4 quantizer computes it (the rule of triton_kernels' reference
 * downcast, which transformers calls); the one home of that rule in mk
 * (mk-pack --quantize mxfp4).
 *
 * Per group of 32 float32 values: amax = the largest |value|; the scale
 * 2^k is amax / 6 (a float32 division) rounded up to a power of two by
 * its bits (add 0x7fffff, keep the exponent); the stored scale byte is
 * that exponent field (k + 127).  Each value times 2^-k is cut to FP4 by
 * its float32 bits: the two leading mantissa bits (below 1.0 shifted as
 * a subnormal), rounded half up to one, saturated at 6; a zero group has
 * scale 0 and codes 0 (and -0.0 keeps its sign bit).  Two codes a byte,
 * the even element in the low nibble. */
#ifndef MK_MXFP4_H
#define MK_MXFP4_H

#include <stdint.h>

#define MK_MXFP4_GROUP 32

/* v: 32 float32 values, each `stride` floats after the previous; codes:
 * 16 bytes; *scale: the E8M0 exponent byte. */
void mk_mxfp4_group(const float *v, uint64_t stride, uint8_t codes[16], uint8_t *scale);

#endif
