/* test_gguf_write.c - GGUF v3 headers and gguf-split's sharding.
 *
 * The strongest check: testdata/gguf/tiny-llama-f16.gguf, written by
 * llama.cpp's convert_hf_to_gguf.py (gguf-py), is read here pair by
 * pair and tensor by tensor, rebuilt with mk's builder, and the header
 * mk makes must equal the file's first bytes up to its data section,
 * every key, string array, tensor offset and padding byte.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_type.h"
#include "gguf/gguf_write.h"
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

static uint64_t le(const uint8_t *p, unsigned w)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < w; i++)
		v |= (uint64_t)p[i] << 8 * i;
	return v;
}

/* a string of the file, NUL-terminated copy */
static char *str_at(const uint8_t *p, size_t *off)
{
	uint64_t n = le(p + *off, 8);
	char *s = malloc(n + 1);

	assert_non_null(s);
	memcpy(s, p + *off + 8, n);
	s[n] = 0;
	*off += 8 + n;
	return s;
}

static unsigned width(uint32_t vt)
{
	switch (vt) {
	case 0: case 1: case 7: return 1;
	case 2: case 3: return 2;
	case 4: case 5: case 6: return 4;
	case 10: case 11: case 12: return 8;
	}
	return 0;
}

static void add_scalar(struct mk_gguf *g, const char *k, uint32_t vt, const uint8_t *p)
{
	uint64_t u = le(p, width(vt));
	float f;
	double d;
	int rc = -1;

	switch (vt) {
	case 0: rc = mk_gguf_kv_u8(g, k, (uint8_t)u, NULL); break;
	case 1: rc = mk_gguf_kv_i8(g, k, (int8_t)u, NULL); break;
	case 2: rc = mk_gguf_kv_u16(g, k, (uint16_t)u, NULL); break;
	case 3: rc = mk_gguf_kv_i16(g, k, (int16_t)u, NULL); break;
	case 4: rc = mk_gguf_kv_u32(g, k, (uint32_t)u, NULL); break;
	case 5: rc = mk_gguf_kv_i32(g, k, (int32_t)u, NULL); break;
	case 6: memcpy(&f, p, 4); rc = mk_gguf_kv_f32(g, k, f, NULL); break;
	case 7: rc = mk_gguf_kv_bool(g, k, u != 0, NULL); break;
	case 10: rc = mk_gguf_kv_u64(g, k, u, NULL); break;
	case 11: rc = mk_gguf_kv_i64(g, k, (int64_t)u, NULL); break;
	case 12: memcpy(&d, p, 8); rc = mk_gguf_kv_f64(g, k, d, NULL); break;
	}
	assert_int_equal(rc, 0);
}

static void test_reference_header(void **state)
{
	size_t len, off = 24, hlen;
	uint8_t *f = slurp("testdata/gguf/tiny-llama-f16.gguf", &len), *h;
	struct mk_gguf *g;
	unsigned arrays = 0, strings = 0;

	assert_memory_equal(f, "GGUF", 4);
	assert_int_equal(le(f + 4, 4), 3);
	uint64_t nt = le(f + 8, 8), nkv = le(f + 16, 8);

	assert_int_equal(mk_gguf_new(&g, NULL), 0);
	for (uint64_t i = 0; i < nkv; i++) {
		char *key = str_at(f, &off);
		uint32_t vt = (uint32_t)le(f + off, 4);

		off += 4;
		if (vt == MK_GGUF_V_STRING) {
			char *v = str_at(f, &off);

			assert_int_equal(mk_gguf_kv_str(g, key, v, NULL), 0);
			free(v);
			strings++;
		} else if (vt == MK_GGUF_V_ARRAY) {
			uint32_t et = (uint32_t)le(f + off, 4);
			uint64_t n = le(f + off + 4, 8);

			off += 12;
			if (et == MK_GGUF_V_STRING) {
				char **v = calloc(n, sizeof *v);

				for (uint64_t j = 0; j < n; j++)
					v[j] = str_at(f, &off);
				assert_int_equal(mk_gguf_kv_strv(g, key,
					(const char *const *)v, n, NULL), 0);
				for (uint64_t j = 0; j < n; j++)
					free(v[j]);
				free(v);
			} else {
				assert_int_equal(mk_gguf_kv_array(g, key, (int)et,
					f + off, n, NULL), 0);
				off += n * width(et);
			}
			arrays++;
		} else {
			assert_true(width(vt) > 0);
			add_scalar(g, key, vt, f + off);
			off += width(vt);
		}
		free(key);
	}
	for (uint64_t i = 0; i < nt; i++) {
		char *name = str_at(f, &off);
		uint32_t nd = (uint32_t)le(f + off, 4);
		uint64_t ne[4];

		off += 4;
		for (uint32_t d = 0; d < nd; d++, off += 8)
			ne[d] = le(f + off, 8);
		int type = (int)le(f + off, 4);
		uint64_t toff = le(f + off + 4, 8);

		off += 12;
		assert_int_equal(mk_gguf_add_tensor(g, name, nd, ne, type, NULL), 0);
		assert_int_equal(mk_gguf_tensor_offset(g, (size_t)i), toff);
		free(name);
	}
	assert_int_equal(mk_gguf_header(g, &h, &hlen, NULL), 0);
	assert_int_equal(hlen % 32, 0);
	assert_true(hlen >= off && hlen < off + 32);
	assert_int_equal(hlen, 3552);
	assert_memory_equal(h, f, hlen);
	/* the data section ends the file, last tensor padded too */
	assert_int_equal(hlen + mk_gguf_data_bytes(g), len);
	assert_int_equal(mk_gguf_n_tensors(g), 21);
	assert_int_equal(mk_gguf_n_kv(g), nkv);
	assert_true(arrays == 3 && strings >= 5);
	free(h);
	mk_gguf_free(g);
	free(f);
}

/* Every value type, alignment 64, a q4_K and an f32 tensor, checked
 * against bytes laid out by hand. */
static void test_layout_by_hand(void **state)
{
	struct mk_gguf *g;
	uint8_t *h;
	size_t n;
	const uint16_t arr[3] = { 1, 0x0203, 0xFFFF };
	const char *sv[2] = { "ab", "" };
	const uint64_t ne1[2] = { 256, 3 }, ne2[1] = { 5 };

	assert_int_equal(mk_gguf_new(&g, NULL), 0);
	assert_int_equal(mk_gguf_set_alignment(g, 64, NULL), 0);
	assert_int_equal(mk_gguf_kv_u8(g, "a", 0xAB, NULL), 0);
	assert_int_equal(mk_gguf_kv_i8(g, "b", -2, NULL), 0);
	assert_int_equal(mk_gguf_kv_u16(g, "c", 0x1234, NULL), 0);
	assert_int_equal(mk_gguf_kv_i16(g, "d", -3, NULL), 0);
	assert_int_equal(mk_gguf_kv_u32(g, "e", 0xDEADBEEF, NULL), 0);
	assert_int_equal(mk_gguf_kv_i32(g, "f", -4, NULL), 0);
	assert_int_equal(mk_gguf_kv_f32(g, "g", 1.5f, NULL), 0);
	assert_int_equal(mk_gguf_kv_bool(g, "h", true, NULL), 0);
	assert_int_equal(mk_gguf_kv_str(g, "i", "xyz", NULL), 0);
	assert_int_equal(mk_gguf_kv_u64(g, "j", 0x0102030405060708ull, NULL), 0);
	assert_int_equal(mk_gguf_kv_i64(g, "k", -5, NULL), 0);
	assert_int_equal(mk_gguf_kv_f64(g, "l", -2.0, NULL), 0);
	assert_int_equal(mk_gguf_kv_array(g, "m", MK_GGUF_V_U16, arr, 3, NULL), 0);
	assert_int_equal(mk_gguf_kv_strv(g, "n", sv, 2, NULL), 0);
	assert_int_equal(mk_gguf_add_tensor(g, "t0", 2, ne1, MK_GGUF_Q4_K, NULL), 0);
	assert_int_equal(mk_gguf_add_tensor(g, "t1", 1, ne2, MK_GGUF_F32, NULL), 0);
	assert_int_equal(mk_gguf_tensor_offset(g, 0), 0);
	assert_int_equal(mk_gguf_tensor_bytes(g, 0), 432);
	assert_int_equal(mk_gguf_tensor_offset(g, 1), 448);
	assert_int_equal(mk_gguf_tensor_bytes(g, 1), 20);
	assert_int_equal(mk_gguf_data_bytes(g), 512);
	assert_int_equal(mk_gguf_header(g, &h, &n, NULL), 0);

	static const uint8_t want[] = {
		'G', 'G', 'U', 'F', 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
		15, 0, 0, 0, 0, 0, 0, 0,
		17, 0, 0, 0, 0, 0, 0, 0, 'g', 'e', 'n', 'e', 'r', 'a', 'l', '.',
		'a', 'l', 'i', 'g', 'n', 'm', 'e', 'n', 't', 4, 0, 0, 0, 64, 0, 0, 0,
		1, 0, 0, 0, 0, 0, 0, 0, 'a', 0, 0, 0, 0, 0xAB,
		1, 0, 0, 0, 0, 0, 0, 0, 'b', 1, 0, 0, 0, 0xFE,
		1, 0, 0, 0, 0, 0, 0, 0, 'c', 2, 0, 0, 0, 0x34, 0x12,
		1, 0, 0, 0, 0, 0, 0, 0, 'd', 3, 0, 0, 0, 0xFD, 0xFF,
		1, 0, 0, 0, 0, 0, 0, 0, 'e', 4, 0, 0, 0, 0xEF, 0xBE, 0xAD, 0xDE,
		1, 0, 0, 0, 0, 0, 0, 0, 'f', 5, 0, 0, 0, 0xFC, 0xFF, 0xFF, 0xFF,
		1, 0, 0, 0, 0, 0, 0, 0, 'g', 6, 0, 0, 0, 0, 0, 0xC0, 0x3F,
		1, 0, 0, 0, 0, 0, 0, 0, 'h', 7, 0, 0, 0, 1,
		1, 0, 0, 0, 0, 0, 0, 0, 'i', 8, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
		'x', 'y', 'z',
		1, 0, 0, 0, 0, 0, 0, 0, 'j', 10, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1,
		1, 0, 0, 0, 0, 0, 0, 0, 'k', 11, 0, 0, 0,
		0xFB, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
		1, 0, 0, 0, 0, 0, 0, 0, 'l', 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xC0,
		1, 0, 0, 0, 0, 0, 0, 0, 'm', 9, 0, 0, 0, 2, 0, 0, 0,
		3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 3, 2, 0xFF, 0xFF,
		1, 0, 0, 0, 0, 0, 0, 0, 'n', 9, 0, 0, 0, 8, 0, 0, 0,
		2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'a', 'b',
		0, 0, 0, 0, 0, 0, 0, 0,
		/* tensors */
		2, 0, 0, 0, 0, 0, 0, 0, 't', '0', 2, 0, 0, 0,
		0, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
		2, 0, 0, 0, 0, 0, 0, 0, 't', '1', 1, 0, 0, 0,
		5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xC0, 1, 0, 0, 0, 0, 0, 0,
	};
	size_t pad = (64 - sizeof want % 64) % 64;

	assert_int_equal(n, sizeof want + pad);
	assert_memory_equal(h, want, sizeof want);
	for (size_t i = sizeof want; i < n; i++)
		assert_int_equal(h[i], 0);
	free(h);
	mk_gguf_free(g);
}

static void test_errors(void **state)
{
	struct mk_gguf *g;
	struct mk_err err = { 0 };
	const uint64_t ne[5] = { 100, 2, 1, 1, 1 }, ok[2] = { 256, 2 };
	char longname[80];

	assert_int_equal(mk_gguf_new(&g, NULL), 0);
	assert_int_equal(mk_gguf_kv_u32(g, "x", 1, NULL), 0);
	assert_int_equal(mk_gguf_kv_str(g, "x", "y", &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "'x' is set twice"));
	assert_int_equal(mk_gguf_kv_u8(g, "", 1, &err), -MK_EINVAL);
	assert_int_equal(mk_gguf_kv_array(g, "s", MK_GGUF_V_STRING, NULL, 0, &err),
			 -MK_EINVAL);
	assert_int_equal(mk_gguf_set_alignment(g, 48, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "48"));
	assert_int_equal(mk_gguf_add_tensor(g, "q", 2, ne, MK_GGUF_Q4_K, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "rows of 100"));
	assert_int_equal(mk_gguf_add_tensor(g, "q", 5, ne, MK_GGUF_F32, &err),
			 -MK_EINVAL);
	assert_int_equal(mk_gguf_add_tensor(g, "q", 2, ok, 4, &err), -MK_EINVAL);
	memset(longname, 'a', 64);
	longname[64] = 0;
	assert_int_equal(mk_gguf_add_tensor(g, longname, 2, ok, MK_GGUF_F32, &err),
			 -MK_EINVAL);
	longname[63] = 0;
	assert_int_equal(mk_gguf_add_tensor(g, longname, 2, ok, MK_GGUF_F32, &err), 0);
	assert_int_equal(mk_gguf_add_tensor(g, longname, 2, ok, MK_GGUF_Q8_0, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "added twice"));
	assert_int_equal(mk_gguf_set_alignment(g, 64, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "before the first"));
	mk_gguf_free(g);
}

/* Many tensors: the name table grows and still finds duplicates. */
static void test_many_tensors(void **state)
{
	struct mk_gguf *g;
	char name[32];
	const uint64_t ne[1] = { 8 };

	assert_int_equal(mk_gguf_new(&g, NULL), 0);
	for (int i = 0; i < 5000; i++) {
		snprintf(name, sizeof name, "blk.%d.w", i);
		assert_int_equal(mk_gguf_add_tensor(g, name, 1, ne, MK_GGUF_F32, NULL), 0);
	}
	for (int i = 0; i < 5000; i += 499) {
		snprintf(name, sizeof name, "blk.%d.w", i);
		assert_int_equal(mk_gguf_add_tensor(g, name, 1, ne, MK_GGUF_F32, NULL),
				 -MK_EINVAL);
	}
	assert_int_equal(mk_gguf_tensor_offset(g, 4999), 4999 * 32);
	assert_int_equal(mk_gguf_data_bytes(g), 5000 * 32);
	mk_gguf_free(g);
}

static void test_split(void **state)
{
	const uint64_t sz[6] = { 100, 100, 30, 200, 1, 1000 };
	uint32_t shard[6], n;
	uint64_t b;
	struct mk_err err = { 0 };
	char *name;

	/* padded: 128 128 32 224 32 1008; max 300 */
	assert_int_equal(mk_gguf_split_plan(sz, 6, 300, 0, shard, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_int_equal(shard[0], 0);
	assert_int_equal(shard[1], 0);
	assert_int_equal(shard[2], 0);  /* 288 <= 300 */
	assert_int_equal(shard[3], 1);
	assert_int_equal(shard[4], 1);  /* 256 */
	assert_int_equal(shard[5], 2);  /* alone, over the maximum */
	/* by count: every 2 tensors */
	assert_int_equal(mk_gguf_split_plan(sz, 6, 0, 2, shard, &n, NULL), 0);
	assert_int_equal(n, 3);
	assert_int_equal(shard[1], 0);
	assert_int_equal(shard[2], 1);
	assert_int_equal(shard[5], 2);
	assert_int_equal(mk_gguf_split_plan(sz + 5, 1, 300, 0, shard, &n, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "first tensor"));
	assert_int_equal(mk_gguf_split_plan(sz, 6, 0, 0, shard, &n, &err), -MK_EINVAL);

	name = mk_gguf_split_name("out/model", 1, 3);
	assert_string_equal(name, "out/model-00002-of-00003.gguf");
	free(name);
	assert_int_equal(mk_gguf_split_size_parse("5G", &b, NULL), 0);
	assert_int_equal(b, 5000000000ull);
	assert_int_equal(mk_gguf_split_size_parse("300M", &b, NULL), 0);
	assert_int_equal(b, 300000000ull);
	assert_int_equal(mk_gguf_split_size_parse("3K", &b, &err), -MK_EINVAL);
	assert_int_equal(mk_gguf_split_size_parse("0G", &b, &err), -MK_EINVAL);
	assert_int_equal(mk_gguf_split_size_parse("G", &b, &err), -MK_EINVAL);

	struct mk_gguf *g;
	uint8_t *h;
	size_t len;

	assert_int_equal(mk_gguf_new(&g, NULL), 0);
	assert_int_equal(mk_gguf_kv_split(g, 1, 3, 291, NULL), 0);
	assert_int_equal(mk_gguf_kv_split(g, 3, 3, 291, &err), -MK_EINVAL);
	assert_int_equal(mk_gguf_header(g, &h, &len, NULL), 0);
	assert_int_equal(le(h + 16, 8), 3);
	/* split.no u16 1, split.tensors.count i32 291, split.count u16 3 */
	assert_memory_equal(h + 24 + 8, "split.no", 8);
	assert_int_equal(le(h + 24 + 16, 4), MK_GGUF_V_U16);
	assert_int_equal(le(h + 24 + 20, 2), 1);
	assert_memory_equal(h + 46 + 8, "split.tensors.count", 19);
	assert_int_equal(le(h + 46 + 27, 4), MK_GGUF_V_I32);
	assert_int_equal(le(h + 46 + 31, 4), 291);
	assert_memory_equal(h + 81 + 8, "split.count", 11);
	assert_int_equal(le(h + 81 + 19, 4), MK_GGUF_V_U16);
	assert_int_equal(le(h + 81 + 23, 2), 3);
	free(h);
	mk_gguf_free(g);
}

/* gguf-split's own shards of a 111-tensor file (testdata/gguf/
 * split-golden.txt): by size (5M) and by count (16). */
static void test_split_golden(void **state)
{
	FILE *f = fopen("testdata/gguf/split-golden.txt", "r");
	char line[256], mode[16];
	uint64_t bytes[256], limit = 0;
	uint32_t want[256], got[256], n = 0, nshards = 0, shards;
	int blocks = 0;

	assert_non_null(f);
	for (bool more = true; more; ) {
		more = fgets(line, sizeof line, f) != NULL;
		if (more && line[0] == '#')
			continue;
		if (!more || !strncmp(line, "split ", 6)) {
			if (n) {
				uint64_t mb = !strcmp(mode, "size") ? limit : 0;
				uint32_t mt = !strcmp(mode, "size") ? 0 : (uint32_t)limit;

				assert_int_equal(mk_gguf_split_plan(bytes, n, mb, mt, got,
								    &shards, NULL), 0);
				assert_int_equal(shards, nshards);
				for (uint32_t i = 0; i < n; i++)
					assert_int_equal(got[i], want[i]);
				blocks++;
			}
			n = 0;
			if (more) {
				unsigned long long l;

				assert_int_equal(sscanf(line, "split %15s %llu shards %u",
							mode, &l, &nshards), 3);
				limit = l;
			}
			continue;
		}
		unsigned long long b;
		char name[96];

		assert_true(n < 256);
		assert_int_equal(sscanf(line, "%95s %llu %u", name, &b, &want[n]), 3);
		bytes[n++] = b;
	}
	fclose(f);
	assert_int_equal(blocks, 2);
}

/* The second 5M shard's header as llama-gguf-split wrote it, rebuilt:
 * the split keys alone, in gguf-split's order, offsets from 0. */
static void test_split_shard_header(void **state)
{
	size_t len, off = 24, hlen;
	uint8_t *f = slurp("testdata/gguf/split-shard2-header.bin", &len), *h;
	struct mk_gguf *g;

	assert_int_equal(le(f + 16, 8), 3);     /* three keys */
	assert_int_equal(mk_gguf_new(&g, NULL), 0);
	assert_int_equal(mk_gguf_kv_split(g, 1, 8, 111, NULL), 0);
	off = 24 + 22 + 35 + 25;                /* past the three pairs */
	for (uint64_t i = 0, nt = le(f + 8, 8); i < nt; i++) {
		char *name = str_at(f, &off);
		uint32_t nd = (uint32_t)le(f + off, 4);
		uint64_t ne[4];

		off += 4;
		for (uint32_t d = 0; d < nd; d++, off += 8)
			ne[d] = le(f + off, 8);
		assert_int_equal(mk_gguf_add_tensor(g, name, nd, ne,
						    (int)le(f + off, 4), NULL), 0);
		off += 12;
		free(name);
	}
	assert_int_equal(mk_gguf_header(g, &h, &hlen, NULL), 0);
	assert_int_equal(hlen, len);
	assert_memory_equal(h, f, len);
	free(h);
	mk_gguf_free(g);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reference_header),
		cmocka_unit_test(test_layout_by_hand),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_many_tensors),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_split_golden),
		cmocka_unit_test(test_split_shard_header),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
