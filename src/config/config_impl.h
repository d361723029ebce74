/* config_impl.h - internals shared by the config sources (not installed):
 * freeing and deep-copying the parsed structures, and the parser's state
 * and helpers shared by its files (config.c, diag.c, scalar.c, schema.c). */
#ifndef MK_CONFIG_IMPL_H
#define MK_CONFIG_IMPL_H

#include <yaml.h>
#include "config/config.h"

void mk__loc_clear(struct mk_config_loc *l);
int mk__loc_copy(struct mk_config_loc *dst, const struct mk_config_loc *src);
void mk__pvalue_clear(struct mk_pvalue *v);
void mk__params_clear(struct mk_params *p);
void mk__input_model_clear(struct mk_input_model *m);
void mk__input_slice_clear(struct mk_input_slice *s);
void mk__output_slice_clear(struct mk_output_slice *s);
void mk__module_clear(struct mk_output_module *m);

/* Deep copies; *dst is overwritten.  Return 0 or -MK_ENOMEM (then *dst
 * holds nothing to free). */
int mk__params_copy(struct mk_params *dst, const struct mk_params *src);
int mk__output_slice_copy(struct mk_output_slice *dst,
			  const struct mk_output_slice *src);

/* A model path string "path[@rev]": 0, or -MK_EINVAL with `why` set to a
 * static reason, or -MK_ENOMEM. */
int mk__model_path_parse(const char *s, size_t len, struct mk_model_path *out,
			 const char **why);
void mk__model_path_clear(struct mk_model_path *p);

/* ------------------------------------------------------------ the parser */

/* Nodes the walk may visit, aliases counted again: far above any real
 * config (400 slices of 10 sources is ~20000), far below a blow-up. */
#define VISIT_MAX (1u << 18)
/* Models of a models: or sources: list: real merges take a handful (model
 * stock, a few dozen); each pair is compared (the same model twice). */
#define MODELS_MAX 4096

struct parser {
	yaml_document_t doc;
	struct mk_diags *d;
	size_t visits;
	size_t aliases;             /* the document's (mk_yaml_check) */
	bool nomem;                 /* an allocation failed; results are partial */
	bool over;                  /* VISIT_MAX reached */
};

/* diag.c: record a diagnostic at node n (NULL: at 0:0) or at line:col,
 * under the key path `path`; a failed allocation sets p->nomem. */
void mk__config_diag(struct parser *p, enum mk_diag_level lv, const yaml_node_t *n,
		     const char *path, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void mk__config_err_at(struct parser *p, unsigned line, unsigned col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* A libyaml load failure as an error at its position (or p->nomem). */
void mk__config_yaml_error(struct parser *p, const yaml_parser_t *yp);

#define ERR(p, n, path, ...) mk__config_diag(p, MK_DIAG_ERROR, n, path, __VA_ARGS__)
#define WARN(p, n, path, ...) mk__config_diag(p, MK_DIAG_WARNING, n, path, __VA_ARGS__)

/* scalar.c: a node's YAML 1.1 meaning.  is_null: absent (NULL) or a null
 * scalar.  kind: "a list", "a map", "null", "a boolean", "an integer", "a
 * number", "a string".  excerpt: a scalar's text, printable and cut to
 * fit buf, for messages. */
bool mk__node_is_null(const yaml_node_t *n);
const char *mk__node_kind(const yaml_node_t *n);
const char *mk__node_excerpt(const yaml_node_t *n, char *buf, size_t size);
/* Coerce a node as pydantic's lax mode does; false after an error at the
 * node under `path` (to_str: *out is malloc'ed, NULL on failure). */
bool mk__node_to_num(struct parser *p, const yaml_node_t *n, const char *path, double *out);
bool mk__node_to_int(struct parser *p, const yaml_node_t *n, const char *path, long long *out);
bool mk__node_to_str(struct parser *p, const yaml_node_t *n, const char *path, char **out);
bool mk__node_to_bool(struct parser *p, const yaml_node_t *n, const char *path, bool *out);

/* schema.c: walk the top-level map `root` into cfg, recording every
 * problem in p->d. */
void mk__config_top(struct parser *p, yaml_node_t *root, struct mk_config *cfg);

#endif
