/* test_requant_head.c - what --quantize rests on: the HEAD's "requant"
 * marks and quantization_config encoded, decoded and refused, and the
 * block-FP8 rule of core/fp8block.h and the MXFP4 rule of core/mxfp4.h
 * on values whose result is known. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/fp8block.h"
#include "core/mxfp4.h"
#include "stream/manifest.h"

#define QC "{\"activation_scheme\":\"dynamic\",\"quant_method\":\"fp8\",\"weight_block_size\":[128,64]}"

static void assert_msg(const struct mk_err *err, const char *sub)
{
	if (!strstr(err->msg, sub))
		fail_msg("message '%s' lacks '%s'", err->msg, sub);
}

static void test_head_roundtrip(void **state)
{
	struct mk_manifest *m = mk_manifest_new("tensors", "mk-test"), *d;
	struct mk_err err;
	char *s, *s2;
	size_t len, len2;

	(void)state;
	assert_int_equal(mk_manifest_add_tensor(m, "w", MK_DT_BF16, 2, (uint64_t[]){ 300, 70 }, &err), 0);
	assert_int_equal(mk_manifest_add_tensor(m, "n", MK_DT_BF16, 1, (uint64_t[]){ 70 }, &err), 0);
	m->tensors[0].requant = MK_REQUANT_FP8;
	assert_int_equal(mk_manifest_set_quant(m, QC, strlen(QC), &err), 0);
	assert_int_equal(m->quant_kind, MK_REQUANT_FP8);
	assert_int_equal(m->quant_block[0], 128);
	assert_int_equal(m->quant_block[1], 64);
	assert_int_equal(mk_manifest_encode(m, &s, &len, &err), 0);
	assert_non_null(strstr(s, "\"quantization_config\":" QC));
	assert_non_null(strstr(s, "\"shape\":[300,70],\"requant\":\"fp8\"}"));
	assert_int_equal(mk_manifest_decode(s, len, &d, &err), 0);
	assert_int_equal(d->tensors[0].requant, MK_REQUANT_FP8);
	assert_int_equal(d->tensors[1].requant, MK_REQUANT_NONE);
	assert_string_equal(d->quant_config, QC);
	assert_int_equal(d->quant_block[0], 128);
	assert_int_equal(d->quant_block[1], 64);
	assert_int_equal(mk_manifest_encode(d, &s2, &len2, &err), 0);
	assert_int_equal(len, len2);
	assert_memory_equal(s, s2, len);
	free(s);
	free(s2);
	mk_manifest_free(d);
	mk_manifest_free(m);
}

static void refused(const char *head, const char *msg)
{
	struct mk_manifest *d = NULL;
	struct mk_err err;

	assert_int_equal(mk_manifest_decode(head, strlen(head), &d, &err), -MK_EFORMAT);
	assert_null(d);
	assert_msg(&err, msg);
}

static void test_head_errors(void **state)
{
	(void)state;
	/* a mark without the config */
	refused("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[4,4],\"requant\":\"fp8\"}],"
		"\"files\":[]}", "without a \"quantization_config\"");
	/* on a tensor that cannot be one: integers, one axis; another format */
	refused("{\"kind\":\"tensors\",\"quantization_config\":" QC ",\"tensors\":[{\"name\":\"w\",\"dtype\":\"I32\","
		"\"shape\":[4,4],\"requant\":\"fp8\"}],\"files\":[]}", "of a float tensor of 2 or more axes");
	refused("{\"kind\":\"tensors\",\"quantization_config\":" QC ",\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\","
		"\"shape\":[16],\"requant\":\"fp8\"}],\"files\":[]}", "of a float tensor of 2 or more axes");
	refused("{\"kind\":\"tensors\",\"quantization_config\":" QC ",\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\","
		"\"shape\":[4,4],\"requant\":\"mxfp4\"}],\"files\":[]}", "\"mxfp4\", of a float tensor [E, C, R]");
	refused("{\"kind\":\"tensors\",\"quantization_config\":" QC ",\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\","
		"\"shape\":[2,48,4],\"requant\":\"mxfp4\"}],\"files\":[]}", "with C a multiple of 32");
	refused("{\"kind\":\"tensors\",\"quantization_config\":" QC ",\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\","
		"\"shape\":[4,4],\"requant\":\"int4\"}],\"files\":[]}", "\"requant\" is \"fp8\"");
	/* a mark of the other format than the config's */
	refused("{\"kind\":\"tensors\",\"quantization_config\":" QC ",\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\","
		"\"shape\":[2,64,4],\"requant\":\"mxfp4\"}],\"files\":[]}", "in another format than");
	/* configs mk-pack cannot follow */
	refused("{\"kind\":\"tensors\",\"quantization_config\":{\"quant_method\":\"awq\"},\"tensors\":[],\"files\":[]}",
		"quant_method \"fp8\"");
	refused("{\"kind\":\"tensors\",\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[0,128]},"
		"\"tensors\":[],\"files\":[]}", "weight_block_size");
	refused("{\"kind\":\"tensors\",\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128]},"
		"\"tensors\":[],\"files\":[]}", "weight_block_size");
	refused("{\"kind\":\"tensors\",\"quantization_config\":[1],\"tensors\":[],\"files\":[]}", "is an object");
}

/* E4M3 codes: 0x7e = 448, 0x38 = 1.0, 0x30 = 0.5, 0x01 = 2^-9 */
static void test_fp8_rule(void **state)
{
	/* a 2 x 3 block-row in blocks of 2 columns: [a b | c] */
	float v[6] = { 1.0f, -2.0f, 0.0f, 0.5f, 0.25f, 0.0f }, inv[2];
	uint8_t q[6];

	(void)state;
	mk_fp8_block_row(v, 2, 3, 2, q, inv);
	/* block 0: amax 2, k = (1/2) * 448 = 224: 1 -> 224, -2 -> -448, 0.5 -> 112, 0.25 -> 56 */
	assert_true(inv[0] == 1.0f / 224.0f);
	assert_int_equal(q[0], 0x76);   /* 224 = 1.75 * 2^7: e 14, m 6 */
	assert_int_equal(q[1], 0xfe);   /* -448 */
	assert_int_equal(q[3], 0x6e);   /* 112 = 1.75 * 2^6 */
	assert_int_equal(q[4], 0x66);   /* 56 = 1.75 * 2^5 */
	/* block 1: all zeros: scale 1, zeros */
	assert_true(inv[1] == 1.0f);
	assert_int_equal(q[2], 0);
	assert_int_equal(q[5], 0);

	/* rounding to the nearest, and the reciprocal rounded before the
	 * product: amax 3 gives k = f32(1/3) * 448, not 448 / 3 */
	float w[4] = { 3.0f, 1.0f, 1.0f + 1.0f / 1024, -0.001f }, winv[1];
	uint8_t wq[4];
	volatile float third = 1.0f / 3.0f;
	float k = third * 448.0f;
	mk_fp8_block_row(w, 1, 4, 4, wq, winv);
	assert_true(winv[0] == 1.0f / k);
	assert_int_equal(wq[0], 0x7e);  /* 3 * k rounds to 448 (clamped) */
	/* 1 * k = 149.33: E4M3 neighbours 144 (0x71) and 160 (0x72): 144 */
	assert_int_equal(wq[1], 0x71);
	/* -0.001 * k = -0.1493, between 0.140625 (0x21, 1.125 * 2^-3) and
	 * 0.15625 (0x22, 1.25 * 2^-3): 0x22 nearer; the sign bit set */
	assert_int_equal(wq[3], 0x80 | 0x22);
}

static void test_head_mxfp4(void **state)
{
	static const char qc[] = "{\"quant_method\":\"mxfp4\",\"modules_to_not_convert\":[\"lm_head\"]}";
	struct mk_manifest *m = mk_manifest_new("tensors", "mk-test"), *d;
	struct mk_err err;
	char *s;
	size_t len;

	(void)state;
	assert_int_equal(mk_manifest_add_tensor(m, "x", MK_DT_BF16, 3, (uint64_t[]){ 2, 64, 6 }, &err), 0);
	m->tensors[0].requant = MK_REQUANT_MXFP4;
	assert_int_equal(mk_manifest_set_quant(m, qc, strlen(qc), &err), 0);
	assert_int_equal(m->quant_kind, MK_REQUANT_MXFP4);
	assert_int_equal(mk_manifest_encode(m, &s, &len, &err), 0);
	assert_non_null(strstr(s, "\"shape\":[2,64,6],\"requant\":\"mxfp4\"}"));
	assert_int_equal(mk_manifest_decode(s, len, &d, &err), 0);
	assert_int_equal(d->tensors[0].requant, MK_REQUANT_MXFP4);
	assert_int_equal(d->quant_kind, MK_REQUANT_MXFP4);
	assert_string_equal(d->quant_config, qc);
	free(s);
	mk_manifest_free(d);
	mk_manifest_free(m);
}

/* E2M1 codes: 0..7 = 0, .5, 1, 1.5, 2, 3, 4, 6; 8 the sign */
static void test_mxfp4_rule(void **state)
{
	float v[64] = { 0 };
	uint8_t c[16], sc;

	(void)state;
	/* amax 6: d = 1, the scale 2^0 (byte 127); each value to its code,
	 * ties (1.25, 2.5, 5) up, 0.25 to 0.5, below it to 0 */
	const float in[16] = { 6.0f, -6.0f, 1.25f, 1.24f, 2.5f, -2.49f, 5.0f, 4.99f,
			       0.25f, 0.2499f, 0.75f, -0.74f, 3.5f, 1.75f, 0.0f, -0.0f };
	const uint8_t want[16] = { 7, 15, 3, 2, 5, 12, 7, 6, 1, 0, 2, 9, 6, 4, 0, 8 };
	for (int j = 0; j < 16; j++)
		v[2 * j] = in[j];     /* every other: stride 2 */
	mk_mxfp4_group(v, 2, c, &sc);
	assert_int_equal(sc, 127);
	for (int j = 0; j < 8; j++)
		assert_int_equal(c[j], want[2 * j] | want[2 * j + 1] << 4);
	for (int j = 8; j < 16; j++)  /* the other 16 of the 32 are the zeros between */
		assert_int_equal(c[j], 0);

	/* amax 7: d = 7/6 rounds up to 2 (byte 128); 7/2 = 3.5 -> 4 */
	memset(v, 0, sizeof(v));
	v[0] = 7.0f;
	v[1] = -0.4f;        /* -0.2: below 0.25, -0 */
	mk_mxfp4_group(v, 1, c, &sc);
	assert_int_equal(sc, 128);
	assert_int_equal(c[0], 6 | 8 << 4);
	/* amax exactly 6 * 2^-3: the scale 2^-3, not rounded up */
	memset(v, 0, sizeof(v));
	v[31] = 0.75f;
	mk_mxfp4_group(v, 1, c, &sc);
	assert_int_equal(sc, 124);
	assert_int_equal(c[15], 7 << 4);
	/* all zeros: scale byte 0 */
	memset(v, 0, sizeof(v));
	mk_mxfp4_group(v, 1, c, &sc);
	assert_int_equal(sc, 0);
	/* 6 * 2^-133 (d subnormal): the scale 2^-126 (byte 1), the value far
	 * below 0.25 of it: code 0 */
	v[0] = ldexpf(6.0f, -133);
	mk_mxfp4_group(v, 1, c, &sc);
	assert_int_equal(sc, 1);
	assert_int_equal(c[0], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_head_roundtrip),
		cmocka_unit_test(test_head_errors),
		cmocka_unit_test(test_fp8_rule),
		cmocka_unit_test(test_head_mxfp4),
		cmocka_unit_test(test_mxfp4_rule),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
