/* cuda_stub.c - the CUDA entry points of a build without CUDA. */
#ifndef MK_HAVE_CUDA
#include "mk/cuda.h"

bool mk_cuda_built(void)
{
	return false;
}

bool mk_cuda_available(const char **why)
{
	if (why)
		*why = "this mk was built without CUDA (no nvcc at build time)";
	return false;
}

int mk_cuda_linear(const float *const *in, size_t n, const float *w, size_t B, uint64_t nelem, bool normalize,
		   float *out, struct mk_err *err)
{
	(void)in, (void)n, (void)w, (void)B, (void)nelem, (void)normalize, (void)out;
	return mk_err_set(err, MK_EUNSUPPORTED, "this mk was built without CUDA");
}
#else
/* built with CUDA: src/cuda/linear.cu defines them */
typedef int mk_cuda_stub_unused;
#endif
