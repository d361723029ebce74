/* test_config.c - the YAML merge configuration: the testdata configs,
 * every validation error with its position, warnings and suggestions,
 * coercion, parameter evaluation and precedence, model references,
 * `models:` normalisation, model order and refused features. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "top.h"

#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "config/config.h"
#include "core/text.h"

/* ------------------------------------------------------------- helpers */

static const char *top(void)
{
	return test_top("testdata/configs/linear.yml");
}

static char *slurp(const char *rel, size_t *len)
{
	char path[PATH_MAX];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", top(), rel);
	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static int parse(const char *yaml, struct mk_config **cfg, struct mk_diags *d,
		 struct mk_err *err)
{
	return mk_config_parse(yaml, strlen(yaml), "t.yml", cfg, d, err);
}

/* Parse a config that must be valid and draw no diagnostics at all. */
static struct mk_config *parse_ok(const char *yaml)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;
	char line[1024];

	if (parse(yaml, &cfg, &d, &err) != 0 || d.n) {
		for (size_t i = 0; i < d.n; i++) {
			mk_diag_format(&d, &d.v[i], line, sizeof(line));
			print_error("%s\n", line);
		}
		fail_msg("config did not parse cleanly: %s", err.msg);
	}
	mk_diags_free(&d);
	assert_non_null(cfg);
	return cfg;
}

static struct mk_config *load(const char *rel)
{
	size_t len;
	char *text = slurp(rel, &len);
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;

	if (mk_config_parse(text, len, rel, &cfg, &d, &err) != 0 || d.n)
		fail_msg("%s: %s (%zu diagnostics)", rel, err.msg, d.n);
	assert_int_equal(cfg->len, len);
	assert_memory_equal(cfg->text, text, len);
	assert_string_equal(cfg->label, rel);
	mk_diags_free(&d);
	free(text);
	return cfg;
}

/* Does `d` hold a diagnostic of `level` at line:col whose message holds
 * `sub` (and whose path is `path`, when not NULL)? */
static bool has(const struct mk_diags *d, enum mk_diag_level level, unsigned line,
		unsigned col, const char *path, const char *sub)
{
	for (size_t i = 0; i < d->n; i++) {
		const struct mk_diag *g = &d->v[i];
		if (g->level == level && g->line == line && g->col == col &&
		    strstr(g->msg, sub) && (!path || strcmp(g->path, path) == 0))
			return true;
	}
	return false;
}

static void dump(const struct mk_diags *d)
{
	char line[1024];

	for (size_t i = 0; i < d->n; i++) {
		mk_diag_format(d, &d->v[i], line, sizeof(line));
		print_error("  %s: %s\n", d->v[i].level == MK_DIAG_ERROR ? "error" : "warning",
			    line);
	}
}

/* One error expected: the config must fail with it at line:col. */
static void expect_error(const char *yaml, unsigned line, unsigned col,
			 const char *path, const char *sub)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;
	int rc = parse(yaml, &cfg, &d, &err);

	assert_true(rc < 0);
	assert_null(cfg);
	assert_true(d.nerrors >= 1);
	if (!has(&d, MK_DIAG_ERROR, line, col, path, sub)) {
		dump(&d);
		fail_msg("no error %u:%u %s \"%s\" for:\n%s", line, col, path ? path : "", sub,
			 yaml);
	}
	/* err holds the first error, formatted */
	assert_non_null(strstr(err.msg, "t.yml:"));
	mk_diags_free(&d);
}

static double eval(const struct mk_pvalue *v, const char *tensor, double t)
{
	double out = NAN;

	assert_true(mk_pvalue_eval(v, tensor, t, &out));
	return out;
}

static const struct mk_pvalue *param(const struct mk_params *p, const char *name)
{
	const struct mk_pvalue *v = mk_params_find(p, name);

	if (!v)
		fail_msg("no parameter %s", name);
	return v;
}

/* ------------------------------------------------------------- testdata configs */

static void test_linear(void **state)
{
	struct mk_config *cfg = load("testdata/configs/linear.yml");

	assert_string_equal(cfg->merge_method, "linear");
	assert_int_equal(cfg->merge_method_loc.line, 9);
	assert_int_equal(cfg->merge_method_loc.col, 15);
	assert_int_equal(cfg->nmodels, 2);
	assert_int_equal(cfg->nslices, 0);
	assert_int_equal(cfg->nmodules, 0);
	assert_null(cfg->base_model);
	assert_string_equal(cfg->models[0].model.model.path, "testdata/models/tiny-a");
	assert_null(cfg->models[0].model.model.revision);
	assert_null(cfg->models[0].model.lora.path);
	assert_string_equal(cfg->models[1].model.model.path, "testdata/models/tiny-b");
	assert_string_equal(cfg->models[1].loc.path, "models[1]");
	assert_int_equal(cfg->models[1].loc.line, 6);
	assert_int_equal(cfg->models[1].loc.col, 5);
	assert_string_equal(cfg->models[1].model.loc.path, "models[1].model");
	assert_int_equal(cfg->models[0].params.n, 1);
	assert_true(param(&cfg->models[0].params, "weight")->kind == MK_PV_SCALAR);
	assert_true(param(&cfg->models[0].params, "weight")->scalar == 1.0);
	assert_true(param(&cfg->models[1].params, "weight")->scalar == 0.5);
	assert_string_equal(cfg->models[1].params.v[0].loc.path, "models[1].parameters.weight");
	assert_true(param(&cfg->params, "normalize")->scalar == 1.0);
	assert_string_equal(cfg->dtype.name, "float32");
	assert_int_equal(cfg->dtype.dtype, MK_DT_F32);
	assert_null(cfg->out_dtype.name);
	assert_int_equal(cfg->tokenizer_source.kind, MK_TOKSRC_NONE);
	assert_null(cfg->tokenizer);
	assert_null(cfg->chat_template);
	mk_config_free(cfg);
}

static void test_gradient_slerp(void **state)
{
	struct mk_config *cfg = load("testdata/configs/gradient-slerp.yml");
	const struct mk_pvalue *t;

	assert_string_equal(cfg->merge_method, "slerp");
	assert_int_equal(cfg->nslices, 1);
	assert_int_equal(cfg->slices[0].nsources, 2);
	assert_string_equal(cfg->slices[0].sources[1].model.model.path, "testdata/models/tiny-b");
	assert_int_equal(cfg->slices[0].sources[1].start, 0);
	assert_int_equal(cfg->slices[0].sources[1].end, 2);
	assert_string_equal(cfg->slices[0].sources[1].loc.path, "slices[0].sources[1]");
	assert_null(cfg->slices[0].base_model);
	assert_non_null(cfg->base_model);
	assert_string_equal(cfg->base_model->model.path, "testdata/models/tiny-a");
	assert_ptr_equal(mk_config_base_for(cfg, &cfg->slices[0]), cfg->base_model);
	t = param(&cfg->params, "t");
	assert_int_equal(t->kind, MK_PV_CONDS);
	assert_false(t->bare);
	assert_int_equal(t->nconds, 3);
	assert_string_equal(t->conds[0].filter, "self_attn");
	assert_string_equal(t->conds[1].filter, "mlp");
	assert_null(t->conds[2].filter);
	assert_int_equal(t->conds[0].value.kind, MK_PV_GRADIENT);
	assert_int_equal(t->conds[0].value.n, 5);
	assert_true(t->conds[0].value.grad[3] == 0.7);
	assert_string_equal(t->conds[1].loc.path, "parameters.t[1]");
	assert_int_equal(t->conds[1].loc.line, 14);
	assert_int_equal(t->conds[1].loc.col, 7);
	assert_int_equal(cfg->dtype.dtype, MK_DT_BF16);
	assert_string_equal(cfg->dtype.canonical, "bfloat16");
	mk_config_free(cfg);
}

static void test_task_arithmetic(void **state)
{
	struct mk_config *cfg = load("testdata/configs/task-arithmetic.yml");

	assert_string_equal(cfg->merge_method, "task_arithmetic");
	assert_int_equal(cfg->nmodels, 2);
	assert_int_equal(cfg->models[0].params.n, 1);
	assert_int_equal(param(&cfg->models[0].params, "weight")->kind, MK_PV_GRADIENT);
	assert_int_equal(param(&cfg->models[0].params, "weight")->n, 2);
	assert_int_equal(cfg->models[1].params.n, 0);
	assert_true(mk_model_ref_equal(cfg->base_model, &cfg->models[1].model));
	assert_true(param(&cfg->params, "normalize")->scalar == 0.0);   /* false */
	assert_true(param(&cfg->params, "int8_mask")->scalar == 1.0);   /* true */
	assert_int_equal(cfg->dtype.dtype, MK_DT_BF16);
	assert_int_equal(cfg->out_dtype.dtype, MK_DT_F16);
	assert_string_equal(cfg->out_dtype.loc.path, "out_dtype");
	mk_config_free(cfg);
}

static void test_passthrough(void **state)
{
	struct mk_config *cfg = load("testdata/configs/passthrough.yml");

	assert_int_equal(cfg->nslices, 2);
	assert_int_equal(cfg->slices[0].nsources, 1);
	assert_int_equal(cfg->slices[0].sources[0].end, 2);
	assert_int_equal(cfg->slices[1].sources[0].start, 1);
	assert_int_equal(cfg->slices[1].sources[0].end, 2);
	assert_string_equal(cfg->slices[1].sources[0].model.model.path, "testdata/models/tiny-b");
	assert_false(cfg->slices[0].has_residual_weight);
	mk_config_free(cfg);
}

static void test_ties(void **state)
{
	struct mk_config *cfg = load("testdata/configs/ties.yml");
	const struct mk_pvalue *w;

	assert_int_equal(cfg->nmodels, 2);
	assert_int_equal(param(&cfg->models[1].params, "density")->n, 3);
	w = param(&cfg->models[1].params, "weight");
	assert_int_equal(w->kind, MK_PV_CONDS);
	assert_int_equal(w->nconds, 2);
	assert_true(eval(w, "model.layers.0.mlp.up_proj.weight", 0) == 0.5);
	assert_true(eval(w, "model.layers.0.self_attn.q_proj.weight", 0) == 1.0);
	/* the density gradient at t = 0.7, as Python computes it */
	assert_true(eval(param(&cfg->models[1].params, "density"), "x", 0.7) == 0.46);
	mk_config_free(cfg);
}

static void test_modules(void **state)
{
	struct mk_config *cfg = load("testdata/configs/modules.yml");
	const struct mk_output_module *m;

	assert_int_equal(cfg->nmodules, 1);
	m = &cfg->modules[0];
	assert_string_equal(m->name, "default");
	assert_string_equal(m->loc.path, "modules.default");
	assert_int_equal(m->nmodels, 2);
	assert_int_equal(m->nslices, 0);
	assert_string_equal(m->models[1].loc.path, "modules.default.models[1]");
	assert_true(param(&m->models[1].params, "weight")->scalar == 0.7);
	assert_true(param(&m->params, "normalize")->scalar == 1.0);
	mk_config_free(cfg);
}

static void test_all_testdata_have_order(void **state)
{
	static const char *const files[] = { "linear", "gradient-slerp", "task-arithmetic",
					     "passthrough", "ties", "modules" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		char rel[128];
		const struct mk_model_ref **refs;
		size_t n;
		snprintf(rel, sizeof(rel), "testdata/configs/%s.yml", files[i]);
		struct mk_config *cfg = load(rel);
		assert_int_equal(mk_config_models(cfg, &refs, &n, NULL), 0);
		assert_int_equal(n, 2);
		/* tiny-a first: the base, or the first listed */
		assert_string_equal(refs[0]->model.path, "testdata/models/tiny-a");
		assert_string_equal(refs[1]->model.path, "testdata/models/tiny-b");
		free(refs);
		mk_config_free(cfg);
	}
}

/* ------------------------------------------------------------- validation */

static void test_errors_top(void **state)
{
	expect_error("models: [{model: a}]\n", 1, 1, "", "missing 'merge_method'");
	expect_error("merge_method: linear\n", 1, 1, "",
		     "exactly one of 'models', 'slices', or 'modules' must be present");
	expect_error("merge_method: linear\nmodels: []\n", 1, 1, "", "'models' is empty");
	expect_error("merge_method: linear\nmodels: [{model: a}]\n"
		     "slices: [{sources: [{model: a, layer_range: [0, 1]}]}]\n",
		     3, 1, "", "found 'models' and 'slices'");
	expect_error("merge_method: linear\nmodels: [{model: a}]\ntokenizer_source: union\n"
		     "tokenizer: {source: base}\n", 4, 1, "",
		     "cannot specify both tokenizer_source and tokenizer");
	expect_error("merge_method: 3\nmodels: [{model: a}]\n", 1, 15, "merge_method",
		     "expected a string, found an integer '3' (quote it");
	expect_error("- a\n- b\n", 1, 1, "", "must be a map");
	expect_error("", 1, 1, "", "the configuration is empty");
	expect_error("merge_method: linear\nmodels: [{model: a}]\n---\nx: 1\n", 4, 1, "",
		     "more than one YAML document");
	expect_error("merge_method: linear\nmodels: {model: a}\n", 2, 9, "models",
		     "expected models (a list), found a map");
	expect_error("merge_method: linear\nmodels: [a]\n", 2, 10, "models[0]",
		     "write '- model: a'");
	expect_error("merge_method: linear\nmodels: [{parameters: {w: 1}}]\n", 2, 10,
		     "models[0]", "missing 'model'");
	expect_error("merge_method: linear\nmodels: [{model: a}]\nchat_template: [x]\n", 3, 16,
		     "chat_template", "expected a string, found a list");
}

static void test_errors_syntax(void **state)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;

	assert_int_equal(parse("merge_method: linear\nmodels:\n  - model: a\n   x: [1\n", &cfg,
			       &d, &err), -MK_EFORMAT);
	assert_null(cfg);
	assert_int_equal(d.nerrors, 1);
	assert_int_equal(d.v[0].line, 4);
	assert_non_null(strstr(d.v[0].msg, "YAML syntax error"));
	assert_non_null(strstr(err.msg, "t.yml:4:"));
	mk_diags_free(&d);
}

static void test_errors_slices(void **state)
{
	const char *head = "merge_method: passthrough\nslices:\n  - sources:\n";
	char y[1024];

#define SRC(...) (snprintf(y, sizeof(y), __VA_ARGS__), y)
	expect_error(SRC("%s", head), 3, 5, "slices[0]", "missing 'sources'");
	expect_error(SRC("%s      - model: a\n", head), 4, 9, "slices[0].sources[0]",
		     "missing 'layer_range'");
	expect_error(SRC("%s      - model: a\n        layer_range: [4, 2]\n", head), 5, 22,
		     "slices[0].sources[0].layer_range", "start is greater than end");
	expect_error(SRC("%s      - model: a\n        layer_range: [0, 1, 2]\n", head), 5, 22,
		     "slices[0].sources[0].layer_range", "found a list of 3");
	expect_error(SRC("%s      - model: a\n        layer_range: 4\n", head), 5, 22,
		     "slices[0].sources[0].layer_range", "two integers");
	expect_error(SRC("%s      - model: a\n        layer_range: [0, x]\n", head), 5, 26,
		     "slices[0].sources[0].layer_range[1]", "expected an integer, found the string 'x'");
	expect_error(SRC("%s      - model: a\n        layer_range: [0.5, 2]\n", head), 5, 23,
		     "slices[0].sources[0].layer_range[0]", "expected an integer, found '0.5'");
	expect_error(SRC("%s      - model: a\n        layer_range: [-1, 2]\n", head), 5, 22,
		     NULL, "cannot be negative");
	expect_error(SRC("%s      - model: a\n        layer_range: [0, 4]\n"
			 "      - model: b\n        layer_range: [2, 4]\n", head), 6, 9,
		     "slices[0].sources[1]", "same number of layers: this one spans 2");
	expect_error(SRC("%s      - model: a\n        layer_range: [0, 4]\n"
			 "      - model: a\n        layer_range: [4, 8]\n", head), 6, 9,
		     "slices[0].sources[1]", "model 'a' appears twice in one slice");
	expect_error(SRC("%s", "merge_method: x\nslices:\n  - sources: []\n"), 3, 14,
		     "slices[0].sources", "at least one source");
	expect_error(SRC("%s      - model: a\n        layer_range: [0, 4]\n"
			 "    residual_weight: heavy\n", head), 6, 22,
		     "slices[0].residual_weight", "expected a number");
	expect_error("merge_method: linear\nmodels:\n  - model: a\n  - model: a\n", 4, 5,
		     "models[1]", "model 'a' is listed twice");
	/* layer_range accepts integral floats and integer strings, as pydantic */
	struct mk_config *cfg = parse_ok("merge_method: passthrough\nslices:\n  - sources:\n"
					 "      - model: a\n        layer_range: [2.0, '08']\n");
	assert_int_equal(cfg->slices[0].sources[0].start, 2);
	assert_int_equal(cfg->slices[0].sources[0].end, 8);
	mk_config_free(cfg);
#undef SRC
}

static void test_errors_modules(void **state)
{
	expect_error("merge_method: linear\nmodules:\n  text:\n    parameters: {w: 1}\n", 4, 5,
		     "modules.text", "must specify either output slices or models");
	expect_error("merge_method: linear\nmodules:\n  text:\n    models: [{model: a}]\n"
		     "    slices: [{sources: [{model: a, layer_range: [0, 1]}]}]\n", 4, 5,
		     "modules.text", "exactly one of 'slices' and 'models'");
	expect_error("merge_method: linear\nmodules: [1]\n", 2, 10, "modules",
		     "expected modules (a map of name: module)");
}

static void test_errors_tokenizer(void **state)
{
	const char *head = "merge_method: linear\nmodels: [{model: a}]\ntokenizer:\n";
	char y[1024];

#define TOK(s) (snprintf(y, sizeof(y), "%s%s", head, s), y)
	expect_error(TOK("  tokens:\n    x:\n      source: {kind: model_token, model: a}\n"), 6, 15,
		     "tokenizer.tokens.x.source", "exactly one of 'token_id' and 'token'");
	expect_error(TOK("  tokens:\n    x:\n      source: {kind: model_token, model: a, "
			 "token: y, token_id: 3}\n"), 6, 15, NULL, "exactly one");
	expect_error(TOK("  tokens:\n    x:\n      source: {kind: model_token, token: y}\n"), 6, 15,
		     NULL, "missing 'model'");
	expect_error(TOK("  tokens:\n    x:\n      source: {kind: ones}\n"), 6, 22,
		     "tokenizer.tokens.x.source.kind", "unknown kind 'ones'");
	expect_error(TOK("  tokens:\n    x:\n      force: maybe\n"), 6, 14,
		     "tokenizer.tokens.x.force", "expected true or false");
	expect_error(TOK("  pad_to_multiple_of: 0\n"), 4, 23, "tokenizer.pad_to_multiple_of",
		     "positive integer");
	expect_error(TOK("  pad_to_multiple_of: 6.5\n"), 4, 23, "tokenizer.pad_to_multiple_of",
		     "expected an integer");
#undef TOK
}

static void test_errors_modelref(void **state)
{
	expect_error("merge_method: linear\nmodels: [{model: a+b+c}]\n", 2, 18, "models[0].model",
		     "more than one '+'");
	expect_error("merge_method: linear\nmodels: [{model: a@b@c}]\n", 2, 18, "models[0].model",
		     "more than one '@'");
	expect_error("merge_method: linear\nmodels: [{model: 'a@'}]\n", 2, 18, "models[0].model",
		     "revision after '@' is empty");
	expect_error("merge_method: linear\nmodels: [{model: ''}]\n", 2, 18, "models[0].model",
		     "path is empty");
	expect_error("merge_method: linear\nmodels: [{model: {lora: x}}]\n", 2, 18,
		     "models[0].model", "missing 'model' in the model reference");
	expect_error("merge_method: linear\nmodels: [{model: {model: {revision: x}}}]\n", 2, 26,
		     "models[0].model.model", "missing 'path'");
	expect_error("merge_method: linear\nmodels: [{model: [a]}]\n", 2, 18, "models[0].model",
		     "expected a model reference");
	expect_error("merge_method: linear\nmodels: [{model: 2024}]\n", 2, 18, "models[0].model",
		     "quote it");
}

static void test_errors_params(void **state)
{
	const char *head = "merge_method: linear\nmodels: [{model: a}]\nparameters:\n";
	char y[1024];

#define PAR(s) (snprintf(y, sizeof(y), "%s%s", head, s), y)
	expect_error(PAR("  consensus_method: count\n"), 4, 21, "parameters.consensus_method",
		     "expected a number, found the string 'count'");
	expect_error(PAR("  w: null\n"), 4, 6, "parameters.w", "cannot be null");
	expect_error(PAR("  w:\n"), 4, 5, "parameters.w", "cannot be null");
	expect_error(PAR("  w: []\n"), 4, 6, "parameters.w", "empty list");
	expect_error(PAR("  w: [1, {value: 2}]\n"), 4, 6, "parameters.w", "mixes numbers");
	expect_error(PAR("  w: [[1, 2]]\n"), 4, 6, "parameters.w", "not lists");
	expect_error(PAR("  w: [1, x]\n"), 4, 10, "parameters.w[1]", "the string 'x'");
	expect_error(PAR("  w: [{filter: mlp}]\n"), 4, 7, "parameters.w[0]", "missing 'value'");
	expect_error(PAR("  w: [{filter: 3, value: 1}]\n"), 4, 16, "parameters.w[0].filter",
		     "expected a string");
	expect_error(PAR("  w: [{value: {value: 1}}]\n"), 4, 15, "parameters.w[0].value",
		     "conditionals do not nest");
	expect_error(PAR("  w: [{value: [{value: 1}]}]\n"), 4, 15, "parameters.w[0].value",
		     "conditionals do not nest");
	expect_error(PAR("  w: .nan\n"), 4, 6, "parameters.w", "finite");
	expect_error(PAR("  w: '1e999'\n"), 4, 6, "parameters.w", "finite");
	expect_error(PAR("  [a]: 1\n"), 4, 3, "parameters", "plain string");
	expect_error("merge_method: linear\nmodels: [{model: a}]\nparameters: [1]\n", 3, 13,
		     "parameters", "expected parameters (a map");
#undef PAR
}

static void test_errors_dtype(void **state)
{
	expect_error("merge_method: linear\nmodels: [{model: a}]\ndtype: bf8\n", 3, 8, "dtype",
		     "unknown dtype 'bf8' (accepted: bfloat16, float16, float32, int64");
	expect_error("merge_method: linear\nmodels: [{model: a}]\nout_dtype: BF16\n", 3, 12,
		     "out_dtype", "unknown dtype 'BF16'");
	expect_error("merge_method: linear\nmodels: [{model: a}]\ndtype: 16\n", 3, 8, "dtype",
		     "expected a string");
}

static void test_three_mistakes(void **state)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;
	const char *y =
		"merge_method: ties\n"
		"base_model: a\n"
		"models:\n"
		"  - model: a\n"
		"  - model: b\n"
		"    parameters:\n"
		"      weight: heavy\n"          /* 1: not a number */
		"      density: [0.5, {value: 1}]\n" /* 2: mixed list */
		"dtype: float8\n";                /* 3: dtype */

	assert_int_equal(parse(y, &cfg, &d, &err), -MK_EINVAL);
	assert_null(cfg);
	if (d.nerrors != 3)
		dump(&d);
	assert_int_equal(d.nerrors, 3);
	assert_int_equal(d.nwarnings, 0);
	assert_true(has(&d, MK_DIAG_ERROR, 7, 15, "models[1].parameters.weight", "'heavy'"));
	assert_true(has(&d, MK_DIAG_ERROR, 8, 16, "models[1].parameters.density", "mixes"));
	assert_true(has(&d, MK_DIAG_ERROR, 9, 8, "dtype", "float8"));
	assert_non_null(strstr(err.msg, "t.yml:7:15: models[1].parameters.weight: "));
	assert_non_null(strstr(err.msg, "(and 2 more errors)"));
	mk_diags_free(&d);
}

static void test_warnings(void **state)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;
	char line[512];
	const char *y =
		"merge_method: slerp\n"
		"base-model: a\n"
		"slices:\n"
		"  - sources:\n"
		"      - model: a\n"
		"        layer-range: [0, 2]\n"
		"        layer_range: [0, 2]\n"
		"      - model: b\n"
		"        layer_range: [0, 2]\n"
		"        weight: 0.5\n"
		"parameters:\n"
		"  t:\n"
		"    - pattern: mlp\n"
		"      value: 1\n"
		"dtyp: float16\n"
		"zzz: 1\n"
		"merge_method: linear\n";

	assert_int_equal(parse(y, &cfg, &d, &err), 0);
	assert_non_null(cfg);
	assert_int_equal(d.nerrors, 0);
	assert_true(has(&d, MK_DIAG_WARNING, 2, 1, "", "unknown key 'base-model' is ignored "
			"(did you mean 'base_model'?)"));
	assert_true(has(&d, MK_DIAG_WARNING, 6, 9, "slices[0].sources[0]",
			"did you mean 'layer_range'?"));
	assert_true(has(&d, MK_DIAG_WARNING, 10, 9, "slices[0].sources[1]",
			"unknown key 'weight' is ignored (merge parameters go under 'parameters:')"));
	assert_true(has(&d, MK_DIAG_WARNING, 13, 7, "parameters.t[0]",
			"did you mean 'filter'?"));
	assert_true(has(&d, MK_DIAG_WARNING, 15, 1, "", "did you mean 'dtype'?"));
	assert_true(has(&d, MK_DIAG_WARNING, 16, 1, "", "unknown key 'zzz'"));
	assert_true(has(&d, MK_DIAG_WARNING, 17, 1, "", "'merge_method' is given twice"));
	assert_int_equal(d.nwarnings, 7);
	/* mergekit's meanings: the later merge_method, no base, the
	 * pattern-less conditional matches everything */
	assert_string_equal(cfg->merge_method, "linear");
	assert_null(cfg->base_model);
	assert_null(param(&cfg->params, "t")->conds[0].filter);
	mk_diag_format(&d, &d.v[0], line, sizeof(line));
	assert_string_equal(line, "t.yml:2:1: unknown key 'base-model' is ignored "
			    "(did you mean 'base_model'?)");
	for (size_t i = 0; i < d.n; i++)
		if (d.v[i].line == 6)
			mk_diag_format(&d, &d.v[i], line, sizeof(line));
	assert_string_equal(line, "t.yml:6:9: slices[0].sources[0]: unknown key 'layer-range' "
			    "is ignored (did you mean 'layer_range'?)");
	mk_diags_free(&d);
	mk_config_free(cfg);
}

static void test_bare_conditional(void **state)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;
	const struct mk_pvalue *v;
	double out;

	assert_int_equal(parse("merge_method: task_arithmetic\nmodels: [{model: a}]\n"
			       "parameters:\n  scale: {filter: down_proj, value: 0.5}\n",
			       &cfg, &d, &err), 0);
	assert_int_equal(d.nwarnings, 1);
	assert_true(has(&d, MK_DIAG_WARNING, 4, 10, "parameters.scale", "one-element list"));
	v = param(&cfg->params, "scale");
	assert_int_equal(v->kind, MK_PV_CONDS);
	assert_true(v->bare);
	assert_int_equal(v->nconds, 1);
	assert_true(eval(v, "model.layers.0.mlp.down_proj.weight", 0.3) == 0.5);
	assert_false(mk_pvalue_eval(v, "model.layers.0.mlp.up_proj.weight", 0.3, &out));
	mk_diags_free(&d);
	mk_config_free(cfg);
}

static void test_coercion(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: linear\nmodels: [{model: a}]\nparameters:\n"
		"  a: true\n  b: false\n  c: '0.5'\n  d: 1\n  e: yes\n  f: off\n"
		"  g: 0x10\n  h: 010\n  i: 1_000.5\n  j: -.5\n  k: 1.0e+2\n  l: '1e3'\n"
		"  m: [1, '2', true]\n  n: ' 2.5 '\n");
	const struct mk_params *p = &cfg->params;

	assert_true(param(p, "a")->scalar == 1.0);
	assert_true(param(p, "b")->scalar == 0.0);
	assert_true(param(p, "c")->scalar == 0.5);
	assert_true(param(p, "d")->scalar == 1.0);
	assert_true(param(p, "e")->scalar == 1.0);
	assert_true(param(p, "f")->scalar == 0.0);
	assert_true(param(p, "g")->scalar == 16.0);
	assert_true(param(p, "h")->scalar == 8.0);    /* YAML 1.1 octal */
	assert_true(param(p, "i")->scalar == 1000.5);
	assert_true(param(p, "j")->scalar == -0.5);
	assert_true(param(p, "k")->scalar == 100.0);
	assert_true(param(p, "l")->scalar == 1000.0);
	assert_int_equal(param(p, "m")->n, 3);
	assert_true(param(p, "m")->grad[1] == 2.0 && param(p, "m")->grad[2] == 1.0);
	assert_true(param(p, "n")->scalar == 2.5);
	mk_config_free(cfg);
	/* "0o7" is a string to YAML 1.1 and not a number to pydantic */
	expect_error("merge_method: linear\nmodels: [{model: a}]\nparameters: {o: 0o7}\n", 3, 17,
		     "parameters.o", "the string '0o7'");
}

static void test_null_means_absent(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: linear\nmodels:\n  - model: a\n    parameters:\n"
		"base_model: null\nparameters: ~\ndtype:\ntokenizer_source: null\n"
		"chat_template: null\nslices: []\nmodules:\n");

	assert_null(cfg->base_model);
	assert_int_equal(cfg->params.n, 0);
	assert_int_equal(cfg->models[0].params.n, 0);
	assert_null(cfg->dtype.name);
	assert_int_equal(cfg->tokenizer_source.kind, MK_TOKSRC_NONE);
	assert_null(cfg->chat_template);
	mk_config_free(cfg);
}

static void test_duplicate_params_and_aliases(void **state)
{
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;

	assert_int_equal(parse("merge_method: linear\nmodels: [{model: a}]\n"
			       "parameters:\n  w: 1\n  w: 2\n", &cfg, &d, &err), 0);
	assert_true(has(&d, MK_DIAG_WARNING, 5, 3, "parameters", "'w' is given twice"));
	assert_int_equal(cfg->params.n, 1);
	assert_true(param(&cfg->params, "w")->scalar == 2.0);
	mk_diags_free(&d);
	mk_config_free(cfg);

	cfg = parse_ok("merge_method: linear\n"
		       "models:\n  - model: a\n    parameters: &p {w: [0, 1]}\n"
		       "  - model: b\n    parameters: *p\n");
	assert_true(param(&cfg->models[1].params, "w")->grad[1] == 1.0);
	mk_config_free(cfg);
}

static void test_alias_budget(void **state)
{
	/* 120 x 120 x 120 visits from a few kilobytes of aliases */
	size_t cap = 1 << 16, o = 0;
	char *y = malloc(cap);
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err;

	assert_non_null(y);
	o += (size_t)snprintf(y + o, cap - o, "merge_method: linear\nx: &a [0");
	for (int i = 1; i < 120; i++)
		o += (size_t)snprintf(y + o, cap - o, ",%d", i);
	o += (size_t)snprintf(y + o, cap - o, "]\nz: &c [{value: *a}");
	for (int i = 1; i < 120; i++)
		o += (size_t)snprintf(y + o, cap - o, ",{value: *a}");
	o += (size_t)snprintf(y + o, cap - o, "]\nmodels:\n  - model: m\n    parameters:\n");
	for (int i = 0; i < 120; i++)
		o += (size_t)snprintf(y + o, cap - o, "      p%d: *c\n", i);
	assert_true(o < cap);
	assert_int_equal(mk_config_parse(y, o, "t.yml", &cfg, &d, &err), -MK_EINVAL);
	assert_null(cfg);
	assert_non_null(strstr(err.msg, "expands to more than"));
	mk_diags_free(&d);
	free(y);
}

static void test_tokenizer_parse(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: linear\nmodels: [{model: a}, {model: b}]\n"
		"tokenizer:\n  pad_to_multiple_of: 64\n  tokens:\n"
		"    <|im_start|>:\n      source: a@r\n"
		"    <|eot_id|>:\n      source: b\n      force: true\n"
		"    <|x|>:\n      source: {kind: model_token, model: a, token: \"<|y|>\"}\n"
		"    <|z|>:\n      source: {kind: model_token, model: b, token_id: 7}\n"
		"    <|unused|>:\n      source: {kind: zero}\n"
		"    <|d|>: {}\n"
		"chat_template: chatml\n");
	const struct mk_tokenizer_config *t = cfg->tokenizer;

	assert_non_null(t);
	assert_int_equal(t->source.kind, MK_TOKSRC_UNION);   /* the default */
	assert_true(t->has_pad_to_multiple_of);
	assert_int_equal(t->pad_to_multiple_of, 64);
	assert_int_equal(t->ntokens, 6);
	assert_string_equal(t->tokens[0].token, "<|im_start|>");
	assert_int_equal(t->tokens[0].kind, MK_TOKEMB_MODEL);
	assert_string_equal(t->tokens[0].model.model.revision, "r");
	assert_false(t->tokens[0].force);
	assert_true(t->tokens[1].force);
	assert_int_equal(t->tokens[2].kind, MK_TOKEMB_MODEL_TOKEN);
	assert_string_equal(t->tokens[2].src_token, "<|y|>");
	assert_false(t->tokens[2].has_token_id);
	assert_true(t->tokens[3].has_token_id);
	assert_int_equal(t->tokens[3].token_id, 7);
	assert_int_equal(t->tokens[4].kind, MK_TOKEMB_ZERO);
	assert_int_equal(t->tokens[5].kind, MK_TOKEMB_DEFAULT);
	assert_string_equal(t->tokens[3].loc.path, "tokenizer.tokens.<|z|>");
	assert_string_equal(cfg->chat_template, "chatml");
	mk_config_free(cfg);

	/* "union"/"base" win over a model of that name; anything else is a model */
	cfg = parse_ok("merge_method: linear\nmodels: [{model: a}]\ntokenizer_source: base\n");
	assert_int_equal(cfg->tokenizer_source.kind, MK_TOKSRC_BASE);
	mk_config_free(cfg);
	cfg = parse_ok("merge_method: linear\nmodels: [{model: a}]\ntokenizer: {source: org/tok@v2}\n");
	assert_int_equal(cfg->tokenizer->source.kind, MK_TOKSRC_MODEL);
	assert_string_equal(cfg->tokenizer->source.model.model.path, "org/tok");
	assert_string_equal(cfg->tokenizer->source.model.model.revision, "v2");
	mk_config_free(cfg);
}

/* ------------------------------------------------------------- evaluation */

static void test_gradient_eval(void **state)
{
	double g5[] = { 0, 0.5, 0.3, 0.7, 1 };
	double g1[] = { 0.25 };
	double g2[] = { 0.2, 0.8 };
	struct mk_pvalue v = { .kind = MK_PV_GRADIENT, .n = 5, .grad = g5 };
	double t = 13.0 / 39.0;

	/* mergekit's examples/gradient-slerp.yml: layer 13 of 40 */
	assert_true(fabs(eval(&v, "model.layers.13.self_attn.q_proj.weight", t) -
			 0.43333333333333335) < 1e-15);
	assert_true(eval(&v, "x", t) == 0.43333333333333335);   /* bit-exact, as Python */
	assert_true(eval(&v, "x", 0) == 0.0);
	assert_true(eval(&v, "x", 1) == 1.0);
	assert_true(eval(&v, "x", 0.5) == 0.3);
	assert_true(eval(&v, "x", 0.25) == 0.5);
	assert_true(eval(&v, "x", 2.0) == 1.0);                  /* clamped */
	assert_true(eval(&v, "x", -1.0) == 0.0);
	assert_true(eval(&v, "x", NAN) == 0.0);
	v.n = 1;
	v.grad = g1;
	assert_true(eval(&v, "x", 0.7) == 0.25);
	assert_true(eval(&v, "x", 1) == 0.25);
	v.n = 2;
	v.grad = g2;
	assert_true(eval(&v, "x", 0.3) == 0.38);                 /* as Python computes it */
	assert_true(eval(&v, "x", 1) == 0.8);
	/* every layer of a 40-layer slice matches the formula in double */
	v.n = 5;
	v.grad = g5;
	for (int k = 0; k < 40; k++) {
		double tt = (double)k / 39.0, s = tt * 4.0;
		size_t i0 = (size_t)s, i1 = i0 + 1 < 5 ? i0 + 1 : 4;
		double f = s - (double)i0;
		volatile double a = (1 - f) * g5[i0], b = f * g5[i1];
		assert_true(eval(&v, "x", tt) == a + b);
	}
}

static void test_conditionals(void **state)
{
	struct mk_config *cfg = load("testdata/configs/gradient-slerp.yml");
	const struct mk_pvalue *t = param(&cfg->params, "t");
	double out;

	assert_true(fabs(eval(t, "model.layers.13.self_attn.q_proj.weight", 13.0 / 39) -
			 13.0 / 30) < 1e-15);
	assert_true(eval(t, "model.layers.13.mlp.up_proj.weight", 13.0 / 39) ==
		    (1 - (13.0 / 39 * 4 - 1)) * 0.5 + (13.0 / 39 * 4 - 1) * 0.7);
	assert_true(eval(t, "model.layers.13.input_layernorm.weight", 13.0 / 39) == 0.5);
	assert_true(eval(t, "model.embed_tokens.weight", 0) == 0.5);
	assert_true(eval(t, "lm_head.weight", 0) == 0.5);
	assert_true(eval(t, "", 0.5) == 0.5);   /* empty name: only the filterless entry */
	assert_true(eval(t, NULL, 0.5) == 0.5);
	mk_config_free(cfg);

	/* no entry matches: "no value"; "*" matches anything, even "" */
	cfg = parse_ok("merge_method: x\nmodels: [{model: a}]\nparameters:\n"
		       "  w: [{filter: mlp, value: 1}, {filter: MLP, value: 2}]\n"
		       "  s: [{filter: '*', value: [3, 4]}]\n"
		       "  e: [{filter: '', value: 5}]\n");
	assert_false(mk_pvalue_eval(param(&cfg->params, "w"), "model.layers.0.self_attn.o_proj",
				    0, &out));
	assert_true(eval(param(&cfg->params, "w"), "x.MLP.y", 0) == 2.0);  /* case-sensitive */
	assert_false(mk_pvalue_eval(param(&cfg->params, "w"), "", 0, &out));
	assert_true(eval(param(&cfg->params, "s"), "", 1) == 4.0);
	assert_true(eval(param(&cfg->params, "e"), "abc", 0) == 5.0);   /* "" is a substring */
	assert_false(mk_pvalue_eval(param(&cfg->params, "e"), "", 0, &out));
	mk_config_free(cfg);
}

static void test_precedence(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: ties\nbase_model: a\n"
		"modules:\n  default:\n    slices:\n      - sources:\n"
		"          - model: a\n            layer_range: [0, 2]\n"
		"          - model: b\n            layer_range: [0, 2]\n"
		"            parameters:\n"
		"              weight: [{filter: mlp, value: 1}]\n"
		"              t: 0.9\n"
		"        parameters:\n          weight: 2\n          density: [{filter: attn, value: 0.2}]\n"
		"    parameters:\n      weight: 3\n      density: 0.3\n      gamma: 0.03\n"
		"parameters:\n  weight: 4\n  density: 0.4\n  gamma: 0.04\n  lambda: 0.5\n  t: 0.1\n");
	const struct mk_output_module *m = &cfg->modules[0];
	const struct mk_output_slice *s = &m->slices[0];
	struct mk_param_ctx sc = { &cfg->params, &m->params, s };
	const struct mk_model_ref *a = &s->sources[0].model, *b = &s->sources[1].model;
	struct mk_model_ref b2;
	double v = 0;

	/* source level, only for the model it names and only where it matches */
	assert_int_equal(mk_param_lookup(&sc, "weight", b, "l.0.mlp.w", 0, &v), MK_PL_SOURCE);
	assert_true(v == 1.0);
	assert_int_equal(mk_param_lookup(&sc, "weight", b, "l.0.attn.w", 0, &v), MK_PL_SLICE);
	assert_true(v == 2.0);
	assert_int_equal(mk_param_lookup(&sc, "weight", a, "l.0.mlp.w", 0, &v), MK_PL_SLICE);
	assert_true(v == 2.0);
	/* an equal reference (another object) finds the source too */
	assert_int_equal(mk_model_ref_parse("b", &b2, NULL), 0);
	assert_int_equal(mk_param_lookup(&sc, "weight", &b2, "mlp", 0, &v), MK_PL_SOURCE);
	mk_model_ref_clear(&b2);
	/* slice conditional falls through to the module */
	assert_int_equal(mk_param_lookup(&sc, "density", a, "l.0.attn.q", 0, &v), MK_PL_SLICE);
	assert_true(v == 0.2);
	assert_int_equal(mk_param_lookup(&sc, "density", a, "l.0.mlp.up", 0, &v), MK_PL_MODULE);
	assert_true(v == 0.3);
	assert_int_equal(mk_param_lookup(&sc, "gamma", NULL, "x", 0, &v), MK_PL_MODULE);
	assert_true(v == 0.03);
	assert_int_equal(mk_param_lookup(&sc, "lambda", NULL, "x", 0, &v), MK_PL_TOP);
	assert_true(v == 0.5);
	assert_int_equal(mk_param_lookup(&sc, "nothing", b, "x", 0, &v), MK_PL_NONE);
	/* a global parameter skips the source level: t under a source is ignored */
	assert_int_equal(mk_param_lookup(&sc, "t", NULL, "x", 0, &v), MK_PL_TOP);
	assert_true(v == 0.1);
	assert_int_equal(mk_param_lookup(&sc, "t", b, "x", 0, &v), MK_PL_SOURCE);
	assert_true(v == 0.9);
	/* without module and slice only the top level speaks */
	struct mk_param_ctx top_only = { &cfg->params, NULL, NULL };
	assert_int_equal(mk_param_lookup(&top_only, "weight", b, "mlp", 0, &v), MK_PL_TOP);
	assert_true(v == 4.0);
	struct mk_param_ctx none = { NULL, NULL, NULL };
	assert_int_equal(mk_param_lookup(&none, "weight", b, "mlp", 0, &v), MK_PL_NONE);
	/* the base the planner exempts from required per-model parameters */
	assert_true(mk_model_ref_equal(mk_config_base_for(cfg, s), a));
	mk_config_free(cfg);

	/* a slice's base_model overrides the top-level one */
	cfg = parse_ok("merge_method: ties\nbase_model: a\nslices:\n  - sources:\n"
		       "      - {model: a, layer_range: [0, 1]}\n      - {model: b, layer_range: [0, 1]}\n"
		       "    base_model: b\n");
	assert_string_equal(mk_config_base_for(cfg, &cfg->slices[0])->model.path, "b");
	assert_string_equal(mk_config_base_for(cfg, NULL)->model.path, "a");
	mk_config_free(cfg);
}

/* ------------------------------------------------------------- model references */

static void expect_ref(const char *s, const char *path, const char *rev,
		       const char *lora, const char *lrev)
{
	struct mk_model_ref r;
	struct mk_err err;
	char *back = NULL;

	if (mk_model_ref_parse(s, &r, &err) != 0)
		fail_msg("%s: %s", s, err.msg);
	assert_string_equal(r.model.path, path);
	if (rev)
		assert_string_equal(r.model.revision, rev);
	else
		assert_null(r.model.revision);
	if (lora)
		assert_string_equal(r.lora.path, lora);
	else
		assert_null(r.lora.path);
	if (lrev)
		assert_string_equal(r.lora.revision, lrev);
	else
		assert_null(r.lora.revision);
	assert_null(r.override_arch);
	assert_int_equal(mk_model_ref_format(&r, &back, &err), 0);
	assert_string_equal(back, s);
	free(back);
	mk_model_ref_clear(&r);
}

static void expect_bad_ref(const char *s, const char *sub)
{
	struct mk_model_ref r;
	struct mk_err err;

	assert_int_equal(mk_model_ref_parse(s, &r, &err), -MK_EINVAL);
	if (!strstr(err.msg, sub))
		fail_msg("%s: \"%s\" lacks \"%s\"", s, err.msg, sub);
	assert_null(r.model.path);
}

static void test_modelref_parse(void **state)
{
	expect_ref("org/name", "org/name", NULL, NULL, NULL);
	expect_ref("org/name@v1.0", "org/name", "v1.0", NULL, NULL);
	expect_ref("./local/dir", "./local/dir", NULL, NULL, NULL);
	expect_ref("/abs/path", "/abs/path", NULL, NULL, NULL);
	expect_ref("org/x+org/lora", "org/x", NULL, "org/lora", NULL);
	expect_ref("org/name@v1+org/lora@main", "org/name", "v1", "org/lora", "main");
	/* QUIRK kept: '@' in a local path is read as a revision */
	expect_ref("./my@dir", "./my", "dir", NULL, NULL);
	expect_ref("./a+b", "./a", NULL, "b", NULL);
	expect_bad_ref("a+b+c", "more than one '+'");
	expect_bad_ref("a@b@c", "more than one '@'");
	expect_bad_ref("a+b@c@d", "(LoRA part)");
	expect_bad_ref("", "path is empty");
	expect_bad_ref("@rev", "path is empty");
	expect_bad_ref("a@", "revision after '@' is empty");
	expect_bad_ref("a+", "path is empty");
}

/* mk_config_parse_partial keeps a config whose model reference is bad,
 * with that reference unset; mk_config_models must not hand it out (mk-plan
 * used to open it and crash on the missing path). */
static void test_partial_bad_refs(void **state)
{
	static const struct {
		const char *ref;
		unsigned col;
		const char *path, *msg;
	} c[] = {
		{ "\"\"", 12, "models[0].model", "can't parse model reference '': the model path is empty" },
		{ "\"@main\"", 12, "models[0].model", "reference '@main': the model path is empty" },
		{ "\"+\"", 12, "models[0].model", "reference '+': the model path is empty" },
		{ "\"a+\"", 12, "models[0].model", "reference 'a+' (LoRA part): the model path is empty" },
		{ "{model: {path: \"\"}}", 27, "models[0].model.model", "the model path is empty" },
		{ "{model: a, lora: {path: \"\"}}", 36, "models[0].model.lora", "the model path is empty" },
		{ "{path: \"\"}", 12, "models[0].model", "missing 'model' in the model reference" },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		char y[256];
		struct mk_config *cfg = NULL;
		struct mk_diags d;
		struct mk_err err;
		const struct mk_model_ref **r = NULL;
		size_t n = 99;

		snprintf(y, sizeof(y), "merge_method: linear\nmodels:\n  - model: %s\n  - model: b\n",
			 c[i].ref);
		assert_int_equal(mk_config_parse_partial(y, strlen(y), "t.yml", &cfg, &d, &err),
				 -MK_EINVAL);
		assert_non_null(cfg);
		assert_int_equal(d.nerrors, 1);
		if (!has(&d, MK_DIAG_ERROR, 3, c[i].col, c[i].path, c[i].msg)) {
			dump(&d);
			fail_msg("no error 3:%u %s \"%s\" for:\n%s", c[i].col, c[i].path, c[i].msg, y);
		}
		assert_non_null(strstr(err.msg, "t.yml:3:"));
		assert_int_equal(cfg->nmodels, 2);
		assert_null(cfg->models[0].model.model.path);
		/* only the good reference is listed */
		assert_int_equal(mk_config_models(cfg, &r, &n, NULL), 0);
		assert_int_equal(n, 1);
		assert_string_equal(r[0]->model.path, "b");
		free(r);
		mk_config_free(cfg);
		mk_diags_free(&d);
	}

	/* the same in slices, modules and base_model: nothing unset is listed */
	static const char *const others[] = {
		"merge_method: linear\nslices:\n  - sources:\n      - {model: '', layer_range: [0, 1]}\n"
		"      - {model: b, layer_range: [0, 1]}\n",
		"merge_method: linear\nmodules:\n  m:\n    models: [{model: '+'}, {model: b}]\n",
		"merge_method: ties\nbase_model: '@x'\nmodels: [{model: b}]\n",
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		struct mk_config *cfg = NULL;
		struct mk_diags d;
		struct mk_err err;
		const struct mk_model_ref **r = NULL;
		size_t n = 99;

		assert_int_equal(mk_config_parse_partial(others[i], strlen(others[i]), "t.yml", &cfg,
							 &d, &err), -MK_EINVAL);
		assert_non_null(cfg);
		assert_int_equal(d.nerrors, 1);
		assert_non_null(strstr(err.msg, "the model path is empty"));
		assert_int_equal(mk_config_models(cfg, &r, &n, NULL), 0);
		assert_int_equal(n, 1);
		assert_string_equal(r[0]->model.path, "b");
		free(r);
		mk_config_free(cfg);
		mk_diags_free(&d);
	}
}

static void test_modelref_equal_and_map(void **state)
{
	struct mk_model_ref x, xm, dot, plain, copy;
	struct mk_config *cfg;
	char *s = NULL;

	assert_int_equal(mk_model_ref_parse("org/x", &x, NULL), 0);
	assert_int_equal(mk_model_ref_parse("org/x@main", &xm, NULL), 0);
	assert_int_equal(mk_model_ref_parse("./a", &dot, NULL), 0);
	assert_int_equal(mk_model_ref_parse("a", &plain, NULL), 0);
	assert_false(mk_model_ref_equal(&x, &xm));
	assert_false(mk_model_ref_equal(&dot, &plain));
	assert_true(mk_model_ref_equal(&x, &x));
	assert_false(mk_model_ref_equal(&x, NULL));
	assert_true(mk_model_ref_equal(NULL, NULL));
	assert_int_equal(mk_model_ref_copy(&copy, &xm, NULL), 0);
	assert_true(mk_model_ref_equal(&copy, &xm));
	assert_ptr_not_equal(copy.model.path, xm.model.path);
	mk_model_ref_clear(&copy);

	/* map forms: model as string or {path, revision}, lora, override */
	cfg = parse_ok("merge_method: linear\nmodels:\n"
		       "  - model: {model: {path: ./dir+with@odd, revision: main}}\n"
		       "  - model: {model: org/x@main}\n"
		       "  - model: {model: org/y, lora: {path: l, revision: r}, "
		       "override_architecture: LlamaForCausalLM}\n"
		       "  - model: {model: org/x}\n");
	assert_string_equal(cfg->models[0].model.model.path, "./dir+with@odd");
	assert_string_equal(cfg->models[0].model.model.revision, "main");
	assert_true(mk_model_ref_equal(&cfg->models[1].model, &xm));
	assert_true(mk_model_ref_equal(&cfg->models[3].model, &x));   /* same as the string form */
	assert_string_equal(cfg->models[2].model.override_arch, "LlamaForCausalLM");
	assert_string_equal(cfg->models[2].model.lora.revision, "r");
	assert_int_equal(mk_model_ref_format(&cfg->models[2].model, &s, NULL), 0);
	assert_string_equal(s, "{model: org/y, lora: l@r, override_architecture: LlamaForCausalLM}");
	free(s);
	/* the override takes part in equality */
	assert_false(mk_model_ref_equal(&cfg->models[2].model, &plain));
	mk_config_free(cfg);
	mk_model_ref_clear(&x);
	mk_model_ref_clear(&xm);
	mk_model_ref_clear(&dot);
	mk_model_ref_clear(&plain);
}

/* ------------------------------------------------------------- normalisation */

static int fake_layers(void *ctx, const struct mk_model_ref *ref, long long *n,
		       struct mk_err *err)
{
	int *calls = ctx;

	(*calls)++;
	if (strcmp(ref->model.path, "broken") == 0)
		return mk_err_set(err, MK_ENOENT, "model 'broken' not found");
	*n = strcmp(ref->model.path, "deep") == 0 ? 32 : 24;
	return 0;
}

static void test_normalize_models(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: ties\nbase_model: base\nmodels:\n"
		"  - model: m1\n    parameters: {weight: 0.5}\n  - model: m2\n");
	struct mk_output_slice *sl = NULL;
	struct mk_err err;
	size_t n = 0;
	int calls = 0;

	/* base not listed: appended with its full range and no parameters */
	assert_int_equal(mk_config_normalize(cfg->models, cfg->nmodels, NULL, 0, cfg->base_model,
					     fake_layers, &calls, &sl, &n, &err), 0);
	assert_int_equal(n, 1);
	assert_int_equal(calls, 3);
	assert_int_equal(sl[0].nsources, 3);
	assert_string_equal(sl[0].sources[0].model.model.path, "m1");
	assert_string_equal(sl[0].sources[2].model.model.path, "base");
	assert_int_equal(sl[0].sources[2].start, 0);
	assert_int_equal(sl[0].sources[2].end, 24);
	assert_int_equal(sl[0].sources[2].params.n, 0);
	assert_int_equal(sl[0].sources[0].params.n, 1);
	assert_null(sl[0].base_model);
	assert_int_equal(sl[0].params.n, 0);
	/* models[i].parameters act at the source level */
	struct mk_param_ctx sc = { &cfg->params, NULL, &sl[0] };
	double v;
	assert_int_equal(mk_param_lookup(&sc, "weight", &cfg->models[0].model, "x", 0, &v),
			 MK_PL_SOURCE);
	assert_true(v == 0.5);
	mk_output_slices_free(sl, n);

	/* without a base nothing is added */
	assert_int_equal(mk_config_normalize(cfg->models, cfg->nmodels, NULL, 0, NULL,
					     fake_layers, &calls, &sl, &n, &err), 0);
	assert_int_equal(sl[0].nsources, 2);
	mk_output_slices_free(sl, n);

	/* the base listed: not added again */
	assert_int_equal(mk_config_normalize(cfg->models, cfg->nmodels, NULL, 0,
					     &cfg->models[1].model, fake_layers, &calls, &sl,
					     &n, &err), 0);
	assert_int_equal(sl[0].nsources, 2);
	mk_output_slices_free(sl, n);
	mk_config_free(cfg);

	/* different depths */
	cfg = parse_ok("merge_method: linear\nmodels: [{model: m1}, {model: deep}]\n");
	assert_int_equal(mk_config_normalize(cfg->models, cfg->nmodels, NULL, 0, NULL,
					     fake_layers, &calls, &sl, &n, &err), -MK_EINVAL);
	assert_null(sl);
	assert_non_null(strstr(err.msg, "same number of layers: 'deep' spans 32"));
	mk_config_free(cfg);

	/* the callback's error comes back as is */
	cfg = parse_ok("merge_method: linear\nmodels: [{model: m1}, {model: broken}]\n");
	assert_int_equal(mk_config_normalize(cfg->models, cfg->nmodels, NULL, 0, NULL,
					     fake_layers, &calls, &sl, &n, &err), -MK_ENOENT);
	assert_string_equal(err.msg, "model 'broken' not found");
	mk_config_free(cfg);
}

static void test_normalize_slices(void **state)
{
	struct mk_config *cfg = load("testdata/configs/passthrough.yml");
	struct mk_output_slice *sl = NULL, twice;
	struct mk_err err;
	size_t n = 0;

	assert_int_equal(mk_config_normalize(NULL, 0, cfg->slices, cfg->nslices, NULL, NULL,
					     NULL, &sl, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_int_equal(sl[1].sources[0].start, 1);
	assert_ptr_not_equal(sl[1].sources[0].model.model.path,
			     cfg->slices[1].sources[0].model.model.path);
	assert_string_equal(sl[1].sources[0].loc.path, "slices[1].sources[0]");

	mk_output_slices_free(sl, n);
	/* the same model twice (built by hand: the parser refuses it) */
	memset(&twice, 0, sizeof(twice));
	struct mk_input_slice src[2];
	memset(src, 0, sizeof(src));
	src[0] = cfg->slices[0].sources[0];
	src[1] = cfg->slices[0].sources[0];
	twice.sources = src;
	twice.nsources = 2;
	assert_int_equal(mk_config_normalize(NULL, 0, &twice, 1, NULL, NULL, NULL, &sl, &n, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "appears twice"));
	/* models: without a layer-count callback */
	struct mk_config *m = load("testdata/configs/linear.yml");
	assert_int_equal(mk_config_normalize(m->models, m->nmodels, NULL, 0, NULL, NULL, NULL,
					     &sl, &n, &err), -MK_EINVAL);
	mk_config_free(m);
	mk_config_free(cfg);
}

/* ------------------------------------------------------------- order, features, dtypes */

static void test_model_order(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: ties\n"
		"modules:\n  text:\n    slices:\n      - sources:\n"
		"          - {model: c, layer_range: [0, 1]}\n          - {model: b, layer_range: [0, 1]}\n"
		"  vision:\n    models: [{model: a}, {model: c}, {model: d@r}, {model: d}]\n"
		"base_model: d\n");
	const struct mk_model_ref **r;
	size_t n;

	assert_int_equal(mk_config_models(cfg, &r, &n, NULL), 0);
	assert_int_equal(n, 5);
	assert_string_equal(r[0]->model.path, "d");
	assert_null(r[0]->model.revision);
	assert_string_equal(r[1]->model.path, "c");
	assert_string_equal(r[2]->model.path, "b");
	assert_string_equal(r[3]->model.path, "a");
	assert_string_equal(r[4]->model.revision, "r");
	free(r);
	mk_config_free(cfg);
}

static void test_unsupported(void **state)
{
	struct mk_config *cfg = parse_ok(
		"merge_method: linear\nmodels:\n  - model: a\n  - model: b+lora\n"
		"tokenizer_source: union\nbase_model: {model: c, lora: l2}\n");
	struct mk_config_feature *f;
	size_t n;

	assert_int_equal(mk_config_unsupported(cfg, &f, &n, NULL), 0);
	assert_int_equal(n, 0);           /* LoRA references are planned now (mk-plan checks the adapter) */
	free(f);
	mk_config_free(cfg);
	/* tokens and padding are merged now: nothing refused */
	cfg = parse_ok("merge_method: linear\nmodels:\n  - model: a\ntokenizer:\n  source: base\n"
		       "  tokens:\n    \"<x>\": {source: a}\n  pad_to_multiple_of: 8\n");
	assert_int_equal(mk_config_unsupported(cfg, &f, &n, NULL), 0);
	assert_int_equal(n, 0);
	free(f);
	mk_config_free(cfg);

	cfg = load("testdata/configs/ties.yml");
	assert_int_equal(mk_config_unsupported(cfg, &f, &n, NULL), 0);
	assert_int_equal(n, 0);
	assert_null(f);
	mk_config_free(cfg);
}

static void test_dtype_names(void **state)
{
	static const struct { const char *name, *canon; enum mk_dtype dt; } ok[] = {
		{ "bfloat16", "bfloat16", MK_DT_BF16 }, { "torch.bfloat16", "bfloat16", MK_DT_BF16 },
		{ "float16", "float16", MK_DT_F16 }, { "torch.float16", "float16", MK_DT_F16 },
		{ "float32", "float32", MK_DT_F32 }, { "int64", "int64", MK_DT_I64 },
		{ "torch.int64", "int64", MK_DT_I64 }, { "float64", "float64", MK_DT_F64 },
		{ "bf16", "bfloat16", MK_DT_BF16 }, { "fp16", "float16", MK_DT_F16 },
		{ "fp32", "float32", MK_DT_F32 },
	};
	static const char *const bad[] = { "BF16", "float", "half", "torch.", "fp8", "int32",
					   "torch.torch.float16", " float16" };
	struct mk_err err;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		enum mk_dtype dt = MK_DT_COUNT;
		const char *c = NULL;
		assert_int_equal(mk_config_dtype_parse(ok[i].name, &dt, &c, &err), 0);
		assert_int_equal(dt, ok[i].dt);
		assert_string_equal(c, ok[i].canon);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(mk_config_dtype_parse(bad[i], NULL, NULL, &err), -MK_EINVAL);
		assert_non_null(strstr(err.msg, "accepted: bfloat16"));
	}
	struct mk_config *cfg = parse_ok("merge_method: linear\nmodels: [{model: a}]\n"
					 "dtype: torch.float16\nout_dtype: fp32\n");
	assert_string_equal(cfg->dtype.name, "torch.float16");
	assert_string_equal(cfg->dtype.canonical, "float16");
	assert_int_equal(cfg->out_dtype.dtype, MK_DT_F32);
	mk_config_free(cfg);
}

static void test_diags_null_and_format(void **state)
{
	struct mk_config *cfg = NULL;
	struct mk_err err;
	struct mk_diags d = { 0 };
	struct mk_diag g = { .line = 3, .col = 4, .path = "", .msg = "m" };
	char buf[64];

	/* diags may be NULL: err still says what is wrong */
	assert_int_equal(mk_config_parse("merge_method: x\n", 16, NULL, &cfg, NULL, &err),
			 -MK_EINVAL);
	assert_null(cfg);
	assert_non_null(strstr(err.msg, "config:1:1: exactly one of"));
	mk_diag_format(&d, &g, buf, sizeof(buf));
	assert_string_equal(buf, "config:3:4: m");
	mk_diags_free(NULL);
	mk_config_free(NULL);
}

/* Names in messages (config paths, model names) are printed through
 * mk_text_escape: control characters and bytes that are not UTF-8 escaped,
 * printable UTF-8 as is, cut at a character boundary with "...". */
static void test_text_escape(void **state)
{
	char buf[64];
	const char *ok = "caf\xc3\xa9/x.txt";

	(void)state;
	assert_true(mk_text_printable(ok, strlen(ok)));
	assert_ptr_equal(mk_text_escape(ok, (size_t)-1, buf, sizeof(buf)), ok);
	assert_string_equal(mk_text_escape("a\033[31mb\a", (size_t)-1, buf, sizeof(buf)), "a\\x1b[31mb\\x07");
	assert_string_equal(mk_text_escape("l\nc\rt\t", (size_t)-1, buf, sizeof(buf)), "l\\nc\\rt\\t");
	assert_string_equal(mk_text_escape("caf\xe9", (size_t)-1, buf, sizeof(buf)), "caf\\xe9");
	/* C1 controls, overlong forms, surrogates, past U+10FFFF, DEL */
	assert_false(mk_text_printable("\xc2\x9b", 2));
	assert_false(mk_text_printable("\xc0\xaf", 2));
	assert_false(mk_text_printable("\xe0\x80\xaf", 3));
	assert_false(mk_text_printable("\xed\xa0\x80", 3));
	assert_false(mk_text_printable("\xf4\x90\x80\x80", 4));
	assert_false(mk_text_printable("\x7f", 1));
	assert_false(mk_text_printable("\xe2\x82", 2));
	assert_true(mk_text_printable("\xe2\x82\xac \xf0\x9f\x98\x80", 8));
	assert_string_equal(mk_text_escape("\xc2\x9bz", (size_t)-1, buf, sizeof(buf)), "\\xc2\\x9bz");
	/* with a length: NULs escaped, no NUL needed after it */
	assert_string_equal(mk_text_escape("a\0b!", 3, buf, sizeof(buf)), "a\\x00b");
	/* cut to fit, never inside an escape or a character */
	char small[8];
	assert_string_equal(mk_text_escape("\033\033\033\033", (size_t)-1, small, sizeof(small)), "\\x1b...");
	assert_string_equal(mk_text_escape("\033", (size_t)-1, small, 5), "\\x1b");
	assert_string_equal(mk_text_escape("\033", (size_t)-1, small, 4), "...");
	assert_string_equal(mk_text_escape("ab\033", (size_t)-1, small, sizeof(small)), "ab\\x1b");
	assert_string_equal(mk_text_escape(NULL, 0, small, sizeof(small)), "(null)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_gradient_slerp),
		cmocka_unit_test(test_task_arithmetic),
		cmocka_unit_test(test_passthrough),
		cmocka_unit_test(test_ties),
		cmocka_unit_test(test_modules),
		cmocka_unit_test(test_all_testdata_have_order),
		cmocka_unit_test(test_errors_top),
		cmocka_unit_test(test_errors_syntax),
		cmocka_unit_test(test_errors_slices),
		cmocka_unit_test(test_errors_modules),
		cmocka_unit_test(test_errors_tokenizer),
		cmocka_unit_test(test_errors_modelref),
		cmocka_unit_test(test_errors_params),
		cmocka_unit_test(test_errors_dtype),
		cmocka_unit_test(test_three_mistakes),
		cmocka_unit_test(test_warnings),
		cmocka_unit_test(test_bare_conditional),
		cmocka_unit_test(test_coercion),
		cmocka_unit_test(test_null_means_absent),
		cmocka_unit_test(test_duplicate_params_and_aliases),
		cmocka_unit_test(test_alias_budget),
		cmocka_unit_test(test_tokenizer_parse),
		cmocka_unit_test(test_gradient_eval),
		cmocka_unit_test(test_conditionals),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_modelref_parse),
		cmocka_unit_test(test_partial_bad_refs),
		cmocka_unit_test(test_modelref_equal_and_map),
		cmocka_unit_test(test_normalize_models),
		cmocka_unit_test(test_normalize_slices),
		cmocka_unit_test(test_model_order),
		cmocka_unit_test(test_unsupported),
		cmocka_unit_test(test_dtype_names),
		cmocka_unit_test(test_diags_null_and_format),
		cmocka_unit_test(test_text_escape),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
