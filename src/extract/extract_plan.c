/* extract_plan.c - mk_extract_plan: the extraction as a configuration
 * mk's planner reads (lora_extract over the base and the fine-tune, the
 * rank options as its parameters) and the planner's extraction mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config.h"
#include "core/sbuf.h"
#include "cuda/cuda.h"
#include "extract/extract.h"
#include "planner/planner.h"

/* A YAML double-quoted scalar of s. */
static void put_quoted(struct mk_sbuf *b, const char *s)
{
	mk_sbuf_add(b, "\"", 1);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\')
			mk_sbuf_fmt(b, "\\%c", *c);
		else if (*c < 0x20 || *c == 0x7f)
			mk_sbuf_fmt(b, "\\x%02x", *c);
		else
			mk_sbuf_add(b, c, 1);
	}
	mk_sbuf_add(b, "\"", 1);
}

static int config_text(const struct mk_extract_opts *o, bool cuda, char **out, size_t *len, struct mk_err *err)
{
	struct mk_sbuf b = { 0 };

	mk_sbuf_fmt(&b, "merge_method: lora_extract\nbase_model: ");
	put_quoted(&b, o->base);
	mk_sbuf_fmt(&b, "\nmodels:\n  - model: ");
	put_quoted(&b, o->model);
	mk_sbuf_fmt(&b, "\nparameters:\n  max_rank: %u\n  sv_epsilon: %.17g\n  energy: %.17g\n  rel_sigma: %.17g\n"
		       "  distribute_scale: %s\n  randomized: %s\n", o->max_rank, o->sv_epsilon, o->energy, o->rel_sigma,
		       o->no_distribute_scale ? "false" : "true", o->randomized ? "true" : "false");
	if (o->oversample)
		mk_sbuf_fmt(&b, "  oversample: %u\n", o->oversample);
	if (o->power_iters)
		mk_sbuf_fmt(&b, "  power_iters: %u\n", o->power_iters);
	if (cuda)
		mk_sbuf_fmt(&b, "  cuda: true\n");
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*len = b.n;
	*out = b.p;
	return 0;
}

int mk_extract_plan(const struct mk_extract_opts *o, struct mk_plan **out, struct mk_diags *d,
		    struct mk_err *err)
{
	char *text = NULL;
	size_t len = 0;
	int rc;

	*out = NULL;
	memset(d, 0, sizeof(*d));
	if (!o->max_rank)
		return mk_err_set(err, MK_EINVAL, "--max-rank must be at least 1");
	/* --cuda: the randomized SVD's products on the GPU, when there is one */
	const char *why = NULL;
	bool cuda = o->cuda && mk_cuda_available(&why);
	if ((rc = config_text(o, cuda, &text, &len, err)))
		return rc;
	struct mk_plan_opts po = { .label = "mk-extract-lora", .text = text, .len = len, .seed = 0,
				   .budget = o->budget, .has_lora_dtype = o->has_lora_dtype,
				   .lora_dtype = o->lora_dtype, .extract = &o->sel };
	rc = mk_plan_build(&po, out, d, err);
	free(text);
	/* the configuration is mk's own: its places mean nothing to a user */
	free(d->label);
	d->label = NULL;
	for (size_t i = 0; i < d->n; i++) {
		d->v[i].line = d->v[i].col = 0;
		if (d->v[i].path)
			d->v[i].path[0] = '\0';
	}
	if (o->cuda && !cuda)
		mk_diags_add(d, MK_DIAG_WARNING, 0, 0, NULL, "--cuda: %s: the SVDs run on the CPU",
			     why ? why : "no usable CUDA device");
	if (rc && d->nerrors)
		mk_err_set(err, MK_EINVAL, "%zu error%s", d->nerrors, d->nerrors == 1 ? "" : "s");
	return rc;
}
