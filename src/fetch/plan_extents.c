/* plan_extents.c - mk-fetch's plan mode: the reads asked of the reader,
 * each job's inputs cut into chunk ranges, pass after pass. */
#include <stdlib.h>
#include <string.h>
#include "mk/chan.h"
#include "fetch/fetch.h"
#include "stream/job.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

/* Whether job j's chunks of pass `pass` are left out: the merge beside us
 * will not read that pass (mk_fetch_opts.skip) and they come from files
 * as they are (mk_plan_job_sent_as_read, and no stream feeding a model). */
bool mk__pf_pass_unsent(const struct pf *p, size_t j, unsigned pass)
{
	if (!p->skip || !mk_chan_skip_test(p->skip, p->jobs[j]->id, pass) || !mk_plan_job_sent_as_read(p->jobs[j]))
		return false;
	for (size_t i = 0; i < p->jobs[j]->ninputs; i++)
		if (p->src[j][i].feed >= 0)
			return false;
	return true;
}

static void track(struct pf *p, const struct mk_read_req *req)
{
	if ((size_t)req->fd < p->nlast) {
		if (req->off < p->last_end[req->fd])
			p->backward++;
		p->last_end[req->fd] = req->off + req->len;
	}
}

/* the next read of the strided chunk being asked for */
static int fill_next(struct pf *p, struct mk_read_req *req)
{
	struct tag *t = &p->ring[p->seq % p->ring_len];

	if (!mk__gfill_next(&p->fill, p->chunk_bytes, req, &p->fill_tag.g))
		return 0;
	p->seq++;
	*t = p->fill_tag;
	req->tag = t;
	track(p, req);
	return 1;
}

size_t mk__pf_njob_inputs(const struct mk_plan_job *jb)
{
	return jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);
}

static int next_range(struct pf *p, struct mk_err *err)
{
	for (;;) {
		if (p->j >= p->njobs)
			return 0;
		const struct mk_plan_job *jb = p->jobs[p->j];
		if (!p->ck_live) {
			/* chunk the longest input, at the widest dtype, so every
			 * input's piece fits chunk_bytes */
			enum mk_dtype wide = jb->inputs[0].desc.dtype;
			uint64_t rows = 0, shape[MK_MAX_DIMS];
			size_t k = 0;
			for (size_t i = 0; i < jb->ninputs; i++) {
				if (mk_dtype_bits(jb->inputs[i].desc.dtype) > mk_dtype_bits(wide))
					wide = jb->inputs[i].desc.dtype;
				/* what is read: an adapter's replacement may be wider */
				if (mk_dtype_bits(p->src[p->j][i].rdt) > mk_dtype_bits(wide))
					wide = p->src[p->j][i].rdt;
				/* a quantized input is dequantized through float32
				 * (plan_quant.c): its range fits chunk_bytes so */
				if (jb->inputs[i].quant && mk_dtype_bits(MK_DT_F32) > mk_dtype_bits(wide))
					wide = MK_DT_F32;
				if (jb->inputs[i].desc.ndim && jb->inputs[i].desc.shape[0] > rows) {
					rows = jb->inputs[i].desc.shape[0];
					k = i;
				}
			}
			memcpy(shape, jb->inputs[k].desc.shape, sizeof(shape));
			if (jb->vocab) {
				/* the output's rows: every input aligned to the vocabulary */
				for (size_t i = 0; i < jb->vocab->naux; i++) {
					if (mk_dtype_bits(jb->vocab->aux[i].desc.dtype) > mk_dtype_bits(wide))
						wide = jb->vocab->aux[i].desc.dtype;
					if (mk_dtype_bits(p->src[p->j][jb->ninputs + i].rdt) > mk_dtype_bits(wide))
						wide = p->src[p->j][jb->ninputs + i].rdt;
				}
				shape[0] = jb->vocab->rows;
			}
			int rc = mk_chunker_init(&p->ck, wide, jb->inputs[k].desc.ndim, shape, p->chunk_bytes, err);
			if (rc)
				return mk_err_prefix(err, "job %u: ", jb->id);
			p->ck_live = true;
		}
		if (mk_chunker_next(&p->ck, &p->cur)) {
			/* an assembled input's runs are separate tensors: no range
			 * crosses from one to the next */
			uint64_t b = p->cur.elem_begin, e = b + p->cur.elem_count;
			/* a vocabulary job's range: one fill, each input wholly
			 * there or not */
			if (jb->vocab && p->ck.row_len) {
				uint64_t cut = mk_plan_vocab_next_cut(jb, b / p->ck.row_len) * p->ck.row_len;
				if (cut < e)
					e = cut;
			}
			for (size_t i = 0; i < jb->ninputs; i++)
				for (size_t k = 1; k < p->src[p->j][i].nseg; k++) {
					uint64_t bound = p->src[p->j][i].seg[k].elem_begin;
					if (bound > b && bound < e)
						e = bound;
				}
			if (e != b + p->cur.elem_count) {
				p->cur.elem_count = e - b;
				mk_chunk_set_rows(&p->cur, p->ck.row_len);
				p->ck.next = e;
			}
			p->input = 0;
			p->have_range = true;
			return 1;
		}
		p->ck_live = false;
		if (++p->send < jb->sends)
			continue;
		p->send = 0;
		p->j++;
	}
}

int mk__pf_next_extent(void *ctx, struct mk_read_req *req, struct mk_err *err)
{
	struct pf *p = ctx;

	if (p->fill.live)
		return fill_next(p, req);
	for (;;) {
		if (!p->have_range) {
			int rc = next_range(p, err);
			if (rc <= 0)
				return rc;
			const struct mk_plan_job *sj = p->jobs[p->j];
			if (mk__pf_pass_unsent(p, p->j, p->send)) {
				/* a pass the merge will not read: none of it asked for */
				for (size_t i = 0; i < sj->ninputs; i++)
					p->unsent += p->cur.elem_begin < mk_plan_job_input(sj, i)->nelem;
				p->have_range = false;
				continue;
			}
		}
		const struct mk_plan_job *jb = p->jobs[p->j];
		size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);
		while (p->input < nin) {
			size_t i = p->input++;
			const struct mk_plan_input *in = mk_plan_job_input(jb, i);
			uint64_t b = p->cur.elem_begin, n = p->cur.elem_count, at = b;
			if (jb->vocab) {
				/* the input's row for the range's first output row */
				uint64_t rl = p->ck.row_len ? p->ck.row_len : 1;
				int64_t sr = mk_plan_vocab_src_row(jb, i, b / rl);
				if (sr < 0)
					continue; /* a token it lacks: filled by mk-merge */
				at = (uint64_t)sr * rl + b % rl;
			} else {
				if (b >= in->nelem)
					continue; /* a shorter input (fewer rows) */
				if (n > in->nelem - b)
					n = in->nelem - b;
			}
			struct tag *t = &p->ring[p->seq++ % p->ring_len];
			uint64_t boff, blen;
			enum mk_dtype rdt = p->src[p->j][i].rdt;
			if (mk_dtype_nbytes(rdt, n, &blen))
				return mk_err_set(err, MK_EFORMAT, "job %u: input %zu: %llu %s elements are not whole bytes",
						  jb->id, i, (unsigned long long)n, mk_dtype_name(in->desc.dtype));
			t->job = p->j;
			t->input = i;
			t->at = at;
			t->c = (struct mk_chunk){ .id = jb->id, .input = (uint16_t)i, .pass = (uint16_t)p->send,
						  .dtype = in->desc.dtype, .elem_begin = b, .elem_count = n };
			mk_chunk_set_rows(&t->c, p->ck.row_len);
			struct src *sr = &p->src[p->j][i];
			size_t k = sr->nseg - 1;
			while (k > 0 && sr->seg[k].elem_begin > at)
				k--;
			if (sr->seg[k].strided) {
				/* a view: its elements gathered from the reads of
				 * the storage they lie in */
				p->seq--;
				p->fill_tag = *t;
				mk__gfill_start(&p->fill, &sr->held, sr->seg[k].fd, sr->seg[k].data_start, sr->seg[k].strided,
						at - sr->seg[k].elem_begin, n);
				return fill_next(p, req);
			}
			t->g.t = NULL;
			boff = (at - sr->seg[k].elem_begin) * mk_dtype_bits(rdt) / 8;
			req->fd = sr->seg[k].fd;
			req->remote = sr->seg[k].remote;
			req->off = sr->seg[k].data_off + boff;
			req->len = (size_t)blen;
			req->tag = t;
			if (sr->feed >= 0) {
				/* bytes from a stream: the read, of a placeholder,
				 * keeps the chunk's place in the order */
				req->off = 0;
				return 1;
			}
			track(p, req);
			return 1;
		}
		p->have_range = false;
	}
}
