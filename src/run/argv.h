/* argv.h - the stage programs' command lines for a merge's options
 * (mk-yaml --processes and --print-pipeline, mk-moe): what each of
 * mk-plan, mk-fetch, mk-merge and mk-pack is told, so that the stages run
 * as processes do what mk_run_merge does on threads.
 */
#ifndef MK_RUN_ARGV_H
#define MK_RUN_ARGV_H

#include <stddef.h>
#include "mk/err.h"
#include "mk/run.h"

/* A NULL-terminated argument vector grown one copied string at a time;
 * zeroed, it is empty.  The owner frees it with mk_argv_free. */
struct mk_argv {
	char **v;
	size_t n;
};
int mk_argv_push(struct mk_argv *a, const char *s, struct mk_err *err);
void mk_argv_free(struct mk_argv *a);

/* Append to each stage's vector the options that are its own for the
 * run options o, in a fixed order: mk-plan's only when plan is not NULL
 * (mk-moe plans in its own process); the budget as mk_budget_split
 * shares it (merging to plan and merge, reading to fetch, writing to
 * pack); `verbose` extra -v to mk-merge.  Plugins are the caller's. */
int mk_run_stage_args(const struct mk_run_opts *o, unsigned verbose, struct mk_argv *plan,
		      struct mk_argv *fetch, struct mk_argv *merge, struct mk_argv *pack, struct mk_err *err);

#endif
