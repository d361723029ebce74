/* randomized.c - the top k singular triplets of F by randomized subspace
 * iteration (Halko, Martinsson and Tropp, "Finding structure with
 * randomness", SIAM Review 53(2), 2011: algorithms 4.4 and 5.1).
 *
 *   Omega  q x k Gaussian (methods/rng.h's counter-based normals of `seed`)
 *   Q      = orth(F Omega)                      p x k
 *   repeat power_iters times:
 *          Z = orth(F^T Q);  Q = orth(F Z)      (re-orthonormalised each
 *                                                half-step: in float32 the
 *                                                plain power (F F^T)^i Omega
 *                                                loses the small directions)
 *   Z      = F^T Q = (Q^T F)^T                  q x k
 *   Z      = U_z S VT_z  (sgesdd; U_z overwrites Z)
 *   F ~= Q Q^T F = (Q VT_z^T) S U_z^T
 * so A's rows are U_z's first r columns as stored, and B (row-major,
 * i.e. column-major r x p) = VT_z[:r, :] Q^T, one sgemm.  orth() is
 * sgeqrf then sorgqr.  F is delta or delta^T, read in place by sgemm's
 * transpose flags: delta is never copied.  The cost: 2 + 2 power_iters
 * products of F with a k-column matrix, plus QRs and an SVD of q x k.
 *
 * With opts.cuda the range finder (everything before the small SVD) runs
 * on a CUDA device instead (lowrank_cuda.c), from the same Omega.
 *
 * The defaults, MK_LOWRANK_OVERSAMPLE = 16 and MK_LOWRANK_POWER_ITERS =
 * 2, come from measurements (test/tools/mk-lowrank-bench: planted
 * matrices with s_i = i^-alpha, full rank, or rank 64 plus Gaussian
 * noise; OpenBLAS on 2 shared cores, wall time of the whole call, the
 * error measurement included).  The error ratio randomized / exact at the
 * same rank, with oversample 16, by power iterations q:
 *
 *                              q=0    q=1    q=2    q=3    q=2 time  exact
 *   1024^2  a=0.5  r=128      1.240  1.035  1.011  1.005    0.13 s   0.89 s
 *   1024^2  a=1    r=128      1.509  1.033  1.008  1.003    0.16 s   0.83 s
 *   1024^2  noise  r=128      1.278  1.028  1.014  1.008    0.17 s   0.75 s
 *   4096^2  a=0.5  r=16       1.107  1.004  1.000  1.000    0.17 s   21 s
 *   4096^2  a=0.5  r=128      1.196  1.021  1.006  1.003    0.69 s   21 s
 *   4096^2  a=1    r=128      1.490  1.029  1.008  1.003    0.70 s   22 s
 *   4096^2  noise  r=128      1.156  1.011  1.005  1.004    1.42 s   65 s
 *
 * Without power iterations the error misses the 1.1 bar (up to 1.5 on
 * the faster decay, where the tail mixes into the captured subspace);
 * one iteration meets it everywhere (at most 1.035), two leave a margin
 * of ten (at most 1.014) for about 35% more time, three buy little more.
 * The oversample matters less: at q=2, 8 gives 1.016 at worst and 32
 * 1.011, each column costing as much as a column of the rank; 16 is the
 * usual middle.  At rank 128 on 4096 x 4096 the call takes 0.7 s against
 * sgesdd's 21 s (30x); on 4096 x 14336 see the report of the commit
 * that set these.
 */
#include <cblas.h>
#include <limits.h>
#include <string.h>
#include "methods/rng.h"
#include "lowrank_impl.h"

static int orth_lwork(uint64_t rows, unsigned k, uint64_t *lw)
{
	int r = (int)rows, c = (int)k, info = 0, q = -1;
	float w1 = 0, w2 = 0, dummy = 0;

	sgeqrf_(&r, &c, &dummy, &r, &dummy, &w1, &q, &info);
	if (info)
		return info;
	sorgqr_(&r, &c, &c, &dummy, &r, &dummy, &w2, &q, &info);
	if (info)
		return info;
	uint64_t a = (uint64_t)w1 + 1, b = (uint64_t)w2 + 1;
	a = a > b ? a : b;
	*lw = a > (uint64_t)k ? a : k;
	return 0;
}

static uint64_t qr_lwork(uint64_t p, uint64_t q, unsigned k)
{
	uint64_t a = 0, b = 0;
	if (orth_lwork(p, k, &a) || orth_lwork(q, k, &b))
		return 0;
	return a > b ? a : b;
}

static int orth(float *y, uint64_t rows, unsigned k, float *tau, float *work, uint64_t lw, struct mk_err *err)
{
	int r = (int)rows, c = (int)k, l = (int)lw, info = 0;

	sgeqrf_(&r, &c, y, &r, tau, work, &l, &info);
	if (!info)
		sorgqr_(&r, &c, &c, y, &r, tau, work, &l, &info);
	if (info)
		return mk_err_set(err, MK_EIO, "LAPACK's QR of a %llu x %u matrix failed (info %d)",
				  (unsigned long long)rows, k, info);
	return 0;
}

/* The phases' sizes, in bytes: one function for the run and the bound. */
struct phases {
	uint64_t z, y, s, tau, qwork, vtx, sdd, b;
};

static int phases(uint64_t p, uint64_t q, unsigned k, unsigned r, struct phases *ph)
{
	if (p * k > INT_MAX || q * k > INT_MAX)
		return -1;
	uint64_t qlw = qr_lwork(p, q, k), sdd = lr_gesdd_bytes(q, k);

	if (!qlw || !sdd)
		return -1;
	ph->z = 4 * q * k;
	ph->y = 4 * p * k;
	ph->s = 4 * (uint64_t)k;
	ph->tau = 4 * (uint64_t)k;
	ph->qwork = 4 * qlw;
	ph->vtx = 4 * (uint64_t)k * k;
	ph->sdd = sdd;                           /* VT_z, sgesdd's workspace */
	ph->b = 4 * p * r;
	return 0;
}

uint64_t lr_randomized_bytes(uint64_t m, uint64_t n, bool transpose, unsigned k,
			     const struct mk_lowrank_opts *o)
{
	uint64_t p = transpose ? n : m, q = transpose ? m : n;
	unsigned r = o->max_rank < k ? o->max_rank : k;
	struct phases ph;

	if (phases(p, q, k, r, &ph))
		return 0;
	uint64_t iter = ph.z + ph.y + ph.tau + ph.qwork;
	uint64_t svd = ph.z + ph.y + ph.s + ph.sdd;
	uint64_t back = ph.z + ph.y + ph.s + ph.vtx + ph.b;   /* U_z in Z's place */
	uint64_t w = iter > svd ? iter : svd;
	return w > back ? w : back;
}

int lr_randomized(struct lr_mem *mem, const float *delta, uint64_t m, uint64_t n, bool transpose,
		  unsigned k, double fro2, const struct mk_lowrank_opts *o, struct mk_lowrank *out,
		  struct mk_err *err)
{
	uint64_t p = transpose ? n : m, q = transpose ? m : n;
	/* delta read column-major is delta^T (n x m, leading dimension n) */
	enum CBLAS_TRANSPOSE opf = transpose ? CblasNoTrans : CblasTrans;    /* F   */
	enum CBLAS_TRANSPOSE opt = transpose ? CblasTrans : CblasNoTrans;    /* F^T */
	struct phases ph;
	float *z = NULL, *y = NULL, *tau = NULL, *qw = NULL, *vtx = NULL;
	int rc;

	if (phases(p, q, k, o->max_rank < k ? o->max_rank : k, &ph))
		return mk_err_set(err, MK_EUNSUPPORTED, "a %llu x %llu randomized SVD of %u columns is beyond LAPACK's 32-bit sizes",
				  (unsigned long long)m, (unsigned long long)n, k);
	z = lr_alloc(mem, ph.z);
	y = lr_alloc(mem, ph.y);
	if (!o->cuda) {
		tau = lr_alloc(mem, ph.tau);
		qw = lr_alloc(mem, ph.qwork);
	}
	if (!z || !y || (!o->cuda && (!tau || !qw))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory for a randomized SVD of a %llu x %llu delta",
				(unsigned long long)m, (unsigned long long)n);
		goto out;
	}
	uint64_t stream = mk_rng_stream(o->seed, "mk_lowrank", 0);
	for (uint64_t e = 0; e < q * k; e++)      /* Omega, column-major q x k */
		z[e] = (float)mk_rng_normal(stream, e);
	const blasint ld = (blasint)n, P = (blasint)p, Q = (blasint)q, K = (blasint)k;

	if (o->cuda) {          /* the same steps on the device: Y = Q, Z = F^T Q */
		if ((rc = lr_range_cuda(delta, m, n, transpose, k, o, y, z, err)))
			goto out;
	} else {
		uint64_t lw = ph.qwork / 4;
		cblas_sgemm(CblasColMajor, opf, CblasNoTrans, P, K, Q, 1.0f, delta, ld, z, Q, 0.0f, y, P);
		if ((rc = orth(y, p, k, tau, qw, lw, err)))
			goto out;
		for (unsigned it = 0; it < o->power_iters; it++) {
			cblas_sgemm(CblasColMajor, opt, CblasNoTrans, Q, K, P, 1.0f, delta, ld, y, P, 0.0f, z, Q);
			if ((rc = orth(z, q, k, tau, qw, lw, err)))
				goto out;
			cblas_sgemm(CblasColMajor, opf, CblasNoTrans, P, K, Q, 1.0f, delta, ld, z, Q, 0.0f, y, P);
			if ((rc = orth(y, p, k, tau, qw, lw, err)))
				goto out;
		}
		lr_free(mem, qw, ph.qwork);
		lr_free(mem, tau, ph.tau);
		qw = tau = NULL;
		cblas_sgemm(CblasColMajor, opt, CblasNoTrans, Q, K, P, 1.0f, delta, ld, y, P, 0.0f, z, Q);
	}

	out->s = lr_alloc(mem, ph.s);
	if (!out->s) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory for a randomized SVD of a %llu x %llu delta",
				(unsigned long long)m, (unsigned long long)n);
		goto out;
	}
	out->ns = k;
	/* q > k: U_z overwrites Z, VT_z is k x k */
	if ((rc = lr_gesdd(mem, z, q, k, out->s, &vtx, err)))
		goto out;

	unsigned r = lr_rank(out->s, k, fro2, false, o);
	out->rank = r;
	if (r > 0) {
		out->b = lr_alloc(mem, 4 * p * r);
		if (!out->b) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory for B (%llu x %u)", (unsigned long long)p, r);
			goto out;
		}
		/* B^T (r x p, column-major) = VT_z[:r, :] Q^T */
		cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, (blasint)r, P, K, 1.0f, vtx, K, y, P,
			    0.0f, out->b, (blasint)r);
		out->a = lr_shrink(mem, z, ph.z, 4 * q * r);
		z = NULL;
	}
out:
	lr_free(mem, vtx, ph.vtx);
	lr_free(mem, qw, ph.qwork);
	lr_free(mem, tau, ph.tau);
	lr_free(mem, y, ph.y);
	lr_free(mem, z, ph.z);
	return rc;
}
