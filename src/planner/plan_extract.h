/* plan_extract.h - mk-extract-lora's plan: a PEFT LoRA adapter of the
 * difference between a fine-tune and its base, planned by mk-plan's
 * planner from the two models' metadata (plan_extract.c).
 *
 * The configuration handed to mk_plan_build names the base (base_model)
 * and the fine-tune (its one model) and carries lora_extract's parameters
 * (max_rank, sv_epsilon, ...) at the top level; mk_plan_opts.extract says
 * which modules become what.  The modules are the architecture's weights
 * of the fine-tune (the names ending in ".weight", the suffix cut off),
 * visited in the order transformers builds them (a layer's sub-modules
 * before its own norms), each:
 *
 *   an input embedding (a vocabulary-indexed pre weight) or the output
 *   embedding (a vocabulary-indexed post weight), without embed_lora and
 *   not excluded: its last name component joins modules_to_save;
 *   named in modules_to_save (the whole name or its last component):
 *   saved whole from the fine-tune, as base_model.model.NAME.weight (and
 *   its bias);
 *   else, when the include and exclude expressions let it through (PCRE2
 *   searches, as Python's re.search): a matrix (2-D) is decomposed: one
 *   lora_extract job writing base_model.model.NAME.lora_A.weight,
 *   .lora_B.weight and a statistics tensor (lora_embedding_A/B without
 *   ".weight" for an input embedding, which is factored transposed), and
 *   its bias's delta one job writing base_model.model.NAME.lora_B.bias;
 *   anything else (a norm) joins modules_to_save and is saved whole,
 *   unless skip_undecomposable.
 *
 * A weight that the fine-tune lacks and may lack (optional, no tied name
 * in it) is passed over.  The plan's A and B have rank r0 = min(max_rank,
 * rows, columns); mk-extract-lora cuts them to the rank each module kept
 * (its statistics tensor's first value) when it writes the adapter.
 */
#ifndef MK_PLANNER_PLAN_EXTRACT_H
#define MK_PLANNER_PLAN_EXTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mk_plan_extract {
	bool embed_lora;              /* --embed-lora */
	bool skip_undecomposable;     /* --skip-undecomposable */
	const char *const *include;   /* -i: a module is decomposed only when one matches */
	size_t ninclude;
	const char *const *exclude;   /* -e: never when one matches */
	size_t nexclude;
	const char *const *save;      /* --save-module: names or last components */
	size_t nsave;
};

/* A decomposed module, as planned. */
struct mk_extract_module {
	char *name;                   /* "model.layers.0.self_attn.q_proj" */
	char *a, *b, *stats;          /* its output tensors' names in the plan */
	bool embedding;               /* lora_embedding_A/B (factored transposed) */
	uint64_t rows, cols;          /* B is [rows, r0], A [r0, cols] */
	uint64_t r0;                  /* the plan's rank */
};

/* What the plan of an extraction decided, for the adapter's files. */
struct mk_extract_info {
	size_t nmodules;
	struct mk_extract_module *modules;  /* in plan order */
	size_t nsave;
	char **modules_to_save;       /* as mergekit lists them: --save-module's,
					 then each key in the order it joined */
	size_t ntargets;
	char **target_modules;        /* the decomposed modules' last components,
					 sorted, once each */
	size_t nbiases;               /* lora_B.bias tensors planned */
	uint64_t base_vocab, vocab;   /* the input embeddings' rows (0: none) */
	bool embed_lora;              /* as planned (off when the vocabularies differ) */
};

#endif
