/* test_reader.c - the three reader backends, $MK_IO, and the fallback. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "io/reader.h"
#include "io/reader_impl.h"

static char tmpdir[256];

/* The byte at offset i of pattern file `seed`. */
static unsigned char pat(unsigned seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32);

	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	x ^= x >> 32;
	return (unsigned char)x;
}

static int make_file(const char *name, uint64_t size, unsigned seed,
		     char *path, size_t pathsz)
{
	static unsigned char buf[1 << 20];
	uint64_t at = 0;
	int fd;

	snprintf(path, pathsz, "%s/%s", tmpdir, name);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	while (at < size) {
		size_t n = size - at < sizeof(buf) ? (size_t)(size - at) : sizeof(buf);
		size_t i;

		for (i = 0; i < n; i++)
			buf[i] = pat(seed, at + i);
		assert_int_equal(write(fd, buf, n), (ssize_t)n);
		at += n;
	}
	return fd;
}

/* A planned sequence of extents; tags point at the plan entries. */
struct plan {
	struct mk_read_req *v;
	unsigned *seed;          /* pattern of each extent's file */
	size_t n, cap, at;
	int fail_at;             /* >= 0: next() fails there */
};

static void plan_add(struct plan *p, int fd, unsigned seed, uint64_t off,
		     size_t len)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? 2 * p->cap : 64;
		p->v = realloc(p->v, p->cap * sizeof(*p->v));
		p->seed = realloc(p->seed, p->cap * sizeof(*p->seed));
		assert_non_null(p->v);
		assert_non_null(p->seed);
	}
	p->v[p->n] = (struct mk_read_req){ .fd = fd, .off = off, .len = len, .tag = &p->v[p->n] };
	p->seed[p->n] = seed;
	p->n++;
}

static void plan_free(struct plan *p)
{
	free(p->v);
	free(p->seed);
	memset(p, 0, sizeof(*p));
}

static int plan_next(void *ctx, struct mk_read_req *req, struct mk_err *err)
{
	struct plan *p = ctx;

	if (p->fail_at >= 0 && p->at == (size_t)p->fail_at)
		return mk_err_set(err, MK_EFORMAT, "plan: bad entry %zu", p->at);
	if (p->at == p->n)
		return 0;
	*req = p->v[p->at];
	/* tags are re-pointed in case v moved after the first fill */
	req->tag = &p->v[p->at];
	p->at++;
	return 1;
}

static struct mk_reader *open_kind(enum mk_io_kind kind, size_t chunk,
				   unsigned qd, struct plan *p)
{
	struct mk_reader_opts o = { .kind = kind, .chunk_bytes = chunk, .qdepth = qd };
	struct mk_reader *r = NULL;
	struct mk_err err;
	int rc;

	mk_err_clear(&err);
	p->at = 0;
	rc = mk_reader_open(&r, &o, plan_next, p, &err);
	if (rc < 0)
		fail_msg("open: %s", err.msg);
	assert_non_null(r);
	return r;
}

/* Read the whole plan, checking order, tags and every byte; returns the
 * number of extents delivered before the end or the error (*rc). */
static size_t drain(struct mk_reader *r, struct plan *p, int *rc,
		    struct mk_err *err)
{
	const void *data;
	struct mk_read_req req;
	size_t i = 0, j;

	mk_err_clear(err);
	while ((*rc = mk_reader_get(r, &data, &req, err)) == 1) {
		const unsigned char *d = data;

		assert_true(i < p->n);
		assert_int_equal(req.fd, p->v[i].fd);
		assert_int_equal(req.off, p->v[i].off);
		assert_int_equal(req.len, p->v[i].len);
		assert_ptr_equal(req.tag, &p->v[i]);
		for (j = 0; j < req.len; j++)
			if (d[j] != pat(p->seed[i], req.off + j))
				fail_msg("extent %zu byte %zu differs", i, j);
		i++;
	}
	return i;
}

static void read_all_ok(enum mk_io_kind kind, size_t chunk, unsigned qd,
			struct plan *p)
{
	struct mk_reader *r = open_kind(kind, chunk, qd, p);
	struct mk_err err;
	size_t n;
	int rc;

	assert_int_equal(mk_reader_qdepth(r), qd);
	assert_int_equal(mk_reader_chunk_bytes(r), chunk);
	n = drain(r, p, &rc, &err);
	if (rc != 0)
		fail_msg("%s: %s", mk_reader_backend(r), err.msg);
	assert_int_equal(n, p->n);
	/* the end is sticky */
	assert_int_equal(mk_reader_get(r, &(const void *){ NULL },
				       &(struct mk_read_req){ 0 }, &err), 0);
	mk_reader_free(r);
}

static const char *kind_prefix(enum mk_io_kind k)
{
	return k == MK_IO_URING ? "uring" : k == MK_IO_MMAP ? "mmap" : "pread";
}

static uint64_t rnd_state = 88172645463325252ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

#define F0_SIZE ((1u << 20) + 123)
#define F1_SIZE 300001u

static void test_orders(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	static const unsigned qds[] = { 1, 8, 3 };
	char p0[512], p1[512];
	int f0 = make_file("f0", F0_SIZE, 1, p0, sizeof(p0));
	int f1 = make_file("f1", F1_SIZE, 2, p1, sizeof(p1));
	const size_t chunk = 64 << 10;
	struct plan p = { .fail_at = -1 };
	struct mk_reader *r;
	uint64_t off;
	size_t qi, i;

	/* name of the backend */
	r = open_kind(kind, chunk, 8, &p);
	assert_true(!strncmp(mk_reader_backend(r), kind_prefix(kind),
			     strlen(kind_prefix(kind))));
	mk_reader_free(r);

	for (qi = 0; qi < sizeof(qds) / sizeof(qds[0]); qi++) {
		/* front to back, the last extent short */
		for (off = 0; off < F0_SIZE; off += chunk)
			plan_add(&p, f0, 1, off, F0_SIZE - off < chunk ?
				 F0_SIZE - off : chunk);
		read_all_ok(kind, chunk, qds[qi], &p);
		plan_free(&p);
		p.fail_at = -1;

		/* random extents across both files, 1 byte .. chunk */
		for (i = 0; i < 400; i++) {
			int which = rnd() & 1;
			uint64_t size = which ? F1_SIZE : F0_SIZE;
			size_t len = (i % 5 == 0) ? 1 + rnd() % 7 :
				     (i % 7 == 0) ? chunk : 1 + rnd() % chunk;

			if (len > size)
				len = size;
			off = rnd() % (size - len + 1);
			if (i % 3 == 0)
				off |= 1; /* odd */
			if (off + len > size)
				off = size - len;
			plan_add(&p, which ? f1 : f0, which ? 2 : 1, off, len);
		}
		/* the same extent twice, and extents sharing a page */
		plan_add(&p, f1, 2, 4095, 2);
		plan_add(&p, f1, 2, 4095, 2);
		plan_add(&p, f1, 2, 4097, 100);
		plan_add(&p, f0, 1, F0_SIZE - 1, 1);
		plan_add(&p, f1, 2, 0, chunk);
		read_all_ok(kind, chunk, qds[qi], &p);
		plan_free(&p);
		p.fail_at = -1;
	}
	close(f0);
	close(f1);
	unlink(p0);
	unlink(p1);
}

static void test_many_files(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	struct plan p = { .fail_at = -1 };
	char path[20][512], name[16];
	int fd[20];
	unsigned i, k;

	for (i = 0; i < 20; i++) {
		snprintf(name, sizeof(name), "m%u", i);
		fd[i] = make_file(name, 20000 + i, 100 + i, path[i], sizeof(path[i]));
	}
	for (k = 0; k < 3; k++)
		for (i = 0; i < 20; i++)
			plan_add(&p, fd[(i * 7 + k) % 20], 100 + (i * 7 + k) % 20,
				 k * 3001, 4000 + i);
	read_all_ok(kind, 8192, 4, &p);
	plan_free(&p);
	for (i = 0; i < 20; i++) {
		close(fd[i]);
		unlink(path[i]);
	}
}

static void test_truncated(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	struct plan p = { .fail_at = -1 };
	char path[512], want[128];
	int fd = make_file("trunc", 10000, 3, path, sizeof(path));
	struct mk_reader *r;
	struct mk_err err;
	unsigned qd;
	int rc;

	for (qd = 1; qd <= 8; qd += 7) {
		plan_add(&p, fd, 3, 0, 4000);
		plan_add(&p, fd, 3, 4000, 4000);
		plan_add(&p, fd, 3, 8000, 4000);  /* 2000 past the end */
		plan_add(&p, fd, 3, 0, 10);
		r = open_kind(kind, 4096, qd, &p);
		assert_int_equal(drain(r, &p, &rc, &err), 2);
		assert_int_equal(rc, -MK_ECORRUPT);
		assert_int_equal(err.code, MK_ECORRUPT);
		assert_non_null(strstr(err.msg, "was truncated while being read (file offset 8000: "
				       "expected 4000 bytes, got 2000)"));
		assert_non_null(strstr(err.msg, path));
		/* sticky */
		mk_err_clear(&err);
		assert_int_equal(mk_reader_get(r, &(const void *){ NULL },
					       &(struct mk_read_req){ 0 }, &err),
				 -MK_ECORRUPT);
		assert_non_null(strstr(err.msg, "truncated while being read"));
		mk_reader_free(r);
		plan_free(&p);
		p.fail_at = -1;

		/* wholly past the end */
		plan_add(&p, fd, 3, 20000, 5);
		r = open_kind(kind, 4096, qd, &p);
		assert_int_equal(drain(r, &p, &rc, &err), 0);
		assert_int_equal(rc, -MK_ECORRUPT);
		snprintf(want, sizeof(want), "file offset 20000: expected 5 "
			 "bytes, got 0");
		assert_non_null(strstr(err.msg, want));
		mk_reader_free(r);
		plan_free(&p);
		p.fail_at = -1;
	}
	close(fd);
	unlink(path);
}

static void test_bad_extents(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	struct plan p = { .fail_at = -1 };
	char path[512];
	int fd = make_file("bad", 100000, 4, path, sizeof(path));
	struct mk_reader *r;
	struct mk_err err;
	int rc;

	/* longer than a chunk: the ones before it arrive, then EINVAL */
	plan_add(&p, fd, 4, 0, 100);
	plan_add(&p, fd, 4, 100, 4096);
	plan_add(&p, fd, 4, 0, 4097);
	plan_add(&p, fd, 4, 0, 1);
	r = open_kind(kind, 4096, 8, &p);
	assert_int_equal(drain(r, &p, &rc, &err), 2);
	assert_int_equal(rc, -MK_EINVAL);
	assert_non_null(strstr(err.msg, "4097 bytes"));
	mk_reader_free(r);
	plan_free(&p);

	/* zero length */
	p.fail_at = -1;
	plan_add(&p, fd, 4, 0, 0);
	r = open_kind(kind, 4096, 8, &p);
	assert_int_equal(drain(r, &p, &rc, &err), 0);
	assert_int_equal(rc, -MK_EINVAL);
	mk_reader_free(r);
	plan_free(&p);

	/* negative fd */
	p.fail_at = -1;
	plan_add(&p, -1, 4, 0, 10);
	r = open_kind(kind, 4096, 8, &p);
	assert_int_equal(drain(r, &p, &rc, &err), 0);
	assert_int_equal(rc, -MK_EINVAL);
	mk_reader_free(r);
	plan_free(&p);

	/* next() fails after two: both arrive, then its error verbatim */
	p.fail_at = 2;
	plan_add(&p, fd, 4, 0, 10);
	plan_add(&p, fd, 4, 10, 10);
	plan_add(&p, fd, 4, 20, 10);
	r = open_kind(kind, 4096, 1, &p);
	assert_int_equal(drain(r, &p, &rc, &err), 2);
	assert_int_equal(rc, -MK_EFORMAT);
	assert_string_equal(err.msg, "plan: bad entry 2");
	mk_reader_free(r);
	plan_free(&p);

	close(fd);
	unlink(path);
}

/* An fd the reader cannot read: an I/O error naming the file. */
static void test_unreadable_fd(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	struct plan p = { .fail_at = -1 };
	char path[512];
	int fd = make_file("wo", 5000, 5, path, sizeof(path));
	int wo = open(path, O_WRONLY);
	struct mk_reader *r;
	struct mk_err err;
	int rc;

	assert_true(wo >= 0);
	plan_add(&p, fd, 5, 0, 10);
	plan_add(&p, wo, 5, 0, 10);
	r = open_kind(kind, 4096, 8, &p);
	assert_int_equal(drain(r, &p, &rc, &err), 1);
	assert_int_equal(rc, -MK_EIO);
	assert_non_null(strstr(err.msg, path));
	mk_reader_free(r);
	plan_free(&p);
	close(wo);
	close(fd);
	unlink(path);
}

static void test_empty(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	struct plan p = { .fail_at = -1 };
	struct mk_reader *r = open_kind(kind, 0, 0, &p);
	struct mk_read_req req;
	const void *data;
	struct mk_err err;

	assert_int_equal(mk_reader_qdepth(r), MK_READER_DEFAULT_QDEPTH);
	assert_int_equal(mk_reader_chunk_bytes(r), MK_READER_DEFAULT_CHUNK);
	assert_int_equal(mk_reader_get(r, &data, &req, &err), 0);
	assert_int_equal(mk_reader_get(r, &data, &req, &err), 0);
	mk_reader_free(r);
}

/* Freed with reads in flight: nothing leaks, nothing writes freed memory
 * (ASan run). */
static void test_free_early(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	struct plan p = { .fail_at = -1 };
	char path[512];
	int fd = make_file("early", 4 << 20, 6, path, sizeof(path));
	struct mk_read_req req;
	const void *data;
	struct mk_err err;
	struct mk_reader *r;
	unsigned i;

	for (i = 0; i < 16; i++)
		plan_add(&p, fd, 6, (uint64_t)i << 18, 1 << 18);
	r = open_kind(kind, 1 << 18, 8, &p);
	mk_reader_free(r);  /* nothing taken */
	r = open_kind(kind, 1 << 18, 8, &p);
	assert_int_equal(mk_reader_get(r, &data, &req, &err), 1);
	assert_int_equal(((const unsigned char *)data)[5], pat(6, 5));
	mk_reader_free(r);
	plan_free(&p);
	close(fd);
	unlink(path);
}

static volatile unsigned char sink;

static long vm_rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* Stream 256 MB with chunk 1 MB, qdepth 8: RSS grows by < 48 MB. */
static void test_rss_bound(void **state)
{
	enum mk_io_kind kind = *(enum mk_io_kind *)*state;
	const uint64_t size = 256ull << 20;
	const size_t chunk = 1 << 20;
	struct plan p = { .fail_at = -1 };
	char path[512];
	int fd = make_file("big", size, 7, path, sizeof(path));
	struct mk_read_req req;
	const void *data;
	struct mk_err err;
	struct mk_reader *r;
	long base, peak = 0, now;
	uint64_t off, sum = 0, want = 0;
	unsigned n = 0;
	size_t i;
	int rc;

	for (off = 0; off < size; off += chunk)
		plan_add(&p, fd, 7, off, chunk);
	for (i = 0; i < 4096; i++)  /* spot checks */
		want += pat(7, i * 65536 + 77);
	base = vm_rss_kb();
	r = open_kind(kind, chunk, 8, &p);
	mk_err_clear(&err);
	while ((rc = mk_reader_get(r, &data, &req, &err)) == 1) {
		const unsigned char *d = data;
		unsigned char t = 0;

		for (i = 0; i < chunk; i += 4096)  /* touch every page */
			t ^= d[i];
		sink = t;
		sum += d[77] + d[65536 + 77] + d[2 * 65536 + 77] +
		       d[3 * 65536 + 77] + d[4 * 65536 + 77] +
		       d[5 * 65536 + 77] + d[6 * 65536 + 77] +
		       d[7 * 65536 + 77] + d[8 * 65536 + 77] +
		       d[9 * 65536 + 77] + d[10 * 65536 + 77] +
		       d[11 * 65536 + 77] + d[12 * 65536 + 77] +
		       d[13 * 65536 + 77] + d[14 * 65536 + 77] +
		       d[15 * 65536 + 77];
		if (++n % 16 == 0) {
			now = vm_rss_kb();
			if (now > peak)
				peak = now;
		}
	}
	if (rc != 0)
		fail_msg("%s", err.msg);
	assert_int_equal(n, size / chunk);
	assert_int_equal(sum, want);
	now = vm_rss_kb();
	if (now > peak)
		peak = now;
	print_message("    %s: VmRSS %ld kB before, peak %ld kB (+%ld kB)\n",
		      mk_reader_backend(r), base, peak, peak - base);
	assert_true(peak - base < 48 * 1024);
	mk_reader_free(r);
	plan_free(&p);
	close(fd);
	unlink(path);
}

static void test_parse(void **state)
{
	enum mk_io_kind k = MK_IO_AUTO;

	assert_int_equal(mk_io_kind_parse("uring", &k), 0);
	assert_int_equal(k, MK_IO_URING);
	assert_int_equal(mk_io_kind_parse("mmap", &k), 0);
	assert_int_equal(k, MK_IO_MMAP);
	assert_int_equal(mk_io_kind_parse("pread", &k), 0);
	assert_int_equal(k, MK_IO_PREAD);
	assert_int_equal(mk_io_kind_parse("auto", &k), 0);
	assert_int_equal(k, MK_IO_AUTO);
	assert_int_equal(mk_io_kind_parse("URING", &k), -1);
	assert_int_equal(mk_io_kind_parse("", &k), -1);
	assert_int_equal(mk_io_kind_parse("io_uring", &k), -1);
	assert_int_equal(mk_io_kind_parse(NULL, &k), -1);
	assert_int_equal(k, MK_IO_AUTO);
}

static void test_bad_opts(void **state)
{
	struct mk_reader_opts o = { .kind = MK_IO_PREAD, .chunk_bytes = (size_t)2 << 30, .qdepth = 8 };
	struct plan p = { .fail_at = -1 };
	struct mk_reader *r = (struct mk_reader *)&o;
	struct mk_err err;

	assert_int_equal(mk_reader_open(&r, &o, plan_next, &p, &err), -MK_EINVAL);
	assert_null(r);
	o.chunk_bytes = 4096;
	o.qdepth = 100000;
	assert_int_equal(mk_reader_open(&r, &o, plan_next, &p, &err), -MK_EINVAL);
	o.qdepth = 8;
	o.kind = (enum mk_io_kind)42;
	assert_int_equal(mk_reader_open(&r, &o, plan_next, &p, &err), -MK_EINVAL);
	o.kind = MK_IO_PREAD;
	assert_int_equal(mk_reader_open(&r, &o, NULL, &p, &err), -MK_EINVAL);
	mk_reader_free(NULL);
}

/* ---- $MK_IO and the io_uring fallback ---------------------------------- */

static char *saved_env;

static void env_save(void)
{
	const char *e = getenv("MK_IO");

	free(saved_env);
	saved_env = e ? strdup(e) : NULL;
}

static void env_restore(void)
{
	if (saved_env)
		setenv("MK_IO", saved_env, 1);
	else
		unsetenv("MK_IO");
}

/* Open AUTO (or `kind`) with MK_IO=`env` (NULL: unset); return the code. */
static int open_env(enum mk_io_kind kind, const char *env,
		    struct mk_reader **r, struct mk_err *err)
{
	struct mk_reader_opts o = { .kind = kind, .chunk_bytes = 4096, .qdepth = 4 };
	static struct plan empty = { .fail_at = -1 };

	if (env)
		setenv("MK_IO", env, 1);
	else
		unsetenv("MK_IO");
	mk_err_clear(err);
	empty.at = 0;
	return mk_reader_open(r, &o, plan_next, &empty, err);
}

static void expect_backend(enum mk_io_kind kind, const char *env,
			   const char *prefix)
{
	struct mk_reader *r = NULL;
	struct mk_err err;

	if (open_env(kind, env, &r, &err) < 0)
		fail_msg("MK_IO=%s: %s", env ? env : "(unset)", err.msg);
	if (strncmp(mk_reader_backend(r), prefix, strlen(prefix)))
		fail_msg("MK_IO=%s: backend %s, want %s", env ? env : "(unset)",
			 mk_reader_backend(r), prefix);
	mk_reader_free(r);
}

static void test_env(void **state)
{
	struct mk_reader *r = NULL;
	struct mk_err err;
	const char *dflt;

	env_save();
	assert_int_equal(open_env(MK_IO_AUTO, NULL, &r, &err), 0);
	dflt = mk_reader_backend(r);
	assert_true(!strncmp(dflt, "uring", 5) || !strcmp(dflt, "mmap"));
	assert_string_equal(mk_reader_note(r), "");
	expect_backend(MK_IO_AUTO, "auto", strncmp(dflt, "uring", 5) ? "mmap" : "uring");
	expect_backend(MK_IO_AUTO, "", strncmp(dflt, "uring", 5) ? "mmap" : "uring");
	mk_reader_free(r);
	expect_backend(MK_IO_AUTO, "pread", "pread");
	expect_backend(MK_IO_AUTO, "mmap", "mmap");
	expect_backend(MK_IO_AUTO, "uring", "uring");
	/* an explicit kind beats the environment */
	expect_backend(MK_IO_PREAD, "mmap", "pread");
	expect_backend(MK_IO_MMAP, "bogus", "mmap");

	/* what AUTO prefers, when MK_IO does not say: opened; MK_IO and an
	 * explicit kind beat it */
	{
		static struct plan empty = { .fail_at = -1 };
		struct mk_reader_opts o = { .kind = MK_IO_AUTO, .chunk_bytes = 4096, .qdepth = 4, .prefer = MK_IO_MMAP };
		struct { const char *env; enum mk_io_kind kind; const char *want; } c[] = {
			{ NULL, MK_IO_AUTO, "mmap" }, { "", MK_IO_AUTO, "mmap" }, { "auto", MK_IO_AUTO, "mmap" },
			{ "pread", MK_IO_AUTO, "pread" }, { NULL, MK_IO_PREAD, "pread" },
		};
		for (size_t i = 0; i < sizeof(c) / sizeof(*c); i++) {
			if (c[i].env)
				setenv("MK_IO", c[i].env, 1);
			else
				unsetenv("MK_IO");
			o.kind = c[i].kind;
			empty.at = 0;
			assert_int_equal(mk_reader_open(&r, &o, plan_next, &empty, &err), 0);
			assert_string_equal(mk_reader_backend(r), c[i].want);
			mk_reader_free(r);
		}
	}

	r = (struct mk_reader *)&err;
	assert_int_equal(open_env(MK_IO_AUTO, "bogus", &r, &err), -MK_EINVAL);
	assert_null(r);
	assert_non_null(strstr(err.msg, "MK_IO"));
	assert_non_null(strstr(err.msg, "bogus"));
	env_restore();
}

static int hook_errno;

static int failing_init(unsigned entries, struct io_uring *ring, unsigned flags)
{
	return -hook_errno;
}

static int failing_register(struct io_uring *ring, const struct iovec *iov,
			    unsigned nr)
{
	return -ENOMEM;
}

static void test_fallback(void **state)
{
	static const int errs[] = { EPERM, ENOSYS, ENOMEM };
	int (*saved)(unsigned, struct io_uring *, unsigned) = mk__uring_init_hook;
	int (*saved_reg)(struct io_uring *, const struct iovec *, unsigned) =
		mk__uring_register_hook;
	char path[512], want[256];
	int fd = make_file("fb", 210000, 8, path, sizeof(path));
	struct plan p = { .fail_at = -1 };
	struct mk_reader_opts o = { .kind = MK_IO_AUTO, .chunk_bytes = 8192, .qdepth = 8 };
	struct mk_reader *r;
	struct mk_err err;
	size_t i;
	int rc;

	env_save();
	unsetenv("MK_IO");
	for (i = 0; i < 40; i++)
		plan_add(&p, fd, 8, (uint64_t)i * 4999, 1 + i * 200);
	mk__uring_init_hook = failing_init;
	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		hook_errno = errs[i];
		snprintf(want, sizeof(want), "io_uring unavailable (%s); using "
			 "pread", strerror(errs[i]));

		/* AUTO falls back to pread and says why, and reads */
		r = open_kind(MK_IO_AUTO, 8192, 8, &p);
		assert_string_equal(mk_reader_backend(r), "pread");
		assert_string_equal(mk_reader_note(r), want);
		assert_int_equal(drain(r, &p, &rc, &err), p.n);
		assert_int_equal(rc, 0);
		mk_reader_free(r);

		/* so does MK_IO=auto */
		expect_backend(MK_IO_AUTO, "auto", "pread");

		/* a forced uring fails, through opts or MK_IO */
		r = NULL;
		o.kind = MK_IO_URING;
		assert_int_equal(mk_reader_open(&r, &o, plan_next, &p, &err),
				 -MK_EUNSUPPORTED);
		assert_null(r);
		assert_non_null(strstr(err.msg, "io_uring unavailable"));
		assert_non_null(strstr(err.msg, strerror(errs[i])));
		assert_int_equal(open_env(MK_IO_AUTO, "uring", &r, &err),
				 -MK_EUNSUPPORTED);
		unsetenv("MK_IO");

		/* a forced mmap prefetches with madvise, and reads */
		r = open_kind(MK_IO_MMAP, 8192, 8, &p);
		assert_string_equal(mk_reader_backend(r), "mmap");
		assert_non_null(strstr(mk_reader_note(r), "madvise"));
		assert_int_equal(drain(r, &p, &rc, &err), p.n);
		assert_int_equal(rc, 0);
		mk_reader_free(r);
	}
	mk__uring_init_hook = saved;

	/* ring fine, buffer registration refused: plain reads, same slots */
	mk__uring_register_hook = failing_register;
	r = open_kind(MK_IO_URING, 8192, 8, &p);
	assert_string_equal(mk_reader_backend(r), "uring (plain buffers)");
	assert_non_null(strstr(mk_reader_note(r), "registration refused"));
	assert_int_equal(drain(r, &p, &rc, &err), p.n);
	assert_int_equal(rc, 0);
	mk_reader_free(r);
	mk__uring_register_hook = saved_reg;

	r = open_kind(MK_IO_URING, 8192, 8, &p);
	assert_string_equal(mk_reader_backend(r), "uring (registered buffers)");
	mk_reader_free(r);

	plan_free(&p);
	close(fd);
	unlink(path);
	env_restore();
}

static int setup_dir(void **state)
{
	const char *t = getenv("TMPDIR");

	snprintf(tmpdir, sizeof(tmpdir), "%s/mk-test-reader-XXXXXX",
		 t && *t ? t : "/tmp");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	free(saved_env);
	saved_env = NULL;
	return rmdir(tmpdir);
}

/* mk__rd_cached: true only when every page of the range is in the page
 * cache (cachestat(2)); the readers skip their prefetch then.  The file's
 * pages are dropped with POSIX_FADV_DONTNEED after a sync and two pages
 * read back with readahead off; a file system that keeps its pages
 * anyway (tmpfs) is checked for the cached half only. */
static void test_cached(void **state)
{
	struct mk_reader r = { .page = (size_t)sysconf(_SC_PAGESIZE) };
	const uint64_t size = 1u << 20, pg = r.page;
	char path[512], buf[65536];
	int fd;

	(void)state;
	if (syscall(451, -1, NULL, NULL, 0) < 0 && errno == ENOSYS)
		skip();   /* a kernel before 6.5: always false, nothing to test */
	fd = make_file("cached", size, 7, path, sizeof(path));
	/* just written: every page cached, any range, any alignment */
	assert_true(mk__rd_cached(&r, fd, 0, size));
	assert_true(mk__rd_cached(&r, fd, 1, 5000));
	assert_true(mk__rd_cached(&r, fd, size / 2 - 3, 10));
	assert_false(mk__rd_cached(&r, fd, 0, 0));
	assert_int_equal(fdatasync(fd), 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	if (!mk__rd_cached(&r, fd, 0, pg)) {
		/* dropped: pages 0 and 2 read back alone */
		assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
		assert_int_equal(pread(fd, buf, pg, 0), (ssize_t)pg);
		assert_int_equal(pread(fd, buf, pg, 2 * (off_t)pg), (ssize_t)pg);
		assert_true(mk__rd_cached(&r, fd, 0, pg));
		assert_true(mk__rd_cached(&r, fd, 2 * pg + 5, 100));
		assert_false(mk__rd_cached(&r, fd, 0, 3 * pg));      /* page 1 is not */
		assert_false(mk__rd_cached(&r, fd, pg - 1, 2));       /* one in, one out */
		assert_false(mk__rd_cached(&r, fd, 0, size));
		assert_false(mk__rd_cached(&r, fd, size - 1, 1));
	}
	/* a descriptor that is no file: false, and cachestat still asked next time */
	assert_false(mk__rd_cached(&r, -1, 0, size));
	assert_int_equal(r.no_cachestat, 0);
	close(fd);
	unlink(path);
}

static enum mk_io_kind K_URING = MK_IO_URING, K_MMAP = MK_IO_MMAP,
	K_PREAD = MK_IO_PREAD;

#define PER_KIND(fn) \
	cmocka_unit_test_prestate(fn, &K_URING), \
	cmocka_unit_test_prestate(fn, &K_MMAP), \
	cmocka_unit_test_prestate(fn, &K_PREAD)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_bad_opts),
		PER_KIND(test_orders),
		PER_KIND(test_many_files),
		PER_KIND(test_truncated),
		PER_KIND(test_bad_extents),
		PER_KIND(test_unreadable_fd),
		PER_KIND(test_empty),
		PER_KIND(test_free_early),
		PER_KIND(test_rss_bound),
		cmocka_unit_test(test_env),
		cmocka_unit_test(test_fallback),
		cmocka_unit_test(test_cached),
	};

	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
