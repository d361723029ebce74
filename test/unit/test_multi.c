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
#include "fetch/fetch.h"
#include "stream/manifest.h"
#include "multi/multi.h"
#include "run/steps.h"
#include "run/multi_steps.h"
#include "stream/job.h"

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

/* Which links may stream, from the recipe alone: a named merge read by
 * one merge, by its name alone, neither skipped; the chain's size. */
static void test_stream_plan(void **state)
{
	(void)state;
	static const char chain[] =
		"name: s1\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 1}\n---\n"
		"name: s2\nmerge_method: linear\nmodels:\n  - model: s1\n    parameters: {weight: 1}\n---\n"
		"merge_method: linear\nmodels:\n  - model: s2\n    parameters: {weight: 1}\n";
	struct mk_multi *m = parse_ok(chain, "O");
	bool cand[3], done[3] = { false, false, false };
	size_t user[3], group[3];

	mk_multi_stream_plan(m, true, NULL, cand, user, group);
	assert_true(cand[0] && cand[1] && !cand[2]);
	assert_int_equal(user[0], 1);
	assert_int_equal(user[1], 2);
	assert_true(group[0] == 3 && group[1] == 3 && group[2] == 3);
	/* lazy: a finished s2 is skipped, so s1 has no reader to stream to
	 * and s2 none to be streamed from */
	done[1] = true;
	mk_multi_stream_plan(m, true, done, cand, user, group);
	assert_true(!cand[0] && !cand[1] && !cand[2]);
	assert_true(group[0] == 1 && group[2] == 1);
	/* without lazy nothing is skipped */
	mk_multi_stream_plan(m, false, done, cand, user, group);
	assert_true(cand[0] && cand[1]);
	/* streaming and lazy: with the final merge there, s1 and s2 are not
	 * needed; with s2 there, s1 is not; with nothing there, all are */
	bool un[3];
	bool fin[3] = { false, false, true };
	mk_multi_unneeded(m, fin, un);
	assert_true(un[0] && un[1] && !un[2]);
	bool mid[3] = { false, true, false };
	mk_multi_unneeded(m, mid, un);
	assert_true(un[0] && !un[1] && !un[2]);
	bool none[3] = { false, false, false };
	mk_multi_unneeded(m, none, un);
	assert_true(!un[0] && !un[1] && !un[2]);
	/* a finished s1, s2 not: s1 is read from its output, s2 streams */
	done[1] = false;
	done[0] = true;
	mk_multi_stream_plan(m, true, done, cand, user, group);
	assert_true(!cand[0] && cand[1]);
	assert_true(group[1] == 2 && group[2] == 2 && group[0] == 1);
	mk_multi_free(m);

	/* s1 read by two merges; s1 read with a revision */
	static const char two[] =
		"name: s1\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 1}\n---\n"
		"name: s2\nmerge_method: linear\nmodels:\n  - model: s1\n    parameters: {weight: 1}\n---\n"
		"merge_method: linear\nmodels:\n  - model: s2\n    parameters: {weight: 1}\n  - model: s1\n    parameters: {weight: 1}\n";
	m = parse_ok(two, "O");
	assert_int_equal(m->steps[0].nusers, 2);
	mk_multi_stream_plan(m, false, NULL, cand, user, group);
	assert_true(!cand[0] && cand[1] && !cand[2]);
	assert_true(group[1] == 2 && group[2] == 2);
	mk_multi_free(m);
	static const char rev[] =
		"name: s1\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 1}\n---\n"
		"merge_method: linear\nmodels:\n  - model: s1@main\n    parameters: {weight: 1}\n";
	m = parse_ok(rev, "O");
	assert_false(m->steps[0].plain_refs);
	mk_multi_stream_plan(m, false, NULL, cand, user, group);
	assert_false(cand[0]);
	mk_multi_free(m);
	/* a named merge nobody reads is written */
	static const char alone[] =
		"name: s1\nmerge_method: linear\nmodels:\n  - model: a\n    parameters: {weight: 1}\n";
	m = parse_ok(alone, NULL);
	mk_multi_stream_plan(m, false, NULL, cand, user, group);
	assert_false(cand[0]);
	mk_multi_free(m);
}

/* ---- mk_fetch_feed_check: what a plan can take from a stream ---- */

static struct mk_plan_job *job1(uint32_t id, size_t model, const char *tensor, unsigned sends)
{
	struct mk_plan_job *j = mk_plan_job_new(1);

	assert_non_null(j);
	j->id = id;
	j->sends = sends;
	j->passes = sends - 1;
	j->base = -1;
	j->inputs[0].model = model;
	j->inputs[0].tensor = strdup(tensor);
	j->inputs[0].desc = (struct mk_tensor_desc){ .dtype = MK_DT_F16, .ndim = 2, .shape = { 4, 8 } };
	j->inputs[0].load_dtype = MK_DT_F16;
	j->inputs[0].nelem = 32;
	return j;
}

static void feed_check(const struct mk_manifest *h, const size_t *rank, struct mk_plan_job **jobs, size_t n,
		       const char *why)
{
	struct mk_err err = { 0 };
	int rc = mk_fetch_feed_check(h, rank, 1, jobs, n, &err);

	if (!why) {
		if (rc)
			fail_msg("refused: %s", err.msg);
		return;
	}
	assert_int_equal(rc, -MK_EINVAL);
	if (!strstr(err.msg, why))
		fail_msg("'%s' lacks '%s'", err.msg, why);
}

static void test_feed_check(void **state)
{
	(void)state;
	struct mk_manifest *h = mk_manifest_new("tensors", "test");
	struct mk_err err = { 0 };
	const uint64_t shape[2] = { 4, 8 };
	/* the stream writes t2 first, then t0, then t1 (its plan's jobs) */
	const size_t rank[3] = { 1, 2, 0 };
	struct mk_plan_job *j[4];

	assert_non_null(h);
	for (int k = 0; k < 3; k++) {
		char name[16];
		snprintf(name, sizeof(name), "t%d", k);
		assert_int_equal(mk_manifest_add_tensor(h, name, MK_DT_F16, 2, shape, &err), 0);
	}
	/* in the stream's order, model 0's inputs not counted */
	j[0] = job1(0, 1, "t2", 1);
	j[1] = job1(1, 0, "t9", 2);
	j[2] = job1(2, 1, "t0", 1);
	j[3] = job1(3, 1, "t1", 1);
	feed_check(h, rank, j, 4, NULL);
	/* t1 not read: fine; the manifest's order is not the stream's */
	feed_check(h, rank, j, 3, NULL);
	feed_check(h, NULL, j, 4, NULL);
	/* t0 before t2: out of the stream's order (checked only with rank) */
	struct mk_plan_job *sw[2] = { j[2], j[0] };
	feed_check(h, rank, sw, 2, "before a tensor the merge making it writes earlier");
	feed_check(h, NULL, sw, 2, NULL);
	/* read twice */
	struct mk_plan_job *tw[2] = { j[0], j[0] };
	feed_check(h, NULL, tw, 2, "read twice");
	/* a job sending its inputs again (statistics passes not held) */
	j[2]->sends = 2;
	feed_check(h, rank, j, 4, "more than once");
	j[2]->sends = 1;
	/* not a tensor of the stream; another dtype */
	free(j[3]->inputs[0].tensor);
	j[3]->inputs[0].tensor = strdup("t7");
	feed_check(h, rank, j, 4, "no such output tensor");
	free(j[3]->inputs[0].tensor);
	j[3]->inputs[0].tensor = strdup("t1");
	j[3]->inputs[0].desc.dtype = MK_DT_BF16;
	feed_check(h, rank, j, 4, "dtype or shape");
	j[3]->inputs[0].desc.dtype = MK_DT_F16;
	/* two tensors of the stream in one job */
	struct mk_plan_job *two = mk_plan_job_new(2);
	assert_non_null(two);
	two->sends = 1;
	two->base = -1;
	for (int i = 0; i < 2; i++) {
		two->inputs[i] = j[2 + i]->inputs[0];
		two->inputs[i].tensor = strdup(i ? "t1" : "t0");
	}
	feed_check(h, rank, &two, 1, "two of its tensors at once");
	mk_plan_job_free(two);
	/* a vocabulary job: rows in their stored order (some left out)
	 * stream; rows out of it do not */
	j[0]->vocab = calloc(1, sizeof(*j[0]->vocab));
	assert_non_null(j[0]->vocab);
	j[0]->vocab->rows = 5;
	j[0]->vocab->tokens = 5;
	struct mk_plan_input *in = &j[0]->inputs[0];
	in->runs = calloc(2, sizeof(*in->runs));
	assert_non_null(in->runs);
	in->nruns = 2;
	in->runs[0] = (struct mk_vocab_run){ 0, 1, 2 };
	in->runs[1] = (struct mk_vocab_run){ 2, 3, 1 };
	feed_check(h, rank, j, 4, NULL);
	in->runs[1] = (struct mk_vocab_run){ 2, 0, 1 };
	feed_check(h, rank, j, 4, "in another order");
	for (int k = 0; k < 4; k++)
		mk_plan_job_free(j[k]);
	mk_manifest_free(h);
}

/* A streamed step writes no OUT, so there is nothing to resume: refused,
 * naming the step's OUT, before anything is planned. */
static void test_streamed_resume(void **st)
{
	struct mk_run_opts o = { .out_dir = "inter/s1", .resume = true };
	struct mk_run_step *s = (struct mk_run_step *)&o;
	struct mk_diags d = { 0 };
	struct mk_err err = { 0 };

	(void)st;
	assert_int_equal(mk_run_step_plan(&o, true, NULL, NULL, 0, &s, &d, &err), -MK_EINVAL);
	assert_null(s);
	assert_non_null(strstr(err.msg, "inter/s1: a merge streamed into another cannot be resumed"));
	mk_diags_free(&d);
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
		cmocka_unit_test(test_streamed_resume),
		cmocka_unit_test(test_stream_plan),
		cmocka_unit_test(test_feed_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
