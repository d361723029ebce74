/* extract.h - mk-extract-lora: a fine-tune and its base to a PEFT LoRA
 * adapter that approximates their difference (mergekit-extract-lora's
 * program; mk-extract-lora(1)).
 *
 * Two steps around mk's stages:
 *   mk_extract_plan    the plan: the base and the fine-tune read for their
 *                      metadata only, each module decided (planner/
 *                      extract.h), every error found before a weight byte
 *                      is read; mk-fetch | mk-merge | mk-pack then write
 *                      the plan's tensors (A and B at the plan's rank, a
 *                      statistics tensor per module, the modules saved
 *                      whole, the bias deltas) into a staging directory;
 *   mk_extract_finish  the adapter from what they wrote: A and B cut to
 *                      the rank each module kept, the statistics dropped,
 *                      adapter_config.json, README.md and
 *                      extraction_report.json (each module's rank and
 *                      relative error ||delta - B A||_F / ||delta||_F).
 */
#ifndef MK_EXTRACT_H
#define MK_EXTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/diag.h"
#include "mk/dtype.h"
#include "mk/err.h"
#include "planner/plan_extract.h"

struct mk_extract_opts {
	const char *model;            /* the fine-tune's reference (--model) */
	const char *base;             /* the base's (--base-model) */
	const char *out;              /* OUT: the card's title is its last component */
	const char *invocation;       /* the command line, for the card */
	/* the rank: mergekit's rule and mk's additions (methods/lowrank.h) */
	unsigned max_rank;            /* >= 1; mergekit's default 128 */
	double sv_epsilon;            /* 0: off */
	double energy, rel_sigma;     /* 0: off; else in (0, 1] */
	bool no_distribute_scale;     /* sigma into A alone */
	bool randomized;              /* the randomized SVD */
	unsigned oversample, power_iters; /* randomized; 0: the defaults */
	bool cuda;                    /* the SVDs on the GPU (mk_extract_plan warns
					 when there is none) */
	struct mk_plan_extract sel;   /* which modules become what */
	/* the plan */
	uint64_t budget;              /* mk-merge's memory budget (0: the default) */
	bool has_lora_dtype;          /* --lora-merge-dtype of BASE+ADAPTER models */
	enum mk_dtype lora_dtype;
};

/* The plan of an extraction; free with mk_plan_free (planner.h).  Every
 * diagnostic goes to *d without a place (the configuration is mk's own):
 * errors make the call fail (MK_EINVAL, "N errors"). */
struct mk_plan;
int mk_extract_plan(const struct mk_extract_opts *o, struct mk_plan **out, struct mk_diags *d,
		    struct mk_err *err);

/* What the adapter holds, for the caller to print. */
struct mk_extract_summary {
	size_t modules;               /* decomposed modules written */
	size_t zero;                  /* modules whose delta is zero: left out */
	size_t saved;                 /* tensors saved whole */
	unsigned r;                   /* the largest rank (adapter_config's r) */
	bool biases_unapplied;        /* lora_B.bias written beside an embedding's
					 LoRA: no lora_bias (PEFT refuses it there),
					 so PEFT and mk-yaml leave them out */
	double worst_error;           /* the largest relative error of a module */
	char worst[256];              /* its name */
};

/* Turn the staging directory `dir` (mk-pack's output of the plan whose
 * info is x) into the adapter, in place: adapter_model.safetensors
 * rewritten through a temporary file (at most `budget` bytes of it in
 * memory at once; 0: 64 MiB), then adapter_config.json, README.md,
 * extraction_report.json.  MK_EINVAL when every module's delta is zero
 * (an adapter needs one), naming the fine-tune and the base. */
int mk_extract_finish(const struct mk_extract_opts *o, const struct mk_extract_info *x, const char *dir,
		      uint64_t budget, struct mk_extract_summary *sum, struct mk_err *err);

#endif
