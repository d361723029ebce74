/* lowrank_cuda.c - randomized.c's range finder on a CUDA device: the
 * 2 + 2 power_iters products with F and the QRs between them, by cuBLAS
 * and cuSOLVER; the small SVD and B stay on the host (randomized.c).
 *
 * libmk links the CUDA runtime statically (the Makefile) but not cuBLAS
 * or cuSOLVER, which the toolkit ships only as shared libraries: they are
 * loaded here at the first use (dlopen, never closed), so a machine
 * without them still runs mk, and this path answers MK_EUNSUPPORTED with
 * the loader's reason.  Their calls are declared here (handles as
 * pointers, status and enums as int: their C ABI), so that this file
 * compiles with cc, without the toolkit's headers.  Both libraries and
 * the runtime share the device's primary context: the runtime's device
 * pointers are theirs too.  Everything runs on the legacy default stream,
 * in order; the copies back wait for it.
 *
 * Device memory: delta (m n floats), Y (p k), Z (q k), tau (k), the QR
 * workspace.  Not counted in peak_bytes (host bytes only).
 *
 * Status: compiled in every CUDA build and tested by test_lowrank where
 * a device is present (the same factors as the CPU path, to float
 * rounding); without one the test checks the MK_EUNSUPPORTED answer.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include "lowrank_impl.h"

#ifndef MK_HAVE_CUDA

int lr_range_cuda(const float *delta, uint64_t m, uint64_t n, bool transpose, unsigned k,
		  const struct mk_lowrank_opts *o, float *y, float *z, struct mk_err *err)
{
	return mk_err_set(err, MK_EUNSUPPORTED, "this mk was built without CUDA (no nvcc at build time)");
}

#else

/* the CUDA runtime (libcudart_static) */
extern int cudaGetDeviceCount(int *count);
extern int cudaSetDevice(int device);
extern int cudaMalloc(void **p, size_t bytes);
extern int cudaFree(void *p);
extern int cudaMemcpy(void *dst, const void *src, size_t bytes, int kind);
extern int cudaDeviceSynchronize(void);
extern const char *cudaGetErrorString(int e);
enum { H2D = 1, D2H = 2, OP_N = 0, OP_T = 1 };

/* cuBLAS and cuSOLVER, loaded */
static struct {
	int (*blas_create)(void **h);
	int (*blas_destroy)(void *h);
	int (*sgemm)(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *a, int lda,
		     const float *b, int ldb, const float *beta, float *c, int ldc);
	int (*dn_create)(void **h);
	int (*dn_destroy)(void *h);
	int (*geqrf_size)(void *h, int m, int n, float *a, int lda, int *lwork);
	int (*geqrf)(void *h, int m, int n, float *a, int lda, float *tau, float *work, int lwork, int *info);
	int (*orgqr_size)(void *h, int m, int n, int k, const float *a, int lda, const float *tau, int *lwork);
	int (*orgqr)(void *h, int m, int n, int k, float *a, int lda, const float *tau, float *work, int lwork,
		     int *info);
	char why[256];
} L;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void *open_first(const char *const *names)
{
	void *h = NULL;
	for (; *names && !h; names++)
		h = dlopen(*names, RTLD_NOW | RTLD_LOCAL);
	return h;
}

static void load(void)
{
	static const char *const blas[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL };
	static const char *const dn[] = { "libcusolver.so.12", "libcusolver.so.11", "libcusolver.so", NULL };
	void *b = open_first(blas), *d = b ? open_first(dn) : NULL;

	if (!b || !d) {
		const char *e = dlerror();
		snprintf(L.why, sizeof L.why, "cannot load %s (%s)", b ? "cuSOLVER (libcusolver.so.12)" : "cuBLAS (libcublas.so.13)",
			 e ? e : "not found");
		return;
	}
#define SYM(lib, field, name) \
	if (!(*(void **)&L.field = dlsym(lib, name))) { \
		snprintf(L.why, sizeof L.why, "%s lacks %s", lib == b ? "cuBLAS" : "cuSOLVER", name); \
		L.sgemm = NULL; \
		return; \
	}
	SYM(b, blas_create, "cublasCreate_v2")
	SYM(b, blas_destroy, "cublasDestroy_v2")
	SYM(d, dn_create, "cusolverDnCreate")
	SYM(d, dn_destroy, "cusolverDnDestroy")
	SYM(d, geqrf_size, "cusolverDnSgeqrf_bufferSize")
	SYM(d, geqrf, "cusolverDnSgeqrf")
	SYM(d, orgqr_size, "cusolverDnSorgqr_bufferSize")
	SYM(d, orgqr, "cusolverDnSorgqr")
	SYM(b, sgemm, "cublasSgemm_v2")
#undef SYM
}

/* The handles of this thread, for its device: made at its first call
 * (cublasCreate costs tens of milliseconds, once per weight would add
 * up), kept for the thread's life. */
static __thread struct {
	void *blas, *dn;
	int device;
} tl;

struct gpu {
	void *blas, *dn;
	float *d, *y, *z, *tau, *work;
	int *info, lwork;
};

static int cu(int e, const char *what, struct mk_err *err)
{
	if (!e)
		return 0;
	return mk_err_set(err, MK_EIO, "CUDA: %s failed: %s", what, cudaGetErrorString(e));
}

static int lib(int st, const char *what, struct mk_err *err)
{
	if (!st)
		return 0;
	return mk_err_set(err, MK_EIO, "CUDA: %s failed (status %d)", what, st);
}

/* Q, in place: a = orth(a), rows x k */
static int orth(struct gpu *g, float *a, int rows, int k, struct mk_err *err)
{
	int rc = lib(L.geqrf(g->dn, rows, k, a, rows, g->tau, g->work, g->lwork, g->info), "cusolverDnSgeqrf", err);
	if (!rc)
		rc = lib(L.orgqr(g->dn, rows, k, k, a, rows, g->tau, g->work, g->lwork, g->info), "cusolverDnSorgqr", err);
	int info = 0;
	if (!rc && !(rc = cu(cudaMemcpy(&info, g->info, sizeof info, D2H), "copying LAPACK's info", err)) && info)
		rc = mk_err_set(err, MK_EIO, "cuSOLVER's QR of a %d x %d matrix failed (info %d)", rows, k, info);
	return rc;
}

int lr_range_cuda(const float *delta, uint64_t m, uint64_t n, bool transpose, unsigned k,
		  const struct mk_lowrank_opts *o, float *y, float *z, struct mk_err *err)
{
	int ndev = 0, rc;

	pthread_once(&load_once, load);
	if (!L.sgemm)
		return mk_err_set(err, MK_EUNSUPPORTED, "no randomized SVD on the GPU: %s", L.why);
	int e = cudaGetDeviceCount(&ndev);
	if (e || ndev <= o->cuda_device || o->cuda_device < 0)
		return mk_err_set(err, MK_EUNSUPPORTED, "no CUDA device %d (%d found%s%s)", o->cuda_device,
				  e ? 0 : ndev, e ? ": " : "", e ? cudaGetErrorString(e) : "");

	uint64_t p = transpose ? n : m, q = transpose ? m : n;
	const int P = (int)p, Q = (int)q, K = (int)k, ld = (int)n;
	const int opf = transpose ? OP_N : OP_T, opt = transpose ? OP_T : OP_N;   /* as randomized.c */
	const float one = 1, zero = 0;
	struct gpu g = { 0 };

	if ((rc = cu(cudaSetDevice(o->cuda_device), "cudaSetDevice", err)))
		return rc;
	if ((tl.blas || tl.dn) && tl.device != o->cuda_device) {
		if (tl.dn)
			L.dn_destroy(tl.dn);
		if (tl.blas)
			L.blas_destroy(tl.blas);
		tl.blas = tl.dn = NULL;
	}
	tl.device = o->cuda_device;
	if ((!tl.blas && (rc = lib(L.blas_create(&tl.blas), "cublasCreate", err))) ||
	    (!tl.dn && (rc = lib(L.dn_create(&tl.dn), "cusolverDnCreate", err))))
		return rc;
	g.blas = tl.blas;
	g.dn = tl.dn;
	if ((rc = cu(cudaMalloc((void **)&g.d, 4 * m * n), "cudaMalloc (delta)", err)) ||
	    (rc = cu(cudaMalloc((void **)&g.y, 4 * p * k), "cudaMalloc (Y)", err)) ||
	    (rc = cu(cudaMalloc((void **)&g.z, 4 * q * k), "cudaMalloc (Z)", err)) ||
	    (rc = cu(cudaMalloc((void **)&g.tau, 4 * (uint64_t)k), "cudaMalloc (tau)", err)) ||
	    (rc = cu(cudaMalloc((void **)&g.info, sizeof(int)), "cudaMalloc (info)", err)))
		goto out;
	int l1 = 0, l2 = 0, l3 = 0, l4 = 0;
	if ((rc = lib(L.geqrf_size(g.dn, P, K, g.y, P, &l1), "cusolverDnSgeqrf_bufferSize", err)) ||
	    (rc = lib(L.geqrf_size(g.dn, Q, K, g.z, Q, &l2), "cusolverDnSgeqrf_bufferSize", err)) ||
	    (rc = lib(L.orgqr_size(g.dn, P, K, K, g.y, P, g.tau, &l3), "cusolverDnSorgqr_bufferSize", err)) ||
	    (rc = lib(L.orgqr_size(g.dn, Q, K, K, g.z, Q, g.tau, &l4), "cusolverDnSorgqr_bufferSize", err)))
		goto out;
	g.lwork = l1 > l2 ? l1 : l2;
	g.lwork = g.lwork > l3 ? g.lwork : l3;
	g.lwork = g.lwork > l4 ? g.lwork : l4;
	g.lwork = g.lwork > 1 ? g.lwork : 1;
	if ((rc = cu(cudaMalloc((void **)&g.work, 4 * (uint64_t)g.lwork), "cudaMalloc (QR workspace)", err)) ||
	    (rc = cu(cudaMemcpy(g.d, delta, 4 * m * n, H2D), "copying delta to the device", err)) ||
	    (rc = cu(cudaMemcpy(g.z, z, 4 * q * k, H2D), "copying Omega to the device", err)))
		goto out;

	/* Y = F Omega; Q = orth(Y); power iterations; Z = F^T Q */
	if ((rc = lib(L.sgemm(g.blas, opf, OP_N, P, K, Q, &one, g.d, ld, g.z, Q, &zero, g.y, P), "cublasSgemm", err)) ||
	    (rc = orth(&g, g.y, P, K, err)))
		goto out;
	for (unsigned it = 0; it < o->power_iters; it++)
		if ((rc = lib(L.sgemm(g.blas, opt, OP_N, Q, K, P, &one, g.d, ld, g.y, P, &zero, g.z, Q), "cublasSgemm", err)) ||
		    (rc = orth(&g, g.z, Q, K, err)) ||
		    (rc = lib(L.sgemm(g.blas, opf, OP_N, P, K, Q, &one, g.d, ld, g.z, Q, &zero, g.y, P), "cublasSgemm", err)) ||
		    (rc = orth(&g, g.y, P, K, err)))
			goto out;
	if ((rc = lib(L.sgemm(g.blas, opt, OP_N, Q, K, P, &one, g.d, ld, g.y, P, &zero, g.z, Q), "cublasSgemm", err)) ||
	    (rc = cu(cudaDeviceSynchronize(), "the products", err)) ||
	    (rc = cu(cudaMemcpy(y, g.y, 4 * p * k, D2H), "copying Q back", err)) ||
	    (rc = cu(cudaMemcpy(z, g.z, 4 * q * k, D2H), "copying Z back", err)))
		goto out;
out:
	cudaFree(g.work);
	cudaFree(g.info);
	cudaFree(g.tau);
	cudaFree(g.z);
	cudaFree(g.y);
	cudaFree(g.d);
	return rc;
}

#endif
