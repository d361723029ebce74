/* budget.h - how a memory budget (--max-memory) is shared out.
 *
 * mk-yaml's budget is split among the stages it runs (mk_budget_split);
 * mk-fetch turns its share into the size of its reads (mk_budget_fetch_fit).
 * Sizes are in bytes.
 */
#ifndef MK_BUDGET_H
#define MK_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#define MK_BUDGET_STAGE_BASE (8u << 20)       /* what a stage needs before any data: its
						 code, libraries, stacks, plan (6.5-7.6 MiB
						 of RSS measured at rest) */
#define MK_BUDGET_QUEUE (6u << 20)           /* each of the three queues between the
						 stages run in one process */
#define MK_BUDGET_MERGE_MIN (4u << 20)        /* the least merging is given (0 would
						 mean no bound to mk-merge) */
#define MK_BUDGET_FETCH_MIN (4u << 20)        /* the least mk-fetch is given, and accepts */
#define MK_BUDGET_PACK_MIN (8u << 20)         /* the least mk-pack is given */
#define MK_BUDGET_FETCH_QDEPTH_MIN 2u         /* mk_budget_fetch_fit goes no lower ... */
#define MK_BUDGET_FETCH_CHUNK_MIN (64u << 10) /* ... than these (unless asked for less) */
#define MK_BUDGET_POOL_DEFAULT (256u << 20)   /* with no budget, the most mk-merge keeps
						 of finished jobs' buffers for the next */
#define MK_BUDGET_PACK_HEADROOM (4u << 20)    /* mk-pack's headers beside its two frames */
#define MK_BUDGET_SYNC_DEFAULT (64u << 20)    /* mk-pack's group commit, by default */
#define MK_BUDGET_FETCH_HOLD_DEFAULT (64u << 20) /* with no budget, the plan's FILE
						 frames mk-fetch holds in memory */
#define MK_BUDGET_CAT_DEFAULT (256u << 20)    /* with no --max-memory, the most mk-cat
						 holds of one frame read whole (see
						 mk_budget_cat) */
#define MK_BUDGET_HOLD_DEFAULT (256u << 20)   /* with no --max-memory, the most one
						 job held in memory may take (its
						 inputs as sent); see mk_budget_hold_max */

/* A pipeline's budget among its stages.  A stage's own --max-memory
 * bounds the data it holds; the pipeline's bounds the four processes
 * together, so MK_BUDGET_STAGE_BASE for each of them is set aside first
 * and the rest shared out. */
struct mk_budget_split {
	uint64_t stages; /* set aside: 4 * MK_BUDGET_STAGE_BASE (mk-plan's
			    share ends here: it holds metadata only) */
	uint64_t merge;  /* mk-merge (the jobs it holds; mk-plan plans for
			    it): half of the rest, at least MK_BUDGET_MERGE_MIN */
	uint64_t fetch;  /* mk-fetch (its reads): a quarter of the rest, at
			    least MK_BUDGET_FETCH_MIN */
	uint64_t pack;   /* mk-pack (two frames of mk-fetch's chunks and its
			    headers): a quarter of the rest, at least
			    MK_BUDGET_PACK_MIN */
	uint64_t queue;  /* in one process (mk_run_merge), each of the three
			    in-memory queues between the stages (mk/chan.h):
			    MK_BUDGET_QUEUE, out of `stages`, where the three
			    other processes' bases were (the pipes' buffers
			    are the kernel's, the queues are the process's) */
};

/* Split `total` among the stages (mk-yaml --max-memory).  stages + merge +
 * fetch + pack is at most `total` once the quarters are over their
 * minimums (from 80 MiB); under that the minimums win and the sum is
 * more. */
void mk_budget_split(uint64_t total, struct mk_budget_split *out);

/* The most one job with statistics passes may take held in memory (its
 * used inputs as sent, which mk-merge keeps and replays for the later
 * passes); a larger one is streamed once per pass, or spilled.  With a
 * budget (--max-memory, `budget` > 0) that budget, as given.  By default
 * (`budget` 0) the default budget, a quarter of `phys` (the machine's
 * memory in bytes; 0 when unknown: 1 GiB), and at most
 * MK_BUDGET_HOLD_DEFAULT: the largest tensors (embeddings) are then
 * re-read once per pass, from the page cache, instead of setting the peak
 * resident size at their whole size times the inputs. */
uint64_t mk_budget_hold_max(uint64_t budget, uint64_t phys);

/* The merge budget when none is given: a quarter of `phys` (0: 1 GiB). */
uint64_t mk_budget_merge_default(uint64_t phys);

/* The reader's defaults: bytes per read slot, reads in flight. */
#define MK_READER_DEFAULT_CHUNK (4u << 20)
#define MK_READER_DEFAULT_QDEPTH 8u

/* Fit mk-fetch's reads in half of `budget`: the reads in flight (queue
 * depth + 1 chunks) and the frame being written, (*qdepth + 2) * *chunk
 * bytes.  *chunk and *qdepth come in as asked (0: MK_READER_DEFAULT_CHUNK
 * and MK_READER_DEFAULT_QDEPTH) and go out fitted: the queue depth is
 * lowered first, down to MK_BUDGET_FETCH_QDEPTH_MIN, then the chunk halved
 * while it is over MK_BUDGET_FETCH_CHUNK_MIN (the last halving stops at
 * it: a chunk asked for at or above it never goes below it).  Neither grows.  The result
 * fits whenever budget / 2 holds four chunks of MK_BUDGET_FETCH_CHUNK_MIN
 * (from 512 KiB, so for every budget mk-fetch accepts); under that, the
 * queue depth and the chunk end at those minimums (or below, as asked). */
void mk_budget_fetch_fit(uint64_t budget, size_t *chunk, unsigned *qdepth);

/* mk-fetch's whole share: its reads fitted in half (mk_budget_fetch_fit),
 * and *hold, the passes of a job it keeps to send again (a spool over
 * that goes to a file), a quarter. */
void mk_budget_fetch_apply(uint64_t budget, size_t *chunk, unsigned *qdepth, uint64_t *hold);

/* What mk-fetch holds of a plan's FILE frames until its HEAD goes out
 * (the rest in a scratch file): `asked` (mk_budget_fetch_apply's quarter),
 * MK_BUDGET_FETCH_HOLD_DEFAULT when 0. */
uint64_t mk_budget_fetch_hold(uint64_t asked);

/* The most mk-merge keeps of finished jobs' buffers for the next ones:
 * half its budget, MK_BUDGET_POOL_DEFAULT without one. */
uint64_t mk_budget_merge_pool(uint64_t budget);

/* What mk-pack needs for one frame of chunk_bytes read whole, compressed
 * and raw, and its headers: its budget must hold this. */
uint64_t mk_budget_pack_frames(uint64_t chunk_bytes);

/* mk-pack's group commit: the bytes of finished tensors it syncs and
 * journals at once, `asked` (0: MK_BUDGET_SYNC_DEFAULT), at most a quarter
 * of its budget (when it has one). */
uint64_t mk_budget_pack_sync(uint64_t budget, uint64_t asked);

/* mk-cat's bound on a frame it holds whole (its reader's memory bound,
 * mk_sr_set_bounds): `asked` (--max-memory), MK_BUDGET_CAT_DEFAULT when
 * 0.  A stream's FILE frames it reads in pieces, whatever their size. */
uint64_t mk_budget_cat(uint64_t asked);

/* A budget less this process's own base (MK_BUDGET_STAGE_BASE), for the
 * stages a program starts after working itself (mk-moe's forward pass);
 * at least 1 byte, never "no bound". */
uint64_t mk_budget_less_process(uint64_t total);

#endif
