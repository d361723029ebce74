/* stream.h - the mk tensor stream, version 1 (see mk-stream(5)).
 *
 * A stream is a 16-byte prelude followed by frames:
 *
 *   prelude  magic "\x89MKS\r\n\x1a\n", u16 major = 1, u16 minor = 1,
 *            u32 reserved (0)
 *   frame    32-byte header, then `len` payload bytes:
 *              0  type[4]   four ASCII letters; critical if the first is
 *                           upper case (unknown -> error), ancillary if
 *                           lower case (unknown -> passed through)
 *              4  u8 flags  bit 0: payload is one zstd frame
 *              5  u8 csum   checksum algorithm: 1 = crc32c; 0 = none,
 *                           only on a channel (mk/chan.h), for its chunks
 *              6  u16 reserved (0)
 *              8  u64 len      payload bytes as transmitted
 *             16  u64 raw_len  payload bytes after decompression
 *             24  u32 checksum over the header (this field as 0) and the
 *                              payload as transmitted
 *             28  u32 reserved (0)
 *
 * All integers are little-endian.  Frames carry no sequence number, so a
 * stage passes a frame it does not consume through byte for byte; readers
 * number frames by position (the first frame after the prelude is #0) and
 * name that number in every error.  The last frame is END, with counts; a
 * stream that stops before it is truncated (a crashed producer).
 */
#ifndef MK_STREAM_H
#define MK_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/dtype.h"
#include "mk/err.h"

#define MK_STREAM_MAGIC "\x89MKS\r\n\x1a\n"
#define MK_STREAM_MAJOR 1
#define MK_STREAM_MINOR 1
#define MK_STREAM_PRELUDE 16
#define MK_FRAME_HDR 32
#define MK_FRAME_MAX (1ull << 31)   /* largest payload a reader accepts */
#define MK_FRAME_F_ZSTD 0x01
#define MK_CSUM_NONE 0     /* in-process chunks only (mk-stream(5)) */
#define MK_CSUM_CRC32C 1

/* Frame types of v1.  Payload formats are in mk-stream(5). */
#define MK_FT_HEAD "HEAD" /* JSON: kind, manifest, models, seed, budget ... */
#define MK_FT_FILE "FILE" /* u32 mode, u32 name_len, name, contents */
#define MK_FT_JOB  "JOB " /* JSON: one plan job */
#define MK_FT_DATA "DATA" /* chunk of an output tensor */
#define MK_FT_INPT "INPT" /* chunk of one input of a job */
#define MK_FT_END  "END " /* JSON: counts */
#define MK_FT_NOTE "note" /* ancillary: UTF-8 text for humans */

/* The sub-header at the start of DATA and INPT payloads (48 bytes). */
#define MK_CHUNK_HDR 48
struct mk_chunk {
	uint32_t id;          /* DATA: tensor index in the manifest; INPT: job id */
	uint16_t input;       /* INPT: input index within the job; DATA: 0 */
	uint16_t pass;        /* INPT: statistics pass (0 first); DATA: 0 */
	enum mk_dtype dtype;  /* of the elements that follow */
	uint64_t row_begin;   /* first dim-0 row touched */
	uint64_t row_count;   /* rows touched (1 for part of one long row) */
	uint64_t elem_begin;  /* flat (row-major) index of the first element */
	uint64_t elem_count;
	const void *data;     /* elem_count elements, little-endian */
	size_t data_len;
};

MK_API void mk_chunk_encode(const struct mk_chunk *c, uint8_t out[MK_CHUNK_HDR]);
/* Set row_begin and row_count to the dim-0 rows that elements
 * [elem_begin, elem_begin + elem_count) touch, in rows of row_len elements
 * (0 counts as 1).  Every producer and checker of chunks uses it. */
MK_API void mk_chunk_set_rows(struct mk_chunk *c, uint64_t row_len);
/* Decode a DATA/INPT payload; checks data_len == bytes of elem_count. */
MK_API int mk_chunk_decode(const uint8_t *payload, size_t len, struct mk_chunk *c,
		    struct mk_err *err);

/* Check a decoded chunk against what it belongs to: a DATA chunk against
 * the HEAD's manifest (the tensor exists, has the chunk's dtype, and the
 * chunk's elements lie inside it), an INPT chunk against its job (the
 * input exists, the pass is one the job sends, dtype and elements fit the
 * input).  Both check that the row fields are the rows the elements
 * touch.  Messages name the tensor or job. */
struct mk_manifest;
struct mk_plan_job;
MK_API int mk_chunk_check_data(const struct mk_manifest *head, const struct mk_chunk *c, struct mk_err *err);
MK_API int mk_chunk_check_input(const struct mk_plan_job *j, const struct mk_chunk *c, struct mk_err *err);

/* ---- splitting a tensor into chunks over dim-0 rows ----
 * Rows are grouped so a chunk holds at most max_bytes; a row longer than
 * that is split at element offsets (multiples of the dtype's granule).
 * The split depends only on (shape, dtype, max_bytes). */
struct mk_chunker {
	enum mk_dtype dtype;
	uint64_t nrows, row_len, nelem;  /* row_len: elements per dim-0 row */
	uint64_t step;        /* elements per chunk */
	uint64_t next;        /* next flat element index */
	bool split_rows;      /* rows longer than a chunk: stop at row ends */
};
MK_API int mk_chunker_init(struct mk_chunker *ck, enum mk_dtype dt, unsigned ndim,
		    const uint64_t *shape, size_t max_bytes, struct mk_err *err);
/* Next chunk's range: returns 1 and sets the row/elem fields of *c,
 * 0 when done (a tensor with no elements yields no chunk). */
MK_API int mk_chunker_next(struct mk_chunker *ck, struct mk_chunk *c);

/* ---- transports ----
 * A stream is read from or written to one end: a file descriptor (a
 * pipe, a file, a socket) or an end of an in-process channel (mk/chan.h),
 * where frames pass as buffers, by pointer.  The reader and writer read
 * and write through it and never ask which it is but for what only one
 * can do (splice(2) on a pipe; handing a buffer over on a channel). */
struct mk_chan;
struct mk_io {
	int fd;                /* the descriptor, when chan is NULL */
	struct mk_chan *chan;  /* else the channel */
};
static inline struct mk_io mk_io_fd(int fd)
{
	struct mk_io io = { .fd = fd, .chan = 0 };
	return io;
}
static inline struct mk_io mk_io_chan(struct mk_chan *c)
{
	struct mk_io io = { .fd = -1, .chan = c };
	return io;
}

/* ---- reading ---- */
struct mk_frame {
	char type[5];         /* NUL-terminated */
	bool critical;
	uint8_t flags, csum;
	uint64_t len, raw_len;
	uint64_t index;       /* position in the stream, from 0 */
	const uint8_t *wire;  /* header + payload as transmitted */
	size_t wire_len;
	const uint8_t *payload; /* decoded payload (raw_len bytes) */
	size_t payload_len;
	bool csum_ok;         /* false only with MK_SR_NO_VERIFY */
	bool piecewise;       /* payload not read yet: mk_sr_read_payload */
	uint32_t crc;         /* the checksum its header carries */
};

#define MK_SR_NO_VERIFY 0x01  /* report bad checksums in csum_ok, go on */
#define MK_SR_PIECEWISE_FILE 0x02 /* FILE and ancillary frames come piecewise
				     (below) */
#define MK_SR_SPLICE_DATA 0x04 /* raw DATA frames from a pipe come piecewise,
				  for mk_sr_splice_payload (below) */
#define MK_SPLICE_MIN 4096     /* fewer data bytes than this: never spliced */
#define MK_MAP_MIN (256u << 10) /* fewer than this: not mapped onto a channel */

/* ---- bounds ----
 * Before a payload byte is read or inflated, the sizes a frame header
 * declares are checked: raw_len against a bound for its type, and, for
 * a frame read whole, the memory it takes (len, plus raw_len when
 * compressed) against the reader's memory bound.  Until a HEAD is known
 * DATA, INPT and FILE frames may declare up to MK_FRAME_MAX; HEAD, JOB
 * and END always have the fixed caps below.  mk_sr_head sets the bounds
 * the HEAD implies (mk_sr_bound_by_head). */
#define MK_FRAME_HEAD_MAX (64ull << 20)  /* a HEAD's JSON */
#define MK_FRAME_JOB_MAX (16ull << 20)   /* one JOB's JSON */
#define MK_FRAME_END_MAX (64ull << 10)   /* END's counts */
/* A chunk is cut at chunk_bytes in its producer's dtype; mk-merge writes
 * its elements at the output dtype, at most 16 times wider (F4 -> F64),
 * and pieces of up to 2^20 elements; so a DATA/INPT payload is at most
 * MK_CHUNK_HDR + MK_CHUNK_WIDEN * max(chunk_bytes, MK_CHUNK_FLOOR). */
#define MK_CHUNK_WIDEN 16u
#define MK_CHUNK_FLOOR (512u << 10)
struct mk_sr_bounds {
	uint64_t chunk;   /* DATA, INPT: largest raw_len (0: MK_FRAME_MAX) */
	uint64_t file;    /* FILE: largest raw_len (0: MK_FRAME_MAX) */
	uint64_t memory;  /* a frame read whole: largest len (+ raw_len when
			     compressed) held at once (0: no bound); also sizes
			     the zstd window a piecewise frame may use */
};
struct mk_stream_reader;
MK_API void mk_sr_set_bounds(struct mk_stream_reader *r, const struct mk_sr_bounds *b);
MK_API void mk_sr_get_bounds(const struct mk_stream_reader *r, struct mk_sr_bounds *b);
/* From a decoded HEAD: chunk from its chunk_bytes (unchanged when 0),
 * file = 8 + PATH_MAX + its largest announced file (no files: 8 +
 * PATH_MAX); memory is kept. */
MK_API void mk_sr_bound_by_head(struct mk_stream_reader *r, const struct mk_manifest *m);

struct mk_stream_reader;
/* Read and check the prelude from in.  `label` names the stream in
 * messages ("stdin", a file name). */
MK_API int mk_sr_open_io(struct mk_stream_reader **out, struct mk_io in, const char *label,
			 unsigned flags, struct mk_err *err);
/* The same from a descriptor: mk_sr_open_io(out, mk_io_fd(fd), ...). */
MK_API int mk_sr_open(struct mk_stream_reader **out, int fd, const char *label,
	       unsigned flags, struct mk_err *err);
/* Next frame: 1 and *f (valid until the next call), 0 after the END
 * frame has been returned and checked.  Unknown critical types, bad
 * checksums, bad lengths, EOF before END, bytes after END and END counts
 * that disagree are errors naming the frame number. */
MK_API int mk_sr_next(struct mk_stream_reader *r, struct mk_frame *f,
	       struct mk_err *err);
/* With MK_SR_PIECEWISE_FILE, mk_sr_next returns a FILE (or ancillary)
 * frame with only its header checked (f->piecewise, payload and wire
 * NULL: it cannot be passed through); its raw_len payload bytes then come from this call,
 * up to `cap` at a time, decompressed into `buf` when the frame is zstd
 * (in a window bounded by the memory bound).  *got > 0: bytes delivered;
 * *got == 0: the payload is complete, its checksum matched and its size
 * is raw_len: only now does the frame count as accepted.  Bytes
 * delivered before that are unverified: a caller that stores them must
 * discard them when this call fails.  A zstd payload that would inflate
 * past raw_len fails at the first byte over.  Bad checksums are errors
 * even with MK_SR_NO_VERIFY.  mk_sr_next called before the end drains
 * (and verifies) the rest. */
MK_API int mk_sr_read_payload(struct mk_stream_reader *r, void *buf, size_t cap,
		       size_t *got, struct mk_err *err);
/* With MK_SR_PIECEWISE_FILE, the piecewise frame mk_sr_next returned,
 * as transmitted, for passing on (mk_sw_pass_pieces): its header first
 * (cap must hold MK_FRAME_HDR bytes), then its payload bytes up to `cap`
 * at a time, compressed or not, never inflated.  *got == 0: the frame is
 * complete and its checksum matched (only now is it accepted; a caller
 * must not act on the bytes before).  Not mixed with mk_sr_read_payload
 * on one frame. */
MK_API int mk_sr_read_wire(struct mk_stream_reader *r, void *buf, size_t cap,
		    size_t *got, struct mk_err *err);
/* With MK_SR_SPLICE_DATA, when the input is a pipe, mk_sr_next returns
 * an uncompressed DATA frame of at least MK_SPLICE_MIN data bytes
 * piecewise: the caller reads its MK_CHUNK_HDR-byte sub-header with
 * mk_sr_read_payload, then hands the rest, n bytes, to this call, which
 * moves them into out_fd (out_label in messages) at offset off by
 * splice(2) (by read and pwrite where splice is refused, and then for the
 * rest of the stream), reads them back from out_fd (mapped, so out_fd
 * must be open for reading too; pread where it cannot be mapped) and
 * checks the frame's checksum over them.  0: the frame is accepted
 * and *view holds its n data bytes as written, valid until the next call
 * on r.  An error leaves unverified bytes at [off, off + n) of out_fd,
 * which the caller must discard.  The memory bound applies to such a
 * frame as if it were read whole. */
MK_API int mk_sr_splice_payload(struct mk_stream_reader *r, int out_fd, const char *out_label, uint64_t off,
			 size_t n, const void **view, struct mk_err *err);
/* Take the buffer that holds frame f, just returned by mk_sr_next(r) read
 * whole and not compressed (its payload lies in f->wire), in exchange for
 * *buf (*cap bytes; NULL and 0 for none), which the reader goes on with:
 * true, and *buf, *cap are f's buffer, f->wire at its start, the caller's
 * until it frees or trades it, and f's pointers are no longer valid.
 * False (a compressed or piecewise frame): nothing changes.  A caller
 * that keeps a payload past the next frame saves copying it. */
MK_API bool mk_sr_trade(struct mk_stream_reader *r, const struct mk_frame *f, uint8_t **buf, size_t *cap);
/* Frame bytes kept past the reader's next call (mk_sr_keep). */
struct mk_frame_keep {
	void *map;
	size_t len;
};
/* When frame f, just returned by mk_sr_next(r), lies in a mapping that a
 * channel lent (a chunk whose writer mapped it from its file,
 * mk_sw_chunk_splice), hand the mapping to *k: f->wire and f->payload stay
 * valid until mk_frame_keep_release(k), and the reader is done with them.
 * Else false, and *k is empty.  The lent frame's counterpart of
 * mk_sr_trade. */
MK_API bool mk_sr_keep(struct mk_stream_reader *r, const struct mk_frame *f, struct mk_frame_keep *k);
/* Unmap what k keeps, if anything; k is empty after. */
MK_API void mk_frame_keep_release(struct mk_frame_keep *k);
MK_API void mk_sr_free(struct mk_stream_reader *r);
/* Frames returned and bytes consumed so far (the prelude included). */
MK_API void mk_sr_position(const struct mk_stream_reader *r, uint64_t *frames, uint64_t *bytes);
/* Is `type` a frame type this version knows? */
MK_API bool mk_frame_type_known(const char *type);

/* ---- writing ---- */
struct mk_stream_writer;
/* Write the prelude to out.  compress_level 0 disables zstd; otherwise
 * every payload of at least 64 bytes is compressed at that level (kept
 * raw when compression does not shrink it). */
MK_API int mk_sw_open_io(struct mk_stream_writer **out, struct mk_io to, int compress_level,
			 struct mk_err *err);
/* The same to a descriptor: mk_sw_open_io(out, mk_io_fd(fd), ...). */
MK_API int mk_sw_open(struct mk_stream_writer **out, int fd, int compress_level,
	       struct mk_err *err);
/* Write a frame whose payload is the concatenation of `n` pieces. */
MK_API int mk_sw_frame(struct mk_stream_writer *w, const char *type,
		const void *const *piece, const size_t *piece_len, size_t n,
		struct mk_err *err);
/* Convenience: one-piece payload. */
MK_API int mk_sw_frame1(struct mk_stream_writer *w, const char *type,
		 const void *payload, size_t len, struct mk_err *err);
/* A DATA/INPT frame from a chunk (sub-header + c->data). */
MK_API int mk_sw_chunk(struct mk_stream_writer *w, const char *type,
		const struct mk_chunk *c, struct mk_err *err);
/* mk_sw_chunk for a chunk whose data (c->data, c->data_len) are also
 * bytes [off, off + c->data_len) of the file src_fd: the same bytes on the
 * wire (the checksum is computed over c->data), but when the stream goes
 * to a pipe, compression is off and the data are at least MK_SPLICE_MIN
 * bytes, the data move from src_fd's page cache into the pipe by
 * splice(2), not through user space.  Where splice is refused (the output
 * is not a pipe, the source's file system cannot) the data are written
 * from c->data, and this writer does not try splice again.  A source file
 * that changed since c->data was read makes a frame whose checksum fails
 * downstream.  On a channel (mk/chan.h) an uncompressed INPT or DATA
 * chunk of at least MK_MAP_MIN bytes is not copied either: a private
 * mapping of the file's bytes becomes the frame's buffer, its headers
 * written over the bytes before the data (copy on write), and the reader
 * lends it (mk_sr_keep); the bytes are the file's as mapped, so src_fd
 * must not change while the stream runs (a truncated file raises SIGBUS
 * in the reader). */
MK_API int mk_sw_chunk_splice(struct mk_stream_writer *w, const char *type, const struct mk_chunk *c,
		       int src_fd, uint64_t off, struct mk_err *err);
/* A DATA or INPT chunk's frame filled in place on a channel writer (no
 * compression): reserve writes the frame's headers for c (c->data is not
 * read) into a buffer of the channel, waiting for room as mk_sw_chunk
 * would, and points *data at where its c->data_len payload bytes go: 1.
 * 0 when the writer is no such channel (the caller writes the chunk with
 * mk_sw_chunk), or an error.  One at a time: commit queues it once its
 * payload is written, unreserve drops it unqueued (mk_sw_free drops one
 * left). */
MK_API int mk_sw_chunk_reserve(struct mk_stream_writer *w, const char *type, const struct mk_chunk *c,
			       void **data, struct mk_err *err);
MK_API int mk_sw_chunk_commit(struct mk_stream_writer *w, struct mk_err *err);
MK_API void mk_sw_chunk_unreserve(struct mk_stream_writer *w);
/* A FILE frame; name validated with mk_file_name_check. */
MK_API int mk_sw_file(struct mk_stream_writer *w, const char *name, uint32_t mode,
	       const void *data, size_t len, struct mk_err *err);
/* Pass a frame through byte for byte; a chunk without a checksum (from
 * a channel, MK_CSUM_NONE) gets its CRC-32C when w is a descriptor. */
MK_API int mk_sw_pass(struct mk_stream_writer *w, const struct mk_frame *f,
	       struct mk_err *err);
/* Write the END frame with this writer's counts; flushes. */
/* Pass on frame f (type, criticality, len and raw_len as its header
 * says) whose bytes as transmitted come from next() in pieces: from
 * mk_sr_read_wire, or from where a caller kept them.  The bytes are
 * copied, not checked (the reader downstream checks them): more or fewer
 * than MK_FRAME_HDR + f->len is an error, and so is an error from next,
 * after which the stream written so far ends inside the frame; so is a
 * frame without a checksum (MK_CSUM_NONE) when w is a descriptor. */
MK_API int mk_sw_pass_pieces(struct mk_stream_writer *w, const struct mk_frame *f,
		      int (*next)(void *ctx, void *buf, size_t cap, size_t *got, struct mk_err *err),
		      void *ctx, struct mk_err *err);
/* Pass on frame f, just returned by mk_sr_next(r): whole (mk_sw_pass) or,
 * piecewise, through mk_sr_read_wire in pieces; its checksum is verified
 * by r as the last piece passes. */
MK_API int mk_sw_pass_from(struct mk_stream_writer *w, struct mk_stream_reader *r, const struct mk_frame *f,
		    struct mk_err *err);
MK_API int mk_sw_end(struct mk_stream_writer *w, struct mk_err *err);
MK_API void mk_sw_free(struct mk_stream_writer *w);
MK_API uint64_t mk_sw_bytes(const struct mk_stream_writer *w);
/* Whether w writes to an in-process channel (mk/chan.h), not a descriptor. */
MK_API bool mk_sw_in_process(const struct mk_stream_writer *w);

/* ---- FILE frames ---- */
/* A relative name: not empty, not absolute, no empty, "." or ".."
 * components, no NUL (len bytes, no terminator needed), no backslash. */
MK_API int mk_file_name_check(const char *name, size_t len, struct mk_err *err);
struct mk_file_frame {
	uint32_t mode;
	char *name;           /* malloc'ed, NUL-terminated */
	const uint8_t *data;  /* borrowed from the frame payload */
	size_t len;
};
MK_API int mk_file_decode(const uint8_t *payload, size_t len,
		   struct mk_file_frame *ff, struct mk_err *err);

/* Make a pipe or file descriptor's buffer large (F_SETPIPE_SZ) when it is
 * a pipe; harmless otherwise. */
MK_API void mk_fd_grow_pipe(int fd);

#endif
