/* test_fetch_held.c - mk-fetch's plan mode keeps a plan's frames until its
 * HEAD has gone out (plan_held.c): in memory under the spool's bound, in
 * the scratch file past it.  Passed on, they make the stream they came
 * in, byte for byte, compressed or not; a FILE frame whose checksum fails
 * is not kept. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "mk/stream.h"
#include "fetch/plan_fetch_impl.h"

#define BIG (600u << 10)          /* more than two SPOOL_PIECEs */

static int scratch(void)
{
	struct mk_err err;
	int fd = -1;
	assert_int_equal(mk_tmpfile_open(mk_tmpdir(), "test", &fd, &err), 0);
	return fd;
}

static uint8_t *pattern(size_t n, unsigned seed)
{
	uint8_t *b = malloc(n);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i + seed) * 2654435761u >> 13);
	return b;
}

static uint8_t *file_bytes(int fd, size_t *len)
{
	struct stat sb;
	struct mk_err err;
	assert_int_equal(fstat(fd, &sb), 0);
	uint8_t *b = malloc((size_t)sb.st_size + 1);
	assert_non_null(b);
	assert_int_equal(mk_pread_exact(fd, b, (size_t)sb.st_size, 0, "test", &err), 0);
	*len = (size_t)sb.st_size;
	return b;
}

/* A plan's tail as mk-fetch reads it: a small FILE frame, a note, a big
 * FILE frame, another small one. */
static int plan_tail(int level)
{
	int fd = scratch();
	struct mk_stream_writer *w;
	struct mk_err err;
	uint8_t *big = pattern(BIG, 1), *small = pattern(100, 2);

	assert_int_equal(mk_sw_open(&w, fd, level, &err), 0);
	assert_int_equal(mk_sw_file(w, "config.json", 0644, small, 100, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_NOTE, "a note", 6, &err), 0);
	assert_int_equal(mk_sw_file(w, "tokenizer.json", 0644, big, BIG, &err), 0);
	assert_int_equal(mk_sw_file(w, "vocab.json", 0600, small, 60, &err), 0);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	free(big);
	free(small);
	assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
	return fd;
}

/* Hold every frame of the stream in fd with the spool bounded to
 * `bound` bytes in memory; pass them on into a new stream; return it. */
static int hold_and_pass(int in, uint64_t bound, size_t *in_memory, size_t *spooled, size_t *zstd)
{
	struct mk_stream_reader *r;
	struct mk_stream_writer *w;
	struct mk_frame f;
	struct held *v = NULL;
	size_t n = 0;
	struct spool sp = { .fd = -1, .bound = bound };
	struct mk_err err;
	int out = scratch(), rc;

	*zstd = 0;
	assert_int_equal(mk_sr_open(&r, in, "in", MK_SR_PIECEWISE_FILE, &err), 0);
	while ((rc = mk_sr_next(r, &f, &err)) > 0) {
		if (!strcmp(f.type, MK_FT_END))
			continue;
		*zstd += (f.flags & MK_FRAME_F_ZSTD) != 0;
		if (f.piecewise)
			assert_int_equal(mk__pf_hold_piecewise(&v, &n, &sp, r, &f, &err), 0);
		else
			assert_int_equal(mk__pf_hold(&v, &n, &f, &err), 0);
	}
	assert_int_equal(rc, 0);
	mk_sr_free(r);
	*in_memory = *spooled = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i].wire)
			++*in_memory;
		else
			++*spooled;
	}
	assert_true(sp.in_memory <= bound);
	assert_int_equal(mk_sw_open(&w, out, 0, &err), 0);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(mk__pf_pass_held(w, &sp, &v[i], &err), 0);
	assert_int_equal(mk_sw_end(w, &err), 0);
	mk_sw_free(w);
	for (size_t i = 0; i < n; i++)
		free(v[i].wire);
	free(v);
	if (sp.fd >= 0)
		close(sp.fd);
	free(sp.buf);
	return out;
}

static void same_stream(int level, uint64_t bound, size_t want_memory, size_t want_spooled)
{
	int in = plan_tail(level);
	size_t mem, spooled, zstd, la, lb;
	int out = hold_and_pass(in, bound, &mem, &spooled, &zstd);
	uint8_t *a = file_bytes(in, &la), *b = file_bytes(out, &lb);

	assert_int_equal(mem, want_memory);
	assert_int_equal(spooled, want_spooled);
	if (level)   /* the big file's frame at least */
		assert_true(zstd > 0);
	else
		assert_int_equal(zstd, 0);
	assert_int_equal(la, lb);
	assert_memory_equal(a, b, la);
	free(a);
	free(b);
	close(in);
	close(out);
}

/* Everything in memory; every frame spooled (a note too: it comes
 * piecewise, as FILE frames do); the big one spooled and the small ones,
 * after it too, in memory; the first two in memory and the last (151 +
 * 38 + 110 bytes, over 200) spooled; compressed frames. */
static void test_held_passed_on(void **state)
{
	(void)state;
	same_stream(0, 64ull << 20, 4, 0);
	same_stream(0, 0, 0, 4);
	same_stream(0, 4096, 3, 1);
	same_stream(0, 200, 2, 2);
	same_stream(3, 4096, 3, 1);
}

/* A FILE frame damaged in its payload: refused whether held in memory or
 * spooled, and not kept. */
static void test_damaged_not_kept(void **state)
{
	(void)state;
	for (int spool = 0; spool < 2; spool++) {
		int in = plan_tail(0);
		size_t len;
		uint8_t *bytes = file_bytes(in, &len);
		struct mk_err err;
		/* a byte of the big file's contents, past its header */
		uint8_t *at = memmem(bytes, len, "tokenizer.json", 14);
		assert_non_null(at);
		at += 14 + BIG / 2;
		*at ^= 0x40;
		assert_int_equal(mk_pwrite_all(in, bytes, len, 0, "test", &err), 0);
		free(bytes);

		struct mk_stream_reader *r;
		struct mk_frame f;
		struct held *v = NULL;
		size_t n = 0;
		struct spool sp = { .fd = -1, .bound = spool ? 0 : 64ull << 20 };
		int rc = 0;
		assert_int_equal(mk_sr_open(&r, in, "in", MK_SR_PIECEWISE_FILE, &err), 0);
		while (mk_sr_next(r, &f, &err) > 0) {
			if (!f.piecewise)
				continue;
			size_t before = n;
			rc = mk__pf_hold_piecewise(&v, &n, &sp, r, &f, &err);
			if (rc) {
				assert_int_equal(n, before);
				break;
			}
		}
		assert_int_not_equal(rc, 0);
		assert_non_null(strstr(err.msg, "checksum"));
		assert_int_equal(n, 2);    /* config.json and the note only */
		for (size_t i = 0; i < n; i++)
			free(v[i].wire);
		free(v);
		if (sp.fd >= 0)
			close(sp.fd);
		free(sp.buf);
		mk_sr_free(r);
		close(in);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_held_passed_on),
		cmocka_unit_test(test_damaged_not_kept),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
