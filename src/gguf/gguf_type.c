/* gguf_type.c - ggml's tensor types: names and block geometry, as
 * ggml's type traits give them (ggml.c, type_traits[]). */
#include "gguf/gguf_type.h"

#include <stddef.h>

struct gtype {
	const char *name;
	unsigned block, bytes;
	bool quantized;
};

static const struct gtype types[MK_GGUF_TYPE_COUNT] = {
	[MK_GGUF_F32] = { "f32", 1, 4, false },
	[MK_GGUF_F16] = { "f16", 1, 2, false },
	[MK_GGUF_Q4_0] = { "q4_0", 32, 18, true },
	[MK_GGUF_Q4_1] = { "q4_1", 32, 20, true },
	[MK_GGUF_Q5_0] = { "q5_0", 32, 22, true },
	[MK_GGUF_Q5_1] = { "q5_1", 32, 24, true },
	[MK_GGUF_Q8_0] = { "q8_0", 32, 34, true },
	[MK_GGUF_Q8_1] = { "q8_1", 32, 36, true },
	[MK_GGUF_Q2_K] = { "q2_K", 256, 84, true },
	[MK_GGUF_Q3_K] = { "q3_K", 256, 110, true },
	[MK_GGUF_Q4_K] = { "q4_K", 256, 144, true },
	[MK_GGUF_Q5_K] = { "q5_K", 256, 176, true },
	[MK_GGUF_Q6_K] = { "q6_K", 256, 210, true },
	[MK_GGUF_Q8_K] = { "q8_K", 256, 292, true },
	[MK_GGUF_IQ2_XXS] = { "iq2_xxs", 256, 66, true },
	[MK_GGUF_IQ2_XS] = { "iq2_xs", 256, 74, true },
	[MK_GGUF_IQ3_XXS] = { "iq3_xxs", 256, 98, true },
	[MK_GGUF_IQ1_S] = { "iq1_s", 256, 50, true },
	[MK_GGUF_IQ4_NL] = { "iq4_nl", 32, 18, true },
	[MK_GGUF_IQ3_S] = { "iq3_s", 256, 110, true },
	[MK_GGUF_IQ2_S] = { "iq2_s", 256, 82, true },
	[MK_GGUF_IQ4_XS] = { "iq4_xs", 256, 136, true },
	[MK_GGUF_I8] = { "i8", 1, 1, false },
	[MK_GGUF_I16] = { "i16", 1, 2, false },
	[MK_GGUF_I32] = { "i32", 1, 4, false },
	[MK_GGUF_I64] = { "i64", 1, 8, false },
	[MK_GGUF_F64] = { "f64", 1, 8, false },
	[MK_GGUF_IQ1_M] = { "iq1_m", 256, 56, true },
	[MK_GGUF_BF16] = { "bf16", 1, 2, false },
	[MK_GGUF_TQ1_0] = { "tq1_0", 256, 54, true },
	[MK_GGUF_TQ2_0] = { "tq2_0", 256, 66, true },
	[MK_GGUF_MXFP4] = { "mxfp4", 32, 17, true },
	[MK_GGUF_NVFP4] = { "nvfp4", 64, 36, true },
	[MK_GGUF_Q1_0] = { "q1_0", 128, 18, true },
	[MK_GGUF_Q2_0] = { "q2_0", 64, 18, true },
};

static const struct gtype *find(int type)
{
	if (type < 0 || type >= MK_GGUF_TYPE_COUNT || !types[type].name)
		return NULL;
	return &types[type];
}

const char *mk_gguf_type_name(int type)
{
	const struct gtype *t = find(type);

	return t ? t->name : NULL;
}

unsigned mk_gguf_type_block(int type)
{
	const struct gtype *t = find(type);

	return t ? t->block : 0;
}

unsigned mk_gguf_type_block_bytes(int type)
{
	const struct gtype *t = find(type);

	return t ? t->bytes : 0;
}

bool mk_gguf_type_is_quantized(int type)
{
	const struct gtype *t = find(type);

	return t && t->quantized;
}

uint64_t mk_gguf_row_bytes(int type, uint64_t n)
{
	const struct gtype *t = find(type);

	if (!t || n % t->block)
		return 0;
	return n / t->block * t->bytes;
}
