/* stb.c - the sparse token basis (approx.h).
 *
 * The basis side's shared rows are centred, their covariance's singular
 * vectors taken (sgesdd; their signs do not matter: omp picks by
 * |correlation| and a flipped vector flips its coefficients, which the
 * final least squares undoes), and each of the first e vectors
 * approximated by omp over the centred rows.
 *
 * mergekit 0.1.5's command line passes its options object where
 * compute_token_basis wants k, so `-a stb` fails there before any
 * arithmetic; mk takes k as given (the intended -k). */
#include <cblas.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon_impl.h"

int mk_surgeon_stb_basis(const float *shared_donor, const float *shared_model, size_t n, size_t dd, size_t dm,
			 size_t k, float *donor_basis, float *model_basis, struct mk_err *err)
{
	const float *src = dd < dm ? shared_donor : shared_model;
	size_t w = dd < dm ? dd : dm, e = w;
	int iw = (int)w, info = 0, lw = -1;
	float wq;

	if (k == 0 || k > n)
		return mk_err_set(err, MK_EINVAL, "stb: cannot pick %zu of %zu shared tokens (-k from 1 to %zu)", k, n, n);
	if (n > INT32_MAX || w > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "stb: dimensions out of range");
	float *c = surgeon_alloc(n * w, sizeof(float)), *mean = surgeon_alloc(w, sizeof(float));
	float *cov = surgeon_alloc(w * w, sizeof(float)), *u = surgeon_alloc(w * w, sizeof(float));
	float *vt = surgeon_alloc(w * w, sizeof(float)), *s = surgeon_alloc(w, sizeof(float));
	int *iwork = surgeon_alloc(8 * w, sizeof(int));
	int64_t *idx = surgeon_alloc(e * k, sizeof(int64_t));
	float *coef = surgeon_alloc(e * k, sizeof(float)), *ut = surgeon_alloc(e * w, sizeof(float));
	float *work = NULL;
	int rc = 0;

	if (!c || !mean || !cov || !u || !vt || !s || !iwork || !idx || !coef || !ut) {
		rc = mk_err_set(err, MK_ENOMEM, "stb: out of memory for %zu shared tokens of width %zu", n, w);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < w; l++)
			mean[l] += src[i * w + l];
	for (size_t l = 0; l < w; l++)
		mean[l] /= (float)n;
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < w; l++)
			c[i * w + l] = src[i * w + l] - mean[l];
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, iw, iw, (int)n, 1.0f / (float)n, c, iw, c, iw, 0.0f, cov,
		    iw);
	/* symmetric: row- and column-major alike; U column-major, a vector per column */
	sgesdd_("S", &iw, &iw, cov, &iw, s, u, &iw, vt, &iw, &wq, &lw, iwork, &info, 1);
	lw = (int)wq > 1 ? (int)wq : 1;
	if (!(work = surgeon_alloc((size_t)lw, sizeof(float)))) {
		rc = mk_err_set(err, MK_ENOMEM, "stb: out of memory");
		goto out;
	}
	sgesdd_("S", &iw, &iw, cov, &iw, s, u, &iw, vt, &iw, work, &lw, iwork, &info, 1);
	if (info != 0) {
		rc = mk_err_set(err, MK_EINVAL, "stb: LAPACK sgesdd failed on the shared rows' covariance (info %d)", info);
		goto out;
	}
	/* the vectors, a row each: column-major u's columns as they lie */
	memcpy(ut, u, e * w * sizeof(float));
	if ((rc = mk_surgeon_omp(ut, e, c, n, w, k, idx, coef, err)) != 0)
		goto out;
	mk_surgeon_combine(idx, coef, e, k, shared_donor, dd, donor_basis);
	mk_surgeon_combine(idx, coef, e, k, shared_model, dm, model_basis);
out:
	free(c), free(mean), free(cov), free(u), free(vt), free(s), free(iwork), free(idx), free(coef), free(ut),
		free(work);
	return rc;
}

int mk_surgeon_stb(const float *targets, size_t b, const float *donor_mean, const float *donor_basis, size_t dd,
		   const float *model_basis, const float *model_mean, size_t dm, float *out, struct mk_err *err)
{
	size_t e = dd < dm ? dd : dm;
	if (b == 0)
		return 0;
	if (dd > INT32_MAX || b > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "stb: dimensions out of range");
	float *a = surgeon_alloc(dd * e, sizeof(float)), *rhs = surgeon_alloc(dd * b, sizeof(float));
	float *cf = surgeon_alloc(b * e, sizeof(float));
	int rc = 0;

	if (!a || !rhs || !cf) {
		rc = mk_err_set(err, MK_ENOMEM, "stb: out of memory for a batch of %zu", b);
		goto out;
	}
	memcpy(a, donor_basis, dd * e * sizeof(float));
	for (size_t i = 0; i < b; i++)
		for (size_t l = 0; l < dd; l++)
			rhs[i * dd + l] = targets[i * dd + l] - donor_mean[l];
	if ((rc = mk__surgeon_lstsq((int)dd, (int)e, (int)b, a, rhs, err)) != 0)
		goto out;
	for (size_t i = 0; i < b; i++)
		memcpy(cf + i * e, rhs + i * dd, e * sizeof(float));
	for (size_t i = 0; i < b; i++)
		memcpy(out + i * dm, model_mean, dm * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)dm, (int)e, 1.0f, cf, (int)e, model_basis,
		    (int)dm, 1.0f, out, (int)dm);
out:
	free(a), free(rhs), free(cf);
	return rc;
}
