/* arch_impl.h - helpers shared by the src/arch files (not public). */
#ifndef MK_ARCH_IMPL_H
#define MK_ARCH_IMPL_H

#include "arch/arch.h"
#include "core/sbuf.h"  /* mk_strv_free, mk_strv_eq, mk_str_eq */

char *mk_xstrdup(const char *s);                 /* NULL stays NULL */
void mk_weight_clear(struct mk_weight *w);       /* free contents, zero */
/* Deep copy; -1 on allocation failure (dst left empty). */
int mk_weight_copy(struct mk_weight *dst, const struct mk_weight *src);
/* Append a copy of w to l (takes nothing); -1 on allocation failure. */
int mk_weight_list_push(struct mk_weight_list *l, const struct mk_weight *w);
/* The parsed JSON tree of a config (json_t *, borrowed). */
void *mk_hfconfig_json(const struct mk_hfconfig *c);
const char *mk_hfconfig_label(const struct mk_hfconfig *c);

/* Fill a->kinds from the config for the classes whose layers differ in
 * kind (a->kind, class and model_type already set); nothing for others. */
int mk_arch_read_kinds(struct mk_arch *a, const struct mk_hfconfig *cfg, struct mk_err *err);

#endif
