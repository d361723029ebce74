/* argv.c - the stage programs' command lines for a merge (argv.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/budget.h"
#include "mk/dtype.h"
#include "run/argv.h"

int mk_argv_push(struct mk_argv *a, const char *s, struct mk_err *err)
{
	char **q = realloc(a->v, (a->n + 2) * sizeof(*a->v));

	if (!q)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	a->v = q;
	if (!(a->v[a->n] = strdup(s))) {
		a->v[a->n] = NULL;
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	a->v[++a->n] = NULL;
	return 0;
}

void mk_argv_free(struct mk_argv *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	*a = (struct mk_argv){ 0 };
}

/* "OPT VALUE" onto a (a NULL: nothing), VALUE printed from a number */
static int push_num(struct mk_argv *a, const char *opt, unsigned long long v, struct mk_err *err)
{
	char b[32];
	int rc;

	if (!a)
		return 0;
	snprintf(b, sizeof(b), "%llu", v);
	if ((rc = mk_argv_push(a, opt, err)))
		return rc;
	return mk_argv_push(a, b, err);
}

/* OPT (and VALUE, when not NULL) onto a when `when` */
static int push_if(struct mk_argv *a, bool when, const char *opt, const char *value, struct mk_err *err)
{
	int rc;

	if (!a || !when)
		return 0;
	if ((rc = mk_argv_push(a, opt, err)))
		return rc;
	return value ? mk_argv_push(a, value, err) : 0;
}

int mk_run_stage_args(const struct mk_run_opts *o, unsigned verbose, struct mk_argv *plan,
		      struct mk_argv *fetch, struct mk_argv *merge, struct mk_argv *pack, struct mk_err *err)
{
	int rc = 0;

	if (o->out_shard_size)
		rc = push_num(pack, "--out-shard-size", o->out_shard_size, err);
	if (!rc)
		rc = push_if(plan, o->no_copy_tokenizer, "--no-copy-tokenizer", NULL, err);
	if (!rc)
		rc = push_if(plan, o->no_model_card, "--no-write-model-card", NULL, err);
	if (!rc)
		rc = push_if(plan, o->allow_crimes, "--allow-crimes", NULL, err);
	if (!rc && o->seed)
		rc = push_num(plan, "--random-seed", o->seed, err);
	if (!rc)
		rc = push_if(plan, o->has_lora_dtype, "--lora-merge-dtype", mk_dtype_name(o->lora_dtype), err);
	if (!rc)
		rc = push_if(plan, o->unsafe_truncate_embeddings, "--unsafe-truncate-embeddings", NULL, err);
	if (!rc)
		rc = push_if(merge, o->cuda, "--cuda", NULL, err);
	if (!rc)
		rc = push_if(merge, o->strict, "--strict", NULL, err);
	if (!rc)
		rc = push_if(pack, o->buffered, "--buffered", NULL, err);
	if (!rc)
		rc = push_if(pack, o->quantize != NULL, "--quantize", o->quantize, err);
	if (!rc && o->threads)
		rc = push_num(merge, "-j", o->threads, err);
	for (unsigned i = 0; !rc && i < verbose; i++)
		rc = mk_argv_push(merge, "-v", err);
	if (!rc && o->max_memory) {
		struct mk_budget_split bs;
		mk_budget_split(o->max_memory, &bs);
		rc = push_num(plan, "--max-memory", bs.merge, err);
		if (!rc)
			rc = push_num(merge, "--max-memory", bs.merge, err);
		if (!rc)
			rc = push_num(fetch, "--max-memory", bs.fetch, err);
		if (!rc)
			rc = push_num(pack, "--max-memory", bs.pack, err);
	}
	if (!rc)
		rc = push_if(plan, o->spill_dir, "--spill", NULL, err);
	if (!rc)
		rc = push_if(merge, o->spill_dir, "--spill", o->spill_dir, err);
	if (!rc)
		rc = push_if(fetch, o->remote, "--remote", NULL, err);
	if (!rc)
		rc = push_if(fetch, o->no_cache, "--no-cache", NULL, err);
	if (!rc)
		rc = push_if(pack, o->force, "--force", NULL, err);
	return rc;
}
