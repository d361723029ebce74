/* test_gguf_mix.c - llama-quantize's per-tensor types.
 *
 * testdata/gguf/mix-golden.txt holds, for four tiny models converted by
 * llama.cpp's convert_hf_to_gguf.py (llama, llama with tied embeddings
 * and rows of 320 and 544, phi3 with its fused attn_qkv, mixtral with 8
 * experts), the type llama-quantize gave each tensor in each file type
 * (scripts/gguf-mix-golden.py).  mk's choice must be the same for every
 * tensor; the hand cases below cover rules those models do not reach.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_mix.h"
#include "gguf/gguf_type.h"
#include "mk/err.h"

#define MAXT 512
#define MAXF 8

struct gmodel {
	char name[64], arch[32];
	struct mk_gguf_mix_model m;
	struct mk_gguf_mix_tensor t[MAXT];
	char names[MAXT][96];
	int want[MAXT][MAXF];
	size_t n;
};

static void check_model(struct gmodel *g, int nft, const int *ft,
			const char (*ftn)[16], unsigned *checked)
{
	int got[MAXT];

	for (int f = 0; f < nft; f++) {
		struct mk_err err = { 0 };

		assert_int_equal(mk_gguf_mix_types(ft[f], &g->m, g->t, g->n, got,
						   &err), 0);
		for (size_t i = 0; i < g->n; i++) {
			if (got[i] != g->want[i][f])
				fail_msg("%s %s %s: mk chose %s, llama-quantize %s",
					 g->name, ftn[f], g->t[i].name,
					 mk_gguf_type_name(got[i]),
					 mk_gguf_type_name(g->want[i][f]));
			(*checked)++;
		}
	}
}

static void test_golden(void **state)
{
	FILE *f = fopen("testdata/gguf/mix-golden.txt", "r");
	char line[512], ftn[MAXF][16];
	int ft[MAXF], nft = 0, nmodel = 0;
	struct gmodel *g = calloc(1, sizeof *g);
	unsigned checked = 0;
	bool open_model = false;

	assert_non_null(f);
	assert_non_null(g);
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#')
			continue;
		if (!strncmp(line, "ftypes ", 7)) {
			char *save, *tok = strtok_r(line + 7, " \n", &save);

			for (; tok && nft < MAXF; tok = strtok_r(NULL, " \n", &save)) {
				snprintf(ftn[nft], sizeof ftn[nft], "%s", tok);
				ft[nft] = mk_gguf_ftype_parse(tok, NULL);
				assert_true(ft[nft] >= 0);
				nft++;
			}
			continue;
		}
		if (!strncmp(line, "model ", 6)) {
			if (open_model)
				check_model(g, nft, ft, (const char (*)[16])ftn, &checked);
			memset(g, 0, sizeof *g);
			assert_int_equal(sscanf(line, "model %63s %31s %u %u %u %u",
						g->name, g->arch, &g->m.n_layer,
						&g->m.n_head, &g->m.n_head_kv,
						&g->m.n_expert), 6);
			g->m.arch = g->arch;
			open_model = true;
			nmodel++;
			continue;
		}
		assert_true(open_model && g->n < MAXT);
		struct mk_gguf_mix_tensor *t = &g->t[g->n];
		unsigned long long ne0, ne1, ne2;
		int used = 0;

		assert_int_equal(sscanf(line, "%95s %llu %llu %llu %d%n", g->names[g->n],
					&ne0, &ne1, &ne2, &t->type, &used), 5);
		t->name = g->names[g->n];
		t->ndim = 3;
		t->ne[0] = ne0;
		t->ne[1] = ne1;
		t->ne[2] = ne2;
		t->ne[3] = 1;
		char *p = line + used;

		for (int i = 0; i < nft; i++) {
			char *end;

			g->want[g->n][i] = (int)strtol(p, &end, 10);
			assert_true(end != p);
			p = end;
		}
		g->n++;
	}
	if (open_model)
		check_model(g, nft, ft, (const char (*)[16])ftn, &checked);
	fclose(f);
	free(g);
	assert_int_equal(nmodel, 4);
	assert_int_equal(nft, 7);
	assert_true(checked > 2000);
}

/* a dense llama of n layers: attn_v and ffn_down of each, plus output */
static void dense(unsigned n, char (*names)[48], struct mk_gguf_mix_tensor *t,
		  uint64_t row)
{
	for (unsigned i = 0; i < n; i++) {
		snprintf(names[2 * i], 48, "blk.%u.attn_v.weight", i);
		snprintf(names[2 * i + 1], 48, "blk.%u.ffn_down.weight", i);
		t[2 * i] = (struct mk_gguf_mix_tensor){ names[2 * i], 2,
			{ row, 1024, 1, 1 }, MK_GGUF_F16 };
		t[2 * i + 1] = (struct mk_gguf_mix_tensor){ names[2 * i + 1], 2,
			{ row, 1024, 1, 1 }, MK_GGUF_F16 };
	}
}

/* "More bits" for 32 layers: 0-3, 28-31, and 6, 9, ..., 27 (every
 * third from n/8 + 2) - llama.cpp's use_more_bits worked by hand. */
static void test_more_bits_32(void **state)
{
	static char names[64][48];
	struct mk_gguf_mix_tensor t[64];
	int got[64];
	struct mk_gguf_mix_model m = { "llama", 32, 32, 8, 0 };

	dense(32, names, t, 4096);
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q4_K_M, &m, t, 64,
					   got, NULL), 0);
	for (int i = 0; i < 32; i++) {
		bool more = i < 4 || i >= 28 || (i - 4) % 3 == 2;
		int want = more ? MK_GGUF_Q6_K : MK_GGUF_Q4_K;

		assert_int_equal(got[2 * i], want);
		assert_int_equal(got[2 * i + 1], want);
	}
	/* Q6_K files: everything Q6_K */
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q6_K, &m, t, 64,
					   got, NULL), 0);
	for (int i = 0; i < 64; i++)
		assert_int_equal(got[i], MK_GGUF_Q6_K);
}

/* 80 grouped-attention llama layers: llama.cpp's 70B class, whose
 * attn_v gets Q5_K where Q4_K_M would give Q4_K; not with MHA. */
static void test_70b(void **state)
{
	static char names[160][48];
	static struct mk_gguf_mix_tensor t[160];
	int got[160];
	struct mk_gguf_mix_model m = { "llama", 80, 64, 8, 0 };

	dense(80, names, t, 8192);
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q4_K_M, &m, t, 160,
					   got, NULL), 0);
	assert_int_equal(got[2 * 0], MK_GGUF_Q6_K);     /* first eighth */
	assert_int_equal(got[2 * 10], MK_GGUF_Q5_K);    /* (10-10)%3 != 2 */
	assert_int_equal(got[2 * 12], MK_GGUF_Q6_K);    /* (12-10)%3 == 2 */
	assert_int_equal(got[2 * 10 + 1], MK_GGUF_Q4_K); /* ffn_down: no */
	m.n_head_kv = 64;
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q4_K_M, &m, t, 160,
					   got, NULL), 0);
	assert_int_equal(got[2 * 10], MK_GGUF_Q4_K);
	m.arch = "qwen2";
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q4_K_M, &m, t, 160,
					   got, NULL), 0);
	assert_int_equal(got[2 * 10], MK_GGUF_Q5_K);
}

/* Rows of 100 fit no block: F16.  Rows of 96: Q8_0 for output; Q6_K
 * falls back to Q8_0, Q4_K to Q5_0, Q5_K to Q5_1. */
static void test_fallbacks(void **state)
{
	struct mk_gguf_mix_tensor t[] = {
		{ "output.weight", 2, { 96, 64, 1, 1 }, MK_GGUF_F16 },
		{ "blk.0.attn_q.weight", 2, { 96, 96, 1, 1 }, MK_GGUF_F16 },
		{ "blk.0.attn_k.weight", 2, { 100, 96, 1, 1 }, MK_GGUF_F16 },
		{ "blk.0.attn_norm.weight", 1, { 96, 1, 1, 1 }, MK_GGUF_F32 },
		{ "blk.0.ffn_gate_inp.weight", 2, { 96, 8, 1, 1 }, MK_GGUF_F32 },
		{ "blk.0.attn_q.bias", 2, { 96, 2, 1, 1 }, MK_GGUF_F32 },
		{ "blk.0.attn_output.weight", 2, { 96, 1, 1, 1 }, MK_GGUF_BF16 },
		/* llama.cpp's "ends in weight" test passes any 5-byte name */
		{ "ab.cd", 2, { 256, 2, 1, 1 }, MK_GGUF_F16 },
		{ "abc.cd", 2, { 256, 2, 1, 1 }, MK_GGUF_F16 },
	};
	struct mk_gguf_mix_model m = { "qwen3", 1, 4, 4, 0 };
	int got[9];

	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q4_K_M, &m, t, 9,
					   got, NULL), 0);
	assert_int_equal(got[7], MK_GGUF_Q4_K);
	assert_int_equal(got[8], MK_GGUF_F16);
	assert_int_equal(got[0], MK_GGUF_Q8_0);
	assert_int_equal(got[1], MK_GGUF_Q5_0);
	assert_int_equal(got[2], MK_GGUF_F16);
	assert_int_equal(got[3], MK_GGUF_F32);
	assert_int_equal(got[4], MK_GGUF_F32);
	assert_int_equal(got[5], MK_GGUF_F32);  /* not "...weight" */
	assert_int_equal(got[6], MK_GGUF_BF16); /* [96, 1] is 1-D */
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q5_K_M, &m, t, 9,
					   got, NULL), 0);
	assert_int_equal(got[1], MK_GGUF_Q5_1);
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q8_0, &m, t, 9,
					   got, NULL), 0);
	assert_int_equal(got[1], MK_GGUF_Q8_0);
	assert_int_equal(got[2], MK_GGUF_F16);
	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_BF16, &m, t, 9,
					   got, NULL), 0);
	assert_int_equal(got[2], MK_GGUF_BF16); /* no fallback for floats */
}

static void test_errors(void **state)
{
	struct mk_gguf_mix_tensor t[] = {
		{ "ffn_down_exps.weight", 3, { 256, 256, 8, 1 }, MK_GGUF_F16 },
	};
	struct mk_gguf_mix_model m = { "llama", 2, 4, 4, 8 };
	struct mk_err err = { 0 };
	int got[1];

	assert_int_equal(mk_gguf_mix_types(MK_GGUF_FT_MOSTLY_Q4_K_M, &m, t, 1,
					   got, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "ffn_down_exps.weight"));
	assert_int_equal(mk_gguf_mix_types(2, &m, t, 1, got, &err), -MK_EINVAL);
	assert_int_equal(mk_gguf_ftype_parse("q4_k_m", NULL), MK_GGUF_FT_MOSTLY_Q4_K_M);
	assert_int_equal(mk_gguf_ftype_parse("Q3_K_M", &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "Q5_K_M"));
	assert_string_equal(mk_gguf_ftype_name(MK_GGUF_FT_MOSTLY_Q6_K), "Q6_K");
	assert_int_equal(mk_gguf_ftype_default_type(MK_GGUF_FT_MOSTLY_Q5_K_M),
			 MK_GGUF_Q5_K);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_more_bits_32),
		cmocka_unit_test(test_70b),
		cmocka_unit_test(test_fallbacks),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
