/* moe_config.c - mk-moe's configuration: parse (libyaml) and pre-checks. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>
#include "moe/moe.h"
#include "config/config.h"
#include "core/sbuf.h"

static const char *const gate_names[] = {
	[MK_MOE_GATE_HIDDEN] = "hidden",           [MK_MOE_GATE_HIDDEN_LAST] = "hidden_last",
	[MK_MOE_GATE_HIDDEN_AVG] = "hidden_avg",   [MK_MOE_GATE_CHEAP_EMBED] = "cheap_embed",
	[MK_MOE_GATE_RANDOM] = "random",           [MK_MOE_GATE_UNIFORM_RANDOM] = "uniform_random",
};

const char *mk_moe_gate_name(enum mk_moe_gate g)
{
	return (unsigned)g < sizeof(gate_names) / sizeof(gate_names[0]) ? gate_names[g] : "?";
}

static void expert_clear(struct mk_moe_expert *e)
{
	free(e->source_model);
	mk_strv_free(e->positive, e->npositive);
	mk_strv_free(e->negative, e->nnegative);
}

static void experts_free(struct mk_moe_expert *e, size_t n)
{
	for (size_t i = 0; i < n; i++)
		expert_clear(&e[i]);
	free(e);
}

void mk_moe_config_free(struct mk_moe_config *c)
{
	if (!c)
		return;
	free(c->base_model);
	experts_free(c->experts, c->nexperts);
	experts_free(c->shared, c->nshared);
	free(c->architecture);
	free(c->text);
	free(c);
}

struct ctx {
	yaml_document_t *doc;
	const char *label;
	struct mk_err *err;
	size_t strings;              /* read, aliases counted again */
};

static int bad(struct ctx *x, const yaml_node_t *n, const char *key, const char *what)
{
	return mk_err_set(x->err, MK_EINVAL, "%s:%lu: %s: %s", x->label,
			  n ? (unsigned long)n->start_mark.line + 1 : 0ul, key, what);
}

static bool is_null(const yaml_node_t *n)
{
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	const char *s = (const char *)n->data.scalar.value;
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int get_str(struct ctx *x, const yaml_node_t *n, const char *key, char **out)
{
	if (n->type != YAML_SCALAR_NODE || is_null(n))
		return bad(x, n, key, "expected a string");
	if (++x->strings > MK_YAML_MAX_NODES)
		return mk_err_set(x->err, MK_EINVAL, "%s:%lu: the document expands to more than %d strings through "
				  "aliases; refusing to read it", x->label, (unsigned long)n->start_mark.line + 1,
				  MK_YAML_MAX_NODES);
	free(*out);
	*out = strdup((const char *)n->data.scalar.value);
	return *out ? 0 : mk_err_set(x->err, MK_ENOMEM, "out of memory");
}

static int get_num(struct ctx *x, const yaml_node_t *n, const char *key, double *out)
{
	char *end;
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return bad(x, n, key, "expected a number");
	const char *s = (const char *)n->data.scalar.value;
	*out = strtod(s, &end);
	if (!*s || *end)
		return bad(x, n, key, "expected a number");
	return 0;
}

static int get_int(struct ctx *x, const yaml_node_t *n, const char *key, long *out)
{
	char *end;
	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return bad(x, n, key, "expected an integer");
	const char *s = (const char *)n->data.scalar.value;
	*out = strtol(s, &end, 10);
	if (!*s || *end)
		return bad(x, n, key, "expected an integer");
	return 0;
}

/* a list of strings; null: none (a repeated key: the last, as PyYAML) */
static int get_strv(struct ctx *x, const yaml_node_t *n, const char *key, char ***v, size_t *nv)
{
	mk_strv_free(*v, *nv);
	*v = NULL;
	*nv = 0;
	if (is_null(n))
		return 0;
	if (n->type != YAML_SEQUENCE_NODE)
		return bad(x, n, key, "expected a list of strings");
	size_t cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	*v = calloc(cnt ? cnt : 1, sizeof(**v));
	if (!*v)
		return mk_err_set(x->err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *it = yaml_document_get_node(x->doc, n->data.sequence.items.start[i]);
		int rc = get_str(x, it, key, &(*v)[i]);
		(*nv)++;
		if (rc)
			return rc;
	}
	return 0;
}

#define FOR_PAIRS(x, n, k, v)                                                                          \
	for (yaml_node_pair_t *p_ = (n)->data.mapping.pairs.start; p_ < (n)->data.mapping.pairs.top; p_++) \
		for (yaml_node_t *k = yaml_document_get_node((x)->doc, p_->key),                           \
				 *v = yaml_document_get_node((x)->doc, p_->value), *once_ = k;               \
		     once_; once_ = NULL)

static int parse_expert(struct ctx *x, const yaml_node_t *n, struct mk_moe_expert *e)
{
	int rc = 0;

	e->line = (unsigned)n->start_mark.line + 1;
	if (n->type != YAML_MAPPING_NODE)
		return bad(x, n, "experts", "each expert is a mapping with source_model");
	FOR_PAIRS(x, n, k, v) {
		if (rc)
			break;
		if (k->type != YAML_SCALAR_NODE) {
			rc = bad(x, k, "experts", "keys are strings");
			break;
		}
		const char *key = (const char *)k->data.scalar.value;
		if (!strcmp(key, "source_model"))
			rc = get_str(x, v, key, &e->source_model);
		else if (!strcmp(key, "positive_prompts"))
			rc = get_strv(x, v, key, &e->positive, &e->npositive);
		else if (!strcmp(key, "negative_prompts")) {
			e->has_negative = !is_null(v);
			rc = get_strv(x, v, key, &e->negative, &e->nnegative);
		} else if (!strcmp(key, "noise_scale")) {
			e->has_noise = false;
			if (!is_null(v) && !(rc = get_num(x, v, key, &e->noise_scale)))
				e->has_noise = true;
		} else if (!strcmp(key, "residual_scale")) {
			e->has_residual = false;
			if (!is_null(v) && !(rc = get_num(x, v, key, &e->residual_scale)))
				e->has_residual = true;
		}
		/* other keys are ignored, as mergekit-moe ignores them */
	}
	if (!rc && !e->source_model)
		rc = bad(x, n, "source_model", "every expert needs a source_model");
	return rc;
}

static int parse_experts(struct ctx *x, const yaml_node_t *n, const char *key,
			 struct mk_moe_expert **out, size_t *nout)
{
	for (size_t i = 0; i < *nout; i++)   /* a repeated key: the last */
		expert_clear(&(*out)[i]);
	free(*out);
	*out = NULL;
	*nout = 0;
	if (is_null(n))
		return 0;
	if (n->type != YAML_SEQUENCE_NODE)
		return bad(x, n, key, "expected a list of experts");
	size_t cnt = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
	*out = calloc(cnt ? cnt : 1, sizeof(**out));
	if (!*out)
		return mk_err_set(x->err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < cnt; i++) {
		yaml_node_t *it = yaml_document_get_node(x->doc, n->data.sequence.items.start[i]);
		(*nout)++;
		int rc = parse_expert(x, it, &(*out)[i]);
		if (rc)
			return rc;
	}
	return 0;
}

static int parse_doc(struct ctx *x, struct mk_moe_config *c)
{
	yaml_node_t *root = yaml_document_get_root_node(x->doc);
	bool has_experts = false;
	int rc = 0;

	if (!root || root->type != YAML_MAPPING_NODE)
		return bad(x, root, "(top)", "the configuration is a mapping (base_model, experts, ...)");
	FOR_PAIRS(x, root, k, v) {
		if (rc)
			break;
		if (k->type != YAML_SCALAR_NODE) {
			rc = bad(x, k, "(top)", "keys are strings");
			break;
		}
		const char *key = (const char *)k->data.scalar.value;
		if (!strcmp(key, "base_model"))
			rc = get_str(x, v, key, &c->base_model);
		else if (!strcmp(key, "experts")) {
			has_experts = true;
			if (is_null(v))
				rc = bad(x, v, key, "expected a list of experts");
			else
				rc = parse_experts(x, v, key, &c->experts, &c->nexperts);
		} else if (!strcmp(key, "shared_experts"))
			rc = parse_experts(x, v, key, &c->shared, &c->nshared);
		else if (!strcmp(key, "gate_mode")) {
			char *s = NULL;
			if (!(rc = get_str(x, v, key, &s))) {
				size_t g, ng = sizeof(gate_names) / sizeof(gate_names[0]);
				for (g = 0; g < ng && strcmp(s, gate_names[g]); g++)
					;
				if (g == ng)
					rc = mk_err_set(x->err, MK_EINVAL,
							"%s:%lu: gate_mode: '%s' is not one of hidden, hidden_last, hidden_avg, cheap_embed, random, uniform_random",
							x->label, (unsigned long)v->start_mark.line + 1, s);
				else
					c->gate = (enum mk_moe_gate)g;
			}
			free(s);
		} else if (!strcmp(key, "dtype")) {
			c->has_dtype = false;
			if (!is_null(v)) {
				char *s = NULL;
				if (!(rc = get_str(x, v, key, &s))) {
					enum mk_dtype d;
					if (!strcmp(s, "bfloat16"))
						d = MK_DT_BF16;
					else if (!strcmp(s, "float16"))
						d = MK_DT_F16;
					else if (!strcmp(s, "float32"))
						d = MK_DT_F32;
					else
						d = MK_DT_COUNT;
					if (d == MK_DT_COUNT)
						rc = bad(x, v, key, "expected bfloat16, float16 or float32");
					c->dtype = d;
					c->has_dtype = !rc;
				}
				free(s);
			}
		} else if (!strcmp(key, "experts_per_token"))
			rc = get_int(x, v, key, &c->experts_per_token);
		else if (!strcmp(key, "architecture")) {
			free(c->architecture);
			c->architecture = NULL;
			if (!is_null(v))
				rc = get_str(x, v, key, &c->architecture);
		}
	}
	if (!rc && !c->base_model)
		rc = bad(x, root, "base_model", "required (the model the attention and embeddings come from)");
	if (!rc && !has_experts)
		rc = bad(x, root, "experts", "required (a list of experts, each with source_model)");
	return rc;
}

int mk_moe_parse(const char *text, size_t len, const char *label, struct mk_moe_config **out,
		 struct mk_err *err)
{
	yaml_parser_t ps;
	yaml_document_t doc;
	struct mk_moe_config *c = calloc(1, sizeof(*c));
	int rc;

	*out = NULL;
	if (!label)
		label = "config";
	if (!c)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	c->experts_per_token = 2;
	c->text = malloc(len + 1);
	if (!c->text || !yaml_parser_initialize(&ps)) {
		mk_moe_config_free(c);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	memcpy(c->text, text, len);
	c->text[len] = '\0';
	c->len = len;
	yaml_parser_set_input_string(&ps, (const unsigned char *)text, len);
	struct mk_yaml_over ov;
	int scan = mk_yaml_check(text, len, &ov);
	if (scan) {
		rc = scan < 0 ? mk_err_set(err, MK_ENOMEM, "out of memory") :
				mk_err_set(err, MK_EINVAL, "%s:%u:%u: %s: refusing to read it", label, ov.line, ov.col,
					   ov.msg);
		yaml_parser_delete(&ps);
		mk_moe_config_free(c);
		return rc;
	}
	if (!yaml_parser_load(&ps, &doc)) {
		rc = mk_err_set(err, MK_EINVAL, "%s:%lu:%lu: YAML: %s", label,
				(unsigned long)ps.problem_mark.line + 1,
				(unsigned long)ps.problem_mark.column + 1,
				ps.problem ? ps.problem : "malformed");
		yaml_parser_delete(&ps);
		mk_moe_config_free(c);
		return rc;
	}
	struct ctx x = { &doc, label, err, 0 };
	rc = parse_doc(&x, c);
	yaml_document_delete(&doc);
	yaml_parser_delete(&ps);
	if (rc) {
		mk_moe_config_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

int mk_moe_check(const struct mk_moe_config *c, bool allow_all_same, struct mk_err *err)
{
	if (c->experts_per_token < 1)
		return mk_err_set(err, MK_EINVAL, "experts_per_token is %ld: it must be at least 1",
				  c->experts_per_token);
	if ((long)c->nexperts < c->experts_per_token)
		return mk_err_set(err, MK_EINVAL,
				  "%zu expert%s for experts_per_token %ld: give at least as many experts as experts per token",
				  c->nexperts, c->nexperts == 1 ? "" : "s", c->experts_per_token);
	if (c->gate == MK_MOE_GATE_RANDOM)
		return 0;
	for (size_t i = 0; i < c->nexperts; i++)
		if (!c->experts[i].npositive)
			return mk_err_set(err, MK_EINVAL,
					  "expert %zu (%s, line %u) has no positive_prompts; gate_mode %s needs them (gate_mode random does not)",
					  i, c->experts[i].source_model, c->experts[i].line, mk_moe_gate_name(c->gate));
	bool same = true;
	const struct mk_moe_expert *e0 = &c->experts[0];
	for (size_t i = 1; i < c->nexperts && same; i++) {
		const struct mk_moe_expert *e = &c->experts[i];
		same = mk_strv_eq(e->positive, e->npositive, e0->positive, e0->npositive) &&
		       mk_strv_eq(e->negative, e->nnegative, e0->negative, e0->nnegative);
	}
	if (same)
		return mk_err_set(err, MK_EINVAL,
				  "the positive and negative prompts are the same for every expert%s: the router could not tell the experts apart; give each expert prompts of what it should get",
				  c->nexperts == 1 ? " (there is one expert)" : "");
	if (!allow_all_same) {
		bool all = true;
		for (size_t i = 1; i < c->nexperts && all; i++)
			all = !strcmp(c->experts[i].source_model, e0->source_model);
		if (all)
			return mk_err_set(err, MK_EINVAL,
					  "every expert is the same model (%s): the MoE would compute what that model does at a greater cost; to train it afterwards, pass --i-understand-this-is-not-useful-without-training",
					  e0->source_model);
	}
	return 0;
}

/* ------------------------------------------------------------ architecture */

static const char *const arch_names[] = { "Mixtral", "DeepSeek MoE", "Qwen MoE", "Qwen3 MoE" };

const char *mk_moe_arch_name(enum mk_moe_arch a)
{
	return (unsigned)a < MK_MOE_NARCH ? arch_names[a] : "?";
}

/* NULL when arch `a` supports the configuration, else why not */
static const char *unsupported(const struct mk_moe_config *c, enum mk_moe_arch a, const char *const *mt)
{
	size_t nm = 1 + c->nexperts + c->nshared;
	size_t nsame = a == MK_MOE_MIXTRAL ? 1 + c->nexperts : nm;   /* Mixtral looks at no shared expert */
	bool same = true;

	for (size_t i = 1; i < nsame; i++)
		if (!mt[i] || !mt[0] || strcmp(mt[i], mt[0]))
			same = false;
	const char *t = mt[0] ? mt[0] : "";
	bool llama = !strcmp(t, "llama") || !strcmp(t, "mistral");
	/* the models' type first: what makes an architecture impossible, before
	 * what the recipe would have to change */
	switch (a) {
	case MK_MOE_MIXTRAL:
		if (!llama)
			return "llama or mistral models";
		if (!same)
			return "all models of one model_type";
		if (c->nshared)
			return "no shared experts";
		return NULL;
	case MK_MOE_DEEPSEEK:
		if (!llama)
			return "llama or mistral models";
		if (!same)
			return "all models of one model_type";
		if (c->nshared > 1)
			return "at most one shared expert";
		if (c->nshared && (c->shared[0].npositive || c->shared[0].nnegative))
			return "a shared expert without prompts";
		return NULL;
	case MK_MOE_QWEN2:
		if (!llama && strcmp(t, "qwen2"))
			return "qwen2, llama or mistral models";
		if (!same)
			return "all models of one model_type";
		if (c->nshared != 1)
			return "exactly one shared expert";
		if (c->gate != MK_MOE_GATE_RANDOM && !c->shared[0].npositive)
			return "a shared expert with positive_prompts (unless gate_mode is random)";
		return NULL;
	case MK_MOE_QWEN3:
		if (c->nshared)
			return "no shared experts";
		for (size_t i = 0; i < nm; i++)
			if (!mt[i] || strcmp(mt[i], "qwen3"))
				return "qwen3 models";
		return NULL;
	default:
		return "?";
	}
}

int mk_moe_select_arch(const struct mk_moe_config *c, const char *const *model_types,
		       enum mk_moe_arch *out, struct mk_err *err)
{
	char why[768];
	size_t at = 0;
	bool any = false, found = false;
	enum mk_moe_arch first = MK_MOE_NARCH;

	why[0] = '\0';
	for (int a = 0; a < MK_MOE_NARCH; a++) {
		if (c->architecture && strncasecmp(arch_names[a], c->architecture, strlen(c->architecture)))
			continue;
		any = true;
		const char *no = unsupported(c, (enum mk_moe_arch)a, model_types);
		if (!no) {
			if (!found)
				first = (enum mk_moe_arch)a;
			found = true;
			if (a == MK_MOE_MIXTRAL)
				break;
			continue;
		}
		if (at < sizeof(why))
			at += (size_t)snprintf(why + at, sizeof(why) - at, "%s%s needs %s", at ? "; " : "",
					       arch_names[a], no);
	}
	if (!any)
		return mk_err_set(err, MK_EINVAL,
				  "architecture '%s' names no output architecture: one of Mixtral, DeepSeek MoE, Qwen MoE, Qwen3 MoE (a prefix, any case)",
				  c->architecture);
	if (!found)
		return mk_err_set(err, MK_EINVAL,
				  "no output architecture fits these models (base model_type %s): %s",
				  model_types[0] ? model_types[0] : "(none)", why);
	*out = first;
	return 0;
}
