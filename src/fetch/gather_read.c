/* gather_read.c - the reads of strided tensors' chunks (fetch_impl.h). */
#include <stdlib.h>
#include <string.h>
#include "fetch_impl.h"

#define NARROW_SLACK (1u << 20)

void mk__gfill_start(struct mk__gfill *fl, struct mk__held *h, int fd, uint64_t data_start,
		     const struct mk_st_tensor *t, uint64_t e0, uint64_t n)
{
	uint64_t lo, hi, cb = n * (mk_dtype_bits(t->desc.dtype) / 8);

	mk_st_tensor_extent(t, e0, n, &lo, &hi);
	lo += data_start;
	hi += data_start;
	fl->g = (struct mk__gread){ .t = t, .h = h, .data_start = data_start, .e0 = e0, .n = n };
	fl->fd = fd;
	fl->live = true;
	if (h->planned && h->pfd == fd && h->plo <= lo && hi <= h->phi) {
		/* held already: a one-byte read keeps the chunk's turn */
		fl->at = lo;
		fl->end = lo + 1;
		return;
	}
	if (hi - lo > 2 * cb + NARROW_SLACK) {
		/* wide: the tensor's whole span, once, for all its chunks */
		lo = data_start + t->begin;
		hi = data_start + t->end;
	}
	fl->g.fill = fl->at = lo;
	fl->g.fill_len = hi - lo;
	fl->end = hi;
	h->planned = true;
	h->pfd = fd;
	h->plo = lo;
	h->phi = hi;
}

int mk__gfill_next(struct mk__gfill *fl, size_t chunk_bytes, struct mk_read_req *req, struct mk__gread *g)
{
	uint64_t len;

	if (!fl->live)
		return 0;
	len = fl->end - fl->at < chunk_bytes ? fl->end - fl->at : chunk_bytes;
	req->fd = fl->fd;
	req->off = fl->at;
	req->len = (size_t)len;
	fl->at += len;
	*g = fl->g;
	g->last = fl->at == fl->end;
	fl->live = !g->last;
	return 1;
}

int mk__gread_take(const struct mk__gread *g, const struct mk_read_req *req, const void *data, uint8_t **gbuf,
		   size_t *gcap, const void **out, size_t *out_len, struct mk_err *err)
{
	struct mk__held *h = g->h;
	uint64_t need = g->n * (mk_dtype_bits(g->t->desc.dtype) / 8);
	int rc;

	if (g->fill_len) {
		if (req->off == g->fill) {
			uint8_t *b = realloc(h->buf, g->fill_len ? (size_t)g->fill_len : 1);
			if (!b)
				return mk_err_set(err, MK_ENOMEM, "out of memory holding %llu bytes of tensor '%s''s storage",
						  (unsigned long long)g->fill_len, g->t->name);
			h->buf = b;
			h->fd = req->fd;
			h->lo = g->fill;
			h->hi = g->fill + g->fill_len;
		}
		if (h->fd != req->fd || req->off < h->lo || req->len > h->hi - req->off)
			return mk_err_set(err, MK_EINVAL, "tensor '%s': a read out of the order it was asked in", g->t->name);
		memcpy(h->buf + (req->off - h->lo), data, req->len);
	}
	if (!g->last)
		return 0;
	if (need > *gcap) {
		uint8_t *b = realloc(*gbuf, (size_t)need);
		if (!b)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		*gbuf = b;
		*gcap = (size_t)need;
	}
	if (!h->buf || h->fd != req->fd || h->lo < g->data_start)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': its storage's bytes are not held", g->t->name);
	rc = mk_st_tensor_gather(g->t, g->e0, g->n, h->buf, h->lo - g->data_start, h->hi - h->lo, *gbuf, err);
	if (rc)
		return rc;
	*out = *gbuf;
	*out_len = (size_t)need;
	return 1;
}

void mk__held_free(struct mk__held *h)
{
	free(h->buf);
	memset(h, 0, sizeof(*h));
}
