/* test_chan.c - channels (mk/chan.h): the stream reader and writer on an
 * in-memory queue between two threads carry the bytes they carry over a
 * descriptor; the queue stays within its bound; either end stopping
 * stops the other; the stand-in descriptors refuse direct I/O. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include "mk/chan.h"
#include "mk/stream.h"
#include "stream/chan_impl.h"

/* The frames the writer sends: sizes around the bound, an empty one, a
 * compressible one (zstd), each also as an INPT chunk (which a channel
 * carries without a checksum), a FILE, then END. */
static const size_t sizes[] = { 0, 1, 100, 4096, 65536, 65535, 200000, 3, 150000, 7, 65504 };
#define NSIZES (sizeof(sizes) / sizeof(*sizes))

struct writer {
	struct mk_io io;
	struct mk_chan *c;   /* closed for writing at the end, as a stage's end is */
	int level;
	size_t nrepeat;      /* the sizes, this many times */
	int rc;
	struct mk_err err;
	bool stopped_early;  /* a write failed (the reader went) */
};

static void fill(uint8_t *b, size_t n, size_t seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)((i * 7 + seed * 13) ^ (i >> 9));
}

static int write_all(struct writer *a)
{
	struct mk_stream_writer *w = NULL;
	uint8_t *buf = malloc(200000);
	int rc;

	assert_non_null(buf);
	rc = mk_sw_open_io(&w, a->io, a->level, &a->err);
	for (size_t r = 0; !rc && r < a->nrepeat; r++)
		for (size_t i = 0; !rc && i < NSIZES; i++) {
			fill(buf, sizes[i], i + r);
			rc = mk_sw_frame1(w, (i & 1) ? "note" : MK_FT_JOB, buf, sizes[i], &a->err);
			if (!rc) {
				struct mk_chunk c = { .id = (uint32_t)i, .dtype = MK_DT_U8, .row_count = 1,
						      .elem_count = sizes[i], .data = buf, .data_len = sizes[i] };
				rc = mk_sw_chunk(w, MK_FT_INPT, &c, &a->err);
			}
		}
	if (!rc) {
		fill(buf, 120000, 99);
		rc = mk_sw_file(w, "big.bin", 0644, buf, 120000, &a->err);
	}
	if (!rc)
		rc = mk_sw_end(w, &a->err);
	mk_sw_free(w);
	free(buf);
	return rc;
}

static void *writer_main(void *p)
{
	struct writer *a = p;

	a->rc = write_all(a);
	a->stopped_early = a->rc != 0;
	mk_chan_close_write(a->c);
	return NULL;
}

/* The stream as a descriptor carries it: the bytes of a memfd. */
static uint8_t *reference(int level, size_t nrepeat, size_t *len)
{
	int fd = memfd_create("test_chan", 0);
	struct writer a = { .io = mk_io_fd(fd), .level = level, .nrepeat = nrepeat };
	off_t end;
	uint8_t *b;

	assert_true(fd >= 0);
	assert_int_equal(write_all(&a), 0);
	end = lseek(fd, 0, SEEK_END);
	b = malloc((size_t)end);
	assert_non_null(b);
	assert_int_equal(pread(fd, b, (size_t)end, 0), end);
	close(fd);
	*len = (size_t)end;
	return b;
}

static void nap(long us)
{
	struct timespec ts = { 0, us * 1000 };
	nanosleep(&ts, NULL);
}

/* Read every frame from the channel (slowly when asked) and gather the
 * stream's bytes as transmitted: prelude, then each frame's wire. */
static void roundtrip(int level, size_t cap, bool slow)
{
	size_t ref_len, got_len = MK_STREAM_PRELUDE;
	uint8_t *ref = reference(level, 3, &ref_len);
	uint8_t *got = malloc(ref_len);
	struct mk_chan *c;
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	struct mk_err err = { 0 };
	int rc, out = memfd_create("test_chan_out", 0);
	pthread_t th;
	struct writer a = { .level = level, .nrepeat = 3 };
	struct mk_stream_writer *w = NULL;
	size_t largest = 0, unsummed = 0;

	assert_non_null(got);
	assert_true(out >= 0);
	assert_int_equal(mk_sw_open(&w, out, 0, &err), 0);
	assert_int_equal(mk_chan_open(&c, cap, &err), 0);
	a.io = mk_io_chan(c);
	a.c = c;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
	memcpy(got, ref, MK_STREAM_PRELUDE); /* the prelude was checked by mk_sr_open */
	while ((rc = mk_sr_next(r, &f, &err)) == 1) {
		bool chunk = !strcmp(f.type, MK_FT_INPT);
		assert_true(f.csum_ok);
		/* chunks alone come without a checksum */
		assert_int_equal(f.csum, chunk ? MK_CSUM_NONE : MK_CSUM_CRC32C);
		unsummed += chunk;
		assert_true(got_len + f.wire_len <= ref_len);
		memcpy(got + got_len, f.wire, f.wire_len);
		got_len += f.wire_len;
		assert_int_equal(mk_sw_pass(w, &f, &err), 0);
		if (f.wire_len > largest)
			largest = f.wire_len;
		if (slow)
			nap(200);
	}
	assert_int_equal(rc, 0);
	mk_chan_close_read(c);
	pthread_join(th, NULL);
	assert_int_equal(a.rc, 0);
	assert_int_equal(unsummed, 3 * NSIZES);
	/* the same frames as over a descriptor, but the chunks' checksum
	 * fields (bytes 5 and 24..27) */
	assert_int_equal(got_len, ref_len);
	for (size_t o = MK_STREAM_PRELUDE; o < ref_len;) {
		uint64_t len;
		memcpy(&len, ref + o + 8, 8);
		if (!memcmp(ref + o, MK_FT_INPT, 4)) {
			assert_int_equal(got[o + 5], MK_CSUM_NONE);
			assert_memory_equal(got + o + 24, "\0\0\0\0", 4);
			memcpy(got + o + 5, ref + o + 5, 1);
			memcpy(got + o + 24, ref + o + 24, 4);
		}
		assert_memory_equal(got + o, ref + o, MK_FRAME_HDR + len);
		o += MK_FRAME_HDR + len;
	}
	/* passed on to a descriptor, the bytes a descriptor carries from the
	 * start: the chunks' checksums computed on the way out */
	mk_sw_free(w);
	assert_int_equal(lseek(out, 0, SEEK_END), (off_t)ref_len);
	assert_int_equal(pread(out, got, ref_len, 0), (ssize_t)ref_len);
	assert_memory_equal(got, ref, ref_len);
	close(out);
	/* the bound: cap, or one frame larger than it */
	size_t bound = cap ? cap : MK_CHAN_DEFAULT_CAP;
	assert_true(mk_chan_peak(c) <= (bound > largest ? bound : largest));
	assert_true(mk_chan_peak(c) > 0);
	mk_sr_free(r);
	mk_chan_free(c);
	free(ref);
	free(got);
}

static void test_roundtrip(void **state)
{
	(void)state;
	roundtrip(0, 0, false);
	roundtrip(0, 64 << 10, true);
	roundtrip(3, 64 << 10, true);   /* zstd frames */
	roundtrip(0, 1, true);          /* a queue of one frame */
}

/* A FILE frame read piecewise from a channel. */
static void test_piecewise(void **state)
{
	struct mk_chan *c;
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	struct mk_err err = { 0 };
	struct writer a = { .nrepeat = 1 };
	uint8_t want[120000], *buf = malloc(1 << 20);
	size_t have = 0, n;
	int rc;
	pthread_t th;
	bool seen = false;

	(void)state;
	assert_non_null(buf);
	fill(want, sizeof(want), 99);
	assert_int_equal(mk_chan_open(&c, 32 << 10, &err), 0);
	a.io = mk_io_chan(c);
	a.c = c;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", MK_SR_PIECEWISE_FILE, &err), 0);
	while ((rc = mk_sr_next(r, &f, &err)) == 1) {
		if (strcmp(f.type, MK_FT_FILE))
			continue;
		assert_true(f.piecewise);
		seen = true;
		do {
			assert_int_equal(mk_sr_read_payload(r, buf + have, 1000, &n, &err), 0);
			have += n;
		} while (n);
	}
	assert_int_equal(rc, 0);
	assert_true(seen);
	/* the payload: mode, name length, name, contents */
	assert_int_equal(have, 8 + strlen("big.bin") + sizeof(want));
	assert_memory_equal(buf + 8 + strlen("big.bin"), want, sizeof(want));
	pthread_join(th, NULL);
	assert_int_equal(a.rc, 0);
	mk_sr_free(r);
	mk_chan_free(c);
	free(buf);
}

struct wire_src {
	const uint8_t *p;
	size_t left;
};

static int wire_piece(void *ctx, void *buf, size_t cap, size_t *got, struct mk_err *err)
{
	struct wire_src *s = ctx;
	size_t n = s->left < cap ? s->left : cap;

	(void)err;
	if (n > 3)
		n = 3;   /* the header in pieces too */
	memcpy(buf, s->p, n);
	s->p += n;
	s->left -= n;
	*got = n;
	return 0;
}

/* A chunk from a channel passed on in pieces to a descriptor: refused
 * (its checksum would be needed first); to another channel: passed. */
static void test_pieces_unsummed(void **state)
{
	struct mk_chan *c, *c2;
	struct mk_stream_reader *r = NULL;
	struct mk_stream_writer *w = NULL, *w2 = NULL;
	struct mk_frame f;
	struct mk_err err = { 0 };
	struct writer a = { .nrepeat = 1 };
	int rc, out = memfd_create("test_chan_out", 0);
	pthread_t th;
	bool seen = false;

	(void)state;
	assert_true(out >= 0);
	assert_int_equal(mk_chan_open(&c, 0, &err), 0);
	assert_int_equal(mk_chan_open(&c2, 1 << 30, &err), 0);
	a.io = mk_io_chan(c);
	a.c = c;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
	assert_int_equal(mk_sw_open(&w, out, 0, &err), 0);
	assert_int_equal(mk_sw_open_io(&w2, mk_io_chan(c2), 0, &err), 0);
	while ((rc = mk_sr_next(r, &f, &err)) == 1) {
		struct wire_src s = { f.wire, f.wire_len };
		if (strcmp(f.type, MK_FT_INPT) || f.len < 100)
			continue;
		seen = true;
		assert_int_equal(mk_sw_pass_pieces(w, &f, wire_piece, &s, &err), -MK_EINVAL);
		assert_non_null(strstr(err.msg, "cannot leave the process in pieces"));
		s = (struct wire_src){ f.wire, f.wire_len };
		assert_int_equal(mk_sw_pass_pieces(w2, &f, wire_piece, &s, &err), 0);
		break;
	}
	assert_true(seen);
	mk_chan_close_read(c);
	pthread_join(th, NULL);
	mk_sw_free(w);
	mk_sw_free(w2);
	mk_sr_free(r);
	mk_chan_free(c);
	mk_chan_free(c2);
	close(out);
}

/* The reader goes: the writer's next write fails (EPIPE), and a writer
 * blocked on a full queue wakes to fail. */
static void test_reader_gone(void **state)
{
	struct mk_chan *c;
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	struct mk_err err = { 0 };
	struct writer a = { .nrepeat = 1000 };
	pthread_t th;

	(void)state;
	assert_int_equal(mk_chan_open(&c, 64 << 10, &err), 0);
	a.io = mk_io_chan(c);
	a.c = c;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &a), 0);
	assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	nap(20000);                     /* the writer fills the queue and waits */
	mk_chan_close_read(c);
	pthread_join(th, NULL);
	assert_true(a.stopped_early);
	assert_non_null(strstr(a.err.msg, "writing the stream"));
	assert_non_null(strstr(a.err.msg, strerror(EPIPE)));
	/* and the reader sees its stream end, cut */
	assert_int_not_equal(mk_sr_next(r, &f, &err), 1);
	assert_non_null(strstr(err.msg, "without an END frame"));
	mk_sr_free(r);
	mk_chan_free(c);
}

/* The writer stops before END: the reader gets what was queued, then a
 * cut stream. */
static void test_writer_gone(void **state)
{
	struct mk_chan *c;
	struct mk_stream_writer *w = NULL;
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	struct mk_err err = { 0 };

	(void)state;
	assert_int_equal(mk_chan_open(&c, 0, &err), 0);
	assert_int_equal(mk_sw_open_io(&w, mk_io_chan(c), 0, &err), 0);
	assert_int_equal(mk_sw_frame1(w, MK_FT_JOB, "{}", 2, &err), 0);
	assert_int_equal(mk_sw_frame1(w, "note", "hello", 5, &err), 0);
	mk_chan_close_write(c);
	assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_string_equal(f.type, MK_FT_JOB);
	assert_int_equal(mk_sr_next(r, &f, &err), 1);
	assert_memory_equal(f.payload, "hello", 5);
	assert_int_not_equal(mk_sr_next(r, &f, &err), 1);
	assert_non_null(strstr(err.msg, "stream ended after frame #1 without an END frame"));
	mk_sr_free(r);
	mk_sw_free(w);
	/* an empty channel: the reader's empty-input message */
	mk_chan_free(c);
	assert_int_equal(mk_chan_open(&c, 0, &err), 0);
	mk_chan_close_write(c);
	assert_int_not_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
	assert_non_null(strstr(err.msg, "empty input"));
	mk_chan_free(c);
}

/* A channel is memory only: opening one takes no descriptor of the
 * process (the stream calls reach it through mk_io_chan). */
static size_t open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	size_t n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

static void test_no_descriptors(void **state)
{
	struct mk_chan *c;
	struct mk_err err = { 0 };
	size_t before = open_fds();

	(void)state;
	assert_int_equal(mk_chan_open(&c, 0, &err), 0);
	assert_int_equal(open_fds(), before);
	mk_chan_free(c);
}

/* ---- chunks filled in place (mk_sw_chunk_reserve on a channel) */

/* The chunk frames of sizes[] (each also dropped once before it is sent),
 * DATA and INPT by turns, their payloads written after the reservation. */
struct pwriter {
	struct mk_io io;
	struct mk_chan *c;
	bool in_place;       /* reserve/commit; else mk_sw_chunk (the reference) */
	int rc;
	struct mk_err err;
};

static int pwrite_all(struct pwriter *a)
{
	struct mk_stream_writer *w = NULL;
	uint8_t *buf = malloc(200000);
	int rc = mk_sw_open_io(&w, a->io, 0, &a->err);

	assert_non_null(buf);
	for (size_t i = 0; !rc && i < NSIZES; i++) {
		const char *type = i & 1 ? MK_FT_DATA : MK_FT_INPT;
		struct mk_chunk c = { .id = (uint32_t)i, .dtype = MK_DT_U8, .row_count = 1, .elem_begin = 7 * i,
				      .elem_count = sizes[i], .data = buf, .data_len = sizes[i] };
		fill(buf, sizes[i], 40 + i);
		if (!a->in_place) {
			rc = mk_sw_chunk(w, type, &c, &a->err);
			continue;
		}
		void *data;
		/* one reserved and dropped: never sent, its room given back */
		assert_int_equal(mk_sw_chunk_reserve(w, type, &c, &data, &a->err), 1);
		memset(data, 0xee, sizes[i]);
		mk_sw_chunk_unreserve(w);
		c.data = NULL;   /* not read: the headers are made from the fields */
		rc = mk_sw_chunk_reserve(w, type, &c, &data, &a->err);
		if (rc == 1) {
			fill(data, sizes[i], 40 + i);
			rc = mk_sw_chunk_commit(w, &a->err);
		}
	}
	if (!rc)
		rc = mk_sw_end(w, &a->err);
	mk_sw_free(w);
	free(buf);
	return rc;
}

static void *pwriter_main(void *p)
{
	struct pwriter *a = p;

	a->rc = pwrite_all(a);
	if (a->c)
		mk_chan_close_write(a->c);
	return NULL;
}

/* Filled in place, the frames are those mk_sw_chunk sends on a channel
 * (a descriptor's, but the checksum fields), the dropped ones are not
 * sent, and the queue stays within its bound; a descriptor writer, a
 * compressing one and a frame with a checksum take none in place. */
static void test_in_place(void **state)
{
	int ref_fd = memfd_create("test_chan_pref", 0), rc;
	struct pwriter ref = { .io = mk_io_fd(ref_fd) };
	struct mk_chan *c;
	struct mk_stream_reader *r = NULL;
	struct mk_stream_writer *w = NULL;
	struct mk_frame f;
	struct mk_err err = { 0 };
	pthread_t th;
	uint8_t *want;
	off_t want_len;
	size_t at = MK_STREAM_PRELUDE, frames = 0, cap = 64 << 10, largest = 0;
	void *data;

	(void)state;
	assert_true(ref_fd >= 0);
	assert_int_equal(pwrite_all(&ref), 0);
	want_len = lseek(ref_fd, 0, SEEK_END);
	want = malloc((size_t)want_len);
	assert_non_null(want);
	assert_int_equal(pread(ref_fd, want, (size_t)want_len, 0), want_len);
	/* not on a descriptor */
	assert_int_equal(mk_sw_open(&w, ref_fd, 0, &err), 0);
	struct mk_chunk c1 = { .dtype = MK_DT_U8, .row_count = 1, .elem_count = 10, .data_len = 10 };
	assert_int_equal(mk_sw_chunk_reserve(w, MK_FT_DATA, &c1, &data, &err), 0);
	assert_null(data);
	mk_sw_free(w);
	close(ref_fd);

	assert_int_equal(mk_chan_open(&c, cap, &err), 0);
	struct pwriter a = { .io = mk_io_chan(c), .c = c, .in_place = true };
	assert_int_equal(pthread_create(&th, NULL, pwriter_main, &a), 0);
	assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
	while ((rc = mk_sr_next(r, &f, &err)) == 1) {
		uint64_t len;
		assert_true(at + f.wire_len <= (size_t)want_len);
		memcpy(&len, want + at + 8, 8);
		assert_int_equal(f.wire_len, MK_FRAME_HDR + len);
		if (strcmp(f.type, MK_FT_END)) {
			assert_int_equal(f.csum, MK_CSUM_NONE);
			assert_memory_equal(f.wire, want + at, 5);
			assert_memory_equal(f.wire + 6, want + at + 6, 24 - 6);
			assert_memory_equal(f.wire + 28, want + at + 28, f.wire_len - 28);
			frames++;
		}
		if (f.wire_len > largest)
			largest = f.wire_len;
		at += f.wire_len;
		nap(100);   /* a slow reader: the writer waits for room */
	}
	assert_int_equal(rc, 0);
	assert_int_equal(at, (size_t)want_len);
	assert_int_equal(frames, NSIZES);
	pthread_join(th, NULL);
	assert_int_equal(a.rc, 0);
	assert_true(mk_chan_peak(c) <= (cap > largest ? cap : largest));
	mk_sr_free(r);
	mk_chan_free(c);

	/* compressing, or a frame with a checksum on a channel: none */
	assert_int_equal(mk_chan_open(&c, 0, &err), 0);
	assert_int_equal(mk_sw_open_io(&w, mk_io_chan(c), 3, &err), 0);
	assert_int_equal(mk_sw_chunk_reserve(w, MK_FT_DATA, &c1, &data, &err), 0);
	mk_sw_free(w);
	assert_int_equal(mk_sw_open_io(&w, mk_io_chan(c), 0, &err), 0);
	assert_int_equal(mk_sw_chunk_reserve(w, "note", &c1, &data, &err), 0);
	/* one left reserved goes with the writer */
	assert_int_equal(mk_sw_chunk_reserve(w, MK_FT_DATA, &c1, &data, &err), 1);
	mk_sw_free(w);
	/* the reader gone: a reservation fails, and so does a commit */
	assert_int_equal(mk_sw_open_io(&w, mk_io_chan(c), 0, &err), 0);
	assert_int_equal(mk_sw_chunk_reserve(w, MK_FT_DATA, &c1, &data, &err), 1);
	mk_chan_close_read(c);
	assert_int_not_equal(mk_sw_chunk_commit(w, &err), 0);
	assert_non_null(strstr(err.msg, strerror(EPIPE)));
	assert_int_not_equal(mk_sw_chunk_reserve(w, MK_FT_DATA, &c1, &data, &err), 1);
	assert_non_null(strstr(err.msg, strerror(EPIPE)));
	mk_sw_free(w);
	mk_chan_free(c);
	free(want);
}

/* ---- chunks mapped from their file (mk_sw_chunk_splice on a channel) */

/* Chunks of a file: (offset, bytes) with offsets at and off page bounds,
 * one too near the file's start to carry its headers before it (copied),
 * one under MK_MAP_MIN (copied), and two on one page (mapped twice). */
static const struct { uint64_t off; size_t len; } mchunks[] = {
	{ 4096, 300000 }, { 5000, 400000 }, { 10, 300000 }, { 900001, 262144 },
	{ 1200000, 1000 }, { 1300000, 500000 }, { 1300080, 262144 }, { 8192 * 3 + 79, 600000 },
};
#define NMCHUNKS (sizeof(mchunks) / sizeof(*mchunks))
#define MFILE (2u << 20)

struct mwriter {
	struct mk_io io;
	int src;
	struct mk_chan *c;
	const uint8_t *bytes;  /* the file's, for c.data */
	bool pipe_like;        /* to a descriptor: the reference */
	int rc;
	struct mk_err err;
};

static int mwrite_all(struct mwriter *a)
{
	struct mk_stream_writer *w = NULL;
	int rc = mk_sw_open_io(&w, a->io, 0, &a->err);

	for (size_t i = 0; !rc && i < NMCHUNKS; i++) {
		struct mk_chunk c = { .id = (uint32_t)i, .dtype = MK_DT_U8, .row_count = 1,
				      .elem_count = mchunks[i].len, .data = a->bytes + mchunks[i].off,
				      .data_len = mchunks[i].len };
		rc = mk_sw_chunk_splice(w, i & 1 ? MK_FT_DATA : MK_FT_INPT, &c, a->src, mchunks[i].off, &a->err);
	}
	if (!rc)
		rc = mk_sw_end(w, &a->err);
	mk_sw_free(w);
	return rc;
}

static void *mwriter_main(void *p)
{
	struct mwriter *a = p;

	a->rc = mwrite_all(a);
	if (a->c)
		mk_chan_close_write(a->c);
	return NULL;
}

/* Mappings of the file this process has. */
static int maps_of(const char *path)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, path) != NULL;
	fclose(f);
	return n;
}

/* Each chunk arrives with the file's bytes, lent where it was mapped; a
 * kept one stays valid past later frames and until released; passed on
 * to a descriptor, the stream is the bytes a descriptor carries; no
 * mapping is left, read to the end or dropped by the reader going. */
static void test_mapped(void **state)
{
	char path[] = "/tmp/test_chan_mapXXXXXX";
	int src = mkstemp(path), out = memfd_create("test_chan_ref", 0), out2 = memfd_create("test_chan_out", 0);
	uint8_t *bytes = malloc(MFILE), *ref, *got;
	struct mk_err err = { 0 };
	off_t ref_len;

	(void)state;
	assert_true(src >= 0 && out >= 0 && out2 >= 0);
	assert_non_null(bytes);
	fill(bytes, MFILE, 5);
	assert_int_equal(write(src, bytes, MFILE), (ssize_t)MFILE);
	/* the reference: over a descriptor */
	{
		struct mwriter a = { .io = mk_io_fd(out), .src = src, .bytes = bytes };
		assert_int_equal(mwrite_all(&a), 0);
		ref_len = lseek(out, 0, SEEK_END);
		ref = malloc((size_t)ref_len);
		got = malloc((size_t)ref_len);
		assert_non_null(ref);
		assert_non_null(got);
		assert_int_equal(pread(out, ref, (size_t)ref_len, 0), ref_len);
	}
	for (int round = 0; round < 2; round++) {
		struct mk_chan *c;
		struct mk_stream_reader *r = NULL;
		struct mk_stream_writer *w = NULL;
		struct mk_frame f;
		struct mk_frame_keep keep[NMCHUNKS] = { 0 };
		const uint8_t *kept_data[NMCHUNKS] = { 0 };
		size_t i = 0, nkept = 0;
		int rc;
		pthread_t th;
		struct mwriter a = { .src = src, .bytes = bytes };

		/* a queue of 1 MiB: the writer waits for the reader */
		assert_int_equal(mk_chan_open(&c, 1 << 20, &err), 0);
		a.io = mk_io_chan(c);
		a.c = c;
		assert_int_equal(pthread_create(&th, NULL, mwriter_main, &a), 0);
		assert_int_equal(mk_sr_open_io(&r, mk_io_chan(c), "chan", 0, &err), 0);
		assert_int_equal(ftruncate(out2, 0), 0);
		assert_int_equal(mk_sw_open(&w, out2, 0, &err), 0);
		while ((rc = mk_sr_next(r, &f, &err)) == 1) {
			struct mk_chunk ch;
			if (!strcmp(f.type, MK_FT_END)) {
				assert_int_equal(mk_sw_pass(w, &f, &err), 0);
				continue;
			}
			assert_true(f.csum_ok);
			assert_int_equal(f.csum, MK_CSUM_NONE);
			assert_int_equal(mk_chunk_decode(f.payload, f.payload_len, &ch, &err), 0);
			assert_int_equal(ch.id, i);
			assert_int_equal(ch.data_len, mchunks[i].len);
			assert_memory_equal(ch.data, bytes + mchunks[i].off, mchunks[i].len);
			assert_int_equal(mk_sw_pass(w, &f, &err), 0);
			/* lent when mapped: at least MK_MAP_MIN bytes, room before */
			bool mapped = mchunks[i].len >= MK_MAP_MIN && mchunks[i].off >= MK_FRAME_HDR + MK_CHUNK_HDR;
			if (mapped) {
				/* not in the file's pages: the headers' copy */
				assert_true(ch.data != bytes + mchunks[i].off);
			}
			if (i % 3 == 0 || round == 1) {
				bool k = mk_sr_keep(r, &f, &keep[i]);
				assert_int_equal(k, mapped);
				assert_int_equal(keep[i].map != NULL, mapped);
				if (k) {
					kept_data[i] = ch.data;
					nkept++;
				}
			}
			i++;
			if (round == 1 && i == 4)
				break;   /* the reader goes, frames still queued */
		}
		if (round == 0) {
			assert_int_equal(rc, 0);
			assert_int_equal(i, NMCHUNKS);
			assert_true(nkept >= 2);
		} else {
			assert_int_equal(nkept, 3);   /* chunks 0, 1 and 3 mapped */
		}
		/* the kept chunks are still there */
		for (size_t k = 0; k < NMCHUNKS; k++)
			if (kept_data[k])
				assert_memory_equal(kept_data[k], bytes + mchunks[k].off, mchunks[k].len);
		mk_chan_close_read(c);
		pthread_join(th, NULL);
		if (round == 0) {
			assert_int_equal(a.rc, 0);
			/* passed on to a descriptor: the reference's bytes */
			assert_int_equal(lseek(out2, 0, SEEK_END), ref_len);
			assert_int_equal(pread(out2, got, (size_t)ref_len, 0), ref_len);
			assert_memory_equal(got, ref, (size_t)ref_len);
		} else {
			assert_true(a.rc < 0);   /* its write failed: the reader went */
			assert_non_null(strstr(a.err.msg, "writing the stream"));
		}
		mk_sw_free(w);
		mk_sr_free(r);
		assert_true(maps_of(path) == (int)nkept);
		for (size_t k = 0; k < NMCHUNKS; k++)
			mk_frame_keep_release(&keep[k]);
		assert_int_equal(maps_of(path), 0);
		mk_chan_free(c);
	}
	close(src);
	unlink(path);
	close(out);
	close(out2);
	free(bytes);
	free(ref);
	free(got);
}

/* The skip board: a pass marked for the job mk-merge is on reads as
 * marked for that job only; marks of the same job add up; a mark for
 * another job replaces them; passes from 32 on are never marked.  (One
 * thread marks, mk-merge's; mk-fetch's only reads.) */
static void test_skip_board(void **state)
{
	struct mk_chan_skip *s;
	struct mk_err err;

	(void)state;
	assert_int_equal(mk_chan_skip_new(&s, &err), 0);
	for (unsigned p = 0; p < 40; p++)
		assert_false(mk_chan_skip_test(s, 0, p));
	assert_true(mk_chan_skip_mark(s, 3, 1));
	assert_true(mk_chan_skip_test(s, 3, 1));
	assert_false(mk_chan_skip_test(s, 3, 0));
	assert_false(mk_chan_skip_test(s, 3, 2));
	assert_false(mk_chan_skip_test(s, 4, 1));
	mk_chan_skip_mark(s, 3, 3);
	assert_true(mk_chan_skip_test(s, 3, 1));
	assert_true(mk_chan_skip_test(s, 3, 3));
	assert_false(mk_chan_skip_mark(s, 3, 32));   /* out of range: nothing */
	assert_false(mk_chan_skip_test(s, 3, 32));
	mk_chan_skip_mark(s, 5, 0);            /* the next job: its marks only */
	assert_true(mk_chan_skip_test(s, 5, 0));
	assert_false(mk_chan_skip_test(s, 3, 1));
	assert_false(mk_chan_skip_test(s, 3, 3));
	assert_false(mk_chan_skip_mark(s, UINT32_MAX, 0));   /* (the empty board's job: refused) */
	assert_false(mk_chan_skip_test(s, UINT32_MAX, 0));
	assert_true(mk_chan_skip_test(s, 5, 0));
	for (unsigned p = 0; p < 32; p++)
		mk_chan_skip_mark(s, 9, p);
	for (unsigned p = 0; p < 32; p++)
		assert_true(mk_chan_skip_test(s, 9, p));
	assert_false(mk_chan_skip_test(s, 5, 0));
	mk_chan_skip_free(s);
	mk_chan_skip_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_skip_board),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_piecewise),
		cmocka_unit_test(test_pieces_unsummed),
		cmocka_unit_test(test_mapped),
		cmocka_unit_test(test_in_place),
		cmocka_unit_test(test_reader_gone),
		cmocka_unit_test(test_writer_gone),
		cmocka_unit_test(test_no_descriptors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
