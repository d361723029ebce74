/* merge.h - mk-merge: run each job's merge method over its input chunks.
 *
 * Reads an "inputs" stream (mk-fetch's plan mode), writes a "tensors"
 * stream (for mk-pack): the HEAD with kind "tensors", the FILE and
 * ancillary frames passed through byte for byte, and for each job the
 * output tensor's DATA chunks.  It never opens model files.
 *
 * Per job: the method is looked up by name (MK_ENOENT, with the closest
 * name, when unknown), the job is planned again from the frame (contract
 * and parameters checked at execution too), and the inputs' chunks are
 * converted to the compute dtype as they arrive.  A job sent passes + 1
 * times runs statistics pass p on send p and writes its output on the
 * last send; only one chunk per input is held at a time.  A job whose
 * output is one input's bytes (byte copy) is passed through unconverted.
 */
#ifndef MK_MERGE_H
#define MK_MERGE_H

#include <stdbool.h>
#include <stdint.h>
#include "mk/err.h"
#include "mk/stream.h"

struct mk_cuda_ctx;

struct mk_chan_skip;

struct mk_merge_opts {
	int compress_level;          /* zstd level for the output, 0: none */
	uint64_t budget;             /* refuse held jobs larger than this (0: none) */
	const char *spill_dir;       /* jobs the plan spills: their chunks go to
					an unlinked file here, later passes are
					read back from it (NULL: none allowed) */
	struct mk_cuda_ctx *cuda;    /* apply float32 jobs of the methods with
					GPU kernels there (mk/cuda.h), the rest
					on the CPU; NULL: all on the CPU */
	unsigned threads;            /* worker threads for the conversions and
					the kernels (0 or 1: this thread); the
					output does not depend on it */
	void (*progress)(void *ctx, uint64_t jobs_done, uint64_t njobs);
	void *progress_ctx;
	/* An output tensor that holds NaN or infinite elements although its
	 * used inputs were finite: warn(warn_ctx, message) once per tensor
	 * at the end, or with strict, fail the merge (no END frame, so
	 * mk-pack writes no OUT). */
	bool strict;
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	/* In one process with the mk-fetch writing the stream (mk-yaml): a
	 * streamed job's statistics pass the method needs no more input for
	 * is marked here, and mk-fetch sends no more of it (mk/chan.h); the
	 * next pass's first chunk then ends it.  NULL: none marked. */
	struct mk_chan_skip *skip;
};

struct mk_merge_stats {
	uint64_t jobs, byte_copies, chunks_in, chunks_out, bytes_out;
	uint64_t spill_bytes_max;    /* the most bytes spilled for one job */
	uint64_t gpu_jobs;           /* jobs whose output the GPU computed */
	uint64_t nonfinite_tensors;  /* outputs with NaN or infinite elements */
	uint64_t nonfinite_new;      /* ... of those, from finite inputs */
	uint64_t passes_added;       /* statistics passes the methods added to held
				      * jobs (mk_job.held: a selection's window that
				      * missed its rank) */
	uint64_t passes_skipped;     /* passes marked for mk-fetch (mk_merge_opts.skip) */
};

int mk_merge_run(const struct mk_merge_opts *o, struct mk_io in, const char *label,
		 struct mk_io out, struct mk_merge_stats *st, struct mk_err *err);

/* The same on a stream whose HEAD the caller has read (mk_sr_head, kind
 * "inputs"): rd and head are borrowed. */
struct mk_stream_reader;
struct mk_manifest;
int mk_merge_run_from(const struct mk_merge_opts *o, struct mk_stream_reader *rd,
		      struct mk_manifest *head, const char *label, struct mk_io out,
		      struct mk_merge_stats *st, struct mk_err *err);

#endif
