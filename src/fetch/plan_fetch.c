/* plan_fetch.c - mk-fetch's plan mode: a plan stream in, an inputs stream
 * out (each job's input chunks read from the models). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cblas.h>
#include "mk/chan.h"
#include "fetch/fetch.h"
#include "core/fsutil.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "journal/journal.h"
#include "mk/stream.h"
#include "fetch_impl.h"

struct held {                    /* a frame kept to be passed on later */
	uint8_t *wire;           /* in memory: header + payload; or NULL ... */
	size_t len;
	uint64_t off;            /* ... in the spool file at off, len bytes */
	uint8_t hdr[MK_FRAME_HDR]; /* (spooled: its header, to pass it on) */
};

/* Where a plan's FILE frames wait for the HEAD to go out: in memory up
 * to a bound, then in an unlinked scratch file. */
struct spool {
	int fd;                  /* -1 until needed */
	uint64_t end;            /* bytes in the file */
	uint64_t in_memory;      /* bytes of frames held in memory */
	uint64_t bound;          /* what may be held in memory */
	uint8_t *buf;            /* a piece (SPOOL_PIECE) */
};
#define SPOOL_PIECE (256u << 10)

struct seg {                     /* a run of an input's elements on disk */
	int fd;
	struct mk_hub_blob *remote;  /* or NULL */
	uint64_t data_off;       /* file offset of the run's first element */
	uint64_t elem_begin;     /* the input's element index it starts at */
	const struct mk_st_tensor *strided; /* a view: read by gathering */
	uint64_t data_start;     /* (of its file) */
};

struct src {                     /* an input tensor's place on disk: one run,
				    or one per source tensor of an assembly */
	size_t nseg;
	struct seg *seg;
	enum mk_dtype rdt;       /* the dtype read: the input's, or that of the
				    adapter tensor that replaces it */
	struct mk__held held;    /* storage bytes of a strided source */
	long feed;               /* its bytes from feeds[feed], or -1 */
	size_t feed_tensor;      /* (that stream's tensor index) */
};

/* A model's tensors from a live tensors stream (mk_fetch_opts.feed_fds):
 * the DATA frame being taken apart, and which tensors the plan reads. */
struct feed {
	const char *ref;
	struct mk_stream_reader *r;
	struct mk_manifest *head;
	bool *wanted;            /* per stream tensor: a job reads it */
	bool *done;              /* per stream tensor: read (in wanted's block) */
	struct mk_chunk c;       /* the current DATA frame (have) */
	bool have;
	uint64_t used;           /* its elements already taken */
	uint64_t next_elem;      /* of the tensor being taken: the next element */
	long cur;                /* that tensor, or -1 */
};

struct tag {                     /* what an extent is */
	size_t job;
	size_t input;
	uint64_t at;             /* the input's stored element it begins at */
	struct mk_chunk c;
	struct mk__gread g;      /* a strided source's read; g.t NULL for others */
};

/* A LoRA input's A and B (mk/plan.h), in float32, read whole when its job's
 * first chunk comes: r·(in + out) elements, small beside W. */
struct lora_ab {
	size_t job, input;
	bool live;
	float *a, *b;
	uint64_t r, a1, b0;      /* A [r, a1], B [b0, r] */
};

/* W + s·B·A for a chunk, in float32, rounded to W's dtype (mk-stream(5)):
 * the scratch of the current chunk. */
struct lora_work {
	struct lora_ab *ab;      /* per input of the current job */
	size_t nab;
	float *w, *d;            /* the chunk as float32; the delta over its rows */
	size_t wcap, dcap;       /* in elements */
	uint8_t *out;            /* the chunk sent */
	size_t ocap;
};

struct pf {
	struct mk_plan_job **jobs;
	size_t njobs;
	struct src **src;        /* [job][input] */
	size_t chunk_bytes;
	/* iteration state */
	size_t j;                /* job */
	unsigned send;
	struct mk_chunker ck;
	bool ck_live;
	struct mk_chunk cur;     /* current chunk range (in the job's elements) */
	size_t input;            /* next input of the current range */
	bool have_range;
	struct tag *ring;
	size_t ring_len;
	uint64_t seq;
	uint64_t *last_end;      /* per file descriptor: where its last read ended */
	size_t nlast;
	uint64_t backward;       /* reads that went back in their file */
	struct mk__gfill fill;   /* a strided chunk's reads being asked */
	struct tag fill_tag;
	const struct mk_chan_skip *skip;   /* mk_fetch_opts.skip */
	uint64_t unsent;         /* chunks of skipped passes not asked for */
};

/* Whether job j's chunks of pass `pass` are left out: the merge beside us
 * will not read that pass (mk_fetch_opts.skip) and they come from files
 * as they are (mk_plan_job_sent_as_read, and no stream feeding a model). */
static bool pass_unsent(const struct pf *p, size_t j, unsigned pass)
{
	if (!p->skip || !mk_chan_skip_test(p->skip, p->jobs[j]->id, pass) || !mk_plan_job_sent_as_read(p->jobs[j]))
		return false;
	for (size_t i = 0; i < p->jobs[j]->ninputs; i++)
		if (p->src[j][i].feed >= 0)
			return false;
	return true;
}

/* The current DATA frame of stream tensor ix, its elements from
 * next_elem on: frames of tensors no job reads, or read already (the
 * rest of a frame whose last rows a vocabulary left out), dropped.  A
 * frame of any other tensor while ix is not whole means the plan does
 * not read the stream in its order: an error. */
static int feed_frame(struct feed *fd, size_t ix, struct mk_err *err)
{
	const char *name = fd->head->tensors[ix].name;

	for (;;) {
		if (!fd->have) {
			struct mk_frame f;
			int rc = mk_sr_next(fd->r, &f, err);
			if (rc < 0)
				return mk_err_prefix(err, "streamed model '%s': ", fd->ref);
			if (rc == 0)
				return mk_err_set(err, MK_ECORRUPT,
						  "streamed model '%s': its stream ended before tensor '%s' was read",
						  fd->ref, name);
			if (strcmp(f.type, MK_FT_DATA))
				continue;     /* its files, notes: not read from a stream */
			if ((rc = mk_chunk_decode(f.payload, f.payload_len, &fd->c, err)) ||
			    (rc = mk_chunk_check_data(fd->head, &fd->c, err)))
				return mk_err_prefix(err, "streamed model '%s': ", fd->ref);
			fd->have = true;
			fd->used = 0;
		}
		if (!fd->wanted[fd->c.id] || fd->done[fd->c.id]) {
			fd->have = false;     /* a tensor no job reads, or read */
			continue;
		}
		if (fd->c.id != ix)
			return mk_err_set(err, MK_EFORMAT,
					  "streamed model '%s': tensor '%s' came before '%s' was read: the plan reads the stream in another order",
					  fd->ref, fd->head->tensors[fd->c.id].name, name);
		if (fd->c.elem_begin + fd->used != fd->next_elem)
			return mk_err_set(err, MK_EFORMAT, "streamed model '%s': tensor '%s': a chunk at element %llu, %llu expected",
					  fd->ref, name, (unsigned long long)(fd->c.elem_begin + fd->used),
					  (unsigned long long)fd->next_elem);
		return 0;
	}
}

/* Elements [at, at + n) of stream tensor `ix` into dst, from the DATA
 * frames as they come; the elements before `at` not taken yet are
 * dropped (rows a vocabulary leaves out).  A jump back is an error. */
static int feed_take(struct feed *fd, size_t ix, uint64_t at, uint64_t n, enum mk_dtype dt, uint8_t *dst,
		     struct mk_err *err)
{
	if (fd->cur != (long)ix) {
		if (fd->cur >= 0)
			fd->done[fd->cur] = true; /* each tensor is read once (mk_fetch_feed_check) */
		fd->cur = (long)ix;
		fd->next_elem = 0;
	}
	if (at < fd->next_elem)
		return mk_err_set(err, MK_EFORMAT,
				  "streamed model '%s': tensor '%s' read from element %llu, the stream is past it (%llu)",
				  fd->ref, fd->head->tensors[ix].name, (unsigned long long)at,
				  (unsigned long long)fd->next_elem);
	while (n || fd->next_elem < at) {
		int rc = feed_frame(fd, ix, err);
		if (rc)
			return rc;
		uint64_t k = fd->c.elem_count - fd->used, off, len;
		bool skip = fd->next_elem < at;
		if (skip && k > at - fd->next_elem)
			k = at - fd->next_elem;
		else if (!skip && k > n)
			k = n;
		if (!skip) {
			(void)mk_dtype_nbytes(dt, fd->used, &off);
			(void)mk_dtype_nbytes(dt, k, &len);
			memcpy(dst, (const uint8_t *)fd->c.data + off, (size_t)len);
			dst += len;
			n -= k;
		}
		fd->used += k;
		fd->next_elem += k;
		if (fd->used == fd->c.elem_count)
			fd->have = false;
	}
	return 0;
}

/* Open the feeds of the plan's models; a fed model's inputs checked
 * against its stream's HEAD when they are placed. */
static int feeds_open(const struct mk_fetch_opts *o, struct feed *fv, struct mk_err *err)
{
	for (size_t k = 0; k < o->nfeeds; k++) {
		struct mk_frame f;
		fv[k] = (struct feed){ .ref = o->feed_refs[k], .cur = -1 };
		/* FILE frames piecewise: skipped, never held whole */
		int rc = mk_sr_open(&fv[k].r, o->feed_fds[k], o->feed_refs[k], MK_SR_PIECEWISE_FILE, err);
		if (!rc)
			rc = mk_sr_head(fv[k].r, o->feed_refs[k], "tensors", "a streamed model is a merge's output",
					&fv[k].head, &f, err);
		if (rc)
			return mk_err_prefix(err, "streamed model '%s': ", o->feed_refs[k]);
		if (!(fv[k].wanted = calloc(2 * (fv[k].head->ntensors + 1), sizeof(bool))))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		fv[k].done = fv[k].wanted + fv[k].head->ntensors + 1;
	}
	return 0;
}

static long feed_of(const struct mk_fetch_opts *o, const char *ref)
{
	for (size_t k = 0; k < o->nfeeds; k++)
		if (!strcmp(o->feed_refs[k], ref))
			return (long)k;
	return -1;
}

/* A vocabulary job's input whose stored rows are read in their order
 * (some perhaps left out): read from a stream as it comes. */
static bool runs_ascend(const struct mk_plan_input *in)
{
	for (size_t k = 1; k < in->nruns; k++)
		if (in->runs[k].src < in->runs[k - 1].src + in->runs[k - 1].n)
			return false;
	return true;
}

int mk_fetch_feed_check(const struct mk_manifest *stream, const size_t *rank, size_t model,
			struct mk_plan_job *const *jobs, size_t njobs, struct mk_err *err)
{
	bool *seen = calloc(stream->ntensors + 1, sizeof(*seen));
	long last = -1;
	int rc = 0;

	if (!seen)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t j = 0; j < njobs && !rc; j++) {
		const struct mk_plan_job *jb = jobs[j];
		size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0), reads = 0;
		for (size_t i = 0; i < nin && !rc; i++) {
			const struct mk_plan_input *in = mk_plan_job_input(jb, i);
			if (in->model != model && !(in->lora && in->lora->model == model))
				continue;
			long ix = mk_manifest_find(stream, in->tensor);
			const char *why = NULL;
			if (in->model != model || in->lora)
				why = "a LoRA adapter is applied to it";
			else if (ix < 0)
				why = "the merge making it has no such output tensor";
			else if (!mk_tensor_desc_equal(&stream->tensors[ix].desc, &in->desc))
				why = "its dtype or shape is not the output's";
			else if (in->nsources)
				why = "it is assembled from several tensors";
			else if (i >= jb->ninputs)
				why = "the job reads some of its rows for other tokens' embeddings";
			else if (jb->vocab && !runs_ascend(in))
				why = "its rows are aligned to another vocabulary in another order";
			else if (jb->sends != 1)
				why = "the job reads its inputs more than once (statistics passes over the memory budget)";
			else if (++reads > 1)
				why = "the job reads two of its tensors at once";
			else if (seen[ix])
				why = "it is read twice";
			else if (rank && (long)rank[ix] <= last)
				why = "it is read before a tensor the merge making it writes earlier";
			if (why) {
				rc = mk_err_set(err, MK_EINVAL, "job %u (%s): %s", jb->id, in->tensor, why);
				break;
			}
			seen[ix] = true;
			if (rank)
				last = (long)rank[ix];
		}
	}
	free(seen);
	return rc;
}

/* A fed model's input placed (mk_fetch_feed_check passed): which tensor
 * of its stream it is. */
static void feed_place(struct feed *fd, const struct mk_plan_input *in, struct src *sr)
{
	long ix = mk_manifest_find(fd->head, in->tensor);

	fd->wanted[ix] = true;
	sr->feed_tensor = (size_t)ix;
}

/* After the last job: the rest of each stream read, so its producer ends. */
static int feeds_drain(struct feed *fv, size_t n, struct mk_err *err)
{
	for (size_t k = 0; k < n; k++) {
		struct mk_frame f;
		int rc;
		while ((rc = mk_sr_next(fv[k].r, &f, err)) > 0)
			;
		if (rc < 0)
			return mk_err_prefix(err, "streamed model '%s': ", fv[k].ref);
	}
	return 0;
}

static void feeds_free(struct feed *fv, size_t n)
{
	for (size_t k = 0; fv && k < n; k++) {
		mk_sr_free(fv[k].r);
		mk_manifest_free(fv[k].head);
		free(fv[k].wanted);
	}
	free(fv);
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

static size_t njob_inputs(const struct mk_plan_job *jb)
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

static int next_extent(void *ctx, struct mk_read_req *req, struct mk_err *err)
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
			if (pass_unsent(p, p->j, p->send)) {
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

static int hold(struct held **v, size_t *n, const struct mk_frame *f, struct mk_err *err)
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

/* A piecewise FILE frame into memory (under the spool's bound) or the
 * spool file, as transmitted; kept only once its checksum matched. */
static int hold_piecewise(struct held **v, size_t *n, struct spool *sp, struct mk_stream_reader *r,
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

static int pass_held(struct mk_stream_writer *w, const struct spool *sp, const struct held *h, struct mk_err *err)
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

static int check_models(const struct mk_fetch_opts *o, const struct mk_manifest *head, struct mk_model **models,
			struct mk_err *err)
{
	const struct mk_plan_model *pm = head->models;

	for (size_t i = 0; i < head->nmodels; i++) {
		struct mk_model_open_opts mo;
		if (feed_of(o, pm[i].ref) >= 0)
			continue;         /* its tensors come from a stream */
		mk_fetch_model_opts(o, pm[i].commit, &mo);
		mo.adapter = pm[i].adapter;
		if (mo.adapter)
			mo.weights = MK_MODEL_DOWNLOAD;   /* small, and read whole (A, B) */
		int rc = mk_model_open_with(pm[i].ref, &mo, &models[i], err);
		if (rc)
			return rc;
		for (size_t s = 0; s < pm[i].nshards; s++) {
			const struct mk_plan_shard *ps = &pm[i].shards[s];
			const struct mk_st_file *f = NULL;
			for (size_t k = 0; k < models[i]->nshards; k++)
				if (!strcmp(models[i]->shard_names[k], ps->name))
					f = models[i]->shards[k];
			if (!f)
				return mk_err_set(err, MK_EMISMATCH,
						  "model '%s': shard '%s' of the plan is not in %s: the model changed since mk-plan ran; run mk-plan again",
						  pm[i].ref, ps->name, models[i]->dir);
			if (f->file_size != ps->size || memcmp(f->header_hash, ps->header_sha256, 32))
				return mk_err_set(err, MK_EMISMATCH,
						  "model '%s': shard '%s' differs from the plan (%llu bytes, the plan says %llu%s); run mk-plan again",
						  pm[i].ref, ps->name, (unsigned long long)f->file_size,
						  (unsigned long long)ps->size,
						  f->file_size == ps->size ? ", and the header hash differs" : "");
		}
	}
	return 0;
}

/* ------------------------------------------------------------ LoRA inputs */

/* A LoRA input's adapter tensors against the plan: A and B 2-dimensional
 * floats whose delta has W's shape, or a replacement of W's element count
 * (whose place is then the input's: *rep). */
static int lora_check(const struct mk_manifest *head, struct mk_model **models, const struct mk_plan_job *jb,
		      size_t i, const struct mk_plan_input *in, const struct mk_model_tensor **rep, struct mk_err *err)
{
	const struct mk_plan_lora *l = in->lora;
	const struct mk_model *am = models[l->model];
	const char *ref = head->models[l->model].ref;

	*rep = NULL;
	if (l->replace) {
		const struct mk_model_tensor *t = mk_model_find(am, l->replace);
		if (!t || t->t->nelem != in->nelem || !mk_dtype_is_float(t->t->desc.dtype) ||
		    !mk_dtype_is_float(in->desc.dtype))
			return mk_err_set(err, MK_EMISMATCH,
					  "job %u: input %zu: adapter '%s' %s '%s' of %llu float elements, as the plan says; run mk-plan again",
					  jb->id, i, ref, t ? "does not have" : "has no", l->replace,
					  (unsigned long long)in->nelem);
		*rep = t;
		if (!l->a)
			return 0;
	}
	const struct mk_model_tensor *a = mk_model_find(am, l->a), *b = mk_model_find(am, l->b);
	const uint64_t *ws = in->desc.shape;
	bool ok = a && b && a->t->desc.ndim == 2 && b->t->desc.ndim == 2 && mk_dtype_is_float(a->t->desc.dtype) &&
		  mk_dtype_is_float(b->t->desc.dtype) && mk_dtype_is_float(in->desc.dtype) && in->desc.ndim == 2 &&
		  a->t->desc.shape[0] == b->t->desc.shape[1] &&
		  (l->transpose ? ws[0] == a->t->desc.shape[1] && ws[1] == b->t->desc.shape[0] :
				  ws[0] == b->t->desc.shape[0] && ws[1] == a->t->desc.shape[1]);
	if (!ok)
		return mk_err_set(err, MK_EMISMATCH,
				  "job %u: input %zu ('%s'): adapter '%s''s '%s' and '%s' do not make a delta of its shape as the plan says; run mk-plan again",
				  jb->id, i, in->tensor, ref, l->a, l->b);
	return 0;
}

/* Read an adapter tensor whole into float32 (malloc'ed). */
static int read_f32(const struct mk_model *m, int *fds, const char *name, float **out, struct mk_err *err)
{
	const struct mk_model_tensor *t = mk_model_find(m, name);
	uint64_t bytes = t->t->end - t->t->begin;
	void *raw = malloc(bytes ? bytes : 1);
	float *f = malloc((t->t->nelem ? t->t->nelem : 1) * sizeof(float));
	int rc = 0;

	*out = NULL;
	if (!raw || !f)
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	else if ((rc = mk_pread_exact(fds[t->shard], raw, bytes, m->shards[t->shard]->data_start + t->t->begin,
				      m->shards[t->shard]->path, err)))
		;
	else if (mk_dtype_convert(MK_DT_F32, f, t->t->desc.dtype, raw, t->t->nelem))
		rc = mk_err_set(err, MK_EUNSUPPORTED, "adapter tensor '%s': cannot convert %s to float32", name,
				mk_dtype_name(t->t->desc.dtype));
	free(raw);
	if (rc)
		free(f);
	else
		*out = f;
	return rc;
}

static int grow(void **buf, size_t *cap, size_t n, size_t es)
{
	if (n <= *cap)
		return 0;
	void *q = realloc(*buf, n * es);
	if (!q)
		return -1;
	*buf = q;
	*cap = n;
	return 0;
}

/* The chunk of a LoRA input (t), read as `data`, made into what mk-fetch
 * sends: a replacement converted to W's dtype; else W + s·B·A over the
 * chunk's elements, in float32: the delta of every row the chunk touches
 * by one sgemm (B's rows times A; transposed, A's columns times B's
 * rows), scaled, then added to W and rounded to W's dtype. */
static int lora_apply(struct lora_work *lw, const struct pf *p, struct mk_model **models, int **fds,
		      const struct tag *t, const void *data, const void **sent, struct mk_err *err)
{
	const struct mk_plan_job *jb = p->jobs[t->job];
	const struct mk_plan_input *in = mk_plan_job_input(jb, t->input);
	const struct mk_plan_lora *l = in->lora;
	enum mk_dtype wdt = in->desc.dtype;
	uint64_t n = t->c.elem_count, bytes;
	size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);

	(void)mk_dtype_nbytes(wdt, n, &bytes);
	if (grow((void **)&lw->out, &lw->ocap, (size_t)bytes + 1, 1) || grow((void **)&lw->w, &lw->wcap, n + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*sent = lw->out;
	if (l->replace) {        /* loaded into W, in W's dtype */
		if (mk_dtype_convert(wdt, lw->out, p->src[t->job][t->input].rdt, data, n))
			return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot convert the adapter's '%s' to %s", jb->id,
					  l->replace, mk_dtype_name(wdt));
		if (!l->a)
			return 0;
		data = lw->out;  /* W, to which the delta is added */
	}
	/* A and B of this job's input, read once per job */
	if (lw->nab < nin) {
		struct lora_ab *q = realloc(lw->ab, nin * sizeof(*q));
		if (!q)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		memset(q + lw->nab, 0, (nin - lw->nab) * sizeof(*q));
		lw->ab = q;
		lw->nab = nin;
	}
	struct lora_ab *ab = &lw->ab[t->input];
	if (!ab->live || ab->job != t->job || ab->input != t->input) {
		const struct mk_model *am = models[l->model];
		const struct mk_st_tensor *ta = mk_model_find(am, l->a)->t, *tb = mk_model_find(am, l->b)->t;
		free(ab->a);
		free(ab->b);
		*ab = (struct lora_ab){ .job = t->job, .input = t->input, .r = ta->desc.shape[0], .a1 = ta->desc.shape[1],
					.b0 = tb->desc.shape[0] };
		int rc = read_f32(am, fds[l->model], l->a, &ab->a, err);
		if (!rc)
			rc = read_f32(am, fds[l->model], l->b, &ab->b, err);
		if (rc)
			return mk_err_prefix(err, "job %u: ", jb->id);
		ab->live = true;
	}
	uint64_t rl = in->desc.shape[1], first = t->at / rl, last = (t->at + n - 1) / rl, nrows = last - first + 1;
	uint64_t nd = nrows * rl;
	if (grow((void **)&lw->d, &lw->dcap, (size_t)nd + 1, sizeof(float)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!l->transpose)       /* delta rows first..last = B[first..last] · A */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)nrows, (blasint)rl, (blasint)ab->r, 1.0f,
			    ab->b + first * ab->r, (blasint)ab->r, ab->a, (blasint)ab->a1, 0.0f, lw->d, (blasint)rl);
	else                     /* (B·A)ᵀ rows first..last = A[:, first..last]ᵀ · Bᵀ */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)nrows, (blasint)rl, (blasint)ab->r, 1.0f,
			    ab->a + first, (blasint)ab->a1, ab->b, (blasint)ab->r, 0.0f, lw->d, (blasint)rl);
	float s = (float)l->scale, *d = lw->d + (t->at - first * rl);
	for (uint64_t e = 0; e < n; e++)
		d[e] *= s;
	if (mk_dtype_convert(MK_DT_F32, lw->w, wdt, data, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: input %zu is %s: cannot add a LoRA delta to it", jb->id,
				  t->input, mk_dtype_name(wdt));
	/* an embedding's delta goes to W's dtype before the add (PEFT) */
	if (l->embedding && wdt != MK_DT_F32 &&
	    (mk_dtype_convert(wdt, lw->out, MK_DT_F32, d, n) || mk_dtype_convert(MK_DT_F32, d, wdt, lw->out, n)))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(wdt));
	for (uint64_t e = 0; e < n; e++)
		lw->w[e] += d[e];
	if (mk_dtype_convert(wdt, lw->out, MK_DT_F32, lw->w, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u: cannot round to %s", jb->id, mk_dtype_name(wdt));
	return 0;
}

int mk_fetch_plan(const struct mk_fetch_opts *o, int in_fd, const char *label, int out_fd,
		  struct mk_fetch_stats *st, struct mk_err *err)
{
	struct mk_stream_reader *r = NULL;
	struct mk_stream_writer *w = NULL;
	struct mk_reader *rd = NULL;
	struct mk_manifest *head = NULL;
	struct mk_model **models = NULL;
	struct held *frames = NULL, *jobframes = NULL;
	struct spool sp = { .fd = -1, .bound = o->hold_bytes ? o->hold_bytes : MK_FETCH_HOLD_DEFAULT };
	size_t nframes = 0, njf = 0, written = 0;
	int **fds = NULL;
	struct pf p = { 0 };
	struct lora_work lw = { 0 };
	struct mk_reader_opts ropts = { .kind = o->io, .chunk_bytes = o->chunk_bytes, .qdepth = o->qdepth };
	struct mk_frame f;
	char *hjson = NULL;
	size_t hlen;
	uint64_t done = 0, total = 0, sent = 0;
	uint8_t *gbuf = NULL, *fbuf = NULL;
	size_t gcap = 0, fcap = 0, held_job = 0;
	struct feed *feeds = NULL;
	int placeholder = -1;
	int rc;

	memset(st, 0, sizeof(*st));
	p.chunk_bytes = o->chunk_bytes ? o->chunk_bytes : MK_READER_DEFAULT_CHUNK;
	p.skip = o->skip;
	ropts.chunk_bytes = p.chunk_bytes;
	/* FILE frames are read in pieces and held in memory up to a bound,
	 * the rest in a scratch file, until the HEAD has gone out */
	rc = mk_sr_open(&r, in_fd, label, MK_SR_PIECEWISE_FILE, err);
	if (rc)
		goto out;
	rc = mk_sr_head(r, label, "plan", "mk-fetch reads a 'plan' (from mk-plan)", &head, &f, err);
	if (rc)
		goto out;
	models = calloc(head->nmodels + 1, sizeof(*models));
	fds = calloc(head->nmodels + 1, sizeof(*fds));
	if (!models || !fds) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	feeds = calloc(o->nfeeds + 1, sizeof(*feeds));
	if (!feeds) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = check_models(o, head, models, err);
	if (!rc)
		rc = feeds_open(o, feeds, err);
	if (!rc && o->nfeeds) {
		/* what a fed input's read reads: chunk_bytes of a hole */
		rc = mk_tmpfile_open(mk_tmpdir(), "a streamed model's placeholder", &placeholder, err);
		if (!rc && ftruncate(placeholder, (off_t)p.chunk_bytes))
			rc = mk_err_sys(err, errno, "a streamed model's placeholder");
	}
	if (rc)
		goto out;
	/* the rest of the plan: files, jobs, notes */
	while ((rc = mk_sr_next(r, &f, err)) > 0) {
		if (!strcmp(f.type, MK_FT_END))
			continue;
		if (!strcmp(f.type, MK_FT_JOB)) {
			struct mk_plan_job *jb;
			rc = mk_plan_job_decode(f.payload, f.payload_len, head, &jb, err);
			if (rc) {
				mk_err_prefix(err, "%s: frame #%llu: ", label, (unsigned long long)f.index);
				goto out;
			}
			struct mk_plan_job **q = realloc(p.jobs, (p.njobs + 1) * sizeof(*q));
			if (!q) {
				mk_plan_job_free(jb);
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			p.jobs = q;
			p.jobs[p.njobs++] = jb;
			rc = hold(&jobframes, &njf, &f, err);
		} else if (f.piecewise) {
			rc = hold_piecewise(&frames, &nframes, &sp, r, &f, err);
		} else if (!strcmp(f.type, MK_FT_FILE) || !f.critical) {
			rc = hold(&frames, &nframes, &f, err);
		} else {
			rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: unexpected %s frame in a plan", label,
					(unsigned long long)f.index, f.type);
		}
		if (rc)
			goto out;
	}
	if (rc < 0)
		goto out;
	if (p.njobs != head->njobs) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: the HEAD announces %llu jobs, the plan has %zu", label,
				(unsigned long long)head->njobs, p.njobs);
		goto out;
	}
	/* --skip-done: leave out the jobs whose outputs an interrupted mk-pack
	 * finished (and their JOB frames); the HEAD counts the jobs sent */
	if (o->skip_done) {
		struct mk_journal *j = NULL;
		bool *isdone = calloc(head->ntensors + 1, sizeof(*isdone));
		rc = isdone ? mk_journal_read(o->skip_done, &j, err) : mk_err_set(err, MK_ENOMEM, "out of memory");
		if (!rc)
			rc = mk_journal_check(j, o->skip_done, head, UINT64_MAX, err);
		if (!rc && j->key[0]) {
			size_t kept = 0;
			uint64_t spilled = 0;
			for (size_t d = 0; d < j->ndone; d++)
				isdone[j->done[d].index] = true;
			for (size_t k = 0; k < p.njobs; k++) {
				if (isdone[p.jobs[k]->output]) {
					mk_plan_job_free(p.jobs[k]);
					free(jobframes[k].wire);
					st->skipped++;
					continue;
				}
				spilled += p.jobs[k]->spill;
				p.jobs[kept] = p.jobs[k];
				jobframes[kept++] = jobframes[k];
			}
			p.njobs = njf = kept;
			head->njobs = kept;
			head->spilled_jobs = spilled;
		}
		mk_journal_free(j);
		free(isdone);
		if (rc)
			goto out;
	}
	/* the fed models: read as their streams come */
	for (size_t m = 0; m < head->nmodels; m++) {
		long k = models[m] ? -1 : feed_of(o, head->models[m].ref);
		if (k >= 0 && (rc = mk_fetch_feed_check(feeds[k].head, NULL, m, p.jobs, p.njobs, err))) {
			mk_err_prefix(err, "streamed model '%s': ", feeds[k].ref);
			goto out;
		}
	}
	/* open shards once; place every job input */
	for (size_t m = 0; m < head->nmodels; m++) {
		if (!models[m])
			continue;     /* fed */
		rc = mk_model_open_fds(models[m], &fds[m], err);
		if (rc)
			goto out;
	}
	p.src = calloc(p.njobs + 1, sizeof(*p.src));
	if (!p.src) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t j = 0; j < p.njobs; j++) {
		struct mk_plan_job *jb = p.jobs[j];
		size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);
		p.src[j] = calloc(nin + 1, sizeof(**p.src));
		if (!p.src[j]) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < nin; i++) {
			const struct mk_plan_input *in = mk_plan_job_input(jb, i);
			uint64_t at = 0;
			size_t ns = in->nsources ? in->nsources : 1;
			struct src *sr = &p.src[j][i];
			sr->seg = calloc(ns, sizeof(*sr->seg));
			if (!sr->seg) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			sr->nseg = ns;
			sr->rdt = in->desc.dtype;
			sr->feed = models[in->model] ? -1 : feed_of(o, head->models[in->model].ref);
			if (sr->feed >= 0) {
				uint64_t tb = 0;
				feed_place(&feeds[sr->feed], in, sr);
				sr->seg[0] = (struct seg){ .fd = placeholder };
				mk_dtype_nbytes(in->desc.dtype, in->nelem, &tb);
				total += tb * jb->sends;
				continue;
			}
			for (size_t k = 0; k < ns; k++) {
				const char *name = in->nsources ? in->sources[k] : in->tensor;
				const struct mk_model_tensor *mt = mk_model_find(models[in->model], name);
				bool ok = mt && (in->nsources ? mt->t->desc.dtype == in->desc.dtype :
							 mk_tensor_desc_equal(&mt->t->desc, &in->desc));
				if (!ok) {
					rc = mk_err_set(err, MK_EMISMATCH,
							"job %u: model '%s' %s tensor '%s' as the plan says (%s); run mk-plan again",
							jb->id, head->models[in->model].ref, mt ? "does not have" : "has no", name,
							mt ? "dtype or shape differs" : "missing");
					goto out;
				}
				uint64_t ds = models[in->model]->shards[mt->shard]->data_start, tb = 0;
				sr->seg[k] = (struct seg){ fds[in->model][mt->shard],
							   models[in->model]->remote ?
							   models[in->model]->remote[mt->shard] : NULL,
							   ds + mt->t->begin, at, mt->t->stride ? mt->t : NULL, ds };
				at += mt->t->nelem;
				mk_dtype_nbytes(mt->t->desc.dtype, mt->t->nelem, &tb);
				total += tb * jb->sends;
			}
			if (at != in->nelem) {
				rc = mk_err_set(err, MK_EMISMATCH, "job %u: input '%s': its sources hold %llu elements, the plan says %llu",
						jb->id, in->tensor, (unsigned long long)at, (unsigned long long)in->nelem);
				goto out;
			}
			if (in->lora) {
				const struct mk_model_tensor *rt;
				if ((rc = lora_check(head, models, jb, i, in, &rt, err)))
					goto out;
				if (rt) {   /* read the replacement, not W */
					const struct mk_model *am = models[in->lora->model];
					sr->seg[0] = (struct seg){ fds[in->lora->model][rt->shard],
								   am->remote ? am->remote[rt->shard] : NULL,
								   am->shards[rt->shard]->data_start + rt->t->begin, 0,
								   rt->t->stride ? rt->t : NULL,
								   am->shards[rt->shard]->data_start };
					sr->rdt = rt->t->desc.dtype;
				}
			}
		}
	}
	/* write: HEAD (kind inputs), files and notes, then jobs with chunks */
	rc = mk_manifest_set_kind(head, "inputs", "mk-fetch " MK_VERSION, err);
	head->chunk_bytes = p.chunk_bytes;
	if (!rc)
		rc = mk_manifest_encode(head, &hjson, &hlen, err);
	if (!rc)
		rc = mk_sw_open(&w, out_fd, o->compress_level, err);
	if (!rc)
		rc = mk_sw_frame1(w, MK_FT_HEAD, hjson, hlen, err);
	for (size_t i = 0; !rc && i < nframes; i++)
		rc = pass_held(w, &sp, &frames[i], err);
	if (rc)
		goto out;
	p.nlast = 4096;
	p.last_end = calloc(p.nlast, sizeof(*p.last_end));
	if (!p.last_end) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	p.ring_len = 2 * (o->qdepth ? o->qdepth : MK_READER_DEFAULT_QDEPTH) + 4;
	p.ring = calloc(p.ring_len, sizeof(*p.ring));
	if (!p.ring) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	mk_fetch_reader_pick(o, models, head->nmodels, w, &ropts);
	rc = mk_reader_open(&rd, &ropts, next_extent, &p, err);
	if (rc)
		goto out;
	snprintf(st->backend, sizeof(st->backend), "%s", mk_reader_backend(rd));
	snprintf(st->note, sizeof(st->note), "%s", mk_reader_note(rd));
	st->qdepth = mk_reader_qdepth(rd);
	st->chunk_bytes = mk_reader_chunk_bytes(rd);
	for (;;) {
		const void *data;
		struct mk_read_req req;
		struct tag *t;
		bool as_read;     /* the data are bytes of req's file as they are */

		rc = mk_reader_get(rd, &data, &req, err);
		if (rc < 0)
			goto out;
		if (rc == 0)
			break;
		t = req.tag;
		/* a job's JOB frame goes before its first chunk (and those of
		 * jobs without data before the next one's) */
		while (written <= t->job) {
			rc = pass_held(w, &sp, &jobframes[written++], err);
			if (rc)
				goto out;
		}
		/* the storage bytes held for the strided inputs of jobs done */
		for (; held_job < t->job; held_job++)
			for (size_t i = 0; i < njob_inputs(p.jobs[held_job]); i++)
				mk__held_free(&p.src[held_job][i].held);
		done += req.len;
		t->c.data = data;
		t->c.data_len = req.len;
		if (t->g.t) {
			rc = mk__gread_take(&t->g, &req, data, &gbuf, &gcap, &t->c.data, &t->c.data_len, err);
			if (rc < 0) {
				mk_err_prefix(err, "job %u: ", t->c.id);
				goto out;
			}
			if (rc == 0)
				continue;
		}
		as_read = !t->g.t && !req.remote;
		const struct src *tsr = &p.src[t->job][t->input];
		if (pass_unsent(&p, t->job, t->c.pass)) {
			/* a pass the mk-merge beside us will not read */
			st->chunks_unsent++;
			sent += t->c.data_len;
			continue;
		}
		if (tsr->feed >= 0) {
			as_read = false;   /* the placeholder's bytes replaced */
			if (grow((void **)&fbuf, &fcap, req.len + 1, 1)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			rc = feed_take(&feeds[tsr->feed], tsr->feed_tensor, t->at, t->c.elem_count, t->c.dtype, fbuf, err);
			if (rc) {
				mk_err_prefix(err, "job %u: ", t->c.id);
				goto out;
			}
			t->c.data = fbuf;
		}
		if (mk_plan_job_input(p.jobs[t->job], t->input)->lora) {
			uint64_t wb;
			as_read = false;   /* sent as changed */
			/* on the chunk as read (a view's, gathered) */
			rc = lora_apply(&lw, &p, models, fds, t, t->c.data, &t->c.data, err);
			if (rc)
				goto out;
			(void)mk_dtype_nbytes(t->c.dtype, t->c.elem_count, &wb);
			t->c.data_len = (size_t)wb;
		}
		if (as_read && !o->no_splice)
			rc = mk_sw_chunk_splice(w, MK_FT_INPT, &t->c, req.fd, req.off, err);
		else
			rc = mk_sw_chunk(w, MK_FT_INPT, &t->c, err);
		if (rc)
			goto out;
		st->chunks++;
		sent += t->c.data_len;
		if (o->progress)
			o->progress(o->progress_ctx, sent, total);
	}
	while (written < njf) {
		rc = pass_held(w, &sp, &jobframes[written++], err);
		if (rc)
			goto out;
	}
	rc = feeds_drain(feeds, o->nfeeds, err);
	if (!rc)
		rc = mk_sw_end(w, err);
	if (rc)
		goto out;
	st->tensors = p.njobs;
	st->bytes_read = done;
	st->stream_bytes = mk_sw_bytes(w);
	st->backward_seeks = p.backward;
	st->chunks_unsent += p.unsent;
out:
	for (size_t k = 0; k < lw.nab; k++) {
		free(lw.ab[k].a);
		free(lw.ab[k].b);
	}
	free(lw.ab);
	free(lw.w);
	free(lw.d);
	free(lw.out);
	mk_reader_free(rd);
	mk_sw_free(w);
	mk_sr_free(r);
	free(hjson);
	free(p.ring);
	free(p.last_end);
	for (size_t i = 0; i < nframes; i++)
		free(frames[i].wire);
	free(frames);
	if (sp.fd >= 0)
		close(sp.fd);
	free(sp.buf);
	for (size_t i = 0; i < njf; i++)
		free(jobframes[i].wire);
	free(jobframes);
	free(gbuf);
	free(fbuf);
	feeds_free(feeds, o->nfeeds);
	if (placeholder >= 0)
		close(placeholder);
	for (size_t j = 0; j < p.njobs; j++) {
		for (size_t i = 0; p.src && p.src[j] && i < njob_inputs(p.jobs[j]); i++) {
			free(p.src[j][i].seg);
			mk__held_free(&p.src[j][i].held);
		}
		if (p.src)
			free(p.src[j]);
		mk_plan_job_free(p.jobs[j]);
	}
	free(p.src);
	free(p.jobs);
	for (size_t m = 0; head && m < head->nmodels; m++) {
		if (fds && models && models[m])
			mk_model_close_fds(models[m], fds[m]);
		if (models)
			mk_model_free(models[m]);
	}
	free(fds);
	free(models);
	mk_manifest_free(head);
	return rc;
}
