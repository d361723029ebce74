/* fuzz_frames.c - structure-aware harness over plan and inputs streams.
 *
 * The input is not a stream but a list of edits: the harness builds a
 * valid inputs stream (a HEAD with two models and two tensors, a linear
 * job and a slerp job with their INPT chunks), applies the edits the
 * input's bytes spell (a field of the HEAD, of a JOB or of a chunk set to
 * a chosen value, a frame dropped, repeated or moved, the kind changed),
 * encodes it with valid checksums, and runs what reads it:
 *   - mk_stream_verify (mk-cat --verify), which for an inputs stream runs
 *     mk-merge's engine and for a plan mk-fetch's frame rules;
 *   - mk_merge_run on the same bytes, as mk-merge would;
 * and, for a plan, mk_plan_job_decode on every JOB.  Besides no crash and
 * no leak, it asserts that mk-cat --verify refuses every inputs stream
 * mk-merge refuses, and accepts every one it accepts.  With no edits the
 * stream must verify and merge (a check that the template is sound). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "stream/manifest.h"
#include "merge/merge.h"
#include "stream/job.h"
#include "mk/stream.h"
#include "verify/verify.h"

#define MAXF 32

struct frame {
	enum { F_JOB, F_INPT, F_FILE, F_HEAD2, F_NOTE } kind;
	int job;                    /* F_JOB: which job; F_INPT: chunk's data */
	struct mk_chunk c;
};

struct in {
	const uint8_t *p;
	size_t n;
};

static unsigned take(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static void check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_frames: invariant broken: %s\n", what);
		abort();
	}
}

static float fdata[64];

/* Per job, a parameter its method lacks or one given at the other
 * scope, as "NAME":VALUE: a struct mk_plan_job holds its values in the
 * spec's index and cannot carry it, so it is spliced into the encoded
 * JSON's global parameters ("" for none). */
static char stray[2][64];

static struct mk_plan_job *make_job(int k)
{
	struct mk_plan_job *j = mk_plan_job_new(2);
	struct mk_err err;

	check(j != NULL, "job");
	j->id = (uint32_t)k;
	j->output = (size_t)k;
	check(!mk_plan_job_set_method(j, mk_method_find(k ? "slerp" : "linear"), &err), "method");
	stray[k][0] = 0;
	for (size_t i = 0; i < 2; i++) {
		struct mk_plan_input *in = &j->inputs[i];
		in->model = i;
		in->tensor = strdup(k ? "b" : "a");
		in->desc.dtype = in->load_dtype = k ? MK_DT_BF16 : MK_DT_F32;
		in->desc.ndim = k ? 1 : 2;
		in->desc.shape[0] = k ? 6 : 4;
		in->desc.shape[1] = 3;
		in->nelem = k ? 6 : 12;
		if (!k)
			check(!mk_plan_job_set_param(j, (long)i, "weight", mk_pval_float(i ? 0.5 : 1.0), &err), "param");
	}
	if (k) {
		j->base = 0;
		check(!mk_plan_job_set_param(j, -1, "t", mk_pval_float(0.25), &err), "param");
	}
	return j;
}

/* The encoded job s (length *l, malloc'ed) with `st` first among its
 * global parameters. */
static char *splice_stray(char *s, size_t *l, const char *st)
{
	static const char key[] = "\"global\":{";
	char *at = strstr(s, key), *o;
	size_t pre;

	if (!*st || !at)
		return s;
	pre = (size_t)(at - s) + strlen(key);
	o = malloc(*l + strlen(st) + 2);
	check(o != NULL, "splice");
	*l = (size_t)sprintf(o, "%.*s%s%s%s", (int)pre, s, st, s[pre] == '}' ? "" : ",", s + pre);
	free(s);
	return o;
}

static void edit_job(struct mk_plan_job *j, char *st, struct in *in)
{
	static const char *const methods[] = { "linear", "slerp", "ties", "passthrough", "nope", "task_arithmetic",
					       "karcher", "dare_ties" };
	static const char *const names[] = { "weight", "t", "density", "nope", "normalize", "epsilon" };
	unsigned what = take(in) % 15, v = take(in);
	size_t i = v % (j->ninputs ? j->ninputs : 1);
	struct mk_plan_input *pi = &j->inputs[i];
	struct mk_err err;

	switch (what) {
	case 0: j->output = v % 4; break;
	case 1: j->base = (long)(v % 4) - 1; break;
	case 2: pi->model = take(in) % 4; break;
	case 3: pi->desc.dtype = (enum mk_dtype)(take(in) % MK_DT_COUNT); break;
	case 4: pi->load_dtype = (enum mk_dtype)(take(in) % MK_DT_COUNT); break;
	case 5: pi->desc.shape[take(in) % 2] = take(in) % 9; break;
	case 6: pi->desc.ndim = take(in) % 3; break;
	case 7: free(j->method); j->method = strdup(methods[take(in) % 8]); break;
	case 8: j->passes = take(in) % 3; j->sends = take(in) % 4; break;
	case 9: {
		unsigned t = take(in);
		struct mk_pval pv = t % 3 == 0 ? mk_pval_float((double)(take(in) % 5) / 4) :
				    t % 3 == 1 ? mk_pval_int(take(in) % 3) : mk_pval_bool(take(in) & 1);
		const char *nm = names[take(in) % 6];
		/* one the method's spec has no place for travels as a stray */
		if (!mk_plan_job_set_param(j, v & 1 ? -1 : (long)i, nm, pv, &err))
			break;
		if (pv.type == MK_PT_BOOL)
			snprintf(st, sizeof(stray[0]), "\"%s\":%s", nm, pv.b ? "true" : "false");
		else if (pv.type == MK_PT_INT)
			snprintf(st, sizeof(stray[0]), "\"%s\":%lld", nm, (long long)pv.i);
		else
			snprintf(st, sizeof(stray[0]), "\"%s\":%g", nm, pv.f);
		break;
	}
	case 10: j->check_equal = !j->check_equal; break;
	case 11: j->spill = !j->spill; break;
	case 12: j->is_embed = !j->is_embed; break;
	case 13: j->id = take(in) % 4; break;
	case 14: /* a part of the output, and where */
		j->has_part = !j->has_part;
		j->part_begin = take(in) % 13;
		break;
	}
	/* what the encoder writes must be nameable */
	if (pi->desc.dtype >= MK_DT_COUNT)
		pi->desc.dtype = MK_DT_F32;
	if (pi->load_dtype >= MK_DT_COUNT)
		pi->load_dtype = MK_DT_F32;
}

static void edit_chunk(struct mk_chunk *c, struct in *in)
{
	unsigned what = take(in) % 8, v = take(in);

	switch (what) {
	case 0: c->id = v % 4; break;
	case 1: c->input = (uint16_t)(v % 3); break;
	case 2: c->pass = (uint16_t)(v % 3); break;
	case 3: c->dtype = (enum mk_dtype)(v % MK_DT_COUNT); break;
	case 4: c->elem_begin = v % 14; break;
	case 5: c->elem_count = v % 14; break;
	case 6: c->row_begin = v % 6; break;
	case 7: c->row_count = v % 6; break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct mk_manifest *head = mk_manifest_new("inputs", "fuzz");
	struct mk_plan_job *jobs[2] = { make_job(0), make_job(1) };
	struct frame fr[MAXF];
	size_t nf = 0;
	struct mk_err err;
	static const uint8_t hh[32];
	int fd = memfd_create("fuzz_frames", 0);
	const char *kind = "inputs";

	check(head && fd >= 0, "setup");
	for (unsigned i = 0; i < 64; i++)
		fdata[i] = (float)i / 8;
	check(!mk_manifest_add_tensor(head, "a", MK_DT_F32, 2, (uint64_t[]){ 4, 3 }, &err), "tensor");
	check(!mk_manifest_add_tensor(head, "b", MK_DT_BF16, 1, (uint64_t[]){ 6 }, &err), "tensor");
	for (int m = 0; m < 2; m++) {
		check(!mk_manifest_add_model(head, m ? "m1" : "m0", NULL, &err), "model");
		check(!mk_manifest_add_shard(head, "model.safetensors", 100, hh, &err), "shard");
	}
	head->chunk_bytes = 24;
	head->njobs = 2;
	/* job 0: rows [0,2) then [2,4), inputs interleaved; job 1: one range */
	fr[nf++] = (struct frame){ .kind = F_FILE };
	for (int k = 0; k < 2; k++) {
		fr[nf++] = (struct frame){ .kind = F_JOB, .job = k };
		for (unsigned r = 0; r < (k ? 1u : 2u); r++)
			for (uint16_t i = 0; i < 2; i++)
				fr[nf++] = (struct frame){ .kind = F_INPT, .c = {
					.id = (uint32_t)k, .input = i, .dtype = k ? MK_DT_BF16 : MK_DT_F32,
					.row_begin = k ? 0 : 2 * r, .row_count = k ? 6 : 2,
					.elem_begin = k ? 0 : 6 * r, .elem_count = 6 } };
	}
	/* the edits */
	while (in.n) {
		unsigned op = take(&in) % 12, v = take(&in);
		switch (op) {
		case 0: head->njobs = v % 4; break;
		case 1: if (head->nmodels) head->nmodels--, free(head->models[head->nmodels].ref),
				free(head->models[head->nmodels].shards[0].name), free(head->models[head->nmodels].shards);
			break;
		case 2: kind = v % 3 == 0 ? "plan" : v % 3 == 1 ? "inputs" : "tensors"; break;
		case 3: case 4: edit_job(jobs[v & 1], stray[v & 1], &in); break;
		case 5: case 6: {
			struct frame *f = &fr[v % nf];
			if (f->kind == F_INPT)
				edit_chunk(&f->c, &in);
			break;
		}
		case 7: if (nf > 1) { size_t k = v % nf; memmove(&fr[k], &fr[k + 1], (nf - k - 1) * sizeof(*fr)); nf--; } break;
		case 8: if (nf < MAXF) { size_t k = v % nf; memmove(&fr[k + 1], &fr[k], (nf - k) * sizeof(*fr)); nf++; } break;
		case 9: { size_t a = v % nf, b = take(&in) % nf; struct frame t = fr[a]; fr[a] = fr[b]; fr[b] = t; break; }
		case 10: if (nf < MAXF) fr[nf++] = (struct frame){ .kind = v & 1 ? F_HEAD2 : F_NOTE }; break;
		case 11: head->spilled_jobs = v % 3; break;
		}
	}
	/* encode */
	struct mk_stream_writer *w;
	char *hj;
	size_t hl;
	check(!mk_manifest_set_kind(head, kind, "fuzz", &err), "kind");
	check(!mk_manifest_encode(head, &hj, &hl, &err), "encode head");
	check(!mk_sw_open(&w, fd, 0, &err), "writer");
	check(!mk_sw_frame1(w, MK_FT_HEAD, hj, hl, &err), "head");
	for (size_t i = 0; i < nf; i++) {
		struct frame *f = &fr[i];
		if (f->kind == F_JOB) {
			char *s;
			size_t l;
			check(!mk_plan_job_encode(jobs[f->job], &s, &l, &err), "encode job");
			s = splice_stray(s, &l, stray[f->job]);
			check(!mk_sw_frame1(w, MK_FT_JOB, s, l, &err), "job");
			free(s);
		} else if (f->kind == F_INPT) {
			uint64_t nb = 0;
			if (mk_dtype_nbytes(f->c.dtype, f->c.elem_count, &nb) || nb > sizeof(fdata))
				nb = 0;
			f->c.data = fdata;
			f->c.data_len = (size_t)nb;
			check(!mk_sw_chunk(w, MK_FT_INPT, &f->c, &err), "chunk");
		} else if (f->kind == F_FILE) {
			check(!mk_sw_file(w, "config.json", 0644, "{}\n", 3, &err), "file");
		} else if (f->kind == F_HEAD2) {
			check(!mk_sw_frame1(w, MK_FT_HEAD, hj, hl, &err), "head2");
		} else {
			check(!mk_sw_frame1(w, MK_FT_NOTE, "hi", 2, &err), "note");
		}
	}
	check(!mk_sw_end(w, &err), "end");
	mk_sw_free(w);
	free(hj);

	/* read it as mk-cat --verify and as mk-merge */
	struct mk_verify_summary sum;
	struct mk_merge_stats st;
	struct mk_err ev = { 0 }, em = { 0 };
	char spill[] = "/tmp/fuzz_frames.XXXXXX";
	check(mkdtemp(spill) != NULL, "spill dir");
	struct mk_merge_opts mo = { .spill_dir = spill };
	int null = open("/dev/null", 1);
	setenv("TMPDIR", spill, 1);   /* where mk_stream_verify spills */
	lseek(fd, 0, SEEK_SET);
	int vrc = mk_stream_verify(fd, "fuzz", 0, &sum, &ev);
	lseek(fd, 0, SEEK_SET);
	int mrc = mk_merge_run(&mo, mk_io_fd(fd), "fuzz", mk_io_fd(null), &st, &em);
	if (!strcmp(kind, "inputs")) {
		if ((vrc == 0) != (mrc == 0))
			fprintf(stderr, "verify: %s\nmerge: %s\n", vrc ? ev.msg : "ok", mrc ? em.msg : "ok");
		check((vrc == 0) == (mrc == 0), "mk-cat --verify and mk-merge agree on an inputs stream");
	} else {
		check(mrc != 0, "mk-merge refuses a stream that is not an inputs stream");
	}
	if (getenv("FUZZ_FRAMES_VERBOSE"))
		fprintf(stderr, "%s: verify %s, merge %s\n", kind, vrc ? ev.msg : "ok", mrc ? em.msg : "ok");
	if (size == 0)
		check(vrc == 0 && mrc == 0, "the unedited template verifies and merges");
	close(null);
	rmdir(spill);
	close(fd);
	mk_plan_job_free(jobs[0]);
	mk_plan_job_free(jobs[1]);
	mk_manifest_free(head);
	return 0;
}
