/* config.h - the mergekit YAML merge configuration: parse, validate,
 * evaluate parameters, normalise `models:` into slices.
 *
 * This is the parsing layer of mk-plan; it never opens a model.  The
 * schema is mergekit's (MergeConfiguration and friends): merge_method,
 * models | slices | modules, base_model, parameters at the top, module,
 * output-slice and source/model levels, dtype, out_dtype,
 * tokenizer_source | tokenizer, chat_template, residual_weight.
 *
 * Parsing reports every problem it finds in one run as a list of
 * diagnostics ("label:line:col: path: message"), errors and warnings:
 *   - unknown keys are warnings (mergekit ignores them silently), with the
 *     closest known key suggested ("did you mean 'base_model'?");
 *   - everything mergekit rejects while validating is an error here too,
 *     plus what mergekit only finds later or never: dtype names, the span
 *     of every source of a slice, the same model twice in one slice.
 * YAML is read as PyYAML's safe loader reads it (YAML 1.1 plain scalars:
 * yes/no/on/off are booleans, `0o17`/`017` octal, ...), then coerced as
 * pydantic does: a parameter value 1, true, '1' and 1.0 are all 1.0.
 *
 * Ownership: mk_config_parse gives the caller one struct mk_config (free
 * with mk_config_free) and fills a caller-owned struct mk_diags (free its
 * contents with mk_diags_free).  Every pointer inside a config is owned by
 * it; functions returning `const` pointers into a config lend them for the
 * config's lifetime.  Functions named *_free accept NULL.
 */
#ifndef MK_CONFIG_H
#define MK_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/diag.h"
#include "mk/dtype.h"
#include "mk/err.h"

/* ------------------------------------------------------------ locations */

/* Where a node was written: 1-based line and column, and its config path
 * ("slices[1].sources[0].layer_range", "parameters.t[2].value").  `path`
 * is NULL for objects made outside a parse (mk_model_ref_parse). */
struct mk_config_loc {
	unsigned line, col;
	char *path;
};

/* Append a diagnostic (path "" at the top; the message printf-formatted):
 * 0, or -1 when out of memory (then d is unchanged). */
int mk_diags_add(struct mk_diags *d, enum mk_diag_level lv, unsigned line, unsigned col, const char *path,
		 const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* ------------------------------------------------------------ model references */

/* A model path with an optional revision; path NULL = absent. */
struct mk_model_path {
	char *path;
	char *revision;           /* NULL when none */
};

/* A model reference (mergekit's ModelReference).  String form:
 * "path[@rev][+lora[@rev]]", split on '+' first, then each part on '@'
 * (so local paths holding '+' or '@' need the map form, as in mergekit).
 * Map form: {model: path[@rev] | {path, revision}, lora: ..., 
 * override_architecture: Name}. */
struct mk_model_ref {
	struct mk_model_path model;
	struct mk_model_path lora;          /* lora.path NULL: no LoRA */
	char *override_arch;                /* NULL when none */
	struct mk_config_loc loc;
};

/* Parse the string form into *out (zeroed first; free the contents with
 * mk_model_ref_clear).  Errors (-MK_EINVAL): three or more '+' parts,
 * more than one '@' in a part, an empty path or revision. */
int mk_model_ref_parse(const char *s, struct mk_model_ref *out,
		       struct mk_err *err);

/* Structural equality over (path, revision, lora, override_arch): "org/x"
 * and "org/x@main" differ, so do "./a" and "a". NULL == NULL only. */
bool mk_model_ref_equal(const struct mk_model_ref *a,
			const struct mk_model_ref *b);

/* The string form "path[@rev][+lora[@rev]]"; with override_arch the YAML
 * flow map "{model: ..., lora: ..., override_architecture: ...}" instead
 * (lora left out when absent).  Malloc'ed into *out. */
int mk_model_ref_format(const struct mk_model_ref *r, char **out,
			struct mk_err *err);

/* Deep copy (the location path too).  *dst is overwritten, not freed. */
int mk_model_ref_copy(struct mk_model_ref *dst, const struct mk_model_ref *src,
		      struct mk_err *err);

/* Free the strings of *r and zero it.  NULL is allowed. */
void mk_model_ref_clear(struct mk_model_ref *r);

/* ------------------------------------------------------------ parameters */

enum mk_pvalue_kind {
	MK_PV_SCALAR,             /* 0.5 */
	MK_PV_GRADIENT,           /* [0, 0.5, 1]: n >= 1 values */
	MK_PV_CONDS,              /* [{filter: mlp, value: ...}, ...] */
};

struct mk_pcond;

/* A parameter setting (mergekit's ParameterSetting), every number a
 * finite double.  A bare conditional map {filter, value} is held as a
 * one-element MK_PV_CONDS with `bare` set. */
struct mk_pvalue {
	enum mk_pvalue_kind kind;
	double scalar;                    /* MK_PV_SCALAR */
	size_t n;                         /* MK_PV_GRADIENT */
	double *grad;
	size_t nconds;                    /* MK_PV_CONDS */
	struct mk_pcond *conds;
	bool bare;                        /* written as a bare map */
	struct mk_config_loc loc;
};

/* One conditional: `value` is a scalar or a gradient, never MK_PV_CONDS. */
struct mk_pcond {
	char *filter;                     /* NULL: matches every tensor */
	struct mk_pvalue value;
	struct mk_config_loc loc;
};

struct mk_param {
	char *name;
	struct mk_pvalue value;
	struct mk_config_loc loc;         /* of the key */
};

/* A `parameters:` map in YAML order; a key written twice keeps its later
 * value (as PyYAML) and draws a warning. */
struct mk_params {
	size_t n;
	struct mk_param *v;
};

/* The setting called `name`, or NULL.  `p` may be NULL. */
const struct mk_pvalue *mk_params_find(const struct mk_params *p,
				       const char *name);

/* Evaluate a setting for a tensor name and an interpolation position t
 * (mk-config(5)): a scalar as is; a gradient v[0..n-1] in double as
 * s = t*(n-1), i0 = trunc(s), i1 = min(n-1, i0+1), f = s-i0,
 * (1-f)*v[i0] + f*v[i1] (that order, no fused multiply-add); conditionals
 * in order, the first whose filter is absent, "*" or a (case-sensitive)
 * substring of `tensor` decides.  t is clamped to [0, 1] (NaN -> 0);
 * `tensor` NULL or "" matches only filterless and "*" entries.
 * Returns true and sets *out, or false for "no value" (no entry matched). */
bool mk_pvalue_eval(const struct mk_pvalue *v, const char *tensor, double t,
		    double *out);

/* ------------------------------------------------------------ the configuration */

/* An entry of `models:`. */
struct mk_input_model {
	struct mk_model_ref model;
	struct mk_params params;
	struct mk_config_loc loc;
};

/* An entry of `sources:`: layers [start, end) of a model. */
struct mk_input_slice {
	struct mk_model_ref model;
	long long start, end;             /* 0 <= start <= end */
	struct mk_params params;
	struct mk_config_loc loc;
};

/* An entry of `slices:`.  All sources span end-start == span layers, no
 * model appears twice (both checked at parse time). */
struct mk_output_slice {
	size_t nsources;
	struct mk_input_slice *sources;
	struct mk_model_ref *base_model;  /* NULL: the top-level base */
	bool has_residual_weight;         /* parsed, unused (as mergekit) */
	double residual_weight;
	struct mk_params params;
	struct mk_config_loc loc;
};

/* A value of `modules:`; exactly one of models/slices is non-empty. */
struct mk_output_module {
	char *name;
	size_t nmodels;
	struct mk_input_model *models;
	size_t nslices;
	struct mk_output_slice *slices;
	struct mk_params params;
	struct mk_config_loc loc;
};

enum mk_tok_source_kind {
	MK_TOKSRC_NONE,                   /* not given */
	MK_TOKSRC_UNION,                  /* "union" */
	MK_TOKSRC_BASE,                   /* "base" */
	MK_TOKSRC_MODEL,                  /* a model reference */
};

struct mk_tok_source {
	enum mk_tok_source_kind kind;
	struct mk_model_ref model;        /* MK_TOKSRC_MODEL */
	struct mk_config_loc loc;
};

enum mk_tok_embed_kind {
	MK_TOKEMB_DEFAULT,                /* source: null (the default rules) */
	MK_TOKEMB_MODEL,                  /* source: a model reference */
	MK_TOKEMB_MODEL_TOKEN,            /* {kind: model_token, model, token_id|token} */
	MK_TOKEMB_ZERO,                   /* {kind: zero} */
};

/* An entry of tokenizer.tokens. */
struct mk_token_embed {
	char *token;                      /* the map key */
	enum mk_tok_embed_kind kind;
	struct mk_model_ref model;        /* MODEL, MODEL_TOKEN */
	bool has_token_id;                /* MODEL_TOKEN: token_id or src_token */
	long long token_id;
	char *src_token;
	bool force;
	struct mk_config_loc loc;
};

struct mk_tokenizer_config {
	struct mk_tok_source source;      /* default MK_TOKSRC_UNION */
	size_t ntokens;
	struct mk_token_embed *tokens;    /* YAML order */
	bool has_pad_to_multiple_of;
	long long pad_to_multiple_of;
	struct mk_config_loc loc;
};

/* A dtype name as written and its meaning. */
struct mk_config_dtype {
	char *name;                       /* NULL: not given */
	enum mk_dtype dtype;
	const char *canonical;            /* "bfloat16", ... (static) */
	struct mk_config_loc loc;
};

struct mk_config {
	char *text;                       /* the source, verbatim, NUL-terminated */
	size_t len;
	char *label;

	char *merge_method;
	struct mk_config_loc merge_method_loc;

	size_t nmodels;                   /* exactly one of these three */
	struct mk_input_model *models;    /* lists is non-empty */
	size_t nslices;
	struct mk_output_slice *slices;
	size_t nmodules;
	struct mk_output_module *modules; /* YAML order */

	struct mk_model_ref *base_model;  /* NULL when none */
	struct mk_params params;
	struct mk_config_dtype dtype;     /* inputs cast to it on load */
	struct mk_config_dtype out_dtype; /* outputs cast to it on save */
	struct mk_tok_source tokenizer_source;
	struct mk_tokenizer_config *tokenizer; /* NULL when none */
	char *chat_template;              /* NULL when none */
	struct mk_config_loc chat_template_loc;
};

/* Parse and validate `len` bytes of YAML.  `label` names the text in
 * diagnostics (a file name).  `diags` (may be NULL) is zeroed and then
 * receives every error and warning.  Returns 0 and a config in *out when
 * there are no errors (warnings allowed); else *out = NULL and
 * -MK_EFORMAT (YAML syntax), -MK_EINVAL (schema, values) or -MK_ENOMEM,
 * with `err` holding the first error, formatted, and how many more. */
int mk_config_parse(const char *text, size_t len, const char *label,
		    struct mk_config **out, struct mk_diags *diags,
		    struct mk_err *err);
void mk_config_free(struct mk_config *cfg);

/* Like mk_config_parse, but when the YAML could be read and only values or
 * keys were wrong (-MK_EINVAL), *out still receives what was understood,
 * with the invalid parts left unset, so that a caller (mk-plan) can look
 * for more problems (unknown method, missing models) and report them all
 * in one run.  Such a config must not be used to merge. */
int mk_config_parse_partial(const char *text, size_t len, const char *label,
			    struct mk_config **out, struct mk_diags *diags,
			    struct mk_err *err);


/* Every model the config references, each once (structural equality):
 * the top-level base first, then in order of first appearance in the YAML
 * (models, slices' sources, modules' models and sources), as mergekit's
 * referenced_models but deterministic.  Slice-level base_model and
 * tokenizer sources are not included (nor are they in mergekit), nor
 * are the references a partial parse left unset (their errors are
 * already diagnostics), so every one returned has a model path.
 * *out is a malloc'ed array of pointers lent from cfg (free() it). */
int mk_config_models(const struct mk_config *cfg,
		     const struct mk_model_ref ***out, size_t *n,
		     struct mk_err *err);

/* The base model in effect for an output slice: the slice's base_model,
 * else the top-level one, else NULL.  `slice` may be NULL. */
const struct mk_model_ref *mk_config_base_for(const struct mk_config *cfg,
					      const struct mk_output_slice *slice);

/* ------------------------------------------------------------ features not planned yet */

/* A parsed feature that this version of mk-plan refuses. */
struct mk_config_feature {
	const char *what;                 /* "tokenizer_source", "LoRA model reference" */
	const char *later;                /* which later work brings it */
	const char *path;                 /* lent from cfg */
	unsigned line, col;
};

/* List the refused features in document order (none in this version:
 * LoRA references, the last, are planned now).  *out is malloc'ed
 * (free() it; NULL when *n is 0). */
int mk_config_unsupported(const struct mk_config *cfg,
			  struct mk_config_feature **out, size_t *n,
			  struct mk_err *err);

/* ------------------------------------------------------------ parameter lookup */

/* Where a value came from (mergekit's precedence, mk-config(5)). */
enum mk_param_level {
	MK_PL_NONE = 0,
	MK_PL_SOURCE,                     /* slice.sources[i].parameters (models[i].parameters) */
	MK_PL_SLICE,                      /* slice.parameters */
	MK_PL_MODULE,                     /* modules.X.parameters */
	MK_PL_TOP,                        /* parameters */
};

/* The context of one lookup; any member may be NULL.  `slice` is a
 * normalised slice (mk_config_normalize) or one of the config's. */
struct mk_param_ctx {
	const struct mk_params *top;            /* &cfg->params */
	const struct mk_params *module;         /* &module->params */
	const struct mk_output_slice *slice;
};

/* Look parameter `name` up for (tensor, t).  `model` NULL means a global
 * parameter: the source level is skipped.  Otherwise the sources of the
 * slice whose model equals `model` are tried first, in order.  Each level
 * holding `name` is evaluated; a "no value" result falls through to the
 * next level.  Returns the level that gave *out, or MK_PL_NONE.  Whether a
 * missing parameter is an error (required, and not the base: see
 * mk_config_base_for) is the caller's decision. */
enum mk_param_level mk_param_lookup(const struct mk_param_ctx *sc,
				    const char *name,
				    const struct mk_model_ref *model,
				    const char *tensor, double t, double *out);

/* ------------------------------------------------------------ normalisation (models: into slices) */

/* Number of layers of `ref` (in the module being normalised).  Return 0
 * and set *n, or a negative MK_E* code with `err` filled. */
typedef int (*mk_layer_count_fn)(void *ctx, const struct mk_model_ref *ref,
				 long long *n, struct mk_err *err);

/* Normalise one module's inputs into output slices.  With `models`
 * (nmodels > 0) the result is one slice: a source [0, layers) per model
 * with that model's parameters, then the base (when not NULL and not
 * listed) with its full range and no parameters.  Otherwise `slices` are
 * deep-copied.  Then every slice is checked: sources must span the same
 * number of layers and no model may appear twice (mergekit would keep only
 * the later one, silently; mk refuses).  On success *out (nout entries)
 * belongs to the caller: mk_output_slices_free(*out, *nout).  Errors:
 * -MK_EINVAL, or what the callback returned. */
int mk_config_normalize(const struct mk_input_model *models, size_t nmodels,
			const struct mk_output_slice *slices, size_t nslices,
			const struct mk_model_ref *base,
			mk_layer_count_fn layers, void *ctx,
			struct mk_output_slice **out, size_t *nout,
			struct mk_err *err);
void mk_output_slices_free(struct mk_output_slice *v, size_t n);

/* The largest configuration text mk reads (a recipe of that size is a
 * mistake: real ones are a few KiB). */
#define MK_CONFIG_MAX (64u << 20)

/* Read a configuration's text (at most MK_CONFIG_MAX bytes, NUL-
 * terminated, the caller frees *text): from a regular file, a pipe or
 * socket named by its descriptor (/dev/stdin, /dev/fd/N, /proc/self/fd/N;
 * read to its end: mk-plan <(...)), or standard input for "-"; any other
 * file that is not regular (a FIFO, a device) is refused.  *label
 * is what names it in messages: "stdin", else path. */
int mk_config_read(const char *path, uint8_t **text, size_t *len, const char **label, struct mk_err *err);

/* The bounds of every YAML text mk reads (a configuration, mk-multi's
 * recipes, mk-moe's configuration), far above any real one: lists and
 * maps nested MK_YAML_MAX_DEPTH deep, MK_YAML_MAX_NODES nodes (scalars,
 * lists, maps, aliases; a stream's documents together), MK_CONFIG_MAX
 * bytes.  (Expanding aliases is bounded where a document is walked.) */
#define MK_YAML_MAX_DEPTH 64
#define MK_YAML_MAX_NODES (1 << 18)

struct mk_yaml_over {
	unsigned line, col;          /* where the bound was passed */
	size_t aliases;              /* the aliases met before it */
	char msg[160];               /* which bound: "more than ..." */
};

/* Scan text (len bytes) with libyaml's event parser, in time linear in
 * len: 0 within the bounds (or a syntax error, which loading the text
 * reports), 1 past one (*over says which and where), -1 out of memory.
 * *over's aliases counts the document's aliases either way. */
int mk_yaml_check(const char *text, size_t len, struct mk_yaml_over *over);

#endif
