/* lora.h - a PEFT LoRA adapter as mk-plan reads it (internal to src/plan):
 * its adapter_config.json and its tensors' names and shapes, checked
 * against the base model, turned into one entry per base weight the
 * adapter changes. */
#ifndef MK_PLAN_LORA_H
#define MK_PLAN_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/err.h"
#include "io/model.h"

struct mk_lora_ent {
	char *target;                /* the base weight ("model.layers.0.self_attn.q_proj.weight") */
	char *a, *b;                 /* LoRA: the adapter's A and B tensors; NULL: a replacement */
	char *replace;               /* modules_to_save: the adapter's tensor that replaces it */
	char *magnitude;             /* DoRA (use_dora): the module's lora_magnitude_vector */
	char *bias;                  /* lora_bias: lora_B.bias, added to the target, a bias */
	double scale;                /* alpha / r, or alpha / sqrt(r) with use_rslora */
	bool transpose;              /* delta (B·A)ᵀ: fan_in_fan_out or an embedding */
	bool embedding;              /* lora_embedding_A/B */
	bool tied;                   /* a change of lm_head, which the base ties
					to the input embedding (target) */
};

struct mk_lora {
	struct mk_model *m;          /* the adapter's weights (mk_model_open_adapter) */
	size_t n;
	struct mk_lora_ent *v;       /* sorted by target */
};

/* Open adapter `ref` (a directory or Hub repo with adapter_config.json and
 * adapter_model.safetensors or .bin) for base model `base` and check it
 * whole: a LoRA or DoRA (not another PEFT type, no bias training but
 * lora_B's), every tensor a lora_A/lora_B (or lora_embedding_A/B) pair,
 * its DoRA magnitude or lora_B bias, or a modules_to_save weight, each
 * pair of the rank its rank_pattern (or r) says, mapping onto a
 * 2-dimensional weight of the base of the right shape.  A LoRA of lm_head
 * on a base whose lm_head is its tied input embedding (no lm_head.weight)
 * changes the embedding, as PEFT's merge does; where the adapter changes
 * the embedding itself too (an extracted adapter's LoRA or saved copy of
 * both), the one tied weight takes the embedding's change alone (PEFT's
 * merge adds both to it: mk-compat(7)); a saved lm_head alone would untie
 * them and is refused.  `name` names the adapter in messages. */
int mk_lora_open(const char *ref, const char *name, const struct mk_model *base, struct mk_lora **out,
		 struct mk_err *err);
/* The entry for base weight `target`, or NULL. */
const struct mk_lora_ent *mk_lora_find(const struct mk_lora *l, const char *target);
void mk_lora_free(struct mk_lora *l);

#endif
