/* pack.c - mk-pack: a "tensors" stream -> sharded safetensors + files. */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <jansson.h>
#include "mk/fsutil.h"
#include "mk/hash.h"
#include "mk/manifest.h"
#include "mk/pack.h"
#include "mk/safetensors.h"
#include "mk/stream.h"

#define INDEX_NAME "model.safetensors.index.json"
#define JOURNAL_NAME ".mk-journal"

struct shard {
	char name[64];
	int fd;
	uint64_t size;           /* file size: header + data */
	uint64_t data_start;
};

struct slot {                    /* where a manifest tensor goes */
	size_t shard;
	uint64_t off;            /* file offset of its first byte */
	uint64_t got;            /* elements received so far */
	bool done;
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

static char *partial_name(const char *out)
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
	char *partial = partial_name(o->out_dir);
	int rc = 0;

	if (!partial)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!o->force && lstat(o->out_dir, &sb) == 0)
		rc = mk_err_set(err, MK_EEXIST, "%s already exists; use --force to replace it", o->out_dir);
	else if (!o->force && lstat(partial, &sb) == 0)
		rc = mk_err_set(err, MK_EEXIST,
				"%s exists: an earlier mk-pack into %s did not finish; remove it or use --force",
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

static int open_shards(struct pack *p, uint8_t **hdrs, size_t *hlens, struct mk_err *err)
{
	for (size_t s = 0; s < p->nshards; s++) {
		struct shard *sh = &p->sh[s];
		char *path = join(p->partial, sh->name);
		int rc;

		if (!path)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		sh->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
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
		free(path);
		if (rc)
			return rc;
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
		int len = snprintf(line, sizeof(line), "done %zu %s\n", i, p->man->tensors[i].name);
		if (len >= (int)sizeof(line))
			len = snprintf(line, sizeof(line), "done %zu\n", i);
		int rc = mk_write_all(p->jfd, line, (size_t)len, JOURNAL_NAME, err);
		if (rc)
			return rc;
	}
	if (fdatasync(p->jfd) < 0)
		return mk_err_sys(err, errno, "%s/%s: fdatasync", p->partial, JOURNAL_NAME);
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
	} else if (!sy->busy) {
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
	if (!strcmp(name, INDEX_NAME) || !strcmp(name, JOURNAL_NAME) || !strncmp(name, "model.safetensors", 17) ||
	    (!strncmp(name, "model-", 6) && strstr(name, ".safetensors")))
		return mk_err_set(err, MK_EFORMAT, "'%s' would overwrite a weight file", name);
	return 0;
}

static int write_file_frame(struct pack *p, const struct mk_frame *f, struct mk_err *err)
{
	struct mk_file_frame ff;
	char *path = NULL;
	int fd = -1, rc;

	rc = mk_file_decode(f->payload, f->payload_len, &ff, err);
	if (rc)
		return mk_err_prefix(err, "frame #%llu (FILE): ", (unsigned long long)f->index);
	if ((rc = mk_pack_file_name_check(ff.name, err))) {
		mk_err_prefix(err, "frame #%llu (FILE): ", (unsigned long long)f->index);
		goto out;
	}
	path = join(p->partial, ff.name);
	if (!path) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = mk_mkdirs_for(path, err);
	if (rc)
		goto out;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (ff.mode & 0777) ? (ff.mode & 0777) : 0644);
	if (fd < 0) {
		rc = errno == EEXIST ?
			mk_err_set(err, MK_EFORMAT, "frame #%llu (FILE): '%s' sent twice",
				   (unsigned long long)f->index, ff.name) :
			mk_err_sys(err, errno, "%s", path);
		goto out;
	}
	rc = mk_write_all(fd, ff.data, ff.len, path, err);
	if (rc)
		goto out;
	if (fsync(fd) < 0) {
		rc = mk_err_sys(err, errno, "%s: fsync", path);
		goto out;
	}
	p->st->nfiles++;
	p->st->bytes_written += ff.len;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(ff.name);
	return rc;
}

static int write_chunk(struct pack *p, const struct mk_frame *f, struct mk_err *err)
{
	struct mk_chunk c;
	const struct mk_manifest_tensor *t;
	struct slot *sl;
	struct shard *sh;
	uint64_t boff;
	int rc;

	rc = mk_chunk_decode(f->payload, f->payload_len, &c, err);
	if (rc)
		return mk_err_prefix(err, "frame #%llu (DATA): ", (unsigned long long)f->index);
	if ((rc = mk_chunk_check_data(p->man, &c, err)))
		return mk_err_prefix(err, "frame #%llu: ", (unsigned long long)f->index);
	t = &p->man->tensors[c.id];
	sl = &p->slot[c.id];
	if (c.elem_begin != sl->got)
		return mk_err_set(err, MK_EFORMAT,
				  "frame #%llu (DATA): tensor '%s': chunk [%llu, +%llu) out of order or out of range (expected element %llu of %llu)",
				  (unsigned long long)f->index, t->name, (unsigned long long)c.elem_begin,
				  (unsigned long long)c.elem_count, (unsigned long long)sl->got,
				  (unsigned long long)t->nelem);
	sh = &p->sh[sl->shard];
	boff = c.elem_begin * mk_dtype_bits(t->desc.dtype) / 8;
	rc = mk_pwrite_all(sh->fd, c.data, c.data_len, sl->off + boff, sh->name, err);
	if (rc)
		return rc;
	sl->got += c.elem_count;
	p->done_bytes += c.data_len;
	p->st->bytes_written += c.data_len;
	if (sl->got == t->nelem) {
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
	jpath = join(p->partial, JOURNAL_NAME);
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
	if (old)
		rc = mk_rmtree(old, err);
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
			(void)mk_fsync_dir(parent, NULL);
			free(parent);
		}
	}
out:
	free(jpath);
	free(old);
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
	bool made = false;
	int rc;

	memset(st, 0, sizeof(*st));
	rc = mk_pack_check_out(o, err);
	if (rc)
		return rc;
	p.partial = partial_name(o->out_dir);
	if (!p.partial)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rc = mk_sr_open(&r, in_fd, label, 0, err);
	if (rc)
		goto out;
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
		uint8_t hh[32];
		char hex[65], line[160];
		mk_sha256(f.payload, f.payload_len, hh);
		mk_hex(hh, 32, hex);
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
		rc = check_space(&p, parent, err);
		if (rc)
			goto out;
		if (o->force) {
			rc = mk_rmtree(p.partial, err);
			if (rc)
				goto out;
		}
		if (mkdir(p.partial, 0755) < 0) {
			rc = mk_err_sys(err, errno, "%s: cannot create the output", p.partial);
			goto out;
		}
		made = true;
		char *jpath = join(p.partial, JOURNAL_NAME);
		if (!jpath) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		p.jfd = open(jpath, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
		if (p.jfd < 0)
			rc = mk_err_sys(err, errno, "%s", jpath);
		free(jpath);
		if (rc)
			goto out;
		int n = snprintf(line, sizeof(line), "mk-pack journal 1\nhead-sha256 %s\nshard-size %llu\n", hex,
				 (unsigned long long)o->shard_size);
		rc = mk_write_all(p.jfd, line, (size_t)n, JOURNAL_NAME, err);
		if (rc)
			goto out;
		p.finished = malloc((p.man->ntensors ? p.man->ntensors : 1) * sizeof(*p.finished));
		if (!p.finished) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		rc = open_shards(&p, hdrs, hlens, err);
		if (rc)
			goto out;
		st->nshards = p.nshards;
	}
	/* tensors with no elements are complete already */
	for (size_t i = 0; i < p.man->ntensors; i++)
		if (p.man->tensors[i].nelem == 0) {
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
			rc = write_chunk(&p, &f, err);
		else if (!strcmp(f.type, MK_FT_FILE))
			rc = write_file_frame(&p, &f, err);
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
	syncer_stop(&p);
	if (rc && made && !o->keep_partial) {
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
		if (hdrs)
			free(hdrs[s]);
	}
	free(hdrs);
	free(hlens);
	free(p.sh);
	free(p.slot);
	free(p.finished);
	free(p.sy.batch);
	free(parent);
	free(p.partial);
	mk_manifest_free(p.man);
	mk_sr_free(r);
	return rc;
}
