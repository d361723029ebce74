/* test_safetensors.c - header validation (one test per rejection rule),
 * acceptance cases, mk_st_open, the header builder (byte-identical to the
 * Python safetensors 0.8 writer) and the sharded index parser. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/hash.h"
#include "io/safetensors.h"

/* ---- helpers ---- */

/* A file image: 8-byte length of `json`, `json`, then `data` zero bytes. */
static uint8_t *image(const char *json, size_t jlen, uint64_t data, size_t *len)
{
	uint8_t *b;

	*len = 8 + jlen + (size_t)data;
	b = calloc(1, *len);
	assert_non_null(b);
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)((uint64_t)jlen >> (8 * i));
	memcpy(b + 8, json, jlen);
	return b;
}

static void expect_msg(const struct mk_err *err, const char *sub)
{
	if (!strstr(err->msg, sub))
		fail_msg("message \"%s\" lacks \"%s\"", err->msg, sub);
}

/* Parse `json` (jlen bytes) followed by `data` zero bytes; expect failure
 * `code` with a message holding both `sub` and the label. */
static void reject_n(const char *json, size_t jlen, uint64_t data, int code,
		     const char *sub)
{
	struct mk_st_file *f = (struct mk_st_file *)1;
	struct mk_err err = { 0 };
	size_t len;
	uint8_t *b = image(json, jlen, data, &len);
	int rc = mk_st_parse(b, len, len, "t.safetensors", &f, &err);

	if (rc != -code)
		fail_msg("rc %d (want %d): %s", rc, -code, err.msg);
	assert_int_equal(err.code, code);
	assert_null(f);
	expect_msg(&err, sub);
	expect_msg(&err, "t.safetensors");
	free(b);
}

static void reject(const char *json, uint64_t data, int code, const char *sub)
{
	reject_n(json, strlen(json), data, code, sub);
}

static struct mk_st_file *accept(const char *json, uint64_t data)
{
	struct mk_st_file *f = NULL;
	struct mk_err err = { 0 };
	size_t len;
	uint8_t *b = image(json, strlen(json), data, &len);
	int rc = mk_st_parse(b, len, len, "ok.safetensors", &f, &err);

	if (rc)
		fail_msg("rejected: %s", err.msg);
	assert_non_null(f);
	assert_int_equal(f->file_size, len);
	assert_int_equal(f->header_len, strlen(json));
	assert_int_equal(f->data_start, 8 + strlen(json));
	free(b);
	return f;
}

#define T(name, dt, shape, b, e) \
	"\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape \
	",\"data_offsets\":[" #b "," #e "]}"

/* ---- read_metadata rules, in the reference's order ---- */

static void test_header_too_small(void **state)
{
	struct mk_st_file *f;
	struct mk_err err;
	uint8_t b[7] = { 2, 0, 0, 0, 0, 0, 0 };

	assert_int_equal(mk_st_parse(b, 7, 7, "small", &f, &err), -MK_EFORMAT);
	expect_msg(&err, "small: 7 bytes, too short for the 8-byte header "
		   "length (HeaderTooSmall)");
	assert_int_equal(mk_st_parse(b, 0, 0, "small", &f, &err), -MK_EFORMAT);
	expect_msg(&err, "HeaderTooSmall");
}

static void test_header_too_large(void **state)
{
	struct mk_st_file *f;
	struct mk_err err;
	uint8_t b[16] = { 0 };
	uint64_t n = MK_ST_MAX_HEADER + 1;

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(n >> (8 * i));
	assert_int_equal(mk_st_parse(b, 16, 1ull << 40, "big", &f, &err),
			 -MK_EFORMAT);
	expect_msg(&err, "big: header length 100000001 exceeds the limit of "
		   "100000000 bytes (HeaderTooLarge)");
	memset(b, 0xff, 8);          /* u64 max */
	assert_int_equal(mk_st_parse(b, 16, 16, "big", &f, &err), -MK_EFORMAT);
	expect_msg(&err, "HeaderTooLarge");
	/* Exactly the limit is not too large: it fails on the length. */
	n = MK_ST_MAX_HEADER;
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(n >> (8 * i));
	assert_int_equal(mk_st_parse(b, 16, 16, "big", &f, &err), -MK_EFORMAT);
	expect_msg(&err, "InvalidHeaderLength");
}

static void test_invalid_header_length(void **state)
{
	struct mk_st_file *f;
	struct mk_err err;
	size_t len;
	uint8_t *b = image("{}", 2, 0, &len);

	b[0] = 3;                    /* N = 3 > the 2 bytes there are */
	assert_int_equal(mk_st_parse(b, len, len, "short", &f, &err), -MK_EFORMAT);
	expect_msg(&err, "short: header length 3 runs past the end of the "
		   "10-byte file (InvalidHeaderLength)");
	/* The file is long enough but the caller passed too few bytes. */
	b[0] = 2;
	assert_int_equal(mk_st_parse(b, 9, len, "short", &f, &err), -MK_EFORMAT);
	expect_msg(&err, "InvalidHeaderLength");
	free(b);
}

static void test_invalid_utf8(void **state)
{
	/* lone continuation, overlong '/', UTF-16 surrogate, > U+10FFFF,
	 * truncated sequence: all caught before JSON. */
	static const char *bad[] = {
		"{\"a\x80\":1}", "{\"\xc0\xaf\":1}", "{\"\xed\xa0\x80\":1}",
		"{\"\xf4\x90\x80\x80\":1}", "{\"\xe2\x82\":1}", "{} \xff",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		reject(bad[i], 0, MK_EFORMAT, "(InvalidHeader)");
	reject("{\"a\x80\":1}", 0, MK_EFORMAT, "bad byte 0x80 at header offset 3");
	/* valid UTF-8 gets as far as the JSON check */
	reject("{\"\xe2\x82\xac\":1}", 0, MK_EFORMAT,
	       "(InvalidHeaderDeserialization)");
}

static void test_invalid_json(void **state)
{
	reject("{\"a\":", 0, MK_EFORMAT, "(InvalidHeaderDeserialization)");
	reject("", 0, MK_EFORMAT, "header is not valid JSON");
	reject("[]", 0, MK_EFORMAT, "header is not a JSON object");
	reject("{} x", 0, MK_EFORMAT, "(InvalidHeaderDeserialization)");
	reject("{}\n{}", 0, MK_EFORMAT, "(InvalidHeaderDeserialization)");
	reject_n("{}\0", 3, 0, MK_EFORMAT, "(InvalidHeaderDeserialization)");
	reject("{\"a\\u0000\":1}", 0, MK_EFORMAT, "(InvalidHeaderDeserialization)");
}

static void test_wrong_types(void **state)
{
	reject("{\"a\":1}", 0, MK_EFORMAT, "tensor 'a': entry is not a JSON object");
	reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, MK_EFORMAT,
	       "tensor 'a': missing field \"data_offsets\"");
	reject("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, MK_EFORMAT,
	       "missing field \"dtype\"");
	reject("{" T("a", "F31", "[1]", 0, 4) "}", 4, MK_EFORMAT,
	       "tensor 'a': unknown dtype 'F31' (InvalidHeaderDeserialization)");
	reject("{" T("a", "f32", "[1]", 0, 4) "}", 4, MK_EFORMAT,
	       "unknown dtype 'f32'");
	reject("{\"a\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	       MK_EFORMAT, "dtype is not a string");
	reject("{" T("a", "F32", "[-1]", 0, 4) "}", 4, MK_EFORMAT,
	       "shape[0] is not a non-negative integer");
	reject("{" T("a", "F32", "[1.0]", 0, 4) "}", 4, MK_EFORMAT,
	       "shape[0] is not a non-negative integer");
	reject("{" T("a", "F32", "{}", 0, 4) "}", 4, MK_EFORMAT,
	       "shape is not an array");
	reject("{" T("a", "F32", "[1]", 0.0, 4) "}", 4, MK_EFORMAT,
	       "data_offsets is not an array of two");
	reject("{" T("a", "F32", "[1]", -1, 4) "}", 4, MK_EFORMAT,
	       "data_offsets is not an array of two");
	reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,4]}}",
	       4, MK_EFORMAT, "data_offsets is not an array of two");
	reject("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}",
	       4, MK_EFORMAT, "data_offsets is not an array of two");
	/* up to 2^64 - 1 is an integer, as in the reference; past it, not */
	reject("{" T("a", "U8", "[18446744073709551615]", 0, 4) "}", 4,
	       MK_EFORMAT, "(ValidationOverflow)");
	reject("{" T("a", "U8", "[18446744073709551616]", 0, 4) "}", 4,
	       MK_EFORMAT, "integer larger than 2^64 - 1 at byte 28 (InvalidHeaderDeserialization)");
	/* JSON that is not: in a skipped field too */
	reject("{\"a\":{\"x\":[1,],\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       MK_EFORMAT, "header is not valid JSON");
	reject("{\"a\":{\"x\":{\"k\" 1},\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       MK_EFORMAT, "expected ':'");
	reject("{\"a\":{\"x\":01,\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
	       MK_EFORMAT, "(InvalidHeaderDeserialization)");
	reject("{\"a\\ud800\":{}}", 0, MK_EFORMAT, "lone surrogate");
	reject("{\"a\x01\":{}}", 0, MK_EFORMAT, "control character");
}

static void test_metadata_must_be_strings(void **state)
{
	reject("{\"__metadata__\":{\"format\":1}}", 0, MK_EFORMAT,
	       "__metadata__ value for 'format' is not a string");
	reject("{\"__metadata__\":[\"pt\"]}", 0, MK_EFORMAT,
	       "__metadata__ is not an object");
	reject("{\"__metadata__\":\"pt\"}", 0, MK_EFORMAT,
	       "__metadata__ is not an object");
	/* "__metadata__" is reserved: a tensor entry under it fails. */
	reject("{\"__metadata__\":{\"dtype\":\"U8\",\"shape\":[1],"
	       "\"data_offsets\":[0,1]}}", 1, MK_EFORMAT,
	       "__metadata__ value for 'shape' is not a string");
}

static void test_duplicate_keys(void **state)
{
	reject("{" T("a", "U8", "[1]", 0, 1) "," T("a", "U8", "[1]", 1, 2) "}", 2,
	       MK_EFORMAT, "duplicate object key");
	reject("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, MK_EFORMAT,
	       "duplicate");
	reject("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[1],"
	       "\"data_offsets\":[0,1]}}", 1, MK_EFORMAT, "duplicate");
}

static void test_too_many_dims(void **state)
{
	reject("{" T("a", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1,
	       MK_EUNSUPPORTED, "tensor 'a': 9 dimensions");
	/* eight is fine */
	mk_st_file_free(accept("{" T("a", "U8", "[1,1,1,1,1,1,1,1]", 0, 1) "}", 1));
}

/* ---- Metadata::validate rules ---- */

static void test_invalid_offset_gap(void **state)
{
	reject("{" T("a", "U8", "[1]", 0, 1) "," T("b", "U8", "[1]", 2, 3) "}", 3,
	       MK_EFORMAT,
	       "t.safetensors: tensor 'b': data_offsets [2,3) do not start where "
	       "the previous tensor ('a') ends (1) (InvalidOffset)");
}

static void test_invalid_offset_first(void **state)
{
	reject("{" T("a", "U8", "[1]", 1, 2) "}", 2, MK_EFORMAT,
	       "tensor 'a': data_offsets [1,2) do not start at 0");
}

static void test_invalid_offset_overlap(void **state)
{
	reject("{" T("a", "U16", "[2]", 0, 4) "," T("b", "U8", "[2]", 2, 4) "}",
	       4, MK_EFORMAT, "tensor 'b': data_offsets [2,4) do not start where "
	       "the previous tensor ('a') ends (4) (InvalidOffset)");
}

static void test_invalid_offset_alias(void **state)
{
	/* Two names on one range: one owner per byte. */
	reject("{" T("b", "U8", "[4]", 0, 4) "," T("a", "U8", "[4]", 0, 4) "}",
	       4, MK_EFORMAT, "tensor 'b': data_offsets [0,4) do not start where "
	       "the previous tensor ('a') ends (4)");
}

static void test_invalid_offset_reversed(void **state)
{
	reject("{" T("a", "U8", "[0]", 0, 0) "," T("b", "U8", "[1]", 4, 3) "}",
	       4, MK_EFORMAT, "tensor 'b': data_offsets [4,3) end before they "
	       "begin (InvalidOffset)");
}

static void test_validation_overflow(void **state)
{
	struct mk_st_file *f;

	/* 2^32 * 2^32 overflows before the trailing 0 is reached, as the
	 * reference's checked fold does. */
	reject("{" T("a", "U8", "[4294967296,4294967296,0]", 0, 0) "}", 0,
	       MK_EFORMAT, "tensor 'a': element count of shape "
	       "[4294967296,4294967296,0] overflows 64 bits (ValidationOverflow)");
	/* elements fit, bits do not */
	reject("{" T("a", "F32", "[1152921504606846976]", 0, 0) "}", 0,
	       MK_EFORMAT, "bit size of F32 [1152921504606846976] overflows 64 "
	       "bits (ValidationOverflow)");
	/* ... but a 0 first makes it fine */
	f = accept("{" T("a", "U8", "[0,4294967296,4294967296]", 0, 0) "}", 0);
	assert_int_equal(f->tensors[0].nelem, 0);
	mk_st_file_free(f);
}

static void test_misaligned_slice(void **state)
{
	reject("{" T("a", "F4", "[3]", 0, 2) "}", 2, MK_EFORMAT,
	       "tensor 'a': F4 [3] is 12 bits, not a whole number of bytes "
	       "(MisalignedSlice)");
	reject("{" T("a", "F6_E2M3", "[2,1]", 0, 2) "}", 2, MK_EFORMAT,
	       "(MisalignedSlice)");
}

static void test_tensor_invalid_info(void **state)
{
	reject("{" T("a", "F32", "[2]", 0, 4) "}", 4, MK_EFORMAT,
	       "tensor 'a': F32 [2] needs 8 bytes but data_offsets [0,4) span 4 "
	       "(TensorInvalidInfo)");
	reject("{" T("a", "BF16", "[]", 0, 4) "}", 4, MK_EFORMAT,
	       "BF16 [] needs 2 bytes");
}

static void test_metadata_incomplete_buffer(void **state)
{
	const char *j = "{" T("a", "F32", "[2]", 0, 8) "}";
	char want[128];

	snprintf(want, sizeof(want), "8 + %zu + 8 bytes but the file has %zu "
		 "(MetadataIncompleteBuffer)", strlen(j), 8 + strlen(j) + 7);
	reject(j, 7, MK_EFORMAT, want);                          /* truncated */
	reject(j, 9, MK_EFORMAT, "(MetadataIncompleteBuffer)");  /* junk */
	reject("{}", 1, MK_EFORMAT, "(MetadataIncompleteBuffer)");
}

/* ---- acceptance ---- */

static void test_accept_empty(void **state)
{
	struct mk_st_file *f = accept("{}", 0);

	assert_int_equal(f->ntensors, 0);
	assert_int_equal(f->nmeta, 0);
	assert_null(mk_st_find(f, "a"));
	assert_string_equal(f->path, "ok.safetensors");
	mk_st_file_free(f);
	f = accept("{\"__metadata__\":{}}", 0);
	assert_int_equal(f->ntensors, 0);
	mk_st_file_free(f);
	f = accept("{\"__metadata__\":null}", 0);   /* serde: None */
	assert_int_equal(f->nmeta, 0);
	assert_int_equal(f->ntensors, 0);
	mk_st_file_free(f);
}

static void test_accept_scalar(void **state)
{
	struct mk_st_file *f = accept("{" T("s", "F64", "[]", 0, 8) "}", 8);

	assert_int_equal(f->ntensors, 1);
	assert_int_equal(f->tensors[0].desc.ndim, 0);
	assert_int_equal(f->tensors[0].nelem, 1);
	assert_int_equal(f->tensors[0].desc.dtype, MK_DT_F64);
	assert_int_equal(f->tensors[0].end, 8);
	mk_st_file_free(f);
}

static void test_accept_zero_size(void **state)
{
	/* several empty tensors on the same offset, ordered by name */
	struct mk_st_file *f = accept("{" T("z", "F32", "[0,3]", 4, 4) ","
				      T("y", "F32", "[0]", 4, 4) ","
				      T("x", "I32", "[1]", 0, 4) ","
				      T("w", "BF16", "[2,0]", 0, 0) "}", 4);

	assert_int_equal(f->ntensors, 4);
	assert_string_equal(f->tensors[0].name, "w");
	assert_string_equal(f->tensors[1].name, "x");
	assert_string_equal(f->tensors[2].name, "y");
	assert_string_equal(f->tensors[3].name, "z");
	assert_int_equal(f->tensors[3].nelem, 0);
	assert_int_equal(f->tensors[3].desc.ndim, 2);
	assert_int_equal(f->tensors[3].desc.shape[1], 3);
	mk_st_file_free(f);
}

static void test_accept_whitespace(void **state)
{
	struct mk_st_file *f = accept(" \t\r\n{" T("a", "U8", "[2]", 0, 2)
				      "}   \n  ", 2);

	assert_int_equal(f->ntensors, 1);
	assert_non_null(mk_st_find(f, "a"));
	mk_st_file_free(f);
}

static void test_accept_unknown_field(void **state)
{
	struct mk_st_file *f = accept("{\"a\":{\"quant\":{\"x\":[1,2]},\"dtype\":"
				      "\"I16\",\"shape\":[3],\"data_offsets\":[0,6],"
				      "\"extra\":null}}", 6);

	assert_int_equal(f->tensors[0].desc.dtype, MK_DT_I16);
	assert_int_equal(f->tensors[0].end, 6);
	mk_st_file_free(f);
}

static void test_accept_sub_byte(void **state)
{
	struct mk_st_file *f = accept("{" T("a", "F4", "[2,3]", 0, 3) ","
				      T("b", "F6_E3M2", "[4]", 3, 6) "}", 6);

	assert_int_equal(f->tensors[0].nelem, 6);
	assert_int_equal(f->tensors[1].desc.dtype, MK_DT_F6_E3M2);
	mk_st_file_free(f);
}

/* Offsets sort the tensors, names index them, metadata keeps its order,
 * and header_hash covers exactly the first 8 + N bytes. */
static void test_parse_full(void **state)
{
	const char *j = "{\"__metadata__\":{\"format\":\"pt\",\"b\":\"x\\\"y\"},"
			T("a", "I64", "[1]", 33, 41) ","
			T("w.10", "BF16", "[4]", 24, 32) ","
			T("\xc3\xa9", "U8", "[1]", 32, 33) ","
			T("w.2", "F32", "[2,3]", 0, 24) "}";
	const char *names[] = { "w.2", "w.10", "\xc3\xa9", "a" };
	struct mk_st_file *f = NULL;
	struct mk_err err;
	uint8_t want[32];
	size_t len;
	uint8_t *b = image(j, strlen(j), 41, &len);

	assert_int_equal(mk_st_parse(b, len, len, "full", &f, &err), 0);
	assert_int_equal(f->ntensors, 4);
	for (size_t i = 0; i < 4; i++) {
		const struct mk_st_tensor *t = mk_st_find(f, names[i]);
		assert_non_null(t);
		assert_ptr_equal(t, &f->tensors[i]);
		assert_string_equal(t->name, names[i]);
	}
	assert_null(mk_st_find(f, "w"));
	assert_null(mk_st_find(f, "w.3"));
	assert_null(mk_st_find(f, ""));
	assert_int_equal(f->tensors[0].desc.ndim, 2);
	assert_int_equal(f->tensors[0].desc.shape[0], 2);
	assert_int_equal(f->tensors[0].desc.shape[1], 3);
	assert_int_equal(f->tensors[0].nelem, 6);
	assert_int_equal(f->tensors[1].desc.dtype, MK_DT_BF16);
	assert_int_equal(f->tensors[1].begin, 24);
	assert_int_equal(f->tensors[1].end, 32);
	assert_int_equal(f->nmeta, 2);
	assert_string_equal(f->meta[0].key, "format");
	assert_string_equal(f->meta[0].value, "pt");
	assert_string_equal(f->meta[1].key, "b");
	assert_string_equal(f->meta[1].value, "x\"y");
	mk_sha256(b, 8 + strlen(j), want);
	assert_memory_equal(f->header_hash, want, 32);
	mk_st_file_free(f);

	/* The data bytes do not enter the hash. */
	b[len - 1] = 0x5a;
	assert_int_equal(mk_st_parse(b, len, len, "full", &f, &err), 0);
	assert_memory_equal(f->header_hash, want, 32);
	mk_st_file_free(f);
	/* Only the header bytes given, the file size from elsewhere. */
	assert_int_equal(mk_st_parse(b, 8 + strlen(j), len, "full", &f, &err), 0);
	assert_memory_equal(f->header_hash, want, 32);
	mk_st_file_free(f);
	free(b);
}

static void test_find_many(void **state)
{
	char *j = malloc(200 * 80), name[16];
	size_t at = 0;
	struct mk_st_file *f;

	assert_non_null(j);
	at += (size_t)sprintf(j + at, "{");
	for (int i = 0; i < 200; i++)
		at += (size_t)sprintf(j + at, "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":"
				      "[1],\"data_offsets\":[%d,%d]}", i ? "," : "",
				      (i * 7919) % 200, i, i + 1);
	sprintf(j + at, "}");
	f = accept(j, 200);
	for (int i = 0; i < 200; i++) {
		const struct mk_st_tensor *t;
		snprintf(name, sizeof(name), "t%d", i);
		t = mk_st_find(f, name);
		assert_non_null(t);
		assert_string_equal(t->name, name);
	}
	assert_null(mk_st_find(f, "t200"));
	mk_st_file_free(f);
	free(j);
}

/* ---- mk_st_open ---- */

static char tmpdir[] = "/tmp/mk-test-st-XXXXXX";

static void write_file(const char *path, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	close(fd);
}

static void test_open(void **state)
{
	const char *j = "{" T("a", "F32", "[2]", 0, 8) "}  ";
	struct mk_st_file *f = NULL;
	struct mk_err err;
	char path[512];
	size_t len;
	uint8_t *b = image(j, strlen(j), 8, &len);

	snprintf(path, sizeof(path), "%s/m.safetensors", tmpdir);
	write_file(path, b, len);
	assert_int_equal(mk_st_open(path, &f, &err), 0);
	assert_string_equal(f->path, path);
	assert_int_equal(f->file_size, len);
	assert_int_equal(f->data_start, 8 + strlen(j));
	assert_int_equal(mk_st_find(f, "a")->end, 8);
	mk_st_file_free(f);

	write_file(path, b, len - 1);            /* truncated data */
	assert_int_equal(mk_st_open(path, &f, &err), -MK_EFORMAT);
	expect_msg(&err, path);
	expect_msg(&err, "MetadataIncompleteBuffer");
	write_file(path, b, 20);                 /* truncated header */
	assert_int_equal(mk_st_open(path, &f, &err), -MK_EFORMAT);
	expect_msg(&err, "InvalidHeaderLength");
	write_file(path, b, 5);
	assert_int_equal(mk_st_open(path, &f, &err), -MK_EFORMAT);
	expect_msg(&err, "HeaderTooSmall");
	memset(b, 0x7f, 8);
	write_file(path, b, len);
	assert_int_equal(mk_st_open(path, &f, &err), -MK_EFORMAT);
	expect_msg(&err, "HeaderTooLarge");
	unlink(path);
	assert_int_equal(mk_st_open(path, &f, &err), -MK_ENOENT);
	assert_null(f);
	expect_msg(&err, path);
	assert_int_equal(mk_st_open(tmpdir, &f, &err), -MK_EINVAL);
	expect_msg(&err, "not a regular file");
	free(b);
}

/* ---- mk_st_header_build vs Python safetensors 0.8.0 ----
 * Generated with safetensors._safetensors_rust.serialize(..., metadata=
 * {"format": "pt"}), keeping the first 8 + N bytes. */
static const char expect_case1[] =
	"\020\001\000\000\000\000\000\000{\"__metadata__\":{\"format\""
	":\"pt\"},\"b\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_off"
	"sets\":[0,24]},\"c\":{\"dtype\":\"F32\",\"shape\":[],\"data_"
	"offsets\":[24,28]},\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\""
	"data_offsets\":[28,36]},\"\303\251\\\"\\\\\\n\\u0001\177z/\\"
	"t\":{\"dtype\":\"I8\",\"shape\":[3],\"data_offsets\":[36,39]"
	"}}  ";

static const char expect_case2[] =
	" \000\000\000\000\000\000\000{\"__metadata__\":{\"format\":\""
	"pt\"}}";

static const char expect_case3[] =
	"\370\002\000\000\000\000\000\000{\"__metadata__\":{\"format\""
	":\"pt\"},\"n\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offse"
	"ts\":[0,8]},\"y\":{\"dtype\":\"I64\",\"shape\":[1,2],\"data_"
	"offsets\":[8,24]},\"z\":{\"dtype\":\"F64\",\"shape\":[0],\"d"
	"ata_offsets\":[24,24]},\"o\":{\"dtype\":\"U32\",\"shape\":[1"
	"],\"data_offsets\":[24,28]},\"u\":{\"dtype\":\"I32\",\"shape"
	"\":[2],\"data_offsets\":[28,36]},\"v\":{\"dtype\":\"F16\",\""
	"shape\":[3,1],\"data_offsets\":[36,42]},\"t\":{\"dtype\":\"U"
	"16\",\"shape\":[1],\"data_offsets\":[42,44]},\"s\":{\"dtype\""
	":\"I16\",\"shape\":[1],\"data_offsets\":[44,46]},\"q\":{\"dt"
	"ype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[46,48]},\""
	"p\":{\"dtype\":\"F8_E5M2\",\"shape\":[2],\"data_offsets\":[4"
	"8,50]},\"m\":{\"dtype\":\"I8\",\"shape\":[0,4],\"data_offset"
	"s\":[50,50]},\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_of"
	"fsets\":[50,52]},\"x\":{\"dtype\":\"BOOL\",\"shape\":[5],\"d"
	"ata_offsets\":[52,57]}}   ";

struct bt {
	const char *name;
	enum mk_dtype dt;
	unsigned ndim;
	uint64_t shape[4];
};

static void build_and_compare(const struct bt *in, size_t n, const char *want,
			      size_t want_len)
{
	struct mk_st_out_tensor *t = calloc(n ? n : 1, sizeof(*t));
	size_t *order = calloc(n ? n : 1, sizeof(*order));
	struct mk_st_file *f = NULL;
	struct mk_err err;
	uint8_t *hdr = NULL, *file;
	size_t hlen = 0;
	uint64_t data = 0;

	assert_non_null(t);
	assert_non_null(order);
	for (size_t i = 0; i < n; i++) {
		t[i].name = in[i].name;
		t[i].dtype = in[i].dt;
		t[i].ndim = in[i].ndim;
		t[i].shape = in[i].shape;
	}
	assert_int_equal(mk_st_header_build(t, n, 8, &hdr, &hlen, order, &err), 0);
	if (hlen != want_len || memcmp(hdr, want, hlen))
		fail_msg("built %zu bytes: %.*s", hlen, (int)hlen - 8,
			 (const char *)hdr + 8);
	/* order[] lists offsets ascending; the parser agrees on every tensor */
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(t[order[i]].begin, data);
		data += t[order[i]].nbytes;
	}
	file = calloc(1, hlen + data);
	assert_non_null(file);
	memcpy(file, hdr, hlen);
	assert_int_equal(mk_st_parse(file, hlen + data, hlen + data, "built", &f,
				     &err), 0);
	assert_int_equal(f->ntensors, n);
	assert_int_equal(f->nmeta, 1);
	for (size_t i = 0; i < n; i++) {
		const struct mk_st_tensor *p = mk_st_find(f, t[i].name);
		assert_non_null(p);
		assert_int_equal(p->begin, t[i].begin);
		assert_int_equal(p->end - p->begin, t[i].nbytes);
		assert_int_equal(p->desc.dtype, t[i].dtype);
	}
	mk_st_file_free(f);
	free(file);
	free(hdr);
	free(order);
	free(t);
}

static void test_build_matches_python(void **state)
{
	const struct bt c1[] = {
		{ "b", MK_DT_F32, 2, { 2, 3 } },
		{ "a", MK_DT_BF16, 1, { 4 } },
		{ "c", MK_DT_F32, 0, { 0 } },
		{ "\xc3\xa9\"\\\n\001\177z/\t", MK_DT_I8, 1, { 3 } },
	};
	const struct bt c3[] = {
		{ "z", MK_DT_F64, 1, { 0 } }, { "y", MK_DT_I64, 2, { 1, 2 } },
		{ "x", MK_DT_BOOL, 1, { 5 } }, { "w", MK_DT_U8, 1, { 2 } },
		{ "v", MK_DT_F16, 2, { 3, 1 } }, { "u", MK_DT_I32, 1, { 2 } },
		{ "t", MK_DT_U16, 1, { 1 } }, { "s", MK_DT_I16, 1, { 1 } },
		{ "q", MK_DT_F8_E4M3, 1, { 2 } }, { "p", MK_DT_F8_E5M2, 1, { 2 } },
		{ "o", MK_DT_U32, 1, { 1 } }, { "n", MK_DT_U64, 1, { 1 } },
		{ "m", MK_DT_I8, 2, { 0, 4 } },
	};

	build_and_compare(c1, 4, expect_case1, sizeof(expect_case1) - 1);
	build_and_compare(NULL, 0, expect_case2, sizeof(expect_case2) - 1);
	build_and_compare(c3, 13, expect_case3, sizeof(expect_case3) - 1);
}

static void test_build_align(void **state)
{
	uint64_t shape[2] = { 3, 5 };
	struct mk_st_out_tensor t[2] = {
		{ .name = "w", .dtype = MK_DT_F16, .ndim = 2, .shape = shape },
		{ .name = "v", .dtype = MK_DT_F4, .ndim = 1, .shape = shape },
	};
	uint8_t *h8, *h4k;
	size_t l8, l4k, order[2];
	struct mk_err err;

	assert_int_equal(mk_st_header_build(t, 1, 8, &h8, &l8, NULL, &err), 0);
	assert_int_equal(mk_st_header_build(t, 1, 4096, &h4k, &l4k, order, &err), 0);
	assert_int_equal(l4k, 4096);
	assert_int_equal(l8 % 8, 0);
	assert_int_equal(h4k[0], (4096 - 8) & 0xff);
	assert_int_equal(h4k[1], (4096 - 8) >> 8);
	/* same JSON, longer run of spaces */
	assert_memory_equal(h8 + 8, h4k + 8, l8 - 8);
	for (size_t i = l8; i < l4k; i++)
		assert_int_equal(h4k[i], ' ');
	assert_int_equal(t[0].nbytes, 30);
	assert_int_equal(t[0].begin, 0);
	free(h8);
	free(h4k);
	/* F4 with an odd count is a MisalignedSlice; [4] is 2 bytes */
	shape[0] = 3;
	assert_int_equal(mk_st_header_build(t + 1, 1, 8, &h8, &l8, NULL, &err),
			 -MK_EINVAL);
	expect_msg(&err, "MisalignedSlice");
	assert_null(h8);
	shape[0] = 4;
	assert_int_equal(mk_st_header_build(t, 2, 8, &h8, &l8, order, &err), 0);
	assert_int_equal(order[0], 0);          /* F16 before F4 */
	assert_int_equal(t[1].begin, 40);
	assert_int_equal(t[1].nbytes, 2);
	free(h8);
}

static void test_build_rejects(void **state)
{
	uint64_t shape[1] = { 2 };
	struct mk_st_out_tensor t[2] = {
		{ .name = "a", .dtype = MK_DT_F32, .ndim = 1, .shape = shape },
		{ .name = "a", .dtype = MK_DT_F16, .ndim = 1, .shape = shape },
	};
	struct mk_err err;
	uint8_t *h;
	size_t l;

	assert_int_equal(mk_st_header_build(t, 2, 8, &h, &l, NULL, &err), -MK_EINVAL);
	expect_msg(&err, "'a' is named twice");
	t[1].name = "__metadata__";
	assert_int_equal(mk_st_header_build(t, 2, 8, &h, &l, NULL, &err), -MK_EINVAL);
	expect_msg(&err, "reserved");
	assert_int_equal(mk_st_header_build(t, 1, 12, &h, &l, NULL, &err), -MK_EINVAL);
	expect_msg(&err, "power of two");
	assert_int_equal(mk_st_header_build(t, 1, 4, &h, &l, NULL, &err), -MK_EINVAL);
	t[1].name = "b\xff";
	assert_int_equal(mk_st_header_build(t, 2, 8, &h, &l, NULL, &err), -MK_EINVAL);
	expect_msg(&err, "UTF-8");
	assert_null(h);
}

/* ---- index ---- */

static void index_reject(const char *json, const char *sub)
{
	struct mk_st_index *idx = (struct mk_st_index *)1;
	struct mk_err err = { 0 };

	assert_int_equal(mk_st_index_parse(json, strlen(json), "idx.json", &idx,
					   &err), -MK_EFORMAT);
	assert_int_equal(err.code, MK_EFORMAT);
	assert_null(idx);
	expect_msg(&err, sub);
	expect_msg(&err, "idx.json");
}

static void test_index_parse(void **state)
{
	const char *j = "{\"metadata\":{\"total_size\":\"whatever\",\"x\":[1]},"
			"\"weight_map\":{\"lm_head.weight\":\"model-00002-of-00002.safetensors\","
			"\"embed\":\"model-00001-of-00002.safetensors\","
			"\"norm\":\"model-00002-of-00002.safetensors\","
			"\"a\":\"model-00001-of-00002.safetensors\"}}";
	struct mk_st_index *idx = NULL;
	struct mk_err err;

	assert_int_equal(mk_st_index_parse(j, strlen(j), "i", &idx, &err), 0);
	assert_int_equal(idx->nshards, 2);
	assert_string_equal(idx->shards[0], "model-00001-of-00002.safetensors");
	assert_string_equal(idx->shards[1], "model-00002-of-00002.safetensors");
	assert_int_equal(idx->nentries, 4);
	assert_string_equal(idx->entries[0].tensor, "lm_head.weight");
	assert_int_equal(idx->entries[0].shard, 1);
	assert_string_equal(idx->entries[1].tensor, "embed");
	assert_int_equal(idx->entries[1].shard, 0);
	assert_string_equal(idx->entries[2].tensor, "norm");
	assert_int_equal(idx->entries[2].shard, 1);
	assert_string_equal(idx->entries[3].tensor, "a");
	assert_int_equal(idx->entries[3].shard, 0);
	mk_st_index_free(idx);

	j = "{\"weight_map\":{}}";       /* no metadata, no tensors */
	assert_int_equal(mk_st_index_parse(j, strlen(j), "i", &idx, &err), 0);
	assert_int_equal(idx->nshards, 0);
	assert_int_equal(idx->nentries, 0);
	mk_st_index_free(idx);
}

static void test_index_rejects(void **state)
{
	index_reject("{\"weight_map\":{\"a\":\"../x\"}}", "shard name '../x'");
	index_reject("{\"weight_map\":{\"a\":\"/abs\"}}", "shard name '/abs'");
	index_reject("{\"weight_map\":{\"a\":\"a/b\"}}", "shard name 'a/b'");
	index_reject("{\"weight_map\":{\"a\":\"a\\\\b\"}}", "not a plain file name");
	index_reject("{\"weight_map\":{\"a\":\"..\"}}", "shard name '..'");
	index_reject("{\"weight_map\":{\"a\":\".\"}}", "shard name '.'");
	index_reject("{\"weight_map\":{\"a\":\"\"}}", "shard name ''");
	index_reject("{\"weight_map\":{\"a\":1}}", "tensor 'a': shard name is not a string");
	index_reject("{\"weight_map\":{\"a\":null}}", "not a string");
	index_reject("{\"metadata\":{}}", "no \"weight_map\"");
	index_reject("{\"weight_map\":[]}", "\"weight_map\" is not an object");
	index_reject("{\"weight_map\":{\"a\":\"s\",\"a\":\"s\"}}", "duplicate object key");
	index_reject("{\"weight_map\":{},\"weight_map\":{}}", "duplicate");
	index_reject("{\"weight_map\":{\"a\":\"s\"}", "not valid JSON");
	index_reject("{\"weight_map\":{}} x", "not valid JSON");
	index_reject("[]", "not a JSON object");
	index_reject("{\"weight_map\":{\"\xff\":\"s\"}}", "not valid JSON");
}

static int setup(void **state)
{
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	return rmdir(tmpdir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_too_small),
		cmocka_unit_test(test_header_too_large),
		cmocka_unit_test(test_invalid_header_length),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_invalid_json),
		cmocka_unit_test(test_wrong_types),
		cmocka_unit_test(test_metadata_must_be_strings),
		cmocka_unit_test(test_duplicate_keys),
		cmocka_unit_test(test_too_many_dims),
		cmocka_unit_test(test_invalid_offset_gap),
		cmocka_unit_test(test_invalid_offset_first),
		cmocka_unit_test(test_invalid_offset_overlap),
		cmocka_unit_test(test_invalid_offset_alias),
		cmocka_unit_test(test_invalid_offset_reversed),
		cmocka_unit_test(test_validation_overflow),
		cmocka_unit_test(test_misaligned_slice),
		cmocka_unit_test(test_tensor_invalid_info),
		cmocka_unit_test(test_metadata_incomplete_buffer),
		cmocka_unit_test(test_accept_empty),
		cmocka_unit_test(test_accept_scalar),
		cmocka_unit_test(test_accept_zero_size),
		cmocka_unit_test(test_accept_whitespace),
		cmocka_unit_test(test_accept_unknown_field),
		cmocka_unit_test(test_accept_sub_byte),
		cmocka_unit_test(test_parse_full),
		cmocka_unit_test(test_find_many),
		cmocka_unit_test(test_open),
		cmocka_unit_test(test_build_matches_python),
		cmocka_unit_test(test_build_align),
		cmocka_unit_test(test_build_rejects),
		cmocka_unit_test(test_index_parse),
		cmocka_unit_test(test_index_rejects),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
