/* fetch_impl.h - internals of mk-fetch's two modes (not installed):
 * reading the chunks of strided tensors (PyTorch views), whose elements
 * are not one run of their file.
 *
 * A chunk of a strided tensor is read as the bytes of storage its
 * elements lie in (mk_st_tensor_extent), in reads of at most chunk_bytes,
 * into a held buffer; its elements are then copied out in row-major order
 * (mk_st_tensor_gather) and sent as any chunk.  When that range is
 * narrow (at most twice the chunk's bytes and 1 MiB: a slice, every other
 * column) each chunk reads its own; when it is wide (a transposed weight:
 * every row block spreads over the whole storage) the tensor's whole span
 * is read once and its chunks are copied from it, so nothing is read
 * twice.  The span is bounded where the checkpoint is read (torchbin.c:
 * at most 4 times the tensor's bytes and 16 MiB), and so is what is held.
 * Reads come back in the order they were asked for, so a chunk whose
 * bytes are already held still takes its turn with a one-byte read. */
#ifndef MK_FETCH_IMPL_H
#define MK_FETCH_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"
#include "io/reader.h"
#include "io/safetensors.h"

struct mk__held {                /* storage bytes read for strided chunks */
	uint8_t *buf;
	int fd;
	uint64_t lo, hi;         /* file offsets buf holds, as reads arrive */
	int pfd;
	uint64_t plo, phi;       /* what it holds once the reads asked for arrive */
	bool planned;
};

struct mk__gread {               /* one read's part in a strided chunk */
	const struct mk_st_tensor *t; /* NULL: a plain read, sent as it is */
	struct mk__held *h;
	uint64_t data_start;     /* of t's file */
	uint64_t e0, n;          /* the chunk: t's elements [e0, e0 + n) */
	uint64_t fill, fill_len; /* the bytes this read is part of (fill_len 0: none, they are held) */
	bool last;               /* the chunk is complete with this read */
};

struct mk__gfill {               /* a strided chunk's reads, asked one by one */
	struct mk__gread g;
	int fd;
	uint64_t at, end;
	bool live;
};

/* Plan the reads of elements [e0, e0 + n) of strided tensor t, in the
 * file open as fd whose data starts at data_start. */
void mk__gfill_start(struct mk__gfill *fl, struct mk__held *h, int fd, uint64_t data_start,
		     const struct mk_st_tensor *t, uint64_t e0, uint64_t n);
/* The chunk's next read: 1 with req's fd, off and len and *g set (the
 * tag is the caller's), 0 once all are asked for. */
int mk__gfill_next(struct mk__gfill *fl, size_t chunk_bytes, struct mk_read_req *req, struct mk__gread *g);
/* A read of a strided chunk arrived (req, data): 1 with *out, *out_len
 * the chunk's elements in row-major order (in *gbuf, grown as needed),
 * 0 while more reads of it follow, or a negative code. */
int mk__gread_take(const struct mk__gread *g, const struct mk_read_req *req, const void *data, uint8_t **gbuf,
		   size_t *gcap, const void **out, size_t *out_len, struct mk_err *err);
void mk__held_free(struct mk__held *h);

#endif
