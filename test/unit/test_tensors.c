/* test_tensors.c - merging in process (include/mk/tensors.h). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/safetensors.h"
#include "mk/tensors.h"

static struct mk_tensor f32(unsigned rows, unsigned cols, float *data)
{
	struct mk_tensor t = { .desc.dtype = MK_DT_F32, .desc.ndim = 2, .desc.shape = { rows, cols }, .data = data };
	return t;
}

static void test_linear_values(void **state)
{
	float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 5, 6, 7, 8, 9, 10 };
	struct mk_tensor in[2] = { f32(2, 3, a), f32(2, 3, b) }, out;
	struct mk_param_values *pv = mk_param_values_new();
	struct mk_err err = { 0 };

	assert_int_equal(mk_param_values_set(pv, "weight", 0, mk_pval_float(1), &err), 0);
	assert_int_equal(mk_param_values_set(pv, "weight", 1, mk_pval_float(3), &err), 0);
	assert_int_equal(mk_merge_tensors("linear", in, 2, -1, pv, MK_DT_COUNT, "w", 0, &out, &err), 0);
	assert_int_equal(out.desc.dtype, MK_DT_F32);
	assert_int_equal(out.desc.shape[0], 2);
	assert_int_equal(out.desc.shape[1], 3);
	for (int i = 0; i < 6; i++) /* (a + 3b) / 4: exact in float32 here */
		assert_true(((float *)out.data)[i] == (a[i] + 3 * b[i]) / 4);
	mk_tensor_release(&out);
	/* normalize false: a + 3b; output as BF16 */
	assert_int_equal(mk_param_values_set(pv, "normalize", -1, mk_pval_bool(false), &err), 0);
	assert_int_equal(mk_merge_tensors("linear", in, 2, -1, pv, MK_DT_BF16, "w", 0, &out, &err), 0);
	assert_int_equal(out.desc.dtype, MK_DT_BF16);
	for (int i = 0; i < 6; i++)
		assert_true(mk_bf16_to_f32(((uint16_t *)out.data)[i]) == a[i] + 3 * b[i]);
	mk_tensor_release(&out);
	mk_param_values_free(pv);
}

static void test_slerp_and_passthrough(void **state)
{
	float a[4] = { 1, 0, 0, 1 }, b[4] = { 0, 1, 1, 0 };
	struct mk_tensor in[2] = { f32(2, 2, a), f32(2, 2, b) }, out;
	struct mk_param_values *pv = mk_param_values_new();
	struct mk_err err = { 0 };

	/* t = 0 gives the base, t = 1 the other */
	mk_param_values_set(pv, "t", -1, mk_pval_float(0), &err);
	assert_int_equal(mk_merge_tensors("slerp", in, 2, 0, pv, MK_DT_COUNT, "s", 0, &out, &err), 0);
	assert_memory_equal(out.data, a, sizeof(a));
	mk_tensor_release(&out);
	mk_param_values_set(pv, "t", -1, mk_pval_float(1), &err);
	assert_int_equal(mk_merge_tensors("slerp", in, 2, 0, pv, MK_DT_COUNT, "s", 0, &out, &err), 0);
	for (int i = 0; i < 4; i++)
		assert_true(fabsf(((float *)out.data)[i] - b[i]) < 1e-6f);
	mk_tensor_release(&out);
	mk_param_values_free(pv);
	/* passthrough with a scale */
	pv = mk_param_values_new();
	mk_param_values_set(pv, "scale", 0, mk_pval_float(2), &err);
	assert_int_equal(mk_merge_tensors("passthrough", in, 1, -1, pv, MK_DT_COUNT, "p", 0, &out, &err), 0);
	for (int i = 0; i < 4; i++)
		assert_true(((float *)out.data)[i] == 2 * a[i]);
	mk_tensor_release(&out);
	mk_param_values_free(pv);
}

static void test_errors(void **state)
{
	float a[4] = { 0 };
	struct mk_tensor in[2] = { f32(2, 2, a), f32(2, 2, a) }, out;
	struct mk_param_values *pv = mk_param_values_new();
	struct mk_err err = { 0 };

	assert_int_equal(mk_merge_tensors("linaer", in, 2, -1, NULL, MK_DT_COUNT, NULL, 0, &out, &err), -MK_ENOENT);
	assert_non_null(strstr(err.msg, "linear"));
	assert_int_equal(mk_merge_tensors("linear", in, 2, -1, NULL, MK_DT_COUNT, "w", 0, &out, &err) < 0, 1);
	assert_non_null(strstr(err.msg, "weight"));
	mk_param_values_set(pv, "bogus", -1, mk_pval_float(1), &err);
	assert_int_equal(mk_merge_tensors("linear", in, 2, -1, pv, MK_DT_COUNT, "w", 0, &out, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "bogus"));
	assert_null(out.data);
	mk_param_values_free(pv);
}

static void test_groups_batch_limits(void **state)
{
	enum { G = 7 };
	float data[G][2][6];
	struct mk_tensor ins[G][2];
	struct mk_param_values *pv[G];
	struct mk_group g[G];
	struct mk_err err = { 0 };
	size_t limits[][2] = { { 0, 0 }, { 2, 0 }, { 1, 0 }, { 0, 100 } };

	for (int k = 0; k < G; k++) {
		for (int i = 0; i < 6; i++) {
			data[k][0][i] = (float)(k * 10 + i) * 0.37f;
			data[k][1][i] = (float)(k - i) * 1.13f;
		}
		ins[k][0] = f32(2, 3, data[k][0]);
		ins[k][1] = f32(2, 3, data[k][1]);
		pv[k] = mk_param_values_new();
		mk_param_values_set(pv[k], "weight", 0, mk_pval_float(0.1 * (k + 1)), &err);
		mk_param_values_set(pv[k], "weight", 1, mk_pval_float(0.7), &err);
	}
	for (size_t l = 0; l < sizeof(limits) / sizeof(limits[0]); l++) {
		for (int k = 0; k < G; k++)
			g[k] = (struct mk_group){ .name = "g", .in = ins[k], .n = 2, .base = -1, .pv = pv[k] };
		assert_int_equal(mk_merge_groups("linear", g, G, MK_DT_COUNT, 0, limits[l][1], limits[l][0], &err), 0);
		for (int k = 0; k < G; k++) {
			struct mk_tensor one;
			assert_int_equal(mk_merge_tensors("linear", ins[k], 2, -1, pv[k], MK_DT_COUNT, "g", 0, &one, &err), 0);
			/* the batch kernel and the job path agree bit for bit */
			assert_memory_equal(g[k].out.data, one.data, 6 * sizeof(float));
			mk_tensor_release(&one);
			mk_tensor_release(&g[k].out);
		}
	}
	for (int k = 0; k < G; k++)
		mk_param_values_free(pv[k]);
}

static void write_st(const char *path, const char *const *names, const enum mk_dtype *dts, const void *const *data,
		     size_t n)
{
	struct mk_st_out_tensor ot[8];
	uint64_t shape[2] = { 2, 2 };
	uint8_t *hdr;
	size_t hlen;
	struct mk_err err = { 0 };
	FILE *f = fopen(path, "wb");

	for (size_t i = 0; i < n; i++)
		ot[i] = (struct mk_st_out_tensor){ .name = names[i], .dtype = dts[i], .ndim = 2, .shape = shape };
	assert_int_equal(mk_st_header_build(ot, n, 8, &hdr, &hlen, NULL, &err), 0);
	fwrite(hdr, 1, hlen, f);
	/* data in offset order */
	for (uint64_t off = 0;;) {
		size_t k = n;
		for (size_t i = 0; i < n; i++)
			if (ot[i].begin == off && ot[i].nbytes)
				k = i;
		if (k == n)
			break;
		fwrite(data[k], 1, ot[k].nbytes, f);
		off += ot[k].nbytes;
	}
	fclose(f);
	free(hdr);
}

static void test_safetensors_files(void **state)
{
	char dir[] = "/tmp/mk-test-tensors.XXXXXX", a[256], b[256], c[256], o[256];
	float x[4] = { 1, 2, 3, 4 }, y[4] = { 3, 2, 1, 0 };
	int64_t ids[4] = { 0, 1, 2, 3 }, ids2[4] = { 0, 1, 2, 9 };
	struct mk_param_values *pv = mk_param_values_new();
	struct mk_err err = { 0 };
	struct mk_st_file *f;

	assert_non_null(mkdtemp(dir));
	snprintf(a, sizeof(a), "%s/a.safetensors", dir);
	snprintf(b, sizeof(b), "%s/b.safetensors", dir);
	snprintf(c, sizeof(c), "%s/c.safetensors", dir);
	snprintf(o, sizeof(o), "%s/o.safetensors", dir);
	{
		const char *n1[] = { "w", "pos" }, *n2[] = { "w", "pos", "extra" };
		enum mk_dtype d1[] = { MK_DT_F32, MK_DT_I64 }, d2[] = { MK_DT_F32, MK_DT_I64, MK_DT_F32 };
		const void *v1[] = { x, ids }, *v2[] = { y, ids, x };
		write_st(a, n1, d1, v1, 2);
		write_st(b, n2, d2, v2, 3);
		const void *v3[] = { y, ids2 };
		write_st(c, n1, d1, v3, 2);
	}
	mk_param_values_set(pv, "weight", -1, mk_pval_float(1), &err);
	const char *ab[] = { a, b }, *ac[] = { a, c };
	/* strict: b has a tensor a lacks */
	assert_int_equal(mk_merge_safetensors("linear", ab, 2, -1, pv, true, MK_DT_COUNT, 0, o, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "extra"));
	assert_int_not_equal(access(o, F_OK), 0);
	/* not strict: the intersection; the int64 tensor copied */
	assert_int_equal(mk_merge_safetensors("linear", ab, 2, -1, pv, false, MK_DT_COUNT, 0, o, &err), 0);
	assert_int_equal(mk_st_open(o, &f, &err), 0);
	assert_int_equal(f->ntensors, 2);
	assert_non_null(mk_st_find(f, "w"));
	assert_null(mk_st_find(f, "extra"));
	assert_int_equal(mk_st_find(f, "pos")->desc.dtype, MK_DT_I64);
	{
		FILE *fp = fopen(o, "rb");
		float w[4];
		int64_t p[4];
		fseek(fp, (long)(f->data_start + mk_st_find(f, "w")->begin), SEEK_SET);
		assert_int_equal(fread(w, 4, 4, fp), 4);
		fseek(fp, (long)(f->data_start + mk_st_find(f, "pos")->begin), SEEK_SET);
		assert_int_equal(fread(p, 8, 4, fp), 4);
		fclose(fp);
		for (int i = 0; i < 4; i++) {
			assert_true(w[i] == (x[i] + y[i]) / 2);
			assert_int_equal(p[i], ids[i]);
		}
	}
	mk_st_file_free(f);
	/* int tensors that differ are an error */
	assert_int_equal(mk_merge_safetensors("linear", ac, 2, -1, pv, true, MK_DT_COUNT, 0, o, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "pos"));
	unlink(a);
	unlink(b);
	unlink(c);
	unlink(o);
	rmdir(dir);
	mk_param_values_free(pv);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear_values),
		cmocka_unit_test(test_slerp_and_passthrough),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_groups_batch_limits),
		cmocka_unit_test(test_safetensors_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
