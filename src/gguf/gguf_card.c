/* gguf_card.c - README.md's front matter as gguf-py reads it
 * (gguf_card.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "gguf/gguf_card.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "core/fsutil.h"
#include "gguf/gguf_meta.h"
#include "mk/err.h"

#define CARD_MAX (64u << 20)

struct rd {
	yaml_document_t doc;
	yaml_node_t *root;
	const char *label;
	uint64_t n_params;
	struct mk_err *err;
};

/* PyYAML's implicit types of a plain scalar (YAML 1.1): what is not a
 * string.  0 string, 1 null, 2 something else (bool, int, float, date). */
static int plain_kind(const char *s)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };
	static const char *const bools[] = { "yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE",
		"false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF" };
	static const char *const pats[] = {
		"[-+]?(0b[0-1_]+|0[0-7_]+|(0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+|[1-9][0-9_]*(:[0-5]?[0-9])+)",
		"[-+]?([0-9][0-9_]*)\\.[0-9_]*([eE][-+][0-9]+)?|\\.[0-9_]+([eE][-+][0-9]+)?"
		"|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)",
		"[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?"
		"([Tt]|[ \\t]+)?([0-9][0-9]?:[0-9][0-9]:[0-9][0-9](\\.[0-9]*)?"
		"([ \\t]*(Z|[-+][0-9][0-9]?(:[0-9][0-9])?))?)?",
	};
	for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
		if (!strcmp(s, nulls[i]))
			return 1;
	for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
		if (!strcmp(s, bools[i]))
			return 2;
	for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
		int e;
		PCRE2_SIZE off;
		pcre2_code *re = pcre2_compile((PCRE2_SPTR)pats[i], PCRE2_ZERO_TERMINATED,
					       PCRE2_ANCHORED | PCRE2_ENDANCHORED, &e, &off, NULL);
		if (!re)
			continue;
		pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
		int rc = md ? pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL) : -1;
		pcre2_match_data_free(md);
		pcre2_code_free(re);
		if (rc >= 0)
			return 2;
	}
	return 0;
}

/* The value of key in a mapping node, NULL when absent. */
static yaml_node_t *map_get(struct rd *r, yaml_node_t *map, const char *key)
{
	yaml_node_t *found = NULL;
	if (!map || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yaml_document_get_node(&r->doc, p->key);
		if (k && k->type == YAML_SCALAR_NODE && strlen(key) == k->data.scalar.length &&
		    !memcmp(k->data.scalar.value, key, k->data.scalar.length))
			found = yaml_document_get_node(&r->doc, p->value);   /* the last one counts */
	}
	return found;
}

/* A scalar's text when it reads as a string: 1 and *out (malloc'ed), 0
 * for null (or NULL n), or an error naming what. */
static int text_of(struct rd *r, yaml_node_t *n, const char *what, char **out)
{
	*out = NULL;
	if (!n)
		return 0;
	if (n->type == YAML_SCALAR_NODE) {
		char *s = strndup((const char *)n->data.scalar.value, n->data.scalar.length);
		if (!s)
			return mk_err_set(r->err, MK_ENOMEM, "out of memory");
		if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
			int k = plain_kind(s);
			if (k == 1) {
				free(s);
				return 0;
			}
			if (k == 2) {
				mk_err_set(r->err, MK_EUNSUPPORTED, "%s: %s is %s, which YAML reads as a number, a "
					   "boolean or a date, not text (convert_hf_to_gguf.py fails on it); quote it",
					   r->label, what, s);
				free(s);
				return -MK_EUNSUPPORTED;
			}
		}
		*out = s;
		return 1;
	}
	return mk_err_set(r->err, MK_EUNSUPPORTED, "%s: %s must be text, not a %s", r->label, what,
			  n->type == YAML_MAPPING_NODE ? "mapping" : "list");
}

/* use_model_card_metadata: the first of keys with a non-null value. */
static int first_text(struct rd *r, const char *const *keys, char **out)
{
	for (; *keys; keys++) {
		if (*out)
			return 0;
		int rc = text_of(r, map_get(r, r->root, *keys), *keys, out);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int push(char ***a, size_t *n, char *s)
{
	char **b = realloc(*a, (*n + 1) * sizeof *b);
	if (!b) {
		free(s);
		return -1;
	}
	b[(*n)++] = s;
	*a = b;
	return 0;
}

/* use_array_model_card_metadata: a string appended, a list extended. */
static int array_add(struct rd *r, const char *key, bool *has, char ***a, size_t *n)
{
	yaml_node_t *v = map_get(r, r->root, key);
	char *s;
	int rc;
	if (!v)
		return 0;
	if (v->type == YAML_SEQUENCE_NODE) {
		*has = true;
		for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
			if ((rc = text_of(r, yaml_document_get_node(&r->doc, *it), key, &s)) < 0)
				return rc;
			if (!rc)
				return mk_err_set(r->err, MK_EUNSUPPORTED, "%s: %s holds an empty item", r->label, key);
			if (push(a, n, s) < 0)
				return mk_err_set(r->err, MK_ENOMEM, "out of memory");
		}
		return 0;
	}
	if ((rc = text_of(r, v, key, &s)) <= 0)
		return rc;
	*has = true;
	if (push(a, n, s) < 0)
		return mk_err_set(r->err, MK_ENOMEM, "out of memory");
	return 0;
}

static int ref_push(struct mk_gguf_card_ref **a, size_t *n)
{
	struct mk_gguf_card_ref *b = realloc(*a, (*n + 1) * sizeof *b);
	if (!b)
		return -1;
	memset(&b[*n], 0, sizeof b[*n]);
	(*n)++;
	*a = b;
	return 0;
}

/* A model or dataset id: its name, organization, version, repo_url. */
static int ref_from_id(struct rd *r, const char *id, struct mk_gguf_card_ref *e, bool with_repo)
{
	struct mk_gguf_model_id m;
	int rc = mk_gguf_model_id_parse(id, r->n_params, &m, r->err);
	if (rc < 0)
		return rc;
	rc = 0;
	if (m.name && !(e->f[MK_GGUF_REF_NAME] = mk_gguf_id_to_title(m.name)))
		rc = -1;
	if (m.org && !(e->f[MK_GGUF_REF_ORGANIZATION] = mk_gguf_id_to_title(m.org)))
		rc = -1;
	if (m.version && !(e->f[MK_GGUF_REF_VERSION] = strdup(m.version)))
		rc = -1;
	if (with_repo && m.org && m.name) {
		size_t l = strlen(m.org) + strlen(m.name) + 32;
		if ((e->f[MK_GGUF_REF_REPO_URL] = malloc(l)))
			snprintf(e->f[MK_GGUF_REF_REPO_URL], l, "https://huggingface.co/%s/%s", m.org, m.name);
		else
			rc = -1;
	}
	mk_gguf_model_id_clear(&m);
	return rc < 0 ? mk_err_set(r->err, MK_ENOMEM, "out of memory") : 0;
}

/* base_model / datasets: keys in the order gguf-py tries them. */
static int refs(struct rd *r, const char *const keys[3], bool *has, struct mk_gguf_card_ref **a, size_t *n)
{
	static const char *const field[MK_GGUF_REF_N] = { "name", "author", "version", "organization",
		"description", "url", "doi", "uuid", "repo_url" };
	yaml_node_t *v = NULL;
	bool any = false;
	for (int i = 0; i < 3; i++)
		any |= map_get(r, r->root, keys[i]) != NULL;
	if (!any)
		return 0;
	*has = true;
	for (int i = 0; i < 3 && !v; i++)
		v = map_get(r, r->root, keys[i]);
	if (!v)
		return 0;
	yaml_node_item_t one = 0, *start, *top;
	if (v->type == YAML_SEQUENCE_NODE) {
		start = v->data.sequence.items.start;
		top = v->data.sequence.items.top;
	} else if (v->type == YAML_SCALAR_NODE) {
		char *s;
		int rc = text_of(r, v, keys[0], &s);
		if (rc <= 0)
			return rc;
		free(s);
		one = (yaml_node_item_t)(v - r->doc.nodes.start + 1);
		start = &one;
		top = &one + 1;
	} else {
		return 0;   /* a mapping: gguf-py takes nothing from it */
	}
	for (yaml_node_item_t *it = start; it < top; it++) {
		yaml_node_t *e = yaml_document_get_node(&r->doc, *it);
		if (ref_push(a, n) < 0)
			return mk_err_set(r->err, MK_ENOMEM, "out of memory");
		struct mk_gguf_card_ref *ref = &(*a)[*n - 1];
		int rc;
		if (e && e->type == YAML_MAPPING_NODE) {
			for (int f = 0; f < MK_GGUF_REF_N; f++) {
				char what[64];
				snprintf(what, sizeof what, "%s's %s", keys[0], field[f]);
				yaml_node_t *fv = map_get(r, e, field[f]);
				if (fv && (rc = text_of(r, fv, what, &ref->f[f])) < 0)
					return rc;
				if (fv && !ref->f[f])
					return mk_err_set(r->err, MK_EUNSUPPORTED, "%s: %s is null (convert fails on it)",
							  r->label, what);
			}
			continue;
		}
		char *id;
		if (!e || e->type != YAML_SCALAR_NODE || (e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
							    plain_kind((const char *)e->data.scalar.value)))
			continue;   /* not a string: gguf-py logs it and keeps an empty entry */
		if (!(id = strndup((const char *)e->data.scalar.value, e->data.scalar.length)))
			return mk_err_set(r->err, MK_ENOMEM, "out of memory");
		if (!strncmp(id, "http://", 7) || !strncmp(id, "https://", 8) || !strncmp(id, "ssh://", 6)) {
			ref->f[MK_GGUF_REF_REPO_URL] = strdup(id);
			/* https?://huggingface.co/ORG/NAME exactly */
			const char *p = !strncmp(id, "http://", 7) ? id + 7 : !strncmp(id, "https://", 8) ? id + 8 : NULL;
			if (strstr(id, "huggingface.co") && p && !strncmp(p, "huggingface.co/", 15)) {
				const char *q = p + 15, *sl = strchr(q, '/');
				if (sl && sl > q && sl[1] && !strchr(sl + 1, '/') && !strchr(sl + 1, '\n') &&
				    (rc = ref_from_id(r, q, ref, false)) < 0) {
					free(id);
					return rc;
				}
			}
		} else if ((rc = ref_from_id(r, id, ref, true)) < 0) {
			free(id);
			return rc;
		}
		free(id);
	}
	return 0;
}

static int card_yaml(const char *text, size_t len, struct rd *r)
{
	yaml_parser_t p;
	if (!yaml_parser_initialize(&p))
		return mk_err_set(r->err, MK_ENOMEM, "out of memory");
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	if (!yaml_parser_load(&p, &r->doc)) {
		int rc = mk_err_set(r->err, MK_EFORMAT, "%s: the front matter is not YAML (%s at line %zu); "
				    "convert_hf_to_gguf.py fails on it", r->label, p.problem ? p.problem : "error",
				    p.problem_mark.line + 2);
		yaml_parser_delete(&p);
		return rc;
	}
	yaml_parser_delete(&p);
	return 1;
}

int mk_gguf_card_read(const char *dir, uint64_t n_params, struct mk_gguf_card *c, struct mk_err *err)
{
	char path[4096];
	struct stat st;
	uint8_t *buf = NULL;
	size_t len = 0;
	int rc;

	memset(c, 0, sizeof *c);
	snprintf(path, sizeof path, "%s/README.md", dir);
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
		return 0;
	if ((rc = mk_file_read(path, CARD_MAX, &buf, &len, err)) < 0)
		return rc;
	c->text = (char *)buf;
	/* the lines between a first "---" and the next; Python's splitlines
	 * (\n, \r\n, \r) */
	const char *p = c->text, *end = c->text + len;
	size_t cap = len + 64, o = 0;
	char *y = NULL;
	bool first = true, open = false;
	while (p < end) {
		const char *e = p;
		while (e < end && *e != '\n' && *e != '\r')
			e++;
		size_t l = (size_t)(e - p);
		if (first) {
			first = false;
			if (l != 3 || memcmp(p, "---", 3))
				break;
			open = true;
			if (!(y = malloc(cap * 2)))
				return mk_err_set(err, MK_ENOMEM, "out of memory");
		} else if (l == 3 && !memcmp(p, "---", 3)) {
			break;
		} else {
			for (size_t i = 0; i < l; i++) {
				if (p[i] == '\t') {
					y[o++] = ' ';
					y[o++] = ' ';
				} else {
					y[o++] = p[i];
				}
			}
			y[o++] = '\n';
		}
		if (e < end && *e == '\r' && e + 1 < end && e[1] == '\n')
			e++;
		p = e < end ? e + 1 : e;
	}
	if (!open)
		return 0;
	if (o == 0)
		y[o++] = '\n';
	y[o] = 0;
	/* the Norway fix: "- no\n" quoted */
	char *z = malloc(2 * o + 2), *w = z;
	if (!z) {
		free(y);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < o; ) {
		if (!strncmp(y + i, "- no\n", 5)) {
			memcpy(w, "- \"no\"\n", 7);
			w += 7;
			i += 5;
		} else {
			*w++ = y[i++];
		}
	}
	*w = 0;
	free(y);
	struct rd r = { .label = path, .n_params = n_params, .err = err };
	rc = card_yaml(z, (size_t)(w - z), &r);
	free(z);
	if (rc < 0)
		return rc;
	r.root = yaml_document_get_root_node(&r.doc);
	if (!r.root || r.root->type != YAML_MAPPING_NODE) {
		yaml_document_delete(&r.doc);
		return 0;   /* gguf-py logs it and takes nothing */
	}
	static const char *const k_name[] = { "name", "model_name", NULL },
		*const k_author[] = { "author", "model_author", "model_creator", NULL },
		*const k_version[] = { "version", "model_version", NULL },
		*const k_org[] = { "organization", "model_organization", NULL },
		*const k_desc[] = { "description", "model_description", NULL },
		*const k_ft[] = { "finetune", "model_finetune", NULL },
		*const k_base[] = { "basename", "model_basename", "model_type", NULL },
		*const k_size[] = { "size_label", "model_size_label", NULL },
		*const k_url[] = { "url", "model_url", NULL }, *const k_doi[] = { "doi", "model_doi", NULL },
		*const k_uuid[] = { "uuid", "model_uuid", NULL },
		*const k_repo[] = { "repo_url", "model_repo_url", NULL },
		*const k_lname[] = { "license_name", NULL }, *const k_llink[] = { "license_link", NULL };
	static const char *const k_bm[3] = { "base_model", "base_models", "base_model_sources" },
		*const k_ds[3] = { "datasets", "dataset", "dataset_sources" };
	if ((rc = first_text(&r, k_name, &c->name)) < 0 || (rc = first_text(&r, k_author, &c->author)) < 0 ||
	    (rc = first_text(&r, k_version, &c->version)) < 0 || (rc = first_text(&r, k_org, &c->organization)) < 0 ||
	    (rc = first_text(&r, k_desc, &c->description)) < 0 || (rc = first_text(&r, k_ft, &c->finetune)) < 0 ||
	    (rc = first_text(&r, k_base, &c->basename)) < 0 || (rc = first_text(&r, k_size, &c->size_label)) < 0 ||
	    (rc = first_text(&r, k_url, &c->source_url)) < 0 || (rc = first_text(&r, k_doi, &c->source_doi)) < 0 ||
	    (rc = first_text(&r, k_uuid, &c->source_uuid)) < 0 ||
	    (rc = first_text(&r, k_repo, &c->source_repo_url)) < 0)
		goto out;
	if ((rc = refs(&r, k_bm, &c->has_base, &c->base, &c->nbase)) < 0 ||
	    (rc = refs(&r, k_ds, &c->has_data, &c->data, &c->ndata)) < 0)
		goto out;
	yaml_node_t *lic = map_get(&r, r.root, "license");
	if (lic && lic->type == YAML_SEQUENCE_NODE) {
		size_t n = 0, tot = 1;
		char **parts = NULL;
		for (yaml_node_item_t *it = lic->data.sequence.items.start; it < lic->data.sequence.items.top; it++) {
			char *s;
			if ((rc = text_of(&r, yaml_document_get_node(&r.doc, *it), "license", &s)) < 0)
				break;
			if (!rc) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: license holds an empty item", path);
				break;
			}
			tot += strlen(s) + 1;
			if (push(&parts, &n, s) < 0) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			rc = 0;
		}
		if (rc >= 0 && (c->license = malloc(tot))) {
			c->license[0] = 0;
			for (size_t i = 0; i < n; i++) {
				if (i)
					strcat(c->license, ",");
				strcat(c->license, parts[i]);
			}
		} else if (rc >= 0) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < n; i++)
			free(parts[i]);
		free(parts);
		if (rc < 0)
			goto out;
	} else if ((rc = text_of(&r, lic, "license", &c->license)) < 0) {
		goto out;
	}
	if ((rc = first_text(&r, k_lname, &c->license_name)) < 0 || (rc = first_text(&r, k_llink, &c->license_link)) < 0)
		goto out;
	if ((rc = array_add(&r, "tags", &c->has_tags, &c->tags, &c->ntags)) < 0 ||
	    (rc = array_add(&r, "pipeline_tag", &c->has_tags, &c->tags, &c->ntags)) < 0 ||
	    (rc = array_add(&r, "languages", &c->has_langs, &c->langs, &c->nlangs)) < 0 ||
	    (rc = array_add(&r, "language", &c->has_langs, &c->langs, &c->nlangs)) < 0)
		goto out;
	rc = 0;
out:
	yaml_document_delete(&r.doc);
	return rc;
}

static void refs_free(struct mk_gguf_card_ref *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (int f = 0; f < MK_GGUF_REF_N; f++)
			free(a[i].f[f]);
	free(a);
}

void mk_gguf_card_clear(struct mk_gguf_card *c)
{
	char **s[] = { &c->name, &c->author, &c->version, &c->organization, &c->description, &c->finetune,
		       &c->basename, &c->size_label, &c->source_url, &c->source_doi, &c->source_uuid,
		       &c->source_repo_url, &c->license, &c->license_name, &c->license_link, &c->text };
	for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
		free(*s[i]);
	refs_free(c->base, c->nbase);
	refs_free(c->data, c->ndata);
	for (size_t i = 0; i < c->ntags; i++)
		free(c->tags[i]);
	free(c->tags);
	for (size_t i = 0; i < c->nlangs; i++)
		free(c->langs[i]);
	free(c->langs);
	memset(c, 0, sizeof *c);
}
