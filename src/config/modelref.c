/* modelref.c - model references: string form, equality, re-serialisation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"
#include "core/sbuf.h"

void mk__model_path_clear(struct mk_model_path *p)
{
	if (!p)
		return;
	free(p->path);
	free(p->revision);
	p->path = NULL;
	p->revision = NULL;
}

int mk__model_path_parse(const char *s, size_t len, struct mk_model_path *out,
			 const char **why)
{
	const char *at = NULL;
	size_t nat = 0;

	out->path = NULL;
	out->revision = NULL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '\0') {
			*why = "contains a NUL character";
			return -MK_EINVAL;
		}
		if (s[i] == '@') {
			if (!at)
				at = s + i;
			nat++;
		}
	}
	if (nat > 1) {
		*why = "more than one '@' (a path holding '@' needs the map form "
		       "{model: {path: ..., revision: ...}})";
		return -MK_EINVAL;
	}
	size_t plen = at ? (size_t)(at - s) : len;
	if (plen == 0) {
		*why = "the model path is empty";
		return -MK_EINVAL;
	}
	if (at && at + 1 == s + len) {
		*why = "the revision after '@' is empty";
		return -MK_EINVAL;
	}
	out->path = strndup(s, plen);
	if (!out->path)
		return -MK_ENOMEM;
	if (at) {
		out->revision = strndup(at + 1, (size_t)(s + len - at - 1));
		if (!out->revision) {
			mk__model_path_clear(out);
			return -MK_ENOMEM;
		}
	}
	return 0;
}

void mk_model_ref_clear(struct mk_model_ref *r)
{
	if (!r)
		return;
	mk__model_path_clear(&r->model);
	mk__model_path_clear(&r->lora);
	free(r->override_arch);
	mk__loc_clear(&r->loc);
	memset(r, 0, sizeof(*r));
}

int mk_model_ref_parse(const char *s, struct mk_model_ref *out,
		       struct mk_err *err)
{
	const char *plus, *why = NULL;
	size_t len = strlen(s);
	int rc;

	memset(out, 0, sizeof(*out));
	plus = strchr(s, '+');
	if (plus && strchr(plus + 1, '+'))
		return mk_err_set(err, MK_EINVAL, "can't parse model reference '%s': "
				  "more than one '+' (the form is model[+lora]; a path "
				  "holding '+' needs the map form {model: ...})", s);
	rc = mk__model_path_parse(s, plus ? (size_t)(plus - s) : len, &out->model, &why);
	if (rc == 0 && plus)
		rc = mk__model_path_parse(plus + 1, len - (size_t)(plus + 1 - s),
					  &out->lora, &why);
	if (rc == -MK_ENOMEM) {
		mk_model_ref_clear(out);
		return mk_err_set(err, MK_ENOMEM, "out of memory parsing model reference");
	}
	if (rc < 0) {
		bool in_lora = out->model.path != NULL;
		mk_model_ref_clear(out);
		return mk_err_set(err, MK_EINVAL, "can't parse model reference '%s'%s: %s",
				  s, in_lora ? " (LoRA part)" : "", why);
	}
	return 0;
}

bool mk_model_ref_equal(const struct mk_model_ref *a, const struct mk_model_ref *b)
{
	if (!a || !b)
		return a == b;
	return mk_str_eq(a->model.path, b->model.path) &&
	       mk_str_eq(a->model.revision, b->model.revision) &&
	       mk_str_eq(a->lora.path, b->lora.path) &&
	       mk_str_eq(a->lora.revision, b->lora.revision) &&
	       mk_str_eq(a->override_arch, b->override_arch);
}

/* Append "path[@rev]" to a FILE. */
static void put_path(FILE *f, const struct mk_model_path *p)
{
	fputs(p->path ? p->path : "", f);
	if (p->revision)
		fprintf(f, "@%s", p->revision);
}

int mk_model_ref_format(const struct mk_model_ref *r, char **out,
			struct mk_err *err)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	*out = NULL;
	if (!f)
		return mk_err_set(err, MK_ENOMEM, "out of memory formatting a model reference");
	if (r->override_arch) {
		fputs("{model: ", f);
		put_path(f, &r->model);
		if (r->lora.path) {
			fputs(", lora: ", f);
			put_path(f, &r->lora);
		}
		fprintf(f, ", override_architecture: %s}", r->override_arch);
	} else {
		put_path(f, &r->model);
		if (r->lora.path) {
			fputc('+', f);
			put_path(f, &r->lora);
		}
	}
	if (fclose(f) != 0 || !buf) {
		free(buf);
		return mk_err_set(err, MK_ENOMEM, "out of memory formatting a model reference");
	}
	*out = buf;
	return 0;
}

static int dup_or_null(char **dst, const char *src)
{
	*dst = NULL;
	if (src && !(*dst = strdup(src)))
		return -1;
	return 0;
}

int mk_model_ref_copy(struct mk_model_ref *dst, const struct mk_model_ref *src,
		      struct mk_err *err)
{
	memset(dst, 0, sizeof(*dst));
	if (dup_or_null(&dst->model.path, src->model.path) ||
	    dup_or_null(&dst->model.revision, src->model.revision) ||
	    dup_or_null(&dst->lora.path, src->lora.path) ||
	    dup_or_null(&dst->lora.revision, src->lora.revision) ||
	    dup_or_null(&dst->override_arch, src->override_arch) ||
	    mk__loc_copy(&dst->loc, &src->loc)) {
		mk_model_ref_clear(dst);
		return mk_err_set(err, MK_ENOMEM, "out of memory copying a model reference");
	}
	return 0;
}
