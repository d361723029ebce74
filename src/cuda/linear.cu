/* linear.cu - the linear merge on an NVIDIA GPU. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
extern "C" {
#include "mk/cuda.h"
}

extern "C" bool mk_cuda_built(void)
{
	return true;
}

extern "C" bool mk_cuda_available(const char **why)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	if (e != cudaSuccess || n == 0) {
		if (why)
			*why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
		return false;
	}
	return true;
}

/* One thread per element of the [B, nelem] output; inputs as an array of
 * device pointers.  __fmul_rn/__fadd_rn forbid fused multiply-add, so the
 * sum is the CPU kernel's, operation for operation. */
__global__ static void linear_kernel(const float *const *in, int n, const float *w, const float *wsum,
				     unsigned long long B, unsigned long long nelem, float *out)
{
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= B * nelem)
		return;
	unsigned long long b = i / nelem;
	float acc = __fmul_rn(w[b * n], in[0][i]);
	for (int k = 1; k < n; k++)
		acc = __fadd_rn(acc, __fmul_rn(w[b * n + k], in[k][i]));
	out[i] = wsum ? __fdiv_rn(acc, wsum[b]) : acc;
}

#define CK(call)                                                                                    \
	do {                                                                                        \
		cudaError_t e_ = (call);                                                            \
		if (e_ != cudaSuccess) {                                                            \
			rc = mk_err_set(err, MK_EIO, "CUDA: %s: %s", #call, cudaGetErrorString(e_)); \
			goto out;                                                                   \
		}                                                                                   \
	} while (0)

extern "C" int mk_cuda_linear(const float *const *in, size_t n, const float *w, size_t B, uint64_t nelem,
			      bool normalize, float *out, struct mk_err *err)
{
	size_t bytes = (size_t)B * nelem * sizeof(float);
	float **d_in = (float **)calloc(n, sizeof(float *)), *d_w = NULL, *d_ws = NULL, *d_out = NULL;
	float **d_ptrs = NULL, *ws = (float *)calloc(B + 1, sizeof(float));
	int rc = 0;

	if (!d_in || !ws) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t b = 0; b < B; b++) {
		float s = w[b * n];
		for (size_t k = 1; k < n; k++)
			s += w[b * n + k];
		ws[b] = s;
	}
	for (size_t k = 0; k < n; k++) {
		CK(cudaMalloc((void **)&d_in[k], bytes ? bytes : 4));
		CK(cudaMemcpyAsync(d_in[k], in[k], bytes, cudaMemcpyHostToDevice, 0));
	}
	CK(cudaMalloc((void **)&d_ptrs, n * sizeof(float *)));
	CK(cudaMemcpy(d_ptrs, d_in, n * sizeof(float *), cudaMemcpyHostToDevice));
	CK(cudaMalloc((void **)&d_w, B * n * sizeof(float) + 4));
	CK(cudaMemcpy(d_w, w, B * n * sizeof(float), cudaMemcpyHostToDevice));
	CK(cudaMalloc((void **)&d_ws, B * sizeof(float) + 4));
	CK(cudaMemcpy(d_ws, ws, B * sizeof(float), cudaMemcpyHostToDevice));
	CK(cudaMalloc((void **)&d_out, bytes ? bytes : 4));
	if (B * nelem) {
		unsigned long long total = (unsigned long long)B * nelem;
		unsigned threads = 256;
		unsigned long long blocks = (total + threads - 1) / threads;
		linear_kernel<<<(unsigned)blocks, threads>>>(d_ptrs, (int)n, d_w, normalize ? d_ws : NULL, B, nelem,
							      d_out);
		CK(cudaGetLastError());
	}
	CK(cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost));
out:
	for (size_t k = 0; d_in && k < n; k++)
		cudaFree(d_in[k]);
	cudaFree(d_ptrs);
	cudaFree(d_w);
	cudaFree(d_ws);
	cudaFree(d_out);
	free(d_in);
	free(ws);
	return rc;
}
