/* plan_feeds.c - mk-fetch's plan mode: models read from the tensors streams
 * that feed them (mk_fetch_opts.feed_fds) rather than from their files. */
#include <stdlib.h>
#include <string.h>
#include "fetch/fetch.h"
#include "stream/job.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "plan_fetch_impl.h"

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
int mk__pf_feed_take(struct feed *fd, size_t ix, uint64_t at, uint64_t n, enum mk_dtype dt, uint8_t *dst,
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
int mk__pf_feeds_open(const struct mk_fetch_opts *o, struct feed *fv, struct mk_err *err)
{
	for (size_t k = 0; k < o->nfeeds; k++) {
		struct mk_frame f;
		fv[k] = (struct feed){ .ref = o->feed_refs[k], .cur = -1 };
		/* FILE frames piecewise: skipped, never held whole */
		int rc = mk_sr_open_io(&fv[k].r, o->feeds[k], o->feed_refs[k], MK_SR_PIECEWISE_FILE, err);
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

long mk__pf_feed_of(const struct mk_fetch_opts *o, const char *ref)
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
void mk__pf_feed_place(struct feed *fd, const struct mk_plan_input *in, struct src *sr)
{
	long ix = mk_manifest_find(fd->head, in->tensor);

	fd->wanted[ix] = true;
	sr->feed_tensor = (size_t)ix;
}

/* After the last job: the rest of each stream read, so its producer ends. */
int mk__pf_feeds_drain(struct feed *fv, size_t n, struct mk_err *err)
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

void mk__pf_feeds_free(struct feed *fv, size_t n)
{
	for (size_t k = 0; fv && k < n; k++) {
		mk_sr_free(fv[k].r);
		mk_manifest_free(fv[k].head);
		free(fv[k].wanted);
	}
	free(fv);
}
