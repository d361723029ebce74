/* jsonscan.h - JSON read in place, a value at a time, allocating
 * nothing: the safetensors header and index readers decode straight into
 * their arrays, the stream's HEAD and JOB readers hand each value to
 * jansson as a text of its own, so that no large document becomes one
 * tree.  Grammar: RFC 8259 as serde_json reads it (no NaN, no raw control
 * character in a string, no \u0000, no lone surrogate). */
#ifndef MK_CORE_JSONSCAN_H
#define MK_CORE_JSONSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

/* A cursor over a JSON text (jsonscan.c).  Every call skips the whitespace before what it reads; a failure
 * is MK_EFORMAT "LABEL: WHAT is not valid JSON: WHY at byte N (KIND)",
 * the first one kept in rc. */
struct mk_jscan {
	const char *start, *p, *end;
	const char *label;           /* the file */
	const char *what;            /* "header", "index", "the frame" */
	const char *kind;            /* the reference's error name, or NULL */
	struct mk_err *err;
	int rc;
};
int mk_jscan_fail(struct mk_jscan *j, const char *what);
/* The next byte after whitespace (not consumed), or -1 at the end. */
int mk_jscan_peek(struct mk_jscan *j);
int mk_jscan_expect(struct mk_jscan *j, char c);
/* The error when the text ends here (a value is missing), else 0: said
 * before "X is not a Y" of what is not there. */
int mk_jscan_at_end(struct mk_jscan *j);
/* Inside an object ('}') or array (']'): 1 when another member or
 * element follows (its ',' consumed), 0 when the close was consumed.
 * *first is true before the first one. */
int mk_jscan_more(struct mk_jscan *j, char close, bool *first);
/* After the root object's member loop (`more`, mk_jscan_more's last
 * result): 0 when it closed and only whitespace follows, else the error. */
int mk_jscan_finish(struct mk_jscan *j, int more);
/* A string decoded to UTF-8 into dst (NUL-terminated; it needs no more
 * room than the string's JSON text), or only checked when dst is NULL. */
int mk_jscan_string(struct mk_jscan *j, char *dst, size_t *len);
/* A non-negative integer: 0, 1 when the value is another number or not
 * a number (nothing consumed unless it was a number), or the error. */
int mk_jscan_u64(struct mk_jscan *j, uint64_t *out);
/* Any one value, its syntax checked. */
int mk_jscan_skip(struct mk_jscan *j);

#endif
