/* planner.c - mk-plan: configuration + model metadata -> plan. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>
#include "arch/arch.h"
#include "core/budget.h"
#include "card/card.h"
#include "core/fsutil.h"
#include "core/hash.h"
#include "stream/manifest.h"
#include "mk/method.h"
#include "io/model.h"
#include "core/jsondoc.h"
#include "stream/job.h"
#include "planner/planner.h"
#include "mk/plugin.h"
#include "tokenizer/vocab.h"
#include "mk/stream.h"
#include "lora.h"

#define MAX_FILE (1ull << 30)

/* Read a model's file, which must resolve inside the model (mk_model_path). */
static int model_file_read(const struct mk_model *m, const char *name, uint8_t **buf, size_t *len,
			   struct mk_err *err)
{
	char *path;
	int rc = mk_model_path(m, name, &path, err);

	if (!rc)
		rc = mk_file_read(path, MAX_FILE, buf, len, err);
	free(path);
	return rc;
}

struct pmodel {                       /* a referenced model */
	const struct mk_model_ref *ref;   /* lent from the config */
	char *refstr;                     /* "path[@rev]" as mk resolves it */
	char *display;                    /* as written (mk_model_ref_format) */
	struct mk_model *m;
	struct mk_hfconfig *hf;
	char *hf_text;
	size_t hf_len;
	struct mk_arch *arch;             /* NULL: unknown class */
	/* BASE+ADAPTER: the adapter (mk_lora_open), its entry in the plan's
	 * model table (after the models) and its reference */
	struct mk_lora *lora;
	size_t lora_index;
	char *lora_refstr;
};

struct pfile {
	char *name;
	uint8_t *data;
	size_t len;
};

struct mk_plan {
	struct mk_config *cfg;
	const struct mk_method *method;
	size_t nmodels;
	struct pmodel *models;
	struct mk_arch *arch;             /* the output's */
	struct mk_manifest *man;
	size_t njobs;
	struct mk_plan_job **jobs;
	size_t nfiles;
	struct pfile *files;
	char *card;                       /* README.md text, or NULL */
	char *last_err;                   /* the last method error, tensor name cut out */
	size_t repeats;                   /* further tensors with that error */
	struct mk_config_loc last_err_loc; /* where that error was said (path owned) */
	uint64_t held_max;                /* the largest held job's working set */
	uint64_t spilled;                 /* jobs mk-merge replays from a spill file */
	size_t base_copies;               /* merged tensors the method gives as the base's */
	char *base_copy_first;            /* the first of them */
	char base_copy_unset[128];        /* its parameters with no value and no default */
	const struct mk_plan_opts *o;
	uint64_t seed, budget;
	uint64_t hold_max;                /* the most one held job may take
					     (mk_budget_hold_max) */
	size_t tok_donor;                 /* the model whose tokenizer files are copied */
	/* a tokenizer source: the merged vocabulary (build_tokenizer) */
	struct mk_tokmerge *tok;          /* NULL: none */
	struct mk_vocab **tok_vocabs;     /* the models' (nmodels), which tok borrows */
	long *tok_cfg;                    /* per output id: its tokens: entry, or -1 */
	uint64_t tok_rows;                /* the embeddings' rows (padded) */
	bool tok_warned;                  /* tokens in no model: said once */
	unsigned char *tok_said;          /* per tokens: entry, its mistake said (once, not per tensor) */
};

/* ------------------------------------------------------------ diagnostics */

static void diag(struct mk_diags *d, enum mk_diag_level lv, const struct mk_config_loc *loc,
		 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void diag(struct mk_diags *d, enum mk_diag_level lv, const struct mk_config_loc *loc,
		 const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	mk_diags_add(d, lv, loc ? loc->line : 0, loc ? loc->col : 0, loc ? loc->path : NULL, "%s", buf);
}

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
		const char *name = ps->v[i].name, *best = NULL;
		size_t bd = SIZE_MAX, len = strlen(name);
		char list[512] = "";
		int at = mk_method_param_index(m, name);

		if (at >= 0) {
			if (per_model && m->params[at].scope == MK_SCOPE_GLOBAL)
				diag(d, MK_DIAG_WARNING, &ps->v[i].loc,
				     "'%s' is one value for all models in %s; set for one model it is ignored (set it in the top-level parameters)",
				     name, m->name);
			continue;
		}
		for (size_t k = 0; k < m->nparams; k++) {
			size_t dist = mk_edit_distance(name, m->params[k].name), n = strlen(list);
			if (dist < bd) {
				bd = dist;
				best = m->params[k].name;
			}
			snprintf(list + n, sizeof(list) - n, "%s%s", n ? ", " : "", m->params[k].name);
		}
		if (best && bd <= (len >= 10 ? 3u : len >= 5 ? 2u : 1u))
			diag(d, MK_DIAG_WARNING, &ps->v[i].loc,
			     "%s has no parameter '%s'; it is ignored (did you mean '%s'?)", m->name, name, best);
		else if (m->nparams)
			diag(d, MK_DIAG_WARNING, &ps->v[i].loc, "%s has no parameter '%s'; it is ignored (%s's are: %s)",
			     m->name, name, m->name, list);
		else
			diag(d, MK_DIAG_WARNING, &ps->v[i].loc, "%s has no parameter '%s'; it is ignored (%s takes none)",
			     m->name, name, m->name);
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

/* ---------------------------------------------------------------- models */

static int model_refstr(const struct mk_model_ref *r, char **out)
{
	size_t n = strlen(r->model.path) + (r->model.revision ? strlen(r->model.revision) + 1 : 0) + 1;

	*out = malloc(n);
	if (!*out)
		return -1;
	snprintf(*out, n, "%s%s%s", r->model.path, r->model.revision ? "@" : "",
		 r->model.revision ? r->model.revision : "");
	return 0;
}

static int path_refstr(const struct mk_model_path *mp, char **out)
{
	if (asprintf(out, "%s%s%s", mp->path, mp->revision ? "@" : "", mp->revision ? mp->revision : "") < 0) {
		*out = NULL;
		return -1;
	}
	return 0;
}

static bool has_tensor(void *ctx, const char *name)
{
	return mk_model_find(ctx, name) != NULL;
}

static long model_index(const struct mk_plan *p, const struct mk_model_ref *r)
{
	for (size_t i = 0; i < p->nmodels; i++)
		if (mk_model_ref_equal(p->models[i].ref, r))
			return (long)i;
	return -1;
}

static int open_models(struct mk_plan *p, const struct mk_arch_registry *reg, struct mk_diags *d,
		       struct mk_err *err)
{
	const struct mk_model_ref **refs = NULL;
	size_t n = 0;
	int rc = mk_config_models(p->cfg, &refs, &n, err);

	if (rc)
		return rc;
	p->models = calloc(n + 1, sizeof(*p->models));
	if (!p->models) {
		free(refs);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	p->nmodels = n;
	size_t nadapters = 0;
	for (size_t i = 0; i < n; i++) {
		struct pmodel *pm = &p->models[i];
		struct mk_err e = { 0 };
		char path[4096];
		char *unknown = NULL;

		pm->ref = refs[i];
		if (model_refstr(refs[i], &pm->refstr) || mk_model_ref_format(refs[i], &pm->display, &e)) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		/* a Hub model the cache lacks: its metadata and the headers of
		 * its shards, not its weights */
		static const struct mk_model_open_opts headers = { .weights = MK_MODEL_HEADERS };
		if (p->o->raw) {
			/* a state dict: the file named as written ('@' and '+'
			 * are part of its name), no config.json, no adapter */
			struct stat st;
			if (refs[i]->override_arch) {
				diag(d, MK_DIAG_ERROR, &refs[i]->loc,
				     "model '%s': a state-dict file takes no architecture", pm->display);
				continue;
			}
			free(pm->refstr);
			if (!(pm->refstr = strdup(pm->display))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			int se = stat(pm->refstr, &st) ? errno : 0;
			if (se || !S_ISREG(st.st_mode)) {
				diag(d, MK_DIAG_ERROR, &refs[i]->loc,
				     "model '%s': %s; mk-pytorch merges state-dict files (.safetensors, else a torch pickle)",
				     pm->display, se ? strerror(se) : "not a regular file");
				continue;
			}
		}
		if (!p->o->raw) {
			struct stat st;
			if (!stat(pm->refstr, &st) && S_ISREG(st.st_mode)) {
				diag(d, MK_DIAG_ERROR, &refs[i]->loc,
				     "model '%s' is a file, not a model directory; a state dict is merged by mk-pytorch "
				     "(mk-plan --state-dicts)", pm->display);
				continue;
			}
		}
		const char *open_ref = pm->refstr;
		for (size_t k = 0; k < p->o->naliases; k++)
			if (!strcmp(pm->refstr, p->o->alias_refs[k]))
				open_ref = p->o->alias_dirs[k];
		if (mk_model_open_with(open_ref, &headers, &pm->m, &e)) {
			diag(d, MK_DIAG_ERROR, &refs[i]->loc, "%s", e.msg);
			continue;
		}
		if (p->o->raw)
			continue;
		snprintf(path, sizeof(path), "%s/config.json", pm->m->dir);
		if (model_file_read(pm->m, "config.json", (uint8_t **)&pm->hf_text, &pm->hf_len, &e) ||
		    mk_hfconfig_parse(pm->hf_text, pm->hf_len, path, &pm->hf, &e)) {
			diag(d, MK_DIAG_ERROR, &refs[i]->loc, "model '%s': %s", pm->display, e.msg);
			continue;
		}
		if (mk_arch_for_config(reg, pm->hf, refs[i]->override_arch, &pm->arch, &unknown, &e)) {
			diag(d, MK_DIAG_ERROR, &refs[i]->loc, "model '%s': %s", pm->display, e.msg);
			continue;
		}
		if (!pm->arch)
			diag(d, MK_DIAG_WARNING, &refs[i]->loc,
			     "model '%s': no architecture definition for %s; inferring one from tensor names",
			     pm->display, unknown ? unknown : "its class");
		free(unknown);
		/* BASE+ADAPTER: the adapter checked against the base, before any
		 * weight is read; its config.json is the base's (as mergekit) */
		if (refs[i]->lora.path) {
			if (path_refstr(&refs[i]->lora, &pm->lora_refstr)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			if (mk_lora_open(pm->lora_refstr, pm->lora_refstr, pm->m, &pm->lora, &e)) {
				if (e.code == MK_ENOMEM) {
					rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
					break;
				}
				diag(d, MK_DIAG_ERROR, &refs[i]->loc, "model '%s': %s", pm->display, e.msg);
				continue;
			}
			pm->lora_index = n + nadapters++;
		}
	}
	free(refs);
	return rc;
}

/* The output architecture: the base's (else the first model's); all
 * known and different -> --allow-crimes; any unknown -> inferred. */
static int choose_arch(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
{
	bool all_known = true;
	int rc = 0;

	for (size_t i = 0; i < p->nmodels; i++)
		if (!p->models[i].arch)
			all_known = false;
	if (all_known) {
		for (size_t i = 1; i < p->nmodels; i++)
			if (!mk_arch_equal(p->models[0].arch, p->models[i].arch)) {
				if (!p->o->allow_crimes) {
					diag(d, MK_DIAG_ERROR, &p->models[i].ref->loc,
					     "model '%s' is a %s, '%s' a %s: must specify --allow-crimes to attempt to mix different architectures",
					     p->models[i].display, p->models[i].arch->file ? p->models[i].arch->file : "?",
					     p->models[0].display, p->models[0].arch->file ? p->models[0].arch->file : "?");
					return 0;
				}
				diag(d, MK_DIAG_WARNING, &p->models[i].ref->loc,
				     "mixing architectures (--allow-crimes): the output is a %s, as '%s'",
				     p->models[0].arch->file ? p->models[0].arch->file : "?", p->models[0].display);
				break;
			}
		return mk_arch_clone(p->models[0].arch, &p->arch, err);
	}
	struct mk_arch_names *names = calloc(p->nmodels, sizeof(*names));
	const char ***lists = calloc(p->nmodels, sizeof(*lists));
	if (!names || !lists) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < p->nmodels; i++) {
		const struct mk_model *m = p->models[i].m;
		lists[i] = malloc((m->ntensors + 1) * sizeof(**lists));
		if (!lists[i]) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t k = 0; k < m->ntensors; k++)
			lists[i][k] = m->tensors[k].t->name;
		names[i].names = lists[i];
		names[i].n = m->ntensors;
		int64_t vs = 0;
		if (!mk_hfconfig_int(p->models[i].hf, "vocab_size", &vs, NULL) && vs > 0)
			names[i].vocab_size = (uint64_t)vs;
	}
	rc = mk_arch_infer(names, p->nmodels, &p->arch, err);
out:
	for (size_t i = 0; lists && i < p->nmodels; i++)
		free(lists[i]);
	free(lists);
	free(names);
	return rc;
}

/* ------------------------------------------------------------ parameters */

struct lc_ctx {
	struct mk_plan *p;
	size_t module;
};

static int layer_count(void *ctx, const struct mk_model_ref *ref, long long *n, struct mk_err *err)
{
	struct lc_ctx *c = ctx;
	long i = model_index(c->p, ref);
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

static int to_pval(const struct mk_param_spec *ps, double v, struct mk_pval *out)
{
	switch (ps->type) {
	case MK_PT_BOOL:
		*out = mk_pval_bool(v != 0.0);
		return 0;
	case MK_PT_INT:
		if (v != floor(v) || fabs(v) > 9.0e15)
			return -1;
		*out = mk_pval_int((int64_t)v);
		return 0;
	default:
		*out = mk_pval_float(v);
		return 0;
	}
}

/* --------------------------------------------------------------- tensors */

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


struct src_in {                       /* one candidate input of a tensor */
	long model;                       /* plan model index */
	const struct mk_model_ref *ref;
	const struct mk_weight *w;        /* the input weight (its own name) */
	const struct mk_params *params;   /* the source's parameters */
};

struct tctx {                         /* where a tensor is planned */
	struct mk_param_ctx scope;
	const struct mk_model_ref *base;
	double t;
	const struct mk_config_loc *loc;  /* for messages */
};

/* One output tensor being planned, from its candidate inputs to its job.
 * plan_tensor runs the stages below in order on it; each returns a
 * negative MK_E* (a failure: planning stops), TP_NEXT (go on) or TP_DONE
 * (no job for this tensor: an optional weight skipped, or a diagnostic
 * said why). */
struct tplan {
	struct mk_plan *p;
	const struct mk_weight *ow;       /* the output weight */
	const struct src_in *srcs;        /* its candidate inputs */
	size_t nsrc;
	const struct tctx *tc;
	struct mk_diags *d;
	const struct mk_method *m;        /* the config's method, or passthrough */
	size_t np;                        /* m's parameters */
	size_t n;                         /* inputs found, in job order */
	int base;                         /* the base's input index, or -1 */
	bool check_equal;                 /* not floats: inputs must agree */
	/* per input, in job order (order[i]: its index in srcs) */
	struct mk_tensor_desc *in;        /* as the method sees it (cast on load) */
	struct mk_tensor_desc *stored;    /* as stored (or assembled) */
	const char **labels, **names;     /* model display name, tensor name */
	size_t *order;
	struct mk_fused **fused;          /* its assembly from experts, or NULL */
	const struct mk_lora_ent **lora;  /* its adapter's change (BASE+ADAPTER), or NULL */
	bool *used;                       /* read by the method (output rule) */
	/* parameters: as looked up (raw), as the method resolved them (res);
	 * per input np values from i * np */
	struct mk_pval *graw, *iraw, *gres, *ires;
	struct mk_plan_out po;            /* the method's output rule */
	unsigned spare_passes;            /* po.npasses with the spare pass offered
					     (mk_plan_opts.spare_pass; po.npasses: none) */
	struct mk_plan_job *j;            /* the job, until the plan takes it */
	struct mk_err e;                  /* a method's or assembly's error, for a diagnostic */
};

enum { TP_NEXT = 0, TP_DONE = 1 };

/* Where a message about input i belongs: that model's entry in the config
 * (models[1].model, slices[0].sources[1].model), else the slice's. */
static const struct mk_config_loc *input_loc(const struct tplan *t, size_t i)
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
	}
	return t->ow->optional && !any_direct ? TP_DONE : TP_NEXT;
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
			if (!fu) {
				const struct mk_st_tensor *st = mk_model_find(pm->m, nm)->t;
				ftd = st->desc;
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
			t->stored[n] = ftd;
			t->in[n] = ftd;
			/* cast on load: force_dtype, else the config's dtype (else,
			 * for a BASE+ADAPTER model, --lora-merge-dtype) */
			if (t->ow->force_dtype)
				mk_config_dtype_parse(t->ow->force_dtype, &t->in[n].dtype, NULL, NULL);
			else if (p->cfg->dtype.name && mk_dtype_is_float(ftd.dtype))
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
			if (mk_param_lookup(&tc->scope, ps->name, NULL, name, tc->t, &v) != MK_PL_NONE &&
			    to_pval(ps, v, &t->graw[k]))
				diag(t->d, MK_DIAG_ERROR, tc->loc, "tensor '%s': parameter '%s' = %g is not an integer",
				     name, ps->name, v);
			continue;
		}
		for (size_t i = 0; i < t->n; i++) {
			const struct src_in *sr = &t->srcs[t->order[i]];
			if (mk_param_lookup(&tc->scope, ps->name, sr->ref, sr->w->name, tc->t, &v) != MK_PL_NONE) {
				if (to_pval(ps, v, &t->iraw[i * np + k]))
					diag(t->d, MK_DIAG_ERROR, input_loc(t, i),
					     "tensor '%s': parameter '%s' = %g of model '%s' is not an integer", name,
					     ps->name, v, t->labels[i]);
			}
		}
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
			diag(t->d, MK_DIAG_ERROR, input_loc(t, i),
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

	if (!mk_method_plan(t->m, &jd, &t->po, t->gres, t->ires, t->used, &t->e)) {
		struct mk_plan_out ps;
		note_base_copy(t);
		/* the passes with a spare one offered (tplan_sends takes it for
		 * a streamed job: a held one adds a pass as it needs) */
		t->spare_passes = t->po.npasses;
		jd.spare_pass = true;
		if (p->o->spare_pass && t->po.npasses && !mk_method_plan(t->m, &jd, &ps, t->gres, t->ires, t->used, &t->e))
			t->spare_passes = ps.npasses;
		return TP_NEXT;
	}
	char key[MK_ERR_MSG_MAX];
	const char *at = strstr(t->e.msg, name);
	snprintf(key, sizeof(key), "%.*s%s", at ? (int)(at - t->e.msg) : (int)strlen(t->e.msg), t->e.msg,
		 at ? at + strlen(name) : "");
	if (p->last_err && !strcmp(p->last_err, key)) {
		p->repeats++;
	} else {
		long in = input_named(t, t->e.msg);
		const struct mk_config_loc *loc = in >= 0 ? input_loc(t, (size_t)in) : t->tc->loc;
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

/* ------------------------------------------------ vocabulary-indexed weights */

/* Under a tokenizer source, every input of a vocabulary-indexed weight is,
 * as the method sees it, the merged vocabulary's rows in the inputs'
 * promoted dtype: mergekit aligns the embeddings so before merging. */
static int tplan_vocab_shapes(struct tplan *t)
{
	struct mk_plan *p = t->p;
	enum mk_dtype dts[64], D;

	if (!p->tok || !t->ow->is_embed || t->check_equal)
		return TP_NEXT;
	if (t->n > 64) {
		diag(t->d, MK_DIAG_ERROR, t->tc->loc, "tensor '%s': more than 64 inputs to a vocabulary merge", t->ow->name);
		return TP_DONE;
	}
	for (size_t i = 0; i < t->n; i++) {
		dts[i] = t->in[i].dtype;
		if (t->in[i].ndim < 1 || !t->in[i].shape[0] ||
		    mk_shape_row_len(t->in[i].ndim, t->in[i].shape) != mk_shape_row_len(t->in[0].ndim, t->in[0].shape)) {
			diag(t->d, MK_DIAG_ERROR, input_loc(t, i),
			     "tensor '%s': model '%s' has rows of another length than model '%s' (a vocabulary merge aligns rows of one length)",
			     t->ow->name, t->labels[i], t->labels[0]);
			return TP_DONE;
		}
	}
	D = mk_promote_dtypes(t->n, dts);
	for (size_t i = 0; i < t->n; i++) {
		t->in[i].shape[0] = p->tok_rows;
		t->in[i].dtype = D;
	}
	return TP_NEXT;
}

static int run_push(struct mk_vocab_run **v, size_t *n, size_t *cap, uint64_t out, uint64_t src)
{
	if (*n && (*v)[*n - 1].out + (*v)[*n - 1].n == out && (*v)[*n - 1].src + (*v)[*n - 1].n == src) {
		(*v)[*n - 1].n++;
		return 0;
	}
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 8;
		struct mk_vocab_run *q = realloc(*v, nc * sizeof(*q));
		if (!q)
			return -1;
		*v = q;
		*cap = nc;
	}
	(*v)[(*n)++] = (struct mk_vocab_run){ out, src, 1 };
	return 0;
}

static int fill_push(struct mk_plan_vocab *vc, size_t *cap, struct mk_vocab_fill f)
{
	struct mk_vocab_fill *l = vc->nfill ? &vc->fill[vc->nfill - 1] : NULL;

	if (l && l->out + l->n == f.out && l->kind == f.kind && l->from == f.from && l->force == f.force) {
		l->n += f.n;
		return 0;
	}
	if (vc->nfill == *cap) {
		size_t nc = *cap ? 2 * *cap : 8;
		struct mk_vocab_fill *q = realloc(vc->fill, nc * sizeof(*q));
		if (!q)
			return -1;
		vc->fill = q;
		*cap = nc;
	}
	vc->fill[vc->nfill++] = f;
	return 0;
}

/* Has tokens: entry k's mistake not been said yet?  (Once, not per tensor.) */
static bool say_once(struct mk_plan *p, long k)
{
	if (p->tok_said[k])
		return false;
	p->tok_said[k] = 1;
	return true;
}

/* The input of model m in the job, or -1. */
static long job_input_of(const struct mk_plan_job *j, long m)
{
	for (size_t i = 0; i < j->ninputs; i++)
		if ((long)j->inputs[i].model == m)
			return (long)i;
	return -1;
}

static int lora_copy(struct mk_plan_lora **dst, const struct mk_plan_lora *src)
{
	struct mk_plan_lora *l = calloc(1, sizeof(*l));

	*dst = l;
	if (!l)
		return -1;
	*l = *src;
	l->a = l->b = l->replace = NULL;
	return (src->a && !(l->a = strdup(src->a))) || (src->b && !(l->b = strdup(src->b))) ||
	       (src->replace && !(l->replace = strdup(src->replace))) ? -1 : 0;
}

/* The aux input reading rows of input ix's tensor (made on first use). */
static long aux_of(struct mk_plan_vocab *vc, const struct mk_plan_input *src, size_t ninputs, size_t *aux_caps)
{
	for (size_t k = 0; k < vc->naux; k++)
		if (vc->aux[k].model == src->model)
			return (long)(ninputs + k);
	struct mk_plan_input *q = realloc(vc->aux, (vc->naux + 1) * sizeof(*q));
	if (!q)
		return -1;
	vc->aux = q;
	memset(&q[vc->naux], 0, sizeof(*q));
	q[vc->naux].model = src->model;
	q[vc->naux].desc = src->desc;
	q[vc->naux].load_dtype = src->desc.dtype;
	q[vc->naux].nelem = src->nelem;
	if (!(q[vc->naux].tensor = strdup(src->tensor)))
		return -1;
	if (src->lora && lora_copy(&q[vc->naux].lora, src->lora)) {
		vc->naux++; /* freed with the job */
		return -1;
	}
	aux_caps[vc->naux] = 0;
	return (long)(ninputs + vc->naux++);
}

/* The job's rows: each input's runs, the fills where an input lacks a
 * token (mergekit's rules: a tokens: entry; else the one model that has
 * it; none: zeros; the base when it has it; else the average), padding
 * rows as their means; rows of other tokens of a model (model_token) as
 * aux inputs.  Every mistake a tokens: entry can hold is said here. */
static int tplan_vocab_job(struct tplan *t, struct mk_err *err)
{
	struct mk_plan *p = t->p;
	struct mk_plan_job *j = t->j;
	const struct mk_tokenizer_config *tc = p->cfg->tokenizer;
	const struct mk_tokmerge *tm = p->tok;
	struct mk_plan_vocab *vc;
	size_t *caps = NULL, fcap = 0, aux_caps[64], zeros = 0;
	bool *has = NULL;
	int rc = TP_NEXT;

	if (!tm || !t->ow->is_embed || t->check_equal)
		return TP_NEXT;
	if (!(vc = j->vocab = calloc(1, sizeof(*vc))) || !(caps = calloc(j->ninputs + 1, sizeof(*caps))) ||
	    !(has = calloc(j->ninputs + 1, sizeof(*has))))
		goto nomem;
	vc->rows = p->tok_rows;
	vc->tokens = tm->n;
	vc->dtype = t->in[0].dtype;
	for (size_t id = 0; id < tm->n; id++) {
		size_t npresent = 0, one = 0;
		for (size_t i = 0; i < j->ninputs; i++) {
			struct mk_plan_input *pi = &j->inputs[i];
			int32_t src = tm->map[pi->model][id];
			has[i] = src >= 0;
			if (!has[i])
				continue;
			if ((uint64_t)src >= pi->desc.shape[0]) {
				diag(t->d, MK_DIAG_ERROR, input_loc(t, i),
				     "tensor '%s': model '%s' has token '%s' at id %d, past the tensor's %llu rows",
				     t->ow->name, t->labels[i], tm->token[id], (int)src,
				     (unsigned long long)pi->desc.shape[0]);
				rc = TP_DONE;
				goto out;
			}
			if (run_push(&pi->runs, &pi->nruns, &caps[i], id, (uint64_t)src))
				goto nomem;
			npresent++;
			one = i;
		}
		long k = p->tok_cfg[id];
		const struct mk_token_embed *te = k >= 0 ? &tc->tokens[k] : NULL;
		bool force = te && te->force;
		if (!force && npresent == j->ninputs)
			continue;
		struct mk_vocab_fill f = { .out = id, .n = 1, .force = force };
		if (te && te->kind != MK_TOKEMB_DEFAULT) {
			long mi = te->kind == MK_TOKEMB_ZERO ? -1 : model_index(p, &te->model);
			long ix = mi >= 0 ? job_input_of(j, mi) : -1;
			if (te->kind == MK_TOKEMB_ZERO) {
				f.kind = MK_FILL_ZERO;
			} else if (ix < 0) {
				if (say_once(p, k))
					diag(t->d, MK_DIAG_ERROR, &te->loc,
					     "tokens: '%s' takes its embedding from model '%s', which has no '%s' to take it from",
					     te->token, mi >= 0 ? p->models[mi].display : "?", t->ow->name);
				rc = TP_DONE;
				goto out;
			} else if (te->kind == MK_TOKEMB_MODEL) {
				if (!has[ix]) {
					if (say_once(p, k))
						diag(t->d, MK_DIAG_ERROR, &te->loc,
						     "tokens: '%s' takes its embedding from model '%s', which does not have the token",
						     te->token, p->models[mi].display);
					rc = TP_DONE;
					goto out;
				}
				f.kind = MK_FILL_COPY;
				f.from = (uint32_t)ix;
			} else {
				long long sid = te->has_token_id ? te->token_id : mk_vocab_find(tm->orig[mi], te->src_token);
				const struct mk_plan_input *sx = &j->inputs[ix];
				if (sid < 0 || (uint64_t)sid >= sx->desc.shape[0]) {
					if (say_once(p, k))
						diag(t->d, MK_DIAG_ERROR, &te->loc,
						     "tokens: '%s': token id %lld is outside model '%s''s %s (%llu rows)",
						     te->token, sid, p->models[mi].display, t->ow->name,
						     (unsigned long long)sx->desc.shape[0]);
					rc = TP_DONE;
					goto out;
				}
				long a = vc->naux >= 64 ? -1 : aux_of(vc, sx, j->ninputs, aux_caps);
				if (a < 0)
					goto nomem;
				struct mk_plan_input *ax = &vc->aux[a - (long)j->ninputs];
				if (run_push(&ax->runs, &ax->nruns, &aux_caps[a - (long)j->ninputs], id, (uint64_t)sid))
					goto nomem;
				f.kind = MK_FILL_COPY;
				f.from = (uint32_t)a;
			}
		} else if (npresent == 1) {
			f.kind = MK_FILL_COPY;
			f.from = (uint32_t)one;
		} else if (npresent == 0) {
			f.kind = MK_FILL_ZERO;
			zeros++;
		} else if (t->base >= 0 && has[t->base]) {
			f.kind = MK_FILL_COPY;
			f.from = (uint32_t)t->base;
		} else {
			f.kind = MK_FILL_AVERAGE;
		}
		if (fill_push(vc, &fcap, f))
			goto nomem;
	}
	if (vc->rows > vc->tokens &&
	    fill_push(vc, &fcap, (struct mk_vocab_fill){ .out = vc->tokens, .n = vc->rows - vc->tokens, .kind = MK_FILL_MEAN }))
		goto nomem;
	if (zeros && !p->tok_warned) {
		p->tok_warned = true;
		diag(t->d, MK_DIAG_WARNING, tc ? &tc->loc : &p->cfg->tokenizer_source.loc,
		     "%zu token%s of the output vocabulary %s in no model's %s: %s embedding is zeros", zeros,
		     zeros == 1 ? "" : "s", zeros == 1 ? "is" : "are", t->ow->name, zeros == 1 ? "its" : "their");
	}
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	free(caps);
	free(has);
	return rc;
}

/* A whole-tensor method must fit the merge budget: every input and the
 * output in the compute dtype. */
static int tplan_whole_budget(struct tplan *t)
{
	struct mk_plan *p = t->p;
	const struct mk_plan_out *po = &t->po;

	if (!t->m->whole_tensor || !p->budget)
		return TP_NEXT;
	uint64_t need = 0, b;
	size_t es = mk_dtype_bits(po->compute) / 8;
	for (size_t i = 0; i < t->n; i++)
		need += mk_tensor_desc_count(&t->in[i]) * es;
	if (!mk_dtype_nbytes(po->compute, 1, &b))
		need += mk_tensor_desc_count(&po->out) * es;
	if (need > p->budget) {
		char a[32], c[32];
		diag(t->d, MK_DIAG_ERROR, t->tc->loc,
		     "tensor '%s': %s needs the whole tensor in memory, %s, more than the merge budget of %s (--max-memory)",
		     t->ow->name, t->m->name, mk_size_human(need, a, sizeof(a)), mk_size_human(p->budget, c, sizeof(c)));
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
	return TP_NEXT;
}

/* The job's method and inputs: model, stored tensor (or its assembly from
 * experts), stored and load dtypes, shape. */
static int tplan_job_inputs(struct tplan *t, struct mk_err *err)
{
	struct mk_plan_job *j = t->j;

	j->method = strdup(t->m->name);
	if (!j->method)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
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
			struct mk_plan_lora l = { .model = pm->lora_index, .a = le->a, .b = le->b, .replace = le->replace,
						  .scale = le->scale, .transpose = le->transpose, .embedding = le->embedding };
			if (lora_copy(&pi->lora, &l))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
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
static void tplan_sends(struct tplan *t)
{
	struct mk_plan *p = t->p;
	struct mk_plan_job *j = t->j;
	bool multi = t->po.npasses && p->budget;
	uint64_t ws = multi ? tplan_sent_bytes(t) : 0;

	j->base = t->check_equal ? -1 : t->base;
	j->passes = t->po.npasses;
	j->sends = t->po.npasses + 1;
	if (multi && ws <= p->hold_max) {
		j->sends = 1;
		if (ws > p->held_max)
			p->held_max = ws;
	} else if (multi && p->o->spill) {
		j->sends = 1;
		j->spill = true;
		p->spilled++;
	} else if (t->spare_passes > t->po.npasses) {
		/* streamed: the spare pass, where the method takes one (a job
		 * sent once adds a pass as it needs instead) */
		j->spare = true;
		j->passes = t->spare_passes;
		j->sends = t->spare_passes + 1;
	}
}

/* The job's resolved parameters (those of input 0 alone when the inputs
 * must agree) and flags; then the plan takes it. */
static int tplan_job_add(struct tplan *t, struct mk_err *err)
{
	struct mk_plan *p = t->p;
	struct mk_plan_job *j = t->j;
	const struct mk_method *m = t->m;
	size_t np = t->np;
	int rc = 0;

	for (size_t k = 0; !rc && k < np; k++)
		if (m->params[k].scope == MK_SCOPE_GLOBAL && t->gres[k].set)
			rc = mk_job_params_add(&j->global, m->params[k].name, t->gres[k], err);
	for (size_t i = 0; !rc && i < t->n; i++)
		for (size_t k = 0; !rc && k < np && (!t->check_equal || i == 0); k++)
			if (m->params[k].scope != MK_SCOPE_GLOBAL && t->ires[i * np + k].set)
				rc = mk_job_params_add(&j->input_params[i], m->params[k].name, t->ires[i * np + k], err);
	if (rc)
		return rc;
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
static int plan_tensor(struct mk_plan *p, const struct mk_weight *ow, const struct src_in *srcs, size_t nsrc,
		       const struct tctx *tc, struct mk_diags *d, struct mk_err *err)
{
	struct tplan t = { .p = p, .ow = ow, .srcs = srcs, .nsrc = nsrc, .tc = tc, .d = d, .m = p->method,
			   .np = p->method->nparams, .base = -1 };
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
	if (!t.lora || !t.in || !t.graw || !t.iraw || !t.gres || !t.ires || !t.labels || !t.order || !t.names || !t.used ||
	    !t.fused || !t.stored) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = tplan_sources(&t)) || (rc = tplan_inputs(&t)) || (rc = tplan_params(&t)) ||
	    (rc = tplan_not_floats(&t)) || (rc = tplan_vocab_shapes(&t)) || (rc = tplan_output_rule(&t)) ||
	    (rc = tplan_whole_budget(&t)))
		goto out;
	/* the job, then its output's manifest entry */
	t.j = mk_plan_job_new(t.n);
	if (!t.j) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = tplan_manifest_entry(&t, err)) || (rc = tplan_job_inputs(&t, err)) || (rc = tplan_vocab_job(&t, err)))
		goto out;
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
	return rc < 0 ? rc : 0;
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
				srcs[k] = (struct src_in){ model_index(p, &s->sources[k].model), &s->sources[k].model,
							   &l->w[w], &s->sources[k].params };
			struct tctx tc = { { &p->cfg->params, modparams, s }, mk_config_base_for(p->cfg, s), 0.0,
					   s->loc.line || !s->nsources ? &s->loc : &s->sources[0].loc };
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
			rc = mk_arch_weights(p->arch, mod, MK_WS_LAYER, total, out_layer, &ol, err);
			for (size_t src = 0; src < s->nsources && !rc; src++) {
				long mi = model_index(p, &s->sources[src].model);
				int64_t nl = 0;
				struct mk_err e = { 0 };
				/* input names from the source's own layer count */
				if (mi >= 0 && mk_arch_num_layers(p->arch, mod, p->models[mi].hf, &nl, &e))
					nl = total;
				rc = mk_arch_weights(p->arch, mod, MK_WS_LAYER, nl, s->sources[src].start + k, &il[src],
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
						srcs[ns++] = (struct src_in){ model_index(p, &s->sources[src].model),
									      &s->sources[src].model, &il[src].w[w],
									      &s->sources[src].params };
				struct tctx tc = { { &p->cfg->params, modparams, s }, mk_config_base_for(p->cfg, s), t,
						   s->loc.line || !s->nsources ? &s->loc : &s->sources[0].loc };
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
			srcs[k] = (struct src_in){ model_index(p, &last->sources[k].model), &last->sources[k].model,
						   &post.w[w], &last->sources[k].params };
		struct tctx tc = { { &p->cfg->params, modparams, last }, mk_config_base_for(p->cfg, last), 0.0,
				   last->loc.line || !last->nsources ? &last->loc : &last->sources[0].loc };
		rc = plan_tensor(p, &post.w[w], srcs, npost_src, &tc, d, err);
		free(srcs);
	}
	mk_weight_list_free(&pre);
	mk_weight_list_free(&post);
	return rc;
}

static int plan_modules(struct mk_plan *p, int64_t *out_layers, bool *layers_changed, struct mk_diags *d,
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
					     src->start, src->end, p->models[model_index(p, &src->model)].display, nl);
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

/* ------------------------------------------------------- state dicts (raw) */

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
static void raw_refuse(const struct mk_config *c, struct mk_diags *d)
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
static int plan_raw(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
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
		long mi = model_index(p, &s->sources[k].model);
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
		long mi = model_index(p, &s->sources[k].model);
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
			long mi = model_index(p, &s->sources[k].model);
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
		struct tctx tc = { { &c->params, NULL, s }, mk_config_base_for(c, s), 0.0, loc };
		rc = plan_tensor(p, &w, srcs, ns, &tc, d, err);
	}
	for (size_t k = 0; !rc && k < s->nsources; k++) {
		long mi = model_index(p, &s->sources[k].model);
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

/* ------------------------------------------------------------------ files */

extern const struct mk_arch_file mk_template_data[];
extern const size_t mk_template_data_n;

static int add_file(struct mk_plan *p, const char *name, uint8_t *data, size_t len, struct mk_err *err)
{
	struct pfile *v = realloc(p->files, (p->nfiles + 1) * sizeof(*v));

	if (!v) {
		free(data);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	p->files = v;
	v[p->nfiles].name = strdup(name);
	v[p->nfiles].data = data;
	v[p->nfiles].len = len;
	if (!v[p->nfiles].name) {
		free(data);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	p->nfiles++;
	return 0;
}

static bool donor_has(const struct pmodel *donor, const char *name)
{
	char path[4096];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", donor->m->dir, name);
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int copy_from_donor(struct mk_plan *p, const struct pmodel *donor, const char *name, struct mk_err *err)
{
	uint8_t *buf;
	size_t len;
	int rc = model_file_read(donor->m, name, &buf, &len, err);

	if (rc)
		return rc;
	return add_file(p, name, buf, len, err);
}

/* A model's own chat template, as transformers loads it: its
 * chat_template.jinja, else the "chat_template" string of its
 * tokenizer_config.json (malloc'ed; NULL when it has none).  A file that
 * cannot be read or parsed is said, at the config's chat_template key. */
static char *model_chat_template(const struct pmodel *pm, struct mk_diags *d, const struct mk_config_loc *loc)
{
	struct mk_err e = { 0 };
	struct mk_jsondoc *doc = NULL;
	uint8_t *buf;
	size_t len;
	char *t = NULL;

	if (donor_has(pm, "chat_template.jinja")) {
		if (model_file_read(pm->m, "chat_template.jinja", &buf, &len, &e)) {
			diag(d, MK_DIAG_WARNING, loc, "chat_template auto: %s; its template is not counted", e.msg);
			return NULL;
		}
		return (char *)buf;
	}
	if (!donor_has(pm, "tokenizer_config.json"))
		return NULL;
	if (model_file_read(pm->m, "tokenizer_config.json", &buf, &len, &e)) {
		diag(d, MK_DIAG_WARNING, loc, "chat_template auto: %s; its template is not counted", e.msg);
		return NULL;
	}
	if (mk_jsondoc_parse((const char *)buf, len, "tokenizer_config.json", &doc, &e) == 0) {
		enum mk_json_type ty;
		if (mk_jsondoc_find(doc, "chat_template", &ty) == 0 && ty == MK_JSON_STRING)
			t = mk_jsondoc_string(doc, "chat_template", NULL);
		else if (mk_jsondoc_find(doc, "chat_template", &ty) == 0 && ty != MK_JSON_NULL)
			diag(d, MK_DIAG_WARNING, loc,
			     "chat_template auto: model '%s': its tokenizer_config.json's chat_template is not a string (named templates?); not counted",
			     pm->display);
		mk_jsondoc_free(doc);
	} else {
		diag(d, MK_DIAG_WARNING, loc, "chat_template auto: model '%s': %s; its template is not counted", pm->display,
		     e.msg);
	}
	free(buf);
	return t;
}

/* The chat template asked for: a built-in name, "auto" (the most common
 * among the inputs' templates, chat_template.jinja or tokenizer_config.json,
 * first seen on a tie), or a literal template.  Returns malloc'ed text or NULL (auto, none found). */
static char *chat_template_text(struct mk_plan *p, struct mk_diags *d)
{
	const char *ct = p->cfg->chat_template;
	char name[256];

	if (strcmp(ct, "auto")) {
		snprintf(name, sizeof(name), "%s.jinja", ct);
		for (size_t i = 0; i < mk_template_data_n; i++)
			if (!strcmp(mk_template_data[i].name, name))
				return strdup((const char *)mk_template_data[i].data);
		if (!strstr(ct, "{{") && !strstr(ct, "{%"))
			diag(d, MK_DIAG_WARNING, &p->cfg->chat_template_loc,
			     "chat_template '%s' is not a built-in name (alpaca, chatml, exaone, llama3, mistral); using it as a literal template",
			     ct);
		return strdup(ct);
	}
	/* auto */
	char **seen = calloc(p->nmodels + 1, sizeof(*seen));
	size_t *count = calloc(p->nmodels + 1, sizeof(*count)), nseen = 0, best = 0;
	char *out = NULL;
	for (size_t i = 0; seen && count && i < p->nmodels; i++) {
		char *tmpl = model_chat_template(&p->models[i], d, &p->cfg->chat_template_loc);
		size_t k;
		if (!tmpl)
			continue;
		for (k = 0; k < nseen; k++)
			if (!strcmp(seen[k], tmpl))
				break;
		if (k == nseen)
			seen[nseen++] = tmpl;
		else
			free(tmpl);
		count[k]++;
	}
	for (size_t k = 0; k < nseen; k++)
		if (count[k] > count[best])
			best = k;
	if (nseen)
		out = strdup(seen[best]);
	for (size_t k = 0; k < nseen; k++)
		free(seen[k]);
	free(seen);
	free(count);
	if (!out)
		diag(d, MK_DIAG_WARNING, &p->cfg->chat_template_loc,
		     "chat_template auto: no input model has a chat template; none written");
	return out;
}

static const char *const tokenizer_files[] = {
	"tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer.model",
	"added_tokens.json", "vocab.json", "merges.txt", "vocab.txt", "chat_template.jinja",
	"generation_config.json", "chat_template.json", "video_preprocessor_config.json", NULL,
};

static int make_files(struct mk_plan *p, const int64_t *out_layers, bool layers_changed, struct mk_diags *d,
		      struct mk_err *err)
{
	const struct pmodel *donor = &p->models[0]; /* the base, else the first model */
	const char *dtname = p->cfg->out_dtype.name ? p->cfg->out_dtype.canonical :
			     p->cfg->dtype.name ? p->cfg->dtype.canonical : NULL;
	char *text = NULL, *warn = NULL;
	size_t len;
	int rc;

	/* no dtype asked for: when the merged tensors all came out in one
	 * float dtype other than the donor's (a bfloat16 base and a float32
	 * model promote to float32), config.json says so, as mergekit's
	 * does */
	if (!dtname && p->man) {
		enum mk_dtype out = MK_DT_COUNT, was = MK_DT_COUNT;
		const char *dn = NULL, *canon = NULL;
		bool one = true;
		for (size_t i = 0; i < p->man->ntensors && one; i++) {
			enum mk_dtype t = p->man->tensors[i].desc.dtype;
			if (!mk_dtype_is_float(t))
				continue;
			one = out == MK_DT_COUNT || out == t;
			out = t;
		}
		if ((!mk_hfconfig_str(donor->hf, "dtype", &dn, NULL) || !mk_hfconfig_str(donor->hf, "torch_dtype", &dn, NULL)) &&
		    dn)
			(void)mk_config_dtype_parse(dn, &was, NULL, NULL);
		if (one && out != MK_DT_COUNT && was != MK_DT_COUNT && out != was)
			canon = out == MK_DT_F32 ? "float32" : out == MK_DT_BF16 ? "bfloat16" :
				out == MK_DT_F16 ? "float16" : out == MK_DT_F64 ? "float64" : NULL;
		dtname = canon;
	}
	/* config.json */
	rc = mk_hfconfig_edit(donor->hf_text, donor->hf_len, "config.json", p->arch, dtname, donor->ref->override_arch,
			    layers_changed ? out_layers : NULL, p->tok ? (int64_t)p->tok_rows : -1, &text, &len, &warn, err);
	if (rc)
		return rc;
	if (warn) {
		diag(d, MK_DIAG_WARNING, NULL, "config.json: %s", warn);
		free(warn);
	}
	rc = add_file(p, "config.json", (uint8_t *)text, len, err);
	if (rc)
		return rc;
	/* README.md and the configuration as given */
	if (p->o->write_card) {
		const char **paths = calloc(p->nmodels + 1, sizeof(*paths));
		const char **loras = calloc(p->nmodels + 1, sizeof(*loras));
		bool *local = calloc(p->nmodels + 1, sizeof(*local));
		long base = -1;
		if (!paths || !loras || !local) {
			free(paths);
			free(loras);
			free(local);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < p->nmodels; i++) {
			paths[i] = p->models[i].ref->model.path;
			loras[i] = p->models[i].ref->lora.path;
			for (size_t k = 0; k < p->o->naliases; k++)
				local[i] |= !strcmp(p->models[i].refstr, p->o->alias_refs[k]);
			if (p->cfg->base_model && mk_model_ref_equal(p->models[i].ref, p->cfg->base_model))
				base = (long)i;
		}
		struct mk_card_input ci = { .name = p->o->out_name, .method = p->method->name,
					    .pretty_name = p->method->pretty_name,
					    .reference_url = p->method->reference_url, .models = paths,
					    .loras = loras, .nmodels = p->nmodels, .base_index = base,
					    .config_text = p->cfg->text, .local = local };
		rc = mk_card_render(&ci, &p->card, &len, err);
		free(paths);
		free(loras);
		free(local);
		if (rc)
			return rc;
		uint8_t *copy = malloc(len + 1), *yml = malloc(p->cfg->len + 1);
		if (!copy || !yml) {
			free(copy);
			free(yml);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		memcpy(copy, p->card, len);
		memcpy(yml, p->cfg->text, p->cfg->len);
		rc = add_file(p, "README.md", copy, len, err);
		if (!rc)
			rc = add_file(p, "mergekit_config.yml", yml, p->cfg->len, err);
		else
			free(yml);
		if (rc)
			return rc;
	}
	/* tokenizer files from the donor: the tokenizer source's model
	 * (check_tokenizer), else the base or the first model */
	donor = &p->models[p->tok_donor];
	if (p->o->copy_tokenizer) {
		/* a vocabulary in any of the layouts transformers loads (mergekit
		 * writes a tokenizer whenever AutoTokenizer loads one); its files
		 * are copied as they are */
		bool ok = donor_has(donor, "tokenizer.json") || donor_has(donor, "tokenizer.model") ||
			  (donor_has(donor, "vocab.json") && donor_has(donor, "merges.txt")) ||
			  donor_has(donor, "vocab.txt");
		char *tmpl = p->cfg->chat_template ? chat_template_text(p, d) : NULL;
		bool newvocab = p->tok && (p->tok->nnew || p->tok->strip_at >= 0);
		if (newvocab && !donor_has(donor, "tokenizer.json") && !donor_has(donor, "tokenizer_config.json"))
			return mk_err_set(err, MK_EUNSUPPORTED,
					  "model '%s' has neither tokenizer.json nor tokenizer_config.json to write the merged vocabulary's new tokens into",
					  donor->display);
		if (!ok)
			diag(d, MK_DIAG_WARNING, &p->cfg->merge_method_loc,
			     "model '%s' has no tokenizer (no tokenizer.json, tokenizer.model, vocab.json with merges.txt, or vocab.txt): the output has none",
			     donor->display);
		/* a template over a donor with neither file that holds one: in
		 * chat_template.jinja, as transformers 5 keeps it */
		if (ok && tmpl && !donor_has(donor, "tokenizer_config.json") && !donor_has(donor, "chat_template.jinja")) {
			char *t = strdup(tmpl);
			rc = t ? add_file(p, "chat_template.jinja", (uint8_t *)t, strlen(t), err) :
				 mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		for (size_t k = 0; ok && tokenizer_files[k] && !rc; k++) {
			if (!donor_has(donor, tokenizer_files[k]))
				continue;
			if (tmpl && !strcmp(tokenizer_files[k], "chat_template.jinja")) {
				char *t = strdup(tmpl);
				rc = t ? add_file(p, "chat_template.jinja", (uint8_t *)t, strlen(t), err) :
					 mk_err_set(err, MK_ENOMEM, "out of memory");
			} else if (newvocab && !strcmp(tokenizer_files[k], "tokenizer.json")) {
				/* the merged vocabulary: the donor's file, tokens added or cut */
				char path[4096];
				uint8_t *buf;
				size_t blen, slen = 0;
				char *out = NULL;
				snprintf(path, sizeof(path), "%s/tokenizer.json", donor->m->dir);
				rc = model_file_read(donor->m, "tokenizer.json", &buf, &blen, err);
				if (rc)
					break;
				rc = mk_tokmerge_tokenizer_json(p->tok, (const char *)buf, blen, path, &out, &slen, err);
				free(buf);
				if (!rc)
					rc = add_file(p, "tokenizer.json", (uint8_t *)out, slen, err);
				if (rc)
					break;
			} else if (newvocab && !strcmp(tokenizer_files[k], "added_tokens.json")) {
				continue; /* a slow tokenizer's list, stale for the new vocabulary */
			} else if ((tmpl || newvocab) && !strcmp(tokenizer_files[k], "tokenizer_config.json")) {
				/* set "chat_template" and the added tokens, keep the rest */
				char path[4096];
				uint8_t *buf;
				size_t blen;
				snprintf(path, sizeof(path), "%s/tokenizer_config.json", donor->m->dir);
				rc = model_file_read(donor->m, "tokenizer_config.json", &buf, &blen, err);
				if (rc)
					break;
				/* the keys changed, every other byte kept */
				struct mk_jsondoc *doc = NULL;
				char *q = NULL, *s = NULL;
				size_t slen = 0;
				rc = mk_jsondoc_parse((const char *)buf, blen, path, &doc, err);
				free(buf);
				if (!rc && mk_jsondoc_root_type(doc) != MK_JSON_OBJECT)
					rc = mk_err_set(err, MK_EFORMAT, "%s: not a JSON object (a tokenizer_config.json holds one)",
							path);
				if (!rc && tmpl && !(q = mk_json_quote(tmpl, strlen(tmpl))))
					rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				if (!rc && tmpl)
					rc = mk_jsondoc_set(doc, "chat_template", q, err);
				if (!rc && newvocab)
					rc = mk_tokmerge_edit_config(p->tok, doc, err);
				if (!rc)
					rc = mk_jsondoc_write(doc, &s, &slen, err);
				free(q);
				mk_jsondoc_free(doc);
				if (!rc)
					rc = add_file(p, "tokenizer_config.json", (uint8_t *)s, slen, err);
				if (rc)
					break;
			} else {
				rc = copy_from_donor(p, donor, tokenizer_files[k], err);
			}
		}
		free(tmpl);
	} else if (p->cfg->chat_template) {
		diag(d, MK_DIAG_WARNING, &p->cfg->chat_template_loc,
		     "chat_template is set but --no-copy-tokenizer: no template is written (as mergekit)");
	}
	/* the architecture's tagalong files */
	for (size_t k = 0; !rc && k < p->arch->ntagalong; k++) {
		bool dup = false;
		for (size_t f = 0; f < p->nfiles; f++)
			dup |= !strcmp(p->files[f].name, p->arch->tagalong_files[k]);
		if (!dup && donor_has(donor, p->arch->tagalong_files[k]))
			rc = copy_from_donor(p, donor, p->arch->tagalong_files[k], err);
	}
	return rc;
}

/* ------------------------------------------------------------ tokenizer */

/* tokenizer_source / tokenizer.source: the output vocabulary and every
 * model's map into it (mk_tokmerge_build), from the models' tokenizer.json
 * files and config.json vocab sizes, before any tensor is planned; the
 * embedding jobs are then planned over it (tplan_vocab_*). */
static void tok_warn(void *ctx, const char *msg)
{
	struct { struct mk_diags *d; const struct mk_config_loc *loc; } *w = ctx;
	diag(w->d, MK_DIAG_WARNING, w->loc, "%s", msg);
}

static int build_tokenizer(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
{
	const struct mk_tokenizer_config *tc = p->cfg->tokenizer;
	const struct mk_tok_source *src = tc ? &tc->source : &p->cfg->tokenizer_source;
	const struct mk_config_loc *loc = tc ? &tc->loc : &p->cfg->tokenizer_source.loc;
	const char *vk = p->arch ? mk_arch_vocab_key(p->arch) : "vocab_size";
	struct mk_vocab **v = calloc(p->nmodels + 1, sizeof(*v));
	long long *vs = calloc(p->nmodels + 1, sizeof(*vs));
	const char **labels = calloc(p->nmodels + 1, sizeof(*labels));
	const char **extra = calloc((tc ? tc->ntokens : 0) + 1, sizeof(*extra));
	struct { struct mk_diags *d; const struct mk_config_loc *loc; } wctx = { d, loc };
	struct mk_tokmerge_in in = { .nmodels = p->nmodels, .vocab = (const struct mk_vocab *const *)v,
				     .vocab_size = vs, .label = labels, .warn = tok_warn, .warn_ctx = &wctx };
	int rc = 0;

	if (!v || !vs || !labels || !extra) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (src->kind == MK_TOKSRC_NONE && !tc)
		goto out;
	/* the base: base_model, else the first model */
	if (p->cfg->base_model) {
		long b = model_index(p, p->cfg->base_model);
		in.base = b >= 0 ? (size_t)b : 0;
	}
	in.source = src->kind == MK_TOKSRC_BASE ? MK_TOKMERGE_BASE :
		    src->kind == MK_TOKSRC_MODEL ? MK_TOKMERGE_MODEL : MK_TOKMERGE_UNION;
	if (src->kind == MK_TOKSRC_MODEL) {
		long i = model_index(p, &src->model);
		if (i < 0) {
			diag(d, MK_DIAG_ERROR, &src->loc,
			     "the tokenizer source is not one of the merged models: a tokenizer from another model is not supported yet");
			goto out;
		}
		in.source_model = (size_t)i;
	}
	for (size_t i = 0; i < p->nmodels; i++) {
		struct mk_err e = { 0 };
		uint8_t *buf = NULL;
		size_t len;
		char label[4096];
		int64_t n = -1;
		labels[i] = p->models[i].display;
		vs[i] = !mk_hfconfig_int(p->models[i].hf, vk, &n, NULL) && n > 0 ? n : -1;
		/* a slow tokenizer's files alone (SentencePiece tokenizer.model,
		 * GPT-2 vocab.json, WordPiece vocab.txt): its vocabulary, and the
		 * added tokens its tokenizer_config.json lists */
		const char *slow = donor_has(&p->models[i], "tokenizer.json") ? NULL :
				   donor_has(&p->models[i], "tokenizer.model") ? "tokenizer.model" :
				   donor_has(&p->models[i], "vocab.json") ? "vocab.json" :
				   donor_has(&p->models[i], "vocab.txt") ? "vocab.txt" : NULL;
		if (slow) {
			snprintf(label, sizeof(label), "%s/%s", p->models[i].m->dir, slow);
			rc = model_file_read(p->models[i].m, slow, &buf, &len, &e);
			if (!rc)
				rc = !strcmp(slow, "tokenizer.model") ? mk_vocab_parse_spm(buf, len, label, &v[i], &e) :
				     mk_vocab_parse_plain((const char *)buf, len, label, !strcmp(slow, "vocab.txt"), &v[i], &e);
			free(buf);
			buf = NULL;
			/* a legacy added_tokens.json: transformers 5 (and so mergekit)
			 * no longer loads it; nor does mk, saying so */
			if (!rc && donor_has(&p->models[i], "added_tokens.json"))
				diag(d, MK_DIAG_WARNING, loc,
				     "model '%s': its added_tokens.json is not read (transformers 5 and mergekit do not load it); "
				     "the tokens of tokenizer_config.json's added_tokens_decoder are",
				     p->models[i].display);
			if (!rc && donor_has(&p->models[i], "tokenizer_config.json")) {
				snprintf(label, sizeof(label), "%s/tokenizer_config.json", p->models[i].m->dir);
				rc = model_file_read(p->models[i].m, "tokenizer_config.json", &buf, &len, &e);
				if (!rc)
					rc = mk_vocab_add_decoder(v[i], (const char *)buf, len, label, &e);
				free(buf);
			}
			if (rc) {
				if (e.code == MK_ENOMEM) {
					rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
					goto out;
				}
				rc = 0;
				diag(d, MK_DIAG_ERROR, loc, "model '%s': %s", p->models[i].display, e.msg);
				goto out;
			}
			continue;
		}
		if (!donor_has(&p->models[i], "tokenizer.json")) {
			if (i == in.base || (in.source == MK_TOKMERGE_MODEL && i == in.source_model)) {
				diag(d, MK_DIAG_ERROR, loc, "model '%s' has no tokenizer to build the output's on",
				     p->models[i].display);
				goto out;
			}
			/* as mergekit: a model without a tokenizer is taken to have the base's */
			diag(d, MK_DIAG_WARNING, loc, "model '%s' has no tokenizer: taken to have the base model's vocabulary",
			     p->models[i].display);
			continue;
		}
		snprintf(label, sizeof(label), "%s/tokenizer.json", p->models[i].m->dir);
		if (model_file_read(p->models[i].m, "tokenizer.json", &buf, &len, &e) ||
		    mk_vocab_parse((const char *)buf, len, label, &v[i], &e)) {
			free(buf);
			if (e.code == MK_ENOMEM) {
				rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
				goto out;
			}
			diag(d, MK_DIAG_ERROR, loc, "model '%s': %s", p->models[i].display, e.msg);
			goto out;
		}
		free(buf);
	}
	for (size_t k = 0; tc && k < tc->ntokens; k++)
		extra[k] = tc->tokens[k].token;
	in.nextra = tc ? tc->ntokens : 0;
	in.extra = extra;
	{
		struct mk_err e = { 0 };
		if (mk_tokmerge_build(&in, &p->tok, &e)) {
			if (e.code == MK_ENOMEM) {
				rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
				goto out;
			}
			diag(d, MK_DIAG_ERROR, loc, "%s", e.msg);
			goto out;
		}
	}
	for (size_t k = 0; k < p->tok->n; k++)
		if (!p->tok->token[k]) {
			diag(d, MK_DIAG_ERROR, loc,
			     "model '%s': its tokenizer has no token with id %zu: a vocabulary with gaps is not supported yet",
			     p->models[p->tok->from_model].display, k);
			goto out;
		}
	p->tok_donor = p->tok->from_model;
	p->tok_rows = p->tok->n;
	if (tc && tc->has_pad_to_multiple_of && p->tok_rows % (uint64_t)tc->pad_to_multiple_of)
		p->tok_rows += (uint64_t)tc->pad_to_multiple_of - p->tok_rows % (uint64_t)tc->pad_to_multiple_of;
	/* tokens: each entry's output id; the models it names in the merge,
	 * a named source token in that model's vocabulary */
	if (!(p->tok_cfg = malloc((p->tok->n + 1) * sizeof(*p->tok_cfg))) ||
	    !(p->tok_said = calloc((tc ? tc->ntokens : 0) + 1, 1))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < p->tok->n; k++)
		p->tok_cfg[k] = -1;
	for (size_t k = 0; tc && k < tc->ntokens; k++) {
		const struct mk_token_embed *te = &tc->tokens[k];
		long long id = mk_tokmerge_find(p->tok, te->token);
		if (id >= 0)
			p->tok_cfg[id] = (long)k;
		if (te->kind != MK_TOKEMB_MODEL && te->kind != MK_TOKEMB_MODEL_TOKEN)
			continue;
		long m = model_index(p, &te->model);
		if (m < 0) {
			char *name = NULL;
			struct mk_err fe;
			(void)mk_model_ref_format(&te->model, &name, &fe);
			diag(d, MK_DIAG_ERROR, &te->loc, "tokens: '%s' takes its embedding from model '%s', which is not in the merge",
			     te->token, name ? name : "?");
			free(name);
			continue;
		}
		if (te->kind == MK_TOKEMB_MODEL_TOKEN && !te->has_token_id &&
		    mk_vocab_find(p->tok->orig[m], te->src_token) < 0)
			diag(d, MK_DIAG_ERROR, &te->loc, "tokens: '%s' takes the embedding of token '%s', which model '%s' does not have",
			     te->token, te->src_token, p->models[m].display);
		if (te->kind == MK_TOKEMB_MODEL_TOKEN && te->has_token_id && te->token_id < 0)
			diag(d, MK_DIAG_ERROR, &te->loc, "tokens: '%s': token_id %lld is negative", te->token, te->token_id);
	}
out:
	if (p->tok) {
		/* the merged vocabulary borrows them: kept with the plan */
		p->tok_vocabs = v;
	} else {
		for (size_t i = 0; v && i < p->nmodels; i++)
			mk_vocab_free(v[i]);
		free(v);
	}
	free(vs);
	free(labels);
	free(extra);
	return rc;
}

/* -------------------------------------------------------------- build */

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
	mk_arch_free(p->arch);
	mk_manifest_free(p->man);
	mk_config_free(p->cfg);
	free(p);
}

const char *mk_plan_card(const struct mk_plan *p)
{
	return p->card;
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
			rc = open_models(p, r2, d, err);
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
	else
		check_config_params(p->cfg, p->method, d);
	if (o->raw)
		raw_refuse(p->cfg, d);
	rc = mk_arch_registry_open(&reg, err);
	if (rc)
		goto out;
	rc = open_models(p, reg, d, err);
	if (rc || d->nerrors)
		goto out;
	if (!o->raw) {
		rc = choose_arch(p, d, err);
		if (rc || d->nerrors)
			goto out;
	}
	p->man = mk_manifest_new("plan", "mk-plan " MK_VERSION);
	out_layers = calloc((p->arch ? p->arch->nmodules : 0) + 1, sizeof(*out_layers));
	if (!p->man || !out_layers) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (!o->raw) {
		rc = build_tokenizer(p, d, err);
		if (rc || d->nerrors)
			goto out;
	}
	rc = o->raw ? plan_raw(p, d, err) : plan_modules(p, out_layers, &layers_changed, d, err);
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
	rc = o->raw ? 0 : make_files(p, out_layers, layers_changed, d, err);
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

/* ------------------------------------------------------------ write */


int mk_plan_write(const struct mk_plan *p, int fd, int level, struct mk_err *err)
{
	struct mk_stream_writer *w = NULL;
	char *head = NULL;
	size_t hlen;
	int rc = 0;

	if (!rc)
		rc = mk_manifest_encode(p->man, &head, &hlen, err);
	if (!rc)
		rc = mk_sw_open(&w, fd, level, err);
	if (!rc)
		rc = mk_sw_frame1(w, MK_FT_HEAD, head, hlen, err);
	for (size_t i = 0; !rc && i < p->nfiles; i++)
		rc = mk_sw_file(w, p->files[i].name, 0644, p->files[i].data, p->files[i].len, err);
	for (size_t i = 0; !rc && i < p->njobs; i++) {
		char *j;
		size_t jl;
		rc = mk_plan_job_encode(p->jobs[i], &j, &jl, err);
		if (!rc)
			rc = mk_sw_frame1(w, MK_FT_JOB, j, jl, err);
		free(j);
	}
	if (!rc)
		rc = mk_sw_end(w, err);
	mk_sw_free(w);
	free(head);
	return rc;
}

/* ------------------------------------------------------------ explain */

/* {"name":value,...}, as the JOB frame writes them */
static void format_params(const struct mk_job_params *ps, char *buf, size_t n)
{
	size_t at = (size_t)snprintf(buf, n, "{");

	for (size_t k = 0; k < ps->n && at < n; k++) {
		const struct mk_pval *v = &ps->p[k].value;
		at += (size_t)snprintf(buf + at, n - at, "%s\"%s\":", k ? "," : "", ps->p[k].name);
		if (at >= n)
			break;
		if (!v->set)
			at += (size_t)snprintf(buf + at, n - at, "null");
		else if (v->type == MK_PT_BOOL)
			at += (size_t)snprintf(buf + at, n - at, "%s", v->b ? "true" : "false");
		else if (v->type == MK_PT_INT)
			at += (size_t)snprintf(buf + at, n - at, "%lld", (long long)v->i);
		else
			at += (size_t)snprintf(buf + at, n - at, "%.17g", v->f);
	}
	if (at < n)
		snprintf(buf + at, n - at, "}");
}

int mk_plan_explain(const struct mk_plan *p, char **out, struct mk_err *err)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	fprintf(f, "merge method %s (%s); %zu models; %zu output tensors; %zu files\n", p->method->name,
		p->method->pretty_name, p->nmodels, p->man->ntensors, p->nfiles);
	for (size_t i = 0; i < p->nmodels; i++)
		fprintf(f, "model %zu: %s%s (%s)\n", i, p->models[i].display,
			p->cfg->base_model && mk_model_ref_equal(p->models[i].ref, p->cfg->base_model) ? " [base]" : "",
			p->models[i].m->dir);
	for (size_t k = 0; k < p->njobs; k++) {
		const struct mk_plan_job *j = p->jobs[k];
		const struct mk_manifest_tensor *t = &p->man->tensors[j->output];
		char g[512];
		format_params(&j->global, g, sizeof(g));
		fprintf(f, "\n%s %s [", t->name, mk_dtype_name(t->desc.dtype));
		for (unsigned dd = 0; dd < t->desc.ndim; dd++)
			fprintf(f, "%s%llu", dd ? ", " : "", (unsigned long long)t->desc.shape[dd]);
		/* how the inputs are sent; by default, why one is streamed */
		char sent[160] = "";
		if (j->passes && (j->spill || j->sends == 1 || p->o->budget))
			snprintf(sent, sizeof(sent), "%s", j->spill ? " (replayed from mk-merge's spill file)" :
				 j->sends == 1 ? " (held in memory)" : " (inputs streamed once per pass)");
		else if (j->passes)
			snprintf(sent, sizeof(sent),
				 " (inputs streamed once per pass: over the %.0f MiB a job is held in by default)",
				 (double)p->hold_max / (1 << 20));
		fprintf(f, "]\n  %s, %u statistics pass%s%s, parameters %s\n", j->method, j->passes,
			j->passes == 1 ? "" : "es", sent, g);
		for (size_t i = 0; i < j->ninputs; i++) {
			char ip[512];
			format_params(&j->input_params[i], ip, sizeof(ip));
			char asm_[512] = "";
			if (j->inputs[i].nsources)
				snprintf(asm_, sizeof(asm_), " (%s of %zu tensors)", j->inputs[i].assembly, j->inputs[i].nsources);
			const struct mk_plan_lora *lo = j->inputs[i].lora;
			if (lo) {
				char d[64] = "";
				if (lo->a)
					snprintf(d, sizeof(d), lo->transpose ? " + %.6g·(B·A)ᵀ" : " + %.6g·B·A", lo->scale);
				snprintf(asm_, sizeof(asm_), "%s%s%.400s%s", lo->replace ? " (the adapter's " : "",
					 lo->replace ? lo->replace : "", lo->replace ? ")" : "", d);
			}
			fprintf(f, "  input %zu: %s: %s%s %s%s%s %s\n", i, p->models[j->inputs[i].model].display,
				j->inputs[i].tensor, asm_, mk_dtype_name(j->inputs[i].desc.dtype),
				j->inputs[i].load_dtype != j->inputs[i].desc.dtype ? " as " : "",
				j->inputs[i].load_dtype != j->inputs[i].desc.dtype ? mk_dtype_name(j->inputs[i].load_dtype) : "",
				(long)i == j->base ? "[base]" : (strcmp(ip, "{}") ? ip : ""));
		}
	}
	for (size_t i = 0; i < p->nfiles; i++)
		fprintf(f, "%sfile %s (%zu bytes)\n", i ? "" : "\n", p->files[i].name, p->files[i].len);
	if (fclose(f) != 0) {
		free(buf);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = buf;
	return 0;
}
