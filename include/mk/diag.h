/* diag.h - diagnostics of a merge configuration: every problem a parse
 * or plan found, each with its place (line, column, config path).
 *
 * mk_validate_config and mk_run_merge (mk/run.h) fill a caller-owned
 * struct mk_diags; free its contents with mk_diags_free.
 */
#ifndef MK_DIAG_H
#define MK_DIAG_H

#include <stddef.h>
#include "mk/api.h"

enum mk_diag_level { MK_DIAG_ERROR, MK_DIAG_WARNING };

struct mk_diag {
	enum mk_diag_level level;
	unsigned line, col;       /* 1-based; 0 when the text has no position */
	char *path;               /* config path, "" at the top */
	char *msg;                /* one line, no trailing newline */
};

/* In the order found (document order, mostly). */
struct mk_diags {
	char *label;              /* as passed to mk_config_parse */
	size_t n, nerrors, nwarnings;
	struct mk_diag *v;
};

/* Free the contents of `d` and zero it.  NULL is allowed. */
MK_API void mk_diags_free(struct mk_diags *d);

/* Format one diagnostic as "label:line:col: path: message" (the path part
 * is left out when empty; the level is not written: a program prefixes
 * "warning: "/"error: " as it likes); without a label and a line, as
 * "path: message" or the message alone.  Returns what snprintf returns. */
MK_API int mk_diag_format(const struct mk_diags *d, const struct mk_diag *g,
		   char *buf, size_t size);

#endif
