/* st_index.c - parse model.safetensors.index.json, in one pass with
 * the JSON scanner (core/jsonscan.c): the tensor names go into one arena of the text's
 * size, and besides it each entry costs 32 bytes while it is parsed (its
 * text takes 8 or more). */
#include <stdlib.h>
#include <string.h>
#include "io/safetensors.h"
#include "core/bug.h"
#include "st_impl.h"

void mk_st_index_free(struct mk_st_index *idx)
{
	if (!idx)
		return;
	for (size_t i = 0; i < idx->nshards; i++)
		free(idx->shards[i]);
	free(idx->shards);
	free(idx->entries);
	free(idx->strings);
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

/* weight_map's members: entries (tensor names in the arena at *off) and
 * their shard names (names[i], in the arena too). */
static int read_map(struct mk_jscan *j, struct mk_st_index *idx, const char ***names, size_t *off,
		    const char *label, struct mk_err *err)
{
	size_t cap = 0, kl, vl;
	bool first = true;
	int more;

	if (mk_jscan_peek(j) != '{')
		return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: \"weight_map\" is not an object", label);
	j->p++;
	while ((more = mk_jscan_more(j, '}', &first)) == 1) {
		char *key = idx->strings + *off, *val;
		if (mk_jscan_string(j, key, &kl) < 0 || mk_jscan_expect(j, ':') < 0)
			return j->rc;
		if (mk_jscan_peek(j) != '"')
			return mk_jscan_at_end(j) ?: mk_err_set(err, MK_EFORMAT, "%s: weight_map: tensor '%s': "
					  "shard name is not a string", label, key);
		val = key + kl + 1;
		if (mk_jscan_string(j, val, &vl) < 0)
			return j->rc;
		if (!shard_name_ok(val))
			return mk_err_set(err, MK_EFORMAT, "%s: weight_map: tensor '%s': "
					  "shard name '%s' is not a plain file name in "
					  "the model's directory", label, key, val);
		if (idx->nentries == cap) {
			size_t nc = cap ? 2 * cap : 64;
			struct mk_st_index_entry *e = realloc(idx->entries, nc * sizeof(*e));
			const char **nm = e ? realloc(*names, nc * sizeof(*nm)) : NULL;
			if (e)
				idx->entries = e;
			if (!nm)
				return mk_err_set(err, MK_ENOMEM, "%s: out of memory", label);
			*names = nm;
			cap = nc;
		}
		idx->entries[idx->nentries].tensor = key;
		(*names)[idx->nentries++] = val;
		*off += kl + 1 + vl + 1;
	}
	return more;
}

int mk_st_index_parse(const void *buf, size_t len, const char *label,
		      struct mk_st_index **out, struct mk_err *err)
{
	struct mk_st_index *idx = NULL;
	const char **names = NULL;   /* each entry's shard, in the arena */
	const char **sorted = NULL;
	struct mk_jscan j = { .what = "index", .err = err };
	size_t off = 0, u = 0, n, bad, kl;
	bool first = true, have_map = false;
	int rc, more;

	*out = NULL;
	if (!label)
		label = "index";
	j.label = label;
	j.start = j.p = buf;
	j.end = j.start + len;
	if ((bad = mk__st_utf8_check(buf, len)) != len) {
		j.p = j.start + bad;
		rc = mk_jscan_fail(&j, "bad UTF-8");
		goto out;
	}
	idx = calloc(1, sizeof(*idx));
	if (!idx || !(idx->strings = malloc(len + 1)))
		goto nomem;
	if (mk_jscan_peek(&j) != '{') {
		rc = mk_jscan_peek(&j) < 0 ? mk_jscan_fail(&j, "no value") :
					   mk_err_set(err, MK_EFORMAT, "%s: not a JSON object", label);
		goto out;
	}
	j.p++;
	while ((more = mk_jscan_more(&j, '}', &first)) == 1) {
		char *key = idx->strings + off;
		if (mk_jscan_string(&j, key, &kl) < 0 || mk_jscan_expect(&j, ':') < 0)
			goto json;
		if (strcmp(key, "weight_map")) {
			if (mk_jscan_skip(&j) < 0)
				goto json;
			continue;
		}
		if (have_map) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: duplicate object key 'weight_map'", label);
			goto out;
		}
		have_map = true;
		if ((rc = read_map(&j, idx, &names, &off, label, err)) < 0)
			goto out;
	}
	if ((rc = mk_jscan_finish(&j, more)) < 0)
		goto out;
	if (!have_map) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: no \"weight_map\"", label);
		goto out;
	}
	n = idx->nentries;
	/* a tensor twice */
	sorted = malloc((n ? n : 1) * sizeof(*sorted));
	if (!sorted)
		goto nomem;
	for (size_t i = 0; i < n; i++)
		sorted[i] = idx->entries[i].tensor;
	qsort(sorted, n, sizeof(*sorted), cmp_str);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(sorted[i], sorted[i - 1])) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: weight_map: duplicate object key '%s'", label,
					sorted[i]);
			goto out;
		}
	/* the shards: sorted, unique */
	for (size_t i = 0; i < n; i++)
		sorted[i] = names[i];
	qsort(sorted, n, sizeof(*sorted), cmp_str);
	for (size_t i = 0; i < n; i++)
		if (u == 0 || strcmp(sorted[i], sorted[u - 1]))
			sorted[u++] = sorted[i];
	idx->shards = calloc(u ? u : 1, sizeof(*idx->shards));
	if (!idx->shards || (!idx->entries && !(idx->entries = malloc(sizeof(*idx->entries)))))
		goto nomem;
	for (size_t i = 0; i < u; i++) {
		idx->shards[i] = strdup(sorted[i]);
		if (!idx->shards[i])
			goto nomem;
		idx->nshards++;
	}
	for (size_t i = 0; i < n; i++) {
		char **hit = bsearch(&names[i], idx->shards, idx->nshards, sizeof(*idx->shards), cmp_str);

		if (!hit)
			MK_BUG("shard '%s' missing from its own list", names[i]);
		idx->entries[i].shard = (size_t)(hit - idx->shards);
	}
	*out = idx;
	idx = NULL;
	rc = 0;
	goto out;
json:
	rc = j.rc;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "%s: out of memory", label);
out:
	mk_st_index_free(idx);
	free(names);
	free(sorted);
	return rc;
}
