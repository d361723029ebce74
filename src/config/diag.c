/* diag.c - the config parser's diagnostics: recording an error or a
 * warning at a node or a position, and formatting one for a user. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"

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

	if (!g->line && !(d && d->label))   /* a text of the program's own: no place */
		return g->path && g->path[0] ? snprintf(buf, size, "%s: %s", g->path, g->msg) :
					       snprintf(buf, size, "%s", g->msg);
	if (g->path && g->path[0])
		return snprintf(buf, size, "%s:%u:%u: %s: %s", label, g->line, g->col,
				g->path, g->msg);
	return snprintf(buf, size, "%s:%u:%u: %s", label, g->line, g->col, g->msg);
}

/* Append one diagnostic: 0, or -1 when out of memory (d unchanged). */
static int vdiags_add(struct mk_diags *d, enum mk_diag_level lv, unsigned line, unsigned col,
		      const char *path, const char *fmt, va_list ap)
{
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
	return 0;
out:
	free(msg);
	free(pc);
	return -1;
}

int mk_diags_add(struct mk_diags *d, enum mk_diag_level lv, unsigned line, unsigned col, const char *path,
		 const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vdiags_add(d, lv, line, col, path, fmt, ap);
	va_end(ap);
	return rc;
}

static void vdiag_at(struct parser *p, enum mk_diag_level lv, unsigned line,
		     unsigned col, const char *path, const char *fmt, va_list ap)
{
	if (vdiags_add(p->d, lv, line, col, path, fmt, ap))
		p->nomem = true;
}

void mk__config_diag(struct parser *p, enum mk_diag_level lv, const yaml_node_t *n,
		     const char *path, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdiag_at(p, lv, n ? (unsigned)n->start_mark.line + 1 : 0,
		 n ? (unsigned)n->start_mark.column + 1 : 0, path, fmt, ap);
	va_end(ap);
}

void mk__config_err_at(struct parser *p, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdiag_at(p, MK_DIAG_ERROR, line, col, "", fmt, ap);
	va_end(ap);
}

void mk__config_yaml_error(struct parser *p, const yaml_parser_t *yp)
{
	const char *what = yp->problem ? yp->problem : "unreadable YAML";
	unsigned line = (unsigned)yp->problem_mark.line + 1;
	unsigned col = (unsigned)yp->problem_mark.column + 1;

	if (yp->error == YAML_MEMORY_ERROR)
		p->nomem = true;
	else if (yp->context)
		mk__config_err_at(p, line, col, "YAML syntax error: %s (%s at line %u, column %u)",
				  what, yp->context, (unsigned)yp->context_mark.line + 1,
				  (unsigned)yp->context_mark.column + 1);
	else
		mk__config_err_at(p, line, col, "YAML syntax error: %s", what);
}
