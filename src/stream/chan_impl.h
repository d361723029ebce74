/* chan_impl.h - what the stream reader and writer call on a channel
 * (mk/chan.h); not public. */
#ifndef MK_CHAN_IMPL_H
#define MK_CHAN_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "mk/chan.h"
#include "mk/stream.h"

/* A frame whose bytes lie in a private mapping (mk__chan_write_map):
 * the frame at `frame`, the mapping to release when done. */
struct mk__lent {
	uint8_t *frame;
	struct mk_frame_keep keep;
};
/* Queue the bytes of iov as one buffer: 0, or -EPIPE when the reader is
 * gone, -ENOMEM. */
int mk__chan_write(struct mk_chan *c, const struct iovec *iov, int n);
/* mk__chan_write in two steps, for a writer that fills the buffer in
 * place: reserve waits for room for `total` bytes, as mk__chan_write
 * does, and gives a buffer of at least that many (*cap: its size),
 * counted against the channel's cap from now on; commit queues `len`
 * bytes of it (the buffer is the channel's again, on every path);
 * unreserve gives it back unqueued.  0, or -EPIPE when the reader is
 * gone, -ENOMEM. */
int mk__chan_reserve(struct mk_chan *c, size_t total, uint8_t **buf, size_t *cap);
int mk__chan_commit(struct mk_chan *c, uint8_t *buf, size_t len, size_t cap);
void mk__chan_unreserve(struct mk_chan *c, uint8_t *buf, size_t cap);
/* Queue the frame of len bytes at `frame`, inside the private mapping
 * [map, map + map_len), without a copy: the channel owns the mapping
 * from the call on (munmaps it on every path).  The reader takes it as
 * lent (mk__chan_take) or reads its bytes.  0, or -EPIPE. */
int mk__chan_write_map(struct mk_chan *c, uint8_t *frame, size_t len, void *map, size_t map_len);
/* Read exactly len bytes: the count read (less only at the end), as
 * read_full does on a descriptor. */
ssize_t mk__chan_read(struct mk_chan *c, void *buf, size_t len);
/* When the queue's next buffer is the rest of a frame whose header the
 * reader has just read from it and holds exactly `len` more bytes, give
 * that buffer (header and payload) to the reader in place of *buf
 * (which the channel keeps for a later write, or frees): true.  A
 * mapped frame (mk__chan_write_map) is lent instead, in *lent, and *buf
 * stays the reader's.  Else false (lent->map NULL), and the reader reads
 * the payload by mk__chan_read. */
bool mk__chan_take(struct mk_chan *c, size_t len, uint8_t **buf, size_t *cap, struct mk__lent *lent);

#endif
