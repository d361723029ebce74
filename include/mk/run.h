/* run.h - a whole merge in the calling process: plan, fetch, merge, pack.
 *
 * mk_run_merge does what `mk-yaml CONFIG OUT` does, with the same bytes:
 * it plans in the calling thread (so a bad configuration fails with every
 * diagnostic before anything runs), then runs the three other stages'
 * library calls (mk_fetch_plan, mk_merge_run, mk_pack_run) and the plan's
 * writer on four threads of this process, joined by in-memory channels
 * (mk/chan.h: bounded queues of frame buffers) that carry the frames
 * (mk-stream(5)) the programs pass through pipes, with the same memory
 * budget split (mk_budget_split; each queue's MK_BUDGET_QUEUE in it).
 * mk-yaml runs this by default.
 * When a stage fails, the others see their stream end and stop; mk-pack
 * then removes its partial output, so OUT never appears after a failure
 * (with resume, OUT.mk-partial is kept for the next run).  SIGPIPE is
 * blocked in the stage threads: a stage writing to a stopped one gets
 * EPIPE, the process is not signalled.
 */
#ifndef MK_RUN_H
#define MK_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"
#include "mk/err.h"
#include "planner/planner.h"

struct mk_run_opts {
	/* the configuration: an already-parsed one (mk_config_parse; its
	 * source text is planned, under its label), else YAML text (label
	 * names it in diagnostics), else the file config_path */
	const struct mk_config *config;
	const char *text;
	size_t len;
	const char *label;
	const char *config_path;
	const char *out_dir;

	uint64_t out_shard_size;     /* 0: mergekit's 5B */
	bool no_copy_tokenizer;      /* mk-yaml --no-copy-tokenizer */
	bool no_model_card;          /* --no-write-model-card */
	bool allow_crimes;
	uint64_t seed;               /* --random-seed */
	bool cuda;                   /* merge on the GPU where a kernel exists */
	unsigned threads;            /* mk-merge -j (0: the programs' default) */
	uint64_t max_memory;         /* the whole merge's budget (0: none) */
	const char *spill_dir;       /* --spill DIR */
	bool force;                  /* replace an existing OUT */
	bool resume;                 /* continue OUT.mk-partial */
	bool strict;                 /* fail on outputs that became non-finite */
	bool remote, no_cache;       /* mk-fetch --remote, --no-cache */
	bool has_lora_dtype;
	enum mk_dtype lora_dtype;    /* --lora-merge-dtype */

	/* bytes of tensors written and tensors done, as mk-pack counts them;
	 * called from a stage thread */
	void (*progress)(void *ctx, uint64_t done, uint64_t total, size_t tensors_done,
			 size_t ntensors);
	void *progress_ctx;
	/* set to nonzero (from any thread, a signal handler) to stop: the
	 * run ends with MK_EIO "cancelled" and no OUT (a cancel after every
	 * stage has done its part changes nothing: 0, OUT there) */
	const volatile int *cancel;
	/* a cancel keeps OUT.mk-partial for a later resume (as a pipeline
	 * killed by a signal leaves it: mk-yaml); else it is removed unless
	 * resume */
	bool keep_partial_on_cancel;
	/* the stages' warnings for the user (mk-merge's on outputs that
	 * became NaN or infinite, mk-pack's), one line each, from a stage
	 * thread; NULL: dropped */
	void (*warn)(void *ctx, const char *msg);
	void *warn_ctx;
	bool buffered;               /* mk-pack --buffered (mk_pack_opts.buffered) */
	/* where the stages' counts are added (atomically: steps run at once
	 * may share one), or NULL */
	struct mk_run_stats *stats;
};

/* What the stages of a run did beyond the plan. */
struct mk_run_stats {
	uint64_t passes_skipped;     /* streamed jobs' statistics passes whose rest
				      * the merge stage did not need (mk_merge_opts.skip) */
	uint64_t chunks_unsent;      /* input chunks of those passes not read or sent */
	uint64_t passes_added;       /* passes held jobs' methods added (mk_job.held) */
};

/* Run the merge.  Diagnostics of the configuration go to *d (the caller
 * frees them with mk_diags_free); a configuration with errors returns
 * -MK_EINVAL.  0 when OUT is complete. */
int mk_run_merge(const struct mk_run_opts *o, struct mk_diags *d, struct mk_err *err);

/* The same for mk-pytorch(1): a merge of state-dict files without an
 * architecture (mk_plan_opts.raw), what becomes of a tensor some files
 * lack as `missing` says; no tokenizer, config.json or card is written
 * (no_copy_tokenizer and no_model_card do not matter). */
int mk_run_state_dicts(const struct mk_run_opts *o, enum mk_raw_missing missing, struct mk_diags *d,
		       struct mk_err *err);

/* Plan the configuration without running it: 0 when it has no errors;
 * every diagnostic (errors and warnings, with their places) in *d. */
int mk_validate_config(const struct mk_run_opts *o, struct mk_diags *d, struct mk_err *err);

/* ---- merges streamed into merges (mk-multi --no-intermediates) ----
 *
 * A step is a merge planned and not yet run.  A streamed step writes no
 * OUT: its merge's output (the tensors stream mk-pack would read) goes to
 * the fetch of a step that reads it as a model, through an in-memory
 * channel (mk/chan.h), and that fetch takes the model's tensors from it
 * (mk_fetch_opts.feed_fds) instead of from files.  The steps linked so
 * run at once, each with its own stages and its own budget
 * (o->max_memory; the caller divides the whole between them). */
struct mk_run_step;

/* Plan merge o as mk_run_merge does (OUT refused as it would be, unless
 * streamed), the models named alias_refs[k] opened from alias_dirs[k]
 * (mk_plan_opts).  o is copied; the strings it points to must outlive
 * the step. */
int mk_run_step_plan(const struct mk_run_opts *o, bool streamed, const char *const *alias_refs,
		     const char *const *alias_dirs, size_t naliases, struct mk_run_step **out, struct mk_diags *d,
		     struct mk_err *err);
/* The step's plan (its output manifest, files and jobs: mk_plan_write). */
struct mk_plan;
const struct mk_plan *mk_run_step_plan_of(const struct mk_run_step *s);
void mk_run_step_free(struct mk_run_step *s);

/* A link: steps[from]'s output is the model `ref` (as steps[to]'s plan's
 * model table names it) of steps[to]. */
struct mk_run_link {
	size_t from, to;
	const char *ref;
};

/* Run n steps at once, joined by the links: every streamed step is the
 * `from` of exactly one link, every other step writes its OUT.  When one
 * fails the others see their streams end and stop (no OUT of theirs
 * appears); the error is that of the step that failed first (*failed:
 * its index), prefixed with its stage.  Each step is run once. */
int mk_run_steps(struct mk_run_step *const *steps, size_t n, const struct mk_run_link *links, size_t nlinks,
		 size_t *failed, struct mk_err *err);

/* sizeof(struct mk_run_opts), for bindings that lay the struct out
 * themselves (the Python package checks its copy against it). */
size_t mk_run_opts_size(void);

/* mk-merge's default worker threads: the online CPUs, 1 to 8. */
unsigned mk_merge_default_threads(void);

#endif
