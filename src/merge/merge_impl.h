/* merge_impl.h - internals of mk-merge shared by its files (not installed).
 *
 * mk_merge_run (merge.c) reads an inputs stream frame by frame and runs one
 * job at a time (struct run): it gathers each range of the job's input
 * chunks, then runs a statistics pass over it or writes its output.  The
 * pieces it uses, one file each:
 *   pool.c       buffers of finished jobs, reused by the next ones
 *   spill.c      the replay record of a job sent once: in memory (held
 *                jobs) or in a spill file (--spill DIR)
 *   gpu_queue.c  the output: DATA frames in the plan's order, outputs
 *                computed on the GPU queued until a drain
 *   workers.c    the threads that convert a range's inputs and run the
 *                method over it
 */
#ifndef MK_MERGE_IMPL_H
#define MK_MERGE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "cuda/cuda.h"
#include "mk/dtype.h"
#include "mk/err.h"
#include "merge/merge.h"
#include "mk/method.h"
#include "stream/job.h"
#include "mk/stream.h"

struct inbuf {                   /* one input's piece of the current range */
	bool have;
	uint64_t begin, count;   /* elements held */
	void *conv;              /* compute dtype */
	size_t conv_cap;
	void *raw;               /* as received, copied */
	size_t raw_cap, raw_len;
	struct mk_frame_keep keep; /* or where a channel lent it (mk_sr_keep) */
	const void *data;        /* the bytes to convert: raw, or a replay
				    record's (in memory, stable for the job),
				    or fill ... */
	enum mk_dtype dtype;     /* ... in this dtype */
	void *fill;              /* a vocabulary job's filled rows */
	size_t fill_cap;
};

struct run {                     /* the job being merged */
	bool live;
	struct mk_plan_job *pj;
	const struct mk_method *m;
	struct mk_job job;
	struct mk_job_desc d;
	bool check_equal;            /* inputs 1.. must equal input 0 */
	bool held;                   /* sent once, replayed from memory */
	unsigned planned;            /* the job's statistics passes as planned (a
				      * held job's method may add one) */
	uint64_t seed;               /* the plan's random seed */
	unsigned threads;            /* worker threads (-j) */
	struct mk_tensor_desc *in;
	const char **labels;         /* [ninputs] the inputs' models as configured */
	const char *name;
	uint64_t out_nelem, out_row_len;   /* the job's output (a part's) */
	size_t out_index;
	uint64_t out_at;         /* its first element in the output tensor (a part's begin, else 0) */
	uint64_t emit_row_len;   /* the output tensor's row length, for DATA frames */
	struct inbuf *ib;
	/* the INPT frame being taken in, and its reader (mk_sr_trade) */
	struct mk_stream_reader *rd;
	const struct mk_frame *frame;
	/* the range being gathered */
	bool range;
	unsigned send;
	uint64_t begin, count;
	unsigned passes_done;
	uint64_t next_out;       /* output elements written */
	void *outc;              /* the output range, in the output dtype */
	size_t outc_cap;
	void *conv;                  /* a job with several outputs: an output chunk in its dtype */
	size_t conv_cap;
	uint64_t chunk_bytes;        /* the stream's chunk size (HEAD), for those outputs' chunks */
	struct pool *pool;       /* where buffers go when the job ends */
	struct spill *spill;     /* the spill file (--spill DIR), or NULL */
	struct spill *mem;       /* the in-memory record of held jobs */
	struct spill *rp;        /* what this job replays from, or NULL */
	struct mk_cuda_ctx *cuda;    /* --cuda: the GPU, or NULL */
	struct gpu_queue *gq;    /* outputs submitted to it, not yet written */
	bool gpu;                /* this job's output is computed there */
	/* a vocabulary job (pj->vocab) */
	double *vsum;            /* per input, the column sums of its aligned rows */
	uint64_t vnext;          /* the element the next range of this pass starts at */
	struct mk_chan_skip *skip;   /* mk_merge_opts.skip (kept across jobs) */
};

/* ------------------------------------------------------------ pool.c */

/* Buffers of finished jobs, kept for the next ones: a new job then
 * writes into pages already mapped instead of faulting in fresh zeroed
 * ones (page faults took a third of mk-merge's time before).  At most
 * POOL_MAX buffers and `limit` bytes (half the budget, or 256 MiB). */
#define POOL_MAX 16
struct pool {
	void *p[POOL_MAX];
	size_t cap[POOL_MAX];
	size_t n;
	uint64_t bytes, limit;
};

/* Keep buffer p (cap bytes) for a later job, or free it (pl NULL, the
 * pool full of larger ones, or p over the limit). */
void mk__pool_put(struct pool *pl, void *p, size_t cap);
/* A buffer of at least `need` bytes in *p (capacity *cap): the pool's
 * smallest that fits, else a new one; the old contents are not kept.
 * Returns -1 when out of memory. */
int mk__pool_grow(struct pool *pl, void **p, size_t *cap, size_t need);
void mk__pool_free(struct pool *pl);
/* mk__pool_grow from the pool of the job `r` in scope */
#define grow(p, cap, need) mk__pool_grow(r->pool, (p), (cap), (need))

/* ----------------------------------------------------------- spill.c */

/* Replays: a job sent once although its method has statistics passes is
 * merged as pass 0 while its chunks arrive, and the chunks are recorded;
 * the later passes (and the output pass) read them back, in the same
 * order, as if mk-fetch had sent them again.  A job the plan holds (its
 * working set fits the budget) is recorded in memory; one the plan
 * spills, in an unlinked file in DIR (--spill DIR), each record with its
 * chunk header and CRC-32C.  One record for the whole run, emptied after
 * each job.  Pass 0 thus overlaps the reading, and memory holds the raw
 * inputs once, not converted. */
struct spill_rec {
	struct mk_chunk c;       /* data = NULL; where: off, or at */
	uint64_t off;
	uint32_t crc;
	const void *at;          /* in memory: where the bytes stay */
	struct mk_frame_keep keep; /* a lent frame kept whole instead of copied */
};

struct spill {
	int fd;                  /* the file; -1 in memory */
	unsigned char *m;        /* in memory: the chunks' bytes */
	size_t mcap;
	const char *dir;
	uint64_t end;            /* bytes written for the current job */
	struct spill_rec *rec;
	size_t n, cap;
	void *buf;
	size_t buf_cap;
	uint64_t bytes_max;      /* the largest job spilled */
};

/* The spill file: an unlinked file in dir (O_TMPFILE, else mkostemp). */
int mk__spill_open(struct spill *sp, const char *dir, struct mk_err *err);
void mk__spill_close(struct spill *sp);
/* Record chunk c of the current job; in memory, *stored is where its
 * bytes now stay (for the rest of the job), else NULL.  In memory, a
 * non-NULL keep holds a frame a channel lent (mk_sr_keep) with c's bytes
 * in it: the record takes it over (emptying *keep) and keeps the bytes
 * where they lie instead of copying them; it is released with the
 * record. */
int mk__spill_put(struct spill *sp, const struct mk_chunk *c, struct mk_frame_keep *keep, const void **stored,
		  struct mk_err *err);
/* Record i of the current job, read back and checked; c->data stays
 * valid until the next call. */
int mk__spill_get(struct spill *sp, size_t i, struct mk_chunk *c, struct mk_err *err);
/* In memory: room for `need` bytes of the job about to start (empty). */
int mk__spill_reserve(struct spill *sp, uint64_t need, struct mk_err *err);
/* Empty the record for the next job. */
void mk__spill_reset(struct spill *sp);

/* ----------------------------------------------------------- vocab.c */

/* A vocabulary job's range [b, b + n) (one fill, every input wholly
 * there or not): the inputs that lack it, or all under force, get the
 * fill as their data, in the vocabulary dtype; the padding's sums grow. */
int mk__vocab_range(struct run *r, uint64_t b, uint64_t n, struct mk_err *err);

/* ------------------------------------------------------- gpu_queue.c */

/* Outputs computed on the GPU wait here, in job order, until a flush:
 * small jobs (norms, biases, one range each) then share launches instead
 * of one launch and one wait each.  Anything else written to the output
 * (another job's DATA, a passed frame, the END) drains the queue first,
 * so the stream's order is the plan's. */
struct gpu_out {
	size_t index;            /* the output tensor */
	uint64_t row_len, begin, n;
	enum mk_dtype dt;        /* its dtype (the GPU writes float32) */
	void *buf;               /* float32 [n] */
	size_t cap;
};

struct gpu_queue {
	struct gpu_out *q;
	size_t n, cap;
	uint64_t bytes;          /* float32 bytes waiting */
	void *conv;              /* a piece in the output dtype */
	size_t conv_cap;
	/* per output tensor (manifest index): non-finite elements written,
	 * and in the used inputs as they arrived (first send) */
	uint64_t *nonfinite_out, *nonfinite_in;
};

/* Wait for the GPU and write every queued output, in order. */
int mk__gpuq_drain(struct mk_stream_writer *w, struct gpu_queue *gq, struct pool *pl, struct mk_cuda_ctx *cx,
		   struct mk_merge_stats *st, struct mk_err *err);
/* Free what is queued (into the pool) and the queue. */
void mk__gpuq_free(struct gpu_queue *gq, struct pool *pl);
/* Write job elements [begin, begin + count) of r's output (data, len
 * bytes of dtype dt) as DATA frames, after draining the queue. */
int mk__gpuq_emit(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, enum mk_dtype dt,
		  const void *data, size_t len, struct mk_merge_stats *st, struct mk_err *err);
/* mk__gpuq_emit in two steps, the output written in place: reserve
 * makes the DATA frame of job elements [begin, begin + count) (len bytes
 * of dtype dt) on w, *data where its payload goes: 1; 0 when w takes no
 * frame filled in place (a descriptor, or compressing) or outputs of the
 * GPU wait in the queue (they are written first, once this range is
 * computed): the caller writes the output itself and emits it; or an
 * error.  Commit writes the frame once its payload is there, with the
 * output's non-finite elements counted by the caller.  A failure between
 * the two leaves the frame to mk_sw_free, unwritten. */
int mk__emit_reserve(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, enum mk_dtype dt,
		     size_t len, void **data, struct mk_err *err);
int mk__emit_commit(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, size_t len,
		    uint64_t nonfinite, struct mk_merge_stats *st, struct mk_err *err);
/* Submit job elements [b, b + n) to the GPU, its inputs the converted
 * buffers from element `from` of each; the output joins the queue. */
int mk__gpuq_submit(struct mk_stream_writer *w, struct run *r, uint64_t b, uint64_t n, uint64_t from,
		    struct mk_merge_stats *st, struct mk_err *err);

/* --------------------------------------------------------- workers.c */

/* Convert the used inputs of the range's elements [b, b + n) into the
 * compute dtype on up to r->threads threads, and (apply) run the method
 * and convert its output into `out` (n elements of the output dtype),
 * adding its non-finite elements to *nonfinite_out when that is not
 * NULL (each piece counted while it is in cache). */
int mk__workers_run(struct run *r, uint64_t b, uint64_t n, bool apply, void *out, uint64_t *nonfinite_out,
		    struct mk_err *err);
/* Whether the used inputs' non-finite elements are counted as the
 * output's pass converts them (in cache, on the workers: every element
 * once), not as they come: every job whose inputs are converted range by
 * range.  A job-wide answer; the statistics passes before count nothing. */
static inline bool mk__counts_on_convert(const struct run *r)
{
	return !r->pj->vocab && !r->job.byte_copy && !r->check_equal && r->gq->nonfinite_in;
}

/* A statistics pass over the range's elements [b, b + n): its inputs
 * converted (or, to a job that takes them, passed as BF16) and
 * accumulated block by block on this thread (in element order, as
 * accumulate wants, and in the core's cache), the blocks past what the
 * method still wants passed unread. */
int mk__workers_stats(struct run *r, uint64_t b, uint64_t n, struct mk_err *err);

#endif
