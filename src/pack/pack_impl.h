/* pack_impl.h - internals of mk-pack shared by its files (not installed):
 * the state of one run (struct pack) and the calls between
 *   pack_layout.c  the output's layout: shards, file names, headers, index
 *   pack_writer.c  the shard files and their O_DIRECT/io_uring writes
 *   pack_sync.c    the journal's group commits, on a thread of their own
 *   pack_resume.c  what a partial directory left by a run holds
 *   pack_files.c   the FILE frames
 *   pack_quant.c   --quantize fp8: weights written block FP8 again
 *   pack.c         the stage: the stream read, the directory put in place
 */
#ifndef MK_PACK_IMPL_H
#define MK_PACK_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <liburing.h>
#include "mk/err.h"
#include "pack/pack.h"

struct mk_journal;
struct mk_stream_reader;
struct mk_frame;
struct mk_chunk;

#define INDEX_NAME "model.safetensors.index.json"

/* Tensor data go into the shards by O_DIRECT writes (no copy into the
 * page cache, whose fresh pages cost more than the copy on a busy host,
 * and the inputs' cached pages stay) of whole DIRECT_ALIGN blocks from
 * a bounce buffer of DIRECT_BOUNCE bytes; the blocks a tensor shares with
 * its neighbours (or the header) are written through the page cache.
 * Where the file system refuses O_DIRECT (tmpfs, some network file
 * systems) or a write needs another alignment, everything goes through
 * the page cache, as with --buffered.
 *
 * The direct writes go out by io_uring, up to DIRECT_QUEUE at once from
 * as many bounce buffers, so that the device writes one while the next
 * is filled.  Written one at a time (pwrite), each waited for the device
 * and the stream waited with it: in mk-yaml ties on three 300 MB models
 * mk-pack's thread spent about half the run in its writes, and the merge
 * waited 62-70 ms for room in the queue to mk-pack.  A write still in
 * flight holds only its own bounce buffer; they are all waited for
 * before a group commit's fdatasync, at the end, and before the buffers
 * are freed. */
#define DIRECT_ALIGN 4096u
#define DIRECT_BOUNCE (2u << 20)
#define DIRECT_QUEUE 3u

struct dbuf {                    /* a bounce buffer, and its write in flight */
	uint8_t *buf;
	struct shard *sh;
	uint64_t off;
	size_t n;
	bool busy;
};

struct shard {
	char name[64];
	int fd;
	int dfd;                 /* the same file opened O_DIRECT, or -1 */
	uint64_t size;           /* file size: header + data */
	uint64_t data_start;
};

struct slot {                    /* where a manifest tensor goes */
	size_t shard;
	uint64_t off;            /* file offset of its first byte */
	uint64_t got;            /* elements received so far */
	uint32_t crc;            /* CRC-32C of the bytes written so far */
	bool done;
	bool resumed;            /* done by an earlier run (its chunks skipped) */
	uint64_t dpos;           /* the file offset of its next block to write O_DIRECT */
	uint8_t *part;           /* the start of its next whole block [DIRECT_ALIGN] */
	uint32_t npart;
};

/* The journal's group commits run on a thread of their own, so writing
 * goes on while the disk catches up (fdatasync waits for the device). */
struct syncer {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, busy, stop;
	size_t *batch;           /* tensors to journal once synced */
	size_t nbatch;
	int rc;
	struct mk_err err;
};

struct rq;

struct pack {
	const struct mk_pack_opts *o;
	/* --quantize: the stream's manifest (in) beside the output's (man),
	 * each stream tensor's first output tensor (omap) and, for a requant
	 * weight, its block-row being gathered (rq); in NULL: man is the
	 * stream's */
	struct mk_manifest *in;
	size_t *omap;
	struct rq *rq;
	uint64_t quant_held;     /* bytes of block-rows held now */
	unsigned long faults0;   /* mk_mapguard_faults() at the start */
	char *partial;           /* OUT.mk-partial */
	struct mk_manifest *man;
	size_t nshards;
	struct shard *sh;
	struct slot *slot;
	int jfd;                 /* journal */
	uint64_t pending_bytes;  /* finished, not yet handed to the syncer */
	size_t *finished;        /* finished tensors not yet handed over */
	size_t nfinished;
	struct syncer sy;
	size_t ndone;
	uint64_t done_bytes;
	struct dbuf db[DIRECT_QUEUE];
	unsigned ndb, cur;       /* bounce buffers (none: no O_DIRECT writes);
				    db[cur] is the one filled next */
	struct io_uring ring;
	bool ring_ok;            /* else one buffer, written by pwrite */
	struct mk_pack_stats *st;
};

/* ------------------------------------------------------ pack_layout.c */

/* "a/b", malloc'ed; NULL when out of memory. */
char *mk__pack_join(const char *a, const char *b);
/* Greedy shard assignment in manifest order, as mergekit's writer: sets
 * p->slot (each tensor's shard), p->nshards and p->sh (the shards' file
 * names, their descriptors -1), from p->man and p->o->shard_size. */
int mk__pack_assign_shards(struct pack *p, struct mk_err *err);
/* Build each shard's header; fills sizes and the tensors' offsets. */
int mk__pack_build_headers(struct pack *p, uint8_t ***hdrs, size_t **hlens, struct mk_err *err);
/* The output fits in the free space of the file system of dir. */
int mk__pack_check_space(struct pack *p, const char *dir, struct mk_err *err);
/* model.safetensors.index.json, in the partial directory. */
int mk__pack_write_index(struct pack *p, struct mk_err *err);

/* ------------------------------------------------------ pack_writer.c */

/* Create (or, resumed, open again) each shard, preallocated, its header
 * written; opened O_DIRECT too where there are bounce buffers. */
int mk__pack_open_shards(struct pack *p, uint8_t **hdrs, size_t *hlens, bool resume, struct mk_err *err);
/* From now on a shard is written through the page cache alone. */
void mk__pack_direct_off(struct shard *sh);
/* The bounce buffers (and ring) for room bytes of memory. */
void mk__pack_direct_setup(struct pack *p, uint64_t room);
/* Wait for every write in flight; the first failure's error. */
int mk__pack_direct_drain(struct pack *p, struct mk_err *err);
/* Write the start of a block that tensor i keeps through the page cache. */
int mk__pack_part_flush(struct pack *p, size_t i, struct mk_err *err);
/* Tensor i's bytes [off, off + n) of its shard, the next ones of it. */
int mk__pack_shard_write(struct pack *p, size_t i, uint64_t off, const uint8_t *data, size_t n,
			 struct mk_err *err);

/* -------------------------------------------------------- pack_sync.c */

/* Group commit: fdatasync every shard, then journal `n` tensors whose
 * bytes were all written before the call. */
int mk__pack_journal_commit(struct pack *p, const size_t *ids, size_t n, struct mk_err *err);
/* Wait until the syncer is idle; returns its first error. */
int mk__pack_syncer_wait(struct pack *p, struct mk_err *err);
void mk__pack_syncer_stop(struct pack *p);
/* Tensor i is complete: journaled by a group commit to come. */
int mk__pack_tensor_finished(struct pack *p, size_t i, struct mk_err *err);

/* ------------------------------------------------------ pack_resume.c */

/* Check every tensor the journal lists against its CRC-32C in the shard
 * file (read-only), then mark it done. */
int mk__pack_resume_verify(struct pack *p, const struct mk_journal *j, struct mk_err *err);
/* Remove what the stream writes again; keep the shards and the journal. */
int mk__pack_resume_clean(struct pack *p, struct mk_err *err);

/* ------------------------------------------------------- pack_files.c */

/* A FILE frame (read piecewise) written to the partial directory. */
int mk__pack_write_file_frame(struct pack *p, struct mk_stream_reader *r, const struct mk_frame *f,
			      struct mk_err *err);

/* -------------------------------------------------------- pack.c */

/* n elements of output tensor i, its next ones, written and counted
 * (CRC, progress; finished when complete). */
int mk__pack_slot_write(struct pack *p, size_t i, const uint8_t *data, uint64_t n, struct mk_err *err);

/* ------------------------------------------------------- pack_quant.c */

/* The output manifest of --quantize fp8 from the stream's (in, then owned
 * by p): p->man, p->in, p->omap, p->rq. */
int mk__pack_quant_setup(struct pack *p, struct mk_manifest *in, struct mk_err *err);
void mk__pack_quant_free(struct pack *p);
/* The most bytes one requant weight's block-row takes (float32, F8 and
 * scales). */
uint64_t mk__pack_quant_row_bytes(const struct mk_manifest *in);
/* A DATA chunk (in memory) of a requant stream tensor. */
int mk__pack_quant_chunk(struct pack *p, const struct mk_chunk *c, struct mk_err *err);
/* The written config.json at path, with the HEAD's quantization_config. */
int mk__pack_quant_config(struct pack *p, const char *path, struct mk_err *err);

#endif
