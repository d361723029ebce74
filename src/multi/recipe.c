/* recipe.c - mk-multi's recipes: multi-document YAML, names, dependencies,
 * the order of the steps (multi.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>
#include "multi/multi.h"

/* ------------------------------------------------------------ diagnostics */

/* Move the diagnostics of one document's configuration into *d. */
static void take_diags(struct mk_diags *d, struct mk_diags *from)
{
	for (size_t i = 0; i < from->n; i++) {
		struct mk_diag *g = &from->v[i];
		mk_diags_add(d, g->level, g->line, g->col, g->path, "%s", g->msg);
	}
	mk_diags_free(from);
}

/* ------------------------------------------------------------ documents */

struct scalar {                       /* a scalar of a document, where it is */
	unsigned line, col;               /* 1-based */
	size_t start, end;                /* byte range in the file */
};

struct doc {
	size_t start, end;                /* the document's bytes (from its first line) */
	unsigned first_line;
	unsigned line, col;               /* of its root, for messages */
	bool empty;
	char *name;                       /* NULL: none */
	unsigned name_line, name_col;
	size_t name_start, name_end;      /* the `name: X` pair's bytes */
	size_t nscalars;
	struct scalar *scalars;
	struct mk_config *cfg;
	size_t *deps, ndeps;
	bool ref_unplain;                 /* a reference to it has a revision,
					     an adapter or an architecture */
};

static void doc_clear(struct doc *dc)
{
	free(dc->name);
	free(dc->scalars);
	mk_config_free(dc->cfg);
	free(dc->deps);
}

static int push_scalar(struct doc *dc, const yaml_event_t *e)
{
	struct scalar *v = realloc(dc->scalars, (dc->nscalars + 1) * sizeof(*v));

	if (!v)
		return -1;
	dc->scalars = v;
	v[dc->nscalars++] = (struct scalar){ (unsigned)e->start_mark.line + 1, (unsigned)e->start_mark.column + 1,
					     e->start_mark.index, e->end_mark.index };
	return 0;
}

/* Split the stream into documents by libyaml's events: each document's
 * byte range, its scalars' places and its top-level `name`. */
static int split_docs(const char *text, size_t len, struct doc **out, size_t *nout, struct mk_diags *d,
		      struct mk_err *err)
{
	yaml_parser_t yp;
	yaml_event_t e;
	struct doc *docs = NULL, *dc = NULL;
	size_t n = 0;
	int depth = 0, rc = 0;
	bool key_next = false, name_value = false, done = false;

	*out = NULL;
	*nout = 0;
	/* the bounds every YAML text has (the documents are loaded one by
	 * one later, each checked again) */
	struct mk_yaml_over ov;
	int scan = mk_yaml_check(text, len, &ov);
	if (scan < 0)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (scan > 0) {
		mk_diags_add(d, MK_DIAG_ERROR, ov.line, ov.col, "", "%s: refusing to read it", ov.msg);
		return 0;
	}
	if (!yaml_parser_initialize(&yp))
		return mk_err_set(err, MK_ENOMEM, "out of memory starting the YAML parser");
	yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
	while (!done) {
		if (!yaml_parser_parse(&yp, &e)) {
			mk_diags_add(d, MK_DIAG_ERROR, (unsigned)yp.problem_mark.line + 1, (unsigned)yp.problem_mark.column + 1,
				 "", "YAML syntax: %s%s%s", yp.problem ? yp.problem : "error",
				 yp.context ? " " : "", yp.context ? yp.context : "");
			break;
		}
		switch (e.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT: {
			struct doc *v = realloc(docs, (n + 1) * sizeof(*v));
			if (!v) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				done = true;
				break;
			}
			docs = v;
			dc = &docs[n++];
			*dc = (struct doc){ .empty = true };
			depth = 0;
			break;
		}
		case YAML_DOCUMENT_END_EVENT:
			if (dc)
				dc->end = e.start_mark.index;
			dc = NULL;
			break;
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT:
			if (!dc)
				break;
			if (depth == 0) {
				size_t s = e.start_mark.index;
				while (s > 0 && text[s - 1] != '\n')
					s--;
				dc->start = s;
				dc->first_line = (unsigned)e.start_mark.line + 1;
				dc->line = dc->first_line;
				dc->col = (unsigned)e.start_mark.column + 1;
				dc->empty = false;
				if (e.type == YAML_SEQUENCE_START_EVENT)
					mk_diags_add(d, MK_DIAG_ERROR, dc->line, dc->col, "",
						 "a document is a list; each document of a recipe is a merge configuration (a mapping)");
			} else if (name_value) {
				mk_diags_add(d, MK_DIAG_ERROR, (unsigned)e.start_mark.line + 1, (unsigned)e.start_mark.column + 1,
					 "name", "a merge's name is a string");
				name_value = false;
			}
			depth++;
			key_next = depth == 1 && e.type == YAML_MAPPING_START_EVENT;
			break;
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			depth--;
			if (depth == 1)
				key_next = true;  /* a value ended: a key follows */
			break;
		case YAML_SCALAR_EVENT:
			if (!dc)
				break;
			if (depth == 0) {
				/* a bare scalar document: empty (null) or a mistake */
				const char *v = (const char *)e.data.scalar.value;
				if (e.data.scalar.length && strcmp(v, "~") && strcmp(v, "null")) {
					dc->empty = false;
					dc->line = (unsigned)e.start_mark.line + 1;
					dc->col = (unsigned)e.start_mark.column + 1;
					mk_diags_add(d, MK_DIAG_ERROR, dc->line, dc->col, "",
						 "a document is a scalar; each document of a recipe is a merge configuration (a mapping)");
				}
				break;
			}
			if (push_scalar(dc, &e)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				done = true;
				break;
			}
			if (name_value) {
				name_value = false;
				key_next = true;
				dc->name_end = e.end_mark.index;
				if (e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
				    (!e.data.scalar.length || !strcmp((const char *)e.data.scalar.value, "~") ||
				     !strcmp((const char *)e.data.scalar.value, "null"))) {
					mk_diags_add(d, MK_DIAG_ERROR, (unsigned)e.start_mark.line + 1,
						 (unsigned)e.start_mark.column + 1, "name", "a merge's name is a string, not null");
				} else if (!(dc->name = strdup((const char *)e.data.scalar.value))) {
					rc = mk_err_set(err, MK_ENOMEM, "out of memory");
					done = true;
				}
			} else if (depth == 1 && key_next) {
				if (!strcmp((const char *)e.data.scalar.value, "name")) {
					if (dc->name || dc->name_start) {
						mk_diags_add(d, MK_DIAG_ERROR, (unsigned)e.start_mark.line + 1,
							 (unsigned)e.start_mark.column + 1, "name", "'name' given twice");
					} else {
						name_value = true;
						dc->name_start = e.start_mark.index;
						dc->name_line = (unsigned)e.start_mark.line + 1;
						dc->name_col = (unsigned)e.start_mark.column + 1;
					}
				}
				key_next = false;
				break;
			}
			if (depth == 1)
				key_next = true;
			break;
		default:
			break;
		}
		yaml_event_delete(&e);
	}
	yaml_parser_delete(&yp);
	*out = docs;
	*nout = n;
	return rc;
}

/* ------------------------------------------------------------ references */

/* Every model reference of a configuration, each occurrence. */
static void for_each_ref(struct mk_config *c, void (*fn)(void *, struct mk_model_ref *), void *ctx)
{
	for (size_t i = 0; i < c->nmodels; i++)
		fn(ctx, &c->models[i].model);
	for (size_t s = 0; s < c->nslices; s++) {
		for (size_t k = 0; k < c->slices[s].nsources; k++)
			fn(ctx, &c->slices[s].sources[k].model);
		if (c->slices[s].base_model)
			fn(ctx, c->slices[s].base_model);
	}
	for (size_t m = 0; m < c->nmodules; m++) {
		struct mk_output_module *om = &c->modules[m];
		for (size_t i = 0; i < om->nmodels; i++)
			fn(ctx, &om->models[i].model);
		for (size_t s = 0; s < om->nslices; s++) {
			for (size_t k = 0; k < om->slices[s].nsources; k++)
				fn(ctx, &om->slices[s].sources[k].model);
			if (om->slices[s].base_model)
				fn(ctx, om->slices[s].base_model);
		}
	}
	if (c->base_model)
		fn(ctx, c->base_model);
	if (c->tokenizer_source.kind == MK_TOKSRC_MODEL)
		fn(ctx, &c->tokenizer_source.model);
	if (c->tokenizer) {
		if (c->tokenizer->source.kind == MK_TOKSRC_MODEL)
			fn(ctx, &c->tokenizer->source.model);
		for (size_t t = 0; t < c->tokenizer->ntokens; t++)
			if (c->tokenizer->tokens[t].kind == MK_TOKEMB_MODEL ||
			    c->tokenizer->tokens[t].kind == MK_TOKEMB_MODEL_TOKEN)
				fn(ctx, &c->tokenizer->tokens[t].model);
	}
}

struct edit {                         /* replace bytes [start, end) by text */
	size_t start, end;
	char *text;
};

struct ref_walk {
	struct doc *docs;
	size_t ndocs, self;
	const char *dir;
	struct edit *edits;
	size_t nedits;
	struct mk_diags *d;
	bool nomem;
};

static long doc_named(const struct doc *docs, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (docs[i].name && !strcmp(docs[i].name, name))
			return (long)i;
	return -1;
}

/* A YAML double-quoted scalar of s (JSON's escapes are YAML's). */
static char *yaml_quote(const char *s)
{
	size_t n = strlen(s), k = 0;
	char *q = malloc(n * 6 + 3);

	if (!q)
		return NULL;
	q[k++] = '"';
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			q[k++] = '\\';
			q[k++] = (char)*p;
		} else if (*p < 0x20 || *p == 0x7f) {
			k += (size_t)sprintf(q + k, "\\x%02x", *p);
		} else {
			q[k++] = (char)*p;
		}
	}
	q[k++] = '"';
	q[k] = '\0';
	return q;
}

static void on_ref(void *ctx, struct mk_model_ref *r)
{
	struct ref_walk *w = ctx;
	struct doc *dc = &w->docs[w->self];
	long dep = doc_named(w->docs, w->ndocs, r->model.path);

	if (dep < 0 || w->nomem)
		return;
	if (r->model.revision || r->lora.path || r->override_arch)
		w->docs[dep].ref_unplain = true;
	/* the scalar the reference was written as */
	const struct scalar *sc = NULL;
	for (size_t i = 0; i < dc->nscalars; i++)
		if (dc->scalars[i].line == r->loc.line && dc->scalars[i].col == r->loc.col)
			sc = &dc->scalars[i];
	if (!sc) {
		mk_diags_add(w->d, MK_DIAG_ERROR, r->loc.line, r->loc.col, r->loc.path ? r->loc.path : "",
			 "a reference to merge '%s' must be written as a string", r->model.path);
		return;
	}
	bool seen = false;
	for (size_t i = 0; i < dc->ndeps; i++)
		seen |= dc->deps[i] == (size_t)dep;
	if (!seen) {
		size_t *v = realloc(dc->deps, (dc->ndeps + 1) * sizeof(*v));
		if (!v) {
			w->nomem = true;
			return;
		}
		dc->deps = v;
		dc->deps[dc->ndeps++] = (size_t)dep;
	}
	/* the same reference, its path DIR/NAME */
	struct mk_model_ref nr = *r;
	char *path = NULL, *s = NULL;
	struct mk_err e = { 0 };
	if (asprintf(&path, "%s/%s", w->dir, r->model.path) < 0) {
		w->nomem = true;
		return;
	}
	nr.model.path = path;
	nr.override_arch = NULL;          /* its YAML form is not a string */
	struct edit *ev = realloc(w->edits, (w->nedits + 1) * sizeof(*ev));
	if (!ev || mk_model_ref_format(&nr, &s, &e)) {
		free(path);
		if (ev)
			w->edits = ev;
		w->nomem = true;
		return;
	}
	w->edits = ev;
	free(path);
	char *q = yaml_quote(s);
	free(s);
	if (!q) {
		w->nomem = true;
		return;
	}
	if (r->override_arch) {
		/* {model: REF, override_architecture: A}: only REF's scalar was
		 * written at the reference's place if it is a scalar at all */
		mk_diags_add(w->d, MK_DIAG_ERROR, r->loc.line, r->loc.col, r->loc.path ? r->loc.path : "",
			 "a reference to merge '%s' with an architecture override is not supported", r->model.path);
		free(q);
		return;
	}
	w->edits[w->nedits++] = (struct edit){ sc->start, sc->end, q };
}

static int cmp_edit(const void *a, const void *b)
{
	const struct edit *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* The document's text with the edits made. */
static char *apply_edits(const char *text, size_t start, size_t end, struct edit *ed, size_t n)
{
	size_t len = end - start, at = start, k = 0;
	char *out;

	if (n)
		qsort(ed, n, sizeof(*ed), cmp_edit);
	for (size_t i = 0; i < n; i++)
		len += strlen(ed[i].text);
	if (!(out = malloc(len + 2)))
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (ed[i].start < at)
			continue;             /* overlapping: not made by this file */
		memcpy(out + k, text + at, ed[i].start - at);
		k += ed[i].start - at;
		memcpy(out + k, ed[i].text, strlen(ed[i].text));
		k += strlen(ed[i].text);
		at = ed[i].end;
	}
	memcpy(out + k, text + at, end - at);
	k += end - at;
	/* no trailing blank lines; one newline at the end */
	while (k > 0 && (out[k - 1] == '\n' || out[k - 1] == ' ' || out[k - 1] == '\r'))
		k--;
	out[k++] = '\n';
	out[k] = '\0';
	return out;
}

/* ------------------------------------------------------------ order */

enum { WHITE, GREY, BLACK };

/* Depth first from doc i, its dependencies in the order first referenced;
 * a grey node reached again is a cycle (said once, naming its path). */
static void visit(struct doc *docs, size_t i, unsigned char *mark, size_t *order, size_t *n, size_t *stack,
		  size_t depth, struct mk_diags *d, bool *cycle)
{
	if (mark[i] == BLACK || *cycle)
		return;
	stack[depth] = i;
	if (mark[i] == GREY) {
		char path[1024] = "";
		size_t from = 0;
		while (from < depth && stack[from] != i)
			from++;
		for (size_t k = from; k <= depth; k++) {
			size_t l = strlen(path);
			snprintf(path + l, sizeof(path) - l, "%s'%s'", k > from ? " -> " : "", docs[stack[k]].name);
		}
		mk_diags_add(d, MK_DIAG_ERROR, docs[i].name_line, docs[i].name_col, "name",
			 "merge '%s' depends on itself: %s", docs[i].name, path);
		*cycle = true;
		return;
	}
	mark[i] = GREY;
	for (size_t k = 0; k < docs[i].ndeps; k++)
		visit(docs, docs[i].deps[k], mark, order, n, stack, depth + 1, d, cycle);
	mark[i] = BLACK;
	order[(*n)++] = i;
}

/* ------------------------------------------------------------ parse */

static bool name_ok(const char *s)
{
	return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') &&
	       strlen(s) < 256;
}

void mk_multi_free(struct mk_multi *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nsteps; i++) {
		free(m->steps[i].name);
		free(m->steps[i].out_dir);
		free(m->steps[i].text);
		free(m->steps[i].label);
		free(m->steps[i].deps);
	}
	free(m->steps);
	free(m);
}

int mk_multi_parse(const char *text, size_t len, const char *label, const char *dir, const char *out,
		   struct mk_multi **res, struct mk_diags *d, struct mk_err *err)
{
	struct doc *docs = NULL;
	size_t ndocs = 0, nreal = 0;
	struct mk_multi *m = NULL;
	unsigned char *mark = NULL;
	size_t *order = NULL, *stack = NULL, norder = 0;
	char *pad = NULL;
	long unnamed = -1;
	int rc;

	*res = NULL;
	memset(d, 0, sizeof(*d));
	d->label = strdup(label ? label : "recipe");
	if (!d->label)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = split_docs(text, len, &docs, &ndocs, d, err)))
		goto out;
	if (d->nerrors)
		goto out;
	/* names: one path component each, no two alike, one unnamed at most */
	for (size_t i = 0; i < ndocs; i++) {
		struct doc *dc = &docs[i];
		if (dc->empty)
			continue;
		nreal++;
		if (!dc->name) {
			if (unnamed >= 0)
				mk_diags_add(d, MK_DIAG_ERROR, dc->line, dc->col, "",
					 "a second document without a name (line %u has none either); only the final merge may have no name",
					 docs[unnamed].line);
			else
				unnamed = (long)i;
			continue;
		}
		if (!name_ok(dc->name))
			mk_diags_add(d, MK_DIAG_ERROR, dc->name_line, dc->name_col, "name",
				 "merge name '%s' is not one file name (it names the directory %s/NAME)", dc->name,
				 dir);
		for (size_t k = 0; k < i; k++)
			if (docs[k].name && !strcmp(docs[k].name, dc->name))
				mk_diags_add(d, MK_DIAG_ERROR, dc->name_line, dc->name_col, "name",
					 "merge name '%s' is used twice (first at line %u)", dc->name, docs[k].name_line);
	}
	if (!nreal)
		mk_diags_add(d, MK_DIAG_ERROR, 1, 1, "", "the recipe has no merge configuration");
	if (unnamed >= 0 && !out)
		mk_diags_add(d, MK_DIAG_ERROR, docs[unnamed].line, docs[unnamed].col, "",
			 "a merge without a name goes to OUT: give --out-path");
	/* each document's configuration, parsed at its place in the file
	 * (the bytes before it blanked, its name pair too) */
	if (!(pad = malloc(len + 1))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ndocs; i++) {
		struct doc *dc = &docs[i];
		struct mk_diags dd = { 0 };
		struct mk_err e = { 0 };
		if (dc->empty)
			continue;
		for (size_t k = 0; k < dc->end; k++)
			pad[k] = k >= dc->start || text[k] == '\n' ? text[k] : ' ';
		if (dc->name_end) {
			for (size_t k = dc->name_start; k < dc->name_end; k++)
				pad[k] = text[k] == '\n' ? '\n' : ' ';
			/* in a flow mapping, the comma after the pair */
			size_t k = dc->name_end;
			while (k < dc->end && (pad[k] == ' ' || pad[k] == '\t'))
				k++;
			if (k < dc->end && pad[k] == ',')
				pad[k] = ' ';
		}
		int prc = mk_config_parse(pad, dc->end, label, &dc->cfg, &dd, &e);
		take_diags(d, &dd);
		if (prc == -MK_ENOMEM) {
			rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
			goto out;
		}
	}
	if (d->nerrors)
		goto out;
	/* references to the merges, and the text each step plans */
	m = calloc(1, sizeof(*m));
	if (!m || !(m->steps = calloc(ndocs + 1, sizeof(*m->steps)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	char **texts = calloc(ndocs + 1, sizeof(*texts));
	if (!texts) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < ndocs && !rc; i++) {
		struct doc *dc = &docs[i];
		if (dc->empty)
			continue;
		struct ref_walk w = { .docs = docs, .ndocs = ndocs, .self = i, .dir = dir, .d = d };
		for_each_ref(dc->cfg, on_ref, &w);
		if (!w.nomem && dc->name_end) {
			/* the name pair out (its line, when it is alone on it) */
			size_t s = dc->name_start, e = dc->name_end;
			size_t ls = s;
			while (ls > dc->start && (text[ls - 1] == ' ' || text[ls - 1] == '\t'))
				ls--;
			size_t le = e;
			while (le < dc->end && (text[le] == ' ' || text[le] == '\t'))
				le++;
			if ((ls == dc->start || text[ls - 1] == '\n') && (le == dc->end || text[le] == '\n')) {
				s = ls;
				e = le < dc->end ? le + 1 : le;
			} else if (le < dc->end && text[le] == ',') {
				e = le + 1;
			}
			struct edit *ev = realloc(w.edits, (w.nedits + 1) * sizeof(*ev));
			char *empty = strdup("");
			if (!ev || !empty) {
				free(empty);
				if (ev)
					w.edits = ev;
				w.nomem = true;
			} else {
				w.edits = ev;
				w.edits[w.nedits++] = (struct edit){ s, e, empty };
			}
		}
		if (!w.nomem && !(texts[i] = apply_edits(text, dc->start, dc->end, w.edits, w.nedits)))
			w.nomem = true;
		for (size_t k = 0; k < w.nedits; k++)
			free(w.edits[k].text);
		free(w.edits);
		if (w.nomem)
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (!rc && !d->nerrors) {
		/* the order: depth first over the documents, in file order */
		mark = calloc(ndocs + 1, 1);
		order = calloc(ndocs + 1, sizeof(*order));
		stack = calloc(ndocs + 2, sizeof(*stack));
		if (!mark || !order || !stack) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		} else {
			bool cycle = false;
			for (size_t i = 0; i < ndocs && !cycle; i++)
				if (!docs[i].empty)
					visit(docs, i, mark, order, &norder, stack, 0, d, &cycle);
		}
	}
	if (!rc && !d->nerrors) {
		size_t *pos = calloc(ndocs + 1, sizeof(*pos));
		if (!pos)
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		for (size_t k = 0; pos && k < norder; k++)
			pos[order[k]] = k;
		for (size_t k = 0; !rc && k < norder; k++) {
			struct doc *dc = &docs[order[k]];
			struct mk_multi_step *st = &m->steps[k];
			m->nsteps = k + 1;
			st->first_line = dc->first_line;
			st->plain_refs = !dc->ref_unplain;
			st->text = texts[order[k]];
			texts[order[k]] = NULL;
			if (dc->name) {
				st->name = strdup(dc->name);
				if (!st->name || asprintf(&st->out_dir, "%s/%s", dir, dc->name) < 0)
					st->out_dir = NULL;
				if (asprintf(&st->label, "%s[%s]", label, dc->name) < 0)
					st->label = NULL;
			} else {
				st->out_dir = strdup(out);
				if (asprintf(&st->label, "%s[final]", label) < 0)
					st->label = NULL;
			}
			st->deps = calloc(dc->ndeps + 1, sizeof(*st->deps));
			if (!st->text || !st->out_dir || !st->label || !st->deps || (dc->name && !st->name)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				break;
			}
			for (size_t q = 0; q < dc->ndeps; q++) {
				st->deps[q] = pos[dc->deps[q]];
				m->steps[st->deps[q]].nusers++;
			}
			st->ndeps = dc->ndeps;
		}
		free(pos);
	}
	for (size_t i = 0; i < ndocs; i++)
		free(texts[i]);
	free(texts);
out:
	for (size_t i = 0; i < ndocs; i++)
		doc_clear(&docs[i]);
	free(docs);
	free(pad);
	free(mark);
	free(order);
	free(stack);
	if (!rc && d->nerrors)
		rc = mk_err_set(err, MK_EINVAL, "%zu error%s in %s", d->nerrors, d->nerrors == 1 ? "" : "s",
				label ? label : "the recipe");
	if (rc)
		mk_multi_free(m);
	else
		*res = m;
	return rc;
}

