/* fuzz_config_gen.c - the config parser, structure-aware: the fuzzer's
 * bytes are choices in a grammar of merge configs (the keys, methods,
 * parameter names and value forms mk reads, and some it must refuse),
 * so nearly every input is YAML that reaches the checks past the parser:
 * references, slices, gradients, filters, tokenizer and module sections.
 * The text goes through mk_config_parse and every query a planner makes
 * (config_queries.h, shared with fuzz_config.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config.h"
#include "config_queries.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

struct gen {
	const uint8_t *d;
	size_t n, at;
	char *out;
	size_t len, cap;
};

static unsigned pick(struct gen *g, unsigned k)
{
	return g->at < g->n ? g->d[g->at++] % k : 0;
}

static void put(struct gen *g, const char *s)
{
	size_t l = strlen(s);

	if (g->len + l + 1 > g->cap) {
		g->cap = (g->len + l + 1) * 2;
		g->out = realloc(g->out, g->cap);
		if (!g->out)
			abort();
	}
	memcpy(g->out + g->len, s, l + 1);
	g->len += l;
}

static void indent(struct gen *g, int level)
{
	for (int i = 0; i < level; i++)
		put(g, "  ");
}

#define PICK(g, arr) (arr)[pick(g, sizeof(arr) / sizeof((arr)[0]))]

static const char *const methods[] = {
	"linear", "slerp", "nuslerp", "multislerp", "task_arithmetic", "ties", "dare_ties",
	"dare_linear", "breadcrumbs", "breadcrumbs_ties", "della", "della_linear", "model_stock",
	"nearswap", "karcher", "arcee_fusion", "sce", "passthrough", "ram", "ramplus_tl",
	"Linear", "slurp", "",
};
static const char *const models[] = {
	"a", "b", "./m/c", "org/name", "org/name@main", "a+lora", "org/x@v1+org/l@r2", "/abs/p",
	"\"\"", "\"@main\"", "\"+\"", "a+", "union", "base", "\"a b\"", "~",
};
static const char *const params[] = {
	"weight", "density", "epsilon", "lambda", "gamma", "t", "normalize", "rescale",
	"int8_mask", "filter_wise", "select_topk", "max_iter", "tol", "alpha", "beta", "eps",
	"nuslerp_flatten", "nuslerp_row_wise", "weights", "densty", "normalise", "k",
};
static const char *const scalars[] = {
	"0", "1", "0.5", "-1", "1e308", "1e-320", ".nan", ".inf", "-.inf", "true", "false",
	"null", "~", "\"0.3\"", "0x10", "1_000", "3", "2.5", "-0", "abc", "\"\"",
};
static const char *const filters[] = {
	"self_attn", "mlp", "lm_head", "embed_tokens", "input_layernorm", "model.layers.0", "",
	"*", "[",
};
static const char *const dtypes[] = {
	"float16", "bfloat16", "float32", "float64", "int64", "fp8", "bf16", "half", "",
};

static void scalar(struct gen *g)
{
	put(g, PICK(g, scalars));
}

/* a parameter value: a scalar, a gradient list, or a filter list */
static void value(struct gen *g, int level)
{
	switch (pick(g, 5)) {
	case 0: case 1:
		scalar(g);
		break;
	case 2: {
		unsigned k = pick(g, 6);
		put(g, "[");
		for (unsigned i = 0; i < k; i++) {
			if (i)
				put(g, ", ");
			scalar(g);
		}
		put(g, "]");
		break;
	}
	case 3: {
		unsigned k = 1 + pick(g, 3);
		for (unsigned i = 0; i < k; i++) {
			put(g, "\n");
			indent(g, level + 1);
			if (pick(g, 4)) {
				put(g, "- filter: ");
				put(g, PICK(g, filters));
				put(g, "\n");
				indent(g, level + 2);
				put(g, "value: ");
			} else {
				put(g, "- value: ");
			}
			if (pick(g, 3))
				scalar(g);
			else
				value(g, level + 2);
		}
		break;
	}
	default:
		put(g, "{");
		put(g, PICK(g, params));
		put(g, ": ");
		scalar(g);
		put(g, "}");
	}
}

static void parameters(struct gen *g, int level)
{
	unsigned k = pick(g, 4);

	put(g, "parameters:");
	if (!k) {
		put(g, pick(g, 2) ? " {}\n" : "\n");
		return;
	}
	put(g, "\n");
	for (unsigned i = 0; i < k; i++) {
		indent(g, level + 1);
		put(g, PICK(g, params));
		put(g, ": ");
		value(g, level + 1);
		put(g, "\n");
	}
}

static void model_entry(struct gen *g, int level)
{
	indent(g, level);
	if (pick(g, 5)) {
		put(g, "- model: ");
		put(g, PICK(g, models));
	} else {
		put(g, "- model:\n");
		indent(g, level + 2);
		put(g, "model: {path: ");
		put(g, PICK(g, models));
		put(g, "}\n");
		indent(g, level + 2);
		put(g, pick(g, 2) ? "lora: {path: l}" : "override_architecture: LlamaForCausalLM");
	}
	put(g, "\n");
	if (pick(g, 2)) {
		indent(g, level + 1);
		parameters(g, level + 1);
	}
}

static void range(struct gen *g)
{
	static const char *const r[] = { "[0, 2]", "[0, 1]", "[1, 2]", "[2, 0]", "[0, 0]", "[-1, 3]",
					 "[0]", "[0, 99999999999]", "0" };
	put(g, "layer_range: ");
	put(g, PICK(g, r));
}

static void slices(struct gen *g, int level)
{
	unsigned k = 1 + pick(g, 3);

	indent(g, level);
	put(g, "slices:\n");
	for (unsigned i = 0; i < k; i++) {
		unsigned s = 1 + pick(g, 3);
		indent(g, level + 1);
		put(g, "- sources:\n");
		for (unsigned j = 0; j < s; j++) {
			indent(g, level + 3);
			put(g, "- model: ");
			put(g, PICK(g, models));
			put(g, "\n");
			indent(g, level + 4);
			range(g);
			put(g, "\n");
			if (pick(g, 3) == 0) {
				indent(g, level + 4);
				parameters(g, level + 4);
			}
		}
		if (pick(g, 3) == 0) {
			indent(g, level + 2);
			parameters(g, level + 2);
		}
	}
}

static void tokenizer(struct gen *g)
{
	static const char *const src[] = { "base", "union", "a", "b", "\"\"", "1" };

	switch (pick(g, 3)) {
	case 0:
		put(g, "tokenizer_source: ");
		put(g, PICK(g, src));
		put(g, "\n");
		break;
	case 1:
		put(g, "tokenizer:\n  source: ");
		put(g, PICK(g, src));
		put(g, "\n");
		if (pick(g, 2)) {
			put(g, "  pad_to_multiple_of: ");
			scalar(g);
			put(g, "\n");
		}
		if (pick(g, 2)) {
			put(g, "  tokens:\n    \"<|im_start|>\":\n      source: ");
			switch (pick(g, 3)) {
			case 0: put(g, PICK(g, src)); break;
			case 1: put(g, "{kind: zero}"); break;
			default:
				put(g, "{kind: model_token, model: a, ");
				put(g, pick(g, 2) ? "token_id: " : "token: ");
				scalar(g);
				put(g, "}");
			}
			put(g, "\n      force: ");
			scalar(g);
			put(g, "\n");
		}
		break;
	default:
		break;
	}
}

static void config(struct gen *g)
{
	unsigned shape = pick(g, 4);

	put(g, "merge_method: ");
	put(g, PICK(g, methods));
	put(g, "\n");
	if (pick(g, 2)) {
		put(g, "base_model: ");
		put(g, PICK(g, models));
		put(g, "\n");
	}
	if (shape == 0 || shape == 3) {
		unsigned k = pick(g, 4);
		put(g, "models:\n");
		for (unsigned i = 0; i < k; i++)
			model_entry(g, 1);
	}
	if (shape == 1 || shape == 3)
		slices(g, 0);
	if (shape == 2) {
		put(g, "modules:\n  text_decoder:\n");
		slices(g, 2);
		if (pick(g, 2)) {
			indent(g, 2);
			parameters(g, 2);
		}
	}
	if (pick(g, 2))
		parameters(g, 0);
	if (pick(g, 3) == 0) {
		put(g, pick(g, 2) ? "dtype: " : "out_dtype: ");
		put(g, PICK(g, dtypes));
		put(g, "\n");
	}
	tokenizer(g);
	if (pick(g, 4) == 0) {
		static const char *const ct[] = { "chatml", "auto", "llama3", "\"{{ x }}\"", "nope" };
		put(g, "chat_template: ");
		put(g, PICK(g, ct));
		put(g, "\n");
	}
	if (pick(g, 6) == 0) {
		static const char *const extra[] = { "random_seed: 7\n", "merge_methd: ties\n",
						     "- stray\n", "models: &a [x]\nbase_model: *a\n",
						     "parameters: [1]\n", "\t\n" };
		put(g, PICK(g, extra));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct gen g = { d, n, 0, NULL, 0, 0 };

	put(&g, "");
	config(&g);
	if (getenv("MK_FUZZ_PRINT"))    /* to see what the choices make */
		fprintf(stderr, "----\n%s", g.out);
	config_check(g.out, g.len, "gen.yml");
	free(g.out);
	return 0;
}
