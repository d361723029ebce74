/* spill.c - mk-merge's replay record: the chunks of a job sent once,
 * recorded in memory (held jobs) or in a spill file (--spill DIR) and read
 * back for its later passes (see struct spill in merge_impl.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "merge_impl.h"

int mk__spill_open(struct spill *sp, const char *dir, struct mk_err *err)
{
	sp->dir = dir;
	if (mk_tmpfile_open(dir, "a spill file", &sp->fd, err))
		return mk_err_prefix(err, "--spill: ");
	return 0;
}

void mk__spill_close(struct spill *sp)
{
	mk__spill_reset(sp);
	if (sp->fd >= 0)
		close(sp->fd);
	sp->fd = -1;
	free(sp->rec);
	free(sp->buf);
	free(sp->m);
}

int mk__spill_put(struct spill *sp, const struct mk_chunk *c, struct mk_frame_keep *keep, const void **stored,
		  struct mk_err *err)
{
	*stored = NULL;
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 64;
		struct spill_rec *q = realloc(sp->rec, cap * sizeof(*q));
		if (!q)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		sp->rec = q;
		sp->cap = cap;
	}
	struct spill_rec *e = &sp->rec[sp->n];
	e->c = *c;
	e->c.data = NULL;
	e->off = sp->end;
	e->at = NULL;
	e->keep = (struct mk_frame_keep){ 0 };
	/* reserved for the job's inputs (spill_reserve): never moves, so the
	 * job may keep pointers into it */
	if (sp->fd < 0 && sp->end + c->data_len > sp->mcap)
		return mk_err_set(err, MK_EFORMAT, "a held job's inputs came to more than their %llu bytes",
				  (unsigned long long)sp->mcap);
	if (sp->fd < 0 && keep && keep->map) {
		/* lent: the mapping is the record's until the job ends */
		e->keep = *keep;
		*keep = (struct mk_frame_keep){ 0 };
		e->at = c->data;
		*stored = c->data;
	} else if (sp->fd < 0) {
		memcpy(sp->m + sp->end, c->data, c->data_len);
		e->at = sp->m + sp->end;
		*stored = e->at;
	} else {
		e->crc = mk_crc32c(0, c->data, c->data_len);
		int rc = mk_pwrite_all(sp->fd, c->data, c->data_len, sp->end, sp->dir, err);
		if (rc)
			return mk_err_prefix(err, "--spill: ");
	}
	sp->end += c->data_len;
	sp->n++;
	if (sp->end > sp->bytes_max)
		sp->bytes_max = sp->end;
	return 0;
}

/* Record i of the current job, read back and checked. */
int mk__spill_get(struct spill *sp, size_t i, struct mk_chunk *c, struct mk_err *err)
{
	struct spill_rec *e = &sp->rec[i];
	size_t len = e->c.data_len;

	if (sp->fd < 0) {
		*c = e->c;
		c->data = e->at;
		return 0;
	}
	if (len > sp->buf_cap) {
		void *q = realloc(sp->buf, len);
		if (!q)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		sp->buf = q;
		sp->buf_cap = len;
	}
	if (mk_pread_exact(sp->fd, sp->buf, len, e->off, "the spill file", err))
		return mk_err_prefix(err, "--spill %s: ", sp->dir);
	if (mk_crc32c(0, sp->buf, len) != e->crc)
		return mk_err_set(err, MK_ECORRUPT, "--spill %s: a chunk read back differs from the one written "
				  "(CRC-32C); the disk or file system under it is faulty", sp->dir);
	*c = e->c;
	c->data = sp->buf;
	return 0;
}

/* In memory: room for `need` bytes of the job about to start (empty). */
int mk__spill_reserve(struct spill *sp, uint64_t need, struct mk_err *err)
{
	if (sp->fd >= 0 || need <= sp->mcap)
		return 0;
	free(sp->m);
	sp->mcap = 0;
	if (!(sp->m = malloc(need)))
		return mk_err_set(err, MK_ENOMEM, "out of memory holding a job (%llu bytes)", (unsigned long long)need);
	sp->mcap = need;
	return 0;
}

/* Empty the file for the next job. */
void mk__spill_reset(struct spill *sp)
{
	for (size_t i = 0; i < sp->n; i++)
		mk_frame_keep_release(&sp->rec[i].keep);
	sp->n = 0;
	sp->end = 0;
	if (sp->fd >= 0 && ftruncate(sp->fd, 0)) {
		/* the next job overwrites from offset 0 anyway */
	}
}
