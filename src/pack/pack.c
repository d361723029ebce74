/* pack.c - mk-pack: a "tensors" stream -> sharded safetensors + files. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <jansson.h>
#include <liburing.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "journal/journal.h"
#include "stream/manifest.h"
#include "pack/pack.h"
#include "io/safetensors.h"
#include "mk/stream.h"
#include "core/bug.h"

#define INDEX_NAME "model.safetensors.index.json"

/* Tensor data go into the shards by O_DIRECT writes (no copy into the
 * page cache, whose fresh pages cost more than the copy on a busy host,
 * and the inputs' cached pages stay) of whole DIRECT_ALIGN blocks from
 * a bounce buffer of DIRECT_BOUNCE bytes; the blocks a tensor shares with
 * its neighbours (or the header) are written through the page cache.
 * Where the file system refuses O_DIRECT (tmpfs, some network file
 * systems) or a write needs another alignment, everything goes through
 * the page cache, as with --buffered.
 *
 * The direct writes go out by io_uring, up to DIRECT_QUEUE at once from
 * as many bounce buffers, so that the device writes one while the next
 * is filled.  Written one at a time (pwrite), each waited for the device
 * and the stream waited with it: in mk-yaml ties on three 300 MB models
 * mk-pack's thread spent about half the run in its writes, and the merge
 * waited 62-70 ms for room in the queue to mk-pack.  A write still in
 * flight holds only its own bounce buffer; they are all waited for
 * before a group commit's fdatasync, at the end, and before the buffers
 * are freed. */
#define DIRECT_ALIGN 4096u
#define DIRECT_BOUNCE (2u << 20)
#define DIRECT_QUEUE 3u

struct dbuf {                    /* a bounce buffer, and its write in flight */
	uint8_t *buf;
	struct shard *sh;
	uint64_t off;
	size_t n;
	bool busy;
};

struct shard {
	char name[64];
	int fd;
	int dfd;                 /* the same file opened O_DIRECT, or -1 */
	uint64_t size;           /* file size: header + data */
	uint64_t data_start;
};

struct slot {                    /* where a manifest tensor goes */
	size_t shard;
	uint64_t off;            /* file offset of its first byte */
	uint64_t got;            /* elements received so far */
	uint32_t crc;            /* CRC-32C of the bytes written so far */
	bool done;
	bool resumed;            /* done by an earlier run (its chunks skipped) */
	uint64_t dpos;           /* the file offset of its next block to write O_DIRECT */
	uint8_t *part;           /* the start of its next whole block [DIRECT_ALIGN] */
	uint32_t npart;
};

/* The journal's group commits run on a thread of their own, so writing
 * goes on while the disk catches up (fdatasync waits for the device). */
struct syncer {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, busy, stop;
	size_t *batch;           /* tensors to journal once synced */
	size_t nbatch;
	int rc;
	struct mk_err err;
};

struct pack {
	const struct mk_pack_opts *o;
	char *partial;           /* OUT.mk-partial */
	struct mk_manifest *man;
	size_t nshards;
	struct shard *sh;
	struct slot *slot;
	int jfd;                 /* journal */
	uint64_t pending_bytes;  /* finished, not yet handed to the syncer */
	size_t *finished;        /* finished tensors not yet handed over */
	size_t nfinished;
	struct syncer sy;
	size_t ndone;
	uint64_t done_bytes;
	struct dbuf db[DIRECT_QUEUE];
	unsigned ndb, cur;       /* bounce buffers (none: no O_DIRECT writes);
				    db[cur] is the one filled next */
	struct io_uring ring;
	bool ring_ok;            /* else one buffer, written by pwrite */
	struct mk_pack_stats *st;
};

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", a, b);
	return p;
}

char *mk_pack_partial_name(const char *out)
{
	size_t n = strlen(out);
	char *p;

	while (n > 1 && out[n - 1] == '/')
		n--;
	p = malloc(n + 16);
	if (p)
		snprintf(p, n + 16, "%.*s.mk-partial", (int)n, out);
	return p;
}

int mk_pack_check_out(const struct mk_pack_opts *o, struct mk_err *err)
{
	struct stat sb;
	char *partial = mk_pack_partial_name(o->out_dir);
	int rc = 0;

	if (!partial)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!o->force && lstat(o->out_dir, &sb) == 0)
		rc = mk_err_set(err, MK_EEXIST, "%s already exists; use --force to replace it", o->out_dir);
	else if (!o->force && !o->resume && lstat(partial, &sb) == 0)
		rc = mk_err_set(err, MK_EEXIST,
				"%s exists: an earlier mk-pack into %s did not finish; continue it with --resume, or remove that directory (or use --force) to start over",
				partial, o->out_dir);
	free(partial);
	return rc;
}

/* Greedy shard assignment in manifest order, as mergekit's writer. */
static int assign_shards(struct pack *p, struct mk_err *err)
{
	struct mk_manifest *m = p->man;
	uint64_t cur = 0, limit = p->o->shard_size;
	size_t n = 0, in_cur = 0;

	p->slot = calloc(m->ntensors ? m->ntensors : 1, sizeof(*p->slot));
	if (!p->slot)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < m->ntensors; i++) {
		uint64_t b = m->tensors[i].nbytes;
		/* a shard is "non-empty" by tensor count, as in mergekit */
		if (n == 0 || (limit > 0 && in_cur > 0 && cur + b > limit)) {
			n++;
			cur = 0;
			in_cur = 0;
		}
		p->slot[i].shard = n - 1;
		cur += b;
		in_cur++;
	}
	p->nshards = n;
	p->sh = calloc(n ? n : 1, sizeof(*p->sh));
	if (!p->sh)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t s = 0; s < n; s++) {
		p->sh[s].fd = -1;
		p->sh[s].dfd = -1;
		if (n == 1)
			snprintf(p->sh[s].name, sizeof(p->sh[s].name), "model.safetensors");
		else
			snprintf(p->sh[s].name, sizeof(p->sh[s].name), "model-%05zu-of-%05zu.safetensors",
				 s + 1, n);
	}
	return 0;
}

/* Build each shard's header; fills sizes and the tensors' offsets. */
static int build_headers(struct pack *p, uint8_t ***hdrs, size_t **hlens, struct mk_err *err)
{
	struct mk_manifest *m = p->man;
	struct mk_st_out_tensor *ot = NULL;
	size_t *idx = NULL;
	int rc = 0;

	*hdrs = calloc(p->nshards ? p->nshards : 1, sizeof(**hdrs));
	*hlens = calloc(p->nshards ? p->nshards : 1, sizeof(**hlens));
	ot = calloc(m->ntensors ? m->ntensors : 1, sizeof(*ot));
	idx = calloc(m->ntensors ? m->ntensors : 1, sizeof(*idx));
	if (!*hdrs || !*hlens || !ot || !idx) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t s = 0; s < p->nshards; s++) {
		size_t n = 0;
		uint64_t data = 0;
		for (size_t i = 0; i < m->ntensors; i++) {
			if (p->slot[i].shard != s)
				continue;
			ot[n] = (struct mk_st_out_tensor){ .name = m->tensors[i].name,
							   .dtype = m->tensors[i].desc.dtype,
							   .ndim = m->tensors[i].desc.ndim,
							   .shape = m->tensors[i].desc.shape };
			idx[n++] = i;
		}
		rc = mk_st_header_build(ot, n, 8, &(*hdrs)[s], &(*hlens)[s], NULL, err);
		if (rc)
			goto out;
		for (size_t j = 0; j < n; j++) {
			p->slot[idx[j]].off = (*hlens)[s] + ot[j].begin;
			data += ot[j].nbytes;
		}
		p->sh[s].data_start = (*hlens)[s];
		p->sh[s].size = (*hlens)[s] + data;
	}
out:
	free(ot);
	free(idx);
	return rc;
}

static int check_space(struct pack *p, const char *dir, struct mk_err *err)
{
	struct statvfs vf;
	uint64_t need = 0, have;
	char buf1[32], buf2[32];

	for (size_t s = 0; s < p->nshards; s++)
		need += p->sh[s].size;
	for (size_t i = 0; i < p->man->nfiles; i++)
		need += p->man->files[i].size;
	need += 64 * (uint64_t)p->man->ntensors; /* index, roughly */
	if (statvfs(dir, &vf) < 0)
		return mk_err_sys(err, errno, "%s: cannot create the output in '%s'", p->o->out_dir, dir);
	have = (uint64_t)vf.f_bavail * vf.f_frsize;
	if (need > have)
		return mk_err_set(err, MK_ENOSPC, "%s: the output needs %s, only %s free on that file system",
				  p->o->out_dir, mk_size_human(need, buf1, sizeof(buf1)),
				  mk_size_human(have, buf2, sizeof(buf2)));
	return 0;
}

static int open_shards(struct pack *p, uint8_t **hdrs, size_t *hlens, bool resume, struct mk_err *err)
{
	for (size_t s = 0; s < p->nshards; s++) {
		struct shard *sh = &p->sh[s];
		char *path = join(p->partial, sh->name);
		int rc;

		if (!path)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		/* resumed: the shard (kept, or missing when the earlier run
		 * stopped before creating it) gets its size and header again */
		/* read and write: spliced data are checked as read back */
		sh->fd = open(path, O_RDWR | O_CREAT | (resume ? 0 : O_EXCL) | O_CLOEXEC, 0644);
		if (sh->fd < 0) {
			rc = mk_err_sys(err, errno, "%s", path);
			free(path);
			return rc;
		}
		rc = posix_fallocate(sh->fd, 0, (off_t)sh->size);
		if (rc == EOPNOTSUPP || rc == EINVAL)
			rc = ftruncate(sh->fd, (off_t)sh->size) < 0 ? errno : 0;
		if (rc) {
			rc = mk_err_sys(err, rc, "%s: preallocating %llu bytes", path,
					(unsigned long long)sh->size);
			free(path);
			return rc;
		}
		rc = mk_pwrite_all(sh->fd, hdrs[s], hlens[s], 0, path, err);
		if (!rc && p->ndb)
			sh->dfd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC);   /* -1: through the page cache */
		free(path);
		if (rc)
			return rc;
	}
	return 0;
}

/* From now on a shard is written through the page cache alone. */
static void direct_off(struct shard *sh)
{
	if (sh->dfd >= 0)
		close(sh->dfd);
	sh->dfd = -1;
}

/* The bounce buffers: as many as `room` bytes allow beyond the first (at
 * most DIRECT_QUEUE), with a ring for them when there are two or more;
 * none at all where memory is short. */
static void direct_setup(struct pack *p, uint64_t room)
{
	unsigned want = room / DIRECT_BOUNCE + 1 < DIRECT_QUEUE ? (unsigned)(room / DIRECT_BOUNCE) + 1 : DIRECT_QUEUE;

	for (p->ndb = 0; p->ndb < want; p->ndb++)
		if (posix_memalign((void **)&p->db[p->ndb].buf, DIRECT_ALIGN, DIRECT_BOUNCE))
			break;
	p->cur = 0;
	p->ring_ok = p->ndb > 1 && io_uring_queue_init(DIRECT_QUEUE, &p->ring, 0) == 0;
}

/* Write n bytes (a multiple of DIRECT_ALIGN) of buf at off, which is
 * aligned, and wait.  A write refused for its alignment (EINVAL) or cut
 * short off a block boundary turns the shard's direct writes off, the
 * rest written through the page cache. */
static int direct_write_sync(struct pack *p, struct shard *sh, const uint8_t *buf, uint64_t off, size_t n,
			     struct mk_err *err)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = sh->dfd < 0 ? 0 : pwrite(sh->dfd, buf + done, n - done, (off_t)(off + done));
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EINVAL)
			return mk_err_sys(err, errno, "%s/%s: writing %zu bytes at offset %llu", p->partial, sh->name,
					  n - done, (unsigned long long)(off + done));
		if (w <= 0 || (size_t)w % DIRECT_ALIGN) {
			done += w > 0 ? (size_t)w : 0;
			direct_off(sh);
			return mk_pwrite_all(sh->fd, buf + done, n - done, off + done, sh->name, err);
		}
		done += (size_t)w;
	}
	return 0;
}

/* Wait for one write in flight and settle it: a short or refused one
 * finished as direct_write_sync would. */
static int direct_reap(struct pack *p, struct mk_err *err)
{
	struct io_uring_cqe *cqe;
	int rc;

	do
		rc = io_uring_wait_cqe(&p->ring, &cqe);
	while (rc == -EINTR);
	if (rc < 0)
		return mk_err_sys(err, -rc, "%s: waiting for a write", p->partial);
	struct dbuf *d = &p->db[io_uring_cqe_get_data64(cqe)];
	int res = cqe->res;
	io_uring_cqe_seen(&p->ring, cqe);
	d->busy = false;
	if (res == (int)d->n)
		return 0;
	if (res < 0 && res != -EINVAL)
		return mk_err_sys(err, -res, "%s/%s: writing %zu bytes at offset %llu", p->partial, d->sh->name, d->n,
				  (unsigned long long)d->off);
	size_t done = res > 0 ? (size_t)res : 0;
	if (res <= 0 || done % DIRECT_ALIGN) {
		direct_off(d->sh);
		return mk_pwrite_all(d->sh->fd, d->buf + done, d->n - done, d->off + done, d->sh->name, err);
	}
	return direct_write_sync(p, d->sh, d->buf + done, d->off + done, d->n - done, err);
}

/* Wait for every write in flight; the first failure's error. */
static int direct_drain(struct pack *p, struct mk_err *err)
{
	int rc = 0;

	for (unsigned k = 0; p->ring_ok && k < p->ndb; k++)
		while (p->db[k].busy) {
			struct mk_err e;
			int r = direct_reap(p, &e);
			if (r && !rc) {
				rc = r;
				*err = e;
			}
		}
	return rc;
}

/* Write n bytes (a multiple of DIRECT_ALIGN) of the buffer filled next
 * (db[cur]) at off, which is aligned: sent, and db[cur] the next buffer,
 * free; or, without a ring, written and waited for. */
static int direct_write(struct pack *p, struct shard *sh, uint64_t off, size_t n, struct mk_err *err)
{
	struct io_uring_sqe *sqe;
	struct dbuf *d = &p->db[p->cur];

	if (!p->ring_ok || !(sqe = io_uring_get_sqe(&p->ring)))
		return direct_write_sync(p, sh, d->buf, off, n, err);
	io_uring_prep_write(sqe, sh->dfd, d->buf, (unsigned)n, off);
	io_uring_sqe_set_data64(sqe, p->cur);
	*d = (struct dbuf){ .buf = d->buf, .sh = sh, .off = off, .n = n, .busy = true };
	int rc;
	do
		rc = io_uring_submit(&p->ring);
	while (rc == -EINTR);
	if (rc != 1) {
		d->busy = false;
		return mk_err_sys(err, rc < 0 ? -rc : EIO, "%s/%s: sending a write of %zu bytes at offset %llu",
				  p->partial, sh->name, n, (unsigned long long)off);
	}
	p->cur = (p->cur + 1) % p->ndb;
	while (p->db[p->cur].busy)
		if ((rc = direct_reap(p, err)))
			return rc;
	return 0;
}

/* Write the start of a block that tensor i keeps (slot part) through
 * the page cache: before bytes of it that come another way (spliced). */
static int part_flush(struct pack *p, size_t i, struct mk_err *err)
{
	struct slot *sl = &p->slot[i];
	struct shard *sh = &p->sh[sl->shard];
	int rc = 0;

	if (sl->npart)
		rc = mk_pwrite_all(sh->fd, sl->part, sl->npart, sl->dpos, sh->name, err);
	sl->npart = 0;
	return rc;
}

/* Tensor i's bytes [off, off + n) of its shard, the next ones of it: the
 * parts in the tensor's first and last partial blocks through the page
 * cache, its whole blocks (in order) by direct_write, the start of a
 * block not yet whole kept in the slot until the next bytes complete it.
 * Where bytes came another way since (off is not where the kept ones
 * end), the kept ones and the rest of off's block go through the page
 * cache, and whole blocks again from the next. */
static int shard_write(struct pack *p, size_t i, uint64_t off, const uint8_t *data, size_t n,
		       struct mk_err *err)
{
	struct slot *sl = &p->slot[i];
	struct shard *sh = &p->sh[sl->shard];
	uint64_t t0 = sl->off, t1 = sl->off + p->man->tensors[i].nbytes;
	uint64_t a0 = (t0 + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN, a1 = t1 / DIRECT_ALIGN * DIRECT_ALIGN;
	uint64_t end = off + n, m0, m1;
	int rc;

	if (sh->dfd < 0 || a0 >= a1 || (!sl->part && !(sl->part = malloc(DIRECT_ALIGN)))) {
		if ((rc = part_flush(p, i, err)))   /* (direct writes turned off meanwhile) */
			return rc;
		return mk_pwrite_all(sh->fd, data, n, off, sh->name, err);
	}
	if (!sl->dpos)
		sl->dpos = a0;
	if (off < a0 && (rc = mk_pwrite_all(sh->fd, data, (size_t)((end < a0 ? end : a0) - off), off, sh->name, err)))
		return rc;
	m0 = off > a0 ? off : a0;
	m1 = end < a1 ? end : a1;
	if (end > a1) {
		uint64_t b = off > a1 ? off : a1;   /* the tail block's bytes */
		if ((rc = mk_pwrite_all(sh->fd, data + (b - off), (size_t)(end - b), b, sh->name, err)))
			return rc;
	}
	if (m0 >= m1)
		return 0;
	data += m0 - off;
	if (m0 != sl->dpos + sl->npart) {
		uint64_t b = (m0 + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN, k = (b < m1 ? b : m1) - m0;
		if ((rc = part_flush(p, i, err)) || (rc = mk_pwrite_all(sh->fd, data, (size_t)k, m0, sh->name, err)))
			return rc;
		sl->dpos = b;
		data += k;
		m0 += k;
	}
	while (m0 < m1) {
		/* the kept start, then as many of the new bytes as fill blocks */
		size_t have = sl->npart, take = (size_t)(m1 - m0), whole;
		if (take > DIRECT_BOUNCE - have)
			take = DIRECT_BOUNCE - have;
		whole = (have + take) / DIRECT_ALIGN * DIRECT_ALIGN;
		if (!whole) {
			memcpy(sl->part + have, data, take);
			sl->npart += (uint32_t)take;
			return 0;
		}
		uint8_t *bounce = p->db[p->cur].buf;
		memcpy(bounce, sl->part, have);
		memcpy(bounce + have, data, whole - have);
		rc = direct_write(p, sh, sl->dpos, whole, err);
		if (rc)
			return rc;
		sl->dpos += whole;
		data += whole - have;
		m0 += whole - have;
		sl->npart = 0;
		if (sh->dfd < 0)
			return m0 < m1 ? mk_pwrite_all(sh->fd, data, (size_t)(m1 - m0), m0, sh->name, err) : 0;
	}
	return 0;
}

/* Group commit: fdatasync every shard, then journal `n` tensors whose
 * bytes were all written before the call. */
static int journal_commit(struct pack *p, const size_t *ids, size_t n, struct mk_err *err)
{
	char line[512];

	for (size_t s = 0; s < p->nshards; s++)
		if (fdatasync(p->sh[s].fd) < 0)
			return mk_err_sys(err, errno, "%s/%s: fdatasync", p->partial, p->sh[s].name);
	for (size_t k = 0; k < n; k++) {
		size_t i = ids[k];
		int len = mk_journal_done_line(line, sizeof(line), i, p->slot[i].crc, p->man->tensors[i].name);
		int rc = mk_write_all(p->jfd, line, (size_t)len, MK_JOURNAL_NAME, err);
		if (rc)
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
		int rc = journal_commit(p, sy->batch, sy->nbatch, &e);
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
static int syncer_wait(struct pack *p, struct mk_err *err)
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

static void syncer_stop(struct pack *p)
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
static int tensor_finished(struct pack *p, size_t i, struct mk_err *err)
{
	struct syncer *sy = &p->sy;
	uint64_t limit = p->o->sync_bytes ? p->o->sync_bytes : (64ull << 20);
	if (p->o->budget && limit > p->o->budget / 4)
		limit = p->o->budget / 4 ? p->o->budget / 4 : 1;
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
	} else if (!sy->busy && !(rc = direct_drain(p, err))) {
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

int mk_pack_file_name_check(const char *name, struct mk_err *err)
{
	if (!strcmp(name, INDEX_NAME) || !strcmp(name, MK_JOURNAL_NAME) || !strncmp(name, "model.safetensors", 17) ||
	    (!strncmp(name, "model-", 6) && strstr(name, ".safetensors")))
		return mk_err_set(err, MK_EFORMAT, "'%s' would overwrite a weight file", name);
	return 0;
}

int mk_pack_file_size_check(const struct mk_manifest *head, const char *name, uint64_t size,
			    struct mk_err *err)
{
	for (size_t i = 0; i < head->nfiles; i++)
		if (!strcmp(head->files[i].name, name)) {
			if (size > head->files[i].size)
				return mk_err_set(err, MK_EFORMAT,
						  "'%s' carries %llu bytes, the HEAD announces %llu",
						  name, (unsigned long long)size,
						  (unsigned long long)head->files[i].size);
			return 0;
		}
	return mk_err_set(err, MK_EFORMAT, "'%s' is not in the HEAD's files list", name);
}

#define FILE_PIECE (256u << 10)  /* a FILE frame is written in pieces of this */

/* Fill buf with n bytes of the FILE frame's payload; *have < n when the
 * payload ended first (and was verified). */
static int file_read_exact(struct mk_stream_reader *r, uint8_t *buf, size_t n, size_t *have,
			   struct mk_err *err)
{
	*have = 0;
	while (*have < n) {
		size_t got;
		int rc = mk_sr_read_payload(r, buf + *have, n - *have, &got, err);
		if (rc)
			return rc;
		if (!got)
			break;
		*have += got;
	}
	return 0;
}

/* A FILE frame, read piecewise (MK_SR_PIECEWISE_FILE): its name first,
 * checked against the HEAD, then its contents written to the partial
 * directory as they arrive; a payload whose checksum or size fails at the
 * end removes the file. */
static int write_file_frame(struct pack *p, struct mk_stream_reader *r, const struct mk_frame *f,
			    struct mk_err *err)
{
	unsigned long long idx = (unsigned long long)f->index;
	uint8_t hdr[8], *buf = NULL;
	char name[PATH_MAX + 1];
	uint32_t mode, nlen;
	uint64_t size, wrote = 0;
	char *path = NULL;
	size_t have;
	int fd = -1, rc;

	if ((rc = file_read_exact(r, hdr, 8, &have, err)))
		return rc;
	if (have < 8)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): payload of %zu bytes is too short", idx, have);
	mode = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 | (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
	nlen = (uint32_t)hdr[4] | (uint32_t)hdr[5] << 8 | (uint32_t)hdr[6] << 16 | (uint32_t)hdr[7] << 24;
	if (nlen > f->raw_len - 8 || nlen > PATH_MAX)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): name length %u exceeds the payload", idx, nlen);
	if ((rc = file_read_exact(r, (uint8_t *)name, nlen, &have, err)))
		return rc;
	if (have < nlen)
		return mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): payload ends inside the name", idx);
	if ((rc = mk_file_name_check(name, nlen, err)))
		return mk_err_prefix(err, "frame #%llu (FILE): ", idx);
	name[nlen] = '\0';
	size = f->raw_len - 8 - nlen;
	if ((rc = mk_pack_file_name_check(name, err)) || (rc = mk_pack_file_size_check(p->man, name, size, err)))
		return mk_err_prefix(err, "frame #%llu (FILE): ", idx);
	path = join(p->partial, name);
	buf = malloc(FILE_PIECE);
	if (!path || !buf) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = mk_mkdirs_for(path, err);
	if (rc)
		goto out;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode & 0777) ? (mode & 0777) : 0644);
	if (fd < 0) {
		rc = errno == EEXIST ?
			mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): '%s' sent twice", idx, name) :
			mk_err_sys(err, errno, "%s", path);
		goto out;
	}
	for (;;) {
		rc = mk_sr_read_payload(r, buf, FILE_PIECE, &have, err);
		if (rc || !have)
			break;
		rc = mk_write_all(fd, buf, have, path, err);
		if (rc)
			break;
		wrote += have;
	}
	if (!rc && fsync(fd) < 0)
		rc = mk_err_sys(err, errno, "%s: fsync", path);
	if (rc) {
		close(fd);
		fd = -1;
		(void)unlink(path); /* unverified bytes never stay in OUT */
		goto out;
	}
	p->st->nfiles++;
	p->st->bytes_written += wrote;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(buf);
	return rc;
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
	if ((rc = mk_chunk_check_data(p->man, &c, err)))
		return mk_err_prefix(err, "frame #%llu: ", (unsigned long long)f->index);
	t = &p->man->tensors[c.id];
	sl = &p->slot[c.id];
	if (sl->resumed)
		return 0; /* written by the run this one resumes, checked against its CRC */
	if (c.elem_begin != sl->got)
		return mk_err_set(err, MK_EFORMAT,
				  "frame #%llu (DATA): tensor '%s': chunk [%llu, +%llu) out of order or out of range (expected element %llu of %llu)",
				  (unsigned long long)f->index, t->name, (unsigned long long)c.elem_begin,
				  (unsigned long long)c.elem_count, (unsigned long long)sl->got,
				  (unsigned long long)t->nelem);
	sh = &p->sh[sl->shard];
	boff = c.elem_begin * mk_dtype_bits(t->desc.dtype) / 8;
	if (f->piecewise) {
		rc = part_flush(p, c.id, err);
		if (!rc)
			rc = mk_sr_splice_payload(r, sh->fd, sh->name, sl->off + boff, c.data_len, &c.data, err);
	} else
		rc = shard_write(p, c.id, sl->off + boff, c.data, c.data_len, err);
	if (rc)
		return rc;
	sl->crc = mk_crc32c(sl->crc, c.data, c.data_len);
	sl->got += c.elem_count;
	p->done_bytes += c.data_len;
	p->st->bytes_written += c.data_len;
	if (sl->got == t->nelem) {
		free(sl->part);          /* (its last whole block is written) */
		sl->part = NULL;
		sl->done = true;
		p->ndone++;
		rc = tensor_finished(p, c.id, err);
		if (rc)
			return rc;
	}
	if (p->o->progress)
		p->o->progress(p->o->progress_ctx, p->done_bytes, p->st->tensor_bytes, p->ndone,
			       p->man->ntensors);
	return 0;
}

static int write_index(struct pack *p, struct mk_err *err)
{
	json_t *o = json_object(), *meta = json_object(), *wm = json_object();
	char *text = NULL, *path = NULL;
	int fd = -1, rc = 0;

	if (!o || !meta || !wm)
		goto oom;
	json_object_set_new(meta, "total_size", json_integer((json_int_t)p->st->tensor_bytes));
	for (size_t i = 0; i < p->man->ntensors; i++)
		json_object_set_new(wm, p->man->tensors[i].name, json_string(p->sh[p->slot[i].shard].name));
	json_object_set_new(o, "metadata", meta);
	json_object_set_new(o, "weight_map", wm);
	meta = wm = NULL;
	/* Python's json.dump(indent=2): 2-space indent, ASCII escapes */
	text = json_dumps(o, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER);
	path = join(p->partial, INDEX_NAME);
	if (!text || !path)
		goto oom;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = mk_err_sys(err, errno, "%s", path);
		goto out;
	}
	rc = mk_write_all(fd, text, strlen(text), path, err);
	if (!rc && fsync(fd) < 0)
		rc = mk_err_sys(err, errno, "%s: fsync", path);
	goto out;
oom:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(text);
	json_decref(meta);
	json_decref(wm);
	json_decref(o);
	return rc;
}

static int finish(struct pack *p, struct mk_err *err)
{
	char *jpath = NULL, *old = NULL;
	struct stat sb;
	int rc;

	for (size_t i = 0; i < p->man->ntensors; i++)
		if (p->slot[i].got != p->man->tensors[i].nelem)
			return mk_err_set(err, MK_ECORRUPT,
					  "the stream ended with tensor '%s' incomplete (%llu of %llu elements)",
					  p->man->tensors[i].name, (unsigned long long)p->slot[i].got,
					  (unsigned long long)p->man->tensors[i].nelem);
	rc = direct_drain(p, err);
	if (!rc)
		rc = syncer_wait(p, err);
	if (!rc)
		rc = journal_commit(p, p->finished, p->nfinished, err);
	if (rc)
		return rc;
	p->nfinished = 0;
	if (p->nshards > 1) {
		rc = write_index(p, err);
		if (rc)
			return rc;
	}
	jpath = join(p->partial, MK_JOURNAL_NAME);
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
	if (p->o->force && lstat(p->o->out_dir, &sb) == 0) {
		/* move the old OUT aside first, so OUT is never half old, half new */
		old = malloc(strlen(p->o->out_dir) + 32);
		if (!old) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		sprintf(old, "%s.mk-old.%ld", p->o->out_dir, (long)getpid());
		if (rename(p->o->out_dir, old) < 0) {
			rc = mk_err_sys(err, errno, "%s: moving the old output aside", p->o->out_dir);
			goto out;
		}
	}
	if (rename(p->partial, p->o->out_dir) < 0) {
		rc = mk_err_sys(err, errno, "rename %s -> %s", p->partial, p->o->out_dir);
		goto out;
	}
	if (old) {
		struct mk_err e = { 0 };
		if (mk_rmtree(old, &e))
			snprintf(p->st->warning, sizeof(p->st->warning),
				 "%s is complete, but the old output moved aside to %s could not be removed: %s",
				 p->o->out_dir, old, e.msg);
	}
	{
		/* make the rename durable */
		char *parent = strdup(p->o->out_dir), *slash;
		if (parent) {
			size_t n = strlen(parent);
			while (n > 1 && parent[n - 1] == '/')
				parent[--n] = '\0';
			slash = strrchr(parent, '/');
			if (!slash)
				strcpy(parent, ".");
			else if (slash == parent)
				parent[1] = '\0';
			else
				*slash = '\0';
			struct mk_err e = { 0 };
			if (mk_fsync_dir(parent, &e) && !p->st->warning[0])
				snprintf(p->st->warning, sizeof(p->st->warning),
					 "%s is complete, but the rename that put it in place may not survive a crash: %s",
					 p->o->out_dir, e.msg);
			free(parent);
		}
	}
out:
	free(jpath);
	free(old);
	return rc;
}

/* Resume: check every tensor the journal lists against its CRC-32C in
 * the shard file (read-only, before anything changes), then mark it done. */
static int resume_verify(struct pack *p, const struct mk_journal *j, struct mk_err *err)
{
	size_t bufsz = 4u << 20;
	uint8_t *buf = malloc(bufsz);
	int *fds = calloc(p->nshards ? p->nshards : 1, sizeof(*fds));
	int rc = 0;

	if (!buf || !fds) {
		free(buf);
		free(fds);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t s = 0; s < p->nshards; s++)
		fds[s] = -1;
	for (size_t k = 0; !rc && k < j->ndone; k++) {
		const struct mk_journal_done *d = &j->done[k];
		const struct mk_manifest_tensor *t = &p->man->tensors[d->index];
		struct slot *sl = &p->slot[d->index];
		struct shard *sh = &p->sh[sl->shard];
		uint32_t crc = 0;
		uint64_t at = 0;

		if (sl->resumed)
			continue;
		if (fds[sl->shard] < 0) {
			char *path = join(p->partial, sh->name);
			if (!path) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			fds[sl->shard] = open(path, O_RDONLY | O_CLOEXEC);
			if (fds[sl->shard] < 0)
				rc = mk_err_sys(err, errno,
						"%s (its journal says tensor '%s' is written there); remove %s to start over",
						path, t->name, p->partial);
			free(path);
			if (rc)
				break;
		}
		while (at < t->nbytes) {
			size_t n = t->nbytes - at < bufsz ? (size_t)(t->nbytes - at) : bufsz;
			ssize_t got = pread(fds[sl->shard], buf, n, (off_t)(sl->off + at));
			if (got < 0 && errno == EINTR)
				continue;
			if (got < 0) {
				rc = mk_err_sys(err, errno, "%s/%s: reading tensor '%s'", p->partial, sh->name,
						t->name);
				break;
			}
			if (got == 0)
				break; /* short file: the CRC below fails */
			crc = mk_crc32c(crc, buf, (size_t)got);
			at += (uint64_t)got;
		}
		if (rc)
			break;
		if (at != t->nbytes || crc != d->crc32c) {
			rc = mk_err_set(err, MK_ECORRUPT,
					"%s/%s: tensor '%s' does not match the CRC-32C its journal recorded (the file was changed, or the disk lost what was synced); remove %s to start over",
					p->partial, sh->name, t->name, p->partial);
			break;
		}
		sl->crc = crc;
		sl->got = t->nelem;
		sl->done = sl->resumed = true;
		p->ndone++;
		p->done_bytes += t->nbytes;
		p->st->resumed++;
		p->st->resumed_bytes += t->nbytes;
	}
	for (size_t s = 0; s < p->nshards; s++)
		if (fds[s] >= 0)
			close(fds[s]);
	free(fds);
	free(buf);
	return rc;
}

/* Resume: remove what the stream writes again (its FILE frames, the
 * index); keep the shards and the journal. */
static int resume_clean(struct pack *p, struct mk_err *err)
{
	DIR *d = opendir(p->partial);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return mk_err_sys(err, errno, "%s", p->partial);
	while (!rc && (e = readdir(d))) {
		bool keep = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, MK_JOURNAL_NAME);
		for (size_t s = 0; !keep && s < p->nshards; s++)
			keep = !strcmp(e->d_name, p->sh[s].name);
		if (keep)
			continue;
		char *path = join(p->partial, e->d_name);
		rc = path ? mk_rmtree(path, err) : mk_err_set(err, MK_ENOMEM, "out of memory");
		free(path);
	}
	closedir(d);
	return rc;
}

int mk_pack_run(const struct mk_pack_opts *o, int in_fd, const char *label,
		struct mk_pack_stats *st, struct mk_err *err)
{
	struct pack p = { .o = o, .jfd = -1, .st = st };
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	uint8_t **hdrs = NULL;
	size_t *hlens = NULL;
	char *parent = NULL;
	bool made = false, resuming = false;
	struct mk_journal *jn = NULL;
	struct stat sb;
	int rc;

	memset(st, 0, sizeof(*st));
	rc = mk_pack_check_out(o, err);
	if (rc)
		return rc;
	p.partial = mk_pack_partial_name(o->out_dir);
	if (!p.partial)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rc = mk_sr_open(&r, in_fd, label, MK_SR_PIECEWISE_FILE | (o->no_splice ? 0 : MK_SR_SPLICE_DATA), err);
	if (rc)
		goto out;
	mk_sr_set_bounds(r, &(struct mk_sr_bounds){ .memory = o->budget });
	/* the first critical frame must be HEAD */
	rc = mk_sr_head(r, label, "tensors", "mk-pack reads a 'tensors' stream (from mk-fetch --model or mk-merge)",
			&p.man, &f, err);
	if (rc)
		goto out;
	/* a frame (compressed and raw) must fit, with room for the headers */
	if (o->budget && 2 * p.man->chunk_bytes + (4ull << 20) > o->budget) {
		rc = mk_err_set(err, MK_ENOMEM,
				"%s: chunks of %llu bytes need about %llu bytes here, more than --max-memory %llu; use a smaller --chunk-size upstream",
				label, (unsigned long long)p.man->chunk_bytes,
				(unsigned long long)(2 * p.man->chunk_bytes + (4ull << 20)), (unsigned long long)o->budget);
		goto out;
	}
	{
		char hex[65], line[160];
		st->tensor_bytes = mk_manifest_total_bytes(p.man);
		st->ntensors = p.man->ntensors;
		rc = assign_shards(&p, err);
		if (rc)
			goto out;
		rc = build_headers(&p, &hdrs, &hlens, err);
		if (rc)
			goto out;
		/* free space is checked where OUT will be */
		parent = strdup(o->out_dir);
		if (!parent) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		char *slash = strrchr(parent, '/');
		while (slash && slash[1] == '\0' && slash != parent) {
			*slash = '\0';
			slash = strrchr(parent, '/');
		}
		if (!slash)
			strcpy(parent, ".");
		else if (slash == parent)
			parent[1] = '\0';
		else
			*slash = '\0';
		/* as mergekit, create OUT's parent directories */
		if (strcmp(parent, ".") && strcmp(parent, "/")) {
			char *probe = join(parent, "x");
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
					rc = resume_verify(&p, jn, err);
				if (rc)
					goto out;
			}
		}
		if (!resuming) {
			rc = check_space(&p, parent, err);
			if (rc)
				goto out;
			if (o->force || o->resume) {
				rc = mk_rmtree(p.partial, err);
				if (rc)
					goto out;
			}
			if (mkdir(p.partial, 0755) < 0) {
				rc = mk_err_sys(err, errno, "%s: cannot create the output", p.partial);
				goto out;
			}
		}
		made = true;
		if (resuming) {
			rc = resume_clean(&p, err);
			if (rc)
				goto out;
		}
		char *jpath = join(p.partial, MK_JOURNAL_NAME);
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
			direct_setup(&p, o->budget ? o->budget - (2 * p.man->chunk_bytes + (4ull << 20)) : UINT64_MAX);
		rc = open_shards(&p, hdrs, hlens, resuming, err);
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
			rc = write_file_frame(&p, r, &f, err);
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
		int drc = direct_drain(&p, &e2);
		if (drc && !rc) {
			rc = drc;
			*err = e2;
		}
	}
	if (rc && made && o->resume && p.jfd >= 0 && p.finished) {
		/* kept for the next --resume: journal what was written */
		struct mk_err e2 = { 0 };
		if (!syncer_wait(&p, &e2))
			(void)journal_commit(&p, p.finished, p.nfinished, &e2);
	}
	syncer_stop(&p);
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
		direct_off(&p.sh[s]);
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
	mk_manifest_free(p.man);
	mk_sr_free(r);
	return rc;
}
