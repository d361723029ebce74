/* plan_tensors.c - plan_tensor: one output tensor planned, from its
 * candidate inputs to its job (the tplan_* stages: inputs, parameters,
 * the method's output rule, the budget, the manifest entry, how the
 * inputs are sent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "methods/spec.h"
#include "planner/planner_impl.h"
#include "planner/quant.h"

/* A parameter's looked-up value (a configuration's number) as the value
 * the method resolves: true or false for a BOOL parameter (non-zero),
 * else the number; the method's resolution (mk_method_plan) makes an INT
 * of it, or says it is not whole. */
static struct mk_pval to_pval(const struct mk_param_spec *ps, double v)
{
	return ps->type == MK_PT_BOOL ? mk_pval_bool(v != 0.0) : mk_pval_float(v);
}

static bool has_tensor(void *ctx, const char *name)
{
	return mk_model_find(ctx, name) != NULL;
}

/* A weight missing from a checkpoint that stores experts one by one: the
 * transformers-v5 fused tensor assembled from them (src/arch/fused.c).
 * Fills the assembled tensor's dtype and shape.  0 with *out NULL when no
 * conversion applies. */
static int fused_input(const struct pmodel *pm, const char *target, struct mk_fused **out,
		       struct mk_tensor_desc *td, struct mk_err *err)
{
	const char *mt = pm->hf ? mk_hfconfig_model_type(pm->hf) : NULL;
	const char **names;
	int rc;

	*out = NULL;
	if (!pm->hf)
		return 0;             /* a state dict (mk-pytorch) */
	if (!mt || !mk_arch_fused_known(mt))
		return 0;
	names = malloc((pm->m->ntensors + 1) * sizeof(*names));
	if (!names)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t k = 0; k < pm->m->ntensors; k++)
		names[k] = pm->m->tensors[k].t->name;
	rc = mk_arch_fused(mt, target, names, pm->m->ntensors, out, err);
	free(names);
	if (rc || !*out)
		return rc;
	struct mk_fused *f = *out;
	const struct mk_st_tensor *t0 = mk_model_find(pm->m, f->sources[0])->t;
	uint64_t rows = 0;
	for (size_t p2 = 0; p2 < f->nparts; p2++) {
		const struct mk_st_tensor *tp = mk_model_find(pm->m, f->sources[p2])->t;
		rows += tp->desc.ndim ? tp->desc.shape[0] : 1;
	}
	for (size_t k = 0; k < f->nexperts * f->nparts; k++) {
		const struct mk_st_tensor *t = mk_model_find(pm->m, f->sources[k])->t;
		const struct mk_st_tensor *tp = mk_model_find(pm->m, f->sources[k % f->nparts])->t;
		if (t->desc.dtype != t0->desc.dtype || t->desc.ndim != t0->desc.ndim ||
		    (t->desc.ndim > 1 && memcmp(t->desc.shape + 1, t0->desc.shape + 1, (t->desc.ndim - 1) * sizeof(uint64_t))) ||
		    memcmp(t->desc.shape, tp->desc.shape, t->desc.ndim * sizeof(uint64_t))) {
			mk_fused_free(f);
			*out = NULL;
			return mk_err_set(err, MK_EMISMATCH, "'%s' cannot be assembled: '%s' and '%s' differ in dtype or shape",
					  target, f->sources[0], f->sources[k]);
		}
	}
	td->dtype = t0->desc.dtype;
	if (f->kind == MK_FUSED_RENAME) {
		*td = t0->desc;
	} else if (t0->desc.ndim + 1 > MK_MAX_DIMS) {
		mk_fused_free(f);
		*out = NULL;
		return mk_err_set(err, MK_EUNSUPPORTED, "'%s': too many dimensions", target);
	} else {
		td->ndim = t0->desc.ndim + 1;
		td->shape[0] = f->nexperts;
		for (unsigned dd = 0; dd < t0->desc.ndim; dd++)
			td->shape[dd + 1] = t0->desc.shape[dd];
		if (f->kind == MK_FUSED_STACK_CONCAT)
			td->shape[1] = rows;
	}
	return 0;
}

/* Where a message about input i belongs: that model's entry in the config
 * (models[1].model, slices[0].sources[1].model), else the slice's. */
const struct mk_config_loc *tplan_input_loc(const struct tplan *t, size_t i)
{
	const struct mk_config_loc *l = &t->srcs[t->order[i]].ref->loc;

	return l->line ? l : t->tc->loc;
}

/* The input a method's message is about: the first non-base input whose
 * model it names (quoted), else the base when named, else none (-1). */
static long input_named(const struct tplan *t, const char *msg)
{
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < t->n; i++) {
			char q[512];
			if (((int)i == t->base) != (pass == 1) || !t->labels[i])
				continue;
			snprintf(q, sizeof(q), "'%s'", t->labels[i]);
			if (strstr(msg, q))
				return (long)i;
		}
	return -1;
}

/* The sources: an optional weight is skipped when no input has it under
 * its name or an alias (tied names do not count here, as in mergekit). */
static int tplan_sources(struct tplan *t)
{
	bool any_direct = false;

	for (size_t s = 0; s < t->nsrc; s++) {
		struct mk_model *mm = t->p->models[t->srcs[s].model].m;
		if (mk_model_find(mm, t->srcs[s].w->name))
			any_direct = true;
		for (size_t a = 0; a < t->srcs[s].w->naliases; a++)
			if (mk_model_find(mm, t->srcs[s].w->aliases[a]))
				any_direct = true;
		for (size_t a = 0; t->tc->tied_present && a < t->srcs[s].w->ntied; a++)
			if (mk_model_find(mm, t->srcs[s].w->tied_names[a]))
				any_direct = true;
	}
	return t->ow->optional && !any_direct ? TP_DONE : TP_NEXT;
}

/* Input nm of model pm stored quantized: *out NULL (not), or what the
 * JOB's "quant" says; an assembly's sources each block FP8 with their
 * own scales ("scales", in the sources' order), or none of them.
 * Nonzero after a diagnostic. */
static int quant_input(struct tplan *t, const struct pmodel *pm, const char *nm, const struct mk_fused *fu,
		       struct mk_plan_quant **out)
{
	size_t ns = fu ? fu->nexperts * fu->nparts : 1, nq = 0;
	struct mk_plan_quant *all = NULL;

	*out = NULL;
	for (size_t q = 0; q < ns; q++) {
		struct mk_plan_quant *pq = NULL;
		const char *src = fu ? fu->sources[q] : nm;
		if (mk_quant_find(pm->quant, pm->m, src, pm->display, &pq, &t->e)) {
			diag(t->d, MK_DIAG_ERROR, t->tc->loc, "%s", t->e.msg);
			mk_plan_quant_free(all);
			return -1;
		}
		if (!fu) {
			*out = pq;
			return 0;
		}
		bool isq = pq != NULL;
		if (pq && pq->kind != MK_QUANT_FP8) {
			mk_plan_quant_free(pq);
			mk_plan_quant_free(all);
			diag(t->d, MK_DIAG_ERROR, t->tc->loc,
			     "model '%s': '%s' is stored quantized (not block FP8) and mk assembles it from per-expert "
			     "tensors: not supported; dequantize the model to BF16 first", pm->display, src);
			return -1;
		}
		if (pq && !all && (all = calloc(1, sizeof(*all))))
			all->scales = calloc(ns, sizeof(char *));
		if (pq && (!all || !all->scales)) {
			mk_plan_quant_free(pq);
			mk_plan_quant_free(all);
			diag(t->d, MK_DIAG_ERROR, t->tc->loc, "out of memory");
			return -1;
		}
		if (pq) {
			all->kind = pq->kind;
			memcpy(all->block, pq->block, sizeof(all->block));
			all->dtype = pq->dtype;
			all->scales[all->nscales++] = pq->scale;
			pq->scale = NULL;
			mk_plan_quant_free(pq);
			nq++;
		}
		if (nq != (isq ? q + 1 : 0)) {
			mk_plan_quant_free(all);
			diag(t->d, MK_DIAG_ERROR, t->tc->loc,
			     "model '%s': '%s' is assembled from per-expert tensors of which some are stored block FP8 "
			     "and some are not ('%s' %s): mk reads all of them quantized or none; dequantize the model "
			     "to BF16 first", pm->display, nm, src, isq ? "is" : "is not");
			return -1;
		}
	}
	*out = all;
	return 0;
}

/* The inputs: the base first, then the sources in order, each resolved to
 * a stored tensor (its name or an alias) or assembled from experts, with
 * the dtype it is loaded as (force_dtype, else the config's dtype). */
static int tplan_inputs(struct tplan *t)
{
	struct mk_plan *p = t->p;
	const struct src_in *srcs = t->srcs;
	const struct tctx *tc = t->tc;
	bool failed = false;

	for (int pass = 0; pass < 2; pass++)
		for (size_t s = 0; s < t->nsrc; s++) {
			bool is_base = tc->base && mk_model_ref_equal(srcs[s].ref, tc->base);
			if (is_base != (pass == 0))
				continue;
			struct pmodel *pm = &p->models[srcs[s].model];
			const char *nm = mk_weight_resolve(srcs[s].w, has_tensor, pm->m, NULL);
			struct mk_tensor_desc ftd = { 0 };
			struct mk_fused *fu = NULL;
			bool packed = false;
			if (!nm && (nm = mk_quant_packed(pm->quant, pm->m, srcs[s].w->name, &ftd)))
				packed = true;   /* MXFP4: its _blocks, F4 of its shape */
			if (!nm) {
				if (fused_input(pm, srcs[s].w->name, &fu, &ftd, &t->e)) {
					diag(t->d, MK_DIAG_ERROR, tc->loc, "model '%s': %s", pm->display, t->e.msg);
					failed = true;
					continue;
				}
				if (fu)
					nm = srcs[s].w->name;
			}
			if (!nm) {
				if (srcs[s].w->optional)
					continue;
				diag(t->d, MK_DIAG_ERROR, srcs[s].ref->loc.line ? &srcs[s].ref->loc : tc->loc,
				     "tensor '%s' required but not present in model '%s'",
				     srcs[s].w->name, pm->display);
				failed = true;
				continue;
			}
			if (!fu && !packed) {
				const struct mk_st_tensor *st = mk_model_find(pm->m, nm)->t;
				ftd = st->desc;
			}
			/* stored quantized: planned as its dequantized tensor (an
			 * assembly: every source block FP8 with its scales, or none) */
			struct mk_plan_quant *pq = NULL;
			bool qbad = false;
			if (pm->quant && quant_input(t, pm, nm, fu, &pq))
				qbad = true;
			if (pq && pm->lora && mk_lora_find(pm->lora, nm)) {
				diag(t->d, MK_DIAG_ERROR, tc->loc,
				     "model '%s': '%s' is stored quantized and a LoRA adapter applies to it: not supported; "
				     "dequantize the model to BF16 first", pm->display, nm);
				mk_plan_quant_free(pq);
				pq = NULL;
				qbad = true;
			}
			if (qbad) {
				failed = true;
				continue;
			}
			const struct mk_lora_ent *le = pm->lora ? mk_lora_find(pm->lora, nm) : NULL;
			if (le && fu) {
				diag(t->d, MK_DIAG_ERROR, srcs[s].ref->loc.line ? &srcs[s].ref->loc : tc->loc,
				     "model '%s': the adapter changes '%s', which mk assembles from per-expert tensors: not supported",
				     pm->display, nm);
				failed = true;
				continue;
			}
			size_t n = t->n;
			if (is_base)
				t->base = (int)n;
			t->order[n] = s;
			t->names[n] = nm;
			t->labels[n] = pm->display;
			t->fused[n] = fu;
			t->lora[n] = le;
			t->quant[n] = pq;
			t->stored[n] = ftd;
			t->in[n] = ftd;
			if (pq)
				t->in[n].dtype = pq->dtype;
			/* cast on load: force_dtype, else the config's dtype (else,
			 * for a BASE+ADAPTER model, --lora-merge-dtype) */
			if (t->ow->force_dtype)
				mk_config_dtype_parse(t->ow->force_dtype, &t->in[n].dtype, NULL, NULL);
			else if (p->cfg->dtype.name && mk_dtype_is_float(t->in[n].dtype))
				t->in[n].dtype = p->cfg->dtype.dtype;
			else if (pm->lora && p->o->has_lora_dtype && mk_dtype_is_float(ftd.dtype))
				t->in[n].dtype = p->o->lora_dtype;
			t->n++;
		}
	if (failed)
		return TP_DONE;
	if (t->n == 0) {
		diag(t->d, MK_DIAG_ERROR, tc->loc, "tensor '%s': no model has it", t->ow->name);
		return TP_DONE;
	}
	return TP_NEXT;
}

/* The parameters: each of the method's, looked up for the tensor (global)
 * and for each input's model. */
static int tplan_params(struct tplan *t)
{
	const struct tctx *tc = t->tc;
	const char *name = t->ow->name;
	size_t np = t->np;

	for (size_t k = 0; k < np; k++) {
		const struct mk_param_spec *ps = &t->m->params[k];
		double v;
		if (ps->scope == MK_SCOPE_GLOBAL) {
			if (mk_param_lookup(&tc->scope, ps->name, NULL, name, tc->t, &v) != MK_PL_NONE)
				t->graw[k] = to_pval(ps, v);
			continue;
		}
		for (size_t i = 0; i < t->n; i++) {
			const struct src_in *sr = &t->srcs[t->order[i]];
			if (mk_param_lookup(&tc->scope, ps->name, sr->ref, sr->w->name, tc->t, &v) != MK_PL_NONE)
				t->iraw[i * np + k] = to_pval(ps, v);
		}
	}
	if (tc->set_param) {
		int k = mk_method_param_index(t->m, tc->set_param);
		if (k >= 0 && t->m->params[k].scope == MK_SCOPE_GLOBAL)
			t->graw[k] = tc->set_value;
	}
	return TP_NEXT;
}

/* Tensors that are not floats (position_ids, masks) are not merged: their
 * inputs must agree, and mk-merge copies them (mk-compat(7)); the job is
 * planned as passthrough without parameters. */
static int tplan_not_floats(struct tplan *t)
{
	const struct mk_tensor_desc *in = t->in;

	t->check_equal = false;
	for (size_t i = 0; i < t->n; i++)
		if (!mk_dtype_is_float(in[i].dtype))
			t->check_equal = true;
	if (!t->check_equal)
		return TP_NEXT;
	for (size_t i = 1; i < t->n; i++)
		if (!mk_tensor_desc_equal(&in[i], &in[0])) {
			diag(t->d, MK_DIAG_ERROR, tplan_input_loc(t, i),
			     "tensor '%s' is %s in '%s' and %s in '%s': tensors that are not floats must agree",
			     t->ow->name, mk_dtype_name(in[0].dtype), t->labels[0], mk_dtype_name(in[i].dtype),
			     t->labels[i]);
			return TP_DONE;
		}
	t->m = mk_method_find("passthrough");
	t->np = t->m->nparams;
	memset(t->graw, 0, (t->np + 1) * sizeof(*t->graw));
	memset(t->iraw, 0, (t->np + 1) * (t->nsrc + 1) * sizeof(*t->iraw));
	return TP_NEXT;
}

/* A tensor of several inputs for which the method reads only the base
 * (slerp without t): counted, said once after planning. */
static void note_base_copy(struct tplan *t)
{
	struct mk_plan *p = t->p;

	if (t->check_equal || t->n < 2 || t->base < 0 || t->m != p->method)
		return;
	for (size_t i = 0; i < t->n; i++)
		if (t->used[i] != ((int)i == t->base))
			return;
	if (p->base_copies++)
		return;
	p->base_copy_first = strdup(t->ow->name);
	for (size_t k = 0; k < t->np; k++) {
		const struct mk_param_spec *ps = &t->m->params[k];
		size_t n = strlen(p->base_copy_unset);
		if (ps->scope == MK_SCOPE_GLOBAL && !t->graw[k].set && !ps->def.set)
			snprintf(p->base_copy_unset + n, sizeof(p->base_copy_unset) - n, "%s'%s'", n ? ", " : "",
				 ps->name);
	}
}

/* The method's output rule: the output's dtype and shape, the compute
 * dtype, the inputs it reads, its passes, the resolved parameters.  Its
 * error is said once per kind of mistake, not once per tensor. */
static int tplan_output_rule(struct tplan *t)
{
	struct mk_plan *p = t->p;
	const char *name = t->ow->name;
	struct mk_job_desc jd = { .tensor = name, .seed = p->seed, .is_embed = t->ow->is_embed,
				  .ninputs = t->check_equal ? 1 : t->n, .base = t->check_equal ? -1 : t->base,
				  .in = t->in, .labels = t->labels, .global = t->graw, .input = t->iraw };

	int prc = mk_method_plan(t->m, &jd, &t->po, t->gres, t->ires, t->used, &t->e);
	if (!prc && t->po.nmore > t->tc->nmore_names)   /* a tool's kind of method (mk/method.h): one output a weight here */
		prc = mk_err_set(&t->e, MK_EUNSUPPORTED,
				 "method '%s', tensor '%s': it makes %u tensors of one weight, which a merge cannot place",
				 t->m->name, name, t->po.nmore + 1);
	if (!prc) {
		struct mk_plan_out ps;
		note_base_copy(t);
		/* the passes with a spare one offered (tplan_sends takes it for
		 * a streamed job: a held one adds a pass as it needs), of the
		 * values just resolved */
		t->spare_passes = t->po.npasses;
		jd.spare_pass = true;
		jd.global = t->gres;
		jd.input = t->ires;
		if (p->o->spare_pass && t->po.npasses && !mk_method_replan(t->m, &jd, &ps, t->used, &t->e))
			t->spare_passes = ps.npasses;
		return TP_NEXT;
	}
	char key[MK_ERR_MSG_MAX];
	tplan_truncate_hint(t, t->e.msg, sizeof(t->e.msg));
	const char *at = strstr(t->e.msg, name);
	snprintf(key, sizeof(key), "%.*s%s", at ? (int)(at - t->e.msg) : (int)strlen(t->e.msg), t->e.msg,
		 at ? at + strlen(name) : "");
	if (p->last_err && !strcmp(p->last_err, key)) {
		p->repeats++;
	} else {
		long in = input_named(t, t->e.msg);
		const struct mk_config_loc *loc = in >= 0 ? tplan_input_loc(t, (size_t)in) : t->tc->loc;
		free(p->last_err);
		free(p->last_err_loc.path);
		p->last_err = strdup(key);
		p->last_err_loc = (struct mk_config_loc){ loc ? loc->line : 0, loc ? loc->col : 0,
							  loc && loc->path ? strdup(loc->path) : NULL };
		p->repeats = 0;
		diag(t->d, MK_DIAG_ERROR, loc, "%s", t->e.msg);
	}
	return TP_DONE;
}

int plan_lora_copy(struct mk_plan_lora **dst, const struct mk_plan_lora *src)
{
	struct mk_plan_lora *l = calloc(1, sizeof(*l));

	*dst = l;
	if (!l)
		return -1;
	*l = *src;
	l->a = l->b = l->replace = l->magnitude = l->bias = NULL;
	return (src->a && !(l->a = strdup(src->a))) || (src->b && !(l->b = strdup(src->b))) ||
	       (src->replace && !(l->replace = strdup(src->replace))) ||
	       (src->magnitude && !(l->magnitude = strdup(src->magnitude))) ||
	       (src->bias && !(l->bias = strdup(src->bias))) ? -1 : 0;
}

/* A whole-tensor method must fit the merge budget: its working set as
 * the method states it (mk_plan_out.work_bytes), else every input and the
 * output in the compute dtype. */
static int tplan_whole_budget(struct tplan *t)
{
	struct mk_plan *p = t->p;
	const struct mk_plan_out *po = &t->po;

	if ((!t->m->whole_tensor && !po->work_bytes) || !p->budget)
		return TP_NEXT;
	uint64_t need = 0, b;
	size_t es = mk_dtype_bits(po->compute) / 8;
	for (size_t i = 0; i < t->n && !po->work_bytes; i++)
		need += mk_tensor_desc_count(&t->in[i]) * es;
	if (!po->work_bytes && !mk_dtype_nbytes(po->compute, 1, &b))
		need += mk_tensor_desc_count(&po->out) * es;
	if (po->work_bytes)
		need = po->work_bytes;
	if (need > p->budget) {
		char a[32], c[32], h[160] = "";
		if (t->tc->budget_hint)
			t->tc->budget_hint(t, need, h, sizeof(h));
		diag(t->d, MK_DIAG_ERROR, t->tc->loc,
		     "tensor '%s': %s needs %s in memory at once, more than the merge budget of %s (--max-memory)%s",
		     t->nsrc ? t->srcs[0].w->name : t->ow->name, t->m->name, mk_size_human(need, a, sizeof(a)), mk_size_human(p->budget, c, sizeof(c)),
		     h);
		return TP_DONE;
	}
	return TP_NEXT;
}

/* The manifest entry of the output, in its output dtype (force_dtype,
 * else the config's out_dtype): a new one, or the one of a tensor planned
 * twice (qwen2_vl's projector), whose earlier job this one replaces. */
static int tplan_manifest_entry(struct tplan *t, struct mk_err *err)
{
	struct mk_plan *p = t->p;
	const struct mk_weight *ow = t->ow;
	enum mk_dtype odt = t->po.out.dtype;
	int rc;

	if (ow->force_dtype)
		mk_config_dtype_parse(ow->force_dtype, &odt, NULL, NULL);
	else if (p->cfg->out_dtype.name && mk_dtype_is_float(odt))
		odt = p->cfg->out_dtype.dtype;
	long idx = mk_manifest_find(p->man, ow->name);
	if (idx >= 0) {
		/* planned twice (qwen2_vl's projector): the last one wins */
		for (size_t k = 0; k < p->njobs; k++)
			if (p->jobs[k]->output == (size_t)idx) {
				mk_plan_job_free(p->jobs[k]);
				memmove(&p->jobs[k], &p->jobs[k + 1], (p->njobs - k - 1) * sizeof(*p->jobs));
				p->njobs--;
				break;
			}
		p->man->tensors[idx].desc.dtype = odt;
	} else {
		rc = mk_manifest_add_tensor(p->man, ow->name, odt, t->po.out.ndim, t->po.out.shape, err);
		if (rc)
			return rc;
		idx = (long)p->man->ntensors - 1;
	}
	t->j->output = (size_t)idx;
	/* a job of several outputs (mk-extract-lora's): each a new tensor */
	if (t->po.nmore && !(t->j->more = calloc(t->po.nmore, sizeof(*t->j->more))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (unsigned k = 0; k < t->po.nmore; k++) {
		const struct mk_tensor_desc *md = &t->po.more[k];
		if (mk_manifest_find(p->man, t->tc->more_names[k]) >= 0)
			return mk_err_set(err, MK_EINVAL, "output tensor '%s' is planned twice", t->tc->more_names[k]);
		rc = mk_manifest_add_tensor(p->man, t->tc->more_names[k], md->dtype, md->ndim, md->shape, err);
		if (rc)
			return rc;
		t->j->more[k] = p->man->ntensors - 1;
		t->j->nmore = k + 1;
	}
	return TP_NEXT;
}

/* The job's method and inputs: model, stored tensor (or its assembly from
 * experts), stored and load dtypes, shape. */
static int tplan_job_inputs(struct tplan *t, struct mk_err *err)
{
	struct mk_plan_job *j = t->j;
	int rc = mk_plan_job_set_method(j, t->m, err);

	if (rc)
		return rc;
	for (size_t i = 0; i < t->n; i++) {
		struct mk_plan_input *pi = &j->inputs[i];
		const struct mk_fused *fu = t->fused[i];
		pi->model = (size_t)t->srcs[t->order[i]].model;
		pi->tensor = strdup(t->names[i]);
		if (!pi->tensor)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		pi->desc = t->stored[i];
		pi->load_dtype = t->in[i].dtype;
		pi->nelem = mk_tensor_desc_count(&pi->desc); /* checked by the reader */
		const struct mk_lora_ent *le = t->lora[i];
		if (le) {
			const struct pmodel *pm = &t->p->models[pi->model];
			/* --lora-merge-dtype: computed in it, as mergekit's copy
			 * of the model loaded in it */
			struct mk_plan_lora l = { .model = pm->lora_index, .a = le->a, .b = le->b, .replace = le->replace,
						  .magnitude = le->magnitude, .bias = le->bias, .scale = le->scale,
						  .transpose = le->transpose, .embedding = le->embedding,
						  .has_dtype = t->p->o->has_lora_dtype,
						  .dtype = t->p->o->has_lora_dtype ? t->p->o->lora_dtype : pi->desc.dtype };
			if (plan_lora_copy(&pi->lora, &l))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		pi->quant = t->quant[i];     /* the job's now */
		t->quant[i] = NULL;
		if (fu) {
			static const char *const kinds[] = { [MK_FUSED_RENAME] = "rename", [MK_FUSED_STACK] = "stack",
							     [MK_FUSED_STACK_CONCAT] = "stack_concat" };
			size_t ns = fu->nexperts * fu->nparts;
			pi->assembly = strdup(kinds[fu->kind]);
			pi->sources = calloc(ns, sizeof(*pi->sources));
			if (!pi->assembly || !pi->sources)
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			for (size_t q = 0; q < ns; q++) {
				pi->sources[q] = strdup(fu->sources[q]);
				if (!pi->sources[q])
					return mk_err_set(err, MK_ENOMEM, "out of memory");
				pi->nsources = q + 1;
			}
		}
	}
	return TP_NEXT;
}

/* What mk-merge holds of a job sent once: the used inputs as sent (every
 * input of a vocabulary job, and its aux rows: the fills read them). */
static uint64_t tplan_sent_bytes(const struct tplan *t)
{
	const struct mk_plan_job *j = t->j;
	uint64_t ws = 0;

	for (size_t i = 0; i < t->n + (j->vocab ? j->vocab->naux : 0); i++)
		if (j->vocab || t->used[i])
			ws += mk_plan_input_sent_bytes(j, i);
	return ws;
}

/* How the inputs are sent: once per pass (streamed), or, for a method
 * with statistics passes under a budget, once: held in memory when every
 * used input, as sent, fits what one held job may take (the merge budget
 * given, else the default's MK_BUDGET_HOLD_DEFAULT; mk-merge replays the
 * later passes from memory), else spilled with --spill (replayed from a
 * file); a streamed job gets the spare pass where the method takes one
 * (mk_plan_opts.spare_pass). */
void tplan_sends(struct tplan *t)
{
	struct mk_plan *p = t->p;
	struct mk_plan_job *j = t->j;
	/* (a job of several outputs replays nothing after its one pass) */
	bool multi = t->po.npasses > (t->po.nmore ? 1u : 0u) && p->budget;
	uint64_t ws = multi ? tplan_sent_bytes(t) : 0;

	j->base = t->check_equal ? -1 : t->base;
	j->passes = t->po.npasses;
	/* a job of several outputs is sent for its passes alone (its outputs
	 * come from what they gathered) */
	j->sends = t->po.nmore ? t->po.npasses : t->po.npasses + 1;
	if (multi && ws <= p->hold_max) {
		j->sends = 1;
		if (ws > p->held_max)
			p->held_max = ws;
	} else if (multi && p->o->spill) {
		j->sends = 1;
		j->spill = true;
		p->spilled++;
	} else if (t->spare_passes > t->po.npasses && !t->po.nmore) {
		/* streamed: the spare pass, where the method takes one (a job
		 * sent once adds a pass as it needs instead) */
		j->spare = true;
		j->passes = t->spare_passes;
		j->sends = t->spare_passes + 1;
	}
}

/* The job's resolved parameters (those of input 0 alone when the inputs
 * must agree: the method sees input 0) and flags; then the plan takes it. */
static int tplan_job_add(struct tplan *t, struct mk_err *err)
{
	struct mk_plan *p = t->p;
	struct mk_plan_job *j = t->j;

	memcpy(j->params.global, t->gres, t->np * sizeof(*t->gres));
	memcpy(j->params.input, t->ires, (t->check_equal ? 1 : t->n) * t->np * sizeof(*t->ires));
	j->is_embed = t->ow->is_embed;
	j->check_equal = t->check_equal;
	struct mk_plan_job **q = realloc(p->jobs, (p->njobs + 1) * sizeof(*q));
	if (!q)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	p->jobs = q;
	p->jobs[p->njobs++] = j;
	t->j = NULL;
	return TP_NEXT;
}

/* Plan output weight ow from its candidate inputs srcs: a job added to the
 * plan and an entry in its manifest, or diagnostics in d (a failure only
 * when out of memory). */
int plan_tensor(struct mk_plan *p, const struct mk_weight *ow, const struct src_in *srcs, size_t nsrc,
		const struct tctx *tc, struct mk_diags *d, struct mk_err *err)
{
	const struct mk_method *m = tc->method ? tc->method : p->method;
	struct tplan t = { .p = p, .ow = ow, .srcs = srcs, .nsrc = nsrc, .tc = tc, .d = d, .m = m,
			   .np = m->nparams, .base = -1 };
	size_t np = t.np;
	int rc;

	t.in = calloc(nsrc + 1, sizeof(*t.in));
	t.graw = calloc(np + 1, sizeof(*t.graw));
	t.iraw = calloc((np + 1) * (nsrc + 1), sizeof(*t.iraw));
	t.gres = calloc(np + 1, sizeof(*t.gres));
	t.ires = calloc((np + 1) * (nsrc + 1), sizeof(*t.ires));
	t.labels = calloc(nsrc + 1, sizeof(*t.labels));
	t.order = calloc(nsrc + 1, sizeof(*t.order));
	t.names = calloc(nsrc + 1, sizeof(*t.names));
	t.used = calloc(nsrc + 1, sizeof(*t.used));
	t.fused = calloc(nsrc + 1, sizeof(*t.fused));
	t.stored = calloc(nsrc + 1, sizeof(*t.stored));
	t.lora = calloc(nsrc + 1, sizeof(*t.lora));
	t.quant = calloc(nsrc + 1, sizeof(*t.quant));
	if (!t.lora || !t.quant || !t.in || !t.graw || !t.iraw || !t.gres || !t.ires || !t.labels || !t.order || !t.names || !t.used ||
	    !t.fused || !t.stored) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = tplan_sources(&t)) || (rc = tplan_inputs(&t)) || (rc = tplan_params(&t)) ||
	    (rc = tplan_not_floats(&t)) || (rc = tplan_vocab_shapes(&t)) || (rc = tplan_truncate_shapes(&t)) ||
	    (rc = tplan_output_rule(&t)) ||
	    (rc = tplan_whole_budget(&t)))
		goto out;
	/* the job, then its output's manifest entry */
	t.j = mk_plan_job_new(t.n);
	if (!t.j) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = tplan_manifest_entry(&t, err)) || (rc = tplan_job_inputs(&t, err)) || (rc = tplan_vocab_job(&t, err)) ||
	    (rc = tplan_truncate_job(&t, err)))
		goto out;
	for (size_t i = 0; t.j->vocab && i < t.j->ninputs; i++)
		if (t.j->inputs[i].quant) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"tensor '%s': model '%s' stores it quantized, and its rows are aligned to a merged "
					"vocabulary: not supported; dequantize the model to BF16 first",
					t.ow->name, t.labels[i]);
			goto out;
		}
	tplan_sends(&t);
	rc = tplan_job_add(&t, err);
out:
	mk_plan_job_free(t.j);
	free(t.in);
	free(t.graw);
	free(t.iraw);
	free(t.gres);
	free(t.ires);
	free(t.labels);
	free(t.order);
	free(t.names);
	free(t.used);
	for (size_t i = 0; t.fused && i < nsrc; i++)
		mk_fused_free(t.fused[i]);
	free(t.fused);
	free(t.stored);
	free(t.lora);
	for (size_t i = 0; t.quant && i < nsrc + 1; i++)
		mk_plan_quant_free(t.quant[i]);
	free(t.quant);
	return rc < 0 ? rc : 0;
}
