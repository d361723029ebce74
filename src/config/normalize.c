/* normalize.c - what the planner asks of a parsed config: the referenced
 * models in a fixed order, the base in effect for a slice, the features
 * refused for now, and `models:` normalised into output slices. */
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"

/* ------------------------------------------------------------ referenced models */

struct refs {
	const struct mk_model_ref **v;
	size_t n, cap;
};

/* A reference mk_config_parse_partial could not read is left unset (no
 * model path; its error is already a diagnostic): it names no model. */
static int add_ref(struct refs *r, const struct mk_model_ref *m)
{
	if (!m->model.path)
		return 0;
	for (size_t i = 0; i < r->n; i++)
		if (mk_model_ref_equal(r->v[i], m))
			return 0;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 8;
		const struct mk_model_ref **v = realloc(r->v, cap * sizeof(*v));
		if (!v)
			return -MK_ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n++] = m;
	return 0;
}

static int add_models(struct refs *r, const struct mk_input_model *m, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (add_ref(r, &m[i].model))
			return -MK_ENOMEM;
	return 0;
}

static int add_slices(struct refs *r, const struct mk_output_slice *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < s[i].nsources; j++)
			if (add_ref(r, &s[i].sources[j].model))
				return -MK_ENOMEM;
	return 0;
}

int mk_config_models(const struct mk_config *cfg,
		     const struct mk_model_ref ***out, size_t *n,
		     struct mk_err *err)
{
	struct refs r = { 0 };
	int rc = 0;

	*out = NULL;
	*n = 0;
	if ((cfg->base_model && add_ref(&r, cfg->base_model)) ||
	    add_models(&r, cfg->models, cfg->nmodels) ||
	    add_slices(&r, cfg->slices, cfg->nslices)) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory listing models");
		goto out;
	}
	for (size_t i = 0; i < cfg->nmodules; i++)
		if (add_models(&r, cfg->modules[i].models, cfg->modules[i].nmodels) ||
		    add_slices(&r, cfg->modules[i].slices, cfg->modules[i].nslices)) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory listing models");
			goto out;
		}
	*out = r.v;
	*n = r.n;
	r.v = NULL;
out:
	free(r.v);
	return rc;
}

const struct mk_model_ref *mk_config_base_for(const struct mk_config *cfg,
					      const struct mk_output_slice *slice)
{
	if (slice && slice->base_model)
		return slice->base_model;
	return cfg ? cfg->base_model : NULL;
}

/* ------------------------------------------------------------ refused features */

struct feats {
	struct mk_config_feature *v;
	size_t n, cap;
};

static int add_feat(struct feats *f, const char *what, const char *later,
		    const struct mk_config_loc *loc)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 4;
		struct mk_config_feature *v = realloc(f->v, cap * sizeof(*v));
		if (!v)
			return -MK_ENOMEM;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = (struct mk_config_feature){
		.what = what, .later = later, .path = loc->path ? loc->path : "",
		.line = loc->line, .col = loc->col,
	};
	return 0;
}

static int cmp_feat(const void *a, const void *b)
{
	const struct mk_config_feature *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return 0;
}

int mk_config_unsupported(const struct mk_config *cfg,
			  struct mk_config_feature **out, size_t *n,
			  struct mk_err *err)
{
	struct feats f = { 0 };
	int rc = 0;

	*out = NULL;
	*n = 0;
	/* nothing is refused in this version: LoRA references, the last
	 * feature listed here, are planned now (src/planner/lora.c); the list
	 * stays for the next feature that comes later (add_feat) */
	(void)cfg;
	(void)add_feat;
	/* document order; a stable sort is not needed: positions differ */
	if (f.n > 1)
		qsort(f.v, f.n, sizeof(*f.v), cmp_feat);
	*out = f.v;
	*n = f.n;
	(void)err;
	return rc;
}

/* ------------------------------------------------------------ normalisation */

static int check_slice(const struct mk_output_slice *s, size_t idx, struct mk_err *err)
{
	for (size_t i = 0; i < s->nsources; i++) {
		const struct mk_input_slice *a = &s->sources[i];
		const struct mk_input_slice *r = &s->sources[0];
		char *name = NULL;
		int rc;

		if (a->end - a->start != r->end - r->start) {
			mk_model_ref_format(&a->model, &name, NULL);
			rc = mk_err_set(err, MK_EINVAL, "slice %zu: all inputs to a slice must "
					"contain the same number of layers: '%s' spans %lld "
					"([%lld, %lld)), the first source %lld", idx,
					name ? name : "?", a->end - a->start, a->start, a->end,
					r->end - r->start);
			free(name);
			return rc;
		}
		for (size_t j = 0; j < i; j++)
			if (mk_model_ref_equal(&a->model, &s->sources[j].model)) {
				mk_model_ref_format(&a->model, &name, NULL);
				rc = mk_err_set(err, MK_EINVAL, "slice %zu: model '%s' appears "
						"twice; mergekit would silently keep only one of "
						"them, mk refuses", idx, name ? name : "?");
				free(name);
				return rc;
			}
	}
	return 0;
}

int mk_config_normalize(const struct mk_input_model *models, size_t nmodels,
			const struct mk_output_slice *slices, size_t nslices,
			const struct mk_model_ref *base,
			mk_layer_count_fn layers, void *ctx,
			struct mk_output_slice **out, size_t *nout,
			struct mk_err *err)
{
	struct mk_output_slice *v = NULL;
	size_t n = 0;
	int rc = 0;

	*out = NULL;
	*nout = 0;
	if (nmodels) {
		bool add_base = base != NULL;
		struct mk_output_slice *s;

		for (size_t i = 0; base && i < nmodels; i++)
			if (mk_model_ref_equal(&models[i].model, base))
				add_base = false;
		if (!(v = calloc(1, sizeof(*v))))
			goto nomem;
		n = 1;
		s = &v[0];
		if (!(s->sources = calloc(nmodels + add_base, sizeof(*s->sources))))
			goto nomem;
		for (size_t i = 0; i < nmodels + add_base; i++) {
			const struct mk_model_ref *ref = i < nmodels ? &models[i].model : base;
			struct mk_input_slice *src = &s->sources[i];
			long long nl = -1;

			s->nsources = i + 1;
			if (!layers) {
				rc = mk_err_set(err, MK_EINVAL, "no layer counts to expand "
						"'models:' with");
				goto out;
			}
			if ((rc = layers(ctx, ref, &nl, err)) < 0)
				goto out;
			if (nl < 0) {
				rc = mk_err_set(err, MK_EINVAL, "a negative layer count (%lld) for "
						"'%s'", nl, ref->model.path);
				goto out;
			}
			src->start = 0;
			src->end = nl;
			if (mk_model_ref_copy(&src->model, ref, err))
				goto nomem;
			if (i < nmodels &&
			    (mk__params_copy(&src->params, &models[i].params) ||
			     mk__loc_copy(&src->loc, &models[i].loc)))
				goto nomem;
		}
	} else if (nslices) {
		if (!(v = calloc(nslices, sizeof(*v))))
			goto nomem;
		for (size_t i = 0; i < nslices; i++) {
			n = i + 1;
			if (mk__output_slice_copy(&v[i], &slices[i]))
				goto nomem;
		}
	}
	for (size_t i = 0; i < n; i++)
		if ((rc = check_slice(&v[i], i, err)) < 0)
			goto out;
	*out = v;
	*nout = n;
	v = NULL;
	n = 0;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory normalising the configuration");
out:
	mk_output_slices_free(v, n);
	return rc;
}
