/* fill.c - the approximations that need no shared tokens (approx.h):
 * mean, zero, subword, john_hewitt, and mk's normals for randn. */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon_impl.h"

static void column_mean(const float *embed, size_t rows, size_t d, float *mean)
{
	for (size_t l = 0; l < d; l++)
		mean[l] = 0;
	/* in double, row by row: near the exact mean whatever the order */
	double *acc = surgeon_alloc(d, sizeof(double));
	if (acc) {
		for (size_t i = 0; i < rows; i++)
			for (size_t l = 0; l < d; l++)
				acc[l] += embed[i * d + l];
		for (size_t l = 0; l < d; l++)
			mean[l] = rows ? (float)(acc[l] / (double)rows) : 0.0f;
		free(acc);
		return;
	}
	for (size_t i = 0; i < rows; i++)
		for (size_t l = 0; l < d; l++)
			mean[l] += embed[i * d + l] / (float)rows;
}

void mk_surgeon_mean(const float *embed, size_t rows, size_t d, size_t b, float *out)
{
	if (b == 0)
		return;
	column_mean(embed, rows, d, out);
	for (size_t i = 1; i < b; i++)
		memcpy(out + i * d, out, d * sizeof(float));
}

void mk_surgeon_zero(size_t b, size_t d, float *out)
{
	memset(out, 0, b * d * sizeof(float));
}

/* f as bfloat16 (nearest even; NaN kept a NaN), or f itself */
static float round_to(float f, bool bf16)
{
	uint32_t u;
	if (!bf16)
		return f;
	memcpy(&u, &f, 4);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		u |= 0x00400000u;
	else
		u += 0x7FFFu + ((u >> 16) & 1u);
	u &= 0xFFFF0000u;
	memcpy(&f, &u, 4);
	return f;
}

int mk_surgeon_subword(const float *embed, size_t rows, size_t d, const int32_t *const *ids, const size_t *nids,
		       size_t b, enum mk_surgeon_subword how, bool lm_head, bool bf16, float *out, struct mk_err *err)
{
	memset(out, 0, b * d * sizeof(float));
	for (size_t i = 0; i < b; i++) {
		size_t m = nids[i];
		float *o = out + i * d;
		for (size_t j = 0; j < m; j++)
			if (ids[i][j] < 0 || (size_t)ids[i][j] >= rows)
				return mk_err_set(err, MK_EINVAL,
						  "subword: token %zu of the batch encodes to id %d, past the model's "
						  "%zu embedding rows", i, (int)ids[i][j], rows);
		if (m == 0)
			continue;
		switch (how) {
		case MK_SURGEON_SUB_MEAN:
		case MK_SURGEON_SUB_SUM:
			for (size_t j = 0; j < m; j++)
				for (size_t l = 0; l < d; l++)
					o[l] = round_to(o[l] + embed[(size_t)ids[i][j] * d + l], bf16);
			if (how == MK_SURGEON_SUB_MEAN)
				for (size_t l = 0; l < d; l++)
					o[l] = round_to(o[l] / (float)m, bf16);
			break;
		case MK_SURGEON_SUB_WEIGHTED: {
			/* weight of token j: j + 1 (lm_head) or m - j (embedding) */
			float total = 0;
			for (size_t j = 0; j < m; j++) {
				float w = lm_head ? (float)(j + 1) : (float)(m - j);
				total += w;
				for (size_t l = 0; l < d; l++)
					o[l] = round_to(o[l] + round_to(w * embed[(size_t)ids[i][j] * d + l], bf16), bf16);
			}
			for (size_t l = 0; l < d; l++)
				o[l] = round_to(o[l] / total, bf16);
			break;
		}
		case MK_SURGEON_SUB_FIRST_LAST:
			memcpy(o, embed + (size_t)ids[i][lm_head ? 0 : m - 1] * d, d * sizeof(float));
			break;
		default:
			return mk_err_set(err, MK_EINVAL, "subword: unknown method %d", (int)how);
		}
	}
	return 0;
}

int mk_surgeon_john_hewitt(const float *embed, size_t rows, size_t d, const float *z, size_t b, float *out,
			   struct mk_err *err)
{
	if (rows == 0 || d == 0 || d > INT32_MAX || rows > INT32_MAX || b > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "john_hewitt: %zu x %zu embedding out of range", rows, d);
	float *mean = surgeon_alloc(d, sizeof(float)), *c = surgeon_alloc(rows * d, sizeof(float));
	float *cov = surgeon_alloc(d * d, sizeof(float));
	int rc = 0, info = 0, id = (int)d;

	if (!mean || !c || !cov) {
		rc = mk_err_set(err, MK_ENOMEM, "john_hewitt: out of memory for a %zu x %zu covariance", d, d);
		goto out;
	}
	column_mean(embed, rows, d, mean);
	for (size_t i = 0; i < rows; i++)
		for (size_t l = 0; l < d; l++)
			c[i * d + l] = embed[i * d + l] - mean[l];
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, id, id, (int)rows, 1.0f / (float)rows, c, id, c, id, 0.0f,
		    cov, id);
	/* row-major lower = column-major upper: spotrf 'U' gives U = L^T,
	 * which read row-major is L */
	spotrf_("U", &id, cov, &id, &info, 1);
	if (info != 0) {
		rc = mk_err_set(err, MK_EINVAL,
				"john_hewitt: the model's embedding covariance (%zu rows, width %zu) is not positive "
				"definite (leading minor %d): use another method", rows, d, info);
		goto out;
	}
	/* cov holds L row-major in its lower triangle (the upper is stale) */
	for (size_t i = 0; i < d; i++)
		for (size_t j = i + 1; j < d; j++)
			cov[i * d + j] = 0.0f;
	/* out = z L^T + mean */
	for (size_t i = 0; i < b; i++)
		memcpy(out + i * d, mean, d * sizeof(float));
	if (b)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, id, id, 1.0f, z, id, cov, id, 1.0f, out, id);
out:
	free(mean), free(c), free(cov);
	return rc;
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

void mk_surgeon_normals(uint64_t seed, size_t n, float *out)
{
	uint64_t s[4];
	for (int i = 0; i < 4; i++) {
		/* splitmix64 */
		uint64_t zz = (seed += 0x9E3779B97F4A7C15ull);
		zz = (zz ^ (zz >> 30)) * 0xBF58476D1CE4E5B9ull;
		zz = (zz ^ (zz >> 27)) * 0x94D049BB133111EBull;
		s[i] = zz ^ (zz >> 31);
	}
	for (size_t i = 0; i < n; i += 2) {
		double u[2];
		for (int j = 0; j < 2; j++) {
			uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
			s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
			u[j] = (double)(r >> 11) * 0x1p-53;
		}
		double rad = sqrt(-2.0 * log(1.0 - u[0])), th = 6.283185307179586 * u[1];
		out[i] = (float)(rad * cos(th));
		if (i + 1 < n)
			out[i + 1] = (float)(rad * sin(th));
	}
}
