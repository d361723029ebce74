/* merge.c - mk-merge: an inputs stream in, a tensors stream out. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "mk/cuda.h"
#include "mk/fsutil.h"
#include "mk/hash.h"
#include "mk/manifest.h"
#include "mk/merge.h"
#include "mk/method.h"
#include "mk/plan.h"
#include "mk/plugin.h"
#include "mk/stream.h"

struct inbuf {                   /* one input's piece of the current range */
	bool have;
	uint64_t begin, count;   /* elements held */
	void *conv;              /* compute dtype */
	size_t conv_cap;
	void *raw;               /* as received, copied */
	size_t raw_cap, raw_len;
	const void *data;        /* the bytes to convert: raw, or a replay
				    record's (in memory, stable for the job) */
};

struct run {                     /* the job being merged */
	bool live;
	struct mk_plan_job *pj;
	const struct mk_method *m;
	struct mk_job job;
	struct mk_job_desc d;
	bool check_equal;            /* inputs 1.. must equal input 0 */
	bool held;                   /* sent once, replayed from memory */
	uint64_t seed;               /* the plan's random seed */
	unsigned threads;            /* worker threads (-j) */
	struct mk_tensor_desc *in;
	struct mk_pval *gvals, *ivals;
	const char *name;
	uint64_t out_nelem, out_row_len;
	size_t out_index;
	struct inbuf *ib;
	/* the range being gathered */
	bool range;
	unsigned send;
	uint64_t begin, count;
	unsigned passes_done;
	uint64_t next_out;       /* output elements written */
	void *outc;              /* the output range, in the output dtype */
	size_t outc_cap;
	struct pool *pool;       /* where buffers go when the job ends */
	struct spill *spill;     /* the spill file (--spill DIR), or NULL */
	struct spill *mem;       /* the in-memory record of held jobs */
	struct spill *rp;        /* what this job replays from, or NULL */
	struct mk_cuda_ctx *cuda;    /* --cuda: the GPU, or NULL */
	struct gpu_queue *gq;    /* outputs submitted to it, not yet written */
	bool gpu;                /* this job's output is computed there */
};

/* Buffers of finished jobs, kept for the next ones: a new job then
 * writes into pages already mapped instead of faulting in fresh zeroed
 * ones (page faults took a third of mk-merge's time before).  At most
 * POOL_MAX buffers and `limit` bytes (half the budget, or 256 MiB). */
#define POOL_MAX 16
struct pool {
	void *p[POOL_MAX];
	size_t cap[POOL_MAX];
	size_t n;
	uint64_t bytes, limit;
};

static void pool_put(struct pool *pl, void *p, size_t cap)
{
	if (!p)
		return;
	if (!pl || cap > pl->limit) {
		free(p);
		return;
	}
	while (pl->n == POOL_MAX || pl->bytes + cap > pl->limit) {
		size_t s = 0;     /* drop the smallest */
		for (size_t k = 1; k < pl->n; k++)
			if (pl->cap[k] < pl->cap[s])
				s = k;
		if (pl->cap[s] > cap) {
			free(p);
			return;
		}
		free(pl->p[s]);
		pl->bytes -= pl->cap[s];
		pl->p[s] = pl->p[--pl->n];
		pl->cap[s] = pl->cap[pl->n];
	}
	pl->p[pl->n] = p;
	pl->cap[pl->n++] = cap;
	pl->bytes += cap;
}

static void pool_free(struct pool *pl)
{
	for (size_t k = 0; k < pl->n; k++)
		free(pl->p[k]);
	pl->n = 0;
	pl->bytes = 0;
}

/* Replays: a job sent once although its method has statistics passes is
 * merged as pass 0 while its chunks arrive, and the chunks are recorded;
 * the later passes (and the output pass) read them back, in the same
 * order, as if mk-fetch had sent them again.  A job the plan holds (its
 * working set fits the budget) is recorded in memory; one the plan
 * spills, in an unlinked file in DIR (--spill DIR), each record with its
 * chunk header and CRC-32C.  One record for the whole run, emptied after
 * each job.  Pass 0 thus overlaps the reading, and memory holds the raw
 * inputs once, not converted. */
struct spill_rec {
	struct mk_chunk c;       /* data = NULL; where: off */
	uint64_t off;
	uint32_t crc;
};

struct spill {
	int fd;                  /* the file; -1 in memory */
	unsigned char *m;        /* in memory: the chunks' bytes */
	size_t mcap;
	const char *dir;
	uint64_t end;            /* bytes written for the current job */
	struct spill_rec *rec;
	size_t n, cap;
	void *buf;
	size_t buf_cap;
	uint64_t bytes_max;      /* the largest job spilled */
};

static int spill_open(struct spill *sp, const char *dir, struct mk_err *err)
{
	sp->dir = dir;
	sp->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (sp->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/mk-merge-spill.XXXXXX", dir);
		sp->fd = mkostemp(path, O_CLOEXEC);
		if (sp->fd >= 0)
			unlink(path);
	}
	if (sp->fd < 0)
		return mk_err_sys(err, errno, "--spill %s: cannot create a spill file there", dir);
	return 0;
}

static void spill_close(struct spill *sp)
{
	if (sp->fd >= 0)
		close(sp->fd);
	sp->fd = -1;
	free(sp->rec);
	free(sp->buf);
	free(sp->m);
}

static int spill_put(struct spill *sp, const struct mk_chunk *c, const void **stored, struct mk_err *err)
{
	*stored = NULL;
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 64;
		struct spill_rec *q = realloc(sp->rec, cap * sizeof(*q));
		if (!q)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		sp->rec = q;
		sp->cap = cap;
	}
	struct spill_rec *e = &sp->rec[sp->n];
	e->c = *c;
	e->c.data = NULL;
	e->off = sp->end;
	if (sp->fd < 0) {
		/* reserved for the job's inputs (spill_reserve): never moves, so
		 * the job may keep pointers into it */
		if (sp->end + c->data_len > sp->mcap)
			return mk_err_set(err, MK_EFORMAT, "a held job's inputs came to more than their %llu bytes",
					  (unsigned long long)sp->mcap);
		memcpy(sp->m + sp->end, c->data, c->data_len);
		*stored = sp->m + sp->end;
	} else {
		e->crc = mk_crc32c(0, c->data, c->data_len);
		int rc = mk_pwrite_all(sp->fd, c->data, c->data_len, sp->end, sp->dir, err);
		if (rc)
			return mk_err_prefix(err, "--spill: ");
	}
	sp->end += c->data_len;
	sp->n++;
	if (sp->end > sp->bytes_max)
		sp->bytes_max = sp->end;
	return 0;
}

/* Record i of the current job, read back and checked. */
static int spill_get(struct spill *sp, size_t i, struct mk_chunk *c, struct mk_err *err)
{
	struct spill_rec *e = &sp->rec[i];
	size_t len = e->c.data_len, got = 0;

	if (sp->fd < 0) {
		*c = e->c;
		c->data = sp->m + e->off;
		return 0;
	}
	if (len > sp->buf_cap) {
		void *q = realloc(sp->buf, len);
		if (!q)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		sp->buf = q;
		sp->buf_cap = len;
	}
	while (got < len) {
		ssize_t k = pread(sp->fd, (char *)sp->buf + got, len - got, (off_t)(e->off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? mk_err_sys(err, errno, "--spill %s: reading the spill file", sp->dir)
				     : mk_err_set(err, MK_EIO, "--spill %s: the spill file is short", sp->dir);
		got += (size_t)k;
	}
	if (mk_crc32c(0, sp->buf, len) != e->crc)
		return mk_err_set(err, MK_ECORRUPT, "--spill %s: a chunk read back differs from the one written "
				  "(CRC-32C); the disk or file system under it is faulty", sp->dir);
	*c = e->c;
	c->data = sp->buf;
	return 0;
}

/* In memory: room for `need` bytes of the job about to start (empty). */
static int spill_reserve(struct spill *sp, uint64_t need, struct mk_err *err)
{
	if (sp->fd >= 0 || need <= sp->mcap)
		return 0;
	free(sp->m);
	sp->mcap = 0;
	if (!(sp->m = malloc(need)))
		return mk_err_set(err, MK_ENOMEM, "out of memory holding a job (%llu bytes)", (unsigned long long)need);
	sp->mcap = need;
	return 0;
}

/* Empty the file for the next job. */
static void spill_reset(struct spill *sp)
{
	sp->n = 0;
	sp->end = 0;
	if (sp->fd >= 0 && ftruncate(sp->fd, 0)) {
		/* the next job overwrites from offset 0 anyway */
	}
}

/* A buffer of at least `need` bytes in *p; the old contents are not kept
 * (every caller overwrites it). */
static int grow_in(struct pool *pl, void **p, size_t *cap, size_t need)
{
	size_t best = SIZE_MAX;

	if (need <= *cap)
		return 0;
	pool_put(pl, *p, *cap);
	*p = NULL;
	*cap = 0;
	for (size_t k = 0; pl && k < pl->n; k++)
		if (pl->cap[k] >= need && (best == SIZE_MAX || pl->cap[k] < pl->cap[best]))
			best = k;
	if (best != SIZE_MAX) {
		*p = pl->p[best];
		*cap = pl->cap[best];
		pl->bytes -= pl->cap[best];
		pl->p[best] = pl->p[--pl->n];
		pl->cap[best] = pl->cap[pl->n];
		return 0;
	}
	if (!(*p = malloc(need)))
		return -1;
	*cap = need;
	return 0;
}
#define grow(p, cap, need) grow_in(r->pool, (p), (cap), (need))

/* the job's named parameters -> the method's pval arrays */
static int load_params(struct run *r, struct mk_err *err)
{
	size_t np = r->m->nparams, n = r->pj->ninputs;

	r->gvals = calloc(np ? np : 1, sizeof(*r->gvals));
	r->ivals = calloc((np ? np : 1) * (n ? n : 1), sizeof(*r->ivals));
	if (!r->gvals || !r->ivals)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i <= n; i++) {
		const struct mk_job_params *ps = i == 0 ? &r->pj->global : &r->pj->input_params[i - 1];
		struct mk_pval *vals = i == 0 ? r->gvals : &r->ivals[(i - 1) * np];
		for (size_t k = 0; k < ps->n; k++) {
			int p = mk_method_param_index(r->m, ps->p[k].name);
			if (p < 0)
				return mk_err_set(err, MK_EFORMAT, "job %u (%s): parameter '%s' is not one of %s's",
						  r->pj->id, r->name, ps->p[k].name, r->m->name);
			vals[p] = ps->p[k].value;
		}
	}
	return 0;
}

static void run_release(struct run *r)
{
	if (r->live)
		mk_job_release(&r->job);
	for (size_t i = 0; r->ib && r->pj && i < r->pj->ninputs; i++) {
		pool_put(r->pool, r->ib[i].conv, r->ib[i].conv_cap);
		pool_put(r->pool, r->ib[i].raw, r->ib[i].raw_cap);
	}
	free(r->ib);
	mk_plan_job_free(r->pj);
	free(r->in);
	free(r->gvals);
	free(r->ivals);
	pool_put(r->pool, r->outc, r->outc_cap);
	struct pool *pl = r->pool;
	struct spill *sp = r->spill, *mem = r->mem;
	struct mk_cuda_ctx *cx = r->cuda;
	struct gpu_queue *gq = r->gq;
	if (r->rp)
		spill_reset(r->rp);
	memset(r, 0, sizeof(*r));
	r->pool = pl;
	r->spill = sp;
	r->mem = mem;
	r->cuda = cx;
	r->gq = gq;
}

/* The job r->pj as its method sees it: method, parameters, the method's
 * job state (mk_job_init), checked against the manifest and the plan's
 * sends.  Everything here depends on the JOB frame alone. */
static int run_prepare(struct run *r, const struct mk_manifest *man, struct mk_err *err)
{
	int rc;

	r->seed = man->seed;
	r->out_index = r->pj->output;
	const struct mk_manifest_tensor *t = &man->tensors[r->out_index];
	r->name = t->name;
	rc = mk_method_lookup(r->pj->method, &r->m, err);
	if (rc)
		return mk_err_prefix(err, "job %u (%s): ", r->pj->id, r->name);
	r->in = calloc(r->pj->ninputs + 1, sizeof(*r->in));
	r->ib = calloc(r->pj->ninputs + 1, sizeof(*r->ib));
	if (!r->in || !r->ib)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < r->pj->ninputs; i++) {
		r->in[i].dtype = r->pj->inputs[i].load_dtype; /* what the method sees */
		r->in[i].ndim = r->pj->inputs[i].ndim;
		memcpy(r->in[i].shape, r->pj->inputs[i].shape, sizeof(r->in[i].shape));
	}
	rc = load_params(r, err);
	if (rc)
		return rc;
	r->check_equal = r->pj->check_equal;
	/* check_equal: the method sees input 0; the others must equal it */
	r->d = (struct mk_job_desc){ .tensor = r->name, .seed = r->seed, .is_embed = r->pj->is_embed,
				     .ninputs = r->check_equal ? 1 : r->pj->ninputs,
				     .base = r->check_equal ? -1 : (int)r->pj->base, .in = r->in,
				     .global = r->gvals, .input = r->ivals };
	rc = mk_job_init(&r->job, r->m, &r->d, t->dtype, err);
	if (rc)
		return mk_err_prefix(err, "job %u: ", r->pj->id);
	r->live = true;
	/* the plan's manifest and the method's output rule must agree */
	if (r->job.out.ndim != t->ndim || memcmp(r->job.out.shape, t->shape, t->ndim * sizeof(uint64_t)))
		return mk_err_set(err, MK_EFORMAT, "job %u (%s): %s gives a shape other than the manifest's", r->pj->id,
				  r->name, r->m->name);
	r->out_nelem = t->nelem;
	r->out_row_len = 1;
	for (unsigned d = 1; d < t->ndim; d++)
		r->out_row_len *= t->shape[d];
	for (size_t i = 0; i < r->pj->ninputs; i++) {
		uint64_t rl = 1;
		for (unsigned d = 1; d < r->in[i].ndim; d++)
			rl *= r->in[i].shape[d];
		if (r->job.used[i] && r->in[i].ndim > 1 && t->ndim > 1 && rl != r->out_row_len)
			return mk_err_set(err, MK_EUNSUPPORTED,
					  "job %u (%s): input %zu has rows of %llu elements, the output %llu (not supported yet)",
					  r->pj->id, r->name, i, (unsigned long long)rl,
					  (unsigned long long)r->out_row_len);
	}
	if (r->pj->sends != r->job.npasses + 1 && r->pj->sends != 1)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "job %u (%s): %s needs %u statistics passes; the plan sends the inputs %u times",
				  r->pj->id, r->name, r->m->name, r->job.npasses, r->pj->sends);
	return 0;
}

static int run_start(struct run *r, const struct mk_manifest *man, const struct mk_frame *f,
		     unsigned threads, uint64_t budget, struct mk_err *err)
{
	int rc;

	struct pool *pl = r->pool;
	struct spill *sp = r->spill, *mem = r->mem;
	struct mk_cuda_ctx *cx = r->cuda;
	struct gpu_queue *gq = r->gq;
	memset(r, 0, sizeof(*r));
	r->pool = pl;
	r->spill = sp;
	r->mem = mem;
	r->cuda = cx;
	r->gq = gq;
	r->threads = threads;
	rc = mk_plan_job_decode(f->payload, f->payload_len, man, &r->pj, err);
	if (rc)
		return mk_err_prefix(err, "frame #%llu: ", (unsigned long long)f->index);
	rc = run_prepare(r, man, err);
	if (rc)
		return rc;
	/* sent once but with statistics passes: replayed, from memory when
	 * the plan holds the job (mk-plan checked it fits the budget), from
	 * the spill file when it spills it */
	if (r->pj->spill && !r->spill)
		return mk_err_set(err, MK_EINVAL, "job %u (%s): the plan spills it: run mk-merge with --spill DIR",
				  r->pj->id, r->name);
	bool once = r->pj->sends == 1 && r->job.npasses > 0 && !r->job.byte_copy;
	r->held = once && !r->pj->spill;
	r->rp = !once ? NULL : r->pj->spill ? r->spill : r->mem;
	r->gpu = r->cuda && !r->job.byte_copy && !r->check_equal && mk_cuda_job_supported(&r->job);
	if (r->held) {
		/* what is held: every used input's bytes as sent */
		uint64_t need = 0, nb;
		for (size_t i = 0; i < r->pj->ninputs; i++)
			if (r->job.used[i] && !mk_dtype_nbytes(r->pj->inputs[i].dtype, r->pj->inputs[i].nelem, &nb))
				need += nb;
		if (budget && need > budget)
			return mk_err_set(err, MK_ENOMEM,
					  "job %u (%s): the plan holds it in memory, %llu bytes, more than --max-memory %llu; run mk-plan with --max-memory %llu or less",
					  r->pj->id, r->name, (unsigned long long)need, (unsigned long long)budget,
					  (unsigned long long)budget);
		return spill_reserve(r->mem, need, err);
	}
	return 0;
}


/* Outputs computed on the GPU wait here, in job order, until a flush:
 * small jobs (norms, biases, one range each) then share launches instead
 * of one launch and one wait each.  Anything else written to the output
 * (another job's DATA, a passed frame, the END) drains the queue first,
 * so the stream's order is the plan's. */
struct gpu_out {
	size_t index;            /* the output tensor */
	uint64_t row_len, begin, n;
	enum mk_dtype dt;        /* its dtype (the GPU writes float32) */
	void *buf;               /* float32 [n] */
	size_t cap;
};

struct gpu_queue {
	struct gpu_out *q;
	size_t n, cap;
	uint64_t bytes;          /* float32 bytes waiting */
	void *conv;              /* a piece in the output dtype */
	size_t conv_cap;
};

#define GPU_QUEUE_BYTES (64u << 20)
#define GPU_QUEUE_JOBS 256u
#define EMIT_PIECE (1u << 20)   /* at most this many elements per DATA frame */

static int emit_at(struct mk_stream_writer *w, size_t index, uint64_t row_len, uint64_t begin, uint64_t count,
		   enum mk_dtype dt, const void *data, size_t len, struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_chunk c = { .id = (uint32_t)index, .dtype = dt, .elem_begin = begin, .elem_count = count,
			      .data = data, .data_len = len };

	c.row_begin = begin / row_len;
	c.row_count = (begin + count + row_len - 1) / row_len - c.row_begin;
	st->chunks_out++;
	st->bytes_out += len;
	return mk_sw_chunk(w, MK_FT_DATA, &c, err);
}

/* Wait for the GPU and write every queued output, in order. */
static int gpu_drain(struct mk_stream_writer *w, struct gpu_queue *gq, struct pool *pl, struct mk_cuda_ctx *cx,
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
			if (grow_in(pl, &gq->conv, &gq->conv_cap, (size_t)ob + 1))
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			else if (mk_dtype_convert(g->dt, gq->conv, MK_DT_F32, (const float *)g->buf + b, m))
				rc = mk_err_set(err, MK_EUNSUPPORTED, "cannot write %s output", mk_dtype_name(g->dt));
			else
				rc = emit_at(w, g->index, g->row_len, g->begin + b, m, g->dt, gq->conv, (size_t)ob, st,
					     err);
		}
		pool_put(pl, g->buf, g->cap);
	}
	gq->n = 0;
	gq->bytes = 0;
	return rc;
}

static void gpu_queue_free(struct gpu_queue *gq, struct pool *pl)
{
	for (size_t k = 0; k < gq->n; k++)
		pool_put(pl, gq->q[k].buf, gq->q[k].cap);
	free(gq->q);
	free(gq->conv);
}

static int emit(struct mk_stream_writer *w, struct run *r, uint64_t begin, uint64_t count, enum mk_dtype dt,
		const void *data, size_t len, struct mk_merge_stats *st, struct mk_err *err)
{
	int rc = gpu_drain(w, r->gq, r->pool, r->cuda, st, err);

	r->next_out = begin + count;
	return rc ? rc : emit_at(w, r->out_index, r->out_row_len, begin, count, dt, data, len, st, err);
}

/* Submit job elements [b, b + n) to the GPU, its inputs the converted
 * buffers from element `from` of each (the range's start); the output
 * joins the queue, written at the next drain. */
static int gpu_submit(struct mk_stream_writer *w, struct run *r, uint64_t b, uint64_t n, uint64_t from,
		      struct mk_merge_stats *st, struct mk_err *err)
{
	struct gpu_queue *gq = r->gq;
	const void **ptrs = calloc(r->d.ninputs + 1, sizeof(*ptrs));
	struct gpu_out g = { .index = r->out_index, .row_len = r->out_row_len, .begin = b, .n = n,
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
			pool_put(r->pool, g.buf, g.cap);
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
		pool_put(r->pool, g.buf, g.cap);
		return mk_err_prefix(err, "job %u (%s) on the GPU: ", r->pj->id, r->name);
	}
	gq->q[gq->n++] = g;
	gq->bytes += n * 4;
	r->next_out = b + n;
	if (gq->bytes >= GPU_QUEUE_BYTES || gq->n >= GPU_QUEUE_JOBS)
		return gpu_drain(w, gq, r->pool, r->cuda, st, err);
	return 0;
}

/* The gathered range is complete: run a pass over it or write output. */
static int run_workers(struct run *r, uint64_t b, uint64_t n, bool apply, struct mk_err *err);

static int range_done(struct mk_stream_writer *w, struct run *r, struct mk_merge_stats *st,
		      struct mk_err *err)
{
	uint64_t b = r->begin, n;
	int rc = 0;

	r->range = false;
	if (b >= r->out_nelem)
		return 0; /* rows past the output (a longer embedding) */
	n = r->count;
	if (n > r->out_nelem - b)
		n = r->out_nelem - b;
	for (size_t i = 0; i < r->d.ninputs; i++) {
		struct inbuf *in = &r->ib[i];
		if (r->job.used[i] && (!in->have || in->begin != b || in->count < n))
			return mk_err_set(err, MK_ECORRUPT,
					  "job %u (%s): input %zu sent no data for elements [%llu, %llu)", r->pj->id,
					  r->name, i, (unsigned long long)b, (unsigned long long)(b + n));
	}
	if (r->job.byte_copy) {
		if (r->send + 1 < r->pj->sends)
			goto clear;
		struct inbuf *in = &r->ib[r->job.copy_input];
		enum mk_dtype stored = r->pj->inputs[r->job.copy_input].dtype;
		uint64_t len;
		mk_dtype_nbytes(r->job.out.dtype, n, &len);
		if (stored == r->job.out.dtype) {
			rc = emit(w, r, b, n, r->job.out.dtype, in->raw, (size_t)len, st, err);
			goto clear;
		}
		/* cast on load to the output's dtype: one rounding, as torch */
		if (grow(&r->outc, &r->outc_cap, len ? (size_t)len : 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (mk_dtype_convert(r->job.out.dtype, r->outc, stored, in->raw, n))
			return mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): cannot cast %s to %s", r->pj->id,
					  r->name, mk_dtype_name(stored), mk_dtype_name(r->job.out.dtype));
		rc = emit(w, r, b, n, r->job.out.dtype, r->outc, (size_t)len, st, err);
		goto clear;
	}
	{
		size_t es = mk_dtype_bits(r->job.compute) / 8;
		uint64_t ob;
		bool apply = r->send >= r->job.npasses;
		mk_dtype_nbytes(r->job.out.dtype, n, &ob);
		/* a statistics pass reads the converted range afterwards; the
		 * output is converted tile by tile in the workers */
		for (size_t i = 0; !apply && i < r->d.ninputs; i++)
			if (r->job.used[i] && grow(&r->ib[i].conv, &r->ib[i].conv_cap, (size_t)n * es + 1))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (apply && grow(&r->outc, &r->outc_cap, (size_t)ob + 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (apply && r->gpu) {
			/* inputs converted on the workers into the range's buffers,
			 * the method on the GPU, the output converted back here */
			for (size_t i = 0; i < r->d.ninputs; i++)
				if (r->job.used[i] && grow(&r->ib[i].conv, &r->ib[i].conv_cap, (size_t)n * es + 1))
					return mk_err_set(err, MK_ENOMEM, "out of memory");
			rc = run_workers(r, b, n, false, err);
			if (!rc)
				rc = gpu_submit(w, r, b, n, b, st, err);
			goto clear;
		}
		rc = run_workers(r, b, n, apply, err);
		if (!rc && !apply) {
			/* statistics: in element order, on this thread */
			const void **ptrs = calloc(r->d.ninputs + 1, sizeof(*ptrs));
			if (!ptrs)
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			for (size_t i = 0; i < r->d.ninputs; i++)
				ptrs[i] = r->job.used[i] ? r->ib[i].conv : NULL;
			struct mk_job_chunk c = { .elem_begin = b, .count = n, .in = ptrs };
			rc = mk_job_accumulate(&r->job, r->send, &c, err);
			free(ptrs);
		} else if (!rc) {
			rc = emit(w, r, b, n, r->job.out.dtype, r->outc, (size_t)ob, st, err);
		}
	}
clear:
	for (size_t i = 0; i < r->pj->ninputs; i++)
		r->ib[i].have = false;
	return rc;
}

static int finish_passes(struct run *r, unsigned upto, struct mk_err *err)
{
	while (r->passes_done < upto && r->passes_done < r->job.npasses) {
		int rc = mk_job_finish(&r->job, r->passes_done, err);
		if (rc)
			return rc;
		r->passes_done++;
	}
	return 0;
}

static int run_input(struct mk_stream_writer *w, struct run *r, const struct mk_chunk *cp, bool stable,
		     struct mk_merge_stats *st, struct mk_err *err);

static int run_chunk(struct mk_stream_writer *w, struct run *r, const struct mk_frame *f,
		     struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_chunk c;
	int rc = mk_chunk_decode(f->payload, f->payload_len, &c, err);

	if (rc)
		return mk_err_prefix(err, "frame #%llu (INPT): ", (unsigned long long)f->index);
	if (!r->pj)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu: INPT for job %u before any JOB", (unsigned long long)f->index,
				  c.id);
	if ((rc = mk_chunk_check_input(r->pj, &c, err)))
		return mk_err_prefix(err, "frame #%llu: ", (unsigned long long)f->index);
	st->chunks_in++;
	const void *stored = NULL;
	if (r->rp && r->job.used[c.input] && (rc = spill_put(r->rp, &c, &stored, err)))
		return rc;
	if (stored)
		c.data = stored;
	return run_input(w, r, &c, stored != NULL, st, err);
}

/* One input chunk of the job, from the stream or replayed from the spill
 * file. */
static int run_input(struct mk_stream_writer *w, struct run *r, const struct mk_chunk *cp, bool stable,
		     struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_chunk c = *cp;
	int rc;

	if (r->range && (c.pass != r->send || c.elem_begin != r->begin)) {
		rc = range_done(w, r, st, err);
		if (rc)
			return rc;
	}
	if (c.pass != r->send) {
		if (c.pass < r->send)
			return mk_err_set(err, MK_EFORMAT, "job %u went back to send %u", r->pj->id, c.pass);
		rc = finish_passes(r, c.pass, err);
		if (rc)
			return rc;
		r->send = c.pass;
	}
	if (!r->range) {
		r->range = true;
		r->begin = c.elem_begin;
		r->count = 0;
	}
	if (c.elem_count > r->count)
		r->count = c.elem_count;
	struct inbuf *in = &r->ib[c.input];
	in->have = true;
	in->begin = c.elem_begin;
	in->count = c.elem_count;
	if (r->check_equal && c.input > 0) {
		struct inbuf *first = &r->ib[0];
		if (!first->have || first->begin != c.elem_begin || first->raw_len != c.data_len ||
		    memcmp(first->raw, c.data, c.data_len))
			return mk_err_set(err, MK_EMISMATCH,
					  "tensor '%s' (%s) differs between input 0 and input %u: tensors that are not floats are not merged, their inputs must agree",
					  r->name, mk_dtype_name(c.dtype), c.input);
		return 0;
	}
	if (r->job.byte_copy) {
		if ((int)c.input == r->job.copy_input) {
			if (grow(&in->raw, &in->raw_cap, c.data_len ? c.data_len : 1))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			memcpy(in->raw, c.data, c.data_len);
			in->raw_len = c.data_len;
		}
		return 0;
	}
	if (!r->job.used[c.input])
		return 0;
	/* keep the bytes (or where they stay); range_done converts them */
	in->raw_len = c.data_len;
	if (stable) {
		in->data = c.data;
		return 0;
	}
	if (grow(&in->raw, &in->raw_cap, c.data_len ? c.data_len : 1))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	memcpy(in->raw, c.data, c.data_len);
	in->data = in->raw;
	return 0;
}

/* ------------------------------------------------------------ workers */

struct slice {                   /* one worker's share of a range */
	struct run *r;
	uint64_t b, n;           /* job elements [b, b + n) */
	uint64_t off;            /* offset of b in the range */
	bool apply;              /* also run the method and convert out */
	int rc;
	struct mk_err err;
};

/* Convert n elements of input i's raw bytes from element `off` of the
 * range (cast on load when asked) into dst, in the compute dtype. */
static int convert_input(struct run *r, size_t i, uint64_t off, uint64_t n, void *dst, struct mk_err *err)
{
	size_t es = mk_dtype_bits(r->job.compute) / 8;
	enum mk_dtype st = r->pj->inputs[i].dtype, load = r->pj->inputs[i].load_dtype;
	const char *src = (const char *)r->ib[i].data + off * mk_dtype_bits(st) / 8;

	/* a cast on load rounds to the load dtype first, as torch; the
	 * conversion goes through float32 either way, so converting the
	 * load-dtype value again is exact */
	if (load != st && mk_dtype_is_float(load) && mk_dtype_bits(load) < 32) {
		for (uint64_t e = 0; e < n; e += 1024) {
			uint64_t k = n - e < 1024 ? n - e : 1024;
			uint16_t tmp[1024 * 4];
			if (mk_dtype_convert(load, tmp, st, src + e * mk_dtype_bits(st) / 8, k) ||
			    mk_dtype_convert(r->job.compute, (char *)dst + e * es, load, tmp, k))
				return mk_err_set(err, MK_EUNSUPPORTED, "cannot cast %s to %s", mk_dtype_name(st),
						  mk_dtype_name(load));
		}
		return 0;
	}
	if (mk_dtype_convert(r->job.compute, dst, st, src, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): input %zu is %s, which %s cannot merge", r->pj->id,
				  r->name, i, mk_dtype_name(st), r->m->name);
	return 0;
}

/* Run the method over job elements [b, b + n) (at `off` in the range's
 * buffers) from inputs in ptrs, and convert the output into outc. */
static int apply_out(struct run *r, uint64_t b, uint64_t off, uint64_t n, const void **ptrs, void *out,
		     struct mk_err *err)
{
	struct mk_job_chunk c = { .elem_begin = b, .count = n, .in = ptrs };
	int rc = mk_job_apply(&r->job, &c, out, err);

	if (!rc && mk_dtype_convert(r->job.out.dtype, (char *)r->outc + off * mk_dtype_bits(r->job.out.dtype) / 8,
				    r->job.compute, out, n))
		rc = mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): cannot write %s output", r->pj->id, r->name,
				mk_dtype_name(r->job.out.dtype));
	return rc;
}

/* Elements per step when converting, merging and converting back in one
 * go: the inputs, the output and the method's scratch stay in the
 * core's cache instead of going to memory and back between the steps. */
#define WORK_TILE 16384u

/* Convert the used inputs' raw bytes into the compute dtype, then (apply)
 * run the method and convert the output, tile by tile; or (a statistics
 * pass, which reads them next) convert the whole slice into the range's
 * buffers. */
static void *work(void *arg)
{
	struct slice *sl = arg;
	struct run *r = sl->r;
	size_t es = mk_dtype_bits(r->job.compute) / 8, nin = r->d.ninputs;
	const void **ptrs = calloc(nin + 1, sizeof(*ptrs));
	char *tile = NULL;

	if (!ptrs) {
		sl->rc = mk_err_set(&sl->err, MK_ENOMEM, "out of memory");
		return NULL;
	}
	if (sl->apply) {
		if (!(tile = malloc((nin + 1) * (size_t)WORK_TILE * es))) {
			sl->rc = mk_err_set(&sl->err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (uint64_t t = 0; t < sl->n && !sl->rc; t += WORK_TILE) {
			uint64_t k = sl->n - t < WORK_TILE ? sl->n - t : WORK_TILE;
			for (size_t i = 0; i < nin && !sl->rc; i++) {
				if (!r->job.used[i])
					continue;
				ptrs[i] = tile + i * (size_t)WORK_TILE * es;
				sl->rc = convert_input(r, i, sl->off + t, k, (void *)ptrs[i], &sl->err);
			}
			if (!sl->rc)
				sl->rc = apply_out(r, sl->b + t, sl->off + t, k, ptrs,
						   tile + nin * (size_t)WORK_TILE * es, &sl->err);
		}
		goto out;
	}
	for (size_t i = 0; i < nin && !sl->rc; i++)
		if (r->job.used[i])
			sl->rc = convert_input(r, i, sl->off, sl->n, (char *)r->ib[i].conv + sl->off * es, &sl->err);
out:
	free(tile);
	free(ptrs);
	return NULL;
}

/* Run work() over the range's elements [b, b + n) on up to r->threads
 * threads. */
static int run_workers(struct run *r, uint64_t b, uint64_t n, bool apply, struct mk_err *err)
{
	unsigned t = r->threads ? r->threads : 1;
	struct slice sl[64];
	pthread_t th[64];
	bool started[64] = { false };
	int rc = 0;

	if (t > 64)
		t = 64;
	if (n < 65536)
		t = 1; /* not worth a thread */
	uint64_t step = (n + t - 1) / t;
	step = (step + 63) & ~(uint64_t)63;
	for (unsigned k = 0; k < t; k++) {
		uint64_t o = (uint64_t)k * step;
		sl[k] = (struct slice){ .r = r, .b = b + o, .off = o, .apply = apply };
		sl[k].n = o >= n ? 0 : (n - o < step ? n - o : step);
		if (!sl[k].n)
			continue;
		if (k + 1 < t && pthread_create(&th[k], NULL, work, &sl[k]) == 0)
			started[k] = true;
		else
			work(&sl[k]); /* the last share, or no thread: here */
	}
	for (unsigned k = 0; k < t; k++) {
		if (started[k])
			pthread_join(th[k], NULL);
		if (sl[k].n && sl[k].rc && !rc) {
			rc = sl[k].rc;
			*err = sl[k].err;
		}
	}
	return rc;
}


static int run_end(struct mk_stream_writer *w, struct run *r, struct mk_merge_stats *st, struct mk_err *err)
{
	int rc = 0;

	if (!r->pj)
		return 0;
	/* a job sent once: its later passes replayed */
	for (unsigned p = 1; r->rp && !rc && p <= r->job.npasses; p++)
		for (size_t i = 0; !rc && i < r->rp->n; i++) {
			struct mk_chunk c;
			rc = spill_get(r->rp, i, &c, err);
			c.pass = (uint16_t)p;
			if (!rc)
				rc = run_input(w, r, &c, r->rp->fd < 0, st, err);
		}
	if (!rc && r->range)
		rc = range_done(w, r, st, err);
	if (!rc)
		rc = finish_passes(r, r->job.npasses, err);
	if (!rc && r->next_out != r->out_nelem)
		rc = mk_err_set(err, MK_ECORRUPT, "job %u (%s): the inputs covered %llu of %llu output elements",
				r->pj->id, r->name, (unsigned long long)r->next_out, (unsigned long long)r->out_nelem);
	if (!rc) {
		st->jobs++;
		st->byte_copies += r->job.byte_copy;
		st->gpu_jobs += r->gpu;
	}
	run_release(r);
	return rc;
}

/* What mk-merge needs of an inputs stream's HEAD before any data: the
 * plugins' methods loaded with the spec the plan used, the held jobs
 * within the budget, a spill directory for spilled jobs. */
static int check_head(const struct mk_manifest *man, const char *label, const struct mk_merge_opts *o,
		      struct mk_err *err)
{
	for (size_t i = 0; i < man->nplugins; i++) {
		const struct mk_plan_plugin *pp = &man->plugins[i];
		const struct mk_method *pm = mk_method_find(pp->name);
		char have[65];
		if (!pm)
			return mk_err_set(err, MK_ENOENT,
					  "the plan uses method '%s' from a plugin: load it with --plugin FILE or MK_PLUGIN_PATH",
					  pp->name);
		mk_method_spec_hash(pm, have);
		if (strcmp(have, pp->spec_sha256))
			return mk_err_set(err, MK_EMISMATCH,
					  "method '%s' (%s) differs from the one mk-plan used (spec hash %.12s, the plan says %.12s): run mk-plan again with this plugin",
					  pp->name, mk_plugin_of(pm) ? mk_plugin_of(pm) : "built in", have, pp->spec_sha256);
	}
	/* the largest job the plan holds in memory, checked before any data */
	if (o->budget && man->held_bytes_max > o->budget)
		return mk_err_set(err, MK_ENOMEM,
				  "%s: the plan holds jobs of up to %llu bytes in memory, more than --max-memory %llu; run mk-plan with --max-memory %llu or less",
				  label, (unsigned long long)man->held_bytes_max, (unsigned long long)o->budget,
				  (unsigned long long)o->budget);
	/* jobs over the budget sent once: replayed from a local file */
	if (man->spilled_jobs && !o->spill_dir)
		return mk_err_set(err, MK_EINVAL,
				  "%s: the plan sends %llu jobs once for mk-merge to replay from a spill file (mk-plan --spill): run mk-merge with --spill DIR",
				  label, (unsigned long long)man->spilled_jobs);
	return 0;
}

int mk_merge_run(const struct mk_merge_opts *o, int in_fd, const char *label, int out_fd,
		 struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_stream_reader *rd = NULL;
	struct mk_manifest *man = NULL;
	struct mk_frame f;
	int rc;

	memset(st, 0, sizeof(*st));
	rc = mk_sr_open(&rd, in_fd, label, 0, err);
	if (!rc)
		rc = mk_sr_head(rd, label, "inputs", "mk-merge reads an 'inputs' stream (mk-plan | mk-fetch)", &man, &f,
				err);
	if (!rc)
		rc = mk_merge_run_from(o, rd, man, label, out_fd, st, err);
	mk_manifest_free(man);
	mk_sr_free(rd);
	return rc;
}

int mk_merge_run_from(const struct mk_merge_opts *o, struct mk_stream_reader *rd, struct mk_manifest *man,
		      const char *label, int out_fd, struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_stream_writer *w = NULL;
	struct mk_frame f;
	struct pool pool = { .limit = o->budget ? o->budget / 2 : 256u << 20 };
	struct spill spill = { .fd = -1 }, mem = { .fd = -1 };
	struct gpu_queue gq = { 0 };
	struct run r = { .pool = &pool, .cuda = o->cuda, .gq = &gq, .mem = &mem };
	char *head = NULL;
	size_t hlen;
	uint64_t njobs = 0, seen = 0;
	int rc;

	memset(st, 0, sizeof(*st));
	rc = check_head(man, label, o, err);
	if (rc)
		goto out;
	if (o->spill_dir) {
		rc = spill_open(&spill, o->spill_dir, err);
		if (rc)
			goto out;
		r.spill = &spill;
	}
	njobs = man->njobs;
	rc = mk_manifest_set_kind(man, "tensors", "mk-merge " MK_VERSION, err);
	if (!rc)
		rc = mk_manifest_encode(man, &head, &hlen, err);
	if (!rc)
		rc = mk_sw_open(&w, out_fd, o->compress_level, err);
	if (!rc)
		rc = mk_sw_frame1(w, MK_FT_HEAD, head, hlen, err);
	if (rc)
		goto out;
	while ((rc = mk_sr_next(rd, &f, err)) > 0) {
		if (!strcmp(f.type, MK_FT_INPT)) {
			rc = run_chunk(w, &r, &f, st, err);
		} else if (!strcmp(f.type, MK_FT_JOB)) {
			seen++;
			rc = run_end(w, &r, st, err);
			if (!rc)
				rc = run_start(&r, man, &f, o->threads, o->budget, err);
			if (!rc && o->progress)
				o->progress(o->progress_ctx, st->jobs, njobs);
		} else if (!strcmp(f.type, MK_FT_END)) {
			rc = run_end(w, &r, st, err);
			if (!rc && seen != njobs)
				rc = mk_err_set(err, MK_EFORMAT, "%s: the HEAD announces %llu jobs, the stream has %llu",
						label, (unsigned long long)njobs, (unsigned long long)seen);
			if (!rc)
				rc = gpu_drain(w, &gq, &pool, o->cuda, st, err);
		} else if (!strcmp(f.type, MK_FT_FILE) || !f.critical) {
			rc = gpu_drain(w, &gq, &pool, o->cuda, st, err);
			if (!rc)
				rc = mk_sw_pass(w, &f, err);
		} else {
			rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: unexpected %s frame in an 'inputs' stream",
					label, (unsigned long long)f.index, f.type);
		}
		if (rc)
			goto out;
	}
	if (rc < 0)
		goto out;
	rc = gpu_drain(w, &gq, &pool, o->cuda, st, err);
	if (!rc)
		rc = mk_sw_end(w, err);
out:
	if (gq.n) {
		/* a failure with outputs in flight: let the GPU finish writing
		 * them before their buffers go */
		struct mk_err ignored;
		mk_cuda_flush(o->cuda, &ignored);
	}
	gpu_queue_free(&gq, &pool);
	run_release(&r);
	pool_free(&pool);
	st->spill_bytes_max = spill.bytes_max;
	spill_close(&spill);
	spill_close(&mem);
	free(head);
	mk_sw_free(w);
	return rc;
}
