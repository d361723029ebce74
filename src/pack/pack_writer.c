/* pack_writer.c - mk-pack's shard files: created with their headers, the
 * tensors' bytes written O_DIRECT by io_uring (pack_impl.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <liburing.h>
#include "core/fsutil.h"
#include "stream/manifest.h"
#include "pack_impl.h"

int mk__pack_open_shards(struct pack *p, uint8_t **hdrs, size_t *hlens, bool resume, struct mk_err *err)
{
	for (size_t s = 0; s < p->nshards; s++) {
		struct shard *sh = &p->sh[s];
		char *path = mk__pack_join(p->partial, sh->name);
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
void mk__pack_direct_off(struct shard *sh)
{
	if (sh->dfd >= 0)
		close(sh->dfd);
	sh->dfd = -1;
}

/* The bounce buffers: as many as `room` bytes allow beyond the first (at
 * most DIRECT_QUEUE), with a ring for them when there are two or more;
 * none at all where memory is short. */
void mk__pack_direct_setup(struct pack *p, uint64_t room)
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
			mk__pack_direct_off(sh);
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
		mk__pack_direct_off(d->sh);
		return mk_pwrite_all(d->sh->fd, d->buf + done, d->n - done, d->off + done, d->sh->name, err);
	}
	return direct_write_sync(p, d->sh, d->buf + done, d->off + done, d->n - done, err);
}

/* Wait for every write in flight; the first failure's error. */
int mk__pack_direct_drain(struct pack *p, struct mk_err *err)
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
int mk__pack_part_flush(struct pack *p, size_t i, struct mk_err *err)
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
int mk__pack_shard_write(struct pack *p, size_t i, uint64_t off, const uint8_t *data, size_t n,
			 struct mk_err *err)
{
	struct slot *sl = &p->slot[i];
	struct shard *sh = &p->sh[sl->shard];
	uint64_t t0 = sl->off, t1 = sl->off + p->man->tensors[i].nbytes;
	uint64_t a0 = (t0 + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN, a1 = t1 / DIRECT_ALIGN * DIRECT_ALIGN;
	uint64_t end = off + n, m0, m1;
	int rc;

	if (sh->dfd < 0 || a0 >= a1 || (!sl->part && !(sl->part = malloc(DIRECT_ALIGN)))) {
		if ((rc = mk__pack_part_flush(p, i, err)))   /* (direct writes turned off meanwhile) */
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
		if ((rc = mk__pack_part_flush(p, i, err)) || (rc = mk_pwrite_all(sh->fd, data, (size_t)k, m0, sh->name, err)))
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
