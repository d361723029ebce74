/* plan_build.c - mk-plan: configuration + model metadata -> plan.  The
 * configuration checked, the planner's steps run in order, the jobs put in
 * file order and the HEAD's plan fields filled; the plan freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/budget.h"
#include "methods/spec.h"
#include "mk/plugin.h"
#include "planner/planner_impl.h"
#include "planner/quant.h"

/* ------------------------------------------------------------ parameter names */

/* A setting the method has no parameter for is ignored (as mergekit
 * does, silently): a warning at its key, with the method's closest
 * parameter name (the distance limits of unknown config keys) or its
 * list of parameters.  So is a global parameter set for one model
 * (per_model: a model's or a slice source's parameters), which only the
 * top-level, module or slice parameters can set. */
static void check_param_names(const struct mk_method *m, const struct mk_params *ps, bool per_model,
			      struct mk_diags *d)
{
	for (size_t i = 0; ps && i < ps->n; i++) {
		const char *name = ps->v[i].name;
		char hint[640];
		int at = mk_method_param_index(m, name);

		if (at < 0)
			diag(d, MK_DIAG_WARNING, &ps->v[i].loc, "%s has no parameter '%s'; it is ignored (%s)", m->name,
			     name, mk_method_param_hint(m, name, hint, sizeof(hint)));
		else if (per_model && m->params[at].scope == MK_SCOPE_GLOBAL)
			diag(d, MK_DIAG_WARNING, &ps->v[i].loc,
			     "'%s' is one value for all models in %s; set for one model it is ignored (set it in the top-level parameters)",
			     name, m->name);
	}
}

static void check_slices_params(const struct mk_method *m, const struct mk_output_slice *sl, size_t n,
				struct mk_diags *d)
{
	for (size_t i = 0; i < n; i++) {
		check_param_names(m, &sl[i].params, false, d);
		for (size_t k = 0; k < sl[i].nsources; k++)
			check_param_names(m, &sl[i].sources[k].params, true, d);
	}
}

static void check_config_params(const struct mk_config *c, const struct mk_method *m, struct mk_diags *d)
{
	check_param_names(m, &c->params, false, d);
	for (size_t i = 0; i < c->nmodels; i++)
		check_param_names(m, &c->models[i].params, true, d);
	check_slices_params(m, c->slices, c->nslices, d);
	for (size_t k = 0; k < c->nmodules; k++) {
		const struct mk_output_module *om = &c->modules[k];
		check_param_names(m, &om->params, false, d);
		for (size_t i = 0; i < om->nmodels; i++)
			check_param_names(m, &om->models[i].params, true, d);
		check_slices_params(m, om->slices, om->nslices, d);
	}
}

void mk_plan_free(struct mk_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nmodels; i++) {
		struct pmodel *pm = &p->models[i];
		free(pm->refstr);
		free(pm->display);
		mk_model_free(pm->m);
		mk_hfconfig_free(pm->hf);
		free(pm->hf_text);
		mk_arch_free(pm->arch);
		mk_lora_free(pm->lora);
		mk_quant_free(pm->quant);
		free(pm->lora_refstr);
	}
	free(p->models);
	mk_tokmerge_free(p->tok);
	for (size_t i = 0; p->tok_vocabs && i < p->nmodels; i++)
		mk_vocab_free(p->tok_vocabs[i]);
	free(p->tok_vocabs);
	free(p->tok_cfg);
	free(p->tok_said);
	for (size_t i = 0; i < p->njobs; i++)
		mk_plan_job_free(p->jobs[i]);
	free(p->jobs);
	for (size_t i = 0; i < p->nfiles; i++) {
		free(p->files[i].name);
		free(p->files[i].data);
	}
	free(p->files);
	free(p->card);
	free(p->last_err);
	free(p->last_err_loc.path);
	free(p->base_copy_first);
	plan_extract_info_free(p->extract);
	mk_arch_free(p->arch);
	free(p->out_kinds);
	mk_manifest_free(p->man);
	mk_config_free(p->cfg);
	free(p);
}

const char *mk_plan_card(const struct mk_plan *p)
{
	return p->card;
}

const struct mk_extract_info *mk_plan_extract_info(const struct mk_plan *p)
{
	return p->extract;
}

const struct mk_arch *mk_plan_arch(const struct mk_plan *p)
{
	return p->arch;
}

const struct mk_hfconfig *mk_plan_donor_config(const struct mk_plan *p)
{
	return p->nmodels ? p->models[0].hf : NULL;
}

/* Where a job's first read lands: its base's (else its first input's)
 * shard and offset, so the jobs can be sent in file order. */
struct job_key {
	size_t model, shard;
	uint64_t off;
	size_t pos;
};

static int cmp_key(const void *a, const void *b)
{
	const struct job_key *x = a, *y = b;
	if (x->model != y->model)
		return x->model < y->model ? -1 : 1;
	if (x->shard != y->shard)
		return x->shard < y->shard ? -1 : 1;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Send the jobs in the order the base model (else the first) stores its
 * tensors, so mk-fetch reads it front to back; the manifest keeps
 * mergekit's order, which alone decides the shards. */
static int order_jobs(struct mk_plan *p, struct mk_err *err)
{
	struct job_key *k = calloc(p->njobs + 1, sizeof(*k));
	struct mk_plan_job **v = calloc(p->njobs + 1, sizeof(*v));

	if (!k || !v) {
		free(k);
		free(v);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < p->njobs; i++) {
		const struct mk_plan_job *j = p->jobs[i];
		const struct mk_plan_input *in = &j->inputs[j->base >= 0 ? (size_t)j->base : 0];
		const char *name = in->nsources ? in->sources[0] : in->tensor;
		const struct mk_model_tensor *mt = mk_model_find(p->models[in->model].m, name);
		k[i] = (struct job_key){ in->model, mt ? mt->shard : 0, mt ? mt->t->begin : 0, i };
	}
	qsort(k, p->njobs, sizeof(*k), cmp_key);
	for (size_t i = 0; i < p->njobs; i++)
		v[i] = p->jobs[k[i].pos];
	if (p->njobs)
		memcpy(p->jobs, v, p->njobs * sizeof(*v));
	for (size_t i = 0; i < p->njobs; i++)
		p->jobs[i]->id = (uint32_t)i;
	free(k);
	free(v);
	return 0;
}

/* The HEAD's plan fields: the model table, plugins, seed, job counts. */
static int fill_head(struct mk_plan *p, struct mk_err *err)
{
	struct mk_manifest *h = p->man;
	int rc = 0;

	h->planned = true;
	for (size_t i = 0; !rc && i < p->nmodels; i++) {
		const struct mk_model *m = p->models[i].m;
		rc = mk_manifest_add_model(h, p->models[i].refstr, m->commit, err);
		for (size_t s = 0; !rc && s < m->nshards; s++)
			rc = mk_manifest_add_shard(h, m->shard_names[s], m->shards[s]->file_size,
						   m->shards[s]->header_hash, err);
	}
	/* the adapters of BASE+ADAPTER models, after the models */
	for (size_t i = 0; !rc && i < p->nmodels; i++) {
		const struct mk_model *m = p->models[i].lora ? p->models[i].lora->m : NULL;
		if (!m)
			continue;
		rc = mk_manifest_add_model(h, p->models[i].lora_refstr, m->commit, err);
		if (!rc)
			h->models[h->nmodels - 1].adapter = true;
		for (size_t s = 0; !rc && s < m->nshards; s++)
			rc = mk_manifest_add_shard(h, m->shard_names[s], m->shards[s]->file_size,
						   m->shards[s]->header_hash, err);
	}
	if (!rc && mk_plugin_of(p->method)) {
		char hh[65];
		mk_method_spec_hash(p->method, hh);
		rc = mk_manifest_add_plugin(h, p->method->name, p->method->abi, hh, err);
	}
	h->seed = p->seed;
	h->njobs = p->njobs;
	h->held_bytes_max = p->held_max;
	h->spilled_jobs = p->spilled;
	return rc;
}

int mk_plan_build(const struct mk_plan_opts *o, struct mk_plan **out, struct mk_diags *d,
		  struct mk_err *err)
{
	struct mk_plan *p = calloc(1, sizeof(*p));
	struct mk_arch_registry *reg = NULL;
	struct mk_config_feature *feat = NULL;
	int64_t *out_layers = NULL;
	bool layers_changed = false;
	size_t nfeat = 0;
	struct mk_err e = { 0 };
	int rc = 0;

	*out = NULL;
	memset(d, 0, sizeof(*d));
	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	p->o = o;
	p->seed = o->seed;
	{
		/* default: a quarter of the machine's memory, and a held job
		 * at most MK_BUDGET_HOLD_DEFAULT */
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		uint64_t phys = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
		p->budget = o->budget ? o->budget : mk_budget_merge_default(phys);
		p->hold_max = mk_budget_hold_max(o->budget, phys);
	}
	rc = mk_config_parse_partial(o->text, o->len, o->label, &p->cfg, d, err);
	if (rc && !p->cfg)
		goto out;
	if (rc) {
		/* a config with mistakes: look for more (method, models), then stop */
		struct mk_arch_registry *r2 = NULL;
		rc = 0;
		if (p->cfg->merge_method && mk_method_lookup(p->cfg->merge_method, &p->method, &e))
			diag(d, MK_DIAG_ERROR, &p->cfg->merge_method_loc, "%s", e.msg);
		else if (p->method)
			check_config_params(p->cfg, p->method, d);
		if (!mk_arch_registry_open(&r2, err))
			rc = plan_open_models(p, r2, d, err);
		mk_arch_registry_free(r2);
		goto out;
	}
	d->label = d->label ? d->label : strdup(o->label);
	/* what this version refuses */
	rc = mk_config_unsupported(p->cfg, &feat, &nfeat, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < nfeat; i++) {
		struct mk_config_loc loc = { feat[i].line, feat[i].col, (char *)feat[i].path };
		diag(d, MK_DIAG_ERROR, &loc, "%s is not supported yet (%s)", feat[i].what, feat[i].later);
	}
	free(feat);
	/* mk merges floats: int64 weights would reach mk-merge as tensors that
	 * are not floats and fail there, after every byte was read */
	for (int k = 0; k < 2; k++) {
		const struct mk_config_dtype *cd = k ? &p->cfg->out_dtype : &p->cfg->dtype;
		if (cd->name && cd->dtype == MK_DT_I64)
			diag(d, MK_DIAG_ERROR, &cd->loc,
			     "int64 is not supported: mk merges weights as floating point (use bfloat16, "
			     "float16, float32 or float64)");
	}
	if (mk_method_lookup(p->cfg->merge_method, &p->method, &e))
		diag(d, MK_DIAG_ERROR, &p->cfg->merge_method_loc, "%s", e.msg);
	else if (!o->extract && mk_method_is_tool(p->method))
		diag(d, MK_DIAG_ERROR, &p->cfg->merge_method_loc,
		     "'%s' is one of mk-extract-lora's own methods, not a merge method (mk-config(5) lists those)",
		     p->method->name);
	else
		check_config_params(p->cfg, p->method, d);
	if (o->raw)
		plan_raw_refuse(p->cfg, d);
	rc = mk_arch_registry_open(&reg, err);
	if (rc)
		goto out;
	rc = plan_open_models(p, reg, d, err);
	if (rc || d->nerrors)
		goto out;
	if (!o->raw) {
		rc = plan_choose_arch(p, d, err);
		if (rc || d->nerrors)
			goto out;
	}
	p->man = mk_manifest_new("plan", "mk-plan " MK_VERSION);
	out_layers = calloc((p->arch ? p->arch->nmodules : 0) + 1, sizeof(*out_layers));
	if (!p->man || !out_layers) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (!o->raw && !o->extract) {
		rc = plan_build_tokenizer(p, d, err);
		if (rc || d->nerrors)
			goto out;
	}
	rc = o->raw ? plan_raw(p, d, err) : o->extract ? plan_extract(p, d, err) :
		      plan_modules(p, out_layers, &layers_changed, d, err);
	if (!rc && !d->nerrors && !p->njobs)
		diag(d, MK_DIAG_ERROR, &p->cfg->merge_method_loc, "no tensor to merge%s: the output would be empty",
		     o->raw && o->raw_missing == MK_RAW_MISSING_SKIP ?
			     " (no tensor is in every model, and --tensor-intersection leaves out those some model lacks)" :
			     "");
	if (p->repeats)
		diag(d, MK_DIAG_ERROR, &p->last_err_loc, "(the same for %zu more tensor%s)", p->repeats,
		     p->repeats == 1 ? "" : "s");
	if (p->base_copies && !d->nerrors)
		diag(d, MK_DIAG_WARNING, &p->cfg->merge_method_loc,
		     "%zu tensor%s (the first '%s') %s the base model's, unchanged: %s reads only the base for "
		     "them%s%s%s", p->base_copies, p->base_copies == 1 ? "" : "s",
		     p->base_copy_first ? p->base_copy_first : "?", p->base_copies == 1 ? "is" : "are",
		     p->method->name, p->base_copy_unset[0] ? " (no value for " : "", p->base_copy_unset,
		     p->base_copy_unset[0] ? ")" : "");
	if (rc || d->nerrors)
		goto out;
	/* (an extraction's files are written after its tensors: mk-extract-lora) */
	rc = o->raw || o->extract ? 0 : plan_make_files(p, out_layers, layers_changed, d, err);
	if (rc)
		goto out;
	for (size_t i = 0; i < p->nfiles; i++) {
		rc = mk_manifest_add_file(p->man, p->files[i].name, p->files[i].len, err);
		if (rc)
			goto out;
	}
	rc = order_jobs(p, err);
	if (!rc)
		rc = fill_head(p, err);
out:
	free(out_layers);
	mk_arch_registry_free(reg);
	if (!rc && d->nerrors)
		rc = mk_err_set(err, MK_EINVAL, "%zu error%s in %s", d->nerrors, d->nerrors == 1 ? "" : "s", o->label);
	if (rc)
		mk_plan_free(p);
	else
		*out = p;
	return rc;
}
