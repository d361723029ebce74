/* test_stream.c - the mk stream: chunker, frames (writer and reader),
 * reader errors, FILE and DATA payloads (HEAD and JOB frames:
 * test_stream_head.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <jansson.h>
#include <zstd.h>
#include "core/hash.h"
#include "stream/manifest.h"
#include "stream/job.h"
#include "mk/stream.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* ------------------------------------------------------------- helpers */

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int new_memfd(void)
{
	int fd = memfd_create("test_stream", 0);
	assert_true(fd >= 0);
	return fd;
}

/* The whole content of fd (from offset 0) into a malloc'ed buffer. */
static uint8_t *slurp(int fd, size_t *len)
{
	off_t end = lseek(fd, 0, SEEK_END);
	uint8_t *b;

	assert_true(end >= 0);
	b = malloc((size_t)end + 1);
	assert_non_null(b);
	assert_int_equal(pread(fd, b, (size_t)end, 0), end);
	*len = (size_t)end;
	return b;
}

/* A memfd holding `len` bytes, positioned at 0. */
static int fd_of(const void *buf, size_t len)
{
	int fd = new_memfd();
	if (len)
		assert_int_equal(write(fd, buf, len), (ssize_t)len);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

/* Append a hand-made frame to buf at *off (checksum correct). */
static void raw_frame(uint8_t *buf, size_t *off, const char *type, uint8_t flags, uint8_t csum,
		      const void *payload, uint64_t len, uint64_t raw_len)
{
	uint8_t *h = buf + *off;
	memset(h, 0, MK_FRAME_HDR);
	memcpy(h, type, 4);
	h[4] = flags;
	h[5] = csum;
	put64(h + 8, len);
	put64(h + 16, raw_len);
	if (len)
		memcpy(h + MK_FRAME_HDR, payload, len);
	put32(h + 24, mk_crc32c(0, h, MK_FRAME_HDR + len));
	*off += MK_FRAME_HDR + len;
}

static void write_prelude(uint8_t *buf, size_t *off)
{
	memset(buf, 0, MK_STREAM_PRELUDE);
	memcpy(buf, MK_STREAM_MAGIC, 8);
	buf[8] = MK_STREAM_MAJOR;
	*off = MK_STREAM_PRELUDE;
}

/* Read a stream from memory to the end.  Returns the final code (0 after
 * END, or the negative error), the number of frames returned in *nframes. */
static int read_stream(const uint8_t *buf, size_t len, unsigned flags, int *nframes,
		       struct mk_err *err)
{
	struct mk_stream_reader *r;
	struct mk_frame f;
	int fd = fd_of(buf, len), rc, n = 0;

	mk_err_clear(err);
	rc = mk_sr_open(&r, fd, "t", flags, err);
	if (rc == 0) {
		while ((rc = mk_sr_next(r, &f, err)) == 1)
			n++;
		mk_sr_free(r);
	} else {
		assert_null(r);
	}
	close(fd);
	if (nframes)
		*nframes = n;
	return rc;
}

static void assert_msg(const struct mk_err *err, const char *sub)
{
	if (!strstr(err->msg, sub))
		fail_msg("message '%s' lacks '%s'", err->msg, sub);
}

static const char head_json[] =
	"{\"kind\":\"tensors\",\"producer\":\"test\",\"chunk_bytes\":64,"
	"\"tensors\":[{\"name\":\"w\",\"dtype\":\"F32\",\"shape\":[4]}],\"files\":[]}";

/* A valid stream: HEAD, note, DATA (16 bytes of F32), END.  Frame offsets
 * (from the start of the buffer) go to off[0..3] when off is not NULL. */
static uint8_t *sample_stream(size_t *len, size_t off[4])
{
	struct mk_stream_writer *w;
	struct mk_err err;
	float data[4] = { 1, 2, 3, 4 };
	struct mk_chunk c = { .dtype = MK_DT_F32, .row_count = 4, .elem_count = 4,
			      .data = data, .data_len = sizeof(data) };
	int fd = new_memfd();
	size_t o[4];

	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	o[0] = (size_t)mk_sw_bytes(w);
	assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, head_json, strlen(head_json), &err), 0);
	o[1] = (size_t)mk_sw_bytes(w);
	assert_int_equal(mk_sw_frame1(w, MK_FT_NOTE, "hello", 5, &err), 0);
	o[2] = (size_t)mk_sw_bytes(w);
	assert_int_equal(mk_sw_chunk(w, MK_FT_DATA, &c, &err), 0);
	o[3] = (size_t)mk_sw_bytes(w);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	uint8_t *b = slurp(fd, len);
	close(fd);
	if (off)
		memcpy(off, o, sizeof(o));
	return b;
}

/* ------------------------------------------------------------- chunker */

#define MAXCH 64

static size_t collect(enum mk_dtype dt, unsigned ndim, const uint64_t *shape, size_t max_bytes,
		      struct mk_chunk *ch)
{
	struct mk_chunker ck;
	struct mk_err err;
	size_t n = 0;

	assert_int_equal(mk_chunker_init(&ck, dt, ndim, shape, max_bytes, &err), 0);
	while (n < MAXCH && mk_chunker_next(&ck, &ch[n]) == 1)
		n++;
	assert_true(n < MAXCH);
	assert_int_equal(mk_chunker_next(&ck, &ch[n]), 0); /* stays done */
	return n;
}

/* Invariants every split satisfies: chunks cover [0, nelem) once, in
 * order; whole bytes; at most max_bytes; row fields consistent. */
static void check_cover(enum mk_dtype dt, unsigned ndim, const uint64_t *shape, size_t max_bytes,
			const struct mk_chunk *ch, size_t n)
{
	uint64_t nelem = 1, row_len = 1, next = 0, nb;
	unsigned g = mk_dtype_elem_granule(dt);

	for (unsigned i = 0; i < ndim; i++)
		nelem *= shape[i];
	for (unsigned i = 1; i < ndim; i++)
		row_len *= shape[i];
	for (size_t i = 0; i < n; i++) {
		uint64_t end = ch[i].elem_begin + ch[i].elem_count;
		assert_int_equal(ch[i].dtype, dt);
		assert_int_equal(ch[i].elem_begin, next);
		assert_true(ch[i].elem_count > 0);
		assert_int_equal(ch[i].elem_begin % g, 0);
		assert_int_equal(mk_dtype_nbytes(dt, ch[i].elem_count, &nb), 0);
		assert_true(nb <= max_bytes);
		assert_int_equal(ch[i].row_begin, ch[i].elem_begin / row_len);
		assert_int_equal(ch[i].row_count, (end + row_len - 1) / row_len - ch[i].row_begin);
		next = end;
	}
	assert_int_equal(next, nelem);
}

static void expect_chunk(const struct mk_chunk *c, uint64_t eb, uint64_t ec, uint64_t rb, uint64_t rc)
{
	assert_int_equal(c->elem_begin, eb);
	assert_int_equal(c->elem_count, ec);
	assert_int_equal(c->row_begin, rb);
	assert_int_equal(c->row_count, rc);
}

static void test_chunker_whole_rows(void **state)
{
	struct mk_chunk ch[MAXCH];
	uint64_t shape[2] = { 10, 8 };  /* BF16 rows of 16 bytes */
	size_t n = collect(MK_DT_BF16, 2, shape, 48, ch);

	assert_int_equal(n, 4);
	expect_chunk(&ch[0], 0, 24, 0, 3);
	expect_chunk(&ch[1], 24, 24, 3, 3);
	expect_chunk(&ch[2], 48, 24, 6, 3);
	expect_chunk(&ch[3], 72, 8, 9, 1);
	check_cover(MK_DT_BF16, 2, shape, 48, ch, n);
	/* 50 bytes: still 3 rows (a chunk never holds part of a row here) */
	n = collect(MK_DT_BF16, 2, shape, 50, ch);
	assert_int_equal(n, 4);
	expect_chunk(&ch[0], 0, 24, 0, 3);
	/* everything fits one chunk */
	n = collect(MK_DT_BF16, 2, shape, 1 << 20, ch);
	assert_int_equal(n, 1);
	expect_chunk(&ch[0], 0, 80, 0, 10);
	/* 3-D: a row is shape[1]*shape[2] elements */
	uint64_t s3[3] = { 4, 2, 3 };
	n = collect(MK_DT_BF16, 3, s3, 24, ch);
	assert_int_equal(n, 2);
	expect_chunk(&ch[0], 0, 12, 0, 2);
	expect_chunk(&ch[1], 12, 12, 2, 2);
	check_cover(MK_DT_BF16, 3, s3, 24, ch, n);
}

static void test_chunker_long_rows(void **state)
{
	struct mk_chunk ch[MAXCH];
	uint64_t shape[2] = { 3, 10 };  /* BF16 rows of 20 bytes, chunks of 8 */
	size_t n = collect(MK_DT_BF16, 2, shape, 8, ch);
	static const uint64_t want[9][2] = { { 0, 4 }, { 4, 4 }, { 8, 2 }, { 10, 4 }, { 14, 4 },
					     { 18, 2 }, { 20, 4 }, { 24, 4 }, { 28, 2 } };

	assert_int_equal(n, 9);
	for (size_t i = 0; i < n; i++)
		expect_chunk(&ch[i], want[i][0], want[i][1], i / 3, 1);
	check_cover(MK_DT_BF16, 2, shape, 8, ch, n);
	/* odd budget: 9 bytes still hold 4 BF16 elements */
	n = collect(MK_DT_BF16, 2, shape, 9, ch);
	assert_int_equal(n, 9);
	expect_chunk(&ch[2], 8, 2, 0, 1);
}

static void test_chunker_1d_scalar_empty(void **state)
{
	struct mk_chunk ch[MAXCH];
	struct mk_chunker ck;
	struct mk_err err;
	uint64_t s1[1] = { 10 };
	size_t n = collect(MK_DT_F32, 1, s1, 16, ch);

	assert_int_equal(n, 3);
	expect_chunk(&ch[0], 0, 4, 0, 4);
	expect_chunk(&ch[1], 4, 4, 4, 4);
	expect_chunk(&ch[2], 8, 2, 8, 2);
	check_cover(MK_DT_F32, 1, s1, 16, ch, n);

	/* scalar: shape [], one element in one chunk */
	n = collect(MK_DT_F32, 0, NULL, 16, ch);
	assert_int_equal(n, 1);
	expect_chunk(&ch[0], 0, 1, 0, 1);
	assert_int_equal(ch[0].dtype, MK_DT_F32);
	/* a scalar with a chunk of exactly its size */
	n = collect(MK_DT_F64, 0, NULL, 8, ch);
	assert_int_equal(n, 1);

	/* empty tensors: no chunk at all */
	uint64_t e1[2] = { 0, 4 }, e2[2] = { 4, 0 }, e3[1] = { 0 }, e4[3] = { 0, 1ull << 40, 1ull << 40 };
	assert_int_equal(collect(MK_DT_BF16, 2, e1, 16, ch), 0);
	assert_int_equal(collect(MK_DT_BF16, 2, e2, 16, ch), 0);
	assert_int_equal(collect(MK_DT_BF16, 1, e3, 16, ch), 0);
	assert_int_equal(collect(MK_DT_F4, 3, e4, 16, ch), 0);

	/* an overflowing shape is an error, not a wrapped size */
	uint64_t big[2] = { 1ull << 40, 1ull << 40 };
	assert_int_equal(mk_chunker_init(&ck, MK_DT_BF16, 2, big, 16, &err), -MK_EFORMAT);
	assert_msg(&err, "overflow");
	/* an unknown dtype */
	assert_int_equal(mk_chunker_init(&ck, MK_DT_COUNT, 1, s1, 16, &err), -MK_EINVAL);
}

static void test_chunker_f4_odd_rows(void **state)
{
	struct mk_chunk ch[MAXCH];
	struct mk_chunker ck;
	struct mk_err err;
	uint64_t shape[2] = { 4, 5 };   /* rows of 2.5 bytes: flat chunks */
	size_t n = collect(MK_DT_F4, 2, shape, 3, ch);

	assert_int_equal(n, 4);
	expect_chunk(&ch[0], 0, 6, 0, 2);
	expect_chunk(&ch[1], 6, 6, 1, 2);
	expect_chunk(&ch[2], 12, 6, 2, 2);
	expect_chunk(&ch[3], 18, 2, 3, 1);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(ch[i].elem_count % 2, 0);
	check_cover(MK_DT_F4, 2, shape, 3, ch, n);

	/* even rows: whole rows again (a row of 6 F4 is 3 bytes) */
	uint64_t s2[2] = { 4, 6 };
	n = collect(MK_DT_F4, 2, s2, 7, ch);
	assert_int_equal(n, 2);
	expect_chunk(&ch[0], 0, 12, 0, 2);
	expect_chunk(&ch[1], 12, 12, 2, 2);

	/* an odd number of F4 elements is not whole bytes */
	uint64_t s3[2] = { 3, 5 };
	assert_int_equal(mk_chunker_init(&ck, MK_DT_F4, 2, s3, 64, &err), -MK_EFORMAT);
	assert_msg(&err, "whole number of bytes");
}

static void test_chunker_f6(void **state)
{
	struct mk_chunk ch[MAXCH];
	uint64_t flat[2] = { 8, 3 };    /* rows of 18 bits: flat chunks of 4 elements */
	size_t n = collect(MK_DT_F6_E2M3, 2, flat, 4, ch);

	assert_int_equal(n, 6);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(ch[i].elem_begin, 4 * i);
		assert_int_equal(ch[i].elem_count, 4);
	}
	expect_chunk(&ch[1], 4, 4, 1, 2);
	check_cover(MK_DT_F6_E2M3, 2, flat, 4, ch, n);

	uint64_t rows[2] = { 2, 8 };    /* rows of 6 bytes; 7 bytes hold one row */
	n = collect(MK_DT_F6_E3M2, 2, rows, 7, ch);
	assert_int_equal(n, 2);
	expect_chunk(&ch[0], 0, 8, 0, 1);
	expect_chunk(&ch[1], 8, 8, 1, 1);

	uint64_t lng[2] = { 1, 16 };    /* one row of 12 bytes in 7-byte chunks */
	n = collect(MK_DT_F6_E2M3, 2, lng, 7, ch);
	assert_int_equal(n, 2);
	expect_chunk(&ch[0], 0, 8, 0, 1);
	expect_chunk(&ch[1], 8, 8, 0, 1);
	check_cover(MK_DT_F6_E2M3, 2, lng, 7, ch, n);
}

static void test_chunker_too_small(void **state)
{
	struct mk_chunker ck;
	struct mk_err err;
	uint64_t shape[2] = { 2, 8 };

	assert_int_equal(mk_chunker_init(&ck, MK_DT_BF16, 2, shape, 1, &err), -MK_EINVAL);
	assert_msg(&err, "too small");
	assert_int_equal(mk_chunker_init(&ck, MK_DT_F32, 2, shape, 3, &err), -MK_EINVAL);
	assert_int_equal(mk_chunker_init(&ck, MK_DT_F32, 2, shape, 0, &err), -MK_EINVAL);
	/* F6: 2 bytes hold 2 elements, below the granule of 4 */
	assert_int_equal(mk_chunker_init(&ck, MK_DT_F6_E2M3, 2, shape, 2, &err), -MK_EINVAL);
	assert_msg(&err, "too small");
	assert_int_equal(mk_chunker_init(&ck, MK_DT_F6_E2M3, 2, shape, 3, &err), 0);
	assert_int_equal(mk_chunker_init(&ck, MK_DT_F4, 2, shape, 1, &err), 0);
	assert_int_equal(mk_chunker_init(&ck, MK_DT_U8, 2, shape, 1, &err), 0);
}

/* A chunk size beyond 2^61 bytes must not wrap to "too small". */
static void test_chunker_huge_chunk_size(void **state)
{
	struct mk_chunk ch[MAXCH];
	uint64_t shape[2] = { 3, 5 };

	if (sizeof(size_t) < 8)
		skip();
	size_t n = collect(MK_DT_BF16, 2, shape, (size_t)1 << 61, ch);
	assert_int_equal(n, 1);
	expect_chunk(&ch[0], 0, 15, 0, 3);
	n = collect(MK_DT_BF16, 2, shape, SIZE_MAX, ch);
	assert_int_equal(n, 1);
}

/* The split depends only on (shape, dtype, max_bytes): a reused chunker
 * struct, another run, or a copy of the shape give the same chunks. */
static void test_chunker_deterministic(void **state)
{
	static const struct { enum mk_dtype dt; unsigned ndim; uint64_t shape[3]; size_t max; } cases[] = {
		{ MK_DT_BF16, 2, { 10, 8 }, 48 }, { MK_DT_BF16, 2, { 3, 10 }, 8 },
		{ MK_DT_F4, 2, { 4, 5 }, 3 },     { MK_DT_F6_E2M3, 2, { 8, 3 }, 4 },
		{ MK_DT_F32, 1, { 37 }, 20 },     { MK_DT_I8, 3, { 5, 3, 7 }, 30 },
		{ MK_DT_F64, 0, { 0 }, 8 },
	};
	struct mk_chunk a[MAXCH], b[MAXCH];
	struct mk_chunker ck;
	struct mk_err err;

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		uint64_t copy[3];
		memcpy(copy, cases[k].shape, sizeof(copy));
		size_t n = collect(cases[k].dt, cases[k].ndim, cases[k].shape, cases[k].max, a);
		check_cover(cases[k].dt, cases[k].ndim, cases[k].shape, cases[k].max, a, n);
		/* a used chunker, re-initialised */
		assert_int_equal(mk_chunker_init(&ck, MK_DT_U8, 1, (uint64_t[]){ 3 }, 1, &err), 0);
		assert_int_equal(mk_chunker_next(&ck, &b[0]), 1);
		assert_int_equal(mk_chunker_init(&ck, cases[k].dt, cases[k].ndim, copy, cases[k].max, &err), 0);
		size_t m = 0;
		memset(b, 0xa5, sizeof(b));
		while (mk_chunker_next(&ck, &b[m]) == 1)
			m++;
		assert_int_equal(m, n);
		for (size_t i = 0; i < n; i++) {
			assert_int_equal(a[i].elem_begin, b[i].elem_begin);
			assert_int_equal(a[i].elem_count, b[i].elem_count);
			assert_int_equal(a[i].row_begin, b[i].row_begin);
			assert_int_equal(a[i].row_count, b[i].row_count);
		}
	}
}

/* -------------------------------------------------------------- frames */

static void test_frames_roundtrip(void **state)
{
	struct mk_stream_writer *w;
	struct mk_stream_reader *r;
	struct mk_frame f;
	struct mk_chunk c, d;
	struct mk_file_frame ff;
	struct mk_err err;
	uint8_t data[40], cfg[] = "{\"hidden\": 8}";
	int fds[2];

	for (int i = 0; i < 40; i++)
		data[i] = (uint8_t)(i * 7 + 1);
	/* through a pipe: the stream is small enough for its buffer */
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(mk_sw_open(&w, fds[1], 0, &err), 0);
	assert_int_equal(mk_sw_bytes(w), MK_STREAM_PRELUDE);
	assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, head_json, strlen(head_json), &err), 0);
	assert_int_equal(mk_sw_bytes(w), MK_STREAM_PRELUDE + MK_FRAME_HDR + strlen(head_json));
	assert_int_equal(mk_sw_file(w, "config.json", 0644, cfg, sizeof(cfg) - 1, &err), 0);
	memset(&c, 0, sizeof(c));
	c.id = 7;
	c.dtype = MK_DT_BF16;
	c.row_begin = 2;
	c.row_count = 3;
	c.elem_begin = 16;
	c.elem_count = 20;
	c.data = data;
	c.data_len = sizeof(data);
	assert_int_equal(mk_sw_chunk(w, MK_FT_DATA, &c, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_NOTE, "a note", 6, &err), 0);
	c.input = 3;
	c.pass = 1;
	assert_int_equal(mk_sw_chunk(w, MK_FT_INPT, &c, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_JOB, "{}", 2, &err), 0);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	close(fds[1]);

	assert_int_equal(mk_sr_open(&r, fds[0], "pipe", 0, &err), 0);
	static const char *const types[] = { "HEAD", "FILE", "DATA", "note", "INPT", "JOB ", "END " };
	for (int i = 0; i < 7; i++) {
		assert_int_equal(mk_sr_next(r, &f, &err), 1);
		assert_string_equal(f.type, types[i]);
		assert_int_equal(f.index, i);
		assert_true(f.csum_ok);
		assert_int_equal(f.flags, 0);
		assert_int_equal(f.csum, MK_CSUM_CRC32C);
		assert_int_equal(f.critical, i != 3);
		assert_int_equal(f.len, f.payload_len);
		assert_int_equal(f.raw_len, f.payload_len);
		assert_int_equal(f.wire_len, MK_FRAME_HDR + f.len);
		assert_memory_equal(f.wire, types[i], 4);
		assert_ptr_equal(f.payload, f.wire + MK_FRAME_HDR);
		switch (i) {
		case 0:
			assert_int_equal(f.payload_len, strlen(head_json));
			assert_memory_equal(f.payload, head_json, f.payload_len);
			break;
		case 1:
			assert_int_equal(mk_file_decode(f.payload, f.payload_len, &ff, &err), 0);
			assert_string_equal(ff.name, "config.json");
			assert_int_equal(ff.mode, 0644);
			assert_int_equal(ff.len, sizeof(cfg) - 1);
			assert_memory_equal(ff.data, cfg, ff.len);
			free(ff.name);
			break;
		case 2:
		case 4:
			assert_int_equal(f.payload_len, MK_CHUNK_HDR + sizeof(data));
			assert_int_equal(mk_chunk_decode(f.payload, f.payload_len, &d, &err), 0);
			assert_int_equal(d.id, 7);
			assert_int_equal(d.input, i == 4 ? 3 : 0);
			assert_int_equal(d.pass, i == 4 ? 1 : 0);
			assert_int_equal(d.dtype, MK_DT_BF16);
			assert_int_equal(d.row_begin, 2);
			assert_int_equal(d.row_count, 3);
			assert_int_equal(d.elem_begin, 16);
			assert_int_equal(d.elem_count, 20);
			assert_int_equal(d.data_len, sizeof(data));
			assert_memory_equal(d.data, data, sizeof(data));
			break;
		case 3:
			assert_int_equal(f.payload_len, 6);
			assert_memory_equal(f.payload, "a note", 6);
			break;
		case 5:
			assert_memory_equal(f.payload, "{}", 2);
			break;
		case 6: {
			json_t *o = json_loadb((const char *)f.payload, f.payload_len, 0, NULL);
			assert_non_null(o);
			assert_int_equal(json_integer_value(json_object_get(o, "frames")), 6);
			assert_int_equal(json_integer_value(json_object_get(o, "files")), 1);
			assert_int_equal(json_integer_value(json_object_get(o, "jobs")), 1);
			assert_int_equal(json_integer_value(json_object_get(o, "chunks")), 2);
			assert_int_equal(json_integer_value(json_object_get(o, "ancillary")), 1);
			assert_int_equal(json_integer_value(json_object_get(o, "data_bytes")), 80);
			json_decref(o);
			break;
		}
		}
	}
	assert_int_equal(mk_sr_next(r, &f, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 0);
	mk_sr_free(r);
	close(fds[0]);
}

/* A stream larger than any pipe buffer, written by a child process: the
 * reader assembles frames from partial reads. */
static void test_frames_large_pipe(void **state)
{
	size_t n = 3u << 20;
	uint8_t *big = malloc(n);
	struct mk_stream_reader *r;
	struct mk_frame f;
	struct mk_err err;
	int fds[2], st;
	pid_t pid;

	assert_non_null(big);
	for (size_t i = 0; i < n; i++)
		big[i] = (uint8_t)(i * 2654435761u >> 13);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mk_stream_writer *w;
		close(fds[0]);
		if (mk_sw_open(&w, fds[1], 0, &err) || mk_sw_frame1(w, "bigx", big, n, &err) ||
		    mk_sw_frame1(w, MK_FT_NOTE, big, 100, &err) || mk_sw_end(w, &err))
			_exit(1);
		mk_sw_free(w);
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(mk_sr_open(&r, fds[0], "pipe", 0, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "bigx");
	assert_false(f.critical);
	assert_int_equal(f.payload_len, n);
	assert_memory_equal(f.payload, big, n);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_int_equal(f.index, 1);
	assert_memory_equal(f.payload, big, 100);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "END ");
	assert_int_equal(mk_sr_next(r, &f, &err), 0);
	mk_sr_free(r);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	free(big);
}

/* Frames passed through with mk_sw_pass are byte-identical; a stream
 * copied frame by frame (END rewritten by the writer) equals the input. */
static void test_frames_pass_through(void **state)
{
	for (int level = 0; level <= 3; level += 3) {
		struct mk_stream_writer *w;
		struct mk_stream_reader *r;
		struct mk_frame f;
		struct mk_err err;
		uint8_t zeros[300] = { 0 };
		struct mk_chunk c = { .dtype = MK_DT_U8, .row_count = 300, .elem_count = 300,
				      .data = zeros, .data_len = sizeof(zeros) };
		int in = new_memfd(), out = new_memfd();
		size_t alen, blen;

		assert_int_equal(mk_sw_open(&w, in, level, &err), 0);
		assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, head_json, strlen(head_json), &err), 0);
		assert_int_equal(mk_sw_chunk(w, MK_FT_DATA, &c, &err), 0);
		assert_int_equal(mk_sw_frame1(w, "zzzz", "ancillary", 9, &err), 0);
		assert_int_equal(mk_sw_file(w, "a/b.json", 0600, zeros, 100, &err), 0);
		assert_int_equal(mk_sw_end(w, &err), 0);
		mk_sw_free(w);

		assert_int_equal(lseek(in, 0, SEEK_SET), 0);
		assert_int_equal(mk_sr_open(&r, in, "in", 0, &err), 0);
		assert_int_equal(mk_sw_open(&w, out, 0, &err), 0);  /* level of the copy is irrelevant */
		uint64_t idx = 0;
		while (mk_sr_next(r, &f, &err) == 1) {
			assert_int_equal(f.index, idx++);
			if (!strcmp(f.type, MK_FT_END))
				continue;
			uint64_t before = mk_sw_bytes(w);
			assert_int_equal(mk_sw_pass(w, &f, &err), 0);
			assert_int_equal(mk_sw_bytes(w) - before, f.wire_len);
			uint8_t *copy = malloc(f.wire_len);
			assert_non_null(copy);
			assert_int_equal(pread(out, copy, f.wire_len, (off_t)before), (ssize_t)f.wire_len);
			assert_memory_equal(copy, f.wire, f.wire_len);
			free(copy);
		}
		assert_int_equal(idx, 5);
		assert_int_equal(mk_sw_end(w, &err), 0);
		mk_sw_free(w);
		mk_sr_free(r);
		uint8_t *a = slurp(in, &alen), *b = slurp(out, &blen);
		assert_int_equal(alen, blen);
		assert_memory_equal(a, b, alen);
		free(a);
		free(b);
		close(in);
		close(out);
	}
}

static void test_frames_compressed(void **state)
{
	struct mk_stream_writer *w;
	struct mk_stream_reader *r;
	struct mk_frame f;
	struct mk_chunk c, d;
	struct mk_err err;
	size_t n = 4096, blen;
	uint8_t *text = malloc(n), *noise = malloc(n), *b;
	uint32_t x = 12345;
	int fd = new_memfd();

	assert_non_null(text);
	assert_non_null(noise);
	for (size_t i = 0; i < n; i++) {
		text[i] = (uint8_t)"the quick brown fox "[i % 20];
		x = x * 1664525u + 1013904223u;
		noise[i] = (uint8_t)(x >> 24);
	}
	memset(&c, 0, sizeof(c));
	c.dtype = MK_DT_BF16;
	c.row_count = 1;
	c.elem_count = n / 2;
	c.data = text;
	c.data_len = n;
	assert_int_equal(mk_sw_open(&w, fd, 3, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, text, n, &err), 0);    /* compressible */
	assert_int_equal(mk_sw_frame1(w, MK_FT_NOTE, noise, n, &err), 0);   /* incompressible */
	assert_int_equal(mk_sw_chunk(w, MK_FT_DATA, &c, &err), 0);          /* two pieces */
	assert_int_equal(mk_sw_frame1(w, MK_FT_JOB, text, 63, &err), 0);    /* too small */
	assert_int_equal(mk_sw_frame1(w, MK_FT_JOB, "", 0, &err), 0);       /* empty */
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	b = slurp(fd, &blen);
	assert_true(blen < n + 1000);   /* the noise frame dominates */
	free(b);

	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(mk_sr_open(&r, fd, "z", 0, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_int_equal(f.flags, MK_FRAME_F_ZSTD);
	assert_int_equal(f.wire[4], MK_FRAME_F_ZSTD);
	assert_true(f.len < n / 4);
	assert_int_equal(f.raw_len, n);
	assert_int_equal(f.wire_len, MK_FRAME_HDR + f.len);
	assert_int_equal(f.payload_len, n);
	assert_memory_equal(f.payload, text, n);

	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_int_equal(f.flags, 0);
	assert_int_equal(f.len, n);
	assert_memory_equal(f.payload, noise, n);

	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "DATA");
	assert_int_equal(f.flags, MK_FRAME_F_ZSTD);
	assert_int_equal(f.payload_len, MK_CHUNK_HDR + n);
	assert_int_equal(mk_chunk_decode(f.payload, f.payload_len, &d, &err), 0);
	assert_int_equal(d.elem_count, n / 2);
	assert_memory_equal(d.data, text, n);

	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_int_equal(f.flags, 0);
	assert_int_equal(f.payload_len, 63);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_int_equal(f.flags, 0);
	assert_int_equal(f.payload_len, 0);

	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "END ");
	assert_int_equal(f.flags, 0);   /* END stays readable */
	assert_int_equal(f.index, 5);
	assert_int_equal(mk_sr_next(r, &f, &err), 0);
	mk_sr_free(r);
	close(fd);
	free(text);
	free(noise);
}

static void test_sw_file_bad_name(void **state)
{
	struct mk_stream_writer *w;
	struct mk_err err;
	int fd = new_memfd();

	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	assert_int_equal(mk_sw_file(w, "../etc/passwd", 0644, "x", 1, &err), -MK_EFORMAT);
	assert_msg(&err, "'..'");
	assert_int_equal(mk_sw_bytes(w), MK_STREAM_PRELUDE);   /* nothing written */
	assert_int_equal(mk_sw_file(w, "./x", 0644, "x", 1, &err), -MK_EFORMAT);
	assert_int_equal(mk_sw_file(w, "", 0644, "x", 1, &err), -MK_EFORMAT);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	size_t len;
	int nf;
	uint8_t *b = slurp(fd, &len);
	assert_int_equal(read_stream(b, len, 0, &nf, &err), 0);
	assert_int_equal(nf, 1);   /* END only, counting no FILE */
	free(b);
	close(fd);
}

static void test_frame_type_known(void **state)
{
	assert_true(mk_frame_type_known("HEAD"));
	assert_true(mk_frame_type_known("FILE"));
	assert_true(mk_frame_type_known("JOB "));
	assert_true(mk_frame_type_known("DATA"));
	assert_true(mk_frame_type_known("INPT"));
	assert_true(mk_frame_type_known("END "));
	assert_true(mk_frame_type_known("note"));
	assert_false(mk_frame_type_known("ABCD"));
	assert_false(mk_frame_type_known("head"));
	assert_false(mk_frame_type_known("JOBS"));
}

/* -------------------------------------------------------- reader errors */

static void test_err_empty_and_prelude(void **state)
{
	struct mk_err err;
	size_t len;
	uint8_t *s = sample_stream(&len, NULL);

	assert_int_equal(read_stream(s, 0, 0, NULL, &err), -MK_ECORRUPT);
	assert_int_equal(err.code, MK_ECORRUPT);
	assert_msg(&err, "t: empty input");

	s[1] ^= 0x20;   /* "Mks" */
	assert_int_equal(read_stream(s, len, 0, NULL, &err), -MK_EFORMAT);
	assert_msg(&err, "bad magic");
	s[1] ^= 0x20;
	assert_int_equal(read_stream(s, 10, 0, NULL, &err), -MK_EFORMAT);  /* short prelude */
	assert_msg(&err, "bad magic");
	assert_int_equal(read_stream((const uint8_t *)"hello world, not a stream", 25, 0, NULL, &err),
			 -MK_EFORMAT);
	assert_msg(&err, "not an mk stream");

	s[8] = 2;
	s[10] = 5;
	assert_int_equal(read_stream(s, len, 0, NULL, &err), -MK_EUNSUPPORTED);
	assert_msg(&err, "version 2.5");
	s[8] = 0;
	assert_int_equal(read_stream(s, len, 0, NULL, &err), -MK_EUNSUPPORTED);
	s[8] = 1;
	s[9] = 1;       /* 257 */
	assert_int_equal(read_stream(s, len, 0, NULL, &err), -MK_EUNSUPPORTED);
	s[9] = 0;
	s[10] = 7;      /* a newer minor version is read */
	int nf;
	assert_int_equal(read_stream(s, len, 0, &nf, &err), 0);
	assert_int_equal(nf, 4);
	/* prelude only: EOF before any frame */
	assert_int_equal(read_stream(s, MK_STREAM_PRELUDE, 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 0);
	assert_msg(&err, "without an END frame");
	free(s);
}

static void test_err_truncated(void **state)
{
	struct mk_err err;
	size_t len, off[4];
	uint8_t *s = sample_stream(&len, off);
	int nf;

	assert_int_equal(read_stream(s, len, 0, &nf, &err), 0);
	assert_int_equal(nf, 4);
	/* header of frame #0 cut */
	assert_int_equal(read_stream(s, off[0] + 10, 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 0);
	assert_msg(&err, "frame #0: truncated header (10 of 32 bytes)");
	/* header of frame #2 cut */
	assert_int_equal(read_stream(s, off[2] + 31, 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 2);
	assert_msg(&err, "frame #2: truncated header");
	/* payload of frame #0 cut */
	assert_int_equal(read_stream(s, off[0] + MK_FRAME_HDR + 5, 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 0);
	assert_msg(&err, "frame #0 (HEAD): truncated payload (5 of");
	/* payload of DATA (#2) cut */
	assert_int_equal(read_stream(s, off[3] - 1, 0, &nf, &err), -MK_ECORRUPT);
	assert_msg(&err, "frame #2 (DATA): truncated payload");
	/* EOF without END, after frame #2 */
	assert_int_equal(read_stream(s, off[3], 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 3);
	assert_msg(&err, "after frame #2 without an END frame");
	/* END truncated */
	assert_int_equal(read_stream(s, len - 1, 0, &nf, &err), -MK_ECORRUPT);
	assert_msg(&err, "frame #3 (END ): truncated payload");
	/* every proper prefix is an error, never a clean end */
	for (size_t cut = 0; cut < len; cut++) {
		int rc = read_stream(s, cut, 0, NULL, &err);
		assert_true(rc < 0);
		assert_true(err.code == MK_ECORRUPT || err.code == MK_EFORMAT);
	}
	free(s);
}

static void test_err_checksum(void **state)
{
	struct mk_stream_reader *r;
	struct mk_frame f;
	struct mk_err err;
	size_t len, off[4];
	uint8_t *s = sample_stream(&len, off);
	int nf;

	s[off[1] + MK_FRAME_HDR + 2] ^= 0x01;  /* "hello" -> "hemlo" */
	assert_int_equal(read_stream(s, len, 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 1);
	assert_msg(&err, "frame #1 (note)");
	assert_msg(&err, "checksum mismatch");

	/* the same stream without verification: reported, and reading goes on */
	int fd = fd_of(s, len);
	assert_int_equal(mk_sr_open(&r, fd, "t", MK_SR_NO_VERIFY, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_true(f.csum_ok);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_int_equal(f.index, 1);
	assert_false(f.csum_ok);
	assert_int_equal(f.payload_len, 5);
	assert_memory_equal(f.payload, "hemlo", 5);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_true(f.csum_ok);
	assert_string_equal(f.type, "DATA");
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "END ");
	assert_int_equal(mk_sr_next(r, &f, &err), 0);
	mk_sr_free(r);
	close(fd);
	s[off[1] + MK_FRAME_HDR + 2] ^= 0x01;

	/* a flipped header byte (raw_len and len both changed) and a
	 * flipped stored checksum are mismatches too */
	s[off[2] + 28] = 1;  /* reserved: covered by the checksum */
	assert_int_equal(read_stream(s, len, 0, NULL, &err), -MK_ECORRUPT);
	assert_msg(&err, "frame #2 (DATA)");
	assert_msg(&err, "checksum mismatch");
	s[off[2] + 28] = 0;
	s[off[2] + 24] ^= 0x80;
	assert_int_equal(read_stream(s, len, 0, NULL, &err), -MK_ECORRUPT);
	assert_msg(&err, "checksum mismatch");
	s[off[2] + 24] ^= 0x80;
	assert_int_equal(read_stream(s, len, 0, NULL, &err), 0);
	free(s);
}

static void test_err_types(void **state)
{
	uint8_t buf[1024];
	size_t o;
	struct mk_err err;
	struct mk_stream_reader *r;
	struct mk_frame f;
	int nf;

	/* unknown critical type */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "HEAD", 0, 1, "{}", 2, 2);
	raw_frame(buf, &o, "ABCD", 0, 1, "xyz", 3, 3);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EUNSUPPORTED);
	assert_int_equal(nf, 1);
	assert_msg(&err, "frame #1: unknown critical frame type 'ABCD'");
	/* "Abcd" is critical too (first letter decides) */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "Abcd", 0, 1, NULL, 0, 0);
	assert_int_equal(read_stream(buf, o, 0, NULL, &err), -MK_EUNSUPPORTED);
	assert_msg(&err, "'Abcd'");

	/* unknown ancillary type: returned, counted */
	struct mk_stream_writer *w;
	int fd = new_memfd();
	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	assert_int_equal(mk_sw_frame1(w, "abcd", "xyz", 3, &err), 0);
	assert_int_equal(mk_sw_frame1(w, "aBCD", "", 0, &err), 0);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	assert_int_equal(mk_sr_open(&r, fd, "t", 0, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "abcd");
	assert_false(f.critical);
	assert_int_equal(f.payload_len, 3);
	assert_memory_equal(f.payload, "xyz", 3);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "aBCD");
	assert_false(f.critical);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, "END ");
	assert_int_equal(mk_sr_next(r, &f, &err), 0);
	mk_sr_free(r);
	close(fd);

	/* invalid type bytes */
	static const char *const bad[] = { "HE\001D", " END", "DAT\xc3", "no-e", "12AB", "\0\0\0\0" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_prelude(buf, &o);
		raw_frame(buf, &o, "note", 0, 1, "x", 1, 1);
		raw_frame(buf, &o, bad[i], 0, 1, "x", 1, 1);
		assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
		assert_int_equal(nf, 1);
		assert_msg(&err, "frame #1 at offset 49: invalid frame type bytes");
	}
}

static void test_err_header_fields(void **state)
{
	uint8_t buf[1024];
	size_t o;
	struct mk_err err;
	int nf;

	/* bad flags */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "HEAD", 0x02, 1, "{}", 2, 2);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "frame #0 (HEAD): unknown flags 0x02");
	write_prelude(buf, &o);
	raw_frame(buf, &o, "note", 0, 1, "x", 1, 1);
	raw_frame(buf, &o, "HEAD", 0x81, 1, "{}", 2, 2);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "frame #1 (HEAD): unknown flags 0x81");

	/* checksum algorithms other than crc32c */
	for (int cs = 0; cs < 256; cs += 255) {
		write_prelude(buf, &o);
		raw_frame(buf, &o, "HEAD", 0, (uint8_t)cs, "{}", 2, 2);
		assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
		assert_msg(&err, "frame #0 (HEAD): unknown checksum algorithm");
	}
	write_prelude(buf, &o);
	raw_frame(buf, &o, "HEAD", 0, 2, "{}", 2, 2);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "unknown checksum algorithm 2");
	/* none (0) is for a channel's chunks: refused from a descriptor,
	 * chunk or not */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "note", 0, 1, "x", 1, 1);
	raw_frame(buf, &o, "INPT", 0, MK_CSUM_NONE, "x", 1, 1);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "frame #1 (INPT): unknown checksum algorithm 0");

	/* raw frame whose lengths disagree */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "HEAD", 0, 1, "{}", 2, 3);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "frame #0 (HEAD): bad payload length 2/3");
	/* a length beyond MK_FRAME_MAX is refused before reading */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "HEAD", 0, 1, NULL, 0, 0);
	put64(buf + MK_STREAM_PRELUDE + 8, MK_FRAME_MAX + 1);
	put64(buf + MK_STREAM_PRELUDE + 16, MK_FRAME_MAX + 1);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "bad payload length");
	put64(buf + MK_STREAM_PRELUDE + 8, UINT64_MAX);
	put64(buf + MK_STREAM_PRELUDE + 16, UINT64_MAX);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "bad payload length");

	/* a compressed frame whose payload is not zstd, or decodes to a
	 * different size */
	write_prelude(buf, &o);
	raw_frame(buf, &o, "HEAD", MK_FRAME_F_ZSTD, 1, "not zstd at all", 15, 100);
	assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_ECORRUPT);
	assert_msg(&err, "frame #0 (HEAD): zstd payload does not decode to 100 bytes");
	{
		char src[200], z[400];
		memset(src, 'a', sizeof(src));
		size_t zl = ZSTD_compress(z, sizeof(z), src, sizeof(src), 3);
		assert_false(ZSTD_isError(zl));
		write_prelude(buf, &o);
		raw_frame(buf, &o, "HEAD", MK_FRAME_F_ZSTD, 1, z, zl, 199);
		assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_ECORRUPT);
		assert_msg(&err, "does not decode to 199 bytes");
		write_prelude(buf, &o);
		raw_frame(buf, &o, "note", MK_FRAME_F_ZSTD, 1, z, zl, 201);
		assert_int_equal(read_stream(buf, o, 0, &nf, &err), -MK_ECORRUPT);
		write_prelude(buf, &o);
		raw_frame(buf, &o, "note", MK_FRAME_F_ZSTD, 1, z, zl, 200);
		/* and a bad checksum on it, even with NO_VERIFY, is an error */
		buf[MK_STREAM_PRELUDE + MK_FRAME_HDR] ^= 1;
		assert_int_equal(read_stream(buf, o, MK_SR_NO_VERIFY, &nf, &err), -MK_ECORRUPT);
		assert_msg(&err, "frame #0 (note)");
	}
}

static void test_err_end(void **state)
{
	struct mk_stream_writer *w;
	struct mk_err err;
	size_t len, off[4];
	uint8_t *s, *b;
	int nf, fd;

	/* END counts that disagree with the frames seen */
	static const char *const ends[] = {
		"{\"frames\":5,\"files\":0,\"jobs\":0,\"chunks\":0,\"ancillary\":0,\"data_bytes\":0}",
		"{\"frames\":1,\"files\":1,\"jobs\":0,\"chunks\":0,\"ancillary\":0,\"data_bytes\":0}",
		"{\"frames\":1,\"files\":0,\"jobs\":0,\"chunks\":0,\"ancillary\":0}",
		"{\"frames\":1,\"files\":0,\"jobs\":0,\"chunks\":0,\"ancillary\":0,\"data_bytes\":-1}",
		"{\"frames\":\"1\",\"files\":0,\"jobs\":0,\"chunks\":0,\"ancillary\":0,\"data_bytes\":0}",
	};
	static const char *const what[] = { "END says frames = 5, the stream carried 1",
					    "END says files = 1", "data_bytes", "data_bytes", "frames" };
	for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
		fd = new_memfd();
		assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
		assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, "{}", 2, &err), 0);
		assert_int_equal(mk_sw_frame1(w, MK_FT_END, ends[i], strlen(ends[i]), &err), 0);
		mk_sw_free(w);
		b = slurp(fd, &len);
		close(fd);
		assert_int_equal(read_stream(b, len, 0, &nf, &err), -MK_ECORRUPT);
		assert_int_equal(nf, 1);
		assert_msg(&err, what[i]);
		free(b);
	}
	/* the correct counts are accepted */
	static const char good[] =
		"{\"frames\":1,\"files\":0,\"jobs\":0,\"chunks\":0,\"ancillary\":0,\"data_bytes\":0,\"extra\":1}";
	fd = new_memfd();
	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, "{}", 2, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_END, good, strlen(good), &err), 0);
	mk_sw_free(w);
	b = slurp(fd, &len);
	close(fd);
	assert_int_equal(read_stream(b, len, 0, &nf, &err), 0);
	assert_int_equal(nf, 2);
	free(b);
	/* END that is not a JSON object */
	fd = new_memfd();
	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_END, "[1]", 3, &err), 0);
	mk_sw_free(w);
	b = slurp(fd, &len);
	close(fd);
	assert_int_equal(read_stream(b, len, 0, &nf, &err), -MK_EFORMAT);
	assert_msg(&err, "END payload is not a JSON object");
	free(b);

	/* a frame lost in transit: drop the note (#1) from the sample */
	s = sample_stream(&len, off);
	size_t nlen = off[2] - off[1];
	memmove(s + off[1], s + off[2], len - off[2]);
	assert_int_equal(read_stream(s, len - nlen, 0, &nf, &err), -MK_ECORRUPT);
	assert_int_equal(nf, 2);
	assert_msg(&err, "frames lost or added");
	free(s);

	/* bytes after END */
	s = sample_stream(&len, off);
	s = realloc(s, len + 1);
	s[len] = 'x';
	assert_int_equal(read_stream(s, len + 1, 0, &nf, &err), -MK_EFORMAT);
	assert_int_equal(nf, 4);
	assert_msg(&err, "bytes after the END frame");
	free(s);
}

/* Errors about the END frame name the END frame's own number: in
 * HEAD(#0) END(#1) a bad END is "frame #1". */
static void test_err_end_frame_number(void **state)
{
	static const char bad[] =
		"{\"frames\":9,\"files\":0,\"jobs\":0,\"chunks\":0,\"ancillary\":0,\"data_bytes\":0}";
	struct mk_stream_writer *w;
	struct mk_err err;
	size_t len;
	uint8_t *b;
	int fd = new_memfd(), nf;

	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, "{}", 2, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_END, bad, strlen(bad), &err), 0);
	mk_sw_free(w);
	b = slurp(fd, &len);
	close(fd);
	nf = read_stream(b, len, 0, NULL, &err);
	free(b);
	assert_int_equal(nf, -MK_ECORRUPT);
	assert_msg(&err, "frame #1: END says frames = 9");
	/* END (#0) not JSON */
	fd = new_memfd();
	assert_int_equal(mk_sw_open(&w, fd, 0, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_END, "nope", 4, &err), 0);
	mk_sw_free(w);
	b = slurp(fd, &len);
	close(fd);
	nf = read_stream(b, len, 0, NULL, &err);
	free(b);
	assert_int_equal(nf, -MK_EFORMAT);
	assert_msg(&err, "frame #0: END payload");
}

/* A header that claims a 2 GiB payload, followed by a few bytes, is a
 * truncated payload: the reader must not need memory for the claim
 * before the bytes arrive.  Run in a child with a limited address space
 * (not under ASan, which reserves terabytes of it). */
static void test_err_huge_claim(void **state)
{
#ifdef UNDER_ASAN
	skip();
#else
	uint8_t buf[256];
	size_t o;
	int st;
	pid_t pid;

	write_prelude(buf, &o);
	raw_frame(buf, &o, "note", 0, 1, "0123456789", 10, 10);
	put64(buf + MK_STREAM_PRELUDE + 8, MK_FRAME_MAX);
	put64(buf + MK_STREAM_PRELUDE + 16, MK_FRAME_MAX);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mk_err err;
		unsigned long vm_kb = 0;
		char line[256];
		FILE *f = fopen("/proc/self/status", "r");
		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, "VmSize: %lu", &vm_kb) == 1)
				break;
		if (f)
			fclose(f);
		struct rlimit rl = { .rlim_cur = ((rlim_t)vm_kb << 10) + (1ull << 30),
				     .rlim_max = ((rlim_t)vm_kb << 10) + (1ull << 30) };
		if (!vm_kb || setrlimit(RLIMIT_AS, &rl))
			_exit(3);
		/* no cmocka asserts in the child */
		struct mk_stream_reader *r;
		struct mk_frame fr;
		int fd = memfd_create("huge", 0), rc;
		if (fd < 0 || write(fd, buf, o) != (ssize_t)o || lseek(fd, 0, SEEK_SET) != 0)
			_exit(4);
		rc = mk_sr_open(&r, fd, "t", 0, &err);
		if (rc == 0) {
			rc = mk_sr_next(r, &fr, &err);
			mk_sr_free(r);
		}
		if (rc != -MK_ECORRUPT || !strstr(err.msg, "truncated payload (10 of 2147483648 bytes)")) {
			fprintf(stderr, "huge claim: rc %d: %s\n", rc, err.msg);
			_exit(1);
		}
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
#endif
}

/* ------------------------------------------------ piecewise FILE frames */

#define PW_N 300000u

/* A stream: HEAD announcing big.bin (PW_N bytes), FILE big.bin (a
 * compressible pattern), END; written at `level`.  *payload: the FILE
 * frame's payload (malloc'ed). */
static int pw_stream(int level, uint8_t **payload, size_t *plen)
{
	struct mk_manifest *m = mk_manifest_new("tensors", "test");
	struct mk_stream_writer *w;
	struct mk_err err;
	uint8_t *data = malloc(PW_N);
	char *head;
	size_t hlen;
	int fd = new_memfd();

	for (size_t i = 0; i < PW_N; i++)
		data[i] = (uint8_t)(i / 1000 + (i % 7 == 0));
	m->chunk_bytes = 1 << 20;
	assert_int_equal(mk_manifest_add_file(m, "big.bin", PW_N, &err), 0);
	assert_int_equal(mk_manifest_encode(m, &head, &hlen, &err), 0);
	assert_int_equal(mk_sw_open(&w, fd, level, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_HEAD, head, hlen, &err), 0);
	assert_int_equal(mk_sw_file(w, "big.bin", 0644, data, PW_N, &err), 0);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	*plen = 8 + 7 + PW_N;
	*payload = malloc(*plen);
	memcpy(*payload, "\xa4\x01\0\0\x07\0\0\0big.bin", 15);
	memcpy(*payload + 15, data, PW_N);
	free(data);
	free(head);
	mk_manifest_free(m);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

/* Open fd piecewise, read the HEAD and the FILE frame's header. */
static struct mk_stream_reader *pw_open(int fd, struct mk_frame *f)
{
	struct mk_stream_reader *r;
	struct mk_manifest *m;
	struct mk_err err;

	assert_int_equal(mk_sr_open(&r, fd, "t", MK_SR_PIECEWISE_FILE, &err), 0);
	assert_int_equal(mk_sr_head(r, "t", "tensors", "", &m, f, &err), 0);
	mk_manifest_free(m);
	assert_int_equal(mk_sr_next(r, f, &err), 1);
	assert_string_equal(f->type, MK_FT_FILE);
	assert_true(f->piecewise);
	assert_null(f->payload);
	assert_null(f->wire);
	return r;
}

static void test_piecewise_roundtrip(void **state)
{
	(void)state;
	for (int level = 0; level <= 3; level += 3) {
		uint8_t *want, *have;
		size_t wlen, n = 0, got;
		struct mk_frame f;
		struct mk_err err;
		int fd = pw_stream(level, &want, &wlen), rc;
		struct mk_stream_reader *r = pw_open(fd, &f);
		uint64_t frames, bytes;

		assert_int_equal(!!(f.flags & MK_FRAME_F_ZSTD), level > 0);
		if (level)
			assert_true(f.len < f.raw_len / 4);
		assert_int_equal(f.raw_len, wlen);
		have = malloc(wlen + 1);
		/* odd piece sizes, none larger than 4099 bytes */
		for (size_t cap = 1;; cap = cap * 3 % 4099 + 1) {
			rc = mk_sr_read_payload(r, have + n, cap < wlen + 1 - n ? cap : wlen + 1 - n, &got, &err);
			assert_int_equal(rc, 0);
			assert_true(got <= cap);
			if (!got)
				break;
			n += got;
			assert_true(n <= wlen);
		}
		assert_int_equal(n, wlen);
		assert_memory_equal(have, want, wlen);
		mk_sr_position(r, &frames, &bytes);
		assert_int_equal(frames, 2); /* HEAD and the FILE, accepted */
		assert_int_equal(mk_sr_next(r, &f, &err), 1);
		assert_string_equal(f.type, MK_FT_END); /* END counts the FILE */
		assert_int_equal(mk_sr_next(r, &f, &err), 0);
		mk_sr_free(r);
		close(fd);
		free(want);
		free(have);
	}
}

/* A piecewise frame the caller does not read is drained and checked. */
static void test_piecewise_drain(void **state)
{
	(void)state;
	for (int level = 0; level <= 3; level += 3) {
		uint8_t *want;
		size_t wlen, len;
		struct mk_frame f;
		struct mk_err err;
		int fd = pw_stream(level, &want, &wlen);
		struct mk_stream_reader *r = pw_open(fd, &f);

		assert_int_equal(mk_sr_next(r, &f, &err), 1);
		assert_string_equal(f.type, MK_FT_END);
		assert_int_equal(mk_sr_next(r, &f, &err), 0);
		mk_sr_free(r);
		/* the same with a byte of the payload changed: refused at the drain */
		uint8_t *b = slurp(fd, &len);
		close(fd);
		b[len - 200] ^= 1; /* inside the FILE frame, before END's 32 + ~100 bytes */
		fd = fd_of(b, len);
		r = pw_open(fd, &f);
		int rc = mk_sr_next(r, &f, &err);
		assert_true(rc < 0);
		assert_int_equal(err.code, MK_ECORRUPT);
		assert_true(strstr(err.msg, "checksum mismatch") || (level && strstr(err.msg, "zstd")));
		mk_sr_free(r);
		close(fd);
		free(b);
		free(want);
	}
}

/* Every byte is delivered before the checksum fails, at the end. */
static void test_piecewise_checksum(void **state)
{
	uint8_t *want, *b, buf[65536];
	size_t wlen, len, n = 0, got;
	struct mk_frame f;
	struct mk_err err;
	int fd = pw_stream(0, &want, &wlen), rc;
	struct mk_stream_reader *r;

	(void)state;
	b = slurp(fd, &len);
	close(fd);
	b[len - 300] ^= 0x40; /* a content byte of big.bin */
	fd = fd_of(b, len);
	r = pw_open(fd, &f);
	while (!(rc = mk_sr_read_payload(r, buf, sizeof(buf), &got, &err)) && got)
		n += got;
	assert_true(rc < 0);
	assert_int_equal(err.code, MK_ECORRUPT);
	assert_non_null(strstr(err.msg, "frame #1 (FILE)"));
	assert_non_null(strstr(err.msg, "checksum mismatch"));
	assert_int_equal(n, wlen); /* all delivered, none accepted */
	assert_true(mk_sr_next(r, &f, &err) < 0); /* the reader stays stopped */
	mk_sr_free(r);
	close(fd);
	free(b);
	free(want);
}

static void test_piecewise_truncated(void **state)
{
	(void)state;
	for (int level = 0; level <= 3; level += 3) {
		uint8_t *want, *b, buf[4096];
		size_t wlen, len, got, n = 0;
		struct mk_frame f;
		struct mk_err err;
		int fd = pw_stream(level, &want, &wlen), rc;
		struct mk_stream_reader *r;

		b = slurp(fd, &len);
		close(fd);
		r = pw_open(fd = fd_of(b, len), &f);
		mk_sr_free(r);
		close(fd);
		/* cut in the middle of the FILE payload (END is ~130 bytes) */
		size_t cut = len - 132 - (size_t)f.len / 2;
		fd = fd_of(b, cut);
		r = pw_open(fd, &f);
		while (!(rc = mk_sr_read_payload(r, buf, sizeof(buf), &got, &err)) && got)
			n += got;
		assert_true(rc < 0);
		assert_int_equal(err.code, MK_ECORRUPT);
		assert_non_null(strstr(err.msg, "truncated payload"));
		assert_true(n < wlen);
		mk_sr_free(r);
		close(fd);
		free(b);
		free(want);
	}
}

/* A zstd frame that inflates past its raw_len: piecewise, it fails at the
 * first byte over; whole, before a byte is inflated. */
static void test_piecewise_zstd_bomb(void **state)
{
	static uint8_t zeros[100000];
	uint8_t z[4096], buf[1 << 16];
	size_t zn;

	(void)state;
	memcpy(zeros, "\xa4\x01\0\0\x07\0\0\0big.bin", 15);
	zn = ZSTD_compress(z, sizeof(z), zeros, sizeof(zeros), 3);
	assert_false(ZSTD_isError(zn));
	for (int piecewise = 0; piecewise < 2; piecewise++) {
		struct mk_manifest *m = mk_manifest_new("tensors", "test");
		struct mk_stream_reader *r;
		struct mk_frame f;
		struct mk_err err;
		char *head;
		size_t hlen, o, got, n = 0;
		uint8_t *s = malloc(1 << 20);
		int rc, fd;

		assert_int_equal(mk_manifest_add_file(m, "big.bin", 1000, &err), 0);
		assert_int_equal(mk_manifest_encode(m, &head, &hlen, &err), 0);
		write_prelude(s, &o);
		raw_frame(s, &o, MK_FT_HEAD, 0, 1, head, hlen, hlen);
		raw_frame(s, &o, MK_FT_FILE, MK_FRAME_F_ZSTD, 1, z, zn, 1015);
		fd = fd_of(s, o);
		assert_int_equal(mk_sr_open(&r, fd, "t", piecewise ? MK_SR_PIECEWISE_FILE : 0, &err), 0);
		mk_manifest_free(m);
		assert_int_equal(mk_sr_head(r, "t", NULL, NULL, &m, &f, &err), 0);
		rc = mk_sr_next(r, &f, &err);
		if (piecewise) {
			assert_int_equal(rc, 1);
			while (!(rc = mk_sr_read_payload(r, buf, sizeof(buf), &got, &err)) && got)
				n += got;
			assert_int_equal(n, 1015); /* never a byte past raw_len */
			assert_non_null(strstr(err.msg, "inflates past the 1015 bytes its header declares"));
		} else {
			assert_non_null(strstr(err.msg, "does not decode to 1015 bytes"));
		}
		assert_true(rc < 0);
		mk_sr_free(r);
		mk_manifest_free(m);
		close(fd);
		free(head);
		free(s);
	}
}

/* Declared sizes are bounded by type, by the HEAD and by the memory bound
 * before any payload byte is read. */
static void test_frame_bounds(void **state)
{
	struct mk_manifest *m = mk_manifest_new("tensors", "test");
	uint8_t *s = malloc(1 << 16), small[300] = { 0 };
	struct mk_err err;
	char *head;
	size_t hlen, o, base;

	(void)state;
	m->chunk_bytes = 65536;
	assert_int_equal(mk_manifest_add_file(m, "a.json", 100, &err), 0);
	assert_int_equal(mk_manifest_encode(m, &head, &hlen, &err), 0);
	write_prelude(s, &o);
	raw_frame(s, &o, MK_FT_HEAD, 0, 1, head, hlen, hlen);
	base = o;
	struct {
		const char *type;
		uint64_t raw_len, memory;
		const char *msg;
	} c[] = {
		{ MK_FT_JOB, MK_FRAME_JOB_MAX + 1, 0, "more than the 16777216 bytes of a JOB" },
		{ MK_FT_END, MK_FRAME_END_MAX + 1, 0, "more than the 65536 bytes of an END" },
		{ MK_FT_DATA, MK_CHUNK_HDR + 16ull * 512 * 1024 + 1, 0, "bytes of a chunk of the HEAD's chunk_bytes" },
		{ MK_FT_INPT, MK_CHUNK_HDR + 16ull * 512 * 1024 + 1, 0, "bytes of a chunk of the HEAD's chunk_bytes" },
		{ MK_FT_FILE, 8 + 4096 + 101, 0, "more than the 4204 bytes of the largest file the HEAD announces" },
		{ "note", 200, 100, "needs more than the memory budget of 100 bytes" },
	};
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		struct mk_stream_reader *r;
		struct mk_manifest *hm;
		struct mk_frame f;
		int fd, rc;

		o = base;
		raw_frame(s, &o, c[k].type, MK_FRAME_F_ZSTD, 1, small, 0, c[k].raw_len);
		put64(s + base + 8, c[k].raw_len > 200 ? 300 : c[k].raw_len); /* len: a claim only */
		fd = fd_of(s, o);
		assert_int_equal(mk_sr_open(&r, fd, "t", 0, &err), 0);
		assert_int_equal(mk_sr_head(r, "t", NULL, NULL, &hm, &f, &err), 0);
		if (c[k].memory) {
			struct mk_sr_bounds b;
			mk_sr_get_bounds(r, &b);
			b.memory = c[k].memory;
			mk_sr_set_bounds(r, &b);
		}
		mk_manifest_free(hm);
		rc = mk_sr_next(r, &f, &err);
		assert_true(rc < 0);
		if (!strstr(err.msg, c[k].msg))
			fail_msg("%s: %s", c[k].type, err.msg);
		assert_non_null(strstr(err.msg, "frame #1"));
		mk_sr_free(r);
		close(fd);
	}
	/* right at the bounds the size is accepted (it fails later, as truncated) */
	{
		struct mk_stream_reader *r;
		struct mk_manifest *hm;
		struct mk_frame f;
		struct mk_sr_bounds b;
		int fd;

		o = base;
		raw_frame(s, &o, MK_FT_FILE, 0, 1, small, 0, 0);
		put64(s + base + 8, 8 + 4096 + 100);
		put64(s + base + 16, 8 + 4096 + 100);
		fd = fd_of(s, o);
		assert_int_equal(mk_sr_open(&r, fd, "t", 0, &err), 0);
		assert_int_equal(mk_sr_head(r, "t", NULL, NULL, &hm, &f, &err), 0);
		mk_sr_get_bounds(r, &b);
		assert_int_equal(b.file, 8 + 4096 + 100);
		assert_int_equal(b.chunk, MK_CHUNK_HDR + 16ull * 512 * 1024);
		mk_manifest_free(hm);
		assert_true(mk_sr_next(r, &f, &err) < 0);
		assert_non_null(strstr(err.msg, "truncated payload"));
		mk_sr_free(r);
		close(fd);
	}
	mk_manifest_free(m);
	free(head);
	free(s);
}

/* ----------------------------------------------------------- FILE frames */

static void test_file_name_check(void **state)
{
	static const char *const ok[] = { "config.json", "a/b.json", "a", ".hidden", "a..b",
					  "x/.y/z", "...", "tokenizer/vocab.txt", "a b" };
	static const char *const bad[] = { "", "/abs", "/", "../x", "a/../b", "a//b", "./a", "a/",
					   ".", "..", "a/.", "a/..", "a/./b", "a\\b", "\\x", "//" };
	struct mk_err err;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (mk_file_name_check(ok[i], strlen(ok[i]), &err))
			fail_msg("'%s' rejected: %s", ok[i], err.msg);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		mk_err_clear(&err);
		if (mk_file_name_check(bad[i], strlen(bad[i]), &err) != -MK_EFORMAT)
			fail_msg("'%s' accepted", bad[i]);
		assert_int_equal(err.code, MK_EFORMAT);
	}
	assert_int_equal(mk_file_name_check("", 0, &err), -MK_EFORMAT);
	assert_msg(&err, "empty");
	assert_int_equal(mk_file_name_check("/abs", 4, &err), -MK_EFORMAT);
	assert_msg(&err, "absolute");
	assert_int_equal(mk_file_name_check("a\\b", 3, &err), -MK_EFORMAT);
	assert_msg(&err, "backslash");
	assert_int_equal(mk_file_name_check("a/../b", 6, &err), -MK_EFORMAT);
	assert_msg(&err, "'a/../b'");
	/* NUL inside the counted length */
	assert_int_equal(mk_file_name_check("a\0b", 3, &err), -MK_EFORMAT);
	assert_msg(&err, "NUL");
	assert_int_equal(mk_file_name_check("ab\0", 3, &err), -MK_EFORMAT);
	/* only len bytes count: "a/b" of "a/b/../c" is fine, "a/" is not */
	assert_int_equal(mk_file_name_check("a/b/../c", 3, &err), 0);
	assert_int_equal(mk_file_name_check("a/b/../c", 2, &err), -MK_EFORMAT);
	/* err may be NULL */
	assert_int_equal(mk_file_name_check("../x", 4, NULL), -MK_EFORMAT);
}

static size_t file_payload(uint8_t *p, uint32_t mode, uint32_t nlen, const char *name,
			   size_t name_bytes, const void *data, size_t len)
{
	put32(p, mode);
	put32(p + 4, nlen);
	memcpy(p + 8, name, name_bytes);
	memcpy(p + 8 + name_bytes, data, len);
	return 8 + name_bytes + len;
}

static void test_file_decode(void **state)
{
	uint8_t p[256];
	struct mk_file_frame ff;
	struct mk_err err;
	size_t n;

	n = file_payload(p, 0755, 8, "a/b.json", 8, "{\"x\":1}", 7);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), 0);
	assert_int_equal(ff.mode, 0755);
	assert_string_equal(ff.name, "a/b.json");
	assert_ptr_equal(ff.data, p + 16);
	assert_int_equal(ff.len, 7);
	free(ff.name);
	/* no contents */
	n = file_payload(p, 0, 1, "x", 1, "", 0);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), 0);
	assert_string_equal(ff.name, "x");
	assert_int_equal(ff.len, 0);
	free(ff.name);

	/* short payloads */
	for (size_t k = 0; k < 8; k++) {
		assert_int_equal(mk_file_decode(p, k, &ff, &err), -MK_EFORMAT);
		assert_msg(&err, "too short");
		assert_null(ff.name);
	}
	/* name length beyond the payload */
	n = file_payload(p, 0, 9, "a/b.json", 8, "", 0);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), -MK_EFORMAT);
	assert_msg(&err, "name length 9 exceeds the payload");
	assert_null(ff.name);
	n = file_payload(p, 0, UINT32_MAX, "abc", 3, "", 0);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), -MK_EFORMAT);
	assert_msg(&err, "exceeds");
	/* bad names inside the payload */
	n = file_payload(p, 0, 4, "../x", 4, "data", 4);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), -MK_EFORMAT);
	assert_null(ff.name);
	n = file_payload(p, 0, 3, "a\0b", 3, "data", 4);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), -MK_EFORMAT);
	assert_msg(&err, "NUL");
	n = file_payload(p, 0, 0, "", 0, "data", 4);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), -MK_EFORMAT);
	assert_msg(&err, "empty");
	n = file_payload(p, 0, 4, "/etc", 4, "", 0);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), -MK_EFORMAT);
	/* a name that swallows the data is fine when it is a valid name */
	n = file_payload(p, 0, 12, "abcd", 4, "efghijkl", 8);
	assert_int_equal(mk_file_decode(p, n, &ff, &err), 0);
	assert_string_equal(ff.name, "abcdefghijkl");
	assert_int_equal(ff.len, 0);
	free(ff.name);
}

/* --------------------------------------------------------- chunk payloads */

static void test_chunk_decode(void **state)
{
	uint8_t p[MK_CHUNK_HDR + 64];
	struct mk_chunk c, d;
	struct mk_err err;

	memset(&c, 0, sizeof(c));
	c.id = 0xdeadbeef;
	c.input = 0xfffe;
	c.pass = 2;
	c.dtype = MK_DT_F32;
	c.row_begin = 1ull << 40;
	c.row_count = 3;
	c.elem_begin = (1ull << 40) * 4 + 1;
	c.elem_count = 16;
	mk_chunk_encode(&c, p);
	/* layout of the sub-header */
	assert_int_equal(p[0], 0xef);
	assert_int_equal(p[3], 0xde);
	assert_int_equal(p[4], 0xfe);
	assert_int_equal(p[6], 2);
	assert_int_equal(p[8], MK_DT_F32);
	assert_int_equal(get64(p + 16), 1ull << 40);
	assert_int_equal(get64(p + 40), 16);
	for (int i = 0; i < 64; i++)
		p[MK_CHUNK_HDR + i] = (uint8_t)i;
	assert_int_equal(mk_chunk_decode(p, sizeof(p), &d, &err), 0);
	assert_int_equal(d.id, c.id);
	assert_int_equal(d.input, c.input);
	assert_int_equal(d.pass, c.pass);
	assert_int_equal(d.dtype, c.dtype);
	assert_int_equal(d.row_begin, c.row_begin);
	assert_int_equal(d.row_count, c.row_count);
	assert_int_equal(d.elem_begin, c.elem_begin);
	assert_int_equal(d.elem_count, c.elem_count);
	assert_ptr_equal(d.data, p + MK_CHUNK_HDR);
	assert_int_equal(d.data_len, 64);

	/* short payload */
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR - 1, &d, &err), -MK_EFORMAT);
	assert_msg(&err, "47 bytes is shorter than its 48-byte header");
	assert_int_equal(mk_chunk_decode(p, 0, &d, &err), -MK_EFORMAT);
	/* data length not matching elem_count */
	assert_int_equal(mk_chunk_decode(p, sizeof(p) - 1, &d, &err), -MK_EFORMAT);
	assert_msg(&err, "16 F32 elements carries 63 data bytes");
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR, &d, &err), -MK_EFORMAT);
	c.elem_count = 0;
	mk_chunk_encode(&c, p);
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR, &d, &err), 0);
	assert_int_equal(d.data_len, 0);
	/* elem_count whose byte size overflows */
	c.elem_count = UINT64_MAX / 2;
	mk_chunk_encode(&c, p);
	assert_int_equal(mk_chunk_decode(p, sizeof(p), &d, &err), -MK_EFORMAT);
	/* sub-byte: 3 F4 elements are not whole bytes, 4 are 2 bytes */
	c.dtype = MK_DT_F4;
	c.elem_count = 3;
	mk_chunk_encode(&c, p);
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR + 2, &d, &err), -MK_EFORMAT);
	c.elem_count = 4;
	mk_chunk_encode(&c, p);
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR + 2, &d, &err), 0);
	c.dtype = MK_DT_F6_E2M3;
	mk_chunk_encode(&c, p);
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR + 3, &d, &err), 0);
	/* unknown dtype codes */
	put32(p + 8, MK_DT_COUNT);
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR + 3, &d, &err), -MK_EFORMAT);
	assert_msg(&err, "unknown dtype code");
	put32(p + 8, 0x80000001u);
	assert_int_equal(mk_chunk_decode(p, MK_CHUNK_HDR + 3, &d, &err), -MK_EFORMAT);
	assert_msg(&err, "unknown dtype code 2147483649");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_piecewise_roundtrip),
		cmocka_unit_test(test_piecewise_drain),
		cmocka_unit_test(test_piecewise_checksum),
		cmocka_unit_test(test_piecewise_truncated),
		cmocka_unit_test(test_piecewise_zstd_bomb),
		cmocka_unit_test(test_frame_bounds),
		cmocka_unit_test(test_chunker_whole_rows),
		cmocka_unit_test(test_chunker_long_rows),
		cmocka_unit_test(test_chunker_1d_scalar_empty),
		cmocka_unit_test(test_chunker_f4_odd_rows),
		cmocka_unit_test(test_chunker_f6),
		cmocka_unit_test(test_chunker_too_small),
		cmocka_unit_test(test_chunker_huge_chunk_size),
		cmocka_unit_test(test_chunker_deterministic),
		cmocka_unit_test(test_frames_roundtrip),
		cmocka_unit_test(test_frames_large_pipe),
		cmocka_unit_test(test_frames_pass_through),
		cmocka_unit_test(test_frames_compressed),
		cmocka_unit_test(test_sw_file_bad_name),
		cmocka_unit_test(test_frame_type_known),
		cmocka_unit_test(test_err_empty_and_prelude),
		cmocka_unit_test(test_err_truncated),
		cmocka_unit_test(test_err_checksum),
		cmocka_unit_test(test_err_types),
		cmocka_unit_test(test_err_header_fields),
		cmocka_unit_test(test_err_end),
		cmocka_unit_test(test_err_end_frame_number),
		cmocka_unit_test(test_err_huge_claim),
		cmocka_unit_test(test_file_name_check),
		cmocka_unit_test(test_file_decode),
		cmocka_unit_test(test_chunk_decode),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
