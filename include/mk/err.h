/* err.h - error codes and the error record filled by every libmk call.
 *
 * Convention: a libmk function returns 0 on success and a negative MK_E*
 * code on failure; when it fails and its `err` argument is not NULL it
 * fills `err->msg` with a message a user can act on (which file, which
 * tensor, what was expected).  The library never prints and never exits;
 * only the programs in cmd/ turn an error into a message and an exit code.
 */
#ifndef MK_ERR_H
#define MK_ERR_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/api.h"

enum mk_errcode {
	MK_OK = 0,
	MK_EIO = 1,        /* a system call failed (read, write, open, ...) */
	MK_EFORMAT = 2,    /* malformed input: safetensors, index, stream, JSON */
	MK_ENOMEM = 3,     /* allocation failed */
	MK_EINVAL = 4,     /* bad argument or option value */
	MK_ENOENT = 5,     /* a file, model or tensor does not exist */
	MK_ENOSPC = 6,     /* not enough space on the output file system */
	MK_EEXIST = 7,     /* output exists and --force was not given */
	MK_EUNSUPPORTED = 8, /* valid but not supported (yet) */
	MK_ECORRUPT = 9,   /* checksum mismatch, truncated stream */
	MK_EMISMATCH = 10, /* inputs disagree (duplicate tensor, size/hash differs) */
};

#define MK_ERR_MSG_MAX 1024

struct mk_err {
	int code;                 /* positive MK_E* code, 0 when clear */
	char msg[MK_ERR_MSG_MAX]; /* NUL-terminated message, no trailing newline */
};

/* Clear an error record (code 0, empty message).  NULL is allowed. */
MK_API void mk_err_clear(struct mk_err *err);

/* Fill `err` (if not NULL) with `code` and a printf-style message.
 * Returns -code so callers can write `return mk_err_set(err, ...)`. */
MK_API int mk_err_set(struct mk_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like mk_err_set, appending ": strerror(errnum)". */
MK_API int mk_err_sys(struct mk_err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prepend context ("file 'x': ") to an already-set message; a context
 * that does not end in a space gets ": " (or " " after a colon).  Returns
 * the record's negative code (or -MK_EIO if the record was clear). */
MK_API int mk_err_prefix(struct mk_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A short name for a code ("format error", ...). */
MK_API const char *mk_err_name(int code);

#endif
