/* card_text.h - the fixed text of mergekit's model cards (a merge's, a
 * LoRA adapter's), carried verbatim (interface data: README.md must match
 * mergekit's byte for byte).  Origin and licence: see NOTICE beside this
 * file. */
#ifndef MK_CARD_TEXT_H
#define MK_CARD_TEXT_H

#define CARD_FM_LIBRARY "library_name: transformers\n"
#define CARD_FM_TAGS "tags:\n- mergekit\n- merge\n"
#define CARD_INTRO \
	"This is a merge of pre-trained language models created using " \
	"[mergekit](https://github.com/cg123/mergekit).\n"
#define CARD_DETAILS "## Merge Details\n### Merge Method\n\n"
#define CARD_METHOD_PRE "This model was merged using the "
#define CARD_METHOD_POST " merge method"
#define CARD_BASE_PRE " using "
#define CARD_BASE_POST " as a base"
#define CARD_MODELS "### Models Merged\n\nThe following models were included in the merge:\n"
#define CARD_CONFIG \
	"### Configuration\n\nThe following YAML configuration was used to produce this model:\n\n```yaml\n"
#define CARD_UNTITLED "Untitled Model (1)"
#define CARD_HUB_URL "https://huggingface.co/"

/* A LoRA adapter's card (mk-extract-lora's, as mergekit-extract-lora's) */
#define CARD_LORA_FM "library_name: peft\ntags:\n- mergekit\n- peft\n"
#define CARD_LORA_UNTITLED "Untitled LoRA Model (1)"
#define CARD_LORA_INTRO \
	"This is a LoRA extracted from a language model. It was extracted using " \
	"[mergekit](https://github.com/arcee-ai/mergekit).\n\n## LoRA Details\n\n"
#define CARD_LORA_FROM "This LoRA adapter was extracted from "
#define CARD_LORA_USES " and uses "
#define CARD_LORA_BASE " as a base."
#define CARD_LORA_WARN "\n\n [!WARNING]\n> The vocabulary size has been %s from the base model's %llu to %llu. " \
	"To load this adapter, you must first call `model.resize_token_embeddings(%llu)`."
#define CARD_LORA_PARAMS \
	"\n\n### Parameters\n\nThe following command was used to extract this LoRA adapter:\n\n```sh\n"

/* method id, pretty name, reference URL (NULL: none) */
#define CARD_METHODS \
	X("linear", "Linear", "https://arxiv.org/abs/2203.05482") \
	X("slerp", "SLERP", "https://en.wikipedia.org/wiki/Slerp") \
	X("nuslerp", "NuSLERP", NULL) \
	X("passthrough", "Passthrough", NULL) \
	X("model_stock", "Model Stock", "https://arxiv.org/abs/2403.19522") \
	X("arcee_fusion", "Arcee Fusion", "https://arcee.ai") \
	X("karcher", "Karcher Mean", "https://arxiv.org/abs/2603.04972") \
	X("task_arithmetic", "Task Arithmetic", "https://arxiv.org/abs/2212.04089") \
	X("ties", "TIES", "https://arxiv.org/abs/2306.01708") \
	X("dare_ties", "DARE TIES", "https://arxiv.org/abs/2311.03099") \
	X("dare_linear", "Linear DARE", "https://arxiv.org/abs/2311.03099") \
	X("breadcrumbs", "Model Breadcrumbs", "https://arxiv.org/abs/2312.06795") \
	X("breadcrumbs_ties", "Model Breadcrumbs with TIES", "https://arxiv.org/abs/2312.06795") \
	X("della", "DELLA", "https://arxiv.org/abs/2406.11617") \
	X("della_linear", "Linear DELLA", "https://arxiv.org/abs/2406.11617") \
	X("multislerp", "Multi-SLERP", "https://goddard.blog/posts/multislerp-wow-what-a-cool-idea") \
	X("nearswap", "NearSwap", "https://huggingface.co/alchemonaut/QuartetAnemoi-70B-t0.0001") \
	X("ram", "Reinforced Agent Merging", "https://arxiv.org/abs/2601.13572") \
	X("ramplus_tl", "Reinforced Agent Merging Plus (Tensor-Local)", "https://arxiv.org/abs/2601.13572") \
	X("sce", "SCE", "https://arxiv.org/abs/2408.07990")

#endif
