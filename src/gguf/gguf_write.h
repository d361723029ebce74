/* gguf_write.h - a GGUF (version 3) file's layout, built up front: the
 * key-value pairs, then the tensor infos, each with the offset of its
 * data, so that a writer can emit the whole header first and then put
 * each tensor's bytes at its place (header length + offset), in any
 * order.  Also gguf-split's sharding: which tensors go to which file,
 * the files' names, the split.* keys.
 *
 * Layout, little-endian: "GGUF", u32 version 3, u64 tensor count, u64
 * key count; each key as a string (u64 length, bytes, no NUL), u32 value
 * type, the value (a string likewise; an array as u32 element type, u64
 * count, elements); each tensor as its name, u32 dimensions, u64 ne[]
 * (ggml order: ne[0] is the row length, the last dimension of a
 * PyTorch shape), u32 ggml type, u64 offset in the data section; zeros
 * to the alignment; the data section, every tensor's bytes padded with
 * zeros to the alignment (the last one too).
 */
#ifndef MK_GGUF_WRITE_H
#define MK_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mk_err;

/* GGUF's value types (the u32 written before a value). */
enum mk_gguf_vtype {
	MK_GGUF_V_U8 = 0, MK_GGUF_V_I8 = 1, MK_GGUF_V_U16 = 2,
	MK_GGUF_V_I16 = 3, MK_GGUF_V_U32 = 4, MK_GGUF_V_I32 = 5,
	MK_GGUF_V_F32 = 6, MK_GGUF_V_BOOL = 7, MK_GGUF_V_STRING = 8,
	MK_GGUF_V_ARRAY = 9, MK_GGUF_V_U64 = 10, MK_GGUF_V_I64 = 11,
	MK_GGUF_V_F64 = 12,
};

#define MK_GGUF_ALIGNMENT 32    /* when general.alignment is not set */
#define MK_GGUF_NAME_MAX 63     /* ggml's tensor names: under 64 bytes */

struct mk_gguf;

int mk_gguf_new(struct mk_gguf **out, struct mk_err *err);
void mk_gguf_free(struct mk_gguf *g);

/* Key-value pairs, written in the order added; a key added twice is an
 * error.  Scalars of each type (bool as one byte 0/1). */
int mk_gguf_kv_u8(struct mk_gguf *g, const char *key, uint8_t v, struct mk_err *err);
int mk_gguf_kv_i8(struct mk_gguf *g, const char *key, int8_t v, struct mk_err *err);
int mk_gguf_kv_u16(struct mk_gguf *g, const char *key, uint16_t v, struct mk_err *err);
int mk_gguf_kv_i16(struct mk_gguf *g, const char *key, int16_t v, struct mk_err *err);
int mk_gguf_kv_u32(struct mk_gguf *g, const char *key, uint32_t v, struct mk_err *err);
int mk_gguf_kv_i32(struct mk_gguf *g, const char *key, int32_t v, struct mk_err *err);
int mk_gguf_kv_u64(struct mk_gguf *g, const char *key, uint64_t v, struct mk_err *err);
int mk_gguf_kv_i64(struct mk_gguf *g, const char *key, int64_t v, struct mk_err *err);
int mk_gguf_kv_f32(struct mk_gguf *g, const char *key, float v, struct mk_err *err);
int mk_gguf_kv_f64(struct mk_gguf *g, const char *key, double v, struct mk_err *err);
int mk_gguf_kv_bool(struct mk_gguf *g, const char *key, bool v, struct mk_err *err);
int mk_gguf_kv_str(struct mk_gguf *g, const char *key, const char *v, struct mk_err *err);
/* An array of n scalars of type `vt` (not STRING or ARRAY), `v` in the
 * host's layout of that type (uint8_t for BOOL). */
int mk_gguf_kv_array(struct mk_gguf *g, const char *key, int vt, const void *v,
		     uint64_t n, struct mk_err *err);
/* An array of n strings. */
int mk_gguf_kv_strv(struct mk_gguf *g, const char *key, const char *const *v,
		    uint64_t n, struct mk_err *err);

/* general.alignment (u32, a power of two): added as a key and used for
 * the offsets; before any tensor. */
int mk_gguf_set_alignment(struct mk_gguf *g, uint32_t align, struct mk_err *err);

/* A tensor: name (under 64 bytes, unique), ndim 1..4, ne in ggml order,
 * ggml type; its row ne[0] must be whole blocks of the type.  Its data
 * goes at the next aligned offset. */
int mk_gguf_add_tensor(struct mk_gguf *g, const char *name, unsigned ndim,
		       const uint64_t *ne, int type, struct mk_err *err);

size_t mk_gguf_n_tensors(const struct mk_gguf *g);
size_t mk_gguf_n_kv(const struct mk_gguf *g);
/* Tensor i's offset in the data section and its size (unpadded). */
uint64_t mk_gguf_tensor_offset(const struct mk_gguf *g, size_t i);
uint64_t mk_gguf_tensor_bytes(const struct mk_gguf *g, size_t i);
/* The data section's size: every tensor padded to the alignment. */
uint64_t mk_gguf_data_bytes(const struct mk_gguf *g);

/* The header, padded to the alignment: the data section starts at
 * *len.  *out is malloc'ed, the caller frees it. */
int mk_gguf_header(const struct mk_gguf *g, uint8_t **out, size_t *len,
		   struct mk_err *err);

/* ---- gguf-split ---- */

/* Shards as gguf-split makes them from tensors of these sizes, in
 * order: with max_bytes (non-zero), a tensor starts a new shard when
 * the shard's tensors, each padded to 32 bytes, would pass max_bytes
 * (--split-max-size; metadata not counted); else with max_tensors
 * (--split-max-tensors), every max_tensors tensors.  shard_of[i] gets
 * tensor i's shard (0-based), *n_shards their number.  Errors: the
 * first tensor alone over max_bytes (gguf-split refuses an empty
 * shard), more than 65535 shards. */
int mk_gguf_split_plan(const uint64_t *tensor_bytes, size_t n,
		       uint64_t max_bytes, uint32_t max_tensors,
		       uint32_t *shard_of, uint32_t *n_shards,
		       struct mk_err *err);
/* gguf-split's size argument: N followed by M (10^6 bytes) or G (10^9);
 * 0 or -MK_EINVAL. */
int mk_gguf_split_size_parse(const char *s, uint64_t *bytes, struct mk_err *err);
/* "PREFIX-00002-of-00003.gguf" for shard no (0-based) of count, as
 * llama_split_path writes it; malloc'ed, NULL when out of memory. */
char *mk_gguf_split_name(const char *prefix, uint32_t no, uint32_t count);
/* The keys gguf-split adds to each shard, in its order: split.no (u16,
 * 0-based), split.tensors.count (i32, all shards' tensors), split.count
 * (u16); after the model's keys in the first shard, alone in the others. */
int mk_gguf_kv_split(struct mk_gguf *g, uint32_t no, uint32_t count,
		     uint64_t n_tensors, struct mk_err *err);

#endif
