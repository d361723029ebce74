/* test_cuda.c - the GPU kernels against the CPU path (skipped, exit 77,
 * without a CUDA device or in a build without CUDA). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "mk/cuda.h"
#include "mk/tensors.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / 9007199254740992.0 - 0.5);
}

/* GPU linear = CPU linear (mk_merge_groups) within 1e-6 relative, on
 * fresh random data, the output poisoned first. */
static void test_linear_matches_cpu(void **state)
{
	enum { N = 3, B = 4, E = 1 << 20 };
	float *in[N], w[B * N], *gpu = malloc((size_t)B * E * sizeof(float));
	struct mk_tensor t[B][N];
	struct mk_param_values *pv[B];
	struct mk_group g[B];
	struct mk_err err = { 0 };
	double t0, t1, t2;

	for (int i = 0; i < N; i++) {
		in[i] = malloc((size_t)B * E * sizeof(float));
		for (size_t e = 0; e < (size_t)B * E; e++)
			in[i][e] = frand();
	}
	for (int b = 0; b < B; b++) {
		pv[b] = mk_param_values_new();
		for (int i = 0; i < N; i++) {
			w[b * N + i] = 0.1f + 0.2f * (float)((b + i) % 4);
			mk_param_values_set(pv[b], "weight", i, mk_pval_float(w[b * N + i]), &err);
			t[b][i] = (struct mk_tensor){ .dtype = MK_DT_F32, .ndim = 1, .shape = { E },
						      .data = in[i] + (size_t)b * E };
		}
		g[b] = (struct mk_group){ .name = "t", .in = t[b], .n = N, .base = -1, .pv = pv[b] };
	}
	memset(gpu, 0xff, (size_t)B * E * sizeof(float)); /* NaN poison */
	t0 = now();
	assert_int_equal(mk_cuda_linear((const float *const *)in, N, w, B, E, true, gpu, &err), 0);
	t1 = now();
	assert_int_equal(mk_merge_groups("linear", g, B, MK_DT_COUNT, 0, 0, 0, &err), 0);
	t2 = now();
	double maxd = 0, maxr = 0;
	for (int b = 0; b < B; b++)
		for (size_t e = 0; e < E; e++) {
			float c = ((float *)g[b].out.data)[e], d = gpu[(size_t)b * E + e];
			assert_false(isnan(d));
			maxd = fmax(maxd, fabs((double)c - d));
			maxr = fmax(maxr, fabs((double)c));
		}
	printf("linear %d x %d x %d: max|gpu-cpu| %.3g (bound %.3g); gpu %.3f s (with copies), cpu %.3f s\n", B, N, E,
	       maxd, 1e-6 * fmax(1, maxr), t1 - t0, t2 - t1);
	assert_true(maxd <= 1e-6 * fmax(1, maxr));
	for (int b = 0; b < B; b++) {
		mk_tensor_release(&g[b].out);
		mk_param_values_free(pv[b]);
	}
	for (int i = 0; i < N; i++)
		free(in[i]);
	free(gpu);
}

int main(void)
{
	const char *why;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_matches_cpu),
	};

	if (!mk_cuda_available(&why)) {
		printf("test_cuda: skipped: %s\n", why);
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
