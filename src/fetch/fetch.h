/* fetch.h - mk-fetch: attach tensor data to a stream.
 *
 * Copy mode (no plan): every tensor of the given models, in each model's
 * file order, as DATA chunks of a "tensors" stream, after a HEAD manifest
 * and FILE frames for the first model's non-weight files (config.json,
 * generation_config.json and the tokenizer files).  Several models are
 * allowed only when their tensor names are disjoint.
 */
#ifndef MK_FETCH_H
#define MK_FETCH_H

#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"
#include "mk/stream.h"
#include "io/model.h"
#include "io/reader.h"

struct mk_stream_writer;

struct mk_chan_skip;

struct mk_fetch_opts {
	const char *const *models;   /* references, as given */
	size_t nmodels;
	size_t chunk_bytes;          /* 0: MK_READER_DEFAULT_CHUNK */
	unsigned qdepth;             /* 0: MK_READER_DEFAULT_QDEPTH */
	enum mk_io_kind io;          /* MK_IO_AUTO: $MK_IO, then default */
	/* Hub models the cache lacks: read their shards by range requests
	 * (the http reader) instead of downloading them first; also set by
	 * io == MK_IO_HTTP or MK_IO=http.  no_cache: what is read that way is
	 * not written into the cache. */
	bool remote, no_cache;
	int compress_level;          /* 0: no zstd */
	/* Tensor bytes read from a local file as they are go into a pipe
	 * by splice(2) (mk_sw_chunk_splice); no_splice writes every byte
	 * from user space (the same stream). */
	bool no_splice;
	/* --skip-done: an interrupted mk-pack's OUT.mk-partial (or NULL).
	 * The tensors its journal lists as done are not read or sent (copy
	 * mode: those tensors' chunks; plan mode: the jobs making them, their
	 * JOB frames dropped and the HEAD's "jobs" and "spilled_jobs" counted
	 * anew); the HEAD keeps the whole manifest and every FILE frame is
	 * sent.  A journal of another merge (mk_journal_check) is an
	 * error; a missing directory or journal skips nothing. */
	const char *skip_done;
	/* plan mode: the bytes of the plan's FILE frames held in memory until
	 * the HEAD goes out (0: mk_budget_fetch_hold's default); the rest wait in an
	 * unlinked scratch file in $TMPDIR (or /tmp) */
	uint64_t hold_bytes;
	/* plan mode: models whose tensors come from a live "tensors" stream
	 * instead of their files (mk-multi streaming one merge into the
	 * next, in one process): the model whose plan reference is
	 * feed_refs[k] is not opened; its inputs' bytes are taken from the
	 * DATA frames read from feeds[k] (another merge's mk-merge output),
	 * cut again to this merge's chunk ranges.  The plan must read such a
	 * model's tensors once each, in their stored order, at most one per job,
	 * in the stream's order (mk_fetch_feed_check, and as the frames come); frames of tensors it
	 * does not read are dropped, and the rest of the stream is read to
	 * its end after the last job.  Anything else is an error naming the
	 * job. */
	const char *const *feed_refs;
	const struct mk_io *feeds;
	size_t nfeeds;
	/* called after each chunk is written, may be NULL */
	void (*progress)(void *ctx, uint64_t done, uint64_t total);
	void *progress_ctx;
	/* plan mode, in one process with the mk-merge reading the stream
	 * (mk-yaml): the passes it will not read (mk/chan.h), whose chunks
	 * are then not sent; NULL: every planned pass is sent */
	const struct mk_chan_skip *skip;
};

struct mk_fetch_stats {
	char backend[64];            /* reader backend used */
	char note[160];              /* why AUTO fell back, or "" */
	unsigned qdepth;
	size_t chunk_bytes;
	uint64_t tensors, chunks, bytes_read, stream_bytes;
	uint64_t backward_seeks;     /* reads that went back in a file */
	uint64_t skipped;            /* tensors (copy) or jobs (plan) left out */
	uint64_t chunks_unsent;      /* chunks of passes mk-merge did not want (skip) */
	uint64_t dequant_held;       /* plan mode: bytes dequantizing keeps (MXFP4 experts) */
};

/* Names of the non-weight files copy mode carries, NULL-terminated. */
extern const char *const mk_fetch_copy_files[];

/* The options' way of opening a model (mk_model_open_with). */
void mk_fetch_model_opts(const struct mk_fetch_opts *o, const char *commit,
			 struct mk_model_open_opts *mo);

/* The reader for these models, writing to w: kind MK_IO_HTTP when a shard
 * is remote, else the options' kind; and, for AUTO, the mmap reader when
 * w is an in-process channel (mk/chan.h), where no pipe write faults the
 * mapped pages in. */
void mk_fetch_reader_pick(const struct mk_fetch_opts *o, struct mk_model *const *models, size_t n,
			  const struct mk_stream_writer *w, struct mk_reader_opts *ro);

int mk_fetch_copy(const struct mk_fetch_opts *o, struct mk_io out,
		  struct mk_fetch_stats *st, struct mk_err *err);


/* Plan mode: read a "plan" stream (mk-plan's output) from in, check
 * every model shard's size and header hash against the plan's model table,
 * and write an "inputs" stream to out: the HEAD (kind "inputs"), the
 * FILE and ancillary frames passed through, then each JOB frame followed
 * by its inputs' chunks (for each send and chunk range, input 0, 1, ...
 * over the same elements).  The inputs of a job share their row length;
 * their row counts may differ (embeddings of different vocabularies): a
 * chunk range past an input's end is not sent for that input. */
int mk_fetch_plan(const struct mk_fetch_opts *o, struct mk_io in, const char *label,
		  struct mk_io out, struct mk_fetch_stats *st, struct mk_err *err);

/* Whether a plan can take model `model` (its index in the plan's model
 * table) from a stream whose HEAD is `stream` (mk_fetch_opts.feeds):
 * every input of that model is a tensor of the stream, of its dtype and
 * shape, read as stored (no assembly or LoRA; a vocabulary job's rows in
 * their stored order, some perhaps left out, and none read for another
 * token) by a job that sends its inputs once, at most one such input per
 * job, each tensor once; and, with rank (the position of each stream tensor
 * in the stream: its job's in the plan making it), in the stream's
 * order.  Without rank the order is checked as the frames come.  0, or
 * MK_EINVAL with the first reason it cannot, naming the job and
 * tensor. */
struct mk_manifest;
struct mk_plan_job;
int mk_fetch_feed_check(const struct mk_manifest *stream, const size_t *rank, size_t model,
			struct mk_plan_job *const *jobs, size_t njobs, struct mk_err *err);

#endif
