/* surgeon_impl.h - src/surgeon's private helpers: the LAPACK routines it
 * calls (Fortran interface, column-major) and a checked allocation. */
#ifndef MK_SURGEON_IMPL_H
#define MK_SURGEON_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau, float *work, const int *lwork,
	     int *info);
void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda, const float *tau, float *work,
	     const int *lwork, int *info);
void sgelsy_(const int *m, const int *n, const int *nrhs, float *a, const int *lda, float *b, const int *ldb,
	     int *jpvt, const float *rcond, int *rank, float *work, const int *lwork, int *info);
void spotrf_(const char *uplo, const int *n, float *a, const int *lda, int *info, size_t uplo_len);
void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s, float *u,
	     const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork, int *iwork, int *info,
	     size_t jobz_len);

/* calloc of n * size bytes, NULL on overflow too */
static inline void *surgeon_alloc(size_t n, size_t size)
{
	if (size && n > SIZE_MAX / size)
		return NULL;
	return calloc(n ? n : 1, size ? size : 1);
}

/* Least squares as torch.linalg.lstsq solves it on the CPU (LAPACK's
 * gelsy, rcond = float epsilon x max(m, n)): a is m x n column-major
 * (destroyed), b is max(m, n) x nrhs column-major, the solution in its
 * first n rows.  lsq.c. */
struct mk_err;
int mk__surgeon_lstsq(int m, int n, int nrhs, float *a, float *b, struct mk_err *err);

/* One pick of a batched pursuit (omp.c): for each of the b residuals
 * (b x d), the candidate row (n x d) of the largest |correlation| not
 * among its first t picks (idx, b x k) goes to idx[i * k + t]; the
 * correlations are one sgemm per block of blk candidates
 * (mk__surgeon_pick_block) into corr (b x blk); best: b floats. */
void mk__surgeon_pick(const float *res, size_t b, const float *points, size_t n, size_t d, int64_t *idx, size_t k,
		      size_t t, float *corr, size_t blk, float *best);
size_t mk__surgeon_pick_block(size_t b, size_t n);

#endif
