/* plan_extract.c - mk-extract-lora's plan (planner/plan_extract.h): the
 * fine-tune's modules walked in transformers' order, each saved whole,
 * decomposed or passed over as mergekit-extract-lora decides, and planned
 * through plan_tensor with the method of its kind: lora_extract (a
 * matrix: three outputs), delta (a bias's change), passthrough (a module
 * saved whole). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/planner_impl.h"

enum kind {
	K_MATRIX,       /* a 2-D weight: decomposed */
	K_EMBED_IN,     /* the input embedding: decomposed transposed */
	K_EMBED_OUT,    /* the output embedding: decomposed as a matrix */
	K_OTHER,        /* a norm, a vector: saved whole or skipped */
};

struct mod {
	const struct mk_weight *w;    /* NAME.weight */
	const struct mk_weight *bias; /* NAME.bias, when the architecture has it */
	char *name;                   /* NAME */
	enum kind kind;
	size_t order;                 /* position in transformers' order */
};

struct walk {
	struct mk_plan *p;
	const struct mk_plan_extract *o;
	struct mk_diags *d;
	long bi, fi;                  /* the base's and the fine-tune's plan index */
	pcre2_code **inc, **exc;
	struct mk_extract_info *x;
	char **warned;                /* last components said undecomposable */
	size_t nwarned;
	bool embed_lora;
};

void plan_extract_info_free(struct mk_extract_info *x)
{
	if (!x)
		return;
	for (size_t i = 0; i < x->nmodules; i++) {
		free(x->modules[i].name);
		free(x->modules[i].a);
		free(x->modules[i].b);
		free(x->modules[i].stats);
	}
	free(x->modules);
	for (size_t i = 0; i < x->nsave; i++)
		free(x->modules_to_save[i]);
	free(x->modules_to_save);
	for (size_t i = 0; i < x->ntargets; i++)
		free(x->target_modules[i]);
	free(x->target_modules);
	free(x);
}

/* ------------------------------------------------------------ names */

static const char *last_component(const char *name)
{
	const char *dot = strrchr(name, '.');
	return dot ? dot + 1 : name;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && !strcmp(s + n - k, suffix);
}

static int push_str(char ***v, size_t *n, const char *s, struct mk_err *err)
{
	char **q = realloc(*v, (*n + 1) * sizeof(**v));
	if (!q)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*v = q;
	if (!(q[*n] = strdup(s)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	(*n)++;
	return 0;
}

static bool has_str(char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i], s))
			return true;
	return false;
}

/* ------------------------------------------------------------ expressions */

static int compile_all(const char *const *src, size_t n, const char *opt, pcre2_code ***out, struct mk_diags *d,
		       struct mk_err *err)
{
	if (!n)
		return 0;
	if (!(*out = calloc(n, sizeof(**out))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		int ec;
		PCRE2_SIZE at;
		(*out)[i] = pcre2_compile((PCRE2_SPTR)src[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &at, NULL);
		if (!(*out)[i]) {
			PCRE2_UCHAR msg[256];
			pcre2_get_error_message(ec, msg, sizeof(msg));
			diag(d, MK_DIAG_ERROR, NULL, "%s '%s': %s at offset %zu", opt, src[i], (const char *)msg,
			     (size_t)at);
		}
	}
	return 0;
}

static void free_all(pcre2_code **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		pcre2_code_free(v[i]);
	free(v);
}

/* Does any expression find a match in name (re.search)? */
static bool search_any(pcre2_code *const *v, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++) {
		if (!v[i])
			continue;
		pcre2_match_data *md = pcre2_match_data_create_from_pattern(v[i], NULL);
		int rc = md ? pcre2_match(v[i], (PCRE2_SPTR)name, strlen(name), 0, 0, md, NULL) : -1;
		pcre2_match_data_free(md);
		if (rc >= 0)
			return true;
	}
	return false;
}

static bool excluded(const struct walk *w, const char *name)
{
	return search_any(w->exc, w->o->nexclude, name);
}

/* mergekit's filter of the modules it decomposes: some -i matches (when
 * any is given) and no -e does */
static bool should_extract(const struct walk *w, const char *name)
{
	if (w->o->ninclude && !search_any(w->inc, w->o->ninclude, name))
		return false;
	return !excluded(w, name);
}

/* ------------------------------------------------------------ the modules */

static bool has_tensor(void *ctx, const char *name)
{
	return mk_model_find(ctx, name) != NULL;
}

/* The fine-tune's tensor of weight w (its name, an alias or a tied name),
 * or NULL. */
static const struct mk_st_tensor *ft_tensor(const struct walk *w, const struct mk_weight *wt)
{
	const struct mk_model *m = w->p->models[w->fi].m;
	const char *nm = mk_weight_resolve(wt, has_tensor, (void *)m, NULL);
	const struct mk_model_tensor *mt = nm ? mk_model_find(m, nm) : NULL;
	return mt ? mt->t : NULL;
}

/* transformers builds a decoder layer's sub-modules (self_attn, mlp)
 * before its own norms: a layer's weights whose name below the layer has
 * a dot come first, each group in the architecture's order */
static int cmp_order(const void *a, const void *b)
{
	const struct mod *x = a, *y = b;
	return x->order < y->order ? -1 : x->order > y->order;
}

static size_t below_layer_dots(const char *name, int64_t layer)
{
	char tag[32];
	snprintf(tag, sizeof(tag), ".%lld.", (long long)layer);
	const char *at = strstr(name, tag);
	return at && strchr(at + strlen(tag), '.') ? 1 : 0;
}

static int collect(struct walk *w, const struct mk_weight_list *l, struct mod **out, size_t *nout,
		   struct mk_err *err)
{
	struct mod *v = calloc(l->n + 1, sizeof(*v));
	size_t n = 0;

	if (!v)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < l->n; i++) {
		const struct mk_weight *wt = &l->w[i];
		if (!ends_with(wt->name, ".weight"))
			continue;
		struct mod *m = &v[n];
		size_t base = strlen(wt->name) - strlen(".weight");
		if (!(m->name = strndup(wt->name, base))) {
			for (size_t k = 0; k < n; k++)
				free(v[k].name);
			free(v);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		m->w = wt;
		for (size_t k = 0; k < l->n; k++)
			if (!strncmp(l->w[k].name, m->name, base) && !strcmp(l->w[k].name + base, ".bias"))
				m->bias = &l->w[k];
		const struct mk_st_tensor *t = ft_tensor(w, wt);
		if (wt->is_embed && wt->section == MK_WS_PRE)
			m->kind = K_EMBED_IN;
		else if (wt->is_embed && wt->section == MK_WS_POST)
			m->kind = K_EMBED_OUT;
		else
			m->kind = t && t->desc.ndim == 2 ? K_MATRIX : K_OTHER;
		/* position: the list's, but a layer's own weights (its norms)
		 * after its last one, among themselves in the list's order */
		size_t major = i, minor = 0;
		if (wt->section == MK_WS_LAYER && !below_layer_dots(wt->name, wt->layer)) {
			major = i;
			while (major + 1 < l->n && l->w[major + 1].section == MK_WS_LAYER &&
			       l->w[major + 1].layer == wt->layer && l->w[major + 1].module == wt->module)
				major++;
			minor = 1 + i;
		}
		m->order = major * (l->n + 2) + minor;
		n++;
	}
	qsort(v, n, sizeof(*v), cmp_order);
	*out = v;
	*nout = n;
	return 0;
}

/* ------------------------------------------------------------ planning */

/* A module whose SVD does not fit: what would. */
static void budget_hint(const struct tplan *t, uint64_t need, char *buf, size_t len)
{
	(void)t;
	(void)need;
	snprintf(buf, len, "; --randomized holds the delta and O((rows + columns) x rank) more, "
		 "or -e leaves the module out");
}

static int plan_one(struct walk *w, const struct mk_weight *wt, const char *out_name, const struct mk_method *m,
		    const char *const *more, unsigned nmore, bool transpose, bool with_base, bool *planned,
		    struct mk_err *err)
{
	struct mk_plan *p = w->p;
	const struct mk_config *c = p->cfg;
	struct mk_weight ow = *wt;
	struct src_in srcs[2];
	size_t ns = 0;

	ow.name = (char *)out_name;
	if (with_base)
		srcs[ns++] = (struct src_in){ w->bi, c->base_model, wt, NULL };
	srcs[ns++] = (struct src_in){ w->fi, &c->models[0].model, wt, &c->models[0].params };
	struct tctx tc = { .scope = { &c->params, NULL, NULL }, .base = with_base ? c->base_model : NULL,
			   .loc = NULL, .method = m, .more_names = more, .nmore_names = nmore,
			   .set_param = transpose ? "transpose" : NULL, .set_value = mk_pval_bool(true),
			   .tied_present = true, .budget_hint = budget_hint };
	size_t before = p->njobs;
	int rc = plan_tensor(p, &ow, srcs, ns, &tc, w->d, err);
	*planned = !rc && p->njobs > before;
	return rc;
}

static char *prefixed(const char *a, const char *b, const char *c)
{
	char *s = NULL;
	return asprintf(&s, "%s%s%s", a, b, c) < 0 ? NULL : s;
}

/* Save a module whole: its weight and its bias, as the fine-tune has them. */
static int plan_save(struct walk *w, const struct mod *md, struct mk_err *err)
{
	const struct mk_method *pt = mk_method_find("passthrough");
	int rc = 0;

	for (int k = 0; k < 2 && !rc; k++) {
		const struct mk_weight *wt = k ? md->bias : md->w;
		if (!wt)
			continue;
		char *name = prefixed("base_model.model.", wt->name, "");
		bool planned;
		if (!name)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		rc = plan_one(w, wt, name, pt, NULL, 0, false, false, &planned, err);
		free(name);
	}
	return rc;
}

/* Decompose a module: A, B and the statistics from one job; its bias's
 * change from another. */
static int plan_lora(struct walk *w, const struct mod *md, struct mk_err *err)
{
	struct mk_plan *p = w->p;
	bool emb = md->kind == K_EMBED_IN;
	const char *ty = emb ? ".lora_embedding_" : ".lora_", *sfx = emb ? "" : ".weight";
	char *a = NULL, *b = NULL, *st = NULL, *pfx = prefixed("base_model.model.", md->name, ty);
	bool planned = false;
	int rc = 0;

	if (pfx) {
		a = prefixed(pfx, "A", sfx);
		b = prefixed(pfx, "B", sfx);
		st = prefixed("mk.extract.stats.", md->name, "");
	}
	if (!pfx || !a || !b || !st) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	const char *more[2] = { b, st };
	rc = plan_one(w, md->w, a, mk_method_find("lora_extract"), more, 2, emb, true, &planned, err);
	if (rc || !planned)
		goto out;
	struct mk_extract_info *x = w->x;
	struct mk_extract_module *em = realloc(x->modules, (x->nmodules + 1) * sizeof(*em));
	if (!em) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	x->modules = em;
	em = &x->modules[x->nmodules];
	const struct mk_manifest *man = p->man;
	const struct mk_plan_job *j = p->jobs[p->njobs - 1];
	const struct mk_tensor_desc *da = &man->tensors[j->output].desc, *db = &man->tensors[j->more[0]].desc;
	*em = (struct mk_extract_module){ .name = strdup(md->name), .a = a, .b = b, .stats = st, .embedding = emb,
					  .rows = db->shape[0], .cols = da->shape[1], .r0 = da->shape[0] };
	a = b = st = NULL;
	x->nmodules++;
	if (!em->name) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (!has_str(x->target_modules, x->ntargets, last_component(md->name)) &&
	    (rc = push_str(&x->target_modules, &x->ntargets, last_component(md->name), err)))
		goto out;
	if (md->bias) {
		char *bn = prefixed("base_model.model.", md->name, ".lora_B.bias");
		if (!bn) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		rc = plan_one(w, md->bias, bn, mk_method_find("delta"), NULL, 0, false, true, &planned, err);
		free(bn);
		if (!rc && planned)
			x->nbiases++;
	}
out:
	free(pfx);
	free(a);
	free(b);
	free(st);
	return rc;
}

static bool in_save(const struct walk *w, const char *name)
{
	return has_str(w->x->modules_to_save, w->x->nsave, name) ||
	       has_str(w->x->modules_to_save, w->x->nsave, last_component(name));
}

/* One module, as mergekit-extract-lora decides (extract.h). */
static int visit(struct walk *w, const struct mod *md, struct mk_err *err)
{
	struct mk_extract_info *x = w->x;
	const char *key = last_component(md->name);
	bool emb = md->kind == K_EMBED_IN || md->kind == K_EMBED_OUT;
	int rc;

	if (!ft_tensor(w, md->w) && md->w->optional)
		return 0;   /* a module the fine-tune does not have */
	if (!w->embed_lora && emb && !excluded(w, md->name) && !has_str(x->modules_to_save, x->nsave, key)) {
		diag(w->d, MK_DIAG_WARNING, NULL, "%s is saved whole (modules_to_save): %s", key,
		     w->o->embed_lora ? "the vocabularies differ" : "no --embed-lora");
		if ((rc = push_str(&x->modules_to_save, &x->nsave, key, err)))
			return rc;
	}
	if (in_save(w, md->name))
		return plan_save(w, md, err);
	if (!should_extract(w, md->name))
		return 0;
	if (md->kind != K_OTHER)
		return plan_lora(w, md, err);
	if (!has_str(w->warned, w->nwarned, key)) {
		const struct mk_st_tensor *t = ft_tensor(w, md->w);
		diag(w->d, MK_DIAG_WARNING, NULL, "%s is not a matrix (%u dimensions): %s", key, t ? t->desc.ndim : 0,
		     w->o->skip_undecomposable ? "skipped (--skip-undecomposable)" : "saved whole (modules_to_save)");
		if ((rc = push_str(&w->warned, &w->nwarned, key, err)))
			return rc;
	}
	if (w->o->skip_undecomposable)
		return 0;
	if (!has_str(x->modules_to_save, x->nsave, key) && (rc = push_str(&x->modules_to_save, &x->nsave, key, err)))
		return rc;
	return plan_save(w, md, err);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The rows of a model's input embedding (its tensor, else the config's
 * vocabulary size; 0 when neither). */
static uint64_t vocab_rows(const struct walk *w, long mi, const struct mk_weight_list *l)
{
	const struct pmodel *pm = &w->p->models[mi];
	for (size_t i = 0; i < l->n; i++)
		if (l->w[i].is_embed && l->w[i].section == MK_WS_PRE) {
			const char *nm = mk_weight_resolve(&l->w[i], has_tensor, pm->m, NULL);
			const struct mk_model_tensor *mt = nm ? mk_model_find(pm->m, nm) : NULL;
			if (mt && mt->t->desc.ndim == 2)
				return mt->t->desc.shape[0];
		}
	int64_t v = 0;
	if (pm->hf && pm->arch && !mk_hfconfig_int(pm->hf, mk_arch_vocab_key(pm->arch), &v, NULL) && v > 0)
		return (uint64_t)v;
	return 0;
}

int plan_extract(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
{
	const struct mk_config *c = p->cfg;
	struct walk w = { .p = p, .o = p->o->extract, .d = d };
	struct mk_weight_list l = { 0 };
	struct mod *mods = NULL;
	size_t nmods = 0;
	int64_t *nl = NULL;
	int rc = 0;

	if (!c->base_model || c->nmodels != 1 || c->nslices || c->nmodules)
		return mk_err_set(err, MK_EINVAL, "an extraction's configuration names a base_model and one model");
	w.bi = plan_model_index(p, c->base_model);
	w.fi = plan_model_index(p, &c->models[0].model);
	if (w.bi < 0 || w.fi < 0)
		return mk_err_set(err, MK_EINVAL, "an extraction's models are not in the plan");
	if (w.bi == w.fi) {
		diag(d, MK_DIAG_ERROR, NULL, "the fine-tune and the base are the same model ('%s'): nothing to extract",
		     p->models[w.fi].display);
		return 0;
	}
	if (!(w.x = p->extract = calloc(1, sizeof(*p->extract))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < w.o->nsave && !rc; i++)
		if (!has_str(w.x->modules_to_save, w.x->nsave, w.o->save[i]))
			rc = push_str(&w.x->modules_to_save, &w.x->nsave, w.o->save[i], err);
	if (rc || (rc = compile_all(w.o->include, w.o->ninclude, "--include-regex", &w.inc, d, err)) ||
	    (rc = compile_all(w.o->exclude, w.o->nexclude, "--exclude-regex", &w.exc, d, err)) || d->nerrors)
		goto out;

	/* the fine-tune's weights, by its architecture */
	const struct mk_arch *a = p->models[w.fi].arch ? p->models[w.fi].arch : p->arch;
	if (!(nl = calloc(a->nmodules + 1, sizeof(*nl)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t m = 0; m < a->nmodules; m++) {
		struct mk_err e = { 0 };
		if (mk_arch_num_layers(a, m, p->models[w.fi].hf, &nl[m], &e)) {
			diag(d, MK_DIAG_ERROR, NULL, "model '%s': %s", p->models[w.fi].display, e.msg);
			goto out;
		}
	}
	if ((rc = mk_arch_planned(a, nl, &l, err)) || (rc = collect(&w, &l, &mods, &nmods, err)))
		goto out;

	/* mergekit saves the embeddings instead when the vocabularies differ */
	w.x->base_vocab = vocab_rows(&w, w.bi, &l);
	w.x->vocab = vocab_rows(&w, w.fi, &l);
	w.embed_lora = w.o->embed_lora && w.x->base_vocab == w.x->vocab;
	if (w.o->embed_lora && !w.embed_lora)
		diag(d, MK_DIAG_WARNING, NULL,
		     "the fine-tune has %llu tokens, the base %llu: the embeddings are saved whole, not decomposed "
		     "(--embed-lora needs one vocabulary)", (unsigned long long)w.x->vocab,
		     (unsigned long long)w.x->base_vocab);
	w.x->embed_lora = w.embed_lora;
	for (size_t i = 0; i < nmods && !rc; i++)
		rc = visit(&w, &mods[i], err);
	if (rc || d->nerrors)
		goto out;
	if (!w.x->nmodules) {
		diag(d, MK_DIAG_ERROR, NULL, "no module to decompose: %s; an adapter needs at least one",
		     w.o->ninclude || w.o->nexclude ? "--include-regex and --exclude-regex leave none" :
						       "every module is saved whole");
		goto out;
	}
	qsort(w.x->target_modules, w.x->ntargets, sizeof(*w.x->target_modules), cmp_str);
out:
	for (size_t i = 0; i < nmods; i++)
		free(mods[i].name);
	free(mods);
	mk_weight_list_free(&l);
	free(nl);
	free_all(w.inc, w.o->ninclude);
	free_all(w.exc, w.o->nexclude);
	for (size_t i = 0; i < w.nwarned; i++)
		free(w.warned[i]);
	free(w.warned);
	return rc;
}
