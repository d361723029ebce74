/* arch.h - model architectures: which tensors a model has, by name.
 *
 * The definitions are mergekit's JSON files (the .json files in src/arch/data, carried
 * verbatim and embedded into libmk at build time; adding an architecture is
 * adding a file).  This module parses them, picks one for a model from its
 * config.json, lists the weights a merge plans for it, resolves a planned
 * weight in an input checkpoint (name, aliases, tied names, fused-expert
 * conversion), infers a definition from tensor names when none is known,
 * and edits the output config.json.  The functions below state the rules;
 * mk-compat(7) says where mk differs from mergekit.
 *
 * Ownership: every struct returned through an `out` pointer is new and
 * owned by the caller, freed with the matching *_free (NULL allowed);
 * `const` pointers returned by lookups are borrowed from their container.
 * Errors: negative MK_E* codes with `err` filled (see err.h); messages name
 * the definition file or class, the config key, the tensor.
 */
#ifndef MK_ARCH_H
#define MK_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

/* ---------------------------------------------------------- embedded data */

struct mk_arch_file {
	const char *name;             /* file name, e.g. "llama.json" */
	const unsigned char *data;    /* the file's bytes (NUL after them) */
	size_t len;                   /* byte count, NUL not counted */
};

/* The embedded definition files, sorted by name (static storage). */
const struct mk_arch_file *mk_arch_files(size_t *n);

/* ------------------------------------------------------------ definitions */

enum mk_wsection { MK_WS_PRE = 0, MK_WS_LAYER = 1, MK_WS_POST = 2 };

/* One WeightInfo.  In a definition these are templates (strings may hold
 * ${...}); in lists returned by mk_arch_weights/mk_arch_planned they are
 * substituted and carry the module's weight prefix. */
struct mk_weight {
	char *name;                   /* canonical (output) name */
	bool is_embed;                /* vocabulary-indexed rows */
	bool optional;                /* may be absent from inputs */
	size_t naliases;
	char **aliases;               /* alternative input names, in order */
	size_t ntied;
	char **tied_names;            /* load fall-backs, in order */
	char *force_dtype;            /* mergekit dtype name or NULL */
	/* position (set in lists; in templates: section, layer -1, module 0) */
	enum mk_wsection section;
	int64_t layer;                /* layer index, -1 for pre/post */
	size_t module;                /* index into mk_arch.modules */
};

struct mk_arch_module {
	char *name;                   /* "default" for kind "module" files */
	char *weight_prefix;          /* NULL when none (prepended verbatim) */
	char *subfolder;              /* NULL when none */
	char *num_layers_key;         /* dotted config.json path, or NULL */
	int64_t override_num_layers;  /* >= 0 beats the key; -1 when unset */
	size_t npre, nlayer, npost;
	struct mk_weight *pre, *layer, *post;   /* templates */
};

enum mk_arch_kind {
	MK_ARCH_JSON = 0,             /* a definition file as it is */
	MK_ARCH_AFMOE,                /* AfmoeForCausalLM: afmoe_partial + per-expert weights */
	MK_ARCH_GLM4MOE,              /* dense then MoE layers: Glm4MoeForCausalLM,
				       * DeepseekV3ForCausalLM, Glm4MoeLiteForCausalLM */
	MK_ARCH_INFERRED,             /* built by mk_arch_infer */
	MK_ARCH_HYBRID,               /* Qwen3NextForCausalLM: linear/full attention layers */
};

/* What a layer is, where a model has layers of more than one kind (read
 * from its config.json; the names are the config's own words).  Layers of
 * different kinds hold different tensors (dense/sparse MLP, linear/full
 * attention) or attend differently (sliding/full), so a merge takes a
 * layer only from layers of the same kind, and the output config.json
 * lists the kinds its layers came out with. */
enum mk_layer_kind {
	MK_LK_ANY = 0,                /* the model has one kind of layer */
	MK_LK_DENSE,                  /* "dense": one MLP */
	MK_LK_SPARSE,                 /* "sparse": routed experts */
	MK_LK_LINEAR_ATTN,            /* "linear_attention" */
	MK_LK_FULL_ATTN,              /* "full_attention" */
	MK_LK_SLIDING_ATTN,           /* "sliding_attention" */
};

/* Where the output config.json records layer kinds. */
enum mk_kinds_key {
	MK_KK_NONE = 0,
	MK_KK_LAYER_TYPES,            /* "layer_types": one name per layer */
	MK_KK_MLP_LAYER_TYPES,        /* "mlp_layer_types": one name per layer */
	MK_KK_FIRST_K_DENSE,          /* "first_k_dense_replace": k dense layers, then sparse */
};

struct mk_arch {
	char *file;                   /* file stem ("llama"), NULL when inferred */
	char *model_type;             /* the file's model_type ("" allowed) */
	size_t narchitectures;
	char **architectures;         /* top-level class names */
	size_t nmodules;
	struct mk_arch_module *modules; /* in the file's order */
	size_t ntagalong;
	char **tagalong_files;        /* copied from the donor when present */
	char *vocab_size_key;         /* dotted path; NULL means "vocab_size" */
	enum mk_arch_kind kind;
	int64_t num_experts;          /* AFMOE: num_experts; GLM4MOE: n_routed_experts */
	int64_t first_k_dense;        /* GLM4MOE: first_k_dense_replace */
	/* layer kinds of the config the definition was chosen for (NULL: one
	 * kind); past the end the pattern repeats (attention kinds) or the
	 * last kind goes on (MLP kinds) */
	size_t nkinds;
	unsigned char *kinds;         /* enum mk_layer_kind per layer */
	bool kinds_periodic;
	enum mk_kinds_key kinds_key;  /* where config.json says them */
};

/* mk's own definitions (not mergekit's; src/arch/data/NOTICE):
 * deepseek_v3 (also Kimi K2, whose config says model_type "kimi_k2") and
 * glm4_moe_lite are GLM4MOE kinds: MLA attention (q_proj, or q_a_proj,
 * q_a_layernorm and q_b_proj when q_lora_rank is set; all optional),
 * dense layers then MoE layers (experts in the transformers-v5 fused
 * names, assembled from per-expert checkpoints by mk_arch_fused).  The
 * multi-token-prediction layers their releases store past the last
 * layer (model.layers.{num_hidden_layers}.*: a decoder layer plus enorm,
 * hnorm, eh_proj, shared_head.*) are not described: transformers drops
 * them on load, and a slice or frankenmerge would put a regular layer's
 * tensors under that index; so merges leave them out (the output is a
 * model without MTP; num_nextn_predict_layers is kept as the donor has
 * it, and speculative decoding with MTP needs the donor's layer copied
 * back).  Qwen3-Next's mtp.* tensors likewise.  gpt_oss is a plain
 * definition (sinks, fused experts with biases, router bias;
 * MXFP4-quantized checkpoints (*_blocks, *_scales) are read dequantized,
 * planner/quant.h); qwen3_next is a HYBRID kind (dense MLP
 * layers, mlp_only_layers or decoder_sparse_step > 1, are refused). */

/* Parse one definition (JSON text of `len` bytes).  `file` is the stem
 * recorded in the result and used in messages (e.g. "llama").  Keys mk
 * does not use (metadata for other tools, such as input_space, head_split
 * or procedural_spaces) are ignored; a missing required key, a
 * wrong type or an unknown "kind" is MK_EFORMAT. */
int mk_arch_parse(const char *text, size_t len, const char *file,
		  struct mk_arch **out, struct mk_err *err);
/* Deep copy. */
int mk_arch_clone(const struct mk_arch *a, struct mk_arch **out,
		  struct mk_err *err);
void mk_arch_free(struct mk_arch *a);
/* Two definitions describe the same model layout (mergekit's equality:
 * same kind, file contents, and procedural parameters). */
bool mk_arch_equal(const struct mk_arch *a, const struct mk_arch *b);
/* The vocabulary size key: vocab_size_key or "vocab_size". */
const char *mk_arch_vocab_key(const struct mk_arch *a);

/* ---------------------------------------------------------------- registry */

struct mk_arch_registry;              /* every embedded definition */

int mk_arch_registry_open(struct mk_arch_registry **out, struct mk_err *err);
void mk_arch_registry_free(struct mk_arch_registry *r);
size_t mk_arch_registry_count(const struct mk_arch_registry *r);
/* The i-th definition, in file-name order (borrowed). */
const struct mk_arch *mk_arch_registry_at(const struct mk_arch_registry *r,
					  size_t i);
/* A definition by file stem ("phi2-old"), or NULL (borrowed). */
const struct mk_arch *mk_arch_registry_file(const struct mk_arch_registry *r,
					    const char *stem);
/* Look up a class name among the top-level `architectures` lists.  One
 * claimant: it.  Several: the one whose model_type equals `model_type`
 * (may be NULL), else NULL.  None: NULL.  Sub-module classes are not
 * registered.  Borrowed result. */
const struct mk_arch *mk_arch_registry_find(const struct mk_arch_registry *r,
					    const char *class_name,
					    const char *model_type);

/* ------------------------------------------------------- model config.json */

struct mk_hfconfig;                   /* a parsed config.json */

/* Parse config.json text; `label` names it in messages (a path). */
int mk_hfconfig_parse(const char *text, size_t len, const char *label,
		      struct mk_hfconfig **out, struct mk_err *err);
void mk_hfconfig_free(struct mk_hfconfig *c);
/* Value at a dotted path ("text_config.num_hidden_layers"): an integer
 * (a real with an integral value is accepted), a string (borrowed), or a
 * presence test.  Absent or wrong type: MK_ENOENT / MK_EFORMAT with a
 * message naming the file and the key. */
int mk_hfconfig_int(const struct mk_hfconfig *c, const char *key,
		    int64_t *out, struct mk_err *err);
int mk_hfconfig_str(const struct mk_hfconfig *c, const char *key,
		    const char **out, struct mk_err *err);
bool mk_hfconfig_has(const struct mk_hfconfig *c, const char *key);
/* model_type or NULL (borrowed). */
const char *mk_hfconfig_model_type(const struct mk_hfconfig *c);

/* Choose the architecture for one model, as mergekit does.  The
 * `architectures` list must hold exactly one class, unless
 * `override_class` (may be NULL) replaces it.  AfmoeForCausalLM and
 * Glm4MoeForCausalLM are built procedurally (num_experts,
 * n_routed_experts and first_k_dense_replace read from the config).
 * Result: 0 and *out a new definition, or 0 and *out NULL when the class
 * is unknown (no file claims it, or several do and none has the config's
 * model_type); then *unknown_class (if not NULL) receives the class name
 * (malloc'ed) so the caller can warn.  Errors: no/empty/several
 * architectures, missing procedural keys. */
int mk_arch_for_config(const struct mk_arch_registry *r,
		       const struct mk_hfconfig *cfg, const char *override_class,
		       struct mk_arch **out, char **unknown_class,
		       struct mk_err *err);

/* The kind of layer `layer` (any index >= 0) of a model described by a,
 * MK_LK_ANY when its layers are of one kind. */
enum mk_layer_kind mk_arch_layer_kind(const struct mk_arch *a, int64_t layer);
/* The config.json word for a kind ("sparse", "full_attention"; "" for
 * MK_LK_ANY). */
const char *mk_layer_kind_name(enum mk_layer_kind k);

/* A module's layer count for a config: override_num_layers when set, else
 * the integer at num_layers_key; an error when neither exists. */
int mk_arch_num_layers(const struct mk_arch *a, size_t module,
		       const struct mk_hfconfig *cfg, int64_t *out,
		       struct mk_err *err);

/* --------------------------------------------------------------- weights */

struct mk_weight_list {
	size_t n;
	struct mk_weight *w;
};

void mk_weight_list_free(struct mk_weight_list *l);   /* frees contents */

/* Substitute one template string: ${num_layers},
 * ${layer_index} (layer >= 0 only), each with +1/-1, $name without braces,
 * $$ = '$'.  Strings without '{' are copied as they are.  Unknown or
 * malformed placeholder: MK_EFORMAT.  *out is malloc'ed. */
int mk_arch_subst(const char *tmpl, int64_t num_layers, int64_t layer,
		  char **out, struct mk_err *err);

/* The weights of one section of one module, substituted with `num_layers`
 * (the layer count of the config being described) and, for MK_WS_LAYER,
 * `layer`; the module's weight prefix prepended to names, aliases and
 * tied names.  Procedural kinds add/replace their weights as mergekit.
 * The list is appended to *l (an empty list is {0, NULL}). */
int mk_arch_weights(const struct mk_arch *a, size_t module,
		    enum mk_wsection section, int64_t num_layers, int64_t layer,
		    struct mk_weight_list *l, struct mk_err *err);
/* The weights of layer `layer` as a layer of kind `kind` (a merge that
 * moves a layer to another position names it as the kind it came from);
 * mk_arch_weights(MK_WS_LAYER) is this with mk_arch_layer_kind(a, layer).
 * Weights come out in the same order for every layer of one kind. */
int mk_arch_layer_weights(const struct mk_arch *a, size_t module, int64_t num_layers,
			  int64_t layer, enum mk_layer_kind kind,
			  struct mk_weight_list *l, struct mk_err *err);

/* Every weight a merge plans for the model, appended to *l: modules in
 * order; per module its pre weights, then layers 0..n-1, then post
 * weights.  `num_layers[m]` is module m's layer count.  Duplicate output
 * names (qwen2_vl's projector) are kept once, at the first position, with
 * the last copy's fields. */
int mk_arch_planned(const struct mk_arch *a, const int64_t *num_layers,
		    struct mk_weight_list *l, struct mk_err *err);

/* Resolve a weight in a checkpoint: the first of name, aliases, tied names
 * for which has(ctx, name) is true.  Returns that string (borrowed from
 * w) or NULL.  *how (if not NULL) gets 0 name, 1 alias, 2 tied name.
 * (Conversion of fused experts is mk_arch_fused.) */
typedef bool (*mk_has_tensor_fn)(void *ctx, const char *name);
const char *mk_weight_resolve(const struct mk_weight *w, mk_has_tensor_fn has,
			      void *ctx, int *how);

/* --------------------------------------- fused MoE checkpoint conversion */

enum mk_fused_kind {
	MK_FUSED_RENAME = 1,      /* the tensor under another name */
	MK_FUSED_STACK,           /* out[e] = src[e]: a new axis 0 of experts */
	MK_FUSED_STACK_CONCAT,    /* out[e] = concat along `axis` of parts */
};

/* How to build a transformers-v5 fused tensor from a per-expert checkpoint.
 * sources[e * nparts + p] is part p of expert e (experts in natural numeric
 * order 0..nexperts-1).  For MK_FUSED_RENAME nexperts = nparts = 1.  The
 * result shape is [nexperts, sum of the parts' dim 0, rest...] for
 * STACK_CONCAT (axis 0 within an expert, i.e. axis 1 of the result). */
struct mk_fused {
	enum mk_fused_kind kind;
	int axis;                 /* concat axis within one expert's tensor */
	size_t nexperts, nparts;
	char **sources;
};

void mk_fused_free(struct mk_fused *f);

/* Is there a conversion table for this model_type? */
bool mk_arch_fused_known(const char *model_type);

/* Describe how `target` is assembled from the checkpoint's tensors `names`
 * (n strings) under the conversion table of `model_type`.  Returns 0 with
 * *out NULL when the table does not apply (unknown model type, target not
 * a fused name, no source tensors).  MK_EMISMATCH when the parts' expert
 * index sets differ or are not 0..E-1 (the message names them). */
int mk_arch_fused(const char *model_type, const char *target,
		  const char *const *names, size_t n, struct mk_fused **out,
		  struct mk_err *err);

/* ----------------------------------------------------- automatic inference */

/* One input model for inference: its tensor names and, optionally, the
 * dim-0 size of each tensor (0 when not 2-D or unknown; `rows` may be NULL)
 * and the config's vocab size (0 when unknown). */
struct mk_arch_names {
	const char *const *names;
	const uint64_t *rows;
	size_t n;
	uint64_t vocab_size;
};

/* Infer a definition from tensor names alone (mergekit infers one when a
 * model's architecture is unknown; mk uses the checkpoint's names only).
 * models[0] is the base (the donor).  Layer templates: the first ".<n>."
 * replaced by ".${layer_index}."; modules per prefix (sorted), plus a
 * catch-all "default" module that takes every non-layer name unchanged
 * (pre weights, sorted) and is placed first.  optional = not present in
 * every model (every layer for templates); is_embed by heuristic (name has
 * "embed", "lm_head" or "wte", or a 2-D tensor with vocab_size rows); an
 * optional lm_head-like weight gets the embedding as tied name.  Each
 * module has override_num_layers = its detected count and no key.
 * MK_EINVAL when no names at all. */
int mk_arch_infer(const struct mk_arch_names *models, size_t nmodels,
		  struct mk_arch **out, struct mk_err *err);

/* -------------------------------------------------- output config.json */

/* Edit the donor's config.json (mk-compat(7)): when `dtype` is not
 * NULL set "dtype" (and "torch_dtype" if present); for each module m with
 * num_layers[m] >= 0 (num_layers may be NULL: no change) write the count
 * at its num_layers_key, descending into nested objects; a module
 * without a key is skipped (a warning for the caller: *warnings, if not
 * NULL, gets a malloc'ed newline-separated text or NULL).  `vocab_size`
 * >= 0 sets the vocab key.  `architecture` (not NULL: the donor reference's
 * override_architecture) sets "architectures" to [architecture], as
 * mergekit's config of such a reference says.  Output: keys sorted, 2-space indent, reals in
 * shortest round-trip form as Python writes them (1e-05, 0.02, 10000.0),
 * non-ASCII escaped as \uXXXX, trailing newline (transformers' layout).
 * *out is malloc'ed, NUL-terminated, *out_len bytes. */
int mk_hfconfig_edit(const char *donor, size_t len, const char *label,
		   const struct mk_arch *a, const char *dtype, const char *architecture,
		   const int64_t *num_layers, int64_t vocab_size,
		   char **out, size_t *out_len, char **warnings,
		   struct mk_err *err);

/* Record the output's layer kinds (kinds[i] for layer i, n layers) in a
 * config.json text made by mk_hfconfig_edit (replaced in *text, *len):
 * the "layer_types" or "mlp_layer_types" list rewritten, or
 * "first_k_dense_replace" set to the count of leading dense layers, as
 * a->kinds_key says; nothing when the list is already right or the arch
 * has one kind of layer.  MK_EINVAL when the kinds cannot be said there
 * (a dense layer after a sparse one under first_k_dense_replace). */
int mk_hfconfig_set_layer_kinds(const struct mk_arch *a, const unsigned char *kinds,
				size_t n, char **text, size_t *len, struct mk_err *err);

#endif
