/* config.c - parse and validate a mergekit YAML merge configuration.
 *
 * libyaml's document API loads the text into a node graph (aliases point
 * at their anchors' nodes); a schema-driven walk turns it into the structs
 * of mk/config.h and records every problem as a diagnostic instead of
 * stopping at the first.  The text is scanned first (mk_yaml_check:
 * nesting, nodes, size), and the walk counts the nodes it visits, so
 * neither deep nesting nor a few bytes of aliases make either do
 * unbounded work.
 *
 * This file: the entry points, freeing and copying what they build, and
 * reading a configuration's text (mk_config_read).
 * The walk is schema.c, scalar coercion scalar.c, diagnostics diag.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>
#include "core/fsutil.h"
#include "config_impl.h"

/* ------------------------------------------------------------ freeing */

void mk__loc_clear(struct mk_config_loc *l)
{
	free(l->path);
	l->path = NULL;
}

int mk__loc_copy(struct mk_config_loc *dst, const struct mk_config_loc *src)
{
	*dst = *src;
	dst->path = NULL;
	if (src->path && !(dst->path = strdup(src->path)))
		return -MK_ENOMEM;
	return 0;
}

void mk__pvalue_clear(struct mk_pvalue *v)
{
	free(v->grad);
	for (size_t i = 0; i < v->nconds; i++) {
		free(v->conds[i].filter);
		mk__pvalue_clear(&v->conds[i].value);
		mk__loc_clear(&v->conds[i].loc);
	}
	free(v->conds);
	mk__loc_clear(&v->loc);
	memset(v, 0, sizeof(*v));
}

void mk__params_clear(struct mk_params *p)
{
	for (size_t i = 0; i < p->n; i++) {
		free(p->v[i].name);
		mk__pvalue_clear(&p->v[i].value);
		mk__loc_clear(&p->v[i].loc);
	}
	free(p->v);
	p->v = NULL;
	p->n = 0;
}

void mk__input_model_clear(struct mk_input_model *m)
{
	mk_model_ref_clear(&m->model);
	mk__params_clear(&m->params);
	mk__loc_clear(&m->loc);
}

void mk__input_slice_clear(struct mk_input_slice *s)
{
	mk_model_ref_clear(&s->model);
	mk__params_clear(&s->params);
	mk__loc_clear(&s->loc);
}

void mk__output_slice_clear(struct mk_output_slice *s)
{
	for (size_t i = 0; i < s->nsources; i++)
		mk__input_slice_clear(&s->sources[i]);
	free(s->sources);
	if (s->base_model) {
		mk_model_ref_clear(s->base_model);
		free(s->base_model);
	}
	mk__params_clear(&s->params);
	mk__loc_clear(&s->loc);
	memset(s, 0, sizeof(*s));
}

void mk_output_slices_free(struct mk_output_slice *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		mk__output_slice_clear(&v[i]);
	free(v);
}

void mk__module_clear(struct mk_output_module *m)
{
	free(m->name);
	for (size_t i = 0; i < m->nmodels; i++)
		mk__input_model_clear(&m->models[i]);
	free(m->models);
	mk_output_slices_free(m->slices, m->nslices);
	mk__params_clear(&m->params);
	mk__loc_clear(&m->loc);
}

static void tok_source_clear(struct mk_tok_source *s)
{
	mk_model_ref_clear(&s->model);
	mk__loc_clear(&s->loc);
	s->kind = MK_TOKSRC_NONE;
}

static void tokenizer_free(struct mk_tokenizer_config *t)
{
	if (!t)
		return;
	tok_source_clear(&t->source);
	for (size_t i = 0; i < t->ntokens; i++) {
		free(t->tokens[i].token);
		mk_model_ref_clear(&t->tokens[i].model);
		free(t->tokens[i].src_token);
		mk__loc_clear(&t->tokens[i].loc);
	}
	free(t->tokens);
	mk__loc_clear(&t->loc);
	free(t);
}

static void ref_free(struct mk_model_ref *r)
{
	if (r) {
		mk_model_ref_clear(r);
		free(r);
	}
}

void mk_config_free(struct mk_config *cfg)
{
	if (!cfg)
		return;
	free(cfg->text);
	free(cfg->label);
	free(cfg->merge_method);
	mk__loc_clear(&cfg->merge_method_loc);
	for (size_t i = 0; i < cfg->nmodels; i++)
		mk__input_model_clear(&cfg->models[i]);
	free(cfg->models);
	mk_output_slices_free(cfg->slices, cfg->nslices);
	for (size_t i = 0; i < cfg->nmodules; i++)
		mk__module_clear(&cfg->modules[i]);
	free(cfg->modules);
	ref_free(cfg->base_model);
	mk__params_clear(&cfg->params);
	free(cfg->dtype.name);
	mk__loc_clear(&cfg->dtype.loc);
	free(cfg->out_dtype.name);
	mk__loc_clear(&cfg->out_dtype.loc);
	tok_source_clear(&cfg->tokenizer_source);
	tokenizer_free(cfg->tokenizer);
	free(cfg->chat_template);
	mk__loc_clear(&cfg->chat_template_loc);
	free(cfg);
}

/* ------------------------------------------------------------ copying */

static int pvalue_copy(struct mk_pvalue *dst, const struct mk_pvalue *src)
{
	*dst = *src;
	dst->grad = NULL;
	dst->conds = NULL;
	dst->nconds = 0;
	dst->loc.path = NULL;
	if (mk__loc_copy(&dst->loc, &src->loc))
		goto out;
	if (src->n) {
		if (!(dst->grad = malloc(src->n * sizeof(double))))
			goto out;
		memcpy(dst->grad, src->grad, src->n * sizeof(double));
	}
	if (src->nconds) {
		if (!(dst->conds = calloc(src->nconds, sizeof(*dst->conds))))
			goto out;
		for (size_t i = 0; i < src->nconds; i++) {
			struct mk_pcond *c = &dst->conds[i];
			const struct mk_pcond *s = &src->conds[i];
			dst->nconds = i + 1;
			if (mk__loc_copy(&c->loc, &s->loc) ||
			    (s->filter && !(c->filter = strdup(s->filter))) ||
			    pvalue_copy(&c->value, &s->value))
				goto out;
		}
	}
	return 0;
out:
	mk__pvalue_clear(dst);
	return -MK_ENOMEM;
}

int mk__params_copy(struct mk_params *dst, const struct mk_params *src)
{
	dst->n = 0;
	dst->v = NULL;
	if (!src->n)
		return 0;
	if (!(dst->v = calloc(src->n, sizeof(*dst->v))))
		return -MK_ENOMEM;
	for (size_t i = 0; i < src->n; i++) {
		dst->n = i + 1;
		if (!(dst->v[i].name = strdup(src->v[i].name)) ||
		    mk__loc_copy(&dst->v[i].loc, &src->v[i].loc) ||
		    pvalue_copy(&dst->v[i].value, &src->v[i].value)) {
			mk__params_clear(dst);
			return -MK_ENOMEM;
		}
	}
	return 0;
}

int mk__output_slice_copy(struct mk_output_slice *dst,
			  const struct mk_output_slice *src)
{
	memset(dst, 0, sizeof(*dst));
	dst->has_residual_weight = src->has_residual_weight;
	dst->residual_weight = src->residual_weight;
	if (mk__loc_copy(&dst->loc, &src->loc) ||
	    mk__params_copy(&dst->params, &src->params))
		goto out;
	if (src->base_model) {
		if (!(dst->base_model = calloc(1, sizeof(*dst->base_model))) ||
		    mk_model_ref_copy(dst->base_model, src->base_model, NULL))
			goto out;
	}
	if (src->nsources) {
		if (!(dst->sources = calloc(src->nsources, sizeof(*dst->sources))))
			goto out;
		for (size_t i = 0; i < src->nsources; i++) {
			struct mk_input_slice *d = &dst->sources[i];
			const struct mk_input_slice *s = &src->sources[i];
			dst->nsources = i + 1;
			d->start = s->start;
			d->end = s->end;
			if (mk_model_ref_copy(&d->model, &s->model, NULL) ||
			    mk__params_copy(&d->params, &s->params) ||
			    mk__loc_copy(&d->loc, &s->loc))
				goto out;
		}
	}
	return 0;
out:
	mk__output_slice_clear(dst);
	return -MK_ENOMEM;
}


/* ------------------------------------------------------------ entry */

static int parse(const char *text, size_t len, const char *label,
		    struct mk_config **out, struct mk_diags *diags,
		    struct mk_err *err, bool partial)
{
	struct parser p;
	struct mk_diags local;
	struct mk_config *cfg = NULL;
	yaml_parser_t yp;
	bool yp_open = false, doc_open = false, syntax = false;
	int rc = 0;

	*out = NULL;
	memset(&p, 0, sizeof(p));
	p.d = diags ? diags : &local;
	memset(p.d, 0, sizeof(*p.d));
	mk_err_clear(err);
	if (!(p.d->label = strdup(label ? label : "config")) ||
	    !(cfg = calloc(1, sizeof(*cfg))) ||
	    !(cfg->text = malloc(len + 1)) ||
	    !(cfg->label = strdup(label ? label : "config"))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory reading the configuration");
		goto out;
	}
	if (len)
		memcpy(cfg->text, text, len);
	cfg->text[len] = '\0';
	cfg->len = len;

	if (!yaml_parser_initialize(&yp)) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory starting the YAML parser");
		goto out;
	}
	yp_open = true;
	yaml_parser_set_input_string(&yp, (const unsigned char *)cfg->text, len);
	struct mk_yaml_over ov;
	int scan = mk_yaml_check(cfg->text, len, &ov);
	p.aliases = ov.aliases;
	if (scan < 0) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory reading the configuration");
		goto out;
	} else if (scan > 0) {
		mk__config_err_at(&p, ov.line, ov.col, "%s: refusing to read it", ov.msg);
		syntax = true;
	} else if (!yaml_parser_load(&yp, &p.doc)) {
		mk__config_yaml_error(&p, &yp);
		syntax = true;
	} else {
		doc_open = true;
		yaml_node_t *root = yaml_document_get_root_node(&p.doc);
		if (!root) {
			mk__config_err_at(&p, 1, 1, "the configuration is empty");
		} else {
			yaml_document_t second;
			if (!yaml_parser_load(&yp, &second)) {
				mk__config_yaml_error(&p, &yp);
				syntax = true;
			} else {
				yaml_node_t *r2 = yaml_document_get_root_node(&second);
				if (r2)
					ERR(&p, r2, "", "more than one YAML document; a merge "
					    "configuration is a single document");
				yaml_document_delete(&second);
			}
			if (!syntax)
				mk__config_top(&p, root, cfg);
		}
	}
	if (p.nomem) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory reading the configuration");
		goto out;
	}
	if (p.d->nerrors) {
		char first[MK_ERR_MSG_MAX];
		for (size_t i = 0; i < p.d->n; i++)
			if (p.d->v[i].level == MK_DIAG_ERROR) {
				mk_diag_format(p.d, &p.d->v[i], first, sizeof(first));
				break;
			}
		if (p.d->nerrors > 1)
			rc = mk_err_set(err, syntax ? MK_EFORMAT : MK_EINVAL, "%s (and %zu more "
					"error%s)", first, p.d->nerrors - 1,
					p.d->nerrors > 2 ? "s" : "");
		else
			rc = mk_err_set(err, syntax ? MK_EFORMAT : MK_EINVAL, "%s", first);
		if (partial && !syntax && cfg->merge_method) {
			*out = cfg;
			cfg = NULL;
		}
		goto out;
	}
	*out = cfg;
	cfg = NULL;
out:
	if (doc_open)
		yaml_document_delete(&p.doc);
	if (yp_open)
		yaml_parser_delete(&yp);
	mk_config_free(cfg);
	if (!diags)
		mk_diags_free(&local);
	return rc;
}

int mk_config_parse(const char *text, size_t len, const char *label, struct mk_config **out,
		    struct mk_diags *diags, struct mk_err *err)
{
	return parse(text, len, label, out, diags, err, false);
}

int mk_config_parse_partial(const char *text, size_t len, const char *label, struct mk_config **out,
			    struct mk_diags *diags, struct mk_err *err)
{
	return parse(text, len, label, out, diags, err, true);
}

/* The descriptor a path names, for /dev/stdin, /dev/fd/N and
 * /proc/self/fd/N (what a shell's <(...) gives); -1 for any other path. */
static int descriptor_path(const char *path)
{
	static const char *const pre[] = { "/dev/fd/", "/proc/self/fd/" };
	char *end;
	long n;

	if (!strcmp(path, "/dev/stdin"))
		return 0;
	for (size_t i = 0; i < sizeof(pre) / sizeof(*pre); i++) {
		size_t k = strlen(pre[i]);
		if (strncmp(path, pre[i], k) || path[k] < '0' || path[k] > '9')
			continue;
		n = strtol(path + k, &end, 10);
		return *end || n > 65535 ? -1 : (int)n;
	}
	return -1;
}

int mk_config_read(const char *path, uint8_t **text, size_t *len, const char **label, struct mk_err *err)
{
	struct stat st;
	int fd;

	*label = path;
	if (!strcmp(path, "-")) {
		*label = "stdin";
		return mk_fd_read_all(0, MK_CONFIG_MAX, "stdin", text, len, err);
	}
	/* a pipe or socket the caller handed over by its descriptor is read
	 * from that descriptor to its end (not opened again: an open of a
	 * pipe whose writer has gone would wait for another); any other
	 * name must be a regular file -- a FIFO in the file system would
	 * hang the open */
	fd = descriptor_path(path);
	if (fd >= 0 && fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
		return mk_fd_read_all(fd, MK_CONFIG_MAX, path, text, len, err);
	return mk_file_read(path, MK_CONFIG_MAX, text, len, err);
}
