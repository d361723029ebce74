/* schema.c - the walk over the YAML node graph: each key table (the
 * known keys of a map, with "did you mean" for the others) and the
 * structure it fills, from the top-level map down to parameter values.
 * Every node entered is counted against VISIT_MAX. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"

/* ------------------------------------------------------------ paths and locations */

static char *jpath(struct parser *p, const char *base, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static char *jpath(struct parser *p, const char *base, const char *fmt, ...)
{
	char *tail = NULL, *res = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&tail, fmt, ap);
	va_end(ap);
	if (r < 0) {
		p->nomem = true;
		return NULL;
	}
	/* "[i]" attaches directly; a name gets a dot after a non-empty base */
	if (asprintf(&res, "%s%s%s", base ? base : "",
		     base && base[0] && tail[0] != '[' ? "." : "", tail) < 0) {
		res = NULL;
		p->nomem = true;
	}
	free(tail);
	return res;
}

static void set_loc(struct mk_config_loc *l, const yaml_node_t *n, char *path)
{
	l->line = (unsigned)n->start_mark.line + 1;
	l->col = (unsigned)n->start_mark.column + 1;
	l->path = path;
}

/* ------------------------------------------------------------ nodes */

static yaml_node_t *node(struct parser *p, int idx)
{
	return yaml_document_get_node(&p->doc, idx);
}

/* Count a visit; false once the budget is spent (reported once). */
static bool enter(struct parser *p, const yaml_node_t *n)
{
	if (p->over)
		return false;
	if (++p->visits > VISIT_MAX) {
		p->over = true;
		if (p->aliases)
			ERR(p, n, "", "the document expands to more than %u nodes through its %zu "
			    "alias%s; refusing to read it", VISIT_MAX, p->aliases, p->aliases == 1 ? "" : "es");
		else
			ERR(p, n, "", "the document has more than %u nodes; refusing to read it", VISIT_MAX);
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ maps with known keys */

struct field {
	const char *name;
	yaml_node_t *key, *val;     /* NULL when absent */
};

/* Optimal string alignment distance, for "did you mean". */
static size_t distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[33][33];

	if (la > 32 || lb > 32)
		return 99;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);
			size_t c = ca == cb || (ca == '-' && cb == '_') ? 0 : 1;
			size_t v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + c < v)
				v = d[i - 1][j - 1] + c;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[la][lb];
}

/* Known misnamings that are too far apart for the distance. */
static const char *const hints[][2] = {
	{ "pattern", "filter" },
	{ "layers", "layer_range" },
	{ "range", "layer_range" },
	{ "method", "merge_method" },
	{ "base", "base_model" },
	{ "params", "parameters" },
	{ "tokenizer_config", "tokenizer" },
	{ "template", "chat_template" },
};

static const char *suggest(const char *key, size_t len, const struct field *f, size_t nf)
{
	const char *best = NULL;
	size_t bd = 99;

	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
		if (strlen(hints[i][0]) == len && memcmp(key, hints[i][0], len) == 0)
			for (size_t j = 0; j < nf; j++)
				if (strcmp(f[j].name, hints[i][1]) == 0)
					return f[j].name;
	for (size_t i = 0; i < nf; i++) {
		size_t d = distance(key, len, f[i].name, strlen(f[i].name));
		if (d < bd) {
			bd = d;
			best = f[i].name;
		}
	}
	/* close enough: 1 edit for short keys, 2 from 5 characters, 3 from 10 */
	if (best && bd <= (len >= 10 ? 3u : len >= 5 ? 2u : 1u))
		return best;
	return NULL;
}

/* Fill `f` from mapping node `map`: unknown keys and repeated keys are
 * warnings (mergekit ignores the first and keeps the last value of the
 * second), a key that is not a scalar is an error. */
static void get_fields(struct parser *p, yaml_node_t *map, const char *path,
		       struct field *f, size_t nf)
{
	bool has_params = false;

	for (size_t i = 0; i < nf; i++) {
		f[i].key = f[i].val = NULL;
		if (strcmp(f[i].name, "parameters") == 0)
			has_params = true;
	}
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start;
	     pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
		const char *ks;
		size_t kl, i;
		char ex[64];

		if (!k || !v || !enter(p, k))
			return;
		if (k->type != YAML_SCALAR_NODE) {
			ERR(p, k, path, "a key must be a plain name, found %s", mk__node_kind(k));
			continue;
		}
		ks = (const char *)k->data.scalar.value;
		kl = k->data.scalar.length;
		for (i = 0; i < nf; i++)
			if (strlen(f[i].name) == kl && memcmp(f[i].name, ks, kl) == 0)
				break;
		if (i < nf) {
			if (f[i].val)
				WARN(p, k, path, "key '%s' is given twice; the later value is "
				     "used", f[i].name);
			f[i].key = k;
			f[i].val = v;
			continue;
		}
		const char *s = suggest(ks, kl, f, nf);
		if (s)
			WARN(p, k, path, "unknown key '%s' is ignored (did you mean '%s'?)",
			     mk__node_excerpt(k, ex, sizeof(ex)), s);
		else if (has_params)
			WARN(p, k, path, "unknown key '%s' is ignored (merge parameters go "
			     "under 'parameters:')", mk__node_excerpt(k, ex, sizeof(ex)));
		else
			WARN(p, k, path, "unknown key '%s' is ignored", mk__node_excerpt(k, ex, sizeof(ex)));
	}
}

static yaml_node_t *fval(const struct field *f, size_t nf, const char *name)
{
	for (size_t i = 0; i < nf; i++)
		if (strcmp(f[i].name, name) == 0)
			return f[i].val;
	return NULL;
}

#define NF(a) (sizeof(a) / sizeof((a)[0]))
#define FIELD(f, name) fval(f, NF(f), name)

/* Require a mapping; report otherwise. */
static bool want_map(struct parser *p, yaml_node_t *n, const char *path, const char *what)
{
	if (n->type == YAML_MAPPING_NODE)
		return true;
	ERR(p, n, path, "expected %s (a map), found %s", what, mk__node_kind(n));
	return false;
}

/* An optional list: NULL/null gives 0 items; otherwise a sequence. */
static bool want_list(struct parser *p, yaml_node_t *n, const char *path,
		      const char *what, size_t *count)
{
	*count = 0;
	if (mk__node_is_null(n))
		return true;
	if (n->type != YAML_SEQUENCE_NODE) {
		ERR(p, n, path, "expected %s (a list), found %s", what, mk__node_kind(n));
		return false;
	}
	*count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	return true;
}

static yaml_node_t *item(struct parser *p, yaml_node_t *seq, size_t i)
{
	return node(p, seq->data.sequence.items.start[i]);
}

/* An optional list of `what` (null: none): an array for its items,
 * calloc'ed (size bytes an item), their count in *n.  NULL with *n 0 for
 * an empty list; NULL with *ok false when v is no list, has more than max
 * items (0: any number), or memory ran out. */
static void *list_new(struct parser *p, yaml_node_t *v, const char *path, const char *what,
		      size_t size, size_t max, size_t *n, bool *ok)
{
	void *items;
	size_t cnt;

	*n = 0;
	if (!want_list(p, v, path, what, &cnt)) {
		*ok = false;
		return NULL;
	}
	if (!cnt)
		return NULL;
	if (max && cnt > max) {
		ERR(p, v, path, "%zu %s, more than the %zu mk merges at once; refusing to read it", cnt, what, max);
		*ok = false;
		return NULL;
	}
	if (!(items = calloc(cnt, size))) {
		p->nomem = true;
		*ok = false;
		return NULL;
	}
	*n = cnt;
	return items;
}

/* Fills the array items' item i from node n, its location at path (which
 * it keeps); false when the item is bad. */
typedef bool list_item_fn(struct parser *p, yaml_node_t *n, char *path, void *items, size_t i);

/* The n items of the list v, each at path[i], through fn (until the node
 * budget is spent); good[i] (good may be NULL) whether item i is good.
 * False when one is not. */
static bool list_items(struct parser *p, yaml_node_t *v, const char *path, size_t n,
		       list_item_fn *fn, void *items, bool *good)
{
	bool ok = true;

	for (size_t i = 0; i < n && !p->over; i++) {
		yaml_node_t *it = item(p, v, i);
		char *ip = jpath(p, path, "[%zu]", i);
		bool g = fn(p, it, ip, items, i);
		if (good)
			good[i] = g;
		ok = g && ok;
	}
	return ok;
}

/* ------------------------------------------------------------ model references */

static bool model_path(struct parser *p, yaml_node_t *n, const char *path,
		       struct mk_model_path *out)
{
	const char *why = NULL;
	char ex[64];
	int rc;

	if (n->type == YAML_MAPPING_NODE) {
		struct field f[] = { { .name = "path" }, { .name = "revision" } };
		yaml_node_t *v;
		char *cp = NULL;

		get_fields(p, n, path, f, NF(f));
		if (!(v = FIELD(f, "path")) || mk__node_is_null(v)) {
			ERR(p, n, path, "missing 'path'");
			return false;
		}
		cp = jpath(p, path, "path");
		if (!mk__node_to_str(p, v, cp, &out->path)) {
			free(cp);
			return false;
		}
		free(cp);
		if (!out->path[0]) {
			ERR(p, v, path, "the model path is empty");
			return false;
		}
		if ((v = FIELD(f, "revision")) && !mk__node_is_null(v)) {
			cp = jpath(p, path, "revision");
			bool ok = mk__node_to_str(p, v, cp, &out->revision);
			free(cp);
			if (!ok)
				return false;
		}
		return true;
	}
	if (n->type != YAML_SCALAR_NODE || mk__node_is_null(n)) {
		ERR(p, n, path, "expected a model path (a string or {path, revision}), "
		    "found %s", mk__node_kind(n));
		return false;
	}
	char *s = NULL;
	if (!mk__node_to_str(p, n, path, &s))
		return false;
	rc = mk__model_path_parse(s, strlen(s), out, &why);
	free(s);
	if (rc == -MK_ENOMEM)
		p->nomem = true;
	else if (rc < 0)
		ERR(p, n, path, "bad model path '%s': %s", mk__node_excerpt(n, ex, sizeof(ex)), why);
	return rc == 0;
}

/* A model reference, string or map form.  On failure *out holds nothing. */
static bool model_ref(struct parser *p, yaml_node_t *n, const char *path,
		      struct mk_model_ref *out)
{
	struct mk_err e;
	char *cp;
	bool ok = false;

	memset(out, 0, sizeof(*out));
	if (!enter(p, n))
		return false;
	if (n->type == YAML_MAPPING_NODE) {
		struct field f[] = { { .name = "model" }, { .name = "lora" }, { .name = "override_architecture" } };
		yaml_node_t *v;

		get_fields(p, n, path, f, NF(f));
		if (!(v = FIELD(f, "model")) || mk__node_is_null(v)) {
			ERR(p, n, path, "missing 'model' in the model reference");
			goto out;
		}
		cp = jpath(p, path, "model");
		ok = model_path(p, v, cp, &out->model);
		free(cp);
		if ((v = FIELD(f, "lora")) && !mk__node_is_null(v)) {
			cp = jpath(p, path, "lora");
			ok = model_path(p, v, cp, &out->lora) && ok;
			free(cp);
		}
		if ((v = FIELD(f, "override_architecture")) && !mk__node_is_null(v)) {
			cp = jpath(p, path, "override_architecture");
			ok = mk__node_to_str(p, v, cp, &out->override_arch) && ok;
			free(cp);
		}
		goto out;
	}
	if (n->type != YAML_SCALAR_NODE || mk__node_is_null(n)) {
		ERR(p, n, path, "expected a model reference (\"org/name[@rev][+lora]\" or "
		    "{model: ...}), found %s", mk__node_kind(n));
		goto out;
	}
	char *s = NULL;
	if (!mk__node_to_str(p, n, path, &s))
		goto out;
	int rc = mk_model_ref_parse(s, out, &e);
	free(s);
	if (rc == -MK_ENOMEM)
		p->nomem = true;
	else if (rc < 0)
		ERR(p, n, path, "%s", e.msg);
	ok = rc == 0;
out:
	if (ok) {
		char *lp = path ? strdup(path) : NULL;
		if (path && !lp)
			p->nomem = true;
		set_loc(&out->loc, n, lp);
	} else {
		mk_model_ref_clear(out);
	}
	return ok;
}

/* ------------------------------------------------------------ parameter values */

static bool pvalue(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_pvalue *out, bool allow_conds);

static bool cond(struct parser *p, yaml_node_t *n, const char *path, struct mk_pcond *c)
{
	struct field f[] = { { .name = "filter" }, { .name = "value" } };
	yaml_node_t *v;
	char *cp;
	bool ok = true;

	get_fields(p, n, path, f, NF(f));
	if ((v = FIELD(f, "filter")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "filter");
		ok = mk__node_to_str(p, v, cp, &c->filter);
		free(cp);
	}
	if (!(v = FIELD(f, "value"))) {
		ERR(p, n, path, "missing 'value' in the conditional parameter");
		return false;
	}
	cp = jpath(p, path, "value");
	ok = pvalue(p, v, cp, &c->value, false) && ok;
	free(cp);
	return ok;
}

static bool pvalue(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_pvalue *out, bool allow_conds)
{
	size_t cnt, nmap = 0, nscalar = 0;
	bool ok = true;
	char *lp;

	memset(out, 0, sizeof(*out));
	if (!enter(p, n))
		return false;
	if (!(lp = path ? strdup(path) : NULL) && path)
		p->nomem = true;
	set_loc(&out->loc, n, lp);
	switch (n->type) {
	case YAML_SCALAR_NODE:
		if (mk__node_is_null(n)) {
			ERR(p, n, path, "a parameter value cannot be null");
			return false;
		}
		out->kind = MK_PV_SCALAR;
		return mk__node_to_num(p, n, path, &out->scalar);
	case YAML_MAPPING_NODE:
		if (!allow_conds) {
			ERR(p, n, path, "expected a number or a list of numbers, found a map "
			    "(conditionals do not nest)");
			return false;
		}
		out->kind = MK_PV_CONDS;
		out->bare = true;
		if (!(out->conds = calloc(1, sizeof(*out->conds)))) {
			p->nomem = true;
			return false;
		}
		out->nconds = 1;
		set_loc(&out->conds[0].loc, n, NULL);
		if (path && !(out->conds[0].loc.path = strdup(path)))
			p->nomem = true;
		WARN(p, n, path, "a single {filter, value} map is read as a one-element "
		     "list (mergekit itself fails on this form when merging)");
		return cond(p, n, path, &out->conds[0]);
	case YAML_SEQUENCE_NODE:
		break;
	default:
		ERR(p, n, path, "expected a parameter value");
		return false;
	}
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (cnt == 0) {
		ERR(p, n, path, "an empty list is not a parameter value (give a number, "
		    "a gradient of numbers, or {filter, value} entries)");
		return false;
	}
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *it = item(p, n, i);
		if (!it)
			return false;
		if (it->type == YAML_MAPPING_NODE)
			nmap++;
		else if (it->type == YAML_SCALAR_NODE)
			nscalar++;
	}
	if (nmap && allow_conds && nmap == cnt) {
		out->kind = MK_PV_CONDS;
		if (!(out->conds = calloc(cnt, sizeof(*out->conds)))) {
			p->nomem = true;
			return false;
		}
		out->nconds = cnt;
		for (size_t i = 0; i < cnt && !p->over; i++) {
			yaml_node_t *it = item(p, n, i);
			char *cp = jpath(p, path, "[%zu]", i);
			set_loc(&out->conds[i].loc, it, cp);
			if (!enter(p, it) || !cond(p, it, cp, &out->conds[i]))
				ok = false;
		}
		return ok;
	}
	if (nscalar != cnt) {
		if (nmap && nscalar)
			ERR(p, n, path, "a list mixes numbers and {filter, value} maps; give "
			    "either a gradient of numbers or a list of conditionals");
		else if (nmap)
			ERR(p, n, path, "expected a number or a list of numbers, found a "
			    "list of maps (conditionals do not nest)");
		else
			ERR(p, n, path, "a gradient holds numbers, not lists");
		return false;
	}
	out->kind = MK_PV_GRADIENT;
	if (!(out->grad = calloc(cnt, sizeof(double)))) {
		p->nomem = true;
		return false;
	}
	out->n = cnt;
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_t *it = item(p, n, i);
		char cp[512];       /* no allocation per number; cut if longer */
		snprintf(cp, sizeof(cp), "%s[%zu]", path ? path : "", i);
		if (!enter(p, it) || !mk__node_to_num(p, it, cp, &out->grad[i]))
			ok = false;
	}
	return ok;
}

/* A `parameters:` map; null is an empty map.  Returns false on an error
 * (what parsed is kept in *out either way, for the caller to free). */
static bool params(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_params *out)
{
	size_t cnt;
	bool ok = true;
	char ex[64];

	out->n = 0;
	out->v = NULL;
	if (!n || mk__node_is_null(n))
		return true;
	if (!enter(p, n))
		return false;
	if (n->type != YAML_MAPPING_NODE) {
		ERR(p, n, path, "expected parameters (a map of name: value), found %s",
		    mk__node_kind(n));
		return false;
	}
	cnt = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
	if (cnt && !(out->v = calloc(cnt, sizeof(*out->v)))) {
		p->nomem = true;
		return false;
	}
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_pair_t *pr = &n->data.mapping.pairs.start[i];
		yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
		struct mk_param *dst;
		size_t j;

		if (!k || !v)
			return false;
		if (k->type != YAML_SCALAR_NODE ||
		    memchr(k->data.scalar.value, '\0', k->data.scalar.length)) {
			ERR(p, k, path, "a parameter name must be a plain string");
			ok = false;
			continue;
		}
		for (j = 0; j < out->n; j++)
			if (strlen(out->v[j].name) == k->data.scalar.length &&
			    memcmp(out->v[j].name, k->data.scalar.value, k->data.scalar.length) == 0)
				break;
		if (j < out->n) {
			WARN(p, k, path, "parameter '%s' is given twice; the later value is used",
			     mk__node_excerpt(k, ex, sizeof(ex)));
			dst = &out->v[j];
			free(dst->name);
			mk__pvalue_clear(&dst->value);
			mk__loc_clear(&dst->loc);
		} else {
			dst = &out->v[out->n++];
		}
		memset(dst, 0, sizeof(*dst));
		if (!(dst->name = strndup((const char *)k->data.scalar.value,
					  k->data.scalar.length))) {
			p->nomem = true;
			return false;
		}
		char *cp = jpath(p, path, "%s", dst->name);
		set_loc(&dst->loc, k, cp);
		if (!pvalue(p, v, cp, &dst->value, true))
			ok = false;
	}
	return ok;
}

/* ------------------------------------------------------------ structures */

static bool opt_params(struct parser *p, const struct field *f, size_t nf,
		       const char *path, struct mk_params *out)
{
	yaml_node_t *v = fval(f, nf, "parameters");
	char *cp;
	bool ok;

	out->n = 0;
	out->v = NULL;
	if (!v)
		return true;
	cp = jpath(p, path, "parameters");
	ok = params(p, v, cp, out);
	free(cp);
	return ok;
}

/* The 'model' an input model or a slice source must have (f: the map's
 * fields). */
static bool required_model(struct parser *p, yaml_node_t *n, const char *path,
			   const struct field *f, size_t nf, struct mk_model_ref *out)
{
	yaml_node_t *v = fval(f, nf, "model");
	char *cp;
	bool ok;

	if (!v || mk__node_is_null(v)) {
		ERR(p, n, path, "missing 'model'");
		return false;
	}
	cp = jpath(p, path, "model");
	ok = model_ref(p, v, cp, out);
	free(cp);
	return ok;
}

static bool input_model(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_input_model *m)
{
	struct field f[] = { { .name = "model" }, { .name = "parameters" } };
	bool ok;

	if (n->type == YAML_SCALAR_NODE && !mk__node_is_null(n)) {
		char ex[64];
		ERR(p, n, path, "expected a map with 'model:', found the string '%s' "
		    "(write '- model: %s')", mk__node_excerpt(n, ex, sizeof(ex)), ex);
		return false;
	}
	if (!want_map(p, n, path, "an input model {model, parameters}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	ok = required_model(p, n, path, f, NF(f), &m->model);
	return opt_params(p, f, NF(f), path, &m->params) && ok;
}

static bool layer_range(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_input_slice *s)
{
	size_t cnt;
	bool ok;

	if (n->type != YAML_SEQUENCE_NODE) {
		ERR(p, n, path, "expected [start, end] (two integers), found %s",
		    mk__node_kind(n));
		return false;
	}
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (cnt != 2) {
		ERR(p, n, path, "expected [start, end] (two integers), found a list of %zu",
		    cnt);
		return false;
	}
	char *c0 = jpath(p, path, "[0]"), *c1 = jpath(p, path, "[1]");
	yaml_node_t *a = item(p, n, 0), *b = item(p, n, 1);
	ok = a && b && enter(p, a) && enter(p, b);
	ok = ok && mk__node_to_int(p, a, c0, &s->start);
	ok = b && mk__node_to_int(p, b, c1, &s->end) && ok;
	free(c0);
	free(c1);
	if (!ok)
		return false;
	if (s->start < 0 || s->end < 0) {
		ERR(p, n, path, "layer_range [%lld, %lld]: layer indices cannot be negative",
		    s->start, s->end);
		return false;
	}
	if (s->start > s->end) {
		ERR(p, n, path, "layer_range [%lld, %lld]: start is greater than end "
		    "(the range is [start, end), end excluded)", s->start, s->end);
		return false;
	}
	return true;
}

static bool input_slice(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_input_slice *s)
{
	struct field f[] = { { .name = "model" }, { .name = "layer_range" }, { .name = "parameters" } };
	yaml_node_t *v;
	bool ok;
	char *cp;

	if (!want_map(p, n, path, "a source {model, layer_range, parameters}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	ok = required_model(p, n, path, f, NF(f), &s->model);
	if (!(v = FIELD(f, "layer_range")) || mk__node_is_null(v)) {
		ERR(p, n, path, "missing 'layer_range' (required for a slice source: "
		    "[start, end))");
		ok = false;
	} else {
		cp = jpath(p, path, "layer_range");
		ok = layer_range(p, v, cp, s) && ok;
		free(cp);
	}
	return opt_params(p, f, NF(f), path, &s->params) && ok;
}

/* The same model twice in one slice: mergekit keys a slice's inputs by
 * model, so the later source silently replaces the earlier one.  Refused. */
static bool check_dups_sources(struct parser *p, yaml_node_t *seq,
			       const struct mk_input_slice *src, const bool *good,
			       size_t n, const char *path)
{
	bool ok = true;

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i && good[i]; j++)
			if (good[j] && mk_model_ref_equal(&src[i].model, &src[j].model)) {
				char *s = NULL;
				mk_model_ref_format(&src[i].model, &s, NULL);
				ERR(p, item(p, seq, i), src[i].loc.path ? src[i].loc.path : path,
				    "model '%s' appears twice in one slice (also at "
				    "sources[%zu]); mergekit would silently keep only one of "
				    "them, mk refuses: merge the two ranges in separate slices",
				    s ? s : "?", j);
				free(s);
				ok = false;
				break;
			}
	return ok;
}

/* All sources of a slice span the same number of layers, judged against
 * the first good one. */
static bool check_spans(struct parser *p, yaml_node_t *seq,
			const struct mk_input_slice *src, const bool *good, size_t n)
{
	bool ok = true;
	size_t ref = n;

	for (size_t i = 0; i < n; i++) {
		const struct mk_input_slice *a = &src[i];
		if (!good[i])
			continue;
		if (ref == n) {
			ref = i;
			continue;
		}
		const struct mk_input_slice *r = &src[ref];
		if (a->end - a->start != r->end - r->start) {
			ERR(p, item(p, seq, i), a->loc.path,
			    "all sources of a slice must span the same number of layers: "
			    "this one spans %lld ([%lld, %lld)), sources[%zu] spans %lld "
			    "([%lld, %lld))", a->end - a->start, a->start, a->end, ref,
			    r->end - r->start, r->start, r->end);
			ok = false;
		}
	}
	return ok;
}

static bool source_item(struct parser *p, yaml_node_t *n, char *path, void *items, size_t i)
{
	struct mk_input_slice *s = (struct mk_input_slice *)items + i;

	set_loc(&s->loc, n, path);
	return enter(p, n) && input_slice(p, n, path, s);
}

static bool output_slice(struct parser *p, yaml_node_t *n, const char *path,
			 struct mk_output_slice *s)
{
	struct field f[] = { { .name = "sources" }, { .name = "base_model" }, { .name = "parameters" },
			     { .name = "residual_weight" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "an output slice {sources, ...}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if (!(v = FIELD(f, "sources")) || mk__node_is_null(v)) {
		ERR(p, n, path, "missing 'sources'");
		ok = false;
	} else {
		cp = jpath(p, path, "sources");
		s->sources = list_new(p, v, cp, "sources", sizeof(*s->sources), MODELS_MAX, &s->nsources, &ok);
		if (!s->sources) {
			if (ok)
				ERR(p, v, cp, "a slice needs at least one source");
			ok = false;
		} else {
			bool *good = calloc(s->nsources, sizeof(bool));
			if (!good)
				p->nomem = true;
			ok = list_items(p, v, cp, s->nsources, source_item, s->sources, good);
			if (good && !p->over) {
				ok = check_dups_sources(p, v, s->sources, good, s->nsources, cp) && ok;
				ok = check_spans(p, v, s->sources, good, s->nsources) && ok;
			}
			free(good);
		}
		free(cp);
	}
	if ((v = FIELD(f, "base_model")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "base_model");
		if (!(s->base_model = calloc(1, sizeof(*s->base_model)))) {
			p->nomem = true;
			ok = false;
		} else if (!model_ref(p, v, cp, s->base_model)) {
			free(s->base_model);
			s->base_model = NULL;
			ok = false;
		}
		free(cp);
	}
	if ((v = FIELD(f, "residual_weight")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "residual_weight");
		ok = (s->has_residual_weight = mk__node_to_num(p, v, cp, &s->residual_weight)) && ok;
		free(cp);
	}
	return opt_params(p, f, NF(f), path, &s->params) && ok;
}

static bool model_item(struct parser *p, yaml_node_t *n, char *path, void *items, size_t i)
{
	struct mk_input_model *m = (struct mk_input_model *)items + i;

	set_loc(&m->loc, n, path);
	return enter(p, n) && input_model(p, n, path, m);
}

/* A list of input models (top level or a module). */
static bool models_list(struct parser *p, yaml_node_t *v, const char *path,
			struct mk_input_model **out, size_t *nout)
{
	bool ok = true;

	if (!(*out = list_new(p, v, path, "models", sizeof(**out), MODELS_MAX, nout, &ok)))
		return ok;
	bool *good = calloc(*nout, sizeof(bool));
	if (!good)
		p->nomem = true;
	ok = list_items(p, v, path, *nout, model_item, *out, good);
	/* the same model twice becomes the same model twice in one slice */
	for (size_t i = 0; good && !p->over && i < *nout; i++)
		for (size_t j = 0; j < i && good[i]; j++)
			if (good[j] && mk_model_ref_equal(&(*out)[i].model, &(*out)[j].model)) {
				char *s = NULL;
				mk_model_ref_format(&(*out)[i].model, &s, NULL);
				ERR(p, item(p, v, i), (*out)[i].loc.path,
				    "model '%s' is listed twice (also at [%zu]); mergekit would "
				    "silently keep only one of them, mk refuses", s ? s : "?", j);
				free(s);
				ok = false;
				break;
			}
	free(good);
	return ok;
}

static bool slice_item(struct parser *p, yaml_node_t *n, char *path, void *items, size_t i)
{
	struct mk_output_slice *s = (struct mk_output_slice *)items + i;

	set_loc(&s->loc, n, path);
	return enter(p, n) && output_slice(p, n, path, s);
}

static bool slices_list(struct parser *p, yaml_node_t *v, const char *path,
			struct mk_output_slice **out, size_t *nout)
{
	bool ok = true;

	if (!(*out = list_new(p, v, path, "slices", sizeof(**out), 0, nout, &ok)))
		return ok;
	return list_items(p, v, path, *nout, slice_item, *out, NULL);
}

static bool module(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_output_module *m)
{
	struct field f[] = { { .name = "slices" }, { .name = "models" }, { .name = "parameters" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a module {slices | models, parameters}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if ((v = FIELD(f, "slices"))) {
		cp = jpath(p, path, "slices");
		ok = slices_list(p, v, cp, &m->slices, &m->nslices) && ok;
		free(cp);
	}
	if ((v = FIELD(f, "models"))) {
		cp = jpath(p, path, "models");
		ok = models_list(p, v, cp, &m->models, &m->nmodels) && ok;
		free(cp);
	}
	if (ok && (!m->nslices) == (!m->nmodels)) {
		ERR(p, n, path, "must specify either output slices or models to merge "
		    "(exactly one of 'slices' and 'models', non-empty)");
		ok = false;
	}
	return opt_params(p, f, NF(f), path, &m->params) && ok;
}

static bool modules_map(struct parser *p, yaml_node_t *v, const char *path,
			struct mk_config *cfg)
{
	size_t cnt;
	bool ok = true;

	if (mk__node_is_null(v))
		return true;
	if (!want_map(p, v, path, "modules (a map of name: module)"))
		return false;
	cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	if (!cnt)
		return true;
	if (!(cfg->modules = calloc(cnt, sizeof(*cfg->modules)))) {
		p->nomem = true;
		return false;
	}
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
		yaml_node_t *k = node(p, pr->key), *mv = node(p, pr->value);
		struct mk_output_module *m;
		char *name = NULL;

		if (!k || !mv || !enter(p, k))
			return false;
		if (k->type != YAML_SCALAR_NODE) {
			ERR(p, k, path, "a module name must be a plain string");
			ok = false;
			continue;
		}
		if (memchr(k->data.scalar.value, '\0', k->data.scalar.length) ||
		    !(name = strndup((const char *)k->data.scalar.value, k->data.scalar.length))) {
			if (!name && !memchr(k->data.scalar.value, '\0', k->data.scalar.length))
				p->nomem = true;
			else
				ERR(p, k, path, "a module name must not contain NUL");
			ok = false;
			continue;
		}
		size_t j;
		for (j = 0; j < cfg->nmodules; j++)
			if (strcmp(cfg->modules[j].name, name) == 0)
				break;
		if (j < cfg->nmodules) {
			WARN(p, k, path, "module '%s' is given twice; the later one is used", name);
			m = &cfg->modules[j];
			mk__module_clear(m);
		} else {
			m = &cfg->modules[cfg->nmodules++];
		}
		memset(m, 0, sizeof(*m));
		m->name = name;
		char *mp = jpath(p, path, "%s", name);
		set_loc(&m->loc, mv, mp);
		ok = enter(p, mv) && module(p, mv, mp, m) && ok;
	}
	return ok;
}

/* "union" | "base" | a model reference (the literals win). */
static bool tok_source(struct parser *p, yaml_node_t *n, const char *path,
		       struct mk_tok_source *out)
{
	char *lp = path ? strdup(path) : NULL;

	if (path && !lp)
		p->nomem = true;
	set_loc(&out->loc, n, lp);
	if (n->type == YAML_SCALAR_NODE && !mk__node_is_null(n)) {
		const char *s = (const char *)n->data.scalar.value;
		size_t len = n->data.scalar.length;
		if (len == 5 && memcmp(s, "union", 5) == 0) {
			out->kind = MK_TOKSRC_UNION;
			return true;
		}
		if (len == 4 && memcmp(s, "base", 4) == 0) {
			out->kind = MK_TOKSRC_BASE;
			return true;
		}
	}
	if (!model_ref(p, n, path, &out->model))
		return false;
	out->kind = MK_TOKSRC_MODEL;
	return true;
}

static bool token_embed(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_token_embed *t)
{
	struct field f[] = { { .name = "source" }, { .name = "force" } };
	yaml_node_t *v, *src;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a token setting {source, force}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if ((v = FIELD(f, "force")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "force");
		ok = mk__node_to_bool(p, v, cp, &t->force);
		free(cp);
	}
	src = FIELD(f, "source");
	if (!src || mk__node_is_null(src)) {
		t->kind = MK_TOKEMB_DEFAULT;
		return ok;
	}
	cp = jpath(p, path, "source");
	if (!enter(p, src)) {
		ok = false;
	} else if (src->type == YAML_MAPPING_NODE) {
		yaml_node_t *kind = NULL;
		for (yaml_node_pair_t *pr = src->data.mapping.pairs.start;
		     pr < src->data.mapping.pairs.top; pr++) {
			yaml_node_t *k = node(p, pr->key);
			if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == 4 &&
			    memcmp(k->data.scalar.value, "kind", 4) == 0)
				kind = node(p, pr->value);
		}
		if (!kind) {
			ok = model_ref(p, src, cp, &t->model) && ok;
			t->kind = MK_TOKEMB_MODEL;
		} else {
			char *ks = NULL;
			char *kp = jpath(p, cp, "kind");
			if (!mk__node_to_str(p, kind, kp, &ks)) {
				ok = false;
			} else if (strcmp(ks, "zero") == 0) {
				struct field z[] = { { .name = "kind" } };
				get_fields(p, src, cp, z, NF(z));
				t->kind = MK_TOKEMB_ZERO;
			} else if (strcmp(ks, "model_token") == 0) {
				struct field m[] = { { .name = "kind" }, { .name = "model" }, { .name = "token_id" },
						     { .name = "token" } };
				yaml_node_t *mv, *tid, *tok;
				t->kind = MK_TOKEMB_MODEL_TOKEN;
				get_fields(p, src, cp, m, NF(m));
				if (!(mv = FIELD(m, "model")) || mk__node_is_null(mv)) {
					ERR(p, src, cp, "missing 'model' for kind model_token");
					ok = false;
				} else {
					char *mp = jpath(p, cp, "model");
					ok = model_ref(p, mv, mp, &t->model) && ok;
					free(mp);
				}
				tid = FIELD(m, "token_id");
				tok = FIELD(m, "token");
				if (tid && mk__node_is_null(tid))
					tid = NULL;
				if (tok && mk__node_is_null(tok))
					tok = NULL;
				if (!tid == !tok) {
					ERR(p, src, cp, "give exactly one of 'token_id' and 'token' "
					    "for kind model_token");
					ok = false;
				} else if (tid) {
					char *tp = jpath(p, cp, "token_id");
					ok = (t->has_token_id = mk__node_to_int(p, tid, tp, &t->token_id)) && ok;
					free(tp);
				} else {
					char *tp = jpath(p, cp, "token");
					ok = mk__node_to_str(p, tok, tp, &t->src_token) && ok;
					free(tp);
				}
			} else {
				char ex[64];
				ERR(p, kind, kp, "unknown kind '%s' (expected model_token or zero)",
				    mk__node_excerpt(kind, ex, sizeof(ex)));
				ok = false;
			}
			free(ks);
			free(kp);
		}
	} else {
		ok = model_ref(p, src, cp, &t->model) && ok;
		t->kind = MK_TOKEMB_MODEL;
	}
	free(cp);
	return ok;
}

static bool tokenizer(struct parser *p, yaml_node_t *n, const char *path,
		      struct mk_tokenizer_config *t)
{
	struct field f[] = { { .name = "source" }, { .name = "tokens" }, { .name = "pad_to_multiple_of" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a tokenizer {source, tokens, pad_to_multiple_of}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	t->source.kind = MK_TOKSRC_UNION;
	if ((v = FIELD(f, "source")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "source");
		ok = tok_source(p, v, cp, &t->source);
		free(cp);
	}
	if ((v = FIELD(f, "pad_to_multiple_of")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "pad_to_multiple_of");
		if ((t->has_pad_to_multiple_of = mk__node_to_int(p, v, cp, &t->pad_to_multiple_of)) &&
		    t->pad_to_multiple_of <= 0) {
			ERR(p, v, cp, "pad_to_multiple_of must be a positive integer");
			t->has_pad_to_multiple_of = false;
		}
		ok = t->has_pad_to_multiple_of && ok;
		free(cp);
	}
	if ((v = FIELD(f, "tokens")) && !mk__node_is_null(v)) {
		cp = jpath(p, path, "tokens");
		if (!want_map(p, v, cp, "tokens (a map of token: setting)")) {
			ok = false;
		} else {
			size_t cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
			if (cnt && !(t->tokens = calloc(cnt, sizeof(*t->tokens)))) {
				p->nomem = true;
				cnt = 0;
				ok = false;
			}
			for (size_t i = 0; i < cnt && !p->over; i++) {
				yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
				yaml_node_t *k = node(p, pr->key), *tv = node(p, pr->value);
				struct mk_token_embed *te = &t->tokens[t->ntokens];
				if (!k || !tv || !enter(p, k))
					break;
				if (k->type != YAML_SCALAR_NODE ||
				    memchr(k->data.scalar.value, '\0', k->data.scalar.length)) {
					ERR(p, k, cp, "a token must be a plain string");
					ok = false;
					continue;
				}
				if (!(te->token = strndup((const char *)k->data.scalar.value,
							  k->data.scalar.length))) {
					p->nomem = true;
					break;
				}
				t->ntokens++;
				char *tp = jpath(p, cp, "%s", te->token);
				set_loc(&te->loc, tv, tp);
				ok = enter(p, tv) && token_embed(p, tv, tp, te) && ok;
			}
		}
		free(cp);
	}
	return ok;
}

static bool opt_str(struct parser *p, yaml_node_t *v, const char *path, const char *key,
		    char **out, struct mk_config_loc *loc)
{
	char *cp;
	bool ok;

	if (!v || mk__node_is_null(v))
		return true;
	cp = jpath(p, path, "%s", key);
	ok = mk__node_to_str(p, v, cp, out);
	if (loc)
		set_loc(loc, v, cp);
	else
		free(cp);
	return ok;
}

static bool dtype(struct parser *p, yaml_node_t *v, const char *key,
		  struct mk_config_dtype *d)
{
	struct mk_err e;

	if (!opt_str(p, v, "", key, &d->name, &d->loc) || !d->name)
		return !v || mk__node_is_null(v);
	if (mk_config_dtype_parse(d->name, &d->dtype, &d->canonical, &e) < 0) {
		ERR(p, v, key, "%s", e.msg);
		return false;
	}
	return true;
}

/* The top-level map. */
void mk__config_top(struct parser *p, yaml_node_t *root, struct mk_config *cfg)
{
	struct field f[] = {
		{ .name = "merge_method" }, { .name = "models" }, { .name = "slices" }, { .name = "modules" },
		{ .name = "base_model" }, { .name = "parameters" }, { .name = "dtype" }, { .name = "out_dtype" },
		{ .name = "tokenizer_source" }, { .name = "tokenizer" }, { .name = "chat_template" },
	};
	yaml_node_t *v;
	int nset = 0;

	if (!enter(p, root))
		return;
	if (root->type != YAML_MAPPING_NODE) {
		ERR(p, root, "", "a merge configuration must be a map (merge_method: ..., "
		    "models: ...), found %s", mk__node_kind(root));
		return;
	}
	get_fields(p, root, "", f, NF(f));

	v = FIELD(f, "merge_method");
	if (!v || mk__node_is_null(v))
		ERR(p, root, "", "missing 'merge_method' (linear, slerp, ties, ...)");
	else
		opt_str(p, v, "", "merge_method", &cfg->merge_method, &cfg->merge_method_loc);

	if ((v = FIELD(f, "models")))
		models_list(p, v, "models", &cfg->models, &cfg->nmodels);
	if ((v = FIELD(f, "slices")))
		slices_list(p, v, "slices", &cfg->slices, &cfg->nslices);
	if ((v = FIELD(f, "modules")))
		modules_map(p, v, "modules", cfg);
	if ((v = FIELD(f, "base_model")) && !mk__node_is_null(v)) {
		if (!(cfg->base_model = calloc(1, sizeof(*cfg->base_model)))) {
			p->nomem = true;
		} else if (!model_ref(p, v, "base_model", cfg->base_model)) {
			free(cfg->base_model);
			cfg->base_model = NULL;
		}
	}
	opt_params(p, f, NF(f), "", &cfg->params);
	dtype(p, FIELD(f, "dtype"), "dtype", &cfg->dtype);
	dtype(p, FIELD(f, "out_dtype"), "out_dtype", &cfg->out_dtype);
	if ((v = FIELD(f, "tokenizer_source")) && !mk__node_is_null(v) && enter(p, v))
		tok_source(p, v, "tokenizer_source", &cfg->tokenizer_source);
	if ((v = FIELD(f, "tokenizer")) && !mk__node_is_null(v) && enter(p, v)) {
		if (!(cfg->tokenizer = calloc(1, sizeof(*cfg->tokenizer)))) {
			p->nomem = true;
		} else {
			char *lp = strdup("tokenizer");
			if (!lp)
				p->nomem = true;
			set_loc(&cfg->tokenizer->loc, v, lp);
			tokenizer(p, v, "tokenizer", cfg->tokenizer);
		}
	}
	opt_str(p, FIELD(f, "chat_template"), "", "chat_template", &cfg->chat_template,
		&cfg->chat_template_loc);

	if (p->over)
		return;
	/* Exactly one of models/slices/modules, judged by being non-empty;
	 * a key that is present but empty is named in the message. */
	const char *names[3] = { "models", "slices", "modules" };
	size_t counts[3] = { cfg->nmodels, cfg->nslices, cfg->nmodules };
	for (int i = 0; i < 3; i++)
		nset += counts[i] != 0;
	if (nset != 1) {
		char which[128] = "";
		size_t o = 0;
		for (int i = 0; i < 3; i++) {
			v = FIELD(f, names[i]);
			if (nset == 0 && v)
				o += (size_t)snprintf(which + o, sizeof(which) - o, "%s'%s' is empty",
						      o ? ", " : " (", names[i]);
			else if (nset > 1 && counts[i])
				o += (size_t)snprintf(which + o, sizeof(which) - o, "%s'%s'",
						      o ? " and " : " (found ", names[i]);
		}
		if (o)
			snprintf(which + o, sizeof(which) - o, ")");
		/* point at the second list when there are two */
		yaml_node_t *at = root;
		int seen = 0;
		for (int i = 0; i < 3 && nset > 1; i++)
			if (counts[i] && ++seen == 2)
				for (size_t j = 0; j < NF(f); j++)
					if (strcmp(f[j].name, names[i]) == 0)
						at = f[j].key;
		/* a list that failed to parse (not a list, or refused whole) is
		 * not "missing": say nothing more */
		bool failed = false;
		for (int i = 0; i < 3; i++) {
			const yaml_node_t *fv = FIELD(f, names[i]);
			bool empty = fv && ((fv->type == YAML_SEQUENCE_NODE &&
					     fv->data.sequence.items.top == fv->data.sequence.items.start) ||
					    (fv->type == YAML_MAPPING_NODE &&
					     fv->data.mapping.pairs.top == fv->data.mapping.pairs.start));
			if (fv && !mk__node_is_null(fv) && !counts[i] && !empty)
				failed = true;
		}
		if (!failed || nset > 1)
			ERR(p, at, "", "exactly one of 'models', 'slices', or 'modules' must "
			    "be present%s", which);
	}
	if (cfg->tokenizer_source.kind != MK_TOKSRC_NONE && cfg->tokenizer) {
		yaml_node_t *at = NULL;
		for (size_t j = 0; j < NF(f); j++)
			if (strcmp(f[j].name, "tokenizer") == 0)
				at = f[j].key;
		ERR(p, at, "", "cannot specify both tokenizer_source and tokenizer (use "
		    "'tokenizer: {source: ...}')");
	}
}
