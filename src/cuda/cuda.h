/* cuda.h - merge kernels on an NVIDIA GPU (built when nvcc is found).
 *
 * A build without CUDA (no nvcc, CUDA=0, or a sanitized build) has the
 * same functions: mk_cuda_available() is then false, opening a device
 * context fails with MK_EUNSUPPORTED ("built without CUDA"), and callers
 * fall back to the CPU path.  The host emulation (below) works in every
 * build.
 *
 * What runs on the GPU: the apply step of float32 jobs of every method
 * with a device hook (struct mk_method.device, mk/device.h) whose kernel()
 * names one of the element kernels the GPU implements: COPY, LINEAR,
 * SLERP and TASK_ARITHMETIC, all of mk/device.h's.  Among the built-ins:
 *   linear                                     (LINEAR)
 *   slerp                                      (after its pass: SLERP, or COPY)
 *   task_arithmetic, ties, dare_linear, dare_ties, breadcrumbs,
 *   breadcrumbs_ties, della, della_linear      (TASK_ARITHMETIC, or COPY)
 * and a plugin's methods that offer a hook.  The context knows methods only
 * through their hooks: it asks kernel() whether a job has a kernel and,
 * before packing a chunk, state() for the kernel's parameters.
 * Statistics passes (slerp's norms, ties' selection, DARE/DELLA rescale
 * sums, DELLA's masks) stay on the CPU: the caller runs mk_job_accumulate /
 * mk_job_finish as usual, then gives the finished job's chunks to the
 * GPU instead of mk_job_apply.  Methods without a hook (or whose hook
 * answers MK_DEVICE_NONE), and jobs computing in float64, answer
 * MK_EUNSUPPORTED: apply them on the CPU.
 *
 * Results are bit-identical to mk_job_apply's: the GPU does the same
 * float32 operations in the same order, each one rounded (no fused
 * multiply-add), and the random masks come from the same counter-based
 * generator (a NaN result may carry another NaN payload).
 *
 * How a caller (mk-merge) uses it:
 *
 *   struct mk_cuda_ctx *cx;
 *   struct mk_cuda_opts o = { .max_bytes = 64 << 20, .max_groups = 256 };
 *   if (mk_cuda_open(&cx, &o, err))              no GPU: note it, use the CPU
 *   ...
 *   for each job, once its passes are finished (mk_job_finish):
 *       if (!mk_cuda_job_supported(&job))        mk_job_apply on the CPU
 *       for each chunk:
 *           mk_cuda_submit(cx, &job, &chunk, out, err)
 *               (copies the chunk's inputs into pinned staging before it
 *               returns: the chunk's buffers may be reused at once; `out`
 *               is written later, by mk_cuda_flush at the latest)
 *   mk_cuda_flush(cx, err)        every submitted output is written now;
 *                                 then convert/write the outputs
 *   mk_cuda_close(cx)
 *
 * or, for a prepared batch, mk_cuda_apply(cx, groups, n, err), which is
 * submit for each group then flush; mk_cuda_job_apply is the same for one
 * chunk (synchronous, like mk_job_apply).
 *
 * Batching and overlap: submitted chunks are packed into launches.  A
 * launch holds at most max_groups pieces and max_bytes bytes of staging
 * (the pieces' inputs, outputs and DELLA mask bytes, plus descriptors);
 * a chunk larger than a launch is cut into pieces (element functions:
 * any cut gives the same bytes), and small chunks of many jobs - any
 * methods, any sizes; ideally one method and shape, as mk-merge groups
 * them - share one launch.  Each launch is one host-to-device copy, one
 * kernel over all its pieces (grid.y = piece) and one device-to-host copy
 * on its own stream; the context has `streams` launch slots (pinned
 * host buffer + device buffer + stream each), used round-robin, so the
 * copy in of launch k+1 overlaps the kernel of launch k and the copy out
 * of launch k-1, while the CPU packs launch k+2.  Memory: streams x
 * max_bytes of pinned host memory and as much device memory.
 *
 * Host emulation (opts.emulate): no device, no CUDA calls; the same
 * packing, pieces and launches, the "kernel" being the element code of the
 * GPU kernels (src/cuda/kern.h, __host__ __device__) run on the host -
 * in a CUDA build the copy nvcc compiled for the host.  For tests
 * (test/unit/test_cuda.c) on machines without a GPU; slow.
 *
 * Thread safety: a context is used by one thread at a time.
 */
#ifndef MK_CUDA_H
#define MK_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

struct mk_job;
struct mk_job_chunk;

/* Was mk built with CUDA? */
bool mk_cuda_built(void);
/* Built with CUDA and a device is usable now.  `why` (may be NULL)
 * receives a reason when not ("no CUDA device", "built without CUDA"). */
bool mk_cuda_available(const char **why);

/* ----------------------------------------------------------------- context */

struct mk_cuda_ctx;

struct mk_cuda_opts {
	uint64_t max_bytes;   /* staging bytes per launch (0: 64 MiB; at least 64 KiB) */
	size_t max_groups;    /* pieces per launch (0: 1024; at most 65535) */
	unsigned streams;     /* launch slots in flight (0: 3; 2 to 8) */
	int device;           /* CUDA device ordinal */
	bool emulate;         /* no device: run the kernels' element code on the host */
};

/* Open a context (opts NULL: the defaults).  Fails with MK_EUNSUPPORTED
 * when built without CUDA or no device is usable (the message says why),
 * MK_ENOMEM when the buffers cannot be had. */
int mk_cuda_open(struct mk_cuda_ctx **cx, const struct mk_cuda_opts *opts, struct mk_err *err);
/* Wait for what is in flight (outputs not flushed are still written) and
 * free everything.  NULL is allowed. */
void mk_cuda_close(struct mk_cuda_ctx *cx);
/* "NVIDIA H200 (sm_90, 132 SMs), 3 x 64 MiB pinned staging", or the
 * emulation's line. */
const char *mk_cuda_describe(const struct mk_cuda_ctx *cx);

/* Whether the job computes in float32 and its method's device hook names
 * a kernel the GPU implements for it (no other check: the passes must
 * still be finished before submitting). */
bool mk_cuda_job_supported(const struct mk_job *job);

/* ------------------------------------------------------------------ apply */

/* Submit the output of chunk c of a job whose passes are finished: c->count
 * float32 elements into out.  c's inputs are copied before it returns;
 * `out` must stay valid until mk_cuda_flush (or a failure) returns, and the
 * job until this call returns.  Errors: MK_EUNSUPPORTED (nothing done: the
 * method or dtype has no kernel, the caller applies on the CPU), MK_EINVAL
 * (passes not finished, a missing input, max_bytes too small for the
 * job's inputs), MK_EIO (a CUDA call failed: the context is then unusable;
 * the outputs of this and earlier submits are undefined). */
int mk_cuda_submit(struct mk_cuda_ctx *cx, const struct mk_job *job, const struct mk_job_chunk *c,
		   void *out, struct mk_err *err);
/* Launch what is packed and wait: every submitted output is written. */
int mk_cuda_flush(struct mk_cuda_ctx *cx, struct mk_err *err);

/* One chunk, synchronously: mk_job_apply on the GPU (submit + flush). */
int mk_cuda_job_apply(struct mk_cuda_ctx *cx, const struct mk_job *job, const struct mk_job_chunk *c,
		      void *out, struct mk_err *err);

/* A batch: groups (job, chunk, out), meant to be of one method and element
 * count (any mix works), launched together within the context's limits
 * (max_bytes, max_groups per launch).  Checks first that every job has a
 * kernel (MK_EUNSUPPORTED, nothing done, otherwise); returns with every
 * output written. */
struct mk_cuda_group {
	const struct mk_job *job;
	const struct mk_job_chunk *c;
	void *out;
};
int mk_cuda_apply(struct mk_cuda_ctx *cx, const struct mk_cuda_group *g, size_t ng, struct mk_err *err);

/* Counters since mk_cuda_open. */
struct mk_cuda_stats {
	uint64_t submits;        /* chunks submitted */
	uint64_t pieces;         /* pieces launched (chunks cut to fit, or whole) */
	uint64_t launches;       /* kernels launched (one copy in, one out each) */
	uint64_t bytes_in;       /* host to device: inputs, masks, descriptors */
	uint64_t bytes_out;      /* device to host */
	uint64_t elements;       /* output elements */
};
void mk_cuda_get_stats(const struct mk_cuda_ctx *cx, struct mk_cuda_stats *st);

/* -------------------------------------------------------- matrix products */

/* For the forward pass (mk/forward.h): float32 arrays in the context's
 * device memory (host memory when emulated) and one product,
 *   y[n][outd] = x[n][in] w[outd][in]^T     (row-major; a linear layer)
 * each output summed over k = 0 .. in-1 in order from 0, one fused
 * multiply-add per step (fmaf: one rounding each), on the device and in
 * the emulation alike, so the two give the same bits.  OpenBLAS's sgemm
 * sums in another order (blocked, vectorised): the results differ from
 * it by float32 rounding, about in * 2^-24 of sum_k |x_k w_k| at worst and
 * sqrt(in) * 2^-24 typically.  The copies and the product are
 * synchronous: each call returns with its work done (an error of the
 * product may surface at the next mk_cuda_mat_get).  A failed CUDA call
 * is MK_EIO and leaves the context unusable, as for the merge kernels.
 * The staging buffers of mk_cuda_opts are not used: open the context
 * with a small max_bytes for this alone. */
struct mk_cuda_mat;
/* nfloat floats (contents undefined).  MK_ENOMEM when the device has not
 * that much memory free. */
int mk_cuda_mat_new(struct mk_cuda_ctx *cx, size_t nfloat, struct mk_cuda_mat **out, struct mk_err *err);
/* NULL is allowed; cx must be the context it was made in. */
void mk_cuda_mat_free(struct mk_cuda_ctx *cx, struct mk_cuda_mat *m);
/* The first n floats: host to device, device to host. */
int mk_cuda_mat_put(struct mk_cuda_ctx *cx, struct mk_cuda_mat *m, const float *src, size_t n, struct mk_err *err);
int mk_cuda_mat_get(struct mk_cuda_ctx *cx, const struct mk_cuda_mat *m, float *dst, size_t n, struct mk_err *err);
/* y = x w^T as above; y is neither x nor w.  MK_EINVAL when an array is
 * smaller than the shapes say. */
int mk_cuda_gemm_nt(struct mk_cuda_ctx *cx, const struct mk_cuda_mat *x, size_t n, size_t in,
		    const struct mk_cuda_mat *w, size_t outd, struct mk_cuda_mat *y, struct mk_err *err);

/* Whether MK_CUDA_EMULATE=1 is set: the programs' --cuda then opens an
 * emulated context (for tests without a GPU). */
bool mk_cuda_emulate_requested(void);

/* ------------------------------------------------------- older entry point */

/* The batch form of linear on the GPU: B outputs of nelem float32
 * elements from n inputs; in[i] is [B, nelem] (output b at b * nelem),
 * w is [B, n]; out[b] = sum_i w[b,i] in[i][b] / (normalize ? sum_i w[b,i]
 * : 1), summed in input order in float32 without fused multiply-add, as
 * the CPU kernel.  Host buffers; runs through a context of its own (the
 * default options). */
int mk_cuda_linear(const float *const *in, size_t n, const float *w, size_t B,
		   uint64_t nelem, bool normalize, float *out, struct mk_err *err);

/* ----------------------------------------------------------------- timings */

/* Rates on the device alone (device-resident data, cudaEvent timing, the
 * best of a few repetitions), GB = 1e9 bytes.  Every rate counts the bytes
 * read plus written: a copy of `bytes` moves 2 * bytes. */
struct mk_cuda_bench {
	char device[160];
	uint64_t bytes;          /* per array */
	unsigned ninputs;        /* linear's inputs */
	double d2d_gbs;          /* cudaMemcpy device to device */
	double linear_gbs;       /* linear kernel: (ninputs + 1) * bytes / kernel time */
	double ties_gbs;         /* ties kernel (base + ninputs - 1 models, magnitude
				    masks, sum consensus): (ninputs + 1) * bytes / time */
	double dare_gbs;         /* dare_ties kernel (random masks, rescale), same shape */
	double h2d_gbs, d2h_gbs; /* pinned host <-> device copies (bytes / time) */
	double linear_ms, d2d_ms;
	int regs;                /* the kernel's registers per thread */
	int blocks_per_sm;       /* its resident blocks of 256 threads per SM */
};
/* bytes per array (0: 256 MiB), ninputs for linear (0: 3; at least 2).
 * MK_EUNSUPPORTED without a device. */
int mk_cuda_bench_run(struct mk_cuda_bench *r, uint64_t bytes, unsigned ninputs, int device,
		      struct mk_err *err);

#endif
