/* test_pack_layout.c - mk-pack's output layout (pack_layout.c): the shard
 * each tensor goes to and the files' names against mergekit's writer, the
 * headers' offsets, the index, the names a FILE frame may not take. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "io/safetensors.h"
#include "stream/manifest.h"
#include "pack/pack_impl.h"
#include "journal/outlock.h"

/* A manifest of n U8 tensors "t0", "t1", ... of sizes[i] bytes. */
static struct mk_manifest *manifest_of(const uint64_t *sizes, size_t n)
{
	struct mk_manifest *m = mk_manifest_new("tensors", "test");
	struct mk_err err;
	char name[32];

	assert_non_null(m);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "t%zu", i);
		assert_int_equal(mk_manifest_add_tensor(m, name, MK_DT_U8, 1, &sizes[i], &err), 0);
		assert_int_equal(m->tensors[i].nbytes, sizes[i]);
	}
	return m;
}

static void pack_free(struct pack *p)
{
	free(p->slot);
	free(p->sh);
	mk_manifest_free(p->man);
}

/* mergekit's TensorWriter (mergekit/io/tensor_writer.py), transliterated:
 *
 *     if self.current_shard and self.current_shard_size + tensor_size > self.max_shard_size:
 *         self.flush_current_shard()
 *     self.current_shard[name] = tensor
 *     self.current_shard_size += tensor_size
 *
 * flush writes what the shard holds and empties it; finalize flushes the
 * last one and names the files model.safetensors when there is one,
 * else model-%05d-of-%05d.safetensors.  mk's shard size 0 (one file) has
 * no counterpart there: an unbounded shard. */
static size_t mergekit_shards(const uint64_t *sizes, size_t n, uint64_t max, size_t *shard_of)
{
	size_t written = 0, in_shard = 0;
	uint64_t shard_size = 0;

	for (size_t i = 0; i < n; i++) {
		if (in_shard && max && shard_size + sizes[i] > max) {
			written++;               /* flush_current_shard */
			in_shard = 0;
			shard_size = 0;
		}
		shard_of[i] = written;
		in_shard++;
		shard_size += sizes[i];
	}
	return in_shard ? written + 1 : written;   /* finalize */
}

/* Assign sizes[] with limit max; compare with mergekit's shards and file
 * names, and return the pack (its slots, shards) for more checks. */
static void assign_like_mergekit(struct pack *p, struct mk_pack_opts *o, const uint64_t *sizes, size_t n,
				 uint64_t max)
{
	size_t *want = calloc(n + 1, sizeof(*want)), nwant;
	struct mk_err err;
	char name[64];

	assert_non_null(want);
	memset(p, 0, sizeof(*p));
	memset(o, 0, sizeof(*o));
	o->shard_size = max;
	p->o = o;
	p->man = manifest_of(sizes, n);
	assert_int_equal(mk__pack_assign_shards(p, &err), 0);
	nwant = mergekit_shards(sizes, n, max, want);
	assert_int_equal(p->nshards, nwant);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(p->slot[i].shard, want[i]);
	for (size_t s = 0; s < p->nshards; s++) {
		if (p->nshards == 1)
			snprintf(name, sizeof(name), "model.safetensors");
		else
			snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, p->nshards);
		assert_string_equal(p->sh[s].name, name);
		assert_int_equal(p->sh[s].fd, -1);
		assert_int_equal(p->sh[s].dfd, -1);
	}
	free(want);
}

/* Cases written out: what each shard holds. */
static void test_assign_cases(void **state)
{
	struct pack p;
	struct mk_pack_opts o;

	(void)state;
	/* greedy in manifest order: 60 does not go back into the first shard
	 * although it would fit there after 50 went to the second */
	{
		const uint64_t s[] = { 40, 50, 60, 10 };
		assign_like_mergekit(&p, &o, s, 4, 100);
		assert_int_equal(p.nshards, 2);
		assert_int_equal(p.slot[0].shard, 0);
		assert_int_equal(p.slot[1].shard, 0);
		assert_int_equal(p.slot[2].shard, 1);
		assert_int_equal(p.slot[3].shard, 1);
		assert_string_equal(p.sh[0].name, "model-00001-of-00002.safetensors");
		assert_string_equal(p.sh[1].name, "model-00002-of-00002.safetensors");
		pack_free(&p);
	}
	/* exactly full stays; one byte more starts a new shard */
	{
		const uint64_t s[] = { 60, 40, 1 };
		assign_like_mergekit(&p, &o, s, 3, 100);
		assert_int_equal(p.nshards, 2);
		assert_int_equal(p.slot[1].shard, 0);
		assert_int_equal(p.slot[2].shard, 1);
		pack_free(&p);
	}
	/* a tensor larger than the limit: a shard of its own, and the next
	 * (even of 0 bytes: the shard is over its limit already) another */
	{
		const uint64_t s[] = { 10, 250, 0, 5 };
		assign_like_mergekit(&p, &o, s, 4, 100);
		assert_int_equal(p.nshards, 3);
		assert_int_equal(p.slot[0].shard, 0);
		assert_int_equal(p.slot[1].shard, 1);
		assert_int_equal(p.slot[2].shard, 2);
		assert_int_equal(p.slot[3].shard, 2);
		pack_free(&p);
	}
	/* a first tensor over the limit does not leave an empty shard */
	{
		const uint64_t s[] = { 250, 1 };
		assign_like_mergekit(&p, &o, s, 2, 100);
		assert_int_equal(p.nshards, 2);
		assert_int_equal(p.slot[0].shard, 0);
		pack_free(&p);
	}
	/* one shard: model.safetensors */
	{
		const uint64_t s[] = { 30, 30, 40 };
		assign_like_mergekit(&p, &o, s, 3, 100);
		assert_int_equal(p.nshards, 1);
		assert_string_equal(p.sh[0].name, "model.safetensors");
		pack_free(&p);
	}
	/* shard size 0: one file whatever the sizes */
	{
		const uint64_t s[] = { 1ull << 40, 1ull << 40, 7 };
		assign_like_mergekit(&p, &o, s, 3, 0);
		assert_int_equal(p.nshards, 1);
		assert_int_equal(p.slot[2].shard, 0);
		assert_string_equal(p.sh[0].name, "model.safetensors");
		pack_free(&p);
	}
	/* more shards than two digits: the numbers are five wide */
	{
		uint64_t s[120];
		for (size_t i = 0; i < 120; i++)
			s[i] = 100;
		assign_like_mergekit(&p, &o, s, 120, 100);
		assert_int_equal(p.nshards, 120);
		assert_string_equal(p.sh[0].name, "model-00001-of-00120.safetensors");
		assert_string_equal(p.sh[119].name, "model-00120-of-00120.safetensors");
		pack_free(&p);
	}
}

/* Random sizes and limits, small and around the limit, against mergekit. */
static void test_assign_random(void **state)
{
	uint64_t x = 0x9e3779b97f4a7c15ull, s[64];
	struct pack p;
	struct mk_pack_opts o;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		size_t n = 1 + x % 64;
		uint64_t max = x >> 8 & 1 ? 0 : 1 + (x >> 16) % 300;
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			s[i] = x % 7 == 0 ? 0 : x % 400;
		}
		assign_like_mergekit(&p, &o, s, n, max);
		pack_free(&p);
	}
}

/* The headers: each shard's tensors lie after its header, within the
 * file, without overlap, and its size is the header's plus theirs; the
 * header read back names them at those offsets. */
static void test_headers(void **state)
{
	const uint64_t s[] = { 24, 7, 100, 0, 33, 64, 1 };
	size_t n = sizeof(s) / sizeof(s[0]);
	struct pack p;
	struct mk_pack_opts o;
	uint8_t **hdrs;
	size_t *hlens;
	struct mk_err err;

	(void)state;
	assign_like_mergekit(&p, &o, s, n, 128);
	assert_int_equal(mk__pack_build_headers(&p, &hdrs, &hlens, &err), 0);
	for (size_t sh = 0; sh < p.nshards; sh++) {
		uint64_t data = 0, hl = 0;
		struct mk_st_file *sf;
		assert_int_equal(hlens[sh] % 8, 0);
		for (int b = 0; b < 8; b++)
			hl |= (uint64_t)hdrs[sh][b] << 8 * b;
		assert_int_equal(hl + 8, hlens[sh]);
		assert_int_equal(p.sh[sh].data_start, hlens[sh]);
		assert_int_equal(mk_st_parse(hdrs[sh], hlens[sh], p.sh[sh].size, "test", &sf, &err), 0);
		assert_int_equal(sf->data_start, hlens[sh]);
		for (size_t i = 0; i < n; i++) {
			if (p.slot[i].shard != sh)
				continue;
			data += s[i];
			assert_true(p.slot[i].off >= p.sh[sh].data_start);
			for (size_t k = 0; k < n; k++)
				if (k != i && p.slot[k].shard == sh && s[i] && s[k])
					assert_true(p.slot[i].off + s[i] <= p.slot[k].off ||
						    p.slot[k].off + s[k] <= p.slot[i].off);
			const struct mk_st_tensor *t = mk_st_find(sf, p.man->tensors[i].name);
			assert_non_null(t);
			assert_int_equal(hlens[sh] + t->begin, p.slot[i].off);
			assert_int_equal(t->end - t->begin, s[i]);
		}
		assert_int_equal(p.sh[sh].size, hlens[sh] + data);
		mk_st_file_free(sf);
		free(hdrs[sh]);
	}
	free(hdrs);
	free(hlens);
	pack_free(&p);
}

/* The index: tensors in manifest order, each with its shard's name, the
 * total size, Python's json.dump(indent=2) with ASCII escapes. */
static void test_index(void **state)
{
	const uint64_t s[] = { 60, 50, 10 };
	struct pack p;
	struct mk_pack_opts o;
	struct mk_pack_stats st = { .tensor_bytes = 120 };
	char dir[] = "/tmp/test_pack_layout.XXXXXX", path[64], text[1024];
	struct mk_err err;

	(void)state;
	assign_like_mergekit(&p, &o, s, 3, 100);
	free(p.man->tensors[2].name);
	p.man->tensors[2].name = strdup("caf\xc3\xa9");   /* "café" */
	assert_non_null(mkdtemp(dir));
	p.partial = dir;
	p.st = &st;
	assert_int_equal(mk__pack_write_index(&p, &err), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, INDEX_NAME);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	ssize_t got = read(fd, text, sizeof(text) - 1);
	assert_true(got > 0);
	text[got] = '\0';
	close(fd);
	/* (the escape's hex digits are jansson's upper case; Python's json
	 * writes lower case: only the escape is checked here) */
	char *u = strstr(text, "\"caf\\u00");
	assert_non_null(u);
	assert_true((u[8] == 'e' || u[8] == 'E') && u[9] == '9');
	u[8] = 'e';
	assert_string_equal(text,
			    "{\n"
			    "  \"metadata\": {\n"
			    "    \"total_size\": 120\n"
			    "  },\n"
			    "  \"weight_map\": {\n"
			    "    \"t0\": \"model-00001-of-00002.safetensors\",\n"
			    "    \"t1\": \"model-00002-of-00002.safetensors\",\n"
			    "    \"caf\\u00e9\": \"model-00002-of-00002.safetensors\"\n"
			    "  }\n"
			    "}");
	/* never over an index already there */
	assert_int_not_equal(mk__pack_write_index(&p, &err), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
	pack_free(&p);
}

/* The names a FILE frame may not take, and OUT's partial directory. */
static void test_names(void **state)
{
	static const char *const refused[] = {
		"model.safetensors", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
		"model-x.safetensors", ".mk-journal",
	};
	static const char *const taken[] = {
		"config.json", "tokenizer.json", "README.md", "models/model.json", "safetensors.txt",
	};
	struct mk_err err;
	char *s;

	(void)state;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		assert_int_equal(mk_pack_file_name_check(refused[i], &err), -MK_EFORMAT);
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
		assert_int_equal(mk_pack_file_name_check(taken[i], &err), 0);
	assert_non_null(s = mk_out_partial_name("out/merged//"));
	assert_string_equal(s, "out/merged.mk-partial");
	free(s);
	assert_non_null(s = mk_out_partial_name("/"));
	assert_string_equal(s, "/.mk-partial");
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_assign_cases),
		cmocka_unit_test(test_assign_random),
		cmocka_unit_test(test_headers),
		cmocka_unit_test(test_index),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
