/* weights.c - template substitution, planned weight lists, name resolution,
 * config.json values and choosing an architecture for a model. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "arch/arch.h"
#include "core/jsondoc.h"
#include "arch_impl.h"

/* ------------------------------------------------------------ substitution */

static bool id_start(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool id_char(char c)
{
	return id_start(c) || (c >= '0' && c <= '9');
}

/* Length of the identifier at s (string.Template's idpattern with an
 * optional +1/-1), 0 when none. */
static size_t id_len(const char *s)
{
	size_t n = 0;

	if (!id_start(s[0]))
		return 0;
	while (id_char(s[n]))
		n++;
	if ((s[n] == '+' || s[n] == '-') && s[n + 1] == '1')
		n += 2;
	return n;
}

static bool lookup(const char *id, size_t n, int64_t num_layers, int64_t layer, int64_t *v)
{
	static const struct { const char *name; int which, delta; } tab[] = {
		{ "num_layers", 0, 0 }, { "num_layers+1", 0, 1 }, { "num_layers-1", 0, -1 },
		{ "layer_index", 1, 0 }, { "layer_index+1", 1, 1 }, { "layer_index-1", 1, -1 },
	};
	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
		if (strlen(tab[i].name) != n || memcmp(tab[i].name, id, n))
			continue;
		if (tab[i].which == 1 && layer < 0)
			return false;
		*v = (tab[i].which ? layer : num_layers) + tab[i].delta;
		return true;
	}
	return false;
}

/* Append n bytes to the growing buffer *r (length *o, capacity *cap). */
static int put(char **r, size_t *o, size_t *cap, const char *s, size_t n)
{
	if (*o + n + 1 > *cap) {
		size_t c = *cap * 2 > *o + n + 1 ? *cap * 2 : *o + n + 1;
		char *t = realloc(*r, c);
		if (!t)
			return -1;
		*r = t;
		*cap = c;
	}
	memcpy(*r + *o, s, n);
	*o += n;
	(*r)[*o] = '\0';
	return 0;
}

int mk_arch_subst(const char *tmpl, int64_t num_layers, int64_t layer, char **out, struct mk_err *err)
{
	size_t len = strlen(tmpl), cap = len + 64, o = 0;
	char *r = NULL;
	int rc = 0;

	*out = NULL;
	r = malloc(cap);
	if (!r) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	r[0] = '\0';
	if (!strchr(tmpl, '{')) {
		memcpy(r, tmpl, len + 1);
		*out = r;
		r = NULL;
		goto out;
	}
	for (size_t i = 0; i < len;) {
		const char *id, *lit = tmpl + i;
		size_t n, skip, litn = 1;
		char num[32];
		int64_t v;

		if (tmpl[i] == '$' && tmpl[i + 1] == '$') {
			skip = 2;   /* $$ is a literal '$' */
		} else if (tmpl[i] != '$') {
			skip = 1;
		} else {
			bool braced = tmpl[i + 1] == '{';
			id = tmpl + i + (braced ? 2 : 1);
			n = id_len(id);
			if (!n || (braced && id[n] != '}')) {
				rc = mk_err_set(err, MK_EFORMAT, "invalid placeholder at offset %zu in '%s'", i, tmpl);
				goto out;
			}
			skip = n + (braced ? 3 : 1);
			if (!lookup(id, n, num_layers, layer, &v)) {
				rc = mk_err_set(err, MK_EFORMAT, "unknown placeholder '%.*s' in '%s'%s", (int)n, id,
						tmpl, !strncmp(id, "layer_index", 11) && layer < 0 ?
						" (layer_index outside a layer template)" : "");
				goto out;
			}
			snprintf(num, sizeof(num), "%" PRId64, v);
			lit = num;
			litn = strlen(num);
		}
		if (put(&r, &o, &cap, lit, litn)) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		i += skip;
	}
	*out = r;
	r = NULL;
out:
	free(r);
	return rc;
}

/* ------------------------------------------------------------ weight lists */

int mk_weight_list_push(struct mk_weight_list *l, const struct mk_weight *w)
{
	/* capacity: the next power of two >= n (lists only grow by push) */
	if (!l->n || !(l->n & (l->n - 1))) {
		size_t cap = l->n ? l->n * 2 : 4;
		struct mk_weight *t = realloc(l->w, cap * sizeof(*t));
		if (!t)
			return -1;
		l->w = t;
	}
	if (mk_weight_copy(&l->w[l->n], w))
		return -1;
	l->n++;
	return 0;
}

/* Prefix a string in place (*s replaced). */
static int prefix_str(char **s, const char *prefix)
{
	size_t a = strlen(prefix), b = strlen(*s);
	char *t = malloc(a + b + 1);

	if (!t)
		return -1;
	memcpy(t, prefix, a);
	memcpy(t + a, *s, b + 1);
	free(*s);
	*s = t;
	return 0;
}

/* Substitute template t into a new weight w (then prefixed). */
static int instantiate(const struct mk_weight *t, const char *prefix, int64_t num_layers, int64_t layer,
		       struct mk_weight *w, struct mk_err *err)
{
	int rc;

	memset(w, 0, sizeof(*w));
	w->is_embed = t->is_embed;
	w->optional = t->optional;
	if ((rc = mk_arch_subst(t->name, num_layers, layer, &w->name, err)))
		goto out;
	if (t->force_dtype && (rc = mk_arch_subst(t->force_dtype, num_layers, layer, &w->force_dtype, err)))
		goto out;
	if (t->naliases) {
		if (!(w->aliases = calloc(t->naliases, sizeof(char *)))) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (; w->naliases < t->naliases; w->naliases++)
			if ((rc = mk_arch_subst(t->aliases[w->naliases], num_layers, layer,
						&w->aliases[w->naliases], err)))
				goto out;
	}
	if (t->ntied) {
		if (!(w->tied_names = calloc(t->ntied, sizeof(char *)))) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (; w->ntied < t->ntied; w->ntied++)
			if ((rc = mk_arch_subst(t->tied_names[w->ntied], num_layers, layer,
						&w->tied_names[w->ntied], err)))
				goto out;
	}
	if (prefix && *prefix) {
		bool bad = prefix_str(&w->name, prefix) != 0;
		for (size_t i = 0; i < w->naliases; i++)
			bad |= prefix_str(&w->aliases[i], prefix) != 0;
		for (size_t i = 0; i < w->ntied; i++)
			bad |= prefix_str(&w->tied_names[i], prefix) != 0;
		if (bad)
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	}
out:
	if (rc)
		mk_weight_clear(w);
	return rc;
}

/* Append one substituted weight; the list takes w's contents. */
static int push_owned(struct mk_weight_list *l, struct mk_weight *w, struct mk_err *err)
{
	int rc = 0;

	if (mk_weight_list_push(l, w))
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	mk_weight_clear(w);
	return rc;
}

static int push_template(struct mk_weight_list *l, const struct mk_arch *a, size_t module,
			 const struct mk_weight *t, enum mk_wsection sec, int64_t num_layers,
			 int64_t layer, const char *skip_if_contains, struct mk_err *err)
{
	const struct mk_arch_module *m = &a->modules[module];
	struct mk_weight w;
	int rc;

	if ((rc = instantiate(t, m->weight_prefix, num_layers, sec == MK_WS_LAYER ? layer : -1, &w, err)))
		return mk_err_prefix(err, "architecture '%s', module '%s': ", a->file ? a->file : "(inferred)",
				     m->name);
	if (skip_if_contains && strstr(w.name, skip_if_contains)) {
		mk_weight_clear(&w);
		return 0;
	}
	w.section = sec;
	w.layer = sec == MK_WS_LAYER ? layer : -1;
	w.module = module;
	return push_owned(l, &w, err);
}

static int push_name(struct mk_weight_list *l, size_t module, int64_t layer, bool optional,
		     struct mk_err *err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int push_name(struct mk_weight_list *l, size_t module, int64_t layer, bool optional,
		     struct mk_err *err, const char *fmt, ...)
{
	struct mk_weight w = { 0 };
	char name[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	if (!(w.name = strdup(name)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	w.optional = optional;
	w.section = MK_WS_LAYER;
	w.layer = layer;
	w.module = module;
	return push_owned(l, &w, err);
}

int mk_arch_weights(const struct mk_arch *a, size_t module, enum mk_wsection section, int64_t num_layers,
		    int64_t layer, struct mk_weight_list *l, struct mk_err *err)
{
	const struct mk_arch_module *m;
	int rc = 0;

	if (module >= a->nmodules)
		return mk_err_set(err, MK_EINVAL, "architecture '%s' has no module %zu",
				  a->file ? a->file : "(inferred)", module);
	m = &a->modules[module];
	if (section == MK_WS_PRE || section == MK_WS_POST) {
		const struct mk_weight *t = section == MK_WS_PRE ? m->pre : m->post;
		size_t n = section == MK_WS_PRE ? m->npre : m->npost;
		for (size_t i = 0; !rc && i < n; i++)
			rc = push_template(l, a, module, &t[i], section, num_layers, -1, NULL, err);
		return rc;
	}
	return mk_arch_layer_weights(a, module, num_layers, layer, mk_arch_layer_kind(a, layer), l, err);
}

int mk_arch_layer_weights(const struct mk_arch *a, size_t module, int64_t num_layers, int64_t layer,
			  enum mk_layer_kind kind, struct mk_weight_list *l, struct mk_err *err)
{
	const struct mk_arch_module *m;
	const char *skip = NULL;
	int rc = 0;

	if (module >= a->nmodules)
		return mk_err_set(err, MK_EINVAL, "architecture '%s' has no module %zu",
				  a->file ? a->file : "(inferred)", module);
	m = &a->modules[module];
	if (layer < 0)
		return mk_err_set(err, MK_EINVAL, "negative layer index %" PRId64, layer);
	if (a->kind == MK_ARCH_GLM4MOE && kind == MK_LK_SPARSE) {
		/* the definition's dense MLP replaced by the experts, router
		 * and shared experts (transformers-v5 fused names) */
		static const char *const moe[] = {
			"mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.gate.weight",
			"mlp.gate.e_score_correction_bias", "mlp.shared_experts.gate_proj.weight",
			"mlp.shared_experts.up_proj.weight", "mlp.shared_experts.down_proj.weight",
		};
		for (size_t i = 0; !rc && i < sizeof(moe) / sizeof(moe[0]); i++)
			rc = push_name(l, module, layer, false, err, "model.layers.%" PRId64 ".%s", layer, moe[i]);
		skip = ".mlp.";
	}
	/* Qwen3-Next: a layer has the linear attention or the full one */
	if (a->kind == MK_ARCH_HYBRID)
		skip = kind == MK_LK_LINEAR_ATTN ? ".self_attn." : ".linear_attn.";
	for (size_t i = 0; !rc && i < m->nlayer; i++)
		rc = push_template(l, a, module, &m->layer[i], MK_WS_LAYER, num_layers, layer, skip, err);
	if (a->kind == MK_ARCH_AFMOE) {
		static const char *const par[] = { "up_proj", "gate_proj", "down_proj" };
		for (int64_t e = 0; !rc && e < a->num_experts; e++)
			for (size_t p = 0; !rc && p < 3; p++)
				rc = push_name(l, module, layer, true, err,
					       "model.layers.%" PRId64 ".mlp.experts.%" PRId64 ".%s.weight",
					       layer, e, par[p]);
	}
	return rc;
}

/* ------------------------------------------------------ the planned list */

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

int mk_arch_planned(const struct mk_arch *a, const int64_t *num_layers, struct mk_weight_list *l,
		    struct mk_err *err)
{
	struct mk_weight_list all = { 0 };
	size_t *slot = NULL, cap = 16;
	bool *drop = NULL;
	int rc = 0;

	for (size_t m = 0; !rc && m < a->nmodules; m++) {
		if (num_layers[m] < 0) {
			rc = mk_err_set(err, MK_EINVAL, "module '%s': negative layer count", a->modules[m].name);
			break;
		}
		rc = mk_arch_weights(a, m, MK_WS_PRE, num_layers[m], -1, &all, err);
		for (int64_t i = 0; !rc && i < num_layers[m]; i++)
			rc = mk_arch_weights(a, m, MK_WS_LAYER, num_layers[m], i, &all, err);
		if (!rc)
			rc = mk_arch_weights(a, m, MK_WS_POST, num_layers[m], -1, &all, err);
	}
	if (rc)
		goto out;
	/* deduplicate by output name: first position, last copy's fields */
	while (cap < all.n * 2)
		cap *= 2;
	slot = malloc(cap * sizeof(*slot));
	drop = calloc(all.n ? all.n : 1, sizeof(*drop));
	if (!slot || !drop) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < cap; i++)
		slot[i] = SIZE_MAX;
	for (size_t i = 0; i < all.n; i++) {
		size_t h = hash_str(all.w[i].name) & (cap - 1);
		while (slot[h] != SIZE_MAX && strcmp(all.w[slot[h]].name, all.w[i].name))
			h = (h + 1) & (cap - 1);
		if (slot[h] == SIZE_MAX) {
			slot[h] = i;
			continue;
		}
		/* move the later copy's fields into the first position */
		struct mk_weight tmp = all.w[slot[h]];
		all.w[slot[h]] = all.w[i];
		all.w[i] = tmp;
		drop[i] = true;
	}
	for (size_t i = 0; !rc && i < all.n; i++)
		if (!drop[i] && mk_weight_list_push(l, &all.w[i]))
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	free(slot);
	free(drop);
	mk_weight_list_free(&all);
	return rc;
}

const char *mk_weight_resolve(const struct mk_weight *w, mk_has_tensor_fn has, void *ctx, int *how)
{
	if (has(ctx, w->name)) {
		if (how)
			*how = 0;
		return w->name;
	}
	for (size_t i = 0; i < w->naliases; i++)
		if (has(ctx, w->aliases[i])) {
			if (how)
				*how = 1;
			return w->aliases[i];
		}
	for (size_t i = 0; i < w->ntied; i++)
		if (has(ctx, w->tied_names[i])) {
			if (how)
				*how = 2;
			return w->tied_names[i];
		}
	return NULL;
}

/* ----------------------------------------------------------- config.json */

struct mk_hfconfig {
	json_t *root;
	char *label;
};

void mk_hfconfig_free(struct mk_hfconfig *c)
{
	if (!c)
		return;
	json_decref(c->root);
	free(c->label);
	free(c);
}

void *mk_hfconfig_json(const struct mk_hfconfig *c)
{
	return c->root;
}

const char *mk_hfconfig_label(const struct mk_hfconfig *c)
{
	return c->label;
}

int mk_hfconfig_parse(const char *text, size_t len, const char *label, struct mk_hfconfig **out,
		      struct mk_err *err)
{
	struct mk_hfconfig *c;
	json_error_t jerr;
	int rc = 0;

	*out = NULL;
	if (!label)
		label = "config.json";
	c = calloc(1, sizeof(*c));
	if (!c || !(c->label = strdup(label))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	{
		/* checked by the lossless reader (Python's rules, line and
		 * column in errors); integers past 64 bits (transformers writes
		 * some) read as reals */
		struct mk_jsondoc *doc = NULL;
		char *t64 = NULL;
		size_t l64 = 0;
		rc = mk_jsondoc_parse(text, len, label, &doc, err);
		if (!rc)
			rc = mk_jsondoc_int64_text(doc, &t64, &l64, err);
		mk_jsondoc_free(doc);
		if (rc)
			goto out;
		c->root = json_loadb(t64, l64, 0, &jerr);
		free(t64);
	}
	if (!c->root) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: invalid JSON at line %d: %s", label, jerr.line, jerr.text);
		goto out;
	}
	if (!json_is_object(c->root)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: the top level is not an object", label);
		goto out;
	}
	*out = c;
	c = NULL;
out:
	mk_hfconfig_free(c);
	return rc;
}

/* The value at a dotted path, or NULL; *bad gets the length of the
 * prefix that failed (for messages). */
static json_t *dotted_get(json_t *root, const char *key, size_t *bad)
{
	json_t *v = root;
	const char *p = key;

	for (;;) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (!json_is_object(v) || !(v = json_object_getn(v, p, n))) {
			*bad = (size_t)(p - key) + n;
			return NULL;
		}
		if (!dot)
			return v;
		p = dot + 1;
	}
}

bool mk_hfconfig_has(const struct mk_hfconfig *c, const char *key)
{
	size_t bad;

	return dotted_get(c->root, key, &bad) != NULL;
}

int mk_hfconfig_int(const struct mk_hfconfig *c, const char *key, int64_t *out, struct mk_err *err)
{
	size_t bad = 0;
	json_t *v = dotted_get(c->root, key, &bad);

	*out = 0;
	if (!v)
		return mk_err_set(err, MK_ENOENT, "%s has no \"%.*s\" (needed: \"%s\")", c->label, (int)bad, key,
				  key);
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return 0;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (d == floor(d) && fabs(d) < 9.0e15) {
			*out = (int64_t)d;
			return 0;
		}
	}
	return mk_err_set(err, MK_EFORMAT, "%s: \"%s\" is not an integer", c->label, key);
}

int mk_hfconfig_str(const struct mk_hfconfig *c, const char *key, const char **out, struct mk_err *err)
{
	size_t bad = 0;
	json_t *v = dotted_get(c->root, key, &bad);

	*out = NULL;
	if (!v)
		return mk_err_set(err, MK_ENOENT, "%s has no \"%.*s\" (needed: \"%s\")", c->label, (int)bad, key,
				  key);
	if (!json_is_string(v))
		return mk_err_set(err, MK_EFORMAT, "%s: \"%s\" is not a string", c->label, key);
	*out = json_string_value(v);
	return 0;
}

const char *mk_hfconfig_model_type(const struct mk_hfconfig *c)
{
	json_t *v = json_object_get(c->root, "model_type");

	return json_is_string(v) ? json_string_value(v) : NULL;
}

int mk_arch_num_layers(const struct mk_arch *a, size_t module, const struct mk_hfconfig *cfg, int64_t *out,
		       struct mk_err *err)
{
	const struct mk_arch_module *m;
	int rc;

	*out = 0;
	if (module >= a->nmodules)
		return mk_err_set(err, MK_EINVAL, "architecture has no module %zu", module);
	m = &a->modules[module];
	if (m->override_num_layers >= 0) {
		*out = m->override_num_layers;
		return 0;
	}
	if (!m->num_layers_key)
		return mk_err_set(err, MK_EFORMAT, "architecture '%s', module '%s': no layer count key",
				  a->file ? a->file : "(inferred)", m->name);
	if ((rc = mk_hfconfig_int(cfg, m->num_layers_key, out, err)))
		return mk_err_prefix(err, "layer count of module '%s' (%s): ", m->name,
				     a->file ? a->file : "(inferred)");
	if (*out < 0)
		return mk_err_set(err, MK_EFORMAT, "%s: \"%s\" is negative", cfg->label, m->num_layers_key);
	return 0;
}

/* ------------------------------------------------- choosing an architecture */

/* Replace a's class list and model type (procedural kinds). */
static int rename_arch(struct mk_arch *a, const char *cls, const char *model_type)
{
	char *c = strdup(cls), *t = strdup(model_type), **v = calloc(1, sizeof(*v));

	if (!c || !t || !v) {
		free(c);
		free(t);
		free(v);
		return -1;
	}
	mk_strv_free(a->architectures, a->narchitectures);
	v[0] = c;
	a->architectures = v;
	a->narchitectures = 1;
	free(a->model_type);
	a->model_type = t;
	return 0;
}

/* The model_type of the classes whose first layers are dense and the rest
 * sparse (MoE), or NULL.  Kimi K2 is a DeepseekV3ForCausalLM (its config
 * says model_type "kimi_k2"). */
static const char *dense_moe_type(const char *cls)
{
	static const char *const tab[][2] = {
		{ "Glm4MoeForCausalLM", "glm4_moe" },
		{ "DeepseekV3ForCausalLM", "deepseek_v3" },
		{ "Glm4MoeLiteForCausalLM", "glm4_moe_lite" },
	};
	for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
		if (!strcmp(cls, tab[i][0]))
			return tab[i][1];
	return NULL;
}

int mk_arch_for_config(const struct mk_arch_registry *r, const struct mk_hfconfig *cfg,
		       const char *override_class, struct mk_arch **out, char **unknown_class,
		       struct mk_err *err)
{
	const char *cls = override_class, *mt = mk_hfconfig_model_type(cfg);
	const struct mk_arch *base;
	struct mk_arch *a = NULL;
	int rc = 0;

	*out = NULL;
	if (unknown_class)
		*unknown_class = NULL;
	if (!cls) {
		json_t *v = json_object_get(cfg->root, "architectures");
		if (!json_is_array(v))
			return mk_err_set(err, MK_EFORMAT, "%s: no \"architectures\" list", cfg->label);
		if (json_array_size(v) != 1)
			return mk_err_set(err, MK_EFORMAT,
					  "%s: \"architectures\" lists %zu classes; exactly one is needed "
					  "(More than one architecture in config?)", cfg->label, json_array_size(v));
		if (!json_is_string(json_array_get(v, 0)))
			return mk_err_set(err, MK_EFORMAT, "%s: \"architectures\"[0] is not a string", cfg->label);
		cls = json_string_value(json_array_get(v, 0));
	}
	if (!strcmp(cls, "AfmoeForCausalLM")) {
		base = mk_arch_registry_find(r, "_AfmoePartialForCausalLM", NULL);
		if (!base)
			return mk_err_set(err, MK_ENOENT, "the definition of _AfmoePartialForCausalLM is missing");
		if ((rc = mk_arch_clone(base, &a, err)))
			goto out;
		a->kind = MK_ARCH_AFMOE;
		if ((rc = mk_hfconfig_int(cfg, "num_experts", &a->num_experts, err)))
			goto out;
		if (rename_arch(a, cls, "afmoe")) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
	} else if (dense_moe_type(cls) || !strcmp(cls, "Qwen3NextForCausalLM")) {
		/* layers of two kinds, read from the config */
		const char *type = dense_moe_type(cls) ? dense_moe_type(cls) : "qwen3_next";
		base = mk_arch_registry_find(r, cls, NULL);
		if (!base)
			return mk_err_set(err, MK_ENOENT, "the definition of %s is missing", cls);
		if ((rc = mk_arch_clone(base, &a, err)))
			goto out;
		if (dense_moe_type(cls)) {
			a->kind = MK_ARCH_GLM4MOE;
			if ((rc = mk_hfconfig_int(cfg, "n_routed_experts", &a->num_experts, err)))
				goto out;
		} else {
			a->kind = MK_ARCH_HYBRID;
		}
		if (rename_arch(a, cls, type)) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = mk_arch_read_kinds(a, cfg, err)))
			goto out;
	} else {
		base = mk_arch_registry_find(r, cls, mt);
		if (!base) {
			if (unknown_class && !(*unknown_class = strdup(cls)))
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = mk_arch_clone(base, &a, err)) || (rc = mk_arch_read_kinds(a, cfg, err)))
			goto out;
	}
	if (a->num_experts < -1 || ((a->kind == MK_ARCH_AFMOE || a->kind == MK_ARCH_GLM4MOE) && a->num_experts < 0)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: negative expert count", cfg->label);
		goto out;
	}
	*out = a;
	a = NULL;
out:
	if (rc && a)
		mk_err_prefix(err, "%s: ", cls);
	mk_arch_free(a);
	return rc;
}
