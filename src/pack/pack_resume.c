/* pack_resume.c - mk-pack --resume: what a partial directory holds, checked
 * against its journal, and what the stream writes again removed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "journal/journal.h"
#include "stream/manifest.h"
#include "pack_impl.h"

/* Resume: check every tensor the journal lists against its CRC-32C in
 * the shard file (read-only, before anything changes), then mark it done. */
int mk__pack_resume_verify(struct pack *p, const struct mk_journal *j, struct mk_err *err)
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
			char *path = mk__pack_join(p->partial, sh->name);
			if (!path) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			struct mk_err e = { 0 };
			fds[sl->shard] = mk_file_open(path, NULL, &e);
			if (fds[sl->shard] < 0)
				rc = mk_err_set(err, e.code,
						"%s (its journal says tensor '%s' is written there); remove %s to start over",
						e.msg, t->name, p->partial);
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
int mk__pack_resume_clean(struct pack *p, struct mk_err *err)
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
		char *path = mk__pack_join(p->partial, e->d_name);
		rc = path ? mk_rmtree(path, err) : mk_err_set(err, MK_ENOMEM, "out of memory");
		free(path);
	}
	closedir(d);
	return rc;
}
