/* omp.c - batched orthogonal matching pursuit, mergekit-tokensurgeon's
 * default approximation (approx.h).
 *
 * Per step, the correlations of every residual of the batch with every
 * candidate row are one sgemm (b x d times d x n, over blocks of
 * candidates so that the b x block buffer stays a few megabytes); that is
 * nearly all of the work.  The rest is per target and small: the picked
 * row orthogonalised against the ones before (classical Gram-Schmidt,
 * one pass, as mergekit does it; R gets the projections and the norm,
 * clamped at 1e-8), every 256 picks the basis re-orthogonalised by a
 * Householder QR (LAPACK sgeqrf/sorgqr, R premultiplied by the new R),
 * the residual recomputed as the target less its projection on the
 * basis, and at the end R c = Q^T t solved by back substitution.
 *
 * Picks compare |correlation| with a strict >, so a tie goes to the lower
 * index; a row picked before is never picked again. */
#include <cblas.h>
#include <math.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon_impl.h"

#define OMP_EPS 1e-8f
#define OMP_REORTH 256
#define OMP_BLOCK ((size_t)1 << 23) /* floats in the correlation buffer */

struct omp_state {
	size_t d, k;
	float *q;     /* k rows of d: the orthonormal basis, one row per pick */
	float *r;     /* k x k, row-major, upper triangular */
	float *qt;    /* k: Q^T target */
};

/* x . y in 16 running sums (that the compiler may keep in vector
 * registers without reassociating anything) */
static float dot(const float *x, const float *y, size_t n)
{
	float acc[16] = { 0 };
	size_t i = 0;
	for (; i + 16 <= n; i += 16)
		for (size_t l = 0; l < 16; l++)
			acc[l] += x[i + l] * y[i + l];
	for (; i < n; i++)
		acc[i & 15] += x[i] * y[i];
	float s = 0;
	for (size_t l = 0; l < 16; l++)
		s += acc[l];
	return s;
}

/* y += a x */
static void axpy(float a, const float *x, float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

/* the picked row a as pick t of one target: q_t and column t of R */
static void omp_extend(struct omp_state *s, const float *a, size_t t, float *tmp)
{
	size_t d = s->d, k = s->k;
	float *qn = s->q + t * d;
	double nrm = 0;

	if (t == 0) {
		for (size_t i = 0; i < d; i++)
			nrm += (double)a[i] * a[i];
		float n0 = (float)sqrt(nrm);
		s->r[0] = n0;
		float c = n0 > OMP_EPS ? n0 : OMP_EPS;
		for (size_t i = 0; i < d; i++)
			qn[i] = a[i] / c;
		return;
	}
	/* projections on the basis so far, then the remainder */
	for (size_t j = 0; j < t; j++)
		s->r[j * k + t] = tmp[j] = dot(s->q + j * d, a, d);
	memcpy(qn, a, d * sizeof(float));
	for (size_t j = 0; j < t; j++)
		axpy(-tmp[j], s->q + j * d, qn, d);
	for (size_t i = 0; i < d; i++)
		nrm += (double)qn[i] * qn[i];
	float n1 = (float)sqrt(nrm);
	if (n1 < OMP_EPS)
		n1 = OMP_EPS;
	s->r[t * k + t] = n1;
	for (size_t i = 0; i < d; i++)
		qn[i] /= n1;
}

/* Q's first m rows (as a column-major d x m matrix) by Householder QR:
 * Q <- Q', R <- R' R */
static int omp_reorth(struct omp_state *s, size_t m, struct mk_err *err)
{
	int d = (int)s->d, mm = (int)m, info = 0, lw = -1;
	size_t k = s->k;
	float wq, *tau, *work, *rn, *acc;

	if (s->d < m)
		return mk_err_set(err, MK_EINVAL, "omp: re-orthogonalising %zu picks in %zu dimensions: pick at most the "
				  "embedding width (-k)", m, s->d);
	sgeqrf_(&d, &mm, s->q, &d, &wq, &wq, &lw, &info);
	lw = (int)wq;
	float wq2;
	int lw2 = -1;
	sorgqr_(&d, &mm, &mm, s->q, &d, &wq, &wq2, &lw2, &info);
	if ((int)wq2 > lw)
		lw = (int)wq2;
	if (lw < 1)
		lw = 1;
	tau = surgeon_alloc(m, sizeof(float));
	work = surgeon_alloc((size_t)lw, sizeof(float));
	rn = surgeon_alloc(m * m, sizeof(float));
	acc = surgeon_alloc(m * m, sizeof(float));
	if (!tau || !work || !rn || !acc) {
		free(tau), free(work), free(rn), free(acc);
		return mk_err_set(err, MK_ENOMEM, "omp: out of memory re-orthogonalising %zu picks", m);
	}
	sgeqrf_(&d, &mm, s->q, &d, tau, work, &lw, &info);
	/* R' (upper triangle of the column-major result), row-major in rn */
	for (size_t i = 0; i < m; i++)
		for (size_t j = i; j < m; j++)
			rn[i * m + j] = s->q[j * s->d + i];
	if (info == 0)
		sorgqr_(&d, &mm, &mm, s->q, &d, tau, work, &lw, &info);
	if (info != 0) {
		free(tau), free(work), free(rn), free(acc);
		return mk_err_set(err, MK_EINVAL, "omp: LAPACK QR of %zu picks failed (info %d)", m, info);
	}
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < m; j++) {
			float v = 0;
			for (size_t l = i; l <= j; l++)
				v += rn[i * m + l] * s->r[l * k + j];
			acc[i * m + j] = v;
		}
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < m; j++)
			s->r[i * k + j] = acc[i * m + j];
	free(tau), free(work), free(rn), free(acc);
	return 0;
}

/* residual = t - Q Q^T t over the first m picks; qt = Q^T t */
static void omp_residual(struct omp_state *s, const float *t, size_t m, float *res)
{
	size_t d = s->d;

	for (size_t j = 0; j < m; j++)
		s->qt[j] = dot(s->q + j * d, t, d);
	memcpy(res, t, d * sizeof(float));
	for (size_t j = 0; j < m; j++)
		axpy(-s->qt[j], s->q + j * d, res, d);
}

void mk__surgeon_pick(const float *res, size_t b, const float *points, size_t n, size_t d, int64_t *idx, size_t k,
		      size_t t, float *corr, size_t blk, float *best)
{
	for (size_t i = 0; i < b; i++)
		best[i] = -2.0f, idx[i * k + t] = -1;
	for (size_t c0 = 0; c0 < n; c0 += blk) {
		size_t cn = n - c0 < blk ? n - c0 : blk;
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)cn, (int)d, 1.0f, res, (int)d,
			    points + c0 * d, (int)d, 0.0f, corr, (int)cn);
		for (size_t i = 0; i < b; i++) {
			/* |correlation|, -1 where picked before: the first
			 * largest wins */
			float *row = corr + i * cn;
			const int64_t *picked = idx + i * k;
			for (size_t j = 0; j < cn; j++)
				row[j] = fabsf(row[j]);
			for (size_t j = 0; j < t; j++)
				if ((size_t)picked[j] >= c0 && (size_t)picked[j] < c0 + cn)
					row[picked[j] - (int64_t)c0] = -1.0f;
			float bv = best[i];
			size_t bj = SIZE_MAX;
			for (size_t j = 0; j < cn; j++)
				if (row[j] > bv)
					bv = row[j], bj = j;
			if (bj != SIZE_MAX)
				best[i] = bv, idx[i * k + t] = (int64_t)(c0 + bj);
		}
	}
}

size_t mk__surgeon_pick_block(size_t b, size_t n)
{
	size_t blk = OMP_BLOCK / (b ? b : 1);
	if (blk < 256)
		blk = 256;
	return blk > n ? n : blk;
}

int mk_surgeon_omp(const float *targets, size_t b, const float *points, size_t n, size_t d, size_t k, int64_t *idx,
		   float *coef, struct mk_err *err)
{
	if (k == 0 || k > n)
		return mk_err_set(err, MK_EINVAL, "omp: cannot pick %zu of %zu shared tokens (-k from 1 to %zu)", k, n,
				  n);
	if (b == 0)
		return 0;
	if (d == 0 || d > INT32_MAX || n > INT32_MAX || b > INT32_MAX)
		return mk_err_set(err, MK_EINVAL, "omp: %zu x %zu candidates: dimensions out of range", n, d);

	size_t blk = mk__surgeon_pick_block(b, n);
	float *res = surgeon_alloc(b * d, sizeof(float));
	float *corr = surgeon_alloc(b * blk, sizeof(float));
	float *best = surgeon_alloc(b, sizeof(float));
	float *q = surgeon_alloc(b * k * d, sizeof(float));
	float *r = surgeon_alloc(b * k * k, sizeof(float));
	float *qt = surgeon_alloc(k, sizeof(float));
	float *tmp = surgeon_alloc(k, sizeof(float));
	int rc = 0;

	if (!res || !corr || !best || !q || !r || !qt || !tmp) {
		rc = mk_err_set(err, MK_ENOMEM, "omp: out of memory for a batch of %zu targets, k %zu, width %zu", b,
				k, d);
		goto out;
	}
	memcpy(res, targets, b * d * sizeof(float));

	for (size_t t = 0; t < k; t++) {
		mk__surgeon_pick(res, b, points, n, d, idx, k, t, corr, blk, best);
		for (size_t i = 0; i < b; i++) {
			struct omp_state s = { d, k, q + i * k * d, r + i * k * k, qt };
			omp_extend(&s, points + (size_t)idx[i * k + t] * d, t, tmp);
			if (t > 0 && t % OMP_REORTH == 0 && (rc = omp_reorth(&s, t + 1, err)) != 0)
				goto out;
			omp_residual(&s, targets + i * d, t + 1, res + i * d);
			if (t + 1 == k) {
				/* back substitution: R c = Q^T t */
				float *c = coef + i * k;
				for (size_t jj = k; jj-- > 0;) {
					float v = qt[jj];
					for (size_t l = jj + 1; l < k; l++)
						v -= s.r[jj * k + l] * c[l];
					c[jj] = v / s.r[jj * k + jj];
				}
			}
		}
	}
out:
	free(res), free(corr), free(best), free(q), free(r), free(qt), free(tmp);
	return rc;
}

void mk_surgeon_combine(const int64_t *idx, const float *coef, size_t b, size_t k, const float *rows2, size_t d2,
			float *out)
{
	for (size_t i = 0; i < b; i++) {
		float *o = out + i * d2;
		memset(o, 0, d2 * sizeof(float));
		for (size_t j = 0; j < k; j++) {
			const float *src = rows2 + (size_t)idx[i * k + j] * d2;
			float c = coef[i * k + j];
			for (size_t l = 0; l < d2; l++)
				o[l] += c * src[l];
		}
	}
}
