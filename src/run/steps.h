/* steps.h - merges planned first and run later, some streamed into
 * others (mk-multi --no-intermediates); implemented in threads.c.
 */
#ifndef MK_RUN_STEPS_H
#define MK_RUN_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/run.h"

/* ---- merges streamed into merges (mk-multi --no-intermediates) ----
 *
 * A step is a merge planned and not yet run.  A streamed step writes no
 * OUT: its merge's output (the tensors stream mk-pack would read) goes to
 * the fetch of a step that reads it as a model, through an in-memory
 * channel (mk/chan.h), and that fetch takes the model's tensors from it
 * (mk_fetch_opts.feed_fds) instead of from files.  The steps linked so
 * run at once, each with its own stages and its own budget
 * (o->max_memory; the caller divides the whole between them). */
struct mk_run_step;

/* Plan merge o as mk_run_merge does (OUT refused as it would be, unless
 * streamed), the models named alias_refs[k] opened from alias_dirs[k]
 * (mk_plan_opts).  o is copied; the strings it points to must outlive
 * the step. */
int mk_run_step_plan(const struct mk_run_opts *o, bool streamed, const char *const *alias_refs,
		     const char *const *alias_dirs, size_t naliases, struct mk_run_step **out, struct mk_diags *d,
		     struct mk_err *err);
/* The step's plan (its output manifest, files and jobs: mk_plan_write). */
struct mk_plan;
const struct mk_plan *mk_run_step_plan_of(const struct mk_run_step *s);
void mk_run_step_free(struct mk_run_step *s);

/* A link: steps[from]'s output is the model `ref` (as steps[to]'s plan's
 * model table names it) of steps[to]. */
struct mk_run_link {
	size_t from, to;
	const char *ref;
};

/* Run n steps at once, joined by the links: every streamed step is the
 * `from` of exactly one link, every other step writes its OUT.  When one
 * fails the others see their streams end and stop (no OUT of theirs
 * appears); the error is that of the step that failed first (*failed:
 * its index), prefixed with its stage.  Each step is run once. */
int mk_run_steps(struct mk_run_step *const *steps, size_t n, const struct mk_run_link *links, size_t nlinks,
		 size_t *failed, struct mk_err *err);

#endif
