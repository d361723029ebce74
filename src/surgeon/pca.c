/* pca.c - landmark_pca (approx.h).
 *
 * With P_a, P_b the principal axes (columns, e = min(da, db) of them) of
 * the centred shared rows C_a (n x da) and C_b (n x db):
 *   M = (C_b P_b)^T (C_a P_a),  M = U S V^T,  R = U V^T,
 *   out = ((t - mean_a) P_a R) P_b^T + mean_b
 * which is mergekit's sequence (R as it takes it, U V^T of M with the
 * model's projections first).  R does not depend on the signs of M's
 * singular vectors; it does on those of P_a and P_b, which mk fixes
 * (approx.h) where torch.pca_lowrank leaves them to its random draw. */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon_impl.h"

/* column-major x (m x n) -> its left singular vectors' first e columns
 * in u (m x e, column-major), each signed by its largest entry; x is
 * destroyed */
static int left_vectors(float *x, int m, int n, int e, float *u, const char *what, struct mk_err *err)
{
	int mn = m < n ? m : n, info = 0, lw = -1, one = 1;
	float wq, dummy;
	float *s = surgeon_alloc((size_t)mn, sizeof(float));
	int *iw = surgeon_alloc(8 * (size_t)mn, sizeof(int));
	/* 'O': with m >= n U overwrites x; with m < n U goes to uu (m x m) */
	float *uu = m < n ? surgeon_alloc((size_t)m * m, sizeof(float)) : NULL;
	float *vt = m >= n ? surgeon_alloc((size_t)n * n, sizeof(float)) : NULL;
	int rc = 0;

	if (!s || !iw || (m < n && !uu) || (m >= n && !vt)) {
		rc = mk_err_set(err, MK_ENOMEM, "landmark_pca: out of memory for the SVD of the %s rows", what);
		goto out;
	}
	if (m < n)
		sgesdd_("O", &m, &n, x, &m, s, uu, &m, &dummy, &one, &wq, &lw, iw, &info, 1);
	else
		sgesdd_("O", &m, &n, x, &m, s, &dummy, &one, vt, &n, &wq, &lw, iw, &info, 1);
	lw = (int)wq > 1 ? (int)wq : 1;
	float *work = surgeon_alloc((size_t)lw, sizeof(float));
	if (!work) {
		rc = mk_err_set(err, MK_ENOMEM, "landmark_pca: out of memory for the SVD of the %s rows", what);
		goto out;
	}
	if (m < n)
		sgesdd_("O", &m, &n, x, &m, s, uu, &m, &dummy, &one, work, &lw, iw, &info, 1);
	else
		sgesdd_("O", &m, &n, x, &m, s, &dummy, &one, vt, &n, work, &lw, iw, &info, 1);
	free(work);
	if (info != 0) {
		rc = mk_err_set(err, MK_EINVAL, "landmark_pca: LAPACK sgesdd failed on the %s rows (info %d)", what,
				info);
		goto out;
	}
	const float *src = m < n ? uu : x;
	for (int j = 0; j < e; j++) {
		const float *c = src + (size_t)j * m;
		int at = 0;
		for (int i = 1; i < m; i++)
			if (fabsf(c[i]) > fabsf(c[at]))
				at = i;
		float sg = c[at] < 0 ? -1.0f : 1.0f;
		for (int i = 0; i < m; i++)
			u[(size_t)j * m + i] = sg * c[i];
	}
out:
	free(s), free(iw), free(uu), free(vt);
	return rc;
}

/* rows (n x d) less their mean, into c; the mean into mean */
static void centre(const float *rows, size_t n, size_t d, float *c, float *mean)
{
	for (size_t l = 0; l < d; l++) {
		float s = 0;
		for (size_t i = 0; i < n; i++)
			s += rows[i * d + l];
		mean[l] = s / (float)n;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < d; l++)
			c[i * d + l] = rows[i * d + l] - mean[l];
}

int mk_surgeon_landmark_pca(const float *targets, size_t b, const float *shared_donor, size_t n, size_t da,
			    const float *shared_model, size_t db, float *out, struct mk_err *err)
{
	size_t e = da < db ? da : db;
	if (n < e)
		return mk_err_set(err, MK_EINVAL,
				  "landmark_pca: %zu shared tokens for %zu principal axes: needs at least as many "
				  "shared tokens as the narrower embedding's width", n, e);
	if (b == 0)
		return 0;
	if (n > INT32_MAX || da > INT32_MAX || db > INT32_MAX || b > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "landmark_pca: dimensions out of range");

	float *ca = surgeon_alloc(n * da, sizeof(float)), *cb = surgeon_alloc(n * db, sizeof(float));
	float *ma = surgeon_alloc(da, sizeof(float)), *mb = surgeon_alloc(db, sizeof(float));
	float *x = surgeon_alloc(n * (da > db ? da : db), sizeof(float));
	float *pa = surgeon_alloc(da * e, sizeof(float)), *pb = surgeon_alloc(db * e, sizeof(float));
	float *apca = surgeon_alloc(n * e, sizeof(float)), *bpca = surgeon_alloc(n * e, sizeof(float));
	float *mm = surgeon_alloc(e * e, sizeof(float)), *rot = surgeon_alloc(e * e, sizeof(float));
	float *proj = surgeon_alloc(b * e, sizeof(float)), *rt = surgeon_alloc(b * e, sizeof(float));
	float *tc = surgeon_alloc(b * da, sizeof(float));
	int rc = 0, ie = (int)e;

	if (!ca || !cb || !ma || !mb || !x || !pa || !pb || !apca || !bpca || !mm || !rot || !proj || !rt || !tc) {
		rc = mk_err_set(err, MK_ENOMEM, "landmark_pca: out of memory for %zu shared tokens", n);
		goto out;
	}
	centre(shared_donor, n, da, ca, ma);
	centre(shared_model, n, db, cb, mb);
	/* row-major n x d is column-major d x n: its left vectors are the axes */
	memcpy(x, ca, n * da * sizeof(float));
	if ((rc = left_vectors(x, (int)da, (int)n, ie, pa, "donor's shared", err)) != 0)
		goto out;
	memcpy(x, cb, n * db * sizeof(float));
	if ((rc = left_vectors(x, (int)db, (int)n, ie, pb, "model's shared", err)) != 0)
		goto out;
	/* pa, pb column-major d x e = row-major e x d (axis per row) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, ie, (int)da, 1.0f, ca, (int)da, pa, (int)da, 0.0f,
		    apca, ie);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, ie, (int)db, 1.0f, cb, (int)db, pb, (int)db, 0.0f,
		    bpca, ie);
	/* M = bpca^T apca (e x e), row-major */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ie, ie, (int)n, 1.0f, bpca, ie, apca, ie, 0.0f, mm, ie);
	{
		/* M row-major = M^T column-major; SVD of M^T = V S U^T: its
		 * left vectors are M's right ones.  Simplest: transpose to
		 * column-major M and take both factors. */
		float *a = surgeon_alloc(e * e, sizeof(float)), *u = surgeon_alloc(e * e, sizeof(float));
		float *vt = surgeon_alloc(e * e, sizeof(float)), *s = surgeon_alloc(e, sizeof(float));
		int *iw = surgeon_alloc(8 * e, sizeof(int));
		int lw = -1, info = 0;
		float wq;
		if (!a || !u || !vt || !s || !iw) {
			free(a), free(u), free(vt), free(s), free(iw);
			rc = mk_err_set(err, MK_ENOMEM, "landmark_pca: out of memory");
			goto out;
		}
		for (size_t i = 0; i < e; i++)
			for (size_t j = 0; j < e; j++)
				a[j * e + i] = mm[i * e + j];
		sgesdd_("S", &ie, &ie, a, &ie, s, u, &ie, vt, &ie, &wq, &lw, iw, &info, 1);
		lw = (int)wq > 1 ? (int)wq : 1;
		float *work = surgeon_alloc((size_t)lw, sizeof(float));
		if (work)
			sgesdd_("S", &ie, &ie, a, &ie, s, u, &ie, vt, &ie, work, &lw, iw, &info, 1);
		free(work);
		if (!work || info != 0) {
			free(a), free(u), free(vt), free(s), free(iw);
			rc = work ? mk_err_set(err, MK_EINVAL, "landmark_pca: LAPACK sgesdd failed on the rotation (info %d)",
					       info)
				  : mk_err_set(err, MK_ENOMEM, "landmark_pca: out of memory");
			goto out;
		}
		/* R = U VT (column-major) -> rot row-major */
		cblas_sgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, ie, ie, ie, 1.0f, u, ie, vt, ie, 0.0f, a, ie);
		for (size_t i = 0; i < e; i++)
			for (size_t j = 0; j < e; j++)
				rot[i * e + j] = a[j * e + i];
		free(a), free(u), free(vt), free(s), free(iw);
	}
	for (size_t i = 0; i < b; i++)
		for (size_t l = 0; l < da; l++)
			tc[i * da + l] = targets[i * da + l] - ma[l];
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, ie, (int)da, 1.0f, tc, (int)da, pa, (int)da, 0.0f,
		    proj, ie);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, ie, ie, 1.0f, proj, ie, rot, ie, 0.0f, rt, ie);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)b, (int)db, ie, 1.0f, rt, ie, pb, (int)db, 0.0f, out,
		    (int)db);
	for (size_t i = 0; i < b; i++)
		for (size_t l = 0; l < db; l++)
			out[i * db + l] += mb[l];
out:
	free(ca), free(cb), free(ma), free(mb), free(x), free(pa), free(pb), free(apca), free(bpca), free(mm), free(rot),
		free(proj), free(rt), free(tc);
	return rc;
}
