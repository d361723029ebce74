/* test_gguf_names.c - HF to GGUF tensor names.
 *
 * testdata/gguf/names-golden.txt lists, for a tiny random model of each
 * architecture (LlamaForCausalLM with Llama 3 rope scaling, Mistral,
 * Qwen2, Qwen3, Gemma2, Gemma3, Phi3), where llama.cpp's
 * convert_hf_to_gguf.py put each saved tensor and what it did to the
 * values, found by value (scripts/gguf-names-golden.py); and llama's
 * rope_freqs.weight as convert computed it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_names.h"
#include "mk/err.h"

static int xform_of(const char *s)
{
	if (!strcmp(s, "permute_q"))
		return MK_GGUF_X_PERMUTE_Q;
	if (!strcmp(s, "permute_k"))
		return MK_GGUF_X_PERMUTE_K;
	if (!strcmp(s, "plus1"))
		return MK_GGUF_X_PLUS1;
	assert_string_equal(s, "none");
	return MK_GGUF_X_NONE;
}

static void check_rope(const char *line)
{
	/* the llama model of the golden script: head 64 / 4, rope_theta
	 * 500000, factor 8, low 1, high 4, original context 8192 */
	float want[8], got[8];
	const char *p = strstr(line, "rope_freqs.weight 8 ");
	double worst = 0;

	assert_non_null(p);
	p += strlen("rope_freqs.weight 8 ");
	for (int i = 0; i < 8; i++) {
		char *end;
		uint32_t u = (uint32_t)strtoul(p, &end, 16);

		memcpy(&want[i], &u, 4);
		p = end;
	}
	mk_gguf_llama3_rope_freqs(16, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f, got);
	for (int i = 0; i < 8; i++) {
		double rel = fabs((double)got[i] - want[i]) / want[i];

		worst = rel > worst ? rel : worst;
	}
	/* metric: largest relative difference; the plain 1 and 8 factors
	 * are exact, the blended one within a few float32 ulps */
	assert_true(worst <= 4e-7);
	assert_true(got[0] == 1.0f && got[7] == 8.0f);
}

static void test_golden(void **state)
{
	FILE *f = fopen("testdata/gguf/names-golden.txt", "r");
	static char line[8192];
	unsigned mapped = 0, skipped = 0, archs_seen = 0, rope = 0;
	char last[64] = "";

	assert_non_null(f);
	while (fgets(line, sizeof line, f)) {
		char hfa[64], hf[160], gg[96], how[16], out[96];
		int xf = -1;

		if (line[0] == '#')
			continue;
		assert_int_equal(sscanf(line, "%63s %159s %95s %15s", hfa, hf, gg, how), 4);
		if (strcmp(hfa, last)) {
			archs_seen++;
			snprintf(last, sizeof last, "%s", hfa);
		}
		const char *arch = mk_gguf_arch_for_hf(hfa);

		assert_non_null(arch);
		if (!strcmp(hf, "extra")) {
			assert_string_equal(gg, "rope_freqs.weight");
			assert_string_equal(arch, "llama");
			check_rope(line);
			rope++;
			continue;
		}
		int rc = mk_gguf_name_for_hf(arch, hf, out, sizeof out, &xf, NULL);

		if (!strcmp(how, "skip")) {
			assert_int_equal(rc, 0);
			skipped++;
			continue;
		}
		if (rc != 1 || strcmp(out, gg) || xf != xform_of(how))
			fail_msg("%s %s: mk gives %d '%s' xform %d, convert wrote "
				 "'%s' (%s)", hfa, hf, rc, rc == 1 ? out : "", xf,
				 gg, how);
		mapped++;
	}
	fclose(f);
	assert_int_equal(archs_seen, 7);
	assert_int_equal(rope, 1);
	assert_true(mapped >= 120);
	(void)skipped;
}

static void test_skips_and_errors(void **state)
{
	char out[64];
	int xf;
	struct mk_err err = { 0 };

	assert_int_equal(mk_gguf_name_for_hf("llama",
		"model.layers.0.self_attn.rotary_emb.inv_freq", out, sizeof out,
		&xf, NULL), 0);
	assert_int_equal(mk_gguf_name_for_hf("gemma2", "lm_head.weight", out,
					     sizeof out, &xf, NULL), 0);
	assert_int_equal(mk_gguf_name_for_hf("gemma3",
		"vision_tower.vision_model.embeddings.patch_embedding.weight", out,
		sizeof out, &xf, NULL), 0);
	/* Gemma3ForConditionalGeneration's text tensors, both spellings */
	assert_int_equal(mk_gguf_name_for_hf("gemma3",
		"language_model.model.layers.3.mlp.down_proj.weight", out,
		sizeof out, &xf, NULL), 1);
	assert_string_equal(out, "blk.3.ffn_down.weight");
	assert_int_equal(mk_gguf_name_for_hf("gemma3",
		"model.language_model.layers.12.self_attn.k_norm.weight", out,
		sizeof out, &xf, NULL), 1);
	assert_string_equal(out, "blk.12.attn_k_norm.weight");
	assert_int_equal(xf, MK_GGUF_X_PLUS1);
	/* phi3 has no separate q_proj; qwen2 no q_norm */
	assert_int_equal(mk_gguf_name_for_hf("phi3",
		"model.layers.0.self_attn.q_proj.weight", out, sizeof out, &xf,
		&err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "q_proj"));
	assert_int_equal(mk_gguf_name_for_hf("qwen2",
		"model.layers.0.self_attn.q_norm.weight", out, sizeof out, &xf,
		NULL), -MK_EUNSUPPORTED);
	assert_int_equal(mk_gguf_name_for_hf("falcon", "lm_head.weight", out,
					     sizeof out, &xf, &err), -MK_EUNSUPPORTED);
	assert_int_equal(mk_gguf_name_for_hf("llama",
		"model.layers.7.self_attn.q_proj.bias", out, 8, &xf, &err),
		-MK_EINVAL);
	assert_int_equal(mk_gguf_name_for_hf("llama",
		"model.layers.7.self_attn.q_proj.bias", out, sizeof out, &xf, NULL), 1);
	assert_string_equal(out, "blk.7.attn_q.bias");
	assert_int_equal(xf, MK_GGUF_X_PERMUTE_Q);
	assert_string_equal(mk_gguf_arch_for_hf("MistralForCausalLM"), "llama");
	assert_null(mk_gguf_arch_for_hf("GPT2LMHeadModel"));
}

/* rows 8, 2 heads of 4: each head's halves (0 1 | 2 3) interleaved to
 * 0 2 1 3, as convert's reshape(n_head, 2, hd/2).swapaxes(1, 2). */
static void test_permute(void **state)
{
	static const uint64_t want[8] = { 0, 2, 1, 3, 4, 6, 5, 7 };
	uint64_t seen[128] = { 0 };

	for (uint64_t r = 0; r < 8; r++)
		assert_int_equal(mk_gguf_permute_src_row(r, 8, 2), want[r]);
	/* 128 rows, 4 heads of 32: a permutation, row 1 from 16 */
	for (uint64_t r = 0; r < 128; r++)
		seen[mk_gguf_permute_src_row(r, 128, 4)]++;
	for (int i = 0; i < 128; i++)
		assert_int_equal(seen[i], 1);
	assert_int_equal(mk_gguf_permute_src_row(1, 128, 4), 16);
	assert_int_equal(mk_gguf_permute_src_row(33, 128, 4), 48);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden),
		cmocka_unit_test(test_skips_and_errors),
		cmocka_unit_test(test_permute),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
