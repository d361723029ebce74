/* reader_mmap.c - zero-copy reads from whole-file maps.
 *
 * Each file is mapped once, read-only and shared.  When an extent is
 * queued and the page cache lacks some of its pages (mk__rd_cached), they
 * are read in ahead of the consumer: through io_uring (IORING_OP_MADVISE,
 * on the ring's workers, off the consumer's thread) with
 * MADV_POPULATE_READ on a map advised MADV_HUGEPAGE, or with plain
 * MADV_WILLNEED when there is no ring (or the kernel lacks the advice).
 * The difference is the page cache it leaves: readahead by MADV_WILLNEED
 * fills it with single pages, while read faults on a huge-page-advised
 * map read 2 MiB folios where the file system has large folios (ext4
 * and xfs on recent kernels), and every later mapping of those bytes --
 * mk-yaml maps each chunk anew for its channel, once per pass -- maps
 * them with one page-table entry per 2 MiB instead of 512 (mk-yaml ties
 * on three 300 MB models read that way: system CPU 0.27 -> 0.08-0.11 s
 * on each later run).  The populated pages stay mapped here only until
 * the consumer passes them (below), within the reads in flight that the
 * budget counts.  When the consumer moves past an
 * extent its pages are dropped with MADV_DONTNEED, except those shared
 * with an extent still queued: the page cache keeps them, but the
 * process's RSS stays near one chunk however large the file is.
 *
 * A file truncated by someone else while it is mapped makes a read of the
 * lost pages raise SIGBUS, in whichever thread reads them (the copy, a
 * checksum, a merge worker handed the bytes by a channel).  Each map is
 * guarded (core/mapguard.h): the fault reads zeros instead, and the next
 * mk_reader_get fails with "PATH was truncated while being read", as does
 * mk-pack before it would commit an output.  The size is also checked
 * when an extent is queued, which catches a file short to begin with.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "core/fsutil.h"
#include "core/mapguard.h"
#include "reader_impl.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14 */
#endif

static int mmap_open(struct mk_reader *r, struct mk_err *err)
{
	int rc = 0;

	r->spans = calloc(r->cap, sizeof(*r->spans));
	if (!r->spans) {
		rc = mk_err_set(err, MK_ENOMEM, "mmap reader: out of memory");
		goto out;
	}
	snprintf(r->backend, sizeof(r->backend), "mmap");
out:
	return rc;
}

/* Page-aligned span of an extent, as offsets in its file. */
static struct rd_span span_of(const struct mk_reader *r,
			      const struct mk_read_req *q)
{
	struct rd_span s;

	s.a = q->off & ~(uint64_t)(r->page - 1);
	s.b = (q->off + q->len + r->page - 1) & ~(uint64_t)(r->page - 1);
	return s;
}

/* Take the madvise completions that are there (wait for one if `block`).
 * Their results are ignored: a failed advice only means less prefetch.
 * Returns -1 when the ring itself fails. */
static int reap(struct mk_reader *r, int block)
{
	struct io_uring_cqe *cqe;
	int rc = 0;

	if (block && r->inflight) {
		int n = io_uring_submit_and_wait(&r->ring, 1);

		if (n < 0 && n != -EINTR && n != -EAGAIN && n != -EBUSY)
			rc = -1;
	}
	while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
		/* a kernel before 5.14 refuses MADV_POPULATE_READ: advise
		 * MADV_WILLNEED from now on */
		if (cqe->res == -EINVAL && io_uring_cqe_get_data64(cqe) == MADV_POPULATE_READ)
			r->no_populate = 1;
		io_uring_cqe_seen(&r->ring, cqe);
		r->inflight--;
	}
	return rc;
}

static void prefetch(struct mk_reader *r, unsigned char *addr, size_t len)
{
	struct io_uring_sqe *sqe;
	int advice = r->no_populate ? MADV_WILLNEED : MADV_POPULATE_READ;

	if (!r->have_ring) {
		(void)madvise(addr, len, MADV_WILLNEED);
		return;
	}
	if (r->inflight >= 2 * r->cap)
		(void)reap(r, 1);
	sqe = io_uring_get_sqe(&r->ring);
	if (!sqe) {
		(void)io_uring_submit(&r->ring);
		sqe = io_uring_get_sqe(&r->ring);
	}
	if (!sqe) {
		(void)madvise(addr, len, MADV_WILLNEED);
		return;
	}
	io_uring_prep_madvise(sqe, addr, (off_t)len, advice);
	io_uring_sqe_set_data64(sqe, (uint64_t)advice);
	r->inflight++;
}

static int mmap_issue(struct mk_reader *r, unsigned p, struct mk_err *err)
{
	struct rd_ent *e = &r->q[p];
	struct rd_file *f = &r->files[e->file];
	const struct mk_read_req *q = &e->req;
	struct rd_span s;
	char name[512];
	int rc = 0;

	if (q->off + q->len > f->size) {
		rc = mk__rd_truncated(q, q->off < f->size ?
				      (size_t)(f->size - q->off) : 0, err);
		goto out;
	}
	if (!f->map) {
		void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED,
			       f->fd, 0);

		if (m == MAP_FAILED) {
			rc = mk__rd_sys(q, errno, "mmap", err);
			goto out;
		}
		mk_fd_name(f->fd, name, sizeof(name));
		if (mk_mapguard_add(m, (size_t)f->size, name) < 0) {
			munmap(m, (size_t)f->size);
			rc = mk_err_set(err, MK_EUNSUPPORTED, "mmap reader: %s cannot be mapped safely "
					"(too many files mapped at once); use MK_IO=pread", name);
			goto out;
		}
		f->map = m;
		/* (advice: a kernel or file that cannot is read as before) */
		(void)madvise(m, (size_t)f->size, MADV_HUGEPAGE);
	}
	s = span_of(r, q);
	if (!mk__rd_cached(r, f->fd, s.a, s.b - s.a))
		prefetch(r, f->map + s.a, (size_t)(s.b - s.a));
out:
	return rc;
}

static int mmap_flush(struct mk_reader *r, struct mk_err *err)
{
	if (r->have_ring)
		(void)io_uring_submit(&r->ring); /* advice only */
	return 0;
}

static int mmap_wait(struct mk_reader *r, unsigned p, const void **data,
		     struct mk_err *err)
{
	const struct rd_ent *e = &r->q[p];

	if (r->have_ring)
		(void)reap(r, 0);
	*data = r->files[e->file].map + e->req.off;
	return 0;
}

static int span_cmp(const void *x, const void *y)
{
	const struct rd_span *a = x, *b = y;

	return a->a < b->a ? -1 : a->a > b->a;
}

/* Drop the pages of `prev` that no queued extent (of the same map)
 * touches. */
static void mmap_release(struct mk_reader *r, const struct rd_ent *prev)
{
	const struct rd_file *f = &r->files[prev->file];
	struct rd_span drop = span_of(r, &prev->req), s;
	uint64_t at;
	unsigned i, n = 0;

	if (!f->map)
		return;
	for (i = 0; i < r->count; i++) {
		const struct rd_ent *e = &r->q[(r->head + i) % r->cap];

		if (e->file != prev->file)
			continue;
		s = span_of(r, &e->req);
		if (s.b <= drop.a || s.a >= drop.b)
			continue;
		r->spans[n++] = s;
	}
	qsort(r->spans, n, sizeof(*r->spans), span_cmp);
	at = drop.a;
	for (i = 0; i <= n && at < drop.b; i++) {
		uint64_t end = i < n ? r->spans[i].a : drop.b;

		if (end > drop.b)
			end = drop.b;
		if (end > at)
			(void)madvise(f->map + at, (size_t)(end - at),
				      MADV_DONTNEED);
		if (i < n && r->spans[i].b > at)
			at = r->spans[i].b;
	}
}

static void mmap_close(struct mk_reader *r)
{
	unsigned i;

	/* No madvise may run on a range after it is unmapped (and maybe
	 * reused): wait for them all. */
	while (r->have_ring && r->inflight) {
		if (reap(r, 1) < 0) {
			/* A broken ring: leave the maps rather than risk an
			 * advice on reused addresses. */
			return;
		}
	}
	for (i = 0; i < r->nfiles; i++) {
		if (r->files[i].map)
			mk_mapguard_unmap(r->files[i].map, (size_t)r->files[i].size);
		r->files[i].map = NULL;
	}
}

const struct rd_ops mk__rd_mmap_ops = {
	.open = mmap_open,
	.issue = mmap_issue,
	.flush = mmap_flush,
	.wait = mmap_wait,
	.release = mmap_release,
	.close = mmap_close,
};
