/* safetensors.c - parse and validate safetensors headers; build headers
 * byte-identical to the reference writer.
 *
 * The checks and their order follow the reference (huggingface/safetensors,
 * SafeTensors::read_metadata then Metadata::validate); messages carry the
 * reference's error names so a user can compare with what Python says.
 *
 * Integers (shape, data_offsets) must be JSON integers >= 0, up to 2^64-1
 * as in the reference.  No 2^48 cap (the schema's) is applied: the
 * reference does not apply one either.
 *
 * The header is read in one pass by the JSON scanner (core/jsonscan.c), straight into
 * the arrays kept (no JSON tree): its cost is linear in its bytes, and
 * its memory, besides the header read, is an arena of the header's size
 * for the strings, plus per tensor its struct and index (about 120 bytes;
 * a tensor's entry takes 50 or more) and per metadata entry 16 bytes (an
 * entry takes 6 or more): at most about 4 times the header's bytes.  A
 * repeated key is refused at every level the reader uses (the tensors,
 * __metadata__'s keys, a tensor's fields); an unknown field's value is
 * skipped with only its syntax checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "io/safetensors.h"
#include "st_impl.h"

/* The public struct plus what mk_st_find needs.  Every mk_st_file comes
 * from mk_st_parse, so the cast in both directions is safe. */
struct st_file {
	struct mk_st_file pub;       /* first member */
	size_t *by_name;             /* tensor indexes sorted by name */
	char *strings;               /* tensor names, metadata keys/values */
	uint64_t *strides;           /* the strided tensors' strides */
};

static struct st_file *priv(const struct mk_st_file *f)
{
	return (struct st_file *)f;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* (st_impl.h) */
size_t mk__st_utf8_check(const uint8_t *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		uint8_t c = s[i];
		size_t need;
		uint8_t lo = 0x80, hi = 0xbf;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			need = 1;
		else if (c >= 0xe0 && c <= 0xef) {
			need = 2;
			if (c == 0xe0)
				lo = 0xa0;
			else if (c == 0xed)
				hi = 0x9f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3;
			if (c == 0xf0)
				lo = 0x90;
			else if (c == 0xf4)
				hi = 0x8f;
		} else
			return i;
		if (len - i <= need)
			return i;
		if (s[i + 1] < lo || s[i + 1] > hi)
			return i;
		for (size_t k = 2; k <= need; k++)
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
		i += need + 1;
	}
	return len;
}

static void fmt_shape(char *buf, size_t size, const uint64_t *shape,
		      unsigned ndim)
{
	size_t n = 0;

	n += (size_t)snprintf(buf + n, size - n, "[");
	for (unsigned i = 0; i < ndim && n < size; i++)
		n += (size_t)snprintf(buf + n, size - n, "%s%" PRIu64,
				      i ? "," : "", shape[i]);
	if (n < size)
		snprintf(buf + n, size - n, "]");
}

/* Read one tensor's entry, the value after its name; `tmp` is arena room
 * for a field name or dtype (jsonscan.c: it fits). */
static int read_tensor(struct mk_jscan *j, struct mk_st_tensor *t, char *tmp, const char *label,
		       struct mk_err *err)
{
	bool first = true, seen[3] = { false, false, false };
	static const char *const field[3] = { "dtype", "shape", "data_offsets" };
	size_t len, k;
	int more;

	if (mk_jscan_peek(j) != '{')
		return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': entry is not "
				  "a JSON object (InvalidHeaderDeserialization)",
				  label, t->name);
	j->p++;
	while ((more = mk_jscan_more(j, '}', &first)) == 1) {
		if (mk_jscan_string(j, tmp, &len) < 0 || mk_jscan_expect(j, ':') < 0)
			return j->rc;
		for (k = 0; k < 3 && strcmp(tmp, field[k]); k++)
			;
		if (k == 3) {
			if (mk_jscan_skip(j) < 0)
				return j->rc;
			continue;
		}
		if (seen[k])
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': duplicate object key "
					  "'%s' (InvalidHeaderDeserialization)", label, t->name, field[k]);
		seen[k] = true;
		if (k == 0) {
			if (mk_jscan_peek(j) != '"')
				return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': dtype is not "
						  "a string (InvalidHeaderDeserialization)", label,
						  t->name);
			if (mk_jscan_string(j, tmp, &len) < 0)
				return j->rc;
			if (mk_dtype_from_name(tmp, &t->desc.dtype) < 0)
				return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': unknown dtype "
						  "'%s' (InvalidHeaderDeserialization)", label,
						  t->name, tmp);
		} else if (k == 1) {
			bool f2 = true;
			size_t i = 0;
			uint64_t x;
			if (mk_jscan_peek(j) != '[')
				return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': shape is not "
						  "an array (InvalidHeaderDeserialization)", label,
						  t->name);
			j->p++;
			while ((more = mk_jscan_more(j, ']', &f2)) == 1) {
				int r = mk_jscan_u64(j, &x);
				if (r < 0)
					return r;
				if (r > 0)
					return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': shape[%zu] "
							  "is not a non-negative integer "
							  "(InvalidHeaderDeserialization)", label,
							  t->name, i);
				if (i < MK_MAX_DIMS)
					t->desc.shape[i] = x;
				i++;
			}
			if (more < 0)
				return more;
			if (i > MK_MAX_DIMS)
				return mk_err_set(err, MK_EUNSUPPORTED, "%s: tensor '%s': "
						  "%zu dimensions; mk supports at most %d",
						  label, t->name, i, MK_MAX_DIMS);
			t->desc.ndim = (unsigned)i;
		} else {
			bool f2 = true;
			size_t i = 0;
			uint64_t x[2];
			int r = 0;
			if (mk_jscan_peek(j) == '[') {
				j->p++;
				while ((more = mk_jscan_more(j, ']', &f2)) == 1 && i < 2 &&
				       (r = mk_jscan_u64(j, &x[i])) == 0)
					i++;
				if (more < 0 || r < 0)
					return j->rc ? j->rc : r;
			}
			if (i != 2 || more != 0 || r > 0)
				return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': data_offsets is "
						  "not an array of two non-negative integers "
						  "(InvalidHeaderDeserialization)", label, t->name);
			t->begin = x[0];
			t->end = x[1];
		}
	}
	if (more < 0)
		return more;
	for (k = 0; k < 3; k++)
		if (!seen[k])
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': missing field "
					  "\"%s\" (InvalidHeaderDeserialization)", label,
					  t->name, field[k]);
	return 0;
}

/* "__metadata__"'s value: null (absent, as serde reads it) or an object
 * of strings, kept in the arena at *off. */
static int read_meta(struct mk_jscan *j, struct st_file *sf, size_t *off, size_t *cap, const char *label,
		     struct mk_err *err)
{
	struct mk_st_file *f = &sf->pub;
	bool first = true;
	size_t kl, vl;
	int more;

	if (mk_jscan_peek(j) == 'n')
		return mk_jscan_skip(j);
	if (mk_jscan_peek(j) != '{')
		return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: __metadata__ is not an object "
				  "of strings (InvalidHeaderDeserialization)", label);
	j->p++;
	while ((more = mk_jscan_more(j, '}', &first)) == 1) {
		char *key = sf->strings + *off;
		if (mk_jscan_string(j, key, &kl) < 0 || mk_jscan_expect(j, ':') < 0)
			return j->rc;
		if (mk_jscan_peek(j) != '"')
			return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: __metadata__ value "
					  "for '%s' is not a string "
					  "(InvalidHeaderDeserialization)", label, key);
		if (mk_jscan_string(j, key + kl + 1, &vl) < 0)
			return j->rc;
		if (f->nmeta == *cap) {
			size_t nc = *cap ? 2 * *cap : 16;
			struct mk_st_meta *m = realloc(f->meta, nc * sizeof(*m));
			if (!m)
				return mk_err_set(err, MK_ENOMEM, "%s: out of memory reading the header", label);
			f->meta = m;
			*cap = nc;
		}
		f->meta[f->nmeta].key = key;
		f->meta[f->nmeta++].value = key + kl + 1;
		*off += kl + 1 + vl + 1;
	}
	return more;
}

static int cmp_meta_key(const void *a, const void *b, void *ctx)
{
	const struct mk_st_meta *m = ctx;

	return strcmp(m[*(const size_t *)a].key, m[*(const size_t *)b].key);
}

/* A key twice: among the tensors (by_name sorted) or __metadata__'s. */
static int check_unique(struct st_file *sf, const char *label, struct mk_err *err)
{
	struct mk_st_file *f = &sf->pub;
	size_t *mi;
	int rc = 0;

	for (size_t i = 1; i < f->ntensors; i++)
		if (!strcmp(f->tensors[sf->by_name[i]].name, f->tensors[sf->by_name[i - 1]].name))
			return mk_err_set(err, MK_EFORMAT, "%s: duplicate object key '%s' "
					  "(InvalidHeaderDeserialization)", label,
					  f->tensors[sf->by_name[i]].name);
	if (f->nmeta < 2)
		return 0;
	if (!(mi = malloc(f->nmeta * sizeof(*mi))))
		return mk_err_set(err, MK_ENOMEM, "%s: out of memory reading the header", label);
	for (size_t i = 0; i < f->nmeta; i++)
		mi[i] = i;
	qsort_r(mi, f->nmeta, sizeof(*mi), cmp_meta_key, f->meta);
	for (size_t i = 1; i < f->nmeta && !rc; i++)
		if (!strcmp(f->meta[mi[i]].key, f->meta[mi[i - 1]].key))
			rc = mk_err_set(err, MK_EFORMAT, "%s: __metadata__: duplicate object key '%s' "
					"(InvalidHeaderDeserialization)", label, f->meta[mi[i]].key);
	free(mi);
	return rc;
}

static int cmp_offsets(const void *a, const void *b)
{
	const struct mk_st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* qsort_r comparator: indexes into the tensor array `ctx`. */
static int cmp_by_name(const void *a, const void *b, void *ctx)
{
	const struct mk_st_tensor *t = ctx;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Metadata::validate: the sorted tensors must tile [0, end) exactly and
 * each must span exactly its shape's bytes.  Sets *data_len. */
static int validate(struct mk_st_file *f, const char *label,
		    uint64_t *data_len, struct mk_err *err)
{
	uint64_t start = 0;
	char sh[256];

	for (size_t i = 0; i < f->ntensors; i++) {
		struct mk_st_tensor *t = &f->tensors[i];
		uint64_t nelem = 1, nbits, size;

		if (t->end < t->begin)
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': "
					  "data_offsets [%" PRIu64 ",%" PRIu64 ") end "
					  "before they begin (InvalidOffset)",
					  label, t->name, t->begin, t->end);
		if (t->begin != start) {
			if (i == 0)
				return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': "
						  "data_offsets [%" PRIu64 ",%" PRIu64
						  ") do not start at 0, the start of "
						  "the data section (InvalidOffset)",
						  label, t->name, t->begin, t->end);
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': "
					  "data_offsets [%" PRIu64 ",%" PRIu64 ") do "
					  "not start where the previous tensor ('%s') "
					  "ends (%" PRIu64 ") (InvalidOffset)", label,
					  t->name, t->begin, t->end, f->tensors[i - 1].name,
					  start);
		}
		start = t->end;
		if (mk_tensor_desc_nelem(&t->desc, &nelem)) {
			fmt_shape(sh, sizeof(sh), t->desc.shape, t->desc.ndim);
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': "
					  "element count of shape %s overflows "
					  "64 bits (ValidationOverflow)", label,
					  t->name, sh);
		}
		t->nelem = nelem;
		if (__builtin_mul_overflow(nelem, (uint64_t)mk_dtype_bits(t->desc.dtype),
					   &nbits)) {
			fmt_shape(sh, sizeof(sh), t->desc.shape, t->desc.ndim);
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': bit size "
					  "of %s %s overflows 64 bits "
					  "(ValidationOverflow)", label, t->name,
					  mk_dtype_name(t->desc.dtype), sh);
		}
		if (nbits % 8) {
			fmt_shape(sh, sizeof(sh), t->desc.shape, t->desc.ndim);
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': %s %s is "
					  "%" PRIu64 " bits, not a whole number of "
					  "bytes (MisalignedSlice)", label, t->name,
					  mk_dtype_name(t->desc.dtype), sh, nbits);
		}
		size = nbits / 8;
		if (t->end - t->begin != size) {
			fmt_shape(sh, sizeof(sh), t->desc.shape, t->desc.ndim);
			return mk_err_set(err, MK_EFORMAT, "%s: tensor '%s': %s %s needs "
					  "%" PRIu64 " bytes but data_offsets [%" PRIu64
					  ",%" PRIu64 ") span %" PRIu64
					  " (TensorInvalidInfo)", label, t->name,
					  mk_dtype_name(t->desc.dtype), sh, size, t->begin,
					  t->end, t->end - t->begin);
		}
	}
	*data_len = start;
	return 0;
}

void mk_st_file_free(struct mk_st_file *f)
{
	struct st_file *sf = priv(f);

	if (!f)
		return;
	free(f->path);
	free(f->tensors);
	free(f->meta);
	free(sf->by_name);
	free(sf->strings);
	free(sf->strides);
	free(sf);
}

int mk__st_file_make(const char *label, uint64_t file_size, const struct mk_st_tensor *tensors, size_t n,
		     const uint8_t hash[32], struct mk_st_file **out, struct mk_err *err)
{
	struct st_file *sf = calloc(1, sizeof(*sf));
	struct mk_st_file *f = sf ? &sf->pub : NULL;
	size_t arena = 0, off = 0, nstride = 0, soff = 0;

	*out = NULL;
	for (size_t i = 0; i < n; i++) {
		arena += strlen(tensors[i].name) + 1;
		nstride += tensors[i].stride ? tensors[i].desc.ndim : 0;
	}
	if (!sf || !(f->path = strdup(label)) || !(f->tensors = calloc(n ? n : 1, sizeof(*f->tensors))) ||
	    !(f->meta = calloc(1, sizeof(*f->meta))) || !(sf->by_name = calloc(n ? n : 1, sizeof(*sf->by_name))) ||
	    !(sf->strings = malloc(arena ? arena : 1)) || !(sf->strides = calloc(nstride + 1, sizeof(*sf->strides)))) {
		mk_st_file_free(f);
		return mk_err_set(err, MK_ENOMEM, "%s: out of memory", label);
	}
	f->file_size = file_size;
	f->ntensors = n;
	for (size_t i = 0; i < n; i++) {
		size_t kl = strlen(tensors[i].name) + 1;
		f->tensors[i] = tensors[i];
		f->tensors[i].name = memcpy(sf->strings + off, tensors[i].name, kl);
		off += kl;
		if (tensors[i].stride) {
			f->tensors[i].stride = memcpy(sf->strides + soff, tensors[i].stride,
						      tensors[i].desc.ndim * sizeof(*sf->strides));
			soff += tensors[i].desc.ndim;
		}
	}
	qsort(f->tensors, f->ntensors, sizeof(*f->tensors), cmp_offsets);
	for (size_t i = 0; i < n; i++)
		sf->by_name[i] = i;
	qsort_r(sf->by_name, f->ntensors, sizeof(*sf->by_name), cmp_by_name, f->tensors);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(f->tensors[sf->by_name[i]].name, f->tensors[sf->by_name[i - 1]].name)) {
			int rc = mk_err_set(err, MK_EFORMAT, "%s: tensor '%s' twice", label, f->tensors[sf->by_name[i]].name);
			mk_st_file_free(f);
			return rc;
		}
	memcpy(f->header_hash, hash, 32);
	*out = f;
	return 0;
}

int mk_st_parse(const void *buf, size_t len, uint64_t file_size,
		const char *label, struct mk_st_file **out, struct mk_err *err)
{
	const uint8_t *p = buf;
	struct st_file *sf = NULL;
	struct mk_st_file *f;
	struct mk_jscan j = { .what = "header", .kind = "InvalidHeaderDeserialization", .err = err };
	size_t off = 0, bad, kl, tcap = 0, mcap = 0;
	uint64_t n, data_len = 0, total;
	bool first = true, have_meta = false;
	int rc, more;

	*out = NULL;
	if (!label)
		label = "safetensors header";
	if (len > file_size)
		len = (size_t)file_size;     /* bytes past EOF are not the file's */
	j.label = label;

	/* read_metadata: 1. HeaderTooSmall, 2. HeaderTooLarge,
	 * 3. InvalidHeaderLength, 4. InvalidHeader (UTF-8),
	 * 5. InvalidHeaderDeserialization. */
	if (file_size < 8) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: %" PRIu64 " bytes, too short "
				"for the 8-byte header length (HeaderTooSmall)",
				label, file_size);
		goto out;
	}
	if (len < 8) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: only %zu bytes given, too few "
				"for the 8-byte header length (HeaderTooSmall)",
				label, len);
		goto out;
	}
	n = le64(p);
	if (n > MK_ST_MAX_HEADER) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: header length %" PRIu64
				" exceeds the limit of %llu bytes (HeaderTooLarge)",
				label, n, MK_ST_MAX_HEADER);
		goto out;
	}
	if (8 + n > file_size) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: header length %" PRIu64
				" runs past the end of the %" PRIu64 "-byte file "
				"(InvalidHeaderLength)", label, n, file_size);
		goto out;
	}
	if (8 + n > len) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: header length %" PRIu64
				" but only %zu bytes were read (InvalidHeaderLength)",
				label, n, len);
		goto out;
	}
	bad = mk__st_utf8_check(p + 8, (size_t)n);
	if (bad != n) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: header is not valid UTF-8 "
				"(bad byte 0x%02x at header offset %zu) (InvalidHeader)",
				label, p[8 + bad], bad);
		goto out;
	}
	sf = calloc(1, sizeof(*sf));
	if (!sf)
		goto nomem;
	f = &sf->pub;
	f->path = strdup(label);
	/* every string kept decodes to fewer bytes than its JSON text */
	sf->strings = malloc((size_t)n + 1);
	if (!f->path || !sf->strings)
		goto nomem;
	f->file_size = file_size;
	f->header_len = n;
	f->data_start = 8 + n;
	j.start = j.p = (const char *)p + 8;
	j.end = j.start + n;
	if (mk_jscan_peek(&j) != '{') {
		rc = mk_err_set(err, MK_EFORMAT, mk_jscan_peek(&j) < 0 ?
				"%s: header is not valid JSON: no value (InvalidHeaderDeserialization)" :
				"%s: header is not a JSON object (InvalidHeaderDeserialization)", label);
		goto out;
	}
	j.p++;
	while ((more = mk_jscan_more(&j, '}', &first)) == 1) {
		char *key = sf->strings + off;
		struct mk_st_tensor *t;

		if (mk_jscan_string(&j, key, &kl) < 0 || mk_jscan_expect(&j, ':') < 0)
			goto json;
		if (!strcmp(key, "__metadata__")) {
			if (have_meta) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: duplicate object key "
						"'__metadata__' (InvalidHeaderDeserialization)", label);
				goto out;
			}
			have_meta = true;
			rc = read_meta(&j, sf, &off, &mcap, label, err);
			if (rc < 0)
				goto out;
			continue;
		}
		off += kl + 1;
		if (f->ntensors == tcap) {
			size_t nc = tcap ? 2 * tcap : 64;
			t = realloc(f->tensors, nc * sizeof(*t));
			if (!t)
				goto nomem;
			f->tensors = t;
			tcap = nc;
		}
		t = &f->tensors[f->ntensors++];
		memset(t, 0, sizeof(*t));
		t->name = key;
		rc = read_tensor(&j, t, sf->strings + off, label, err);
		if (rc < 0)
			goto out;
	}
	if ((rc = mk_jscan_finish(&j, more)) < 0)
		goto out;
	if (!f->tensors && !(f->tensors = malloc(sizeof(*f->tensors))))
		goto nomem;
	if (!f->meta && !(f->meta = malloc(sizeof(*f->meta))))
		goto nomem;
	sf->by_name = malloc((f->ntensors ? f->ntensors : 1) * sizeof(*sf->by_name));
	if (!sf->by_name)
		goto nomem;
	for (size_t i = 0; i < f->ntensors; i++)
		sf->by_name[i] = i;
	qsort_r(sf->by_name, f->ntensors, sizeof(*sf->by_name), cmp_by_name, f->tensors);
	rc = check_unique(sf, label, err);
	if (rc < 0)
		goto out;

	qsort(f->tensors, f->ntensors, sizeof(*f->tensors), cmp_offsets);
	rc = validate(f, label, &data_len, err);
	if (rc < 0)
		goto out;
	if (__builtin_add_overflow(8 + n, data_len, &total) || total != file_size) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: header and tensors cover "
				"8 + %" PRIu64 " + %" PRIu64 " bytes but the file has %"
				PRIu64 " (MetadataIncompleteBuffer)", label, n, data_len,
				file_size);
		goto out;
	}

	for (size_t i = 0; i < f->ntensors; i++)
		sf->by_name[i] = i;
	qsort_r(sf->by_name, f->ntensors, sizeof(*sf->by_name), cmp_by_name,
		f->tensors);
	mk_sha256(p, (size_t)(8 + n), f->header_hash);
	*out = f;
	sf = NULL;
	rc = 0;
	goto out;
json:
	rc = j.rc;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "%s: out of memory reading the header",
			label);
out:
	if (sf)
		mk_st_file_free(&sf->pub);
	return rc;
}

const struct mk_st_tensor *mk_st_find(const struct mk_st_file *f,
				      const char *name)
{
	const size_t *idx = priv(f)->by_name;
	size_t lo = 0, hi = f->ntensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, f->tensors[idx[mid]].name);

		if (c == 0)
			return &f->tensors[idx[mid]];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

static int read_full(int fd, void *buf, size_t len, off_t at)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t r = pread(fd, p, len, at);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = EIO;         /* file shrank under us */
			return -1;
		}
		p += r;
		len -= (size_t)r;
		at += r;
	}
	return 0;
}

int mk_st_open(const char *path, struct mk_st_file **out, struct mk_err *err)
{
	uint8_t head[8], *buf = NULL;
	struct stat st;
	uint64_t n, size;
	int fd, rc;

	*out = NULL;
	fd = mk_file_open(path, &st, err);
	if (fd < 0)
		return fd;
	size = (uint64_t)st.st_size;
	if (size < 8) {
		rc = mk_st_parse(head, 0, size, path, out, err);
		goto out;
	}
	if (read_full(fd, head, 8, 0) < 0) {
		rc = mk_err_sys(err, errno, "%s: cannot read", path);
		goto out;
	}
	n = le64(head);
	if (n > MK_ST_MAX_HEADER || 8 + n > size) {
		/* Let the parser word the HeaderTooLarge / InvalidHeaderLength
		 * error. */
		rc = mk_st_parse(head, 8, size, path, out, err);
		goto out;
	}
	buf = malloc((size_t)(8 + n));
	if (!buf) {
		rc = mk_err_set(err, MK_ENOMEM, "%s: out of memory for a %" PRIu64
				"-byte header", path, n);
		goto out;
	}
	memcpy(buf, head, 8);
	if (read_full(fd, buf + 8, (size_t)n, 8) < 0) {
		rc = mk_err_sys(err, errno, "%s: cannot read the header", path);
		goto out;
	}
	rc = mk_st_parse(buf, (size_t)(8 + n), size, path, out, err);
out:
	free(buf);
	close(fd);
	return rc;
}

/* ---- mk_st_header_build ---- */

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_grow(struct sbuf *b, size_t more)
{
	size_t cap = b->cap ? b->cap : 256;
	char *np;

	if (b->oom || b->len + more <= b->cap)
		return;
	while (cap < b->len + more)
		cap *= 2;
	np = realloc(b->p, cap);
	if (!np) {
		b->oom = 1;
		return;
	}
	b->p = np;
	b->cap = cap;
}

static void sb_put(struct sbuf *b, const void *s, size_t n)
{
	sb_grow(b, n);
	if (b->oom)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

static void sb_u64(struct sbuf *b, uint64_t v)
{
	char tmp[24];

	sb_put(b, tmp, (size_t)snprintf(tmp, sizeof(tmp), "%" PRIu64, v));
}

/* A JSON string as serde_json writes it: escape '"', '\\' and the control
 * characters (short forms \b \t \n \f \r, else \u00xx in lower-case hex);
 * everything else, non-ASCII UTF-8 and DEL included, goes through raw. */
static void sb_json_str(struct sbuf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	sb_put(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[6] = { '\\', 'u', '0', '0', 0, 0 };

		switch (c) {
		case '"': sb_put(b, "\\\"", 2); break;
		case '\\': sb_put(b, "\\\\", 2); break;
		case '\b': sb_put(b, "\\b", 2); break;
		case '\t': sb_put(b, "\\t", 2); break;
		case '\n': sb_put(b, "\\n", 2); break;
		case '\f': sb_put(b, "\\f", 2); break;
		case '\r': sb_put(b, "\\r", 2); break;
		default:
			if (c < 0x20) {
				esc[4] = hex[c >> 4];
				esc[5] = hex[c & 15];
				sb_put(b, esc, 6);
			} else
				sb_put(b, s, 1);
		}
	}
	sb_put(b, "\"", 1);
}

/* qsort_r comparators over indexes into the mk_st_out_tensor array. */
static int cmp_out_name(const void *a, const void *b, void *ctx)
{
	const struct mk_st_out_tensor *t = ctx;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* The reference's prepare(): dtype descending, then name ascending. */
static int cmp_out_order(const void *a, const void *b, void *ctx)
{
	const struct mk_st_out_tensor *x = (const struct mk_st_out_tensor *)ctx +
					   *(const size_t *)a;
	const struct mk_st_out_tensor *y = (const struct mk_st_out_tensor *)ctx +
					   *(const size_t *)b;

	if (x->dtype != y->dtype)
		return x->dtype > y->dtype ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int header_build(struct mk_st_out_tensor *t, size_t n, size_t align, bool as_given, uint8_t **hdr,
			size_t *hdr_len, size_t *order, struct mk_err *err)
{
	struct sbuf b = { 0 };
	size_t *perm = NULL;
	uint64_t off = 0, hlen;
	int rc;

	*hdr = NULL;
	*hdr_len = 0;
	if (align < 8 || (align & (align - 1))) {
		rc = mk_err_set(err, MK_EINVAL, "header alignment %zu is not a "
				"power of two >= 8", align);
		goto out;
	}
	perm = malloc((n ? n : 1) * sizeof(*perm));
	if (!perm)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		uint64_t nelem = 1;

		perm[i] = i;
		if (!t[i].name || !strcmp(t[i].name, "__metadata__")) {
			rc = mk_err_set(err, MK_EINVAL, "tensor name '%s' is reserved "
					"for the header's metadata", t[i].name ?
					t[i].name : "(null)");
			goto out;
		}
		if (mk__st_utf8_check((const uint8_t *)t[i].name, strlen(t[i].name)) !=
		    strlen(t[i].name)) {
			rc = mk_err_set(err, MK_EINVAL, "tensor name '%s' is not "
					"valid UTF-8", t[i].name);
			goto out;
		}
		if (!mk_dtype_name(t[i].dtype) || t[i].ndim > MK_MAX_DIMS ||
		    (t[i].ndim && !t[i].shape)) {
			rc = mk_err_set(err, MK_EINVAL, "tensor '%s': invalid dtype "
					"or shape", t[i].name);
			goto out;
		}
		if (mk_shape_nelem(t[i].ndim, t[i].shape, &nelem)) {
			rc = mk_err_set(err, MK_EINVAL, "tensor '%s': element "
					"count overflows 64 bits "
					"(ValidationOverflow)", t[i].name);
			goto out;
		}
		if (mk_dtype_nbytes(t[i].dtype, nelem, &t[i].nbytes) < 0) {
			rc = mk_err_set(err, MK_EINVAL, "tensor '%s': %" PRIu64
					" elements of %s are not a whole number of "
					"bytes (MisalignedSlice)", t[i].name, nelem,
					mk_dtype_name(t[i].dtype));
			goto out;
		}
	}
	qsort_r(perm, n, sizeof(*perm), cmp_out_name, t);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(t[perm[i - 1]].name, t[perm[i]].name)) {
			rc = mk_err_set(err, MK_EINVAL, "tensor '%s' is named twice",
					t[perm[i]].name);
			goto out;
		}
	if (as_given)
		for (size_t i = 0; i < n; i++)
			perm[i] = i;
	else
		qsort_r(perm, n, sizeof(*perm), cmp_out_order, t);

	sb_put(&b, "\0\0\0\0\0\0\0\0", 8);
	sb_str(&b, "{\"__metadata__\":{\"format\":\"pt\"}");
	for (size_t i = 0; i < n; i++) {
		struct mk_st_out_tensor *x = &t[perm[i]];

		x->begin = off;
		if (__builtin_add_overflow(off, x->nbytes, &off)) {
			rc = mk_err_set(err, MK_EINVAL, "tensor '%s': data offsets "
					"overflow 64 bits", x->name);
			goto out;
		}
		sb_put(&b, ",", 1);
		sb_json_str(&b, x->name);
		sb_str(&b, ":{\"dtype\":\"");
		sb_str(&b, mk_dtype_name(x->dtype));
		sb_str(&b, "\",\"shape\":[");
		for (unsigned d = 0; d < x->ndim; d++) {
			if (d)
				sb_put(&b, ",", 1);
			sb_u64(&b, x->shape[d]);
		}
		sb_str(&b, "],\"data_offsets\":[");
		sb_u64(&b, x->begin);
		sb_put(&b, ",", 1);
		sb_u64(&b, off);
		sb_str(&b, "]}");
	}
	sb_put(&b, "}", 1);
	/* Pad with spaces so the data section (8 + N) starts aligned; for
	 * align 8 this is the reference's "N % 8 == 0". */
	while (!b.oom && b.len % align)
		sb_put(&b, " ", 1);
	if (b.oom)
		goto nomem;
	hlen = b.len - 8;
	if (hlen > MK_ST_MAX_HEADER) {
		rc = mk_err_set(err, MK_EINVAL, "header of %" PRIu64 " bytes exceeds "
				"the limit of %llu (HeaderTooLarge)", hlen,
				MK_ST_MAX_HEADER);
		goto out;
	}
	for (int i = 0; i < 8; i++)
		b.p[i] = (char)(hlen >> (8 * i));
	if (order)
		memcpy(order, perm, n * sizeof(*perm));
	*hdr = (uint8_t *)b.p;
	*hdr_len = b.len;
	b.p = NULL;
	rc = 0;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory building a header");
out:
	free(b.p);
	free(perm);
	return rc;
}

int mk_st_header_build(struct mk_st_out_tensor *t, size_t n, size_t align,
		       uint8_t **hdr, size_t *hdr_len, size_t *order,
		       struct mk_err *err)
{
	return header_build(t, n, align, false, hdr, hdr_len, order, err);
}

int mk_st_header_build_as_given(struct mk_st_out_tensor *t, size_t n, size_t align, uint8_t **hdr,
				size_t *hdr_len, struct mk_err *err)
{
	return header_build(t, n, align, true, hdr, hdr_len, NULL, err);
}
