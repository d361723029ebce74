/* test_multi.c - mk-multi's recipes: documents and names, the rewritten
 * references, the order of the steps, and every refusal with its place. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "mk/multi.h"

static struct mk_multi *parse_ok(const char *text, const char *out)
{
	struct mk_multi *m = NULL;
	struct mk_diags d;
	struct mk_err err = { 0 };

	if (mk_multi_parse(text, strlen(text), "r.yml", "I", out, &m, &d, &err)) {
		for (size_t i = 0; i < d.n; i++)
			print_error("%u:%u: %s\n", d.v[i].line, d.v[i].col, d.v[i].msg);
		fail_msg("%s", err.msg);
	}
	assert_int_equal(d.nerrors, 0);
	mk_diags_free(&d);
	return m;
}

/* Parsing fails with a diagnostic holding `sub` at line:col (0: any). */
static void parse_fail(const char *text, const char *out, const char *sub, unsigned line, unsigned col)
{
	struct mk_multi *m = (struct mk_multi *)1;
	struct mk_diags d;
	struct mk_err err = { 0 };
	bool found = false;

	assert_int_equal(mk_multi_parse(text, strlen(text), "r.yml", "I", out, &m, &d, &err), -MK_EINVAL);
	assert_null(m);
	for (size_t i = 0; i < d.n; i++)
		if (d.v[i].level == MK_DIAG_ERROR && strstr(d.v[i].msg, sub) && (!line || d.v[i].line == line) &&
		    (!col || d.v[i].col == col))
			found = true;
	if (!found) {
		for (size_t i = 0; i < d.n; i++)
			print_error("%u:%u: %s\n", d.v[i].line, d.v[i].col, d.v[i].msg);
		fail_msg("no error '%s' at %u:%u", sub, line, col);
	}
	mk_diags_free(&d);
}

#define LIN(M) "merge_method: linear\nmodels:\n  - model: " M "\n    parameters: {weight: 1}\n"

/* The steps run after what they read, whatever the documents' order;
 * ties in file order. */
static void test_order(void **state)
{
	(void)state;
	struct mk_multi *m = parse_ok(LIN("b") "---\n"
				      "name: b\n" LIN("a") "---\n"
				      "name: a\n" LIN("x") "---\n"
				      "name: c\n" LIN("y"), "OUT");
	assert_int_equal(m->nsteps, 4);
	assert_string_equal(m->steps[0].name, "a");
	assert_string_equal(m->steps[1].name, "b");
	assert_null(m->steps[2].name);
	assert_string_equal(m->steps[2].out_dir, "OUT");
	assert_string_equal(m->steps[3].name, "c");
	assert_string_equal(m->steps[0].out_dir, "I/a");
	/* b reads a; the final reads b; a and c read nothing */
	assert_int_equal(m->steps[1].ndeps, 1);
	assert_int_equal(m->steps[1].deps[0], 0);
	assert_int_equal(m->steps[2].ndeps, 1);
	assert_int_equal(m->steps[2].deps[0], 1);
	assert_int_equal(m->steps[0].ndeps, 0);
	assert_int_equal(m->steps[0].nusers, 1);
	assert_int_equal(m->steps[3].nusers, 0);
	assert_string_equal(m->steps[1].label, "r.yml[b]");
	assert_string_equal(m->steps[2].label, "r.yml[final]");
	mk_multi_free(m);
}

/* The text a step plans: its document alone, the name out, references
 * to merges rewritten (revision and adapter kept), other strings not. */
static void test_rewrite(void **state)
{
	(void)state;
	struct mk_multi *m = parse_ok("name: a\n" LIN("x") "---\n"
				      "# b reads a\n"
				      "merge_method: task_arithmetic\n"
				      "name: b   # a comment stays\n"
				      "base_model: a@v1\n"
				      "models:\n"
				      "  - model: 'a+lora/ad'\n"
				      "    parameters:\n"
				      "      weight: [{filter: a, value: 1}]\n"
				      "  - model: x\n"
				      "    parameters: {weight: 1}\n"
				      "...\n", NULL);
	assert_int_equal(m->nsteps, 2);
	assert_string_equal(m->steps[0].text, "merge_method: linear\nmodels:\n  - model: x\n    parameters: {weight: 1}\n");
	assert_string_equal(m->steps[1].text,
			    "merge_method: task_arithmetic\n"
			    "   # a comment stays\n"
			    "base_model: \"I/a@v1\"\n"
			    "models:\n"
			    "  - model: \"I/a+lora/ad\"\n"
			    "    parameters:\n"
			    "      weight: [{filter: a, value: 1}]\n"
			    "  - model: x\n"
			    "    parameters: {weight: 1}\n");
	assert_int_equal(m->steps[1].first_line, 8);
	mk_multi_free(m);
	/* a flow mapping: the pair and its comma */
	m = parse_ok("{merge_method: passthrough, name: z, models: [{model: q}]}\n", NULL);
	assert_string_equal(m->steps[0].text, "{merge_method: passthrough,  models: [{model: q}]}\n");
	assert_string_equal(m->steps[0].name, "z");
	mk_multi_free(m);
}

static void test_cycles(void **state)
{
	(void)state;
	parse_fail("name: a\n" LIN("b") "---\nname: b\n" LIN("c") "---\nname: c\n" LIN("a"), NULL,
		   "merge 'a' depends on itself: 'a' -> 'b' -> 'c' -> 'a'", 1, 1);
	parse_fail("name: s\n" LIN("s"), NULL, "merge 's' depends on itself: 's' -> 's'", 1, 1);
}

static void test_names(void **state)
{
	(void)state;
	parse_fail("name: a\n" LIN("x") "---\nname: a\n" LIN("y"), NULL, "merge name 'a' is used twice (first at line 1)",
		   7, 1);
	parse_fail(LIN("x") "---\n" LIN("y"), "OUT", "a second document without a name (line 1 has none either)", 6, 1);
	parse_fail(LIN("x"), NULL, "a merge without a name goes to OUT: give --out-path", 1, 1);
	parse_fail("name: a/b\n" LIN("x"), NULL, "merge name 'a/b' is not one file name", 1, 1);
	parse_fail("name: ..\n" LIN("x"), NULL, "is not one file name", 1, 1);
	parse_fail("name: [a]\n" LIN("x"), NULL, "a merge's name is a string", 1, 7);
	parse_fail("name: a\nname: b\n" LIN("x"), NULL, "'name' given twice", 2, 1);
	parse_fail("- a\n- b\n", NULL, "a document is a list", 1, 1);
	parse_fail("", NULL, "the recipe has no merge configuration", 1, 1);
	/* empty documents are skipped */
	struct mk_multi *m = parse_ok("---\n---\nname: a\n" LIN("x") "---\n", NULL);
	assert_int_equal(m->nsteps, 1);
	mk_multi_free(m);
}

/* A document's own mistakes at their lines in the file. */
static void test_config_errors(void **state)
{
	(void)state;
	parse_fail("name: a\n" LIN("x") "---\nname: b\nmerge_method: linear\nmodels:\n  - model: a\ndtype: float99\n", NULL,
		   "float99", 11, 8);
	parse_fail("name: a\n" LIN("x") "---\nname: b\n  bad: [\n", NULL, "YAML syntax", 0, 0);
}

static void test_done(void **state)
{
	(void)state;
	char dir[] = "/tmp/mk-test-multi-XXXXXX", p[256];
	assert_non_null(mkdtemp(dir));
	assert_false(mk_multi_done(dir));
	snprintf(p, sizeof(p), "%s/config.json", dir);
	fclose(fopen(p, "w"));
	assert_false(mk_multi_done(dir));
	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
	fclose(fopen(p, "w"));
	assert_true(mk_multi_done(dir));
	unlink(p);
	snprintf(p, sizeof(p), "%s/config.json", dir);
	unlink(p);
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_rewrite),
		cmocka_unit_test(test_cycles),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_config_errors),
		cmocka_unit_test(test_done),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
