/* threads.c - a whole merge in one process: the stages' library calls on
 * threads joined by in-memory channels (run.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "core/budget.h"
#include "card/card.h"
#include "mk/chan.h"
#include "cuda/cuda.h"
#include "fetch/fetch.h"
#include "core/fsutil.h"
#include "core/mapguard.h"
#include "merge/merge.h"
#include "journal/outlock.h"
#include "pack/pack.h"
#include "planner/planner.h"
#include "mk/run.h"
#include "run/state_dicts.h"
#include "run/steps.h"

size_t mk_run_opts_size(void)
{
	return sizeof(struct mk_run_opts);
}

unsigned mk_merge_default_threads(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	return ncpu < 1 ? 1 : ncpu > 8 ? 8 : (unsigned)ncpu;
}

/* The plan options a run's options make (the text is the caller's). */
static void plan_opts(const struct mk_run_opts *o, const struct mk_budget_split *bs, const char *text,
		      size_t len, struct mk_plan_opts *po)
{
	*po = (struct mk_plan_opts){
		.label = o->config && o->config->label ? o->config->label : o->label ? o->label :
			 o->config_path ? o->config_path : "config",
		.text = text, .len = len,
		.out_name = o->out_dir ? mk_card_title(o->out_dir) : NULL,
		.allow_crimes = o->allow_crimes,
		.copy_tokenizer = !o->no_copy_tokenizer,
		.write_card = !o->no_model_card,
		.seed = o->seed,
		.budget = o->max_memory ? bs->merge : 0,
		.spill = o->spill_dir != NULL,
		.has_lora_dtype = o->has_lora_dtype,
		.lora_dtype = o->lora_dtype,
		.unsafe_truncate_embeddings = o->unsafe_truncate_embeddings,
	};
}

static int read_config(const struct mk_run_opts *o, uint8_t **owned, const char **text, size_t *len,
		       struct mk_err *err)
{
	*owned = NULL;
	if (o->config) {
		*text = o->config->text;
		*len = strlen(o->config->text);
		return 0;
	}
	if (o->text) {
		*text = o->text;
		*len = o->len;
		return 0;
	}
	if (!o->config_path)
		return mk_err_set(err, MK_EINVAL, "no configuration given (text or a file)");
	const char *label;
	int rc = mk_config_read(o->config_path, owned, len, &label, err);
	*text = (const char *)*owned;
	return rc;
}

int mk_validate_config(const struct mk_run_opts *o, struct mk_diags *d, struct mk_err *err)
{
	struct mk_budget_split bs = { 0 };
	struct mk_plan_opts po;
	struct mk_plan *p = NULL;
	uint8_t *owned;
	const char *text = NULL;
	size_t len = 0;
	int rc = read_config(o, &owned, &text, &len, err);

	if (rc)
		return rc;
	if (o->max_memory)
		mk_budget_split(o->max_memory, &bs);
	plan_opts(o, &bs, text, len, &po);
	rc = mk_plan_build(&po, &p, d, err);
	if (rc && d->nerrors)
		mk_err_set(err, MK_EINVAL, "%s: %zu error%s in the configuration", po.label, d->nerrors,
			   d->nerrors == 1 ? "" : "s");
	mk_plan_free(p);
	free(owned);
	return rc;
}

/* ---- the stages ---- */

enum { S_WRITE, S_FETCH, S_MERGE, S_PACK, NSTAGES };
static const char *const stage_name[NSTAGES] = { "mk-plan", "mk-fetch", "mk-merge", "mk-pack" };

/* The merges run together (one, or mk_run_steps' steps): their stages
 * wake the one thread that waits for them (wait_all), and count their
 * failures in one order.  Each group has its own lock and condition, so
 * runs in other threads of the process never wake it. */
struct run_group {
	pthread_mutex_t mu;
	pthread_cond_t cv;             /* a stage ended (CLOCK_MONOTONIC) */
	uint64_t clock;                /* failures so far, in order */
};

static void group_init(struct run_group *g)
{
	pthread_condattr_t a;

	pthread_mutex_init(&g->mu, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&g->cv, &a);
	pthread_condattr_destroy(&a);
	g->clock = 0;
}

static void group_destroy(struct run_group *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
}

struct run {
	const struct mk_run_opts *o;
	struct mk_run_opts own;        /* (a step's copy of its options) */
	struct mk_plan *plan;
	struct mk_fetch_opts fo;
	struct mk_merge_opts mo;
	struct mk_pack_opts pko;
	struct mk_budget_split bs;
	struct mk_cuda_ctx *cx;
	uint8_t *owned;
	char *partial;
	struct mk_out_lock lock;       /* OUT's, for the whole run (outlock.h) */
	bool streamed;                 /* no mk-pack: the merge's output goes
					  to another merge's fetch (out) */
	struct mk_chan *out;           /* (that channel, the runner's) */
	struct mk_chan **feeds;        /* the channels its fetch reads models from */
	size_t nfeeds;
	struct mk_chan *ch[NSTAGES - 1]; /* stage i writes ch[i], i+1 reads it */
	struct mk_chan_skip *skip;     /* the passes the merge stage will not read */
	pthread_t th[NSTAGES];
	bool started[NSTAGES];
	int rc[NSTAGES];
	struct mk_err err[NSTAGES];
	pthread_mutex_t mu;
	bool mu_live;
	int finished;
	volatile int cancelled;        /* a cancel was acted on */
	unsigned long faults0;         /* mk_mapguard_faults() at the start */
	int first_fail;                /* the stage that failed first, or -1:
					  the others then failed for want of
					  its stream (an end, EPIPE) */
	uint64_t fail_seq;             /* when it failed, in its group's count */
	struct run_group *grp;         /* shared by merges run together */
};

/* Stop every stream: each stage sees an end (a reader) or EPIPE (a
 * writer) and stops. */
static void shut_all(struct run *r)
{
	for (int k = 0; k < NSTAGES - 1; k++)
		if (r->ch[k])
			mk_chan_close_read(r->ch[k]);
	if (r->out)
		mk_chan_close_read(r->out);
	for (size_t k = 0; k < r->nfeeds; k++)
		mk_chan_close_read(r->feeds[k]);
}

/* Stages that end wake their group's wait_all.  Under the group's lock,
 * so that a waiter that has just found its runs unfinished is waiting
 * before the signal comes. */
static void stage_done_signal(struct run *r)
{
	pthread_mutex_lock(&r->grp->mu);
	pthread_cond_broadcast(&r->grp->cv);
	pthread_mutex_unlock(&r->grp->mu);
}

/* A stage ends: its ends of the streams are shut, so its neighbours see
 * an end (a reader) or EPIPE (a writer) instead of waiting. */
static void stage_end(struct run *r, int i)
{
	if (i > 0)
		mk_chan_close_read(r->ch[i - 1]);
	if (i == S_FETCH)
		for (size_t k = 0; k < r->nfeeds; k++)
			mk_chan_close_read(r->feeds[k]);
	if (i == S_MERGE && r->streamed)
		mk_chan_close_write(r->out);
	else if (i < NSTAGES - 1)
		mk_chan_close_write(r->ch[i]);
	pthread_mutex_lock(&r->mu);
	r->finished++;
	pthread_mutex_unlock(&r->mu);
	stage_done_signal(r);
}

struct stage_arg {
	struct run *r;
	int i;
};

/* A stage's warning, passed on (one at a time: the stages' threads) */
static void stage_warn(void *ctx, const char *msg)
{
	struct run *r = ctx;

	pthread_mutex_lock(&r->mu);
	r->o->warn(r->o->warn_ctx, msg);
	pthread_mutex_unlock(&r->mu);
}

static void pack_progress(void *ctx, uint64_t done, uint64_t total, size_t tensors_done, size_t ntensors);

static void *stage_main(void *p)
{
	struct stage_arg *a = p;
	struct run *r = a->r;
	int i = a->i;
	sigset_t set;

	if (i < 0 || i >= NSTAGES)
		return NULL;
	/* a write to a stage that stopped: EPIPE here, not a signal */
	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	switch (i) {
	case S_WRITE:
		r->rc[i] = mk_plan_write(r->plan, mk_io_chan(r->ch[0]), 0, &r->err[i]);
		break;
	case S_FETCH: {
		struct mk_fetch_stats st;
		r->rc[i] = mk_fetch_plan(&r->fo, mk_io_chan(r->ch[0]), "plan", mk_io_chan(r->ch[1]), &st, &r->err[i]);
		if (!r->rc[i] && r->o->stats)
			__atomic_add_fetch(&r->o->stats->chunks_unsent, st.chunks_unsent, __ATOMIC_RELAXED);
		break;
	}
	case S_MERGE: {
		struct mk_merge_stats st;
		r->rc[i] = mk_merge_run(&r->mo, mk_io_chan(r->ch[1]), "inputs", mk_io_chan(r->streamed ? r->out : r->ch[2]), &st,
					&r->err[i]);
		if (!r->rc[i] && r->o->stats) {
			__atomic_add_fetch(&r->o->stats->passes_skipped, st.passes_skipped, __ATOMIC_RELAXED);
			__atomic_add_fetch(&r->o->stats->passes_added, st.passes_added, __ATOMIC_RELAXED);
		}
		break;
	}
	case S_PACK: {
		struct mk_pack_stats st;
		if (r->o->sink) {
			struct mk_pack_memory_opts mo = { .sink = r->o->sink, .sink_ctx = r->o->sink_ctx,
							  .budget = r->o->max_memory, .progress = pack_progress,
							  .progress_ctx = r };
			r->rc[i] = mk_pack_to_memory(&mo, mk_io_chan(r->ch[2]), "tensors", &r->err[i]);
			break;
		}
		r->rc[i] = mk_pack_run(&r->pko, mk_io_chan(r->ch[2]), "tensors", &st, &r->err[i]);
		if (!r->rc[i] && st.warning[0] && r->o->warn)
			stage_warn(r, st.warning);
		break;
	}
	}
	pthread_mutex_lock(&r->mu);
	if (r->rc[i] && r->first_fail < 0) {
		r->first_fail = i;
		r->fail_seq = __atomic_add_fetch(&r->grp->clock, 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&r->mu);
	stage_end(r, i);
	return NULL;
}

static void pack_progress(void *ctx, uint64_t done, uint64_t total, size_t tensors_done, size_t ntensors)
{
	struct run *r = ctx;
	const struct mk_run_opts *o = r->o;

	if (o->progress)
		o->progress(o->progress_ctx, done, total, tensors_done, ntensors);
	/* a cancel seen here stops mk-pack before its next frame (what is
	 * left of its stream reads as an end), whatever the waiting thread
	 * has seen yet */
	if (o->cancel && *o->cancel) {
		__atomic_store_n(&r->cancelled, 1, __ATOMIC_SEQ_CST);
		if (o->keep_partial_on_cancel)
			r->pko.keep_partial = true;
		mk_chan_close_read(r->ch[S_PACK - 1]);
	}
}

static void run_init(struct run *r, const struct mk_run_opts *o, struct run_group *grp)
{
	*r = (struct run){ .o = o, .first_fail = -1, .grp = grp, .faults0 = mk_mapguard_faults() };
	pthread_mutex_init(&r->mu, NULL);
	r->mu_live = true;
}

static void run_clear(struct run *r)
{
	for (int i = 0; i < NSTAGES - 1; i++)
		mk_chan_free(r->ch[i]);
	mk_chan_skip_free(r->skip);
	if (r->cx)
		mk_cuda_close(r->cx);
	if (r->mu_live)
		pthread_mutex_destroy(&r->mu);
	mk_plan_free(r->plan);
	free(r->feeds);
	free(r->partial);
	free(r->owned);
	mk_out_unlock(&r->lock);
}

/* Plan the merge and set its stages' options.  raw: mk-pytorch's plan
 * of state dicts (mk_plan_opts.raw); streamed: no OUT (its output goes
 * to another merge); the aliases as mk_plan_opts has them. */
static int run_plan(struct run *r, bool raw, enum mk_raw_missing missing, bool streamed,
		    const char *const *alias_refs, const char *const *alias_dirs, size_t naliases,
		    struct mk_diags *d, struct mk_err *err)
{
	const struct mk_run_opts *o = r->o;
	struct mk_plan_opts po;
	const char *text = NULL;
	size_t len = 0;
	int rc;

	r->streamed = streamed;
	if (o->sink && (o->out_dir || o->resume || streamed))
		return mk_err_set(err, MK_EINVAL, "a merge into memory (a sink) writes no output directory: give no out_dir and no resume");
	if (!o->sink && (!o->out_dir || !o->out_dir[0]))
		return mk_err_set(err, MK_EINVAL, "no output directory given");
	enum mk_requant quantize = MK_REQUANT_NONE;
	if (o->quantize && mk_requant_parse(o->quantize, &quantize))
		return mk_err_set(err, MK_EINVAL, "quantize: expected \"fp8\" or \"mxfp4\", not \"%s\"", o->quantize);
	if (o->quantize && o->sink)
		return mk_err_set(err, MK_EINVAL, "quantize: a merge into memory (a sink) is given floats; give no quantize");
	/* OUT refused before any work, as mk-pack would */
	r->pko = (struct mk_pack_opts){ .out_dir = o->out_dir, .force = o->force, .resume = o->resume, .resumable = true,
					.keep_partial = o->resume, .buffered = o->buffered, .quantize = quantize,
					.shard_size = o->out_shard_size ? o->out_shard_size : MK_PACK_DEFAULT_SHARD,
					.progress = pack_progress, .progress_ctx = r };
	if (!streamed && !o->sink &&
	    ((rc = mk_out_lock(o->out_dir, &r->lock, err)) || (rc = mk_pack_check_out(&r->pko, &r->lock, err))))
		return rc;
	if ((rc = read_config(o, &r->owned, &text, &len, err)))
		return rc;
	if (o->max_memory)
		mk_budget_split(o->max_memory, &r->bs);
	plan_opts(o, &r->bs, text, len, &po);
	/* the stages share this process: a pass nobody reads costs little,
	 * unless its bytes come over HTTP (--remote) */
	po.spare_pass = !o->remote;
	po.raw = raw;
	po.raw_missing = missing;
	po.alias_refs = alias_refs;
	po.alias_dirs = alias_dirs;
	po.naliases = naliases;
	rc = mk_plan_build(&po, &r->plan, d, err);
	if (rc) {
		if (d->nerrors)
			mk_err_set(err, MK_EINVAL, "%s: %zu error%s in the configuration", po.label, d->nerrors,
				   d->nerrors == 1 ? "" : "s");
		return rc;
	}
	/* the other stages' options, as mk-yaml gives the programs them */
	r->fo = (struct mk_fetch_opts){ .remote = o->remote, .no_cache = o->no_cache };
	r->mo = (struct mk_merge_opts){ .threads = o->threads ? o->threads : mk_merge_default_threads(),
					.spill_dir = o->spill_dir, .strict = o->strict,
					.warn = o->warn ? stage_warn : NULL, .warn_ctx = r };
	/* the fetch stage sends no more of a pass the merge stage will not
	 * read (a selection whose windows held their cuts: the spare pass,
	 * the rest of the last digit pass, the cut pass) */
	if ((rc = mk_chan_skip_new(&r->skip, err)))
		return rc;
	r->fo.skip = r->skip;
	r->mo.skip = r->skip;
	if (o->max_memory) {
		mk_budget_fetch_apply(r->bs.fetch, &r->fo.chunk_bytes, &r->fo.qdepth, &r->fo.hold_bytes);
		r->mo.budget = r->bs.merge;
		r->pko.budget = r->bs.pack;
	}
	if (o->resume) {
		size_t ol = strlen(o->out_dir);
		while (ol > 1 && o->out_dir[ol - 1] == '/')
			ol--;
		if (asprintf(&r->partial, "%.*s.mk-partial", (int)ol, o->out_dir) < 0) {
			r->partial = NULL;
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		r->fo.skip_done = r->partial;
	}
	if (o->cuda) {
		struct mk_cuda_opts co = { .emulate = mk_cuda_emulate_requested() };
		struct mk_err cerr = { 0 };
		if (mk_cuda_open(&r->cx, &co, &cerr) == 0) {
			r->mo.cuda = r->cx;
		} else if (o->strict) {
			return mk_err_set(err, MK_EUNSUPPORTED, "cuda: %s; no GPU to merge on (strict)", cerr.msg);
		} else if (o->warn) {        /* on the CPU, as mk-merge --cuda */
			char msg[MK_ERR_MSG_MAX + 64];
			snprintf(msg, sizeof(msg), "cuda: %s; merging on the CPU", cerr.msg);
			o->warn(o->warn_ctx, msg);
		}
	}
	/* the queues between the stages, in the budget (mk_budget_split) */
	if (!o->max_memory)
		mk_budget_split(0, &r->bs);
	return 0;
}

static int run_nstages(const struct run *r)
{
	return r->streamed ? S_PACK : NSTAGES;
}

/* Open the queues and start the stages (args: NSTAGES of them, the
 * caller's until the stages are joined). */
static int run_start(struct run *r, struct stage_arg *args, struct mk_err *err)
{
	int rc;

	for (int i = 0; i < run_nstages(r) - 1; i++)
		if ((rc = mk_chan_open(&r->ch[i], r->bs.queue, err)))
			return rc;
	for (int i = 0; i < run_nstages(r); i++) {
		args[i] = (struct stage_arg){ r, i };
		if (pthread_create(&r->th[i], NULL, stage_main, &args[i])) {
			shut_all(r);
			return mk_err_set(err, MK_ENOMEM, "cannot start the %s thread", stage_name[i]);
		}
		r->started[i] = true;
	}
	return 0;
}

/* Whether every started stage has returned. */
static bool run_finished(struct run *r)
{
	int nstarted = 0;

	pthread_mutex_lock(&r->mu);
	int fin = r->finished;
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < NSTAGES; i++)
		nstarted += r->started[i];
	return fin >= nstarted;
}

/* A cancel: every stream shut, and each stage stops. */
static void run_cancel(struct run *r)
{
	const struct mk_run_opts *o = r->o;

	if (__atomic_load_n(&r->cancelled, __ATOMIC_SEQ_CST))
		return;
	__atomic_store_n(&r->cancelled, 1, __ATOMIC_SEQ_CST);
	/* set before the streams stop: mk-pack reads it after its input
	 * ends (the channel's lock orders the two) */
	if (o->keep_partial_on_cancel)
		r->pko.keep_partial = true;
	shut_all(r);
}

static void run_join(struct run *r)
{
	for (int i = 0; i < NSTAGES; i++)
		if (r->started[i])
			pthread_join(r->th[i], NULL);
}

/* The merge's outcome once joined. */
static int run_result(struct run *r, struct mk_err *err)
{
	const struct mk_run_opts *o = r->o;

	/* a cancel that came after every stage had done its part (mk-pack
	 * past the stream's end, renaming OUT into place) undoes nothing:
	 * the merge succeeded */
	if (r->cancelled && r->first_fail >= 0)
		return mk_err_set(err, MK_EIO, "cancelled%s", o->resume || o->keep_partial_on_cancel ? " (OUT.mk-partial is kept for --resume)" : "");
	if (r->first_fail >= 0) {
		/* a model file truncated under a map of it: the stages fail on
		 * the zeros read in its place, each its own way; the cause is
		 * the truncation (core/mapguard.h) */
		if (mk_mapguard_check(r->faults0, err) < 0)
			return -MK_ECORRUPT;
		*err = r->err[r->first_fail];
		return mk_err_prefix(err, "%s: ", stage_name[r->first_fail]);
	}
	return 0;
}

static void wait_all(struct run_group *g, struct run *const *v, size_t n)
{
	pthread_mutex_lock(&g->mu);
	for (;;) {
		bool all = true;
		for (size_t k = 0; k < n; k++)
			all &= run_finished(v[k]);
		if (all)
			break;
		for (size_t k = 0; k < n; k++)
			if (v[k]->o->cancel && *v[k]->o->cancel)
				run_cancel(v[k]);
		/* woken as a stage ends; the cancel flag looked at every 20 ms
		 * (a sleep of 20 ms instead cost the runs 10 ms at the end on
		 * average) */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 20 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&g->cv, &g->mu, &ts);
	}
	pthread_mutex_unlock(&g->mu);
	for (size_t k = 0; k < n; k++)
		run_join(v[k]);
}

static int run_merge(const struct mk_run_opts *o, bool raw, enum mk_raw_missing missing, struct mk_diags *d,
		     struct mk_err *err)
{
	struct run r, *rp = &r;
	struct stage_arg args[NSTAGES];
	struct run_group g;
	int rc;

	group_init(&g);
	run_init(&r, o, &g);
	rc = run_plan(&r, raw, missing, false, NULL, NULL, 0, d, err);
	if (!rc) {
		rc = run_start(&r, args, err);
		wait_all(&g, &rp, 1);
		if (!rc)
			rc = run_result(&r, err);
	}
	run_clear(&r);
	group_destroy(&g);
	return rc;
}

int mk_run_merge(const struct mk_run_opts *o, struct mk_diags *d, struct mk_err *err)
{
	return run_merge(o, false, MK_RAW_MISSING_ERROR, d, err);
}

int mk_run_state_dicts(const struct mk_run_opts *o, enum mk_raw_missing missing, struct mk_diags *d,
		       struct mk_err *err)
{
	return run_merge(o, true, missing, d, err);
}

/* ---- merges streamed into merges ---- */

struct mk_run_step {
	struct run r;
	struct run_group grp;          /* (the step's own until run together) */
};

int mk_run_step_plan(const struct mk_run_opts *o, bool streamed, const char *const *alias_refs,
		     const char *const *alias_dirs, size_t naliases, struct mk_run_step **out, struct mk_diags *d,
		     struct mk_err *err)
{
	struct mk_run_step *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (streamed && o->resume) {
		free(s);  /* a streamed merge writes no OUT: nothing to resume */
		return mk_err_set(err, MK_EINVAL, "%s: a merge streamed into another cannot be resumed", o->out_dir);
	}
	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	group_init(&s->grp);
	run_init(&s->r, o, &s->grp);
	s->r.own = *o;
	s->r.o = &s->r.own;
	rc = run_plan(&s->r, false, MK_RAW_MISSING_ERROR, streamed, alias_refs, alias_dirs, naliases, d, err);
	if (rc) {
		mk_run_step_free(s);
		return rc;
	}
	*out = s;
	return 0;
}

const struct mk_plan *mk_run_step_plan_of(const struct mk_run_step *s)
{
	return s->r.plan;
}

void mk_run_step_free(struct mk_run_step *s)
{
	if (!s)
		return;
	run_clear(&s->r);
	group_destroy(&s->grp);
	free(s);
}

int mk_run_steps(struct mk_run_step *const *steps, size_t n, const struct mk_run_link *links, size_t nlinks,
		 size_t *failed, struct mk_err *err)
{
	struct mk_chan **ch = calloc(nlinks + 1, sizeof(*ch));
	const char **refs = calloc(n * (nlinks + 1) + 1, sizeof(*refs));
	struct mk_io *feeds = calloc(n * (nlinks + 1) + 1, sizeof(*feeds));
	struct stage_arg *args = calloc(n * NSTAGES + 1, sizeof(*args));
	struct run **v = calloc(n + 1, sizeof(*v));
	struct run_group g;
	size_t nrun = 0;
	int rc = 0;

	*failed = 0;
	group_init(&g);
	if (!ch || !refs || !feeds || !args || !v) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < n; k++) {
		v[k] = &steps[k]->r;
		v[k]->grp = &g;
	}
	/* each link a channel: its producer's merge writes it, its
	 * consumer's fetch reads it as the model `ref` */
	for (size_t l = 0; l < nlinks && !rc; l++) {
		struct run *from = v[links[l].from], *to = v[links[l].to];
		struct mk_chan **q = realloc(to->feeds, (to->nfeeds + 1) * sizeof(*q));
		if (!from->streamed || from->out || !q) {
			if (q)
				to->feeds = q;
			rc = q ? mk_err_set(err, MK_EINVAL, "step %zu: not planned as streamed, or streamed twice",
					    links[l].from) : mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		to->feeds = q;
		if ((rc = mk_chan_open(&ch[l], from->bs.queue, err)))
			break;
		from->out = ch[l];
		to->feeds[to->nfeeds++] = ch[l];
	}
	for (size_t k = 0; k < n && !rc; k++) {
		struct run *r = v[k];
		size_t nf = 0;
		if (r->streamed && !r->out) {
			rc = mk_err_set(err, MK_EINVAL, "step %zu is streamed into none", k);
			break;
		}
		for (size_t l = 0; l < nlinks; l++)
			if (links[l].to == k) {
				refs[k * (nlinks + 1) + nf] = links[l].ref;
				feeds[k * (nlinks + 1) + nf++] = mk_io_chan(ch[l]);
			}
		r->fo.feed_refs = &refs[k * (nlinks + 1)];
		r->fo.feeds = &feeds[k * (nlinks + 1)];
		r->fo.nfeeds = nf;
	}
	for (size_t k = 0; k < n && !rc; k++) {
		rc = run_start(v[k], &args[k * NSTAGES], err);
		nrun = k + 1;
	}
	if (rc)
		for (size_t k = 0; k < nrun; k++)
			shut_all(v[k]);
	wait_all(&g, v, nrun);
	if (!rc) {
		/* the step that failed first; the others failed for want of
		 * its stream */
		long first = -1;
		for (size_t k = 0; k < n; k++)
			if (v[k]->first_fail >= 0 && (first < 0 || v[k]->fail_seq < v[first]->fail_seq))
				first = (long)k;
		for (size_t k = 0; k < n && first < 0; k++)
			if (v[k]->cancelled)
				first = (long)k;
		if (first >= 0) {
			*failed = (size_t)first;
			rc = run_result(v[first], err);
		}
	}
out:
	for (size_t k = 0; k < n; k++) {
		struct run *r = &steps[k]->r;
		r->out = NULL;
		free(r->feeds);
		r->feeds = NULL;
		r->nfeeds = 0;
		r->fo.nfeeds = 0;
		r->grp = &steps[k]->grp;
	}
	for (size_t l = 0; ch && l < nlinks; l++)
		mk_chan_free(ch[l]);
	free(ch);
	free(refs);
	free(feeds);
	free(args);
	free(v);
	group_destroy(&g);
	return rc;
}
