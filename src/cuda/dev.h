/* dev.h - the CUDA runtime as ctx.c uses it: defined by device.cu in a
 * build with CUDA, by cuda_stub.c (failing: "built without CUDA")
 * otherwise.  Internal to src/cuda.
 *
 * Return values: 0 or a CUDA error number (cudaError_t), which
 * mkcu_dev_errstr names.  Streams are opaque pointers. */
#ifndef MK_CUDA_DEV_H
#define MK_CUDA_DEV_H

#include <stddef.h>
#include <stdint.h>
#include "kern.h"

#ifdef __cplusplus
extern "C" {
#endif

struct mk_cuda_bench;
struct mk_err;

/* 1 in device.cu, 0 in the stub. */
int mkcu_dev_built(void);
/* Number of usable devices; 0 with *why set when none. */
int mkcu_dev_count(const char **why);
/* mk_cuda_bench_run (mk/cuda.h). */
int mkcu_dev_bench(struct mk_cuda_bench *r, uint64_t bytes, unsigned ninputs, int device, struct mk_err *err);

struct mkcu_dev_info {
	char name[128];
	int cc_major, cc_minor;
	int sm_count;
	int resident_blocks;     /* blocks of the kernel the device runs at once */
	size_t mem_total;
};

/* Select device `device` for this thread and describe it; non-zero with
 * *why set when it cannot be used. */
int mkcu_dev_open(int device, struct mkcu_dev_info *info, const char **why);
/* Make `device` current for the calling thread. */
int mkcu_dev_use(int device);
/* Page-locked host memory (cudaHostAlloc) and device memory; NULL when
 * out of memory. */
void *mkcu_dev_host_alloc(size_t n);
void mkcu_dev_host_free(void *p);
void *mkcu_dev_alloc(size_t n);
void mkcu_dev_free(void *p);
int mkcu_dev_stream_new(void **s);
void mkcu_dev_stream_free(void *s);
/* Asynchronous copies on stream s (host memory from mkcu_dev_host_alloc). */
int mkcu_dev_h2d(void *dst, const void *src, size_t n, void *s);
int mkcu_dev_d2h(void *dst, const void *src, size_t n, void *s);
/* The kernel over np pieces (descriptors in device memory), the longest
 * maxcount elements, on stream s; about `resident` blocks in all. */
int mkcu_dev_launch(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np, uint64_t maxcount,
		    int resident, void *s);
int mkcu_dev_sync(void *s);
/* Synchronous copies on the default stream (any host memory), after the
 * work queued there before them. */
int mkcu_dev_put(void *dst, const void *src, size_t n);
int mkcu_dev_get(void *dst, const void *src, size_t n);
/* y[n][outd] = x[n][in] w[outd][in]^T on the default stream (device
 * pointers), each element summed as mkcu_host_gemm_nt (kern.h) sums it. */
int mkcu_dev_gemm_nt(const float *x, const float *w, float *y, uint64_t n, uint64_t in, uint64_t outd);
const char *mkcu_dev_errstr(int rc);
/* mkcu_host_run compiled by nvcc's host compiler (device.cu): the
 * emulated launches of a CUDA build use it. */
void mkcu_dev_host_run(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np);

#ifdef __cplusplus
}
#endif

#endif
