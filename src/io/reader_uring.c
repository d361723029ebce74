/* reader_uring.c - io_uring reads into one slab of qdepth + 1 slots,
 * registered as fixed buffers when the kernel allows it.  The queue
 * position is the slot and the user_data; short reads and -EAGAIN are
 * requeued for the remainder, a 0-byte read before the end is a
 * truncation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "reader_impl.h"
#include "core/bug.h"

static unsigned char *slot(struct mk_reader *r, unsigned p)
{
	return r->slab + (size_t)p * r->chunk;
}

static int uring_open(struct mk_reader *r, struct mk_err *err)
{
	struct iovec *iov = NULL;
	unsigned i;
	int rc = 0, e;

	if (posix_memalign((void **)&r->slab, 4096, (size_t)r->cap * r->chunk)) {
		r->slab = NULL;
		rc = mk_err_set(err, MK_ENOMEM, "uring reader: cannot allocate "
				"%u buffers of %zu bytes", r->cap, r->chunk);
		goto out;
	}
	iov = calloc(r->cap, sizeof(*iov));
	if (!iov) {
		rc = mk_err_set(err, MK_ENOMEM, "uring reader: out of memory");
		goto out;
	}
	for (i = 0; i < r->cap; i++) {
		iov[i].iov_base = slot(r, i);
		iov[i].iov_len = r->chunk;
	}
	e = mk__uring_register_hook(&r->ring, iov, r->cap);
	if (e >= 0) {
		r->fixed = 1;
		snprintf(r->backend, sizeof(r->backend), "uring (registered buffers)");
	} else {
		/* RLIMIT_MEMLOCK, EPERM, EFAULT: same slots, plain reads. */
		snprintf(r->backend, sizeof(r->backend), "uring (plain buffers)");
		snprintf(r->note, sizeof(r->note), "buffer registration refused "
			 "(%s); using plain io_uring reads", strerror(-e));
	}
out:
	free(iov);
	return rc;
}

/* Queue the (remaining) read of position p. */
static int queue_read(struct mk_reader *r, unsigned p, struct mk_err *err)
{
	struct rd_ent *e = &r->q[p];
	struct io_uring_sqe *sqe;
	unsigned char *buf = slot(r, p) + e->done;
	unsigned len = (unsigned)(e->req.len - e->done);
	uint64_t off = e->req.off + e->done;
	int rc = 0, n;

	sqe = io_uring_get_sqe(&r->ring);
	if (!sqe) {
		n = io_uring_submit(&r->ring);
		if (n < 0) {
			rc = mk_err_sys(err, -n, "uring reader: submit");
			goto out;
		}
		sqe = io_uring_get_sqe(&r->ring);
		if (!sqe)
			MK_BUG("io_uring: no sqe after submit");
	}
	if (r->fixed)
		io_uring_prep_read_fixed(sqe, e->req.fd, buf, len, off, (int)p);
	else
		io_uring_prep_read(sqe, e->req.fd, buf, len, off);
	io_uring_sqe_set_data64(sqe, p);
	r->inflight++;
out:
	return rc;
}

static int uring_issue(struct mk_reader *r, unsigned p, struct mk_err *err)
{
	r->q[p].state = RD_QUEUED;
	return queue_read(r, p, err);
}

static int uring_flush(struct mk_reader *r, struct mk_err *err)
{
	int n = io_uring_submit(&r->ring);

	return n < 0 ? mk_err_sys(err, -n, "uring reader: submit") : 0;
}

/* Account one completion; requeue what is left of a short read. */
static int complete(struct mk_reader *r, const struct io_uring_cqe *cqe,
		    struct mk_err *err)
{
	unsigned p = (unsigned)io_uring_cqe_get_data64(cqe);
	struct rd_ent *e;
	int res = cqe->res, rc = 0;

	if (p >= r->cap)
		MK_BUG("io_uring: completion for slot %u of %u", p, r->cap);
	e = &r->q[p];
	r->inflight--;
	if (res == -EAGAIN || res == -EINTR) {
		rc = queue_read(r, p, err);
	} else if (res <= 0) {
		e->state = RD_FAILED;
		e->res = res;
	} else {
		e->done += (size_t)res;
		if (e->done < e->req.len)
			rc = queue_read(r, p, err);
		else
			e->state = RD_READY;
	}
	return rc;
}

/* Wait for one completion (submitting what is queued), then take every
 * completion that is there. */
static int reap(struct mk_reader *r, struct mk_err *err)
{
	struct io_uring_cqe *cqe;
	int rc = 0, n;

	n = io_uring_submit_and_wait(&r->ring, 1);
	if (n < 0 && n != -EINTR && n != -EAGAIN && n != -EBUSY) {
		rc = mk_err_sys(err, -n, "uring reader: wait");
		goto out;
	}
	while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
		struct io_uring_cqe c = *cqe;

		io_uring_cqe_seen(&r->ring, cqe);
		rc = complete(r, &c, err);
		if (rc < 0)
			goto out;
	}
out:
	return rc;
}

static int uring_wait(struct mk_reader *r, unsigned p, const void **data,
		      struct mk_err *err)
{
	struct rd_ent *e = &r->q[p];
	int rc = 0;

	while (e->state == RD_QUEUED) {
		rc = reap(r, err);
		if (rc < 0)
			goto out;
	}
	if (e->state == RD_FAILED) {
		rc = e->res == 0 ? mk__rd_truncated(&e->req, e->done, err) :
		     mk__rd_sys(&e->req, -e->res, "read", err);
		goto out;
	}
	*data = slot(r, p);
out:
	return rc;
}

static void uring_close(struct mk_reader *r)
{
	struct io_uring_cqe *cqe;

	/* The kernel may still be writing into the slab: wait for every
	 * read before it is freed. */
	while (r->have_ring && r->inflight) {
		int n = io_uring_submit_and_wait(&r->ring, 1);

		if (n < 0 && n != -EINTR && n != -EAGAIN && n != -EBUSY)
			break;
		while (io_uring_peek_cqe(&r->ring, &cqe) == 0) {
			io_uring_cqe_seen(&r->ring, cqe);
			r->inflight--;
		}
	}
	if (r->inflight) {
		/* Cannot happen short of a broken ring; leaking the slab is
		 * safer than freeing memory the kernel may still write. */
		r->slab = NULL;
	}
	if (r->fixed)
		io_uring_unregister_buffers(&r->ring);
	free(r->slab);
	r->slab = NULL;
}

const struct rd_ops mk__rd_uring_ops = {
	.open = uring_open,
	.issue = uring_issue,
	.flush = uring_flush,
	.wait = uring_wait,
	.close = uring_close,
};
