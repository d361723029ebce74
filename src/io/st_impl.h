/* st_impl.h - internals of src/io shared by its files (not installed). */
#ifndef MK_ST_IMPL_H
#define MK_ST_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include "io/safetensors.h"

/* Rust's str::from_utf8 rules: no overlongs, no surrogates, <= U+10FFFF.
 * Returns the offset of the first bad byte, or len when all is valid. */
size_t mk__st_utf8_check(const uint8_t *s, size_t len);

/* The JSON scanner of headers and indexes (st_json.c): a cursor over the
 * text.  Every call skips the whitespace before what it reads; a failure
 * is MK_EFORMAT "LABEL: WHAT is not valid JSON: WHY at byte N (KIND)",
 * the first one kept in rc. */
struct mk__sj {
	const char *start, *p, *end;
	const char *label;           /* the file */
	const char *what;            /* "header", "index" */
	const char *kind;            /* the reference's error name, or NULL */
	struct mk_err *err;
	int rc;
};
int mk__sj_fail(struct mk__sj *j, const char *what);
/* The next byte after whitespace (not consumed), or -1 at the end. */
int mk__sj_peek(struct mk__sj *j);
int mk__sj_expect(struct mk__sj *j, char c);
/* The error when the text ends here (a value is missing), else 0: said
 * before "X is not a Y" of what is not there. */
int mk__sj_at_end(struct mk__sj *j);
/* Inside an object ('}') or array (']'): 1 when another member or
 * element follows (its ',' consumed), 0 when the close was consumed.
 * *first is true before the first one. */
int mk__sj_more(struct mk__sj *j, char close, bool *first);
/* After the root object's member loop (`more`, mk__sj_more's last
 * result): 0 when it closed and only whitespace follows, else the error. */
int mk__sj_finish(struct mk__sj *j, int more);
/* A string decoded to UTF-8 into dst (NUL-terminated; it needs no more
 * room than the string's JSON text), or only checked when dst is NULL. */
int mk__sj_string(struct mk__sj *j, char *dst, size_t *len);
/* A non-negative integer: 0, 1 when the value is another number or not
 * a number (nothing consumed unless it was a number), or the error. */
int mk__sj_u64(struct mk__sj *j, uint64_t *out);
/* Any one value, its syntax checked. */
int mk__sj_skip(struct mk__sj *j);

/* An mk_st_file of other origin (a PyTorch checkpoint): the tensors
 * (names and strides copied) sorted by offset, a name index, the given hash; offsets
 * relative to data_start 0.  A name twice is MK_EFORMAT. */
int mk__st_file_make(const char *label, uint64_t file_size, const struct mk_st_tensor *tensors, size_t n,
		     const uint8_t hash[32], struct mk_st_file **out, struct mk_err *err);

#endif
