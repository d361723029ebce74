/* test_gguf_quant.c - GGUF's block quantizers against llama.cpp's.
 *
 * testdata/gguf/quant-golden.bin holds rows (random at several scales,
 * zeros, constants, a huge outlier, one sign only, tiny values that
 * round the block scale to zero, groups of very different magnitude;
 * 256, 512 and 4096 values) and the bytes ggml's ggml_quantize_chunk
 * made of each, without an importance matrix, for f16, bf16, q8_0,
 * q5_0, q5_1, q4_K, q5_K and q6_K (scripts/gguf-quant-golden.c,
 * testdata/gguf/README).  Every byte must be equal.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_quant.h"
#include "gguf/gguf_type.h"
#include "mk/dtype.h"
#include "mk/err.h"

static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *p;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	rewind(f);
	p = malloc((size_t)n);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return p;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void test_golden(void **state)
{
	size_t len, off = 8;
	uint8_t *g = slurp("testdata/gguf/quant-golden.bin", &len);
	unsigned checked = 0, seen[MK_GGUF_TYPE_COUNT] = { 0 };

	assert_memory_equal(g, "MKGQ1\n\0\0", 8);
	uint32_t ncase = rd32(g + off);

	off += 4;
	assert_true(ncase >= 15);
	for (uint32_t c = 0; c < ncase; c++) {
		char name[33] = { 0 };

		memcpy(name, g + off, 32);
		off += 32;
		uint32_t n = rd32(g + off);

		off += 4;
		float *x = malloc((size_t)n * 4);

		assert_non_null(x);
		memcpy(x, g + off, (size_t)n * 4);
		off += (size_t)n * 4;
		uint32_t nt = rd32(g + off);

		off += 4;
		for (uint32_t t = 0; t < nt; t++) {
			uint32_t type = rd32(g + off), nb = rd32(g + off + 4);
			const uint8_t *want = g + off + 8;
			struct mk_err err = { 0 };

			off += 8 + nb;
			assert_true(off <= len);
			assert_int_equal(mk_gguf_row_bytes((int)type, n), nb);
			uint8_t *got = malloc(nb);

			assert_non_null(got);
			assert_int_equal(mk_gguf_quantize_row((int)type, x, n, got, &err), 0);
			if (memcmp(got, want, nb)) {
				size_t i = 0;

				while (got[i] == want[i])
					i++;
				fail_msg("%s as %s: byte %zu (block %zu) is %02x, "
					 "ggml wrote %02x", name, mk_gguf_type_name((int)type),
					 i, i / mk_gguf_type_block_bytes((int)type), got[i],
					 want[i]);
			}
			seen[type]++;
			checked++;
			free(got);
		}
		free(x);
	}
	assert_int_equal(off, len);
	assert_true(checked >= 100);
	static const int must[] = { MK_GGUF_F16, MK_GGUF_BF16, MK_GGUF_Q8_0,
		MK_GGUF_Q5_0, MK_GGUF_Q5_1, MK_GGUF_Q4_K, MK_GGUF_Q5_K,
		MK_GGUF_Q6_K };
	for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
		assert_int_equal(seen[must[i]], ncase);
	free(g);
}

/* Q8_0 worked by hand: amax 127 gives d = 1, values round half away
 * from zero. */
static void test_q8_0_by_hand(void **state)
{
	float x[32] = { 0 };
	uint8_t b[34];

	x[0] = 127.0f;
	x[1] = -2.5f;
	x[2] = 2.5f;
	x[3] = -0.49f;
	x[31] = -127.0f;
	mk_gguf_q8_0_row(x, 32, b);
	assert_int_equal(b[0] | b[1] << 8, mk_f32_to_f16(1.0f));
	assert_int_equal((int8_t)b[2], 127);
	assert_int_equal((int8_t)b[3], -3);
	assert_int_equal((int8_t)b[4], 3);
	assert_int_equal((int8_t)b[5], 0);
	assert_int_equal((int8_t)b[33], -127);
}

/* A q4_K block of zeros is all zero bytes; a q6_K one too. */
static void test_zero_blocks(void **state)
{
	float x[256] = { 0 };
	uint8_t b[210], z[210] = { 0 };

	memset(b, 0xAA, sizeof b);
	mk_gguf_q4_k_row(x, 256, b);
	assert_memory_equal(b, z, 144);
	memset(b, 0xAA, sizeof b);
	mk_gguf_q6_k_row(x, 256, b);
	assert_memory_equal(b, z, 210);
}

static void test_bf16_nan_and_ties(void **state)
{
	uint32_t u = 0xFF800001u;       /* negative signalling NaN */
	float f;

	memcpy(&f, &u, 4);
	assert_int_equal(mk_gguf_f32_to_bf16(f), 0xFFC0);
	u = 0x3F808000u;                /* tie, even below: stays */
	memcpy(&f, &u, 4);
	assert_int_equal(mk_gguf_f32_to_bf16(f), 0x3F80);
	u = 0x3F818000u;                /* tie, odd below: up */
	memcpy(&f, &u, 4);
	assert_int_equal(mk_gguf_f32_to_bf16(f), 0x3F82);
}

static void test_errors(void **state)
{
	float x[300] = { 0 };
	uint8_t b[400];
	struct mk_err err = { 0 };

	assert_int_equal(mk_gguf_quantize_row(MK_GGUF_Q4_K, x, 288, b, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "multiple of 256"));
	assert_non_null(strstr(err.msg, "288"));
	assert_int_equal(mk_gguf_quantize_row(MK_GGUF_Q3_K, x, 256, b, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "q3_K"));
	assert_int_equal(mk_gguf_quantize_row(99, x, 256, b, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "unknown"));
	assert_int_equal(mk_gguf_quantize_row(MK_GGUF_Q8_0, x, 288, b, &err), 0);
}

static void test_type_table(void **state)
{
	assert_string_equal(mk_gguf_type_name(MK_GGUF_Q4_K), "q4_K");
	assert_string_equal(mk_gguf_type_name(MK_GGUF_BF16), "bf16");
	assert_null(mk_gguf_type_name(4));
	assert_null(mk_gguf_type_name(MK_GGUF_TYPE_COUNT));
	assert_int_equal(mk_gguf_row_bytes(MK_GGUF_Q4_K, 4096), 16 * 144);
	assert_int_equal(mk_gguf_row_bytes(MK_GGUF_Q6_K, 512), 2 * 210);
	assert_int_equal(mk_gguf_row_bytes(MK_GGUF_Q8_0, 64), 68);
	assert_int_equal(mk_gguf_row_bytes(MK_GGUF_Q8_0, 48), 0);
	assert_int_equal(mk_gguf_row_bytes(MK_GGUF_F32, 3), 12);
	assert_true(mk_gguf_type_is_quantized(MK_GGUF_Q5_0));
	assert_false(mk_gguf_type_is_quantized(MK_GGUF_BF16));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_q8_0_by_hand),
		cmocka_unit_test(test_zero_blocks),
		cmocka_unit_test(test_bf16_nan_and_ties),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_type_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
