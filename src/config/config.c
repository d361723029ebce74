/* config.c - parse and validate a mergekit YAML merge configuration.
 *
 * libyaml's document API loads the text into a node graph (aliases point
 * at their anchors' nodes); a schema-driven walk turns it into the structs
 * of mk/config.h and records every problem as a diagnostic instead of
 * stopping at the first.  The walk counts the nodes it visits, so a few
 * bytes of aliases cannot make it do unbounded work.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "config_impl.h"

/* Nodes the walk may visit, aliases counted again: far above any real
 * config (400 slices of 10 sources is ~20000), far below a blow-up. */
#define VISIT_MAX (1u << 18)

struct parser {
	yaml_document_t doc;
	struct mk_diags *d;
	size_t visits;
	bool nomem;                 /* an allocation failed; results are partial */
	bool over;                  /* VISIT_MAX reached */
};

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

static void module_clear(struct mk_output_module *m)
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
		module_clear(&cfg->modules[i]);
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

/* ------------------------------------------------------------ diagnostics */

void mk_diags_free(struct mk_diags *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->n; i++) {
		free(d->v[i].path);
		free(d->v[i].msg);
	}
	free(d->v);
	free(d->label);
	memset(d, 0, sizeof(*d));
}

int mk_diag_format(const struct mk_diags *d, const struct mk_diag *g,
		   char *buf, size_t size)
{
	const char *label = d && d->label ? d->label : "config";

	if (g->path && g->path[0])
		return snprintf(buf, size, "%s:%u:%u: %s: %s", label, g->line, g->col,
				g->path, g->msg);
	return snprintf(buf, size, "%s:%u:%u: %s", label, g->line, g->col, g->msg);
}

static void vdiag_at(struct parser *p, enum mk_diag_level lv, unsigned line,
		     unsigned col, const char *path, const char *fmt, va_list ap)
{
	struct mk_diags *d = p->d;
	struct mk_diag *g;
	char *msg = NULL, *pc = NULL;

	if (vasprintf(&msg, fmt, ap) < 0) {
		msg = NULL;
		goto out;
	}
	if (!(pc = strdup(path ? path : "")))
		goto out;
	if (d->n % 16 == 0) {
		g = realloc(d->v, (d->n + 16) * sizeof(*d->v));
		if (!g)
			goto out;
		d->v = g;
	}
	g = &d->v[d->n++];
	g->level = lv;
	g->line = line;
	g->col = col;
	g->path = pc;
	g->msg = msg;
	if (lv == MK_DIAG_ERROR)
		d->nerrors++;
	else
		d->nwarnings++;
	return;
out:
	free(msg);
	free(pc);
	p->nomem = true;
}

static void diag(struct parser *p, enum mk_diag_level lv, const yaml_node_t *n,
		 const char *path, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void diag(struct parser *p, enum mk_diag_level lv, const yaml_node_t *n,
		 const char *path, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdiag_at(p, lv, n ? (unsigned)n->start_mark.line + 1 : 0,
		 n ? (unsigned)n->start_mark.column + 1 : 0, path, fmt, ap);
	va_end(ap);
}

#define ERR(p, n, path, ...) diag(p, MK_DIAG_ERROR, n, path, __VA_ARGS__)
#define WARN(p, n, path, ...) diag(p, MK_DIAG_WARNING, n, path, __VA_ARGS__)

/* ------------------------------------------------------------ paths and locations */

static char *jpath(struct parser *p, const char *base, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static char *jpath(struct parser *p, const char *base, const char *fmt, ...)
{
	char *tail = NULL, *res = NULL;
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = vasprintf(&tail, fmt, ap);
	va_end(ap);
	if (r < 0) {
		p->nomem = true;
		return NULL;
	}
	/* "[i]" attaches directly; a name gets a dot after a non-empty base */
	if (asprintf(&res, "%s%s%s", base ? base : "",
		     base && base[0] && tail[0] != '[' ? "." : "", tail) < 0) {
		res = NULL;
		p->nomem = true;
	}
	free(tail);
	return res;
}

static void set_loc(struct mk_config_loc *l, const yaml_node_t *n, char *path)
{
	l->line = (unsigned)n->start_mark.line + 1;
	l->col = (unsigned)n->start_mark.column + 1;
	l->path = path;
}

/* ------------------------------------------------------------ nodes and scalars */

static yaml_node_t *node(struct parser *p, int idx)
{
	return yaml_document_get_node(&p->doc, idx);
}

/* Count a visit; false once the budget is spent (reported once). */
static bool enter(struct parser *p, const yaml_node_t *n)
{
	if (p->over)
		return false;
	if (++p->visits > VISIT_MAX) {
		p->over = true;
		ERR(p, n, "", "the document expands to more than %u nodes through "
		    "aliases; refusing to read it", VISIT_MAX);
		return false;
	}
	return true;
}

enum skind { SK_NULL, SK_BOOL, SK_INT, SK_FLOAT, SK_STR };

struct scalar {
	enum skind k;
	bool b;
	bool ovf;                   /* SK_INT out of long long range (f holds it) */
	long long i;
	double f;
	const char *s;              /* the text, not NUL-terminated */
	size_t len;
};

static bool is_one_of(const char *s, size_t len, const char *const *words)
{
	for (; *words; words++)
		if (strlen(*words) == len && memcmp(s, *words, len) == 0)
			return true;
	return false;
}

/* A YAML 1.1 integer as PyYAML resolves it: [-+]? then 0b..., 0x..., 0...
 * (octal), or decimal, '_' allowed between digits.  Sexagesimal "1:30" is
 * not supported (it stays a string). */
static bool parse_yaml_int(const char *s, size_t len, struct scalar *out)
{
	size_t i = 0;
	int base = 10, neg = 0;
	unsigned long long v = 0;
	bool digits = false, ovf = false;
	double f = 0;

	if (i < len && (s[i] == '-' || s[i] == '+'))
		neg = s[i++] == '-';
	if (i + 1 < len && s[i] == '0' && (s[i + 1] == 'b' || s[i + 1] == 'x')) {
		base = s[i + 1] == 'b' ? 2 : 16;
		i += 2;
	} else if (i + 1 < len && s[i] == '0') {
		base = 8;
		i++;
	} else if (i < len && s[i] == '0' && i + 1 == len) {
		out->k = SK_INT;
		out->i = 0;
		return true;
	}
	for (; i < len; i++) {
		int dv;
		char c = s[i];
		if (c == '_')
			continue;
		if (c >= '0' && c <= '9')
			dv = c - '0';
		else if (c >= 'a' && c <= 'f')
			dv = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			dv = c - 'A' + 10;
		else
			return false;
		if (dv >= base)
			return false;
		digits = true;
		f = f * base + dv;
		if (v > (ULLONG_MAX - (unsigned)dv) / (unsigned)base)
			ovf = true;
		else
			v = v * (unsigned)base + (unsigned)dv;
	}
	if (!digits)
		return false;
	/* decimal must not start with 0 (then it was octal or a string) */
	out->k = SK_INT;
	if (ovf || v > (unsigned long long)LLONG_MAX + (unsigned)neg) {
		out->ovf = true;
		out->f = neg ? -f : f;
		return true;
	}
	out->i = neg ? (long long)(0 - v) : (long long)v;
	out->f = (double)out->i;
	return true;
}

/* A YAML 1.1 float as PyYAML resolves it: digits '.' digits with an
 * optional signed exponent, ".5", and the .inf/.nan words. */
static bool parse_yaml_float(const char *s, size_t len, struct scalar *out)
{
	static const char *const inf[] = { ".inf", ".Inf", ".INF", "+.inf", "+.Inf",
					   "+.INF", NULL };
	static const char *const ninf[] = { "-.inf", "-.Inf", "-.INF", NULL };
	static const char *const nan[] = { ".nan", ".NaN", ".NAN", NULL };
	char buf[128], *end;
	size_t i = 0, o = 0;
	bool dot = false, mant = false;

	if (is_one_of(s, len, inf) || is_one_of(s, len, ninf) || is_one_of(s, len, nan)) {
		out->k = SK_FLOAT;
		out->f = is_one_of(s, len, nan) ? NAN : is_one_of(s, len, ninf) ? -INFINITY : INFINITY;
		return true;
	}
	if (len >= sizeof(buf))
		return false;
	if (i < len && (s[i] == '-' || s[i] == '+'))
		buf[o++] = s[i++];
	for (; i < len; i++) {
		char c = s[i];
		if (c == '_' && mant)
			continue;
		if (c >= '0' && c <= '9')
			mant = true;
		else if (c == '.' && !dot)
			dot = true;
		else
			break;
		buf[o++] = c;
	}
	if (!dot || !mant)
		return false;
	if (i < len) {
		/* exponent: [eE][-+][0-9]+ (the sign is required in YAML 1.1) */
		if (!(s[i] == 'e' || s[i] == 'E') || i + 2 >= len + 0 ||
		    !(s[i + 1] == '-' || s[i + 1] == '+'))
			return false;
		buf[o++] = s[i++];
		buf[o++] = s[i++];
		if (i >= len)
			return false;
		for (; i < len; i++) {
			if (!(s[i] >= '0' && s[i] <= '9'))
				return false;
			buf[o++] = s[i];
		}
	}
	buf[o] = '\0';
	errno = 0;
	out->k = SK_FLOAT;
	out->f = strtod(buf, &end);
	return *end == '\0';
}

static void resolve(const yaml_node_t *n, struct scalar *out)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL", NULL };
	static const char *const trues[] = { "yes", "Yes", "YES", "true", "True",
					     "TRUE", "on", "On", "ON", NULL };
	static const char *const falses[] = { "no", "No", "NO", "false", "False",
					      "FALSE", "off", "Off", "OFF", NULL };
	const char *s = (const char *)n->data.scalar.value;
	size_t len = n->data.scalar.length;

	memset(out, 0, sizeof(*out));
	out->s = s;
	out->len = len;
	out->k = SK_STR;
	if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return;
	if (is_one_of(s, len, nulls))
		out->k = SK_NULL;
	else if (is_one_of(s, len, trues))
		out->k = SK_BOOL, out->b = true;
	else if (is_one_of(s, len, falses))
		out->k = SK_BOOL, out->b = false;
	else if (!parse_yaml_int(s, len, out) && !parse_yaml_float(s, len, out)) {
		memset(out, 0, sizeof(*out));
		out->s = s;
		out->len = len;
		out->k = SK_STR;
	}
}

static bool is_null(const yaml_node_t *n)
{
	struct scalar sc;

	if (!n || n->type != YAML_SCALAR_NODE)
		return !n;
	resolve(n, &sc);
	return sc.k == SK_NULL;
}

static const char *kind_name(const yaml_node_t *n)
{
	struct scalar sc;

	switch (n->type) {
	case YAML_SEQUENCE_NODE: return "a list";
	case YAML_MAPPING_NODE: return "a map";
	case YAML_SCALAR_NODE:
		resolve(n, &sc);
		switch (sc.k) {
		case SK_NULL: return "null";
		case SK_BOOL: return "a boolean";
		case SK_INT: return "an integer";
		case SK_FLOAT: return "a number";
		case SK_STR: return "a string";
		}
		break;
	default:
		break;
	}
	return "nothing";
}

/* A short, printable excerpt of a scalar for messages. */
static const char *excerpt(const yaml_node_t *n, char *buf, size_t size)
{
	size_t len = n->data.scalar.length, o = 0;
	const unsigned char *s = n->data.scalar.value;

	for (size_t i = 0; i < len && o + 4 < size; i++)
		buf[o++] = s[i] >= 0x20 && s[i] != 0x7f ? (char)s[i] : '?';
	if (o < len && o + 4 >= size)
		memcpy(buf + o, "...", 3), o += 3;
	buf[o] = '\0';
	return buf;
}

/* Numbers as pydantic's lax float: numbers, booleans, numeric strings. */
static bool parse_numeric_string(const char *s, size_t len, double *out)
{
	char buf[128], *end;
	size_t i = 0, o = 0;

	while (i < len && isspace((unsigned char)s[i]))
		i++;
	while (len > i && isspace((unsigned char)s[len - 1]))
		len--;
	if (len - i == 0 || len - i >= sizeof(buf))
		return false;
	for (; i < len; i++) {
		char c = s[i];
		if (c == '_')
			continue;
		if (!strchr("0123456789+-.eE", c))
			return false;
		buf[o++] = c;
	}
	buf[o] = '\0';
	*out = strtod(buf, &end);
	return end != buf && *end == '\0';
}

static bool to_num(struct parser *p, const yaml_node_t *n, const char *path,
		   double *out)
{
	struct scalar sc;
	char ex[64];

	if (n->type != YAML_SCALAR_NODE) {
		ERR(p, n, path, "expected a number, found %s", kind_name(n));
		return false;
	}
	resolve(n, &sc);
	switch (sc.k) {
	case SK_NULL:
		ERR(p, n, path, "expected a number, found null");
		return false;
	case SK_BOOL:
		*out = sc.b ? 1.0 : 0.0;
		return true;
	case SK_INT:
		*out = sc.ovf ? sc.f : (double)sc.i;
		break;
	case SK_FLOAT:
		*out = sc.f;
		break;
	case SK_STR:
		if (!parse_numeric_string(sc.s, sc.len, out)) {
			ERR(p, n, path, "expected a number, found the string '%s'",
			    excerpt(n, ex, sizeof(ex)));
			return false;
		}
		break;
	}
	if (!isfinite(*out)) {
		ERR(p, n, path, "expected a finite number, found '%s'",
		    excerpt(n, ex, sizeof(ex)));
		return false;
	}
	return true;
}

/* Integers as pydantic's lax int: integers, integral floats, integer
 * strings.  Booleans are refused. */
static bool to_int(struct parser *p, const yaml_node_t *n, const char *path,
		   long long *out)
{
	struct scalar sc;
	char ex[64];
	double f;

	if (n->type != YAML_SCALAR_NODE) {
		ERR(p, n, path, "expected an integer, found %s", kind_name(n));
		return false;
	}
	resolve(n, &sc);
	if (sc.k == SK_INT && !sc.ovf) {
		*out = sc.i;
		return true;
	}
	if (sc.k == SK_STR) {
		/* a decimal string, as Python's int(): "08" is 8, " +3 " is 3 */
		char buf[64], *end;
		size_t a = 0, b = sc.len, o = 0;
		bool bad = false;
		while (a < b && isspace((unsigned char)sc.s[a]))
			a++;
		while (b > a && isspace((unsigned char)sc.s[b - 1]))
			b--;
		for (size_t i = a; i < b && !bad; i++) {
			char c = sc.s[i];
			if (c == '_' && i > a && i + 1 < b)
				continue;
			if (o + 1 >= sizeof(buf) || !(isdigit((unsigned char)c) ||
						      (i == a && (c == '+' || c == '-'))))
				bad = true;
			else
				buf[o++] = c;
		}
		buf[o] = '\0';
		errno = 0;
		if (!bad && o > 0 && isdigit((unsigned char)buf[o - 1])) {
			long long v = strtoll(buf, &end, 10);
			if (*end == '\0' && errno == 0) {
				*out = v;
				return true;
			}
		}
	}
	if (sc.k == SK_FLOAT || sc.k == SK_INT) {
		f = sc.f;
		if (isfinite(f) && f == floor(f) && fabs(f) < 9.2e18) {
			*out = (long long)f;
			return true;
		}
		ERR(p, n, path, "expected an integer, found '%s'", excerpt(n, ex, sizeof(ex)));
		return false;
	}
	if (sc.k == SK_STR)
		ERR(p, n, path, "expected an integer, found the string '%s'",
		    excerpt(n, ex, sizeof(ex)));
	else
		ERR(p, n, path, "expected an integer, found %s", kind_name(n));
	return false;
}

/* A string: any scalar that resolves to a string.  A number or boolean is
 * refused as pydantic refuses it, with a hint to quote it. */
static bool to_str(struct parser *p, const yaml_node_t *n, const char *path,
		   char **out)
{
	struct scalar sc;
	char ex[64];

	*out = NULL;
	if (n->type != YAML_SCALAR_NODE) {
		ERR(p, n, path, "expected a string, found %s", kind_name(n));
		return false;
	}
	resolve(n, &sc);
	if (sc.k != SK_STR) {
		ERR(p, n, path, "expected a string, found %s '%s' (quote it to use it "
		    "as a string)", kind_name(n), excerpt(n, ex, sizeof(ex)));
		return false;
	}
	if (memchr(sc.s, '\0', sc.len)) {
		ERR(p, n, path, "the string contains a NUL character");
		return false;
	}
	if (!(*out = strndup(sc.s, sc.len))) {
		p->nomem = true;
		return false;
	}
	return true;
}

static bool to_bool(struct parser *p, const yaml_node_t *n, const char *path,
		    bool *out)
{
	static const char *const t[] = { "true", "True", "TRUE", "yes", "Yes", "YES",
					 "on", "On", "ON", "1", "t", "y", NULL };
	static const char *const f[] = { "false", "False", "FALSE", "no", "No", "NO",
					 "off", "Off", "OFF", "0", "f", "n", NULL };
	struct scalar sc;

	if (n->type == YAML_SCALAR_NODE) {
		resolve(n, &sc);
		if (sc.k == SK_BOOL) {
			*out = sc.b;
			return true;
		}
		if (sc.k == SK_INT && !sc.ovf && (sc.i == 0 || sc.i == 1)) {
			*out = sc.i == 1;
			return true;
		}
		if (sc.k == SK_STR && (is_one_of(sc.s, sc.len, t) || is_one_of(sc.s, sc.len, f))) {
			*out = is_one_of(sc.s, sc.len, t);
			return true;
		}
	}
	ERR(p, n, path, "expected true or false, found %s", kind_name(n));
	return false;
}

/* ------------------------------------------------------------ maps with known keys */

struct field {
	const char *name;
	yaml_node_t *key, *val;     /* NULL when absent */
};

/* Optimal string alignment distance, for "did you mean". */
static size_t distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[33][33];

	if (la > 32 || lb > 32)
		return 99;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int ca = tolower((unsigned char)a[i - 1]);
			int cb = tolower((unsigned char)b[j - 1]);
			size_t c = ca == cb || (ca == '-' && cb == '_') ? 0 : 1;
			size_t v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + c < v)
				v = d[i - 1][j - 1] + c;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[la][lb];
}

/* Known misnamings that are too far apart for the distance. */
static const char *const hints[][2] = {
	{ "pattern", "filter" },
	{ "layers", "layer_range" },
	{ "range", "layer_range" },
	{ "method", "merge_method" },
	{ "base", "base_model" },
	{ "params", "parameters" },
	{ "tokenizer_config", "tokenizer" },
	{ "template", "chat_template" },
};

static const char *suggest(const char *key, size_t len, const struct field *f, size_t nf)
{
	const char *best = NULL;
	size_t bd = 99;

	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++)
		if (strlen(hints[i][0]) == len && memcmp(key, hints[i][0], len) == 0)
			for (size_t j = 0; j < nf; j++)
				if (strcmp(f[j].name, hints[i][1]) == 0)
					return f[j].name;
	for (size_t i = 0; i < nf; i++) {
		size_t d = distance(key, len, f[i].name, strlen(f[i].name));
		if (d < bd) {
			bd = d;
			best = f[i].name;
		}
	}
	/* close enough: 1 edit for short keys, 2 from 5 characters, 3 from 10 */
	if (best && bd <= (len >= 10 ? 3u : len >= 5 ? 2u : 1u))
		return best;
	return NULL;
}

/* Fill `f` from mapping node `map`: unknown keys and repeated keys are
 * warnings (mergekit ignores the first and keeps the last value of the
 * second), a key that is not a scalar is an error. */
static void get_fields(struct parser *p, yaml_node_t *map, const char *path,
		       struct field *f, size_t nf)
{
	bool has_params = false;

	for (size_t i = 0; i < nf; i++) {
		f[i].key = f[i].val = NULL;
		if (strcmp(f[i].name, "parameters") == 0)
			has_params = true;
	}
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start;
	     pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
		const char *ks;
		size_t kl, i;
		char ex[64];

		if (!k || !v || !enter(p, k))
			return;
		if (k->type != YAML_SCALAR_NODE) {
			ERR(p, k, path, "a key must be a plain name, found %s", kind_name(k));
			continue;
		}
		ks = (const char *)k->data.scalar.value;
		kl = k->data.scalar.length;
		for (i = 0; i < nf; i++)
			if (strlen(f[i].name) == kl && memcmp(f[i].name, ks, kl) == 0)
				break;
		if (i < nf) {
			if (f[i].val)
				WARN(p, k, path, "key '%s' is given twice; the later value is "
				     "used", f[i].name);
			f[i].key = k;
			f[i].val = v;
			continue;
		}
		const char *s = suggest(ks, kl, f, nf);
		if (s)
			WARN(p, k, path, "unknown key '%s' is ignored (did you mean '%s'?)",
			     excerpt(k, ex, sizeof(ex)), s);
		else if (has_params)
			WARN(p, k, path, "unknown key '%s' is ignored (merge parameters go "
			     "under 'parameters:')", excerpt(k, ex, sizeof(ex)));
		else
			WARN(p, k, path, "unknown key '%s' is ignored", excerpt(k, ex, sizeof(ex)));
	}
}

static yaml_node_t *fval(const struct field *f, size_t nf, const char *name)
{
	for (size_t i = 0; i < nf; i++)
		if (strcmp(f[i].name, name) == 0)
			return f[i].val;
	return NULL;
}

#define NF(a) (sizeof(a) / sizeof((a)[0]))
#define FIELD(f, name) fval(f, NF(f), name)

/* Require a mapping; report otherwise. */
static bool want_map(struct parser *p, yaml_node_t *n, const char *path, const char *what)
{
	if (n->type == YAML_MAPPING_NODE)
		return true;
	ERR(p, n, path, "expected %s (a map), found %s", what, kind_name(n));
	return false;
}

/* An optional list: NULL/null gives 0 items; otherwise a sequence. */
static bool want_list(struct parser *p, yaml_node_t *n, const char *path,
		      const char *what, size_t *count)
{
	*count = 0;
	if (is_null(n))
		return true;
	if (n->type != YAML_SEQUENCE_NODE) {
		ERR(p, n, path, "expected %s (a list), found %s", what, kind_name(n));
		return false;
	}
	*count = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	return true;
}

static yaml_node_t *item(struct parser *p, yaml_node_t *seq, size_t i)
{
	return node(p, seq->data.sequence.items.start[i]);
}

/* ------------------------------------------------------------ model references */

static bool model_path(struct parser *p, yaml_node_t *n, const char *path,
		       struct mk_model_path *out)
{
	const char *why = NULL;
	char ex[64];
	int rc;

	if (n->type == YAML_MAPPING_NODE) {
		struct field f[] = { { .name = "path" }, { .name = "revision" } };
		yaml_node_t *v;
		char *cp = NULL;

		get_fields(p, n, path, f, NF(f));
		if (!(v = FIELD(f, "path")) || is_null(v)) {
			ERR(p, n, path, "missing 'path'");
			return false;
		}
		cp = jpath(p, path, "path");
		if (!to_str(p, v, cp, &out->path)) {
			free(cp);
			return false;
		}
		free(cp);
		if (!out->path[0]) {
			ERR(p, v, path, "the model path is empty");
			return false;
		}
		if ((v = FIELD(f, "revision")) && !is_null(v)) {
			cp = jpath(p, path, "revision");
			bool ok = to_str(p, v, cp, &out->revision);
			free(cp);
			if (!ok)
				return false;
		}
		return true;
	}
	if (n->type != YAML_SCALAR_NODE || is_null(n)) {
		ERR(p, n, path, "expected a model path (a string or {path, revision}), "
		    "found %s", kind_name(n));
		return false;
	}
	char *s = NULL;
	if (!to_str(p, n, path, &s))
		return false;
	rc = mk__model_path_parse(s, strlen(s), out, &why);
	free(s);
	if (rc == -MK_ENOMEM)
		p->nomem = true;
	else if (rc < 0)
		ERR(p, n, path, "bad model path '%s': %s", excerpt(n, ex, sizeof(ex)), why);
	return rc == 0;
}

/* A model reference, string or map form.  On failure *out holds nothing. */
static bool model_ref(struct parser *p, yaml_node_t *n, const char *path,
		      struct mk_model_ref *out)
{
	struct mk_err e;
	char *cp;
	bool ok = false;

	memset(out, 0, sizeof(*out));
	if (!enter(p, n))
		return false;
	if (n->type == YAML_MAPPING_NODE) {
		struct field f[] = { { .name = "model" }, { .name = "lora" }, { .name = "override_architecture" } };
		yaml_node_t *v;

		get_fields(p, n, path, f, NF(f));
		if (!(v = FIELD(f, "model")) || is_null(v)) {
			ERR(p, n, path, "missing 'model' in the model reference");
			goto out;
		}
		cp = jpath(p, path, "model");
		ok = model_path(p, v, cp, &out->model);
		free(cp);
		if ((v = FIELD(f, "lora")) && !is_null(v)) {
			cp = jpath(p, path, "lora");
			ok = model_path(p, v, cp, &out->lora) && ok;
			free(cp);
		}
		if ((v = FIELD(f, "override_architecture")) && !is_null(v)) {
			cp = jpath(p, path, "override_architecture");
			ok = to_str(p, v, cp, &out->override_arch) && ok;
			free(cp);
		}
		goto out;
	}
	if (n->type != YAML_SCALAR_NODE || is_null(n)) {
		ERR(p, n, path, "expected a model reference (\"org/name[@rev][+lora]\" or "
		    "{model: ...}), found %s", kind_name(n));
		goto out;
	}
	char *s = NULL;
	if (!to_str(p, n, path, &s))
		goto out;
	int rc = mk_model_ref_parse(s, out, &e);
	free(s);
	if (rc == -MK_ENOMEM)
		p->nomem = true;
	else if (rc < 0)
		ERR(p, n, path, "%s", e.msg);
	ok = rc == 0;
out:
	if (ok) {
		char *lp = path ? strdup(path) : NULL;
		if (path && !lp)
			p->nomem = true;
		set_loc(&out->loc, n, lp);
	} else {
		mk_model_ref_clear(out);
	}
	return ok;
}

/* ------------------------------------------------------------ parameter values */

static bool pvalue(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_pvalue *out, bool allow_conds);

static bool cond(struct parser *p, yaml_node_t *n, const char *path, struct mk_pcond *c)
{
	struct field f[] = { { .name = "filter" }, { .name = "value" } };
	yaml_node_t *v;
	char *cp;
	bool ok = true;

	get_fields(p, n, path, f, NF(f));
	if ((v = FIELD(f, "filter")) && !is_null(v)) {
		cp = jpath(p, path, "filter");
		ok = to_str(p, v, cp, &c->filter);
		free(cp);
	}
	if (!(v = FIELD(f, "value"))) {
		ERR(p, n, path, "missing 'value' in the conditional parameter");
		return false;
	}
	cp = jpath(p, path, "value");
	ok = pvalue(p, v, cp, &c->value, false) && ok;
	free(cp);
	return ok;
}

static bool pvalue(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_pvalue *out, bool allow_conds)
{
	size_t cnt, nmap = 0, nscalar = 0;
	bool ok = true;
	char *lp;

	memset(out, 0, sizeof(*out));
	if (!enter(p, n))
		return false;
	if (!(lp = path ? strdup(path) : NULL) && path)
		p->nomem = true;
	set_loc(&out->loc, n, lp);
	switch (n->type) {
	case YAML_SCALAR_NODE:
		if (is_null(n)) {
			ERR(p, n, path, "a parameter value cannot be null");
			return false;
		}
		out->kind = MK_PV_SCALAR;
		return to_num(p, n, path, &out->scalar);
	case YAML_MAPPING_NODE:
		if (!allow_conds) {
			ERR(p, n, path, "expected a number or a list of numbers, found a map "
			    "(conditionals do not nest)");
			return false;
		}
		out->kind = MK_PV_CONDS;
		out->bare = true;
		if (!(out->conds = calloc(1, sizeof(*out->conds)))) {
			p->nomem = true;
			return false;
		}
		out->nconds = 1;
		set_loc(&out->conds[0].loc, n, NULL);
		if (path && !(out->conds[0].loc.path = strdup(path)))
			p->nomem = true;
		WARN(p, n, path, "a single {filter, value} map is read as a one-element "
		     "list (mergekit itself fails on this form when merging)");
		return cond(p, n, path, &out->conds[0]);
	case YAML_SEQUENCE_NODE:
		break;
	default:
		ERR(p, n, path, "expected a parameter value");
		return false;
	}
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (cnt == 0) {
		ERR(p, n, path, "an empty list is not a parameter value (give a number, "
		    "a gradient of numbers, or {filter, value} entries)");
		return false;
	}
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *it = item(p, n, i);
		if (!it)
			return false;
		if (it->type == YAML_MAPPING_NODE)
			nmap++;
		else if (it->type == YAML_SCALAR_NODE)
			nscalar++;
	}
	if (nmap && allow_conds && nmap == cnt) {
		out->kind = MK_PV_CONDS;
		if (!(out->conds = calloc(cnt, sizeof(*out->conds)))) {
			p->nomem = true;
			return false;
		}
		out->nconds = cnt;
		for (size_t i = 0; i < cnt && !p->over; i++) {
			yaml_node_t *it = item(p, n, i);
			char *cp = jpath(p, path, "[%zu]", i);
			set_loc(&out->conds[i].loc, it, cp);
			if (!enter(p, it) || !cond(p, it, cp, &out->conds[i]))
				ok = false;
		}
		return ok;
	}
	if (nscalar != cnt) {
		if (nmap && nscalar)
			ERR(p, n, path, "a list mixes numbers and {filter, value} maps; give "
			    "either a gradient of numbers or a list of conditionals");
		else if (nmap)
			ERR(p, n, path, "expected a number or a list of numbers, found a "
			    "list of maps (conditionals do not nest)");
		else
			ERR(p, n, path, "a gradient holds numbers, not lists");
		return false;
	}
	out->kind = MK_PV_GRADIENT;
	if (!(out->grad = calloc(cnt, sizeof(double)))) {
		p->nomem = true;
		return false;
	}
	out->n = cnt;
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_t *it = item(p, n, i);
		char cp[512];       /* no allocation per number; cut if longer */
		snprintf(cp, sizeof(cp), "%s[%zu]", path ? path : "", i);
		if (!enter(p, it) || !to_num(p, it, cp, &out->grad[i]))
			ok = false;
	}
	return ok;
}

/* A `parameters:` map; null is an empty map.  Returns false on an error
 * (what parsed is kept in *out either way, for the caller to free). */
static bool params(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_params *out)
{
	size_t cnt;
	bool ok = true;
	char ex[64];

	out->n = 0;
	out->v = NULL;
	if (!n || is_null(n))
		return true;
	if (!enter(p, n))
		return false;
	if (n->type != YAML_MAPPING_NODE) {
		ERR(p, n, path, "expected parameters (a map of name: value), found %s",
		    kind_name(n));
		return false;
	}
	cnt = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
	if (cnt && !(out->v = calloc(cnt, sizeof(*out->v)))) {
		p->nomem = true;
		return false;
	}
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_pair_t *pr = &n->data.mapping.pairs.start[i];
		yaml_node_t *k = node(p, pr->key), *v = node(p, pr->value);
		struct mk_param *dst;
		size_t j;

		if (!k || !v)
			return false;
		if (k->type != YAML_SCALAR_NODE ||
		    memchr(k->data.scalar.value, '\0', k->data.scalar.length)) {
			ERR(p, k, path, "a parameter name must be a plain string");
			ok = false;
			continue;
		}
		for (j = 0; j < out->n; j++)
			if (strlen(out->v[j].name) == k->data.scalar.length &&
			    memcmp(out->v[j].name, k->data.scalar.value, k->data.scalar.length) == 0)
				break;
		if (j < out->n) {
			WARN(p, k, path, "parameter '%s' is given twice; the later value is used",
			     excerpt(k, ex, sizeof(ex)));
			dst = &out->v[j];
			free(dst->name);
			mk__pvalue_clear(&dst->value);
			mk__loc_clear(&dst->loc);
		} else {
			dst = &out->v[out->n++];
		}
		memset(dst, 0, sizeof(*dst));
		if (!(dst->name = strndup((const char *)k->data.scalar.value,
					  k->data.scalar.length))) {
			p->nomem = true;
			return false;
		}
		char *cp = jpath(p, path, "%s", dst->name);
		set_loc(&dst->loc, k, cp);
		if (!pvalue(p, v, cp, &dst->value, true))
			ok = false;
	}
	return ok;
}

/* ------------------------------------------------------------ structures */

static bool opt_params(struct parser *p, const struct field *f, size_t nf,
		       const char *path, struct mk_params *out)
{
	yaml_node_t *v = fval(f, nf, "parameters");
	char *cp;
	bool ok;

	out->n = 0;
	out->v = NULL;
	if (!v)
		return true;
	cp = jpath(p, path, "parameters");
	ok = params(p, v, cp, out);
	free(cp);
	return ok;
}

static bool input_model(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_input_model *m)
{
	struct field f[] = { { .name = "model" }, { .name = "parameters" } };
	yaml_node_t *v;
	bool ok = true;

	if (n->type == YAML_SCALAR_NODE && !is_null(n)) {
		char ex[64];
		ERR(p, n, path, "expected a map with 'model:', found the string '%s' "
		    "(write '- model: %s')", excerpt(n, ex, sizeof(ex)), ex);
		return false;
	}
	if (!want_map(p, n, path, "an input model {model, parameters}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if (!(v = FIELD(f, "model")) || is_null(v)) {
		ERR(p, n, path, "missing 'model'");
		ok = false;
	} else {
		char *cp = jpath(p, path, "model");
		ok = model_ref(p, v, cp, &m->model);
		free(cp);
	}
	return opt_params(p, f, NF(f), path, &m->params) && ok;
}

static bool layer_range(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_input_slice *s)
{
	size_t cnt;
	bool ok;

	if (n->type != YAML_SEQUENCE_NODE) {
		ERR(p, n, path, "expected [start, end] (two integers), found %s",
		    kind_name(n));
		return false;
	}
	cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	if (cnt != 2) {
		ERR(p, n, path, "expected [start, end] (two integers), found a list of %zu",
		    cnt);
		return false;
	}
	char *c0 = jpath(p, path, "[0]"), *c1 = jpath(p, path, "[1]");
	yaml_node_t *a = item(p, n, 0), *b = item(p, n, 1);
	ok = a && b && enter(p, a) && enter(p, b);
	ok = ok && to_int(p, a, c0, &s->start);
	ok = b && to_int(p, b, c1, &s->end) && ok;
	free(c0);
	free(c1);
	if (!ok)
		return false;
	if (s->start < 0 || s->end < 0) {
		ERR(p, n, path, "layer_range [%lld, %lld]: layer indices cannot be negative",
		    s->start, s->end);
		return false;
	}
	if (s->start > s->end) {
		ERR(p, n, path, "layer_range [%lld, %lld]: start is greater than end "
		    "(the range is [start, end), end excluded)", s->start, s->end);
		return false;
	}
	return true;
}

static bool input_slice(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_input_slice *s)
{
	struct field f[] = { { .name = "model" }, { .name = "layer_range" }, { .name = "parameters" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a source {model, layer_range, parameters}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if (!(v = FIELD(f, "model")) || is_null(v)) {
		ERR(p, n, path, "missing 'model'");
		ok = false;
	} else {
		cp = jpath(p, path, "model");
		ok = model_ref(p, v, cp, &s->model);
		free(cp);
	}
	if (!(v = FIELD(f, "layer_range")) || is_null(v)) {
		ERR(p, n, path, "missing 'layer_range' (required for a slice source: "
		    "[start, end))");
		ok = false;
	} else {
		cp = jpath(p, path, "layer_range");
		ok = layer_range(p, v, cp, s) && ok;
		free(cp);
	}
	return opt_params(p, f, NF(f), path, &s->params) && ok;
}

/* The same model twice in one slice: mergekit keys a slice's inputs by
 * model, so the later source silently replaces the earlier one.  Refused. */
static bool check_dups_sources(struct parser *p, yaml_node_t *seq,
			       const struct mk_input_slice *src, const bool *good,
			       size_t n, const char *path)
{
	bool ok = true;

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < i && good[i]; j++)
			if (good[j] && mk_model_ref_equal(&src[i].model, &src[j].model)) {
				char *s = NULL;
				mk_model_ref_format(&src[i].model, &s, NULL);
				ERR(p, item(p, seq, i), src[i].loc.path ? src[i].loc.path : path,
				    "model '%s' appears twice in one slice (also at "
				    "sources[%zu]); mergekit would silently keep only one of "
				    "them, mk refuses: merge the two ranges in separate slices",
				    s ? s : "?", j);
				free(s);
				ok = false;
				break;
			}
	return ok;
}

static bool output_slice(struct parser *p, yaml_node_t *n, const char *path,
			 struct mk_output_slice *s)
{
	struct field f[] = { { .name = "sources" }, { .name = "base_model" }, { .name = "parameters" },
			     { .name = "residual_weight" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;
	size_t cnt;

	if (!want_map(p, n, path, "an output slice {sources, ...}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if (!(v = FIELD(f, "sources")) || is_null(v)) {
		ERR(p, n, path, "missing 'sources'");
		ok = false;
	} else {
		cp = jpath(p, path, "sources");
		if (!want_list(p, v, cp, "sources", &cnt)) {
			ok = false;
		} else if (cnt == 0) {
			ERR(p, v, cp, "a slice needs at least one source");
			ok = false;
		} else if (!(s->sources = calloc(cnt, sizeof(*s->sources)))) {
			p->nomem = true;
			ok = false;
		} else {
			bool *good = calloc(cnt, sizeof(bool));
			bool all = true;
			if (!good)
				p->nomem = true;
			s->nsources = cnt;
			for (size_t i = 0; i < cnt && !p->over; i++) {
				yaml_node_t *it = item(p, v, i);
				char *ip = jpath(p, cp, "[%zu]", i);
				set_loc(&s->sources[i].loc, it, ip);
				bool g = enter(p, it) && input_slice(p, it, ip, &s->sources[i]);
				if (good)
					good[i] = g;
				all = all && g;
			}
			ok = all && ok;
			if (good && !p->over) {
				ok = check_dups_sources(p, v, s->sources, good, cnt, cp) && ok;
				/* equal spans, judged against the first good source */
				size_t ref = cnt;
				for (size_t i = 0; i < cnt; i++) {
					struct mk_input_slice *a = &s->sources[i];
					if (!good[i])
						continue;
					if (ref == cnt) {
						ref = i;
						continue;
					}
					struct mk_input_slice *r = &s->sources[ref];
					if (a->end - a->start != r->end - r->start) {
						ERR(p, item(p, v, i), a->loc.path,
						    "all sources of a slice must span the same "
						    "number of layers: this one spans %lld "
						    "([%lld, %lld)), sources[%zu] spans %lld "
						    "([%lld, %lld))", a->end - a->start, a->start,
						    a->end, ref, r->end - r->start, r->start, r->end);
						ok = false;
					}
				}
			}
			free(good);
		}
		free(cp);
	}
	if ((v = FIELD(f, "base_model")) && !is_null(v)) {
		cp = jpath(p, path, "base_model");
		if (!(s->base_model = calloc(1, sizeof(*s->base_model)))) {
			p->nomem = true;
			ok = false;
		} else if (!model_ref(p, v, cp, s->base_model)) {
			free(s->base_model);
			s->base_model = NULL;
			ok = false;
		}
		free(cp);
	}
	if ((v = FIELD(f, "residual_weight")) && !is_null(v)) {
		cp = jpath(p, path, "residual_weight");
		ok = (s->has_residual_weight = to_num(p, v, cp, &s->residual_weight)) && ok;
		free(cp);
	}
	return opt_params(p, f, NF(f), path, &s->params) && ok;
}

/* A list of input models (top level or a module). */
static bool models_list(struct parser *p, yaml_node_t *v, const char *path,
			struct mk_input_model **out, size_t *nout)
{
	size_t cnt;
	bool ok = true;

	*out = NULL;
	*nout = 0;
	if (!want_list(p, v, path, "models", &cnt))
		return false;
	if (!cnt)
		return true;
	if (!(*out = calloc(cnt, sizeof(**out)))) {
		p->nomem = true;
		return false;
	}
	*nout = cnt;
	bool *good = calloc(cnt, sizeof(bool));
	if (!good)
		p->nomem = true;
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_t *it = item(p, v, i);
		char *ip = jpath(p, path, "[%zu]", i);
		set_loc(&(*out)[i].loc, it, ip);
		bool g = enter(p, it) && input_model(p, it, ip, &(*out)[i]);
		if (good)
			good[i] = g && (*out)[i].model.model.path;
		ok = g && ok;
	}
	/* the same model twice becomes the same model twice in one slice */
	for (size_t i = 0; good && !p->over && i < cnt; i++)
		for (size_t j = 0; j < i && good[i]; j++)
			if (good[j] && mk_model_ref_equal(&(*out)[i].model, &(*out)[j].model)) {
				char *s = NULL;
				mk_model_ref_format(&(*out)[i].model, &s, NULL);
				ERR(p, item(p, v, i), (*out)[i].loc.path,
				    "model '%s' is listed twice (also at [%zu]); mergekit would "
				    "silently keep only one of them, mk refuses", s ? s : "?", j);
				free(s);
				ok = false;
				break;
			}
	free(good);
	return ok;
}

static bool slices_list(struct parser *p, yaml_node_t *v, const char *path,
			struct mk_output_slice **out, size_t *nout)
{
	size_t cnt;
	bool ok = true;

	*out = NULL;
	*nout = 0;
	if (!want_list(p, v, path, "slices", &cnt))
		return false;
	if (!cnt)
		return true;
	if (!(*out = calloc(cnt, sizeof(**out)))) {
		p->nomem = true;
		return false;
	}
	*nout = cnt;
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_t *it = item(p, v, i);
		char *ip = jpath(p, path, "[%zu]", i);
		set_loc(&(*out)[i].loc, it, ip);
		ok = enter(p, it) && output_slice(p, it, ip, &(*out)[i]) && ok;
	}
	return ok;
}

static bool module(struct parser *p, yaml_node_t *n, const char *path,
		   struct mk_output_module *m)
{
	struct field f[] = { { .name = "slices" }, { .name = "models" }, { .name = "parameters" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a module {slices | models, parameters}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if ((v = FIELD(f, "slices"))) {
		cp = jpath(p, path, "slices");
		ok = slices_list(p, v, cp, &m->slices, &m->nslices) && ok;
		free(cp);
	}
	if ((v = FIELD(f, "models"))) {
		cp = jpath(p, path, "models");
		ok = models_list(p, v, cp, &m->models, &m->nmodels) && ok;
		free(cp);
	}
	if (ok && (!m->nslices) == (!m->nmodels)) {
		ERR(p, n, path, "must specify either output slices or models to merge "
		    "(exactly one of 'slices' and 'models', non-empty)");
		ok = false;
	}
	return opt_params(p, f, NF(f), path, &m->params) && ok;
}

static bool modules_map(struct parser *p, yaml_node_t *v, const char *path,
			struct mk_config *cfg)
{
	size_t cnt;
	bool ok = true;

	if (is_null(v))
		return true;
	if (!want_map(p, v, path, "modules (a map of name: module)"))
		return false;
	cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
	if (!cnt)
		return true;
	if (!(cfg->modules = calloc(cnt, sizeof(*cfg->modules)))) {
		p->nomem = true;
		return false;
	}
	for (size_t i = 0; i < cnt && !p->over; i++) {
		yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
		yaml_node_t *k = node(p, pr->key), *mv = node(p, pr->value);
		struct mk_output_module *m;
		char *name = NULL;

		if (!k || !mv || !enter(p, k))
			return false;
		if (k->type != YAML_SCALAR_NODE) {
			ERR(p, k, path, "a module name must be a plain string");
			ok = false;
			continue;
		}
		if (memchr(k->data.scalar.value, '\0', k->data.scalar.length) ||
		    !(name = strndup((const char *)k->data.scalar.value, k->data.scalar.length))) {
			if (!name && !memchr(k->data.scalar.value, '\0', k->data.scalar.length))
				p->nomem = true;
			else
				ERR(p, k, path, "a module name must not contain NUL");
			ok = false;
			continue;
		}
		size_t j;
		for (j = 0; j < cfg->nmodules; j++)
			if (strcmp(cfg->modules[j].name, name) == 0)
				break;
		if (j < cfg->nmodules) {
			WARN(p, k, path, "module '%s' is given twice; the later one is used", name);
			m = &cfg->modules[j];
			module_clear(m);
		} else {
			m = &cfg->modules[cfg->nmodules++];
		}
		memset(m, 0, sizeof(*m));
		m->name = name;
		char *mp = jpath(p, path, "%s", name);
		set_loc(&m->loc, mv, mp);
		ok = enter(p, mv) && module(p, mv, mp, m) && ok;
	}
	return ok;
}

/* "union" | "base" | a model reference (the literals win). */
static bool tok_source(struct parser *p, yaml_node_t *n, const char *path,
		       struct mk_tok_source *out)
{
	char *lp = path ? strdup(path) : NULL;

	if (path && !lp)
		p->nomem = true;
	set_loc(&out->loc, n, lp);
	if (n->type == YAML_SCALAR_NODE && !is_null(n)) {
		const char *s = (const char *)n->data.scalar.value;
		size_t len = n->data.scalar.length;
		if (len == 5 && memcmp(s, "union", 5) == 0) {
			out->kind = MK_TOKSRC_UNION;
			return true;
		}
		if (len == 4 && memcmp(s, "base", 4) == 0) {
			out->kind = MK_TOKSRC_BASE;
			return true;
		}
	}
	if (!model_ref(p, n, path, &out->model))
		return false;
	out->kind = MK_TOKSRC_MODEL;
	return true;
}

static bool token_embed(struct parser *p, yaml_node_t *n, const char *path,
			struct mk_token_embed *t)
{
	struct field f[] = { { .name = "source" }, { .name = "force" } };
	yaml_node_t *v, *src;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a token setting {source, force}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	if ((v = FIELD(f, "force")) && !is_null(v)) {
		cp = jpath(p, path, "force");
		ok = to_bool(p, v, cp, &t->force);
		free(cp);
	}
	src = FIELD(f, "source");
	if (!src || is_null(src)) {
		t->kind = MK_TOKEMB_DEFAULT;
		return ok;
	}
	cp = jpath(p, path, "source");
	if (!enter(p, src)) {
		ok = false;
	} else if (src->type == YAML_MAPPING_NODE) {
		yaml_node_t *kind = NULL;
		for (yaml_node_pair_t *pr = src->data.mapping.pairs.start;
		     pr < src->data.mapping.pairs.top; pr++) {
			yaml_node_t *k = node(p, pr->key);
			if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == 4 &&
			    memcmp(k->data.scalar.value, "kind", 4) == 0)
				kind = node(p, pr->value);
		}
		if (!kind) {
			ok = model_ref(p, src, cp, &t->model) && ok;
			t->kind = MK_TOKEMB_MODEL;
		} else {
			char *ks = NULL;
			char *kp = jpath(p, cp, "kind");
			if (!to_str(p, kind, kp, &ks)) {
				ok = false;
			} else if (strcmp(ks, "zero") == 0) {
				struct field z[] = { { .name = "kind" } };
				get_fields(p, src, cp, z, NF(z));
				t->kind = MK_TOKEMB_ZERO;
			} else if (strcmp(ks, "model_token") == 0) {
				struct field m[] = { { .name = "kind" }, { .name = "model" }, { .name = "token_id" },
						     { .name = "token" } };
				yaml_node_t *mv, *tid, *tok;
				t->kind = MK_TOKEMB_MODEL_TOKEN;
				get_fields(p, src, cp, m, NF(m));
				if (!(mv = FIELD(m, "model")) || is_null(mv)) {
					ERR(p, src, cp, "missing 'model' for kind model_token");
					ok = false;
				} else {
					char *mp = jpath(p, cp, "model");
					ok = model_ref(p, mv, mp, &t->model) && ok;
					free(mp);
				}
				tid = FIELD(m, "token_id");
				tok = FIELD(m, "token");
				if (tid && is_null(tid))
					tid = NULL;
				if (tok && is_null(tok))
					tok = NULL;
				if (!tid == !tok) {
					ERR(p, src, cp, "give exactly one of 'token_id' and 'token' "
					    "for kind model_token");
					ok = false;
				} else if (tid) {
					char *tp = jpath(p, cp, "token_id");
					ok = (t->has_token_id = to_int(p, tid, tp, &t->token_id)) && ok;
					free(tp);
				} else {
					char *tp = jpath(p, cp, "token");
					ok = to_str(p, tok, tp, &t->src_token) && ok;
					free(tp);
				}
			} else {
				char ex[64];
				ERR(p, kind, kp, "unknown kind '%s' (expected model_token or zero)",
				    excerpt(kind, ex, sizeof(ex)));
				ok = false;
			}
			free(ks);
			free(kp);
		}
	} else {
		ok = model_ref(p, src, cp, &t->model) && ok;
		t->kind = MK_TOKEMB_MODEL;
	}
	free(cp);
	return ok;
}

static bool tokenizer(struct parser *p, yaml_node_t *n, const char *path,
		      struct mk_tokenizer_config *t)
{
	struct field f[] = { { .name = "source" }, { .name = "tokens" }, { .name = "pad_to_multiple_of" } };
	yaml_node_t *v;
	bool ok = true;
	char *cp;

	if (!want_map(p, n, path, "a tokenizer {source, tokens, pad_to_multiple_of}"))
		return false;
	get_fields(p, n, path, f, NF(f));
	t->source.kind = MK_TOKSRC_UNION;
	if ((v = FIELD(f, "source")) && !is_null(v)) {
		cp = jpath(p, path, "source");
		ok = tok_source(p, v, cp, &t->source);
		free(cp);
	}
	if ((v = FIELD(f, "pad_to_multiple_of")) && !is_null(v)) {
		cp = jpath(p, path, "pad_to_multiple_of");
		if ((t->has_pad_to_multiple_of = to_int(p, v, cp, &t->pad_to_multiple_of)) &&
		    t->pad_to_multiple_of <= 0) {
			ERR(p, v, cp, "pad_to_multiple_of must be a positive integer");
			t->has_pad_to_multiple_of = false;
		}
		ok = t->has_pad_to_multiple_of && ok;
		free(cp);
	}
	if ((v = FIELD(f, "tokens")) && !is_null(v)) {
		cp = jpath(p, path, "tokens");
		if (!want_map(p, v, cp, "tokens (a map of token: setting)")) {
			ok = false;
		} else {
			size_t cnt = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
			if (cnt && !(t->tokens = calloc(cnt, sizeof(*t->tokens)))) {
				p->nomem = true;
				cnt = 0;
				ok = false;
			}
			for (size_t i = 0; i < cnt && !p->over; i++) {
				yaml_node_pair_t *pr = &v->data.mapping.pairs.start[i];
				yaml_node_t *k = node(p, pr->key), *tv = node(p, pr->value);
				struct mk_token_embed *te = &t->tokens[t->ntokens];
				if (!k || !tv || !enter(p, k))
					break;
				if (k->type != YAML_SCALAR_NODE ||
				    memchr(k->data.scalar.value, '\0', k->data.scalar.length)) {
					ERR(p, k, cp, "a token must be a plain string");
					ok = false;
					continue;
				}
				if (!(te->token = strndup((const char *)k->data.scalar.value,
							  k->data.scalar.length))) {
					p->nomem = true;
					break;
				}
				t->ntokens++;
				char *tp = jpath(p, cp, "%s", te->token);
				set_loc(&te->loc, tv, tp);
				ok = enter(p, tv) && token_embed(p, tv, tp, te) && ok;
			}
		}
		free(cp);
	}
	return ok;
}

static bool opt_str(struct parser *p, yaml_node_t *v, const char *path, const char *key,
		    char **out, struct mk_config_loc *loc)
{
	char *cp;
	bool ok;

	if (!v || is_null(v))
		return true;
	cp = jpath(p, path, "%s", key);
	ok = to_str(p, v, cp, out);
	if (loc)
		set_loc(loc, v, cp);
	else
		free(cp);
	return ok;
}

static bool dtype(struct parser *p, yaml_node_t *v, const char *key,
		  struct mk_config_dtype *d)
{
	struct mk_err e;

	if (!opt_str(p, v, "", key, &d->name, &d->loc) || !d->name)
		return !v || is_null(v);
	if (mk_config_dtype_parse(d->name, &d->dtype, &d->canonical, &e) < 0) {
		ERR(p, v, key, "%s", e.msg);
		return false;
	}
	return true;
}

/* The top-level map. */
static void top(struct parser *p, yaml_node_t *root, struct mk_config *cfg)
{
	struct field f[] = {
		{ .name = "merge_method" }, { .name = "models" }, { .name = "slices" }, { .name = "modules" },
		{ .name = "base_model" }, { .name = "parameters" }, { .name = "dtype" }, { .name = "out_dtype" },
		{ .name = "tokenizer_source" }, { .name = "tokenizer" }, { .name = "chat_template" },
	};
	yaml_node_t *v;
	int nset = 0;

	if (!enter(p, root))
		return;
	if (root->type != YAML_MAPPING_NODE) {
		ERR(p, root, "", "a merge configuration must be a map (merge_method: ..., "
		    "models: ...), found %s", kind_name(root));
		return;
	}
	get_fields(p, root, "", f, NF(f));

	v = FIELD(f, "merge_method");
	if (!v || is_null(v))
		ERR(p, root, "", "missing 'merge_method' (linear, slerp, ties, ...)");
	else
		opt_str(p, v, "", "merge_method", &cfg->merge_method, &cfg->merge_method_loc);

	if ((v = FIELD(f, "models")))
		models_list(p, v, "models", &cfg->models, &cfg->nmodels);
	if ((v = FIELD(f, "slices")))
		slices_list(p, v, "slices", &cfg->slices, &cfg->nslices);
	if ((v = FIELD(f, "modules")))
		modules_map(p, v, "modules", cfg);
	if ((v = FIELD(f, "base_model")) && !is_null(v)) {
		if (!(cfg->base_model = calloc(1, sizeof(*cfg->base_model)))) {
			p->nomem = true;
		} else if (!model_ref(p, v, "base_model", cfg->base_model)) {
			free(cfg->base_model);
			cfg->base_model = NULL;
		}
	}
	opt_params(p, f, NF(f), "", &cfg->params);
	dtype(p, FIELD(f, "dtype"), "dtype", &cfg->dtype);
	dtype(p, FIELD(f, "out_dtype"), "out_dtype", &cfg->out_dtype);
	if ((v = FIELD(f, "tokenizer_source")) && !is_null(v) && enter(p, v))
		tok_source(p, v, "tokenizer_source", &cfg->tokenizer_source);
	if ((v = FIELD(f, "tokenizer")) && !is_null(v) && enter(p, v)) {
		if (!(cfg->tokenizer = calloc(1, sizeof(*cfg->tokenizer)))) {
			p->nomem = true;
		} else {
			char *lp = strdup("tokenizer");
			if (!lp)
				p->nomem = true;
			set_loc(&cfg->tokenizer->loc, v, lp);
			tokenizer(p, v, "tokenizer", cfg->tokenizer);
		}
	}
	opt_str(p, FIELD(f, "chat_template"), "", "chat_template", &cfg->chat_template,
		&cfg->chat_template_loc);

	if (p->over)
		return;
	/* Exactly one of models/slices/modules, judged by being non-empty;
	 * a key that is present but empty is named in the message. */
	const char *names[3] = { "models", "slices", "modules" };
	size_t counts[3] = { cfg->nmodels, cfg->nslices, cfg->nmodules };
	for (int i = 0; i < 3; i++)
		nset += counts[i] != 0;
	if (nset != 1) {
		char which[128] = "";
		size_t o = 0;
		for (int i = 0; i < 3; i++) {
			v = FIELD(f, names[i]);
			if (nset == 0 && v)
				o += (size_t)snprintf(which + o, sizeof(which) - o, "%s'%s' is empty",
						      o ? ", " : " (", names[i]);
			else if (nset > 1 && counts[i])
				o += (size_t)snprintf(which + o, sizeof(which) - o, "%s'%s'",
						      o ? " and " : " (found ", names[i]);
		}
		if (o)
			snprintf(which + o, sizeof(which) - o, ")");
		/* point at the second list when there are two */
		yaml_node_t *at = root;
		int seen = 0;
		for (int i = 0; i < 3 && nset > 1; i++)
			if (counts[i] && ++seen == 2)
				for (size_t j = 0; j < NF(f); j++)
					if (strcmp(f[j].name, names[i]) == 0)
						at = f[j].key;
		/* a list that failed to parse is not "missing": say nothing more */
		bool failed = false;
		for (int i = 0; i < 3; i++)
			if (FIELD(f, names[i]) && !is_null(FIELD(f, names[i])) && !counts[i] &&
			    !(FIELD(f, names[i])->type == YAML_SEQUENCE_NODE ||
			      FIELD(f, names[i])->type == YAML_MAPPING_NODE))
				failed = true;
		if (!failed || nset > 1)
			ERR(p, at, "", "exactly one of 'models', 'slices', or 'modules' must "
			    "be present%s", which);
	}
	if (cfg->tokenizer_source.kind != MK_TOKSRC_NONE && cfg->tokenizer) {
		yaml_node_t *at = NULL;
		for (size_t j = 0; j < NF(f); j++)
			if (strcmp(f[j].name, "tokenizer") == 0)
				at = f[j].key;
		ERR(p, at, "", "cannot specify both tokenizer_source and tokenizer (use "
		    "'tokenizer: {source: ...}')");
	}
}

/* ------------------------------------------------------------ entry */

static void err_at(struct parser *p, unsigned line, unsigned col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void err_at(struct parser *p, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdiag_at(p, MK_DIAG_ERROR, line, col, "", fmt, ap);
	va_end(ap);
}

static void yaml_error(struct parser *p, const yaml_parser_t *yp)
{
	const char *what = yp->problem ? yp->problem : "unreadable YAML";
	unsigned line = (unsigned)yp->problem_mark.line + 1;
	unsigned col = (unsigned)yp->problem_mark.column + 1;

	if (yp->error == YAML_MEMORY_ERROR)
		p->nomem = true;
	else if (yp->context)
		err_at(p, line, col, "YAML syntax error: %s (%s at line %u, column %u)",
		       what, yp->context, (unsigned)yp->context_mark.line + 1,
		       (unsigned)yp->context_mark.column + 1);
	else
		err_at(p, line, col, "YAML syntax error: %s", what);
}

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
	if (!yaml_parser_load(&yp, &p.doc)) {
		yaml_error(&p, &yp);
		syntax = true;
	} else {
		doc_open = true;
		yaml_node_t *root = yaml_document_get_root_node(&p.doc);
		if (!root) {
			err_at(&p, 1, 1, "the configuration is empty");
		} else {
			yaml_document_t second;
			if (!yaml_parser_load(&yp, &second)) {
				yaml_error(&p, &yp);
				syntax = true;
			} else {
				yaml_node_t *r2 = yaml_document_get_root_node(&second);
				if (r2)
					ERR(&p, r2, "", "more than one YAML document; a merge "
					    "configuration is a single document");
				yaml_document_delete(&second);
			}
			if (!syntax)
				top(&p, root, cfg);
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
