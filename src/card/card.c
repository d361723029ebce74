/* card.c - render the README.md model card (layout: card_text.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "card_text.h"
#include "mk/card.h"

struct buf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->len + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q) {
			b->oom = true;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

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
static void yaml_scalar(struct buf *b, const char *s)
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
		puts_(b, s);
		return;
	}
	put(b, "'", 1);
	for (const char *c = s; *c; c++) {
		put(b, c, 1);
		if (*c == '\'')
			put(b, "'", 1); /* '' is a quote inside single quotes */
	}
	put(b, "'", 1);
}

static void ref_md(struct buf *b, const char *path)
{
	if (mk_card_looks_like_hub(path)) {
		put(b, "[", 1);
		puts_(b, path);
		puts_(b, "](" CARD_HUB_URL);
		puts_(b, path);
		put(b, ")", 1);
	} else {
		puts_(b, path);
	}
}

static void model_md(struct buf *b, const struct mk_card_input *in, size_t i)
{
	ref_md(b, in->models[i]);
	if (in->loras && in->loras[i]) {
		puts_(b, " + ");
		ref_md(b, in->loras[i]);
	}
}

int mk_card_render(const struct mk_card_input *in, char **out, size_t *len,
		   struct mk_err *err)
{
	struct buf b = { 0 };
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
	puts_(&b, "---\n");
	for (size_t i = 0; i < in->nmodels; i++) {
		nhub += mk_card_looks_like_hub(in->models[i]);
		nhub += in->loras && in->loras[i] && mk_card_looks_like_hub(in->loras[i]);
	}
	if (!nhub) {
		puts_(&b, "base_model: []\n");
	} else {
		puts_(&b, "base_model:\n");
		for (size_t i = 0; i < in->nmodels; i++) {
			const char *two[2] = { in->models[i], in->loras ? in->loras[i] : NULL };
			for (int k = 0; k < 2; k++)
				if (two[k] && mk_card_looks_like_hub(two[k])) {
					puts_(&b, "- ");
					yaml_scalar(&b, two[k]);
					put(&b, "\n", 1);
				}
		}
	}
	puts_(&b, CARD_FM_LIBRARY CARD_FM_TAGS);
	puts_(&b, "\n---\n# ");
	puts_(&b, in->name && in->name[0] ? in->name : CARD_UNTITLED);
	puts_(&b, "\n\n" CARD_INTRO "\n" CARD_DETAILS CARD_METHOD_PRE);
	if (url && url[0]) {
		put(&b, "[", 1);
		puts_(&b, pretty ? pretty : in->method);
		puts_(&b, "](");
		puts_(&b, url);
		put(&b, ")", 1);
	} else {
		puts_(&b, pretty ? pretty : in->method);
	}
	puts_(&b, CARD_METHOD_POST);
	if (base >= 0 && (size_t)base < in->nmodels) {
		puts_(&b, CARD_BASE_PRE);
		model_md(&b, in, (size_t)base);
		puts_(&b, CARD_BASE_POST);
	}
	puts_(&b, ".\n\n" CARD_MODELS);
	for (size_t i = 0; i < in->nmodels; i++) {
		if ((long)i == base)
			continue;
		if (nbullets++)
			put(&b, "\n", 1);
		puts_(&b, "* ");
		model_md(&b, in, i);
	}
	puts_(&b, "\n\n" CARD_CONFIG);
	puts_(&b, in->config_text ? in->config_text : "");
	puts_(&b, "\n```\n");
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = b.p;
	*len = b.len;
	return 0;
}
