/* gguf_write.c - GGUF v3 headers built in memory (see gguf_write.h). */
#include "gguf/gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_type.h"
#include "mk/err.h"

/* a growing byte buffer; an allocation failure sticks */
struct bytes {
	uint8_t *p;
	size_t n, cap;
	bool oom;
};

static void put(struct bytes *b, const void *src, size_t n)
{
	if (b->oom || n == 0)   /* an empty buffer's p may be NULL */
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;

		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);

		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void put_le(struct bytes *b, uint64_t v, unsigned width)
{
	uint8_t t[8];

	for (unsigned i = 0; i < width; i++)
		t[i] = (uint8_t)(v >> 8 * i);
	put(b, t, width);
}

static void put_str(struct bytes *b, const char *s)
{
	size_t n = strlen(s);

	put_le(b, n, 8);
	put(b, s, n);
}

struct tinfo {
	uint64_t off, bytes;
};

struct mk_gguf {
	struct bytes kv, ti;
	size_t n_kv;
	char **keys;            /* for duplicates; n_kv of them */
	size_t keys_cap;
	struct tinfo *t;
	size_t n_t, t_cap;
	/* tensor names: open addressing, indices + 1, 0 empty */
	char **names;
	size_t *slot, n_slot;
	uint32_t align;
	uint64_t data;          /* padded size of the data section so far */
};

int mk_gguf_new(struct mk_gguf **out, struct mk_err *err)
{
	struct mk_gguf *g = calloc(1, sizeof *g);

	*out = NULL;
	if (!g)
		return mk_err_set(err, MK_ENOMEM, "out of memory for a GGUF header");
	g->align = MK_GGUF_ALIGNMENT;
	*out = g;
	return 0;
}

void mk_gguf_free(struct mk_gguf *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_kv; i++)
		free(g->keys[i]);
	for (size_t i = 0; i < g->n_t; i++)
		free(g->names[i]);
	free(g->keys);
	free(g->names);
	free(g->slot);
	free(g->t);
	free(g->kv.p);
	free(g->ti.p);
	free(g);
}

static int oom(struct mk_err *err)
{
	return mk_err_set(err, MK_ENOMEM, "out of memory building a GGUF header");
}

/* Starts a pair: checks and records the key, writes it and the type. */
static int begin_kv(struct mk_gguf *g, const char *key, int vt, struct mk_err *err)
{
	if (!key || !*key)
		return mk_err_set(err, MK_EINVAL, "a GGUF key must not be empty");
	for (size_t i = 0; i < g->n_kv; i++)
		if (!strcmp(g->keys[i], key))
			return mk_err_set(err, MK_EINVAL, "GGUF key '%s' is set "
					  "twice", key);
	if (g->n_kv == g->keys_cap) {
		size_t cap = g->keys_cap ? 2 * g->keys_cap : 32;
		char **k = realloc(g->keys, cap * sizeof *k);

		if (!k)
			return oom(err);
		g->keys = k;
		g->keys_cap = cap;
	}
	if (!(g->keys[g->n_kv] = strdup(key)))
		return oom(err);
	g->n_kv++;
	put_str(&g->kv, key);
	put_le(&g->kv, (uint32_t)vt, 4);
	return g->kv.oom ? oom(err) : 0;
}

static int end_kv(struct mk_gguf *g, struct mk_err *err)
{
	return g->kv.oom ? oom(err) : 0;
}

static int put_scalar(struct mk_gguf *g, const char *key, int vt, uint64_t u,
		      unsigned width, struct mk_err *err)
{
	int rc = begin_kv(g, key, vt, err);

	if (rc)
		return rc;
	put_le(&g->kv, u, width);
	return end_kv(g, err);
}

/* each scalar through its bits: memcpy keeps a float's exact pattern */
#define SCALAR(fn, ctype, vt, width)						\
int fn(struct mk_gguf *g, const char *key, ctype v, struct mk_err *err)	\
{										\
	uint64_t u = 0;								\
										\
	memcpy(&u, &v, width);							\
	return put_scalar(g, key, vt, u, width, err);				\
}

SCALAR(mk_gguf_kv_u8, uint8_t, MK_GGUF_V_U8, 1)
SCALAR(mk_gguf_kv_i8, int8_t, MK_GGUF_V_I8, 1)
SCALAR(mk_gguf_kv_u16, uint16_t, MK_GGUF_V_U16, 2)
SCALAR(mk_gguf_kv_i16, int16_t, MK_GGUF_V_I16, 2)
SCALAR(mk_gguf_kv_u32, uint32_t, MK_GGUF_V_U32, 4)
SCALAR(mk_gguf_kv_i32, int32_t, MK_GGUF_V_I32, 4)
SCALAR(mk_gguf_kv_u64, uint64_t, MK_GGUF_V_U64, 8)
SCALAR(mk_gguf_kv_i64, int64_t, MK_GGUF_V_I64, 8)
SCALAR(mk_gguf_kv_f32, float, MK_GGUF_V_F32, 4)
SCALAR(mk_gguf_kv_f64, double, MK_GGUF_V_F64, 8)

int mk_gguf_kv_bool(struct mk_gguf *g, const char *key, bool v, struct mk_err *err)
{
	return put_scalar(g, key, MK_GGUF_V_BOOL, v ? 1 : 0, 1, err);
}

int mk_gguf_kv_str(struct mk_gguf *g, const char *key, const char *v, struct mk_err *err)
{
	int rc = begin_kv(g, key, MK_GGUF_V_STRING, err);

	if (rc)
		return rc;
	put_str(&g->kv, v ? v : "");
	return end_kv(g, err);
}

static unsigned scalar_width(int vt)
{
	switch (vt) {
	case MK_GGUF_V_U8: case MK_GGUF_V_I8: case MK_GGUF_V_BOOL: return 1;
	case MK_GGUF_V_U16: case MK_GGUF_V_I16: return 2;
	case MK_GGUF_V_U32: case MK_GGUF_V_I32: case MK_GGUF_V_F32: return 4;
	case MK_GGUF_V_U64: case MK_GGUF_V_I64: case MK_GGUF_V_F64: return 8;
	default: return 0;
	}
}

int mk_gguf_kv_array(struct mk_gguf *g, const char *key, int vt, const void *v,
		     uint64_t n, struct mk_err *err)
{
	unsigned w = scalar_width(vt);
	const uint8_t *p = v;
	int rc;

	if (!w)
		return mk_err_set(err, MK_EINVAL, "GGUF key '%s': an array of "
				  "value type %d; use the string array for "
				  "strings, arrays do not nest", key ? key : "", vt);
	if ((rc = begin_kv(g, key, MK_GGUF_V_ARRAY, err)))
		return rc;
	put_le(&g->kv, (uint32_t)vt, 4);
	put_le(&g->kv, n, 8);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t u = 0;

		memcpy(&u, p + i * w, w);
		put_le(&g->kv, u, w);
	}
	return end_kv(g, err);
}

int mk_gguf_kv_strv(struct mk_gguf *g, const char *key, const char *const *v,
		    uint64_t n, struct mk_err *err)
{
	int rc = begin_kv(g, key, MK_GGUF_V_ARRAY, err);

	if (rc)
		return rc;
	put_le(&g->kv, MK_GGUF_V_STRING, 4);
	put_le(&g->kv, n, 8);
	for (uint64_t i = 0; i < n; i++)
		put_str(&g->kv, v[i] ? v[i] : "");
	return end_kv(g, err);
}

int mk_gguf_set_alignment(struct mk_gguf *g, uint32_t align, struct mk_err *err)
{
	if (!align || (align & (align - 1)))
		return mk_err_set(err, MK_EINVAL, "GGUF alignment %u is not a "
				  "power of two", align);
	if (g->n_t)
		return mk_err_set(err, MK_EINVAL, "GGUF alignment set after %zu "
				  "tensors: set it before the first", g->n_t);
	int rc = mk_gguf_kv_u32(g, "general.alignment", align, err);

	if (rc == 0)
		g->align = align;
	return rc;
}

static uint64_t hash_name(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

/* Finds name's slot: the tensor there, or the empty slot to fill. */
static size_t find_slot(const struct mk_gguf *g, const char *name)
{
	size_t m = g->n_slot - 1, i = (size_t)hash_name(name) & m;

	while (g->slot[i] && strcmp(g->names[g->slot[i] - 1], name))
		i = (i + 1) & m;
	return i;
}

static int grow_tensors(struct mk_gguf *g)
{
	if (g->n_t == g->t_cap) {
		size_t cap = g->t_cap ? 2 * g->t_cap : 64;
		struct tinfo *t = realloc(g->t, cap * sizeof *t);
		char **nm;

		if (!t)
			return -1;
		g->t = t;
		if (!(nm = realloc(g->names, cap * sizeof *nm)))
			return -1;
		g->names = nm;
		g->t_cap = cap;
	}
	if (2 * (g->n_t + 1) > g->n_slot) {
		size_t ns = g->n_slot ? 2 * g->n_slot : 128;
		size_t *old = g->slot, on = g->n_slot;

		if (!(g->slot = calloc(ns, sizeof *g->slot))) {
			g->slot = old;
			return -1;
		}
		g->n_slot = ns;
		for (size_t i = 0; i < on; i++)
			if (old[i])
				g->slot[find_slot(g, g->names[old[i] - 1])] = old[i];
		free(old);
	}
	return 0;
}

int mk_gguf_add_tensor(struct mk_gguf *g, const char *name, unsigned ndim,
		       const uint64_t *ne, int type, struct mk_err *err)
{
	uint64_t rows = 1, row, bytes;

	if (!name || !*name || strlen(name) > MK_GGUF_NAME_MAX)
		return mk_err_set(err, MK_EINVAL, "GGUF tensor name '%s' must be "
				  "1 to %d bytes long", name ? name : "",
				  MK_GGUF_NAME_MAX);
	if (ndim < 1 || ndim > 4)
		return mk_err_set(err, MK_EINVAL, "GGUF tensor '%s': %u "
				  "dimensions, GGUF holds 1 to 4", name, ndim);
	if (!mk_gguf_type_name(type))
		return mk_err_set(err, MK_EINVAL, "GGUF tensor '%s': unknown "
				  "ggml type %d", name, type);
	row = mk_gguf_row_bytes(type, ne[0]);
	if (!row && ne[0])
		return mk_err_set(err, MK_EINVAL, "GGUF tensor '%s': rows of %llu "
				  "values cannot be %s, which needs a multiple of %u",
				  name, (unsigned long long)ne[0],
				  mk_gguf_type_name(type), mk_gguf_type_block(type));
	for (unsigned i = 1; i < ndim; i++) {
		if (ne[i] && rows > UINT64_MAX / ne[i])
			return mk_err_set(err, MK_EINVAL, "GGUF tensor '%s': its "
					  "shape overflows 64 bits", name);
		rows *= ne[i];
	}
	if (rows && row > (UINT64_MAX >> 1) / rows)
		return mk_err_set(err, MK_EINVAL, "GGUF tensor '%s': its size "
				  "overflows 64 bits", name);
	bytes = row * rows;
	if (grow_tensors(g))
		return oom(err);
	size_t s = find_slot(g, name);

	if (g->slot[s])
		return mk_err_set(err, MK_EINVAL, "GGUF tensor '%s' is added twice",
				  name);
	if (!(g->names[g->n_t] = strdup(name)))
		return oom(err);
	put_str(&g->ti, name);
	put_le(&g->ti, ndim, 4);
	for (unsigned i = 0; i < ndim; i++)
		put_le(&g->ti, ne[i], 8);
	put_le(&g->ti, (uint32_t)type, 4);
	put_le(&g->ti, g->data, 8);
	if (g->ti.oom) {
		free(g->names[g->n_t]);
		return oom(err);
	}
	g->t[g->n_t] = (struct tinfo){ g->data, bytes };
	g->slot[s] = ++g->n_t;
	g->data += (bytes + g->align - 1) / g->align * g->align;
	return 0;
}

size_t mk_gguf_n_tensors(const struct mk_gguf *g) { return g->n_t; }
size_t mk_gguf_n_kv(const struct mk_gguf *g) { return g->n_kv; }
uint64_t mk_gguf_tensor_offset(const struct mk_gguf *g, size_t i) { return g->t[i].off; }
uint64_t mk_gguf_tensor_bytes(const struct mk_gguf *g, size_t i) { return g->t[i].bytes; }
uint64_t mk_gguf_data_bytes(const struct mk_gguf *g) { return g->data; }

int mk_gguf_header(const struct mk_gguf *g, uint8_t **out, size_t *len,
		   struct mk_err *err)
{
	struct bytes b = { 0 };
	static const uint8_t zeros[64];

	*out = NULL;
	*len = 0;
	put(&b, "GGUF", 4);
	put_le(&b, 3, 4);
	put_le(&b, g->n_t, 8);
	put_le(&b, g->n_kv, 8);
	put(&b, g->kv.p, g->kv.n);
	put(&b, g->ti.p, g->ti.n);
	for (size_t pad = (g->align - b.n % g->align) % g->align; pad; ) {
		size_t k = pad < sizeof zeros ? pad : sizeof zeros;

		put(&b, zeros, k);
		pad -= k;
	}
	if (b.oom) {
		free(b.p);
		return oom(err);
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

/* ---- gguf-split ---- */

int mk_gguf_split_plan(const uint64_t *tensor_bytes, size_t n,
		       uint64_t max_bytes, uint32_t max_tensors,
		       uint32_t *shard_of, uint32_t *n_shards,
		       struct mk_err *err)
{
	uint64_t cur = 0;
	uint32_t shard = 0;

	*n_shards = 0;
	if (!max_bytes && !max_tensors)
		return mk_err_set(err, MK_EINVAL, "a GGUF split needs a maximum "
				  "shard size or tensor count");
	for (size_t i = 0; i < n; i++) {
		uint64_t padded = (tensor_bytes[i] + 31) / 32 * 32;
		bool next;

		if (max_bytes)
			next = cur + padded > max_bytes;
		else
			next = i > 0 && i % max_tensors == 0;
		if (next) {
			if (i == 0)
				return mk_err_set(err, MK_EINVAL, "the first tensor "
						  "alone (%llu bytes) is over the "
						  "maximum shard size of %llu bytes",
						  (unsigned long long)padded,
						  (unsigned long long)max_bytes);
			if (++shard > 65534)
				return mk_err_set(err, MK_EINVAL, "a GGUF split "
						  "of more than 65535 shards; "
						  "raise the maximum shard size");
			cur = padded;
		} else {
			cur += padded;
		}
		shard_of[i] = shard;
	}
	*n_shards = shard + 1;
	return 0;
}

int mk_gguf_split_size_parse(const char *s, uint64_t *bytes, struct mk_err *err)
{
	char *end;
	unsigned long long v;

	*bytes = 0;
	if (!s || *s < '0' || *s > '9')
		goto bad;
	v = strtoull(s, &end, 10);
	if (v == 0 || v > 1000000000ull || end[1] != '\0')
		goto bad;
	if (*end == 'M')
		*bytes = v * 1000000ull;
	else if (*end == 'G')
		*bytes = v * 1000000000ull;
	else
		goto bad;
	return 0;
bad:
	return mk_err_set(err, MK_EINVAL, "GGUF shard size '%s': expected a "
			  "positive number followed by M (10^6 bytes) or G "
			  "(10^9 bytes), as gguf-split's --split-max-size",
			  s ? s : "");
}

char *mk_gguf_split_name(const char *prefix, uint32_t no, uint32_t count)
{
	size_t n = strlen(prefix) + 32;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s-%05u-of-%05u.gguf", prefix, no + 1, count);
	return p;
}

int mk_gguf_kv_split(struct mk_gguf *g, uint32_t no, uint32_t count,
		     uint64_t n_tensors, struct mk_err *err)
{
	int rc;

	if (count == 0 || count > 65535 || no >= count || n_tensors > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "GGUF split %u of %u with %llu "
				  "tensors: out of gguf-split's range", no, count,
				  (unsigned long long)n_tensors);
	/* gguf-split's order: it sets split.count last (again, once the
	 * count is known, and ggml moves a key set again to the end) */
	if ((rc = mk_gguf_kv_u16(g, "split.no", (uint16_t)no, err)) ||
	    (rc = mk_gguf_kv_i32(g, "split.tensors.count", (int32_t)n_tensors, err)))
		return rc;
	return mk_gguf_kv_u16(g, "split.count", (uint16_t)count, err);
}
