/* job.h - JOB frames: one plan job each (see mk-stream(5)), decoded into
 * struct mk_plan_job and encoded from it; no stage reads JOB JSON by key.
 *
 * A job makes one output tensor (manifest index `output`) from `ninputs`
 * input tensors with a merge method.  Its JSON form:
 *   {"id": 7, "output": 7, "method": "linear",
 *    "inputs": [{"model": 0, "tensor": "model.norm.weight",
 *                "dtype": "BF16", "shape": [64]}, ...],
 *    "base": 0 | null, "passes": 0, "sends": 1, "is_embed": false,
 *    "params": {"global": {"t": 0.5}, "inputs": [{"weight": 1.0}, ...]}}
 * `passes` is the method's number of statistics passes; `sends` how many
 * times mk-fetch streams the inputs (1 when mk-merge holds the job in
 * memory, passes + 1 when it does not).  "spill": true (with sends 1 and
 * passes > 0): the job does not fit the merge budget and mk-merge replays
 * the inputs from a local file (mk-merge --spill DIR) instead of having
 * them sent again.  "check_equal": true (passthrough only): the inputs
 * are not merged but must be equal, input 0 is the output.  Keys a reader
 * does not know are kept (extra) and passed on: at most MK_JOB_EXTRA_MAX
 * bytes of their JSON together (more is refused before it is parsed), so
 * that a reader holding a plan's jobs holds no more than that of each
 * beside what the job itself needs.
 */
#ifndef MK_STREAM_JOB_H
#define MK_STREAM_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/dtype.h"
#include "mk/err.h"
#include "stream/manifest.h"
#include "mk/method.h"

#define MK_JOB_EXTRA_MAX (1u << 20)  /* a JOB's unknown keys' JSON, together */

struct mk_plan_input {
	size_t model;                /* index in the plan's model table */
	char *tensor;                /* name in that model's checkpoint */
	struct mk_tensor_desc desc;   /* dtype and shape as stored */
	enum mk_dtype load_dtype;     /* cast to on load (config dtype or an
					 architecture's force_dtype); = desc.dtype
					 when absent ("load_dtype" key) */
	uint64_t nelem;
	/* An input assembled from several source tensors of the checkpoint
	 * (transformers-v5 fused experts from per-expert tensors, see
	 * src/arch/fused.c): "assembly": {"kind": "stack" | "stack_concat" | "rename",
	 * "sources": [...]}.  Every kind amounts to the sources' elements one
	 * after another, in this order (experts stacked on a new axis 0, the
	 * parts of an expert concatenated along its rows).  nsources 0: the
	 * tensor itself. */
	size_t nsources;
	char **sources;
	char *assembly;               /* the kind, or NULL */
	/* A vocabulary job's input (the job has `vocab`): which of its rows
	 * land where in the output's vocabulary.  "rows": [out, src, n, ...]
	 * flat: output rows out .. out+n-1 are the stored tensor's rows
	 * src .. src+n-1; output rows in no run are rows the model lacks.
	 * Runs ascend by out and do not overlap; src+n stays within the
	 * stored rows. */
	size_t nruns;
	struct mk_vocab_run *runs;
	/* A weight of a BASE+ADAPTER model that a LoRA adapter targets:
	 * "lora": {"model": K, "a": NAME, "b": NAME, "scale": S,
	 * "transpose": BOOL, "embedding": BOOL}.  mk-fetch sends, instead of
	 * the stored W, W + S·B·A (transpose: W + S·(B·A)ᵀ, the layout of
	 * fan_in_fan_out and of embeddings), computed in float32 a row chunk
	 * at a time and rounded to W's dtype (embedding: the delta rounded to
	 * it first, then added), so mk-merge sees ordinary rows.  A
	 * ([r, in]) and B ([out, r]) are tensors of model K of the table, an
	 * adapter.  "magnitude": NAME (DoRA): the sum's output channels
	 * (rows; transpose: columns) are scaled by NAME[c] / ‖channel c of
	 * W + S·B·A‖₂, the norms taken over the whole weight first (no
	 * rounding of an embedding's delta then).  Or "lora": {"model": K,
	 * "bias": NAME, "scale": S} over a 1-dimensional W (lora_B's bias):
	 * W + S·NAME.  Or "lora": {"model": K, "replace": NAME} (a
	 * modules_to_save weight): model K's tensor NAME, of W's shape, sent
	 * in W's place, rounded to W's dtype.  "dtype": D (any form;
	 * --lora-merge-dtype): W is taken as D first and the result is sent
	 * in D (its INPT chunks are D, not W's stored dtype), as a copy of
	 * the model loaded in D would be merged.  NULL: the stored tensor as
	 * it is. */
	struct mk_plan_lora *lora;
	/* A weight a quantized checkpoint stores quantized (its config.json's
	 * quantization_config): "quant": {"kind": "fp8", "scale": NAME,
	 * "block": [BR, BC], "dtype": D}: the stored tensor (F8_E4M3) times
	 * NAME[r / BR][c / BC] (float32, ⌈rows/BR⌉ × ⌈cols/BC⌉ per matrix of
	 * the last two axes), multiplied in float32 and rounded to D, as
	 * transformers dequantizes.  desc is the stored tensor's; mk-fetch
	 * sends D (the INPT chunks are D).  Not with "lora" or a vocabulary's
	 * rows.  With "assembly" (experts stored one by one, each FP8 with its
	 * own scales): "scales": [NAME, ...] in place of "scale", one per
	 * source in the sources' order; each element is dequantized by the
	 * scales of the source it comes from, its block counted over that
	 * source's last two axes, and desc is the assembled tensor's
	 * (F8_E4M3).  Or "quant": {"kind": "mxfp4", "scale": NAME,
	 * "dtype": D}: MXFP4 as gpt-oss ships its experts; the input's tensor
	 * is the packed codes (U8 [E, R, C/32, 16], two FP4 codes a byte, the
	 * even element in the low nibble), NAME the scales (U8 [E, R, C/32],
	 * E8M0: 2^(s - 127)), and desc is F4 of the dequantized shape
	 * [E, C, R] (the stored matrices transposed, as transformers loads
	 * them): element (e, c, r) is code (e, r, c) times its block's scale,
	 * in float32, rounded to D.  NULL: the stored tensor as it is. */
	struct mk_plan_quant *quant;
};

enum mk_quant_kind { MK_QUANT_FP8, MK_QUANT_MXFP4 };

struct mk_plan_quant {
	enum mk_quant_kind kind;
	char *scale;                  /* the scales' tensor, in the input's model */
	char **scales;                /* or (fp8 over an assembly) one per source */
	size_t nscales;
	uint32_t block[2];            /* fp8: rows and columns of a block (mxfp4: 0) */
	enum mk_dtype dtype;          /* what the dequantized weight is sent as */
};

/* Frees q and what it holds (NULL: nothing). */
void mk_plan_quant_free(struct mk_plan_quant *q);

struct mk_plan_lora {
	size_t model;                 /* the adapter, in the plan's model table */
	char *a, *b;                  /* lora_A / lora_B tensor names in it */
	char *replace;                /* or the tensor that replaces W (a, b NULL) */
	char *magnitude;              /* DoRA's magnitude vector (with a, b), or NULL */
	char *bias;                   /* or lora_B's bias added to a bias W (a, b NULL) */
	double scale;                 /* lora_alpha / r (or / sqrt(r): rslora) */
	bool has_dtype;               /* dtype: computed and sent in it (else W's) */
	enum mk_dtype dtype;
	bool transpose;               /* the delta is (B·A)ᵀ */
	bool embedding;               /* an embedding's: the delta rounded to W's dtype first */
};

struct mk_vocab_run {
	uint64_t out, src, n;
};

/* How the rows of a vocabulary job's inputs are filled where an input
 * lacks the token (or for every input, `force`): */
enum mk_fill_kind {
	MK_FILL_ZERO,                 /* zeros */
	MK_FILL_COPY,                 /* input `from`'s row (an input of the job, or
					 ninputs + k: aux input k) */
	MK_FILL_AVERAGE,              /* the mean of the rows of the inputs that have
					 the token, summed in input order in the
					 vocabulary dtype */
	MK_FILL_MEAN,                 /* padding: per input, the mean of its first
					 `tokens` aligned rows */
};
struct mk_vocab_fill {
	uint64_t out, n;              /* output rows */
	enum mk_fill_kind kind;
	uint32_t from;                /* MK_FILL_COPY */
	bool force;                   /* inputs that have the token take it too */
};

/* A job whose inputs are aligned to a merged vocabulary (a tokenizer
 * source is set): "vocab": {"rows": R, "tokens": V, "dtype": D,
 * "fill": [[out, n, kind, from, force], ...], "aux": [inputs]}.  Every
 * input becomes an R-row matrix in dtype D: its own rows by its runs,
 * the fills elsewhere (output rows in no fill are rows every input has).
 * aux inputs are rows read only to fill others (a token's embedding
 * taken from another token of a model); the method does not see them. */
struct mk_plan_vocab {
	uint64_t rows, tokens;
	enum mk_dtype dtype;
	size_t nfill;
	struct mk_vocab_fill *fill;   /* ascending, disjoint */
	size_t naux;
	struct mk_plan_input *aux;
};

/* A job's parameter values in its method's index (mk_job_desc's form,
 * which mk-merge hands the method as they are): global[p] for the GLOBAL
 * parameters, input[i * nparams + p] for the per-input ones of input i;
 * set false where the plan gives none.  Names are on the wire only: the
 * encoder writes each set value under its spec name, in spec order; the
 * decoder puts each name it reads in its place once
 * (mk_method_param_put). */
struct mk_job_params {
	struct mk_pval *global;      /* [nparams] */
	struct mk_pval *input;       /* [ninputs * nparams] */
};

struct mk_plan_job {
	uint32_t id;
	size_t output;               /* index in the manifest */
	/* "more_outputs": a job with several outputs (mk_plan_out.nmore):
	 * their manifest indices, in the method's order.  Its inputs are sent
	 * for the statistics passes only ("sends": passes, or 1 held), the
	 * outputs computed from what they gathered.  nmore 0: one output. */
	unsigned nmore;
	size_t *more;
	char *method;
	/* The method, when it is registered (mk_method_find): then `params`
	 * holds the JOB's parameters.  NULL (a plugin's method the reader
	 * has not loaded): the parameters are checked as JSON only and not
	 * kept, params' arrays are NULL. */
	const struct mk_method *m;
	size_t ninputs;
	struct mk_plan_input *inputs;
	long base;                   /* input index of the base, or -1 */
	unsigned passes, sends;
	bool spill;                  /* sent once, replayed from a spill file */
	bool is_embed;               /* an embedding matrix (rows are tokens) */
	bool check_equal;            /* passthrough of inputs that must agree */
	bool spare;                  /* "spare": the plan gave the method the spare
				      * pass it takes (mk_job_desc.spare_pass),
				      * counted in passes; streamed jobs only */
	struct mk_job_params params; /* "params": {"global": ..., "inputs": [...]} */
	struct mk_plan_vocab *vocab; /* NULL: inputs as stored */
	/* A part of the output tensor (mk-moe's fused experts, each expert's
	 * tensor one job): "part": {"begin": B}.  The job (passthrough of
	 * one input, not a vocabulary job) makes elements [B, B + N) of
	 * output `output`, N its input's elements, in its input's shape; the
	 * jobs of one output follow each other in the plan, their parts in
	 * element order.  has_part false: the whole tensor. */
	bool has_part;
	uint64_t part_begin;
	void *extra;                 /* unknown keys (json_t *), owned */
};

/* Parse a JOB payload and check it whole: types, sends is 1 or passes
 * + 1, the base is one of the inputs, the inputs' byte sizes are
 * computable, per-input parameters for every input, check_equal only
 * with passthrough; of a registered method, every parameter is one of
 * the method's, given at its scope (the message names the job, the
 * parameter and what the method has); and, against the stream's HEAD:
 * the output is in the manifest and every input's model in the model
 * table.  head may be NULL only where no stream is at hand (then those
 * two are not checked). */
int mk_plan_job_decode(const void *buf, size_t len, const struct mk_manifest *head,
		       struct mk_plan_job **out, struct mk_err *err);
/* Serialise (compact JSON, malloc'ed). */
int mk_plan_job_encode(const struct mk_plan_job *j, char **out, size_t *len,
		       struct mk_err *err);
/* A new job with n zeroed inputs, no method and no parameters; NULL
 * when out of memory. */
struct mk_plan_job *mk_plan_job_new(size_t ninputs);
/* Give the job its method (name copied) and parameter arrays, all
 * absent. */
int mk_plan_job_set_method(struct mk_plan_job *j, const struct mk_method *m, struct mk_err *err);
/* Set the job's parameter `name` for input `input` (-1: once for the
 * job, a GLOBAL one); the job has a method.  Errors as the decoder's. */
int mk_plan_job_set_param(struct mk_plan_job *j, long input, const char *name, struct mk_pval v,
			  struct mk_err *err);
/* The value of parameter p (of the job's method) that the JOB carries
 * once for the job (input -1) or for input `input`, or NULL: none, or p
 * is of the other scope. */
const struct mk_pval *mk_plan_job_param(const struct mk_plan_job *j, long input, size_t p);
void mk_plan_job_free(struct mk_plan_job *j);

/* Vocabulary jobs.  An input's (i < ninputs, or ninputs + k for aux
 * input k) stored row for output row `row`, or -1 when it lacks it. */
int64_t mk_plan_vocab_src_row(const struct mk_plan_job *j, size_t input, uint64_t row);
/* The fill of output row `row`, or NULL (every input has it). */
const struct mk_vocab_fill *mk_plan_vocab_fill_at(const struct mk_plan_job *j, uint64_t row);
/* The first output row after `row` where an input's run or a fill begins
 * or ends (or `tokens`): a range of rows that crosses none has one fill
 * and every input wholly present or wholly absent.  vocab->rows at the
 * end. */
uint64_t mk_plan_vocab_next_cut(const struct mk_plan_job *j, uint64_t row);
/* The bytes mk-fetch sends of input `input` in one send: its elements,
 * or a vocabulary job's rows in its runs. */
uint64_t mk_plan_input_sent_bytes(const struct mk_plan_job *j, size_t input);
/* The input `input` (ninputs + k: aux k) */
const struct mk_plan_input *mk_plan_job_input(const struct mk_plan_job *j, size_t input);
/* The dtype mk-fetch sends input `in` in: a quantized weight's
 * dequantized dtype, a LoRA input's dtype, else the stored one. */
enum mk_dtype mk_plan_input_sent_dtype(const struct mk_plan_input *in);
/* Whether every chunk mk-fetch sends of the job's inputs is a range of
 * its file's elements as read (no vocabulary's rows and fills, no
 * adapter's product): what lets a pass of it stop short in one process
 * (mk_chan_skip_mark). */
bool mk_plan_job_sent_as_read(const struct mk_plan_job *j);

#endif
