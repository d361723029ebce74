/* planner.h - mk-plan: a mergekit YAML configuration -> a plan stream.
 *
 * mk_plan_build reads the configuration and only the metadata of each
 * referenced model (config.json, the safetensors index and headers,
 * tokenizer files), and makes a self-contained plan: the output manifest
 * (every output tensor's name, dtype and shape, in mergekit's order), the
 * model table (reference, shard sizes, header hashes), the finished output
 * files (config.json, tokenizer and tagalong files, mergekit_config.yml,
 * README.md) and one job per output tensor (method, inputs, resolved
 * parameters, base, passes).  Every error that does not depend on tensor
 * values is found here, before a weight byte is read, as many as can be
 * found in one run, each a diagnostic naming the config location and the
 * model or tensor.
 */
#ifndef MK_PLANNER_H
#define MK_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "config/config.h"
#include "mk/stream.h"
#include "mk/dtype.h"
#include "mk/err.h"
#include "planner/plan_extract.h"


/* mk-pytorch: what becomes of a tensor that some of the files lack. */
enum mk_raw_missing {
	MK_RAW_MISSING_ERROR,        /* an error naming the models that lack it */
	MK_RAW_MISSING_SKIP,         /* left out (--tensor-intersection) */
	MK_RAW_MISSING_MERGE,        /* merged from the files that have it
					(--tensor-union) */
};

struct mk_plan_opts {
	const char *label;           /* the config's file name, for messages */
	const char *text;            /* the YAML */
	size_t len;
	const char *out_name;        /* card title (OUT's basename); NULL: default */
	bool allow_crimes;           /* mix architectures (--allow-crimes) */
	bool copy_tokenizer;         /* copy the donor's tokenizer (default on) */
	bool write_card;             /* README.md + mergekit_config.yml (default on) */
	uint64_t seed;               /* --random-seed */
	uint64_t budget;             /* merge memory budget in bytes (0: none) */
	bool spill;                  /* jobs over the budget: sent once, mk-merge
					replays them from a local file (--spill) */
	bool spare_pass;             /* offer each streamed job a spare pass
					(mk_job_desc.spare_pass; the JOB's "spare"
					where the method takes it): the plan of a
					merge whose stages share a process
					(mk_run_merge), not over HTTP */
	/* --lora-merge-dtype: a BASE+ADAPTER model's float tensors are loaded
	 * as lora_dtype where the configuration sets no dtype (mergekit's
	 * merged copy of the model is in it) */
	bool has_lora_dtype;
	enum mk_dtype lora_dtype;
	/* mk-pytorch(1): every model is one state-dict file (.safetensors,
	 * else a torch pickle), merged without an architecture: no slices,
	 * modules, tokenizer, config.json or card.  The output has a tensor
	 * for each name in any file (the base's too), in byte order of the
	 * names, planned at t = 0 with filters matched against that name;
	 * raw_missing says what becomes of one that some files lack. */
	bool raw;
	enum mk_raw_missing raw_missing;
	/* Models read from another directory than their reference names:
	 * a reference whose "path[@rev]" is alias_refs[k] is opened from
	 * alias_dirs[k], and the plan keeps the reference (its model table,
	 * card and messages).  mk-multi plans a merge that reads one not made
	 * yet so, from a description of that merge's output (multi.h). */
	const char *const *alias_refs;
	const char *const *alias_dirs;
	size_t naliases;
	/* --unsafe-truncate-embeddings: without a tokenizer source, the
	 * inputs of a vocabulary-indexed weight (is_embed) are cut to the
	 * fewest rows among them (plan_truncate.c) */
	bool unsafe_truncate_embeddings;
	/* mk-extract-lora: the configuration names the base (base_model) and
	 * the fine-tune (its one model), and the plan is a LoRA adapter of
	 * their difference, not a merge (planner/plan_extract.h); NULL: a merge */
	const struct mk_plan_extract *extract;
};

struct mk_plan;

/* Build a plan.  Diagnostics (errors and warnings, in order) go to
 * *diags (caller frees with mk_diags_free); on errors returns -MK_EINVAL
 * (or the first other failure) and *out = NULL. */
int mk_plan_build(const struct mk_plan_opts *o, struct mk_plan **out,
		  struct mk_diags *diags, struct mk_err *err);
void mk_plan_free(struct mk_plan *p);

/* Write the plan stream (kind "plan") to fd. */
int mk_plan_write(const struct mk_plan *p, struct mk_io out, int compress_level,
		  struct mk_err *err);

/* The plan in words, one paragraph per output tensor (malloc'ed). */
int mk_plan_explain(const struct mk_plan *p, char **out, struct mk_err *err);

/* The README.md the plan carries (borrowed; NULL when no card). */
const char *mk_plan_card(const struct mk_plan *p);

/* The output's architecture, and the config.json of the model the
 * output's config.json is made from (the base, else the first model;
 * NULL for state dicts).  Borrowed from the plan. */
/* An extraction's modules and lists (NULL for a merge's plan); borrowed
 * from the plan. */
struct mk_extract_info;
const struct mk_extract_info *mk_plan_extract_info(const struct mk_plan *p);

struct mk_arch;
struct mk_hfconfig;
const struct mk_arch *mk_plan_arch(const struct mk_plan *p);
const struct mk_hfconfig *mk_plan_donor_config(const struct mk_plan *p);

#endif
