/* test_splice.c - mk_sw_chunk_splice and mk_sr_splice_payload: the bytes
 * on the wire and in the file are those of the copy path, with a pipe, a
 * regular file and a socket, and a damaged payload is still refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "mk/stream.h"

#define NDATA (3u * 4096 + 123)   /* BF16 elements: not a whole page */
#define SRC_OFF 1001              /* where they lie in the source file */

static uint8_t *pattern(size_t n, unsigned seed)
{
	uint8_t *b = malloc(n);
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i + seed) * 2654435761u >> 13);
	return b;
}

static int scratch(void)
{
	struct mk_err err;
	int fd = -1;
	assert_int_equal(mk_tmpfile_open(mk_tmpdir(), "test", &fd, &err), 0);
	return fd;
}

static void chunk_of(struct mk_chunk *c, const uint8_t *data, uint32_t id)
{
	memset(c, 0, sizeof(*c));
	c->id = id;
	c->dtype = MK_DT_BF16;
	c->elem_count = NDATA;
	c->row_count = 1;
	c->data = data;
	c->data_len = 2 * NDATA;
}

/* The stream of two DATA chunks (one of them too small to splice), written
 * to out_fd with splice or without. */
static int write_stream(int out_fd, int src_fd, const uint8_t *data, bool splice, struct mk_err *err)
{
	struct mk_stream_writer *w;
	struct mk_chunk c;
	int rc = mk_sw_open(&w, out_fd, 0, err);

	if (rc)
		return rc;
	chunk_of(&c, data, 0);
	rc = splice ? mk_sw_chunk_splice(w, MK_FT_DATA, &c, src_fd, SRC_OFF, err) :
		      mk_sw_chunk(w, MK_FT_DATA, &c, err);
	c.elem_count = 100;
	c.data_len = 200;
	c.id = 1;
	if (!rc)
		rc = splice ? mk_sw_chunk_splice(w, MK_FT_DATA, &c, src_fd, SRC_OFF, err) :
			      mk_sw_chunk(w, MK_FT_DATA, &c, err);
	if (!rc)
		rc = mk_sw_end(w, err);
	mk_sw_free(w);
	return rc;
}

/* Run write_stream in a child into the write end of a pipe or socket
 * pair; returns everything read from the other end. */
static uint8_t *through(bool socket, int src_fd, const uint8_t *data, bool splice, size_t *len)
{
	int fds[2], st;
	size_t cap = 1 << 20;
	uint8_t *buf = malloc(cap);
	pid_t pid;

	assert_non_null(buf);
	assert_int_equal(socket ? socketpair(AF_UNIX, SOCK_STREAM, 0, fds) : pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mk_err err;
		close(fds[0]);
		_exit(write_stream(fds[1], src_fd, data, splice, &err) ? 1 : 0);
	}
	close(fds[1]);
	*len = 0;
	for (;;) {
		ssize_t n = read(fds[0], buf + *len, cap - *len);
		assert_true(n >= 0);
		if (n == 0)
			break;
		*len += (size_t)n;
		assert_true(*len < cap);
	}
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return buf;
}

static int source_file(const uint8_t *data)
{
	struct mk_err err;
	uint8_t junk[SRC_OFF];
	int fd = scratch();

	memset(junk, 0xee, sizeof(junk));
	assert_int_equal(mk_pwrite_all(fd, junk, sizeof(junk), 0, "src", &err), 0);
	assert_int_equal(mk_pwrite_all(fd, data, 2 * NDATA, SRC_OFF, "src", &err), 0);
	return fd;
}

/* Pipe with splice, pipe without, socket, regular file: one stream. */
static void test_writer_same_bytes(void **state)
{
	uint8_t *data = pattern(2 * NDATA, 1), *a, *b, *s, *f;
	size_t la, lb, ls;
	struct mk_err err;
	struct stat sb;
	int src = source_file(data), out = scratch();

	(void)state;
	a = through(false, src, data, true, &la);
	b = through(false, src, data, false, &lb);
	s = through(true, src, data, true, &ls);
	assert_int_equal(write_stream(out, src, data, true, &err), 0);
	assert_int_equal(fstat(out, &sb), 0);
	assert_int_equal(la, lb);
	assert_int_equal(la, ls);
	assert_int_equal((size_t)sb.st_size, la);
	f = malloc(la);
	assert_non_null(f);
	assert_int_equal(mk_pread_exact(out, f, la, 0, "out", &err), 0);
	assert_memory_equal(a, b, la);
	assert_memory_equal(a, s, la);
	assert_memory_equal(a, f, la);
	free(a);
	free(b);
	free(s);
	free(f);
	free(data);
	close(src);
	close(out);
}

/* The reader side: a stream with one big DATA frame fed through a pipe
 * (from a child) goes into a file at an odd offset; `flip` damages one
 * payload byte on the way. */
static int read_into(int out_fd, const uint8_t *stream, size_t len, size_t flip, bool *pw,
		     const uint8_t **view_copy, struct mk_err *err)
{
	struct mk_stream_reader *r;
	struct mk_frame f;
	int fds[2], st, rc;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mk_err e;
		uint8_t *copy = malloc(len);
		close(fds[0]);
		if (!copy)
			_exit(1);
		memcpy(copy, stream, len);
		if (flip)
			copy[flip] ^= 0x10;
		(void)mk_write_all(fds[1], copy, len, "pipe", &e);
		_exit(0);
	}
	close(fds[1]);
	rc = mk_sr_open(&r, fds[0], "pipe", MK_SR_SPLICE_DATA, err);
	assert_int_equal(rc, 0);
	*pw = false;
	while ((rc = mk_sr_next(r, &f, err)) == 1) {
		uint8_t sub[MK_CHUNK_HDR];
		size_t have = 0, got;
		const void *view;
		if (!f.piecewise)
			continue;
		*pw = true;
		assert_string_equal(f.type, MK_FT_DATA);
		while (have < MK_CHUNK_HDR) {
			assert_int_equal(mk_sr_read_payload(r, sub + have, MK_CHUNK_HDR - have, &got, err), 0);
			have += got;
		}
		rc = mk_sr_splice_payload(r, out_fd, "out", 777, f.raw_len - MK_CHUNK_HDR, &view, err);
		if (rc)
			break;
		uint8_t *c = malloc(f.raw_len - MK_CHUNK_HDR);
		assert_non_null(c);
		memcpy(c, view, f.raw_len - MK_CHUNK_HDR);
		*view_copy = c;
	}
	mk_sr_free(r);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return rc;
}

static void test_reader_splice(void **state)
{
	uint8_t *data = pattern(2 * NDATA, 2), *stream, back[2 * NDATA];
	size_t len;
	const uint8_t *view = NULL;
	struct mk_err err;
	bool pw;
	int src = source_file(data), out = scratch(), rc;

	(void)state;
	stream = through(false, src, data, true, &len);
	/* sound: the data land at 777, the view holds them, END checks out */
	rc = read_into(out, stream, len, 0, &pw, &view, &err);
	assert_int_equal(rc, 0);
	assert_true(pw);
	assert_non_null(view);
	assert_memory_equal(view, data, 2 * NDATA);
	assert_int_equal(mk_pread_exact(out, back, sizeof(back), 777, "out", &err), 0);
	assert_memory_equal(back, data, 2 * NDATA);
	free((void *)view);
	/* one payload byte flipped: a checksum error naming the frame */
	view = NULL;
	rc = read_into(out, stream, len, MK_STREAM_PRELUDE + MK_FRAME_HDR + MK_CHUNK_HDR + 5000, &pw, &view, &err);
	assert_int_equal(rc, -MK_ECORRUPT);
	assert_non_null(strstr(err.msg, "frame #0 (DATA)"));
	assert_non_null(strstr(err.msg, "checksum mismatch"));
	assert_null(view);
	free(stream);
	free(data);
	close(src);
	close(out);
}

/* From a regular file, MK_SR_SPLICE_DATA changes nothing: whole frames. */
static void test_reader_file_input(void **state)
{
	uint8_t *data = pattern(2 * NDATA, 3);
	struct mk_stream_reader *r;
	struct mk_frame f;
	struct mk_err err;
	int src = source_file(data), in = scratch(), n = 0;

	(void)state;
	assert_int_equal(write_stream(in, src, data, true, &err), 0);
	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	assert_int_equal(mk_sr_open(&r, in, "file", MK_SR_SPLICE_DATA, &err), 0);
	while (mk_sr_next(r, &f, &err) == 1) {
		assert_false(f.piecewise);
		n++;
	}
	assert_int_equal(n, 3);
	mk_sr_free(r);
	free(data);
	close(src);
	close(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_writer_same_bytes),
		cmocka_unit_test(test_reader_splice),
		cmocka_unit_test(test_reader_file_input),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
