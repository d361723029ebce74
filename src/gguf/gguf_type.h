/* gguf_type.h - the tensor types a GGUF file stores (ggml's type ids,
 * which are the numbers written in a tensor info) and their block
 * geometry: a row of n elements of a block type takes n / block
 * blocks of `block_bytes` each, and n must be a multiple of `block`.
 */
#ifndef MK_GGUF_TYPE_H
#define MK_GGUF_TYPE_H

#include <stdbool.h>
#include <stdint.h>

/* ggml's numbering (ggml.h); ids 4, 5 and 31-33, 36-38 are retired. */
enum mk_gguf_type {
	MK_GGUF_F32 = 0,
	MK_GGUF_F16 = 1,
	MK_GGUF_Q4_0 = 2,
	MK_GGUF_Q4_1 = 3,
	MK_GGUF_Q5_0 = 6,
	MK_GGUF_Q5_1 = 7,
	MK_GGUF_Q8_0 = 8,
	MK_GGUF_Q8_1 = 9,
	MK_GGUF_Q2_K = 10,
	MK_GGUF_Q3_K = 11,
	MK_GGUF_Q4_K = 12,
	MK_GGUF_Q5_K = 13,
	MK_GGUF_Q6_K = 14,
	MK_GGUF_Q8_K = 15,
	MK_GGUF_IQ2_XXS = 16,
	MK_GGUF_IQ2_XS = 17,
	MK_GGUF_IQ3_XXS = 18,
	MK_GGUF_IQ1_S = 19,
	MK_GGUF_IQ4_NL = 20,
	MK_GGUF_IQ3_S = 21,
	MK_GGUF_IQ2_S = 22,
	MK_GGUF_IQ4_XS = 23,
	MK_GGUF_I8 = 24,
	MK_GGUF_I16 = 25,
	MK_GGUF_I32 = 26,
	MK_GGUF_I64 = 27,
	MK_GGUF_F64 = 28,
	MK_GGUF_IQ1_M = 29,
	MK_GGUF_BF16 = 30,
	MK_GGUF_TQ1_0 = 34,
	MK_GGUF_TQ2_0 = 35,
	MK_GGUF_MXFP4 = 39,
	MK_GGUF_NVFP4 = 40,
	MK_GGUF_Q1_0 = 41,
	MK_GGUF_Q2_0 = 42,
	MK_GGUF_TYPE_COUNT = 43,
};

/* ggml's name of a type ("q4_K", "bf16"); NULL for an unknown id. */
const char *mk_gguf_type_name(int type);
/* Elements per block (1 for the plain types), 0 for an unknown id. */
unsigned mk_gguf_type_block(int type);
/* Bytes per block, 0 for an unknown id. */
unsigned mk_gguf_type_block_bytes(int type);
/* Whether the type is one of ggml's quantized (block) types. */
bool mk_gguf_type_is_quantized(int type);
/* Bytes of a row of n elements; 0 when the type is unknown or n is not
 * a multiple of its block. */
uint64_t mk_gguf_row_bytes(int type, uint64_t n);

#endif
