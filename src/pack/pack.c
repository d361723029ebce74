/* pack.c - mk-pack: a "tensors" stream -> sharded safetensors + files; the
 * stage's loop (the parts of the run are in pack_impl.h's files). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/budget.h"
#include "core/fsutil.h"
#include "core/hash.h"
#include "core/mapguard.h"
#include "journal/journal.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "core/bug.h"
#include "journal/outlock.h"
#include "pack_impl.h"

int mk__pack_slot_write(struct pack *p, size_t i, const uint8_t *data, uint64_t n, struct mk_err *err)
{
	const struct mk_manifest_tensor *t = &p->man->tensors[i];
	struct slot *sl = &p->slot[i];
	uint64_t boff = sl->got * mk_dtype_bits(t->desc.dtype) / 8, len = n * mk_dtype_bits(t->desc.dtype) / 8;
	int rc = mk__pack_shard_write(p, i, sl->off + boff, data, len, err);

	if (rc)
		return rc;
	sl->crc = mk_crc32c(sl->crc, data, len);
	sl->got += n;
	p->done_bytes += len;
	p->st->bytes_written += len;
	if (sl->got == t->nelem) {
		free(sl->part);          /* (its last whole block is written) */
		sl->part = NULL;
		sl->done = true;
		p->ndone++;
		if ((rc = mk__pack_tensor_finished(p, i, err)))
			return rc;
	}
	return 0;
}

/* A DATA frame; a piecewise one (MK_SR_SPLICE_DATA) is checked by its
 * sub-header, then its data spliced into the shard and verified there. */
static int write_chunk(struct pack *p, struct mk_stream_reader *r, const struct mk_frame *f, struct mk_err *err)
{
	struct mk_chunk c;
	const struct mk_manifest_tensor *t;
	struct slot *sl;
	struct shard *sh;
	uint64_t boff;
	uint8_t sub[MK_CHUNK_HDR];
	size_t id;
	int rc;

	if (f->piecewise) {
		size_t have = 0, got;
		while (have < MK_CHUNK_HDR) {
			if ((rc = mk_sr_read_payload(r, sub + have, MK_CHUNK_HDR - have, &got, err)))
				return rc;
			if (!got)
				MK_BUG("a spliced DATA frame shorter than its sub-header");
			have += got;
		}
		/* decoded against the payload's length; c.data is set below */
		rc = mk_chunk_decode(sub, f->raw_len, &c, err);
		c.data = NULL;
	} else {
		rc = mk_chunk_decode(f->payload, f->payload_len, &c, err);
	}
	if (rc)
		return mk_err_prefix(err, "frame #%llu (DATA): ", (unsigned long long)f->index);
	if ((rc = mk_chunk_check_data(p->in ? p->in : p->man, &c, err)))
		return mk_err_prefix(err, "frame #%llu: ", (unsigned long long)f->index);
	if (p->in && p->in->tensors[c.id].requant) {
		if (f->piecewise)
			MK_BUG("--quantize reads DATA frames whole");
		if ((rc = mk__pack_quant_chunk(p, &c, err)))
			return mk_err_prefix(err, "frame #%llu (DATA): ", (unsigned long long)f->index);
		goto progress;
	}
	id = p->in ? p->omap[c.id] : c.id;
	t = &p->man->tensors[id];
	sl = &p->slot[id];
	if (sl->resumed)
		return 0; /* written by the run this one resumes, checked against its CRC */
	if (c.elem_begin != sl->got)
		return mk_err_set(err, MK_EFORMAT,
				  "frame #%llu (DATA): tensor '%s': chunk [%llu, +%llu) out of order or out of range (expected element %llu of %llu)",
				  (unsigned long long)f->index, t->name, (unsigned long long)c.elem_begin,
				  (unsigned long long)c.elem_count, (unsigned long long)sl->got,
				  (unsigned long long)t->nelem);
	if (f->piecewise) {
		sh = &p->sh[sl->shard];
		boff = c.elem_begin * mk_dtype_bits(t->desc.dtype) / 8;
		rc = mk__pack_part_flush(p, id, err);
		if (!rc)
			rc = mk_sr_splice_payload(r, sh->fd, sh->name, sl->off + boff, c.data_len, &c.data, err);
		if (rc)
			return rc;
		/* (in the shard now: counted as written) */
		sl->crc = mk_crc32c(sl->crc, c.data, c.data_len);
		sl->got += c.elem_count;
		p->done_bytes += c.data_len;
		p->st->bytes_written += c.data_len;
		if (sl->got == t->nelem) {
			free(sl->part);
			sl->part = NULL;
			sl->done = true;
			p->ndone++;
			if ((rc = mk__pack_tensor_finished(p, id, err)))
				return rc;
		}
	} else if ((rc = mk__pack_slot_write(p, id, c.data, c.elem_count, err))) {
		return rc;
	}
progress:
	if (p->o->progress)
		p->o->progress(p->o->progress_ctx, p->done_bytes, p->st->tensor_bytes, p->ndone,
			       p->man->ntensors);
	return 0;
}

static int finish(struct pack *p, struct mk_err *err)
{
	char *jpath = NULL;
	int rc;

	/* in one process with the reader (mk-yaml), a model file truncated
	 * under a mapping of it gave zeros: never an output */
	if ((rc = mk_mapguard_check(p->faults0, err)) < 0)
		return rc;
	for (size_t i = 0; i < p->man->ntensors; i++)
		if (p->slot[i].got != p->man->tensors[i].nelem)
			return mk_err_set(err, MK_ECORRUPT,
					  "the stream ended with tensor '%s' incomplete (%llu of %llu elements)",
					  p->man->tensors[i].name, (unsigned long long)p->slot[i].got,
					  (unsigned long long)p->man->tensors[i].nelem);
	rc = mk__pack_direct_drain(p, err);
	if (!rc)
		rc = mk__pack_syncer_wait(p, err);
	if (!rc)
		rc = mk__pack_journal_commit(p, p->finished, p->nfinished, err);
	if (rc)
		return rc;
	p->nfinished = 0;
	if (p->nshards > 1) {
		rc = mk__pack_write_index(p, err);
		if (rc)
			return rc;
	}
	jpath = mk__pack_join(p->partial, MK_JOURNAL_NAME);
	if (!jpath)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	close(p->jfd);
	p->jfd = -1;
	if (unlink(jpath) < 0) {
		rc = mk_err_sys(err, errno, "%s", jpath);
		goto out;
	}
	rc = mk_fsync_dir(p->partial, err);
	if (rc)
		goto out;
	rc = mk_pack_put_in_place(p->partial, p->o->out_dir, p->o->force, p->st->warning, sizeof(p->st->warning), err);
out:
	free(jpath);
	return rc;
}

int mk_pack_run(const struct mk_pack_opts *o, struct mk_io in, const char *label,
		struct mk_pack_stats *st, struct mk_err *err)
{
	struct pack p = { .o = o, .jfd = -1, .st = st, .faults0 = mk_mapguard_faults() };
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	uint8_t **hdrs = NULL;
	size_t *hlens = NULL;
	char *parent = NULL;
	bool made = false, resuming = false;
	struct mk_journal *jn = NULL;
	struct mk_out_lock lock;
	struct stat sb;
	int rc;

	memset(st, 0, sizeof(*st));
	/* held until OUT is in place, or the run failed (outlock.h) */
	rc = mk_out_lock(o->out_dir, &lock, err);
	if (!rc)
		rc = mk_pack_check_out(o, &lock, err);
	if (rc) {
		mk_out_unlock(&lock);
		return rc;
	}
	p.partial = strdup(lock.path);   /* OUT.mk-partial, the directory locked */
	if (!p.partial) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (o->quantize && o->resume) {
		rc = mk_err_set(err, MK_EINVAL, "--quantize and --resume cannot be combined; run again without --resume");
		goto out;
	}
	/* (--quantize: DATA frames read whole, the requant weights' to be quantized) */
	rc = mk_sr_open_io(&r, in, label,
			   MK_SR_PIECEWISE_FILE | (o->no_splice || o->quantize ? 0 : MK_SR_SPLICE_DATA), err);
	if (rc)
		goto out;
	mk_sr_set_bounds(r, &(struct mk_sr_bounds){ .memory = o->budget });
	/* the first critical frame must be HEAD */
	rc = mk_sr_head(r, label, "tensors", "mk-pack reads a 'tensors' stream (from mk-fetch --model or mk-merge)",
			&p.man, &f, err);
	if (rc)
		goto out;
	if (o->quantize && (rc = mk__pack_quant_setup(&p, p.man, err))) {
		mk_err_prefix(err, "%s: ", label);
		goto out;
	}
	/* a frame (compressed and raw) must fit, with room for the headers
	 * (and, quantizing, a block-row of the widest weight) */
	if (o->budget && p.in && mk_budget_pack_frames(p.man->chunk_bytes) + mk__pack_quant_row_bytes(p.in) > o->budget) {
		rc = mk_err_set(err, MK_ENOMEM,
				"%s: --quantize %s holds a %s of %llu bytes beside chunks of %llu bytes, more than "
				"--max-memory %llu",
				label, mk_requant_name(o->quantize),
				o->quantize == MK_REQUANT_MXFP4 ? "group-row and an expert's codes" : "block-row",
				(unsigned long long)mk__pack_quant_row_bytes(p.in),
				(unsigned long long)p.man->chunk_bytes, (unsigned long long)o->budget);
		goto out;
	}
	if (o->budget && mk_budget_pack_frames(p.man->chunk_bytes) > o->budget) {
		rc = mk_err_set(err, MK_ENOMEM,
				"%s: chunks of %llu bytes need about %llu bytes here, more than --max-memory %llu; use a smaller --chunk-size upstream",
				label, (unsigned long long)p.man->chunk_bytes,
				(unsigned long long)mk_budget_pack_frames(p.man->chunk_bytes), (unsigned long long)o->budget);
		goto out;
	}
	{
		char hex[65], line[160];
		st->tensor_bytes = mk_manifest_total_bytes(p.man);
		st->ntensors = p.man->ntensors;
		rc = mk__pack_assign_shards(&p, err);
		if (rc)
			goto out;
		rc = mk__pack_build_headers(&p, &hdrs, &hlens, err);
		if (rc)
			goto out;
		/* free space is checked where OUT will be */
		parent = mk_path_parent(o->out_dir);
		if (!parent) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		/* as mergekit, create OUT's parent directories */
		if (strcmp(parent, ".") && strcmp(parent, "/")) {
			char *probe = mk__pack_join(parent, "x");
			rc = probe ? mk_mkdirs_for(probe, err) : mk_err_set(err, MK_ENOMEM, "out of memory");
			free(probe);
			if (rc) {
				mk_err_prefix(err, "%s: ", o->out_dir);
				goto out;
			}
		}
		rc = mk_journal_stream_key(p.man, hex, err);
		if (rc)
			goto out;
		p.finished = malloc((p.man->ntensors ? p.man->ntensors : 1) * sizeof(*p.finished));
		if (!p.finished) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		if (o->resume && lstat(p.partial, &sb) == 0) {
			if (!S_ISDIR(sb.st_mode)) {
				rc = mk_err_set(err, MK_EEXIST, "%s is not a directory; remove it", p.partial);
				goto out;
			}
			rc = mk_journal_read(p.partial, &jn, err);
			if (rc)
				goto out;
			/* nothing recorded (no journal, or its header never
			 * reached the disk): start over */
			resuming = jn->key[0] != '\0';
			if (resuming) {
				rc = mk_journal_check(jn, p.partial, p.man, o->shard_size, err);
				if (!rc)
					rc = mk__pack_resume_verify(&p, jn, err);
				if (rc)
					goto out;
			}
		}
		if (!resuming) {
			rc = mk__pack_check_space(&p, parent, err);
			if (rc)
				goto out;
			/* the directory is the lock's (outlock.h): emptied, kept */
			if ((o->force || o->resume) && (rc = mk_rmtree_contents(p.partial, err)))
				goto out;
		}
		made = true;
		if (resuming) {
			rc = mk__pack_resume_clean(&p, err);
			if (rc)
				goto out;
		}
		char *jpath = mk__pack_join(p.partial, MK_JOURNAL_NAME);
		if (!jpath) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		p.jfd = open(jpath, O_WRONLY | O_CREAT | (resuming ? 0 : O_EXCL) | O_APPEND | O_CLOEXEC, 0644);
		if (p.jfd < 0)
			rc = mk_err_sys(err, errno, "%s", jpath);
		else if (resuming && ftruncate(p.jfd, (off_t)jn->valid_len) < 0)
			rc = mk_err_sys(err, errno, "%s: dropping a torn last line", jpath);
		free(jpath);
		if (rc)
			goto out;
		if (!resuming) {
			int n = mk_journal_header(line, sizeof(line), hex, o->shard_size);
			rc = mk_write_all(p.jfd, line, (size_t)n, MK_JOURNAL_NAME, err);
			if (rc)
				goto out;
		}
		/* (no bounce buffer: everything through the page cache) */
		if (!o->buffered)
			mk__pack_direct_setup(&p, o->budget ? o->budget - mk_budget_pack_frames(p.man->chunk_bytes) -
							 (p.in ? mk__pack_quant_row_bytes(p.in) : 0) : UINT64_MAX);
		rc = mk__pack_open_shards(&p, hdrs, hlens, resuming, err);
		if (rc)
			goto out;
		st->nshards = p.nshards;
	}
	/* tensors with no elements are complete already */
	for (size_t i = 0; i < p.man->ntensors; i++)
		if (p.man->tensors[i].nelem == 0 && !p.slot[i].done) {
			p.slot[i].done = true;
			p.ndone++;
			p.finished[p.nfinished++] = i;
		}
	for (;;) {
		rc = mk_sr_next(r, &f, err);
		if (rc < 0)
			goto out;
		if (rc == 0)
			break;
		if (!strcmp(f.type, MK_FT_DATA))
			rc = write_chunk(&p, r, &f, err);
		else if (!strcmp(f.type, MK_FT_FILE))
			rc = mk__pack_write_file_frame(&p, r, &f, err);
		else if (!strcmp(f.type, MK_FT_END) || !f.critical)
			rc = 0; /* END is checked by the reader; ancillary frames end here */
		else
			rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: unexpected %s frame in a 'tensors' stream",
					label, (unsigned long long)f.index, f.type);
		if (rc)
			goto out;
	}
	rc = finish(&p, err);
out:
	{
		/* (finish drained them: only a failure leaves writes in flight) */
		struct mk_err e2 = { 0 };
		int drc = mk__pack_direct_drain(&p, &e2);
		if (drc && !rc) {
			rc = drc;
			*err = e2;
		}
	}
	if (rc && made && o->resume && p.jfd >= 0 && p.finished) {
		/* kept for the next --resume: journal what was written */
		struct mk_err e2 = { 0 };
		if (!mk__pack_syncer_wait(&p, &e2))
			(void)mk__pack_journal_commit(&p, p.finished, p.nfinished, &e2);
	}
	mk__pack_syncer_stop(&p);
	if (rc && made && !o->keep_partial && !o->resume) {
		if (p.jfd >= 0) {
			close(p.jfd);
			p.jfd = -1;
		}
		(void)mk_rmtree(p.partial, NULL);
	}
	if (p.jfd >= 0)
		close(p.jfd);
	for (size_t s = 0; p.sh && s < p.nshards; s++) {
		if (p.sh[s].fd >= 0)
			close(p.sh[s].fd);
		mk__pack_direct_off(&p.sh[s]);
		if (hdrs)
			free(hdrs[s]);
	}
	free(hdrs);
	free(hlens);
	free(p.sh);
	for (size_t i = 0; p.slot && p.man && i < p.man->ntensors; i++)
		free(p.slot[i].part);
	free(p.slot);
	if (p.ring_ok)
		io_uring_queue_exit(&p.ring);
	for (unsigned k = 0; k < p.ndb; k++)
		free(p.db[k].buf);
	free(p.finished);
	free(p.sy.batch);
	free(parent);
	free(p.partial);
	mk_journal_free(jn);
	mk__pack_quant_free(&p);
	mk_manifest_free(p.man);
	mk_sr_free(r);
	mk_out_unlock(&lock);
	return rc;
}
