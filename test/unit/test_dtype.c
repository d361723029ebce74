/* test_dtype.c - dtype table and float conversions.
 *
 * Expected bit patterns are worked out by hand from the format
 * definitions and c10's rules (see convert.c's header); on top of those a
 * slow reference rounder built from ldexp() and a sorted value table checks
 * every tie, every neighbour of a tie and a stride through all floats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/dtype.h"

static uint32_t fb(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float bf(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint64_t db(double d)
{
	uint64_t u;

	memcpy(&u, &d, 8);
	return u;
}

static double bd(uint64_t u)
{
	double d;

	memcpy(&d, &u, 8);
	return d;
}

static const enum mk_dtype f8s[] = {
	MK_DT_F8_E5M2, MK_DT_F8_E4M3, MK_DT_F8_E8M0,
	MK_DT_F8_E4M3FNUZ, MK_DT_F8_E5M2FNUZ,
};

/* ---- dtype.c ---- */

static void test_names(void **state)
{
	static const char *const names[MK_DT_COUNT] = {
		"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2",
		"F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",
		"U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64",
		"I64", "U64",
	};
	enum mk_dtype dt;

	(void)state;
	for (unsigned i = 0; i < MK_DT_COUNT; i++) {
		assert_string_equal(mk_dtype_name((enum mk_dtype)i), names[i]);
		assert_int_equal(mk_dtype_from_name(names[i], &dt), 0);
		assert_int_equal(dt, i);
	}
	assert_null(mk_dtype_name(MK_DT_COUNT));
	assert_null(mk_dtype_name((enum mk_dtype)-1));
	dt = MK_DT_U8;
	assert_int_equal(mk_dtype_from_name("bf16", &dt), -1);
	assert_int_equal(mk_dtype_from_name("", &dt), -1);
	assert_int_equal(mk_dtype_from_name("F8", &dt), -1);
	assert_int_equal(mk_dtype_from_name("BF16 ", &dt), -1);
	assert_int_equal(dt, MK_DT_U8);
}

static void test_bits_float(void **state)
{
	(void)state;
	assert_int_equal(mk_dtype_bits(MK_DT_BOOL), 8);
	assert_int_equal(mk_dtype_bits(MK_DT_F4), 4);
	assert_int_equal(mk_dtype_bits(MK_DT_F6_E2M3), 6);
	assert_int_equal(mk_dtype_bits(MK_DT_F6_E3M2), 6);
	assert_int_equal(mk_dtype_bits(MK_DT_F8_E8M0), 8);
	assert_int_equal(mk_dtype_bits(MK_DT_I16), 16);
	assert_int_equal(mk_dtype_bits(MK_DT_BF16), 16);
	assert_int_equal(mk_dtype_bits(MK_DT_F32), 32);
	assert_int_equal(mk_dtype_bits(MK_DT_C64), 64);
	assert_int_equal(mk_dtype_bits(MK_DT_U64), 64);
	assert_int_equal(mk_dtype_bits(MK_DT_COUNT), 0);

	for (unsigned i = 0; i < MK_DT_COUNT; i++) {
		enum mk_dtype dt = (enum mk_dtype)i;
		bool want = dt == MK_DT_F16 || dt == MK_DT_BF16 ||
			    dt == MK_DT_F32 || dt == MK_DT_F64;

		for (unsigned k = 0; k < sizeof f8s / sizeof f8s[0]; k++)
			want |= dt == f8s[k];
		assert_int_equal(mk_dtype_is_float(dt), want);
	}
	assert_false(mk_dtype_is_float(MK_DT_COUNT));
}

static void test_nbytes_granule(void **state)
{
	uint64_t out = 12345;

	(void)state;
	assert_int_equal(mk_dtype_nbytes(MK_DT_F32, 0, &out), 0);
	assert_int_equal(out, 0);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F32, 3, &out), 0);
	assert_int_equal(out, 12);
	assert_int_equal(mk_dtype_nbytes(MK_DT_BOOL, 5, &out), 0);
	assert_int_equal(out, 5);
	assert_int_equal(mk_dtype_nbytes(MK_DT_C64, 2, &out), 0);
	assert_int_equal(out, 16);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F4, 4, &out), 0);
	assert_int_equal(out, 2);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F6_E2M3, 4, &out), 0);
	assert_int_equal(out, 3);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F6_E3M2, 8, &out), 0);
	assert_int_equal(out, 6);
	/* F4 odd count and F6 non-multiple of 4: not whole bytes. */
	out = 777;
	assert_int_equal(mk_dtype_nbytes(MK_DT_F4, 3, &out), -1);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F4, 1, &out), -1);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F6_E2M3, 2, &out), -1);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F6_E3M2, 6, &out), -1);
	assert_int_equal(out, 777);
	/* 64-bit overflow of nelem * bits. */
	assert_int_equal(mk_dtype_nbytes(MK_DT_U8, UINT64_MAX, &out), -1);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F32, UINT64_C(1) << 59, &out), -1);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F4, UINT64_C(1) << 62, &out), -1);
	assert_int_equal(mk_dtype_nbytes(MK_DT_F4, UINT64_C(1) << 61, &out), 0);
	assert_int_equal(out, UINT64_C(1) << 60);
	assert_int_equal(mk_dtype_nbytes(MK_DT_U8, UINT64_C(1) << 60, &out), 0);
	assert_int_equal(out, UINT64_C(1) << 60);
	assert_int_equal(mk_dtype_nbytes(MK_DT_COUNT, 1, &out), -1);

	assert_int_equal(mk_dtype_elem_granule(MK_DT_F4), 2);
	assert_int_equal(mk_dtype_elem_granule(MK_DT_F6_E2M3), 4);
	assert_int_equal(mk_dtype_elem_granule(MK_DT_F6_E3M2), 4);
	assert_int_equal(mk_dtype_elem_granule(MK_DT_BOOL), 1);
	assert_int_equal(mk_dtype_elem_granule(MK_DT_F8_E4M3), 1);
	assert_int_equal(mk_dtype_elem_granule(MK_DT_F64), 1);
}

/* ---- hand-derived scalar cases ---- */

struct case32 {
	uint32_t in;
	uint32_t out;
};

static void test_bf16_scalar(void **state)
{
	static const struct case32 to[] = {     /* f32 bits -> bf16 */
		{ 0x00000000, 0x0000 }, { 0x80000000, 0x8000 },
		{ 0x3F800000, 0x3F80 },         /* 1.0 */
		{ 0xBF800000, 0xBF80 },
		{ 0x3F808000, 0x3F80 },         /* tie, down to even */
		{ 0x3F818000, 0x3F82 },         /* tie, up to even */
		{ 0x3F808001, 0x3F81 }, { 0x3F807FFF, 0x3F80 },
		{ 0x3F817FFF, 0x3F81 }, { 0xBF818000, 0xBF82 },
		{ 0x00000001, 0x0000 },         /* float subnormals */
		{ 0x00008000, 0x0000 }, { 0x00018000, 0x0002 },
		{ 0x00008001, 0x0001 }, { 0x807FFFFF, 0x8080 },
		{ 0x007F7FFF, 0x007F }, { 0x00800000, 0x0080 },
		{ 0x7F7F7FFF, 0x7F7F },         /* largest that stays finite */
		{ 0x7F7F8000, 0x7F80 },         /* tie at the top: inf */
		{ 0x7F7FFFFF, 0x7F80 }, { 0xFF7FFFFF, 0xFF80 },
		{ 0x7F800000, 0x7F80 }, { 0xFF800000, 0xFF80 },
		/* Every NaN becomes 0x7FC0, sign dropped. */
		{ 0x7FC00000, 0x7FC0 }, { 0xFFC00000, 0x7FC0 },
		{ 0x7F800001, 0x7FC0 }, { 0xFF800001, 0x7FC0 },
		{ 0x7FFFFFFF, 0x7FC0 }, { 0xFFFFFFFF, 0x7FC0 },
		{ 0x7F810000, 0x7FC0 },
	};
	static const struct case32 from[] = {   /* bf16 -> f32 bits */
		{ 0x0000, 0x00000000 }, { 0x8000, 0x80000000 },
		{ 0x0001, 0x00010000 }, { 0x007F, 0x007F0000 },
		{ 0x0080, 0x00800000 }, { 0x7F7F, 0x7F7F0000 },
		{ 0x7F80, 0x7F800000 }, { 0xFF80, 0xFF800000 },
		{ 0x7FC0, 0x7FC00000 }, { 0xFFC1, 0xFFC10000 },
		{ 0x7F81, 0x7F810000 },         /* signalling stays as is */
		{ 0x3F80, 0x3F800000 }, { 0xC049, 0xC0490000 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
		uint16_t got = mk_f32_to_bf16(bf(to[i].in));

		if (got != to[i].out)
			fail_msg("bf16(%08x) = %04x, want %04x", to[i].in, got,
				 to[i].out);
	}
	for (size_t i = 0; i < sizeof from / sizeof from[0]; i++)
		assert_int_equal(fb(mk_bf16_to_f32((uint16_t)from[i].in)),
				 from[i].out);
}

static void test_f16_scalar(void **state)
{
	static const struct case32 to[] = {     /* f32 bits -> f16 */
		{ 0x00000000, 0x0000 }, { 0x80000000, 0x8000 },
		{ 0x3F800000, 0x3C00 }, { 0xC0000000, 0xC000 },
		{ 0x3F801000, 0x3C00 },         /* 1+2^-11: tie, even down */
		{ 0x3F803000, 0x3C02 },         /* 1+3*2^-11: tie, even up */
		{ 0x3F801001, 0x3C01 }, { 0x3F800FFF, 0x3C00 },
		{ 0x3F802FFF, 0x3C01 }, { 0xBF803000, 0xBC02 },
		{ 0x477FE000, 0x7BFF },         /* 65504, max finite */
		{ 0x477FEFFF, 0x7BFF },
		{ 0x477FF000, 0x7C00 },         /* 65520: tie, odd -> inf */
		{ 0x47800000, 0x7C00 },         /* 65536 */
		{ 0x7F7FFFFF, 0x7C00 }, { 0xFF7FFFFF, 0xFC00 },
		{ 0x7F800000, 0x7C00 }, { 0xFF800000, 0xFC00 },
		{ 0x38800000, 0x0400 },         /* 2^-14, smallest normal */
		{ 0x38801000, 0x0400 },         /* tie in the lowest binade */
		{ 0x387FC000, 0x03FF },         /* largest subnormal */
		{ 0x387FE000, 0x0400 },         /* 1023.5*2^-24: tie -> even */
		{ 0x387FDFFF, 0x03FF }, { 0x387FE001, 0x0400 },
		{ 0x33800000, 0x0001 },         /* 2^-24, smallest subnormal */
		{ 0x33000000, 0x0000 },         /* 2^-25: tie to zero */
		{ 0x33000001, 0x0001 },
		{ 0xB3000001, 0x8001 },
		{ 0x33C00000, 0x0002 },         /* 1.5*2^-24: tie, up */
		{ 0x34200000, 0x0002 },         /* 2.5*2^-24: tie, down */
		{ 0x32FFFFFF, 0x0000 },
		{ 0x00000001, 0x0000 }, { 0x80000001, 0x8000 },
		/* NaN: sign kept, payload dropped, quiet 0x7E00. */
		{ 0x7FC00000, 0x7E00 }, { 0xFFC00000, 0xFE00 },
		{ 0x7F800001, 0x7E00 }, { 0xFF800001, 0xFE00 },
		{ 0x7FFFFFFF, 0x7E00 }, { 0xFFFFE000, 0xFE00 },
	};
	static const struct case32 from[] = {   /* f16 -> f32 bits */
		{ 0x0000, 0x00000000 }, { 0x8000, 0x80000000 },
		{ 0x0001, 0x33800000 }, { 0x8001, 0xB3800000 },
		{ 0x0002, 0x34000000 }, { 0x0003, 0x34400000 },
		{ 0x03FF, 0x387FC000 }, { 0x0200, 0x38000000 },
		{ 0x0400, 0x38800000 }, { 0x3C00, 0x3F800000 },
		{ 0x3C01, 0x3F802000 }, { 0x7BFF, 0x477FE000 },
		{ 0xFBFF, 0xC77FE000 },
		{ 0x7C00, 0x7F800000 }, { 0xFC00, 0xFF800000 },
		{ 0x7E00, 0x7FC00000 }, { 0xFE00, 0xFFC00000 },
		/* Signalling NaNs come back quiet with the payload kept. */
		{ 0x7C01, 0x7FC02000 }, { 0xFD55, 0xFFEAA000 },
		{ 0x7FFF, 0x7FFFE000 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof to / sizeof to[0]; i++) {
		uint16_t got = mk_f32_to_f16(bf(to[i].in));

		if (got != to[i].out)
			fail_msg("f16(%08x) = %04x, want %04x", to[i].in, got,
				 to[i].out);
	}
	for (size_t i = 0; i < sizeof from / sizeof from[0]; i++) {
		uint32_t got = fb(mk_f16_to_f32((uint16_t)from[i].in));

		if (got != from[i].out)
			fail_msg("f32(f16 %04x) = %08x, want %08x", from[i].in,
				 got, from[i].out);
	}
}

struct case8 {
	enum mk_dtype dt;
	uint32_t f;     /* f32 bits */
	uint8_t v;
};

static void test_f8_encode(void **state)
{
	static const struct case8 c[] = {
		/* E4M3 (fn): bias 7, max 448, no inf, NaN 0x7F/0xFF. */
		{ MK_DT_F8_E4M3, 0x00000000, 0x00 },
		{ MK_DT_F8_E4M3, 0x80000000, 0x80 },
		{ MK_DT_F8_E4M3, 0x3F800000, 0x38 },    /* 1.0 */
		{ MK_DT_F8_E4M3, 0x3F880000, 0x38 },    /* 1.0625 tie, down */
		{ MK_DT_F8_E4M3, 0x3F980000, 0x3A },    /* 1.1875 tie, up */
		{ MK_DT_F8_E4M3, 0x3F880001, 0x39 },
		{ MK_DT_F8_E4M3, 0x3F87FFFF, 0x38 },
		{ MK_DT_F8_E4M3, 0x43E00000, 0x7E },    /* 448 */
		{ MK_DT_F8_E4M3, 0xC3E00000, 0xFE },
		{ MK_DT_F8_E4M3, 0x43E80000, 0x7E },    /* 464: tie, even */
		{ MK_DT_F8_E4M3, 0x43E80001, 0x7F },    /* past it: NaN */
		{ MK_DT_F8_E4M3, 0x43EFFFFF, 0x7F },
		{ MK_DT_F8_E4M3, 0x43F00000, 0x7F },    /* 480 */
		{ MK_DT_F8_E4M3, 0xC3FA0000, 0xFF },    /* -500 */
		{ MK_DT_F8_E4M3, 0x7149F2CA, 0x7F },    /* 1e30 */
		{ MK_DT_F8_E4M3, 0x7F800000, 0x7F },    /* inf -> NaN */
		{ MK_DT_F8_E4M3, 0xFF800000, 0xFF },
		{ MK_DT_F8_E4M3, 0x7FC00000, 0x7F },
		{ MK_DT_F8_E4M3, 0xFFC00000, 0xFF },
		{ MK_DT_F8_E4M3, 0x7F800001, 0x7F },
		{ MK_DT_F8_E4M3, 0x3B000000, 0x01 },    /* 2^-9 */
		{ MK_DT_F8_E4M3, 0x3A800000, 0x00 },    /* 2^-10 tie -> 0 */
		{ MK_DT_F8_E4M3, 0x3A800001, 0x01 },
		{ MK_DT_F8_E4M3, 0xBA800000, 0x80 },    /* -> -0 */
		{ MK_DT_F8_E4M3, 0x3B400000, 0x02 },    /* 1.5*2^-9 tie, up */
		{ MK_DT_F8_E4M3, 0x3BA00000, 0x02 },    /* 2.5*2^-9 tie, down */
		{ MK_DT_F8_E4M3, 0x3C600000, 0x07 },    /* 7*2^-9 */
		{ MK_DT_F8_E4M3, 0x3C700000, 0x08 },    /* 7.5*2^-9 -> 2^-6 */
		{ MK_DT_F8_E4M3, 0x3C800000, 0x08 },    /* 2^-6 */
		{ MK_DT_F8_E4M3, 0x00000001, 0x00 },
		/* E5M2: bias 15, max 57344, inf 0x7C, NaN 0x7F. */
		{ MK_DT_F8_E5M2, 0x3F800000, 0x3C },
		{ MK_DT_F8_E5M2, 0x80000000, 0x80 },
		{ MK_DT_F8_E5M2, 0x3F900000, 0x3C },    /* 1.125 tie, down */
		{ MK_DT_F8_E5M2, 0x3FB00000, 0x3E },    /* 1.375 tie, up */
		{ MK_DT_F8_E5M2, 0x47600000, 0x7B },    /* 57344 */
		{ MK_DT_F8_E5M2, 0x476FFFFF, 0x7B },
		{ MK_DT_F8_E5M2, 0x47700000, 0x7C },    /* 61440: tie -> inf */
		{ MK_DT_F8_E5M2, 0xC7700000, 0xFC },
		{ MK_DT_F8_E5M2, 0x47800000, 0x7C },    /* 65536 */
		{ MK_DT_F8_E5M2, 0x7F800000, 0x7C },
		{ MK_DT_F8_E5M2, 0xFF800000, 0xFC },
		{ MK_DT_F8_E5M2, 0x7FC00000, 0x7F },
		{ MK_DT_F8_E5M2, 0xFFC00000, 0xFF },
		{ MK_DT_F8_E5M2, 0x7F800001, 0x7F },
		{ MK_DT_F8_E5M2, 0x37800000, 0x01 },    /* 2^-16 */
		{ MK_DT_F8_E5M2, 0x37000000, 0x00 },    /* 2^-17 tie -> 0 */
		{ MK_DT_F8_E5M2, 0xB7000000, 0x80 },
		{ MK_DT_F8_E5M2, 0x37C00000, 0x02 },    /* 1.5*2^-16 tie, up */
		{ MK_DT_F8_E5M2, 0x38700000, 0x04 },    /* 3.75*2^-16 */
		{ MK_DT_F8_E5M2, 0x38800000, 0x04 },    /* 2^-14 */
		/* E4M3FNUZ: bias 8, max 240, NaN 0x80, no -0. */
		{ MK_DT_F8_E4M3FNUZ, 0x3F800000, 0x40 },
		{ MK_DT_F8_E4M3FNUZ, 0xBF800000, 0xC0 },
		{ MK_DT_F8_E4M3FNUZ, 0x80000000, 0x00 },
		{ MK_DT_F8_E4M3FNUZ, 0x43700000, 0x7F },        /* 240 */
		{ MK_DT_F8_E4M3FNUZ, 0xC3700000, 0xFF },
		{ MK_DT_F8_E4M3FNUZ, 0x4377FFFF, 0x7F },
		{ MK_DT_F8_E4M3FNUZ, 0x43780000, 0x80 },        /* 248 */
		{ MK_DT_F8_E4M3FNUZ, 0xC3780000, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0x43800000, 0x80 },        /* 256 */
		{ MK_DT_F8_E4M3FNUZ, 0x7F800000, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0xFF800000, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0x7FC00000, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0xFFC00000, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0x3A800000, 0x01 },        /* 2^-10 */
		{ MK_DT_F8_E4M3FNUZ, 0xBA800000, 0x81 },
		{ MK_DT_F8_E4M3FNUZ, 0x3A000000, 0x00 },        /* 2^-11 tie */
		{ MK_DT_F8_E4M3FNUZ, 0xBA000000, 0x00 },        /* not 0x80 */
		{ MK_DT_F8_E4M3FNUZ, 0xBA000001, 0x81 },
		{ MK_DT_F8_E4M3FNUZ, 0x3C000000, 0x08 },        /* 2^-7 */
		{ MK_DT_F8_E4M3FNUZ, 0x3C080000, 0x08 },        /* tie, down */
		{ MK_DT_F8_E4M3FNUZ, 0x3C180000, 0x0A },        /* tie, up */
		{ MK_DT_F8_E4M3FNUZ, 0x3C780000, 0x10 },        /* -> 2^-6 */
		/* E5M2FNUZ: bias 16, max 57344, NaN 0x80, no -0. */
		{ MK_DT_F8_E5M2FNUZ, 0x3F800000, 0x40 },
		{ MK_DT_F8_E5M2FNUZ, 0xBF800000, 0xC0 },
		{ MK_DT_F8_E5M2FNUZ, 0x80000000, 0x00 },
		{ MK_DT_F8_E5M2FNUZ, 0x47600000, 0x7F },
		{ MK_DT_F8_E5M2FNUZ, 0x476FFFFF, 0x7F },
		{ MK_DT_F8_E5M2FNUZ, 0x47700000, 0x80 },        /* 61440 */
		{ MK_DT_F8_E5M2FNUZ, 0x7F800000, 0x80 },
		{ MK_DT_F8_E5M2FNUZ, 0xFFC00000, 0x80 },
		{ MK_DT_F8_E5M2FNUZ, 0x37000000, 0x01 },        /* 2^-17 */
		{ MK_DT_F8_E5M2FNUZ, 0x36800000, 0x00 },        /* 2^-18 tie */
		{ MK_DT_F8_E5M2FNUZ, 0xB6800000, 0x00 },
		{ MK_DT_F8_E5M2FNUZ, 0x38000000, 0x04 },        /* 2^-15 */
		/* E8M0: exponent only; sign ignored; c10's mantissa rounding. */
		{ MK_DT_F8_E8M0, 0x3F800000, 127 },     /* 1.0 */
		{ MK_DT_F8_E8M0, 0xBF800000, 127 },     /* -1.0 */
		{ MK_DT_F8_E8M0, 0x3FA00000, 127 },     /* 1.25 */
		{ MK_DT_F8_E8M0, 0x3FBFFFFF, 127 },
		{ MK_DT_F8_E8M0, 0x3FC00000, 128 },     /* 1.5 goes up */
		{ MK_DT_F8_E8M0, 0x3FE00000, 128 },     /* 1.75 */
		{ MK_DT_F8_E8M0, 0x40000000, 128 },     /* 2 */
		{ MK_DT_F8_E8M0, 0x40400000, 129 },     /* 3 */
		{ MK_DT_F8_E8M0, 0xC0400000, 129 },
		{ MK_DT_F8_E8M0, 0x3F400000, 127 },     /* 0.75 */
		{ MK_DT_F8_E8M0, 0x00000000, 0 },
		{ MK_DT_F8_E8M0, 0x80000000, 0 },
		{ MK_DT_F8_E8M0, 0x00000001, 0 },
		{ MK_DT_F8_E8M0, 0x003FFFFF, 0 },
		{ MK_DT_F8_E8M0, 0x00400000, 0 },       /* 2^-127 exactly */
		{ MK_DT_F8_E8M0, 0x00400001, 1 },
		{ MK_DT_F8_E8M0, 0x00600000, 1 },
		{ MK_DT_F8_E8M0, 0x00800000, 1 },       /* 2^-126 */
		{ MK_DT_F8_E8M0, 0x7F000000, 254 },     /* 2^127 */
		{ MK_DT_F8_E8M0, 0x7F3FFFFF, 254 },
		{ MK_DT_F8_E8M0, 0x7F400000, 255 },     /* 1.5*2^127: NaN */
		{ MK_DT_F8_E8M0, 0x7F7FFFFF, 255 },
		{ MK_DT_F8_E8M0, 0x7F800000, 255 },
		{ MK_DT_F8_E8M0, 0xFF800000, 255 },
		{ MK_DT_F8_E8M0, 0x7FC00000, 255 },
		{ MK_DT_F8_E8M0, 0xFF800001, 255 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		uint8_t got = mk_f32_to_f8(c[i].dt, bf(c[i].f));

		if (got != c[i].v)
			fail_msg("%s(%08x) = %02x, want %02x",
				 mk_dtype_name(c[i].dt), c[i].f, got, c[i].v);
	}
}

static void test_f8_decode(void **state)
{
	static const struct case8 c[] = {
		{ MK_DT_F8_E4M3, 0x00000000, 0x00 },
		{ MK_DT_F8_E4M3, 0x80000000, 0x80 },
		{ MK_DT_F8_E4M3, 0x3B000000, 0x01 },
		{ MK_DT_F8_E4M3, 0x3C600000, 0x07 },
		{ MK_DT_F8_E4M3, 0x3C800000, 0x08 },
		{ MK_DT_F8_E4M3, 0x3F800000, 0x38 },
		{ MK_DT_F8_E4M3, 0x43800000, 0x78 },
		{ MK_DT_F8_E4M3, 0x43E00000, 0x7E },
		{ MK_DT_F8_E4M3, 0x7FF00000, 0x7F },
		{ MK_DT_F8_E4M3, 0xFFF00000, 0xFF },
		{ MK_DT_F8_E5M2, 0x37800000, 0x01 },
		{ MK_DT_F8_E5M2, 0x38400000, 0x03 },
		{ MK_DT_F8_E5M2, 0x38800000, 0x04 },
		{ MK_DT_F8_E5M2, 0x3F800000, 0x3C },
		{ MK_DT_F8_E5M2, 0x47600000, 0x7B },
		{ MK_DT_F8_E5M2, 0x7F800000, 0x7C },
		{ MK_DT_F8_E5M2, 0xFF800000, 0xFC },
		{ MK_DT_F8_E5M2, 0x7FE00000, 0x7D },    /* quieted */
		{ MK_DT_F8_E5M2, 0x7FC00000, 0x7E },
		{ MK_DT_F8_E5M2, 0x7FE00000, 0x7F },
		{ MK_DT_F8_E5M2, 0xFFE00000, 0xFD },
		{ MK_DT_F8_E5M2, 0x80000000, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0x00000000, 0x00 },
		{ MK_DT_F8_E4M3FNUZ, 0x7F800001, 0x80 },
		{ MK_DT_F8_E4M3FNUZ, 0x3A800000, 0x01 },
		{ MK_DT_F8_E4M3FNUZ, 0xBA800000, 0x81 },
		{ MK_DT_F8_E4M3FNUZ, 0x3C000000, 0x08 },
		{ MK_DT_F8_E4M3FNUZ, 0x3F800000, 0x40 },
		{ MK_DT_F8_E4M3FNUZ, 0x43700000, 0x7F },
		{ MK_DT_F8_E4M3FNUZ, 0xC3700000, 0xFF },
		{ MK_DT_F8_E5M2FNUZ, 0x00000000, 0x00 },
		{ MK_DT_F8_E5M2FNUZ, 0x7F800001, 0x80 },
		{ MK_DT_F8_E5M2FNUZ, 0x37000000, 0x01 },
		{ MK_DT_F8_E5M2FNUZ, 0x38000000, 0x04 },
		{ MK_DT_F8_E5M2FNUZ, 0x3F800000, 0x40 },
		{ MK_DT_F8_E5M2FNUZ, 0x47600000, 0x7F },
		{ MK_DT_F8_E5M2FNUZ, 0xC7600000, 0xFF },
		{ MK_DT_F8_E8M0, 0x00400000, 0 },
		{ MK_DT_F8_E8M0, 0x00800000, 1 },
		{ MK_DT_F8_E8M0, 0x3F800000, 127 },
		{ MK_DT_F8_E8M0, 0x7F000000, 254 },
		{ MK_DT_F8_E8M0, 0x7F800001, 255 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		uint32_t got = fb(mk_f8_to_f32(c[i].dt, c[i].v));

		if (got != c[i].f)
			fail_msg("%s %02x -> %08x, want %08x",
				 mk_dtype_name(c[i].dt), c[i].v, got, c[i].f);
	}
}

/* ---- the reference: formats described by their parameters ---- */

struct fmt {
	enum mk_dtype dt;
	unsigned ebits, mbits;
	int bias;
	bool ieee_top;          /* exponent all-ones is inf/NaN (F16, BF16, E5M2) */
	bool fnuz;              /* 0x80 is the only NaN, no -0 */
	bool e4m3fn;            /* only S.1111.111 is NaN */
};

static const struct fmt fmts[] = {
	{ MK_DT_F16, 5, 10, 15, true, false, false },
	{ MK_DT_BF16, 8, 7, 127, true, false, false },
	{ MK_DT_F8_E5M2, 5, 2, 15, true, false, false },
	{ MK_DT_F8_E4M3, 4, 3, 7, false, false, true },
	{ MK_DT_F8_E4M3FNUZ, 4, 3, 8, false, true, false },
	{ MK_DT_F8_E5M2FNUZ, 5, 2, 16, false, true, false },
};

/* Value of a code by the textbook formula; NAN for NaN codes. */
static double ref_value(const struct fmt *f, uint32_t code)
{
	uint32_t top = 1u << (f->ebits + f->mbits);
	uint32_t mag = code & (top - 1);
	uint32_t e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
	double s = (code & top) ? -1 : 1;

	if (f->fnuz && code == top)
		return NAN;
	if (f->e4m3fn && mag == top - 1)
		return NAN;
	if (f->ieee_top && e == (1u << f->ebits) - 1)
		return m ? NAN : s * INFINITY;
	if (e == 0)
		return s * ldexp(m, 1 - f->bias - (int)f->mbits);
	return s * ldexp((1u << f->mbits) + m, (int)e - f->bias - (int)f->mbits);
}

static uint32_t dec_any(const struct fmt *f, uint32_t code)
{
	switch (f->dt) {
	case MK_DT_F16: return fb(mk_f16_to_f32((uint16_t)code));
	case MK_DT_BF16: return fb(mk_bf16_to_f32((uint16_t)code));
	default: return fb(mk_f8_to_f32(f->dt, (uint8_t)code));
	}
}

static uint32_t enc_any(const struct fmt *f, float x)
{
	switch (f->dt) {
	case MK_DT_F16: return mk_f32_to_f16(x);
	case MK_DT_BF16: return mk_f32_to_bf16(x);
	default: return mk_f32_to_f8(f->dt, x);
	}
}

/* Positive finite values in code order, plus one virtual entry: the next
 * step of the grid above the maximum, carrying code max+1.  Rounding to it is
 * overflow; its code's parity decides the tie at the top, which is how
 * c10 lands on inf (E5M2, F16, BF16) or NaN (E4M3, fnuz). */
struct table {
	size_t n;
	double v[65536];
	uint32_t code[65536];
};

static struct table *ref_table(const struct fmt *f)
{
	struct table *t = malloc(sizeof *t);
	uint32_t top = 1u << (f->ebits + f->mbits);

	assert_non_null(t);
	t->n = 0;
	for (uint32_t c = 0; c < top; c++) {
		double v = ref_value(f, c);

		if (isnan(v) || isinf(v))
			break;
		t->v[t->n] = v;
		t->code[t->n++] = c;
	}
	t->v[t->n] = 2 * t->v[t->n - 1] - t->v[t->n - 2];
	t->code[t->n] = t->code[t->n - 1] + 1;
	t->n++;
	return t;
}

/* Round |x| (finite, in double) to nearest, ties to even code. */
static uint32_t ref_round(const struct table *t, double x)
{
	size_t lo = 0, hi = t->n - 1;

	if (x >= t->v[hi])
		return t->code[hi];
	while (hi - lo > 1) {           /* v[lo] <= x < v[hi] */
		size_t mid = (lo + hi) / 2;

		if (t->v[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	if (x - t->v[lo] < t->v[hi] - x)
		return t->code[lo];
	if (x - t->v[lo] > t->v[hi] - x)
		return t->code[hi];
	return t->code[lo] & 1 ? t->code[hi] : t->code[lo];
}

/* What c10 produces for float x, from the rules alone. */
static uint32_t ref_encode(const struct fmt *f, const struct table *t,
			   float x)
{
	uint32_t top = 1u << (f->ebits + f->mbits);
	uint32_t sign = signbit(x) ? top : 0;
	uint32_t inf = ((1u << f->ebits) - 1) << f->mbits;
	uint32_t maxc = t->code[t->n - 1];      /* the overflow code */
	uint32_t r;

	if (isnan(x)) {
		if (f->dt == MK_DT_BF16)
			return 0x7FC0;
		if (f->dt == MK_DT_F16)
			return sign | 0x7E00;
		if (f->fnuz)
			return top;
		return sign | (top - 1);        /* E5M2 and E4M3: 0x7F */
	}
	if (isinf(x))
		r = f->ieee_top ? inf : maxc;
	else
		r = ref_round(t, fabs(x));
	if (f->fnuz && (r == 0 || r == maxc))
		return r;                       /* +0 only; NaN is unsigned */
	return sign | r;
}

static void check_encode(const struct fmt *f, const struct table *t, float x)
{
	uint32_t want = ref_encode(f, t, x), got = enc_any(f, x);

	if (got != want)
		fail_msg("%s(%08x = %a) = %x, want %x", mk_dtype_name(f->dt),
			 fb(x), (double)x, got, want);
}

static void test_all_codes(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
		const struct fmt *f = &fmts[k];
		uint32_t ncode = 2u << (f->ebits + f->mbits);

		for (uint32_t c = 0; c < ncode; c++) {
			double want = ref_value(f, c);
			uint32_t bits = dec_any(f, c);
			float x = bf(bits);
			uint32_t back = enc_any(f, x);

			if (isnan(want)) {
				assert_true(isnan(x));
			} else if (fb((float)want) != bits) {
				fail_msg("%s %x -> %08x, want %a",
					 mk_dtype_name(f->dt), c, bits, want);
			}
			/* Back to the same code, except NaNs that c10
			 * canonicalises. */
			uint32_t wantback = c;

			if (isnan(want) && f->dt == MK_DT_BF16)
				wantback = 0x7FC0;
			else if (isnan(want) && f->dt == MK_DT_F16)
				wantback = (c & 0x8000) | 0x7E00;
			else if (isnan(want) && f->dt == MK_DT_F8_E5M2)
				wantback = (c & 0x80) | 0x7F;
			if (back != wantback)
				fail_msg("%s %x -> %08x -> %x, want %x",
					 mk_dtype_name(f->dt), c, bits, back,
					 wantback);
			/* The BF16 path is a bare shift, payloads and all. */
			if (f->dt == MK_DT_BF16)
				assert_int_equal(bits, c << 16);
		}
	}
	/* E8M0: 256 codes, every one 2^(c-127) except 0 and 255. */
	for (uint32_t c = 0; c < 256; c++) {
		float x = mk_f8_to_f32(MK_DT_F8_E8M0, (uint8_t)c);

		if (c == 255)
			assert_int_equal(fb(x), 0x7F800001);
		else
			assert_true(x == (float)ldexp(1, (int)c - 127));
		assert_int_equal(mk_f32_to_f8(MK_DT_F8_E8M0, x), c);
	}
}

/* Every tie between neighbours, one float either side, and a stride
 * through every float bit pattern. */
static void test_rounding_reference(void **state)
{
	(void)state;
	for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
		const struct fmt *f = &fmts[k];
		struct table *t = ref_table(f);

		for (size_t i = 0; i + 1 < t->n; i++) {
			float mid = (float)((t->v[i] + t->v[i + 1]) / 2);

			assert_true((double)mid == (t->v[i] + t->v[i + 1]) / 2);
			for (int s = 0; s < 2; s++) {
				float m = s ? -mid : mid;

				check_encode(f, t, m);
				check_encode(f, t, nextafterf(m, INFINITY));
				check_encode(f, t, nextafterf(m, -INFINITY));
				check_encode(f, t, s ? -(float)t->v[i] :
						       (float)t->v[i]);
			}
		}
		for (uint64_t u = 0; u <= UINT32_MAX; u += 4093)
			check_encode(f, t, bf((uint32_t)u));
		check_encode(f, t, bf(0x7F7FFFFF));
		check_encode(f, t, bf(0xFF7FFFFF));
		check_encode(f, t, bf(0x7F800000));
		check_encode(f, t, bf(0xFF800000));
		free(t);
	}
}

/* ---- mk_dtype_convert ---- */

static void test_convert_invalid(void **state)
{
	unsigned char a[16] = { 0 }, b[16] = { 0 };

	(void)state;
	assert_int_equal(mk_dtype_convert(MK_DT_I32, a, MK_DT_F32, b, 1), -1);
	assert_int_equal(mk_dtype_convert(MK_DT_F32, a, MK_DT_F4, b, 1), -1);
	assert_int_equal(mk_dtype_convert(MK_DT_F32, a, MK_DT_C64, b, 1), -1);
	assert_int_equal(mk_dtype_convert(MK_DT_COUNT, a, MK_DT_F32, b, 1), -1);
	assert_int_equal(mk_dtype_convert(MK_DT_U8, a, MK_DT_U8, b, 1), -1);
	assert_int_equal(mk_dtype_convert(MK_DT_F16, a, MK_DT_F32, b, 0), 0);
	assert_int_equal(mk_dtype_convert(MK_DT_F16, NULL, MK_DT_F32, NULL, 0), 0);
}

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> 8 * i);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> 8 * i);
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << 8 * i;
	return v;
}

/* Every 16-bit pattern, to F32 and back, at odd offsets, against the
 * scalar functions (whose values the tests above pin down). */
static void test_convert_16bit_buffers(void **state)
{
	const size_t n = 65536 + 37;    /* not a multiple of any block */
	unsigned char *h = malloc(2 * n + 3), *f = malloc(4 * n + 3),
		      *h2 = malloc(2 * n + 3);

	(void)state;
	assert_true(h && f && h2);
	for (int k = 0; k < 2; k++) {
		enum mk_dtype dt = k ? MK_DT_F16 : MK_DT_BF16;

		for (size_t i = 0; i < n; i++)
			put16(h + 1 + 2 * i, (uint16_t)(i * 40503u));
		assert_int_equal(mk_dtype_convert(MK_DT_F32, f + 3, dt, h + 1, n), 0);
		for (size_t i = 0; i < n; i++) {
			uint16_t c = get16(h + 1 + 2 * i);
			float want = dt == MK_DT_F16 ? mk_f16_to_f32(c) :
						       mk_bf16_to_f32(c);

			assert_int_equal(get32(f + 3 + 4 * i), fb(want));
		}
		assert_int_equal(mk_dtype_convert(dt, h2 + 2, MK_DT_F32, f + 3, n), 0);
		for (size_t i = 0; i < n; i++) {
			float x = bf(get32(f + 3 + 4 * i));
			uint16_t want = dt == MK_DT_F16 ? mk_f32_to_f16(x) :
							  mk_f32_to_bf16(x);

			assert_int_equal(get16(h2 + 2 + 2 * i), want);
		}
	}
	/* And straight from arbitrary floats (every 65537th pattern). */
	for (size_t i = 0; i < n; i++)
		put32(f + 1 + 4 * i, (uint32_t)(i * 65537u + 12345u));
	for (int k = 0; k < 2; k++) {
		enum mk_dtype dt = k ? MK_DT_F16 : MK_DT_BF16;

		assert_int_equal(mk_dtype_convert(dt, h + 1, MK_DT_F32, f + 1, n), 0);
		for (size_t i = 0; i < n; i++) {
			float x = bf(get32(f + 1 + 4 * i));
			uint16_t want = dt == MK_DT_F16 ? mk_f32_to_f16(x) :
							  mk_f32_to_bf16(x);

			assert_int_equal(get16(h + 1 + 2 * i), want);
		}
	}
	free(h);
	free(f);
	free(h2);
}

/* Each pair of narrow types, through the scalar path's composition. */
static void test_convert_pairs(void **state)
{
	static const enum mk_dtype narrow[] = {
		MK_DT_F16, MK_DT_BF16, MK_DT_F8_E5M2, MK_DT_F8_E4M3,
		MK_DT_F8_E8M0, MK_DT_F8_E4M3FNUZ, MK_DT_F8_E5M2FNUZ,
	};
	const size_t n = 3000;          /* spans two stack blocks */
	unsigned char *src = malloc(2 * n + 1), *dst = malloc(2 * n + 2);

	(void)state;
	assert_true(src && dst);
	for (size_t a = 0; a < sizeof narrow / sizeof narrow[0]; a++)
		for (size_t b = 0; b < sizeof narrow / sizeof narrow[0]; b++) {
			enum mk_dtype s = narrow[a], d = narrow[b];
			unsigned ss = mk_dtype_bits(s) / 8, ds = mk_dtype_bits(d) / 8;

			for (size_t i = 0; i < n * ss; i++)
				src[1 + i] = (unsigned char)(i * 7919u >> 3);
			memset(dst, 0xAA, 2 * n + 2);
			assert_int_equal(mk_dtype_convert(d, dst + 1, s, src + 1, n), 0);
			for (size_t i = 0; i < n; i++) {
				const unsigned char *p = src + 1 + i * ss;
				uint32_t c = ss == 2 ? get16(p) : *p;
				float x;
				uint32_t want, got;

				if (s == d) {
					want = c;       /* byte copy */
				} else {
					x = s == MK_DT_F16 ? mk_f16_to_f32((uint16_t)c) :
					    s == MK_DT_BF16 ? mk_bf16_to_f32((uint16_t)c) :
					    mk_f8_to_f32(s, (uint8_t)c);
					want = d == MK_DT_F16 ? mk_f32_to_f16(x) :
					       d == MK_DT_BF16 ? mk_f32_to_bf16(x) :
					       mk_f32_to_f8(d, x);
				}
				got = ds == 2 ? get16(dst + 1 + i * ds) :
						dst[1 + i];
				if (got != want)
					fail_msg("%s -> %s [%zu] %x: %x, want %x",
						 mk_dtype_name(s), mk_dtype_name(d),
						 i, c, got, want);
			}
			/* Nothing written past the end. */
			if (dst[1 + n * ds] != 0xAA)
				fail_msg("%s -> %s wrote past the end",
					 mk_dtype_name(s), mk_dtype_name(d));
		}
	free(src);
	free(dst);
}

static void test_convert_specific(void **state)
{
	unsigned char b[64], o[64];

	(void)state;
	/* Same-type copies keep NaN payloads. */
	put16(b, 0xFFC1);
	assert_int_equal(mk_dtype_convert(MK_DT_BF16, o, MK_DT_BF16, b, 1), 0);
	assert_int_equal(get16(o), 0xFFC1);
	/* BF16 -> F16 through float: exact, overflow, NaN sign. */
	put16(b, 0x3F81);               /* 1 + 2^-7 */
	put16(b + 2, 0x4780);           /* 65536 */
	put16(b + 4, 0xFFC0);
	put16(b + 6, 0x0001);           /* 2^-133: underflows */
	assert_int_equal(mk_dtype_convert(MK_DT_F16, o + 1, MK_DT_BF16, b, 4), 0);
	assert_int_equal(get16(o + 1), 0x3C08);
	assert_int_equal(get16(o + 3), 0x7C00);
	assert_int_equal(get16(o + 5), 0xFE00);
	assert_int_equal(get16(o + 7), 0x0000);
	/* F16 -> BF16: 65504 = 1.9990234375 * 2^15 rounds up to 2^16. */
	put16(b, 0x7BFF);
	put16(b + 2, 0xFC00);
	put16(b + 4, 0x7E00);
	assert_int_equal(mk_dtype_convert(MK_DT_BF16, o, MK_DT_F16, b, 3), 0);
	assert_int_equal(get16(o), 0x4780);
	assert_int_equal(get16(o + 2), 0xFF80);
	assert_int_equal(get16(o + 4), 0x7FC0);
	/* F16 -> E4M3: 0x5FF0 = 508 is NaN territory, 0x5F00 = 448. */
	put16(b, 0x5FF0);
	put16(b + 2, 0x5F00);
	put16(b + 4, 0x7C00);
	assert_int_equal(mk_dtype_convert(MK_DT_F8_E4M3, o, MK_DT_F16, b, 3), 0);
	assert_int_equal(o[0], 0x7F);
	assert_int_equal(o[1], 0x7E);
	assert_int_equal(o[2], 0x7F);
}

static void test_convert_f64(void **state)
{
	unsigned char b[8 * 8 + 1], o[8 * 8 + 1];
	const double one_tie_f16 = 1 + 0x1p-11 + 0x1p-40;
	const double one_tie_bf16 = 1 + 0x1p-8 + 0x1p-40;
	const double one_tie_e4m3 = 1 + 0x1p-4 + 0x1p-40;

	(void)state;
	/* F64 -> F32: the C cast (RNE, overflow to inf, NaN kept). */
	put64(b + 1, db(1 + 0x1p-24));          /* tie: to 1.0 */
	put64(b + 9, db(1 + 0x1p-24 + 0x1p-50));
	put64(b + 17, db(1e300));
	put64(b + 25, db(-1e300));
	put64(b + 33, db(1e-300));
	put64(b + 41, UINT64_C(0x7FF8000000000000));
	put64(b + 49, UINT64_C(0xFFF8000000000000));
	assert_int_equal(mk_dtype_convert(MK_DT_F32, o + 3, MK_DT_F64, b + 1, 7), 0);
	assert_int_equal(get32(o + 3), 0x3F800000);
	assert_int_equal(get32(o + 7), 0x3F800001);
	assert_int_equal(get32(o + 11), 0x7F800000);
	assert_int_equal(get32(o + 15), 0xFF800000);
	assert_int_equal(get32(o + 19), 0x00000000);
	assert_int_equal(get32(o + 23), 0x7FC00000);
	assert_int_equal(get32(o + 27), 0xFFC00000);

	/* F64 -> narrow rounds to float first, so a double just above a tie
	 * lands on the tie and goes to even (c10's double rounding). */
	put64(b + 1, db(one_tie_f16));
	put64(b + 9, db(1e300));
	put64(b + 17, db(-0.0));
	put64(b + 25, UINT64_C(0xFFF8000000000000));
	assert_int_equal(mk_dtype_convert(MK_DT_F16, o + 1, MK_DT_F64, b + 1, 4), 0);
	assert_int_equal(get16(o + 1), 0x3C00);
	assert_int_equal(get16(o + 3), 0x7C00);
	assert_int_equal(get16(o + 5), 0x8000);
	assert_int_equal(get16(o + 7), 0xFE00);
	put64(b + 1, db(one_tie_bf16));
	assert_int_equal(mk_dtype_convert(MK_DT_BF16, o + 1, MK_DT_F64, b + 1, 4), 0);
	assert_int_equal(get16(o + 1), 0x3F80);
	assert_int_equal(get16(o + 3), 0x7F80);
	assert_int_equal(get16(o + 5), 0x8000);
	assert_int_equal(get16(o + 7), 0x7FC0);
	put64(b + 1, db(one_tie_e4m3));
	assert_int_equal(mk_dtype_convert(MK_DT_F8_E4M3, o + 1, MK_DT_F64, b + 1, 4), 0);
	assert_int_equal(o[1], 0x38);
	assert_int_equal(o[2], 0x7F);
	assert_int_equal(o[3], 0x80);
	assert_int_equal(o[4], 0xFF);

	/* Widening to F64 is exact. */
	put16(b + 1, 0x3C01);
	put16(b + 3, 0x0001);
	put16(b + 5, 0xFC00);
	put16(b + 7, 0x7E00);
	assert_int_equal(mk_dtype_convert(MK_DT_F64, o + 1, MK_DT_F16, b + 1, 4), 0);
	assert_true(bd(get64(o + 1)) == 1 + 0x1p-10);
	assert_true(bd(get64(o + 9)) == 0x1p-24);
	assert_int_equal(get64(o + 17), UINT64_C(0xFFF0000000000000));
	assert_int_equal(get64(o + 25), UINT64_C(0x7FF8000000000000));
	put32(b + 1, 0x00000001);
	put32(b + 5, 0x7F7FFFFF);
	put32(b + 9, 0x80000000);
	assert_int_equal(mk_dtype_convert(MK_DT_F64, o + 1, MK_DT_F32, b + 1, 3), 0);
	assert_true(bd(get64(o + 1)) == 0x1p-149);
	assert_true(bd(get64(o + 9)) == 0x1.fffffep127);
	assert_int_equal(get64(o + 17), UINT64_C(0x8000000000000000));
	b[1] = 0x81;
	b[2] = 0xFF;
	assert_int_equal(mk_dtype_convert(MK_DT_F64, o + 1, MK_DT_F8_E4M3FNUZ, b + 1, 2), 0);
	assert_true(bd(get64(o + 1)) == -0x1p-10);
	assert_true(bd(get64(o + 9)) == -240.0);
	/* F64 -> F64 is a byte copy. */
	put64(b + 1, UINT64_C(0x7FF0000000000001));
	assert_int_equal(mk_dtype_convert(MK_DT_F64, o + 1, MK_DT_F64, b + 1, 1), 0);
	assert_int_equal(get64(o + 1), UINT64_C(0x7FF0000000000001));
}

/* ---- the vectorised 16-bit kernels ----
 * mk_dtype_convert's F32 <-> BF16/F16 loops have their own (vector-shaped)
 * per-element code and, on x86-64, one build per instruction set; every
 * build the CPU can run must give the scalar functions' bits on every
 * input.  A third opinion comes from a transcription of c10's own
 * routines (c10/util/BFloat16.h round_to_nearest_even, c10/util/Half.h
 * fp16_ieee_{to,from}_fp32_value). */

/* Exported by convert.c for this test; not in dtype.h.  mk_dtype_convert
 * with the kernels of one instruction set: 0 baseline, 1 AVX2, 2 AVX-512;
 * -1 when the build or the CPU lacks it. */
int mk_dtype_convert_isa(int isa, enum mk_dtype dst_dt, void *dst,
			 enum mk_dtype src_dt, const void *src, size_t n);

#define NISA 3

static bool isa_runs(int isa)
{
	uint16_t h = 0x3F80;
	float f;

	return mk_dtype_convert_isa(isa, MK_DT_F32, &f, MK_DT_BF16, &h, 1) == 0;
}

static const char *isa_name(int isa)
{
	return isa == 2 ? "avx512" : isa == 1 ? "avx2" : isa == 0 ? "baseline" :
	       "picked";
}

/* The baseline build is always there; which others run depends on the
 * CPU (and on x86-64).  Invalid types still fail. */
static void test_convert_isa_builds(void **state)
{
	unsigned char a[16] = { 0 }, b[16] = { 0 };

	(void)state;
	assert_true(isa_runs(0));
	assert_false(isa_runs(NISA));
	assert_false(isa_runs(-1));
	for (int isa = 0; isa < NISA; isa++)
		print_message("16-bit kernels: %s %s\n", isa_name(isa),
			      isa_runs(isa) ? "runs here" : "not on this CPU or build");
	assert_int_equal(mk_dtype_convert_isa(0, MK_DT_I32, a, MK_DT_F32, b, 1), -1);
}

static uint32_t c10_f16_to_f32_bits(uint16_t h)
{
	const uint32_t w = (uint32_t)h << 16;
	const uint32_t sign = w & 0x80000000u;
	const uint32_t two_w = w + w;
	const float normalized = bf((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
	const float denormalized = bf((two_w >> 17) | (126u << 23)) - 0.5f;

	return sign | (two_w < (1u << 27) ? fb(denormalized) : fb(normalized));
}

static uint16_t c10_f32_to_f16(uint32_t w)
{
	float base = (fabsf(bf(w)) * 0x1.0p+112f) * 0x1.0p-110f;
	const uint32_t shl1_w = w + w;
	const uint32_t sign = w & 0x80000000u;
	uint32_t bias = shl1_w & 0xFF000000u;

	if (bias < 0x71000000u)
		bias = 0x71000000u;
	base = bf((bias >> 1) + 0x07800000u) + base;
	const uint32_t bits = fb(base);
	const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
	const uint32_t mantissa_bits = bits & 0x00000FFFu;
	const uint32_t nonsign = exp_bits + mantissa_bits;

	return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static uint16_t c10_f32_to_bf16(uint32_t u)
{
	if (isnan(bf(u)))
		return 0x7FC0;
	return (uint16_t)((u + ((u >> 16) & 1) + 0x7FFFu) >> 16);
}

static uint64_t rng_state = 88172645463325252u;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Every BF16 and F16 code through the buffer path at every alignment of
 * source and destination, against the scalar functions and c10. */
static void test_convert_widen_all_codes(void **state)
{
	const size_t n = 65536;
	unsigned char *h = malloc(2 * n + 8), *f = malloc(4 * n + 8);

	(void)state;
	assert_true(h && f);
	/* isa -1 is mk_dtype_convert's own pick */
	for (int ik = 0; ik < (NISA + 1) * 2; ik++) {
		int isa = ik / 2 - 1, k = ik % 2;
		enum mk_dtype dt = k ? MK_DT_F16 : MK_DT_BF16;

		if (isa >= 0 && !isa_runs(isa))
			continue;
		for (size_t so = 0; so < 2; so++)
			for (size_t dof = 0; dof < 4; dof++) {
				for (size_t c = 0; c < n; c++)
					put16(h + so + 2 * c, (uint16_t)c);
				memset(f, 0xA5, 4 * n + 8);
				assert_int_equal(isa < 0 ?
						 mk_dtype_convert(MK_DT_F32, f + dof, dt, h + so, n) :
						 mk_dtype_convert_isa(isa, MK_DT_F32, f + dof, dt,
								      h + so, n), 0);
				for (size_t c = 0; c < n; c++) {
					uint32_t got = get32(f + dof + 4 * c);
					uint32_t want = k ? fb(mk_f16_to_f32((uint16_t)c)) :
							    fb(mk_bf16_to_f32((uint16_t)c));
					uint32_t c10 = k ? c10_f16_to_f32_bits((uint16_t)c) :
							   (uint32_t)c << 16;

					if (got != want || want != c10)
						fail_msg("%s %04zx (%s): buffer %08x, scalar %08x, c10 %08x",
							 mk_dtype_name(dt), c, isa_name(isa),
							 got, want, c10);
				}
				assert_int_equal(f[dof + 4 * n], 0xA5);
			}
	}
	free(h);
	free(f);
}

/* Float bit patterns that matter to the narrowing kernels: fixed special
 * values, every BF16 rounding boundary, every F16 one in the normal range,
 * ties in the F16 subnormal range, and random floats of several kinds. */
static const uint32_t narrow_specials[] = {
	0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
	0x7F800001, 0xFF800001, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00001,
	0x00000001, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
	0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FC000, 0x7F7EFFFF,
	0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000, 0xC77FF000,
	0x38800000, 0x387FFFFF, 0x387FF000, 0x387FE000, 0x387FDFFF,
	0x33800000, 0x33000000, 0x33000001, 0x32FFFFFF, 0x33C00000, 0x33BFFFFF,
	0x3F800000, 0xBF800000, 0x3F808000, 0x3F818000, 0x3F801000, 0x3F803000,
};

static uint32_t narrow_case(uint64_t i)
{
	static const uint32_t low16[] = { 0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF };
	static const uint32_t low13[] = { 0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF };
	const uint64_t n_spec = sizeof narrow_specials / sizeof narrow_specials[0];
	const uint64_t n_bf = 65536 * 6, n_f16 = (1u << 19) * 6;
	uint64_t r;
	uint32_t e, m, d;

	if (i < n_spec)
		return narrow_specials[i];
	i -= n_spec;
	if (i < n_bf)                   /* around every BF16 rounding step */
		return (uint32_t)(i / 6) << 16 | low16[i % 6];
	i -= n_bf;
	if (i < n_f16)                  /* around every F16 normal one */
		return (uint32_t)(i / 6) << 13 | low13[i % 6];
	r = rng();
	switch (r & 7) {
	case 0:                         /* F16 subnormal range: ties */
		e = 0x65 + (uint32_t)(r >> 3) % 13;     /* 2^-26 .. 2^-14 */
		d = 126 - e < 23 ? 126 - e : 23;        /* bits below the step */
		m = (uint32_t)(r >> 8) & 0x7FFFFF & ~((1u << d) - 1);
		m |= (1u << (d - 1)) + (uint32_t)((r >> 40) % 3) - 1;
		if (126 - e >= 23)
			m = (uint32_t)(r >> 40) % 3 == 0 ? 0 :
			    (uint32_t)(r >> 40) % 3 == 1 ? 1 : 0x7FFFFF;
		return (uint32_t)(r >> 63) << 31 | e << 23 | (m & 0x7FFFFF);
	case 1:                         /* near the F16 and BF16 edges */
		e = (uint32_t[]){ 0x70, 0x71, 0x8E, 0x8F, 0xFE, 0x00, 0x01, 0xFF }
			[(r >> 3) & 7];
		return (uint32_t)(r >> 63) << 31 | e << 23 | ((uint32_t)(r >> 11) & 0x7FFFFF);
	case 2:                         /* BF16 and F16 ties, random values */
		return ((uint32_t)(r >> 16) & ~0xFFFFu) | 0x8000u;
	case 3:
		return ((uint32_t)(r >> 16) & ~0x1FFFu) | 0x1000u;
	case 4: case 5:                 /* weight-like magnitudes */
		e = 0x60 + (uint32_t)(r >> 3) % 48;
		return (uint32_t)(r >> 63) << 31 | e << 23 | ((uint32_t)(r >> 11) & 0x7FFFFF);
	default:                        /* anything */
		return (uint32_t)(r >> 16);
	}
}

static void check_narrow(int isa, const unsigned char *f,
			 const unsigned char *hb, const unsigned char *hf, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t u = get32(f + 4 * i);
		uint16_t b = get16(hb + 2 * i), h = get16(hf + 2 * i);
		uint16_t wb = mk_f32_to_bf16(bf(u)), wh = mk_f32_to_f16(bf(u));

		if (b != wb || wb != c10_f32_to_bf16(u))
			fail_msg("BF16 <- %08x (%s): buffer %04x, scalar %04x, c10 %04x",
				 u, isa_name(isa), b, wb, c10_f32_to_bf16(u));
		if (h != wh || wh != c10_f32_to_f16(u))
			fail_msg("F16 <- %08x (%s): buffer %04x, scalar %04x, c10 %04x",
				 u, isa_name(isa), h, wh, c10_f32_to_f16(u));
	}
}

static void test_convert_narrow_cases(void **state)
{
	const size_t chunk = 1u << 20;
	/* the structured cases, then 11 Mi random ones */
	const uint64_t total = sizeof narrow_specials / sizeof narrow_specials[0] +
			       65536 * 6 + (1u << 19) * 6 + 11 * (uint64_t)chunk;
	unsigned char *f = malloc(4 * chunk + 4), *hb = malloc(2 * chunk + 4),
		      *hf = malloc(2 * chunk + 4);

	(void)state;
	assert_true(f && hb && hf);
	rng_state = 88172645463325252u;
	for (uint64_t at = 0, round = 0; at < total; round++) {
		size_t k = total - at < chunk ? (size_t)(total - at) : chunk;
		size_t fo = round & 3, bo = (round >> 2) & 1;

		for (size_t i = 0; i < k; i++)
			put32(f + fo + 4 * i, narrow_case(at + i));
		assert_int_equal(mk_dtype_convert(MK_DT_BF16, hb + bo, MK_DT_F32,
						  f + fo, k), 0);
		assert_int_equal(mk_dtype_convert(MK_DT_F16, hf + 1 - bo, MK_DT_F32,
						  f + fo, k), 0);
		check_narrow(-1, f + fo, hb + bo, hf + 1 - bo, k);
		for (int isa = 0; isa < NISA; isa++) {
			if (!isa_runs(isa))
				continue;
			assert_int_equal(mk_dtype_convert_isa(isa, MK_DT_BF16, hb + bo,
							      MK_DT_F32, f + fo, k), 0);
			assert_int_equal(mk_dtype_convert_isa(isa, MK_DT_F16, hf + 1 - bo,
							      MK_DT_F32, f + fo, k), 0);
			check_narrow(isa, f + fo, hb + bo, hf + 1 - bo, k);
		}
		at += k;
	}
	free(f);
	free(hb);
	free(hf);
}

/* Every length up to 300 at every alignment: the vector loops' heads and
 * tails, and nothing written outside the destination. */
static void test_convert_16bit_lengths(void **state)
{
	const size_t nmax = 300;
	unsigned char *f = malloc(4 * nmax + 8), *h = malloc(2 * nmax + 8),
		      *o = malloc(4 * nmax + 16);

	(void)state;
	assert_true(f && h && o);
	for (size_t i = 0; i < 4 * nmax + 8; i++)
		f[i] = (unsigned char)(rng() >> 33);
	for (size_t i = 0; i < 2 * nmax + 8; i++)
		h[i] = (unsigned char)(rng() >> 33);
	for (int ik = 0; ik < (NISA + 1) * 4; ik++) {
		int isa = ik / 4 - 1, k = ik % 4;
		enum mk_dtype dt = k & 1 ? MK_DT_F16 : MK_DT_BF16;
		bool widen = k >= 2;

		if (isa >= 0 && !isa_runs(isa))
			continue;
		for (size_t n = 0; n <= nmax; n++)
			for (size_t so = 0; so < 4; so++)
				for (size_t dof = 0; dof < 4; dof++) {
					size_t osz = widen ? 4 : 2;

					memset(o, 0x5A, 4 * nmax + 16);
					if (widen)
						assert_int_equal(isa < 0 ?
								 mk_dtype_convert(MK_DT_F32, o + 4 + dof, dt, h + so, n) :
								 mk_dtype_convert_isa(isa, MK_DT_F32, o + 4 + dof, dt,
										      h + so, n), 0);
					else
						assert_int_equal(isa < 0 ?
								 mk_dtype_convert(dt, o + 4 + dof, MK_DT_F32, f + so, n) :
								 mk_dtype_convert_isa(isa, dt, o + 4 + dof, MK_DT_F32,
										      f + so, n), 0);
					for (size_t i = 0; i < n; i++) {
						uint32_t got, want;

						if (widen) {
							uint16_t c = get16(h + so + 2 * i);

							got = get32(o + 4 + dof + 4 * i);
							want = fb(dt == MK_DT_F16 ? mk_f16_to_f32(c) :
										    mk_bf16_to_f32(c));
						} else {
							float x = bf(get32(f + so + 4 * i));

							got = get16(o + 4 + dof + 2 * i);
							want = dt == MK_DT_F16 ? mk_f32_to_f16(x) :
										 mk_f32_to_bf16(x);
						}
						if (got != want)
							fail_msg("%s %s (%s) n=%zu [%zu]: %x, want %x",
								 widen ? "to F32 from" : "from F32 to",
								 mk_dtype_name(dt), isa_name(isa),
								 n, i, got, want);
					}
					for (size_t i = 0; i < 4 + dof; i++)
						assert_int_equal(o[i], 0x5A);
					for (size_t i = 4 + dof + n * osz; i < 4 * nmax + 16; i++)
						assert_int_equal(o[i], 0x5A);
				}
	}
	free(f);
	free(h);
	free(o);
}

/* All 2^32 floats to BF16 and F16, every kernel build against scalar
 * against c10: minutes, so only when MK_TEST_EXHAUSTIVE is set. */
static void test_convert_narrow_exhaustive(void **state)
{
	const size_t chunk = 1u << 22;
	unsigned char *f, *hb, *hf;
	const char *env = getenv("MK_TEST_EXHAUSTIVE");

	(void)state;
	if (!env || !*env || !strcmp(env, "0"))
		skip();
	f = malloc(4 * chunk);
	hb = malloc(2 * chunk);
	hf = malloc(2 * chunk);
	assert_true(f && hb && hf);
	for (uint64_t base = 0; base <= UINT32_MAX; base += chunk) {
		for (size_t i = 0; i < chunk; i++)
			put32(f + 4 * i, (uint32_t)(base + i));
		for (int isa = 0; isa < NISA; isa++) {
			if (!isa_runs(isa))
				continue;
			assert_int_equal(mk_dtype_convert_isa(isa, MK_DT_BF16, hb,
							      MK_DT_F32, f, chunk), 0);
			assert_int_equal(mk_dtype_convert_isa(isa, MK_DT_F16, hf,
							      MK_DT_F32, f, chunk), 0);
			check_narrow(isa, f, hb, hf, chunk);
		}
	}
	free(f);
	free(hb);
	free(hf);
}

/* Long F8 runs take the table path; it must agree with the scalar one. */
static void test_convert_f8_long(void **state)
{
	const size_t n = 5000;
	unsigned char *s = malloc(n + 1), *d = malloc(4 * n + 1),
		      *back = malloc(n + 1);

	(void)state;
	assert_true(s && d && back);
	for (size_t i = 0; i < n; i++)
		s[1 + i] = (unsigned char)(i * 151u);
	for (size_t k = 0; k < sizeof f8s / sizeof f8s[0]; k++) {
		assert_int_equal(mk_dtype_convert(MK_DT_F32, d + 1, f8s[k], s + 1, n), 0);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(get32(d + 1 + 4 * i),
					 fb(mk_f8_to_f32(f8s[k], s[1 + i])));
		assert_int_equal(mk_dtype_convert(f8s[k], back + 1, MK_DT_F32, d + 1, n), 0);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(back[1 + i],
					 mk_f32_to_f8(f8s[k], bf(get32(d + 1 + 4 * i))));
	}
	free(s);
	free(d);
	free(back);
}

/* mk_dtype_count_nonfinite: NaN and infinity of each width counted, finite
 * extremes not, across the 65535-element blocks the 16-bit count sums over
 * (placed at a block's first, last and the next block's first element) */
static void test_count_nonfinite(void **state)
{
	const uint64_t n = 3 * 65535 + 7, at[] = { 0, 65534, 65535, 131069, 131070, 3 * 65535 + 6 };
	uint16_t *h = calloc(n, 2), *f16 = calloc(n, 2);
	uint32_t *f = calloc(n, 4);
	uint64_t *d = calloc(n, 8);

	(void)state;
	assert_non_null(h);
	assert_non_null(f16);
	assert_non_null(f);
	assert_non_null(d);
	for (uint64_t i = 0; i < n; i++) {  /* finite, the largest among them */
		h[i] = i & 1 ? 0x7f7f : 0xff7f;
		f16[i] = i & 1 ? 0x7bff : 0x8001;
		f[i] = i & 1 ? 0x7f7fffffu : 0x80800000u;
		d[i] = i & 1 ? 0x7fefffffffffffffull : 1;
	}
	for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
		uint64_t i = at[k];
		h[i] = k & 1 ? 0x7fc1 : 0xff80;        /* NaN, -inf */
		f16[i] = k & 1 ? 0x7c00 : 0xfe01;
		f[i] = k & 1 ? 0x7f800000u : 0xffc00001u;
		d[i] = k & 1 ? 0xfff0000000000000ull : 0x7ff8000000000000ull;
	}
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_BF16, h, n), 6);
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_F16, f16, n), 6);
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_F32, f, n), 6);
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_F64, d, n), 6);
	/* a prefix ending just before the third block's nonfinite element */
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_BF16, h, 131070), 4);
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_F32, f, 131070), 4);
	assert_int_equal(mk_dtype_count_nonfinite(MK_DT_BF16, h, 0), 0);
	free(h);
	free(f16);
	free(f);
	free(d);
}

/* mk_dtype_convert_count: mk_dtype_convert's bytes and
 * mk_dtype_count_nonfinite's count, added: every bf16 code (the fused
 * kernel), across its 65536-element blocks, and the other dtypes (convert
 * then count). */
static void test_convert_count(void **state)
{
	const size_t n = 3 * 65536 + 11;
	uint16_t *h = malloc(n * 2);
	float *got = malloc(n * 4), *want = malloc(n * 4);
	double *d = malloc(n * 8);
	uint64_t c = 5;

	(void)state;
	assert_non_null(h);
	assert_non_null(got);
	assert_non_null(want);
	assert_non_null(d);
	for (size_t i = 0; i < n; i++)
		h[i] = (uint16_t)(i * 40503u);   /* every code, in a scrambled order */
	assert_int_equal(mk_dtype_convert(MK_DT_F32, want, MK_DT_BF16, h, n), 0);
	assert_int_equal(mk_dtype_convert_count(MK_DT_F32, got, MK_DT_BF16, h, n, &c), 0);
	assert_memory_equal(got, want, n * 4);
	assert_int_equal(c, 5 + mk_dtype_count_nonfinite(MK_DT_BF16, h, n));
	assert_true(c >= 5 + 3 * 2 * 128);   /* the 2 x 128 codes with exponent 0xff, thrice */
	for (size_t len = 0; len < 40; len++) {
		c = 0;
		assert_int_equal(mk_dtype_convert_count(MK_DT_F32, got, MK_DT_BF16, h + 0x7f70, len, &c), 0);
		assert_int_equal(c, mk_dtype_count_nonfinite(MK_DT_BF16, h + 0x7f70, len));
	}
	/* the other way, and other dtypes: converted, then counted */
	c = 0;
	assert_int_equal(mk_dtype_convert_count(MK_DT_F64, d, MK_DT_BF16, h, n, &c), 0);
	assert_int_equal(c, mk_dtype_count_nonfinite(MK_DT_BF16, h, n));
	c = 0;
	assert_int_equal(mk_dtype_convert_count(MK_DT_F32, got, MK_DT_F16, h, n, &c), 0);
	assert_int_equal(c, mk_dtype_count_nonfinite(MK_DT_F16, h, n));
	assert_int_equal(mk_dtype_convert(MK_DT_F32, want, MK_DT_F16, h, n), 0);
	assert_memory_equal(got, want, n * 4);
	c = 0;
	assert_int_equal(mk_dtype_convert_count(MK_DT_F32, want, MK_DT_F64, d, n, &c), 0);
	assert_int_equal(c, mk_dtype_count_nonfinite(MK_DT_F64, d, n));
	c = 7;
	assert_int_equal(mk_dtype_convert_count(MK_DT_I32, got, MK_DT_BF16, h, 4, &c), -1);
	assert_int_equal(c, 7);
	free(h);
	free(got);
	free(want);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_bits_float),
		cmocka_unit_test(test_nbytes_granule),
		cmocka_unit_test(test_bf16_scalar),
		cmocka_unit_test(test_f16_scalar),
		cmocka_unit_test(test_f8_encode),
		cmocka_unit_test(test_f8_decode),
		cmocka_unit_test(test_all_codes),
		cmocka_unit_test(test_rounding_reference),
		cmocka_unit_test(test_convert_invalid),
		cmocka_unit_test(test_convert_16bit_buffers),
		cmocka_unit_test(test_convert_pairs),
		cmocka_unit_test(test_convert_specific),
		cmocka_unit_test(test_convert_f64),
		cmocka_unit_test(test_convert_f8_long),
		cmocka_unit_test(test_convert_isa_builds),
		cmocka_unit_test(test_convert_widen_all_codes),
		cmocka_unit_test(test_convert_narrow_cases),
		cmocka_unit_test(test_convert_16bit_lengths),
		cmocka_unit_test(test_convert_count),
		cmocka_unit_test(test_convert_narrow_exhaustive),
		cmocka_unit_test(test_count_nonfinite),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
