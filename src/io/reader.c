/* reader.c - the reader's common part: options, $MK_IO, the queue of
 * extents, the io_uring probe and the fallback to pread. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/mapguard.h"
#include "reader_impl.h"

/* The backend MK_IO=auto (or unset) picks when io_uring works (when it
 * does not, AUTO uses pread).  Measured with scripts/bench-io-readers.sh:
 * one 2 GB file read front to back, every byte summed, chunk 4 MiB,
 * qdepth 8, median of 3 (of 5 in the second run); 2-core VM, kernel 6.18,
 * virtio disk.  MB/s, warm (page cache) / cold (after drop_caches):
 *   uring (registered)  7683 / 2182    5709 / 1364    peak RSS 37 MB
 *   mmap                9574 / 2374   10524 / 1879    peak RSS  5 MB
 *   pread               6303 / 2111    6128 / 1971    peak RSS  5 MB
 * (chunk 1 MiB, qdepth 16: uring 6138 / 1729, mmap 9190 / 1802, pread
 * 5820 / 1195.)  mmap is fastest warm by 1.3-1.8x, level with the others
 * cold (the cold numbers vary by +-25% from run to run), and needs the
 * least memory: no copy, no slab.
 *
 * But mk-fetch does not only read: it writes every byte into a pipe, and
 * there the mapped pages cost page faults and TLB shootdowns when they
 * are dropped.  scripts/bench-io.sh, the whole mk-fetch | mk-pack of a
 * 2 GB model (page cache warm, output fsynced), median of 7, two runs,
 * x the floor (cat + sync of the same files): uring 1.05 / 1.28, pread
 * 1.15 / 1.68, mmap 1.33 / 1.88.  The pipeline is what users run, so the
 * default is uring (its peak RSS, 38 MB, is the slab of 9 x 4 MiB). */
#define MK_READER_DEFAULT_KIND MK_IO_URING

static int uring_init_default(unsigned entries, struct io_uring *ring,
			      unsigned flags)
{
	return io_uring_queue_init(entries, ring, flags);
}

static int uring_register_default(struct io_uring *ring,
				  const struct iovec *iovecs, unsigned nr)
{
	return io_uring_register_buffers(ring, iovecs, nr);
}

int (*mk__uring_init_hook)(unsigned, struct io_uring *, unsigned) =
	uring_init_default;
int (*mk__uring_register_hook)(struct io_uring *, const struct iovec *,
			       unsigned) = uring_register_default;

int mk_io_kind_parse(const char *s, enum mk_io_kind *out)
{
	static const struct { const char *name; enum mk_io_kind kind; } tab[] = {
		{ "auto", MK_IO_AUTO }, { "uring", MK_IO_URING },
		{ "mmap", MK_IO_MMAP }, { "pread", MK_IO_PREAD }, { "http", MK_IO_HTTP },
	};
	size_t i;

	if (!s)
		return -1;
	for (i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		if (!strcmp(s, tab[i].name)) {
			if (out)
				*out = tab[i].kind;
			return 0;
		}
	}
	return -1;
}

int mk__rd_truncated(const struct mk_read_req *req, size_t got,
		     struct mk_err *err)
{
	char name[1024];

	mk_fd_name(req->fd, name, sizeof(name));
	/* (a model's files are checked against their headers when opened:
	 * one that ends early now was cut since) */
	return mk_err_set(err, MK_ECORRUPT,
			  "%s was truncated while being read (file offset %llu: "
			  "expected %zu bytes, got %zu)", name,
			  (unsigned long long)req->off, req->len, got);
}

int mk__rd_pread(const struct mk_read_req *q, void *buf, struct mk_err *err)
{
	size_t done = 0;

	while (done < q->len) {
		ssize_t n = pread(q->fd, (char *)buf + done, q->len - done,
				  (off_t)(q->off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return mk__rd_sys(q, errno, "read", err);
		if (n == 0)
			return mk__rd_truncated(q, done, err);
		done += (size_t)n;
	}
	return 0;
}

/* cachestat(2)'s arguments (Linux 6.5 uapi; the headers here may be
 * older) and its number, the same on the architectures named */
struct rd_cachestat_range {
	uint64_t off, len;
};
struct rd_cachestat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
#if defined(SYS_cachestat)
#define RD_NR_CACHESTAT SYS_cachestat
#elif defined(__x86_64__) || defined(__aarch64__) || defined(__riscv)
#define RD_NR_CACHESTAT 451
#endif

bool mk__rd_cached(struct mk_reader *r, int fd, uint64_t off, uint64_t len)
{
#ifdef RD_NR_CACHESTAT
	struct rd_cachestat_range range;
	struct rd_cachestat cs;
	uint64_t a, b;

	if (r->no_cachestat || len == 0)
		return false;
	a = off & ~(uint64_t)(r->page - 1);
	b = (off + len + r->page - 1) & ~(uint64_t)(r->page - 1);
	range = (struct rd_cachestat_range){ a, b - a };
	if (syscall(RD_NR_CACHESTAT, fd, &range, &cs, 0) != 0) {
		/* an older kernel (ENOSYS), a filter (EPERM), a file that has
		 * no page cache (EOPNOTSUPP): prefetch as before, and stop
		 * asking unless it was this file */
		if (errno != EBADF && errno != EOPNOTSUPP)
			r->no_cachestat = 1;
		return false;
	}
	return cs.nr_cache >= (b - a) / r->page;
#else
	(void)r;
	(void)fd;
	(void)off;
	(void)len;
	return false;
#endif
}

int mk__rd_sys(const struct mk_read_req *req, int errnum, const char *what,
	       struct mk_err *err)
{
	char name[1024];

	mk_fd_name(req->fd, name, sizeof(name));
	return mk_err_sys(err, errnum, "%s %s at file offset %llu (%zu bytes)",
			  what, name, (unsigned long long)req->off, req->len);
}

/* Find (or add) the file behind fd.  Keyed by fd, device and inode (an fd
 * number may be reused for another file) and size (a map is only good for
 * the size it was made with). */
static int file_lookup(struct mk_reader *r, int fd, unsigned *idx,
		       struct mk_err *err)
{
	struct rd_file *f;
	struct stat st;
	unsigned i;
	int rc = 0;

	if (fstat(fd, &st) < 0) {
		rc = mk_err_sys(err, errno, "fstat fd %d", fd);
		goto out;
	}
	for (i = 0; i < r->nfiles; i++) {
		unsigned j = (r->last_file + i) % r->nfiles;

		f = &r->files[j];
		if (f->fd == fd && f->dev == st.st_dev && f->ino == st.st_ino &&
		    f->size == (uint64_t)st.st_size) {
			*idx = r->last_file = j;
			goto out;
		}
	}
	if (r->nfiles == r->files_cap) {
		unsigned ncap = r->files_cap ? 2 * r->files_cap : 8;

		f = realloc(r->files, ncap * sizeof(*f));
		if (!f) {
			rc = mk_err_set(err, MK_ENOMEM, "reader: out of memory");
			goto out;
		}
		r->files = f;
		r->files_cap = ncap;
	}
	f = &r->files[r->nfiles];
	memset(f, 0, sizeof(*f));
	f->fd = fd;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->size = (uint64_t)st.st_size;
	/* Advice only: a pipe or a file system without it is not an error. */
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	*idx = r->last_file = r->nfiles++;
out:
	return rc;
}

/* Pull extents until qdepth are queued ahead of the held one.  Errors are
 * deferred (r->pend) so that the extents before them are still delivered;
 * only a failure to submit is returned. */
static int refill(struct mk_reader *r, struct mk_err *err)
{
	unsigned added = 0;
	int rc = 0;

	while (!r->ended && r->count < r->cap) {
		unsigned p = (r->head + r->count) % r->cap;
		struct rd_ent *e = &r->q[p];
		struct mk_read_req *q = &e->req;
		int n;

		memset(e, 0, sizeof(*e));
		mk_err_clear(&r->pend_err);
		n = r->next(r->ctx, q, &r->pend_err);
		if (n == 0) {
			r->ended = 1;
			break;
		}
		if (n < 0) {
			if (!r->pend_err.code)
				mk_err_set(&r->pend_err, -n, "reader: next "
					   "extent: %s", mk_err_name(n));
			r->pend = -r->pend_err.code;
		} else if (q->remote && r->ops != &mk__rd_http_ops) {
			r->pend = mk_err_set(&r->pend_err, MK_EINVAL,
					     "reader: an extent of a remote file needs the http "
					     "reader (MK_IO=http), not %s", r->backend);
		} else if (!q->remote && q->fd < 0) {
			r->pend = mk_err_set(&r->pend_err, MK_EINVAL,
					     "reader: extent with fd %d", q->fd);
		} else if (q->len == 0 || q->len > r->chunk) {
			r->pend = mk_err_set(&r->pend_err, MK_EINVAL,
					     "reader: extent of %zu bytes at "
					     "offset %llu: must be 1..%zu (the "
					     "chunk size)", q->len,
					     (unsigned long long)q->off, r->chunk);
		} else if (q->off > (uint64_t)INT64_MAX - q->len) {
			r->pend = mk_err_set(&r->pend_err, MK_EINVAL,
					     "reader: extent offset %llu out "
					     "of range",
					     (unsigned long long)q->off);
		} else {
			r->pend = q->remote ? 0 : file_lookup(r, q->fd, &e->file, &r->pend_err);
			if (!r->pend)
				r->pend = r->ops->issue(r, p, &r->pend_err);
		}
		if (r->pend) {
			r->ended = 1;
			break;
		}
		r->count++;
		added++;
	}
	if (added && r->ops->flush)
		rc = r->ops->flush(r, err);
	return rc;
}

static int fail(struct mk_reader *r, int rc, const struct mk_err *src,
		struct mk_err *err)
{
	r->failed = rc;
	if (src != &r->fail_err)
		r->fail_err = *src;
	if (err)
		*err = r->fail_err;
	return rc;
}

int mk_reader_get(struct mk_reader *r, const void **data,
		  struct mk_read_req *req, struct mk_err *err)
{
	struct rd_ent prev;
	int have_prev = 0, rc;

	if (r->failed) {
		rc = fail(r, r->failed, &r->fail_err, err);
		goto out;
	}
	/* a mapped file that lost pages under a reader of its bytes (this
	 * one's or a channel's: core/mapguard.h) fails the read */
	if ((rc = mk_mapguard_check(r->faults0, &r->fail_err)) < 0) {
		rc = fail(r, rc, &r->fail_err, err);
		goto out;
	}
	if (r->held) {
		prev = r->q[r->head];
		r->head = (r->head + 1) % r->cap;
		r->count--;
		r->held = 0;
		have_prev = 1;
	}
	mk_err_clear(&r->fail_err);
	rc = refill(r, &r->fail_err);
	if (have_prev && r->ops->release)
		r->ops->release(r, &prev);
	if (rc < 0) {
		rc = fail(r, rc, &r->fail_err, err);
		goto out;
	}
	if (r->count == 0) {
		rc = r->pend ? fail(r, r->pend, &r->pend_err, err) : 0;
		goto out;
	}
	rc = r->ops->wait(r, r->head, data, &r->fail_err);
	if (rc < 0) {
		rc = fail(r, rc, &r->fail_err, err);
		goto out;
	}
	*req = r->q[r->head].req;
	r->held = 1;
	rc = 1;
out:
	return rc;
}

/* Which backend to open: opts->kind, else $MK_IO, else opts->prefer, else
 * the default. */
static int pick_kind(const struct mk_reader_opts *opts, enum mk_io_kind *kind,
		     int *automatic, struct mk_err *err)
{
	const char *env;
	int rc = 0;

	*kind = opts ? opts->kind : MK_IO_AUTO;
	*automatic = 0;
	if (*kind == MK_IO_AUTO) {
		env = getenv("MK_IO");
		if (env && *env && mk_io_kind_parse(env, kind) < 0) {
			rc = mk_err_set(err, MK_EINVAL, "MK_IO='%s': expected "
					"uring, mmap, pread, http or auto", env);
			goto out;
		}
	}
	if (*kind == MK_IO_AUTO) {
		*kind = opts && (opts->prefer == MK_IO_URING || opts->prefer == MK_IO_MMAP ||
				 opts->prefer == MK_IO_PREAD) ? opts->prefer : MK_READER_DEFAULT_KIND;
		*automatic = 1;
	} else if (*kind != MK_IO_URING && *kind != MK_IO_MMAP &&
		   *kind != MK_IO_PREAD && *kind != MK_IO_HTTP) {
		rc = mk_err_set(err, MK_EINVAL, "reader: unknown I/O kind %d",
				(int)*kind);
	}
out:
	return rc;
}

int mk_reader_open(struct mk_reader **out, const struct mk_reader_opts *opts,
		   mk_read_next_fn next, void *ctx, struct mk_err *err)
{
	struct mk_reader *r = NULL;
	enum mk_io_kind kind;
	int automatic, rc;
	long pg;

	*out = NULL;
	rc = pick_kind(opts, &kind, &automatic, err);
	if (rc < 0)
		goto out;
	r = calloc(1, sizeof(*r));
	if (!r) {
		rc = mk_err_set(err, MK_ENOMEM, "reader: out of memory");
		goto out;
	}
	r->next = next;
	r->ctx = ctx;
	r->faults0 = mk_mapguard_faults();
	r->chunk = opts && opts->chunk_bytes ? opts->chunk_bytes :
		   MK_READER_DEFAULT_CHUNK;
	r->qdepth = opts && opts->qdepth ? opts->qdepth :
		    MK_READER_DEFAULT_QDEPTH;
	pg = sysconf(_SC_PAGESIZE);
	r->page = pg > 0 ? (size_t)pg : 4096;
	if (!next || r->chunk > RD_CHUNK_MAX || r->qdepth > RD_QDEPTH_MAX) {
		rc = mk_err_set(err, MK_EINVAL, "reader: chunk %zu bytes, "
				"qdepth %u: want a chunk of at most %u bytes and "
				"a qdepth of at most %u", r->chunk, r->qdepth,
				RD_CHUNK_MAX, RD_QDEPTH_MAX);
		goto out;
	}
	r->cap = r->qdepth + 1;
	r->q = calloc(r->cap, sizeof(*r->q));
	if (!r->q) {
		rc = mk_err_set(err, MK_ENOMEM, "reader: out of memory");
		goto out;
	}
	if (kind == MK_IO_URING || kind == MK_IO_MMAP) {
		int e = mk__uring_init_hook(2 * r->cap, &r->ring, 0);

		if (e >= 0) {
			r->have_ring = 1;
		} else if (automatic) {
			snprintf(r->note, sizeof(r->note), "io_uring unavailable "
				 "(%s); using pread", strerror(-e));
			kind = MK_IO_PREAD;
		} else if (kind == MK_IO_URING) {
			rc = mk_err_set(err, MK_EUNSUPPORTED, "io_uring "
					"unavailable (%s); the uring reader "
					"cannot run (use MK_IO=pread or auto)",
					strerror(-e));
			goto out;
		} else {
			snprintf(r->note, sizeof(r->note), "io_uring unavailable "
				 "(%s); mmap prefetches with madvise",
				 strerror(-e));
		}
	}
	r->ops = kind == MK_IO_URING ? &mk__rd_uring_ops :
		 kind == MK_IO_MMAP ? &mk__rd_mmap_ops :
		 kind == MK_IO_HTTP ? &mk__rd_http_ops : &mk__rd_pread_ops;
	rc = r->ops->open(r, err);
	if (rc < 0)
		goto out;
	/* Start reading now; errors surface at the first get. */
	rc = refill(r, err);
	if (rc < 0)
		goto out;
	*out = r;
	r = NULL;
out:
	mk_reader_free(r);
	return rc;
}

int mk_reader_explain(const struct mk_reader *r, const struct mk_read_req *req, int rc, struct mk_err *err)
{
	struct stat st;
	char name[1024];

	if (rc >= 0)
		return rc;
	if (mk_mapguard_check(r->faults0, err) < 0)
		return -MK_ECORRUPT;
	if (req->remote || req->fd < 0 || fstat(req->fd, &st) < 0 ||
	    (uint64_t)st.st_size >= req->off + req->len)
		return rc;
	mk_fd_name(req->fd, name, sizeof(name));
	return mk_err_set(err, MK_ECORRUPT, "%s was truncated while being read (it has %llu bytes, %llu were "
			  "read from it)", name, (unsigned long long)st.st_size,
			  (unsigned long long)(req->off + req->len));
}

void mk_reader_free(struct mk_reader *r)
{
	if (!r)
		return;
	if (r->ops)
		r->ops->close(r);
	if (r->have_ring)
		io_uring_queue_exit(&r->ring);
	free(r->files);
	free(r->spans);
	free(r->q);
	free(r);
}

const char *mk_reader_backend(const struct mk_reader *r)
{
	return r->backend;
}

unsigned mk_reader_qdepth(const struct mk_reader *r)
{
	return r->qdepth;
}

size_t mk_reader_chunk_bytes(const struct mk_reader *r)
{
	return r->chunk;
}

const char *mk_reader_note(const struct mk_reader *r)
{
	return r->note;
}
