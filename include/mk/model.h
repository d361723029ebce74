/* model.h - resolve a model reference and open its safetensors checkpoint.
 *
 * A reference is a local directory ("path@rev" with an existing directory
 * "path" uses it and ignores the revision, as mergekit), or "org/name[@rev]"
 * (or a bare "name") looked up in the Hugging Face cache: $HF_HUB_CACHE,
 * else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * ~/.cache/huggingface/hub, folder "models--org--name"; no revision means
 * refs/main; a revision names a ref (refs/<rev>) or a commit hash
 * (snapshots/<rev>).  mk never downloads: a reference that is neither
 * local nor cached is an error saying so.
 *
 * The checkpoint is model.safetensors, or model.safetensors.index.json
 * with its shards (as mergekit's ShardedTensorIndex.from_disk).  Opening
 * validates every shard header, that every indexed tensor is present in
 * its shard, that no tensor is in two shards, and that no shard holds a
 * tensor the index does not list.
 */
#ifndef MK_MODEL_H
#define MK_MODEL_H

#include <stddef.h>
#include "mk/safetensors.h"

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
};

/* The model's file `name` (relative to dir), resolved through every
 * symbolic link: 0 and *path (malloc'ed) when it exists and lies inside
 * the model's directory (for a Hugging Face cache snapshot, inside its
 * repository folder, where the snapshot's links point); MK_ENOENT when it
 * does not exist; MK_EINVAL, naming where it leads, when it resolves
 * outside.  mk reads no file of a model by another way. */
int mk_model_path(const struct mk_model *m, const char *name, char **path, struct mk_err *err);

/* Resolve `ref` to a directory (malloc'ed into *dir). */
int mk_model_resolve(const char *ref, char **dir, struct mk_err *err);

/* Resolve and open a model; free with mk_model_free(). */
int mk_model_open(const char *ref, struct mk_model **out, struct mk_err *err);
/* The same for a PEFT adapter (the LoRA part of a BASE+ADAPTER reference):
 * its adapter_model.safetensors, else adapter_model.bin (torch.save), one
 * file; its adapter_config.json is read by the planner (mk_model_path). */
int mk_model_open_adapter(const char *ref, struct mk_model **out, struct mk_err *err);
void mk_model_free(struct mk_model *m);

/* Open every shard for reading: *fds (malloc'ed, one per shard) owned by
 * the caller, closed and freed with mk_model_close_fds. */
int mk_model_open_fds(const struct mk_model *m, int **fds, struct mk_err *err);
void mk_model_close_fds(const struct mk_model *m, int *fds);

/* Find a tensor by name; borrowed pointer or NULL. */
const struct mk_model_tensor *mk_model_find(const struct mk_model *m,
					    const char *name);

#endif
