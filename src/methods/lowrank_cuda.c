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

int lr_gesvd_cuda(struct lr_mem *mem, float *x, uint64_t rows, uint64_t cols, float *s, float **small,
		  const struct mk_lowrank_opts *o, struct mk_err *err)
{
	*small = NULL;
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
	int (*gesvd_size)(void *h, int m, int n, int *lwork);
	int (*gesvd)(void *h, signed char jobu, signed char jobvt, int m, int n, float *a, int lda, float *s, float *u,
		     int ldu, float *vt, int ldvt, float *work, int lwork, float *rwork, int *info);
	int (*geam)(void *h, int ta, int tb, int m, int n, const float *alpha, const float *a, int lda,
		    const float *beta, const float *b, int ldb, float *c, int ldc);
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
	SYM(d, gesvd_size, "cusolverDnSgesvd_bufferSize")
	SYM(d, gesvd, "cusolverDnSgesvd")
	SYM(b, geam, "cublasSgeam")
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

/* The libraries, the device o->cuda_device and this thread's handles
 * for it, into g: 0, or MK_EUNSUPPORTED (nothing to run on) or MK_EIO. */
static int dev_open(const struct mk_lowrank_opts *o, struct gpu *g, const char *what, struct mk_err *err)
{
	int ndev = 0, rc;

	pthread_once(&load_once, load);
	if (!L.sgemm)
		return mk_err_set(err, MK_EUNSUPPORTED, "no %s on the GPU: %s", what, L.why);
	int e = cudaGetDeviceCount(&ndev);
	if (e || ndev <= o->cuda_device || o->cuda_device < 0)
		return mk_err_set(err, MK_EUNSUPPORTED, "no CUDA device %d (%d found%s%s)", o->cuda_device,
				  e ? 0 : ndev, e ? ": " : "", e ? cudaGetErrorString(e) : "");
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
	g->blas = tl.blas;
	g->dn = tl.dn;
	return 0;
}

int lr_range_cuda(const float *delta, uint64_t m, uint64_t n, bool transpose, unsigned k,
		  const struct mk_lowrank_opts *o, float *y, float *z, struct mk_err *err)
{
	uint64_t p = transpose ? n : m, q = transpose ? m : n;
	const int P = (int)p, Q = (int)q, K = (int)k, ld = (int)n;
	const int opf = transpose ? OP_N : OP_T, opt = transpose ? OP_T : OP_N;   /* as randomized.c */
	const float one = 1, zero = 0;
	struct gpu g = { 0 };
	int rc = dev_open(o, &g, "randomized SVD", err);

	if (rc)
		return rc;
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

/* lr_gesdd's contract on the device, by cusolverDnSgesvd (one-sided
 * QR-based; it takes rows >= cols only, so a wide x is transposed on the
 * device first and the factors transposed back, by cublasSgeam). */
int lr_gesvd_cuda(struct lr_mem *mem, float *x, uint64_t rows, uint64_t cols, float *s, float **small,
		  const struct mk_lowrank_opts *o, struct mk_err *err)
{
	uint64_t k = rows < cols ? rows : cols, tall = rows >= cols ? rows : cols;
	const float one = 1, zero = 0;
	float *da = NULL, *dt = NULL, *du = NULL, *dvt = NULL, *ds = NULL, *dw = NULL, *sm = NULL;
	int *dinfo = NULL, lwork = 0, info = 0;
	struct gpu g = { 0 };
	int rc;

	*small = NULL;
	if (rows > INT32_MAX || cols > INT32_MAX || rows * cols > INT32_MAX)
		return mk_err_set(err, MK_EUNSUPPORTED, "a %llu x %llu SVD is beyond cuSOLVER's 32-bit sizes",
				  (unsigned long long)rows, (unsigned long long)cols);
	if ((rc = dev_open(o, &g, "exact SVD", err)))
		return rc;
	const int T = (int)tall, K = (int)k, R = (int)rows, C = (int)cols;
	if (!(sm = lr_alloc(mem, 4 * k * k)))
		return mk_err_set(err, MK_ENOMEM, "out of memory for a %llu x %llu SVD's factor",
				  (unsigned long long)k, (unsigned long long)k);
	if ((rc = cu(cudaMalloc((void **)&da, 4 * rows * cols), "cudaMalloc (delta)", err)) ||
	    (rc = cu(cudaMalloc((void **)&du, 4 * tall * k), "cudaMalloc (U)", err)) ||
	    (rc = cu(cudaMalloc((void **)&dvt, 4 * k * k), "cudaMalloc (VT)", err)) ||
	    (rc = cu(cudaMalloc((void **)&ds, 4 * k), "cudaMalloc (S)", err)) ||
	    (rc = cu(cudaMalloc((void **)&dinfo, sizeof(int)), "cudaMalloc (info)", err)) ||
	    (rc = cu(cudaMemcpy(da, x, 4 * rows * cols, H2D), "copying delta to the device", err)))
		goto out;
	if (rows < cols) {   /* the tall one: x^T, cols x rows */
		if ((rc = cu(cudaMalloc((void **)&dt, 4 * rows * cols), "cudaMalloc (delta^T)", err)) ||
		    (rc = lib(L.geam(g.blas, OP_T, OP_N, C, R, &one, da, R, &zero, da, C, dt, C), "cublasSgeam", err)))
			goto out;
		float *t = da;
		da = dt;
		dt = t;
	}
	if ((rc = lib(L.gesvd_size(g.dn, T, K, &lwork), "cusolverDnSgesvd_bufferSize", err)) ||
	    (rc = cu(cudaMalloc((void **)&dw, 4 * (uint64_t)(lwork > 1 ? lwork : 1)), "cudaMalloc (workspace)", err)) ||
	    (rc = lib(L.gesvd(g.dn, 'S', 'S', T, K, da, T, ds, du, T, dvt, K, dw, lwork, NULL, dinfo), "cusolverDnSgesvd",
		      err)) ||
	    (rc = cu(cudaMemcpy(&info, dinfo, sizeof(info), D2H), "copying gesvd's info", err)))
		goto out;
	if (info) {
		rc = mk_err_set(err, MK_EIO, "cuSOLVER's SVD of a %llu x %llu matrix failed (info %d)",
				(unsigned long long)rows, (unsigned long long)cols, info);
		goto out;
	}
	if ((rc = cu(cudaMemcpy(s, ds, 4 * k, D2H), "copying S back", err)))
		goto out;
	if (rows >= cols) {   /* U (rows x k) into x, VT (k x k) into sm */
		rc = cu(cudaMemcpy(x, du, 4 * rows * k, D2H), "copying U back", err);
		if (!rc)
			rc = cu(cudaMemcpy(sm, dvt, 4 * k * k, D2H), "copying VT back", err);
	} else {
		/* x^T = U' S V'^T: x's U = V' = (V'^T)^T (k x k), x's VT = U'^T (k x cols) */
		if ((rc = lib(L.geam(g.blas, OP_T, OP_N, K, K, &one, dvt, K, &zero, dvt, K, dt, K), "cublasSgeam", err)) ||
		    (rc = cu(cudaMemcpy(sm, dt, 4 * k * k, D2H), "copying U back", err)) ||
		    (rc = lib(L.geam(g.blas, OP_T, OP_N, K, C, &one, du, C, &zero, du, C, dt, K), "cublasSgeam", err)) ||
		    (rc = cu(cudaMemcpy(x, dt, 4 * k * cols, D2H), "copying VT back", err)))
			goto out;
	}
out:
	cudaFree(dw);
	cudaFree(dinfo);
	cudaFree(ds);
	cudaFree(dvt);
	cudaFree(du);
	cudaFree(dt);
	cudaFree(da);
	if (rc)
		lr_free(mem, sm, 4 * k * k);
	else
		*small = sm;
	return rc;
}

#endif
