/* manifest.h - the HEAD frame: what a stream carries.
 *
 * The HEAD payload is one JSON object (mk-stream(5)):
 *   {"kind": "tensors" | "plan" | "inputs",
 *    "producer": "mk-fetch 0.1.0",
 *    "chunk_bytes": 4194304,
 *    "tensors": [{"name": ..., "dtype": "BF16", "shape": [..]}, ...],
 *    "files": [{"name": "config.json", "size": 663}, ...],
 *    "models": [...], "seed": 0, "budget": 0, "plugins": [...]}
 * "tensors" is the output manifest, in write order.  Keys this version
 * does not use are kept (mk_manifest.json) and passed on.
 */
#ifndef MK_MANIFEST_H
#define MK_MANIFEST_H

#include <stddef.h>
#include <stdint.h>
#include "mk/dtype.h"
#include "mk/err.h"
#include "mk/safetensors.h"

struct mk_manifest_tensor {
	char *name;
	enum mk_dtype dtype;
	unsigned ndim;
	uint64_t shape[MK_MAX_DIMS];
	uint64_t nelem, nbytes;
};

struct mk_manifest_file {
	char *name;
	uint64_t size;
};

struct mk_manifest {
	char *kind;            /* "tensors", "plan", "inputs" */
	char *producer;
	uint64_t chunk_bytes;
	size_t ntensors;
	struct mk_manifest_tensor *tensors;
	size_t nfiles;
	struct mk_manifest_file *files;
	void *json;            /* the whole object (json_t *), owned */
};

struct mk_manifest *mk_manifest_new(const char *kind, const char *producer);
/* Append a tensor (name copied); checks the byte size is computable. */
int mk_manifest_add_tensor(struct mk_manifest *m, const char *name,
			   enum mk_dtype dt, unsigned ndim,
			   const uint64_t *shape, struct mk_err *err);
int mk_manifest_add_file(struct mk_manifest *m, const char *name,
			 uint64_t size, struct mk_err *err);
/* Serialise to compact JSON (malloc'ed, not NUL-counted in *len). */
int mk_manifest_encode(const struct mk_manifest *m, char **out, size_t *len,
		       struct mk_err *err);
/* Parse a HEAD payload; checks names unique, dtypes known, sizes. */
int mk_manifest_decode(const void *buf, size_t len, struct mk_manifest **out,
		       struct mk_err *err);
void mk_manifest_free(struct mk_manifest *m);
struct mk_stream_reader;
struct mk_frame;
/* Read a stream up to its first critical frame, which must be a HEAD of
 * kind `kind`, and decode it.  Ancillary frames before it are skipped.
 * *f is the HEAD frame (valid until the next mk_sr_next).  `need` says
 * what the reader wants, for the message on another kind (e.g. "mk-pack
 * writes a 'tensors' stream (from mk-fetch --model or mk-merge)"). */
int mk_sr_head(struct mk_stream_reader *r, const char *label, const char *kind,
	       const char *need, struct mk_manifest **man, struct mk_frame *f,
	       struct mk_err *err);

/* Index of a tensor by name, or -1 (linear search; for tools). */
long mk_manifest_find(const struct mk_manifest *m, const char *name);
/* Total bytes of all tensors. */
uint64_t mk_manifest_total_bytes(const struct mk_manifest *m);

#endif
