/* test_hub.c - the Hub client's pure parts: repo ids and revisions, where
 * the cache is (the order huggingface_hub uses), HF_HUB_OFFLINE, and the
 * listing parser (files, sizes, LFS ids and git blob ids; the names and
 * ids refused with why).  Transfers are tested against a local mock Hub
 * in test/cli/hub.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "hub/hub.h"

#define C40 "0123456789abcdef0123456789abcdef01234567"
#define S64 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static void test_names(void **state)
{
	(void)state;
	assert_true(mk_hub_repo_id_ok("org/name"));
	assert_true(mk_hub_repo_id_ok("gpt2"));
	assert_true(mk_hub_repo_id_ok("Org-1/na.me_2"));
	assert_false(mk_hub_repo_id_ok("a/b/c"));
	assert_false(mk_hub_repo_id_ok("../x"));
	assert_false(mk_hub_repo_id_ok("org/.."));
	assert_false(mk_hub_repo_id_ok("org/"));
	assert_false(mk_hub_repo_id_ok("org/na me"));
	assert_true(mk_path_stays_inside("main"));
	assert_true(mk_path_stays_inside("refs/pr/1"));
	assert_true(mk_path_stays_inside(C40));
	assert_false(mk_path_stays_inside(""));
	assert_false(mk_path_stays_inside("../main"));
	assert_false(mk_path_stays_inside("a/../../b"));
	assert_false(mk_path_stays_inside("/abs"));
	assert_false(mk_path_stays_inside("trailing/"));
}

static void cache_is(const char *want)
{
	struct mk_err err = { 0 };
	char *c = mk_hub_cache_dir(&err);

	assert_non_null(c);
	assert_string_equal(c, want);
	free(c);
}

static void test_cache_dir(void **state)
{
	(void)state;
	setenv("HOME", "/h", 1);
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HF_HOME");
	unsetenv("HF_HUB_CACHE");
	cache_is("/h/.cache/huggingface/hub");
	setenv("XDG_CACHE_HOME", "/x", 1);
	cache_is("/x/huggingface/hub");
	setenv("HF_HOME", "/hf", 1);
	cache_is("/hf/hub");
	setenv("HF_HUB_CACHE", "/c", 1);
	cache_is("/c");
	unsetenv("HF_HUB_CACHE");
	unsetenv("HF_HOME");
	unsetenv("XDG_CACHE_HOME");
}

static void test_offline(void **state)
{
	static const char *const yes[] = { "1", "true", "TRUE", "yes", "on" }, *const no[] = { "0", "", "false", "no" };

	(void)state;
	for (size_t i = 0; i < 5; i++) {
		setenv("HF_HUB_OFFLINE", yes[i], 1);
		assert_true(mk_hub_offline());
	}
	for (size_t i = 0; i < 4; i++) {
		setenv("HF_HUB_OFFLINE", no[i], 1);
		assert_false(mk_hub_offline());
	}
	unsetenv("HF_HUB_OFFLINE");
	assert_false(mk_hub_offline());
}

static void test_listing(void **state)
{
	static const char text[] =
		"{\"id\": \"org/name\", \"sha\": \"" C40 "\", \"siblings\": ["
		"{\"rfilename\": \"config.json\", \"size\": 341, \"blobId\": \"1F480909F1F2759774BF47A1DC94506A4E93BF95\"},"
		"{\"rfilename\": \"model.safetensors\", \"size\": 7, \"blobId\": \"" C40 "\","
		" \"lfs\": {\"sha256\": \"" S64 "\", \"size\": 161144, \"pointerSize\": 134}},"
		"{\"rfilename\": \"a/b.txt\", \"size\": 0, \"blobId\": \"e69de29bb2d1d6434b8b29ae775ad8c2e48c5391\"}]}";
	struct mk_hub_repo *r = NULL;
	struct mk_err err = { 0 };

	(void)state;
	setenv("HF_HUB_CACHE", "/cache", 1);
	if (mk_hub_listing_parse("org/name", text, sizeof(text) - 1, &r, &err))
		fail_msg("%s", err.msg);
	assert_string_equal(r->commit, C40);
	assert_string_equal(r->dir, "/cache/models--org--name");
	assert_string_equal(r->snapshot, "/cache/models--org--name/snapshots/" C40);
	assert_int_equal(r->nfiles, 3);
	const struct mk_hub_file *f = mk_hub_repo_file(r, "config.json");
	assert_non_null(f);
	assert_false(f->lfs);
	assert_int_equal(f->size, 341);
	assert_string_equal(f->etag, "1f480909f1f2759774bf47a1dc94506a4e93bf95");   /* lower-cased */
	f = mk_hub_repo_file(r, "model.safetensors");
	assert_true(f->lfs);
	assert_int_equal(f->size, 161144);        /* the LFS size, not the pointer's */
	assert_string_equal(f->etag, S64);
	assert_non_null(mk_hub_repo_file(r, "a/b.txt"));
	assert_null(mk_hub_repo_file(r, "b.txt"));
	mk_hub_repo_free(r);
	unsetenv("HF_HUB_CACHE");
}

static void listing_fails(const char *text, const char *sub)
{
	struct mk_hub_repo *r = (struct mk_hub_repo *)1;
	struct mk_err err = { 0 };

	assert_true(mk_hub_listing_parse("org/name", text, strlen(text), &r, &err) < 0);
	assert_null(r);
	if (!strstr(err.msg, sub))
		fail_msg("message \"%s\" lacks \"%s\"", err.msg, sub);
}

static void test_listing_refused(void **state)
{
	(void)state;
	listing_fails("[]", "not a JSON object");
	listing_fails("{\"siblings\": []}", "no commit");
	listing_fails("{\"sha\": \"main\", \"siblings\": []}", "no commit");
	listing_fails("{\"sha\": \"" C40 "\"}", "no \"siblings\"");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"../x\", \"size\": 1, \"blobId\": \"" C40 "\"}]}",
		      "a bad name: ../x");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"/etc/x\", \"size\": 1, \"blobId\": \"" C40 "\"}]}",
		      "a bad name");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"a\", \"blobId\": \"" C40 "\"}]}",
		      "gives a no size");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"a\", \"size\": 1, \"blobId\": \"" C40 "\"}, "
		      "{\"rfilename\": \"a\", \"size\": 2, \"blobId\": \"" C40 "\"}]}", "has a twice");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"a\", \"size\": 1}]}", "no blob id");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"a\", \"size\": 1, \"blobId\": \"xyz\"}]}",
		      "no blob id");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"a\", \"size\": 1, \"blobId\": \"" C40 "\", "
		      "\"lfs\": {\"sha256\": \"" C40 "\", \"size\": 1}}]}", "no sha256");
	listing_fails("{\"sha\": \"" C40 "\", \"siblings\": [{\"rfilename\": \"a\", \"size\": -1, \"blobId\": \"" C40 "\"}]}",
		      "no size");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_cache_dir),
		cmocka_unit_test(test_offline),
		cmocka_unit_test(test_listing),
		cmocka_unit_test(test_listing_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
