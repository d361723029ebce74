/* reader_impl.h - internals shared by the reader backends (not installed).
 *
 * The common part (reader.c) owns the queue: it pulls extents from the
 * caller's `next` callback, keeps up to qdepth of them ahead of the one the
 * consumer holds (so the queue has qdepth + 1 positions), validates them,
 * and hands them out in order.  A backend only sees "position p was queued"
 * (issue), "start the batch" (flush), "make position p readable" (wait),
 * and "the consumer let go of this extent" (release).  The uring backend
 * uses the queue position as its buffer slot and its user_data.
 *
 * An error met while pulling or queueing (next() failed, an extent too
 * long, a truncated file seen by mmap) is deferred: the extents queued
 * before it are still delivered, then mk_reader_get returns it.
 */
#ifndef MK_READER_IMPL_H
#define MK_READER_IMPL_H

#include <liburing.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "io/reader.h"

/* Test hooks: every io_uring_queue_init / io_uring_register_buffers of the
 * readers goes through these, so a test can make them fail (-EPERM,
 * -ENOSYS, -ENOMEM) and check the fallbacks.  Not thread-safe to change
 * while readers are being opened. */
extern int (*mk__uring_init_hook)(unsigned entries, struct io_uring *ring,
				  unsigned flags);
extern int (*mk__uring_register_hook)(struct io_uring *ring,
				      const struct iovec *iovecs, unsigned nr);

#define RD_CHUNK_MAX (1u << 30)   /* io_uring: 1 GiB per registered buffer */
#define RD_QDEPTH_MAX 1024u

struct rd_file {
	int fd;
	dev_t dev;
	ino_t ino;
	uint64_t size;         /* st_size when first seen */
	unsigned char *map;    /* mmap backend: whole-file map, or NULL */
};

enum { RD_QUEUED = 0, RD_READY = 1, RD_FAILED = 2 };

struct rd_ent {
	struct mk_read_req req;
	unsigned file;         /* index in mk_reader.files */
	size_t done;           /* uring: bytes read so far */
	int state;             /* RD_* */
	int res;               /* RD_FAILED: -errno, or 0 for end of file */
};

struct rd_ops {
	/* Set up after the common part (ring already made when have_ring). */
	int (*open)(struct mk_reader *r, struct mk_err *err);
	/* Position p (r->q[p]) was just queued. */
	int (*issue)(struct mk_reader *r, unsigned p, struct mk_err *err);
	/* A batch of issues is complete: submit it. */
	int (*flush)(struct mk_reader *r, struct mk_err *err);
	/* Make position p (the head) readable; set *data. */
	int (*wait)(struct mk_reader *r, unsigned p, const void **data,
		    struct mk_err *err);
	/* The consumer moved past `prev` (already off the queue). */
	void (*release)(struct mk_reader *r, const struct rd_ent *prev);
	/* Tear down; must leave nothing in flight. */
	void (*close)(struct mk_reader *r);
};

struct mk_reader {
	const struct rd_ops *ops;
	mk_read_next_fn next;
	void *ctx;
	size_t chunk;
	unsigned qdepth;
	unsigned cap;          /* queue positions: qdepth + 1 */
	struct rd_ent *q;
	unsigned head, count;
	int held;              /* q[head] is with the consumer */
	int ended;             /* next() said 0, or a deferred error is set */
	int pend;              /* deferred error (negative MK_E*) */
	struct mk_err pend_err;
	int failed;            /* sticky error returned by get */
	unsigned long faults0; /* mk_mapguard_faults() at open */
	struct mk_err fail_err;

	struct rd_file *files;
	unsigned nfiles, files_cap, last_file;

	struct io_uring ring;
	int have_ring;
	unsigned inflight;     /* ring operations not yet reaped */

	unsigned char *slab;   /* uring: cap slots; pread: one slot */
	int fixed;             /* uring: buffers registered */
	size_t page;
	int no_cachestat;      /* cachestat(2) is not to be had here */
	int no_populate;       /* mmap: MADV_POPULATE_READ is refused here */
	struct rd_span { uint64_t a, b; } *spans; /* mmap: release scratch */
	void *backend_state;   /* http: its transfers */

	char backend[48];
	char note[256];
};

extern const struct rd_ops mk__rd_uring_ops;
extern const struct rd_ops mk__rd_mmap_ops;
extern const struct rd_ops mk__rd_pread_ops;
extern const struct rd_ops mk__rd_http_ops;

/* "'path'" of an fd (via /proc/self/fd), or "fd N". */
/* The MK_ECORRUPT error for an extent that ended early after `got` bytes. */
int mk__rd_truncated(const struct mk_read_req *req, size_t got,
		     struct mk_err *err);
/* Read the extent's bytes whole into buf by pread (EINTR and short reads
 * retried); a file that ends first is mk__rd_truncated's error. */
int mk__rd_pread(const struct mk_read_req *q, void *buf, struct mk_err *err);
/* Is every page of fd's bytes [off, off + len) in the page cache?  Asked
 * of the kernel in one call (cachestat(2), Linux 6.5); false when it
 * cannot say.  A prefetch of cached pages is skipped: it finds nothing to
 * read but still walks the cache page by page. */
bool mk__rd_cached(struct mk_reader *r, int fd, uint64_t off, uint64_t len);
/* mk_err_sys naming the extent's file and offset. */
int mk__rd_sys(const struct mk_read_req *req, int errnum, const char *what,
	       struct mk_err *err);

#endif
