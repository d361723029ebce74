/* state_dicts.h - mk-pytorch's whole merge: state-dict files merged
 * without an architecture (implemented in threads.c).
 */
#ifndef MK_RUN_STATE_DICTS_H
#define MK_RUN_STATE_DICTS_H

#include "mk/run.h"
#include "planner/planner.h"

/* The same for mk-pytorch(1): a merge of state-dict files without an
 * architecture (mk_plan_opts.raw), what becomes of a tensor some files
 * lack as `missing` says; no tokenizer, config.json or card is written
 * (no_copy_tokenizer and no_model_card do not matter). */
int mk_run_state_dicts(const struct mk_run_opts *o, enum mk_raw_missing missing, struct mk_diags *d,
		       struct mk_err *err);

#endif
