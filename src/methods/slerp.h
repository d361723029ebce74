/* slerp.h - what slerp's apply computes, for kernels outside slerp.c (the
 * GPU).  Internal to libmk. */
#ifndef MK_METHODS_SLERP_H
#define MK_METHODS_SLERP_H

#include "mk/method.h"

/* A float32 slerp job after its pass: per element,
 *   other < 0:  out = in[base]                     (a copy of the base)
 *   otherwise:  p = c0 * in[base], q = c1 * in[other], out = p + q
 * in float32, each product rounded, no fused multiply-add. */
struct mk_slerp_export {
	int base, other;   /* indices in a chunk's in[] */
	float c0, c1;
};

/* Fill *x for a slerp job whose passes are finished; MK_EUNSUPPORTED when
 * it computes in float64 or is not a slerp job, MK_EINVAL before its
 * pass is finished. */
int mk_slerp_export(const struct mk_job *job, struct mk_slerp_export *x, struct mk_err *err);

#endif
