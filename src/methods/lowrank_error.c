/* error.c - how far B A is from F: ||F - B A||_F^2, measured.
 *
 * The expansion ||F||^2 - 2 <F, B A> + ||B A||^2 cancels: at a relative
 * error e the three terms agree to e^2, so float products leave nothing
 * of an error near 1e-4.  Instead B A is formed a block of delta's rows
 * at a time (one sgemm into a buffer of about a megabyte) and the
 * difference squared is summed in double: m n r multiply-adds, no more
 * than one power iteration, and the error exactly of the factors made.
 *
 * Blocks follow delta's rows (contiguous).  F = delta: rows i of F are
 * B[i] A.  F = delta^T: delta = A^T B^T, and its rows i are
 * A[:, i]^T B^T. */
#include <cblas.h>
#include "lowrank_impl.h"

static uint64_t block_rows(uint64_t m, uint64_t n)
{
	uint64_t h = (1u << 18) / n;            /* 1 MiB of floats */
	h = h ? h : 1;
	return h < m ? h : m;
}

uint64_t lr_residual_bytes(uint64_t m, uint64_t n)
{
	return 4 * block_rows(m, n) * n;
}

int lr_residual(struct lr_mem *mem, const float *delta, uint64_t m, uint64_t n, bool transpose,
		const struct mk_lowrank *f, double *res2, struct mk_err *err)
{
	uint64_t h = block_rows(m, n), r = f->rank;
	double sum = 0;

	if (r == 0) {
		for (uint64_t i = 0; i < m * n; i++)
			sum += (double)delta[i] * delta[i];
		*res2 = sum;
		return 0;
	}
	float *c = lr_alloc(mem, 4 * h * n);
	if (!c)
		return mk_err_set(err, MK_ENOMEM, "out of memory for the residual of a %llu x %llu delta",
				  (unsigned long long)m, (unsigned long long)n);
	for (uint64_t i0 = 0; i0 < m; i0 += h) {
		uint64_t rows = m - i0 < h ? m - i0 : h;
		if (transpose)   /* A is r x m, B is n x r */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasTrans, (blasint)rows, (blasint)n, (blasint)r,
				    1.0f, f->a + i0, (blasint)m, f->b, (blasint)r, 0.0f, c, (blasint)n);
		else             /* B is m x r, A is r x n */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)rows, (blasint)n, (blasint)r,
				    1.0f, f->b + i0 * r, (blasint)r, f->a, (blasint)n, 0.0f, c, (blasint)n);
		const float *d = delta + i0 * n;
		for (uint64_t e = 0; e < rows * n; e++) {
			double v = (double)d[e] - (double)c[e];
			sum += v * v;
		}
	}
	lr_free(mem, c, 4 * h * n);
	*res2 = sum;
	return 0;
}
