/* plan_fetch.c - mk-fetch's plan mode: a plan stream in, an inputs stream
 * out (each job's input chunks read from the models).  The reads it asks
 * for, the models fed by streams, the frames held and the LoRA inputs are
 * in plan_fetch_impl.h's other files. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "fetch/fetch.h"
#include "core/fsutil.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "journal/journal.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

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
		rc = mk__pf_feeds_open(o, feeds, err);
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
			rc = mk__pf_hold(&jobframes, &njf, &f, err);
		} else if (f.piecewise) {
			rc = mk__pf_hold_piecewise(&frames, &nframes, &sp, r, &f, err);
		} else if (!strcmp(f.type, MK_FT_FILE) || !f.critical) {
			rc = mk__pf_hold(&frames, &nframes, &f, err);
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
		long k = models[m] ? -1 : mk__pf_feed_of(o, head->models[m].ref);
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
			sr->feed = models[in->model] ? -1 : mk__pf_feed_of(o, head->models[in->model].ref);
			if (sr->feed >= 0) {
				uint64_t tb = 0;
				mk__pf_feed_place(&feeds[sr->feed], in, sr);
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
				if ((rc = mk__pf_lora_check(head, models, jb, i, in, &rt, err)))
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
		rc = mk__pf_pass_held(w, &sp, &frames[i], err);
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
	rc = mk_reader_open(&rd, &ropts, mk__pf_next_extent, &p, err);
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
			rc = mk__pf_pass_held(w, &sp, &jobframes[written++], err);
			if (rc)
				goto out;
		}
		/* the storage bytes held for the strided inputs of jobs done */
		for (; held_job < t->job; held_job++)
			for (size_t i = 0; i < mk__pf_njob_inputs(p.jobs[held_job]); i++)
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
		if (mk__pf_pass_unsent(&p, t->job, t->c.pass)) {
			/* a pass the mk-merge beside us will not read */
			st->chunks_unsent++;
			sent += t->c.data_len;
			continue;
		}
		if (tsr->feed >= 0) {
			as_read = false;   /* the placeholder's bytes replaced */
			if (mk__pf_grow((void **)&fbuf, &fcap, req.len + 1, 1)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			rc = mk__pf_feed_take(&feeds[tsr->feed], tsr->feed_tensor, t->at, t->c.elem_count, t->c.dtype, fbuf, err);
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
			rc = mk__pf_lora_apply(&lw, &p, models, fds, t, t->c.data, &t->c.data, err);
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
		rc = mk__pf_pass_held(w, &sp, &jobframes[written++], err);
		if (rc)
			goto out;
	}
	rc = mk__pf_feeds_drain(feeds, o->nfeeds, err);
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
	mk__pf_feeds_free(feeds, o->nfeeds);
	if (placeholder >= 0)
		close(placeholder);
	for (size_t j = 0; j < p.njobs; j++) {
		for (size_t i = 0; p.src && p.src[j] && i < mk__pf_njob_inputs(p.jobs[j]); i++) {
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
