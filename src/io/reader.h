/* reader.h - ordered, read-ahead file reads behind one interface.
 *
 * A reader delivers a sequence of byte extents (file descriptor, offset,
 * length) in the order the caller's `next` callback produces them, keeping
 * up to `qdepth` of them in flight ahead of the consumer.  Backends:
 *
 *   uring  io_uring reads into one registered (fixed) buffer slab split in
 *          qdepth slots of chunk_bytes each; plain reads into the same
 *          slots when registration is refused.
 *   mmap   each file mapped read-only; io_uring (or madvise when no ring)
 *          prefetches the extents ahead of the consumer with
 *          MADV_WILLNEED, and the pages of consumed extents are dropped
 *          (MADV_DONTNEED + POSIX_FADV_DONTNEED is NOT used: the page
 *          cache is kept) so the process's RSS stays bounded.
 *   pread  one pread per extent into a slot, with POSIX_FADV_WILLNEED on
 *          the extents ahead; chosen automatically when io_uring cannot be
 *          set up (seccomp, io_uring_disabled sysctl, ENOMEM, ENOSYS).
 *   http   extents of remote files (req.remote, a Hub model's shards) by
 *          HTTP range requests, qdepth in flight over kept connections,
 *          retried where they broke off; local extents by pread.  The one
 *          backend that takes remote extents; no other does.
 *
 * MK_IO=uring|mmap|pread|http in the environment (or opts.kind) forces one;
 * MK_IO=auto or unset picks the default (see mk_reader_open).
 */
#ifndef MK_READER_H
#define MK_READER_H

#include <stddef.h>
#include <stdint.h>
#include "core/budget.h"
#include "mk/err.h"

enum mk_io_kind { MK_IO_AUTO, MK_IO_URING, MK_IO_MMAP, MK_IO_PREAD, MK_IO_HTTP };

struct mk_hub_blob;

struct mk_read_req {
	int fd;                /* open for reading; owned by the caller
				  (ignored for a remote extent) */
	uint64_t off;          /* file offset */
	size_t len;            /* 1 .. chunk_bytes */
	void *tag;             /* caller's, returned with the data */
	struct mk_hub_blob *remote; /* a remote file's extent, or NULL */
};

/* Produce the next extent to read.  Returns 1 and fills *req, 0 when
 * there are no more, or a negative MK_E* code (with err filled). */
typedef int (*mk_read_next_fn)(void *ctx, struct mk_read_req *req,
			       struct mk_err *err);

struct mk_reader_opts {
	enum mk_io_kind kind;  /* MK_IO_AUTO: $MK_IO, then prefer */
	size_t chunk_bytes;    /* 0: MK_READER_DEFAULT_CHUNK */
	unsigned qdepth;       /* 0: MK_READER_DEFAULT_QDEPTH */
	enum mk_io_kind prefer; /* what AUTO opens when $MK_IO is unset:
				   MK_IO_AUTO for the default (uring), or
				   MK_IO_MMAP (mk_fetch_reader_pick) */
};

struct mk_reader;

/* Create a reader pulling extents from next(ctx).  A forced kind that
 * cannot be set up is an error; AUTO falls back to pread, and records
 * why (mk_reader_note). */
int mk_reader_open(struct mk_reader **out, const struct mk_reader_opts *opts,
		   mk_read_next_fn next, void *ctx, struct mk_err *err);

/* Next extent's data, in request order.  Returns 1 with *data and *req set
 * (data valid until the next call of mk_reader_get or mk_reader_free),
 * 0 at the end, or a negative code.  A short read (end of file before
 * off+len) is an MK_ECORRUPT error, "PATH was truncated while being read"
 * with the file offset. */
int mk_reader_get(struct mk_reader *r, const void **data,
		  struct mk_read_req *req, struct mk_err *err);

void mk_reader_free(struct mk_reader *r);

/* After a failure to pass on an extent's bytes (a write from a map, a
 * splice from the file that came up short): when the extent's file is
 * now shorter than the extent's end, or a guarded map lost pages
 * (core/mapguard.h), replace *err with "PATH was truncated while being
 * read" and return its code; else return rc unchanged. */
int mk_reader_explain(const struct mk_reader *r, const struct mk_read_req *req, int rc, struct mk_err *err);

/* "uring", "uring (registered buffers)", "mmap", "pread", ... */
const char *mk_reader_backend(const struct mk_reader *r);
unsigned mk_reader_qdepth(const struct mk_reader *r);
size_t mk_reader_chunk_bytes(const struct mk_reader *r);
/* Why AUTO fell back, or "" (e.g. "io_uring unavailable (Operation not
 * permitted); using pread"). */
const char *mk_reader_note(const struct mk_reader *r);

/* Parse "uring" | "mmap" | "pread" | "http" | "auto"; -1 if none. */
int mk_io_kind_parse(const char *s, enum mk_io_kind *out);

#endif
