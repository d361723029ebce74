/* gguf_card.h - what convert_hf_to_gguf.py (gguf-py's Metadata) takes from
 * a model directory's README.md: the YAML front matter between a first
 * line "---" and the next "---" (its "- no" lines quoted and tabs made two
 * spaces first, as gguf-py does), read as PyYAML's safe_load reads it.
 *
 * Fields, each the first of its keys present: name (name, model_name),
 * author (author, model_author, model_creator), version, organization,
 * description, finetune, basename (basename, model_basename, model_type),
 * size_label, source url / doi / uuid / repo_url (url, model_url, ...),
 * license (a list joined with ","), license_name, license_link; base
 * models (base_model, else base_models, else base_model_sources: a string
 * or a list of strings or mappings; a string "org/Name-v2" becomes name
 * "Name v2", organization "Org", version, repo_url on huggingface.co, an
 * http(s)/ssh URL a repo_url), datasets likewise (datasets, dataset,
 * dataset_sources); tags (tags, then pipeline_tag appended), languages
 * (languages, then language appended).
 *
 * Refused, naming README.md and the key: front matter YAML does not
 * parse, a value convert would fail on (a number, a boolean or a date
 * where text is wanted).
 */
#ifndef MK_GGUF_CARD_H
#define MK_GGUF_CARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mk_err;

enum { MK_GGUF_REF_NAME, MK_GGUF_REF_AUTHOR, MK_GGUF_REF_VERSION, MK_GGUF_REF_ORGANIZATION,
       MK_GGUF_REF_DESCRIPTION, MK_GGUF_REF_URL, MK_GGUF_REF_DOI, MK_GGUF_REF_UUID, MK_GGUF_REF_REPO_URL,
       MK_GGUF_REF_N };

/* A base model or dataset: each field malloc'ed or NULL. */
struct mk_gguf_card_ref {
	char *f[MK_GGUF_REF_N];
};

struct mk_gguf_card {
	char *name, *author, *version, *organization, *description, *finetune, *basename, *size_label;
	char *source_url, *source_doi, *source_uuid, *source_repo_url;
	char *license, *license_name, *license_link;
	bool has_base, has_data, has_tags, has_langs;   /* the key was there (a list, maybe empty) */
	size_t nbase, ndata, ntags, nlangs;
	struct mk_gguf_card_ref *base, *data;
	char **tags, **langs;
	char *text;     /* README.md whole (NUL-terminated), NULL without one */
};

/* Read dir/README.md (none: an empty card); n_params as for
 * mk_gguf_model_id_parse (base model and dataset ids). */
int mk_gguf_card_read(const char *dir, uint64_t n_params, struct mk_gguf_card *c, struct mk_err *err);
void mk_gguf_card_clear(struct mk_gguf_card *c);

#endif
