/* pack.h - mk-pack: write a "tensors" stream as a Hugging Face model dir.
 *
 * Shards are assigned greedily in manifest order (mergekit's rule: when
 * the current shard is not empty and the next tensor would take it past
 * shard_size, start a new one; a larger tensor gets a shard of its own;
 * shard_size 0 means one file).  One shard is written as
 * model.safetensors, several as model-%05d-of-%05d.safetensors plus
 * model.safetensors.index.json.  Every header is written first and each
 * chunk pwritten at its final offset, so nothing is buffered per shard.
 *
 * The output is built in OUT.mk-partial/: free space is checked against
 * the manifest, shards are preallocated, and a journal (.mk-journal)
 * records the stream's key (mk_journal_stream_key) and the shard size, then
 * each finished tensor with the CRC-32C of its bytes, after those bytes
 * were fdatasync'ed.  When the END frame has been checked and everything
 * synced, the journal is removed and the directory renamed to OUT.  On
 * any error OUT.mk-partial is removed and OUT is not created (unless
 * keep_partial or resume).
 *
 * Resume: with `resume`, an OUT.mk-partial left by an interrupted run is
 * continued.  Its journal must have the same key and shard size (else
 * MK_EMISMATCH, nothing touched); every tensor it lists is checked
 * against its CRC-32C in the shard file (a mismatch is MK_ECORRUPT,
 * nothing touched: the partial directory must be discarded); the files
 * other than shards and journal are removed (the stream's FILE frames
 * write them again).  Chunks of those tensors that still arrive are
 * skipped unread; the other tensors are written as usual.  A partial
 * directory without a journal, or whose journal records no header (an
 * interruption before anything was synced), is started over.  With
 * resume, a failure keeps OUT.mk-partial and journals what was written.
 */
#ifndef MK_PACK_H
#define MK_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"
#include "stream/manifest.h"
#include "mk/stream.h"

#define MK_PACK_DEFAULT_SHARD 5000000000ull  /* mergekit's "5B" */

struct mk_pack_opts {
	const char *out_dir;
	uint64_t shard_size;         /* bytes; 0 = a single file */
	bool force;                  /* replace an existing OUT */
	bool keep_partial;           /* on error, leave OUT.mk-partial */
	uint64_t sync_bytes;         /* journal group commit; 0: 64 MiB */
	uint64_t budget;             /* --max-memory: refuse streams whose frames
					(the HEAD's chunk size) cannot fit, and
					commit at most a quarter of it at a
					time (0: no limit) */
	bool resume;                 /* continue OUT.mk-partial (see above) */
	bool resumable;              /* the program has --resume: a leftover
					OUT.mk-partial's message offers it */
	/* DATA payloads from a pipe go into the shards by splice(2) and are
	 * checked as read back (mk_sr_splice_payload); no_splice reads each
	 * frame into memory and writes it from there */
	bool no_splice;
	/* tensor data are written O_DIRECT where the file system takes it,
	 * bypassing the page cache (the bytes and their durability are the
	 * same); buffered writes everything through the page cache */
	bool buffered;
	void (*progress)(void *ctx, uint64_t done, uint64_t total,
			 size_t tensors_done, size_t ntensors);
	void *progress_ctx;
	/* The weight files' name: NAME.safetensors, or NAME-%05d-of-%05d.safetensors
	 * with NAME.safetensors.index.json; NULL: "model".  A PEFT adapter's
	 * is "adapter_model" (mk-extract-lora).  [A-Za-z0-9_.-], 1 to 64. */
	const char *basename;
	/* --quantize fp8|mxfp4: the tensors the HEAD marks "requant" written
	 * in that format, which must be the HEAD's quantization_config's
	 * (fp8: F8_E4M3 and NAME_scale_inv, float32; mxfp4: NAME_blocks and
	 * NAME_scales), config.json given that quantization_config
	 * (pack_quant.c); not with resume.  MK_REQUANT_NONE: as they come. */
	enum mk_requant quantize;
};

struct mk_pack_stats {
	size_t nshards, ntensors, nfiles;
	uint64_t tensor_bytes, bytes_written;
	size_t resumed;              /* tensors found done in the journal */
	uint64_t resumed_bytes;
	uint64_t quant_held_max;     /* --quantize: most bytes of block-rows held */
	/* set when OUT is in place, complete, but a step after its rename
	 * failed (removing the old OUT of --force, the fsync of OUT's parent
	 * that makes the rename durable): a warning for the user, not an
	 * error, since OUT must not appear after a reported failure */
	char warning[3072];
};

struct mk_manifest;

/* Check OUT before any input is read: no other run writing it (OUT's
 * lock, journal/outlock.h), OUT not there without force, no partial an
 * earlier run left without resume or force.  `held`: the lock the
 * caller took (NULL: taken and released here, a look before the run).
 * mk_pack_run calls it too. */
struct mk_out_lock;
int mk_pack_check_out(const struct mk_pack_opts *o, const struct mk_out_lock *held, struct mk_err *err);
/* A FILE frame's name mk-pack refuses: one that would overwrite a shard,
 * the index or the journal (mk-cat --verify checks tensors streams with
 * it too). */
int mk_pack_file_name_check(const char *name, struct mk_err *err);
/* A FILE frame of `size` content bytes mk-pack accepts: the HEAD's
 * "files" list announces `name` with at least that size (so the free
 * space checked at the HEAD covers it). */
struct mk_manifest;
int mk_pack_file_size_check(const struct mk_manifest *head, const char *name, uint64_t size,
			    struct mk_err *err);

int mk_pack_run(const struct mk_pack_opts *o, struct mk_io in, const char *label,
		struct mk_pack_stats *st, struct mk_err *err);
/* Put the finished directory `done` in place as `out` (rename(2)); with
 * `force` an existing `out` is moved aside first and removed after, so
 * that OUT is never half old, half new; the parent directory is synced.
 * What went wrong after `out` is in place (the old one not removed, the
 * sync) is a warning into warning[wlen] (left as it is otherwise). */
int mk_pack_put_in_place(const char *done, const char *out, bool force, char *warning, size_t wlen,
			 struct mk_err *err);
/* The weight files' basename of o (mk_pack_opts.basename, or "model"),
 * or MK_EINVAL naming what is wrong with the one given. */
int mk_pack_basename(const struct mk_pack_opts *o, const char **out, struct mk_err *err);

/* A merge into memory's output stage (pack_memory.c): every tensor of the
 * stream, assembled whole, given to sink (mk_run_opts.sink); nothing is
 * written.  budget (0: none) bounds the tensors being assembled at once. */
struct mk_pack_memory_opts {
	int (*sink)(void *ctx, const char *name, const struct mk_tensor_desc *desc, const void *data,
		    struct mk_err *err);
	void *sink_ctx;
	uint64_t budget;
	void (*progress)(void *ctx, uint64_t done, uint64_t total,
			 size_t tensors_done, size_t ntensors);
	void *progress_ctx;
};
int mk_pack_to_memory(const struct mk_pack_memory_opts *o, struct mk_io in, const char *label,
		      struct mk_err *err);

#endif
