/* st_index.c - parse model.safetensors.index.json. */
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "io/safetensors.h"
#include "core/bug.h"

void mk_st_index_free(struct mk_st_index *idx)
{
	if (!idx)
		return;
	for (size_t i = 0; i < idx->nshards; i++)
		free(idx->shards[i]);
	free(idx->shards);
	for (size_t i = 0; i < idx->nentries; i++)
		free(idx->entries[i].tensor);
	free(idx->entries);
	free(idx);
}

/* A shard must be a plain file name inside the model directory. */
static int shard_name_ok(const char *s)
{
	return s[0] && strcmp(s, ".") && strcmp(s, "..") &&
	       !strchr(s, '/') && !strchr(s, '\\');
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int mk_st_index_parse(const void *buf, size_t len, const char *label,
		      struct mk_st_index **out, struct mk_err *err)
{
	struct mk_st_index *idx = NULL;
	const char **names = NULL;   /* borrowed from the JSON tree */
	json_t *root = NULL, *wm, *val;
	json_error_t jerr;
	const char *key;
	size_t n = 0, u = 0;
	int rc;

	*out = NULL;
	if (!label)
		label = "index";
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: not valid JSON: %s (line %d, "
				"column %d)", label, jerr.text, jerr.line,
				jerr.column);
		goto out;
	}
	if (!json_is_object(root)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: not a JSON object", label);
		goto out;
	}
	wm = json_object_get(root, "weight_map");
	if (!wm || !json_is_object(wm)) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: %s", label, !wm ?
				"no \"weight_map\"" : "\"weight_map\" is not an object");
		goto out;
	}
	json_object_foreach(wm, key, val) {
		if (!json_is_string(val)) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: weight_map: tensor '%s': "
					"shard name is not a string", label, key);
			goto out;
		}
		if (!shard_name_ok(json_string_value(val))) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: weight_map: tensor '%s': "
					"shard name '%s' is not a plain file name in "
					"the model's directory", label, key,
					json_string_value(val));
			goto out;
		}
	}

	n = json_object_size(wm);
	idx = calloc(1, sizeof(*idx));
	names = malloc((n ? n : 1) * sizeof(*names));
	if (!idx || !names)
		goto nomem;
	idx->entries = calloc(n ? n : 1, sizeof(*idx->entries));
	if (!idx->entries)
		goto nomem;
	json_object_foreach(wm, key, val)
		names[u++] = json_string_value(val);
	qsort(names, n, sizeof(*names), cmp_str);
	u = 0;                       /* unique, in place */
	for (size_t i = 0; i < n; i++)
		if (u == 0 || strcmp(names[i], names[u - 1]))
			names[u++] = names[i];
	idx->shards = calloc(u ? u : 1, sizeof(*idx->shards));
	if (!idx->shards)
		goto nomem;
	for (size_t i = 0; i < u; i++) {
		idx->shards[i] = strdup(names[i]);
		if (!idx->shards[i])
			goto nomem;
		idx->nshards++;
	}
	json_object_foreach(wm, key, val) {
		struct mk_st_index_entry *e = &idx->entries[idx->nentries];
		const char *s = json_string_value(val);
		char **hit = bsearch(&s, idx->shards, idx->nshards,
				     sizeof(*idx->shards), cmp_str);

		if (!hit)
			MK_BUG("shard '%s' missing from its own list", s);
		e->tensor = strdup(key);
		if (!e->tensor)
			goto nomem;
		e->shard = (size_t)(hit - idx->shards);
		idx->nentries++;
	}
	*out = idx;
	idx = NULL;
	rc = 0;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "%s: out of memory", label);
out:
	mk_st_index_free(idx);
	free(names);
	json_decref(root);
	return rc;
}
