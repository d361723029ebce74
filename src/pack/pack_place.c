/* pack_place.c - a finished output directory put in place of OUT: the
 * last step of mk-pack, and of a program that finishes mk-pack's output
 * before OUT appears (mk-extract-lora). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "pack/pack.h"

int mk_pack_put_in_place(const char *done, const char *out, bool force, char *warning, size_t wlen,
			 struct mk_err *err)
{
	char *old = NULL;
	struct stat sb;
	int rc = 0;

	if (force && lstat(out, &sb) == 0) {
		/* move the old OUT aside first, so OUT is never half old, half new */
		if (asprintf(&old, "%s.mk-old.%ld", out, (long)getpid()) < 0)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		if (rename(out, old) < 0) {
			rc = mk_err_sys(err, errno, "%s: moving the old output aside", out);
			goto out;
		}
	}
	if (rename(done, out) < 0) {
		rc = mk_err_sys(err, errno, "rename %s -> %s", done, out);
		goto out;
	}
	if (old) {
		struct mk_err e = { 0 };
		if (mk_rmtree(old, &e) && wlen)
			snprintf(warning, wlen, "%s is complete, but the old output moved aside to %s could not be removed: %s",
				 out, old, e.msg);
	}
	/* make the rename durable */
	char *parent = mk_path_parent(out);
	if (parent) {
		struct mk_err e = { 0 };
		if (mk_fsync_dir(parent, &e) && wlen && !warning[0])
			snprintf(warning, wlen, "%s is complete, but the rename that put it in place may not survive a crash: %s",
				 out, e.msg);
		free(parent);
	}
out:
	free(old);
	return rc;
}
