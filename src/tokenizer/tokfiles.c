/* tokfiles.c - the output tokenizer files of a merged vocabulary: the
 * donor's tokenizer.json and tokenizer_config.json edited (see vocab.h),
 * every part the edit does not touch kept byte for byte. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "tokenizer/vocab.h"

/* Is this token one the stripped base drops (an id at or past strip_at)? */
static bool dropped(const struct mk_tokmerge *t, const char *tok)
{
	long long id;

	if (t->strip_at < 0)
		return false;
	id = mk_vocab_find(t->out_from, tok);
	return id >= t->strip_at;
}

static const char *tf(bool b)
{
	return b ? "true" : "false";
}

/* a merge ("a b" or ["a", "b"]) that names a dropped token */
static bool merge_dropped(const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node)
{
	bool out = false;

	if (mk_jsondoc_type(d, node) == MK_JSON_STRING) {
		char *s = mk_jsondoc_node_string(d, node, NULL), *sp = s ? strchr(s, ' ') : NULL;
		if (sp && !strchr(sp + 1, ' ')) {
			*sp = '\0';
			out = dropped(t, s) || dropped(t, sp + 1);
		}
		free(s);
		return out;
	}
	for (size_t k = mk_jsondoc_first(d, node); k != SIZE_MAX && !out; k = mk_jsondoc_next(d, k)) {
		char *s = mk_jsondoc_node_string(d, k, NULL);
		out = s && dropped(t, s);
		free(s);
	}
	return out;
}

/* The elements or members of node kept (keep() true), as they stand,
 * one per line at `indent`, then `extra` (already laid out), as the new
 * text of node. */
typedef bool (*keep_fn)(const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node);

static void relist(struct mk_sbuf *b, const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node,
		   keep_fn keep, const char *indent, const char *extra)
{
	bool obj = mk_jsondoc_type(d, node) == MK_JSON_OBJECT, any = false;
	size_t len;

	mk_sbuf_str(b, obj ? "{" : "[");
	for (size_t k = mk_jsondoc_first(d, node); k != SIZE_MAX; k = mk_jsondoc_next(d, k)) {
		if (keep && !keep(t, d, k))
			continue;
		mk_sbuf_fmt(b, "%s\n%s", any ? "," : "", indent);
		if (obj) {
			char *q = mk_json_quote(mk_jsondoc_key(d, k), strlen(mk_jsondoc_key(d, k)));
			mk_sbuf_str(b, q ? q : "\"\"");
			mk_sbuf_str(b, ": ");
			b->oom |= !q;
			free(q);
		}
		const char *txt = mk_jsondoc_node_text(d, k, &len);
		mk_sbuf_add(b, txt, len);
		any = true;
	}
	if (extra && *extra) {
		mk_sbuf_fmt(b, "%s%s", any ? "," : "", extra);
		any = true;
	}
	mk_sbuf_fmt(b, "%s%s", any ? "\n" : "", obj ? "}" : "]");
}

static bool keep_vocab_entry(const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node)
{
	return !dropped(t, mk_jsondoc_key(d, node));
}

static bool keep_merge(const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node)
{
	return !merge_dropped(t, d, node);
}

static bool keep_added(const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node)
{
	long long id;

	return t->strip_at < 0 || mk_jsondoc_node_int(d, mk_jsondoc_get(d, node, "id"), &id) || id < t->strip_at;
}

static bool keep_decoder(const struct mk_tokmerge *t, const struct mk_jsondoc *d, size_t node)
{
	const char *key = mk_jsondoc_key(d, node);

	return t->strip_at < 0 || strtoll(key, NULL, 10) < t->strip_at;
}

/* The new tokens as tokenizer.json's added_tokens elements, or (decoder)
 * as tokenizer_config.json's added_tokens_decoder members, laid out as
 * transformers writes them, each after a comma but the first. */
static void new_tokens_json(struct mk_sbuf *b, const struct mk_tokmerge *t, bool decoder)
{
	for (size_t k = 0; k < t->nnew; k++) {
		const struct mk_added_token *a = &t->new_tokens[k];
		char *q = mk_json_quote(a->content, strlen(a->content));
		b->oom |= !q;
		if (decoder)
			mk_sbuf_fmt(b,
				    "%s\n    \"%lld\": {\n      \"content\": %s,\n      \"lstrip\": %s,\n      \"normalized\": %s,\n"
				    "      \"rstrip\": %s,\n      \"single_word\": %s,\n      \"special\": %s\n    }",
				    k ? "," : "", a->id, q ? q : "\"\"", tf(a->lstrip), tf(a->normalized), tf(a->rstrip),
				    tf(a->single_word), tf(a->special));
		else
			mk_sbuf_fmt(b,
				    "%s\n    {\n      \"id\": %lld,\n      \"content\": %s,\n      \"single_word\": %s,\n"
				    "      \"lstrip\": %s,\n      \"rstrip\": %s,\n      \"normalized\": %s,\n      \"special\": %s\n    }",
				    k ? "," : "", a->id, q ? q : "\"\"", tf(a->single_word), tf(a->lstrip), tf(a->rstrip),
				    tf(a->normalized), tf(a->special));
		free(q);
	}
}

static int finish(struct mk_jsondoc *doc, const char *path, struct mk_sbuf *b, struct mk_err *err)
{
	int rc;

	if (b->oom) {
		free(b->p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	rc = mk_jsondoc_set(doc, path, b->p ? b->p : "[]", err);
	free(b->p);
	memset(b, 0, sizeof(*b));
	return rc;
}

int mk_tokmerge_tokenizer_json(const struct mk_tokmerge *t, const char *text, size_t len, const char *label,
			       char **out, size_t *olen, struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	struct mk_sbuf b = { 0 }, extra = { 0 };
	int rc;

	*out = NULL;
	if ((rc = mk_jsondoc_parse(text, len, label, &d, err)))
		return rc;
	new_tokens_json(&extra, t, false);
	if (extra.oom) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	size_t added = mk_jsondoc_get(d, 0, "added_tokens");
	if (t->nnew || t->strip_at >= 0) {
		if (added != SIZE_MAX && mk_jsondoc_type(d, added) == MK_JSON_ARRAY)
			relist(&b, t, d, added, keep_added, "    ", extra.p);
		else
			mk_sbuf_fmt(&b, "[%s\n  ]", extra.p ? extra.p : "");
		if ((rc = finish(d, "added_tokens", &b, err)))
			goto out;
	}
	if (t->strip_at >= 0) {
		size_t model = mk_jsondoc_get(d, 0, "model");
		size_t voc = mk_jsondoc_get(d, model, "vocab"), merges = mk_jsondoc_get(d, model, "merges");
		relist(&b, t, d, voc, keep_vocab_entry, "      ", NULL);
		if ((rc = finish(d, "model.vocab", &b, err)))
			goto out;
		if (merges != SIZE_MAX && mk_jsondoc_type(d, merges) == MK_JSON_ARRAY) {
			relist(&b, t, d, merges, keep_merge, "      ", NULL);
			if ((rc = finish(d, "model.merges", &b, err)))
				goto out;
		}
	}
	rc = mk_jsondoc_write(d, out, olen, err);
out:
	free(extra.p);
	mk_jsondoc_free(d);
	return rc;
}

int mk_tokmerge_edit_config(const struct mk_tokmerge *t, struct mk_jsondoc *doc, struct mk_err *err)
{
	struct mk_sbuf b = { 0 }, extra = { 0 };
	size_t dec = mk_jsondoc_get(doc, 0, "added_tokens_decoder");
	int rc;

	if (!t->nnew && t->strip_at < 0)
		return 0;
	new_tokens_json(&extra, t, true);
	if (extra.oom) {
		free(extra.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (dec != SIZE_MAX && mk_jsondoc_type(doc, dec) == MK_JSON_OBJECT)
		relist(&b, t, doc, dec, keep_decoder, "    ", extra.p);
	else if (t->nnew)
		mk_sbuf_fmt(&b, "{%s\n  }", extra.p ? extra.p : "");
	else {
		free(extra.p);
		return 0;
	}
	rc = finish(doc, "added_tokens_decoder", &b, err);
	free(extra.p);
	return rc;
}
