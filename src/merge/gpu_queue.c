/* gpu_queue.c - mk-merge's output: DATA frames in the plan's order, and
 * the outputs computed on the GPU queued until a drain (see struct
 * gpu_queue in merge_impl.h). */
#include <stdlib.h>
#include "merge_impl.h"

#define GPU_QUEUE_BYTES (64u << 20)
#define GPU_QUEUE_JOBS 256u
#define EMIT_PIECE (1u << 20)   /* at most this many elements per DATA frame */

/* The DATA chunk of output tensor `index`, elements [begin, begin + count). */
static struct mk_chunk out_chunk(size_t index, uint64_t row_len, uint64_t begin, uint64_t count, enum mk_dtype dt,
				 const void *data, size_t len)
{
	struct mk_chunk c = { .id = (uint32_t)index, .dtype = dt, .elem_begin = begin, .elem_count = count,
			      .data = data, .data_len = len };

	mk_chunk_set_rows(&c, row_len);
	return c;
}

static int emit_at(struct mk_stream_writer *w, struct gpu_queue *gq, size_t index, uint64_t row_len, uint64_t begin,
		   uint64_t count, enum mk_dtype dt, const void *data, size_t len, struct mk_merge_stats *st,
		   struct mk_err *err)
{
	if (gq->nonfinite_out)
		gq->nonfinite_out[index] += mk_dtype_count_nonfinite(dt, data, count);
	struct mk_chunk c = out_chunk(index, row_len, begin, count, dt, data, len);

	st->chunks_out++;
	st->bytes_out += len;
	return mk_sw_chunk(w, MK_FT_DATA, &c, err);
}

/* Wait for the GPU and write every queued output, in order. */
int mk__gpuq_drain(struct mk_stream_writer *w, struct gpu_queue *gq, struct pool *pl, struct mk_cuda_ctx *cx,
		   struct mk_merge_stats *st, struct mk_err *err)
{
	int rc = 0;

	if (!gq || !gq->n)
		return 0;
	rc = mk_cuda_flush(cx, err);
	for (size_t k = 0; k < gq->n; k++) {
		struct gpu_out *g = &gq->q[k];
		for (uint64_t b = 0; !rc && b < g->n; b += EMIT_PIECE) {
			uint64_t m = g->n - b < EMIT_PIECE ? g->n - b : EMIT_PIECE, ob;
			mk_dtype_nbytes(g->dt, m, &ob);
			if (mk__pool_grow(pl, &gq->conv, &gq->conv_cap, (size_t)ob + 1))
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			else if (mk_dtype_convert(g->dt, gq->conv, MK_DT_F32, (const float *)g->buf + b, m))
				rc = mk_err_set(err, MK_EUNSUPPORTED, "cannot write %s output", mk_dtype_name(g->dt));
			else
				rc = emit_at(w, gq, g->index, g->row_len, g->begin + b, m, g->dt, gq->conv, (size_t)ob, st,
					     err);
		}
		mk__pool_put(pl, g->buf, g->cap);
	}
	gq->n = 0;
	gq->bytes = 0;
	return rc;
}

void mk__gpuq_free(struct gpu_queue *gq, struct pool *pl)
{
	for (size_t k = 0; k < gq->n; k++)
		mk__pool_put(pl, gq->q[k].buf, gq->q[k].cap);
	free(gq->q);
	free(gq->conv);
	free(gq->nonfinite_out);
	free(gq->nonfinite_in);
}

int mk__gpuq_emit(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, enum mk_dtype dt,
		  const void *data, size_t len, struct mk_merge_stats *st, struct mk_err *err)
{
	int rc = mk__gpuq_drain(w, r->gq, r->pool, r->cuda, st, err);

	r->next_out = begin + count;
	return rc ? rc : emit_at(w, r->gq, r->out_index, r->emit_row_len, r->out_at + begin, count, dt, data, len, st,
				 err);
}

int mk__emit_reserve(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, enum mk_dtype dt,
		     size_t len, void **data, struct mk_err *err)
{
	struct mk_chunk c = out_chunk(r->out_index, r->emit_row_len, r->out_at + begin, count, dt, NULL, len);

	*data = NULL;
	/* outputs still on the GPU go first, after this range is computed
	 * (mk__gpuq_emit drains them then): the GPU works on meanwhile */
	if (r->gq->n)
		return 0;
	return mk_sw_chunk_reserve(w, MK_FT_DATA, &c, data, err);
}

int mk__emit_commit(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, size_t len,
		    uint64_t nonfinite, struct mk_merge_stats *st, struct mk_err *err)
{
	if (r->gq->nonfinite_out)
		r->gq->nonfinite_out[r->out_index] += nonfinite;
	r->next_out = begin + count;
	st->chunks_out++;
	st->bytes_out += len;
	return mk_sw_chunk_commit(w, err);
}

/* Submit job elements [b, b + n) to the GPU, its inputs the converted
 * buffers from element `from` of each (the range's start); the output
 * joins the queue, written at the next drain. */
int mk__gpuq_submit(struct mk_stream_writer *w, struct run *r, uint64_t b, uint64_t n, uint64_t from,
		    struct mk_merge_stats *st, struct mk_err *err)
{
	struct gpu_queue *gq = r->gq;
	const void **ptrs = calloc(r->d.ninputs + 1, sizeof(*ptrs));
	struct gpu_out g = { .index = r->out_index, .row_len = r->emit_row_len, .begin = r->out_at + b, .n = n,
			     .dt = r->job.out.dtype };
	int rc;

	if (!ptrs || grow(&g.buf, &g.cap, (size_t)n * 4 + 1)) {
		free(ptrs);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (gq->n == gq->cap) {
		size_t cap = gq->cap ? gq->cap * 2 : 64;
		struct gpu_out *q = realloc(gq->q, cap * sizeof(*q));
		if (!q) {
			free(ptrs);
			mk__pool_put(r->pool, g.buf, g.cap);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		gq->q = q;
		gq->cap = cap;
	}
	for (size_t i = 0; i < r->d.ninputs; i++)
		ptrs[i] = r->job.used[i] ? (const char *)r->ib[i].conv + (b - from) * 4 : NULL;
	struct mk_job_chunk c = { .elem_begin = b, .count = n, .in = ptrs };
	rc = mk_cuda_submit(r->cuda, &r->job, &c, g.buf, err);
	free(ptrs);
	if (rc) {
		mk__pool_put(r->pool, g.buf, g.cap);
		return mk_err_prefix(err, "job %u (%s) on the GPU: ", r->pj->id, r->name);
	}
	gq->q[gq->n++] = g;
	gq->bytes += n * 4;
	r->next_out = b + n;
	if (gq->bytes >= GPU_QUEUE_BYTES || gq->n >= GPU_QUEUE_JOBS)
		return mk__gpuq_drain(w, gq, r->pool, r->cuda, st, err);
	return 0;
}
