/* err.c - the error record. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/err.h"
#include "core/text.h"
#include "core/bug.h"

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
	/* a context that does not end in a separator gets ": " (": " after a
	 * colon's missing space), so that no caller runs the two together */
	if (n && old[0] && pre[n - 1] != ' ' && n + 2 < sizeof(pre)) {
		if (pre[n - 1] != ':')
			pre[n++] = ':';
		pre[n++] = ' ';
		pre[n] = '\0';
	}
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

/* ------------------------------------------------------------ printable names */

/* Length of the UTF-8 character at s[0..left), 0 when it is not one or
 * is a control character (C0, DEL, C1). */
static size_t printable_char(const unsigned char *s, size_t left)
{
	unsigned c = s[0], cp;
	size_t n;

	if (c < 0x20 || c == 0x7f)
		return 0;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n > left)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f))
		return 0;
	return n;
}

bool mk_text_printable(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < len;) {
		size_t n = printable_char(u + i, len - i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

const char *mk_text_escape(const char *s, size_t len, char *buf, size_t size)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t o = 0;

	if (!s)
		return "(null)";
	if (len == (size_t)-1) {
		len = strlen(s);
		if (mk_text_printable(s, len))
			return s;
	}
	if (!buf || size == 0)
		return "";
	for (size_t i = 0; i < len;) {
		size_t n = printable_char(u + i, len - i);
		char esc[8];
		const char *piece = esc;
		size_t pl;
		if (n) {
			piece = s + i;
			pl = n;
		} else {
			n = 1;
			pl = (size_t)snprintf(esc, sizeof(esc), u[i] == '\n' ? "\\n" : u[i] == '\r' ? "\\r" :
					      u[i] == '\t' ? "\\t" : "\\x%02x", u[i]);
		}
		if (o + pl + 4 > size && i + n < len) {
			/* no room for this piece and a cut mark after it */
			if (o + 3 < size)
				memcpy(buf + o, "...", 3), o += 3;
			break;
		}
		if (o + pl + 1 > size) {
			if (o + 3 < size)
				memcpy(buf + o, "...", 3), o += 3;
			break;
		}
		memcpy(buf + o, piece, pl);
		o += pl;
		i += n;
	}
	buf[o < size ? o : size - 1] = '\0';
	return buf;
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
