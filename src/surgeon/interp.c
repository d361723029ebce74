/* interp.c - common_interpolation (approx.h): the k nearest shared rows
 * of each target and their weights.
 *
 * Euclidean distances are computed as torch.cdist computes them for
 * matrices this size: sqrt(max(|x|^2 - 2 x.y + |y|^2, 1e-30)), the dot
 * products one sgemm; cosine distances as 1 - x.y / max(|x| |y|, 1e-6).
 * The k smallest are kept, nearest first (a tie: the lower index). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon_impl.h"

struct cand {
	float dist;
	int64_t i;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->dist != y->dist)
		return x->dist < y->dist ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* weights of one target t (d) over its k neighbours' rows (gathered, k x d) */
static int weigh(const float *t, const float *nb, const float *dist, size_t k, size_t d, bool cosine,
		 enum mk_surgeon_weights scheme, float *w, struct mk_err *err)
{
	if (scheme == MK_SURGEON_DISTPROP) {
		float sum = 0;
		for (size_t j = 0; j < k; j++) {
			float dj = dist[j];
			w[j] = cosine ? 1.0f - dj : 1.0f / (dj > 1e-6f ? dj : 1e-6f);
			sum += w[j];
		}
		if (sum < 1e-6f)
			sum = 1e-6f;
		for (size_t j = 0; j < k; j++)
			w[j] /= sum;
		return 0;
	}
	if (scheme == MK_SURGEON_LSQ) {
		/* A = nb^T (d x k): column-major d x k is nb row-major as is */
		size_t ldb = d > k ? d : k;
		float *a = surgeon_alloc(d * k, sizeof(float)), *bb = surgeon_alloc(ldb, sizeof(float));
		if (!a || !bb) {
			free(a), free(bb);
			return mk_err_set(err, MK_ENOMEM, "common_interpolation: out of memory");
		}
		memcpy(a, nb, d * k * sizeof(float));
		memcpy(bb, t, d * sizeof(float));
		int rc = mk__surgeon_lstsq((int)d, (int)k, 1, a, bb, err);
		if (rc == 0)
			memcpy(w, bb, k * sizeof(float));
		free(a), free(bb);
		return rc;
	}
	/* barycentric: [[G, 1], [1^T, 0]] x = [nb t; 1], G = nb nb^T */
	size_t m = k + 1;
	float *a = surgeon_alloc(m * m, sizeof(float)), *bb = surgeon_alloc(m, sizeof(float));
	if (!a || !bb) {
		free(a), free(bb);
		return mk_err_set(err, MK_ENOMEM, "common_interpolation: out of memory");
	}
	/* G is symmetric: row-major and column-major alike */
	cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, (int)k, (int)k, (int)d, 1.0f, nb, (int)d, nb, (int)d,
		    0.0f, a, (int)m);
	for (size_t j = 0; j < k; j++)
		a[k * m + j] = 1.0f, a[j * m + k] = 1.0f;
	a[k * m + k] = 0.0f;
	cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)k, (int)d, 1.0f, nb, (int)d, t, 1, 0.0f, bb, 1);
	bb[k] = 1.0f;
	int rc = mk__surgeon_lstsq((int)m, (int)m, 1, a, bb, err);
	if (rc == 0)
		memcpy(w, bb, k * sizeof(float));
	free(a), free(bb);
	return rc;
}

int mk_surgeon_interp(const float *targets, size_t b, const float *points, size_t n, size_t d, size_t k, bool cosine,
		      enum mk_surgeon_weights scheme, int64_t *idx, float *coef, struct mk_err *err)
{
	if (k == 0)
		k = n;
	if (k > n)
		return mk_err_set(err, MK_EINVAL,
				  "common_interpolation: cannot take %zu nearest of %zu shared tokens (-k at most %zu)",
				  k, n, n);
	if (b == 0)
		return 0;
	if (d > INT32_MAX || n > INT32_MAX || b > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "common_interpolation: dimensions out of range");

	float *dot = surgeon_alloc(n, sizeof(float));
	float *pn = surgeon_alloc(n, sizeof(float));
	float *nb = surgeon_alloc(k * d, sizeof(float));
	float *dist = surgeon_alloc(k, sizeof(float));
	struct cand *c = surgeon_alloc(n, sizeof(*c));
	int rc = 0;

	if (!dot || !pn || !nb || !dist || !c) {
		rc = mk_err_set(err, MK_ENOMEM, "common_interpolation: out of memory for %zu shared tokens", n);
		goto out;
	}
	for (size_t j = 0; j < n; j++) {
		const float *p = points + j * d;
		float s = 0;
		for (size_t l = 0; l < d; l++)
			s += p[l] * p[l];
		pn[j] = cosine ? sqrtf(s) : s;
	}
	for (size_t i = 0; i < b; i++) {
		const float *t = targets + i * d;
		float tn = 0;
		for (size_t l = 0; l < d; l++)
			tn += t[l] * t[l];
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)d, 1.0f, points, (int)d, t, 1, 0.0f, dot, 1);
		for (size_t j = 0; j < n; j++) {
			float v;
			if (cosine) {
				float den = sqrtf(tn) * pn[j];
				v = 1.0f - dot[j] / (den > 1e-6f ? den : 1e-6f);
			} else {
				v = tn - 2.0f * dot[j] + pn[j];
				v = sqrtf(v > 1e-30f ? v : 1e-30f);
			}
			c[j].dist = v, c[j].i = (int64_t)j;
		}
		qsort(c, n, sizeof(*c), cand_cmp);
		for (size_t j = 0; j < k; j++) {
			idx[i * k + j] = c[j].i;
			dist[j] = c[j].dist;
			memcpy(nb + j * d, points + (size_t)c[j].i * d, d * sizeof(float));
		}
		if ((rc = weigh(t, nb, dist, k, d, cosine, scheme, coef + i * k, err)) != 0)
			goto out;
	}
out:
	free(dot), free(pn), free(nb), free(dist), free(c);
	return rc;
}
