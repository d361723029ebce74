/* stream.c - frame reader and writer of the mk stream, v1 (mk-stream(5)). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <jansson.h>
#include <zstd.h>
#include <zstd_errors.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "core/mapguard.h"
#include "stream/piecewise.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "io.h"
#include "core/text.h"
#include "core/bug.h"

static void put16(uint8_t *p, uint16_t v) { p[0] = v; p[1] = v >> 8; }
static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = v >> (8 * i); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = v >> (8 * i); }
static uint16_t get16(const uint8_t *p) { return p[0] | (uint16_t)p[1] << 8; }
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

static const char *const known_types[] = {
	MK_FT_HEAD, MK_FT_FILE, MK_FT_JOB, MK_FT_DATA, MK_FT_INPT, MK_FT_END, MK_FT_NOTE,
};

bool mk_frame_type_known(const char *type)
{
	for (size_t i = 0; i < sizeof(known_types) / sizeof(known_types[0]); i++)
		if (!memcmp(type, known_types[i], 4))
			return true;
	return false;
}

static bool type_valid(const uint8_t *t)
{
	for (int i = 0; i < 4; i++)
		if (!((t[i] >= 'A' && t[i] <= 'Z') || (t[i] >= 'a' && t[i] <= 'z') || t[i] == ' '))
			return false;
	return t[0] != ' ';
}

/* ---------------------------------------------------------------- chunks */

void mk_chunk_encode(const struct mk_chunk *c, uint8_t out[MK_CHUNK_HDR])
{
	put32(out, c->id);
	put16(out + 4, c->input);
	put16(out + 6, c->pass);
	put32(out + 8, (uint32_t)c->dtype);
	put32(out + 12, 0);
	put64(out + 16, c->row_begin);
	put64(out + 24, c->row_count);
	put64(out + 32, c->elem_begin);
	put64(out + 40, c->elem_count);
}

int mk_chunk_decode(const uint8_t *p, size_t len, struct mk_chunk *c,
		    struct mk_err *err)
{
	uint32_t dt;
	uint64_t nb;

	if (len < MK_CHUNK_HDR)
		return mk_err_set(err, MK_EFORMAT, "chunk payload of %zu bytes is shorter than its %d-byte header",
				  len, MK_CHUNK_HDR);
	c->id = get32(p);
	c->input = get16(p + 4);
	c->pass = get16(p + 6);
	dt = get32(p + 8);
	if (dt >= MK_DT_COUNT)
		return mk_err_set(err, MK_EFORMAT, "chunk has unknown dtype code %u", dt);
	c->dtype = (enum mk_dtype)dt;
	c->row_begin = get64(p + 16);
	c->row_count = get64(p + 24);
	c->elem_begin = get64(p + 32);
	c->elem_count = get64(p + 40);
	c->data = p + MK_CHUNK_HDR;
	c->data_len = len - MK_CHUNK_HDR;
	if (mk_dtype_nbytes(c->dtype, c->elem_count, &nb) || nb != c->data_len)
		return mk_err_set(err, MK_EFORMAT, "chunk of %llu %s elements carries %zu data bytes",
				  (unsigned long long)c->elem_count, mk_dtype_name(c->dtype), c->data_len);
	return 0;
}

int mk_chunker_init(struct mk_chunker *ck, enum mk_dtype dt, unsigned ndim,
		    const uint64_t *shape, size_t max_bytes, struct mk_err *err)
{
	uint64_t nelem = 1, row_len = 1, bytes, g, e, bits = mk_dtype_bits(dt);

	memset(ck, 0, sizeof(*ck));
	if (!bits)
		return mk_err_set(err, MK_EINVAL, "unknown dtype");
	if (mk_shape_nelem(ndim, shape, &nelem))
		return mk_err_set(err, MK_EFORMAT, "tensor shape overflows");
	row_len = mk_shape_row_len(ndim, shape);
	if (mk_dtype_nbytes(dt, nelem, &bytes))
		return mk_err_set(err, MK_EFORMAT, "%llu elements of %s are not a whole number of bytes",
				  (unsigned long long)nelem, mk_dtype_name(dt));
	ck->dtype = dt;
	ck->nelem = nelem;
	ck->nrows = ndim ? shape[0] : 1;
	ck->row_len = ndim > 1 ? row_len : 1;
	g = mk_dtype_elem_granule(dt);
	e = max_bytes / bits * 8 + max_bytes % bits * 8 / bits; /* elements that fit one chunk */
	e -= e % g;
	if (e == 0)
		return mk_err_set(err, MK_EINVAL, "chunk size of %zu bytes is too small for %s",
				  max_bytes, mk_dtype_name(dt));
	if (ck->row_len == 0 || (ck->row_len * bits) % 8) {
		/* no elements, or rows that end inside a byte (sub-byte
		 * types): flat chunks of whole bytes */
		ck->step = e;
	} else if (ck->row_len <= e) {
		ck->step = (e / ck->row_len) * ck->row_len;  /* whole rows */
	} else {
		ck->step = e;                 /* pieces of one long row */
		ck->split_rows = true;
	}
	return 0;
}

void mk_chunk_set_rows(struct mk_chunk *c, uint64_t row_len)
{
	uint64_t rl = row_len ? row_len : 1;

	c->row_begin = c->elem_begin / rl;
	c->row_count = (c->elem_begin + c->elem_count + rl - 1) / rl - c->row_begin;
}

int mk_chunker_next(struct mk_chunker *ck, struct mk_chunk *c)
{
	uint64_t n, end;

	if (ck->next >= ck->nelem)
		return 0;
	n = ck->step;
	if (ck->split_rows) {
		uint64_t row_end = (ck->next / ck->row_len + 1) * ck->row_len;
		if (n > row_end - ck->next)
			n = row_end - ck->next;
	}
	if (n > ck->nelem - ck->next)
		n = ck->nelem - ck->next;
	end = ck->next + n;
	c->dtype = ck->dtype;
	c->elem_begin = ck->next;
	c->elem_count = n;
	mk_chunk_set_rows(c, ck->row_len);
	ck->next = end;
	return 1;
}

/* ------------------------------------------------------------ file names */

int mk_file_name_check(const char *name, size_t len, struct mk_err *err)
{
	size_t i = 0, start;
	char ex[256];

	if (len == 0)
		return mk_err_set(err, MK_EFORMAT, "file name is empty");
	if (memchr(name, '\0', len))
		return mk_err_set(err, MK_EFORMAT, "file name contains a NUL byte");
	/* names are printed (mk-cat, messages) and created: printable UTF-8 only */
	if (!mk_text_printable(name, len))
		return mk_err_set(err, MK_EFORMAT, "file name '%s' is not printable UTF-8 (a control "
				  "character or a byte that is not UTF-8)",
				  mk_text_escape(name, len, ex, sizeof(ex)));
	if (name[0] == '/')
		return mk_err_set(err, MK_EFORMAT, "file name '%.*s' is absolute", (int)len, name);
	if (memchr(name, '\\', len))
		return mk_err_set(err, MK_EFORMAT, "file name '%.*s' contains a backslash", (int)len, name);
	while (i <= len) {
		start = i;
		while (i < len && name[i] != '/')
			i++;
		size_t n = i - start;
		if (n == 0 || (n == 1 && name[start] == '.') ||
		    (n == 2 && name[start] == '.' && name[start + 1] == '.'))
			return mk_err_set(err, MK_EFORMAT,
					  "file name '%.*s' has an empty, '.' or '..' component",
					  (int)len, name);
		i++;
	}
	return 0;
}

int mk_file_decode(const uint8_t *p, size_t len, struct mk_file_frame *ff,
		   struct mk_err *err)
{
	uint32_t nlen;
	int rc;

	memset(ff, 0, sizeof(*ff));
	if (len < 8)
		return mk_err_set(err, MK_EFORMAT, "FILE payload of %zu bytes is too short", len);
	ff->mode = get32(p);
	nlen = get32(p + 4);
	if (nlen > len - 8 || nlen > PATH_MAX)
		return mk_err_set(err, MK_EFORMAT, "FILE name length %u exceeds the payload", nlen);
	rc = mk_file_name_check((const char *)p + 8, nlen, err);
	if (rc)
		return rc;
	ff->name = strndup((const char *)p + 8, nlen);
	if (!ff->name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	ff->data = p + 8 + nlen;
	ff->len = len - 8 - nlen;
	return 0;
}

int mk_sr_read_exact(struct mk_stream_reader *r, void *buf, size_t n, size_t *have, struct mk_err *err)
{
	*have = 0;
	while (*have < n) {
		size_t got;
		int rc = mk_sr_read_payload(r, (uint8_t *)buf + *have, n - *have, &got, err);
		if (rc)
			return rc;
		if (!got)
			break;
		*have += got;
	}
	return 0;
}

int mk_file_read_head(struct mk_stream_reader *r, const struct mk_frame *f, uint32_t *mode,
		      char name[PATH_MAX + 1], uint64_t *size, struct mk_err *err)
{
	unsigned long long idx = (unsigned long long)f->index;
	uint8_t hdr[8];
	uint32_t nlen;
	size_t have;
	int rc;

	if (!f->piecewise || memcmp(f->type, MK_FT_FILE, 4))
		MK_BUG("mk_file_read_head without a piecewise FILE frame");
	if ((rc = mk_sr_read_exact(r, hdr, 8, &have, err)))
		return rc;
	if (have < 8)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): payload of %zu bytes is too short", idx, have);
	*mode = get32(hdr);
	nlen = get32(hdr + 4);
	if (nlen > f->raw_len - 8 || nlen > PATH_MAX)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): name length %u exceeds the payload", idx, nlen);
	if ((rc = mk_sr_read_exact(r, (uint8_t *)name, nlen, &have, err)))
		return rc;
	if (have < nlen)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): payload ends inside the name", idx);
	if ((rc = mk_file_name_check(name, nlen, err)))
		return mk_err_prefix(err, "frame #%llu (FILE): ", idx);
	name[nlen] = '\0';
	*size = f->raw_len - 8 - nlen;
	return 0;
}

/* ---------------------------------------------------------------- reader */

struct counts {
	uint64_t frames, files, jobs, chunks, ancillary, data_bytes;
};

struct mk_stream_reader {
	struct mk_io io;
	char *label;
	unsigned flags;
	uint64_t index;          /* number of frames returned so far */
	uint64_t offset;         /* bytes consumed */
	bool ended;
	bool broken;             /* a piecewise read failed */
	uint8_t *wire;           /* header + payload */
	size_t wire_cap;
	struct mk__lent lent;    /* or the last frame, lent by a channel */
	uint8_t *raw;            /* decompressed payload */
	size_t raw_cap;
	ZSTD_DCtx *dctx;
	struct counts n;
	struct mk_sr_bounds b;
	/* the piecewise frame being read (mk_sr_read_payload) */
	struct {
		bool on, zstd, zdone;
		bool wire;           /* read as transmitted (mk_sr_read_wire) */
		bool hdr_sent;       /* ... and its header delivered */
		uint8_t hdr[MK_FRAME_HDR];
		char type[5];
		bool critical;
		uint64_t idx, len, raw_len;
		uint64_t left;       /* payload bytes as transmitted not read yet */
		uint64_t out;        /* decoded bytes delivered */
		uint32_t want, crc;
		bool nosum;          /* MK_CSUM_NONE: nothing to check */
		ZSTD_inBuffer in;    /* over r->wire */
	} pw;
	ZSTD_DStream *ds;
	/* MK_SR_SPLICE_DATA: 0 untried, 1 the input is a pipe, -1 no splice */
	int splice;
	void *view;              /* mk_sr_splice_payload's mapping, or NULL */
	size_t view_len;
};

static ssize_t sr_read(struct mk_stream_reader *r, void *buf, size_t len)
{
	return mk_io_read(&r->io, buf, len);
}

static int grow(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : 65536;
	while (n < need)
		n *= 2;
	uint8_t *p = realloc(*buf, n);
	if (!p)
		return -1;
	*buf = p;
	*cap = n;
	return 0;
}

void mk_fd_grow_pipe(int fd)
{
	/* A pipe holding two whole 4 MiB chunks lets producer and consumer
	 * run side by side.  Above /proc/sys/fs/pipe-max-size (1 MiB by
	 * default) this needs CAP_SYS_RESOURCE; then settle for the maximum.
	 * Fails harmlessly (EBADF/EINVAL) when fd is not a pipe. */
	int max = 1 << 20;
	struct stat st;
	FILE *f;

	if (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode))
		return;
	if (fcntl(fd, F_SETPIPE_SZ, 8 << 20) >= 0)
		return;
	f = fopen("/proc/sys/fs/pipe-max-size", "r");
	if (f) {
		if (fscanf(f, "%d", &max) != 1)
			max = 1 << 20;
		fclose(f);
	}
	if (max > (8 << 20))
		max = 8 << 20;
	(void)fcntl(fd, F_SETPIPE_SZ, max);
}

int mk_sr_open(struct mk_stream_reader **out, int fd, const char *label,
	       unsigned flags, struct mk_err *err)
{
	return mk_sr_open_io(out, mk_io_fd(fd), label, flags, err);
}

int mk_sr_open_io(struct mk_stream_reader **out, struct mk_io in, const char *label,
		  unsigned flags, struct mk_err *err)
{
	struct mk_stream_reader *r;
	uint8_t pre[MK_STREAM_PRELUDE];
	ssize_t got;
	int rc = 0;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	r->io = in;
	r->flags = flags;
	r->label = strdup(label ? label : "stream");
	if (!r->label) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	mk_io_prepare(&r->io);
	got = sr_read(r, pre, sizeof(pre));
	if (got < 0) {
		rc = mk_err_sys(err, (int)-got, "%s: reading the stream prelude", r->label);
		goto out;
	}
	if (got == 0) {
		rc = mk_err_set(err, MK_ECORRUPT, "%s: empty input, expected an mk stream (did the producer fail?)",
				r->label);
		goto out;
	}
	if ((size_t)got < sizeof(pre) || memcmp(pre, MK_STREAM_MAGIC, 8)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: not an mk stream (bad magic)", r->label);
		goto out;
	}
	if (get16(pre + 8) != MK_STREAM_MAJOR) {
		rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: stream version %u.%u, this mk reads version %d",
				r->label, get16(pre + 8), get16(pre + 10), MK_STREAM_MAJOR);
		goto out;
	}
	r->offset = sizeof(pre);
out:
	if (rc)
		mk_sr_free(r);
	else
		*out = r;
	return rc;
}

void mk_sr_set_bounds(struct mk_stream_reader *r, const struct mk_sr_bounds *b)
{
	r->b = *b;
}

void mk_sr_get_bounds(const struct mk_stream_reader *r, struct mk_sr_bounds *b)
{
	*b = r->b;
}

void mk_sr_bound_by_head(struct mk_stream_reader *r, const struct mk_manifest *m)
{
	uint64_t big = 0;

	if (m->chunk_bytes) {
		uint64_t c = m->chunk_bytes > MK_CHUNK_FLOOR ? m->chunk_bytes : MK_CHUNK_FLOOR;
		r->b.chunk = c > (MK_FRAME_MAX - MK_CHUNK_HDR) / MK_CHUNK_WIDEN ? MK_FRAME_MAX :
			MK_CHUNK_HDR + MK_CHUNK_WIDEN * c;
	}
	for (size_t i = 0; i < m->nfiles; i++)
		if (m->files[i].size > big)
			big = m->files[i].size;
	r->b.file = big > MK_FRAME_MAX - 8 - PATH_MAX ? MK_FRAME_MAX : 8 + PATH_MAX + big;
}

/* The largest raw_len a frame of this type may declare, and why. */
static uint64_t type_bound(const struct mk_stream_reader *r, const char *type, const char **why)
{
	*why = "the largest frame";
	if (!memcmp(type, MK_FT_HEAD, 4))
		return *why = "a HEAD", MK_FRAME_HEAD_MAX;
	if (!memcmp(type, MK_FT_JOB, 4))
		return *why = "a JOB", MK_FRAME_JOB_MAX;
	if (!memcmp(type, MK_FT_END, 4))
		return *why = "an END", MK_FRAME_END_MAX;
	if (r->b.chunk && (!memcmp(type, MK_FT_DATA, 4) || !memcmp(type, MK_FT_INPT, 4)))
		return *why = "a chunk of the HEAD's chunk_bytes", r->b.chunk;
	if (r->b.file && !memcmp(type, MK_FT_FILE, 4))
		return *why = "the largest file the HEAD announces", r->b.file;
	return MK_FRAME_MAX;
}

/* A frame read to its end and checked: count it. */
static void accept_frame(struct mk_stream_reader *r, const char *type, bool critical, uint64_t raw_len,
			 uint64_t wire_len)
{
	r->offset += wire_len;
	r->index++;
	if (!memcmp(type, MK_FT_END, 4))
		return;
	r->n.frames++;
	if (!critical)
		r->n.ancillary++;
	else if (!memcmp(type, MK_FT_FILE, 4))
		r->n.files++;
	else if (!memcmp(type, MK_FT_JOB, 4))
		r->n.jobs++;
	else if (!memcmp(type, MK_FT_DATA, 4) || !memcmp(type, MK_FT_INPT, 4)) {
		r->n.chunks++;
		r->n.data_bytes += raw_len >= MK_CHUNK_HDR ? raw_len - MK_CHUNK_HDR : 0;
	}
}

/* Read up to n payload bytes of the piecewise frame into buf, checksummed. */
static int pw_read(struct mk_stream_reader *r, uint8_t *buf, size_t n, struct mk_err *err)
{
	ssize_t got = sr_read(r, buf, n);

	if (got < 0)
		return mk_err_sys(err, (int)-got, "%s: frame #%llu: read", r->label, (unsigned long long)r->pw.idx);
	if ((size_t)got < n)
		return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): truncated payload (%llu of %llu bytes)",
				  r->label, (unsigned long long)r->pw.idx, r->pw.type,
				  (unsigned long long)(r->pw.len - r->pw.left + (uint64_t)got),
				  (unsigned long long)r->pw.len);
	if (!r->pw.nosum)
		r->pw.crc = mk_crc32c(r->pw.crc, buf, n);
	r->pw.left -= n;
	return 0;
}

static int pw_finish(struct mk_stream_reader *r, struct mk_err *err)
{
	unsigned long long idx = (unsigned long long)r->pw.idx;

	if (r->pw.zstd && !r->pw.wire && (!r->pw.zdone || r->pw.out != r->pw.raw_len))
		return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): zstd payload decodes to %llu bytes%s, the header says %llu",
				  r->label, idx, r->pw.type, (unsigned long long)r->pw.out,
				  r->pw.zdone ? "" : " and stops inside its zstd frame",
				  (unsigned long long)r->pw.raw_len);
	if (!r->pw.nosum && r->pw.crc != r->pw.want)
		return mk_err_set(err, MK_ECORRUPT,
				  "%s: frame #%llu (%s) at offset %llu: checksum mismatch (crc32c %08x, expected %08x)",
				  r->label, idx, r->pw.type, (unsigned long long)r->offset, r->pw.crc, r->pw.want);
	r->pw.on = false;
	accept_frame(r, r->pw.type, r->pw.critical, r->pw.raw_len, MK_FRAME_HDR + r->pw.len);
	return 0;
}

static int pw_read_payload(struct mk_stream_reader *r, uint8_t *buf, size_t cap, size_t *got,
			   struct mk_err *err)
{
	unsigned long long idx = (unsigned long long)r->pw.idx;
	int rc;

	*got = 0;
	if (!r->pw.zstd) {
		size_t n = r->pw.left < cap ? (size_t)r->pw.left : cap;
		if (!n)
			return pw_finish(r, err);
		if ((rc = pw_read(r, buf, n, err)))
			return rc;
		r->pw.out += n;
		*got = n;
		return 0;
	}
	for (;;) {
		uint8_t one;
		uint64_t room = r->pw.raw_len - r->pw.out;
		/* one byte past raw_len is room enough to catch a bomb */
		ZSTD_outBuffer out = { room ? buf : &one, room ? (room < cap ? (size_t)room : cap) : 1, 0 };
		size_t z;

		if (r->pw.in.pos == r->pw.in.size && r->pw.left) {
			size_t n = r->pw.left < r->wire_cap ? (size_t)r->pw.left : r->wire_cap;
			if ((rc = pw_read(r, r->wire, n, err)))
				return rc;
			r->pw.in = (ZSTD_inBuffer){ r->wire, n, 0 };
		}
		if (r->pw.zdone) {
			if (r->pw.in.pos < r->pw.in.size || r->pw.left)
				return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): bytes after the zstd frame in the payload",
						  r->label, idx, r->pw.type);
			return pw_finish(r, err);
		}
		z = ZSTD_decompressStream(r->ds, &out, &r->pw.in);
		if (ZSTD_isError(z))
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): zstd payload does not decode: %s%s",
					  r->label, idx, r->pw.type, ZSTD_getErrorName(z),
					  ZSTD_getErrorCode(z) == ZSTD_error_frameParameter_windowTooLarge ?
					  " (its window is larger than the memory bound allows)" : "");
		if (out.pos > room)
			return mk_err_set(err, MK_ECORRUPT,
					  "%s: frame #%llu (%s): zstd payload inflates past the %llu bytes its header declares (a decompression bomb?)",
					  r->label, idx, r->pw.type, (unsigned long long)r->pw.raw_len);
		if (z == 0)
			r->pw.zdone = true;
		r->pw.out += out.pos;
		if (out.pos) {
			*got = out.pos;
			return 0;
		}
		if (!r->pw.zdone && r->pw.in.pos == r->pw.in.size && !r->pw.left)
			return pw_finish(r, err); /* stops inside the zstd frame */
	}
}

int mk_sr_read_payload(struct mk_stream_reader *r, void *buf, size_t cap, size_t *got,
		       struct mk_err *err)
{
	int rc;

	if (!r->pw.on)
		MK_BUG("mk_sr_read_payload without a piecewise frame");
	if (!cap)
		MK_BUG("mk_sr_read_payload into an empty buffer");
	if (r->pw.wire)
		MK_BUG("mk_sr_read_payload after mk_sr_read_wire");
	rc = pw_read_payload(r, buf, cap, got, err);
	if (rc) {
		r->pw.on = false;
		r->broken = true;
	}
	return rc;
}

int mk_sr_read_wire(struct mk_stream_reader *r, void *buf, size_t cap, size_t *got,
		    struct mk_err *err)
{
	int rc = 0;

	if (!r->pw.on)
		MK_BUG("mk_sr_read_wire without a piecewise frame");
	if (!r->pw.hdr_sent && cap < MK_FRAME_HDR)
		MK_BUG("mk_sr_read_wire: the header needs MK_FRAME_HDR bytes");
	if (r->pw.hdr_sent && r->pw.left && !cap)
		MK_BUG("mk_sr_read_wire into an empty buffer");
	if (!r->pw.wire && r->pw.left != r->pw.len)
		MK_BUG("mk_sr_read_wire after mk_sr_read_payload");
	r->pw.wire = true;
	*got = 0;
	if (!r->pw.hdr_sent) {
		memcpy(buf, r->pw.hdr, MK_FRAME_HDR);
		r->pw.hdr_sent = true;
		*got = MK_FRAME_HDR;
		return 0;
	}
	if (r->pw.left) {
		size_t n = r->pw.left < cap ? (size_t)r->pw.left : cap;
		if (!(rc = pw_read(r, buf, n, err)))
			*got = n;
	} else {
		rc = pw_finish(r, err);
	}
	if (rc) {
		r->pw.on = false;
		r->broken = true;
	}
	return rc;
}

/* With MK_SR_SPLICE_DATA: is this frame a raw DATA frame to deliver
 * piecewise, for mk_sr_splice_payload?  Only when the input is a pipe. */
static bool splice_frame(struct mk_stream_reader *r, const char *type, uint8_t flags, uint64_t raw_len)
{

	if (!(r->flags & MK_SR_SPLICE_DATA) || memcmp(type, MK_FT_DATA, 4) || (flags & MK_FRAME_F_ZSTD) ||
	    raw_len < MK_CHUNK_HDR + MK_SPLICE_MIN)
		return false;
	if (!r->splice) /* a channel's stand-in descriptor is no pipe: never spliced */
		r->splice = mk_io_pipe_fd(&r->io) >= 0 ? 1 : -1;
	return r->splice > 0;
}

/* The rest of a piecewise payload, n bytes, into out_fd at off by read
 * and pwrite (not checksummed here). */
static int copy_to_fd(struct mk_stream_reader *r, int out_fd, const char *out_label, uint64_t off, size_t n,
		      struct mk_err *err)
{
	size_t piece = n < (1u << 20) ? n : (1u << 20);
	int rc;

	if (grow(&r->wire, &r->wire_cap, piece))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	while (n) {
		size_t k = n < piece ? n : piece;
		ssize_t got = sr_read(r, r->wire, k);
		if (got < 0)
			return mk_err_sys(err, (int)-got, "%s: frame #%llu: read", r->label, (unsigned long long)r->pw.idx);
		if ((size_t)got < k)
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): truncated payload", r->label,
					  (unsigned long long)r->pw.idx, r->pw.type);
		if ((rc = mk_pwrite_all(out_fd, r->wire, k, off, out_label, err)))
			return rc;
		r->pw.left -= k;
		off += k;
		n -= k;
	}
	return 0;
}

static int splice_payload(struct mk_stream_reader *r, int out_fd, const char *out_label, uint64_t off, size_t n,
			  const void **view, struct mk_err *err)
{
	loff_t o = (loff_t)off;
	uint64_t a, pg = (uint64_t)sysconf(_SC_PAGESIZE);
	size_t done = 0;
	int rc;

	while (done < n && r->splice > 0) {
		ssize_t k = splice(r->io.fd, NULL, out_fd, &o, n - done, SPLICE_F_MOVE);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == EXDEV)) {
			r->splice = -1;   /* the rest, and later frames, by read */
			break;
		}
		if (k < 0)
			return mk_err_sys(err, errno, "%s: frame #%llu: moving its data into %s", r->label,
					  (unsigned long long)r->pw.idx, out_label);
		if (k == 0)
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): truncated payload (%llu of %llu bytes)",
					  r->label, (unsigned long long)r->pw.idx, r->pw.type,
					  (unsigned long long)(r->pw.len - r->pw.left + done),
					  (unsigned long long)r->pw.len);
		done += (size_t)k;
		r->pw.left -= (uint64_t)k;
	}
	if (done < n && (rc = copy_to_fd(r, out_fd, out_label, off + done, n - done, err)))
		return rc;
	/* read back what was written, the checksum over it */
	a = off & ~(pg - 1);
	r->view_len = (size_t)(off + n - a);
	r->view = mmap(NULL, r->view_len, PROT_READ, MAP_SHARED, out_fd, (off_t)a);
	if (r->view == MAP_FAILED) {
		r->view = NULL;
		if (grow(&r->raw, &r->raw_cap, n ? n : 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if ((rc = mk_pread_exact(out_fd, r->raw, n, off, out_label, err)))
			return rc;
		*view = r->raw;
	} else {
		*view = (const uint8_t *)r->view + (off - a);
	}
	if (!r->pw.nosum)
		r->pw.crc = mk_crc32c(r->pw.crc, *view, n);
	r->pw.out += n;
	return pw_finish(r, err);
}

int mk_sr_splice_payload(struct mk_stream_reader *r, int out_fd, const char *out_label, uint64_t off, size_t n,
			 const void **view, struct mk_err *err)
{
	int rc;

	if (!r->pw.on || r->pw.zstd || r->pw.wire)
		MK_BUG("mk_sr_splice_payload without a raw piecewise frame");
	if (n != r->pw.left)
		MK_BUG("mk_sr_splice_payload: not the rest of the payload");
	if (r->view) {
		munmap(r->view, r->view_len);
		r->view = NULL;
	}
	*view = NULL;
	rc = splice_payload(r, out_fd, out_label, off, n, view, err);
	if (rc) {
		*view = NULL;
		r->pw.on = false;
		r->broken = true;
	}
	return rc;
}

/* Start reading frame `idx` (header h, checked) piecewise. */
static int pw_start(struct mk_stream_reader *r, const uint8_t *h, struct mk_frame *f, struct mk_err *err)
{
	uint8_t hz[MK_FRAME_HDR];

	memset(&r->pw, 0, sizeof(r->pw));
	memcpy(r->pw.type, f->type, 5);
	r->pw.critical = f->critical;
	r->pw.idx = f->index;
	r->pw.len = r->pw.left = f->len;
	r->pw.raw_len = f->raw_len;
	r->pw.zstd = f->flags & MK_FRAME_F_ZSTD;
	r->pw.want = get32(h + 24);
	f->crc = r->pw.want;
	r->pw.nosum = f->csum == MK_CSUM_NONE;
	memcpy(r->pw.hdr, h, MK_FRAME_HDR);
	memcpy(hz, h, MK_FRAME_HDR);
	put32(hz + 24, 0);
	r->pw.crc = mk_crc32c(0, hz, MK_FRAME_HDR);
	if (r->pw.zstd) {
		unsigned wlog = 27;
		if (!r->ds && !(r->ds = ZSTD_createDStream()))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		ZSTD_DCtx_reset(r->ds, ZSTD_reset_session_and_parameters);
		/* the window is the memory a stream decoder holds: a quarter
		 * of the memory bound at most (1 MiB at least) */
		while (r->b.memory && wlog > 20 && (1ull << wlog) > r->b.memory / 4)
			wlog--;
		ZSTD_DCtx_setParameter(r->ds, ZSTD_d_windowLogMax, (int)wlog);
		if (grow(&r->wire, &r->wire_cap, ZSTD_DStreamInSize()))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	r->pw.on = true;
	f->piecewise = true;
	f->wire = NULL;
	f->payload = NULL;
	f->payload_len = f->raw_len;
	f->csum_ok = true;
	return 1;
}

static int check_end(struct mk_stream_reader *r, uint64_t idx, const uint8_t *p, size_t len,
		     struct mk_err *err)
{
	json_error_t je;
	json_t *o = json_loadb((const char *)p, len, JSON_REJECT_DUPLICATES, &je);
	static const char *const keys[] = { "frames", "files", "jobs", "chunks", "ancillary", "data_bytes" };
	const uint64_t have[] = { r->n.frames, r->n.files, r->n.jobs, r->n.chunks, r->n.ancillary,
				  r->n.data_bytes };
	int rc = 0;

	if (!o || !json_is_object(o)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: END payload is not a JSON object",
				r->label, (unsigned long long)idx);
		goto out;
	}
	for (size_t i = 0; i < 6; i++) {
		json_t *v = json_object_get(o, keys[i]);
		if (!json_is_integer(v) || (uint64_t)json_integer_value(v) != have[i]) {
			rc = mk_err_set(err, MK_ECORRUPT,
					"%s: frame #%llu: END says %s = %lld, the stream carried %llu (frames lost or added)",
					r->label, (unsigned long long)idx, keys[i],
					json_is_integer(v) ? (long long)json_integer_value(v) : -1LL,
					(unsigned long long)have[i]);
			goto out;
		}
	}
out:
	json_decref(o);
	return rc;
}

int mk_sr_next(struct mk_stream_reader *r, struct mk_frame *f, struct mk_err *err)
{
	uint8_t *h;
	ssize_t got;
	uint64_t len, raw_len, idx = r->index;
	uint32_t want, have;
	bool taken = false;

	memset(f, 0, sizeof(*f));
	mk_frame_keep_release(&r->lent.keep);   /* the last frame's, unless kept */
	if (r->broken)
		return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu: the stream is unusable after an error in it",
				  r->label, (unsigned long long)idx);
	while (r->pw.on) {
		/* the caller left a piecewise payload unread: drain, verified */
		uint8_t sink[4096];
		size_t n;
		int rc = r->pw.wire ? mk_sr_read_wire(r, sink, sizeof(sink), &n, err) :
				      mk_sr_read_payload(r, sink, sizeof(sink), &n, err);
		if (rc)
			return rc;
		idx = r->index;
	}
	if (r->ended) {
		uint8_t extra;
		got = sr_read(r, &extra, 1);
		if (got < 0)
			return mk_err_sys(err, (int)-got, "%s: reading past the END frame", r->label);
		if (got > 0)
			return mk_err_set(err, MK_EFORMAT, "%s: bytes after the END frame (offset %llu)",
					  r->label, (unsigned long long)r->offset);
		return 0;
	}
	if (grow(&r->wire, &r->wire_cap, MK_FRAME_HDR))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	h = r->wire;
	got = sr_read(r, h, MK_FRAME_HDR);
	if (got < 0)
		return mk_err_sys(err, (int)-got, "%s: frame #%llu: read", r->label, (unsigned long long)idx);
	if (got == 0 && idx == 0)
		return mk_err_set(err, MK_ECORRUPT,
				  "%s: stream ended after the prelude without an END frame (truncated, or the producer failed)",
				  r->label);
	if (got == 0)
		return mk_err_set(err, MK_ECORRUPT,
				  "%s: stream ended after frame #%llu without an END frame (truncated, or the producer failed)",
				  r->label, (unsigned long long)(idx - 1));
	if (got < MK_FRAME_HDR)
		return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu: truncated header (%zd of %d bytes)",
				  r->label, (unsigned long long)idx, got, MK_FRAME_HDR);
	if (!type_valid(h))
		return mk_err_set(err, MK_EFORMAT, "%s: frame #%llu at offset %llu: invalid frame type bytes",
				  r->label, (unsigned long long)idx, (unsigned long long)r->offset);
	memcpy(f->type, h, 4);
	f->type[4] = '\0';
	f->critical = h[0] >= 'A' && h[0] <= 'Z';
	f->flags = h[4];
	f->csum = h[5];
	len = get64(h + 8);
	raw_len = get64(h + 16);
	if (f->flags & ~MK_FRAME_F_ZSTD)
		return mk_err_set(err, MK_EFORMAT, "%s: frame #%llu (%s): unknown flags 0x%02x",
				  r->label, (unsigned long long)idx, f->type, f->flags);
	/* algorithm 0 only between the threads of one process (a channel) */
	if (f->csum != MK_CSUM_CRC32C && !(f->csum == MK_CSUM_NONE && mk_io_in_memory(&r->io)))
		return mk_err_set(err, MK_EFORMAT, "%s: frame #%llu (%s): unknown checksum algorithm %u",
				  r->label, (unsigned long long)idx, f->type, f->csum);
	if (len > MK_FRAME_MAX || raw_len > MK_FRAME_MAX ||
	    (!(f->flags & MK_FRAME_F_ZSTD) && len != raw_len))
		return mk_err_set(err, MK_EFORMAT, "%s: frame #%llu (%s): bad payload length %llu/%llu",
				  r->label, (unsigned long long)idx, f->type, (unsigned long long)len,
				  (unsigned long long)raw_len);
	if (f->critical && !mk_frame_type_known(f->type))
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "%s: frame #%llu: unknown critical frame type '%s' (stream from a newer mk?)",
				  r->label, (unsigned long long)idx, f->type);
	{
		/* bounded before any payload byte is read or inflated */
		const char *why;
		uint64_t bound = type_bound(r, f->type, &why);
		uint64_t hold = len + ((f->flags & MK_FRAME_F_ZSTD) ? raw_len : 0);
		bool whole = !((r->flags & MK_SR_PIECEWISE_FILE) && (!memcmp(f->type, MK_FT_FILE, 4) || !f->critical));
		bool spliced = whole && splice_frame(r, f->type, f->flags, raw_len);
		if (raw_len > bound)
			return mk_err_set(err, MK_EFORMAT,
					  "%s: frame #%llu (%s): declares a payload of %llu bytes, more than the %llu bytes of %s",
					  r->label, (unsigned long long)idx, f->type, (unsigned long long)raw_len,
					  (unsigned long long)bound, why);
		if ((f->flags & MK_FRAME_F_ZSTD) && len > ZSTD_compressBound(raw_len))
			return mk_err_set(err, MK_EFORMAT,
					  "%s: frame #%llu (%s): %llu compressed bytes cannot decode to the %llu bytes declared",
					  r->label, (unsigned long long)idx, f->type, (unsigned long long)len,
					  (unsigned long long)raw_len);
		if (whole && r->b.memory && hold > r->b.memory)
			return mk_err_set(err, MK_ENOMEM,
					  "%s: frame #%llu (%s): holding its %llu bytes needs more than the memory budget of %llu bytes",
					  r->label, (unsigned long long)idx, f->type, (unsigned long long)hold,
					  (unsigned long long)r->b.memory);
		if (!whole || spliced) {
			f->len = len;
			f->raw_len = raw_len;
			f->index = idx;
			return pw_start(r, h, f, err);
		}
	}
	{
		uint64_t have_n = 0;
		/* from a channel, the frame's buffer itself when it can be had */
		if (len && mk_io_take(&r->io, (size_t)len, &r->wire, &r->wire_cap, &r->lent)) {
			have_n = len;
			taken = true;
		}
		while (have_n < len) {
			/* grow with the bytes that arrive, not with the claim */
			uint64_t lim = have_n < (1u << 20) ? (1u << 20) : have_n * 2;
			uint64_t target = len < lim ? len : lim;
			if (grow(&r->wire, &r->wire_cap, MK_FRAME_HDR + target))
				return mk_err_set(err, MK_ENOMEM, "%s: frame #%llu: out of memory for %llu bytes",
						  r->label, (unsigned long long)idx, (unsigned long long)len);
			got = sr_read(r, r->wire + MK_FRAME_HDR + have_n, target - have_n);
			if (got < 0)
				return mk_err_sys(err, (int)-got, "%s: frame #%llu: read", r->label, (unsigned long long)idx);
			have_n += (uint64_t)got;
			if (have_n < target)
				break;
		}
		h = r->lent.keep.map ? r->lent.frame : r->wire;
		if (have_n < len)
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): truncated payload (%llu of %llu bytes)",
					  r->label, (unsigned long long)idx, f->type, (unsigned long long)have_n,
					  (unsigned long long)len);
	}
	want = get32(h + 24);
	if (taken || f->csum == MK_CSUM_NONE) {
		/* the buffer its writer checksummed, or one it did not, handed
		 * over in this process's memory: no transmission to check */
		have = want;
	} else {
		put32(h + 24, 0);
		have = mk_crc32c(0, h, MK_FRAME_HDR + len);
		put32(h + 24, want);
	}
	f->crc = want;
	f->csum_ok = want == have;
	if (!f->csum_ok && !(r->flags & MK_SR_NO_VERIFY))
		return mk_err_set(err, MK_ECORRUPT,
				  "%s: frame #%llu (%s) at offset %llu: checksum mismatch (crc32c %08x, expected %08x)",
				  r->label, (unsigned long long)idx, f->type, (unsigned long long)r->offset, have,
				  want);
	f->len = len;
	f->raw_len = raw_len;
	f->wire = h;
	f->wire_len = MK_FRAME_HDR + len;
	f->index = idx;
	if (f->flags & MK_FRAME_F_ZSTD) {
		size_t z;
		if (!f->csum_ok)
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): bad checksum on a compressed frame",
					  r->label, (unsigned long long)idx, f->type);
		if (!r->dctx && !(r->dctx = ZSTD_createDCtx()))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (ZSTD_getFrameContentSize(h + MK_FRAME_HDR, len) != raw_len)
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): zstd payload does not decode to %llu bytes",
					  r->label, (unsigned long long)idx, f->type, (unsigned long long)raw_len);
		if (grow(&r->raw, &r->raw_cap, raw_len ? raw_len : 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		z = ZSTD_decompressDCtx(r->dctx, r->raw, raw_len, h + MK_FRAME_HDR, len);
		if (ZSTD_isError(z) || z != raw_len)
			return mk_err_set(err, MK_ECORRUPT, "%s: frame #%llu (%s): zstd payload does not decode to %llu bytes%s%s",
					  r->label, (unsigned long long)idx, f->type, (unsigned long long)raw_len,
					  ZSTD_isError(z) ? ": " : "", ZSTD_isError(z) ? ZSTD_getErrorName(z) : "");
		f->payload = r->raw;
	} else {
		f->payload = h + MK_FRAME_HDR;
	}
	f->payload_len = raw_len;
	if (!memcmp(f->type, MK_FT_END, 4)) {
		int rc = check_end(r, idx, f->payload, f->payload_len, err);
		if (rc)
			return rc;
		r->ended = true;
	}
	accept_frame(r, f->type, f->critical, raw_len, f->wire_len);
	return 1;
}

bool mk_sr_keep(struct mk_stream_reader *r, const struct mk_frame *f, struct mk_frame_keep *k)
{
	*k = (struct mk_frame_keep){ 0 };
	if (!r->lent.keep.map || f->wire != r->lent.frame)
		return false;
	*k = r->lent.keep;
	r->lent = (struct mk__lent){ 0 };
	return true;
}

bool mk_sr_trade(struct mk_stream_reader *r, const struct mk_frame *f, uint8_t **buf, size_t *cap)
{
	uint8_t *b = r->wire;
	size_t c = r->wire_cap;

	if (!f->wire || f->wire != r->wire || f->piecewise || (f->flags & MK_FRAME_F_ZSTD))
		return false;
	r->wire = *buf;
	r->wire_cap = *buf ? *cap : 0;
	*buf = b;
	*cap = c;
	return true;
}

void mk_sr_free(struct mk_stream_reader *r)
{
	if (!r)
		return;
	free(r->label);
	mk_frame_keep_release(&r->lent.keep);
	free(r->wire);
	free(r->raw);
	ZSTD_freeDCtx(r->dctx);
	ZSTD_freeDStream(r->ds);
	if (r->view)
		munmap(r->view, r->view_len);
	free(r);
}

/* ---------------------------------------------------------------- writer */

struct mk_stream_writer {
	struct mk_io io;
	int level;
	ZSTD_CCtx *cctx;
	uint8_t *zbuf, *cat;
	size_t zcap, catcap;
	uint64_t bytes;
	struct counts n;
	bool ended;
	int splice;   /* mk_sw_chunk_splice: 0 untried, 1 works, -1 not here */
	/* mk_sw_chunk_reserve: the frame being filled in place, or NULL */
	uint8_t *rbuf;
	size_t rcap, rlen;
	char rtype[5];
};

/* A frame header without its checksum field (0 until it is known). */
static void frame_hdr(uint8_t h[MK_FRAME_HDR], const char *type, uint8_t flags, uint8_t csum, uint64_t len,
		      uint64_t raw_len)
{
	memset(h, 0, MK_FRAME_HDR);
	memcpy(h, type, 4);
	h[4] = flags;
	h[5] = csum;
	put64(h + 8, len);
	put64(h + 16, raw_len);
}

/* Whether a frame of this type gets a checksum from this writer: all do,
 * but the chunks (DATA, INPT: the bulk of the bytes) a channel carries,
 * which stay in this process's memory (algorithm 0, mk-stream(5)). */
static bool sw_sums(const struct mk_stream_writer *w, const char *type)
{
	return !mk_io_in_memory(&w->io) || (memcmp(type, MK_FT_DATA, 4) && memcmp(type, MK_FT_INPT, 4));
}

static int write_iov(struct mk_stream_writer *w, struct iovec *iov, int n, struct mk_err *err)
{
	int rc = mk_io_writev(&w->io, iov, n, &w->bytes);

	return rc < 0 ? mk_err_sys(err, -rc, "writing the stream") : 0;
}

bool mk_sw_in_process(const struct mk_stream_writer *w)
{
	return mk_io_in_memory(&w->io);
}

int mk_sw_open(struct mk_stream_writer **out, int fd, int level, struct mk_err *err)
{
	return mk_sw_open_io(out, mk_io_fd(fd), level, err);
}

int mk_sw_open_io(struct mk_stream_writer **out, struct mk_io io, int level, struct mk_err *err)
{
	struct mk_stream_writer *w = calloc(1, sizeof(*w));
	uint8_t pre[MK_STREAM_PRELUDE] = { 0 };
	struct iovec iov = { pre, sizeof(pre) };
	int rc;

	*out = NULL;
	if (!w)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	w->io = io;
	w->level = level;
	mk_io_prepare(&w->io);
	memcpy(pre, MK_STREAM_MAGIC, 8);
	put16(pre + 8, MK_STREAM_MAJOR);
	put16(pre + 10, MK_STREAM_MINOR);
	rc = write_iov(w, &iov, 1, err);
	if (rc) {
		mk_sw_free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static void count_frame(struct counts *n, const char *type, bool critical, uint64_t raw_len)
{
	if (!memcmp(type, MK_FT_END, 4))
		return;
	n->frames++;
	if (!critical)
		n->ancillary++;
	else if (!memcmp(type, MK_FT_FILE, 4))
		n->files++;
	else if (!memcmp(type, MK_FT_JOB, 4))
		n->jobs++;
	else if (!memcmp(type, MK_FT_DATA, 4) || !memcmp(type, MK_FT_INPT, 4)) {
		n->chunks++;
		n->data_bytes += raw_len >= MK_CHUNK_HDR ? raw_len - MK_CHUNK_HDR : 0;
	}
}

int mk_sw_frame(struct mk_stream_writer *w, const char *type,
		const void *const *piece, const size_t *piece_len, size_t n,
		struct mk_err *err)
{
	uint8_t h[MK_FRAME_HDR], flags = 0, csum = sw_sums(w, type) ? MK_CSUM_CRC32C : MK_CSUM_NONE;
	struct iovec iov[9];
	uint64_t raw_len = 0, len;
	uint32_t crc;
	int niov = 0;

	if (n > 8)
		MK_BUG("too many frame pieces");
	if (w->ended)
		MK_BUG("frame after END");
	for (size_t i = 0; i < n; i++)
		raw_len += piece_len[i];
	if (raw_len > MK_FRAME_MAX)
		return mk_err_set(err, MK_EINVAL, "frame payload of %llu bytes is too large",
				  (unsigned long long)raw_len);
	len = raw_len;
	iov[niov++] = (struct iovec){ h, MK_FRAME_HDR };
	if (w->level > 0 && raw_len >= 64) {
		size_t bound = ZSTD_compressBound(raw_len), z;
		const void *src = piece[0];
		if (n > 1) {
			if (grow(&w->cat, &w->catcap, raw_len))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			size_t o = 0;
			for (size_t i = 0; i < n; i++) {
				memcpy(w->cat + o, piece[i], piece_len[i]);
				o += piece_len[i];
			}
			src = w->cat;
		}
		if (!w->cctx && !(w->cctx = ZSTD_createCCtx()))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (grow(&w->zbuf, &w->zcap, bound))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		z = ZSTD_compressCCtx(w->cctx, w->zbuf, bound, src, raw_len, w->level);
		if (ZSTD_isError(z))
			return mk_err_set(err, MK_EIO, "zstd: %s", ZSTD_getErrorName(z));
		if (z < raw_len) {
			flags = MK_FRAME_F_ZSTD;
			len = z;
			iov[niov++] = (struct iovec){ w->zbuf, z };
		}
	}
	if (!flags)
		for (size_t i = 0; i < n; i++)
			if (piece_len[i])
				iov[niov++] = (struct iovec){ (void *)piece[i], piece_len[i] };
	frame_hdr(h, type, flags, csum, len, raw_len);
	crc = 0;
	for (int i = 0; csum == MK_CSUM_CRC32C && i < niov; i++)
		crc = mk_crc32c(crc, iov[i].iov_base, iov[i].iov_len);
	put32(h + 24, crc);
	count_frame(&w->n, type, type[0] >= 'A' && type[0] <= 'Z', raw_len);
	return write_iov(w, iov, niov, err);
}

int mk_sw_frame1(struct mk_stream_writer *w, const char *type, const void *payload,
		 size_t len, struct mk_err *err)
{
	const void *p[1] = { payload };
	size_t l[1] = { len };
	return mk_sw_frame(w, type, p, l, 1, err);
}

int mk_sw_chunk(struct mk_stream_writer *w, const char *type, const struct mk_chunk *c,
		struct mk_err *err)
{
	uint8_t hdr[MK_CHUNK_HDR];
	const void *p[2] = { hdr, c->data };
	size_t l[2] = { MK_CHUNK_HDR, c->data_len };

	mk_chunk_encode(c, hdr);
	return mk_sw_frame(w, type, p, l, 2, err);
}

int mk_sw_chunk_reserve(struct mk_stream_writer *w, const char *type, const struct mk_chunk *c, void **data,
			 struct mk_err *err)
{
	const size_t pre = MK_FRAME_HDR + MK_CHUNK_HDR;
	uint64_t raw_len = MK_CHUNK_HDR + (uint64_t)c->data_len;
	int rc;

	*data = NULL;
	if (!mk_io_in_memory(&w->io) || w->level > 0 || sw_sums(w, type) || raw_len > MK_FRAME_MAX)
		return 0;
	if (w->ended)
		MK_BUG("frame after END");
	if (w->rbuf)
		MK_BUG("a second chunk reserved before the first was committed");
	if ((rc = mk_io_reserve(&w->io, pre + c->data_len, &w->rbuf, &w->rcap)) <= 0)
		return rc < 0 ? mk_err_sys(err, -rc, "writing the stream") : 0;
	frame_hdr(w->rbuf, type, 0, MK_CSUM_NONE, raw_len, raw_len);   /* a chunk on a channel (sw_sums) */
	mk_chunk_encode(c, w->rbuf + MK_FRAME_HDR);
	w->rlen = pre + c->data_len;
	memcpy(w->rtype, type, 4);
	*data = w->rbuf + pre;
	return 1;
}

int mk_sw_chunk_commit(struct mk_stream_writer *w, struct mk_err *err)
{
	uint8_t *b = w->rbuf;
	int rc;

	if (!b)
		MK_BUG("no chunk reserved");
	w->rbuf = NULL;
	count_frame(&w->n, w->rtype, w->rtype[0] >= 'A' && w->rtype[0] <= 'Z', w->rlen - MK_FRAME_HDR);
	if ((rc = mk_io_commit(&w->io, b, w->rlen, w->rcap)) < 0)
		return mk_err_sys(err, -rc, "writing the stream");
	w->bytes += w->rlen;
	return 0;
}

void mk_sw_chunk_unreserve(struct mk_stream_writer *w)
{
	if (w->rbuf)
		mk_io_unreserve(&w->io, w->rbuf, w->rcap);
	w->rbuf = NULL;
}

/* The payload bytes after the sub-header by splice(2) from src_fd; on a
 * refusal (not a pipe, a file system without splice) the rest by write
 * from c->data, and no splice on this writer again. */
static int splice_data(struct mk_stream_writer *w, const struct mk_chunk *c, int src_fd, uint64_t off,
		       struct mk_err *err)
{
	size_t done = 0;
	loff_t o = (loff_t)off;

	while (done < c->data_len && w->splice >= 0) {
		ssize_t n = splice(src_fd, &o, w->io.fd, NULL, c->data_len - done, SPLICE_F_MOVE | SPLICE_F_MORE);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP || errno == EXDEV ||
			      errno == EAGAIN)) {
			w->splice = -1;
			break;
		}
		if (n < 0)
			return mk_err_sys(err, errno, "writing the stream");
		if (n == 0)
			return mk_err_set(err, MK_EIO, "writing the stream: the source file ended %llu bytes early",
					  (unsigned long long)(c->data_len - done));
		w->splice = 1;
		done += (size_t)n;
		w->bytes += (uint64_t)n;
	}
	if (done < c->data_len) {
		struct iovec iov = { (char *)c->data + done, c->data_len - done };
		return write_iov(w, &iov, 1, err);
	}
	return 0;
}

/* The chunk's frame for a channel in a private mapping of its file's
 * bytes: the headers written over the bytes before the data (on the
 * page or two they share, which copy on write; the rest stay the page
 * cache's), the mapping queued as the frame's buffer.  1 when queued,
 * 0 when it cannot be (the caller copies), or an error. */
static int map_chunk(struct mk_stream_writer *w, const char *type, const struct mk_chunk *c, int src_fd,
		     uint64_t off, struct mk_err *err)
{
	const uint64_t pre = MK_FRAME_HDR + MK_CHUNK_HDR;
	uint64_t raw_len = MK_CHUNK_HDR + (uint64_t)c->data_len;
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t a, len;
	uint8_t *m, *h;
	int rc;

	if (pg <= 0 || off < pre)
		return 0;
	a = (off - pre) & ~(uint64_t)(pg - 1);
	len = off + c->data_len - a;
	m = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE, src_fd, (off_t)a);
	if (m == MAP_FAILED)
		return 0;
	/* the consumer reads these pages: a truncated file must not kill it */
	char name[512];
	mk_fd_name(src_fd, name, sizeof(name));
	if (mk_mapguard_add(m, (size_t)len, name) < 0) {
		munmap(m, (size_t)len);
		return 0;
	}
	h = m + (off - pre - a);
	frame_hdr(h, type, 0, MK_CSUM_NONE, raw_len, raw_len);   /* a chunk on a channel (sw_sums) */
	mk_chunk_encode(c, h + MK_FRAME_HDR);
	count_frame(&w->n, type, type[0] >= 'A' && type[0] <= 'Z', raw_len);
	rc = mk_io_write_map(&w->io, h, (size_t)(pre + c->data_len), m, (size_t)len);
	if (rc < 0)
		return mk_err_sys(err, -rc, "writing the stream");
	w->bytes += pre + c->data_len;
	return 1;
}

int mk_sw_chunk_splice(struct mk_stream_writer *w, const char *type, const struct mk_chunk *c, int src_fd,
		       uint64_t off, struct mk_err *err)
{
	uint8_t h[MK_FRAME_HDR] = { 0 }, hdr[MK_CHUNK_HDR];
	struct iovec iov[2] = { { h, MK_FRAME_HDR }, { hdr, MK_CHUNK_HDR } };
	uint64_t raw_len = MK_CHUNK_HDR + (uint64_t)c->data_len;
	int rc;

	if (mk_io_in_memory(&w->io) && w->level <= 0 && src_fd >= 0 && c->data_len >= MK_MAP_MIN && raw_len <= MK_FRAME_MAX &&
	    !sw_sums(w, type)) {
		if (w->ended)
			MK_BUG("frame after END");
		if ((rc = map_chunk(w, type, c, src_fd, off, err)))
			return rc < 0 ? rc : 0;
	}
	if (!w->splice) /* a channel's stand-in descriptor is no pipe: never spliced */
		w->splice = mk_io_pipe_fd(&w->io) >= 0 ? 1 : -1;
	if (w->level > 0 || w->splice < 0 || src_fd < 0 || c->data_len < MK_SPLICE_MIN ||
	    raw_len > MK_FRAME_MAX)
		return mk_sw_chunk(w, type, c, err);
	if (w->ended)
		MK_BUG("frame after END");
	/* the header as mk_sw_frame writes it for a raw payload */
	mk_chunk_encode(c, hdr);
	frame_hdr(h, type, 0, MK_CSUM_CRC32C, raw_len, raw_len);
	put32(h + 24, mk_crc32c(mk_crc32c(mk_crc32c(0, h, MK_FRAME_HDR), hdr, MK_CHUNK_HDR), c->data, c->data_len));
	count_frame(&w->n, type, type[0] >= 'A' && type[0] <= 'Z', raw_len);
	rc = write_iov(w, iov, 2, err);
	return rc ? rc : splice_data(w, c, src_fd, off, err);
}

int mk_sw_file(struct mk_stream_writer *w, const char *name, uint32_t mode,
	       const void *data, size_t len, struct mk_err *err)
{
	uint8_t hdr[8];
	size_t nlen = strlen(name);
	int rc = mk_file_name_check(name, nlen, err);
	const void *p[3] = { hdr, name, data };
	size_t l[3] = { 8, nlen, len };

	if (rc)
		return rc;
	put32(hdr, mode);
	put32(hdr + 4, (uint32_t)nlen);
	return mk_sw_frame(w, MK_FT_FILE, p, l, 3, err);
}

int mk_sw_pass(struct mk_stream_writer *w, const struct mk_frame *f, struct mk_err *err)
{
	struct iovec iov[2] = { { (void *)f->wire, f->wire_len } };
	uint8_t h[MK_FRAME_HDR];
	int n = 1;

	if (!f->wire)
		MK_BUG("a piecewise frame cannot be passed through");
	if (w->ended)
		MK_BUG("frame after END");
	if (f->wire_len >= MK_FRAME_HDR && f->wire[5] == MK_CSUM_NONE && !mk_io_in_memory(&w->io)) {
		/* a chunk from a channel leaves the process: its checksum now,
		 * the bytes a descriptor would have carried from the start */
		memcpy(h, f->wire, MK_FRAME_HDR);
		h[5] = MK_CSUM_CRC32C;
		put32(h + 24, mk_crc32c(mk_crc32c(0, h, MK_FRAME_HDR), f->wire + MK_FRAME_HDR,
					f->wire_len - MK_FRAME_HDR));
		iov[0] = (struct iovec){ h, MK_FRAME_HDR };
		iov[1] = (struct iovec){ (void *)(f->wire + MK_FRAME_HDR), f->wire_len - MK_FRAME_HDR };
		n = 2;
	}
	count_frame(&w->n, f->type, f->critical, f->raw_len);
	if (!memcmp(f->type, MK_FT_END, 4))
		w->ended = true;
	return write_iov(w, iov, n, err);
}

int mk_sw_pass_pieces(struct mk_stream_writer *w, const struct mk_frame *f,
		      int (*next)(void *ctx, void *buf, size_t cap, size_t *got, struct mk_err *err),
		      void *ctx, struct mk_err *err)
{
	enum { PIECE = 256 << 10 };
	uint8_t *buf;
	uint64_t sent = 0, want = MK_FRAME_HDR + f->len;
	int rc = 0;

	if (w->ended)
		MK_BUG("frame after END");
	if (!memcmp(f->type, MK_FT_END, 4))
		MK_BUG("END passed in pieces");
	if (!(buf = malloc(PIECE)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (;;) {
		size_t got;
		struct iovec iov;
		if ((rc = next(ctx, buf, PIECE, &got, err)) || !got)
			break;
		if (got > want - sent) {
			rc = mk_err_set(err, MK_ECORRUPT, "frame #%llu (%s): more than its %llu bytes came to pass on",
					(unsigned long long)f->index, f->type, (unsigned long long)want);
			break;
		}
		if (sent <= 5 && sent + got > 5 && buf[5 - sent] == MK_CSUM_NONE && !mk_io_in_memory(&w->io)) {
			/* its checksum would be needed before its payload is had */
			rc = mk_err_set(err, MK_EINVAL,
					"frame #%llu (%s): a chunk from an in-process channel cannot leave the process in pieces",
					(unsigned long long)f->index, f->type);
			break;
		}
		iov = (struct iovec){ buf, got };
		if ((rc = write_iov(w, &iov, 1, err)))
			break;
		sent += got;
	}
	if (!rc && sent != want)
		rc = mk_err_set(err, MK_ECORRUPT, "frame #%llu (%s): %llu of its %llu bytes came to pass on",
				(unsigned long long)f->index, f->type, (unsigned long long)sent,
				(unsigned long long)want);
	free(buf);
	if (!rc)
		count_frame(&w->n, f->type, f->critical, f->raw_len);
	return rc;
}

static int wire_next(void *ctx, void *buf, size_t cap, size_t *got, struct mk_err *err)
{
	return mk_sr_read_wire(ctx, buf, cap, got, err);
}

int mk_sw_pass_from(struct mk_stream_writer *w, struct mk_stream_reader *r, const struct mk_frame *f,
		    struct mk_err *err)
{
	if (!f->piecewise)
		return mk_sw_pass(w, f, err);
	return mk_sw_pass_pieces(w, f, wire_next, r, err);
}

int mk_sw_end(struct mk_stream_writer *w, struct mk_err *err)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf),
			 "{\"frames\":%llu,\"files\":%llu,\"jobs\":%llu,\"chunks\":%llu,\"ancillary\":%llu,\"data_bytes\":%llu}",
			 (unsigned long long)w->n.frames, (unsigned long long)w->n.files,
			 (unsigned long long)w->n.jobs, (unsigned long long)w->n.chunks,
			 (unsigned long long)w->n.ancillary, (unsigned long long)w->n.data_bytes);
	int level = w->level, rc;

	w->level = 0; /* keep END readable in a hex dump */
	rc = mk_sw_frame1(w, MK_FT_END, buf, (size_t)n, err);
	w->level = level;
	w->ended = true;
	return rc;
}

uint64_t mk_sw_bytes(const struct mk_stream_writer *w)
{
	return w->bytes;
}

void mk_sw_free(struct mk_stream_writer *w)
{
	if (!w)
		return;
	mk_sw_chunk_unreserve(w);
	ZSTD_freeCCtx(w->cctx);
	free(w->zbuf);
	free(w->cat);
	free(w);
}

void mk_sr_position(const struct mk_stream_reader *r, uint64_t *frames, uint64_t *bytes)
{
	*frames = r->index;
	*bytes = r->offset;
}
