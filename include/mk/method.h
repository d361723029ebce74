/* method.h - the merge-method API: specs, kernels, registry.
 *
 * A merge method is a `struct mk_method`: a spec (names, parameters,
 * input contract, output rule, number of statistics passes) and kernels
 * that work on one output tensor (a "job") chunk by chunk.  Built-in
 * methods (linear, passthrough, slerp, task_arithmetic) use this API and
 * nothing else; a shared-object plugin fills the same struct with
 * abi = MK_METHOD_ABI and calls mk_method_register().
 *
 * What a caller (mk-plan, mk-merge, the in-process helpers) does:
 *
 *   plan time, no data:
 *     struct mk_job_desc d = { tensor name, is_embed, inputs' dtypes and
 *                              shapes, base index, raw parameter values };
 *     mk_method_plan(m, &d, &plan, used, err)
 *         checks the input contract and the parameters (messages name the
 *         parameter and the input), runs the output rule: output dtype and
 *         shape, compute dtype, which inputs the kernel reads (and through
 *         which top-left view), number of statistics passes.
 *
 *   merge time, one job:
 *     mk_job_init(&job, m, &d, out_dtype, err)      plan again, method init
 *     if job.byte_copy: copy input job.copy_input's bytes, mk_job_release.
 *     job.held = true when the passes are replayed from inputs the caller
 *                holds (a kernel may then add a pass as one ends)
 *     for pass in 0 .. job.npasses-1 (npasses read again after each finish):
 *         for each chunk, in increasing element order:
 *             mk_job_accumulate(&job, pass, &chunk, err)
 *         mk_job_finish(&job, pass, err)
 *     for each chunk (any order, any thread once passes are done):
 *         mk_job_apply(&job, &chunk, out, err)   out: chunk.count elements
 *                                                of job.compute
 *         convert out to job.out.dtype (mk_dtype_convert: torch rounding)
 *     mk_job_release(&job)
 *
 * A chunk (struct mk_job_chunk) covers the flat element range
 * [elem_begin, elem_begin + count) of the OUTPUT tensor and gives, for
 * every used input, the same elements of that input's view, already
 * converted to the compute dtype (float32, or float64 per the output
 * rule: mk_compute_dtype_of).  A view is the input itself, or its top-left
 * [rows, cols] block when the output rule rectified embedding sizes
 * (mk_rectify_shapes); the caller (mk-fetch's assembly) does the slicing.
 *
 * Statistics passes sum in a fixed order that does not depend on the
 * chunking: float64 partial sums over fixed blocks of MK_SUM_BLOCK
 * elements (block b = elements [b*MK_SUM_BLOCK, (b+1)*MK_SUM_BLOCK) of
 * the output's flat index), each block summed in element order, blocks
 * combined in block order.  mk_job_accumulate therefore requires the
 * chunks of one pass to arrive in increasing, contiguous element order
 * covering the tensor once (it checks), up to where the kernel says it
 * has what the pass gathers (mk_job_wants).  apply() has no such rule.
 *
 * Thread safety: the registry is filled at start-up (built-ins on first
 * use, plugins by the program before any thread starts); lookups may
 * then run on any thread.  A job is used by one thread at a time during
 * its passes; apply() calls of one job may run concurrently on disjoint
 * chunks once mk_job_finish of the last pass has returned.
 */
#ifndef MK_METHOD_H
#define MK_METHOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/dtype.h"
#include "mk/err.h"

/* Bumped whenever struct mk_method, the job structs or the kernels'
 * signatures change incompatibly.  mk_method_register refuses others. */
#define MK_METHOD_ABI 3

/* ------------------------------------------------------------ parameters */

enum mk_param_scope {
	MK_SCOPE_GLOBAL,       /* one value per output tensor ("t", "normalize") */
	MK_SCOPE_PER_INPUT,    /* one value per input, the base included ("weight" of linear) */
	MK_SCOPE_PER_NON_BASE, /* one value per non-base input; the base gets none */
};

enum mk_param_type {
	MK_PT_FLOAT,           /* double; finite */
	MK_PT_INT,             /* int64 */
	MK_PT_BOOL,
};

/* A parameter value.  `set` false means absent (no value, no default).
 * Callers may give an INT for a FLOAT parameter and an integral FLOAT for
 * an INT parameter; validation converts to the spec's type. */
struct mk_pval {
	bool set;
	enum mk_param_type type;
	union {
		double f;
		int64_t i;
		bool b;
	};
};

/* Value constructors (set = true). */
static inline struct mk_pval mk_pval_float(double f)
{
	struct mk_pval v = { .set = true, .type = MK_PT_FLOAT, .f = f };
	return v;
}
static inline struct mk_pval mk_pval_int(int64_t i)
{
	struct mk_pval v = { .set = true, .type = MK_PT_INT, .i = i };
	return v;
}
static inline struct mk_pval mk_pval_bool(bool b)
{
	struct mk_pval v = { .set = true, .type = MK_PT_BOOL, .b = b };
	return v;
}

/* mk_param_spec.flags */
#define MK_PF_REQUIRED 0x01  /* no default: every receiving input (PER_INPUT:
				all inputs, base included; PER_NON_BASE: the
				non-base ones) or the tensor (GLOBAL) needs a value */
#define MK_PF_MIN      0x02  /* value >= min (> min with MK_PF_MIN_EXCL) */
#define MK_PF_MIN_EXCL 0x04
#define MK_PF_MAX      0x08  /* value <= max (< max with MK_PF_MAX_EXCL) */
#define MK_PF_MAX_EXCL 0x10
#define MK_PF_COEF     0x20  /* batch form: a coefficient array ([B] or [B,N]);
				otherwise an option constant within a batch */

struct mk_param_spec {
	const char *name;
	enum mk_param_scope scope;
	enum mk_param_type type;
	unsigned flags;           /* MK_PF_* */
	struct mk_pval def;       /* default when not given; def.set false: none
				     (the value stays absent, e.g. slerp's t) */
	double min, max;          /* bounds for FLOAT and INT (MK_PF_MIN/MAX) */
	const char *doc;          /* one line, for --list-methods */
};

/* ------------------------------------------------------- input contract */

enum mk_base_policy {
	MK_BASE_IGNORED,   /* a base, if any, is an ordinary input (linear) */
	MK_BASE_OPTIONAL,  /* used when present */
	MK_BASE_REQUIRED,  /* the job must have a base input */
	MK_BASE_FORBIDDEN, /* the job must not have a base */
};

#define MK_ARITY_ANY UINT32_MAX   /* no upper bound */

struct mk_contract {
	enum mk_base_policy base;
	uint32_t min_inputs, max_inputs;       /* all inputs, base included */
	uint32_t min_non_base, max_non_base;   /* inputs other than the base */
};

/* ------------------------------------------------------------------ jobs */

/* What the planner knows about one output tensor before any data: the
 * caller owns every pointer. */
struct mk_job_desc {
	const char *tensor;        /* output tensor name (messages, RNG keys) */
	uint64_t seed;             /* --random-seed of the merge (RNG key) */
	bool is_embed;             /* embed_tokens / lm_head (mk_rectify_shapes) */
	size_t ninputs;            /* inputs in plan order: base first, then YAML order */
	int base;                  /* index of the base input, -1 for none */
	const struct mk_tensor_desc *in;     /* [ninputs] */
	const char *const *labels; /* [ninputs] model names for messages, or NULL */
	/* Raw parameter values indexed by the spec's parameter index:
	 * global[p] for GLOBAL parameters, input[i * nparams + p] for
	 * per-input ones (entries of other scopes are ignored).  Either may
	 * be NULL: all absent. */
	const struct mk_pval *global;
	const struct mk_pval *input;
	/* The job's first element in the output tensor: 0, or a part's begin
	 * (mk_plan_job.has_part); element-keyed random draws count from it.
	 * Last, so that a plugin built before it reads the fields above where
	 * they were. */
	uint64_t elem_base;
	/* The plan may give the job a spare statistics pass, sent whether or
	 * not the method reads it (mk-yaml's own plan, where a pass nobody
	 * reads costs little: the stages share the process); a method counts
	 * it in its passes when it can use one (the TIES and breadcrumbs
	 * selections: a window that missed its cut), skipping it when it
	 * does not.  Last, after elem_base, for the same reason. */
	bool spare_pass;
};

/* The output rule's answer (see mk_method_plan). */
#define MK_MORE_OUTPUTS_MAX 7u   /* outputs of one job besides the first */

struct mk_plan_out {
	struct mk_tensor_desc out; /* dtype and shape the method returns */
	enum mk_dtype compute;     /* MK_DT_F32 or MK_DT_F64 */
	unsigned npasses;          /* statistics passes before apply */
	/* A job with several outputs (a factorisation's factors): `nmore`
	 * further outputs, their dtypes and shapes (preset 0: one output).
	 * Such a method needs statistics passes (at least one) and computes
	 * every output from what they gathered: after the last pass, apply is
	 * called for each output (mk_job_chunk.output) with chunks of that
	 * output's elements and no inputs (the plan does not send the inputs
	 * for apply).  Last, so that a method built before them leaves them
	 * as preset. */
	unsigned nmore;
	struct mk_tensor_desc more[MK_MORE_OUTPUTS_MAX];
	/* What one job holds at once, in bytes, where the method knows it
	 * better than mk-plan's estimate for a whole_tensor method (every
	 * input and the output in the compute dtype): a factorisation's
	 * matrices and workspace.  mk-plan refuses a job whose working set is
	 * over the merge budget.  Preset 0 (the estimate); last, as nmore. */
	uint64_t work_bytes;
};

struct mk_method;

/* One output tensor being merged.  Filled by mk_job_init; kernels read
 * everything and own only `state`. */
struct mk_job {
	const struct mk_method *method;
	struct mk_job_desc d;      /* copy of the caller's desc (pointers borrowed;
				      d.global/d.input point at the resolved values) */
	struct mk_pval *global;    /* [nparams] resolved: defaults applied, types normalised */
	struct mk_pval *input;     /* [ninputs * nparams] resolved */
	bool *used;                /* [ninputs] inputs the kernel reads; the chunk's
				      pointers of the others are not looked at */
	struct mk_tensor_desc out; /* shape from the rule; dtype = the requested one */
	enum mk_dtype compute;
	uint64_t nelem;            /* output elements */
	unsigned npasses;
	/* Set by init when the output is exactly one input's bytes (passthrough
	 * without scale, slerp with t unset or a single input): copy_input is
	 * that input, byte_copy says its dtype equals out.dtype so the caller
	 * may copy bytes instead of calling apply; otherwise mk_job_apply
	 * copies that input's compute-dtype values and does not call apply.
	 * copy_input -1: none. */
	int copy_input;
	bool byte_copy;
	void *state;               /* method-private */
	/* Set by the kernels when the pass in progress needs no more input
	 * (in accumulate), or the next one none at all (in finish of the one
	 * before): mk_job_wants then says false and mk_job_accumulate takes
	 * chunks without looking at them.  Cleared as each pass ends. */
	bool pass_enough;
	/* Set by init, or 0: the elements per mk_job_accumulate call its
	 * kernel works best with (one that splits a chunk over threads wants
	 * large ones); mk-merge's statistics passes go by it. */
	uint64_t accumulate_chunk;
	/* Set by init: accumulate takes BF16 inputs as they are (chunk.bf16).
	 * A caller whose used inputs are all BF16 may then pass their raw
	 * elements in statistics passes instead of converting them to the
	 * float32 compute dtype; BF16 -> float32 is exact, so a kernel that
	 * widens on load sees the same values.  apply always gets the
	 * compute dtype. */
	bool accumulate_bf16;
	/* Set by init: apply takes BF16 inputs as they are too (chunk.bf16),
	 * on the same terms; never with copy_input. */
	bool apply_bf16;
	/* Set by the caller after init (0 after it: 1): the threads a kernel
	 * may split a chunk over (its results the same for any number). */
	unsigned threads;
	/* bookkeeping of the mk_job_* wrappers */
	unsigned pass_done;        /* passes finished */
	uint64_t next_elem;        /* next element accumulate expects */
	/* Set by the caller after init, before the first pass (last, so that
	 * a plugin built before it reads the fields above where they were):
	 * the caller holds the inputs and replays each pass from them (from
	 * memory or a spill file), rather than having them sent once per
	 * planned pass.  A held job's kernel may then add a pass in finish
	 * (npasses + 1): the caller runs passes while pass_done < npasses, so
	 * it reads npasses again after each finish.  Not held: npasses is
	 * fixed by init (mk_job_finish refuses a change). */
	bool held;
	/* Set by init from the output rule (mk_plan_out): the further outputs,
	 * in the rule's dtypes (the requested dtype is output 0's alone). */
	unsigned nmore;
	struct mk_tensor_desc more[MK_MORE_OUTPUTS_MAX];
	/* The elements a statistics pass covers: nelem, or, for a job with
	 * several outputs, the inputs' (every used input of one shape: their
	 * element count; their chunks are the inputs' own elements). */
	uint64_t pass_nelem;
};

/* Elements [elem_begin, elem_begin + count) of the output; in[i] holds
 * the same elements of input i's view in the job's compute dtype (NULL
 * allowed for unused inputs), or, when bf16 is set (only in statistics
 * passes of a job with accumulate_bf16, in apply of one with apply_bf16),
 * as BF16. */
struct mk_job_chunk {
	uint64_t elem_begin;
	uint64_t count;
	const void *const *in;     /* [ninputs] */
	bool bf16;
	/* Which output the elements are of: 0 (`out`), or k for more[k - 1] of
	 * a job with several outputs, whose apply chunks have in = NULL. */
	unsigned output;
};

/* ------------------------------------------------------------ batch form */

/* Many outputs of one shape in one call (as mergekit's TensorBatch).  Input i
 * is B * nelem contiguous elements of `compute` ([B, nelem], output b at
 * offset b * nelem).  Parameters: coef[p] for MK_PF_COEF parameters:
 * GLOBAL scope -> [B], PER_INPUT -> [B, ninputs], PER_NON_BASE ->
 * [B, ninputs - 1] in input order with the base left out; FLOAT
 * coefficients are of the compute dtype, INT int64_t, BOOL bool.  opt[p]
 * for the other (option) parameters, resolved, shared by the batch.  The
 * caller has checked the contract and the parameters; like torch, the
 * kernel does not: a zero normalisation sum gives inf/NaN here. */
struct mk_batch {
	size_t B;
	size_t ninputs;
	int base;
	uint64_t nelem;            /* elements per output */
	enum mk_dtype compute;
	const void *const *in;     /* [ninputs] */
	const void *const *coef;   /* [nparams], NULL for non-coefficients */
	const struct mk_pval *opt; /* [nparams] */
	void *out;                 /* [B, nelem] of compute */
};

/* ---------------------------------------------------------------- method */

struct mk_method {
	uint32_t abi;                   /* MK_METHOD_ABI */
	const char *name;               /* registry key: [a-z0-9_]+ */
	const char *pretty_name;
	const char *reference_url;      /* may be NULL */
	const struct mk_param_spec *params;
	size_t nparams;
	struct mk_contract contract;
	/* Device hook (mk/device.h), NULL: none, every job is applied on the
	 * CPU.  A method whose apply() an element kernel of the device code
	 * computes (linear, slerp, the task arithmetic family; a plugin's
	 * method too) points it at a struct mk_device_hook: a backend (the GPU
	 * of mk/cuda.h) asks its kernel(job) which kernel a float32 job uses,
	 * and, once the passes are finished, its state(job, ...) for that
	 * kernel's parameters (weights, coefficients, the selection cuts and
	 * masks the passes found), then computes apply()'s bytes itself.  The
	 * backend knows methods only through this hook. */
	const struct mk_device_hook *device;
	bool whole_tensor;              /* needs the whole tensor in memory: mk-plan
					   checks it fits the merge budget */

	/* Output rule, no data.  Called by mk_method_plan after the contract
	 * and parameter checks with d->global/d->input resolved.  Fills *po
	 * (npasses preset to 0) and used[ninputs] (preset true for every
	 * input); returns 0 or a negative MK_E* with a message. */
	int (*output)(const struct mk_method *m, const struct mk_job_desc *d,
		      struct mk_plan_out *po, bool *used, struct mk_err *err);
	/* Number of statistics passes for these resolved parameters; NULL: 0.
	 * Called after output(); may look at used[]. */
	unsigned (*npasses)(const struct mk_method *m, const struct mk_job_desc *d,
			    const bool *used);

	/* Kernels.  init may be NULL (nothing to set up); accumulate and
	 * finish are required when npasses can be non-zero; apply is
	 * required; release may be NULL.  All return 0 or a negative MK_E*.
	 * When init fails, release is called: it must take a job->state that
	 * is NULL or partly made. */
	int (*init)(struct mk_job *job, struct mk_err *err);
	int (*accumulate)(struct mk_job *job, unsigned pass,
			  const struct mk_job_chunk *c, struct mk_err *err);
	int (*finish)(struct mk_job *job, unsigned pass, struct mk_err *err);
	int (*apply)(struct mk_job *job, const struct mk_job_chunk *c,
		     void *out, struct mk_err *err);
	void (*release)(struct mk_job *job);

	/* Batch form (NULL: none).  Only for methods with 0 passes. */
	int (*batch)(const struct mk_method *m, const struct mk_batch *b,
		     struct mk_err *err);
};

/* -------------------------------------------------------------- registry */

/* Add a method.  Refuses (MK_EINVAL) a wrong abi, a missing name or
 * apply, a name that is not [a-z0-9_]+, parameter specs that are
 * inconsistent (duplicate names, default of the wrong type or out of
 * bounds, REQUIRED with a default), and (MK_EEXIST) a name already
 * registered.  The struct is borrowed and must outlive the process's use
 * of the registry.  Not thread-safe: call before starting threads. */
MK_API int mk_method_register(const struct mk_method *m, struct mk_err *err);
/* The method with this exact name, or NULL. */
MK_API const struct mk_method *mk_method_find(const char *name);
/* Iterate: methods in registration order (built-ins first). */
MK_API size_t mk_method_count(void);
MK_API const struct mk_method *mk_method_at(size_t i);
/* The registered name closest to `name` by edit distance (case-insensitive,
 * mk_edit_distance) when it is close enough to be a likely typo (distance <=
 * max(1, strlen(name) / 3)), else NULL.  For "did you mean ...?". */
MK_API const char *mk_method_closest(const char *name);
/* The method by name, or MK_ENOENT naming the closest name. */
MK_API int mk_method_lookup(const char *name, const struct mk_method **out,
		     struct mk_err *err);

/* ------------------------------------------------ methods from callbacks */

/* A method whose kernel is a function called on whole tensors: a language
 * binding's (the Python package registers the methods written in Python
 * this way).  The kernel gets every input of one output tensor whole; the
 * method is whole_tensor (mk-plan checks each tensor fits the merge
 * budget), its output rule mergekit's: the inputs' shapes agree
 * (embeddings of different vocabularies merge over their common top-left
 * block: mk_rectify_shapes), the output dtype is their promotion, the
 * compute dtype float64 when an input is float64, else float32. */
struct mk_callback_call {
	const struct mk_job_desc *d;      /* the tensor's name, its inputs (in[i].dtype:
					     the dtype the merge reads input i as),
					     base, labels */
	const struct mk_pval *global;     /* [nparams] resolved (defaults applied) */
	const struct mk_pval *input;      /* [ninputs * nparams] resolved */
	const struct mk_tensor_desc *out; /* the output's shape; dtype: the compute dtype */
	const void *const *in;            /* [ninputs] whole inputs, out's shape and dtype */
	void *result;                     /* out's elements: the kernel fills them */
	uint64_t elem_begin;              /* MK_CALLBACK_PIECES: the piece's first element
					     in the output (out is 1-D, its count) */
};
/* 0, or a negative MK_E* with a message in *err (MK_EIO when it sets
 * none).  Called from a merge thread, one call at a time per merge
 * (MK_CALLBACK_PIECES: from several at once, on disjoint pieces). */
typedef int (*mk_callback_fn)(void *ctx, const struct mk_callback_call *c, struct mk_err *err);

/* flags: the kernel computes each output element from the same element
 * of each input alone; it is called on pieces of the tensor (the merge's
 * chunks, as 1-D tensors), so nothing is held whole. */
#define MK_CALLBACK_PIECES 0x1u

/* Make a method of fn (ctx passed to it) with these names, parameters and
 * contract (copied) and flags (MK_CALLBACK_*), and register it
 * (mk_method_register's checks).  The method stays registered for the
 * process's life; fn and ctx must live as long. */
MK_API int mk_method_register_callback(const char *name, const char *pretty_name, const char *reference_url,
				       const struct mk_param_spec *params, size_t nparams,
				       const struct mk_contract *contract, unsigned flags, mk_callback_fn fn,
				       void *ctx, struct mk_err *err);

/* Index of a parameter in m->params, or -1. */
MK_API int mk_method_param_index(const struct mk_method *m, const char *name);

/* ------------------------------------------------------ planning and jobs */

/* Check d's inputs against the contract (arity, base) and its parameters
 * against the spec, then run the output rule.  global_out[nparams] and
 * input_out[ninputs * nparams] (caller-allocated, may be NULL to only
 * check) receive the resolved values; used[ninputs] (may be NULL) the
 * inputs the kernel reads.  Errors name the method, the tensor, the
 * parameter and the input (its label when given). */
MK_API int mk_method_plan(const struct mk_method *m, const struct mk_job_desc *d,
		   struct mk_plan_out *po, struct mk_pval *global_out,
		   struct mk_pval *input_out, bool *used, struct mk_err *err);

/* Only the parameter checks of mk_method_plan (resolving into the
 * optional output arrays). */
MK_API int mk_method_check_params(const struct mk_method *m, const struct mk_job_desc *d,
			   struct mk_pval *global_out, struct mk_pval *input_out,
			   struct mk_err *err);

/* Plan d and start a job writing out_dtype (MK_DT_COUNT: the rule's
 * dtype).  The job keeps pointers into d (tensor, in, labels), which
 * must stay valid until mk_job_release.  On error nothing needs
 * releasing. */
MK_API int mk_job_init(struct mk_job *job, const struct mk_method *m,
		const struct mk_job_desc *d, enum mk_dtype out_dtype,
		struct mk_err *err);
/* Statistics pass `pass` (passes in order, chunks in increasing
 * contiguous element order, each pass covering all elements once, or up
 * to where mk_job_wants turns false). */
MK_API int mk_job_accumulate(struct mk_job *job, unsigned pass,
		      const struct mk_job_chunk *c, struct mk_err *err);
/* End statistics pass `pass`: every element passed, or fewer once
 * mk_job_wants said false. */
MK_API int mk_job_finish(struct mk_job *job, unsigned pass, struct mk_err *err);
/* Whether the statistics pass in progress still reads its inputs: false
 * once the kernel has what it gathers (a selection's cut found, or found
 * by the pass before).  The caller may then pass the rest of the pass's
 * chunks to mk_job_accumulate with in = NULL, unconverted (they are
 * counted, not read), or none of them: mk_job_finish then takes the pass
 * as it is (mk-yaml's fetch stage sends no more of it).  The output does
 * not depend on which. */
MK_API bool mk_job_wants(const struct mk_job *job);
/* Output for c's elements into out (c->count elements of job->compute);
 * all passes must be finished. */
MK_API int mk_job_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out,
		 struct mk_err *err);
/* Free the job's state and resolved values; the struct may be reused.
 * Safe on a zeroed or already released job. */
MK_API void mk_job_release(struct mk_job *job);

/* Run the batch kernel (MK_EUNSUPPORTED if the method has none). */
MK_API int mk_method_batch(const struct mk_method *m, const struct mk_batch *b,
		    struct mk_err *err);

/* ---------------------------------------------------- helpers for methods */

/* Resolved parameter p of a job (global, or of input i). */
static inline const struct mk_pval *mk_job_param(const struct mk_job *job, size_t p)
{
	return &job->global[p];
}
MK_API const struct mk_pval *mk_job_input_param(const struct mk_job *job, size_t i, size_t p);

/* The compute dtype torch would use for these input dtypes: F64 when
 * any is F64, else F32 (mk rounds once to the output dtype: mk-compat(7)). */
MK_API enum mk_dtype mk_compute_dtype_of(size_t n, const enum mk_dtype *dts);
/* torch's result dtype of stacking these float dtypes: equal -> that
 * dtype; otherwise the widest, with F16 + BF16 -> F32 and mixed F8
 * variants -> F32.  Non-float dtypes must not be passed. */
MK_API enum mk_dtype mk_promote_dtypes(size_t n, const enum mk_dtype *dts);

/* mergekit's rectify_embed_sizes over the used inputs of d: when
 * is_embed and every used input is 2-D, the output shape is (min rows,
 * min cols) and *rectified tells whether any input differs from it;
 * otherwise the inputs must all have one shape.  Returns 0 and sets
 * *out_desc's ndim/shape, or MK_EMISMATCH ("tensor size mismatch ...")
 * naming the tensor and both shapes. */
MK_API int mk_rectify_shapes(const struct mk_method *m, const struct mk_job_desc *d,
		      const bool *used, struct mk_tensor_desc *out_desc,
		      bool *rectified, struct mk_err *err);

/* Fixed-order sums (see the top of this file).  A running sum is a
 * struct mk_fsum; feed it element terms in increasing element order:
 * for each run of elements that mk_fsum_run says stays in one block,
 * add the terms to s->part in element order, then call mk_fsum_step. */
#define MK_SUM_BLOCK 4096u
struct mk_fsum {
	double total;   /* blocks finished, summed in block order */
	double part;    /* the current block, summed in element order */
};
/* Elements from `elem` (at most `left`) that stay in elem's block. */
static inline uint64_t mk_fsum_run(uint64_t elem, uint64_t left)
{
	uint64_t r = MK_SUM_BLOCK - elem % MK_SUM_BLOCK;
	return r < left ? r : left;
}
/* After adding elements up to (not including) `end`: closes the block
 * when `end` is a block boundary. */
static inline void mk_fsum_step(struct mk_fsum *s, uint64_t end)
{
	if (end % MK_SUM_BLOCK == 0) {
		s->total += s->part;
		s->part = 0.0;
	}
}
/* The sum, once all elements were added. */
static inline double mk_fsum_value(const struct mk_fsum *s)
{
	return s->total + s->part;
}
/* The three fixed-order sums of two float32 vectors' elements [e0, e0+n)
 * (x[k] at element e0 + k): sum[0] of x*x, sum[1] of y*y, sum[2] of x*y,
 * each product exact in float64.  The same bits as adding the terms in
 * element order as above; whole blocks go several at once (each block's
 * additions are a chain, so one block at a time waits on their latency). */
MK_API void mk_fsum_dots(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const float *x, const float *y);
/* The same sums of float64 vectors, a block run at a time. */
MK_API void mk_fsum_dots_f64(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const double *x, const double *y);
/* mk_fsum_dots of BF16 vectors (widening is exact: the bits of
 * mk_fsum_dots on the widened values), the whole blocks split over up to
 * `threads` threads (at least 16 blocks each; 0: one).  0, or MK_ENOMEM. */
MK_API int mk_fsum_dots_bf16(struct mk_fsum sum[3], uint64_t e0, uint64_t n, const uint16_t *x, const uint16_t *y,
		      unsigned threads, struct mk_err *err);

/* MK_EUNSUPPORTED naming the input unless every used input of d has a
 * float dtype mk computes with (mk_dtype_is_float). */
MK_API int mk_require_float_inputs(const struct mk_method *m, const struct mk_job_desc *d,
			    const bool *used, struct mk_err *err);

/* The output rule mergekit's methods share: every used input a float
 * (mk_require_float_inputs), one shape (mk_rectify_shapes: embeddings
 * merged over their common top-left block), the output dtype the inputs'
 * promotion (mk_promote_dtypes), the compute dtype mk_compute_dtype_of's.
 * Fills po->out and po->compute. */
MK_API int mk_output_promoted(const struct mk_method *m, const struct mk_job_desc *d, const bool *used,
			      struct mk_plan_out *po, struct mk_err *err);

/* Edit distance, case-insensitive (ASCII): insertions, deletions,
 * substitutions and swaps of two neighbouring letters count 1 each
 * (optimal string alignment).  SIZE_MAX when out of memory. */
MK_API size_t mk_edit_distance(const char *a, const char *b);

#endif
