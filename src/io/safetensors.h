/* safetensors.h - read and validate safetensors files and sharded indexes,
 * and build headers the way the reference writer does.
 *
 * Validation mirrors the reference implementation (huggingface/safetensors
 * SafeTensors::read_metadata + Metadata::validate) and adds an explicit
 * duplicate-key check:
 *   - header length N: file >= 8 bytes, N <= MK_ST_MAX_HEADER, 8+N <= file;
 *   - header is UTF-8 JSON object (leading/trailing whitespace allowed),
 *     no duplicate keys, no trailing garbage;
 *   - "__metadata__" optional, a string -> string map;
 *   - every other key: {"dtype": known name, "shape": [u64...],
 *     "data_offsets": [begin, end]} (unknown extra fields ignored);
 *   - entries sorted by data_offsets must tile [0, last_end) exactly
 *     (no gap, overlap or alias);
 *   - byte size = prod(shape) * bits / 8, overflow-checked, whole bytes;
 *   - 8 + N + last_end == file length exactly.
 * Error messages name the file (its label) and the tensor.
 */
#ifndef MK_SAFETENSORS_H
#define MK_SAFETENSORS_H

#include <stdint.h>
#include <stddef.h>
#include "mk/dtype.h"
#include "mk/err.h"

#define MK_ST_MAX_HEADER 100000000ULL /* the reference's MAX_HEADER_SIZE */

struct mk_st_tensor {
	char *name;                  /* owned by the containing mk_st_file */
	struct mk_tensor_desc desc;  /* dtype and shape (ndim 0: a scalar) */
	uint64_t nelem;              /* product of shape (1 for a scalar) */
	uint64_t begin, end;         /* byte range relative to data_start */
	/* NULL: the elements lie in row-major order in [begin, end) (every
	 * safetensors tensor).  Else ndim strides in elements, of a PyTorch
	 * view (transposed, sliced, expanded): element (i0, i1, ...) is at
	 * begin + size * (i0*stride[0] + i1*stride[1] + ...), and [begin, end)
	 * is the span of storage the elements lie in (its byte count need not
	 * be nelem's).  Read such a tensor with mk_st_tensor_extent and
	 * mk_st_tensor_gather; owned by the containing mk_st_file. */
	const uint64_t *stride;
};

/* The bytes (relative to data_start) that elements [e0, e0 + n) of t, in
 * row-major order, lie in: [*lo, *hi).  Exact for a contiguous tensor;
 * for a strided one the smallest range over the rows (or the part of a
 * row) they touch.  Whole bytes: e0 and n at the dtype's granule.
 * Requires n >= 1 and e0 + n <= t->nelem. */
void mk_st_tensor_extent(const struct mk_st_tensor *t, uint64_t e0, uint64_t n, uint64_t *lo, uint64_t *hi);

/* Copy elements [e0, e0 + n) of t, in row-major order, to dst (their
 * bytes, n * size) from src, which holds the file's bytes [src_lo,
 * src_lo + src_len) relative to data_start.  MK_EINVAL, naming the
 * tensor, when the elements are not all in src or not in t. */
int mk_st_tensor_gather(const struct mk_st_tensor *t, uint64_t e0, uint64_t n, const void *src, uint64_t src_lo,
			uint64_t src_len, void *dst, struct mk_err *err);

struct mk_st_meta {                  /* one "__metadata__" entry */
	char *key, *value;
};

struct mk_st_file {
	char *path;                  /* as opened (or the label given) */
	uint64_t file_size;
	uint64_t header_len;         /* N, padding included */
	uint64_t data_start;         /* 8 + N */
	size_t ntensors;
	struct mk_st_tensor *tensors; /* sorted by begin offset */
	size_t nmeta;
	struct mk_st_meta *meta;     /* in header order */
	uint8_t header_hash[32];     /* SHA-256 of the 8+N header bytes */
};

/* Parse and validate a header.  `buf` holds the first `len` bytes of the
 * file (at least 8 + N of them, or the call fails with the reference's
 * InvalidHeaderLength rule); `file_size` is the whole file's length.
 * `label` names the file in messages.  On success *out is a new object
 * the caller frees with mk_st_file_free(). */
int mk_st_parse(const void *buf, size_t len, uint64_t file_size,
		const char *label, struct mk_st_file **out, struct mk_err *err);

/* Open `path`, read its header and validate it against the file's size. */
int mk_st_open(const char *path, struct mk_st_file **out, struct mk_err *err);

void mk_st_file_free(struct mk_st_file *f);

/* Find a tensor by name (binary search on a name index built at parse
 * time).  Returns a borrowed pointer valid until mk_st_file_free(), or
 * NULL. */
const struct mk_st_tensor *mk_st_find(const struct mk_st_file *f,
				      const char *name);

/* ---- sharded index: model.safetensors.index.json ---- */

struct mk_st_index_entry {
	char *tensor;                /* weight_map key */
	size_t shard;                /* index into shards[] */
};

struct mk_st_index {
	size_t nshards;
	char **shards;               /* sorted, unique shard file names */
	size_t nentries;
	struct mk_st_index_entry *entries; /* in the file's weight_map order */
	char *strings;               /* owns the entries' tensor names */
};

/* Parse an index file's bytes, in one pass (core/jsonscan.c; memory about 4
 * times the index's bytes besides them).  Rejects: invalid JSON (UTF-8),
 * a repeated "weight_map" or tensor,
 * missing/non-object weight_map, non-string shard names, shard names that
 * are empty, absolute, contain '/' or '\\' or are "." / "..".
 * `label` names the file in messages. */
int mk_st_index_parse(const void *buf, size_t len, const char *label,
		      struct mk_st_index **out, struct mk_err *err);
void mk_st_index_free(struct mk_st_index *idx);

/* ---- writing headers as the reference writer does ---- */

struct mk_st_out_tensor {            /* input to mk_st_header_build */
	const char *name;
	enum mk_dtype dtype;
	unsigned ndim;
	const uint64_t *shape;
	uint64_t nbytes;             /* filled in by the builder */
	uint64_t begin;              /* filled in: offset in the data block */
};

/* Build a header for `n` tensors: "__metadata__":{"format":"pt"} first,
 * tensors sorted by dtype descending then name ascending (bytewise),
 * offsets contiguous from 0, compact JSON, space padded to a multiple of
 * `align` (8 as the reference; any power of two >= 8).  Fills each
 * tensor's nbytes/begin.  *hdr receives a malloc'ed buffer of *hdr_len
 * bytes: the 8-byte length prefix followed by the JSON.  `order`
 * (optional, n entries) receives the sorted order as indexes into t[]. */
int mk_st_header_build(struct mk_st_out_tensor *t, size_t n, size_t align,
		       uint8_t **hdr, size_t *hdr_len, size_t *order,
		       struct mk_err *err);
/* The same with the tensors' data in the order given (t[0] first), for
 * a file whose layout says an order (mk-multi's description of a
 * streamed merge: its tensors as the merge makes them). */
int mk_st_header_build_as_given(struct mk_st_out_tensor *t, size_t n, size_t align, uint8_t **hdr,
				size_t *hdr_len, struct mk_err *err);

#endif
