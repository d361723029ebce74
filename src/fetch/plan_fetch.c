/* plan_fetch.c - mk-fetch's plan mode: a plan stream in, an inputs stream
 * out (each job's input chunks read from the models).  mk_fetch_plan's
 * steps; the reads it asks for, the models fed by streams, the frames
 * held and the LoRA inputs are in plan_fetch_impl.h's other files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/budget.h"
#include "fetch/fetch.h"
#include "core/fsutil.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "journal/journal.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

/* One run of the plan mode: what mk_fetch_plan's steps share. */
struct run {
	const struct mk_fetch_opts *o;
	const char *label;
	struct mk_fetch_stats *st;
	struct mk_stream_reader *r;
	struct mk_stream_writer *w;
	struct mk_reader *rd;
	struct mk_manifest *head;
	struct mk_model **models;
	struct held *frames, *jobframes;
	struct spool sp;
	size_t nframes, njf, written;
	int **fds;
	struct pf p;
	struct lora_work lw;
	struct quant_work qw;
	struct mk_reader_opts ropts;
	char *hjson;
	size_t hlen;
	uint64_t done, total, sent;
	uint8_t *gbuf, *fbuf;
	size_t gcap, fcap, held_job;
	struct feed *feeds;
	int placeholder;
};

static int check_models(const struct mk_fetch_opts *o, const struct mk_manifest *head, struct mk_model **models,
			struct mk_err *err)
{
	const struct mk_plan_model *pm = head->models;

	for (size_t i = 0; i < head->nmodels; i++) {
		struct mk_model_open_opts mo;
		if (mk__pf_feed_of(o, pm[i].ref) >= 0)
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

/* The plan's HEAD read; the tables of its models and feeds made. */
static int read_head(struct run *q, struct mk_io in, struct mk_err *err)
{
	struct mk_frame f;
	int rc;

	/* FILE frames are read in pieces and held in memory up to a bound,
	 * the rest in a scratch file, until the HEAD has gone out */
	rc = mk_sr_open_io(&q->r, in, q->label, MK_SR_PIECEWISE_FILE, err);
	if (rc)
		return rc;
	rc = mk_sr_head(q->r, q->label, "plan", "mk-fetch reads a 'plan' (from mk-plan)", &q->head, &f, err);
	if (rc)
		return rc;
	q->models = calloc(q->head->nmodels + 1, sizeof(*q->models));
	q->fds = calloc(q->head->nmodels + 1, sizeof(*q->fds));
	if (!q->models || !q->fds)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	q->feeds = calloc(q->o->nfeeds + 1, sizeof(*q->feeds));
	if (!q->feeds)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	return 0;
}

/* The plan's models opened and checked against it; the streams that feed
 * the others opened, and the file their reads read made. */
static int open_models(struct run *q, struct mk_err *err)
{
	const struct mk_fetch_opts *o = q->o;
	int rc;

	rc = check_models(o, q->head, q->models, err);
	if (!rc)
		rc = mk__pf_feeds_open(o, q->feeds, err);
	if (!rc && o->nfeeds) {
		/* what a fed input's read reads: chunk_bytes of a hole */
		rc = mk_tmpfile_open(mk_tmpdir(), "a streamed model's placeholder", &q->placeholder, err);
		if (!rc && ftruncate(q->placeholder, (off_t)q->p.chunk_bytes))
			rc = mk_err_sys(err, errno, "a streamed model's placeholder");
	}
	return rc;
}

/* The rest of the plan: files, jobs, notes.  The jobs decoded (their
 * frames kept to pass on), the files and notes held until the HEAD has
 * gone out. */
static int read_plan(struct run *q, struct mk_err *err)
{
	struct pf *p = &q->p;
	const char *label = q->label;
	struct mk_frame f;
	int rc;

	while ((rc = mk_sr_next(q->r, &f, err)) > 0) {
		if (!strcmp(f.type, MK_FT_END))
			continue;
		if (!strcmp(f.type, MK_FT_JOB)) {
			struct mk_plan_job *jb;
			rc = mk_plan_job_decode(f.payload, f.payload_len, q->head, &jb, err);
			if (rc) {
				mk_err_prefix(err, "%s: frame #%llu: ", label, (unsigned long long)f.index);
				return rc;
			}
			struct mk_plan_job **jv = realloc(p->jobs, (p->njobs + 1) * sizeof(*jv));
			if (!jv) {
				mk_plan_job_free(jb);
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			}
			p->jobs = jv;
			p->jobs[p->njobs++] = jb;
			rc = mk__pf_hold(&q->jobframes, &q->njf, &f, err);
		} else if (f.piecewise) {
			rc = mk__pf_hold_piecewise(&q->frames, &q->nframes, &q->sp, q->r, &f, err);
		} else if (!strcmp(f.type, MK_FT_FILE) || !f.critical) {
			rc = mk__pf_hold(&q->frames, &q->nframes, &f, err);
		} else {
			rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: unexpected %s frame in a plan", label,
					(unsigned long long)f.index, f.type);
		}
		if (rc)
			return rc;
	}
	if (rc < 0)
		return rc;
	if (p->njobs != q->head->njobs)
		return mk_err_set(err, MK_EFORMAT, "%s: the HEAD announces %llu jobs, the plan has %zu", label,
				  (unsigned long long)q->head->njobs, p->njobs);
	return 0;
}

/* --skip-done: leave out the jobs whose outputs an interrupted mk-pack
 * finished (and their JOB frames); the HEAD counts the jobs sent */
static int skip_done_jobs(struct run *q, struct mk_err *err)
{
	struct pf *p = &q->p;
	struct mk_manifest *head = q->head;
	struct mk_journal *j = NULL;
	bool *isdone = calloc(head->ntensors + 1, sizeof(*isdone));
	int rc = isdone ? mk_journal_read(q->o->skip_done, &j, err) : mk_err_set(err, MK_ENOMEM, "out of memory");

	if (!rc)
		rc = mk_journal_check(j, q->o->skip_done, head, UINT64_MAX, err);
	if (!rc && j->key[0]) {
		size_t kept = 0;
		uint64_t spilled = 0;
		for (size_t d = 0; d < j->ndone; d++)
			isdone[j->done[d].index] = true;
		for (size_t k = 0; k < p->njobs; k++) {
			/* done: every output of the job (one, or several) */
			bool done = isdone[p->jobs[k]->output];
			for (unsigned o = 0; done && o < p->jobs[k]->nmore; o++)
				done = isdone[p->jobs[k]->more[o]];
			if (done) {
				mk_plan_job_free(p->jobs[k]);
				free(q->jobframes[k].wire);
				q->st->skipped++;
				continue;
			}
			spilled += p->jobs[k]->spill;
			p->jobs[kept] = p->jobs[k];
			q->jobframes[kept++] = q->jobframes[k];
		}
		p->njobs = q->njf = kept;
		head->njobs = kept;
		head->spilled_jobs = spilled;
	}
	mk_journal_free(j);
	free(isdone);
	return rc;
}

/* Input i of job j placed: the runs of its elements in the models' files
 * (or its tensor in a feeding stream), checked against the plan. */
static int place_input(struct run *q, size_t j, size_t i, struct mk_err *err)
{
	struct mk_plan_job *jb = q->p.jobs[j];
	const struct mk_manifest *head = q->head;
	struct mk_model **models = q->models;
	int **fds = q->fds;
	const struct mk_plan_input *in = mk_plan_job_input(jb, i);
	uint64_t at = 0;
	size_t ns = in->nsources ? in->nsources : 1;
	struct src *sr = &q->p.src[j][i];
	sr->seg = calloc(ns, sizeof(*sr->seg));
	if (!sr->seg)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	sr->nseg = ns;
	sr->rdt = in->desc.dtype;
	sr->feed = models[in->model] ? -1 : mk__pf_feed_of(q->o, head->models[in->model].ref);
	if (in->quant && sr->feed >= 0)
		return mk__pf_quant_check(head, models, fds, jb, i, in, err);   /* refused */
	if (sr->feed >= 0) {
		uint64_t tb = 0;
		mk__pf_feed_place(&q->feeds[sr->feed], in, sr);
		sr->seg[0] = (struct seg){ .fd = q->placeholder };
		mk_dtype_nbytes(in->desc.dtype, in->nelem, &tb);
		q->total += tb * jb->sends;
		return 0;
	}
	for (size_t k = 0; k < ns; k++) {
		const char *name = in->nsources ? in->sources[k] : in->tensor;
		const struct mk_model_tensor *mt = mk_model_find(models[in->model], name);
		bool ok = mt && (in->nsources ? mt->t->desc.dtype == in->desc.dtype :
				 in->quant && in->quant->kind == MK_QUANT_MXFP4 ? mk__pf_mxfp4_fits(&mt->t->desc, &in->desc) :
					 mk_tensor_desc_equal(&mt->t->desc, &in->desc));
		if (!ok)
			return mk_err_set(err, MK_EMISMATCH,
					  "job %u: model '%s' %s tensor '%s' as the plan says (%s); run mk-plan again",
					  jb->id, head->models[in->model].ref, mt ? "does not have" : "has no", name,
					  mt ? "dtype or shape differs" : "missing");
		uint64_t ds = models[in->model]->shards[mt->shard]->data_start, tb = 0;
		sr->seg[k] = (struct seg){ fds[in->model][mt->shard],
					   models[in->model]->remote ?
					   models[in->model]->remote[mt->shard] : NULL,
					   ds + mt->t->begin, at, mt->t->stride ? mt->t : NULL, ds };
		at += in->quant && in->quant->kind == MK_QUANT_MXFP4 ? in->nelem : mt->t->nelem;   /* (2 F4 a byte) */
		mk_dtype_nbytes(mt->t->desc.dtype, mt->t->nelem, &tb);
		q->total += tb * jb->sends;
	}
	if (at != in->nelem)
		return mk_err_set(err, MK_EMISMATCH, "job %u: input '%s': its sources hold %llu elements, the plan says %llu",
				  jb->id, in->tensor, (unsigned long long)at, (unsigned long long)in->nelem);
	if (in->quant) {
		int rc = mk__pf_quant_check(head, models, fds, jb, i, in, err);
		if (rc)
			return rc;
	}
	if (in->lora) {
		const struct mk_model_tensor *rt;
		int rc = mk__pf_lora_check(head, models, jb, i, in, &rt, err);
		if (rc)
			return rc;
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
	return 0;
}

/* The fed models checked, the models' shards opened (once), every job
 * input placed. */
static int place_inputs(struct run *q, struct mk_err *err)
{
	struct pf *p = &q->p;
	const struct mk_manifest *head = q->head;
	int rc;

	/* the fed models: read as their streams come */
	for (size_t m = 0; m < head->nmodels; m++) {
		long k = q->models[m] ? -1 : mk__pf_feed_of(q->o, head->models[m].ref);
		if (k >= 0 && (rc = mk_fetch_feed_check(q->feeds[k].head, NULL, m, p->jobs, p->njobs, err))) {
			mk_err_prefix(err, "streamed model '%s': ", q->feeds[k].ref);
			return rc;
		}
	}
	/* open shards once; place every job input */
	for (size_t m = 0; m < head->nmodels; m++) {
		if (!q->models[m])
			continue;     /* fed */
		rc = mk_model_open_fds(q->models[m], &q->fds[m], err);
		if (rc)
			return rc;
	}
	p->src = calloc(p->njobs + 1, sizeof(*p->src));
	if (!p->src)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	/* what dequantizing keeps (MXFP4 experts, per input slot: the most
	 * any job's input of that index needs) comes out of the share that
	 * holds jobs to send again (mk_budget_fetch_apply) */
	uint64_t *held = NULL, total = 0;
	size_t nheld = 0, at = 0;
	for (size_t j = 0; j < p->njobs; j++) {
		struct mk_plan_job *jb = p->jobs[j];
		size_t nin = jb->ninputs + (jb->vocab ? jb->vocab->naux : 0);
		size_t had = nheld;
		p->src[j] = calloc(nin + 1, sizeof(**p->src));
		if (!p->src[j] || mk__pf_grow((void **)&held, &nheld, nin, sizeof(*held))) {
			free(held);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		if (nheld > had)
			memset(held + had, 0, (nheld - had) * sizeof(*held));
		for (size_t i = 0; i < nin; i++) {
			if ((rc = place_input(q, j, i, err))) {
				free(held);
				return rc;
			}
			uint64_t h = mk__pf_quant_held(mk_plan_job_input(jb, i));
			if (h > held[i]) {
				total += h - held[i];
				held[i] = h;
				at = j;
			}
		}
	}
	free(held);
	if (q->o->hold_bytes && total > q->o->hold_bytes)
		return mk_err_set(err, MK_ENOMEM,
				  "job %u ('%s'): dequantizing MXFP4 inputs keeps %llu bytes of experts' codes and scales, "
				  "more than mk-fetch's share of --max-memory for held data (%llu, a quarter of it); give "
				  "more --max-memory",
				  p->jobs[at]->id, p->jobs[at]->inputs[0].tensor, (unsigned long long)total,
				  (unsigned long long)q->o->hold_bytes);
	if (q->o->hold_bytes)
		q->sp.bound = q->o->hold_bytes - total;
	q->st->dequant_held = total;
	return 0;
}

/* write: HEAD (kind inputs), files and notes; the jobs follow with their
 * chunks */
static int write_head(struct run *q, struct mk_io out, struct mk_err *err)
{
	int rc;

	rc = mk_manifest_set_kind(q->head, "inputs", "mk-fetch " MK_VERSION, err);
	q->head->chunk_bytes = q->p.chunk_bytes;
	if (!rc)
		rc = mk_manifest_encode(q->head, &q->hjson, &q->hlen, err);
	if (!rc)
		rc = mk_sw_open_io(&q->w, out, q->o->compress_level, err);
	if (!rc)
		rc = mk_sw_frame1(q->w, MK_FT_HEAD, q->hjson, q->hlen, err);
	for (size_t i = 0; !rc && i < q->nframes; i++)
		rc = mk__pf_pass_held(q->w, &q->sp, &q->frames[i], err);
	return rc;
}

/* The reader opened on the extents the jobs ask for (mk__pf_next_extent),
 * with the ring of their tags; its choices into the stats. */
static int open_reader(struct run *q, struct mk_err *err)
{
	struct pf *p = &q->p;
	const struct mk_fetch_opts *o = q->o;
	struct mk_fetch_stats *st = q->st;
	int rc;

	p->nlast = 4096;
	p->last_end = calloc(p->nlast, sizeof(*p->last_end));
	if (!p->last_end)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	p->ring_len = 2 * (o->qdepth ? o->qdepth : MK_READER_DEFAULT_QDEPTH) + 4;
	p->ring = calloc(p->ring_len, sizeof(*p->ring));
	if (!p->ring)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	mk_fetch_reader_pick(o, q->models, q->head->nmodels, q->w, &q->ropts);
	rc = mk_reader_open(&q->rd, &q->ropts, mk__pf_next_extent, p, err);
	if (rc)
		return rc;
	snprintf(st->backend, sizeof(st->backend), "%s", mk_reader_backend(q->rd));
	snprintf(st->note, sizeof(st->note), "%s", mk_reader_note(q->rd));
	st->qdepth = mk_reader_qdepth(q->rd);
	st->chunk_bytes = mk_reader_chunk_bytes(q->rd);
	return 0;
}

/* A read arrived (req, data): its chunk sent, once whole (a strided one
 * gathered from its reads), from a feeding stream or with a LoRA delta
 * where the input says so; a skipped pass's counted, not sent. */
static int read_arrived(struct run *q, const void *data, struct mk_read_req *req, struct mk_err *err)
{
	struct pf *p = &q->p;
	const struct mk_fetch_opts *o = q->o;
	struct mk_fetch_stats *st = q->st;
	struct tag *t;
	bool as_read;     /* the data are bytes of req's file as they are */
	int rc;

	t = req->tag;
	/* a job's JOB frame goes before its first chunk (and those of
	 * jobs without data before the next one's) */
	while (q->written <= t->job) {
		rc = mk__pf_pass_held(q->w, &q->sp, &q->jobframes[q->written++], err);
		if (rc)
			return rc;
	}
	/* the storage bytes held for the strided inputs of jobs done */
	for (; q->held_job < t->job; q->held_job++)
		for (size_t i = 0; i < mk__pf_njob_inputs(p->jobs[q->held_job]); i++)
			mk__held_free(&p->src[q->held_job][i].held);
	q->done += req->len;
	t->c.data = data;
	t->c.data_len = req->len;
	if (t->g.t) {
		rc = mk__gread_take(&t->g, req, data, &q->gbuf, &q->gcap, &t->c.data, &t->c.data_len, err);
		if (rc < 0) {
			mk_err_prefix(err, "job %u: ", t->c.id);
			return rc;
		}
		if (rc == 0)
			return 0;
	}
	as_read = !t->g.t && !req->remote;
	const struct src *tsr = &p->src[t->job][t->input];
	if (mk__pf_pass_unsent(p, t->job, t->c.pass)) {
		/* a pass the mk-merge beside us will not read */
		st->chunks_unsent++;
		q->sent += t->c.data_len;
		return 0;
	}
	if (tsr->feed >= 0) {
		as_read = false;   /* the placeholder's bytes replaced */
		if (mk__pf_grow((void **)&q->fbuf, &q->fcap, req->len + 1, 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		rc = mk__pf_feed_take(&q->feeds[tsr->feed], tsr->feed_tensor, t->at, t->c.elem_count, t->c.dtype,
				      q->fbuf, err);
		if (rc) {
			mk_err_prefix(err, "job %u: ", t->c.id);
			return rc;
		}
		t->c.data = q->fbuf;
	}
	if (mk_plan_job_input(p->jobs[t->job], t->input)->quant) {
		uint64_t wb;
		as_read = false;   /* sent dequantized */
		rc = mk__pf_quant_apply(&q->qw, p, q->models, q->fds, t, t->c.data, &t->c.data, err);
		if (rc)
			return rc;
		t->c.dtype = mk_plan_job_input(p->jobs[t->job], t->input)->quant->dtype;
		(void)mk_dtype_nbytes(t->c.dtype, t->c.elem_count, &wb);
		t->c.data_len = (size_t)wb;
	}
	if (mk_plan_job_input(p->jobs[t->job], t->input)->lora) {
		uint64_t wb;
		as_read = false;   /* sent as changed */
		/* on the chunk as read (a view's, gathered) */
		rc = mk__pf_lora_apply(&q->lw, p, q->models, q->fds, t, t->c.data, &t->c.data, err);
		if (rc)
			return rc;
		t->c.dtype = mk__pf_lora_dtype(mk_plan_job_input(p->jobs[t->job], t->input));
		(void)mk_dtype_nbytes(t->c.dtype, t->c.elem_count, &wb);
		t->c.data_len = (size_t)wb;
	}
	if (as_read && !o->no_splice)
		rc = mk_sw_chunk_splice(q->w, MK_FT_INPT, &t->c, req->fd, req->off, err);
	else
		rc = mk_sw_chunk(q->w, MK_FT_INPT, &t->c, err);
	if (rc)
		return mk_reader_explain(q->rd, req, rc, err);
	st->chunks++;
	q->sent += t->c.data_len;
	if (o->progress)
		o->progress(o->progress_ctx, q->sent, q->total);
	return 0;
}

/* The reads, in the order asked, until the last. */
static int read_loop(struct run *q, struct mk_err *err)
{
	for (;;) {
		const void *data;
		struct mk_read_req req;
		int rc = mk_reader_get(q->rd, &data, &req, err);

		if (rc <= 0)
			return rc;
		rc = read_arrived(q, data, &req, err);
		if (rc)
			return rc;
	}
}

/* The JOB frames of jobs without chunks at the end, the feeding streams
 * read to their ends, END; the stats. */
static int finish(struct run *q, struct mk_err *err)
{
	struct mk_fetch_stats *st = q->st;
	int rc;

	while (q->written < q->njf) {
		rc = mk__pf_pass_held(q->w, &q->sp, &q->jobframes[q->written++], err);
		if (rc)
			return rc;
	}
	rc = mk__pf_feeds_drain(q->feeds, q->o->nfeeds, err);
	if (!rc)
		rc = mk_sw_end(q->w, err);
	if (rc)
		return rc;
	st->tensors = q->p.njobs;
	st->bytes_read = q->done;
	st->stream_bytes = mk_sw_bytes(q->w);
	st->backward_seeks = q->p.backward;
	st->chunks_unsent += q->p.unsent;
	return 0;
}

static void run_free(struct run *q)
{
	struct pf *p = &q->p;
	struct lora_work *lw = &q->lw;

	for (size_t k = 0; k < lw->nab; k++) {
		free(lw->ab[k].a);
		free(lw->ab[k].b);
		free(lw->ab[k].fac);
		free(lw->ab[k].bias);
	}
	free(lw->ab);
	free(lw->w);
	free(lw->d);
	free(lw->out);
	free(q->qw.scale);
	free(q->qw.w);
	free(q->qw.out);
	for (size_t k = 0; k < q->qw.nmx; k++) {
		free(q->qw.mx[k].codes);
		free(q->qw.mx[k].scale);
	}
	free(q->qw.mx);
	mk_reader_free(q->rd);
	mk_sw_free(q->w);
	mk_sr_free(q->r);
	free(q->hjson);
	free(p->ring);
	free(p->last_end);
	for (size_t i = 0; i < q->nframes; i++)
		free(q->frames[i].wire);
	free(q->frames);
	if (q->sp.fd >= 0)
		close(q->sp.fd);
	free(q->sp.buf);
	for (size_t i = 0; i < q->njf; i++)
		free(q->jobframes[i].wire);
	free(q->jobframes);
	free(q->gbuf);
	free(q->fbuf);
	mk__pf_feeds_free(q->feeds, q->o->nfeeds);
	if (q->placeholder >= 0)
		close(q->placeholder);
	for (size_t j = 0; j < p->njobs; j++) {
		for (size_t i = 0; p->src && p->src[j] && i < mk__pf_njob_inputs(p->jobs[j]); i++) {
			free(p->src[j][i].seg);
			mk__held_free(&p->src[j][i].held);
		}
		if (p->src)
			free(p->src[j]);
		mk_plan_job_free(p->jobs[j]);
	}
	free(p->src);
	free(p->jobs);
	for (size_t m = 0; q->head && m < q->head->nmodels; m++) {
		if (q->fds && q->models && q->models[m])
			mk_model_close_fds(q->models[m], q->fds[m]);
		if (q->models)
			mk_model_free(q->models[m]);
	}
	free(q->fds);
	free(q->models);
	mk_manifest_free(q->head);
}

int mk_fetch_plan(const struct mk_fetch_opts *o, struct mk_io in, const char *label, struct mk_io out,
		  struct mk_fetch_stats *st, struct mk_err *err)
{
	struct run q = {
		.o = o, .label = label, .st = st,
		.sp = { .fd = -1, .bound = mk_budget_fetch_hold(o->hold_bytes) },
		.ropts = { .kind = o->io, .chunk_bytes = o->chunk_bytes, .qdepth = o->qdepth },
		.placeholder = -1,
	};
	int rc;

	memset(st, 0, sizeof(*st));
	q.p.chunk_bytes = o->chunk_bytes ? o->chunk_bytes : MK_READER_DEFAULT_CHUNK;
	q.p.skip = o->skip;
	q.ropts.chunk_bytes = q.p.chunk_bytes;
	rc = read_head(&q, in, err);
	if (!rc)
		rc = open_models(&q, err);
	if (!rc)
		rc = read_plan(&q, err);
	if (!rc && o->skip_done)
		rc = skip_done_jobs(&q, err);
	if (!rc)
		rc = place_inputs(&q, err);
	if (!rc)
		rc = write_head(&q, out, err);
	if (!rc)
		rc = open_reader(&q, err);
	if (!rc)
		rc = read_loop(&q, err);
	if (!rc)
		rc = finish(&q, err);
	run_free(&q);
	return rc;
}
