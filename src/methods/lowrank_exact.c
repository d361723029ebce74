/* exact.c - the thin SVD by LAPACK's sgesdd, and the exact path of
 * mk_lowrank_factor (on a CUDA device with opts.cuda: cuSOLVER's gesvd,
 * lowrank_cuda.c).
 *
 * Layout without a transposed copy: delta (m x n row-major) read as a
 * column-major array is delta^T.  sgesdd destroys its input, so the path
 * copies it once anyway; it arranges the copy to hold X = F^T in
 * column-major (q rows, p columns): a plain memcpy when F = delta, a
 * transposing copy when F = delta^T.  From X = U_x S VT_x:
 *   F = VT_x^T S U_x^T, so F's right singular vectors are U_x's columns,
 *   each contiguous: A's rows are U_x's first r columns as stored;
 *   F's left ones are VT_x's rows: B[i][j] = VT_x[j + i k], which is B
 *   row-major once each row's first r entries are moved down (in place).
 * sgesdd runs with JOBZ 'O': the larger of U_x and VT_x overwrites the
 * copy, the other is k x k, so the path holds the copy, a k x k factor
 * and sgesdd's workspace (about 5 k^2 floats), never a second matrix of
 * delta's size.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#include "lowrank_impl.h"

static int fits_int(uint64_t v)
{
	return v <= (uint64_t)INT_MAX;
}

int lr_gesdd_lwork(uint64_t rows, uint64_t cols, uint64_t *lwork, struct mk_err *err)
{
	uint64_t mn = rows < cols ? rows : cols, mx = rows < cols ? cols : rows;
	/* LAPACK's stated minimum for JOBZ = 'O' */
	uint64_t need = 3 * mn + (mx > 5 * mn * mn + 4 * mn ? mx : 5 * mn * mn + 4 * mn);

	if (!fits_int(rows) || !fits_int(cols) || !fits_int(rows * cols) || !fits_int(need))
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "a %llu x %llu SVD is beyond LAPACK's 32-bit sizes (its workspace: %llu floats)",
				  (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)need);
	int r = (int)rows, c = (int)cols, ld = r > 0 ? r : 1, q = -1, info = 0, iw;
	float w = 0, dummy = 0;
	sgesdd_("O", &r, &c, &dummy, &ld, &dummy, &dummy, &ld, &dummy, &ld, &w, &q, &iw, &info, 1);
	if (info != 0)
		return mk_err_set(err, MK_EIO, "LAPACK sgesdd's workspace query for %llu x %llu failed (info %d)",
				  (unsigned long long)rows, (unsigned long long)cols, info);
	/* the optimum comes back as a float: above 2^24 it may have been
	 * rounded down, so round it up by more than one float's ulp */
	double opt = ceil((double)w * (1.0 + 4 * (double)FLT_EPSILON)) + 1;
	uint64_t lw = opt > (double)need ? (uint64_t)opt : need;
	if (!fits_int(lw))
		lw = need;
	*lwork = lw;
	return 0;
}

uint64_t lr_gesdd_bytes(uint64_t rows, uint64_t cols)
{
	uint64_t k = rows < cols ? rows : cols, lw = 0;

	if (lr_gesdd_lwork(rows, cols, &lw, NULL))
		return 0;
	return 4 * (k * k + lw) + sizeof(int) * 8 * k;
}

/* JOBZ = 'O': the larger factor overwrites x, the other is k x k: no
 * second matrix of x's size (for an embedding, gigabytes). */
int lr_gesdd(struct lr_mem *mem, float *x, uint64_t rows, uint64_t cols, float *s, float **small,
	     struct mk_err *err)
{
	uint64_t k = rows < cols ? rows : cols, lw;
	int rc = lr_gesdd_lwork(rows, cols, &lw, err);

	*small = NULL;
	if (rc)
		return rc;
	float *sm = lr_alloc(mem, 4 * k * k), *work = lr_alloc(mem, 4 * lw);
	int *iwork = lr_alloc(mem, sizeof(int) * 8 * k);
	if (!sm || !work || !iwork) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory for a %llu x %llu SVD (%llu bytes)",
				(unsigned long long)rows, (unsigned long long)cols,
				(unsigned long long)lr_gesdd_bytes(rows, cols));
		goto out;
	}
	/* rows >= cols: U in x, VT (k x k) in sm; else U (k x k) in sm, VT in x */
	int r = (int)rows, c = (int)cols, ks = (int)k, l = (int)lw, info = 0, one = 1;
	float dummy;
	if (rows >= cols)
		sgesdd_("O", &r, &c, x, &r, s, &dummy, &one, sm, &ks, work, &l, iwork, &info, 1);
	else
		sgesdd_("O", &r, &c, x, &r, s, sm, &ks, &dummy, &one, work, &l, iwork, &info, 1);
	if (info != 0) {
		rc = mk_err_set(err, MK_EIO, info > 0 ?
				"LAPACK sgesdd did not converge on a %llu x %llu matrix (info %d)" :
				"LAPACK sgesdd refused a %llu x %llu matrix (info %d: that argument)",
				(unsigned long long)rows, (unsigned long long)cols, info);
		goto out;
	}
	*small = sm;
	sm = NULL;
out:
	lr_free(mem, iwork, sizeof(int) * 8 * k);
	lr_free(mem, work, 4 * lw);
	lr_free(mem, sm, 4 * k * k);
	return rc;
}

/* dst (column-major, ld m) = src (m x n row-major), i.e. src transposed
 * into row-major n x m; in tiles, for the caches */
static void transpose_copy(float *dst, const float *src, uint64_t m, uint64_t n)
{
	enum { T = 32 };
	for (uint64_t i0 = 0; i0 < m; i0 += T)
		for (uint64_t j0 = 0; j0 < n; j0 += T) {
			uint64_t i1 = i0 + T < m ? i0 + T : m, j1 = j0 + T < n ? j0 + T : n;
			for (uint64_t j = j0; j < j1; j++)
				for (uint64_t i = i0; i < i1; i++)
					dst[j * m + i] = src[i * n + j];
		}
}

uint64_t lr_exact_bytes(uint64_t m, uint64_t n, bool transpose, const struct mk_lowrank_opts *o)
{
	uint64_t k = m < n ? m : n, sdd = transpose ? lr_gesdd_bytes(m, n) : lr_gesdd_bytes(n, m);

	if (!sdd)
		return 0;
	/* the copy, s, then sgesdd's; afterwards only less (A, B, s and the
	 * residual's block: see mk_lowrank_working_set) */
	return 4 * m * n + 4 * k + sdd;
}

/* B row-major (p x r) from VT_x (k x p, leading dimension k): each
 * column's first r entries moved down, in place */
static float *compact(struct lr_mem *mem, float *vt, uint64_t k, uint64_t p, unsigned r)
{
	for (uint64_t i = 0; i < p && r < k; i++)
		memmove(vt + i * r, vt + i * k, 4 * (uint64_t)r);
	return lr_shrink(mem, vt, 4 * k * p, 4 * p * r);
}

int lr_exact(struct lr_mem *mem, const float *delta, uint64_t m, uint64_t n, bool transpose,
	     const struct mk_lowrank_opts *o, struct mk_lowrank *out, struct mk_err *err)
{
	uint64_t p = transpose ? n : m, q = transpose ? m : n, k = p < q ? p : q;
	float *x = lr_alloc(mem, 4 * p * q), *sm = NULL;
	int rc;

	out->s = lr_alloc(mem, 4 * k);
	if (!x || !out->s) {
		lr_free(mem, x, 4 * p * q);
		return mk_err_set(err, MK_ENOMEM, "out of memory for a copy of a %llu x %llu delta",
				  (unsigned long long)m, (unsigned long long)n);
	}
	out->ns = (unsigned)k;
	if (transpose)
		transpose_copy(x, delta, m, n);    /* X = F^T = delta, column-major */
	else
		memcpy(x, delta, 4 * m * n);       /* X = F^T = delta^T, column-major */
	/* q >= p: U_x (q x k) in x, VT_x (k x k) in sm; else U_x (q x q) in
	 * sm, VT_x (k x p, leading dimension k = q) in x */
	rc = o->cuda ? lr_gesvd_cuda(mem, x, q, p, out->s, &sm, o, err) : lr_gesdd(mem, x, q, p, out->s, &sm, err);
	if (rc) {
		lr_free(mem, x, 4 * p * q);
		return rc;
	}
	float *ux = q >= p ? x : sm, *vtx = q >= p ? sm : x;
	uint64_t uxb = 4 * q * k, vtb = 4 * k * p;

	unsigned r = lr_rank(out->s, (unsigned)k, 0, true, o);
	out->rank = r;
	if (r == 0) {
		lr_free(mem, ux, uxb);
		lr_free(mem, vtx, vtb);
		return 0;
	}
	out->a = lr_shrink(mem, ux, uxb, 4 * q * r);   /* A's rows: U_x's first r columns */
	out->b = compact(mem, vtx, k, p, r);
	return 0;
}
