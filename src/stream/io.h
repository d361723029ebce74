/* io.h - the transport under a stream reader or writer (struct mk_io,
 * mk/stream.h): a file descriptor or an end of an in-process channel.
 *
 * The stream's codec (stream.c) reads and writes through these calls
 * only, so it has one path for both transports; what only a channel can
 * do (a frame's buffer handed over whole, filled in place, or a mapped
 * file lent) is asked for here and answered "no" on a descriptor, and
 * what only a descriptor can do (splice(2) into a pipe) is asked for
 * through mk_io_pipe_fd.
 */
#ifndef MK_STREAM_IO_H
#define MK_STREAM_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "mk/stream.h"
#include "chan_impl.h"

/* Before the first byte: a pipe's buffer made large (mk_fd_grow_pipe);
 * nothing on a channel. */
void mk_io_prepare(const struct mk_io *io);
/* Read exactly len bytes: the count read (less only at the end), or
 * -errno. */
ssize_t mk_io_read(const struct mk_io *io, void *buf, size_t len);
/* Write every byte of iov (which it may change); *written counts what
 * went out, also on an error.  0, or -errno (-EPIPE: the reader is
 * gone). */
int mk_io_writev(const struct mk_io *io, struct iovec *iov, int n, uint64_t *written);
/* Whether the stream stays in this process's memory (a channel): its
 * chunks need no checksum (algorithm 0, mk-stream(5)). */
bool mk_io_in_memory(const struct mk_io *io);
/* The descriptor when it is a pipe (splice(2) may move bytes into or
 * out of it), else -1. */
int mk_io_pipe_fd(const struct mk_io *io);

/* A channel's buffer filled in place (mk__chan_reserve): 1 and *buf of
 * *cap >= total bytes, 0 on a descriptor (write the bytes instead), or
 * -errno.  Commit queues len bytes of it; unreserve gives it back. */
int mk_io_reserve(const struct mk_io *io, size_t total, uint8_t **buf, size_t *cap);
int mk_io_commit(const struct mk_io *io, uint8_t *buf, size_t len, size_t cap);
void mk_io_unreserve(const struct mk_io *io, uint8_t *buf, size_t cap);
/* Queue a frame lying in a private mapping, without a copy (the channel
 * owns the mapping from the call on): 0 or -errno; -ENOTSUP on a
 * descriptor (the caller has not mapped anything then: ask
 * mk_io_in_memory first). */
int mk_io_write_map(const struct mk_io *io, uint8_t *frame, size_t len, void *map, size_t map_len);
/* The rest of a frame (len bytes after the header just read) handed over
 * as a buffer, as mk__chan_take; always false on a descriptor. */
bool mk_io_take(const struct mk_io *io, size_t len, uint8_t **buf, size_t *cap, struct mk__lent *lent);

#endif
