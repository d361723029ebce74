/* merge.c - mk-merge: an inputs stream in, a tensors stream out.  The job
 * runner and the stream loop; the pieces they use are in merge_impl.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/chan.h"
#include "core/budget.h"
#include "cuda/cuda.h"
#include "stream/manifest.h"
#include "merge/merge.h"
#include "mk/method.h"
#include "stream/job.h"
#include "mk/plugin.h"
#include "mk/stream.h"
#include "merge_impl.h"

/* The job's inputs and, of a vocabulary job, its aux inputs */
static size_t run_nin(const struct run *r)
{
	return r->pj->ninputs + (r->pj->vocab ? r->pj->vocab->naux : 0);
}

/* Does mk-merge keep input i's chunks?  The method's inputs; every input
 * of a vocabulary job (fills read them). */
static bool run_keeps(const struct run *r, size_t i)
{
	return r->pj->vocab || (i < r->pj->ninputs && r->job.used[i]);
}

/* Forget the job, keep what the runs share (pool, spill files, GPU). */
static void run_reset(struct run *r)
{
	struct pool *pl = r->pool;
	struct spill *sp = r->spill, *mem = r->mem;
	struct mk_cuda_ctx *cx = r->cuda;
	struct gpu_queue *gq = r->gq;
	struct mk_chan_skip *skip = r->skip;

	memset(r, 0, sizeof(*r));
	r->skip = skip;
	r->pool = pl;
	r->spill = sp;
	r->mem = mem;
	r->cuda = cx;
	r->gq = gq;
}

static void run_release(struct run *r)
{
	if (r->live)
		mk_job_release(&r->job);
	for (size_t i = 0; r->ib && r->pj && i < run_nin(r); i++) {
		mk_frame_keep_release(&r->ib[i].keep);
		mk__pool_put(r->pool, r->ib[i].conv, r->ib[i].conv_cap);
		mk__pool_put(r->pool, r->ib[i].raw, r->ib[i].raw_cap);
		mk__pool_put(r->pool, r->ib[i].fill, r->ib[i].fill_cap);
	}
	free(r->ib);
	free(r->vsum);
	mk_plan_job_free(r->pj);
	free(r->in);
	free(r->labels);
	mk__pool_put(r->pool, r->outc, r->outc_cap);
	free(r->conv);
	if (r->rp)
		mk__spill_reset(r->rp);
	run_reset(r);
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
	r->labels = calloc(r->pj->ninputs + 1, sizeof(*r->labels));
	r->ib = calloc(run_nin(r) + 1, sizeof(*r->ib));
	if (!r->in || !r->labels || !r->ib)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < r->pj->ninputs; i++) {
		r->in[i] = r->pj->inputs[i].desc;
		r->in[i].dtype = r->pj->inputs[i].load_dtype; /* what the method sees */
		if (r->pj->inputs[i].model < man->nmodels)
			r->labels[i] = man->models[r->pj->inputs[i].model].ref;
		if (r->pj->vocab) {
			/* aligned to the merged vocabulary */
			r->in[i].shape[0] = r->pj->vocab->rows;
			r->in[i].dtype = r->pj->vocab->dtype;
		}
	}
	r->check_equal = r->pj->check_equal;
	/* check_equal: the method sees input 0; the others must equal it */
	r->d = (struct mk_job_desc){ .tensor = r->name, .elem_base = r->pj->part_begin, .seed = r->seed,
				     .is_embed = r->pj->is_embed, .spare_pass = r->pj->spare,
				     .ninputs = r->check_equal ? 1 : r->pj->ninputs,
				     .base = r->check_equal ? -1 : (int)r->pj->base, .in = r->in, .labels = r->labels,
				     .global = r->pj->params.global, .input = r->pj->params.input };
	rc = mk_job_init(&r->job, r->m, &r->d, t->desc.dtype, err);
	if (rc)
		return mk_err_prefix(err, "job %u: ", r->pj->id);
	r->job.threads = r->threads;   /* (the statistics passes run on this thread) */
	r->live = true;
	/* the plan's manifest and the method's output rule must agree (a
	 * part, passthrough in its input's shape, was placed in the tensor
	 * when the JOB was decoded); from here the output is job.out */
	const struct mk_tensor_desc *od = &r->job.out;
	if (!r->pj->has_part &&
	    (od->ndim != t->desc.ndim || memcmp(od->shape, t->desc.shape, od->ndim * sizeof(uint64_t))))
		return mk_err_set(err, MK_EFORMAT, "job %u (%s): %s gives a shape other than the manifest's", r->pj->id,
				  r->name, r->m->name);
	r->out_nelem = mk_shape_count(od->ndim, od->shape);
	r->out_row_len = mk_shape_row_len(od->ndim, od->shape);
	r->out_at = r->pj->part_begin;
	r->emit_row_len = mk_shape_row_len(t->desc.ndim, t->desc.shape);
	r->chunk_bytes = man->chunk_bytes;
	if (r->pj->nmore != r->job.nmore)
		return mk_err_set(err, MK_EFORMAT, "job %u (%s): the plan gives it %u outputs, %s %u", r->pj->id, r->name,
				  r->pj->nmore + 1, r->m->name, r->job.nmore + 1);
	for (unsigned k = 0; k < r->job.nmore; k++) {
		const struct mk_tensor_desc *md = &man->tensors[r->pj->more[k]].desc, *jd = &r->job.more[k];
		if (md->dtype != jd->dtype || md->ndim != jd->ndim || memcmp(md->shape, jd->shape, md->ndim * sizeof(uint64_t)))
			return mk_err_set(err, MK_EFORMAT, "job %u (%s): %s gives output %u (%s) a shape or dtype other than the manifest's",
					  r->pj->id, r->name, r->m->name, k + 1, man->tensors[r->pj->more[k]].name);
	}
	if (r->job.nmore) {
		/* the inputs feed the passes alone, over their own elements */
		r->out_nelem = r->job.pass_nelem;
		for (size_t i = 0; i < r->pj->ninputs; i++)
			if (r->job.used[i])
				r->out_row_len = mk_shape_row_len(r->in[i].ndim, r->in[i].shape);
	}
	for (size_t i = 0; i < r->pj->ninputs; i++) {
		uint64_t rl = mk_shape_row_len(r->in[i].ndim, r->in[i].shape);
		if (r->job.used[i] && r->in[i].ndim > 1 && od->ndim > 1 && rl != r->out_row_len)
			return mk_err_set(err, MK_EUNSUPPORTED,
					  "job %u (%s): input %zu has rows of %llu elements, the output %llu (not supported yet)",
					  r->pj->id, r->name, i, (unsigned long long)rl,
					  (unsigned long long)r->out_row_len);
	}
	if (r->job.nmore ? r->pj->sends != r->job.npasses && r->pj->sends != 1
			 : r->pj->sends != r->job.npasses + 1 && r->pj->sends != 1)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "job %u (%s): %s needs %u statistics passes; the plan sends the inputs %u times",
				  r->pj->id, r->name, r->m->name, r->job.npasses, r->pj->sends);
	return 0;
}

static int run_start(struct run *r, const struct mk_manifest *man, const struct mk_frame *f,
		     unsigned threads, uint64_t budget, struct mk_err *err)
{
	int rc;

	run_reset(r);
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
	/* (a job with several outputs is sent for its passes alone: held when
	 * it has more than the one it is sent for) */
	bool once = r->pj->sends == 1 && r->job.npasses > (r->job.nmore ? 1u : 0u) && !r->job.byte_copy;
	r->held = once && !r->pj->spill;
	r->rp = !once ? NULL : r->pj->spill ? r->spill : r->mem;
	r->job.held = r->rp != NULL;   /* replayed: the kernel may add a pass */
	r->planned = r->job.npasses;
	r->gpu = r->cuda && !r->job.byte_copy && !r->check_equal && mk_cuda_job_supported(&r->job);
	if (r->held) {
		/* what is held: every used input's bytes as sent */
		uint64_t need = 0;
		for (size_t i = 0; i < run_nin(r); i++)
			if (run_keeps(r, i))
				need += mk_plan_input_sent_bytes(r->pj, i);
		if (budget && need > budget)
			return mk_err_set(err, MK_ENOMEM,
					  "job %u (%s): the plan holds it in memory, %llu bytes, more than --max-memory %llu; run mk-plan with --max-memory %llu or less",
					  r->pj->id, r->name, (unsigned long long)need, (unsigned long long)budget,
					  (unsigned long long)budget);
		return mk__spill_reserve(r->mem, need, err);
	}
	return 0;
}

/* Whether the job is on a statistics pass that mk-fetch may be told it
 * need not send the rest of (mk_merge_opts.skip): a streamed job whose
 * method wants no more input for it, whose inputs mk-fetch sends as
 * read (mk_plan_job_sent_as_read).  Its chunks may stop at any input. */
static bool pass_skippable(const struct run *r)
{
	return r->skip && !r->rp && !r->check_equal && !r->job.byte_copy && r->send < r->job.npasses &&
	       !mk_job_wants(&r->job) && mk_plan_job_sent_as_read(r->pj);
}

/* Whether the pass is marked on the board for mk-fetch (mk_chan_skip_test) */
static bool pass_marked(const struct run *r)
{
	return r->skip && mk_chan_skip_test(r->skip, r->pj->id, r->send);
}

static bool pass_unread(const struct run *r)
{
	return pass_marked(r) && pass_skippable(r);
}

/* Mark the pass for mk-fetch once the method wants no more of it (the
 * board first: the cheaper test, true for the rest of a marked pass). */
static void note_skip(struct run *r, struct mk_merge_stats *st)
{
	if (pass_marked(r) || !pass_skippable(r) || !mk_chan_skip_mark(r->skip, r->pj->id, r->send))
		return;
	st->passes_skipped++;
}

/* The gathered range is complete: run a pass over it or write output. */
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
	if (r->pj->vocab) {
		r->vnext = b + n;
		if ((rc = mk__vocab_range(r, b, n, err)))
			return rc;
	}
	/* (a pass whose rest mk-fetch was told not to send may stop at any
	 * input: nothing reads it) */
	bool unread = pass_unread(r);
	for (size_t i = 0; i < r->d.ninputs && !unread; i++) {
		struct inbuf *in = &r->ib[i];
		if (r->job.used[i] && (!in->have || in->begin != b || in->count < n))
			return mk_err_set(err, MK_ECORRUPT,
					  "job %u (%s): input %zu sent no data for elements [%llu, %llu)", r->pj->id,
					  r->name, i, (unsigned long long)b, (unsigned long long)(b + n));
	}
	/* check_equal: the method saw input 0; every other input was
	 * compared with it as it came, and must have come */
	for (size_t i = 1; r->check_equal && i < r->pj->ninputs; i++) {
		struct inbuf *in = &r->ib[i];
		if (!in->have || in->begin != b || in->count < n)
			return mk_err_set(err, MK_ECORRUPT,
					  "job %u (%s): input %zu sent no data for elements [%llu, %llu) to compare with input 0",
					  r->pj->id, r->name, i, (unsigned long long)b, (unsigned long long)(b + n));
	}
	if ((r->job.byte_copy ? r->send + 1 >= r->pj->sends : r->send >= r->job.npasses) && b != r->next_out)
		return mk_err_set(err, MK_ECORRUPT, "job %u (%s): output elements from %llu, after %llu written", r->pj->id,
				  r->name, (unsigned long long)b, (unsigned long long)r->next_out);
	if (r->job.byte_copy) {
		if (r->send + 1 < r->pj->sends)
			goto clear;
		/* the input's bytes (a vocabulary job's aligned rows) */
		struct inbuf *in = &r->ib[r->job.copy_input];
		enum mk_dtype stored = in->dtype;
		uint64_t len;
		mk_dtype_nbytes(r->job.out.dtype, n, &len);
		if (stored == r->job.out.dtype) {
			rc = mk__gpuq_emit(w, r, b, n, r->job.out.dtype, in->data, (size_t)len, st, err);
			goto clear;
		}
		/* cast on load to the output's dtype: one rounding, as torch */
		if (grow(&r->outc, &r->outc_cap, len ? (size_t)len : 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (mk_dtype_convert(r->job.out.dtype, r->outc, stored, in->data, n))
			return mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): cannot cast %s to %s", r->pj->id,
					  r->name, mk_dtype_name(stored), mk_dtype_name(r->job.out.dtype));
		rc = mk__gpuq_emit(w, r, b, n, r->job.out.dtype, r->outc, (size_t)len, st, err);
		goto clear;
	}
	{
		size_t es = mk_dtype_bits(r->job.compute) / 8;
		uint64_t ob;
		bool apply = r->send >= r->job.npasses;
		mk_dtype_nbytes(r->job.out.dtype, n, &ob);
		/* a statistics pass block by block on this thread; the output
		 * converted tile by tile in the workers */
		if (!apply) {
			rc = mk__workers_stats(r, b, n, err);
			goto clear;
		}
		if (!r->gpu) {
			/* the output straight into its DATA frame where the
			 * stream takes one filled in place (a channel) */
			void *out;
			uint64_t bad = 0;
			rc = mk__emit_reserve(w, r, b, n, r->job.out.dtype, (size_t)ob, &out, err);
			if (rc > 0) {
				rc = mk__workers_run(r, b, n, true, out, r->gq->nonfinite_out ? &bad : NULL, err);
				if (rc)
					mk_sw_chunk_unreserve(w);
				else
					rc = mk__emit_commit(w, r, b, n, (size_t)ob, bad, st, err);
				goto clear;
			}
			if (rc)
				goto clear;
		}
		if (grow(&r->outc, &r->outc_cap, (size_t)ob + 1))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (r->gpu) {
			/* inputs converted on the workers into the range's buffers,
			 * the method on the GPU, the output converted back here */
			for (size_t i = 0; i < r->d.ninputs; i++)
				if (r->job.used[i] && grow(&r->ib[i].conv, &r->ib[i].conv_cap, (size_t)n * es + 1))
					return mk_err_set(err, MK_ENOMEM, "out of memory");
			rc = mk__workers_run(r, b, n, false, NULL, NULL, err);
			if (!rc)
				rc = mk__gpuq_submit(w, r, b, n, b, st, err);
			goto clear;
		}
		rc = mk__workers_run(r, b, n, true, r->outc, NULL, err);
		if (!rc) {
			rc = mk__gpuq_emit(w, r, b, n, r->job.out.dtype, r->outc, (size_t)ob, st, err);
		}
	}
clear:
	for (size_t i = 0; i < run_nin(r); i++) {
		r->ib[i].have = false;
		mk_frame_keep_release(&r->ib[i].keep);   /* converted, or failed */
	}
	return rc;
}

/* A job with several outputs, its passes done: each output computed in
 * chunks (of about the stream's chunk size, whole rows where a row fits)
 * with no inputs, converted to its dtype and sent. */
static int emit_outputs(struct mk_stream_writer *w, struct run *r, struct mk_merge_stats *st, struct mk_err *err)
{
	size_t es = mk_dtype_bits(r->job.compute) / 8, index = r->out_index;
	uint64_t row = r->emit_row_len;
	int rc = 0;

	for (unsigned k = 0; !rc && k <= r->job.nmore; k++) {
		const struct mk_tensor_desc *od = k ? &r->job.more[k - 1] : &r->job.out;
		uint64_t n = mk_tensor_desc_count(od), rl = mk_shape_row_len(od->ndim, od->shape), ob;
		uint64_t step = r->chunk_bytes / (es ? es : 4);
		if (!step)
			step = 1;
		if (rl && step >= rl)
			step -= step % rl;
		r->out_index = k ? r->pj->more[k - 1] : index;
		r->emit_row_len = rl;
		r->out_at = 0;
		for (uint64_t b = 0; !rc && b < n; b += step) {
			uint64_t c = n - b < step ? n - b : step;
			struct mk_job_chunk ch = { .elem_begin = b, .count = c, .output = k };
			mk_dtype_nbytes(od->dtype, c, &ob);
			if (grow(&r->outc, &r->outc_cap, (size_t)(c * es) + 1) || grow(&r->conv, &r->conv_cap, (size_t)ob + 1))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			rc = mk_job_apply(&r->job, &ch, r->outc, err);
			if (!rc && mk_dtype_convert(od->dtype, r->conv, r->job.compute, r->outc, c))
				rc = mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): cannot write output %u as %s", r->pj->id,
						r->name, k, mk_dtype_name(od->dtype));
			if (!rc)
				rc = mk__gpuq_emit(w, r, b, c, od->dtype, r->conv, (size_t)ob, st, err);
		}
	}
	r->out_index = index;
	r->emit_row_len = row;
	r->next_out = r->out_nelem;   /* (the inputs' elements, all seen by the passes) */
	return rc;
}

static int finish_passes(struct run *r, unsigned upto, struct mk_err *err)
{
	while (r->passes_done < upto && r->passes_done < r->job.npasses) {
		/* a pass the stream ends early: only one marked for mk-fetch
		 * (mk_merge_opts.skip) that the method has what it needs of */
		if (r->job.next_elem != r->job.pass_nelem &&
		    !(r->skip && mk_chan_skip_test(r->skip, r->pj->id, r->passes_done) && !mk_job_wants(&r->job)))
			return mk_err_set(err, MK_ECORRUPT,
					  "job %u (%s): statistics pass %u ended after %llu of its %llu elements",
					  r->pj->id, r->name, r->passes_done, (unsigned long long)r->job.next_elem,
					  (unsigned long long)r->job.pass_nelem);
		int rc = mk_job_finish(&r->job, r->passes_done, err);
		if (rc)
			return rc;
		r->passes_done++;
	}
	return 0;
}

static int run_input(struct mk_stream_writer *w, struct run *r, const struct mk_chunk *cp, bool stable,
		     struct mk_merge_stats *st, struct mk_err *err);

/* A vocabulary job's rows before element `upto` that no input sent (a
 * token in no model, padding): ranges of them cut as mk-fetch cuts, run
 * as ranges with every input filled. */
#define GAP_ELEMS (1u << 18)
static int vocab_gaps(struct mk_stream_writer *w, struct run *r, uint64_t upto, struct mk_merge_stats *st,
		      struct mk_err *err)
{
	uint64_t rl = r->out_row_len ? r->out_row_len : 1;

	while (r->vnext < upto) {
		uint64_t b = r->vnext, e = mk_plan_vocab_next_cut(r->pj, b / rl) * rl;
		if (e > upto)
			e = upto;
		if (e - b > GAP_ELEMS)
			e = b + GAP_ELEMS;
		if (e <= b)
			return mk_err_set(err, MK_ECORRUPT, "job %u (%s): no progress filling rows at element %llu", r->pj->id,
					  r->name, (unsigned long long)b);
		r->range = true;
		r->begin = b;
		r->count = e - b;
		int rc = range_done(w, r, st, err);
		if (rc)
			return rc;
	}
	return 0;
}

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
	if (c.pass == 0 && run_keeps(r, c.input) && r->gq->nonfinite_in && !mk__counts_on_convert(r))
		r->gq->nonfinite_in[r->out_index] += mk_dtype_count_nonfinite(c.dtype, c.data, c.elem_count);
	const void *stored = NULL;
	if (r->rp && run_keeps(r, c.input)) {
		/* held: a frame a channel lent stays where it lies */
		struct mk_frame_keep k = { 0 };
		if (r->rp->fd < 0)
			mk_sr_keep(r->rd, f, &k);
		rc = mk__spill_put(r->rp, &c, &k, &stored, err);
		mk_frame_keep_release(&k);
		if (rc)
			return rc;
	}
	if (stored)
		c.data = stored;
	r->frame = stored ? NULL : f;
	rc = run_input(w, r, &c, stored != NULL, st, err);
	r->frame = NULL;
	if (!rc)
		note_skip(r, st);
	return rc;
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
		/* a vocabulary job's rows no input had, to the end of the pass */
		if (r->pj->vocab && (rc = vocab_gaps(w, r, r->out_nelem, st, err)))
			return rc;
		rc = finish_passes(r, c.pass, err);
		if (rc)
			return rc;
		r->send = c.pass;
		r->vnext = 0;
	}
	if (r->pj->vocab && !r->range && c.elem_begin > r->vnext && (rc = vocab_gaps(w, r, c.elem_begin, st, err)))
		return rc;
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
		    memcmp(first->data, c.data, c.data_len))
			return mk_err_set(err, MK_EMISMATCH,
					  "tensor '%s' (%s) differs between input 0 and input %u: tensors that are not floats are not merged, their inputs must agree",
					  r->name, mk_dtype_name(c.dtype), c.input);
		return 0;
	}
	if (r->job.byte_copy && !r->pj->vocab) {
		if ((int)c.input == r->job.copy_input) {
			if (grow(&in->raw, &in->raw_cap, c.data_len ? c.data_len : 1))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			memcpy(in->raw, c.data, c.data_len);
			in->raw_len = c.data_len;
			in->data = in->raw;
			in->dtype = c.dtype;
		}
		return 0;
	}
	if (!run_keeps(r, c.input))
		return 0;
	/* keep the bytes (or where they stay); range_done converts them */
	in->dtype = c.dtype;
	in->raw_len = c.data_len;
	mk_frame_keep_release(&in->keep);
	if (stable) {
		in->data = c.data;
		return 0;
	}
	/* a frame a channel lent, kept where it lies: no copy */
	if (r->frame && mk_sr_keep(r->rd, r->frame, &in->keep)) {
		in->data = c.data;
		r->frame = NULL;
		return 0;
	}
	if (grow(&in->raw, &in->raw_cap, c.data_len ? c.data_len : 1))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	/* the frame's own buffer, traded for this input's (from the pool, so
	 * the reader's next frame reuses one, and the pool does not fill with
	 * buffers no one takes): no copy */
	const struct mk_frame *f = r->frame;
	if (f && f->wire && (const uint8_t *)c.data >= f->wire &&
	    (const uint8_t *)c.data + c.data_len <= f->wire + f->wire_len) {
		size_t off = (size_t)((const uint8_t *)c.data - f->wire);
		uint8_t *b = in->raw;
		if (mk_sr_trade(r->rd, f, &b, &in->raw_cap)) {
			in->raw = b;
			in->data = b + off;
			r->frame = NULL;
			return 0;
		}
	}
	memcpy(in->raw, c.data, c.data_len);
	in->data = in->raw;
	return 0;
}

static int run_end(struct mk_stream_writer *w, struct run *r, struct mk_merge_stats *st, struct mk_err *err)
{
	int rc = 0;

	if (!r->pj)
		return 0;
	/* a job sent once: its later passes replayed (and the apply's, but
	 * for a job with several outputs, which computes them from its passes) */
	for (unsigned p = 1; r->rp && !rc && p < r->job.npasses + (r->job.nmore ? 0u : 1u); p++)
		for (size_t i = 0; !rc && i < r->rp->n; i++) {
			struct mk_chunk c;
			rc = mk__spill_get(r->rp, i, &c, err);
			c.pass = (uint16_t)p;
			if (!rc)
				rc = run_input(w, r, &c, r->rp->fd < 0, st, err);
		}
	if (!rc && r->range)
		rc = range_done(w, r, st, err);
	if (!rc && r->pj->vocab)
		rc = vocab_gaps(w, r, r->out_nelem, st, err);
	if (!rc)
		rc = finish_passes(r, r->job.npasses, err);
	if (!rc && r->job.nmore)
		rc = emit_outputs(w, r, st, err);
	if (!rc && r->next_out != r->out_nelem)
		rc = mk_err_set(err, MK_ECORRUPT, "job %u (%s): the inputs covered %llu of %llu output elements",
				r->pj->id, r->name, (unsigned long long)r->next_out, (unsigned long long)r->out_nelem);
	if (!rc) {
		st->jobs++;
		st->byte_copies += r->job.byte_copy;
		st->gpu_jobs += r->gpu;
		st->passes_added += r->job.npasses - r->planned;
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

/* Output tensors with NaN or infinite elements: each one whose used
 * inputs were all finite is a warning (an error with o->strict), the
 * others are counted. */
#define NONFINITE_NAMED 8   /* tensors named in warnings; the rest counted */

static int report_nonfinite(const struct mk_merge_opts *o, const struct mk_manifest *man,
			    const struct gpu_queue *gq, struct mk_merge_stats *st, struct mk_err *err)
{
	for (size_t i = 0; i < man->ntensors; i++) {
		const struct mk_manifest_tensor *t = &man->tensors[i];
		char msg[512];
		if (!gq->nonfinite_out[i])
			continue;
		st->nonfinite_tensors++;
		if (gq->nonfinite_in[i])
			continue; /* carried over from its inputs */
		st->nonfinite_new++;
		snprintf(msg, sizeof(msg),
			 "tensor '%s': %llu of %llu elements are NaN or infinite, from inputs that were all finite",
			 t->name, (unsigned long long)gq->nonfinite_out[i], (unsigned long long)t->nelem);
		if (o->strict)
			return mk_err_set(err, MK_EINVAL, "%s (--strict)", msg);
		if (o->warn && st->nonfinite_new <= NONFINITE_NAMED)
			o->warn(o->warn_ctx, msg);
	}
	if (o->warn && st->nonfinite_new > NONFINITE_NAMED) {
		char msg[128];
		snprintf(msg, sizeof(msg), "(and %llu more tensors with NaN or infinite elements from finite inputs)",
			 (unsigned long long)(st->nonfinite_new - NONFINITE_NAMED));
		o->warn(o->warn_ctx, msg);
	}
	return 0;
}

int mk_merge_run(const struct mk_merge_opts *o, struct mk_io in, const char *label, struct mk_io out,
		 struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_stream_reader *rd = NULL;
	struct mk_manifest *man = NULL;
	struct mk_frame f;
	int rc;

	memset(st, 0, sizeof(*st));
	/* FILE frames are passed on in pieces as they arrive */
	rc = mk_sr_open_io(&rd, in, label, MK_SR_PIECEWISE_FILE, err);
	if (!rc)
		rc = mk_sr_head(rd, label, "inputs", "mk-merge reads an 'inputs' stream (mk-plan | mk-fetch)", &man, &f,
				err);
	if (!rc)
		rc = mk_merge_run_from(o, rd, man, label, out, st, err);
	mk_manifest_free(man);
	mk_sr_free(rd);
	return rc;
}

int mk_merge_run_from(const struct mk_merge_opts *o, struct mk_stream_reader *rd, struct mk_manifest *man,
		      const char *label, struct mk_io out, struct mk_merge_stats *st, struct mk_err *err)
{
	struct mk_stream_writer *w = NULL;
	struct mk_frame f;
	struct pool pool = { .limit = mk_budget_merge_pool(o->budget) };
	struct spill spill = { .fd = -1 }, mem = { .fd = -1 };
	struct gpu_queue gq = { 0 };
	struct run r = { .pool = &pool, .cuda = o->cuda, .gq = &gq, .mem = &mem, .skip = o->skip };
	char *head = NULL;
	size_t hlen;
	uint64_t njobs = 0, seen = 0;
	int rc;

	memset(st, 0, sizeof(*st));
	gq.nonfinite_out = calloc(man->ntensors + 1, sizeof(*gq.nonfinite_out));
	gq.nonfinite_in = calloc(man->ntensors + 1, sizeof(*gq.nonfinite_in));
	if (!gq.nonfinite_out || !gq.nonfinite_in) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = check_head(man, label, o, err);
	if (rc)
		goto out;
	if (o->spill_dir) {
		rc = mk__spill_open(&spill, o->spill_dir, err);
		if (rc)
			goto out;
		r.spill = &spill;
	}
	njobs = man->njobs;
	rc = mk_manifest_set_kind(man, "tensors", "mk-merge " MK_VERSION, err);
	if (!rc)
		rc = mk_manifest_encode(man, &head, &hlen, err);
	if (!rc)
		rc = mk_sw_open_io(&w, out, o->compress_level, err);
	if (!rc)
		rc = mk_sw_frame1(w, MK_FT_HEAD, head, hlen, err);
	if (rc)
		goto out;
	while ((rc = mk_sr_next(rd, &f, err)) > 0) {
		if (!strcmp(f.type, MK_FT_INPT)) {
			r.rd = rd;
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
				rc = mk__gpuq_drain(w, &gq, &pool, o->cuda, st, err);
		} else if (!strcmp(f.type, MK_FT_FILE) || !f.critical) {
			rc = mk__gpuq_drain(w, &gq, &pool, o->cuda, st, err);
			if (!rc)
				rc = mk_sw_pass_from(w, rd, &f, err);
		} else {
			rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: unexpected %s frame in an 'inputs' stream",
					label, (unsigned long long)f.index, f.type);
		}
		if (rc)
			goto out;
	}
	if (rc < 0)
		goto out;
	rc = mk__gpuq_drain(w, &gq, &pool, o->cuda, st, err);
	if (!rc)
		rc = report_nonfinite(o, man, &gq, st, err);
	if (!rc)
		rc = mk_sw_end(w, err);
out:
	if (gq.n) {
		/* a failure with outputs in flight: let the GPU finish writing
		 * them before their buffers go */
		struct mk_err ignored;
		mk_cuda_flush(o->cuda, &ignored);
	}
	mk__gpuq_free(&gq, &pool);
	run_release(&r);
	mk__pool_free(&pool);
	st->spill_bytes_max = spill.bytes_max;
	mk__spill_close(&spill);
	mk__spill_close(&mem);
	free(head);
	mk_sw_free(w);
	return rc;
}
