/* device.cu - the CUDA side of mk/cuda.h: the runtime calls ctx.c makes
 * (dev.h), the kernel over a launch's pieces, and the timings.  The
 * element code is kern.h's, shared with the host. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kern.h"
#include "dev.h"
extern "C" {
#include "cuda/cuda.h"
}

extern "C" int mkcu_dev_built(void)
{
	return 1;
}

/* Why cudaGetDeviceCount found nothing, in words. */
static const char *no_device_why(cudaError_t e)
{
	if (e == cudaSuccess || e == cudaErrorNoDevice)
		return "no CUDA device";
	if (e == cudaErrorInsufficientDriver)
		return "no CUDA driver, or one older than this mk's CUDA runtime (cudaErrorInsufficientDriver)";
	return cudaGetErrorString(e);
}

extern "C" int mkcu_dev_count(const char **why)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n <= 0) {
		*why = no_device_why(e);
		return 0;
	}
	return n;
}

/* ------------------------------------------------------------------ kernel */


/* blockIdx.y: the piece; each thread does MKCU_U elements MKCU_THREADS
 * apart per turn (coalesced loads, several in flight), grid-stride over
 * the piece.  The descriptor is copied to registers first. */
__global__ static void __launch_bounds__(MKCU_THREADS)
mkcu_kernel(const struct mkcu_piece *__restrict__ P, const struct mkcu_in *__restrict__ I)
{
	const struct mkcu_piece p = P[blockIdx.y];
	const struct mkcu_in *in = I + p.in0;
	const uint64_t span = (uint64_t)gridDim.x * MKCU_THREADS * MKCU_U;

	for (uint64_t k0 = (uint64_t)blockIdx.x * MKCU_THREADS * MKCU_U + threadIdx.x; k0 < p.count; k0 += span)
		mkcu_run(&p, in, k0, MKCU_THREADS);
}

/* One wave: `resident` blocks share the pieces (grid.x blocks each, at
 * most what the longest piece needs); each block strides over its piece. */
static int launch_kernel(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np, uint64_t maxcount,
			 int resident, cudaStream_t s)
{
	uint64_t need = (maxcount + (uint64_t)MKCU_THREADS * MKCU_U - 1) / ((uint64_t)MKCU_THREADS * MKCU_U);
	uint64_t target = (uint64_t)(resident > 0 ? resident : 1024), gx = (target + np - 1) / np;

	if (!np || !maxcount)
		return 0;
	if (gx > need)
		gx = need;
	if (gx < 1)
		gx = 1;
	mkcu_kernel<<<dim3((unsigned)gx, (unsigned)np), MKCU_THREADS, 0, s>>>(P, I);
	return (int)cudaGetLastError();
}

/* ------------------------------------------------------ matrix product */

/* y = x w^T (mkcu_host_gemm_nt's arithmetic): a block computes a tile of
 * GT_M rows of x by GT_N rows of w, staging GT_K columns of both at a
 * time in shared memory; a thread owns 4 x 4 outputs (rows ty + 16 i,
 * columns tx + 16 j) and adds k in ascending order, one __fmaf_rn each,
 * from 0, so every output is summed in the host loop's order. */
#define GT_M 64
#define GT_N 64
#define GT_K 16
#define GT_THREADS 256
/* one loop stages both tiles; 16 x 16 threads of 4 x 4 outputs each */
static_assert(GT_M == GT_N && GT_M == 64 && GT_THREADS == 256, "gemm_nt_kernel's tiling");

__global__ static void __launch_bounds__(GT_THREADS)
gemm_nt_kernel(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y, uint64_t n,
	       uint64_t in, uint64_t outd)
{
	__shared__ float xs[GT_K][GT_M + 1], ws[GT_K][GT_N + 1];
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	const uint64_t r0 = (uint64_t)blockIdx.y * GT_M, c0 = (uint64_t)blockIdx.x * GT_N;
	float acc[4][4];

	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;
	for (uint64_t k0 = 0; k0 < in; k0 += GT_K) {
		const int kn = in - k0 < GT_K ? (int)(in - k0) : GT_K;
		for (int e = threadIdx.x; e < GT_M * GT_K; e += GT_THREADS) {
			const int r = e / GT_K, kk = e % GT_K;
			const uint64_t gr = r0 + r, gc = c0 + r;
			xs[kk][r] = gr < n && kk < kn ? x[gr * in + k0 + kk] : 0.0f;
			ws[kk][r] = gc < outd && kk < kn ? w[gc * in + k0 + kk] : 0.0f;
		}
		__syncthreads();
		for (int kk = 0; kk < kn; kk++) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				a[i] = xs[kk][ty + 16 * i];
#pragma unroll
			for (int j = 0; j < 4; j++)
				b[j] = ws[kk][tx + 16 * j];
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
	for (int i = 0; i < 4; i++) {
		const uint64_t r = r0 + ty + 16 * i;
		if (r >= n)
			continue;
		for (int j = 0; j < 4; j++) {
			const uint64_t c = c0 + tx + 16 * j;
			if (c < outd)
				y[r * outd + c] = acc[i][j];
		}
	}
}

extern "C" int mkcu_dev_gemm_nt(const float *x, const float *w, float *y, uint64_t n, uint64_t in, uint64_t outd)
{
	const uint64_t gx = (outd + GT_N - 1) / GT_N, gy = (n + GT_M - 1) / GT_M;

	if (!n || !outd)
		return 0;
	if (gx > 0x7fffffffu || gy > 65535u)
		return (int)cudaErrorInvalidConfiguration;
	gemm_nt_kernel<<<dim3((unsigned)gx, (unsigned)gy), GT_THREADS>>>(x, w, y, n, in, outd);
	return (int)cudaGetLastError();
}

extern "C" int mkcu_dev_put(void *dst, const void *src, size_t n)
{
	return (int)cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
}

extern "C" int mkcu_dev_get(void *dst, const void *src, size_t n)
{
	return (int)cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
}

/* -------------------------------------------------------------- runtime */

extern "C" int mkcu_dev_open(int device, struct mkcu_dev_info *info, const char **why)
{
	cudaDeviceProp pr;
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);

	if (e != cudaSuccess || n == 0) {
		*why = no_device_why(e);
		return e != cudaSuccess ? (int)e : (int)cudaErrorNoDevice;
	}
	if (device < 0 || device >= n) {
		*why = "no such CUDA device";
		return (int)cudaErrorInvalidDevice;
	}
	if ((e = cudaSetDevice(device)) != cudaSuccess || (e = cudaGetDeviceProperties(&pr, device)) != cudaSuccess) {
		*why = cudaGetErrorString(e);
		return (int)e;
	}
	if (info) {
		int per_sm = 0;
		if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mkcu_kernel, MKCU_THREADS, 0) != cudaSuccess ||
		    per_sm < 1)
			per_sm = 4;
		info->resident_blocks = per_sm * pr.multiProcessorCount;
		snprintf(info->name, sizeof(info->name), "%s", pr.name);
		info->cc_major = pr.major;
		info->cc_minor = pr.minor;
		info->sm_count = pr.multiProcessorCount;
		info->mem_total = pr.totalGlobalMem;
	}
	return 0;
}

extern "C" int mkcu_dev_use(int device)
{
	return (int)cudaSetDevice(device);
}

extern "C" void *mkcu_dev_host_alloc(size_t n)
{
	void *p = NULL;
	return cudaHostAlloc(&p, n ? n : 1, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

extern "C" void mkcu_dev_host_free(void *p)
{
	cudaFreeHost(p);
}

extern "C" void *mkcu_dev_alloc(size_t n)
{
	void *p = NULL;
	return cudaMalloc(&p, n ? n : 1) == cudaSuccess ? p : NULL;
}

extern "C" void mkcu_dev_free(void *p)
{
	cudaFree(p);
}

extern "C" int mkcu_dev_stream_new(void **s)
{
	cudaStream_t st;
	cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);

	*s = e == cudaSuccess ? (void *)st : NULL;
	return (int)e;
}

extern "C" void mkcu_dev_stream_free(void *s)
{
	cudaStreamDestroy((cudaStream_t)s);
}

extern "C" int mkcu_dev_h2d(void *dst, const void *src, size_t n, void *s)
{
	return (int)cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s);
}

extern "C" int mkcu_dev_d2h(void *dst, const void *src, size_t n, void *s)
{
	return (int)cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)s);
}

extern "C" int mkcu_dev_launch(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np, uint64_t maxcount,
			       int resident, void *s)
{
	return launch_kernel(P, I, np, maxcount, resident, (cudaStream_t)s);
}

extern "C" int mkcu_dev_sync(void *s)
{
	return (int)cudaStreamSynchronize((cudaStream_t)s);
}

extern "C" const char *mkcu_dev_errstr(int rc)
{
	return cudaGetErrorString((cudaError_t)rc);
}

extern "C" void mkcu_dev_host_run(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np)
{
	mkcu_host_run(P, I, np);
}

/* ----------------------------------------------------------------- timings */

#define CK(call)                                                                                    \
	do {                                                                                        \
		cudaError_t e_ = (call);                                                            \
		if (e_ != cudaSuccess) {                                                            \
			rc = mk_err_set(err, MK_EIO, "CUDA: %s: %s", #call, cudaGetErrorString(e_)); \
			goto out;                                                                   \
		}                                                                                   \
	} while (0)

__global__ static void fill_kernel(float *x, uint64_t n, uint64_t seed)
{
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		x[i] = (float)((int64_t)(mkcu_rng_u64(seed, i) >> 40) - (1 << 23)) * 0x1p-26f;
}

/* Best time in ms of `reps` runs of what `run` enqueues on stream 0. */
template <typename F> static cudaError_t best_ms(F run, int reps, float *ms)
{
	cudaEvent_t a, b;
	cudaError_t e;
	float best = 1e30f;

	if ((e = cudaEventCreate(&a)) != cudaSuccess || (e = cudaEventCreate(&b)) != cudaSuccess)
		return e;
	run(); /* warm up */
	for (int r = 0; r < reps; r++) {
		float t;
		cudaEventRecord(a, 0);
		run();
		cudaEventRecord(b, 0);
		if ((e = cudaEventSynchronize(b)) != cudaSuccess)
			break;
		cudaEventElapsedTime(&t, a, b);
		if (t < best)
			best = t;
	}
	if (e == cudaSuccess)
		e = cudaGetLastError();
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	*ms = best;
	return e;
}

extern "C" int mkcu_dev_bench(struct mk_cuda_bench *r, uint64_t bytes, unsigned ninputs, int device,
			      struct mk_err *err)
{
	struct mkcu_dev_info info;
	const char *why = NULL;
	float **dx = NULL, *dout = NULL, *hpin = NULL, ms;
	struct mkcu_piece *dP = NULL;
	struct mkcu_in *dI = NULL, *hI = NULL;
	uint64_t n;
	const int reps = 5;
	int rc = 0;

	memset(r, 0, sizeof(*r));
	if (!bytes)
		bytes = 256ull << 20;
	if (!ninputs)
		ninputs = 3;
	if (ninputs < 2)
		ninputs = 2;
	n = bytes / 4;
	bytes = n * 4;
	r->bytes = bytes;
	r->ninputs = ninputs;
	if (mkcu_dev_open(device, &info, &why))
		return mk_err_set(err, MK_EUNSUPPORTED, "CUDA: %s", why ? why : "no usable device");
	snprintf(r->device, sizeof(r->device), "%s (sm_%d%d, %d SMs)", info.name, info.cc_major, info.cc_minor,
		 info.sm_count);
	{
		cudaFuncAttributes fa;
		if (cudaFuncGetAttributes(&fa, mkcu_kernel) == cudaSuccess)
			r->regs = fa.numRegs;
		r->blocks_per_sm = info.sm_count ? info.resident_blocks / info.sm_count : 0;
	}
	dx = (float **)calloc(ninputs, sizeof(*dx));
	hI = (struct mkcu_in *)calloc(ninputs, sizeof(*hI));
	if (!dx || !hI) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (unsigned i = 0; i < ninputs; i++) {
		CK(cudaMalloc((void **)&dx[i], bytes));
		fill_kernel<<<1024, 256>>>(dx[i], n, 1234 + i);
		CK(cudaGetLastError());
	}
	CK(cudaMalloc((void **)&dout, bytes));
	CK(cudaMalloc((void **)&dP, sizeof(*dP)));
	CK(cudaMalloc((void **)&dI, ninputs * sizeof(*dI)));
	CK(cudaDeviceSynchronize());

	/* device to device copy */
	CK(best_ms([&] { cudaMemcpyAsync(dout, dx[0], bytes, cudaMemcpyDeviceToDevice, 0); }, reps, &ms));
	r->d2d_ms = ms;
	r->d2d_gbs = 2.0 * (double)bytes / (ms * 1e-3) / 1e9;

	/* linear, ninputs inputs, normalized */
	{
		struct mkcu_piece p;
		memset(&p, 0, sizeof(p));
		p.kind = MK_DEVICE_LINEAR;
		p.nin = ninputs;
		p.count = n;
		p.out = dout;
		p.normalize = 1;
		p.sum = 0.0f;
		for (unsigned i = 0; i < ninputs; i++) {
			hI[i].x = dx[i];
			hI[i].w = 0.25f + 0.5f * (float)i;
			p.sum += hI[i].w;
		}
		CK(cudaMemcpy(dP, &p, sizeof(p), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dI, hI, ninputs * sizeof(*hI), cudaMemcpyHostToDevice));
		CK(best_ms([&] { launch_kernel(dP, dI, 1, n, info.resident_blocks, 0); }, reps, &ms));
		r->linear_ms = ms;
		r->linear_gbs = (double)(ninputs + 1) * (double)bytes / (ms * 1e-3) / 1e9;
	}

	/* ties and dare_ties: input 0 the base, the others models */
	for (int pass = 0; pass < 2; pass++) {
		struct mkcu_piece p;
		memset(&p, 0, sizeof(p));
		p.kind = MK_DEVICE_TASK_ARITHMETIC;
		p.nin = ninputs - 1;
		p.cons = MK_DEVICE_CONS_SUM;
		p.count = n;
		p.base = dx[0];
		p.out = dout;
		p.normalize = pass == 0;
		p.div = 1.0f;
		for (unsigned i = 1; i < ninputs; i++) {
			struct mkcu_in *t = &hI[i - 1];
			memset(t, 0, sizeof(*t));
			t->x = dx[i];
			t->w = 0.5f;
			if (pass == 0) { /* keep about the larger half of |delta| */
				t->kind = MK_DEVICE_MAGNITUDE;
				t->lo_key = 0x3c000000u;
				t->lo_cut1 = n / 2;
			} else { /* density 0.3, rescaled */
				t->kind = MK_DEVICE_RANDOM;
				t->stream = 0x1234567ull * i;
				t->thr = (uint64_t)(0.3 * 9007199254740992.0);
				t->scale = 1;
				t->factor = 1.0f / 0.3f;
			}
		}
		CK(cudaMemcpy(dP, &p, sizeof(p), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(dI, hI, (ninputs - 1) * sizeof(*hI), cudaMemcpyHostToDevice));
		CK(best_ms([&] { launch_kernel(dP, dI, 1, n, info.resident_blocks, 0); }, reps, &ms));
		(pass == 0 ? r->ties_gbs : r->dare_gbs) = (double)(ninputs + 1) * (double)bytes / (ms * 1e-3) / 1e9;
	}

	/* pinned host <-> device */
	CK(cudaHostAlloc((void **)&hpin, bytes, cudaHostAllocDefault));
	memset(hpin, 0, bytes);
	CK(best_ms([&] { cudaMemcpyAsync(dout, hpin, bytes, cudaMemcpyHostToDevice, 0); }, 3, &ms));
	r->h2d_gbs = (double)bytes / (ms * 1e-3) / 1e9;
	CK(best_ms([&] { cudaMemcpyAsync(hpin, dout, bytes, cudaMemcpyDeviceToHost, 0); }, 3, &ms));
	r->d2h_gbs = (double)bytes / (ms * 1e-3) / 1e9;
out:
	for (unsigned i = 0; dx && i < ninputs; i++)
		cudaFree(dx[i]);
	cudaFree(dout);
	cudaFree(dP);
	cudaFree(dI);
	cudaFreeHost(hpin);
	free(dx);
	free(hI);
	return rc;
}
