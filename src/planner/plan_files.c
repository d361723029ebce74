/* plan_files.c - the plan's output files: config.json, README.md and
 * mergekit_config.yml, the tokenizer files (with a chat template or the
 * merged vocabulary written in), the architecture's tagalong files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "card/card.h"
#include "core/jsondoc.h"
#include "planner/planner_impl.h"

extern const struct mk_arch_file mk_template_data[];
extern const size_t mk_template_data_n;

static int add_file(struct mk_plan *p, const char *name, uint8_t *data, size_t len, struct mk_err *err)
{
	struct pfile *v = realloc(p->files, (p->nfiles + 1) * sizeof(*v));

	if (!v) {
		free(data);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	p->files = v;
	v[p->nfiles].name = strdup(name);
	v[p->nfiles].data = data;
	v[p->nfiles].len = len;
	if (!v[p->nfiles].name) {
		free(data);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	p->nfiles++;
	return 0;
}

static int copy_from_donor(struct mk_plan *p, const struct pmodel *donor, const char *name, struct mk_err *err)
{
	uint8_t *buf;
	size_t len;
	int rc = plan_model_file_read(donor->m, name, &buf, &len, err);

	if (rc)
		return rc;
	return add_file(p, name, buf, len, err);
}

/* Length of the white space (Python's str.isspace) that starts s[0..n):
 * 0 when s[0] is none.  UTF-8 is assumed valid (jsondoc checked it). */
static size_t space_len(const unsigned char *s, size_t n)
{
	if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20)))
		return 1;
	if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0))
		return 2;
	if (n >= 3) {
		unsigned cp = (s[0] & 0x0fu) << 12 | (s[1] & 0x3fu) << 6 | (s[2] & 0x3fu);
		if ((s[0] & 0xf0) == 0xe0 &&
		    (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
		     cp == 0x202f || cp == 0x205f || cp == 0x3000))
			return 3;
	}
	return 0;
}

/* t with the white space at both ends removed in place, as Python's
 * str.strip() does (mergekit strips each model's template before it
 * counts them). */
static char *template_strip(char *t)
{
	unsigned char *u = (unsigned char *)t;
	size_t n = strlen(t), a = 0, k, end = 0;

	while ((k = space_len(u + a, n - a)))
		a += k;
	/* the end: after the last character that is not white space */
	for (size_t i = a; i < n;) {
		if ((k = space_len(u + i, n - i))) {
			i += k;
			continue;
		}
		do
			i++;
		while (i < n && (u[i] & 0xc0) == 0x80);
		end = i;
	}
	if (end < a)
		end = a;
	memmove(t, t + a, end - a);
	t[end - a] = 0;
	return t;
}

/* The template named "default" of a list of named templates
 * ([{"name": ..., "template": ...}, ...]: Hermes, Command-R), which
 * transformers reads into a dict, the last of a name counting; NULL when
 * none is named so. */
static char *default_of_named(const struct mk_jsondoc *doc)
{
	size_t list = mk_jsondoc_at(doc, "chat_template");
	char *found = NULL;

	for (size_t e = mk_jsondoc_first(doc, list); e != SIZE_MAX; e = mk_jsondoc_next(doc, e)) {
		size_t nm = mk_jsondoc_get(doc, e, "name"), tm = mk_jsondoc_get(doc, e, "template");
		char *name = mk_jsondoc_type(doc, nm) == MK_JSON_STRING ? mk_jsondoc_node_string(doc, nm, NULL) : NULL;

		if (name && !strcmp(name, "default") && mk_jsondoc_type(doc, tm) == MK_JSON_STRING) {
			free(found);
			found = mk_jsondoc_node_string(doc, tm, NULL);
		}
		free(name);
	}
	return found;
}

/* A model's own chat template, as mergekit's chat_template auto counts
 * it: what transformers loads (its chat_template.jinja, else the
 * "chat_template" of its tokenizer_config.json, from a list of named
 * templates the one named "default"), left out when empty, stripped of
 * white space at both ends (malloc'ed; NULL when it has none).  A file
 * that cannot be read or parsed is said, at the config's chat_template
 * key. */
static char *model_chat_template(const struct pmodel *pm, struct mk_diags *d, const struct mk_config_loc *loc)
{
	struct mk_err e = { 0 };
	struct mk_jsondoc *doc = NULL;
	uint8_t *buf;
	size_t len;
	char *t = NULL;

	if (plan_has_file(pm, "chat_template.jinja")) {
		if (plan_model_file_read(pm->m, "chat_template.jinja", &buf, &len, &e)) {
			diag(d, MK_DIAG_WARNING, loc, "chat_template auto: %s; its template is not counted", e.msg);
			return NULL;
		}
		t = (char *)buf;
		goto out;
	}
	if (!plan_has_file(pm, "tokenizer_config.json"))
		return NULL;
	if (plan_model_file_read(pm->m, "tokenizer_config.json", &buf, &len, &e)) {
		diag(d, MK_DIAG_WARNING, loc, "chat_template auto: %s; its template is not counted", e.msg);
		return NULL;
	}
	if (mk_jsondoc_parse((const char *)buf, len, "tokenizer_config.json", &doc, &e) == 0) {
		enum mk_json_type ty;
		if (mk_jsondoc_find(doc, "chat_template", &ty) == 0 && ty == MK_JSON_STRING)
			t = mk_jsondoc_string(doc, "chat_template", NULL);
		else if (mk_jsondoc_find(doc, "chat_template", &ty) == 0 && ty == MK_JSON_ARRAY) {
			if (!(t = default_of_named(doc)))
				diag(d, MK_DIAG_WARNING, loc,
				     "chat_template auto: model '%s': none of its named chat templates is named 'default'; not counted",
				     pm->display);
		} else if (mk_jsondoc_find(doc, "chat_template", &ty) == 0 && ty != MK_JSON_NULL)
			diag(d, MK_DIAG_WARNING, loc,
			     "chat_template auto: model '%s': its tokenizer_config.json's chat_template is neither a string nor a list of named templates; not counted",
			     pm->display);
		mk_jsondoc_free(doc);
	} else {
		diag(d, MK_DIAG_WARNING, loc, "chat_template auto: model '%s': %s; its template is not counted", pm->display,
		     e.msg);
	}
	free(buf);
out:
	if (t && !*t) {  /* an empty template counts as none */
		free(t);
		return NULL;
	}
	return t ? template_strip(t) : NULL;
}


/* config.json's text without its "quantization_config" (replaced). */
static int drop_quantization_config(char **text, size_t *len, struct mk_err *err)
{
	struct mk_jsondoc *d;
	char *out;
	size_t n;
	int rc = mk_jsondoc_parse(*text, *len, "config.json", &d, err);

	if (rc)
		return rc;
	if (!mk_jsondoc_at(d, "quantization_config")) {
		mk_jsondoc_free(d);
		return 0;
	}
	rc = mk_jsondoc_remove(d, "quantization_config", err);
	if (!rc)
		rc = mk_jsondoc_write(d, &out, &n, err);
	mk_jsondoc_free(d);
	if (rc)
		return rc;
	free(*text);
	*text = out;
	*len = n;
	return 0;
}

/* The chat template asked for: a built-in name, "auto" (the most common
 * among the inputs' templates, chat_template.jinja or tokenizer_config.json,
 * first seen on a tie), or a literal template.  Returns malloc'ed text or NULL (auto, none found). */
static char *chat_template_text(struct mk_plan *p, struct mk_diags *d)
{
	const char *ct = p->cfg->chat_template;
	char name[256];

	if (strcmp(ct, "auto")) {
		snprintf(name, sizeof(name), "%s.jinja", ct);
		for (size_t i = 0; i < mk_template_data_n; i++)
			if (!strcmp(mk_template_data[i].name, name))
				return strdup((const char *)mk_template_data[i].data);
		if (!strstr(ct, "{{") && !strstr(ct, "{%"))
			diag(d, MK_DIAG_WARNING, &p->cfg->chat_template_loc,
			     "chat_template '%s' is not a built-in name (alpaca, chatml, exaone, llama3, mistral); using it as a literal template",
			     ct);
		return strdup(ct);
	}
	/* auto */
	char **seen = calloc(p->nmodels + 1, sizeof(*seen));
	size_t *count = calloc(p->nmodels + 1, sizeof(*count)), nseen = 0, best = 0;
	char *out = NULL;
	for (size_t i = 0; seen && count && i < p->nmodels; i++) {
		char *tmpl = model_chat_template(&p->models[i], d, &p->cfg->chat_template_loc);
		size_t k;
		if (!tmpl)
			continue;
		for (k = 0; k < nseen; k++)
			if (!strcmp(seen[k], tmpl))
				break;
		if (k == nseen)
			seen[nseen++] = tmpl;
		else
			free(tmpl);
		count[k]++;
	}
	for (size_t k = 0; k < nseen; k++)
		if (count[k] > count[best])
			best = k;
	if (nseen)
		out = strdup(seen[best]);
	for (size_t k = 0; k < nseen; k++)
		free(seen[k]);
	free(seen);
	free(count);
	if (!out)
		diag(d, MK_DIAG_WARNING, &p->cfg->chat_template_loc,
		     "chat_template auto: no input model has a chat template; none written");
	return out;
}

static const char *const tokenizer_files[] = {
	"tokenizer_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer.model",
	"added_tokens.json", "vocab.json", "merges.txt", "vocab.txt", "chat_template.jinja",
	"generation_config.json", "chat_template.json", "video_preprocessor_config.json", NULL,
};

int plan_make_files(struct mk_plan *p, const int64_t *out_layers, bool layers_changed, struct mk_diags *d,
		    struct mk_err *err)
{
	const struct pmodel *donor = &p->models[0]; /* the base, else the first model */
	const char *dtname = p->cfg->out_dtype.name ? p->cfg->out_dtype.canonical :
			     p->cfg->dtype.name ? p->cfg->dtype.canonical : NULL;
	char *text = NULL, *warn = NULL;
	size_t len;
	int rc;

	/* no dtype asked for: when the merged tensors all came out in one
	 * float dtype other than the donor's (a bfloat16 base and a float32
	 * model promote to float32), config.json says so, as mergekit's
	 * does */
	if (!dtname && p->man) {
		enum mk_dtype out = MK_DT_COUNT, was = MK_DT_COUNT;
		const char *dn = NULL, *canon = NULL;
		bool one = true;
		for (size_t i = 0; i < p->man->ntensors && one; i++) {
			enum mk_dtype t = p->man->tensors[i].desc.dtype;
			if (!mk_dtype_is_float(t))
				continue;
			one = out == MK_DT_COUNT || out == t;
			out = t;
		}
		if ((!mk_hfconfig_str(donor->hf, "dtype", &dn, NULL) || !mk_hfconfig_str(donor->hf, "torch_dtype", &dn, NULL)) &&
		    dn)
			(void)mk_config_dtype_parse(dn, &was, NULL, NULL);
		if (one && out != MK_DT_COUNT && was != MK_DT_COUNT && out != was)
			canon = out == MK_DT_F32 ? "float32" : out == MK_DT_BF16 ? "bfloat16" :
				out == MK_DT_F16 ? "float16" : out == MK_DT_F64 ? "float64" : NULL;
		dtname = canon;
	}
	/* config.json */
	rc = mk_hfconfig_edit(donor->hf_text, donor->hf_len, "config.json", p->arch, dtname, donor->ref->override_arch,
			    layers_changed ? out_layers : NULL, p->tok ? (int64_t)p->tok_rows : -1, &text, &len, &warn, err);
	/* layers of several kinds: the kinds they came out with */
	if (!rc && p->out_kinds && out_layers && out_layers[0] >= 0 && (size_t)out_layers[0] == p->nout_kinds)
		rc = mk_hfconfig_set_layer_kinds(p->arch, p->out_kinds, p->nout_kinds, &text, &len, err);
	if (rc) {
		free(text);
		free(warn);
		return rc;
	}
	if (warn) {
		diag(d, MK_DIAG_WARNING, NULL, "config.json: %s", warn);
		free(warn);
	}
	/* a quantized donor's weights are written dequantized: its
	 * quantization_config goes, as transformers' save of the model
	 * loaded with dequantize=True */
	if (donor->quant && (rc = drop_quantization_config(&text, &len, err))) {
		free(text);
		return rc;
	}
	/* (kept in the HEAD, for mk-pack --quantize fp8: plan_requant.c) */
	if ((rc = plan_mark_requant(p, donor, err))) {
		free(text);
		return rc;
	}
	rc = add_file(p, "config.json", (uint8_t *)text, len, err);
	if (rc)
		return rc;
	/* README.md and the configuration as given */
	if (p->o->write_card) {
		const char **paths = calloc(p->nmodels + 1, sizeof(*paths));
		const char **loras = calloc(p->nmodels + 1, sizeof(*loras));
		bool *local = calloc(p->nmodels + 1, sizeof(*local));
		long base = -1;
		if (!paths || !loras || !local) {
			free(paths);
			free(loras);
			free(local);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < p->nmodels; i++) {
			paths[i] = p->models[i].ref->model.path;
			loras[i] = p->models[i].ref->lora.path;
			for (size_t k = 0; k < p->o->naliases; k++)
				local[i] |= !strcmp(p->models[i].refstr, p->o->alias_refs[k]);
			if (p->cfg->base_model && mk_model_ref_equal(p->models[i].ref, p->cfg->base_model))
				base = (long)i;
		}
		struct mk_card_input ci = { .name = p->o->out_name, .method = p->method->name,
					    .pretty_name = p->method->pretty_name,
					    .reference_url = p->method->reference_url, .models = paths,
					    .loras = loras, .nmodels = p->nmodels, .base_index = base,
					    .config_text = p->cfg->text, .local = local };
		rc = mk_card_render(&ci, &p->card, &len, err);
		free(paths);
		free(loras);
		free(local);
		if (rc)
			return rc;
		uint8_t *copy = malloc(len + 1), *yml = malloc(p->cfg->len + 1);
		if (!copy || !yml) {
			free(copy);
			free(yml);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		memcpy(copy, p->card, len);
		memcpy(yml, p->cfg->text, p->cfg->len);
		rc = add_file(p, "README.md", copy, len, err);
		if (!rc)
			rc = add_file(p, "mergekit_config.yml", yml, p->cfg->len, err);
		else
			free(yml);
		if (rc)
			return rc;
	}
	/* tokenizer files from the donor: the tokenizer source's model
	 * (plan_build_tokenizer), else the base or the first model */
	donor = &p->models[p->tok_donor];
	if (p->o->copy_tokenizer) {
		/* a vocabulary in any of the layouts transformers loads (mergekit
		 * writes a tokenizer whenever AutoTokenizer loads one); its files
		 * are copied as they are */
		bool ok = plan_has_file(donor, "tokenizer.json") || plan_has_file(donor, "tokenizer.model") ||
			  (plan_has_file(donor, "vocab.json") && plan_has_file(donor, "merges.txt")) ||
			  plan_has_file(donor, "vocab.txt");
		char *tmpl = p->cfg->chat_template ? chat_template_text(p, d) : NULL;
		bool newvocab = p->tok && (p->tok->nnew || p->tok->strip_at >= 0);
		if (newvocab && !plan_has_file(donor, "tokenizer.json") && !plan_has_file(donor, "tokenizer_config.json"))
			return mk_err_set(err, MK_EUNSUPPORTED,
					  "model '%s' has neither tokenizer.json nor tokenizer_config.json to write the merged vocabulary's new tokens into",
					  donor->display);
		if (!ok)
			diag(d, MK_DIAG_WARNING, &p->cfg->merge_method_loc,
			     "model '%s' has no tokenizer (no tokenizer.json, tokenizer.model, vocab.json with merges.txt, or vocab.txt): the output has none",
			     donor->display);
		/* the template in chat_template.jinja, as mergekit writes it
		 * (transformers 5's save_pretrained), the donor's replaced */
		if (ok && tmpl) {
			char *t = strdup(tmpl);
			rc = t ? add_file(p, "chat_template.jinja", (uint8_t *)t, strlen(t), err) :
				 mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		for (size_t k = 0; ok && tokenizer_files[k] && !rc; k++) {
			if (!plan_has_file(donor, tokenizer_files[k]))
				continue;
			if (tmpl && !strcmp(tokenizer_files[k], "chat_template.jinja")) {
				continue; /* written above */
			} else if (newvocab && !strcmp(tokenizer_files[k], "tokenizer.json")) {
				/* the merged vocabulary: the donor's file, tokens added or cut */
				char path[4096];
				uint8_t *buf;
				size_t blen, slen = 0;
				char *out = NULL;
				snprintf(path, sizeof(path), "%s/tokenizer.json", donor->m->dir);
				rc = plan_model_file_read(donor->m, "tokenizer.json", &buf, &blen, err);
				if (rc)
					break;
				rc = mk_tokmerge_tokenizer_json(p->tok, (const char *)buf, blen, path, &out, &slen, err);
				free(buf);
				if (!rc)
					rc = add_file(p, "tokenizer.json", (uint8_t *)out, slen, err);
				if (rc)
					break;
			} else if (newvocab && !strcmp(tokenizer_files[k], "added_tokens.json")) {
				continue; /* a slow tokenizer's list, stale for the new vocabulary */
			} else if ((tmpl || newvocab) && !strcmp(tokenizer_files[k], "tokenizer_config.json")) {
				/* the added tokens set, a "chat_template" removed (the
				 * template is in chat_template.jinja), the rest kept */
				char path[4096];
				uint8_t *buf;
				size_t blen;
				snprintf(path, sizeof(path), "%s/tokenizer_config.json", donor->m->dir);
				rc = plan_model_file_read(donor->m, "tokenizer_config.json", &buf, &blen, err);
				if (rc)
					break;
				/* the keys changed, every other byte kept */
				struct mk_jsondoc *doc = NULL;
				char *q = NULL, *s = NULL;
				size_t slen = 0;
				rc = mk_jsondoc_parse((const char *)buf, blen, path, &doc, err);
				free(buf);
				if (!rc && mk_jsondoc_root_type(doc) != MK_JSON_OBJECT)
					rc = mk_err_set(err, MK_EFORMAT, "%s: not a JSON object (a tokenizer_config.json holds one)",
							path);
				if (!rc && newvocab)
					rc = mk_tokmerge_edit_config(p->tok, doc, err);
				if (!rc)
					rc = mk_jsondoc_write(doc, &s, &slen, err);
				if (!rc && tmpl) {
					/* removed from the text with the edits made */
					mk_jsondoc_free(doc);
					doc = NULL;
					q = s;
					s = NULL;
					if (!(rc = mk_jsondoc_parse(q, slen, path, &doc, err)) &&
					    !(rc = mk_jsondoc_remove(doc, "chat_template", err)))
						rc = mk_jsondoc_write(doc, &s, &slen, err);
				}
				free(q);
				mk_jsondoc_free(doc);
				if (!rc)
					rc = add_file(p, "tokenizer_config.json", (uint8_t *)s, slen, err);
				if (rc)
					break;
			} else {
				rc = copy_from_donor(p, donor, tokenizer_files[k], err);
			}
		}
		free(tmpl);
	} else if (p->cfg->chat_template) {
		diag(d, MK_DIAG_WARNING, &p->cfg->chat_template_loc,
		     "chat_template is set but --no-copy-tokenizer: no template is written (as mergekit)");
	}
	/* the architecture's tagalong files */
	for (size_t k = 0; !rc && k < p->arch->ntagalong; k++) {
		bool dup = false;
		for (size_t f = 0; f < p->nfiles; f++)
			dup |= !strcmp(p->files[f].name, p->arch->tagalong_files[k]);
		if (!dup && plan_has_file(donor, p->arch->tagalong_files[k]))
			rc = copy_from_donor(p, donor, p->arch->tagalong_files[k], err);
	}
	return rc;
}
