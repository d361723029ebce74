/* plan_models.c - the planner's models: each referenced model opened (its
 * metadata, config.json, architecture and adapter), its files read, and
 * the output's architecture chosen. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/fsutil.h"
#include "planner/planner_impl.h"
#include "planner/quant.h"

#define MAX_FILE (1ull << 30)

/* Read a model's file, which must resolve inside the model (mk_model_path). */
int plan_model_file_read(const struct mk_model *m, const char *name, uint8_t **buf, size_t *len,
			 struct mk_err *err)
{
	char *path;
	int rc = mk_model_path(m, name, &path, err);

	if (!rc)
		rc = mk_file_read(path, MAX_FILE, buf, len, err);
	free(path);
	return rc;
}

bool plan_has_file(const struct pmodel *donor, const char *name)
{
	char path[4096];
	struct stat st;

	/* a name there as something else (a FIFO, a directory) counts: its
	 * read says what it is rather than the file being passed over */
	snprintf(path, sizeof(path), "%s/%s", donor->m->dir, name);
	return stat(path, &st) == 0;
}

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

long plan_model_index(const struct mk_plan *p, const struct mk_model_ref *r)
{
	for (size_t i = 0; i < p->nmodels; i++)
		if (mk_model_ref_equal(p->models[i].ref, r))
			return (long)i;
	return -1;
}

int plan_open_models(struct mk_plan *p, const struct mk_arch_registry *reg, struct mk_diags *d,
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
		if (p->o->raw) {
			/* a state dict: no config.json, its tensors tell */
			if (mk_quant_check(pm->m, NULL, 0, pm->display, &e))
				diag(d, MK_DIAG_ERROR, &refs[i]->loc, "%s", e.msg);
			continue;
		}
		snprintf(path, sizeof(path), "%s/config.json", pm->m->dir);
		if (plan_model_file_read(pm->m, "config.json", (uint8_t **)&pm->hf_text, &pm->hf_len, &e) ||
		    mk_hfconfig_parse(pm->hf_text, pm->hf_len, path, &pm->hf, &e)) {
			diag(d, MK_DIAG_ERROR, &refs[i]->loc, "model '%s': %s", pm->display, e.msg);
			continue;
		}
		/* quantized: block FP8 read dequantized, other formats refused
		 * before anything is planned (quant.h) */
		if (mk_quant_open(pm->m, pm->hf_text, pm->hf_len, pm->display, &pm->quant, &e)) {
			if (e.code == MK_ENOMEM) {
				rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
				break;
			}
			diag(d, MK_DIAG_ERROR, &refs[i]->loc, "%s", e.msg);
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
int plan_choose_arch(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
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
