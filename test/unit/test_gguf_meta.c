/* test_gguf_meta.c - the GGUF model and tokenizer keys, key by key against
 * what llama.cpp's convert_hf_to_gguf.py wrote.
 *
 * testdata/gguf-meta/NAME/ holds a tiny model's config.json,
 * generation_config.json and tokenizer files, NAME.kv every key-value pair
 * convert wrote for it (--outtype f32), in its order, with the value's
 * bytes as GGUF stores them (scripts/gguf-meta-golden.py; README there).
 * mk's keys (gguf_meta.h, gguf_vocab.h) are built into a header, read
 * back, and must have the same keys in the same order, each of the same
 * type and the same bytes (floats bit for bit, strings byte for byte).
 *
 * With MK_GGUF_META_FULL=DIR (made by gguf-meta-golden.py --full), the
 * real llama-bpe and qwen2 vocabularies there must get convert's
 * tokenizer.ggml.pre, and tiny models over them all of convert's keys
 * (128256 and 151936 tokens, their merges); skipped without it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/hash.h"
#include "gguf/gguf_meta.h"
#include "gguf/gguf_vocab.h"
#include "gguf/gguf_write.h"
#include "mk/err.h"
#include "mk/tokenize.h"

#define DIR_META "testdata/gguf-meta"

struct kv {
	char *key;
	unsigned vt;
	uint8_t *val;
	size_t len;
	bool hashed;    /* val: the SHA-256 of len bytes */
};

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t skip_value(const uint8_t *h, size_t len, size_t p, unsigned vt)
{
	static const size_t sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
	assert_true(vt <= 12);
	if (vt == 8) {
		assert_true(p + 8 <= len);
		return p + 8 + rd64(h + p);
	}
	if (vt == 9) {
		assert_true(p + 12 <= len);
		unsigned et = rd32(h + p);
		uint64_t n = rd64(h + p + 4);
		p += 12;
		for (uint64_t i = 0; i < n; i++)
			p = skip_value(h, len, p, et);
		return p;
	}
	return p + sz[vt];
}

/* The key-value pairs of a GGUF header. */
static struct kv *parse_header(const uint8_t *h, size_t len, size_t *n)
{
	assert_true(len >= 24);
	assert_memory_equal(h, "GGUF", 4);
	uint64_t nkv = rd64(h + 16);
	struct kv *a = calloc(nkv ? nkv : 1, sizeof *a);
	size_t p = 24;
	for (uint64_t i = 0; i < nkv; i++) {
		uint64_t kl = rd64(h + p);
		a[i].key = strndup((const char *)h + p + 8, kl);
		p += 8 + kl;
		a[i].vt = rd32(h + p);
		p += 4;
		size_t e = skip_value(h, len, p, a[i].vt);
		assert_true(e <= len);
		a[i].len = e - p;
		a[i].val = malloc(a[i].len + 1);
		memcpy(a[i].val, h + p, a[i].len);
		p = e;
	}
	*n = nkv;
	return a;
}

static int hexval(char c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* The "# tensor I NAME N HEX" lines of NAME.kv: convert's made-up
 * tensors, at place I of its file, N float32 values. */
struct extra {
	unsigned idx;
	char name[64];
	size_t n;
	float v[64];
};

static size_t read_extras(const char *path, struct extra *x, size_t cap)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	char *line = NULL;
	size_t len = 0, n = 0;
	while (getline(&line, &len, f) > 0) {
		char hex[1024];
		if (strncmp(line, "# tensor ", 9))
			continue;
		assert_true(n < cap);
		assert_int_equal(sscanf(line + 9, "%u %63s %zu %1023s", &x[n].idx, x[n].name, &x[n].n, hex), 4);
		assert_true(x[n].n <= 64 && strlen(hex) == 8 * x[n].n);
		for (size_t i = 0; i < x[n].n; i++) {
			uint8_t b[4];
			for (int k = 0; k < 4; k++)
				b[k] = (uint8_t)(hexval(hex[8 * i + 2 * k]) << 4 | hexval(hex[8 * i + 2 * k + 1]));
			memcpy(&x[n].v[i], b, 4);
		}
		n++;
	}
	free(line);
	fclose(f);
	return n;
}

/* NAME.kv: "# params N", then KEY TAB VTYPE TAB HEX lines. */
static struct kv *read_golden(const char *path, size_t *n, uint64_t *params)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t cap = 0, len = 0;
	char *line = NULL;
	ssize_t l;
	struct kv *a = NULL;
	*n = 0;
	while ((l = getline(&line, &len, f)) > 0) {
		if (line[l - 1] == '\n')
			line[--l] = 0;
		if (!strncmp(line, "# params ", 9)) {
			*params = strtoull(line + 9, NULL, 10);
			continue;
		}
		if (line[0] == '#')
			continue;
		char *t1 = strchr(line, '\t');
		assert_non_null(t1);
		char *t2 = strchr(t1 + 1, '\t');
		assert_non_null(t2);
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			a = realloc(a, cap * sizeof *a);
		}
		struct kv *e = &a[(*n)++];
		e->key = strndup(line, (size_t)(t1 - line));
		e->vt = (unsigned)atoi(t1 + 1);
		const char *hx = t2 + 1;
		if (!strncmp(hx, "sha256:", 7)) {
			/* a large value by length and digest: val holds the digest */
			char *colon = strchr(hx + 7, ':');
			assert_non_null(colon);
			e->len = strtoull(hx + 7, NULL, 10);
			e->hashed = true;
			e->val = malloc(32);
			for (size_t i = 0; i < 32; i++)
				e->val[i] = (uint8_t)(hexval(colon[1 + 2 * i]) << 4 | hexval(colon[2 + 2 * i]));
			continue;
		}
		e->hashed = false;
		e->len = strlen(hx) / 2;
		e->val = malloc(e->len + 1);
		for (size_t i = 0; i < e->len; i++)
			e->val[i] = (uint8_t)(hexval(hx[2 * i]) << 4 | hexval(hx[2 * i + 1]));
	}
	free(line);
	fclose(f);
	return a;
}

static void free_kvs(struct kv *a, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(a[i].key);
		free(a[i].val);
	}
	free(a);
}

/* The first difference of two values, for the failure message. */
static void describe(const struct kv *w, const struct kv *g)
{
	size_t i = 0;
	if (w->hashed) {
		print_error("%s: type %u/%u, %zu/%zu bytes, digest differs\n", w->key, w->vt, g->vt, w->len, g->len);
		return;
	}
	while (i < w->len && i < g->len && w->val[i] == g->val[i])
		i++;
	print_error("%s: type %u/%u, %zu/%zu bytes, first difference at byte %zu\n", w->key, w->vt, g->vt,
		    w->len, g->len, i);
	if (w->vt == 8 && g->vt == 8 && w->len > 8 && g->len > 8)
		print_error("  want \"%.*s\"\n  got  \"%.*s\"\n", (int)(w->len - 8), w->val + 8,
			    (int)(g->len - 8), g->val + 8);
}

static void check_model_at(const char *dir, const char *kvp, const char *pre)
{
	const char *name = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	uint64_t params = 0;
	size_t nw = 0, ng = 0;
	struct kv *want = read_golden(kvp, &nw, &params);
	assert_true(params > 0);

	struct mk_err err = { 0 };
	struct mk_gguf *g = NULL;
	struct mk_gguf_hparams hp;
	assert_int_equal(mk_gguf_new(&g, &err), 0);
	assert_int_equal(mk_gguf_hparams_read(dir, &hp, &err), 0);
	int rc = mk_gguf_meta_add(g, dir, 0, params, NULL, &err);
	if (rc < 0)
		print_error("%s\n", err.msg);
	assert_int_equal(rc, 0);
	rc = mk_gguf_vocab_add(g, dir, hp.arch, pre, &err);
	if (rc < 0)
		print_error("%s\n", err.msg);
	assert_int_equal(rc, 0);
	/* one tensor, as a file has (the keys are read back alone) */
	uint64_t ne[1] = { 32 };
	assert_int_equal(mk_gguf_add_tensor(g, "x.weight", 1, ne, 0, &err), 0);
	uint8_t *h;
	size_t hl;
	assert_int_equal(mk_gguf_header(g, &h, &hl, &err), 0);
	struct kv *got = parse_header(h, hl, &ng);

	size_t bad = 0;
	for (size_t i = 0; i < nw || i < ng; i++) {
		const char *wk = i < nw ? want[i].key : "(none)", *gk = i < ng ? got[i].key : "(none)";
		if (strcmp(wk, gk)) {
			print_error("%s: pair %zu is %s in convert's file, %s in mk's\n", name, i, wk, gk);
			bad++;
			break;
		}
		uint8_t dg[32];
		if (want[i].hashed)
			mk_sha256(got[i].val, got[i].len, dg);
		if (want[i].vt != got[i].vt || want[i].len != got[i].len ||
		    memcmp(want[i].val, want[i].hashed ? dg : got[i].val, want[i].hashed ? 32 : want[i].len)) {
			describe(&want[i], &got[i]);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
	assert_int_equal(ng, nw);

	/* the made-up tensors: the same names, first in the file, the same
	 * floats (phi3's exactly; Llama 3's rope_freqs within what
	 * test_gguf_names.c measured for mk_gguf_llama3_rope_freqs) */
	struct extra wx[4];
	size_t nx = read_extras(kvp, wx, 4), gn;
	struct mk_gguf_extra *gx;
	assert_int_equal(mk_gguf_extra_tensors(&hp, &gx, &gn, &err), 0);
	assert_int_equal(gn, nx);
	for (size_t i = 0; i < nx; i++) {
		assert_int_equal(wx[i].idx, i);
		assert_string_equal(gx[i].name, wx[i].name);
		assert_int_equal(gx[i].n, wx[i].n);
		for (size_t j = 0; j < wx[i].n; j++) {
			float a = gx[i].v[j], b = wx[i].v[j];
			if (!strcmp(wx[i].name, "rope_freqs.weight"))
				assert_true(fabsf(a - b) <= 4e-7f * fabsf(b));
			else
				assert_memory_equal(&a, &b, 4);
		}
	}
	mk_gguf_extra_free(gx, gn);
	free(h);
	free_kvs(want, nw);
	free_kvs(got, ng);
	mk_gguf_hparams_clear(&hp);
	mk_gguf_free(g);
}

static void check_model(const char *name, const char *pre)
{
	char dir[512], kvp[512];
	snprintf(dir, sizeof dir, DIR_META "/%s", name);
	snprintf(kvp, sizeof kvp, DIR_META "/%s.kv", name);
	check_model_at(dir, kvp, pre);
}

static void test_llama3(void **state)
{
	(void)state;
	check_model("Meta-Llama-3.1-8B-Instruct", "llama-bpe");
}

static void test_qwen2(void **state)
{
	(void)state;
	check_model("Qwen2.5-0.5B-Instruct", "qwen2");
}

static void test_qwen3(void **state)
{
	(void)state;
	check_model("qwen3-tiny", "qwen2");
}

static void test_mistral(void **state)
{
	(void)state;
	check_model("Mistral-7B-Instruct-v0.3", NULL);
}

static void test_llama2_spm(void **state)
{
	(void)state;
	check_model("llama-2-tiny-chat", NULL);
}

static void test_gemma2(void **state)
{
	(void)state;
	check_model("gemma-2-2b-it", NULL);
}

static void test_gemma3(void **state)
{
	(void)state;
	check_model("gemma-3-1b-it", NULL);
}

static void test_phi3(void **state)
{
	(void)state;
	check_model("Phi-3-mini-128k-instruct", NULL);
}

static void test_granite_small(void **state)
{
	(void)state;
	check_model("granite-tiny", "qwen2");
}

static void test_gemma3_bpe(void **state)
{
	(void)state;
	check_model("gemma-3-bpe", "llama-bpe");
}

/* Configs as people write them: what convert takes from transformers'
 * defaults (head_dim, num_key_value_heads, rms_norm_eps, rope_theta,
 * max_position_embeddings, softcappings, sliding_window, ...) mk fills
 * in the same. */
static void test_raw_configs(void **state)
{
	(void)state;
	check_model("llama-3-raw-config", "llama-bpe");
	check_model("mistral-raw-config", NULL);
	check_model("phi3-raw-config", NULL);
	check_model("gemma2-raw-config", NULL);
}

/* The config facts the tensor side uses. */
static void test_hparams(void **state)
{
	(void)state;
	struct mk_err err = { 0 };
	struct mk_gguf_hparams hp;
	assert_int_equal(mk_gguf_hparams_read(DIR_META "/Meta-Llama-3.1-8B-Instruct", &hp, &err), 0);
	assert_string_equal(hp.arch, "llama");
	assert_true(hp.permute_qk);
	assert_int_equal(hp.n_head, 4);
	assert_int_equal(hp.n_head_kv, 2);
	assert_int_equal(hp.head_dim, 16);
	assert_true(hp.llama3_rope);
	assert_true(hp.rope_theta == 500000.0f && hp.rope_factor == 8.0f && hp.rope_low_freq == 1.0f &&
		    hp.rope_high_freq == 4.0f && hp.rope_orig_ctx == 8192.0f);
	mk_gguf_hparams_clear(&hp);
	assert_int_equal(mk_gguf_hparams_read(DIR_META "/qwen3-tiny", &hp, &err), 0);
	assert_string_equal(hp.arch, "qwen3");
	assert_false(hp.permute_qk);
	assert_false(hp.llama3_rope);
	mk_gguf_hparams_clear(&hp);
}

/* gguf-py's name heuristics, cases worked out from its rules. */
static void test_model_id(void **state)
{
	(void)state;
	static const struct {
		const char *id;
		uint64_t params;
		const char *name, *org, *base, *ft, *ver, *size;
	} c[] = {
		{ "Meta-Llama-3.1-8B-Instruct", 190536, "Meta-Llama-3.1-8B-Instruct", NULL, "Meta-Llama-3.1",
		  "8b-Instruct", NULL, NULL },
		{ "Meta-Llama-3.1-8B-Instruct", 8030261248ull, "Meta-Llama-3.1-8B-Instruct", NULL,
		  "Meta-Llama-3.1", "Instruct", NULL, "8B" },
		{ "mistralai/Mistral-7B-Instruct-v0.3", 7248023552ull, "Mistral-7B-Instruct-v0.3", "mistralai",
		  "Mistral", "Instruct", "v0.3", "7B" },
		{ "bloom-7b1", 7069016064ull, "bloom-7b1", NULL, "bloom", NULL, NULL, "7.1B" },
		{ "qwen3-tiny", 190208, "qwen3-tiny", NULL, NULL, NULL, NULL, NULL },
		{ "My Model", 5, "My Model", NULL, NULL, NULL, NULL, NULL },
		{ "Mixtral-8x7B-v0.1", 46702792704ull, "Mixtral-8x7B-v0.1", NULL, "Mixtral", NULL, "v0.1",
		  "8x7B" },
	};
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		struct mk_err err = { 0 };
		struct mk_gguf_model_id m;
		assert_int_equal(mk_gguf_model_id_parse(c[i].id, c[i].params, &m, &err), 0);
#define EQ(a, b) do { if ((a) || (b)) { if (!(a) || !(b) || strcmp((a), (b))) print_error("%s: %s vs %s\n", c[i].id, (a) ? (a) : "None", (b) ? (b) : "None"); assert_true((a) && (b)); assert_string_equal((a), (b)); } } while (0)
		EQ(m.name, c[i].name);
		EQ(m.org, c[i].org);
		EQ(m.basename, c[i].base);
		EQ(m.finetune, c[i].ft);
		EQ(m.version, c[i].ver);
		EQ(m.size_label, c[i].size);
#undef EQ
		mk_gguf_model_id_clear(&m);
	}
	static const struct { const char *in, *out; } t[] = {
		{ "Meta-Llama-3.1-8B-Instruct", "Meta Llama 3.1 8B Instruct" },
		{ "qwen3-tiny", "Qwen3 Tiny" },
		{ "qwen2.5-coder-v1.5", "Qwen2.5 Coder v1.5" },
		{ "foo-7b", "Foo 7b" },
	};
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		char *s = mk_gguf_id_to_title(t[i].in);
		assert_string_equal(s, t[i].out);
		free(s);
	}
	char b[32];
	mk_gguf_size_label(190536, b, sizeof b);
	assert_string_equal(b, "191K");
	mk_gguf_size_label(8030261248ull, b, sizeof b);
	assert_string_equal(b, "8.0B");
	mk_gguf_size_label(494032768, b, sizeof b);
	assert_string_equal(b, "494M");
	mk_gguf_size_label(1543714304, b, sizeof b);
	assert_string_equal(b, "1.5B");
}

static void test_refusals(void **state)
{
	(void)state;
	struct mk_err err = { 0 };
	struct mk_gguf_hparams hp;
	char tmpl[] = "/tmp/mk-gguf-meta-XXXXXX";
	assert_non_null(mkdtemp(tmpl));
	char p[256];
	snprintf(p, sizeof p, "%s/config.json", tmpl);
	FILE *f = fopen(p, "w");
	fputs("{\"architectures\": [\"GPTNeoXForCausalLM\"], \"num_hidden_layers\": 2}", f);
	fclose(f);
	assert_int_equal(mk_gguf_hparams_read(tmpl, &hp, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "GPTNeoXForCausalLM"));
	remove(p);
	rmdir(tmpl);
	mk_err_clear(&err);
	assert_int_equal(mk_gguf_hparams_read("/nonexistent-mk-dir", &hp, &err), -MK_ENOENT);
	assert_non_null(strstr(err.msg, "config.json"));

	/* a pre-tokenizer convert's table does not know: refused, the hash named */
	struct mk_gguf *g;
	mk_err_clear(&err);
	assert_int_equal(mk_gguf_new(&g, &err), 0);
	assert_int_equal(mk_gguf_vocab_add(g, DIR_META "/Meta-Llama-3.1-8B-Instruct", "llama", NULL, &err),
			 -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "pre-tokenizer not recognized"));
	mk_gguf_free(g);

	/* keys already there: the model's come first */
	mk_err_clear(&err);
	assert_int_equal(mk_gguf_new(&g, &err), 0);
	assert_int_equal(mk_gguf_kv_u32(g, "x", 1, &err), 0);
	assert_int_equal(mk_gguf_meta_add(g, DIR_META "/qwen3-tiny", 0, 1, NULL, &err), -MK_EINVAL);
	mk_gguf_free(g);
}

/* The real vocabularies, where the golden script rebuilt them. */
static void test_full_pre(void **state)
{
	(void)state;
	const char *root = getenv("MK_GGUF_META_FULL");
	if (!root || !*root) {
		skip();
		return;
	}
	static const char *const names[] = { "llama-bpe", "qwen2" };
	for (size_t i = 0; i < 2; i++) {
		char dir[1024], prep[1100], want[64] = { 0 }, got[64];
		snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
		snprintf(prep, sizeof prep, "%s/%s.pre", root, names[i]);
		FILE *f = fopen(prep, "r");
		assert_non_null(f);
		assert_non_null(fgets(want, sizeof want, f));
		fclose(f);
		want[strcspn(want, "\n")] = 0;
		struct mk_err err = { 0 };
		struct mk_tokenizer *t;
		int32_t *ids;
		size_t n;
		assert_int_equal(mk_tokenizer_open(dir, &t, &err), 0);
		const char *chk = mk_gguf_vocab_chktxt();
		assert_int_equal(mk_tokenizer_encode(t, chk, strlen(chk), true, &ids, &n, &err), 0);
		int rc = mk_gguf_vocab_pre(ids, n, got, sizeof got, NULL, &err);
		if (rc < 0)
			print_error("%s: %s\n", names[i], err.msg);
		assert_int_equal(rc, 0);
		assert_string_equal(got, want);
		free(ids);
		mk_tokenizer_free(t);
		/* a tiny model over the whole vocabulary: every key */
		snprintf(dir, sizeof dir, "%s/%s-model", root, names[i]);
		snprintf(prep, sizeof prep, "%s/%s-model.kv", root, names[i]);
		check_model_at(dir, prep, NULL);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_llama3),
		cmocka_unit_test(test_qwen2),
		cmocka_unit_test(test_qwen3),
		cmocka_unit_test(test_mistral),
		cmocka_unit_test(test_llama2_spm),
		cmocka_unit_test(test_gemma2),
		cmocka_unit_test(test_gemma3),
		cmocka_unit_test(test_phi3),
		cmocka_unit_test(test_granite_small),
		cmocka_unit_test(test_gemma3_bpe),
		cmocka_unit_test(test_raw_configs),
		cmocka_unit_test(test_hparams),
		cmocka_unit_test(test_model_id),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_full_pre),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
