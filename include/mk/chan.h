/* chan.h - an in-memory stream between two threads of one process.
 *
 * A channel carries an mk stream (mk-stream(5)) from a writer on one
 * thread to a reader on another without the kernel: a stream writer
 * opened on mk_io_chan(c) (mk_sw_open_io, mk/stream.h) writes it, a
 * reader opened on the same (mk_sr_open_io) reads it, with the same
 * frames as through a pipe.  Each write of the stream
 * writer (one frame: header and payload) becomes one buffer in a queue,
 * and the reader takes a frame's buffer whole, by pointer: a payload is
 * copied once, into that buffer, not into and out of a kernel buffer.
 *
 * The queue holds at most `cap` bytes of buffers (one larger frame when
 * it is empty, so any frame passes): a writer waits while it is full, a
 * reader while it is empty.
 */
#ifndef MK_CHAN_H
#define MK_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/err.h"

struct mk_chan;

/* A channel of `cap` bytes (0: MK_CHAN_DEFAULT_CAP). */
#define MK_CHAN_DEFAULT_CAP (8u << 20)
MK_API int mk_chan_open(struct mk_chan **out, size_t cap, struct mk_err *err);
/* The writer is done: the reader sees the stream end after what is
 * queued (as after a socket's shutdown by its writer). */
MK_API void mk_chan_close_write(struct mk_chan *c);
/* The reader is done, or the run stops: what is queued is dropped, the
 * reader sees the stream end at once and the writer's next write fails
 * with EPIPE.  Either close may come from any thread, more than once. */
MK_API void mk_chan_close_read(struct mk_chan *c);
/* The most bytes the queue held at once. */
MK_API size_t mk_chan_peak(const struct mk_chan *c);
/* Free the channel (neither end in use). */
MK_API void mk_chan_free(struct mk_chan *c);

/* The statistics passes an in-process mk-merge will not read, for the
 * mk-fetch writing its stream (mk_fetch_opts.skip, mk_merge_opts.skip).
 * A streamed job's inputs are sent once per planned pass; when its
 * method says a pass needs no more input (mk_job_wants false: every
 * window held its cut, the cut is found), mk-merge marks the pass and
 * mk-fetch sends no more chunks of it, and mk-merge takes the next
 * pass's first chunk as that pass's end (mk_job_finish takes a pass that
 * ends early once the method said so).  Only the job mk-merge is on is
 * marked (a mark for another job replaces it): mk-fetch is never behind
 * mk-merge, so the chunk it is about to send is of that job or a later
 * one.  Passes from 32 on are never marked.  mk-merge accepts a pass that
 * ends early only when it is marked here for its job.  Across processes
 * there is no such board: every planned pass is sent. */
struct mk_chan_skip;
MK_API int mk_chan_skip_new(struct mk_chan_skip **out, struct mk_err *err);
MK_API void mk_chan_skip_free(struct mk_chan_skip *s);
/* false: not marked (a pass from 32 on) */
MK_API bool mk_chan_skip_mark(struct mk_chan_skip *s, uint32_t job, unsigned pass);
MK_API bool mk_chan_skip_test(const struct mk_chan_skip *s, uint32_t job, unsigned pass);

#endif
