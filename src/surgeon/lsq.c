/* lsq.c - least squares the way torch.linalg.lstsq does it on the CPU:
 * LAPACK's gelsy (QR with column pivoting, rank cut at rcond = float
 * epsilon x max(m, n)), so that rank-deficient systems (more neighbours
 * than dimensions) get the same minimum-norm answer. */
#include <float.h>
#include "mk/err.h"
#include "surgeon_impl.h"

int mk__surgeon_lstsq(int m, int n, int nrhs, float *a, float *b, struct mk_err *err)
{
	int ldb = m > n ? m : n, rank = 0, info = 0, lw = -1;
	float rcond = FLT_EPSILON * (float)ldb, wq;
	int *jpvt = surgeon_alloc((size_t)n, sizeof(int));

	if (!jpvt)
		return mk_err_set(err, MK_ENOMEM, "least squares: out of memory (%d x %d)", m, n);
	sgelsy_(&m, &n, &nrhs, a, &m, b, &ldb, jpvt, &rcond, &rank, &wq, &lw, &info);
	lw = (int)wq > 1 ? (int)wq : 1;
	float *work = surgeon_alloc((size_t)lw, sizeof(float));
	if (!work) {
		free(jpvt);
		return mk_err_set(err, MK_ENOMEM, "least squares: out of memory (%d x %d)", m, n);
	}
	sgelsy_(&m, &n, &nrhs, a, &m, b, &ldb, jpvt, &rcond, &rank, work, &lw, &info);
	free(work), free(jpvt);
	if (info != 0)
		return mk_err_set(err, MK_EINVAL, "least squares: LAPACK sgelsy refused a %d x %d system (info %d)", m,
				  n, info);
	return 0;
}
