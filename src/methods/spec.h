/* spec.h - a parameter's name against a method's spec, once: the call
 * that mk-plan's checks of the configuration, the JOB decoder and the
 * in-memory merges (mk/tensors.h) share, so that each stage turns a name
 * into the spec's index in one place and hands the method the values by
 * index (mk_job_desc's form) from there on.  Implemented in method.c.
 */
#ifndef MK_METHODS_SPEC_H
#define MK_METHODS_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/err.h"
#include "mk/method.h"

/* What m has instead of a parameter called `name` (one it lacks), for a
 * message: "did you mean 'density'?" when one of its names is close
 * enough to be a typo (edit distance 1, 2 from 5 letters, 3 from 10: the
 * limits of unknown configuration keys), else "ties's are: weight,
 * density, ..." or "passthrough takes none".  Into buf[len]; returns buf. */
const char *mk_method_param_hint(const struct mk_method *m, const char *name, char *buf, size_t len);

/* Put value v of the parameter called `name` into a job's values in the
 * spec's index: global[nparams] for GLOBAL parameters,
 * input[i * nparams + p] for per-input ones.  `input` is the input it is
 * given for (< ninputs), or -1 for a value given once: a GLOBAL
 * parameter's, or, with `broadcast`, a per-input one's for every input
 * (refused without).  0, or MK_EINVAL with a message naming the parameter
 * and what m has ("linear has no parameter 'wieght' (did you mean
 * 'weight'?)", "parameter 't' is given per input, but slerp's 't' is one
 * value for all inputs"). */
int mk_method_param_put(const struct mk_method *m, const char *name, long input, size_t ninputs,
			bool broadcast, struct mk_pval v, struct mk_pval *global, struct mk_pval *inputs,
			struct mk_err *err);

/* Whether m is one of libmk's unlisted methods (builtin.h): a tool's
 * (mk-extract-lora's), which its own plans name and a merge configuration
 * may not. */
bool mk_method_is_tool(const struct mk_method *m);

/* mk_method_plan for parameters it has resolved already (d->global and
 * d->input as it returned them): the contract, the output rule and the
 * passes, without resolving the values again.  For planning one job
 * twice (mk-plan offers a spare pass, mk_job_desc.spare_pass). */
int mk_method_replan(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po,
		     bool *used, struct mk_err *err);

#endif
