/* vocab.c - a tokenizer.json's vocabulary (see vocab.h), read with the
 * lossless JSON reader (Python's rules: what transformers loads, loads). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "tokenizer/vocab.h"
#include "vocab_impl.h"

void mk_vocab_free(struct mk_vocab *v)
{
	if (!v)
		return;
	for (size_t i = 0; v->token && i < v->n; i++)
		free(v->token[i]);
	free(v->token);
	for (size_t i = 0; v->added && i < v->nadded; i++)
		free(v->added[i].content);
	free(v->added);
	free(v->model_type);
	free(v->hslot);
	free(v);
}

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static void index_put(struct mk_vocab *v, size_t id)
{
	size_t mask = v->hcap - 1, k = (size_t)str_hash(v->token[id]) & mask;

	while (v->hslot[k]) {
		if (!strcmp(v->token[v->hslot[k] - 1], v->token[id])) {
			v->hslot[k] = (uint32_t)id + 1; /* the later one wins */
			return;
		}
		k = (k + 1) & mask;
	}
	v->hslot[k] = (uint32_t)id + 1;
}

/* token -> id over token[] (an added token's id winning for its content) */
int mk__vocab_index(struct mk_vocab *v)
{
	size_t cap = 16;

	v->ntok = 0;
	for (size_t i = 0; i < v->n; i++)
		v->ntok += v->token[i] != NULL;
	while (cap < 2 * v->ntok + 2)
		cap *= 2;
	free(v->hslot);
	if (!(v->hslot = calloc(cap, sizeof(*v->hslot))))
		return -1;
	v->hcap = cap;
	for (size_t i = 0; i < v->n; i++)
		if (v->token[i])
			index_put(v, i);
	for (size_t i = 0; i < v->nadded; i++)
		if ((size_t)v->added[i].id < v->n && v->token[v->added[i].id])
			index_put(v, (size_t)v->added[i].id);
	return 0;
}

int mk__vocab_index_add(struct mk_vocab *v, size_t id)
{
	if (2 * (v->ntok + 2) >= v->hcap)
		return mk__vocab_index(v);
	index_put(v, id);
	v->ntok++;
	return 0;
}

long long mk_vocab_find(const struct mk_vocab *v, const char *token)
{
	if (!v || !v->hcap)
		return -1;
	size_t mask = v->hcap - 1, k = (size_t)str_hash(token) & mask;
	while (v->hslot[k]) {
		if (!strcmp(v->token[v->hslot[k] - 1], token))
			return (long long)v->hslot[k] - 1;
		k = (k + 1) & mask;
	}
	return -1;
}

/* token[id] = s (taking it), growing the table */
static int put(struct mk_vocab *v, size_t *cap, long long id, char *s, const char *label, struct mk_err *err)
{
	if ((size_t)id >= *cap) {
		size_t nc = *cap ? *cap : 1024;
		while (nc <= (size_t)id)
			nc *= 2;
		char **q = realloc(v->token, nc * sizeof(*q));
		if (!q) {
			free(s);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		memset(q + *cap, 0, (nc - *cap) * sizeof(*q));
		v->token = q;
		*cap = nc;
	}
	if ((size_t)id >= v->n)
		v->n = (size_t)id + 1;
	if (v->token[id] && strcmp(v->token[id], s)) {
		int rc = mk_err_set(err, MK_EFORMAT, "%s: id %lld is both '%s' and '%s'", label, id, v->token[id], s);
		free(s);
		return rc;
	}
	free(v->token[id]);
	v->token[id] = s;
	return 0;
}

/* ids are dense in every real vocabulary; a sparse one is refused before
 * it can size a table */
static int check_id(long long id, size_t entries, const char *label, const char *what, struct mk_err *err)
{
	if (id < 0 || id >= (1ll << 31))
		return mk_err_set(err, MK_EFORMAT, "%s: %s has id %lld, outside 0 .. 2^31", label, what, id);
	if ((uint64_t)id > 4 * (uint64_t)entries + 65536)
		return mk_err_set(err, MK_EFORMAT, "%s: %s has id %lld, far past the %zu entries (ids so sparse are not a vocabulary)",
				  label, what, id, entries);
	return 0;
}

static int flag(const struct mk_jsondoc *d, size_t tok, const char *key, bool *out, const char *label, size_t i,
		struct mk_err *err)
{
	size_t f = mk_jsondoc_get(d, tok, key);

	*out = false;
	if (f == SIZE_MAX || mk_jsondoc_type(d, f) == MK_JSON_NULL)
		return 0;
	if (mk_jsondoc_node_bool(d, f, out))
		return mk_err_set(err, MK_EFORMAT, "%s: added_tokens[%zu].%s is not true or false", label, i, key);
	return 0;
}

int mk_vocab_parse(const char *text, size_t len, const char *label, struct mk_vocab **out, struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	struct mk_vocab *v = calloc(1, sizeof(*v));
	size_t cap = 0, model, voc, at, entries;
	int rc;

	*out = NULL;
	if (!v)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = mk_jsondoc_parse(text, len, label, &d, err)))
		goto out;
	model = mk_jsondoc_get(d, 0, "model");
	if (mk_jsondoc_type(d, 0) != MK_JSON_OBJECT || mk_jsondoc_type(d, model) != MK_JSON_OBJECT) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: no \"model\" object (not a fast tokenizer's tokenizer.json?)", label);
		goto out;
	}
	v->model_type = mk_jsondoc_node_string(d, mk_jsondoc_get(d, model, "type"), NULL);
	if (!v->model_type || (strcmp(v->model_type, "BPE") && strcmp(v->model_type, "Unigram") &&
			       strcmp(v->model_type, "WordPiece") && strcmp(v->model_type, "WordLevel"))) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: model.type is %s%s%s, not BPE, Unigram, WordPiece or WordLevel", label,
				v->model_type ? "'" : "", v->model_type ? v->model_type : "missing",
				v->model_type ? "'" : "");
		goto out;
	}
	voc = mk_jsondoc_get(d, model, "vocab");
	entries = mk_jsondoc_count(d, voc);
	if (!strcmp(v->model_type, "Unigram")) {
		/* [[piece, score], ...]: the index is the id */
		size_t i = 0;
		if (mk_jsondoc_type(d, voc) != MK_JSON_ARRAY) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: model.vocab of a Unigram model is not a list", label);
			goto out;
		}
		for (at = mk_jsondoc_first(d, voc); at != SIZE_MAX; at = mk_jsondoc_next(d, at), i++) {
			size_t piece = mk_jsondoc_first(d, at), score = mk_jsondoc_next(d, piece);
			char *s = mk_jsondoc_node_string(d, piece, NULL);
			if (mk_jsondoc_type(d, at) != MK_JSON_ARRAY || mk_jsondoc_count(d, at) != 2 || !s ||
			    mk_jsondoc_type(d, score) != MK_JSON_NUMBER) {
				free(s);
				rc = mk_err_set(err, MK_EFORMAT, "%s: model.vocab[%zu] is not a [piece, score] pair", label, i);
				goto out;
			}
			if ((rc = put(v, &cap, (long long)i, s, label, err)))
				goto out;
		}
	} else {
		if (mk_jsondoc_type(d, voc) != MK_JSON_OBJECT) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: model.vocab of a %s model is not an object of token: id", label,
					v->model_type);
			goto out;
		}
		for (at = mk_jsondoc_first(d, voc); at != SIZE_MAX; at = mk_jsondoc_next(d, at)) {
			long long id;
			const char *key = mk_jsondoc_key(d, at);
			char *s;
			if (mk_jsondoc_node_int(d, at, &id)) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: model.vocab['%s'] is not an integer id", label, key);
				goto out;
			}
			if ((rc = check_id(id, entries, label, "a token", err)))
				goto out;
			if (!(s = strdup(key))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			if ((rc = put(v, &cap, id, s, label, err)))
				goto out;
		}
	}
	/* added tokens: their content is the token of their id */
	{
		size_t list = mk_jsondoc_get(d, 0, "added_tokens"), i = 0;
		enum mk_json_type lt = mk_jsondoc_type(d, list);
		if (list != SIZE_MAX && lt != MK_JSON_ARRAY && lt != MK_JSON_NULL) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: added_tokens is not a list", label);
			goto out;
		}
		if (list != SIZE_MAX && lt == MK_JSON_ARRAY) {
			v->added = calloc(mk_jsondoc_count(d, list) + 1, sizeof(*v->added));
			if (!v->added) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
		}
		for (at = mk_jsondoc_first(d, lt == MK_JSON_ARRAY ? list : SIZE_MAX); at != SIZE_MAX;
		     at = mk_jsondoc_next(d, at), i++) {
			struct mk_added_token *t = &v->added[v->nadded];
			char *s;
			t->content = mk_jsondoc_node_string(d, mk_jsondoc_get(d, at, "content"), NULL);
			if (mk_jsondoc_type(d, at) != MK_JSON_OBJECT || !t->content ||
			    mk_jsondoc_node_int(d, mk_jsondoc_get(d, at, "id"), &t->id)) {
				free(t->content);
				rc = mk_err_set(err, MK_EFORMAT, "%s: added_tokens[%zu] has no string content and integer id", label,
						i);
				goto out;
			}
			v->nadded++;
			if ((rc = check_id(t->id, entries + mk_jsondoc_count(d, list), label, "an added token", err)) ||
			    (rc = flag(d, at, "special", &t->special, label, i, err)) ||
			    (rc = flag(d, at, "normalized", &t->normalized, label, i, err)) ||
			    (rc = flag(d, at, "lstrip", &t->lstrip, label, i, err)) ||
			    (rc = flag(d, at, "rstrip", &t->rstrip, label, i, err)) ||
			    (rc = flag(d, at, "single_word", &t->single_word, label, i, err)))
				goto out;
			if (!(s = strdup(t->content))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			/* an added token may sit on a vocabulary id of its own
			 * content (the usual specials) or on a new one */
			if ((size_t)t->id < v->n && v->token[t->id] && strcmp(v->token[t->id], s)) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: added token '%s' has id %lld, which is '%s' in model.vocab",
						label, s, t->id, v->token[t->id]);
				free(s);
				goto out;
			}
			if ((rc = put(v, &cap, t->id, s, label, err)))
				goto out;
		}
	}
	if (!rc && mk__vocab_index(v))
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	mk_jsondoc_free(d);
	if (rc)
		mk_vocab_free(v);
	else
		*out = v;
	return rc;
}

bool mk_vocab_equal(const struct mk_vocab *a, const struct mk_vocab *b, char *why, size_t cap)
{
	size_t n = a->n > b->n ? a->n : b->n;

	if (why && cap)
		why[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		const char *x = i < a->n ? a->token[i] : NULL, *y = i < b->n ? b->token[i] : NULL;
		if (!x && !y)
			continue;
		if (!x || !y || strcmp(x, y)) {
			if (why)
				snprintf(why, cap, "id %zu is %s%s%s in one and %s%s%s in the other", i, x ? "'" : "",
					 x ? x : "unused", x ? "'" : "", y ? "'" : "", y ? y : "unused", y ? "'" : "");
			return false;
		}
	}
	if (a->nadded != b->nadded) {
		if (why)
			snprintf(why, cap, "%zu added tokens in one, %zu in the other", a->nadded, b->nadded);
		return false;
	}
	for (size_t i = 0; i < a->nadded; i++) {
		const struct mk_added_token *x = &a->added[i], *y = &b->added[i];
		if (strcmp(x->content, y->content) || x->id != y->id || x->special != y->special ||
		    x->normalized != y->normalized || x->lstrip != y->lstrip || x->rstrip != y->rstrip ||
		    x->single_word != y->single_word) {
			if (why)
				snprintf(why, cap, "added token '%s' (id %lld) differs", x->content, x->id);
			return false;
		}
	}
	return true;
}

/* ---------------------------------------------------- SentencePiece */

int mk_vocab_parse_spm(const void *buf, size_t len, const char *label, struct mk_vocab **out, struct mk_err *err)
{
	struct mk__spm_piece *pc = NULL;
	struct mk_vocab *v = calloc(1, sizeof(*v));
	size_t n = 0;
	char msg[256] = "";
	int rc;

	*out = NULL;
	if (!v)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rc = mk__spm_pieces(buf, len, &pc, &n, msg, sizeof(msg));
	if (rc) {
		free(v);
		return rc == -2 ? mk_err_set(err, MK_ENOMEM, "out of memory") :
		       rc == -3 ? mk_err_set(err, MK_EUNSUPPORTED, "%s: %s", label, msg) :
				  mk_err_set(err, MK_EFORMAT, "%s: not a SentencePiece model (%s)", label, msg);
	}
	v->model_type = strdup("SentencePiece");
	v->token = calloc(n + 1, sizeof(*v->token));
	v->added = calloc(n + 1, sizeof(*v->added));
	v->n = n;
	rc = v->model_type && v->token && v->added ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		v->token[i] = pc[i].piece; /* taken */
		/* control and unknown pieces load as special added tokens (as
		 * transformers converts them) */
		if (!rc && (pc[i].control || pc[i].unknown)) {
			struct mk_added_token *a = &v->added[v->nadded];
			if (!(a->content = strdup(pc[i].piece))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				continue;
			}
			a->id = (long long)i;
			a->special = true;
			v->nadded++;
		}
	}
	free(pc);
	if (!rc && mk__vocab_index(v))
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	if (rc) {
		mk_vocab_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

int mk_vocab_add_decoder(struct mk_vocab *v, const char *text, size_t len, const char *label, struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	size_t cap = v->n, dec;
	int rc;

	if ((rc = mk_jsondoc_parse(text, len, label, &d, err)))
		return rc;
	dec = mk_jsondoc_get(d, 0, "added_tokens_decoder");
	if (mk_jsondoc_type(d, dec) != MK_JSON_OBJECT) {
		mk_jsondoc_free(d);
		return 0;
	}
	size_t i = 0;
	for (size_t at = mk_jsondoc_first(d, dec); at != SIZE_MAX && !rc; at = mk_jsondoc_next(d, at), i++) {
		const char *key = mk_jsondoc_key(d, at);
		char *end;
		long long id = strtoll(key, &end, 10);
		struct mk_added_token t = { 0 };
		if (!*key || *end || mk_jsondoc_type(d, at) != MK_JSON_OBJECT ||
		    !(t.content = mk_jsondoc_node_string(d, mk_jsondoc_get(d, at, "content"), NULL))) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: added_tokens_decoder['%s'] is not an id with a {content} object", label,
					key);
			break;
		}
		t.id = id;
		if ((rc = check_id(id, v->n + mk_jsondoc_count(d, dec), label, "an added token", err)) ||
		    (rc = flag(d, at, "special", &t.special, label, i, err)) ||
		    (rc = flag(d, at, "normalized", &t.normalized, label, i, err)) ||
		    (rc = flag(d, at, "lstrip", &t.lstrip, label, i, err)) ||
		    (rc = flag(d, at, "rstrip", &t.rstrip, label, i, err)) ||
		    (rc = flag(d, at, "single_word", &t.single_word, label, i, err))) {
			free(t.content);
			break;
		}
		/* one on a token of the vocabulary (a control piece, a special
		 * of vocab.json) is an added token there, with these flags */
		if ((size_t)id < v->n && v->token[id]) {
			bool had = false;
			if (strcmp(v->token[id], t.content)) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: added token '%s' has id %lld, which is '%s' in the model",
						label, t.content, id, v->token[id]);
				free(t.content);
				break;
			}
			for (size_t k = 0; k < v->nadded && !had; k++)
				if (v->added[k].id == id) {
					free(v->added[k].content);
					v->added[k] = t;
					had = true;
				}
			if (had)
				continue;
		}
		struct mk_added_token *q = realloc(v->added, (v->nadded + 1) * sizeof(*q));
		char *s = strdup(t.content);
		if (!q || !s) {
			free(s);
			free(t.content);
			if (q)
				v->added = q;
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		v->added = q;
		v->added[v->nadded++] = t;
		rc = put(v, &cap, id, s, label, err); /* the same text where it is a token already */
	}
	mk_jsondoc_free(d);
	if (!rc && mk__vocab_index(v))
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	return rc;
}

/* ------------------------------------------- vocab.json and vocab.txt */

int mk_vocab_parse_plain(const char *text, size_t len, const char *label, bool lines, struct mk_vocab **out,
			 struct mk_err *err)
{
	struct mk_vocab *v = calloc(1, sizeof(*v));
	size_t cap = 0;
	int rc = 0;

	*out = NULL;
	if (!v || !(v->model_type = strdup(lines ? "WordPiece" : "BPE"))) {
		mk_vocab_free(v);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (lines) {
		/* vocab.txt: a token a line, its id the line's number */
		size_t id = 0, at = 0;
		while (at < len && !rc) {
			const char *nl = memchr(text + at, '\n', len - at);
			size_t e = nl ? (size_t)(nl - text) : len, l = e - at;
			if (l && text[at + l - 1] == '\r')
				l--;
			char *s = memchr(text + at, '\0', l) ? NULL : strndup(text + at, l);
			if (!s)
				rc = memchr(text + at, '\0', l) ?
					     mk_err_set(err, MK_EFORMAT, "%s: line %zu holds a NUL byte", label, id + 1) :
					     mk_err_set(err, MK_ENOMEM, "out of memory");
			else
				rc = put(v, &cap, (long long)id, s, label, err);
			id++;
			at = e + 1;
		}
	} else {
		/* vocab.json: {token: id} */
		struct mk_jsondoc *d = NULL;
		if ((rc = mk_jsondoc_parse(text, len, label, &d, err)))
			goto out;
		if (mk_jsondoc_type(d, 0) != MK_JSON_OBJECT)
			rc = mk_err_set(err, MK_EFORMAT, "%s: not an object of token: id", label);
		size_t entries = mk_jsondoc_count(d, 0);
		for (size_t at = mk_jsondoc_first(d, 0); at != SIZE_MAX && !rc; at = mk_jsondoc_next(d, at)) {
			long long id;
			const char *key = mk_jsondoc_key(d, at);
			char *s;
			if (mk_jsondoc_node_int(d, at, &id)) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: '%s' is not an integer id", label, key);
				break;
			}
			if ((rc = check_id(id, entries, label, "a token", err)))
				break;
			if (!(s = strdup(key))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			rc = put(v, &cap, id, s, label, err);
		}
		mk_jsondoc_free(d);
	}
	if (!rc && mk__vocab_index(v))
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	if (rc) {
		mk_vocab_free(v);
		return rc;
	}
	*out = v;
	return 0;
}
