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
#include "mk/api.h"
#include "mk/diag.h"
#include "mk/dtype.h"
#include "mk/err.h"

struct mk_config;


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
	/* Merge into memory (out_dir NULL): each output tensor, complete and
	 * in its output dtype, is given to sink(ctx, name, desc, data) from
	 * a stage thread, in the order the tensors complete; data lives until
	 * the call returns.  Nothing is written: no shards, tokenizer, card
	 * or configuration.  Nonzero from sink stops the run (its message in
	 * *err).  Tensors are held whole until complete: at most one per
	 * merge thread at a time. */
	int (*sink)(void *ctx, const char *name, const struct mk_tensor_desc *desc, const void *data,
		    struct mk_err *err);
	void *sink_ctx;
	/* mergekit-yaml --unsafe-truncate-embeddings: models' vocabularies
	 * of different sizes are merged over the smallest one (the rows past
	 * it dropped) instead of refused */
	bool unsafe_truncate_embeddings;
	/* --quantize: "fp8" or "mxfp4", the weights the base model (else the
	 * first model) stored in that format written so again (mk-pack(1)
	 * --quantize); NULL: written in the merge's dtype */
	const char *quantize;
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
MK_API int mk_run_merge(const struct mk_run_opts *o, struct mk_diags *d, struct mk_err *err);

/* Plan the configuration without running it: 0 when it has no errors;
 * every diagnostic (errors and warnings, with their places) in *d. */
MK_API int mk_validate_config(const struct mk_run_opts *o, struct mk_diags *d, struct mk_err *err);

/* sizeof(struct mk_run_opts), for bindings that lay the struct out
 * themselves (the Python package checks its copy against it). */
MK_API size_t mk_run_opts_size(void);

/* mk-merge's default worker threads: the online CPUs, 1 to 8. */
MK_API unsigned mk_merge_default_threads(void);

/* The OpenBLAS kernels a process should ask for (OPENBLAS_CORETYPE, read
 * as the library loads: "SkylakeX", "Haswell") because the loaded
 * OpenBLAS fell back to its SSE3 kernels on a CPU it did not recognize
 * that has AVX-512 or AVX2; NULL when nothing is to be done, or
 * OPENBLAS_CORETYPE is set.  mk's programs start themselves again with
 * it; a binding sets it before it loads libmk (mk-python(7)). */
MK_API const char *mk_blas_kernels_better(void);

/* For bindings (the Python package), answers without a merge.  The texts
 * are copied to buf (cap bytes) with a NUL when they fit (*len < cap);
 * *len is always their length, so a caller whose buffer was too small
 * calls again with *len + 1 bytes. */

/* libmk's version, "0.1.0" (static). */
MK_API const char *mk_version(void);

/* The architecture a merge of o plans (o planned as mk_validate_config
 * plans it; its OUT neither looked at nor written), as a JSON object:
 * file, model_type, architectures, tagalong_files, vocab_size_config_key,
 * inferred, and modules, each with name, weight_prefix, subfolder,
 * num_layers_config_key, num_layers and its weights (pre, layers: one
 * list per layer, post; each weight's name, is_embed, optional, aliases,
 * tied_names, force_dtype).  Layer counts are those of model_config (len
 * bytes of a config.json) when it is not NULL, else of the config.json
 * of the base model (else the first). */
MK_API int mk_arch_describe(const struct mk_run_opts *o, const char *model_config, size_t len, char *buf,
			    size_t cap, size_t *out_len, struct mk_diags *d, struct mk_err *err);

/* The README.md model card a merge of the configuration (len bytes of
 * YAML, label naming it in messages) writes, titled name (NULL or "":
 * mergekit's "Untitled Model (1)"), quoting yaml (NULL: the
 * configuration's text).  Reads no model. */
MK_API int mk_card_generate(const char *config, size_t len, const char *label, const char *yaml,
			    const char *name, char *buf, size_t cap, size_t *out_len, struct mk_err *err);

#endif
