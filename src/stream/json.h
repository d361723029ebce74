/* json.h - the small JSON helper behind the stream's HEAD and JOB frames
 * (internal to src/stream).  Every frame's JSON is read and written here
 * and in manifest.c / job.c, nowhere else. */
#ifndef MK_STREAM_JSON_H
#define MK_STREAM_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "mk/dtype.h"
#include "mk/err.h"
#include "mk/method.h"

/* Parse a payload that must be one JSON object without duplicate keys;
 * `what` names the frame in the message ("HEAD", "JOB"). */
int sj_load(const void *buf, size_t len, const char *what, json_t **out, struct mk_err *err);
/* A JSON text read a value at a time, so that a large document is never
 * one tree: its structure ('{', '[', keys, ',', ':') walked here, each
 * value handed to jansson as a text of its own (sj_walk_value), whose
 * size the caller bounds.  The structure is read by core/jsonscan.h,
 * each value checked again by jansson; duplicate keys are left to the
 * caller (sj_walk_key). */
struct sj_walk {
	const char *s;
	size_t len, at;
	const char *what;     /* the frame, in messages ("HEAD") */
};
struct sj_list {
	char close;           /* '}' or ']' */
	bool started;
};
/* Open the object or array at w->at (open '{' or '['): 0, or -1 and an
 * error when something else stands there. */
int sj_walk_open(struct sj_walk *w, char open, struct sj_list *l, struct mk_err *err);
/* Before each member or element: 1 when there is one (w->at at it), 0
 * when the closing bracket was read, -1 on an error. */
int sj_walk_next(struct sj_walk *w, struct sj_list *l, struct mk_err *err);
/* An object member's key and its colon: 0 and *key (malloc'ed, decoded). */
int sj_walk_key(struct sj_walk *w, char **key, struct mk_err *err);
/* The value at w->at as a tree of its own, its text at most max bytes
 * (else an error naming `name`, the member or list). */
int sj_walk_value(struct sj_walk *w, size_t max, const char *name, json_t **out, struct mk_err *err);
/* Nothing but whitespace is left: 0, else an error. */
int sj_walk_end(struct sj_walk *w, struct mk_err *err);

/* A JSON text written a value at a time (mk_sbuf: an allocation failure
 * sets b->oom), as one compact dump of the whole would write it.
 * sj_put_member writes `"key":` and v (taken: decref'ed), after a comma
 * unless *first; with v NULL, '[' opens a list instead, whose entries
 * sj_put_entry writes (v taken; entry i > 0 after a comma) and the
 * caller closes with ']'. */
struct mk_sbuf;
void sj_put_member(struct mk_sbuf *b, bool *first, const char *key, json_t *v);
void sj_put_entry(struct mk_sbuf *b, size_t i, json_t *v);

/* sj_load for a frame whose unknown keys are kept: the object read a
 * member at a time (sj_walk_*), so that a member whose key is not in the
 * NULL-terminated list `known` is refused once the unknown members' JSON
 * passes extra_max bytes together, before it becomes a tree. */
int sj_load_bounded(const void *buf, size_t len, const char *what, const char *const *known, size_t extra_max,
		    json_t **out, struct mk_err *err);

/* Compact dump, key order kept; malloc'ed, length without the NUL. */
int sj_dump(json_t *o, char **out, size_t *len, struct mk_err *err);

/* A non-negative integer. 0, or -1 when v is anything else. */
int sj_u64(json_t *v, uint64_t *out);
/* An optional key: absent -> def; present must be a non-negative integer. */
int sj_opt_u64(json_t *obj, const char *key, uint64_t def, uint64_t *out);
/* A string value of key, or NULL when absent or not a string. */
const char *sj_str(json_t *obj, const char *key);
/* An optional boolean: absent -> false; present must be a boolean. */
int sj_opt_bool(json_t *obj, const char *key, bool *out);
/* A dtype name and a shape array: 0; -1 on a missing or unknown dtype, a
 * shape that is not an array or has more than MK_MAX_DIMS dims; -2 on a
 * dim that is not a non-negative integer; -3 when the element count
 * overflows.  sj_desc_error words the three for a frame's message. */
int sj_desc(json_t *dtype, json_t *shape, struct mk_tensor_desc *d, uint64_t *nelem);
const char *sj_desc_error(int rc);
json_t *sj_shape(unsigned ndim, const uint64_t *shape);
/* 64 lower-case hex digits <-> 32 bytes. */
int sj_sha256(json_t *v, uint8_t out[32]);
/* A parameter value: true/false, an integer, a real, or null (unset). */
int sj_pval(json_t *v, struct mk_pval *out);
json_t *sj_from_pval(const struct mk_pval *v);
/* The members of o whose keys are not in the NULL-terminated list known
 * (a new object, NULL when there are none). */
json_t *sj_extra(json_t *o, const char *const *known);
/* Append extra's members to o (keys o already has are left alone). */
void sj_add_extra(json_t *o, json_t *extra);

#endif
