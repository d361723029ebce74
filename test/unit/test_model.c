/* test_model.c - model references (local and a fake Hugging Face cache)
 * and opening single-file and sharded checkpoints, with every sharding
 * error. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io/model.h"

static char tmp[] = "/tmp/mk-test-model-XXXXXX";

static void expect_msg(const struct mk_err *err, const char *sub)
{
	if (!strstr(err->msg, sub))
		fail_msg("message \"%s\" lacks \"%s\"", err->msg, sub);
}

/* tmp-relative path (static buffer rotation: 4 at a time) */
static const char *P(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static const char *P(const char *fmt, ...)
{
	static char buf[4][1024];
	static int k;
	char rel[900];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmp, rel);
	return buf[k];
}

static void mkdirs(const char *path)
{
	char b[1024];

	snprintf(b, sizeof(b), "%s", path);
	for (char *p = b + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			mkdir(b, 0700);
			*p = '/';
		}
	mkdir(b, 0700);
}

static void write_bytes(const char *path, const char *s, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, s, n), (ssize_t)n);
	close(fd);
}

static void write_text(const char *path, const char *s)
{
	write_bytes(path, s, strlen(s));
}

/* Write a safetensors file holding U8 tensors of the given sizes (names
 * and sizes alternate, NULL-terminated), built by mk_st_header_build. */
static void write_st(const char *path, ...)
{
	struct mk_st_out_tensor t[16];
	uint64_t shapes[16];
	size_t n = 0, hlen;
	uint64_t total = 0;
	uint8_t *hdr;
	struct mk_err err;
	const char *name;
	va_list ap;
	int fd;

	va_start(ap, path);
	while ((name = va_arg(ap, const char *))) {
		shapes[n] = (uint64_t)va_arg(ap, int);
		t[n] = (struct mk_st_out_tensor){ .name = name, .dtype = MK_DT_U8,
						  .ndim = 1, .shape = &shapes[n] };
		total += shapes[n];
		n++;
	}
	va_end(ap);
	assert_int_equal(mk_st_header_build(t, n, 8, &hdr, &hlen, NULL, &err), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, hdr, hlen), (ssize_t)hlen);
	assert_int_equal(ftruncate(fd, (off_t)(hlen + total)), 0);
	close(fd);
	free(hdr);
}

#define S1 "model-00001-of-00002.safetensors"
#define S2 "model-00002-of-00002.safetensors"

/* A 2-shard model in tmp/<dir>: S1 = {b:3, a:2}, S2 = {c:4, lm_head:1};
 * the index as given. */
static void two_shards(const char *dir, const char *index)
{
	mkdirs(P("%s", dir));
	write_st(P("%s/" S1, dir), "b", 3, "a", 2, NULL);
	write_st(P("%s/" S2, dir), "c", 4, "lm_head", 1, NULL);
	write_text(P("%s/model.safetensors.index.json", dir), index);
}

static const char good_index[] =
	"{\"metadata\":{\"total_size\":10},\"weight_map\":{"
	"\"lm_head\":\"" S2 "\",\"a\":\"" S1 "\",\"b\":\"" S1 "\","
	"\"c\":\"" S2 "\"}}";

static int setup(void **state)
{
	if (!mkdtemp(tmp))
		return -1;
	/* fake HF cache: refs/main -> abc123 (single file), refs/v1 ->
	 * def456 (sharded), snapshot fff000 with no ref */
	mkdirs(P("hub/models--org--name/refs"));
	mkdirs(P("hub/models--org--name/snapshots/abc123"));
	mkdirs(P("hub/models--org--name/snapshots/fff000"));
	write_text(P("hub/models--org--name/refs/main"), "abc123");
	write_text(P("hub/models--org--name/refs/v1"), "def456\n");
	write_st(P("hub/models--org--name/snapshots/abc123/model.safetensors"),
		 "x", 8, NULL);
	two_shards("hub/models--org--name/snapshots/def456", good_index);
	mkdirs(P("hub/models--gpt2/snapshots/111"));
	mkdirs(P("hub/models--gpt2/refs"));
	write_text(P("hub/models--gpt2/refs/main"), "111");
	mkdirs(P("hub/models--org--dangling/refs"));
	write_text(P("hub/models--org--dangling/refs/main"), "999");
	mkdirs(P("home/.cache/huggingface"));
	if (symlink(P("hub"), P("home/.cache/huggingface/hub")) < 0)
		return -1;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	return remove(path);
}

static int teardown(void **state)
{
	return nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int use_hub_cache(void **state)
{
	setenv("HF_HUB_OFFLINE", "1", 1);  /* nothing here asks the real Hub */
	setenv("HF_HUB_CACHE", P("hub"), 1);
	unsetenv("HF_HOME");
	unsetenv("XDG_CACHE_HOME");
	return 0;
}

static void resolve_ok(const char *ref, const char *want)
{
	struct mk_err err = { 0 };
	char *dir = NULL;
	int rc = mk_model_resolve(ref, &dir, &err);

	if (rc)
		fail_msg("%s: %s", ref, err.msg);
	assert_string_equal(dir, want);
	free(dir);
}

static void resolve_fail(const char *ref, int code, const char *sub)
{
	struct mk_err err = { 0 };
	char *dir = (char *)1;
	int rc = mk_model_resolve(ref, &dir, &err);

	if (rc != -code)
		fail_msg("%s: rc %d, want %d (%s)", ref, rc, -code, err.msg);
	assert_null(dir);
	expect_msg(&err, sub);
}

static void test_resolve_local(void **state)
{
	resolve_ok(tmp, tmp);
	resolve_ok(P("hub"), P("hub"));
	/* a local path with @rev: the revision is ignored (mergekit) */
	char ref[1100];
	snprintf(ref, sizeof(ref), "%s@v2", P("hub"));
	resolve_ok(ref, P("hub"));
}

static void test_resolve_refs_main(void **state)
{
	resolve_ok("org/name", P("hub/models--org--name/snapshots/abc123"));
	resolve_ok("gpt2", P("hub/models--gpt2/snapshots/111"));
}

static void test_resolve_rev_as_ref(void **state)
{
	/* refs/v1 ends in a newline: trimmed */
	resolve_ok("org/name@v1", P("hub/models--org--name/snapshots/def456"));
	resolve_ok("org/name@main", P("hub/models--org--name/snapshots/abc123"));
}

static void test_resolve_rev_as_commit(void **state)
{
	resolve_ok("org/name@fff000", P("hub/models--org--name/snapshots/fff000"));
	resolve_ok("org/name@abc123", P("hub/models--org--name/snapshots/abc123"));
}

static void test_resolve_missing(void **state)
{
	char want[2048];

	snprintf(want, sizeof(want), "model 'org/missing': not a local directory "
		 "and not in the Hugging Face cache (%s)", P("hub/models--org--missing"));
	resolve_fail("org/missing", MK_ENOENT, want);
	resolve_fail("org/name@nope", MK_ENOENT, "revision nope");
	resolve_fail("org/dangling", MK_ENOENT, "points at snapshot 999, which "
		     "is missing");
	resolve_fail("./no/such/dir", MK_ENOENT, "not a Hugging Face repo id");
	resolve_fail("a/b/c", MK_ENOENT, "not a Hugging Face repo id");
	resolve_fail("org/name@../../x", MK_EINVAL, "not a valid revision");
	resolve_fail("org/name@", MK_EINVAL, "not a valid revision");
	resolve_fail("org/name@a@b", MK_EINVAL, "more than one '@'");
	resolve_fail("", MK_EINVAL, "empty");
}

static void test_resolve_cache_env(void **state)
{
	unsetenv("HF_HUB_CACHE");
	setenv("HF_HOME", tmp, 1);         /* $HF_HOME/hub */
	resolve_ok("org/name", P("hub/models--org--name/snapshots/abc123"));
	unsetenv("HF_HOME");
	setenv("XDG_CACHE_HOME", P("home/.cache"), 1);
	resolve_ok("org/name", P("home/.cache/huggingface/hub/models--org--name/"
				 "snapshots/abc123"));
	unsetenv("XDG_CACHE_HOME");
	char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
	setenv("HOME", P("home"), 1);
	resolve_ok("org/name", P("home/.cache/huggingface/hub/models--org--name/"
				 "snapshots/abc123"));
	setenv("HOME", P("nohome"), 1);
	resolve_fail("org/name", MK_ENOENT, P("nohome/.cache/huggingface/hub/"
					      "models--org--name"));
	if (home)
		setenv("HOME", home, 1);
	free(home);
}

/* ---- opening ---- */

static void test_open_sharded(void **state)
{
	struct mk_model *m = NULL;
	struct mk_err err = { 0 };
	static const char *order[] = { "a", "b", "c", "lm_head" };
	static const size_t shard[] = { 0, 0, 1, 1 };

	if (mk_model_open("org/name@v1", &m, &err))
		fail_msg("%s", err.msg);
	assert_string_equal(m->ref, "org/name@v1");
	assert_string_equal(m->dir, P("hub/models--org--name/snapshots/def456"));
	assert_int_equal(m->nshards, 2);
	assert_string_equal(m->shard_names[0], S1);
	assert_string_equal(m->shard_names[1], S2);
	assert_string_equal(m->shards[1]->path,
			    P("hub/models--org--name/snapshots/def456/" S2));
	assert_int_equal(m->ntensors, 4);
	/* by shard, then offset (the writer sorts each shard by name) */
	for (size_t i = 0; i < 4; i++) {
		const struct mk_model_tensor *t = mk_model_find(m, order[i]);
		assert_string_equal(m->tensors[i].t->name, order[i]);
		assert_int_equal(m->tensors[i].shard, shard[i]);
		assert_ptr_equal(t, &m->tensors[i]);
		assert_ptr_equal(t->t, mk_st_find(m->shards[shard[i]], order[i]));
	}
	assert_int_equal(m->tensors[1].t->begin, 2);
	assert_int_equal(m->tensors[3].t->begin, 4);
	assert_null(mk_model_find(m, "d"));
	assert_null(mk_model_find(m, ""));
	mk_model_free(m);
}

static void test_open_single(void **state)
{
	struct mk_model *m = NULL;
	struct mk_err err = { 0 };

	if (mk_model_open("org/name", &m, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(m->nshards, 1);
	assert_string_equal(m->shard_names[0], "model.safetensors");
	assert_int_equal(m->ntensors, 1);
	assert_string_equal(m->tensors[0].t->name, "x");
	assert_int_equal(mk_model_find(m, "x")->t->end, 8);
	mk_model_free(m);

	/* a local directory works the same */
	if (mk_model_open(P("hub/models--org--name/snapshots/abc123"), &m, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(m->ntensors, 1);
	mk_model_free(m);
}

static void open_fail(const char *ref, int code, const char *sub,
		      const char *sub2)
{
	struct mk_model *m = (struct mk_model *)1;
	struct mk_err err = { 0 };
	int rc = mk_model_open(ref, &m, &err);

	if (rc != -code)
		fail_msg("%s: rc %d, want %d (%s)", ref, rc, -code, err.msg);
	assert_null(m);
	expect_msg(&err, sub);
	if (sub2)
		expect_msg(&err, sub2);
}

static void test_open_index_names_missing_tensor(void **state)
{
	two_shards("m1", "{\"weight_map\":{\"lm_head\":\"" S2 "\",\"a\":\"" S1
		   "\",\"b\":\"" S1 "\",\"c\":\"" S2 "\",\"d\":\"" S2 "\"}}");
	open_fail(P("m1"), MK_EFORMAT, "maps tensor 'd' to " S2
		  ", which does not contain it", NULL);
	/* in the index under the wrong shard */
	two_shards("m2", "{\"weight_map\":{\"lm_head\":\"" S1 "\",\"a\":\"" S1
		   "\",\"b\":\"" S1 "\",\"c\":\"" S2 "\"}}");
	open_fail(P("m2"), MK_EFORMAT, "maps tensor 'lm_head' to " S1, NULL);
}

static void test_open_tensor_in_two_shards(void **state)
{
	two_shards("m3", good_index);
	write_st(P("m3/" S2), "c", 4, "lm_head", 1, "a", 2, NULL);
	open_fail(P("m3"), MK_EMISMATCH, "tensor 'a' is in two shards, " S1
		  " and " S2, NULL);
}

static void test_open_tensor_not_in_index(void **state)
{
	two_shards("m4", good_index);
	write_st(P("m4/" S2), "c", 4, "lm_head", 1, "extra", 2, NULL);
	open_fail(P("m4"), MK_EFORMAT, S2 " holds tensor 'extra', which "
		  "model.safetensors.index.json does not list", NULL);
}

static void test_open_missing_shard(void **state)
{
	two_shards("m5", good_index);
	unlink(P("m5/" S2));
	open_fail(P("m5"), MK_ENOENT, P("m5/" S2), "No such file");
}

static void test_open_bad_shard_header(void **state)
{
	two_shards("m6", good_index);
	write_bytes(P("m6/" S1), "\x02\0\0\0\0\0\0\0{}x", 11);
	open_fail(P("m6"), MK_EFORMAT, P("m6/" S1), "MetadataIncompleteBuffer");
}

static void test_open_bad_index(void **state)
{
	two_shards("m7", "{\"weight_map\":{\"a\":\"../" S1 "\"}}");
	open_fail(P("m7"), MK_EFORMAT, "shard name '../" S1 "'",
		  "model.safetensors.index.json");
	two_shards("m8", "{\"weight_map\":");
	open_fail(P("m8"), MK_EFORMAT, "not valid JSON", NULL);
}

static void test_open_bin_only(void **state)
{
	mkdirs(P("bin1"));
	write_text(P("bin1/pytorch_model.bin"), "x");
	open_fail(P("bin1"), MK_EFORMAT, "pytorch_model.bin: not a zip file", NULL);
	mkdirs(P("bin2"));
	write_text(P("bin2/pytorch_model.bin.index.json"), "{}");
	open_fail(P("bin2"), MK_EFORMAT, "pytorch_model.bin.index.json", NULL);
	mkdirs(P("empty"));
	open_fail(P("empty"), MK_ENOENT, "no model.safetensors or "
		  "model.safetensors.index.json in", P("empty"));
	open_fail("org/missing", MK_ENOENT, "HF_HUB_OFFLINE=1 forbids downloading it", "mk-get org/missing");
	/* the cached snapshot without weights (HF_HUB_OFFLINE=1: not asked for) */
	open_fail("org/name@fff000", MK_ENOENT, "no model.safetensors", "holds only part of it");
}

/* A reference that is a file: that file alone (mk-pytorch's state dicts),
 * safetensors by its name, anything else a torch pickle. */
static void test_open_one_file(void **state)
{
	struct mk_model *m = NULL;
	struct mk_err err = { 0 };

	mkdirs(P("sd"));
	write_st(P("sd/w.safetensors"), "b", 3, "a", 2, NULL);
	if (mk_model_open(P("sd/w.safetensors"), &m, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(m->nshards, 1);
	assert_string_equal(m->shard_names[0], "w.safetensors");
	assert_string_equal(m->dir, P("sd"));
	assert_int_equal(m->ntensors, 2);
	assert_int_equal(mk_model_find(m, "a")->t->end - mk_model_find(m, "a")->t->begin, 2);
	mk_model_free(m);
	/* another name is a torch.save file, whatever it holds */
	write_st(P("sd/w.pt"), "x", 1, NULL);
	open_fail(P("sd/w.pt"), MK_EFORMAT, "not a zip file", P("sd/w.pt"));
	/* a file that leads out of its directory is still refused */
	assert_int_equal(symlink(P("sd/w.safetensors"), P("sd/link.safetensors")), 0);
	if (mk_model_open(P("sd/link.safetensors"), &m, &err))
		fail_msg("%s", err.msg);
	mk_model_free(m);
	mkdirs(P("sd2"));
	assert_int_equal(symlink(P("sd/w.safetensors"), P("sd2/out.safetensors")), 0);
	open_fail(P("sd2/out.safetensors"), MK_EINVAL, "leads outside the model's directory", NULL);
	/* an adapter is never a bare file */
	assert_int_equal(mk_model_open_adapter(P("sd/w.safetensors"), &m, &err) < 0, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_resolve_local, use_hub_cache),
		cmocka_unit_test_setup(test_resolve_refs_main, use_hub_cache),
		cmocka_unit_test_setup(test_resolve_rev_as_ref, use_hub_cache),
		cmocka_unit_test_setup(test_resolve_rev_as_commit, use_hub_cache),
		cmocka_unit_test_setup(test_resolve_missing, use_hub_cache),
		cmocka_unit_test_setup(test_resolve_cache_env, use_hub_cache),
		cmocka_unit_test_setup(test_open_sharded, use_hub_cache),
		cmocka_unit_test_setup(test_open_single, use_hub_cache),
		cmocka_unit_test_setup(test_open_index_names_missing_tensor,
				       use_hub_cache),
		cmocka_unit_test_setup(test_open_tensor_in_two_shards, use_hub_cache),
		cmocka_unit_test_setup(test_open_tensor_not_in_index, use_hub_cache),
		cmocka_unit_test_setup(test_open_missing_shard, use_hub_cache),
		cmocka_unit_test_setup(test_open_bad_shard_header, use_hub_cache),
		cmocka_unit_test_setup(test_open_bad_index, use_hub_cache),
		cmocka_unit_test_setup(test_open_bin_only, use_hub_cache),
		cmocka_unit_test_setup(test_open_one_file, use_hub_cache),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
