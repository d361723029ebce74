/* tokmerge.c - the output vocabulary of a merge with a tokenizer source,
 * and each model's map into it (see vocab.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/vocab.h"
#include "vocab_impl.h"

static void warnf(const struct mk_tokmerge_in *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void warnf(const struct mk_tokmerge_in *in, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	if (!in->warn)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	in->warn(in->warn_ctx, buf);
}

/* A model's vocab size: config.json's, else how many tokens it has. */
static long long vsize(const struct mk_tokmerge_in *in, size_t m, const struct mk_vocab *v)
{
	return in->vocab_size && in->vocab_size[m] > 0 ? in->vocab_size[m] : (long long)v->ntok;
}

/* v without its ids from `at` on (tokens and added tokens) */
static struct mk_vocab *vocab_cut(const struct mk_vocab *v, size_t at)
{
	struct mk_vocab *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	size_t n = at < v->n ? at : v->n;
	c->model_type = strdup(v->model_type ? v->model_type : "");
	c->token = calloc(n + 1, sizeof(*c->token));
	c->added = calloc(v->nadded + 1, sizeof(*c->added));
	if (!c->model_type || !c->token || !c->added)
		goto fail;
	c->n = n;            /* only with the tokens' array: mk_vocab_free walks it */
	for (size_t i = 0; i < c->n; i++)
		if (v->token[i] && !(c->token[i] = strdup(v->token[i])))
			goto fail;
	for (size_t i = 0; i < v->nadded; i++) {
		if ((size_t)v->added[i].id >= c->n)
			continue;
		c->added[c->nadded] = v->added[i];
		if (!(c->added[c->nadded].content = strdup(v->added[i].content)))
			goto fail;
		c->nadded++;
	}
	if (mk__vocab_index(c))
		goto fail;
	return c;
fail:
	mk_vocab_free(c);
	return NULL;
}

void mk_tokmerge_free(struct mk_tokmerge *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nnew; i++)
		free(t->new_tokens[i].content);
	free(t->new_tokens);
	for (size_t m = 0; m < t->nmodels; m++) {
		if (t->map)
			free(t->map[m]);
		if (t->orig && t->orig_owned && t->orig_owned[m])
			mk_vocab_free(t->orig[m]);
	}
	free(t->map);
	free(t->orig);
	free(t->orig_owned);
	mk_vocab_free(t->outv);
	free(t);
}

long long mk_tokmerge_find(const struct mk_tokmerge *t, const char *token)
{
	return mk_vocab_find(t->outv, token);
}

/* The output grows by one added token (content copied), unless it has
 * that token already. */
static int append(struct mk_tokmerge *t, size_t *cap, const struct mk_added_token *a)
{
	if (mk_vocab_find(t->outv, a->content) >= 0)
		return 0;
	if (t->n + 1 > *cap) {
		size_t nc = *cap ? *cap * 2 : 64;
		char **q = realloc(t->outv->token, nc * sizeof(*q));
		if (!q)
			return -1;
		t->outv->token = q;
		*cap = nc;
	}
	struct mk_added_token *nt = realloc(t->new_tokens, (t->nnew + 1) * sizeof(*nt));
	if (!nt)
		return -1;
	t->new_tokens = nt;
	nt[t->nnew] = *a;
	nt[t->nnew].id = (long long)t->n;
	if (!(nt[t->nnew].content = strdup(a->content)) || !(t->outv->token[t->n] = strdup(a->content))) {
		free(nt[t->nnew].content);
		return -1;
	}
	t->nnew++;
	t->n++;
	t->outv->n = t->n;
	return mk__vocab_index_add(t->outv, t->n - 1);
}

static int cmp_added_id(const void *a, const void *b)
{
	const struct mk_added_token *x = *(const struct mk_added_token *const *)a;
	const struct mk_added_token *y = *(const struct mk_added_token *const *)b;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* union: every other model's regular tokens the base lacks, then their
 * added tokens (first seen wins; a second with other flags warns) */
static int build_union(const struct mk_tokmerge_in *in, struct mk_tokmerge *t, struct mk_vocab *const *view,
		       size_t *cap)
{
	size_t nseen = 0, scap = 0;
	const struct mk_added_token **seen = NULL;
	int rc = 0;

	for (size_t pass = 0; pass < 2 && !rc; pass++) {
		for (size_t q = 0; q <= in->nmodels && !rc; q++) {
			/* the base first, then the others in model order */
			size_t m = q == 0 ? in->base : q - 1;
			if (q > 0 && m == in->base)
				continue;
			if (!in->vocab[m])
				continue; /* unreadable: taken as the base's */
			const struct mk_vocab *v = view[m];
			long long vs = vsize(in, m, v);
			if (pass == 0) {
				size_t past = 0;
				for (size_t id = 0; id < v->n && !rc; id++) {
					if (!v->token[id])
						continue;
					if ((long long)id >= vs) {
						past++;
						continue;
					}
					bool added = false;
					for (size_t k = 0; k < v->nadded && !added; k++)
						added = !strcmp(v->added[k].content, v->token[id]);
					if (added || mk_vocab_find(t->outv, v->token[id]) >= 0)
						continue;
					struct mk_added_token plain = { .content = v->token[id], .normalized = true };
					rc = append(t, cap, &plain);
				}
				if (past)
					warnf(in, "model '%s': %zu token%s at or past its vocab size %lld %s left out of the union",
					      in->label[m], past, past == 1 ? "" : "s", vs, past == 1 ? "is" : "are");
				continue;
			}
			/* added tokens by id, as transformers lists them */
			const struct mk_added_token **byid = calloc(v->nadded + 1, sizeof(*byid));
			if (!byid)
				return -1;
			for (size_t k = 0; k < v->nadded; k++)
				byid[k] = &v->added[k];
			qsort(byid, v->nadded, sizeof(*byid), cmp_added_id);
			for (size_t k = 0; k < v->nadded && !rc; k++) {
				const struct mk_added_token *a = byid[k];
				const struct mk_added_token *first = NULL;
				if (a->id >= vs)
					continue;
				for (size_t s = 0; s < nseen && !first; s++)
					if (!strcmp(seen[s]->content, a->content))
						first = seen[s];
				if (first) {
					if (first->special != a->special || first->normalized != a->normalized ||
					    first->lstrip != a->lstrip || first->rstrip != a->rstrip ||
					    first->single_word != a->single_word)
						warnf(in, "token '%s' is added with different settings in '%s'; the first model's are used",
						      a->content, in->label[m]);
					continue;
				}
				if (nseen == scap) {
					scap = scap ? 2 * scap : 16;
					const struct mk_added_token **ns = realloc(seen, scap * sizeof(*ns));
					if (!ns) {
						free(byid);
						free(seen);
						return -1;
					}
					seen = ns;
				}
				seen[nseen++] = a;
				rc = append(t, cap, a);
			}
			free(byid);
		}
	}
	free(seen);
	return rc;
}

int mk_tokmerge_build(const struct mk_tokmerge_in *in, struct mk_tokmerge **out, struct mk_err *err)
{
	struct mk_tokmerge *t = calloc(1, sizeof(*t));
	const struct mk_vocab *bv = in->vocab[in->base];
	size_t cap;
	int rc = 0;

	*out = NULL;
	if (!t)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	t->nmodels = in->nmodels;
	t->map = calloc(in->nmodels + 1, sizeof(*t->map));
	t->orig = calloc(in->nmodels + 1, sizeof(*t->orig));
	t->orig_owned = calloc(in->nmodels + 1, sizeof(*t->orig_owned));
	if (!t->map || !t->orig || !t->orig_owned)
		goto nomem;
	if (!bv) {
		rc = mk_err_set(err, MK_EFORMAT, "the base model '%s' has no tokenizer to build on", in->label[in->base]);
		goto out;
	}
	/* the stripped base: its ids at or past its vocab size dropped */
	long long bvs = vsize(in, in->base, bv);
	struct mk_vocab *sb = (struct mk_vocab *)bv;
	t->strip_at = -1;
	if ((long long)bv->n > bvs) {
		if (!bv->model_type || strcmp(bv->model_type, "BPE")) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"the base model '%s' has tokens at or past its vocab size %lld, and only a BPE tokenizer can be cut to it (it is %s)",
					in->label[in->base], bvs, bv->model_type ? bv->model_type : "?");
			goto out;
		}
		if (!(sb = vocab_cut(bv, (size_t)bvs)))
			goto nomem;
		t->orig_owned[in->base] = true;
		t->strip_at = bvs;
	}
	for (size_t m = 0; m < in->nmodels; m++)
		t->orig[m] = m == in->base ? sb : in->vocab[m] ? (struct mk_vocab *)in->vocab[m] : sb;
	/* what the output starts from */
	const struct mk_vocab *from = sb;
	t->from_model = in->base;
	if (in->source == MK_TOKMERGE_MODEL) {
		t->from_model = in->source_model;
		from = in->vocab[in->source_model];
		t->strip_at = -1;
		if (!from) {
			rc = mk_err_set(err, MK_EFORMAT, "the tokenizer source '%s' has no tokenizer",
					in->label[in->source_model]);
			goto out;
		}
	} else if (t->strip_at < 0) {
		from = bv;
	}
	t->out_from = in->source == MK_TOKMERGE_MODEL ? from : bv;
	if (!(t->outv = vocab_cut(from, from->n)))
		goto nomem;
	t->n = t->outv->n;
	cap = t->n;
	if (in->source == MK_TOKMERGE_UNION && (rc = build_union(in, t, t->orig, &cap)))
		goto nomem;
	for (size_t k = 0; k < in->nextra; k++) {
		struct mk_added_token plain = { .content = (char *)in->extra[k], .normalized = true };
		if (append(t, &cap, &plain))
			goto nomem;
	}
	/* the maps */
	for (size_t m = 0; m < in->nmodels; m++) {
		const struct mk_vocab *mv = t->orig[m];
		long long n = in->vocab_size && in->vocab_size[m] > 0 ? in->vocab_size[m] : (long long)mv->ntok;
		size_t padding = 0;
		if (!(t->map[m] = malloc((t->n + 1) * sizeof(**t->map))))
			goto nomem;
		for (size_t id = 0; id < t->n; id++) {
			long long old = t->outv->token[id] ? mk_vocab_find(mv, t->outv->token[id]) : -1;
			if (old >= n) {
				padding++;
				old = -1;
			}
			t->map[m][id] = (int32_t)old;
		}
		if (padding)
			warnf(in, "model '%s': %zu token%s of the output %s ids at or past its vocab size %lld (padding?): taken as absent",
			      in->label[m], padding, padding == 1 ? "" : "s", padding == 1 ? "has" : "have", n);
	}
	t->token = t->outv->token; /* outv owns them */
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	if (rc) {
		mk_tokmerge_free(t);
		return rc;
	}
	*out = t;
	return 0;
}
