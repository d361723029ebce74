/* plan_raw.c - the planner for state dicts (mk-pytorch, mk_plan_opts.raw):
 * one job per tensor name of any file, no architecture. */
#include <stdlib.h>
#include <string.h>
#include "planner/planner_impl.h"

static int raw_layers(void *ctx, const struct mk_model_ref *ref, long long *n, struct mk_err *err)
{
	(void)ctx;
	(void)ref;
	(void)err;
	*n = 1;               /* a state dict is one unit: models: expands to one slice */
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* What mk-pytorch refuses of a configuration: the parts that need an
 * architecture or a tokenizer. */
void plan_raw_refuse(const struct mk_config *c, struct mk_diags *d)
{
	static const char why[] = "state dicts are merged whole, without an architecture";

	if (c->nslices)
		diag(d, MK_DIAG_ERROR, &c->slices[0].loc, "slices: is not supported by mk-pytorch (%s)", why);
	if (c->nmodules)
		diag(d, MK_DIAG_ERROR, &c->modules[0].loc, "modules: is not supported by mk-pytorch (%s)", why);
	if (c->tokenizer)
		diag(d, MK_DIAG_ERROR, &c->tokenizer->loc, "tokenizer: is not supported by mk-pytorch (%s)", why);
	if (c->tokenizer_source.kind != MK_TOKSRC_NONE)
		diag(d, MK_DIAG_ERROR, &c->tokenizer_source.loc, "tokenizer_source: is not supported by mk-pytorch (%s)",
		     why);
	if (c->chat_template)
		diag(d, MK_DIAG_ERROR, &c->chat_template_loc, "chat_template: is not supported by mk-pytorch (%s)", why);
}

/* Plan a merge of state dicts: one job per tensor name of any file. */
int plan_raw(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
{
	const struct mk_config *c = p->cfg;
	struct mk_output_slice *norm = NULL;
	size_t nnorm = 0, nall = 0, nnames = 0;
	const char **names = NULL;
	struct src_in *srcs = NULL;
	size_t *lacks = NULL;
	const char **first_lacked = NULL;
	struct mk_err e = { 0 };
	int rc = 0;

	if (mk_config_normalize(c->models, c->nmodels, NULL, 0, c->base_model, raw_layers, NULL, &norm, &nnorm, &e)) {
		if (e.code == MK_ENOMEM)
			return mk_err_set(err, MK_ENOMEM, "%s", e.msg);
		diag(d, MK_DIAG_ERROR, NULL, "%s", e.msg);
		return 0;
	}
	const struct mk_output_slice *s = &norm[0];
	/* the names of the models: entries' files (a base not among them
	 * adds none, as in mergekit) */
	for (size_t k = 0; k < c->nmodels && k < s->nsources; k++) {
		long mi = plan_model_index(p, &s->sources[k].model);
		nall += mi >= 0 ? p->models[mi].m->ntensors : 0;
	}
	names = calloc(nall + 1, sizeof(*names));
	srcs = calloc(s->nsources + 1, sizeof(*srcs));
	lacks = calloc(s->nsources + 1, sizeof(*lacks));
	first_lacked = calloc(s->nsources + 1, sizeof(*first_lacked));
	if (!names || !srcs || !lacks || !first_lacked) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < c->nmodels && k < s->nsources; k++) {
		long mi = plan_model_index(p, &s->sources[k].model);
		for (size_t q = 0; mi >= 0 && q < p->models[mi].m->ntensors; q++)
			names[nnames++] = p->models[mi].m->tensors[q].t->name;
	}
	qsort(names, nnames, sizeof(*names), cmp_str);
	size_t u = 0;
	for (size_t i = 0; i < nnames; i++)
		if (!u || strcmp(names[u - 1], names[i]))
			names[u++] = names[i];
	nnames = u;
	for (size_t t = 0; t < nnames && !rc; t++) {
		struct mk_weight w = { .name = (char *)names[t], .layer = -1 };
		size_t ns = 0;
		bool missing = false;
		for (size_t k = 0; k < s->nsources; k++) {
			long mi = plan_model_index(p, &s->sources[k].model);
			if (mi >= 0 && mk_model_find(p->models[mi].m, names[t])) {
				srcs[ns++] = (struct src_in){ mi, &s->sources[k].model, &w, &s->sources[k].params };
				continue;
			}
			missing = true;
			if (!lacks[k]++)
				first_lacked[k] = names[t];
		}
		if (missing && p->o->raw_missing != MK_RAW_MISSING_MERGE)
			continue;
		const struct mk_config_loc *loc = srcs[0].ref->loc.line ? &srcs[0].ref->loc : &c->merge_method_loc;
		struct tctx tc = { .scope = { &c->params, NULL, s }, .base = mk_config_base_for(c, s), .t = 0.0,
				   .loc = loc };
		rc = plan_tensor(p, &w, srcs, ns, &tc, d, err);
	}
	for (size_t k = 0; !rc && k < s->nsources; k++) {
		long mi = plan_model_index(p, &s->sources[k].model);
		if (!lacks[k] || mi < 0)
			continue;
		if (p->o->raw_missing == MK_RAW_MISSING_ERROR)
			diag(d, MK_DIAG_ERROR, &s->sources[k].model.loc,
			     "model '%s' lacks %zu of the %zu tensors (the first '%s'): --tensor-intersection leaves "
			     "out the tensors a model lacks, --tensor-union merges each from the models that have it",
			     p->models[mi].display, lacks[k], nnames, first_lacked[k]);
		else
			diag(d, MK_DIAG_WARNING, &s->sources[k].model.loc, "model '%s' lacks %zu of the %zu tensors "
			     "(the first '%s'): %s", p->models[mi].display, lacks[k], nnames, first_lacked[k],
			     p->o->raw_missing == MK_RAW_MISSING_SKIP ? "they are left out" :
			     "each is merged from the models that have it");
	}
out:
	mk_output_slices_free(norm, nnorm);
	free(names);
	free(srcs);
	free(lacks);
	free(first_lacked);
	return rc;
}
