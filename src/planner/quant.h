/* quant.h - quantized checkpoints: read dequantized, or refused at plan
 * time.
 *
 * Block-scaled FP8 (config.json's quantization_config with quant_method
 * "fp8" and a weight_block_size, as DeepSeek-V3/R1, Kimi K2 and the
 * Qwen3 FP8 models ship) is read: a weight NAME.weight stored F8_E4M3
 * beside NAME.weight_scale_inv (float32, one per block) is planned as
 * its dequantized tensor, in the model's dtype (its config.json's
 * "dtype" or "torch_dtype", else BF16), as transformers loads it with
 * dequantize=True; mk-fetch dequantizes it while it reads (the JOB's
 * "quant", mk-stream(5)).  Which weights are quantized follows the
 * checkpoint: those with scales (the modules_to_not_convert are stored
 * unquantized and have none).  Experts stored one by one, each block FP8
 * with its own scales (DeepSeek-V3/R1, Kimi K2), are assembled into the
 * fused tensors dequantized: the JOB's "quant" names one scale tensor
 * per source ("scales"); every source of an assembly is quantized or
 * none is.
 *
 * MXFP4 (quant_method "mxfp4", as gpt-oss ships its experts) is read
 * too: a weight NAME the model stores as NAME_blocks (U8 [E, R, C/32,
 * 16], two FP4 codes a byte) and NAME_scales (U8 [E, R, C/32], E8M0) is
 * planned as its dequantized tensor [E, C, R] (the stored matrices
 * transposed, as transformers dequantizes them), in the model's dtype as
 * above; the JOB's input is NAME_blocks as F4 of that shape, with "quant"
 * {"kind": "mxfp4"}.
 *
 * Every other format is refused: a quantized checkpoint stores integers
 * or 8-bit (or narrower) floats beside the scales that give them their
 * values (bitsandbytes, GPTQ, AWQ, compressed-tensors, MXFP4, HQQ, EETQ,
 * per-tensor FP8, ...): merged as if they were weights, they make a model
 * that loads and is wrong.  Such a checkpoint is refused (mk_quant_check;
 * mk-moe refuses block FP8 too), by its config.json's quantization_config (or
 * compression_config, also under text_config), or, where config.json
 * says nothing (or there is none: a state dict), by its tensors: one in
 * an FP8, F4, F6, U8 or I8 dtype beside tensors named as the scales of
 * such formats (*_scale_inv, *_scale, *_scales, *_blocks, .qweight,
 * .absmax, .SCB, ...).  (mergekit merges the stored bytes as numbers.)
 * (MXFP4 only with transformers' names, ending _blocks and _scales.)
 */
#ifndef MK_QUANT_H
#define MK_QUANT_H

#include <stddef.h>
#include "mk/dtype.h"
#include "mk/err.h"

struct mk_model;
struct mk_quant;
struct mk_plan_quant;

/* 0, or an error naming the model (`display`), the format and what to do.
 * config: its config.json's text (NULL: none). */
int mk_quant_check(const struct mk_model *m, const char *config, size_t config_len, const char *display,
		   struct mk_err *err);

/* A model's quantization as mk reads it: 0 with *out NULL (not
 * quantized), 0 with *out (block FP8), or mk_quant_check's error. */
int mk_quant_open(const struct mk_model *m, const char *config, size_t config_len, const char *display,
		  struct mk_quant **out, struct mk_err *err);
void mk_quant_free(struct mk_quant *q);
/* The dtype its weights are dequantized to. */
enum mk_dtype mk_quant_dtype(const struct mk_quant *q);
/* Weight `name`, absent from m, stored MXFP4 as name_blocks: that
 * tensor's name (m's), and *desc F4 of the dequantized shape [E, C, R]
 * (or, where the blocks are not [E, R, G, 16], their own desc, which
 * mk_quant_find refuses); NULL where q is not MXFP4 or there is none. */
const char *mk_quant_packed(const struct mk_quant *q, const struct mk_model *m, const char *name,
			    struct mk_tensor_desc *desc);
/* Whether tensor `name` of m is stored quantized: *out (malloc'ed, for
 * the JOB's input) or NULL; an error where it is F8_E4M3 without scales
 * of the config's blocks (MXFP4: `name` a *_blocks tensor without its
 * U8 scales).  q NULL: never. */
int mk_quant_find(const struct mk_quant *q, const struct mk_model *m, const char *name, const char *display,
		  struct mk_plan_quant **out, struct mk_err *err);

#endif
