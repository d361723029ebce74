/* card.h - the README.md model card mergekit writes for a merge.
 *
 * Layout (mergekit's, byte for byte): YAML front matter (base_model: the
 * referenced models that look like hub repos, library_name, tags), a
 * title, an intro sentence, "Merge Details" with the method (linked to its
 * reference when it has one) and " using <base> as a base" unless the
 * method is slerp, the models merged (one bullet each, the base left out
 * when it was named as the base), and the YAML configuration verbatim.
 */
#ifndef MK_CARD_H
#define MK_CARD_H

#include <stdbool.h>
#include <stddef.h>
#include "mk/err.h"

struct mk_card_input {
	const char *name;          /* title; NULL or "" gives mergekit's default */
	const char *method;        /* merge_method id, e.g. "slerp" */
	const char *pretty_name;   /* for methods unknown to the card table; may be NULL */
	const char *reference_url; /* likewise */
	const char *const *models; /* every referenced model's path in plan order
				    * (base first when set), without revisions */
	const char *const *loras;  /* per model: LoRA path or NULL; array may be NULL */
	size_t nmodels;
	long base_index;           /* index in models[] of the base_model, or -1 */
	const char *config_text;   /* the YAML as given */
	const bool *local;         /* per model: a local directory, whatever the
				    * file system says (a merge that mk-multi
				    * streams, not written); NULL: none */
};

/* Does a model path look like a hub repo id?  mergekit's offline rule:
 * not starting with '/' or '~', at most one '/', and not an existing
 * local path. */
bool mk_card_looks_like_hub(const char *path);

/* The title mergekit uses for an output path: its basename, or
 * "Untitled Model (1)" when that is empty (e.g. a trailing slash).
 * Returns a pointer into `out_path` or to a static string. */
const char *mk_card_title(const char *out_path);

/* Render the card; *out is malloc'ed and NUL-terminated. */
int mk_card_render(const struct mk_card_input *in, char **out, size_t *len,
		   struct mk_err *err);

/* A LoRA adapter's card (mk-extract-lora's; mergekit-extract-lora's
 * layout byte for byte): front matter (the two models' hub repos, peft),
 * the title, where the adapter was extracted from and its base, a warning
 * when the vocabulary sizes differ, and the command line. */
struct mk_card_lora {
	const char *name;          /* title; NULL or "": mergekit's default */
	const char *base, *base_lora;   /* the base's path (its adapter's, or NULL) */
	const char *model, *model_lora; /* the fine-tune's */
	const char *invocation;    /* the command line */
	unsigned long long base_vocab, final_vocab;   /* 0: unknown */
};
int mk_card_render_lora(const struct mk_card_lora *in, char **out, size_t *len, struct mk_err *err);

#endif
