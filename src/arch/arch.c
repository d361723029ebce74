/* arch.c - parse architecture definitions; the registry of embedded ones. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "arch/arch.h"
#include "arch_impl.h"
#include "arch_data.h"

const struct mk_arch_file *mk_arch_files(size_t *n)
{
	*n = mk_arch_data_n;
	return mk_arch_data;
}

/* ----------------------------------------------------------------- freeing */


void mk_weight_clear(struct mk_weight *w)
{
	free(w->name);
	mk_strv_free(w->aliases, w->naliases);
	mk_strv_free(w->tied_names, w->ntied);
	free(w->force_dtype);
	memset(w, 0, sizeof(*w));
}

static void weights_free(struct mk_weight *w, size_t n)
{
	if (!w)
		return;
	for (size_t i = 0; i < n; i++)
		mk_weight_clear(&w[i]);
	free(w);
}

static void module_clear(struct mk_arch_module *m)
{
	free(m->name);
	free(m->weight_prefix);
	free(m->subfolder);
	free(m->num_layers_key);
	weights_free(m->pre, m->npre);
	weights_free(m->layer, m->nlayer);
	weights_free(m->post, m->npost);
}

void mk_arch_free(struct mk_arch *a)
{
	if (!a)
		return;
	free(a->file);
	free(a->model_type);
	mk_strv_free(a->architectures, a->narchitectures);
	for (size_t i = 0; i < a->nmodules; i++)
		module_clear(&a->modules[i]);
	free(a->modules);
	mk_strv_free(a->tagalong_files, a->ntagalong);
	free(a->vocab_size_key);
	free(a->kinds);
	free(a);
}

void mk_weight_list_free(struct mk_weight_list *l)
{
	if (!l)
		return;
	weights_free(l->w, l->n);
	l->w = NULL;
	l->n = 0;
}

/* ----------------------------------------------------------------- copying */

char *mk_xstrdup(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* Copy a string vector; *ok cleared on allocation failure. */
static char **strv_dup(char *const *v, size_t n, bool *ok)
{
	char **r;

	if (!n)
		return NULL;
	r = calloc(n, sizeof(*r));
	if (!r) {
		*ok = false;
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (!(r[i] = strdup(v[i])))
			*ok = false;
	return r;
}

int mk_weight_copy(struct mk_weight *dst, const struct mk_weight *src)
{
	bool ok = true;

	*dst = *src;
	dst->name = mk_xstrdup(src->name);
	dst->force_dtype = mk_xstrdup(src->force_dtype);
	dst->aliases = strv_dup(src->aliases, src->naliases, &ok);
	dst->tied_names = strv_dup(src->tied_names, src->ntied, &ok);
	if (!dst->name || (src->force_dtype && !dst->force_dtype))
		ok = false;
	if (!ok) {
		/* keep counts consistent with what was allocated */
		if (!dst->aliases)
			dst->naliases = 0;
		if (!dst->tied_names)
			dst->ntied = 0;
		mk_weight_clear(dst);
		return -1;
	}
	return 0;
}

static int weights_dup(struct mk_weight **dst, const struct mk_weight *src, size_t n)
{
	*dst = NULL;
	if (!n)
		return 0;
	*dst = calloc(n, sizeof(**dst));
	if (!*dst)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (mk_weight_copy(&(*dst)[i], &src[i]))
			return -1;   /* the rest stay zeroed: freeing is safe */
	return 0;
}

int mk_arch_clone(const struct mk_arch *a, struct mk_arch **out, struct mk_err *err)
{
	struct mk_arch *c;
	bool ok = true;
	int rc = 0;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return mk_err_set(err, MK_ENOMEM, "out of memory copying an architecture");
	*c = *a;
	c->file = mk_xstrdup(a->file);
	c->model_type = mk_xstrdup(a->model_type);
	c->vocab_size_key = mk_xstrdup(a->vocab_size_key);
	c->architectures = strv_dup(a->architectures, a->narchitectures, &ok);
	c->tagalong_files = strv_dup(a->tagalong_files, a->ntagalong, &ok);
	c->kinds = NULL;
	if (a->nkinds && (c->kinds = malloc(a->nkinds)))
		memcpy(c->kinds, a->kinds, a->nkinds);
	else if (a->nkinds)
		ok = false;
	if (!c->kinds)
		c->nkinds = 0;
	if (!c->architectures)
		c->narchitectures = 0;
	if (!c->tagalong_files)
		c->ntagalong = 0;
	c->modules = a->nmodules ? calloc(a->nmodules, sizeof(*c->modules)) : NULL;
	if (a->nmodules && !c->modules) {
		c->nmodules = 0;
		ok = false;
	}
	for (size_t i = 0; ok && i < a->nmodules; i++) {
		const struct mk_arch_module *s = &a->modules[i];
		struct mk_arch_module *d = &c->modules[i];

		d->name = mk_xstrdup(s->name);
		d->weight_prefix = mk_xstrdup(s->weight_prefix);
		d->subfolder = mk_xstrdup(s->subfolder);
		d->num_layers_key = mk_xstrdup(s->num_layers_key);
		d->override_num_layers = s->override_num_layers;
		d->npre = s->npre;
		d->nlayer = s->nlayer;
		d->npost = s->npost;
		if (weights_dup(&d->pre, s->pre, s->npre) ||
		    weights_dup(&d->layer, s->layer, s->nlayer) ||
		    weights_dup(&d->post, s->post, s->npost))
			ok = false;
		if (!d->pre)
			d->npre = 0;
		if (!d->layer)
			d->nlayer = 0;
		if (!d->post)
			d->npost = 0;
	}
	if (!ok || (a->file && !c->file) || (a->model_type && !c->model_type) ||
	    (a->vocab_size_key && !c->vocab_size_key)) {
		mk_arch_free(c);
		rc = mk_err_set(err, MK_ENOMEM, "out of memory copying an architecture");
		goto out;
	}
	*out = c;
out:
	return rc;
}

/* ---------------------------------------------------------------- equality */

static bool weights_eq(const struct mk_weight *a, size_t na, const struct mk_weight *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (!mk_str_eq(a[i].name, b[i].name) || a[i].is_embed != b[i].is_embed ||
		    a[i].optional != b[i].optional || !mk_str_eq(a[i].force_dtype, b[i].force_dtype) ||
		    !mk_strv_eq(a[i].aliases, a[i].naliases, b[i].aliases, b[i].naliases) ||
		    !mk_strv_eq(a[i].tied_names, a[i].ntied, b[i].tied_names, b[i].ntied))
			return false;
	return true;
}

bool mk_arch_equal(const struct mk_arch *a, const struct mk_arch *b)
{
	if (a == b)
		return true;
	if (!a || !b || a->kind != b->kind || a->nmodules != b->nmodules ||
	    !mk_str_eq(a->model_type, b->model_type) || !mk_str_eq(a->vocab_size_key, b->vocab_size_key) ||
	    !mk_strv_eq(a->architectures, a->narchitectures, b->architectures, b->narchitectures) ||
	    !mk_strv_eq(a->tagalong_files, a->ntagalong, b->tagalong_files, b->ntagalong))
		return false;
	/* as mergekit: the procedural classes compare their expert count only */
	if ((a->kind == MK_ARCH_AFMOE || a->kind == MK_ARCH_GLM4MOE) && a->num_experts != b->num_experts)
		return false;
	for (size_t i = 0; i < a->nmodules; i++) {
		const struct mk_arch_module *x = &a->modules[i], *y = &b->modules[i];
		if (!mk_str_eq(x->name, y->name) || !mk_str_eq(x->weight_prefix, y->weight_prefix) ||
		    !mk_str_eq(x->subfolder, y->subfolder) || !mk_str_eq(x->num_layers_key, y->num_layers_key) ||
		    x->override_num_layers != y->override_num_layers ||
		    !weights_eq(x->pre, x->npre, y->pre, y->npre) ||
		    !weights_eq(x->layer, x->nlayer, y->layer, y->nlayer) ||
		    !weights_eq(x->post, x->npost, y->post, y->npost))
			return false;
	}
	return true;
}

const char *mk_arch_vocab_key(const struct mk_arch *a)
{
	return a->vocab_size_key ? a->vocab_size_key : "vocab_size";
}

/* ----------------------------------------------------------------- parsing */

struct pctx {
	const char *file;
	struct mk_err *err;
};

static int pfail(struct pctx *p, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int pfail(struct pctx *p, int code, const char *fmt, ...)
{
	char msg[MK_ERR_MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return mk_err_set(p->err, code, "architecture '%s': %s", p->file, msg);
}
#define PFAIL pfail

/* Optional string or null member; *out NULL when absent/null. */
static int get_opt_str(struct pctx *p, json_t *obj, const char *key, const char *where, char **out)
{
	json_t *v = json_object_get(obj, key);

	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return PFAIL(p, MK_EFORMAT, "%s: \"%s\" must be a string", where, key);
	if (!(*out = strdup(json_string_value(v))))
		return PFAIL(p, MK_ENOMEM, "out of memory");
	return 0;
}

static int get_req_str(struct pctx *p, json_t *obj, const char *key, const char *where, char **out)
{
	json_t *v = json_object_get(obj, key);

	*out = NULL;
	if (!v || !json_is_string(v))
		return PFAIL(p, MK_EFORMAT, "%s: \"%s\" %s", where, key,
			     v ? "must be a string" : "is missing");
	return get_opt_str(p, obj, key, where, out);
}

/* Optional list of strings (or null). */
static int get_strv(struct pctx *p, json_t *obj, const char *key, const char *where,
		    char ***out, size_t *n)
{
	json_t *v = json_object_get(obj, key), *e;
	size_t i;

	*out = NULL;
	*n = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return PFAIL(p, MK_EFORMAT, "%s: \"%s\" must be a list of strings", where, key);
	if (!json_array_size(v))
		return 0;
	*out = calloc(json_array_size(v), sizeof(**out));
	if (!*out)
		return PFAIL(p, MK_ENOMEM, "out of memory");
	json_array_foreach(v, i, e) {
		if (!json_is_string(e))
			return PFAIL(p, MK_EFORMAT, "%s: \"%s\"[%zu] must be a string", where, key, i);
		if (!((*out)[i] = strdup(json_string_value(e))))
			return PFAIL(p, MK_ENOMEM, "out of memory");
		(*n)++;
	}
	return 0;
}

static int get_bool(struct pctx *p, json_t *obj, const char *key, const char *where, bool *out)
{
	json_t *v = json_object_get(obj, key);

	*out = false;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return PFAIL(p, MK_EFORMAT, "%s: \"%s\" must be true or false", where, key);
	*out = json_is_true(v);
	return 0;
}

static int parse_weight(struct pctx *p, json_t *o, const char *where, enum mk_wsection sec,
			struct mk_weight *w)
{
	int rc;

	w->section = sec;
	w->layer = -1;
	if (!json_is_object(o))
		return PFAIL(p, MK_EFORMAT, "%s: a weight must be an object", where);
	if ((rc = get_req_str(p, o, "name", where, &w->name)) ||
	    (rc = get_bool(p, o, "is_embed", w->name, &w->is_embed)) ||
	    (rc = get_bool(p, o, "optional", w->name, &w->optional)) ||
	    (rc = get_strv(p, o, "aliases", w->name, &w->aliases, &w->naliases)) ||
	    (rc = get_strv(p, o, "tied_names", w->name, &w->tied_names, &w->ntied)) ||
	    (rc = get_opt_str(p, o, "force_dtype", w->name, &w->force_dtype)))
		return rc;
	return 0;
}

static int parse_weights(struct pctx *p, json_t *v, const char *where, enum mk_wsection sec,
			 struct mk_weight **out, size_t *n)
{
	size_t i;
	json_t *e;
	int rc;

	*out = NULL;
	*n = 0;
	if (!v || !json_is_array(v))
		return PFAIL(p, MK_EFORMAT, "%s %s", where, v ? "must be a list" : "is missing");
	if (!json_array_size(v))
		return 0;
	*out = calloc(json_array_size(v), sizeof(**out));
	if (!*out)
		return PFAIL(p, MK_ENOMEM, "out of memory");
	json_array_foreach(v, i, e) {
		(*n)++;
		if ((rc = parse_weight(p, e, where, sec, &(*out)[i])))
			return rc;
	}
	return 0;
}

/* A module-kind object into m (name/prefix/subfolder set by the caller). */
static int parse_module_def(struct pctx *p, json_t *o, const char *where, struct mk_arch_module *m,
			    char **model_type, char ***archs, size_t *narchs)
{
	json_t *lt, *ov;
	int rc;

	if (!json_is_object(o))
		return PFAIL(p, MK_EFORMAT, "%s must be an object", where);
	if ((rc = get_req_str(p, o, "model_type", where, model_type)))
		return rc;
	if (!json_is_array(json_object_get(o, "architectures")))
		return PFAIL(p, MK_EFORMAT, "%s: \"architectures\" must be a list", where);
	if ((rc = get_strv(p, o, "architectures", where, archs, narchs)))
		return rc;
	if ((rc = get_opt_str(p, o, "num_layers_config_key", where, &m->num_layers_key)))
		return rc;
	m->override_num_layers = -1;
	ov = json_object_get(o, "override_num_layers");
	if (ov && !json_is_null(ov)) {
		if (!json_is_integer(ov) || json_integer_value(ov) < 0)
			return PFAIL(p, MK_EFORMAT, "%s: \"override_num_layers\" must be an integer >= 0", where);
		m->override_num_layers = json_integer_value(ov);
	}
	if ((rc = parse_weights(p, json_object_get(o, "pre_weights"), "pre_weights", MK_WS_PRE,
				&m->pre, &m->npre)) ||
	    (rc = parse_weights(p, json_object_get(o, "post_weights"), "post_weights", MK_WS_POST,
				&m->post, &m->npost)))
		return rc;
	lt = json_object_get(o, "layer_templates");
	if (!json_is_object(lt))
		return PFAIL(p, MK_EFORMAT, "%s: \"layer_templates\" %s", where,
			     lt ? "must be an object" : "is missing");
	return parse_weights(p, json_object_get(lt, "weights"), "layer_templates.weights", MK_WS_LAYER,
			     &m->layer, &m->nlayer);
}

static int parse_modular(struct pctx *p, json_t *root, struct mk_arch *a)
{
	json_t *mods = json_object_get(root, "modules"), *mv;
	const char *key;
	int rc;

	if (!json_is_object(mods))
		return PFAIL(p, MK_EFORMAT, "\"modules\" %s", mods ? "must be an object" : "is missing");
	if ((rc = get_req_str(p, root, "model_type", "top level", &a->model_type)))
		return rc;
	if (!json_is_array(json_object_get(root, "architectures")))
		return PFAIL(p, MK_EFORMAT, "\"architectures\" must be a list");
	if ((rc = get_strv(p, root, "architectures", "top level", &a->architectures, &a->narchitectures)) ||
	    (rc = get_strv(p, root, "tagalong_files", "top level", &a->tagalong_files, &a->ntagalong)) ||
	    (rc = get_opt_str(p, root, "vocab_size_config_key", "top level", &a->vocab_size_key)))
		return rc;
	if (!json_object_size(mods))
		return PFAIL(p, MK_EFORMAT, "\"modules\" is empty");
	a->modules = calloc(json_object_size(mods), sizeof(*a->modules));
	if (!a->modules)
		return PFAIL(p, MK_ENOMEM, "out of memory");
	/* jansson keeps insertion order: the file's module order */
	json_object_foreach(mods, key, mv) {
		struct mk_arch_module *m = &a->modules[a->nmodules++];
		char *mt = NULL, **ar = NULL;
		size_t nar = 0;

		if (!(m->name = strdup(key)))
			return PFAIL(p, MK_ENOMEM, "out of memory");
		if (!json_is_object(mv))
			return PFAIL(p, MK_EFORMAT, "module '%s' must be an object", key);
		if ((rc = get_opt_str(p, mv, "weight_prefix", key, &m->weight_prefix)) ||
		    (rc = get_opt_str(p, mv, "subfolder", key, &m->subfolder)))
			return rc;
		if (!json_object_get(mv, "architecture"))
			return PFAIL(p, MK_EFORMAT, "module '%s': \"architecture\" is missing", key);
		rc = parse_module_def(p, json_object_get(mv, "architecture"), key, m, &mt, &ar, &nar);
		free(mt);   /* module-level model_type and classes are not used */
		mk_strv_free(ar, nar);
		if (rc)
			return rc;
	}
	return 0;
}

int mk_arch_parse(const char *text, size_t len, const char *file, struct mk_arch **out,
		  struct mk_err *err)
{
	struct pctx p = { file ? file : "?", err };
	struct mk_arch *a = NULL;
	json_t *root = NULL, *kind;
	json_error_t jerr;
	int rc = 0;

	*out = NULL;
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		rc = mk_err_set(err, MK_EFORMAT, "architecture '%s': invalid JSON at line %d: %s",
				p.file, jerr.line, jerr.text);
		goto out;
	}
	if (!json_is_object(root)) {
		rc = PFAIL(&p, MK_EFORMAT, "the top level must be an object");
		goto out;
	}
	a = calloc(1, sizeof(*a));
	if (!a || (file && !(a->file = strdup(file)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	a->num_experts = -1;
	a->first_k_dense = -1;
	kind = json_object_get(root, "kind");
	if (kind && !json_is_string(kind)) {
		rc = PFAIL(&p, MK_EFORMAT, "\"kind\" must be a string");
		goto out;
	}
	if (!kind || !strcmp(json_string_value(kind), "module")) {
		a->modules = calloc(1, sizeof(*a->modules));
		if (!a->modules || !(a->modules[0].name = strdup("default"))) {
			rc = PFAIL(&p, MK_ENOMEM, "out of memory");
			goto out;
		}
		a->nmodules = 1;
		rc = parse_module_def(&p, root, "top level", &a->modules[0], &a->model_type,
				      &a->architectures, &a->narchitectures);
	} else if (!strcmp(json_string_value(kind), "modular")) {
		rc = parse_modular(&p, root, a);
	} else {
		rc = PFAIL(&p, MK_EFORMAT, "unknown kind \"%s\" (expected \"module\" or \"modular\")",
			   json_string_value(kind));
	}
	if (rc)
		goto out;
	*out = a;
	a = NULL;
out:
	mk_arch_free(a);
	json_decref(root);
	return rc;
}

/* ---------------------------------------------------------------- registry */

struct mk_arch_registry {
	size_t n;
	struct mk_arch **a;               /* file-name order */
};

void mk_arch_registry_free(struct mk_arch_registry *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n; i++)
		mk_arch_free(r->a[i]);
	free(r->a);
	free(r);
}

int mk_arch_registry_open(struct mk_arch_registry **out, struct mk_err *err)
{
	struct mk_arch_registry *r;
	char stem[256];
	int rc = 0;

	*out = NULL;
	r = calloc(1, sizeof(*r));
	if (!r || !(r->a = calloc(mk_arch_data_n ? mk_arch_data_n : 1, sizeof(*r->a)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < mk_arch_data_n; i++) {
		const struct mk_arch_file *f = &mk_arch_data[i];
		size_t sl = strlen(f->name);

		if (sl > 5 && !strcmp(f->name + sl - 5, ".json"))
			sl -= 5;
		if (sl >= sizeof(stem))
			sl = sizeof(stem) - 1;
		memcpy(stem, f->name, sl);
		stem[sl] = '\0';
		if ((rc = mk_arch_parse((const char *)f->data, f->len, stem, &r->a[i], err)))
			goto out;
		r->n++;
	}
	*out = r;
	r = NULL;
out:
	mk_arch_registry_free(r);
	return rc;
}

size_t mk_arch_registry_count(const struct mk_arch_registry *r)
{
	return r->n;
}

const struct mk_arch *mk_arch_registry_at(const struct mk_arch_registry *r, size_t i)
{
	return i < r->n ? r->a[i] : NULL;
}

const struct mk_arch *mk_arch_registry_file(const struct mk_arch_registry *r, const char *stem)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->a[i]->file && !strcmp(r->a[i]->file, stem))
			return r->a[i];
	return NULL;
}

const struct mk_arch *mk_arch_registry_find(const struct mk_arch_registry *r, const char *class_name,
					    const char *model_type)
{
	const struct mk_arch *only = NULL, *match = NULL;
	size_t claims = 0;

	for (size_t i = 0; i < r->n; i++) {
		const struct mk_arch *a = r->a[i];
		for (size_t j = 0; j < a->narchitectures; j++) {
			if (strcmp(a->architectures[j], class_name))
				continue;
			claims++;
			only = a;
			if (!match && model_type && a->model_type && !strcmp(a->model_type, model_type))
				match = a;
			break;
		}
	}
	if (claims == 1)
		return only;
	return match;
}
