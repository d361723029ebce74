/* torchbin.c - torch.save zip checkpoints (see torchbin.h): the zip's
 * central directory, data.pkl read by a restricted pickle machine, each
 * tensor placed at its storage member's bytes. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "io/torchbin.h"
#include "st_impl.h"

#define MAX_MEMBERS 1000000u
#define MAX_VIEW_SLACK (16u << 20) /* a view's span: 4 times its bytes and this */

/* What the pickle machine may build.  A state dict's pickle builds, per
 * tensor, its name, the persistent id (a tuple of 5), the storage, the
 * offset, the size and stride tuples (up to 8 integers each), the
 * requires_grad flag, the hooks' OrderedDict, the arguments' tuple and
 * the tensor: about 35 values and 2 KiB (pointers in tuples, the stack
 * and the memo included) with 8 dimensions, and its _metadata a few
 * values per module.  So the budget grows with the tensors built so far:
 * PKL_OBJ_PER_TENSOR values and PKL_BYTES_PER_TENSOR bytes each (about
 * twice what one needs), over a base for what comes before the first
 * tensor (the globals, the dict) of PKL_OBJ_BASE values and
 * PKL_BYTES_BASE bytes.  A pickle that builds more, or more than
 * PKL_MAX_TENSORS tensors (the largest checkpoints saved whole hold a
 * few thousand), or nests tuples, lists, dicts or MARKs deeper than
 * PKL_MAX_DEPTH (a state dict nests 3 deep), is refused, naming the bound:
 * the memory it takes stays under about PKL_MAX_TENSORS *
 * PKL_BYTES_PER_TENSOR (values' allocation overhead aside: 370 MB peak
 * for a 64 MiB data.pkl built to the bounds), and a pickle of 16 million
 * NONEs stops at the 4097th. */
#define PKL_MAX_TENSORS 65536u
#define PKL_MAX_DEPTH 64u
#define PKL_OBJ_BASE 4096u
#define PKL_OBJ_PER_TENSOR 64u
#define PKL_BYTES_BASE (1u << 20)
#define PKL_BYTES_PER_TENSOR 4096u
/* data.pkl's own size: a tensor takes 150 to 300 bytes of it (its name,
 * its storage's key, the opcodes), so 1 KiB each of PKL_MAX_TENSORS */
#define MAX_PICKLE ((size_t)PKL_MAX_TENSORS << 10)

/* ------------------------------------------------------------ reading */

struct src {                     /* the file, through pread or in memory */
	int fd;
	const uint8_t *mem;
	uint64_t size;
	const char *label;
};

static int src_read(const struct src *s, uint64_t off, void *dst, size_t n, struct mk_err *err)
{
	if (off > s->size || n > s->size - off)
		return mk_err_set(err, MK_EFORMAT, "%s: a zip record past the end of the file (%llu bytes)", s->label,
				  (unsigned long long)s->size);
	if (s->mem) {
		memcpy(dst, s->mem + off, n);
		return 0;
	}
	for (size_t got = 0; got < n;) {
		ssize_t r = pread(s->fd, (char *)dst + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? mk_err_sys(err, errno, "%s: cannot read", s->label) :
				       mk_err_set(err, MK_EFORMAT, "%s: shorter than its zip directory says", s->label);
		got += (size_t)r;
	}
	return 0;
}

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

/* ------------------------------------------------------------ the zip */

struct member {
	char *name;
	uint16_t method;
	uint64_t size, local;    /* uncompressed size; local header offset */
};

struct zip {
	struct member *m;
	size_t n;
};

static void zip_free(struct zip *z)
{
	for (size_t i = 0; i < z->n; i++)
		free(z->m[i].name);
	free(z->m);
}

/* The central directory: the end record (ZIP64 when the counts overflow). */
static int zip_read(const struct src *s, struct zip *z, struct mk_err *err)
{
	uint8_t tail[65557], rec[56];
	uint64_t tl = s->size < sizeof(tail) ? s->size : sizeof(tail), eocd = UINT64_MAX;
	uint64_t count, cdsize, cdoff;
	int rc;

	if (s->size >= 2 && (rc = src_read(s, 0, rec, 2, err)) == 0 && rec[0] == 0x80)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "%s: a PyTorch checkpoint in the legacy (pre-1.6) format, a bare pickle: not read; "
				  "save it again with a recent torch (torch.save writes the zip format) or convert it to safetensors",
				  s->label);
	if ((rc = src_read(s, s->size - tl, tail, (size_t)tl, err)))
		return rc;
	for (uint64_t i = tl >= 22 ? tl - 22 + 1 : 0; i-- > 0;)
		if (u32(tail + i) == 0x06054b50) {
			eocd = s->size - tl + i;
			break;
		}
	if (eocd == UINT64_MAX)
		return mk_err_set(err, MK_EFORMAT, "%s: not a zip file (no end of central directory): not a torch.save checkpoint",
				  s->label);
	const uint8_t *e = tail + (eocd - (s->size - tl));
	count = u16(e + 10);
	cdsize = u32(e + 12);
	cdoff = u32(e + 16);
	if (count == 0xFFFF || cdsize == 0xFFFFFFFF || cdoff == 0xFFFFFFFF) {
		/* ZIP64: the locator just before, then the ZIP64 end record */
		if (eocd < 20 || (rc = src_read(s, eocd - 20, rec, 20, err)))
			return rc ? rc : mk_err_set(err, MK_EFORMAT, "%s: a ZIP64 archive without its locator", s->label);
		if (u32(rec) != 0x07064b50)
			return mk_err_set(err, MK_EFORMAT, "%s: a ZIP64 archive without its locator", s->label);
		if ((rc = src_read(s, u64(rec + 8), rec, 56, err)))
			return rc;
		if (u32(rec) != 0x06064b50)
			return mk_err_set(err, MK_EFORMAT, "%s: a bad ZIP64 end of central directory", s->label);
		count = u64(rec + 32);
		cdsize = u64(rec + 40);
		cdoff = u64(rec + 48);
	}
	if (count > MAX_MEMBERS || cdsize > s->size || cdoff > s->size - cdsize)
		return mk_err_set(err, MK_EFORMAT, "%s: a central directory of %llu entries that does not fit the file", s->label,
				  (unsigned long long)count);
	uint8_t *cd = malloc(cdsize ? (size_t)cdsize : 1);
	if (!cd)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = src_read(s, cdoff, cd, (size_t)cdsize, err))) {
		free(cd);
		return rc;
	}
	z->m = calloc(count ? (size_t)count : 1, sizeof(*z->m));
	if (!z->m) {
		free(cd);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (uint64_t at = 0, i = 0; i < count; i++) {
		if (cdsize - at < 46 || u32(cd + at) != 0x02014b50) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: central directory entry %llu is damaged", s->label,
					(unsigned long long)i);
			break;
		}
		const uint8_t *c = cd + at;
		size_t nl = u16(c + 28), xl = u16(c + 30), cl = u16(c + 32);
		if (cdsize - at - 46 < (uint64_t)nl + xl + cl) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: central directory entry %llu is damaged", s->label,
					(unsigned long long)i);
			break;
		}
		struct member *m = &z->m[z->n];
		m->method = u16(c + 10);
		uint64_t csize = u32(c + 20);
		m->size = u32(c + 24);
		m->local = u32(c + 42);
		/* ZIP64 extra field: the values that overflowed, in order */
		for (size_t x = 0; x + 4 <= xl;) {
			const uint8_t *f = c + 46 + nl + x;
			size_t fl = u16(f + 2), q = 4;
			if (x + 4 + fl > xl)
				break;
			if (u16(f) == 0x0001) {
				if (m->size == 0xFFFFFFFF && q + 8 <= fl + 4)
					m->size = u64(f + q), q += 8;
				if (csize == 0xFFFFFFFF && q + 8 <= fl + 4)
					csize = u64(f + q), q += 8;
				if (m->local == 0xFFFFFFFF && q + 8 <= fl + 4)
					m->local = u64(f + q);
			}
			x += 4 + fl;
		}
		if (!(m->name = strndup((const char *)c + 46, nl))) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		if (m->method == 0 && csize != m->size) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: member '%s' is stored but its sizes differ", s->label, m->name);
			z->n++;
			break;
		}
		z->n++;
		at += 46 + nl + xl + cl;
	}
	free(cd);
	return rc;
}

/* Where member m's bytes start: after its local header. */
static int member_data(const struct src *s, const struct member *m, uint64_t *off, struct mk_err *err)
{
	uint8_t lh[30];
	int rc = src_read(s, m->local, lh, 30, err);

	if (rc)
		return rc;
	if (u32(lh) != 0x04034b50)
		return mk_err_set(err, MK_EFORMAT, "%s: member '%s' has no local header where the directory says", s->label,
				  m->name);
	*off = m->local + 30 + u16(lh + 26) + u16(lh + 28);
	if (*off > s->size || m->size > s->size - *off)
		return mk_err_set(err, MK_EFORMAT, "%s: member '%s' runs past the end of the file", s->label, m->name);
	return 0;
}

static const struct member *zip_find(const struct zip *z, const char *name)
{
	for (size_t i = 0; i < z->n; i++)
		if (!strcmp(z->m[i].name, name))
			return &z->m[i];
	return NULL;
}

/* ------------------------------------------------------------ the pickle */

enum vk { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_STORAGE, V_TENSOR, V_MARK };

enum glob { G_ORDERED_DICT, G_REBUILD_V2, G_REBUILD_PARAM, G_STORAGE };

/* a storage or a tensor: what REDUCE and BINPERSID make */
struct tens {
	enum mk_dtype dt;
	char *key;                   /* STORAGE: its member; TENSOR: its storage's */
	uint64_t numel;              /* STORAGE */
	uint64_t offset;             /* TENSOR: storage offset, elements */
	unsigned ndim;
	uint64_t shape[8];
	uint64_t stride[8];          /* TENSOR: in elements */
	bool strided;                /* TENSOR: not row-major contiguous */
	uint64_t span;               /* TENSOR: elements of storage it spans */
};

struct val {
	uint8_t k;                   /* enum vk */
	uint8_t depth;               /* TUPLE, LIST, DICT: nesting, 1 for flat */
	union {
		long long i;         /* INT, BOOL */
		double f;
		char *s;             /* STR */
		struct {             /* TUPLE, LIST: n items; DICT: 2n items */
			struct val **items;
			uint32_t n, cap;
		} c;
		struct {             /* GLOBAL */
			enum glob g;
			enum mk_dtype dt;
		} gl;
		struct tens *t;      /* STORAGE, TENSOR */
	};
	struct val *next_alloc;      /* every value, for freeing */
};

struct vm {
	const uint8_t *p;
	size_t len, at;
	const char *label;
	struct val **stack;
	size_t sp, cap;
	struct val **memo;
	size_t nmemo;                    /* slots allocated */
	size_t memo_used;                /* slots set: MEMOIZE's next index */
	struct val *all;
	size_t nobj, bytes, ntensors, marks; /* against the budget above */
	struct mk_err *err;
};

static int fail(struct vm *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(struct vm *v, const char *fmt, ...)
{
	char msg[400];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return mk_err_set(v->err, MK_EFORMAT, "%s: data.pkl: %s (at byte %zu)", v->label, msg, v->at);
}

static int nomem(struct vm *v)
{
	return mk_err_set(v->err, MK_ENOMEM, "%s: data.pkl: out of memory", v->label);
}

/* Charge n bytes and k values against the budget: 0, or the refusal. */
static int charge(struct vm *v, size_t n, size_t k)
{
	size_t t = v->ntensors;

	v->bytes += n;
	v->nobj += k;
	if (v->nobj > PKL_OBJ_BASE + PKL_OBJ_PER_TENSOR * t)
		return mk_err_set(v->err, MK_EFORMAT,
				  "%s: data.pkl builds more than %zu values for its %zu tensors (at byte %zu): refused, as a "
				  "state dict needs at most %u values and %u per tensor",
				  v->label, PKL_OBJ_BASE + PKL_OBJ_PER_TENSOR * t, t, v->at, PKL_OBJ_BASE, PKL_OBJ_PER_TENSOR);
	if (v->bytes > PKL_BYTES_BASE + (size_t)PKL_BYTES_PER_TENSOR * t)
		return mk_err_set(v->err, MK_EFORMAT,
				  "%s: data.pkl builds more than %zu bytes for its %zu tensors (at byte %zu): refused, as a "
				  "state dict needs at most %u KiB and %u bytes per tensor",
				  v->label, PKL_BYTES_BASE + (size_t)PKL_BYTES_PER_TENSOR * t, t, v->at, PKL_BYTES_BASE >> 10,
				  PKL_BYTES_PER_TENSOR);
	return 0;
}

/* A new value, or NULL with v->err set. */
static struct val *mk(struct vm *v, enum vk k)
{
	struct val *x;

	if (charge(v, sizeof(*x), 1))
		return NULL;
	if (!(x = calloc(1, sizeof(*x)))) {
		nomem(v);
		return NULL;
	}
	x->k = (uint8_t)k;
	x->next_alloc = v->all;
	v->all = x;
	return x;
}

/* A new storage or tensor (STORAGE, TENSOR) with its key, or NULL. */
static struct val *mk_tens(struct vm *v, enum vk k, const char *key)
{
	size_t kl = strlen(key) + 1;
	struct val *x = charge(v, sizeof(struct tens) + kl, 0) ? NULL : mk(v, k);

	if (!x)
		return NULL;
	if (!(x->t = calloc(1, sizeof(*x->t))) || !(x->t->key = strdup(key))) {
		nomem(v);
		return NULL;
	}
	return x;
}

static void vm_free(struct vm *v)
{
	while (v->all) {
		struct val *n = v->all->next_alloc;
		switch (v->all->k) {
		case V_STR:
			free(v->all->s);
			break;
		case V_TUPLE: case V_LIST: case V_DICT:
			free(v->all->c.items);
			break;
		case V_STORAGE: case V_TENSOR:
			if (v->all->t)
				free(v->all->t->key);
			free(v->all->t);
			break;
		default:
			break;
		}
		free(v->all);
		v->all = n;
	}
	free(v->stack);
	free(v->memo);
}

/* Push x (NULL: the failure that made it NULL is passed on). */
static int push(struct vm *v, struct val *x)
{
	if (!x)
		return -v->err->code;
	if (v->sp == v->cap) {
		size_t nc = v->cap ? 2 * v->cap : 64;
		struct val **q;
		if (charge(v, (nc - v->cap) * sizeof(*q), 0))
			return -v->err->code;
		if (!(q = realloc(v->stack, nc * sizeof(*q))))
			return nomem(v);
		v->stack = q;
		v->cap = nc;
	}
	v->stack[v->sp++] = x;
	return 0;
}

static struct val *pop(struct vm *v)
{
	return v->sp ? v->stack[--v->sp] : NULL;
}

static int need(struct vm *v, size_t n)
{
	return v->len - v->at < n ? fail(v, "cut short") : 0;
}

/* A container's nesting over its items (the first n of items added):
 * 0, or the refusal past PKL_MAX_DEPTH. */
static int nest(struct vm *v, struct val *c, struct val *const *items, size_t n)
{
	unsigned d = c->depth ? c->depth : 1;

	for (size_t i = 0; i < n; i++) {
		unsigned k = items[i]->k;
		if ((k == V_TUPLE || k == V_LIST || k == V_DICT) && items[i]->depth + 1u > d)
			d = items[i]->depth + 1u;
	}
	if (d > PKL_MAX_DEPTH)
		return fail(v, "tuples, lists and dicts nested more than %u deep", PKL_MAX_DEPTH);
	c->depth = (uint8_t)d;
	return 0;
}

/* the items from the top MARK up, removed from the stack */
static int pop_mark(struct vm *v, struct val ***items, size_t *n)
{
	size_t m = v->sp;

	while (m > 0 && v->stack[m - 1]->k != V_MARK)
		m--;
	if (m == 0)
		return fail(v, "no MARK");
	*n = v->sp - m;
	if (charge(v, *n * sizeof(**items), 0))
		return -v->err->code;
	*items = malloc((*n ? *n : 1) * sizeof(**items));
	if (!*items)
		return nomem(v);
	memcpy(*items, &v->stack[m], *n * sizeof(**items));
	v->sp = m - 1;
	v->marks--;
	return 0;
}

/* A tuple of the n items (owned from here on); pushed. */
static int make_seq(struct vm *v, enum vk k, struct val **items, size_t n)
{
	struct val *x = mk(v, k);

	if (!x) {
		free(items);
		return -v->err->code;
	}
	x->c.items = items;
	x->c.n = x->c.cap = (uint32_t)n;
	return nest(v, x, items, n) ? -v->err->code : push(v, x);
}

/* append items to a list or (pairs) to a dict */
static int extend(struct vm *v, struct val *c, struct val **items, size_t n)
{
	if (!c || (c->k != V_LIST && c->k != V_DICT) || (c->k == V_DICT && n % 2))
		return fail(v, "items set on something that is not a list or dict");
	if (nest(v, c, items, n))
		return -v->err->code;
	size_t have = c->k == V_DICT ? 2 * (size_t)c->c.n : c->c.n;
	if (have + n > c->c.cap) {
		size_t nc = 2 * (have + n) + 4;
		struct val **q;
		if (nc > UINT32_MAX)
			return fail(v, "a list or dict of more than %u items", UINT32_MAX / 2);
		if (charge(v, (nc - c->c.cap) * sizeof(*q), 0))
			return -v->err->code;
		if (!(q = realloc(c->c.items, nc * sizeof(*q))))
			return nomem(v);
		c->c.items = q;
		c->c.cap = (uint32_t)nc;
	}
	memcpy(c->c.items + have, items, n * sizeof(*items));
	c->c.n += (uint32_t)(c->k == V_DICT ? n / 2 : n);
	return 0;
}

static const struct {
	const char *name;
	enum mk_dtype dt;
} storages[] = {
	{ "FloatStorage", MK_DT_F32 }, { "HalfStorage", MK_DT_F16 }, { "BFloat16Storage", MK_DT_BF16 },
	{ "DoubleStorage", MK_DT_F64 }, { "LongStorage", MK_DT_I64 }, { "IntStorage", MK_DT_I32 },
	{ "ShortStorage", MK_DT_I16 }, { "CharStorage", MK_DT_I8 }, { "ByteStorage", MK_DT_U8 },
	{ "BoolStorage", MK_DT_BOOL }, { "Float8_e4m3fnStorage", MK_DT_F8_E4M3 }, { "Float8_e5m2Storage", MK_DT_F8_E5M2 },
};

/* The globals a state dict names; any other is refused by name. */
static int global(struct vm *v, const char *mod, const char *name)
{
	struct val *x = mk(v, V_GLOBAL);

	if (!x)
		return -v->err->code;
	if (!strcmp(mod, "collections") && !strcmp(name, "OrderedDict"))
		x->gl.g = G_ORDERED_DICT;
	else if (!strcmp(mod, "torch._utils") && !strcmp(name, "_rebuild_tensor_v2"))
		x->gl.g = G_REBUILD_V2;
	else if (!strcmp(mod, "torch._utils") && !strcmp(name, "_rebuild_parameter"))
		x->gl.g = G_REBUILD_PARAM;
	else {
		bool ok = false;
		for (size_t k = 0; !ok && !strcmp(mod, "torch") && k < sizeof(storages) / sizeof(*storages); k++)
			if (!strcmp(name, storages[k].name)) {
				x->gl.g = G_STORAGE;
				x->gl.dt = storages[k].dt;
				ok = true;
			}
		if (!ok)
			return mk_err_set(v->err, MK_EUNSUPPORTED,
					  "%s: data.pkl names the global %s.%s, which a state dict does not use: refused, nothing run (a checkpoint "
					  "that runs code when loaded?)",
					  v->label, mod, name);
	}
	return push(v, x);
}

static bool is_int_tuple(const struct val *t, unsigned max)
{
	if (!t || t->k != V_TUPLE || t->c.n > max)
		return false;
	for (size_t i = 0; i < t->c.n; i++)
		if (t->c.items[i]->k != V_INT || t->c.items[i]->i < 0)
			return false;
	return true;
}

/* REDUCE: a global called with a tuple of arguments */
static int reduce(struct vm *v)
{
	struct val *args = pop(v), *fn = pop(v), *x, **a;

	if (!args || !fn || args->k != V_TUPLE || fn->k != V_GLOBAL)
		return fail(v, "REDUCE of something that is not an allowed global and its arguments");
	a = args->c.items;
	switch (fn->gl.g) {
	case G_ORDERED_DICT:
		if (args->c.n)
			return fail(v, "OrderedDict called with arguments");
		return push(v, mk(v, V_DICT));
	case G_REBUILD_PARAM:
		if (args->c.n < 1 || a[0]->k != V_TENSOR)
			return fail(v, "_rebuild_parameter without a tensor");
		return push(v, a[0]);
	case G_REBUILD_V2: {
		/* (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
		if (args->c.n < 6 || a[0]->k != V_STORAGE || a[1]->k != V_INT || a[1]->i < 0 || !is_int_tuple(a[2], 8) ||
		    !is_int_tuple(a[3], 8) || a[2]->c.n != a[3]->c.n)
			return fail(v, "_rebuild_tensor_v2 with arguments other than (storage, offset, size, stride, ...)");
		const struct tens *st = a[0]->t;
		const struct val *sz = a[2], *sd = a[3];
		/* contiguous: each stride the product of the sizes after it
		 * (dimensions of size 1 may have any stride); else a view, its
		 * elements at offset + sum of index * stride, spanning up to
		 * offset + sum of (size - 1) * stride */
		uint64_t span = 1, nelem = 1;
		bool strided = false;
		for (size_t d = sz->c.n; d-- > 0;) {
			uint64_t n = (uint64_t)sz->c.items[d]->i, sd1 = (uint64_t)sd->c.items[d]->i, reach;
			if (n != 1 && sd1 != nelem)
				strided = true;
			if (__builtin_mul_overflow(nelem, n, &nelem) ||
			    (n && (__builtin_mul_overflow(n - 1, sd1, &reach) || __builtin_add_overflow(span, reach, &span))))
				return fail(v, "a tensor size overflows");
		}
		if (nelem == 0)
			span = 0, strided = false;
		else if (!strided)
			span = nelem;
		if ((uint64_t)a[1]->i > st->numel || span > st->numel - (uint64_t)a[1]->i)
			return fail(v, "a tensor past the end of its storage %s (%llu elements)", st->key,
				    (unsigned long long)st->numel);
		if (v->ntensors == PKL_MAX_TENSORS)
			return fail(v, "more than %u tensors: refused (a state dict that large is saved in shards)",
				    PKL_MAX_TENSORS);
		if (!(x = mk_tens(v, V_TENSOR, st->key)))
			return -v->err->code;
		v->ntensors++;
		struct tens *t = x->t;
		t->dt = st->dt;
		t->offset = (uint64_t)a[1]->i;
		t->ndim = sz->c.n;
		for (size_t d = 0; d < sz->c.n; d++) {
			t->shape[d] = (uint64_t)sz->c.items[d]->i;
			t->stride[d] = (uint64_t)sd->c.items[d]->i;
		}
		t->strided = strided;
		t->span = span;
		return push(v, x);
	}
	default:
		return fail(v, "a storage type called");
	}
}

/* BINPERSID: ('storage', storage_type, key, location, numel) */
static int persid(struct vm *v)
{
	struct val *t = pop(v), *x, **a = t && t->k == V_TUPLE ? t->c.items : NULL;

	if (!a || t->c.n != 5 || a[0]->k != V_STR || strcmp(a[0]->s, "storage") || a[1]->k != V_GLOBAL ||
	    a[1]->gl.g != G_STORAGE || a[2]->k != V_STR || a[4]->k != V_INT || a[4]->i < 0)
		return fail(v, "a persistent id other than ('storage', type, key, location, numel)");
	for (const char *c = a[2]->s; *c; c++)
		if (!(*c >= '0' && *c <= '9') && !(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && *c != '_')
			return fail(v, "a storage key '%s' that is not a plain name", a[2]->s);
	if (!(x = mk_tens(v, V_STORAGE, a[2]->s)))
		return -v->err->code;
	x->t->dt = a[1]->gl.dt;
	x->t->numel = (uint64_t)a[4]->i;
	return push(v, x);
}

/* Memo slot idx: the pickler numbers its memo 0, 1, ... as it builds, so
 * an index past the values built so far is refused (no slot beyond them
 * is allocated). */
static int memo_put(struct vm *v, size_t idx)
{
	if (!v->sp)
		return fail(v, "memo of an empty stack");
	if (idx > v->nobj)
		return fail(v, "a memo index of %zu, past the %zu values built", idx, v->nobj);
	if (idx >= v->nmemo) {
		size_t nn = idx + 1 > 2 * v->nmemo ? idx + 1 : 2 * v->nmemo;
		struct val **q;
		if (charge(v, (nn - v->nmemo) * sizeof(*q), 0))
			return -v->err->code;
		if (!(q = realloc(v->memo, nn * sizeof(*q))))
			return nomem(v);
		memset(q + v->nmemo, 0, (nn - v->nmemo) * sizeof(*q));
		v->memo = q;
		v->nmemo = nn;
	}
	v->memo_used += !v->memo[idx];
	v->memo[idx] = v->stack[v->sp - 1];
	return 0;
}

static int memo_get(struct vm *v, size_t idx)
{
	if (idx >= v->nmemo || !v->memo[idx])
		return fail(v, "memo %zu never set", idx);
	return push(v, v->memo[idx]);
}

static int string(struct vm *v, size_t n)
{
	struct val *x;
	int rc = need(v, n);

	if (rc)
		return rc;
	if (memchr(v->p + v->at, 0, n))
		return fail(v, "a string with a NUL");
	if (charge(v, n + 1, 0) || !(x = mk(v, V_STR)))
		return -v->err->code;
	if (!(x->s = strndup((const char *)v->p + v->at, n)))
		return nomem(v);
	v->at += n;
	return push(v, x);
}

/* Run the pickle to its STOP; *root the value left. */
static int vm_run(struct vm *v, struct val **root)
{
	int rc = 0;

	while (!rc) {
		if (v->at >= v->len)
			return fail(v, "no STOP");
		uint8_t op = v->p[v->at++];
		struct val *x, **items;
		size_t n;
		switch (op) {
		case 0x80: /* PROTO */
			if ((rc = need(v, 1)))
				break;
			if (v->p[v->at] > 5)
				rc = fail(v, "pickle protocol %u", v->p[v->at]);
			v->at++;
			break;
		case 0x95: /* FRAME: a length, ignored */
			if (!(rc = need(v, 8)))
				v->at += 8;
			break;
		case '.': /* STOP */
			if (v->sp != 1)
				return fail(v, "%zu values left at STOP", v->sp);
			*root = v->stack[0];
			return 0;
		case '(':
			if (v->marks == PKL_MAX_DEPTH) {
				rc = fail(v, "MARKs nested more than %u deep", PKL_MAX_DEPTH);
				break;
			}
			if (!(rc = push(v, mk(v, V_MARK))))
				v->marks++;
			break;
		case '}':
			rc = push(v, mk(v, V_DICT));
			break;
		case ']':
			rc = push(v, mk(v, V_LIST));
			break;
		case ')':
			rc = make_seq(v, V_TUPLE, NULL, 0);
			break;
		case 'N':
			rc = push(v, mk(v, V_NONE));
			break;
		case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
			if ((x = mk(v, V_BOOL)))
				x->i = op == 0x88;
			rc = push(v, x);
			break;
		case 'J': case 'K': case 'M': { /* BININT, BININT1, BININT2 */
			size_t w = op == 'J' ? 4 : op == 'K' ? 1 : 2;
			if ((rc = need(v, w)))
				break;
			if ((x = mk(v, V_INT)))
				x->i = w == 4 ? (long long)(int32_t)u32(v->p + v->at) : w == 2 ? u16(v->p + v->at) : v->p[v->at];
			v->at += w;
			rc = push(v, x);
			break;
		}
		case 0x8a: { /* LONG1: n little-endian bytes, two's complement */
			if ((rc = need(v, 1)))
				break;
			n = v->p[v->at++];
			if (n > 8 || (rc = need(v, n))) {
				rc = rc ? rc : fail(v, "an integer of %zu bytes", n);
				break;
			}
			uint64_t u = 0;
			for (size_t k = 0; k < n; k++)
				u |= (uint64_t)v->p[v->at + k] << (8 * k);
			if (n && n < 8 && (v->p[v->at + n - 1] & 0x80))
				u |= ~(uint64_t)0 << (8 * n);
			v->at += n;
			if ((x = mk(v, V_INT)))
				x->i = (long long)u;
			rc = push(v, x);
			break;
		}
		case 'G': { /* BINFLOAT, big-endian */
			if ((rc = need(v, 8)))
				break;
			uint64_t u = 0;
			for (int k = 0; k < 8; k++)
				u = u << 8 | v->p[v->at + k];
			v->at += 8;
			if ((x = mk(v, V_FLOAT)))
				memcpy(&x->f, &u, 8);
			rc = push(v, x);
			break;
		}
		case 'X': /* BINUNICODE */
			if (!(rc = need(v, 4))) {
				n = u32(v->p + v->at);
				v->at += 4;
				rc = string(v, n);
			}
			break;
		case 0x8c: /* SHORT_BINUNICODE */
		case 'U':  /* SHORT_BINSTRING */
			if (!(rc = need(v, 1))) {
				n = v->p[v->at++];
				rc = string(v, n);
			}
			break;
		case 'c': { /* GLOBAL "module\nname\n" */
			const char *s = (const char *)v->p + v->at, *nl1, *nl2;
			nl1 = memchr(s, '\n', v->len - v->at);
			nl2 = nl1 ? memchr(nl1 + 1, '\n', v->len - v->at - (size_t)(nl1 + 1 - s)) : NULL;
			if (!nl2) {
				rc = fail(v, "a GLOBAL cut short");
				break;
			}
			char mod[128], name[128];
			snprintf(mod, sizeof(mod), "%.*s", (int)(nl1 - s), s);
			snprintf(name, sizeof(name), "%.*s", (int)(nl2 - nl1 - 1), nl1 + 1);
			v->at += (size_t)(nl2 + 1 - s);
			rc = global(v, mod, name);
			break;
		}
		case 0x93: { /* STACK_GLOBAL */
			struct val *nm = pop(v), *md = pop(v);
			if (!nm || !md || nm->k != V_STR || md->k != V_STR)
				rc = fail(v, "STACK_GLOBAL without a module and a name");
			else
				rc = global(v, md->s, nm->s);
			break;
		}
		case 't': /* TUPLE */
			if (!(rc = pop_mark(v, &items, &n)))
				rc = make_seq(v, V_TUPLE, items, n);
			break;
		case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
			n = (size_t)(op - 0x84);
			if (v->sp < n) {
				rc = fail(v, "TUPLE%zu on a stack of %zu", n, v->sp);
				break;
			}
			if ((rc = charge(v, n * sizeof(*items), 0)))
				break;
			if (!(items = malloc(n * sizeof(*items)))) {
				rc = nomem(v);
				break;
			}
			memcpy(items, &v->stack[v->sp - n], n * sizeof(*items));
			v->sp -= n;
			rc = make_seq(v, V_TUPLE, items, n);
			break;
		}
		case 'R':
			rc = reduce(v);
			break;
		case 'Q':
			rc = persid(v);
			break;
		case 'b': /* BUILD: an object's state; a state dict's _metadata is dropped */
			if (v->sp < 2 || v->stack[v->sp - 2]->k != V_DICT)
				rc = fail(v, "BUILD on something that is not a dict");
			else
				v->sp--;
			break;
		case 's': /* SETITEM */
			if (v->sp < 3) {
				rc = fail(v, "SETITEM on a short stack");
				break;
			}
			rc = extend(v, v->stack[v->sp - 3], &v->stack[v->sp - 2], 2);
			v->sp -= 2;
			break;
		case 'u': /* SETITEMS */
		case 'e': /* APPENDS */
			if (!(rc = pop_mark(v, &items, &n))) {
				rc = v->sp ? extend(v, v->stack[v->sp - 1], items, n) : fail(v, "items set on nothing");
				free(items);
			}
			break;
		case 'a': /* APPEND */
			if (v->sp < 2) {
				rc = fail(v, "APPEND on a short stack");
				break;
			}
			rc = extend(v, v->stack[v->sp - 2], &v->stack[v->sp - 1], 1);
			v->sp--;
			break;
		case 'q': /* BINPUT */
			if (!(rc = need(v, 1)))
				rc = memo_put(v, v->p[v->at++]);
			break;
		case 'r': /* LONG_BINPUT */
			if (!(rc = need(v, 4))) {
				rc = memo_put(v, u32(v->p + v->at));
				v->at += 4;
			}
			break;
		case 0x94: /* MEMOIZE */
			rc = memo_put(v, v->memo_used);
			break;
		case 'h': /* BINGET */
			if (!(rc = need(v, 1)))
				rc = memo_get(v, v->p[v->at++]);
			break;
		case 'j': /* LONG_BINGET */
			if (!(rc = need(v, 4))) {
				rc = memo_get(v, u32(v->p + v->at));
				v->at += 4;
			}
			break;
		default:
			rc = fail(v, "opcode 0x%02x, which a state dict does not use", op);
		}
	}
	return rc;
}

/* ------------------------------------------------------------ the file */

static const char *stride_text(const struct tens *t, char *b, size_t n)
{
	size_t at = 0;

	b[0] = 0;
	for (unsigned d = 0; d < t->ndim && at < n; d++)
		at += (size_t)snprintf(b + at, n - at, "%s%llu", d ? ", " : "", (unsigned long long)t->stride[d]);
	return b;
}

static int parse(const struct src *s, struct mk_st_file **out, struct mk_err *err)
{
	struct zip z = { 0 };
	struct vm v = { .label = s->label, .err = err };
	struct mk_st_tensor *ts = NULL;
	uint8_t *pkl = NULL, hash[32];
	char prefix[512] = "";
	const struct member *pm = NULL;
	struct val *root = NULL;
	uint64_t off;
	int rc;

	*out = NULL;
	if ((rc = zip_read(s, &z, err)))
		goto out;
	/* ARCHIVE/data.pkl: the one pickle, at the top of its folder */
	for (size_t i = 0; i < z.n && !pm; i++) {
		const char *sl = strchr(z.m[i].name, '/');
		if (sl && !strcmp(sl, "/data.pkl") && (size_t)(sl - z.m[i].name) < sizeof(prefix) - 1) {
			pm = &z.m[i];
			snprintf(prefix, sizeof(prefix), "%.*s", (int)(sl - z.m[i].name), z.m[i].name);
		}
	}
	if (!pm) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: a zip without ARCHIVE/data.pkl: not a torch.save checkpoint", s->label);
		goto out;
	}
	char bo[600];
	snprintf(bo, sizeof(bo), "%s/byteorder", prefix);
	const struct member *bm = zip_find(&z, bo);
	if (bm && bm->method == 0 && bm->size >= 3 && bm->size < 16) {
		char b[16] = "";
		if ((rc = member_data(s, bm, &off, err)) || (rc = src_read(s, off, b, (size_t)bm->size, err)))
			goto out;
		if (strncmp(b, "little", 6)) {
			rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: saved on a big-endian machine: not read", s->label);
			goto out;
		}
	}
	if (pm->method != 0 || pm->size > MAX_PICKLE) {
		if (pm->method)
			rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: data.pkl is compressed: not read", s->label);
		else
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"%s: data.pkl is %llu bytes, more than %zu MiB (1 KiB for each of the %u tensors a "
					"checkpoint may hold): not read", s->label, (unsigned long long)pm->size,
					MAX_PICKLE >> 20, PKL_MAX_TENSORS);
		goto out;
	}
	if (!(pkl = malloc(pm->size ? (size_t)pm->size : 1))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = member_data(s, pm, &off, err)) || (rc = src_read(s, off, pkl, (size_t)pm->size, err)))
		goto out;
	mk_sha256(pkl, (size_t)pm->size, hash);
	v.p = pkl;
	v.len = (size_t)pm->size;
	if ((rc = vm_run(&v, &root)))
		goto out;
	if (root->k != V_DICT) {
		rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: data.pkl holds something other than a state dict (a dict of tensors)",
				s->label);
		goto out;
	}
	if (!(ts = calloc((size_t)root->c.n + 1, sizeof(*ts)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < root->c.n; i++) {
		struct val *k = root->c.items[2 * i], *tv = root->c.items[2 * i + 1];
		const struct tens *t = tv->k == V_TENSOR ? tv->t : NULL;
		char mname[700], sbuf[200];
		const struct member *sm;
		uint64_t bytes, es8;
		if (k->k != V_STR || !t) {
			if (k->k == V_STR)
				rc = mk_err_set(err, MK_EUNSUPPORTED,
						"%s: data.pkl's dict holds '%s', which is not a tensor (a checkpoint with more "
						"than a state dict?)", s->label, k->s);
			else
				rc = mk_err_set(err, MK_EUNSUPPORTED,
						"%s: data.pkl's dict holds an entry not named by a string (a checkpoint with "
						"more than a state dict?)", s->label);
			goto out;
		}
		snprintf(mname, sizeof(mname), "%s/data/%s", prefix, t->key);
		if (!(sm = zip_find(&z, mname))) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': its storage %s is not in the zip", s->label, k->s, t->key);
			goto out;
		}
		if (sm->method != 0) {
			rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: tensor '%s': its storage is compressed (deflated): not read", s->label,
					k->s);
			goto out;
		}
		if ((rc = member_data(s, sm, &off, err)))
			goto out;
		ts[i].name = k->s;
		ts[i].desc.dtype = t->dt;
		ts[i].desc.ndim = t->ndim;
		ts[i].nelem = 1;
		for (unsigned d = 0; d < t->ndim; d++) {
			ts[i].desc.shape[d] = t->shape[d];
			ts[i].nelem *= t->shape[d];
		}
		es8 = mk_dtype_bits(t->dt);
		/* within the member, counted in elements (no product overflows) */
		if (t->offset > sm->size * 8 / es8 || t->span > sm->size * 8 / es8 - t->offset) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: tensor '%s' runs past its storage member (%llu bytes)", s->label, k->s,
					(unsigned long long)sm->size);
			goto out;
		}
		if (mk_dtype_nbytes(t->dt, ts[i].nelem, &bytes)) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: tensor '%s' has more bytes than 64 bits count", s->label, k->s);
			goto out;
		}
		ts[i].begin = off + t->offset * es8 / 8;
		ts[i].end = ts[i].begin + t->span * es8 / 8;
		if (t->strided) {
			/* a view is read by gathering its elements from the storage
			 * it spans: refused when that is far more than the tensor */
			uint64_t sp = ts[i].end - ts[i].begin;
			if (sp > MAX_VIEW_SLACK && (sp - MAX_VIEW_SLACK) / 4 > bytes) {
				rc = mk_err_set(err, MK_EUNSUPPORTED,
						"%s: tensor '%s' is a view (stride (%s)) of %llu bytes spread over %llu bytes of its "
						"storage, more than 4 times its size and 16 MiB: not read; save it with .contiguous() "
						"or .clone()",
						s->label, k->s, stride_text(t, sbuf, sizeof(sbuf)), (unsigned long long)bytes,
						(unsigned long long)sp);
				goto out;
			}
			ts[i].stride = t->stride;
		}
	}
	rc = mk__st_file_make(s->label, s->size, ts, root->c.n, hash, out, err);
out:
	free(ts);
	free(pkl);
	vm_free(&v);
	zip_free(&z);
	return rc;
}

int mk_torchbin_parse(const void *buf, size_t len, const char *label, struct mk_st_file **out, struct mk_err *err)
{
	struct src s = { .fd = -1, .mem = buf, .size = len, .label = label };

	return parse(&s, out, err);
}

int mk_torchbin_open(const char *path, struct mk_st_file **out, struct mk_err *err)
{
	struct stat st;
	struct src s = { .label = path };
	int rc;

	*out = NULL;
	s.fd = mk_file_open(path, &st, err);
	if (s.fd < 0)
		return s.fd;
	s.size = (uint64_t)st.st_size;
	rc = parse(&s, out, err);
	close(s.fd);
	return rc;
}
