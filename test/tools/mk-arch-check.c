/* mk-arch-check - choose the architecture of a checkpoint from its
 * config.json and resolve every planned weight in it, as mk-plan will.
 *
 *   mk-arch-check [--expect NAME] DIR
 *   mk-arch-check --infer DIR...
 *
 * Prints one line:
 *   file=llama class=LlamaForCausalLM planned=21 name=20 alias=0 tied=1
 *   fused=0 absent-optional=0
 * and one "missing: NAME" line per required weight that does not
 * resolve (exit 1).  --expect NAME fails unless the chosen definition is
 * the file NAME.  --infer prints the inferred definition of the models'
 * tensor names instead (module, section, name, optional, embed). */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"
#include "core/fsutil.h"
#include "io/model.h"

static bool has(void *ctx, const char *name)
{
	return mk_model_find(ctx, name) != NULL;
}

static int die(const char *what, const struct mk_err *err)
{
	fprintf(stderr, "mk-arch-check: %s: %s\n", what, err->msg);
	return 1;
}

static const char **model_names(const struct mk_model *m)
{
	const char **v = calloc(m->ntensors ? m->ntensors : 1, sizeof(*v));

	if (!v)
		abort();
	for (size_t i = 0; i < m->ntensors; i++)
		v[i] = m->tensors[i].t->name;
	return v;
}

static int infer(int n, char **dirs)
{
	struct mk_model **ms = calloc((size_t)n, sizeof(*ms));
	struct mk_arch_names *an = calloc((size_t)n, sizeof(*an));
	struct mk_err err = { 0 };
	struct mk_arch *a = NULL;
	static const char *const sec[] = { "pre", "layer", "post" };

	for (int i = 0; i < n; i++) {
		if (mk_model_open(dirs[i], &ms[i], &err))
			return die(dirs[i], &err);
		an[i].names = model_names(ms[i]);
		an[i].n = ms[i]->ntensors;
	}
	if (mk_arch_infer(an, (size_t)n, &a, &err))
		return die("infer", &err);
	for (size_t m = 0; m < a->nmodules; m++) {
		const struct mk_arch_module *mod = &a->modules[m];
		printf("module %s layers=%" PRId64 "\n", mod->name, mod->override_num_layers);
		for (int s = 0; s < 3; s++) {
			const struct mk_weight *w = s == 0 ? mod->pre : s == 1 ? mod->layer : mod->post;
			size_t k = s == 0 ? mod->npre : s == 1 ? mod->nlayer : mod->npost;
			for (size_t i = 0; i < k; i++)
				printf("  %s %s%s%s%s%s\n", sec[s], w[i].name, w[i].optional ? " optional" : "",
				       w[i].is_embed ? " embed" : "", w[i].ntied ? " tied=" : "",
				       w[i].ntied ? w[i].tied_names[0] : "");
		}
	}
	mk_arch_free(a);
	for (int i = 0; i < n; i++) {
		free((void *)an[i].names);
		mk_model_free(ms[i]);
	}
	free(an);
	free(ms);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "expect", 1, 0, 'e' }, { "infer", 0, 0, 'i' }, { 0 } };
	const char *expect = NULL;
	struct mk_arch_registry *reg = NULL;
	struct mk_hfconfig *hc = NULL;
	struct mk_model *model = NULL;
	struct mk_arch *a = NULL;
	struct mk_weight_list wl = { 0 };
	struct mk_err err = { 0 };
	char *unknown = NULL, path[4096];
	size_t counts[4] = { 0 }, fused = 0, absent = 0, missing = 0, len;
	uint8_t *text;
	bool do_infer = false;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'e': expect = optarg; break;
		case 'i': do_infer = true; break;
		default: return 2;
		}
	}
	if (do_infer && optind < argc)
		return infer(argc - optind, argv + optind);
	if (optind + 1 != argc) {
		fprintf(stderr, "usage: mk-arch-check [--expect NAME] DIR | --infer DIR...\n");
		return 2;
	}
	const char *dir = argv[optind];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	if (mk_file_read(path, 1 << 24, &text, &len, &err) || mk_hfconfig_parse((char *)text, len, path, &hc, &err))
		return die(dir, &err);
	free(text);
	if (mk_arch_registry_open(&reg, &err) || mk_arch_for_config(reg, hc, NULL, &a, &unknown, &err))
		return die(dir, &err);
	if (!a) {
		fprintf(stderr, "mk-arch-check: %s: no architecture definition for %s\n", dir, unknown);
		return 1;
	}
	if (expect && (!a->file || strcmp(a->file, expect))) {
		fprintf(stderr, "mk-arch-check: %s: chose '%s', expected '%s'\n", dir, a->file ? a->file : "?",
			expect);
		return 1;
	}
	int64_t *nl = calloc(a->nmodules, sizeof(*nl));
	for (size_t m = 0; m < a->nmodules; m++)
		if (mk_arch_num_layers(a, m, hc, &nl[m], &err))
			return die(dir, &err);
	if (mk_arch_planned(a, nl, &wl, &err) || mk_model_open(dir, &model, &err))
		return die(dir, &err);
	const char **names = model_names(model);
	for (size_t i = 0; i < wl.n; i++) {
		const struct mk_weight *w = &wl.w[i];
		int how;
		if (mk_weight_resolve(w, has, model, &how)) {
			counts[how]++;
			continue;
		}
		struct mk_fused *f = NULL;
		for (size_t k = 0; !f && k <= w->naliases; k++)
			if (mk_arch_fused(a->model_type, k ? w->aliases[k - 1] : w->name, names, model->ntensors, &f,
					  &err))
				return die(dir, &err);
		if (f) {
			for (size_t s = 0; s < f->nexperts * f->nparts; s++)
				if (!has(model, f->sources[s])) {
					fprintf(stderr, "mk-arch-check: fused source %s missing\n", f->sources[s]);
					return 1;
				}
			fused++;
			mk_fused_free(f);
			continue;
		}
		if (w->optional) {
			absent++;
			continue;
		}
		printf("missing: %s\n", w->name);
		missing++;
	}
	printf("file=%s class=%s planned=%zu name=%zu alias=%zu tied=%zu fused=%zu absent-optional=%zu\n",
	       a->file ? a->file : "?", a->architectures[0], wl.n, counts[0], counts[1], counts[2], fused, absent);
	free(names);
	free(nl);
	mk_model_free(model);
	mk_weight_list_free(&wl);
	mk_arch_free(a);
	mk_hfconfig_free(hc);
	mk_arch_registry_free(reg);
	free(unknown);
	return missing ? 1 : 0;
}
