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

#define MAX_PICKLE (256u << 20)  /* a state dict's pickle is KBs to a few MBs */
#define MAX_MEMBERS 1000000u
#define MAX_DEPTH 64             /* nesting of tuples, lists and dicts */
#define MAX_VIEW_SLACK (16u << 20) /* a view's span: 4 times its bytes and this */

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

struct val {
	enum vk k;
	long long i;                 /* INT, BOOL */
	double f;
	char *s;                     /* STR */
	size_t n;                    /* TUPLE, LIST: items; DICT: 2n items */
	struct val **items;
	enum glob g;                 /* GLOBAL */
	enum mk_dtype dt;            /* GLOBAL storage type, STORAGE, TENSOR */
	char *key;                   /* STORAGE: its member; TENSOR: its storage's */
	uint64_t numel;              /* STORAGE */
	uint64_t offset;             /* TENSOR: storage offset, elements */
	unsigned ndim;
	uint64_t shape[8];
	uint64_t stride[8];          /* TENSOR: in elements */
	bool strided;                /* TENSOR: not row-major contiguous */
	uint64_t span;               /* TENSOR: elements of storage it spans */
	struct val *next_alloc;      /* every value, for freeing */
};

struct vm {
	const uint8_t *p;
	size_t len, at;
	const char *label;
	struct val **stack;
	size_t sp, cap;
	struct val **memo;
	size_t nmemo;
	struct val *all;
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

static struct val *mk(struct vm *v, enum vk k)
{
	struct val *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->k = k;
	x->next_alloc = v->all;
	v->all = x;
	return x;
}

static void vm_free(struct vm *v)
{
	while (v->all) {
		struct val *n = v->all->next_alloc;
		free(v->all->s);
		free(v->all->key);
		free(v->all->items);
		free(v->all);
		v->all = n;
	}
	free(v->stack);
	free(v->memo);
}

static int push(struct vm *v, struct val *x)
{
	if (!x)
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
	if (v->sp == v->cap) {
		size_t nc = v->cap ? 2 * v->cap : 64;
		struct val **q = realloc(v->stack, nc * sizeof(*q));
		if (!q)
			return mk_err_set(v->err, MK_ENOMEM, "out of memory");
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

/* the items from the top MARK up, removed from the stack */
static int pop_mark(struct vm *v, struct val ***items, size_t *n)
{
	size_t m = v->sp;

	while (m > 0 && v->stack[m - 1]->k != V_MARK)
		m--;
	if (m == 0)
		return fail(v, "no MARK");
	*n = v->sp - m;
	*items = malloc((*n ? *n : 1) * sizeof(**items));
	if (!*items)
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
	memcpy(*items, &v->stack[m], *n * sizeof(**items));
	v->sp = m - 1;
	return 0;
}

static int make_seq(struct vm *v, enum vk k, struct val **items, size_t n)
{
	struct val *x = mk(v, k);

	if (!x) {
		free(items);
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
	}
	x->items = items;
	x->n = n;
	return push(v, x);
}

/* append items to a list or (pairs) to a dict */
static int extend(struct vm *v, struct val *c, struct val **items, size_t n)
{
	if (!c || (c->k != V_LIST && c->k != V_DICT) || (c->k == V_DICT && n % 2))
		return fail(v, "items set on something that is not a list or dict");
	size_t have = c->k == V_DICT ? 2 * c->n : c->n;
	struct val **q = realloc(c->items, (have + n + 1) * sizeof(*q));
	if (!q)
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
	memcpy(q + have, items, n * sizeof(*q));
	c->items = q;
	c->n += c->k == V_DICT ? n / 2 : n;
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
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
	if (!strcmp(mod, "collections") && !strcmp(name, "OrderedDict"))
		x->g = G_ORDERED_DICT;
	else if (!strcmp(mod, "torch._utils") && !strcmp(name, "_rebuild_tensor_v2"))
		x->g = G_REBUILD_V2;
	else if (!strcmp(mod, "torch._utils") && !strcmp(name, "_rebuild_parameter"))
		x->g = G_REBUILD_PARAM;
	else {
		bool ok = false;
		for (size_t k = 0; !ok && !strcmp(mod, "torch") && k < sizeof(storages) / sizeof(*storages); k++)
			if (!strcmp(name, storages[k].name)) {
				x->g = G_STORAGE;
				x->dt = storages[k].dt;
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
	if (!t || t->k != V_TUPLE || t->n > max)
		return false;
	for (size_t i = 0; i < t->n; i++)
		if (t->items[i]->k != V_INT || t->items[i]->i < 0)
			return false;
	return true;
}

/* REDUCE: a global called with a tuple of arguments */
static int reduce(struct vm *v)
{
	struct val *args = pop(v), *fn = pop(v), *x;

	if (!args || !fn || args->k != V_TUPLE || fn->k != V_GLOBAL)
		return fail(v, "REDUCE of something that is not an allowed global and its arguments");
	switch (fn->g) {
	case G_ORDERED_DICT:
		if (args->n)
			return fail(v, "OrderedDict called with arguments");
		return push(v, mk(v, V_DICT));
	case G_REBUILD_PARAM:
		if (args->n < 1 || args->items[0]->k != V_TENSOR)
			return fail(v, "_rebuild_parameter without a tensor");
		return push(v, args->items[0]);
	case G_REBUILD_V2: {
		/* (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]) */
		if (args->n < 6 || args->items[0]->k != V_STORAGE || args->items[1]->k != V_INT || args->items[1]->i < 0 ||
		    !is_int_tuple(args->items[2], 8) || !is_int_tuple(args->items[3], 8) ||
		    args->items[2]->n != args->items[3]->n)
			return fail(v, "_rebuild_tensor_v2 with arguments other than (storage, offset, size, stride, ...)");
		const struct val *st = args->items[0], *sz = args->items[2], *sd = args->items[3];
		/* contiguous: each stride the product of the sizes after it
		 * (dimensions of size 1 may have any stride); else a view, its
		 * elements at offset + sum of index * stride, spanning up to
		 * offset + sum of (size - 1) * stride */
		uint64_t span = 1, nelem = 1;
		bool strided = false;
		for (size_t d = sz->n; d-- > 0;) {
			uint64_t n = (uint64_t)sz->items[d]->i, sd1 = (uint64_t)sd->items[d]->i, reach;
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
		if ((uint64_t)args->items[1]->i > st->numel || span > st->numel - (uint64_t)args->items[1]->i)
			return fail(v, "a tensor past the end of its storage %s (%llu elements)", st->key,
				    (unsigned long long)st->numel);
		if (!(x = mk(v, V_TENSOR)) || !(x->key = strdup(st->key)))
			return mk_err_set(v->err, MK_ENOMEM, "out of memory");
		x->dt = st->dt;
		x->offset = (uint64_t)args->items[1]->i;
		x->ndim = (unsigned)sz->n;
		for (size_t d = 0; d < sz->n; d++) {
			x->shape[d] = (uint64_t)sz->items[d]->i;
			x->stride[d] = (uint64_t)sd->items[d]->i;
		}
		x->strided = strided;
		x->span = span;
		return push(v, x);
	}
	default:
		return fail(v, "a storage type called");
	}
}

/* BINPERSID: ('storage', storage_type, key, location, numel) */
static int persid(struct vm *v)
{
	struct val *t = pop(v), *x;

	if (!t || t->k != V_TUPLE || t->n != 5 || t->items[0]->k != V_STR || strcmp(t->items[0]->s, "storage") ||
	    t->items[1]->k != V_GLOBAL || t->items[1]->g != G_STORAGE || t->items[2]->k != V_STR ||
	    t->items[4]->k != V_INT || t->items[4]->i < 0)
		return fail(v, "a persistent id other than ('storage', type, key, location, numel)");
	for (const char *c = t->items[2]->s; *c; c++)
		if (!(*c >= '0' && *c <= '9') && !(*c >= 'a' && *c <= 'z') && !(*c >= 'A' && *c <= 'Z') && *c != '_')
			return fail(v, "a storage key '%s' that is not a plain name", t->items[2]->s);
	if (!(x = mk(v, V_STORAGE)) || !(x->key = strdup(t->items[2]->s)))
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
	x->dt = t->items[1]->dt;
	x->numel = (uint64_t)t->items[4]->i;
	return push(v, x);
}

static int memo_put(struct vm *v, size_t idx)
{
	if (!v->sp)
		return fail(v, "memo of an empty stack");
	if (idx > 10000000)
		return fail(v, "a memo index of %zu", idx);
	if (idx >= v->nmemo) {
		size_t nn = idx + 1 > 2 * v->nmemo ? idx + 1 : 2 * v->nmemo;
		struct val **q = realloc(v->memo, nn * sizeof(*q));
		if (!q)
			return mk_err_set(v->err, MK_ENOMEM, "out of memory");
		memset(q + v->nmemo, 0, (nn - v->nmemo) * sizeof(*q));
		v->memo = q;
		v->nmemo = nn;
	}
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
	if (!(x = mk(v, V_STR)) || !(x->s = strndup((const char *)v->p + v->at, n)))
		return mk_err_set(v->err, MK_ENOMEM, "out of memory");
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
			rc = push(v, mk(v, V_MARK));
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
			if (!(items = malloc(n * sizeof(*items)))) {
				rc = mk_err_set(v->err, MK_ENOMEM, "out of memory");
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
			rc = memo_put(v, v->nmemo);
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

static const char *stride_text(const struct val *t, char *b, size_t n)
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
		rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: data.pkl is %s: not read", s->label,
				pm->method ? "compressed" : "larger than 256 MiB");
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
	if (!(ts = calloc(root->n + 1, sizeof(*ts)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < root->n; i++) {
		struct val *k = root->items[2 * i], *t = root->items[2 * i + 1];
		char mname[700], sbuf[200];
		const struct member *sm;
		uint64_t bytes, es8;
		if (k->k != V_STR || t->k != V_TENSOR) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"%s: data.pkl's dict holds %s that is not a tensor under a name (a checkpoint with more than a state dict?)",
					s->label, k->k == V_STR ? k->s : "an entry");
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
	rc = mk__st_file_make(s->label, s->size, ts, root->n, hash, out, err);
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
