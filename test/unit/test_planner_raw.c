/* test_planner_raw.c - mk_plan_build for state dicts (mk_plan_opts.raw,
 * mk-pytorch): the output's tensors in byte order of the names of the
 * models' files, a base's names not added, parameters at t = 0 with
 * filters on the tensor name, a weight of 0 kept, the missing-tensor
 * rules, and what is refused.  Read through mk_plan_explain. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "planner/planner.h"
#include "io/safetensors.h"

static char dir[] = "/tmp/mk-test-raw-XXXXXX";
static char path[3][256];

/* F32 tensors of 4 elements named as given (NULL-terminated). */
static void write_sd(const char *p, ...)
{
	struct mk_st_out_tensor t[8];
	static const uint64_t shape[1] = { 4 };
	const char *name;
	size_t n = 0, hlen;
	uint8_t *hdr;
	struct mk_err err;
	va_list ap;

	va_start(ap, p);
	while ((name = va_arg(ap, const char *)))
		t[n++] = (struct mk_st_out_tensor){ .name = name, .dtype = MK_DT_F32, .ndim = 1, .shape = shape };
	va_end(ap);
	assert_int_equal(mk_st_header_build(t, n, 8, &hdr, &hlen, NULL, &err), 0);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, hdr, hlen), (ssize_t)hlen);
	assert_int_equal(ftruncate(fd, (off_t)(hlen + n * 16)), 0);
	close(fd);
	free(hdr);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(dir))
		return -1;
	for (int i = 0; i < 3; i++)
		snprintf(path[i], sizeof(path[i]), "%s/%c.safetensors", dir, 'a' + i);
	write_sd(path[0], "z.w", "b.mlp", "a.w", NULL);
	write_sd(path[1], "a.w", "z.w", "b.mlp", NULL);
	write_sd(path[2], "a.w", "only.base", NULL);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < 3; i++)
		unlink(path[i]);
	rmdir(dir);
	return 0;
}

/* Plan `yaml` (%s: the three paths); the explanation, or NULL with the
 * diagnostics joined in *why. */
static char *plan(const char *fmt, enum mk_raw_missing missing, char *why, size_t wn)
{
	char yaml[2048];
	struct mk_plan_opts o = { .label = "t.yml", .raw = true, .raw_missing = missing };
	struct mk_plan *p = NULL;
	struct mk_diags d;
	struct mk_err err = { 0 };
	char *s = NULL;

	snprintf(yaml, sizeof(yaml), fmt, path[0], path[1], path[2]);
	o.text = yaml;
	o.len = strlen(yaml);
	int rc = mk_plan_build(&o, &p, &d, &err);
	why[0] = '\0';
	for (size_t i = 0; i < d.n; i++)
		snprintf(why + strlen(why), wn - strlen(why), "%s|", d.v[i].msg);
	mk_diags_free(&d);
	if (rc)
		return NULL;
	assert_int_equal(mk_plan_explain(p, &s, &err), 0);
	mk_plan_free(p);
	return s;
}

static void test_order_and_params(void **state)
{
	(void)state;
	char why[4096];
	char *s = plan("merge_method: linear\nmodels:\n  - model: %s\n    parameters:\n      weight:\n"
		       "        - filter: mlp\n          value: 0\n        - value: [0.25, 1]\n  - model: %s\n"
		       "parameters: {weight: 0.5}\n", MK_RAW_MISSING_ERROR, why, sizeof(why));
	if (!s)
		fail_msg("%s", why);
	assert_non_null(strstr(s, "3 output tensors; 0 files"));
	/* byte order of the names, whatever the files' order */
	char *a = strstr(s, "\na.w F32"), *b = strstr(s, "\nb.mlp F32"), *z = strstr(s, "\nz.w F32");
	assert_true(a && b && z && a < b && b < z);
	/* a filtered 0 is a weight; a gradient is its first value; the
	 * model without parameters takes the top level's */
	assert_non_null(strstr(b, "b.mlp F32 {\"weight\":0}"));
	assert_non_null(strstr(a, "a.w F32 {\"weight\":0.25}"));
	assert_non_null(strstr(a, "b.safetensors: a.w F32 {\"weight\":0.5}"));
	free(s);
}

static void test_missing(void **state)
{
	(void)state;
	char why[4096];
	/* c lacks two of a's three names; its own 'only.base' is a base's
	 * name, which adds no output tensor */
	const char *cfg = "merge_method: task_arithmetic\nbase_model: %3$s\nmodels:\n  - model: %1$s\n"
			  "    parameters: {weight: 1}\n# (%2$s)\n";
	assert_null(plan(cfg, MK_RAW_MISSING_ERROR, why, sizeof(why)));
	assert_non_null(strstr(why, "c.safetensors' lacks 2 of the 3 tensors (the first 'b.mlp')"));
	char *s = plan(cfg, MK_RAW_MISSING_SKIP, why, sizeof(why));
	assert_non_null(s);
	assert_non_null(strstr(s, "1 output tensors"));
	assert_null(strstr(s, "only.base"));
	assert_non_null(strstr(why, "they are left out"));
	free(s);
	/* union: b.mlp from a alone fails task_arithmetic (no base) */
	assert_null(plan(cfg, MK_RAW_MISSING_MERGE, why, sizeof(why)));
	s = plan("merge_method: linear\nmodels:\n  - model: %1$s\n    parameters: {weight: 1}\n"
		 "  - model: %3$s\n    parameters: {weight: 1}\n# (%2$s)\n", MK_RAW_MISSING_MERGE, why, sizeof(why));
	assert_non_null(s);
	assert_non_null(strstr(s, "4 output tensors"));
	free(s);
}

static void test_refused(void **state)
{
	(void)state;
	char why[4096];
	assert_null(plan("merge_method: passthrough\nslices:\n  - sources:\n      - model: %s\n        layer_range: [0, 1]\n",
			 MK_RAW_MISSING_ERROR, why, sizeof(why)));
	assert_non_null(strstr(why, "slices: is not supported by mk-pytorch"));
	assert_null(plan("merge_method: linear\nmodels:\n  - model: /nonexistent/x.safetensors\n    parameters: {weight: 1}\n#%s%s%s\n",
			 MK_RAW_MISSING_ERROR, why, sizeof(why)));
	assert_non_null(strstr(why, "No such file or directory; mk-pytorch merges state-dict files"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_and_params),
		cmocka_unit_test(test_missing),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
