/* quant.h - quantized checkpoints, refused at plan time.
 *
 * mk merges weights stored as numbers (F32, F16, BF16, ...).  A quantized
 * checkpoint stores integers or 8-bit (or narrower) floats beside the
 * scales that give them their values (FP8 with block scales, as
 * DeepSeek-V3 ships; bitsandbytes, GPTQ, AWQ, compressed-tensors, MXFP4,
 * HQQ, EETQ, ...): merged as if they were weights, they make a model that
 * loads and is wrong.  Until mk reads a format correctly, every such
 * checkpoint is refused, by its config.json's quantization_config (or
 * compression_config, also under text_config), or, where config.json
 * says nothing (or there is none: a state dict), by its tensors: one in
 * an FP8, F4, F6, U8 or I8 dtype beside tensors named as the scales of
 * such formats (*_scale_inv, *_scale, *_scales, *_blocks, .qweight,
 * .absmax, .SCB, ...).  As mergekit, which has the same limitation.
 */
#ifndef MK_QUANT_H
#define MK_QUANT_H

#include <stddef.h>
#include "mk/err.h"

struct mk_model;

/* 0, or an error naming the model (`display`), the format and what to do.
 * config: its config.json's text (NULL: none). */
int mk_quant_check(const struct mk_model *m, const char *config, size_t config_len, const char *display,
		   struct mk_err *err);

#endif
