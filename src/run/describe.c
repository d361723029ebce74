/* describe.c - what bindings ask of libmk without running a merge
 * (run.h): its version, the weights of the architecture a configuration
 * plans, and the model card a configuration's merge writes. */
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"
#include "card/card.h"
#include "config/config.h"
#include "core/blas.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "mk/method.h"
#include "mk/run.h"
#include "planner/planner.h"
#include "run/steps.h"

const char *mk_version(void)
{
	return MK_VERSION;
}

const char *mk_blas_kernels_better(void)
{
	return mk_blas_core_better();
}

/* n bytes of s to the caller's buffer: *len = n, copied with a NUL when
 * it fits (cap > n). */
static void give(const char *s, size_t n, char *buf, size_t cap, size_t *len)
{
	*len = n;
	if (buf && cap > n) {
		memcpy(buf, s, n);
		buf[n] = 0;
	}
}

static void put_str(struct mk_sbuf *b, const char *s)
{
	if (!s)
		mk_sbuf_str(b, "null");
	else
		mk_json_put_ascii_string(b, s, strlen(s));
}

static void put_strv(struct mk_sbuf *b, char *const *v, size_t n)
{
	if (!n) {
		mk_sbuf_str(b, "null");
		return;
	}
	mk_sbuf_str(b, "[");
	for (size_t i = 0; i < n; i++) {
		if (i)
			mk_sbuf_str(b, ", ");
		put_str(b, v[i]);
	}
	mk_sbuf_str(b, "]");
}

/* One section's weights as a JSON list. */
static int put_weights(struct mk_sbuf *b, const struct mk_arch *a, size_t m, enum mk_wsection sec,
		       int64_t nlayers, int64_t layer, struct mk_err *err)
{
	struct mk_weight_list l = { 0 };
	int rc = mk_arch_weights(a, m, sec, nlayers, layer, &l, err);

	if (rc) {
		mk_weight_list_free(&l);
		return rc;
	}
	mk_sbuf_str(b, "[");
	for (size_t i = 0; i < l.n; i++) {
		const struct mk_weight *w = &l.w[i];
		mk_sbuf_str(b, i ? ", {\"name\": " : "{\"name\": ");
		put_str(b, w->name);
		mk_sbuf_fmt(b, ", \"is_embed\": %s, \"optional\": %s, \"aliases\": ", w->is_embed ? "true" : "false",
			    w->optional ? "true" : "false");
		put_strv(b, w->aliases, w->naliases);
		mk_sbuf_str(b, ", \"tied_names\": ");
		put_strv(b, w->tied_names, w->ntied);
		mk_sbuf_str(b, ", \"force_dtype\": ");
		put_str(b, w->force_dtype);
		mk_sbuf_str(b, "}");
	}
	mk_sbuf_str(b, "]");
	mk_weight_list_free(&l);
	return 0;
}

static int describe_arch(struct mk_sbuf *b, const struct mk_arch *a, const struct mk_hfconfig *cfg,
			 struct mk_err *err)
{
	int rc;

	mk_sbuf_str(b, "{\"file\": ");
	put_str(b, a->file);
	mk_sbuf_str(b, ", \"model_type\": ");
	put_str(b, a->model_type);
	mk_sbuf_str(b, ", \"architectures\": ");
	put_strv(b, a->architectures, a->narchitectures);
	mk_sbuf_str(b, ", \"tagalong_files\": ");
	put_strv(b, a->tagalong_files, a->ntagalong);
	mk_sbuf_str(b, ", \"vocab_size_config_key\": ");
	put_str(b, a->vocab_size_key);
	mk_sbuf_fmt(b, ", \"inferred\": %s, \"modules\": [", a->kind == MK_ARCH_INFERRED ? "true" : "false");
	for (size_t m = 0; m < a->nmodules; m++) {
		const struct mk_arch_module *mod = &a->modules[m];
		int64_t n = 0;
		if ((rc = mk_arch_num_layers(a, m, cfg, &n, err)))
			return rc;
		mk_sbuf_str(b, m ? ", {\"name\": " : "{\"name\": ");
		put_str(b, mod->name);
		mk_sbuf_str(b, ", \"weight_prefix\": ");
		put_str(b, mod->weight_prefix);
		mk_sbuf_str(b, ", \"subfolder\": ");
		put_str(b, mod->subfolder);
		mk_sbuf_str(b, ", \"num_layers_config_key\": ");
		put_str(b, mod->num_layers_key);
		mk_sbuf_fmt(b, ", \"num_layers\": %lld, \"pre\": ", (long long)n);
		if ((rc = put_weights(b, a, m, MK_WS_PRE, n, -1, err)))
			return rc;
		mk_sbuf_str(b, ", \"layers\": [");
		for (int64_t i = 0; i < n; i++) {
			if (i)
				mk_sbuf_str(b, ", ");
			if ((rc = put_weights(b, a, m, MK_WS_LAYER, n, i, err)))
				return rc;
		}
		mk_sbuf_str(b, "], \"post\": ");
		if ((rc = put_weights(b, a, m, MK_WS_POST, n, -1, err)))
			return rc;
		mk_sbuf_str(b, "}");
	}
	mk_sbuf_str(b, "]}\n");
	return 0;
}

int mk_arch_describe(const struct mk_run_opts *o, const char *model_config, size_t len, char *buf, size_t cap,
		     size_t *out_len, struct mk_diags *d, struct mk_err *err)
{
	struct mk_run_opts po = *o;
	struct mk_run_step *step = NULL;
	struct mk_hfconfig *given = NULL;
	struct mk_sbuf b = { 0 };
	int rc;

	*out_len = 0;
	/* planned as a step streamed into another: OUT is neither looked at
	 * nor written, nothing but the plan is made */
	po.out_dir = "describe";
	po.resume = false;
	po.no_model_card = true;
	po.cuda = false;
	po.sink = NULL;
	if (model_config && (rc = mk_hfconfig_parse(model_config, len, "config.json", &given, err)))
		return rc;
	rc = mk_run_step_plan(&po, true, NULL, NULL, 0, &step, d, err);
	if (rc) {
		mk_hfconfig_free(given);
		return rc;
	}
	const struct mk_plan *p = mk_run_step_plan_of(step);
	const struct mk_arch *a = mk_plan_arch(p);
	if (!a)
		rc = mk_err_set(err, MK_EINVAL, "%s: the merge has no architecture (state dicts are merged without one)",
				o->label ? o->label : "config");
	else
		rc = describe_arch(&b, a, given ? given : mk_plan_donor_config(p), err);
	if (!rc && b.oom)
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!rc)
		give(b.p, b.n, buf, cap, out_len);
	free(b.p);
	mk_run_step_free(step);
	mk_hfconfig_free(given);
	return rc;
}

int mk_card_generate(const char *config, size_t len, const char *label, const char *yaml, const char *name,
		     char *buf, size_t cap, size_t *out_len, struct mk_err *err)
{
	struct mk_config *cfg = NULL;
	const struct mk_model_ref **refs = NULL;
	const char **paths = NULL, **loras = NULL;
	char *card = NULL;
	size_t n = 0, clen = 0;
	long base = -1;
	int rc;

	*out_len = 0;
	rc = mk_config_parse(config, len, label ? label : "config", &cfg, NULL, err);
	if (!rc)
		rc = mk_config_models(cfg, &refs, &n, err);
	if (rc)
		goto out;
	paths = calloc(n + 1, sizeof(*paths));
	loras = calloc(n + 1, sizeof(*loras));
	if (!paths || !loras) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	/* the models as the planner gives them to the card (plan_files.c) */
	for (size_t i = 0; i < n; i++) {
		paths[i] = refs[i]->model.path;
		loras[i] = refs[i]->lora.path;
		if (base < 0 && cfg->base_model && mk_model_ref_equal(refs[i], cfg->base_model))
			base = (long)i;
	}
	const struct mk_method *m = mk_method_find(cfg->merge_method);
	struct mk_card_input ci = { .name = name, .method = cfg->merge_method,
				    .pretty_name = m ? m->pretty_name : NULL,
				    .reference_url = m ? m->reference_url : NULL, .models = paths, .loras = loras,
				    .nmodels = n, .base_index = base, .config_text = yaml ? yaml : cfg->text };
	rc = mk_card_render(&ci, &card, &clen, err);
	if (!rc)
		give(card, clen, buf, cap, out_len);
out:
	free(card);
	free(paths);
	free(loras);
	free(refs);
	mk_config_free(cfg);
	return rc;
}
