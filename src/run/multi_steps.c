/* multi_steps.c - mk-multi's steps run in order: one by one (mk_run_merge), or
 * a chain of steps streamed into the ones that read them, run at once
 * (mk_run_steps), each planned against a description of the merges it
 * reads (multi.h). */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fetch/fetch.h"
#include "core/fsutil.h"
#include "stream/manifest.h"
#include "multi/multi.h"
#include "run/steps.h"
#include "run/multi_steps.h"
#include "stream/job.h"
#include "planner/planner.h"
#include "io/safetensors.h"
#include "mk/stream.h"

static bool file_exists(const char *dir, const char *name)
{
	char *p;
	struct stat st;
	bool ok;

	if (asprintf(&p, "%s/%s", dir, name) < 0)
		return false;
	ok = stat(p, &st) == 0 && S_ISREG(st.st_mode);
	free(p);
	return ok;
}

bool mk_multi_done(const char *out_dir)
{
	static const char *const weights[] = { "model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
					       "pytorch_model.bin.index.json" };

	if (!file_exists(out_dir, "config.json"))
		return false;
	for (size_t i = 0; i < sizeof(weights) / sizeof(*weights); i++)
		if (file_exists(out_dir, weights[i]))
			return true;
	return false;
}

/* ------------------------------------------------------------ which links */

void mk_multi_stream_plan(const struct mk_multi *m, bool lazy, const bool *done, bool *cand, size_t *user,
			  size_t *group)
{
	size_t n = m->nsteps;

	for (size_t i = 0; i < n; i++) {
		cand[i] = false;
		user[i] = i;
		group[i] = 1;
	}
	for (size_t k = 0; k < n; k++)
		for (size_t q = 0; q < m->steps[k].ndeps; q++)
			user[m->steps[k].deps[q]] = k;
	for (size_t i = 0; i < n; i++) {
		const struct mk_multi_step *s = &m->steps[i];
		bool skip_i = lazy && done && done[i], skip_u = lazy && done && done[user[i]];
		cand[i] = s->name && s->nusers == 1 && s->plain_refs && !skip_i && !skip_u;
	}
	/* a chain: the candidates whose links end in the same step, and it;
	 * the steps run in an order where a user comes after what it reads */
	for (size_t i = 0; i < n; i++) {
		if (cand[i])
			continue;
		size_t c = 1;
		for (size_t k = 0; k < n; k++) {
			size_t j = k;
			while (cand[j] && j != i)
				j = user[j];
			if (cand[k] && j == i)
				c++;
		}
		group[i] = c;
		for (size_t k = 0; k < n; k++) {
			size_t j = k;
			while (cand[j] && j != i)
				j = user[j];
			if (cand[k] && j == i)
				group[k] = c;
		}
	}
}

void mk_multi_unneeded(const struct mk_multi *m, const bool *done, bool *unneeded)
{
	/* from the last step back: the readers of a step come after it */
	for (size_t i = m->nsteps; i-- > 0;) {
		bool want = false;
		unneeded[i] = false;
		if (done[i] || !m->steps[i].name || !m->steps[i].nusers)
			continue;
		for (size_t k = i + 1; k < m->nsteps && !want; k++)
			for (size_t q = 0; q < m->steps[k].ndeps; q++)
				want |= m->steps[k].deps[q] == i && !done[k] && !unneeded[k];
		unneeded[i] = !want;
	}
}

/* ------------------------------------------------------------ descriptions */

/* A plan's HEAD and jobs, read back from its stream; with dir, its FILE
 * frames written there and its output's safetensors header as
 * dir/model.safetensors, the file as long as the output would be (its
 * data a hole, never read): what the steps reading it plan against. */
struct plan_view {
	struct mk_manifest *head;
	struct mk_plan_job **jobs;
	size_t njobs;
	size_t *rank;                     /* per output tensor: its job's place */
};

static void plan_view_clear(struct plan_view *v)
{
	mk_manifest_free(v->head);
	for (size_t k = 0; k < v->njobs; k++)
		mk_plan_job_free(v->jobs[k]);
	free(v->jobs);
	free(v->rank);
	*v = (struct plan_view){ 0 };
}

static int write_file(const char *dir, const char *name, const void *data, size_t len, uint64_t size,
		      struct mk_err *err)
{
	char *path;
	int fd, rc = 0;

	if (asprintf(&path, "%s/%s", dir, name) < 0)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = mk_mkdirs_for(path, err))) {
		free(path);
		return rc;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		rc = mk_err_sys(err, errno, "%s", path);
	else if (!(rc = mk_pwrite_all(fd, data, len, 0, path, err)) && size > len && ftruncate(fd, (off_t)size))
		rc = mk_err_sys(err, errno, "%s", path);
	if (fd >= 0 && close(fd) && !rc)
		rc = mk_err_sys(err, errno, "%s", path);
	free(path);
	return rc;
}

static void place(const struct mk_manifest *h, size_t i, bool *placed, struct mk_st_out_tensor *ot, size_t *n)
{
	if (placed[i])
		return;
	placed[i] = true;
	ot[(*n)++] = (struct mk_st_out_tensor){ .name = h->tensors[i].name, .dtype = h->tensors[i].desc.dtype,
						.ndim = h->tensors[i].desc.ndim, .shape = h->tensors[i].desc.shape };
}

/* The description's weights: its tensors laid out in the order the
 * merge makes them (its jobs'), so a plan reading it in file order (as
 * plans order their jobs) reads the stream in its order. */
static int describe_weights(const struct plan_view *v, const char *dir, struct mk_err *err)
{
	const struct mk_manifest *h = v->head;
	struct mk_st_out_tensor *ot = calloc(h->ntensors + 1, sizeof(*ot));
	bool *placed = calloc(h->ntensors + 1, sizeof(*placed));
	uint8_t *hdr = NULL;
	size_t hlen = 0, n = 0;
	uint64_t size = 0;
	int rc;

	if (!ot || !placed) {
		free(ot);
		free(placed);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	/* the jobs' outputs in their order, then any tensor no job makes */
	for (size_t k = 0; k < v->njobs; k++) {
		place(h, v->jobs[k]->output, placed, ot, &n);
		for (unsigned q = 0; q < v->jobs[k]->nmore; q++)
			place(h, v->jobs[k]->more[q], placed, ot, &n);
	}
	for (size_t i = 0; i < h->ntensors; i++)
		place(h, i, placed, ot, &n);
	free(placed);
	rc = mk_st_header_build_as_given(ot, n, 8, &hdr, &hlen, err);
	if (!rc) {
		size = hlen;
		for (size_t i = 0; i < n; i++)
			size += ot[i].nbytes;
		rc = write_file(dir, "model.safetensors", hdr, hlen, size, err);
	}
	free(hdr);
	free(ot);
	return rc;
}

static int plan_read(const struct mk_plan *plan, const char *dir, struct plan_view *v, struct mk_err *err)
{
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	int fd = -1, rc;

	*v = (struct plan_view){ 0 };
	rc = mk_tmpfile_open(mk_tmpdir(), "a plan read back", &fd, err);
	if (!rc)
		rc = mk_plan_write(plan, mk_io_fd(fd), 0, err);
	if (!rc && lseek(fd, 0, SEEK_SET) < 0)
		rc = mk_err_sys(err, errno, "a plan read back");
	if (!rc)
		rc = mk_sr_open(&r, fd, "plan", 0, err);
	if (!rc)
		rc = mk_sr_head(r, "plan", "plan", "a plan", &v->head, &f, err);
	while (!rc && (rc = mk_sr_next(r, &f, err)) > 0) {
		rc = 0;
		if (!strcmp(f.type, MK_FT_FILE) && dir) {
			struct mk_file_frame ff;
			if (!(rc = mk_file_decode(f.payload, f.payload_len, &ff, err))) {
				rc = write_file(dir, ff.name, ff.data, ff.len, 0, err);
				free(ff.name);
			}
		} else if (!strcmp(f.type, MK_FT_JOB)) {
			struct mk_plan_job *jb, **q = realloc(v->jobs, (v->njobs + 1) * sizeof(*q));
			if (!q) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			v->jobs = q;
			if (!(rc = mk_plan_job_decode(f.payload, f.payload_len, v->head, &jb, err)))
				v->jobs[v->njobs++] = jb;
		}
	}
	if (!rc && !(v->rank = calloc(v->head->ntensors + 1, sizeof(*v->rank))))
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; !rc && k < v->njobs; k++) {
		v->rank[v->jobs[k]->output] = k;
		for (unsigned q = 0; q < v->jobs[k]->nmore; q++)
			v->rank[v->jobs[k]->more[q]] = k;
	}
	if (!rc && dir)
		rc = describe_weights(v, dir, err);
	mk_sr_free(r);
	if (fd >= 0)
		close(fd);
	if (rc)
		plan_view_clear(v);
	return rc;
}

/* ------------------------------------------------------------ running */

struct pending {                      /* a step planned, streamed, not run yet */
	struct mk_run_step *step;
	struct plan_view view;
	char *desc;                       /* its description's directory */
	bool live;
};

struct mrun {
	const struct mk_multi *m;
	const struct mk_run_opts *base;
	const struct mk_multi_run_opts *ro;
	bool *done, *cand, *unneeded;
	size_t *user, *group;
	struct pending *pd;
	char *scratch;                    /* $TMPDIR/mk-multi-XXXXXX, or NULL */
};

static void note(struct mrun *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct mrun *x, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	if (!x->ro->on_note)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	x->ro->on_note(x->ro->ctx, msg);
}

static const char *step_name(const struct mk_multi_step *s)
{
	return s->name ? s->name : "final";
}

static void step_opts(struct mrun *x, size_t i, struct mk_run_opts *o)
{
	const struct mk_multi_step *s = &x->m->steps[i];

	*o = *x->base;
	o->config = NULL;
	o->config_path = NULL;
	o->text = s->text;
	o->len = strlen(s->text);
	o->label = s->label;
	o->out_dir = s->out_dir;
	if (!x->ro->lazy)
		o->force = true;              /* --no-lazy: every merge again, over its output */
	if (x->base->max_memory && x->group[i] > 1)
		o->max_memory = x->base->max_memory / x->group[i];
}

static void pending_clear(struct pending *p)
{
	struct mk_err e = { 0 };

	mk_run_step_free(p->step);
	plan_view_clear(&p->view);
	if (p->desc)
		(void)mk_rmtree(p->desc, &e);
	free(p->desc);
	*p = (struct pending){ 0 };
}

/* The pending steps of the chain ending in `i`, its feeders first. */
static size_t chain_collect(struct mrun *x, size_t i, size_t *out, size_t n)
{
	const struct mk_multi_step *s = &x->m->steps[i];

	for (size_t q = 0; q < s->ndeps; q++)
		if (x->pd[s->deps[q]].live)
			n = chain_collect(x, s->deps[q], out, n);
	out[n++] = i;
	return n;
}

/* Run step i (planned as `step`, written to its OUT) with the chain of
 * pending steps streamed into it; they are done with after. */
static int chain_run(struct mrun *x, size_t i, struct mk_run_step *step, struct mk_err *err)
{
	size_t n = x->m->nsteps, *idx = calloc(n + 1, sizeof(*idx)), k, failed = 0;
	struct mk_run_step **v = calloc(n + 1, sizeof(*v));
	struct mk_run_link *links = calloc(n + 1, sizeof(*links));
	int rc = 0;

	if (!idx || !v || !links) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	k = chain_collect(x, i, idx, 0);
	for (size_t a = 0; a < k; a++) {
		v[a] = a + 1 < k ? x->pd[idx[a]].step : step;
		if (a + 1 < k) {
			size_t to = 0;
			while (idx[to] != x->user[idx[a]])
				to++;
			links[a] = (struct mk_run_link){ a, to, x->m->steps[idx[a]].out_dir };
		}
	}
	rc = mk_run_steps(v, k, links, k - 1, &failed, err);
	if (rc)
		mk_err_prefix(err, "merge '%s': ", step_name(&x->m->steps[idx[failed]]));
	for (size_t a = 0; a + 1 < k; a++)
		pending_clear(&x->pd[idx[a]]);
out:
	mk_run_step_free(step);
	free(idx);
	free(v);
	free(links);
	return rc;
}

static long model_of(const struct mk_manifest *h, const char *ref)
{
	for (size_t k = 0; k < h->nmodels; k++)
		if (!strcmp(h->models[k].ref, ref))
			return (long)k;
	return -1;
}

/* Plan step i (streamed: to no OUT), the pending steps it reads opened
 * from their descriptions. */
static int plan_step(struct mrun *x, size_t i, bool streamed, struct mk_run_opts *o, struct mk_run_step **step,
		     struct mk_diags *d, struct mk_err *err)
{
	const struct mk_multi_step *s = &x->m->steps[i];
	const char **refs = calloc(s->ndeps + 1, sizeof(*refs)), **dirs = calloc(s->ndeps + 1, sizeof(*dirs));
	size_t nf = 0;
	int rc;

	if (!refs || !dirs) {
		free(refs);
		free(dirs);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t q = 0; q < s->ndeps; q++) {
		const struct pending *p = &x->pd[s->deps[q]];
		if (p->live) {
			refs[nf] = x->m->steps[s->deps[q]].out_dir;
			dirs[nf++] = p->desc;
		}
	}
	step_opts(x, i, o);
	mk_diags_free(d);
	rc = mk_run_step_plan(o, streamed, refs, dirs, nf, step, d, err);
	free(refs);
	free(dirs);
	return rc ? mk_err_prefix(err, "merge '%s': ", step_name(s)) : 0;
}

/* Pending step f written to its OUT after all, now, with the chain
 * streamed into it. */
static int write_now(struct mrun *x, size_t f, struct mk_diags *d, struct mk_err *err)
{
	struct mk_run_step *step = NULL;
	int rc;

	pending_clear(&x->pd[f]);
	if (x->ro->on_step)
		x->ro->on_step(x->ro->ctx, &x->m->steps[f], f, MK_MULTI_MERGING);
	struct mk_run_opts o;
	if ((rc = plan_step(x, f, false, &o, &step, d, err)))
		return rc;
	return chain_run(x, f, step, err);
}

/* Step i: planned against the descriptions of the pending steps it
 * reads; one its plan cannot take as a stream is written now (with its
 * own chain) and i planned again.  Then i is pending itself (streamed),
 * or runs with its chain. */
static int step_make(struct mrun *x, size_t i, struct mk_diags *d, struct mk_err *err)
{
	const struct mk_multi_step *s = &x->m->steps[i];
	int rc;

	for (;;) {
		struct mk_run_step *step = NULL;
		struct plan_view view = { 0 };
		struct mk_run_opts o;
		char *desc = NULL;
		long bad = -1;

		if ((rc = plan_step(x, i, x->cand[i], &o, &step, d, err)))
			return rc;
		if (x->cand[i] && asprintf(&desc, "%s/%s", x->scratch, s->name) < 0) {
			mk_run_step_free(step);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		if ((rc = plan_read(mk_run_step_plan_of(step), desc, &view, err))) {
			mk_run_step_free(step);
			free(desc);
			return mk_err_prefix(err, "merge '%s': its plan: ", step_name(s));
		}
		for (size_t q = 0; q < s->ndeps && bad < 0; q++) {
			size_t f = s->deps[q];
			struct mk_err why = { 0 };
			if (!x->pd[f].live)
				continue;
			long mi = model_of(view.head, x->m->steps[f].out_dir);
			if (mi >= 0 && !mk_fetch_feed_check(x->pd[f].view.head, x->pd[f].view.rank, (size_t)mi, view.jobs,
							    view.njobs, &why))
				continue;
			if (why.code == MK_ENOMEM) {
				mk_run_step_free(step);
				plan_view_clear(&view);
				free(desc);
				return mk_err_set(err, MK_ENOMEM, "%s", why.msg);
			}
			note(x, "'%s' is written to %s, not streamed into '%s': %s", x->m->steps[f].name,
			     x->m->steps[f].out_dir, step_name(s), mi < 0 ? "it is not one of its models" : why.msg);
			bad = (long)f;
		}
		if (bad < 0 && x->cand[i]) {
			x->pd[i] = (struct pending){ .step = step, .view = view, .desc = desc, .live = true };
			return 0;
		}
		plan_view_clear(&view);
		if (bad < 0)
			return chain_run(x, i, step, err);
		mk_run_step_free(step);
		if (desc) {
			struct mk_err e = { 0 };
			(void)mk_rmtree(desc, &e);
			free(desc);
		}
		if ((rc = write_now(x, (size_t)bad, d, err)))
			return rc;
	}
}

static int run_one_by_one(const struct mk_multi *m, const struct mk_run_opts *base,
			  const struct mk_multi_run_opts *ro, struct mk_diags *d, struct mk_err *err)
{
	for (size_t i = 0; i < m->nsteps; i++) {
		const struct mk_multi_step *s = &m->steps[i];
		bool skip = ro->lazy && mk_multi_done(s->out_dir);
		if (ro->on_step)
			ro->on_step(ro->ctx, s, i, skip ? MK_MULTI_SKIPPED : MK_MULTI_MERGING);
		if (skip)
			continue;
		struct mk_run_opts o = *base;
		o.config = NULL;
		o.config_path = NULL;
		o.text = s->text;
		o.len = strlen(s->text);
		o.label = s->label;
		o.out_dir = s->out_dir;
		if (!ro->lazy)
			o.force = true;           /* --no-lazy: every merge again, over its output */
		mk_diags_free(d);
		int rc = mk_run_merge(&o, d, err);
		if (rc)
			return mk_err_prefix(err, "merge '%s': ", step_name(s));
	}
	return 0;
}

int mk_multi_run(const struct mk_multi *m, const struct mk_run_opts *base, const struct mk_multi_run_opts *ro,
		 struct mk_diags *d, struct mk_err *err)
{
	size_t n = m->nsteps;
	struct mrun x = { .m = m, .base = base, .ro = ro };
	bool any = false;
	int rc = 0;

	memset(d, 0, sizeof(*d));
	if (!ro->stream)
		return run_one_by_one(m, base, ro, d, err);
	x.done = calloc(n + 1, sizeof(*x.done));
	x.cand = calloc(n + 1, sizeof(*x.cand));
	x.user = calloc(n + 1, sizeof(*x.user));
	x.group = calloc(n + 1, sizeof(*x.group));
	x.pd = calloc(n + 1, sizeof(*x.pd));
	if (!x.done || !x.cand || !x.user || !x.group || !x.pd) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		x.done[i] = ro->lazy && mk_multi_done(m->steps[i].out_dir);
	if (!(x.unneeded = calloc(n + 1, sizeof(*x.unneeded)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (ro->lazy)
		mk_multi_unneeded(m, x.done, x.unneeded);
	for (size_t i = 0; i < n; i++)
		x.done[i] |= x.unneeded[i];
	mk_multi_stream_plan(m, ro->lazy, x.done, x.cand, x.user, x.group);
	for (size_t i = 0; i < n; i++) {
		any |= x.cand[i];
		if (m->steps[i].name && !x.cand[i] && !x.done[i] && !x.unneeded[i])
			note(&x, "'%s' is written to %s: %s", m->steps[i].name, m->steps[i].out_dir,
			     m->steps[i].nusers != 1 ? (m->steps[i].nusers ? "more than one merge reads it" : "no merge reads it") :
			     !m->steps[i].plain_refs ? "a reference to it has a revision, an adapter or an architecture" :
			     "the merge that reads it is skipped (--lazy)");
	}
	if (any) {
		if (asprintf(&x.scratch, "%s/mk-multi-XXXXXX", mk_tmpdir()) < 0) {
			x.scratch = NULL;
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		if (!mkdtemp(x.scratch)) {
			rc = mk_err_sys(err, errno, "%s (the descriptions of streamed merges)", x.scratch);
			goto out;
		}
	}
	for (size_t i = 0; i < n && !rc; i++) {
		const struct mk_multi_step *s = &m->steps[i];
		if (ro->on_step)
			ro->on_step(ro->ctx, s, i, x.unneeded[i] ? MK_MULTI_NOT_NEEDED : x.done[i] ? MK_MULTI_SKIPPED :
				    x.cand[i] ? MK_MULTI_STREAMING : MK_MULTI_MERGING);
		if (!x.done[i])
			rc = step_make(&x, i, d, err);
	}
out:
	for (size_t i = 0; x.pd && i < n; i++)
		if (x.pd[i].live)
			pending_clear(&x.pd[i]);
	if (x.scratch) {
		struct mk_err e = { 0 };
		(void)mk_rmtree(x.scratch, &e);
		free(x.scratch);
	}
	free(x.done);
	free(x.unneeded);
	free(x.cand);
	free(x.user);
	free(x.group);
	free(x.pd);
	return rc;
}
