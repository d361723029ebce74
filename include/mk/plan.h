/* plan.h - JOB frames: one plan job each (see mk-stream(5)), decoded into
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
 * does not know are kept (extra) and passed on.
 */
#ifndef MK_PLAN_H
#define MK_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/dtype.h"
#include "mk/err.h"
#include "mk/manifest.h"
#include "mk/method.h"

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
};

/* A resolved parameter value, by the method's parameter name. */
struct mk_job_param {
	char *name;
	struct mk_pval value;
};
struct mk_job_params {
	size_t n;
	struct mk_job_param *p;
};

struct mk_plan_job {
	uint32_t id;
	size_t output;               /* index in the manifest */
	char *method;
	size_t ninputs;
	struct mk_plan_input *inputs;
	long base;                   /* input index of the base, or -1 */
	unsigned passes, sends;
	bool spill;                  /* sent once, replayed from a spill file */
	bool is_embed;               /* an embedding matrix (rows are tokens) */
	bool check_equal;            /* passthrough of inputs that must agree */
	struct mk_job_params global; /* "params": {"global": ...} */
	struct mk_job_params *input_params; /* ninputs entries ("inputs") */
	void *extra;                 /* unknown keys (json_t *), owned */
};

/* Parse a JOB payload and check it whole: types, sends is 1 or passes
 * + 1, the base is one of the inputs, the inputs' byte sizes are
 * computable, per-input parameters for every input, check_equal only
 * with passthrough; and, against the stream's HEAD: the output is in the
 * manifest and every input's model in the model table.  head may be NULL
 * only where no stream is at hand (then those two are not checked). */
int mk_plan_job_decode(const void *buf, size_t len, const struct mk_manifest *head,
		       struct mk_plan_job **out, struct mk_err *err);
/* Serialise (compact JSON, malloc'ed). */
int mk_plan_job_encode(const struct mk_plan_job *j, char **out, size_t *len,
		       struct mk_err *err);
/* A new job with n zeroed inputs and their parameter lists; NULL when out
 * of memory. */
struct mk_plan_job *mk_plan_job_new(size_t ninputs);
/* Append a parameter (name copied). */
int mk_job_params_add(struct mk_job_params *ps, const char *name, struct mk_pval v,
		      struct mk_err *err);
void mk_plan_job_free(struct mk_plan_job *j);

#endif
