/* plan_held.c - mk-fetch's plan mode: the plan's frames held (in memory or a
 * scratch file) until the HEAD has gone out, then passed on. */
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

int mk__pf_hold(struct held **v, size_t *n, const struct mk_frame *f, struct mk_err *err)
{
	struct held *q = realloc(*v, (*n + 1) * sizeof(**v));
	if (!q)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*v = q;
	q[*n].wire = malloc(f->wire_len);
	if (!q[*n].wire)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	memcpy(q[*n].wire, f->wire, f->wire_len);
	q[*n].len = f->wire_len;
	(*n)++;
	return 0;
}

/* A piecewise FILE (or ancillary) frame into memory (under the spool's bound) or the
 * spool file, as transmitted; kept only once its checksum matched. */
int mk__pf_hold_piecewise(struct held **v, size_t *n, struct spool *sp, struct mk_stream_reader *r,
			  const struct mk_frame *f, struct mk_err *err)
{
	uint64_t wire = MK_FRAME_HDR + f->len, at = 0;
	struct held *q = realloc(*v, (*n + 1) * sizeof(**v));
	struct held h = { 0 };
	size_t got;
	int rc;

	if (!q)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*v = q;
	if (sp->in_memory + wire <= sp->bound) {
		if (!(h.wire = malloc(wire)))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		while (!(rc = mk_sr_read_wire(r, h.wire + at, (size_t)(wire - at), &got, err)) && got)
			at += got;
		if (rc) {
			free(h.wire);
			return rc;
		}
		sp->in_memory += wire;
	} else {
		if (sp->fd < 0 && (rc = mk_tmpfile_open(mk_tmpdir(), "a plan's files", &sp->fd, err)))
			return rc;
		if (!sp->buf && !(sp->buf = malloc(SPOOL_PIECE)))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		h.off = sp->end;
		while (!(rc = mk_sr_read_wire(r, sp->buf, SPOOL_PIECE, &got, err)) && got) {
			if (at == 0)
				memcpy(h.hdr, sp->buf, MK_FRAME_HDR);
			if ((rc = mk_pwrite_all(sp->fd, sp->buf, got, h.off + at, "the scratch file for a plan's files", err)))
				return rc;
			at += got;
		}
		if (rc)
			return rc;
		sp->end += at;
	}
	h.len = (size_t)wire;
	q[(*n)++] = h;
	return 0;
}

struct spooled {                 /* a spooled frame being passed on */
	const struct spool *sp;
	const struct held *h;
	uint64_t at;
};

static int spooled_next(void *ctx, void *buf, size_t cap, size_t *got, struct mk_err *err)
{
	struct spooled *s = ctx;
	uint64_t left = s->h->len - s->at;
	size_t n = left < cap ? (size_t)left : cap;

	*got = 0;
	if (n && mk_pread_exact(s->sp->fd, buf, n, s->h->off + s->at, "the scratch file for a plan's files", err))
		return -1;
	s->at += n;
	*got = n;
	return 0;
}

int mk__pf_pass_held(struct mk_stream_writer *w, const struct spool *sp, const struct held *h, struct mk_err *err)
{
	const uint8_t *hdr = h->wire ? h->wire : h->hdr;
	struct mk_frame f = { 0 };

	memcpy(f.type, hdr, 4);
	f.critical = hdr[0] >= 'A' && hdr[0] <= 'Z';
	memcpy(&f.len, hdr + 8, 8); /* little-endian hosts only, as the rest of mk */
	memcpy(&f.raw_len, hdr + 16, 8);
	if (!h->wire) {
		struct spooled s = { sp, h, 0 };
		return mk_sw_pass_pieces(w, &f, spooled_next, &s, err);
	}
	f.wire = h->wire;
	f.wire_len = h->len;
	return mk_sw_pass(w, &f, err);
}
