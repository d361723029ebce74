/* planner_impl.h - internals shared by the planner's files (not
 * installed): the plan being built, the models it reads, one output tensor
 * being planned, and the functions each file lends the others.
 *
 *   plan_build.c    mk_plan_build: the configuration checked, the steps
 *                   below run in order, the jobs ordered, the HEAD filled
 *   plan_models.c   the referenced models opened, the output architecture
 *   plan_slices.c   modules and slices walked, one plan_tensor per weight
 *   plan_raw.c      state dicts (mk-pytorch): one plan_tensor per name
 *   plan_tensors.c  plan_tensor: one output tensor, inputs to job
 *   plan_vocab.c    the merged vocabulary (tokenizer source) and the
 *                   vocabulary-indexed jobs over it
 *   plan_truncate.c vocabulary-indexed weights cut to the fewest rows
 *                   (--unsafe-truncate-embeddings)
 *   plan_files.c    the output files: config.json, card, tokenizer files
 *   plan_write.c    the plan stream, and the plan in words
 *   plan_extract.c  mk-extract-lora's plan: a LoRA adapter's modules
 */
#ifndef MK_PLANNER_IMPL_H
#define MK_PLANNER_IMPL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "arch/arch.h"
#include "config/config.h"
#include "io/model.h"
#include "mk/method.h"
#include "planner/lora.h"
#include "planner/planner.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "tokenizer/vocab.h"

struct pmodel {                       /* a referenced model */
	const struct mk_model_ref *ref;   /* lent from the config */
	char *refstr;                     /* "path[@rev]" as mk resolves it */
	char *display;                    /* as written (mk_model_ref_format) */
	struct mk_model *m;
	struct mk_hfconfig *hf;
	char *hf_text;
	size_t hf_len;
	struct mk_arch *arch;             /* NULL: unknown class */
	/* BASE+ADAPTER: the adapter (mk_lora_open), its entry in the plan's
	 * model table (after the models) and its reference */
	struct mk_lora *lora;
	size_t lora_index;
	char *lora_refstr;
	struct mk_quant *quant;           /* a quantized checkpoint read dequantized, or NULL */
};

struct pfile {
	char *name;
	uint8_t *data;
	size_t len;
};

struct mk_plan {
	struct mk_config *cfg;
	const struct mk_method *method;
	size_t nmodels;
	struct pmodel *models;
	struct mk_arch *arch;             /* the output's */
	struct mk_manifest *man;
	size_t njobs;
	struct mk_plan_job **jobs;
	size_t nfiles;
	struct pfile *files;
	char *card;                       /* README.md text, or NULL */
	char *last_err;                   /* the last method error, tensor name cut out */
	size_t repeats;                   /* further tensors with that error */
	struct mk_config_loc last_err_loc; /* where that error was said (path owned) */
	struct mk_extract_info *extract;  /* an extraction's modules (plan_extract.c) */
	uint64_t held_max;                /* the largest held job's working set */
	uint64_t spilled;                 /* jobs mk-merge replays from a spill file */
	size_t base_copies;               /* merged tensors the method gives as the base's */
	char *base_copy_first;            /* the first of them */
	char base_copy_unset[128];        /* its parameters with no value and no default */
	const struct mk_plan_opts *o;
	uint64_t seed, budget;
	uint64_t hold_max;                /* the most one held job may take
					     (mk_budget_hold_max) */
	size_t tok_donor;                 /* the model whose tokenizer files are copied */
	/* a tokenizer source: the merged vocabulary (plan_build_tokenizer) */
	struct mk_tokmerge *tok;          /* NULL: none */
	struct mk_vocab **tok_vocabs;     /* the models' (nmodels), which tok borrows */
	long *tok_cfg;                    /* per output id: its tokens: entry, or -1 */
	uint64_t tok_rows;                /* the embeddings' rows (padded) */
	bool tok_warned;                  /* tokens in no model: said once */
	unsigned char *tok_said;          /* per tokens: entry, its mistake said (once, not per tensor) */
	unsigned char *out_kinds;         /* per output layer of module 0, its kind (enum
					     mk_layer_kind), where the arch mixes kinds; else NULL */
	size_t nout_kinds;
};

/* A diagnostic at loc (NULL: none) into d. */
static inline void diag(struct mk_diags *d, enum mk_diag_level lv, const struct mk_config_loc *loc,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static inline void diag(struct mk_diags *d, enum mk_diag_level lv, const struct mk_config_loc *loc,
			const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	mk_diags_add(d, lv, loc ? loc->line : 0, loc ? loc->col : 0, loc ? loc->path : NULL, "%s", buf);
}

struct src_in {                       /* one candidate input of a tensor */
	long model;                       /* plan model index */
	const struct mk_model_ref *ref;
	const struct mk_weight *w;        /* the input weight (its own name) */
	const struct mk_params *params;   /* the source's parameters */
};

struct tplan;

struct tctx {                         /* where a tensor is planned */
	struct mk_param_ctx scope;
	const struct mk_model_ref *base;
	double t;
	const struct mk_config_loc *loc;  /* for messages */
	/* mk-extract-lora's tensors (plan_extract.c); zero for a merge's: */
	const struct mk_method *method;   /* the tensor's method, not the configuration's */
	const char *const *more_names;    /* the names of the method's further outputs */
	unsigned nmore_names;
	const char *set_param;            /* a global parameter set for this tensor alone */
	struct mk_pval set_value;
	bool tied_present;                /* an optional weight found under a tied name
					     is planned (mergekit's loader takes them) */
	/* appends to a budget refusal what would fit (buf of len) */
	void (*budget_hint)(const struct tplan *t, uint64_t need, char *buf, size_t len);
};

/* One output tensor being planned, from its candidate inputs to its job.
 * plan_tensor runs the stages (tplan_*) in order on it; each returns a
 * negative MK_E* (a failure: planning stops), TP_NEXT (go on) or TP_DONE
 * (no job for this tensor: an optional weight skipped, or a diagnostic
 * said why). */
struct tplan {
	struct mk_plan *p;
	const struct mk_weight *ow;       /* the output weight */
	const struct src_in *srcs;        /* its candidate inputs */
	size_t nsrc;
	const struct tctx *tc;
	struct mk_diags *d;
	const struct mk_method *m;        /* the config's method, or passthrough */
	size_t np;                        /* m's parameters */
	size_t n;                         /* inputs found, in job order */
	int base;                         /* the base's input index, or -1 */
	bool check_equal;                 /* not floats: inputs must agree */
	/* per input, in job order (order[i]: its index in srcs) */
	struct mk_tensor_desc *in;        /* as the method sees it (cast on load) */
	struct mk_tensor_desc *stored;    /* as stored (or assembled) */
	const char **labels, **names;     /* model display name, tensor name */
	size_t *order;
	struct mk_fused **fused;          /* its assembly from experts, or NULL */
	const struct mk_lora_ent **lora;  /* its adapter's change (BASE+ADAPTER), or NULL */
	struct mk_plan_quant **quant;     /* stored quantized: how to dequantize it (owned), or NULL */
	bool *used;                       /* read by the method (output rule) */
	/* parameters: as looked up (raw), as the method resolved them (res);
	 * per input np values from i * np */
	struct mk_pval *graw, *iraw, *gres, *ires;
	struct mk_plan_out po;            /* the method's output rule */
	unsigned spare_passes;            /* po.npasses with the spare pass offered
					     (mk_plan_opts.spare_pass; po.npasses: none) */
	uint64_t trunc_rows;              /* the rows every input is cut to
					     (--unsafe-truncate-embeddings; 0: none) */
	struct mk_plan_job *j;            /* the job, until the plan takes it */
	struct mk_err e;                  /* a method's or assembly's error, for a diagnostic */
};

enum { TP_NEXT = 0, TP_DONE = 1 };

/* ------------------------------------------------------- plan_models.c */

/* Read a model's file, which must resolve inside the model (mk_model_path). */
int plan_model_file_read(const struct mk_model *m, const char *name, uint8_t **buf, size_t *len,
			 struct mk_err *err);
/* Does the model's directory hold NAME (a regular file, or something
 * else that plan_model_file_read will refuse by name)? */
bool plan_has_file(const struct pmodel *donor, const char *name);
/* The plan's index of a referenced model, or -1. */
long plan_model_index(const struct mk_plan *p, const struct mk_model_ref *r);
/* Open every model the configuration references (p->models): metadata
 * only; what is wrong with one is a diagnostic in d. */
int plan_open_models(struct mk_plan *p, const struct mk_arch_registry *reg, struct mk_diags *d,
		     struct mk_err *err);
/* The output architecture (p->arch). */
int plan_choose_arch(struct mk_plan *p, struct mk_diags *d, struct mk_err *err);

/* ------------------------------------------------------- plan_slices.c */

/* Plan every module's slices (one job per output weight); out_layers: per
 * module, its output layer count (-1: not emitted). */
int plan_modules(struct mk_plan *p, int64_t *out_layers, bool *layers_changed, struct mk_diags *d,
		 struct mk_err *err);

/* ---------------------------------------------------------- plan_raw.c */

/* What mk-pytorch refuses of a configuration, said in d. */
void plan_raw_refuse(const struct mk_config *c, struct mk_diags *d);
/* Plan a merge of state dicts: one job per tensor name of any file. */
int plan_raw(struct mk_plan *p, struct mk_diags *d, struct mk_err *err);

/* ------------------------------------------------------ plan_extract.c */

/* Plan an extraction (mk_plan_opts.extract): the modules' jobs and
 * p->extract. */
int plan_extract(struct mk_plan *p, struct mk_diags *d, struct mk_err *err);
void plan_extract_info_free(struct mk_extract_info *x);

/* ------------------------------------------------------ plan_tensors.c */

/* Plan output weight ow from its candidate inputs srcs: a job added to the
 * plan and an entry in its manifest, or diagnostics in d (a failure only
 * when out of memory). */
int plan_tensor(struct mk_plan *p, const struct mk_weight *ow, const struct src_in *srcs, size_t nsrc,
		const struct tctx *tc, struct mk_diags *d, struct mk_err *err);
/* Where a message about input i of t belongs. */
const struct mk_config_loc *tplan_input_loc(const struct tplan *t, size_t i);
/* How the job's inputs are sent: streamed once per pass, held in memory
 * or spilled (sent once), with the spare pass where streamed; the plan's
 * held_max and spilled counted.  A stage of plan_tensor, declared here
 * for test/unit/test_planner_sends.c. */
void tplan_sends(struct tplan *t);
/* A deep copy of an input's adapter change: 0, or -1 out of memory (then
 * *dst, if not NULL, is to be freed with its input). */
int plan_lora_copy(struct mk_plan_lora **dst, const struct mk_plan_lora *src);

/* -------------------------------------------------------- plan_vocab.c */

/* The merged vocabulary of a tokenizer source (p->tok and the tok_*
 * fields), before any tensor is planned. */
int plan_build_tokenizer(struct mk_plan *p, struct mk_diags *d, struct mk_err *err);
/* plan_tensor's stages for a vocabulary-indexed weight under a tokenizer
 * source: the inputs' shapes as the method sees them, the job's rows. */
int tplan_vocab_shapes(struct tplan *t);
int tplan_vocab_job(struct tplan *t, struct mk_err *err);

/* ----------------------------------------------------- plan_truncate.c */

/* plan_tensor's stages for a vocabulary-indexed weight under
 * --unsafe-truncate-embeddings (no tokenizer source): every input cut to
 * the fewest rows as the method sees it, and the job reading those rows. */
int tplan_truncate_shapes(struct tplan *t);
int tplan_truncate_job(struct tplan *t, struct mk_err *err);
/* Append to a method's refusal msg (of size len) of such a weight whose
 * inputs differ in rows, without the option or a tokenizer source, the
 * settings that would merge them. */
void tplan_truncate_hint(const struct tplan *t, char *msg, size_t len);

/* -------------------------------------------------------- plan_files.c */

/* The output files (p->files): config.json, README.md and
 * mergekit_config.yml, the tokenizer's and the tagalong files. */
int plan_make_files(struct mk_plan *p, const int64_t *out_layers, bool layers_changed, struct mk_diags *d,
		    struct mk_err *err);

/* ------------------------------------------------------ plan_requant.c */

/* A block-FP8 donor: its quantization_config into p->man, and its
 * block-FP8 weights among the output tensors marked requant. */
int plan_mark_requant(struct mk_plan *p, const struct pmodel *donor, struct mk_err *err);

#endif
