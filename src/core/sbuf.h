/* sbuf.h - a growing text buffer for the places that write text (config
 * files, the model card, messages): appends never fail one by one; an
 * allocation failure sets oom, later appends do nothing, and the writer
 * checks oom once at the end.  p is NUL-terminated whenever it is not
 * NULL; the caller owns it (free). */
#ifndef MK_SBUF_H
#define MK_SBUF_H

#include <stdbool.h>
#include <stddef.h>

struct mk_sbuf {
	char *p;
	size_t n, cap;
	bool oom;
};

/* Free an array of n malloc'ed strings and the array (NULL: nothing). */
void mk_strv_free(char **v, size_t n);
/* Whether two arrays hold the same strings in the same order. */
bool mk_strv_eq(char *const *a, size_t na, char *const *b, size_t nb);
/* Whether two strings are equal, NULL equal only to NULL. */
bool mk_str_eq(const char *a, const char *b);

void mk_sbuf_add(struct mk_sbuf *b, const void *s, size_t n);
void mk_sbuf_str(struct mk_sbuf *b, const char *s);
/* printf into the buffer, of any length */
void mk_sbuf_fmt(struct mk_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
