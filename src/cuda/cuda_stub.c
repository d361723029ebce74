/* cuda_stub.c - the CUDA runtime calls of dev.h in a build without CUDA:
 * no device, every call fails with "built without CUDA", so mk_cuda_open
 * answers MK_EUNSUPPORTED and callers use the CPU.  The host emulation
 * (ctx.c, kern.h) needs none of it and works here too. */
#include <stdio.h>
#include <string.h>
#include "cuda/cuda.h"
#include "dev.h"

#ifndef MK_HAVE_CUDA

#define WHY "this mk was built without CUDA (no nvcc at build time)"
#define NO_CUDA 35   /* any non-zero number: mkcu_dev_errstr says WHY */

int mkcu_dev_built(void)
{
	return 0;
}

int mkcu_dev_count(const char **why)
{
	*why = WHY;
	return 0;
}

int mkcu_dev_bench(struct mk_cuda_bench *r, uint64_t bytes, unsigned ninputs, int device, struct mk_err *err)
{
	(void)bytes, (void)ninputs, (void)device;
	memset(r, 0, sizeof(*r));
	return mk_err_set(err, MK_EUNSUPPORTED, "%s", WHY);
}

int mkcu_dev_open(int device, struct mkcu_dev_info *info, const char **why)
{
	(void)device, (void)info;
	*why = WHY;
	return NO_CUDA;
}

int mkcu_dev_use(int device)
{
	(void)device;
	return NO_CUDA;
}

void *mkcu_dev_host_alloc(size_t n)
{
	(void)n;
	return NULL;
}

void mkcu_dev_host_free(void *p)
{
	(void)p;
}

void *mkcu_dev_alloc(size_t n)
{
	(void)n;
	return NULL;
}

void mkcu_dev_free(void *p)
{
	(void)p;
}

int mkcu_dev_stream_new(void **s)
{
	*s = NULL;
	return NO_CUDA;
}

void mkcu_dev_stream_free(void *s)
{
	(void)s;
}

int mkcu_dev_h2d(void *dst, const void *src, size_t n, void *s)
{
	(void)dst, (void)src, (void)n, (void)s;
	return NO_CUDA;
}

int mkcu_dev_d2h(void *dst, const void *src, size_t n, void *s)
{
	(void)dst, (void)src, (void)n, (void)s;
	return NO_CUDA;
}

int mkcu_dev_launch(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np, uint64_t maxcount, int resident,
		    void *s)
{
	(void)P, (void)I, (void)np, (void)maxcount, (void)resident, (void)s;
	return NO_CUDA;
}

int mkcu_dev_sync(void *s)
{
	(void)s;
	return NO_CUDA;
}

int mkcu_dev_put(void *dst, const void *src, size_t n)
{
	(void)dst, (void)src, (void)n;
	return NO_CUDA;
}

int mkcu_dev_get(void *dst, const void *src, size_t n)
{
	(void)dst, (void)src, (void)n;
	return NO_CUDA;
}

int mkcu_dev_gemm_nt(const float *x, const float *w, float *y, uint64_t n, uint64_t in, uint64_t outd)
{
	(void)x, (void)w, (void)y, (void)n, (void)in, (void)outd;
	return NO_CUDA;
}

const char *mkcu_dev_errstr(int rc)
{
	(void)rc;
	return WHY;
}

void mkcu_dev_host_run(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np)
{
	mkcu_host_run(P, I, np);
}
#else
/* built with CUDA: src/cuda/device.cu defines them */
typedef int mk_cuda_stub_unused;
#endif
