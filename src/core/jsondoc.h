/* jsondoc.h - JSON files read and edited losslessly: the donor files mk
 * copies from a model (tokenizer_config.json and the like) with one key
 * changed and every other byte kept (integers of any size, key order,
 * spacing, escapes).
 *
 * The parser takes what Python's json module (and so transformers) reads:
 * RFC 8259, plus NaN, Infinity and -Infinity; strings must be UTF-8 with
 * no raw control characters; numbers of any length are kept as their
 * text.  A duplicate key is allowed, the last one counts (as in Python).
 * Errors name the file, line and column.  Nesting is limited to
 * MK_JSONDOC_MAX_DEPTH.
 *
 * Ownership: mk_jsondoc_parse gives the caller one struct mk_jsondoc
 * (mk_jsondoc_free); it copies the text.  Strings it returns are the
 * caller's to free.
 */
#ifndef MK_JSONDOC_H
#define MK_JSONDOC_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/err.h"

#define MK_JSONDOC_MAX_DEPTH 512

enum mk_json_type { MK_JSON_NULL, MK_JSON_FALSE, MK_JSON_TRUE, MK_JSON_NUMBER, MK_JSON_STRING,
		    MK_JSON_ARRAY, MK_JSON_OBJECT };

struct mk_jsondoc;

/* Parse text (len bytes; label names it in messages). */
int mk_jsondoc_parse(const char *text, size_t len, const char *label, struct mk_jsondoc **out,
		     struct mk_err *err);
void mk_jsondoc_free(struct mk_jsondoc *d);

/* The type of the root value. */
enum mk_json_type mk_jsondoc_root_type(const struct mk_jsondoc *d);

/* The value at a dotted path of object keys from the root ("a.b": key b
 * of the object under key a; "" is the root): 0 and its type, or -1 when
 * a key is missing or a parent is not an object. */
int mk_jsondoc_find(const struct mk_jsondoc *d, const char *path, enum mk_json_type *type);
/* That value's text as it stands in the file (a number's digits, a
 * string with its quotes and escapes), malloc'ed; NULL when missing or
 * out of memory. */
char *mk_jsondoc_text(const struct mk_jsondoc *d, const char *path);
/* A string value decoded to UTF-8, malloc'ed (*len bytes; it may hold
 * NUL bytes from \u0000); NULL when missing, not a string, or out of
 * memory. */
char *mk_jsondoc_string(const struct mk_jsondoc *d, const char *path, size_t *len);

/* Nodes, for walking large documents (a tokenizer.json's vocabulary):
 * a node is an index, SIZE_MAX for none; every call takes SIZE_MAX and
 * gives SIZE_MAX (or nothing) back. */
size_t mk_jsondoc_at(const struct mk_jsondoc *d, const char *path);   /* 0: the root */
size_t mk_jsondoc_get(const struct mk_jsondoc *d, size_t node, const char *key); /* the last such key */
enum mk_json_type mk_jsondoc_type(const struct mk_jsondoc *d, size_t node);
size_t mk_jsondoc_count(const struct mk_jsondoc *d, size_t node);    /* members or elements */
size_t mk_jsondoc_first(const struct mk_jsondoc *d, size_t node);    /* first member or element */
size_t mk_jsondoc_next(const struct mk_jsondoc *d, size_t node);     /* its next sibling */
const char *mk_jsondoc_key(const struct mk_jsondoc *d, size_t node); /* a member's key, decoded */
char *mk_jsondoc_node_string(const struct mk_jsondoc *d, size_t node, size_t *len); /* malloc'ed */
int mk_jsondoc_node_int(const struct mk_jsondoc *d, size_t node, long long *v); /* an int64 integer */
int mk_jsondoc_node_bool(const struct mk_jsondoc *d, size_t node, bool *v);
/* A node's text as it stands in the file (not NUL-terminated; *len
 * bytes), pointing into the document; NULL for SIZE_MAX. */
const char *mk_jsondoc_node_text(const struct mk_jsondoc *d, size_t node, size_t *len);

/* Set the value at path (its parent must be an object that exists) to
 * value_json, a JSON value's text (mk_json_quote makes one of a string):
 * in place of the old value, or as a new last member laid out as the
 * object's other members are.  Edits are applied by mk_jsondoc_write; a
 * second edit of the same path replaces the first.  A value_json that is
 * not one JSON value is MK_EINVAL. */
int mk_jsondoc_set(struct mk_jsondoc *d, const char *path, const char *value_json, struct mk_err *err);
/* Remove the member at path (an object's key) with its comma and the
 * layout before it, so that the rest reads as if it had never been there
 * (the only member of an object leaves "{}"); an earlier edit of it is
 * dropped.  A path that is missing is no error.  Not to be combined with
 * other edits of the same object (write, parse again, then remove). */
int mk_jsondoc_remove(struct mk_jsondoc *d, const char *path, struct mk_err *err);
/* The text with the edits applied (malloc'ed, *len bytes): with no edit,
 * the parsed bytes exactly. */
int mk_jsondoc_write(const struct mk_jsondoc *d, char **out, size_t *len, struct mk_err *err);

/* The text with the edits applied, laid out as transformers writes a
 * config (Python's json.dumps(obj, indent=2, sort_keys=True) + "\n" after
 * json.loads): keys sorted (a repeated key once, its last value),
 * 2-space indent, strings with non-ASCII escaped as \uXXXX, integers as
 * their digits whatever their size, other numbers as Python's repr of
 * the float they read as (1e-05, 0.02, 10000.0, Infinity). */
int mk_jsondoc_write_python(const struct mk_jsondoc *d, char **out, size_t *len, struct mk_err *err);

/* The parsed text (no edits) with every integer outside int64 written as
 * a real (digits + ".0"), for a reader built on a library that refuses
 * such integers (jansson): the document reads the same otherwise. */
int mk_jsondoc_int64_text(const struct mk_jsondoc *d, char **out, size_t *len, struct mk_err *err);

/* A JSON string literal for n bytes of UTF-8, escaped as Python's
 * json.dumps(ensure_ascii=False) escapes it (quote, backslash, control
 * characters); malloc'ed, NULL when out of memory. */
char *mk_json_quote(const char *s, size_t n);
/* Append s (len bytes of UTF-8) as a JSON string as Python's json.dumps
 * writes it by default (ensure_ascii): every character outside printable
 * ASCII as \n, \t, ... or \uXXXX in lower-case hex, surrogate pairs above
 * U+FFFF. */
struct mk_sbuf;
void mk_json_put_ascii_string(struct mk_sbuf *b, const char *s, size_t len);

#endif
