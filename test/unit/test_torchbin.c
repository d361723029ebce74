/* test_torchbin.c - strided tensors: mk_st_tensor_extent and
 * mk_st_tensor_gather against an element-by-element reference, and
 * torch.save checkpoints with views and any top folder (.pt, .pth) read
 * by mk_torchbin_open / mk_torchbin_parse. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/safetensors.h"
#include "io/torchbin.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(uint64_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return n ? rng % n : 0;
}

/* element e's byte offset, the definition: begin + size * sum idx * stride */
static uint64_t ref_addr(const struct mk_st_tensor *t, uint64_t e)
{
	uint64_t at = 0;
	for (unsigned d = t->desc.ndim; d-- > 0;) {
		at += (e % t->desc.shape[d]) * t->stride[d];
		e /= t->desc.shape[d];
	}
	return t->begin + at * (mk_dtype_bits(t->desc.dtype) / 8);
}

static void test_gather_reference(void **state)
{
	static const enum mk_dtype dts[] = { MK_DT_U8, MK_DT_BF16, MK_DT_F32, MK_DT_F64 };
	uint8_t file[8192], out[4096], want[4096];
	struct mk_err err;

	(void)state;
	for (size_t i = 0; i < sizeof(file); i++)
		file[i] = (uint8_t)(i * 131 + (i >> 8));
	for (int iter = 0; iter < 3000; iter++) {
		struct mk_st_tensor t = { .name = "t" };
		uint64_t stride[4], es, maxoff = 0, lo, hi, e0, n, mn = UINT64_MAX, mx = 0;
		t.desc.dtype = dts[rnd(4)];
		es = mk_dtype_bits(t.desc.dtype) / 8;
		t.desc.ndim = 1 + (unsigned)rnd(4);
		t.nelem = 1;
		for (unsigned d = 0; d < t.desc.ndim; d++) {
			t.desc.shape[d] = 1 + rnd(5);
			/* transposes, slices, steps and stride 0 */
			stride[d] = rnd(4) == 0 ? 0 : rnd(9);
			t.nelem *= t.desc.shape[d];
			maxoff += (t.desc.shape[d] - 1) * stride[d];
		}
		t.stride = stride;
		t.begin = rnd(64) * es;
		t.end = t.begin + (maxoff + 1) * es;
		assert_true(t.end <= sizeof(file));
		e0 = rnd(t.nelem);
		n = 1 + rnd(t.nelem - e0);
		for (uint64_t e = e0; e < e0 + n; e++) {
			uint64_t a = ref_addr(&t, e);
			memcpy(want + (e - e0) * es, file + a, es);
			mn = a < mn ? a : mn;
			mx = a > mx ? a : mx;
		}
		mk_st_tensor_extent(&t, e0, n, &lo, &hi);
		assert_true(lo <= mn && hi >= mx + es && hi <= t.end && lo >= t.begin);
		if (t.desc.ndim == 2 && e0 % t.desc.shape[1] == 0 && n % t.desc.shape[1] == 0)
			assert_true(lo == mn && hi == mx + es); /* whole rows: exact */
		/* from the whole file, and from exactly the extent */
		memset(out, 0, sizeof(out));
		assert_int_equal(mk_st_tensor_gather(&t, e0, n, file, 0, sizeof(file), out, &err), 0);
		assert_memory_equal(out, want, n * es);
		memset(out, 0, sizeof(out));
		assert_int_equal(mk_st_tensor_gather(&t, e0, n, file + lo, lo, hi - lo, out, &err), 0);
		assert_memory_equal(out, want, n * es);
		/* a byte short at either end: refused, nothing read outside */
		assert_int_equal(mk_st_tensor_gather(&t, e0, n, file + lo, lo, hi - lo - 1, out, &err), -MK_EINVAL);
		assert_int_equal(mk_st_tensor_gather(&t, e0, n, file + lo + 1, lo + 1, hi - lo - 1, out, &err), -MK_EINVAL);
		assert_int_equal(mk_st_tensor_gather(&t, e0, t.nelem - e0 + 1, file, 0, sizeof(file), out, &err), -MK_EINVAL);
	}
}

static void test_contiguous_extent(void **state)
{
	struct mk_st_tensor t = { .name = "c", .desc = { .dtype = MK_DT_F32, .ndim = 2, .shape = { 3, 4 } }, .nelem = 12,
				  .begin = 100, .end = 148 };
	uint8_t file[200], out[48];
	uint64_t lo, hi;
	struct mk_err err;

	(void)state;
	for (int i = 0; i < 200; i++)
		file[i] = (uint8_t)i;
	mk_st_tensor_extent(&t, 5, 3, &lo, &hi);
	assert_int_equal(lo, 120);
	assert_int_equal(hi, 132);
	assert_int_equal(mk_st_tensor_gather(&t, 5, 3, file + 120, 120, 12, out, &err), 0);
	assert_memory_equal(out, file + 120, 12);
}

/* ---- a torch.save zip written here: TOP/data.pkl, TOP/data/0 ---- */

struct buf {
	uint8_t *b;
	size_t n, cap;
};
static void put(struct buf *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = 2 * (b->n + n);
		assert_non_null(b->b = realloc(b->b, b->cap));
	}
	memcpy(b->b + b->n, p, n);
	b->n += n;
}
static void put16(struct buf *b, uint32_t v)
{
	uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
	put(b, x, 2);
}
static void put32(struct buf *b, uint32_t v)
{
	put16(b, v & 0xffff);
	put16(b, v >> 16);
}
static void pstr(struct buf *b, const char *s)
{
	uint8_t op = 'X';
	put(b, &op, 1);
	put32(b, (uint32_t)strlen(s));
	put(b, s, strlen(s));
}
static void pint(struct buf *b, unsigned v)
{
	uint8_t op[2] = { 'K', (uint8_t)v };
	if (v < 256) {
		put(b, op, 2);
	} else {
		put(b, "J", 1);
		put32(b, v);
	}
}

/* the pickle of {'w': a FloatStorage of numel elements viewed at offset
 * with size (r, c) and stride (s0, s1)} */
static void pickle(struct buf *p, unsigned numel, unsigned off, unsigned r, unsigned c, unsigned s0, unsigned s1)
{
	static const char od[] = "ccollections\nOrderedDict\n";
	put(p, "\x80\x02", 2);
	put(p, od, sizeof(od) - 1);
	put(p, ")R", 2);
	pstr(p, "w");
	put(p, "ctorch._utils\n_rebuild_tensor_v2\n((", 35);
	pstr(p, "storage");
	put(p, "ctorch\nFloatStorage\n", 20);
	pstr(p, "0");
	pstr(p, "cpu");
	pint(p, numel);
	put(p, "tQ", 2);
	pint(p, off);
	put(p, "(", 1);
	pint(p, r);
	pint(p, c);
	put(p, "t(", 2);
	pint(p, s0);
	pint(p, s1);
	put(p, "t\x89", 2);
	put(p, od, sizeof(od) - 1);
	put(p, ")Rt", 3);
	put(p, "Rs.", 3);
}

static void zip(struct buf *z, const char *top, const struct buf *pkl, const void *data, size_t dlen)
{
	char names[2][64];
	const void *body[2] = { pkl->b, data };
	size_t len[2] = { pkl->n, dlen }, at[2], cd;

	snprintf(names[0], 64, "%s/data.pkl", top);
	snprintf(names[1], 64, "%s/data/0", top);
	for (int i = 0; i < 2; i++) {
		at[i] = z->n;
		put32(z, 0x04034b50);
		put16(z, 20), put16(z, 0), put16(z, 0), put16(z, 0), put16(z, 0);
		put32(z, 0), put32(z, (uint32_t)len[i]), put32(z, (uint32_t)len[i]);
		put16(z, (uint32_t)strlen(names[i])), put16(z, 0);
		put(z, names[i], strlen(names[i]));
		put(z, body[i], len[i]);
	}
	cd = z->n;
	for (int i = 0; i < 2; i++) {
		put32(z, 0x02014b50);
		put16(z, 20), put16(z, 20), put16(z, 0), put16(z, 0), put16(z, 0), put16(z, 0);
		put32(z, 0), put32(z, (uint32_t)len[i]), put32(z, (uint32_t)len[i]);
		put16(z, (uint32_t)strlen(names[i])), put16(z, 0), put16(z, 0), put16(z, 0), put16(z, 0);
		put32(z, 0), put32(z, (uint32_t)at[i]);
		put(z, names[i], strlen(names[i]));
	}
	size_t cdlen = z->n - cd;
	put32(z, 0x06054b50);
	put16(z, 0), put16(z, 0), put16(z, 2), put16(z, 2);
	put32(z, (uint32_t)cdlen), put32(z, (uint32_t)cd), put16(z, 0);
}

/* w = the 3x4 matrix m saved transposed (the storage holds m^T at offset
 * 1), in a file named NAME with top folder TOP, as torch.save does */
static void check_open(const char *name, const char *top)
{
	struct buf p = { 0 }, z = { 0 };
	float st[1 + 12], m[3][4], got[12];
	char dir[] = "/tmp/mk-test-torchbin.XXXXXX", path[128];
	struct mk_st_file *f = NULL;
	struct mk_err err;
	FILE *fp;

	st[0] = -1;
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 4; c++)
			m[r][c] = (float)(10 * r + c), st[1 + c * 3 + r] = m[r][c];
	pickle(&p, 13, 1, 3, 4, 1, 3);
	zip(&z, top, &p, st, sizeof(st));
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_non_null(fp = fopen(path, "wb"));
	assert_int_equal(fwrite(z.b, 1, z.n, fp), z.n);
	fclose(fp);
	assert_int_equal(mk_torchbin_open(path, &f, &err), 0);
	assert_int_equal(f->ntensors, 1);
	const struct mk_st_tensor *t = mk_st_find(f, "w");
	assert_non_null(t);
	assert_int_equal(t->desc.ndim, 2);
	assert_int_equal(t->desc.shape[0], 3);
	assert_int_equal(t->desc.shape[1], 4);
	assert_non_null(t->stride);
	assert_int_equal(t->stride[0], 1);
	assert_int_equal(t->stride[1], 3);
	assert_int_equal(t->end - t->begin, 12 * 4);
	/* the values from the file's bytes as read */
	uint8_t *all = malloc(z.n);
	fp = fopen(path, "rb");
	assert_int_equal(fread(all, 1, z.n, fp), z.n);
	fclose(fp);
	assert_int_equal(mk_st_tensor_gather(t, 0, 12, all + t->begin, t->begin, t->end - t->begin, got, &err), 0);
	assert_memory_equal(got, m, sizeof(m));
	free(all);
	mk_st_file_free(f);
	unlink(path);
	rmdir(dir);
	free(p.b);
	free(z.b);
}

static void test_open_pt(void **state)
{
	(void)state;
	check_open("model.pt", "model");
	check_open("weights.v2.pth", "weights.v2");
	check_open("pytorch_model.bin", "archive");
}

/* mk_torchbin_parse of a zip (top folder TOP, named NAME) holding the
 * float storage data (dlen bytes) viewed as pickle() says */
static int parse_view(const char *name, const char *top, unsigned numel, unsigned off, unsigned r,
		      unsigned c, unsigned s0, unsigned s1, const void *data, size_t dlen,
		      struct mk_st_file **f, struct mk_err *err)
{
	struct buf p = { 0 }, z = { 0 };
	int rc;

	pickle(&p, numel, off, r, c, s0, s1);
	zip(&z, top, &p, data, dlen);
	rc = mk_torchbin_parse(z.b, z.n, name, f, err);
	free(p.b);
	free(z.b);
	return rc;
}

static void test_views(void **state)
{
	float st[64] = { 0 };
	struct mk_st_file *f = NULL;
	struct mk_err err;

	(void)state;
	/* contiguous (any stride on a dimension of size 1): no strides */
	assert_int_equal(parse_view("c.pt", "a", 64, 3, 1, 8, 77, 1, st, sizeof(st), &f, &err), 0);
	assert_null(f->tensors[0].stride);
	assert_int_equal(f->tensors[0].end - f->tensors[0].begin, 32);
	mk_st_file_free(f);
	/* expanded: stride 0, eight bytes of storage for 4x2 floats */
	assert_int_equal(parse_view("e.pt", "a", 64, 0, 4, 2, 0, 1, st, sizeof(st), &f, &err), 0);
	assert_non_null(f->tensors[0].stride);
	assert_int_equal(f->tensors[0].end - f->tensors[0].begin, 8);
	mk_st_file_free(f);
	/* past the storage's end: refused */
	assert_int_equal(parse_view("p.pt", "a", 64, 10, 2, 2, 60, 1, st, sizeof(st), &f, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "past the end of its storage"));
}

/* a view spread over far more storage than its bytes: refused, naming it */
static void test_view_too_wide(void **state)
{
	size_t dlen = 24u << 20;
	uint8_t *data = calloc(1, dlen);
	struct mk_st_file *f = NULL;
	struct mk_err err;

	(void)state;
	assert_non_null(data);
	/* (2, 2) floats of stride (5Mi, 1): the rows 20 MiB apart */
	assert_int_equal(parse_view("wide.pt", "w", (unsigned)(dlen / 4), 0, 2, 2, 5u << 20, 1, data, dlen, &f, &err),
			 -MK_EUNSUPPORTED);
	assert_null(f);
	assert_non_null(strstr(err.msg, "wide.pt: tensor 'w' is a view (stride (5242880, 1)) of 16 bytes spread over"));
	assert_non_null(strstr(err.msg, ".contiguous()"));
	/* 4 MiB apart: read */
	assert_int_equal(parse_view("wide.pt", "w", (unsigned)(dlen / 4), 0, 2, 2, 1u << 20, 1, data, dlen, &f, &err), 0);
	mk_st_file_free(f);
	free(data);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gather_reference),
		cmocka_unit_test(test_contiguous_extent),
		cmocka_unit_test(test_open_pt),
		cmocka_unit_test(test_views),
		cmocka_unit_test(test_view_too_wide),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
