/* config_queries.h - what the config harnesses ask of a parsed config:
 * every query a planner makes (model order and string forms, refused
 * features, normalisation into slices, parameter lookups), with the
 * invariants that must hold.  Included by fuzz_config.c and
 * fuzz_config_gen.c. */
#ifndef MK_FUZZ_CONFIG_QUERIES_H
#define MK_FUZZ_CONFIG_QUERIES_H

#include <stdlib.h>
#include <string.h>
#include "config/config.h"

static int layers(void *ctx, const struct mk_model_ref *ref, long long *n,
		  struct mk_err *err)
{
	(void)ctx;
	*n = (long long)(strlen(ref->model.path) % 5);
	return 0;
}

static void poke_params(const struct mk_param_ctx *sc, const struct mk_params *p,
			const struct mk_model_ref *model)
{
	static const char *const tensors[] = { "", "model.layers.0.mlp.up_proj.weight",
					       "lm_head.weight" };
	double v;

	for (size_t i = 0; p && i < p->n; i++)
		for (size_t t = 0; t < 3; t++) {
			if (mk_param_lookup(sc, p->v[i].name, model, tensors[t], t / 2.0, &v) &&
			    v != v)
				abort();        /* values are finite */
		}
}

static void config_queries(const struct mk_config *cfg)
{
	const struct mk_model_ref **refs = NULL;
	struct mk_config_feature *feats = NULL;
	struct mk_output_slice *sl = NULL;
	struct mk_err err;
	size_t nrefs = 0, nfeats = 0, nsl = 0;

	if (!cfg->merge_method || (!cfg->nmodels + !cfg->nslices + !cfg->nmodules) != 2)
		abort();
	if (mk_config_models(cfg, &refs, &nrefs, &err) == 0) {
		for (size_t i = 0; i < nrefs; i++) {
			char *s = NULL;
			if (mk_model_ref_format(refs[i], &s, &err) == 0) {
				struct mk_model_ref back;
				/* the string form reads back the same */
				if (!refs[i]->override_arch && !strchr(refs[i]->model.path, '+') &&
				    !strchr(refs[i]->model.path, '@') &&
				    (!refs[i]->lora.path || (!strchr(refs[i]->lora.path, '+') &&
							     !strchr(refs[i]->lora.path, '@'))) &&
				    (!refs[i]->model.revision || !strchr(refs[i]->model.revision, '+')) &&
				    mk_model_ref_parse(s, &back, &err) == 0) {
					if (!mk_model_ref_equal(&back, refs[i]))
						abort();
					mk_model_ref_clear(&back);
				}
				free(s);
			}
			for (size_t j = 0; j < i; j++)
				if (mk_model_ref_equal(refs[i], refs[j]))
					abort();
		}
		free(refs);
	}
	if (mk_config_unsupported(cfg, &feats, &nfeats, &err) == 0)
		free(feats);
	if (mk_config_normalize(cfg->models, cfg->nmodels, cfg->slices, cfg->nslices,
				cfg->base_model, layers, NULL, &sl, &nsl, &err) == 0) {
		for (size_t i = 0; i < nsl; i++) {
			struct mk_param_ctx sc = { &cfg->params, NULL, &sl[i] };
			poke_params(&sc, &cfg->params, NULL);
			poke_params(&sc, &sl[i].params, NULL);
			for (size_t j = 0; j < sl[i].nsources; j++)
				poke_params(&sc, &sl[i].sources[j].params, &sl[i].sources[j].model);
		}
		mk_output_slices_free(sl, nsl);
	}
	for (size_t m = 0; m < cfg->nmodules; m++) {
		const struct mk_output_module *mod = &cfg->modules[m];
		if (mk_config_normalize(mod->models, mod->nmodels, mod->slices, mod->nslices,
					cfg->base_model, layers, NULL, &sl, &nsl, &err) == 0) {
			for (size_t i = 0; i < nsl; i++) {
				struct mk_param_ctx sc = { &cfg->params, &mod->params, &sl[i] };
				poke_params(&sc, &mod->params, NULL);
			}
			mk_output_slices_free(sl, nsl);
		}
	}
}

/* Parse text as a config and check what must hold: a parse that succeeds
 * has no errors, keeps the text, and answers every query; one that fails
 * says why with an error diagnostic (or ran out of memory). */
static void config_check(const char *text, size_t n, const char *label)
{
	struct mk_config *cfg = NULL;
	struct mk_diags diags;
	struct mk_err err;
	char line[2048];
	int rc = mk_config_parse(text, n, label, &cfg, &diags, &err);

	for (size_t i = 0; i < diags.n; i++)
		mk_diag_format(&diags, &diags.v[i], line, sizeof(line));
	if (rc == 0) {
		if (!cfg || diags.nerrors || cfg->len != n || memcmp(cfg->text, text, n) != 0)
			abort();
		config_queries(cfg);
		mk_config_free(cfg);
	} else if (cfg || err.code == 0 || err.msg[0] == '\0' ||
		   (rc != -MK_ENOMEM && diags.nerrors == 0)) {
		abort();
	}
	mk_diags_free(&diags);
}

#endif
