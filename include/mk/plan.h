/* plan.h - plan jobs and the plan's model table, as they travel in the
 * stream (JOB frames and the HEAD's "models"; see mk-stream(5)).
 *
 * A job makes one output tensor (manifest index `output`) from `ninputs`
 * input tensors with a merge method.  Its JSON form:
 *   {"id": 7, "output": 7, "method": "linear",
 *    "inputs": [{"model": 0, "tensor": "model.norm.weight",
 *                "dtype": "BF16", "shape": [64]}, ...],
 *    "base": 0 | null, "passes": 0, "sends": 1,
 *    "params": {"global": {"t": 0.5}, "inputs": [{"weight": 1.0}, ...]},
 *    ...}
 * `passes` is the method's number of statistics passes; `sends` how many
 * times mk-fetch streams the inputs (1 when mk-merge holds the job in
 * memory, passes + 1 when it does not).  "spill": true (with sends 1 and
 * passes > 0): the job does not fit the merge budget and mk-merge replays
 * the inputs from a local file (mk-merge --spill DIR) instead of having
 * them sent again.  Keys a reader does not know are
 * kept (json) and passed on.
 */
#ifndef MK_PLAN_H
#define MK_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/dtype.h"
#include "mk/err.h"
#include "mk/manifest.h"
#include "mk/safetensors.h"

struct mk_plan_input {
	size_t model;                /* index in the plan's model table */
	char *tensor;                /* name in that model's checkpoint */
	enum mk_dtype dtype;          /* as stored in the checkpoint */
	enum mk_dtype load_dtype;     /* cast to on load (config dtype or an
					 architecture's force_dtype); = dtype
					 when absent ("load_dtype" key) */
	unsigned ndim;
	uint64_t shape[MK_MAX_DIMS];
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

struct mk_plan_job {
	uint32_t id;
	size_t output;               /* index in the manifest */
	char *method;
	size_t ninputs;
	struct mk_plan_input *inputs;
	long base;                   /* input index of the base, or -1 */
	unsigned passes, sends;
	bool spill;                  /* sent once, replayed from a spill file */
	void *json;                  /* the whole object (json_t *), owned */
};

/* Parse a JOB payload; checks types, that sends is 1 or passes + 1 and
 * that the inputs' byte sizes are computable. */
int mk_plan_job_decode(const void *buf, size_t len, struct mk_plan_job **out,
		  struct mk_err *err);
/* Serialise (compact JSON, malloc'ed).  Fields of the struct win over
 * keys of the same name in json. */
int mk_plan_job_encode(const struct mk_plan_job *j, char **out, size_t *len,
		  struct mk_err *err);
void mk_plan_job_free(struct mk_plan_job *j);

/* The plan's model table (HEAD "models"). */
struct mk_plan_shard {
	char *name;                  /* file name in the model directory */
	uint64_t size;
	uint8_t header_sha256[32];
};
struct mk_plan_model {
	char *ref;                   /* as written in the configuration */
	size_t nshards;
	struct mk_plan_shard *shards;
};
struct mk_plan_models {
	size_t n;
	struct mk_plan_model *m;
};

/* Read the model table from a decoded HEAD (kind plan or inputs). */
int mk_plan_models_decode(const struct mk_manifest *head,
			  struct mk_plan_models **out, struct mk_err *err);
void mk_plan_models_free(struct mk_plan_models *pm);

#endif
