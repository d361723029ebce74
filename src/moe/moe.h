/* moe.h - mk-moe: dense models -> a mixture-of-experts checkpoint.
 *
 * A configuration (mergekit-moe's YAML: base_model, experts, gate_mode,
 * dtype, experts_per_token, shared_experts, architecture) names a base
 * model, whose attention, norms and embeddings the output takes, and
 * experts, whose MLP weights become the output's experts.  mk_moe_parse
 * reads it, mk_moe_check refuses what cannot make a working MoE,
 * mk_moe_select_arch chooses the output architecture (Mixtral, DeepSeek
 * MoE, Qwen2-MoE, Qwen3-MoE) from the models' config.json, and
 * mk_moe_plan writes a plan stream (mk-stream(5)) that mk-fetch, mk-merge
 * and mk-pack turn into the output directory a chunk at a time: every
 * expert tensor is a job of its own, so no stage holds more than its
 * chunks.  The router weights are computed here (mk_moe_gates) and put in
 * a small checkpoint in a work directory that the plan reads like any
 * other model.
 */
#ifndef MK_MOE_H
#define MK_MOE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/dtype.h"
#include "mk/err.h"

enum mk_moe_gate {
	MK_MOE_GATE_HIDDEN,          /* "hidden" (the default), as hidden_last */
	MK_MOE_GATE_HIDDEN_LAST,
	MK_MOE_GATE_HIDDEN_AVG,
	MK_MOE_GATE_CHEAP_EMBED,
	MK_MOE_GATE_RANDOM,
	MK_MOE_GATE_UNIFORM_RANDOM,
};

struct mk_moe_expert {
	char *source_model;          /* the reference as written */
	char **positive, **negative; /* prompts */
	size_t npositive, nnegative;
	bool has_negative;           /* the key was given (even empty) */
	bool has_noise, has_residual;
	double noise_scale, residual_scale;
	unsigned line;               /* of the entry in the YAML, for messages */
};

struct mk_moe_config {
	char *base_model;
	struct mk_moe_expert *experts;
	size_t nexperts;
	struct mk_moe_expert *shared;
	size_t nshared;
	enum mk_moe_gate gate;
	long experts_per_token;      /* default 2 */
	char *architecture;          /* NULL: any */
	bool has_dtype;
	enum mk_dtype dtype;
	char *text;                  /* the YAML as given (mergekit_moe_config.yml) */
	size_t len;
};

/* Parse a configuration.  Errors name label:line and the key. */
int mk_moe_parse(const char *text, size_t len, const char *label, struct mk_moe_config **out,
		 struct mk_err *err);
void mk_moe_config_free(struct mk_moe_config *c);
/* The gate mode's name ("hidden", ...). */
const char *mk_moe_gate_name(enum mk_moe_gate g);

/* mergekit-moe's pre-checks: experts_per_token >= 1 and no more than the
 * experts; unless gate_mode is random, every expert has positive prompts,
 * the experts' (positive, negative) prompts are not all the same (a lone
 * expert always is), and, unless allow_all_same, the experts are not all
 * the same model. */
int mk_moe_check(const struct mk_moe_config *c, bool allow_all_same, struct mk_err *err);

enum mk_moe_arch { MK_MOE_MIXTRAL, MK_MOE_DEEPSEEK, MK_MOE_QWEN2, MK_MOE_QWEN3, MK_MOE_NARCH };
const char *mk_moe_arch_name(enum mk_moe_arch a);   /* "Mixtral", "DeepSeek MoE", ... */

/* Choose the output architecture: the candidates (all, or those whose
 * name starts with `architecture`, case-insensitively) that support the
 * configuration given each model's model_type (base, experts, shared
 * experts, in order); Mixtral when it is among them, else the first.
 * The message on failure says why each candidate was refused. */
int mk_moe_select_arch(const struct mk_moe_config *c, const char *const *model_types,
		       enum mk_moe_arch *out, struct mk_err *err);

struct mk_moe_opts {
	const struct mk_moe_config *cfg;
	const char *work_dir;        /* an empty directory for the router checkpoint */
	bool allow_all_same;         /* --i-understand-this-is-not-useful-without-training */
	bool copy_tokenizer;         /* the base's tokenizer files (default on) */
	bool write_card;             /* mergekit_moe_config.yml (default on) */
	uint64_t seed;               /* random and uniform_random gates */
	uint64_t max_memory;         /* what the base model's forward pass may
					hold (hidden gates; 0: no bound) */
	bool cuda;                   /* the hidden gates' forward pass: its
					matrix products on the GPU (mk/cuda.h,
					MK_CUDA_EMULATE=1 honoured); without
					a usable one, a warning through note
					and the CPU, as mk-merge --cuda */
	const volatile int *cancel;  /* set nonzero (a signal handler) to stop
					the forward pass of the hidden gates
					(checked between layers): MK_EIO
					"cancelled", nothing written to fd */
	/* what happened, for the caller to print: the architecture chosen and
	 * warnings (a count of experts not a power of two, ...) */
	void (*note)(void *ctx, const char *msg);
	void *note_ctx;
};

/* Check, choose the architecture, compute the gates into work_dir and
 * write the plan stream to fd. */
int mk_moe_plan(const struct mk_moe_opts *o, int fd, enum mk_moe_arch *arch, struct mk_err *err);

/* The router weights of one gate mode that needs no model pass (random,
 * uniform_random): element e of layer l's [nexperts, hidden] matrix is a
 * pure function of (seed, l, e), the same on every machine.  out holds
 * nlayers * nexperts * hidden floats. */
int mk_moe_gates_random(enum mk_moe_gate g, uint64_t seed, size_t nlayers, size_t nexperts,
			size_t hidden, float *out, struct mk_err *err);

/* The router rows of the prompt gate modes, for the experts ex[0..nex):
 * out[l][e][:] (nlayers * nex * hidden floats), each an L2-normalised
 * vector (norm clamped at 1e-8) of the positive prompts' minus the
 * negative prompts'.  Prompts are tokenised with the base's tokenizer as
 * mk_tokenizer_encode_prompts does (BOS prepended, left padding).
 * cheap_embed: the sum of the prompts' token embeddings (padding left
 * out), normalised, then the same for every layer; hidden / hidden_last:
 * each layer's input (mk_forward_run's hidden state l) at the last
 * position, hidden_avg: its mean over every position (padding included),
 * each averaged over the prompts.  Float32, in that order.  fo: the
 * forward pass's options (its memory budget, a CUDA context, the cancel
 * flag); NULL: the defaults. */
struct mk_moe_expert;
struct mk_forward_opts;
int mk_moe_gates_prompts(enum mk_moe_gate mode, const char *base_ref, const struct mk_moe_expert *const *ex,
			 size_t nex, size_t nlayers, size_t hidden, const struct mk_forward_opts *fo, float *out,
			 struct mk_err *err);

/* The 2-norm condition number of a rows x cols matrix (sigma_max /
 * sigma_min of its singular values; infinity when one is 0).  mk-moe
 * warns above 5: routers that cannot tell the experts apart. */
double mk_moe_gate_cond(const float *g, size_t rows, size_t cols);

#endif
