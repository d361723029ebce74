/* manifest.h - the HEAD frame: what a stream carries.
 *
 * The HEAD payload is one JSON object (mk-stream(5)), decoded into
 * struct mk_manifest and encoded from it; no stage reads HEAD JSON by key.
 *   {"kind": "tensors" | "plan" | "inputs",
 *    "producer": "mk-fetch 0.1.0",
 *    "chunk_bytes": 4194304,                 streams with chunks only
 *    "models": [{"ref": ..., "adapter": true (only a LoRA adapter),
 *                "shards": [{"name", "size",
 *                "header_sha256"}]}],        plan and inputs (and the
 *    "seed": 0, "plugins": [{"name", "abi",   tensors stream mk-merge
 *    "spec_sha256"}], "jobs": 21,            writes from them)
 *    "held_bytes_max": 0, "spilled_jobs": 0,
 *    "quantization_config": {...},            block-FP8 or MXFP4 inputs only
 *    "tensors": [{"name": ..., "dtype": "BF16", "shape": [..],
 *                 "requant": "fp8" | "mxfp4" (optional),
 *                 "requant_parts": ["NAME", ...] (optional, fp8)}, ...],
 *    "files": [{"name": "config.json", "size": 663}, ...]}
 * "tensors" is the output manifest, in write order.  Keys this version
 * does not know are kept (extra) and passed on, after the plan's keys and
 * before "tensors" and "files".
 */
#ifndef MK_MANIFEST_H
#define MK_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/dtype.h"
#include "mk/err.h"

/* How a weight was stored quantized in the model whose config.json the
 * output keeps, so that mk-pack --quantize writes it so again. */
enum mk_requant {
	MK_REQUANT_NONE = 0,
	MK_REQUANT_FP8,          /* "fp8": block FP8, a float tensor of 2 or more axes */
	MK_REQUANT_MXFP4,        /* "mxfp4": gpt-oss's experts, a float tensor
				    [E, C, R] with C a multiple of 32 */
};

struct mk_manifest_tensor {
	char *name;
	struct mk_tensor_desc desc;
	uint64_t nelem, nbytes;
	enum mk_requant requant; /* "requant" (the HEAD's quant_method) */
	/* "requant_parts" (fp8 only): the donor stored this weight as parts
	 * one after another, each its own block-FP8 tensor (experts stored
	 * one by one, fused here): written as those parts again, under these
	 * names, each nelem / nparts elements of rows of the last axis */
	char **requant_parts;
	size_t nrequant_parts;
};

struct mk_manifest_file {
	char *name;
	uint64_t size;
};

/* The plan's model table: each model as the configuration names it, and
 * the shards mk-plan read, so that mk-fetch can refuse other files. */
struct mk_plan_shard {
	char *name;                  /* file name in the model directory */
	uint64_t size;
	uint8_t header_sha256[32];
};
struct mk_plan_model {
	char *ref;                   /* as written in the configuration */
	char *commit;                /* a Hub model's commit, or NULL */
	bool adapter;                /* a PEFT LoRA adapter (adapter_model.*) of a
					BASE+ADAPTER reference, opened with
					mk_model_open_adapter ("adapter": true) */
	size_t nshards;
	struct mk_plan_shard *shards;
};

/* A method from a plugin that the plan uses: mk-merge must load the same. */
struct mk_plan_plugin {
	char *name;
	unsigned abi;
	char spec_sha256[65];        /* lower-case hex */
};

struct mk_manifest {
	char *kind;            /* "tensors", "plan", "inputs" */
	char *producer;
	uint64_t chunk_bytes;  /* the chunk size its producer cut at; 0 in a
				  plan (mk-fetch chooses it) */
	size_t ntensors;
	struct mk_manifest_tensor *tensors;
	size_t nfiles;
	struct mk_manifest_file *files;
	/* from the plan: present in plan and inputs streams, and carried on
	 * by mk-merge into its tensors stream */
	bool planned;          /* the fields below are set (and encoded) */
	size_t nmodels;
	struct mk_plan_model *models;
	uint64_t seed;         /* the random methods' seed */
	size_t nplugins;
	struct mk_plan_plugin *plugins;
	uint64_t njobs;        /* JOB frames that follow ("jobs") */
	uint64_t held_bytes_max; /* largest job mk-merge holds in memory */
	uint64_t spilled_jobs; /* jobs mk-merge replays from --spill DIR */
	/* the quantization_config (compact JSON text of an object with
	 * quant_method "fp8" and weight_block_size [rows, cols], or
	 * quant_method "mxfp4") that the requant tensors had, for mk-pack
	 * --quantize; NULL: none.  Carried by every stage, as the plan's
	 * keys.  quant_kind: its method; quant_block: fp8's block. */
	char *quant_config;
	enum mk_requant quant_kind;
	uint32_t quant_block[2];
	void *extra;           /* unknown keys (json_t *), owned */
};

/* A HEAD is read a member at a time (mk_manifest_decode): each entry of
 * its "tensors", "files" and "models" lists, and its other values
 * together, at most this much JSON text, so that no JSON tree larger
 * than a few times this is ever held beside the manifest. */
#define MK_HEAD_VALUE_MAX (1u << 20)

struct mk_manifest *mk_manifest_new(const char *kind, const char *producer);
/* Append a tensor (name copied); checks the byte size is computable. */
int mk_manifest_add_tensor(struct mk_manifest *m, const char *name,
			   enum mk_dtype dt, unsigned ndim,
			   const uint64_t *shape, struct mk_err *err);
int mk_manifest_add_file(struct mk_manifest *m, const char *name,
			 uint64_t size, struct mk_err *err);
/* Append a model to the table (ref copied, no shards yet) / a shard to
 * the last model / a plugin entry; each sets planned. */
int mk_manifest_add_model(struct mk_manifest *m, const char *ref, const char *commit,
			  struct mk_err *err);
int mk_manifest_add_shard(struct mk_manifest *m, const char *name, uint64_t size,
			  const uint8_t header_sha256[32], struct mk_err *err);
int mk_manifest_add_plugin(struct mk_manifest *m, const char *name, unsigned abi,
			   const char *spec_sha256, struct mk_err *err);
/* Set kind and producer (copied), e.g. when a stage re-emits the HEAD. */
int mk_manifest_set_kind(struct mk_manifest *m, const char *kind, const char *producer,
			 struct mk_err *err);
/* Serialise to compact JSON (malloc'ed, not NUL-counted in *len).  The
 * typed fields in the order above, the extra keys before "tensors" and
 * "files". */
int mk_manifest_encode(const struct mk_manifest *m, char **out, size_t *len,
		       struct mk_err *err);
/* Parse a HEAD payload and check it whole: the kind is known, tensor
 * names unique with known dtypes and computable sizes, file names valid,
 * a plan or inputs stream has its model table, every model and plugin
 * entry is complete, no key is given twice, no entry or the other values
 * over MK_HEAD_VALUE_MAX.  Memory: the manifest and one entry's tree. */
int mk_manifest_decode(const void *buf, size_t len, struct mk_manifest **out,
		       struct mk_err *err);
void mk_manifest_free(struct mk_manifest *m);
struct mk_stream_reader;
struct mk_frame;
/* Read a stream up to its first critical frame, which must be a HEAD of
 * kind `kind` (NULL: any kind), and decode it.  Ancillary frames before it are skipped.
 * *f is the HEAD frame (valid until the next mk_sr_next).  `need` says
 * what the reader wants, for the message on another kind (e.g. "mk-pack
 * writes a 'tensors' stream (from mk-fetch --model or mk-merge)"). */
int mk_sr_head(struct mk_stream_reader *r, const char *label, const char *kind,
	       const char *need, struct mk_manifest **man, struct mk_frame *f,
	       struct mk_err *err);

/* Set quant_config, quant_kind and quant_block from a
 * quantization_config object's JSON text (checked: quant_method "fp8"
 * with a weight_block_size of two sides 1 to 2^20, or "mxfp4"). */
int mk_manifest_set_quant(struct mk_manifest *m, const char *json, size_t len, struct mk_err *err);

/* Set tensor t's requant_parts to copies of the n names (0, or an error
 * when they do not split it into whole rows). */
int mk_manifest_set_requant_parts(struct mk_manifest_tensor *t, char *const *names, size_t n, struct mk_err *err);

/* The name of a requant format ("fp8", "mxfp4"; NULL for none), and the
 * format of a name: 0, or -1 for a name that is none of them. */
const char *mk_requant_name(enum mk_requant k);
int mk_requant_parse(const char *name, enum mk_requant *out);

/* Index of a tensor by name, or -1 (linear search; for tools). */
long mk_manifest_find(const struct mk_manifest *m, const char *name);
/* Total bytes of all tensors. */
uint64_t mk_manifest_total_bytes(const struct mk_manifest *m);

#endif
