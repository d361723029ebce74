/* config_impl.h - internals shared by the config sources (not installed):
 * freeing and deep-copying the parsed structures. */
#ifndef MK_CONFIG_IMPL_H
#define MK_CONFIG_IMPL_H

#include "mk/config.h"

void mk__loc_clear(struct mk_config_loc *l);
int mk__loc_copy(struct mk_config_loc *dst, const struct mk_config_loc *src);
void mk__pvalue_clear(struct mk_pvalue *v);
void mk__params_clear(struct mk_params *p);
void mk__input_model_clear(struct mk_input_model *m);
void mk__input_slice_clear(struct mk_input_slice *s);
void mk__output_slice_clear(struct mk_output_slice *s);

/* Deep copies; *dst is overwritten.  Return 0 or -MK_ENOMEM (then *dst
 * holds nothing to free). */
int mk__params_copy(struct mk_params *dst, const struct mk_params *src);
int mk__output_slice_copy(struct mk_output_slice *dst,
			  const struct mk_output_slice *src);

/* A model path string "path[@rev]": 0, or -MK_EINVAL with `why` set to a
 * static reason, or -MK_ENOMEM. */
int mk__model_path_parse(const char *s, size_t len, struct mk_model_path *out,
			 const char **why);
void mk__model_path_clear(struct mk_model_path *p);

#endif
