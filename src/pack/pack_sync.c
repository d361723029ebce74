/* pack_sync.c - mk-pack's journal group commits, on a thread of their own. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/budget.h"
#include "core/fsutil.h"
#include "core/mapguard.h"
#include "journal/journal.h"
#include "stream/manifest.h"
#include "pack_impl.h"

/* Group commit: fdatasync every shard, then journal `n` tensors whose
 * bytes were all written before the call -- unless a mapped input was
 * cut since mk-pack began (mapguard.h): the bytes written may then hold
 * the zeros read in place of the lost pages, and a tensor journalled
 * with them would be skipped, not rewritten, by --resume. */
int mk__pack_journal_commit(struct pack *p, const size_t *ids, size_t n, struct mk_err *err)
{
	char line[512];
	int rc;

	for (size_t s = 0; s < p->nshards; s++)
		if (fdatasync(p->sh[s].fd) < 0)
			return mk_err_sys(err, errno, "%s/%s: fdatasync", p->partial, p->sh[s].name);
	if ((rc = mk_mapguard_check(p->faults0, err)) < 0)
		return rc;
	for (size_t k = 0; k < n; k++) {
		size_t i = ids[k];
		int len = mk_journal_done_line(line, sizeof(line), i, p->slot[i].crc, p->man->tensors[i].name);
		if ((rc = mk_write_all(p->jfd, line, (size_t)len, MK_JOURNAL_NAME, err)))
			return rc;
	}
	if (fdatasync(p->jfd) < 0)
		return mk_err_sys(err, errno, "%s/%s: fdatasync", p->partial, MK_JOURNAL_NAME);
	return 0;
}

static void *syncer_main(void *arg)
{
	struct pack *p = arg;
	struct syncer *sy = &p->sy;

	pthread_mutex_lock(&sy->mu);
	for (;;) {
		while (!sy->busy && !sy->stop)
			pthread_cond_wait(&sy->cv, &sy->mu);
		if (!sy->busy)
			break;
		pthread_mutex_unlock(&sy->mu);
		struct mk_err e = { 0 };
		int rc = mk__pack_journal_commit(p, sy->batch, sy->nbatch, &e);
		pthread_mutex_lock(&sy->mu);
		if (rc && !sy->rc) {
			sy->rc = rc;
			sy->err = e;
		}
		sy->busy = false;
		pthread_cond_broadcast(&sy->cv);
	}
	pthread_mutex_unlock(&sy->mu);
	return NULL;
}

/* Wait until the syncer is idle; returns its first error. */
int mk__pack_syncer_wait(struct pack *p, struct mk_err *err)
{
	struct syncer *sy = &p->sy;
	int rc;

	if (!sy->started)
		return 0;
	pthread_mutex_lock(&sy->mu);
	while (sy->busy)
		pthread_cond_wait(&sy->cv, &sy->mu);
	rc = sy->rc;
	if (rc && err)
		*err = sy->err;
	pthread_mutex_unlock(&sy->mu);
	return rc;
}

void mk__pack_syncer_stop(struct pack *p)
{
	struct syncer *sy = &p->sy;

	if (!sy->started)
		return;
	pthread_mutex_lock(&sy->mu);
	sy->stop = true;
	pthread_cond_broadcast(&sy->cv);
	pthread_mutex_unlock(&sy->mu);
	pthread_join(sy->th, NULL);
	pthread_mutex_destroy(&sy->mu);
	pthread_cond_destroy(&sy->cv);
	sy->started = false;
}

/* A tensor is complete: hand a batch to the syncer when enough bytes have
 * gathered and it is idle; never wait for it here. */
int mk__pack_tensor_finished(struct pack *p, size_t i, struct mk_err *err)
{
	struct syncer *sy = &p->sy;
	uint64_t limit = mk_budget_pack_sync(p->o->budget, p->o->sync_bytes);
	int rc = 0;

	p->finished[p->nfinished++] = i;
	p->pending_bytes += p->man->tensors[i].nbytes;
	if (p->pending_bytes < limit)
		return 0;
	if (!sy->started) {
		pthread_mutex_init(&sy->mu, NULL);
		pthread_cond_init(&sy->cv, NULL);
		sy->batch = malloc((p->man->ntensors ? p->man->ntensors : 1) * sizeof(*sy->batch));
		if (!sy->batch)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (pthread_create(&sy->th, NULL, syncer_main, p))
			return mk_err_set(err, MK_ENOMEM, "cannot start the sync thread");
		sy->started = true;
	}
	pthread_mutex_lock(&sy->mu);
	if (sy->rc) {
		rc = sy->rc;
		*err = sy->err;
	} else if (!sy->busy && !(rc = mk__pack_direct_drain(p, err))) {
		/* (the batch's bytes all written: the syncer's fdatasync
		 * covers what the device has) */
		memcpy(sy->batch, p->finished, p->nfinished * sizeof(*sy->batch));
		sy->nbatch = p->nfinished;
		p->nfinished = 0;
		p->pending_bytes = 0;
		sy->busy = true;
		pthread_cond_signal(&sy->cv);
	}
	pthread_mutex_unlock(&sy->mu);
	return rc;
}
