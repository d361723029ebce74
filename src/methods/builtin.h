/* builtin.h - the merge methods built into libmk, each a struct
 * mk_method (mk/method.h) that the registry (method.c) lists.
 */
#ifndef MK_METHODS_BUILTIN_H
#define MK_METHODS_BUILTIN_H

#include "mk/method.h"

/* Each in src/methods/<name>.c; task_arithmetic, ties, dare_*, della* and
 * breadcrumbs* in gta.c. */
extern const struct mk_method mk_method_linear;
extern const struct mk_method mk_method_passthrough;
extern const struct mk_method mk_method_slerp;
extern const struct mk_method mk_method_task_arithmetic;
extern const struct mk_method mk_method_nuslerp;
extern const struct mk_method mk_method_multislerp;
extern const struct mk_method mk_method_karcher;
extern const struct mk_method mk_method_ties;
extern const struct mk_method mk_method_dare_linear;
extern const struct mk_method mk_method_dare_ties;
extern const struct mk_method mk_method_della;
extern const struct mk_method mk_method_della_linear;
extern const struct mk_method mk_method_breadcrumbs;
extern const struct mk_method mk_method_breadcrumbs_ties;
extern const struct mk_method mk_method_model_stock;
extern const struct mk_method mk_method_nearswap;
extern const struct mk_method mk_method_arcee_fusion;
extern const struct mk_method mk_method_sce;
extern const struct mk_method mk_method_ram;
extern const struct mk_method mk_method_ramplus_tl;

/* Unlisted: found by name (mk_method_find), not counted or listed, not
 * suggested for a misspelt name; their names are taken.  A tool's
 * methods, which its plans name and merge configurations cannot (they
 * make several outputs a job): mk-extract-lora's, in lora_extract.c, and
 * its bias deltas' (FT - BASE), in delta.c. */
extern const struct mk_method mk_method_lora_extract;
extern const struct mk_method mk_method_delta;

#endif
