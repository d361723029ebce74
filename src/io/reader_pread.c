/* reader_pread.c - one pread loop per extent into a single slot, with
 * POSIX_FADV_WILLNEED on each extent as it is queued so the kernel's
 * readahead runs ahead of the consumer.  Needs nothing but read(2). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "reader_impl.h"

static int pread_open(struct mk_reader *r, struct mk_err *err)
{
	int rc = 0;

	if (posix_memalign((void **)&r->slab, 4096, r->chunk)) {
		r->slab = NULL;
		rc = mk_err_set(err, MK_ENOMEM, "pread reader: cannot allocate "
				"%zu bytes", r->chunk);
		goto out;
	}
	snprintf(r->backend, sizeof(r->backend), "pread");
out:
	return rc;
}

static int pread_issue(struct mk_reader *r, unsigned p, struct mk_err *err)
{
	const struct mk_read_req *q = &r->q[p].req;

	/* Advice: failure (a pipe, a file system without it) is harmless;
	 * none for pages the cache has */
	if (!mk__rd_cached(r, q->fd, q->off, q->len))
		(void)posix_fadvise(q->fd, (off_t)q->off, (off_t)q->len,
			    POSIX_FADV_WILLNEED);
	return 0;
}

static int pread_wait(struct mk_reader *r, unsigned p, const void **data,
		      struct mk_err *err)
{
	int rc = mk__rd_pread(&r->q[p].req, r->slab, err);

	if (rc == 0)
		*data = r->slab;
	return rc;
}

static void pread_close(struct mk_reader *r)
{
	free(r->slab);
	r->slab = NULL;
}

const struct rd_ops mk__rd_pread_ops = {
	.open = pread_open,
	.issue = pread_issue,
	.wait = pread_wait,
	.close = pread_close,
};
