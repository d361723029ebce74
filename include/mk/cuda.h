/* cuda.h - merge kernels on an NVIDIA GPU (built when nvcc is found).
 *
 * A build without CUDA (no nvcc, or CUDA=0) has the same functions:
 * mk_cuda_available() is then false and the kernels return
 * MK_EUNSUPPORTED, so callers fall back to the CPU path.
 */
#ifndef MK_CUDA_H
#define MK_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

/* Was mk built with CUDA? */
bool mk_cuda_built(void);
/* Built with CUDA and a device is usable now.  `why` (may be NULL)
 * receives a reason when not ("no CUDA device", "built without CUDA"). */
bool mk_cuda_available(const char **why);

/* The batch form of linear on the GPU: B outputs of nelem float32
 * elements from n inputs; in[i] is [B, nelem] (output b at b * nelem),
 * w is [B, n]; out[b] = sum_i w[b,i] in[i][b] / (normalize ? sum_i w[b,i]
 * : 1), summed in input order in float32 without fused multiply-add, as
 * the CPU kernel.  Host buffers; copies overlap compute over streams. */
int mk_cuda_linear(const float *const *in, size_t n, const float *w, size_t B,
		   uint64_t nelem, bool normalize, float *out, struct mk_err *err);

#endif
