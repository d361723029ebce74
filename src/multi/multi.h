/* multi.h - mk-multi: a multi-document YAML recipe of merges, the later
 * ones reading the earlier ones' outputs (mergekit-multi's format).
 *
 * Each document is a merge configuration (mk-config(5)) with an optional
 * top-level `name`.  A named document's merge goes to DIR/NAME (the
 * intermediate directory); at most one document has no name, the final
 * merge, which goes to OUT.  A model reference whose path is a document's
 * name (base_model, models, slice sources, tokenizer sources, token
 * embedding sources) reads that merge's output: the path becomes
 * DIR/NAME, the revision, adapter and architecture kept.  Those
 * references are the dependencies; the steps run in an order where each
 * comes after the merges it reads (depth first, in document order), and
 * a cycle is an error.
 *
 * mk_multi_parse finds every mistake of the recipe it can before a merge
 * runs: YAML errors, a name that is not a string or not one path
 * component, a duplicate name, a second unnamed document, an unnamed
 * one without OUT, a cycle, and each document's own configuration
 * mistakes (mk_config_parse), all with the file's line and column.
 */
#ifndef MK_MULTI_H
#define MK_MULTI_H

#include <stdbool.h>
#include <stddef.h>
#include "config/config.h"
#include "mk/err.h"

struct mk_multi_step {
	char *name;               /* NULL: the unnamed final merge */
	char *out_dir;            /* DIR/NAME, or OUT */
	/* the document's text from its first line, `name` taken out and
	 * every reference to a step rewritten to its output directory: what
	 * the merge plans (and mergekit_config.yml holds) */
	char *text;
	char *label;              /* "FILE[NAME]" for the plan's messages;
				     their lines count from the document's
				     first line (first_line) */
	unsigned first_line;      /* the document's first line in the file */
	size_t ndeps;
	size_t *deps;             /* indices (in steps) of the merges it reads */
	size_t nusers;            /* the steps that read this one */
	/* every reference to it is its name alone (no revision, adapter or
	 * architecture): it may be streamed (mk_multi_run_opts.stream) */
	bool plain_refs;
};

struct mk_multi {
	size_t nsteps;
	struct mk_multi_step *steps;  /* in the order they run */
};

/* Parse recipe `text` (label names it in messages).  dir: the
 * intermediate directory; out: OUT, or NULL (then an unnamed document is
 * an error).  Diagnostics (errors and warnings, in file order) in *d
 * (the caller frees with mk_diags_free); with errors returns -MK_EINVAL
 * and *out = NULL. */
int mk_multi_parse(const char *text, size_t len, const char *label, const char *dir, const char *out,
		   struct mk_multi **m, struct mk_diags *d, struct mk_err *err);
void mk_multi_free(struct mk_multi *m);

#endif
