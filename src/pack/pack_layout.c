/* pack_layout.c - mk-pack's output layout: the shards (mergekit's greedy
 * assignment), their names and headers, the space they need, the index. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "stream/manifest.h"
#include "io/safetensors.h"
#include "journal/outlock.h"
#include "pack_impl.h"

char *mk__pack_join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", a, b);
	return p;
}

int mk_pack_check_out(const struct mk_pack_opts *o, const struct mk_out_lock *held, struct mk_err *err)
{
	struct mk_out_lock probe;
	struct stat sb;
	bool earlier;
	int rc;

	/* another run writing OUT first: then OUT.mk-partial is its */
	if (!held && (rc = mk_out_lock(o->out_dir, &probe, err))) {
		mk_out_unlock(&probe);
		return rc;
	}
	/* an OUT.mk-partial the lock did not make is an earlier run's; one
	 * whose lock this process inherited was looked at by its taker */
	earlier = held ? held->owner && !held->made : probe.owner && !probe.made;
	if (!held)
		mk_out_unlock(&probe);
	if (!o->force && lstat(o->out_dir, &sb) == 0)
		return mk_err_set(err, MK_EEXIST, "%s already exists; use --force to replace it", o->out_dir);
	if (!o->force && !o->resume && earlier) {
		char *partial = mk_out_partial_name(o->out_dir);
		rc = mk_err_set(err, MK_EEXIST,
				"%s exists: an earlier run into %s did not finish; remove that directory (or use --force) to start over%s",
				partial ? partial : "OUT.mk-partial", o->out_dir,
				o->resumable ? ", or continue it with --resume" : "");
		free(partial);
		return rc;
	}
	return 0;
}

/* Greedy shard assignment in manifest order, as mergekit's writer. */
int mk__pack_assign_shards(struct pack *p, struct mk_err *err)
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
	const char *base;
	int rc = mk_pack_basename(p->o, &base, err);
	if (rc)
		return rc;
	for (size_t s = 0; s < n; s++) {
		p->sh[s].fd = -1;
		p->sh[s].dfd = -1;
		if (n == 1)
			snprintf(p->sh[s].name, sizeof(p->sh[s].name), "%s.safetensors", base);
		else
			snprintf(p->sh[s].name, sizeof(p->sh[s].name), "%s-%05zu-of-%05zu.safetensors", base,
				 s + 1, n);
	}
	return 0;
}

/* Build each shard's header; fills sizes and the tensors' offsets. */
int mk__pack_build_headers(struct pack *p, uint8_t ***hdrs, size_t **hlens, struct mk_err *err)
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

int mk__pack_check_space(struct pack *p, const char *dir, struct mk_err *err)
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

int mk__pack_write_index(struct pack *p, struct mk_err *err)
{
	struct mk_sbuf b = { 0 };
	char *path = NULL;
	int fd = -1, rc = 0;

	/* as Python's json.dump(indent=2) writes it (ASCII escapes in
	 * lower-case hex, no newline at the end), the form of mergekit's
	 * model.safetensors.index.json */
	mk_sbuf_fmt(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {",
		    (unsigned long long)p->st->tensor_bytes);
	for (size_t i = 0; i < p->man->ntensors; i++) {
		const char *name = p->man->tensors[i].name, *shard = p->sh[p->slot[i].shard].name;
		mk_sbuf_str(&b, i ? ",\n    " : "\n    ");
		mk_json_put_ascii_string(&b, name, strlen(name));
		mk_sbuf_str(&b, ": ");
		mk_json_put_ascii_string(&b, shard, strlen(shard));
	}
	mk_sbuf_str(&b, p->man->ntensors ? "\n  }\n}" : "}\n}");
	const char *base;
	if ((rc = mk_pack_basename(p->o, &base, err))) {
		free(b.p);
		return rc;
	}
	char iname[128];
	snprintf(iname, sizeof(iname), "%s.safetensors.index.json", base);
	path = mk__pack_join(p->partial, iname);
	if (b.oom || !path) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = mk_err_sys(err, errno, "%s", path);
		goto out;
	}
	rc = mk_write_all(fd, b.p, b.n, path, err);
	if (!rc && fsync(fd) < 0)
		rc = mk_err_sys(err, errno, "%s: fsync", path);
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(b.p);
	return rc;
}
