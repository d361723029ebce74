/* err.c - the error record. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/err.h"

void mk_err_clear(struct mk_err *err)
{
	if (!err)
		return;
	err->code = 0;
	err->msg[0] = '\0';
}

int mk_err_set(struct mk_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
	}
	return -code;
}

int mk_err_sys(struct mk_err *err, int errnum, const char *fmt, ...)
{
	va_list ap;
	size_t n;
	int code = errnum == ENOSPC ? MK_ENOSPC :
		   errnum == ENOENT ? MK_ENOENT :
		   errnum == EEXIST ? MK_EEXIST : MK_EIO;

	if (err) {
		err->code = code;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
		n = strlen(err->msg);
		snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", strerror(errnum));
	}
	return -code;
}

int mk_err_prefix(struct mk_err *err, const char *fmt, ...)
{
	char pre[MK_ERR_MSG_MAX], old[MK_ERR_MSG_MAX];
	va_list ap;

	if (!err)
		return -MK_EIO;
	if (!err->code)
		err->code = MK_EIO;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* both parts fit MK_ERR_MSG_MAX; cut the joined message to it */
	size_t n = strlen(pre);
	if (n >= sizeof(err->msg))
		n = sizeof(err->msg) - 1;
	memcpy(err->msg, pre, n);
	size_t m = strlen(old);
	if (m > sizeof(err->msg) - 1 - n)
		m = sizeof(err->msg) - 1 - n;
	memcpy(err->msg + n, old, m);
	err->msg[n + m] = '\0';
	return -err->code;
}

const char *mk_err_name(int code)
{
	if (code < 0)
		code = -code;
	switch (code) {
	case MK_OK: return "success";
	case MK_EIO: return "I/O error";
	case MK_EFORMAT: return "format error";
	case MK_ENOMEM: return "out of memory";
	case MK_EINVAL: return "invalid argument";
	case MK_ENOENT: return "not found";
	case MK_ENOSPC: return "no space";
	case MK_EEXIST: return "already exists";
	case MK_EUNSUPPORTED: return "unsupported";
	case MK_ECORRUPT: return "corrupt data";
	case MK_EMISMATCH: return "mismatch";
	}
	return "unknown error";
}

void mk_bug(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	/* The one place libmk writes to stderr: an internal invariant broke,
	 * which is a bug in mk, never a user error. */
	fprintf(stderr, "BUG: %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}
