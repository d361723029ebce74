/* lowrank_impl.h - what the files of src/methods (lowrank*) share: the LAPACK
 * routines they call, the allocation ledger behind peak_bytes and
 * mk_lowrank_working_set, and each file's entry.  Private to src/methods (lowrank*).
 *
 * LAPACK's Fortran interface as OpenBLAS exports it (libopenblas carries
 * LAPACK; mk links nothing more): 32-bit integers (Debian's OpenBLAS is
 * not ILP64), every argument by address, and one hidden length argument
 * per CHARACTER argument, at the end (gfortran's convention; harmless to
 * a C translation).  Matrices are column-major. */
#ifndef MK_EXTRACT_LOWRANK_IMPL_H
#define MK_EXTRACT_LOWRANK_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "methods/lowrank.h"

void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
	     float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork,
	     int *iwork, int *info, size_t jobz_len);
void sgeqrf_(const int *m, const int *n, float *a, const int *lda, float *tau, float *work,
	     const int *lwork, int *info);
void sorgqr_(const int *m, const int *n, const int *k, float *a, const int *lda, const float *tau,
	     float *work, const int *lwork, int *info);

/* The ledger: every buffer of a call goes through it, with its size. */
struct lr_mem {
	uint64_t cur, peak;
};

void *lr_alloc(struct lr_mem *mem, uint64_t bytes);
void lr_free(struct lr_mem *mem, void *p, uint64_t bytes);
/* Shrink a buffer of `old` bytes to `bytes` (the same one if realloc
 * cannot: glibc always can). */
void *lr_shrink(struct lr_mem *mem, void *p, uint64_t old, uint64_t bytes);

/* exact.c.  The thin SVD of the column-major rows x cols matrix `x` by
 * sgesdd (JOBZ 'O'): x = U diag(s) VT with k = min(rows, cols); the
 * larger factor overwrites x (rows >= cols: U, rows x k, leading
 * dimension rows; else VT, k x cols, leading dimension k), the other one
 * (k x k) is allocated here as *small; the workspace is freed before it
 * returns. */
int lr_gesdd(struct lr_mem *mem, float *x, uint64_t rows, uint64_t cols, float *s, float **small,
	     struct mk_err *err);
/* sgesdd's workspace for that shape, in floats (the queried optimum,
 * rounded up); MK_EUNSUPPORTED beyond 32-bit integers. */
int lr_gesdd_lwork(uint64_t rows, uint64_t cols, uint64_t *lwork, struct mk_err *err);
/* The bytes lr_gesdd holds at its peak: the small factor, workspace, integers. */
uint64_t lr_gesdd_bytes(uint64_t rows, uint64_t cols);

/* The exact path: F (p x q) as in lowrank.h, out->s, a, b and rank set
 * (not scaled); `fro2` = ||F||_F^2. */
int lr_exact(struct lr_mem *mem, const float *delta, uint64_t m, uint64_t n, bool transpose,
	     const struct mk_lowrank_opts *o, struct mk_lowrank *out, struct mk_err *err);
uint64_t lr_exact_bytes(uint64_t m, uint64_t n, bool transpose, const struct mk_lowrank_opts *o);

/* randomized.c: the same by subspace iteration, with k columns. */
int lr_randomized(struct lr_mem *mem, const float *delta, uint64_t m, uint64_t n, bool transpose,
		  unsigned k, double fro2, const struct mk_lowrank_opts *o, struct mk_lowrank *out,
		  struct mk_err *err);
uint64_t lr_randomized_bytes(uint64_t m, uint64_t n, bool transpose, unsigned k,
			     const struct mk_lowrank_opts *o);

/* lowrank_cuda.c: lr_randomized's range finder on the device
 * o->cuda_device, from Omega in z (q x k column-major): on return y holds
 * Q (p x k) and z holds F^T Q (q x k), in host memory.  MK_EUNSUPPORTED
 * (nothing done) without CUDA, a device, cuBLAS or cuSOLVER; MK_EIO when
 * a call fails. */
int lr_range_cuda(const float *delta, uint64_t m, uint64_t n, bool transpose, unsigned k,
		  const struct mk_lowrank_opts *o, float *y, float *z, struct mk_err *err);

/* lowrank_cuda.c: lr_gesdd's contract (x overwritten by the larger
 * factor, the k x k one allocated through mem into *small) computed on
 * the device by cuSOLVER's gesvd.  MK_EUNSUPPORTED (nothing done, x
 * intact) without CUDA, a device or the libraries; MK_EIO when a call
 * fails. */
int lr_gesvd_cuda(struct lr_mem *mem, float *x, uint64_t rows, uint64_t cols, float *s, float **small,
		  const struct mk_lowrank_opts *o, struct mk_err *err);

/* rank.c: the rank the rules of lowrank.h allow among the ns singular
 * values s (descending); `total` is the sum of all s_i^2 (||F||_F^2);
 * `complete`: s holds every singular value (exact), else the energy rule
 * may ask for more than ns, which max_rank then bounds. */
unsigned lr_rank(const float *s, unsigned ns, double total, bool complete, const struct mk_lowrank_opts *o);

/* error.c: ||F - B A||_F^2 (out's factors; F from delta), in blocks of
 * delta's rows. */
int lr_residual(struct lr_mem *mem, const float *delta, uint64_t m, uint64_t n, bool transpose,
		const struct mk_lowrank *f, double *res2, struct mk_err *err);
uint64_t lr_residual_bytes(uint64_t m, uint64_t n);

#endif
