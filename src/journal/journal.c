/* journal.c - an output directory's journal read, checked and its
 * lines formatted (journal.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "journal/journal.h"
#include "stream/manifest.h"

#define JOURNAL_MAGIC "mk-pack journal 2\n"

static char *join(const char *a, const char *b)
{
	size_t n = strlen(a) + strlen(b) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", a, b);
	return p;
}

int mk_journal_stream_key(const struct mk_manifest *m, char hex[65], struct mk_err *err)
{
	struct mk_manifest c = *m; /* shallow: only the cleared fields differ */
	char *json = NULL;
	size_t len;
	uint8_t h[32];
	int rc;

	c.kind = (char *)"tensors";
	c.producer = (char *)"";
	c.chunk_bytes = 0;
	c.njobs = 0;
	c.held_bytes_max = 0;
	c.spilled_jobs = 0;
	rc = mk_manifest_encode(&c, &json, &len, err);
	if (rc)
		return rc;
	mk_sha256(json, len, h);
	mk_hex(h, 32, hex);
	free(json);
	return 0;
}

void mk_journal_free(struct mk_journal *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->ndone; i++)
		free(j->done[i].name);
	free(j->done);
	free(j);
}

static int journal_parse(struct mk_journal *j, const char *path, const char *text, size_t len,
			 struct mk_err *err)
{
	const char *at = text, *end = text + len;
	size_t lineno = 0, cap = 0;
	char key[65] = "";
	uint64_t shard = 0;

	while (at < end) {
		const char *nl = memchr(at, '\n', (size_t)(end - at));
		if (!nl)
			break; /* torn last line: never synced */
		size_t n = (size_t)(nl - at);
		char *line = strndup(at, n);
		if (!line)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		lineno++;
		int ok = 1;
		if (lineno == 1) {
			ok = !strcmp(line, "mk-pack journal 2");
		} else if (lineno == 2) {
			ok = sscanf(line, "stream-sha256 %64[0-9a-f]", key) == 1 && strlen(key) == 64;
		} else if (lineno == 3) {
			unsigned long long v;
			char tail;
			ok = sscanf(line, "shard-size %llu%c", &v, &tail) == 1;
			shard = v;
		} else {
			unsigned long long idx;
			unsigned crc;
			int off = 0;
			ok = sscanf(line, "done %llu %8x%n", &idx, &crc, &off) == 2 && (line[off] == '\0' || line[off] == ' ');
			if (ok) {
				if (j->ndone == cap) {
					size_t nc = cap ? 2 * cap : 64;
					struct mk_journal_done *q = realloc(j->done, nc * sizeof(*q));
					if (!q) {
						free(line);
						return mk_err_set(err, MK_ENOMEM, "out of memory");
					}
					j->done = q;
					cap = nc;
				}
				struct mk_journal_done *d = &j->done[j->ndone];
				d->index = (size_t)idx;
				d->crc32c = crc;
				d->name = line[off] == ' ' ? strdup(line + off + 1) : NULL;
				if (line[off] == ' ' && !d->name) {
					free(line);
					return mk_err_set(err, MK_ENOMEM, "out of memory");
				}
				j->ndone++;
			}
		}
		free(line);
		if (!ok)
			return mk_err_set(err, MK_EFORMAT,
					  "%s: line %zu: not a journal this mk-pack writes (an older version, or a damaged file); remove the partial directory to start over",
					  path, lineno);
		at = nl + 1;
		if (lineno == 3) {
			memcpy(j->key, key, sizeof(key));
			j->shard_size = shard;
		}
		j->valid_len = (size_t)(at - text);
	}
	if (lineno < 3) {
		/* the header never reached the disk whole: nothing is recorded */
		j->key[0] = '\0';
		j->valid_len = 0;
	}
	return 0;
}

int mk_journal_parse(const char *text, size_t len, const char *label, struct mk_journal **out,
			  struct mk_err *err)
{
	struct mk_journal *j = calloc(1, sizeof(*j));
	int rc;

	*out = NULL;
	if (!j)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rc = journal_parse(j, label, text, len, err);
	if (rc)
		mk_journal_free(j);
	else
		*out = j;
	return rc;
}

int mk_journal_read(const char *partial, struct mk_journal **out, struct mk_err *err)
{
	struct mk_journal *j = calloc(1, sizeof(*j));
	char *path = join(partial, MK_JOURNAL_NAME);
	uint8_t *text = NULL;
	size_t len = 0;
	struct stat sb;
	int rc = 0;

	*out = NULL;
	if (!j || !path) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (lstat(path, &sb) < 0) {
		if (errno != ENOENT && errno != ENOTDIR)
			rc = mk_err_sys(err, errno, "%s", path);
		goto out; /* no journal: nothing done */
	}
	if (!S_ISREG(sb.st_mode)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: not a regular file; remove the partial directory to start over",
				path);
		goto out;
	}
	rc = mk_file_read(path, (size_t)1 << 30, &text, &len, err);
	if (!rc) {
		mk_journal_free(j);
		j = NULL;
		rc = mk_journal_parse((const char *)text, len, path, &j, err);
	}
out:
	free(text);
	free(path);
	if (rc)
		mk_journal_free(j);
	else
		*out = j;
	return rc;
}

int mk_journal_check(const struct mk_journal *j, const char *partial,
			  const struct mk_manifest *m, uint64_t shard_size, struct mk_err *err)
{
	char key[65];
	int rc;

	if (!j->key[0])
		return 0;
	rc = mk_journal_stream_key(m, key, err);
	if (rc)
		return rc;
	if (strcmp(key, j->key))
		return mk_err_set(err, MK_EMISMATCH,
				  "%s was started for another merge (its journal records another stream: other models, tensors, files or seed); remove that directory, or use --force without --resume, to start over",
				  partial);
	if (shard_size != UINT64_MAX && shard_size != j->shard_size)
		return mk_err_set(err, MK_EMISMATCH,
				  "%s was started with --out-shard-size %llu, this run has %llu; resume with the same shard size, or remove that directory to start over",
				  partial, (unsigned long long)j->shard_size, (unsigned long long)shard_size);
	for (size_t k = 0; k < j->ndone; k++) {
		const struct mk_journal_done *d = &j->done[k];
		if (d->index >= m->ntensors || (d->name && strcmp(d->name, m->tensors[d->index].name)))
			return mk_err_set(err, MK_EMISMATCH,
					  "%s: the journal lists tensor %zu as '%s', the stream has %s; remove that directory to start over",
					  partial, d->index, d->name ? d->name : "(no name)",
					  d->index < m->ntensors ? m->tensors[d->index].name : "fewer tensors");
	}
	return 0;
}

int mk_journal_header(char *buf, size_t size, const char *key, uint64_t shard_size)
{
	return snprintf(buf, size, JOURNAL_MAGIC "stream-sha256 %s\nshard-size %llu\n", key,
			(unsigned long long)shard_size);
}

int mk_journal_done_line(char *buf, size_t size, size_t index, uint32_t crc32c, const char *name)
{
	int len = snprintf(buf, size, "done %zu %08" PRIx32 " %s\n", index, crc32c, name);

	if (len >= (int)size)
		len = snprintf(buf, size, "done %zu %08" PRIx32 "\n", index, crc32c);
	return len;
}
