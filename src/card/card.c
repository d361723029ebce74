/* card.c - render the README.md model card (layout: card_text.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "card_text.h"
#include "card/card.h"
#include "core/sbuf.h"

bool mk_card_looks_like_hub(const char *path)
{
	struct stat st;
	size_t slashes = 0;

	if (!path || !path[0] || path[0] == '/' || path[0] == '~')
		return false;
	for (const char *c = path; *c; c++)
		slashes += *c == '/';
	if (slashes > 1)
		return false;
	/* mergekit asks the hub about a path that also exists locally; offline,
	 * an existing local path is local */
	return stat(path, &st) != 0;
}

const char *mk_card_title(const char *out_path)
{
	const char *s;

	if (!out_path)
		return CARD_UNTITLED;
	s = strrchr(out_path, '/');
	s = s ? s + 1 : out_path;
	return *s ? s : CARD_UNTITLED;
}

/* A string as PyYAML's dump writes it: plain when that reads back as the
 * same string, else single-quoted. */
static void yaml_scalar(struct mk_sbuf *b, const char *s)
{
	static const char *const special[] = { "", "~", "null", "Null", "NULL", "true", "True", "TRUE",
					       "false", "False", "FALSE", "yes", "Yes", "YES", "no", "No",
					       "NO", "on", "On", "ON", "off", "Off", "OFF", "y", "Y", "n", "N" };
	bool quote = false;
	size_t n = strlen(s);
	char *end;

	for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
		if (!strcmp(s, special[i]))
			quote = true;
	if (!quote && n) {
		strtod(s, &end);
		if (*end == '\0')
			quote = true; /* reads back as a number */
		if (strchr("-?:,[]{}#&*!|>'\"%@`", s[0]) || s[0] == ' ' || s[n - 1] == ' ' ||
		    strstr(s, ": ") || strstr(s, " #") || s[n - 1] == ':')
			quote = true;
		for (const char *c = s; *c; c++)
			if ((unsigned char)*c < 0x20)
				quote = true;
	}
	if (!quote) {
		mk_sbuf_str(b, s);
		return;
	}
	mk_sbuf_add(b, "'", 1);
	for (const char *c = s; *c; c++) {
		mk_sbuf_add(b, c, 1);
		if (*c == '\'')
			mk_sbuf_add(b, "'", 1); /* '' is a quote inside single quotes */
	}
	mk_sbuf_add(b, "'", 1);
}

static void ref_md(struct mk_sbuf *b, const char *path, bool local)
{
	if (!local && mk_card_looks_like_hub(path)) {
		mk_sbuf_add(b, "[", 1);
		mk_sbuf_str(b, path);
		mk_sbuf_str(b, "](" CARD_HUB_URL);
		mk_sbuf_str(b, path);
		mk_sbuf_add(b, ")", 1);
	} else {
		mk_sbuf_str(b, path);
	}
}

static void model_md(struct mk_sbuf *b, const struct mk_card_input *in, size_t i)
{
	ref_md(b, in->models[i], in->local && in->local[i]);
	if (in->loras && in->loras[i]) {
		mk_sbuf_str(b, " + ");
		ref_md(b, in->loras[i], false);
	}
}

int mk_card_render(const struct mk_card_input *in, char **out, size_t *len,
		   struct mk_err *err)
{
	struct mk_sbuf b = { 0 };
	const char *pretty = in->pretty_name, *url = in->reference_url;
	long base = in->base_index;
	size_t nhub = 0, nbullets = 0;

#define X(id, pn, u) \
	if (!strcmp(in->method, id)) { \
		pretty = pn; \
		url = u; \
	}
	CARD_METHODS
#undef X
	/* slerp lists its base among the models (mergekit's rule) */
	if (!strcmp(in->method, "slerp"))
		base = -1;
	/* front matter: yaml.dump of {base_model, library_name, tags}, sorted */
	mk_sbuf_str(&b, "---\n");
	for (size_t i = 0; i < in->nmodels; i++) {
		nhub += !(in->local && in->local[i]) && mk_card_looks_like_hub(in->models[i]);
		nhub += in->loras && in->loras[i] && mk_card_looks_like_hub(in->loras[i]);
	}
	if (!nhub) {
		mk_sbuf_str(&b, "base_model: []\n");
	} else {
		mk_sbuf_str(&b, "base_model:\n");
		for (size_t i = 0; i < in->nmodels; i++) {
			const char *two[2] = { in->models[i], in->loras ? in->loras[i] : NULL };
			bool local[2] = { in->local && in->local[i], false };
			for (int k = 0; k < 2; k++)
				if (two[k] && !local[k] && mk_card_looks_like_hub(two[k])) {
					mk_sbuf_str(&b, "- ");
					yaml_scalar(&b, two[k]);
					mk_sbuf_add(&b, "\n", 1);
				}
		}
	}
	mk_sbuf_str(&b, CARD_FM_LIBRARY CARD_FM_TAGS);
	mk_sbuf_str(&b, "\n---\n# ");
	mk_sbuf_str(&b, in->name && in->name[0] ? in->name : CARD_UNTITLED);
	mk_sbuf_str(&b, "\n\n" CARD_INTRO "\n" CARD_DETAILS CARD_METHOD_PRE);
	if (url && url[0]) {
		mk_sbuf_add(&b, "[", 1);
		mk_sbuf_str(&b, pretty ? pretty : in->method);
		mk_sbuf_str(&b, "](");
		mk_sbuf_str(&b, url);
		mk_sbuf_add(&b, ")", 1);
	} else {
		mk_sbuf_str(&b, pretty ? pretty : in->method);
	}
	mk_sbuf_str(&b, CARD_METHOD_POST);
	if (base >= 0 && (size_t)base < in->nmodels) {
		mk_sbuf_str(&b, CARD_BASE_PRE);
		model_md(&b, in, (size_t)base);
		mk_sbuf_str(&b, CARD_BASE_POST);
	}
	mk_sbuf_str(&b, ".\n\n" CARD_MODELS);
	for (size_t i = 0; i < in->nmodels; i++) {
		if ((long)i == base)
			continue;
		if (nbullets++)
			mk_sbuf_add(&b, "\n", 1);
		mk_sbuf_str(&b, "* ");
		model_md(&b, in, i);
	}
	mk_sbuf_str(&b, "\n\n" CARD_CONFIG);
	mk_sbuf_str(&b, in->config_text ? in->config_text : "");
	mk_sbuf_str(&b, "\n```\n");
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

/* a model and its adapter, each linked when a hub repo */
static void pair_md(struct mk_sbuf *b, const char *path, const char *lora)
{
	ref_md(b, path, false);
	if (lora) {
		mk_sbuf_str(b, " + ");
		ref_md(b, lora, false);
	}
}

int mk_card_render_lora(const struct mk_card_lora *in, char **out, size_t *len, struct mk_err *err)
{
	struct mk_sbuf b = { 0 };
	/* the hub repos in the order mergekit lists them: base, its adapter,
	 * the fine-tune, its adapter (duplicates kept) */
	const char *refs[4] = { in->base, in->base_lora, in->model, in->model_lora };
	size_t nhub = 0;

	mk_sbuf_str(&b, "---\n");
	for (int k = 0; k < 4; k++)
		nhub += refs[k] && mk_card_looks_like_hub(refs[k]);
	mk_sbuf_str(&b, nhub ? "base_model:\n" : "base_model: []\n");
	for (int k = 0; k < 4; k++)
		if (refs[k] && mk_card_looks_like_hub(refs[k])) {
			mk_sbuf_str(&b, "- ");
			yaml_scalar(&b, refs[k]);
			mk_sbuf_add(&b, "\n", 1);
		}
	mk_sbuf_str(&b, CARD_LORA_FM "\n---\n# ");
	mk_sbuf_str(&b, in->name && in->name[0] ? in->name : CARD_LORA_UNTITLED);
	mk_sbuf_str(&b, "\n\n" CARD_LORA_INTRO CARD_LORA_FROM);
	pair_md(&b, in->model, in->model_lora);
	mk_sbuf_str(&b, CARD_LORA_USES);
	pair_md(&b, in->base, in->base_lora);
	mk_sbuf_str(&b, CARD_LORA_BASE);
	if (in->base_vocab && in->final_vocab && in->base_vocab != in->final_vocab) {
		char w[512];
		snprintf(w, sizeof(w), CARD_LORA_WARN, in->final_vocab > in->base_vocab ? "extended" : "reduced",
			 in->base_vocab, in->final_vocab, in->final_vocab);
		mk_sbuf_str(&b, w);
	}
	mk_sbuf_str(&b, CARD_LORA_PARAMS);
	mk_sbuf_str(&b, in->invocation ? in->invocation : "");
	mk_sbuf_str(&b, "\n```\n");
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = b.p;
	*len = b.n;
	return 0;
}
