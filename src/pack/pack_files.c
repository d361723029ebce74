/* pack_files.c - mk-pack's FILE frames: names and sizes checked, contents
 * written to the partial directory. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "journal/journal.h"
#include "stream/piecewise.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "pack_impl.h"

int mk_pack_file_name_check(const char *name, struct mk_err *err)
{
	if (!strcmp(name, INDEX_NAME) || !strcmp(name, MK_JOURNAL_NAME) || !strncmp(name, "model.safetensors", 17) ||
	    (!strncmp(name, "model-", 6) && strstr(name, ".safetensors")))
		return mk_err_set(err, MK_EFORMAT, "'%s' would overwrite a weight file", name);
	return 0;
}

int mk_pack_basename(const struct mk_pack_opts *o, const char **out, struct mk_err *err)
{
	const char *b = o->basename ? o->basename : "model";
	size_t n = strlen(b);

	*out = b;
	if (!n || n > 64 || !strcmp(b, ".") || !strcmp(b, ".."))
		return mk_err_set(err, MK_EINVAL, "weight file name '%s': 1 to 64 characters, not . or ..", b);
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= 'A' && b[i] <= 'Z') || (b[i] >= '0' && b[i] <= '9') ||
		      b[i] == '_' || b[i] == '.' || b[i] == '-'))
			return mk_err_set(err, MK_EINVAL, "weight file name '%s': only letters, digits, '_', '.' and '-'",
					  b);
	return 0;
}

/* A FILE frame's name that this run's weight files (another basename
 * than mergekit's "model") would be overwritten by. */
static int own_name_check(const struct pack *p, const char *name, struct mk_err *err)
{
	const char *b;
	int rc = mk_pack_basename(p->o, &b, err);
	size_t n = strlen(b);

	if (rc)
		return rc;
	if (!strncmp(name, b, n) && (!strncmp(name + n, ".safetensors", 12) || (name[n] == '-' && strstr(name, ".safetensors"))))
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

/* A FILE frame, read piecewise (MK_SR_PIECEWISE_FILE): its name first,
 * checked against the HEAD, then its contents written to the partial
 * directory as they arrive; a payload whose checksum or size fails at the
 * end removes the file. */
int mk__pack_write_file_frame(struct pack *p, struct mk_stream_reader *r, const struct mk_frame *f,
			      struct mk_err *err)
{
	unsigned long long idx = (unsigned long long)f->index;
	uint8_t *buf = NULL;
	char name[PATH_MAX + 1];
	uint32_t mode;
	uint64_t size, wrote = 0;
	char *path = NULL;
	size_t have;
	int fd = -1, rc;

	if ((rc = mk_file_read_head(r, f, &mode, name, &size, err)))
		return rc;
	if ((rc = mk_pack_file_name_check(name, err)) || (rc = own_name_check(p, name, err)) ||
	    (rc = mk_pack_file_size_check(p->man, name, size, err)))
		return mk_err_prefix(err, "frame #%llu (FILE): ", idx);
	path = mk__pack_join(p->partial, name);
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
	if (p->in && !strcmp(name, "config.json") && (rc = mk__pack_quant_config(p, path, err)))
		goto out;
	p->st->nfiles++;
	p->st->bytes_written += wrote;
out:
	if (fd >= 0)
		close(fd);
	free(path);
	free(buf);
	return rc;
}
