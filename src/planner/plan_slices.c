/* plan_slices.c - the planner's walk over the architecture: each module's
 * slices normalised and checked, and each of their weights (pre, per
 * layer, post) planned with its inputs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/planner_impl.h"

/* A model's layer count in one module (mk_config_normalize's callback). */
struct lc_ctx {
	struct mk_plan *p;
	size_t module;
};

static int layer_count(void *ctx, const struct mk_model_ref *ref, long long *n, struct mk_err *err)
{
	struct lc_ctx *c = ctx;
	long i = plan_model_index(c->p, ref);
	int64_t v;
	int rc;

	if (i < 0)
		return mk_err_set(err, MK_EINVAL, "model not referenced");
	rc = mk_arch_num_layers(c->p->arch, c->module, c->p->models[i].hf, &v, err);
	if (rc)
		return rc;
	*n = v;
	return 0;
}

/* Plan one module: pre weights from the first slice's sources, each
 * slice's layers, post weights from the last slice's sources. */
static int plan_module(struct mk_plan *p, size_t mod, const struct mk_output_slice *sl, size_t nsl,
		       const struct mk_params *modparams, struct mk_diags *d, struct mk_err *err)
{
	struct mk_weight_list pre = { 0 }, post = { 0 };
	int64_t out_layers = 0, total;
	int rc = 0;

	for (size_t s = 0; s < nsl; s++)
		out_layers += sl[s].nsources ? sl[s].sources[0].end - sl[s].sources[0].start : 0;
	total = out_layers;
	if (p->arch->modules[mod].override_num_layers >= 0)
		total = p->arch->modules[mod].override_num_layers;
	if (nsl == 0)
		return 0;
	for (int sec = 0; sec < 2 && !rc; sec++) {
		const struct mk_output_slice *s = sec == 0 ? &sl[0] : &sl[nsl - 1];
		struct mk_weight_list *l = sec == 0 ? &pre : &post;
		rc = mk_arch_weights(p->arch, mod, sec == 0 ? MK_WS_PRE : MK_WS_POST, total, -1, l, err);
		if (rc)
			break;
		if (sec == 1)
			continue; /* post weights are planned after the layers */
		for (size_t w = 0; w < l->n && !rc; w++) {
			struct src_in *srcs = calloc(s->nsources + 1, sizeof(*srcs));
			if (!srcs) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			for (size_t k = 0; k < s->nsources; k++)
				srcs[k] = (struct src_in){ plan_model_index(p, &s->sources[k].model), &s->sources[k].model,
							   &l->w[w], &s->sources[k].params };
			struct tctx tc = { .scope = { &p->cfg->params, modparams, s },
					   .base = mk_config_base_for(p->cfg, s), .t = 0.0, .loc = s->loc.line || !s->nsources ? &s->loc : &s->sources[0].loc };
			rc = plan_tensor(p, &l->w[w], srcs, s->nsources, &tc, d, err);
			free(srcs);
		}
	}
	/* layers */
	int64_t out_layer = 0;
	for (size_t si = 0; si < nsl && !rc; si++) {
		const struct mk_output_slice *s = &sl[si];
		int64_t span = s->nsources ? s->sources[0].end - s->sources[0].start : 0;
		for (int64_t k = 0; k < span && !rc; k++, out_layer++) {
			struct mk_weight_list ol = { 0 };
			struct mk_weight_list *il = calloc(s->nsources + 1, sizeof(*il));
			if (!il) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			/* the layer's kind: its sources' (all the same), else
			 * the base's layout at this position */
			enum mk_layer_kind kind = mk_arch_layer_kind(p->arch, out_layer);
			for (size_t src = 0; src < s->nsources && p->arch->nkinds; src++) {
				long mi = plan_model_index(p, &s->sources[src].model);
				const struct mk_arch *sa = mi >= 0 && p->models[mi].arch &&
							   mk_arch_equal(p->models[mi].arch, p->arch) ? p->models[mi].arch : p->arch;
				enum mk_layer_kind sk = mk_arch_layer_kind(sa, s->sources[src].start + k);
				if (src == 0) {
					kind = sk;
				} else if (sk != kind) {
					diag(d, MK_DIAG_ERROR, &s->sources[src].loc,
					     "layer %lld of model '%s' is a %s layer, but layer %lld of model '%s', merged "
					     "with it into output layer %lld, is a %s layer: %s layers of different kinds "
					     "cannot be merged into one (choose layer ranges whose layers pair up "
					     "kind with kind)",
					     (long long)(s->sources[src].start + k), p->models[mi].display,
					     mk_layer_kind_name(sk), (long long)(s->sources[0].start + k),
					     p->models[plan_model_index(p, &s->sources[0].model)].display,
					     (long long)out_layer, mk_layer_kind_name(kind), p->arch->model_type);
					span = 0;
				}
			}
			if (span == 0) {
				free(il);
				break;
			}
			if (mod == 0 && p->arch->nkinds) {
				if ((size_t)out_layer >= p->nout_kinds) {
					unsigned char *t = realloc(p->out_kinds, (size_t)out_layer + 16);
					if (!t) {
						free(il);
						rc = mk_err_set(err, MK_ENOMEM, "out of memory");
						break;
					}
					p->out_kinds = t;
				}
				p->out_kinds[out_layer] = (unsigned char)kind;
				if ((size_t)out_layer + 1 > p->nout_kinds)
					p->nout_kinds = (size_t)out_layer + 1;
			}
			rc = mk_arch_layer_weights(p->arch, mod, total, out_layer, kind, &ol, err);
			for (size_t src = 0; src < s->nsources && !rc; src++) {
				long mi = plan_model_index(p, &s->sources[src].model);
				int64_t nl = 0;
				struct mk_err e = { 0 };
				/* input names from the source's own layer count */
				if (mi >= 0 && mk_arch_num_layers(p->arch, mod, p->models[mi].hf, &nl, &e))
					nl = total;
				rc = mk_arch_layer_weights(p->arch, mod, nl, s->sources[src].start + k, kind, &il[src],
							   err);
			}
			double t = span > 1 ? (double)k / (double)(span - 1) : 1.0;
			for (size_t w = 0; w < ol.n && !rc; w++) {
				struct src_in *srcs = calloc(s->nsources + 1, sizeof(*srcs));
				size_t ns = 0;
				if (!srcs) {
					rc = mk_err_set(err, MK_ENOMEM, "out of memory");
					break;
				}
				for (size_t src = 0; src < s->nsources; src++)
					if (w < il[src].n)
						srcs[ns++] = (struct src_in){ plan_model_index(p, &s->sources[src].model),
									      &s->sources[src].model, &il[src].w[w],
									      &s->sources[src].params };
				struct tctx tc = { .scope = { &p->cfg->params, modparams, s },
						   .base = mk_config_base_for(p->cfg, s), .t = t, .loc = s->loc.line || !s->nsources ? &s->loc : &s->sources[0].loc };
				rc = plan_tensor(p, &ol.w[w], srcs, ns, &tc, d, err);
				free(srcs);
			}
			mk_weight_list_free(&ol);
			for (size_t src = 0; src < s->nsources; src++)
				mk_weight_list_free(&il[src]);
			free(il);
		}
	}
	/* post weights, from the last slice (sized by the first's sources:
	 * mergekit's positional pairing, see mk-compat(7)) */
	const struct mk_output_slice *last = &sl[nsl - 1];
	size_t npost_src = last->nsources < sl[0].nsources ? last->nsources : sl[0].nsources;
	for (size_t w = 0; w < post.n && !rc; w++) {
		struct src_in *srcs = calloc(last->nsources + 1, sizeof(*srcs));
		if (!srcs) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		for (size_t k = 0; k < npost_src; k++)
			srcs[k] = (struct src_in){ plan_model_index(p, &last->sources[k].model), &last->sources[k].model,
						   &post.w[w], &last->sources[k].params };
		struct tctx tc = { .scope = { &p->cfg->params, modparams, last },
				   .base = mk_config_base_for(p->cfg, last), .t = 0.0, .loc = last->loc.line || !last->nsources ? &last->loc : &last->sources[0].loc };
		rc = plan_tensor(p, &post.w[w], srcs, npost_src, &tc, d, err);
		free(srcs);
	}
	mk_weight_list_free(&pre);
	mk_weight_list_free(&post);
	return rc;
}

int plan_modules(struct mk_plan *p, int64_t *out_layers, bool *layers_changed, struct mk_diags *d,
		 struct mk_err *err)
{
	const struct mk_config *c = p->cfg;
	int rc = 0;

	*layers_changed = c->nslices > 0 || c->nmodules > 0;
	if (c->nslices && p->arch->nmodules != 1) {
		diag(d, MK_DIAG_ERROR, &c->slices[0].loc,
		     "the model has %zu modules: use the modules: syntax to work with slices", p->arch->nmodules);
		return 0;
	}
	for (size_t k = 0; k < c->nmodules; k++) {
		bool known = false;
		for (size_t mod = 0; mod < p->arch->nmodules; mod++)
			known |= !strcmp(c->modules[k].name, p->arch->modules[mod].name);
		if (!known) {
			char names[512] = "";
			for (size_t mod = 0; mod < p->arch->nmodules; mod++)
				snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", mod ? ", " : "",
					 p->arch->modules[mod].name);
			diag(d, MK_DIAG_ERROR, &c->modules[k].loc, "the architecture has no module '%s' (it has: %s)",
			     c->modules[k].name, names);
		}
	}
	if (d->nerrors)
		return 0;
	for (size_t mod = 0; mod < p->arch->nmodules && !rc; mod++) {
		const struct mk_input_model *models = NULL;
		const struct mk_output_slice *slices = NULL;
		size_t nmodels = 0, nslices = 0;
		const struct mk_params *mparams = NULL;
		const struct mk_output_module *om = NULL;

		out_layers[mod] = -1;
		if (c->nmodules) {
			for (size_t k = 0; k < c->nmodules; k++)
				if (!strcmp(c->modules[k].name, p->arch->modules[mod].name))
					om = &c->modules[k];
			if (!om)
				continue; /* modules not named are not emitted (as mergekit) */
			models = om->models;
			nmodels = om->nmodels;
			slices = om->slices;
			nslices = om->nslices;
			mparams = &om->params;
		} else {
			models = c->models;
			nmodels = c->nmodels;
			slices = c->slices;
			nslices = c->nslices;
		}
		struct mk_output_slice *norm = NULL;
		size_t nnorm = 0;
		struct lc_ctx lc = { p, mod };
		struct mk_err e = { 0 };
		if (mk_config_normalize(models, nmodels, slices, nslices, c->base_model, layer_count, &lc, &norm, &nnorm,
					&e)) {
			diag(d, MK_DIAG_ERROR, om ? &om->loc : NULL, "%s", e.msg);
			continue;
		}
		/* slices past a model's depth */
		for (size_t s = 0; s < nnorm; s++)
			for (size_t k = 0; k < norm[s].nsources; k++) {
				long long nl = 0;
				const struct mk_input_slice *src = &norm[s].sources[k];
				if (!layer_count(&lc, &src->model, &nl, &e) && src->end > nl)
					diag(d, MK_DIAG_ERROR, &src->loc,
					     "layer_range [%lld, %lld] is past the end of model '%s', which has %lld layers",
					     src->start, src->end, p->models[plan_model_index(p, &src->model)].display, nl);
			}
		if (d->nerrors == 0) {
			out_layers[mod] = 0;
			for (size_t s = 0; s < nnorm; s++)
				out_layers[mod] += norm[s].nsources ? norm[s].sources[0].end - norm[s].sources[0].start : 0;
			rc = plan_module(p, mod, norm, nnorm, mparams, d, err);
		}
		mk_output_slices_free(norm, nnorm);
	}
	return rc;
}
