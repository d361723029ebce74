/* gguf_quant.h - rows of float32 to GGUF's block types, byte for byte as
 * llama.cpp's llama-quantize writes them without an importance matrix
 * (ggml's reference row quantizers; llama.cpp 0c1e57098, vendored by
 * llama-cpp-python 0.3.36).  libmk is compiled with -ffp-contract=off,
 * as ggml-base is compiled without FMA in llama.cpp's default build, so
 * every float operation rounds where ggml's does.  A llama.cpp whose
 * ggml-base is built with FMA contraction (CFLAGS=-march=native on
 * x86-64, GCC's default -ffp-contract=fast) writes other q4_K, q5_K and
 * q5_0 bytes for some rows (10 of the 152 golden pairs); q8_0, q6_K,
 * f16 and bf16 did not change.  mk follows the default build.
 *
 * A row of n floats becomes mk_gguf_row_bytes(type, n) bytes; n must be
 * a multiple of the type's block (32 for Q8_0/Q5_0/Q5_1, 256 for the
 * k-quants).  The inputs are expected finite; a NaN or infinity gives
 * whatever ggml's arithmetic gives (not checked here).
 */
#ifndef MK_GGUF_QUANT_H
#define MK_GGUF_QUANT_H

#include <stddef.h>
#include <stdint.h>

struct mk_err;

/* Whether mk_gguf_quantize_row can write `type`: F32, F16, BF16, Q5_0,
 * Q5_1, Q8_0, Q4_K, Q5_K, Q6_K. */
int mk_gguf_quant_supported(int type);

/* Quantize (or convert) n floats of `x` into `out`, which holds
 * mk_gguf_row_bytes(type, n) bytes.  Returns 0, or -MK_EINVAL (type not
 * supported, n not a multiple of its block) with a message. */
int mk_gguf_quantize_row(int type, const float *x, uint64_t n, void *out,
			 struct mk_err *err);

/* The single steps, for the tests: each writes n / block blocks. */
void mk_gguf_q8_0_row(const float *x, uint64_t n, uint8_t *out);
void mk_gguf_q5_0_row(const float *x, uint64_t n, uint8_t *out);
void mk_gguf_q5_1_row(const float *x, uint64_t n, uint8_t *out);
void mk_gguf_q4_k_row(const float *x, uint64_t n, uint8_t *out);
void mk_gguf_q5_k_row(const float *x, uint64_t n, uint8_t *out);
void mk_gguf_q6_k_row(const float *x, uint64_t n, uint8_t *out);
/* float32 to bfloat16 as ggml and gguf-py round: to nearest even; a
 * NaN keeps its sign and top payload bits and is made quiet. */
uint16_t mk_gguf_f32_to_bf16(float f);

#endif
