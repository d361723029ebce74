/* run.c - a whole merge in one process: the stages' library calls on
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
#include "mk/budget.h"
#include "mk/card.h"
#include "mk/chan.h"
#include "mk/cuda.h"
#include "mk/fetch.h"
#include "mk/fsutil.h"
#include "mk/merge.h"
#include "mk/pack.h"
#include "mk/planner.h"
#include "mk/run.h"

#define CONFIG_MAX (64u << 20)

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
	int rc = mk_file_read(o->config_path, CONFIG_MAX, owned, len, err);
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

struct run {
	const struct mk_run_opts *o;
	struct mk_plan *plan;
	struct mk_fetch_opts fo;
	struct mk_merge_opts mo;
	struct mk_pack_opts pko;
	struct mk_chan *ch[NSTAGES - 1]; /* stage i writes ch[i], i+1 reads it */
	int fd[NSTAGES - 1][2];      /* their ends: [i][0] written, [i][1] read */
	pthread_t th[NSTAGES];
	bool started[NSTAGES];
	int rc[NSTAGES];
	struct mk_err err[NSTAGES];
	volatile int done;             /* the stages have all returned */
	pthread_mutex_t mu;
	int finished;
	volatile int cancelled;        /* a cancel was acted on */
	int first_fail;                /* the stage that failed first, or -1:
					  the others then failed for want of
					  its stream (an end, EPIPE) */
};

/* Stop every stream: each stage sees an end (a reader) or EPIPE (a
 * writer) and stops. */
static void shut_all(struct run *r)
{
	for (int k = 0; k < NSTAGES - 1; k++)
		if (r->ch[k])
			mk_chan_close_read(r->ch[k]);
}

/* A stage ends: its ends of the streams are shut, so its neighbours see
 * an end (a reader) or EPIPE (a writer) instead of waiting. */
static void stage_end(struct run *r, int i)
{
	if (i > 0)
		mk_chan_close_read(r->ch[i - 1]);
	if (i < NSTAGES - 1)
		mk_chan_close_write(r->ch[i]);
	pthread_mutex_lock(&r->mu);
	r->finished++;
	pthread_mutex_unlock(&r->mu);
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
		r->rc[i] = mk_plan_write(r->plan, r->fd[0][0], 0, &r->err[i]);
		break;
	case S_FETCH: {
		struct mk_fetch_stats st;
		r->rc[i] = mk_fetch_plan(&r->fo, r->fd[0][1], "plan", r->fd[1][0], &st, &r->err[i]);
		break;
	}
	case S_MERGE: {
		struct mk_merge_stats st;
		r->rc[i] = mk_merge_run(&r->mo, r->fd[1][1], "inputs", r->fd[2][0], &st, &r->err[i]);
		break;
	}
	case S_PACK: {
		struct mk_pack_stats st;
		r->rc[i] = mk_pack_run(&r->pko, r->fd[2][1], "tensors", &st, &r->err[i]);
		if (!r->rc[i] && st.warning[0] && r->o->warn)
			stage_warn(r, st.warning);
		break;
	}
	}
	pthread_mutex_lock(&r->mu);
	if (r->rc[i] && r->first_fail < 0)
		r->first_fail = i;
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

/* raw: mk-pytorch's plan of state dicts (mk_plan_opts.raw) */
static int run_merge(const struct mk_run_opts *o, bool raw, enum mk_raw_missing missing, struct mk_diags *d,
		     struct mk_err *err)
{
	struct run r = { .o = o, .first_fail = -1 };
	struct stage_arg args[NSTAGES];
	struct mk_budget_split bs = { 0 };
	struct mk_plan_opts po;
	struct mk_cuda_ctx *cx = NULL;
	uint8_t *owned = NULL;
	char *partial = NULL;
	const char *text = NULL;
	size_t len = 0;
	int rc;

	pthread_mutex_init(&r.mu, NULL);
	if (!o->out_dir || !o->out_dir[0]) {
		rc = mk_err_set(err, MK_EINVAL, "no output directory given");
		goto out;
	}
	/* OUT refused before any work, as mk-pack would */
	r.pko = (struct mk_pack_opts){ .out_dir = o->out_dir, .force = o->force, .resume = o->resume,
				       .keep_partial = o->resume,
				       .shard_size = o->out_shard_size ? o->out_shard_size : MK_PACK_DEFAULT_SHARD,
				       .progress = pack_progress, .progress_ctx = &r };
	if ((rc = mk_pack_check_out(&r.pko, err)))
		goto out;
	if ((rc = read_config(o, &owned, &text, &len, err)))
		goto out;
	if (o->max_memory)
		mk_budget_split(o->max_memory, &bs);
	plan_opts(o, &bs, text, len, &po);
	po.raw = raw;
	po.raw_missing = missing;
	rc = mk_plan_build(&po, &r.plan, d, err);
	if (rc) {
		if (d->nerrors)
			mk_err_set(err, MK_EINVAL, "%s: %zu error%s in the configuration", po.label, d->nerrors,
				   d->nerrors == 1 ? "" : "s");
		goto out;
	}
	/* the other stages' options, as mk-yaml gives the programs them */
	r.fo = (struct mk_fetch_opts){ .remote = o->remote, .no_cache = o->no_cache };
	r.mo = (struct mk_merge_opts){ .threads = o->threads ? o->threads : mk_merge_default_threads(),
				       .spill_dir = o->spill_dir, .strict = o->strict,
				       .warn = o->warn ? stage_warn : NULL, .warn_ctx = &r };
	if (o->max_memory) {
		mk_budget_fetch_fit(bs.fetch, &r.fo.chunk_bytes, &r.fo.qdepth);
		r.fo.hold_bytes = bs.fetch / 4;
		r.mo.budget = bs.merge;
		r.pko.budget = bs.pack;
	}
	if (o->resume) {
		size_t ol = strlen(o->out_dir);
		while (ol > 1 && o->out_dir[ol - 1] == '/')
			ol--;
		if (asprintf(&partial, "%.*s.mk-partial", (int)ol, o->out_dir) < 0) {
			partial = NULL;
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		r.fo.skip_done = partial;
	}
	if (o->cuda) {
		struct mk_cuda_opts co = { .emulate = mk_cuda_emulate_requested() };
		struct mk_err cerr = { 0 };
		if (mk_cuda_open(&cx, &co, &cerr) == 0)
			r.mo.cuda = cx;       /* else: on the CPU, as mk-merge --cuda */
	}
	/* the queues between the stages, in the budget (mk_budget_split) */
	if (!o->max_memory)
		mk_budget_split(0, &bs);
	for (int i = 0; i < NSTAGES - 1; i++)
		if ((rc = mk_chan_open(&r.ch[i], bs.queue, r.fd[i], err)))
			goto out;
	for (int i = 0; i < NSTAGES; i++) {
		args[i] = (struct stage_arg){ &r, i };
		if (pthread_create(&r.th[i], NULL, stage_main, &args[i])) {
			rc = mk_err_set(err, MK_ENOMEM, "cannot start the %s thread", stage_name[i]);
			shut_all(&r);
			break;
		}
		r.started[i] = true;
	}
	/* wait; a cancel shuts every stream, and each stage stops */
	for (;;) {
		pthread_mutex_lock(&r.mu);
		int fin = r.finished;
		pthread_mutex_unlock(&r.mu);
		int nstarted = 0;
		for (int i = 0; i < NSTAGES; i++)
			nstarted += r.started[i];
		if (fin >= nstarted)
			break;
		if (o->cancel && *o->cancel && !__atomic_load_n(&r.cancelled, __ATOMIC_SEQ_CST)) {
			__atomic_store_n(&r.cancelled, 1, __ATOMIC_SEQ_CST);
			/* set before the streams stop: mk-pack reads it after
			 * its input ends (the channel's lock orders the two) */
			if (o->keep_partial_on_cancel)
				r.pko.keep_partial = true;
			shut_all(&r);
		}
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < NSTAGES; i++)
		if (r.started[i])
			pthread_join(r.th[i], NULL);
	if (rc)
		goto out;
	/* a cancel that came after every stage had done its part (mk-pack
	 * past the stream's end, renaming OUT into place) undoes nothing:
	 * the merge succeeded */
	if (r.cancelled && r.first_fail >= 0) {
		rc = mk_err_set(err, MK_EIO, "cancelled%s", o->resume || o->keep_partial_on_cancel ? " (OUT.mk-partial is kept for --resume)" : "");
		goto out;
	}
	if (r.first_fail >= 0) {
		*err = r.err[r.first_fail];
		rc = mk_err_prefix(err, "%s: ", stage_name[r.first_fail]);
	}
out:
	for (int i = 0; i < NSTAGES - 1; i++)
		mk_chan_free(r.ch[i]);
	if (cx)
		mk_cuda_close(cx);
	pthread_mutex_destroy(&r.mu);
	mk_plan_free(r.plan);
	free(partial);
	free(owned);
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
