/* auto.c - infer an architecture from checkpoint tensor names
 * alone, as mergekit does when a model's architecture is unknown, without
 * its transformers meta-device pass and made deterministic (mk-compat(7)). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"
#include "arch_impl.h"

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A sorted, unique copy of a name array (pointers borrowed). */
static const char **sorted_names(const char *const *names, size_t n, size_t *nu)
{
	const char **s = malloc((n ? n : 1) * sizeof(*s));
	size_t u = 0;

	if (!s)
		return NULL;
	memcpy(s, names, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_str);
	for (size_t i = 0; i < n; i++)
		if (!u || strcmp(s[u - 1], s[i]))
			s[u++] = s[i];
	*nu = u;
	return s;
}

static bool in_sorted(const char **s, size_t n, const char *name)
{
	return bsearch(&name, s, n, sizeof(*s), cmp_str) != NULL;
}

/* The first ".<digits>." in name: its start, the digits' span, the index. */
static bool layer_match(const char *name, size_t *start, size_t *end, long *idx)
{
	for (const char *p = strchr(name, '.'); p; p = strchr(p + 1, '.')) {
		const char *d = p + 1;
		long v = 0;
		size_t nd = 0;

		while (*d >= '0' && *d <= '9') {
			if (nd < 9)
				v = v * 10 + (*d - '0');
			d++;
			nd++;
		}
		if (nd && nd <= 9 && *d == '.') {
			*start = (size_t)(p - name);
			*end = (size_t)(d - name);   /* at the closing '.' */
			*idx = v;
			return true;
		}
	}
	return false;
}

struct tmpl {
	char *prefix;      /* module prefix (before the layer number) */
	char *name;        /* full name with .${layer_index}. */
	size_t split;      /* where ".${layer_index}." starts in name */
};

static int cmp_tmpl(const void *a, const void *b)
{
	const struct tmpl *x = a, *y = b;
	int c = strcmp(x->prefix, y->prefix);

	return c ? c : strcmp(x->name, y->name);
}

struct ctx {
	const struct mk_arch_names *models;
	size_t nmodels;
	const char ***sorted;  /* per model: sorted unique names */
	size_t *nsorted;
};

static bool in_all(const struct ctx *c, const char *name)
{
	for (size_t m = 0; m < c->nmodels; m++)
		if (!in_sorted(c->sorted[m], c->nsorted[m], name))
			return false;
	return true;
}

/* dim-0 size of a name in the first model that has it (0: unknown). */
static uint64_t rows_of(const struct ctx *c, const char *name, uint64_t *vocab)
{
	for (size_t m = 0; m < c->nmodels; m++) {
		const struct mk_arch_names *mn = &c->models[m];
		if (!mn->rows)
			continue;
		for (size_t i = 0; i < mn->n; i++)
			if (!strcmp(mn->names[i], name)) {
				*vocab = mn->vocab_size;
				return mn->rows[i];
			}
	}
	return 0;
}

static bool embed_by_name(const char *s)
{
	return (strstr(s, "embed") || strstr(s, "lm_head") || strstr(s, "wte")) &&
	       !strstr(s, "position") && !strstr(s, "norm") && !strstr(s, "type");
}

static bool is_embed(const struct ctx *c, const char *name)
{
	uint64_t vocab = 0, rows = rows_of(c, name, &vocab);

	if (rows && vocab)
		return rows == vocab;
	return embed_by_name(name);
}

static int set_weight(struct mk_weight *w, const char *name, enum mk_wsection sec, size_t module)
{
	memset(w, 0, sizeof(*w));
	w->section = sec;
	w->layer = -1;
	w->module = module;
	return (w->name = strdup(name)) ? 0 : -1;
}

#define NOMEM() do { \
		rc = mk_err_set(err, MK_ENOMEM, "out of memory inferring an architecture"); \
		goto out; \
	} while (0)

int mk_arch_infer(const struct mk_arch_names *models, size_t nmodels, struct mk_arch **out, struct mk_err *err)
{
	struct ctx c = { models, nmodels, NULL, NULL };
	const char **all = NULL, **loose = NULL;
	struct tmpl *t = NULL;
	size_t nall = 0, nt = 0, nloose = 0, total = 0, nprefix = 0;
	long *counts = NULL;      /* per distinct prefix */
	char **prefixes = NULL;   /* distinct prefixes, sorted */
	struct mk_arch *a = NULL;
	const char **cat = NULL;
	char buf[4096];
	int rc = 0;

	*out = NULL;
	for (size_t m = 0; m < nmodels; m++)
		total += models[m].n;
	if (!total) {
		rc = mk_err_set(err, MK_EINVAL, "cannot infer an architecture: the models have no tensors");
		goto out;
	}
	c.sorted = calloc(nmodels, sizeof(*c.sorted));
	c.nsorted = calloc(nmodels, sizeof(*c.nsorted));
	cat = malloc(total * sizeof(*cat));
	if (!c.sorted || !c.nsorted || !cat)
		NOMEM();
	total = 0;
	for (size_t m = 0; m < nmodels; m++) {
		if (!(c.sorted[m] = sorted_names(models[m].names, models[m].n, &c.nsorted[m])))
			NOMEM();
		memcpy(cat + total, models[m].names, models[m].n * sizeof(*cat));
		total += models[m].n;
	}
	if (!(all = sorted_names(cat, total, &nall)))
		NOMEM();
	t = calloc(nall, sizeof(*t));
	loose = malloc(nall * sizeof(*loose));
	counts = calloc(nall, sizeof(*counts));
	prefixes = calloc(nall, sizeof(*prefixes));
	if (!t || !loose || !counts || !prefixes)
		NOMEM();
	/* templates and prefixes */
	for (size_t i = 0; i < nall; i++) {
		size_t s, e;
		long idx;

		if (!layer_match(all[i], &s, &e, &idx)) {
			loose[nloose++] = all[i];
			continue;
		}
		if (snprintf(buf, sizeof(buf), "%.*s.${layer_index}%s", (int)s, all[i], all[i] + e) >=
		    (int)sizeof(buf)) {
			rc = mk_err_set(err, MK_EINVAL, "tensor name too long: %.64s...", all[i]);
			goto out;
		}
		t[nt].prefix = strndup(all[i], s);
		t[nt].name = strdup(buf);
		t[nt].split = s;
		if (!t[nt].prefix || !t[nt].name) {
			nt++;
			NOMEM();
		}
		nt++;
		/* layer count of the prefix */
		size_t p;
		for (p = 0; p < nprefix && strcmp(prefixes[p], t[nt - 1].prefix); p++)
			;
		if (p == nprefix && !(prefixes[nprefix++] = strdup(t[nt - 1].prefix)))
			NOMEM();
		if (idx + 1 > counts[p])
			counts[p] = idx + 1;
	}
	/* sort prefixes (with their counts) and templates */
	for (size_t i = 1; i < nprefix; i++)
		for (size_t j = i; j > 0 && strcmp(prefixes[j - 1], prefixes[j]) > 0; j--) {
			char *ts = prefixes[j];
			long tc = counts[j];
			prefixes[j] = prefixes[j - 1];
			counts[j] = counts[j - 1];
			prefixes[j - 1] = ts;
			counts[j - 1] = tc;
		}
	qsort(t, nt, sizeof(*t), cmp_tmpl);
	size_t u = 0;
	for (size_t i = 0; i < nt; i++) {
		if (u && !cmp_tmpl(&t[u - 1], &t[i])) {
			free(t[i].prefix);
			free(t[i].name);
			continue;
		}
		t[u++] = t[i];
	}
	nt = u;

	a = calloc(1, sizeof(*a));
	if (!a || !(a->model_type = strdup("")))
		NOMEM();
	a->kind = MK_ARCH_INFERRED;
	a->num_experts = a->first_k_dense = -1;
	/* modules: catch-all "default" first (when it has names or is the only
	 * one), then one per prefix; with a single prefix everything is in
	 * "default" */
	bool single = nprefix == 1;
	size_t nmod = single ? 1 : nprefix + (nloose || !nprefix ? 1 : 0);
	a->modules = calloc(nmod, sizeof(*a->modules));
	if (!a->modules)
		NOMEM();
	size_t first_prefix_module = single ? 0 : (nloose || !nprefix ? 1 : 0);
	for (size_t m = 0; m < nmod; m++) {
		struct mk_arch_module *mod = &a->modules[m];
		bool is_default = single || m < first_prefix_module;
		size_t pi = single ? 0 : m - first_prefix_module;

		a->nmodules++;
		mod->override_num_layers = is_default && !single ? 0 : counts[pi];
		if (!(mod->name = strdup(is_default ? "default" : prefixes[pi])))
			NOMEM();
		if (is_default) {
			/* every loose name, unchanged */
			mod->pre = calloc(nloose ? nloose : 1, sizeof(*mod->pre));
			if (!mod->pre)
				NOMEM();
			for (size_t i = 0; i < nloose; i++) {
				struct mk_weight *w = &mod->pre[mod->npre];
				if (set_weight(w, loose[i], MK_WS_PRE, m))
					NOMEM();
				mod->npre++;
				w->optional = !in_all(&c, loose[i]);
				w->is_embed = is_embed(&c, loose[i]);
			}
		}
		if (!is_default || single) {
			const char *pref = prefixes[pi];
			size_t k = 0;
			for (size_t i = 0; i < nt; i++)
				k += !strcmp(t[i].prefix, pref);
			mod->layer = calloc(k ? k : 1, sizeof(*mod->layer));
			if (!mod->layer)
				NOMEM();
			for (size_t i = 0; i < nt; i++) {
				struct mk_weight *w = &mod->layer[mod->nlayer];
				bool present = true;

				if (strcmp(t[i].prefix, pref))
					continue;
				if (set_weight(w, t[i].name, MK_WS_LAYER, m))
					NOMEM();
				mod->nlayer++;
				for (long l = 0; present && l < counts[pi]; l++) {
					snprintf(buf, sizeof(buf), "%s.%ld%s", t[i].prefix, l,
						 t[i].name + t[i].split + strlen(".${layer_index}"));
					present = in_all(&c, buf);
					if (!l)
						w->is_embed = is_embed(&c, buf);
				}
				w->optional = !present;
			}
		}
	}
	/* an optional lm_head-like weight falls back to the input embedding */
	for (size_t m = 0; m < a->nmodules; m++) {
		struct mk_arch_module *mod = &a->modules[m];
		const char *emb = NULL;

		for (size_t i = 0; i < mod->npre && !emb; i++)
			if (mod->pre[i].is_embed && !strstr(mod->pre[i].name, "lm_head") &&
			    strcmp(mod->pre[i].name, "output.weight"))
				emb = mod->pre[i].name;
		for (size_t i = 0; emb && i < mod->npre; i++) {
			struct mk_weight *w = &mod->pre[i];
			if (!w->optional || !strstr(w->name, "lm_head"))
				continue;
			if (!(w->tied_names = calloc(1, sizeof(char *))) || !(w->tied_names[0] = strdup(emb)))
				NOMEM();
			w->ntied = 1;
		}
	}
	*out = a;
	a = NULL;
out:
	mk_arch_free(a);
	for (size_t i = 0; t && i < nt; i++) {
		free(t[i].prefix);
		free(t[i].name);
	}
	free(t);
	mk_strv_free(prefixes, nprefix);
	free(counts);
	free(loose);
	free(all);
	free(cat);
	for (size_t m = 0; c.sorted && m < nmodels; m++)
		free(c.sorted[m]);
	free(c.sorted);
	free(c.nsorted);
	return rc;
}
