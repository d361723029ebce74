/* model.h - resolve a model reference and open its checkpoint.
 *
 * A reference is a local directory ("path@rev" with an existing directory
 * "path" uses it and ignores the revision, as mergekit), or "org/name[@rev]"
 * (or a bare "name"), a Hugging Face Hub repository.  A Hub repository is
 * looked up in the Hugging Face cache (see hub.h for where): no revision
 * means refs/main; a revision names a ref (refs/<rev>) or a commit
 * (snapshots/<rev>).  When the cache holds the snapshot with the files the
 * merge needs, nothing is asked of the Hub (a branch already in the cache
 * is not checked for newer commits: `mk-get` updates it).  Otherwise the
 * Hub is asked (unless HF_HUB_OFFLINE=1) for the revision's commit and
 * files; the top-level configuration, tokenizer and template files are
 * downloaded into the cache, then the weights as `weights` says.
 *
 * The weights are model.safetensors, or model.safetensors.index.json with
 * its shards (as mergekit's ShardedTensorIndex.from_disk), else
 * pytorch_model.bin or pytorch_model.bin.index.json with its shards.
 * Opening validates every shard header, that every indexed tensor is
 * present in its shard, that no tensor is in two shards, and that no shard
 * holds a tensor the index does not list.
 *
 * A reference that is a regular file is that one weight file (a state
 * dict, as mk-pytorch(1) merges): safetensors when its name ends in
 * .safetensors, else a torch.save pickle; dir is its directory.
 */
#ifndef MK_MODEL_H
#define MK_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include "hub/hub.h"
#include "io/safetensors.h"

struct mk_model_tensor {
	const struct mk_st_tensor *t; /* borrowed from shards[shard] */
	size_t shard;
};

struct mk_model {
	char *ref;                    /* as given */
	char *dir;                    /* resolved directory */
	size_t nshards;
	struct mk_st_file **shards;   /* in the index's sorted shard order */
	char **shard_names;           /* file names relative to dir */
	size_t ntensors;
	struct mk_model_tensor *tensors; /* by shard, then by file offset */
	char *commit;                 /* a Hub model's commit, or NULL */
	struct mk_hub_blob **remote;  /* per shard: read by range requests
					 (MK_MODEL_STREAM), or NULL: a file */
};

/* What becomes of a Hub model's weights the cache lacks. */
enum mk_model_weights {
	MK_MODEL_DOWNLOAD,  /* downloaded into the cache (mk-fetch, mk-get) */
	MK_MODEL_HEADERS,   /* only their safetensors headers are read, by
			       range requests (mk-plan); PyTorch files, which
			       have no header to read so, are downloaded */
	MK_MODEL_STREAM,    /* as HEADERS, and the shards are read by range
			       requests (mk-fetch --remote) */
};

struct mk_model_open_opts {
	enum mk_model_weights weights;
	const char *commit;   /* a Hub model at this commit (a plan's pin) */
	bool cache;           /* MK_MODEL_STREAM: what is read also goes to
				 the cache */
	bool refresh;         /* ask the Hub for the revision's commit even
				 when the cache holds it (mk-get) */
	bool adapter;         /* a PEFT adapter: adapter_model.safetensors,
				 else adapter_model.bin */
};

/* The model's file `name` (relative to dir), resolved through every
 * symbolic link: 0 and *path (malloc'ed) when it exists and lies inside
 * the model's directory (for a Hugging Face cache snapshot, inside its
 * repository folder, where the snapshot's links point); MK_ENOENT when it
 * does not exist; MK_EINVAL, naming where it leads, when it resolves
 * outside.  mk reads no file of a model by another way. */
int mk_model_path(const struct mk_model *m, const char *name, char **path, struct mk_err *err);

/* Resolve `ref` to a local directory or a snapshot in the cache (malloc'ed
 * into *dir), asking nothing of the Hub. */
int mk_model_resolve(const char *ref, char **dir, struct mk_err *err);

/* Resolve and open a model; free with mk_model_free().  opts NULL: the
 * weights are downloaded (MK_MODEL_DOWNLOAD). */
int mk_model_open_with(const char *ref, const struct mk_model_open_opts *opts,
		       struct mk_model **out, struct mk_err *err);
int mk_model_open(const char *ref, struct mk_model **out, struct mk_err *err);
/* The same for a PEFT adapter (the LoRA part of a BASE+ADAPTER reference):
 * its adapter_model.safetensors, else adapter_model.bin (torch.save), one
 * file; its adapter_config.json is read by the planner (mk_model_path). */
int mk_model_open_adapter(const char *ref, struct mk_model **out, struct mk_err *err);
void mk_model_free(struct mk_model *m);

/* Open every shard for reading: *fds (malloc'ed, one per shard) owned by
 * the caller, closed and freed with mk_model_close_fds.  A remote shard
 * (m->remote[s]) gets -1. */
int mk_model_open_fds(const struct mk_model *m, int **fds, struct mk_err *err);
void mk_model_close_fds(const struct mk_model *m, int *fds);

/* Whether any shard is read by range requests (m->remote): such a model
 * needs the http reader (reader.h). */
bool mk_model_has_remote(const struct mk_model *m);

/* Find a tensor by name; borrowed pointer or NULL. */
const struct mk_model_tensor *mk_model_find(const struct mk_model *m,
					    const char *name);

#endif
