/* multi_steps.h - mk-multi's steps run: in order, one by one, or the steps
 * that read each other streamed into one another (implemented in
 * run/multi_steps.c; the recipe itself is multi/multi.h).
 */
#ifndef MK_RUN_MULTI_STEPS_H
#define MK_RUN_MULTI_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/diag.h"
#include "mk/err.h"
#include "mk/run.h"
#include "multi/multi.h"

/* Whether out_dir holds a finished merge, as mergekit-multi's --lazy
 * decides: config.json and any of model.safetensors, pytorch_model.bin
 * or their index files. */
bool mk_multi_done(const char *out_dir);

/* How a step is made (mk_multi_run_opts.on_step). */
enum mk_multi_how {
	MK_MULTI_SKIPPED,         /* --lazy: its output is finished */
	MK_MULTI_MERGING,         /* merged into its output directory */
	MK_MULTI_STREAMING,       /* streamed into the step that reads it
				     (unless a later note says otherwise) */
	MK_MULTI_NOT_NEEDED,      /* streaming and --lazy: every step that
				     reads it (through others) is skipped */
};

struct mk_multi_run_opts {
	/* a step whose output is finished (mk_multi_done) is skipped;
	 * otherwise an existing output is replaced */
	bool lazy;
	/* --no-intermediates: a named step that one step reads (by its name
	 * alone), whose reader is not skipped, is streamed into that reader
	 * instead of written to DIR/NAME, where the reader's plan can take it
	 * so (mk_fetch_feed_check); otherwise it is written, and on_note says
	 * why.  A chain A -> B -> C streams every link that can be.  With
	 * lazy too, a named step whose readers are all skipped (and theirs,
	 * and so on) is not made either: its output is not wanted. */
	bool stream;
	/* told as each step is planned (i: its index in m->steps) */
	void (*on_step)(void *ctx, const struct mk_multi_step *s, size_t i, enum mk_multi_how how);
	/* why a step is written after all (one line), or NULL */
	void (*on_note)(void *ctx, const char *msg);
	void *ctx;
};

/* Run the steps in order, each with the options in *base (its text,
 * label and out_dir replaced).  Without streaming, each with
 * mk_run_merge in turn.  With it, a streamed step is planned first,
 * described to the step that reads it (config.json, its other files and
 * a safetensors header of its output tensors, in a scratch directory
 * under $TMPDIR that is removed at the end; no tensor byte), that step
 * planned against the description, and every step of a chain then runs
 * at once (mk_run_steps), each with base->max_memory divided by the
 * number of steps in its chain; DIR/NAME of a streamed step is neither
 * written nor touched.  The first failure stops the run: its step's
 * diagnostics in *d, err prefixed with the step's name (a failure in a
 * chain: no OUT of the chain appears). */
int mk_multi_run(const struct mk_multi *m, const struct mk_run_opts *base, const struct mk_multi_run_opts *ro,
		 struct mk_diags *d, struct mk_err *err);

/* Streaming and --lazy: unneeded[i] is true when step i is named, read
 * by others, not finished (done[i] false), and every step reading it is
 * finished or itself unneeded.  Arrays of m->nsteps. */
void mk_multi_unneeded(const struct mk_multi *m, const bool *done, bool *unneeded);

/* The streamability of the recipe's links, before anything is planned:
 * cand[i] is true when step i may be streamed into the one step that
 * reads it (user[i]); group[i] the number of steps of the chain it
 * would run in (1 for a step on its own).  done[i]: its output is
 * finished and lazy skips it (NULL: none is).  Arrays of m->nsteps. */
void mk_multi_stream_plan(const struct mk_multi *m, bool lazy, const bool *done, bool *cand, size_t *user,
			  size_t *group);

#endif
