/* lowrank.h - a weight delta to a LoRA pair (B, A) by truncated SVD: the
 * numerical engine of mk-extract-lora, one call per weight.  Internal to
 * libmk.
 *
 * Given delta = FT - BASE (float32, m x n row-major) the call factors
 * F = delta, or F = delta^T when `transpose` (embeddings: PEFT stores
 * their A and B the other way round), as F ~= B A with
 *
 *   F = U diag(s) Vh              (thin SVD, s descending)
 *   r = the rank the rules below allow
 *   distribute_scale:  A = diag(sqrt(s[:r])) Vh[:r]   B = U[:, :r] diag(sqrt(s[:r]))
 *   otherwise:         A = diag(s[:r]) Vh[:r]         B = U[:, :r]
 *
 * which is mergekit-extract-lora's rule; the caller casts A and B to the
 * output dtype.  out->m, out->n are F's shape (n x m when transposed): A is
 * [rank, out->n], B [out->m, rank], both row-major float32.
 *
 * The rank rules, combined as the strictest (each one off at 0):
 *   max_rank    r <= max_rank (>= 1; mergekit's --max-rank)
 *   sv_epsilon  keep s_i > sv_epsilon only (mergekit's --sv-epsilon)
 *   energy      the smallest r with s_1^2 + ... + s_r^2 >= energy * ||F||_F^2
 *   rel_sigma   keep s_i >= rel_sigma * s_1
 * Singular values that are zero are kept when no rule drops them, as
 * mergekit does (the factors' columns are then zero or arbitrary unit
 * vectors times zero); but a delta that is exactly zero everywhere gives
 * rank 0 at once, without an SVD.
 *
 * Rank 0 (a zero delta, or every s_i dropped by a rule): out->rank = 0,
 * out->a = out->b = NULL, and rel_error is 0 for a zero delta, 1 otherwise.
 * B A is then the zero matrix; a caller that needs a uniform rank pads with
 * zeros.
 *
 * Exact mode is LAPACK's sgesdd (divide and conquer, what torch.linalg.svd
 * runs on the CPU).  Randomized mode (randomized.c) computes only the top
 * max_rank + oversample singular triplets, by subspace iteration from a
 * Gaussian test matrix; it reads delta in place (no copy), its working
 * set is O((m + n) k).  It falls back to exact when that k reaches
 * min(m, n).  BLAS runs with the process's thread setting (core/blas.h).
 *
 * GPU (opts.cuda): the exact SVD (cuSOLVER's gesvd; the factors and the
 * error are then formed on the host as above), or the randomized path's
 * products with delta and its QRs, run on a CUDA device by cuBLAS and
 * cuSOLVER, loaded at run time (lowrank_cuda.c); MK_EUNSUPPORTED, nothing
 * done, when mk was built without CUDA, there is no device or the
 * libraries cannot be loaded: the caller then runs the CPU path.
 *
 * Calls share no state (the GPU libraries' one-time loading aside): any
 * number may run at once on different threads, each then best with BLAS
 * on one thread (mk__blas_one_thread), or one at a time with BLAS's.
 *
 * The caller forms delta as mergekit does: FT - BASE in the tensors' own
 * dtype (bf16 rounding included), then widened to float32.
 */
#ifndef MK_EXTRACT_LOWRANK_H
#define MK_EXTRACT_LOWRANK_H

#include <stdbool.h>
#include <stdint.h>
#include "mk/err.h"

struct mk_lowrank_opts {
	unsigned max_rank;       /* >= 1 */
	double sv_epsilon;       /* 0: off */
	double energy;           /* 0: off; else in (0, 1] */
	double rel_sigma;        /* 0: off; else in (0, 1] */
	bool distribute_scale;   /* mergekit's default: true */
	bool randomized;         /* false: exact SVD */
	unsigned oversample;     /* randomized: extra columns (MK_LOWRANK_OVERSAMPLE) */
	unsigned power_iters;    /* randomized: subspace iterations (MK_LOWRANK_POWER_ITERS) */
	uint64_t seed;           /* randomized: the Gaussian test matrix */
	bool cuda;               /* the SVD (exact), or the products and QRs (randomized), on a CUDA device */
	int cuda_device;         /* which (an ordinal) */
};

/* The randomized defaults (measured: randomized.c). */
#define MK_LOWRANK_OVERSAMPLE 16
#define MK_LOWRANK_POWER_ITERS 2

/* mergekit's defaults with `max_rank`: exact, distribute_scale. */
void mk_lowrank_opts_default(struct mk_lowrank_opts *o, unsigned max_rank);

struct mk_lowrank {
	unsigned rank;
	uint64_t m, n;           /* F's shape: delta's, or its transpose's */
	float *a;                /* [rank, n] row-major; NULL at rank 0 */
	float *b;                /* [m, rank] row-major; NULL at rank 0 */
	double rel_error;        /* ||F - B A||_F / ||F||_F, measured; 0 when F is 0 */
	float *s;                /* the singular values computed, descending (NULL at a zero delta) */
	unsigned ns;             /* how many: min(m, n) exact, k randomized */
	bool randomized;         /* whether the randomized path ran */
	uint64_t peak_bytes;     /* the most this call held allocated at once */
};

/* Factor `delta` (m x n row-major float32, finite) as above into `out`
 * (cleared first; free it with mk_lowrank_free, also after a failure).
 * Errors: MK_EINVAL (bad options, a non-finite element: its row and
 * column are named), MK_ENOMEM, MK_EUNSUPPORTED (a dimension beyond
 * LAPACK's 32-bit integers), MK_EIO (LAPACK failed to converge: its info
 * code; a CUDA call), MK_EUNSUPPORTED (opts.cuda without a usable
 * device).  The message names no tensor: the caller prefixes it. */
int mk_lowrank_factor(const float *delta, uint64_t m, uint64_t n, bool transpose,
		      const struct mk_lowrank_opts *o, struct mk_lowrank *out, struct mk_err *err);

void mk_lowrank_free(struct mk_lowrank *r);

/* An upper bound of out->peak_bytes for any delta of this shape: every
 * byte mk_lowrank_factor allocates (the outputs included, delta not;
 * BLAS's own buffers not).  Reached when the rank is max_rank.  0 when
 * the options are invalid or the sizes overflow. */
uint64_t mk_lowrank_working_set(uint64_t m, uint64_t n, bool transpose, const struct mk_lowrank_opts *o);

#endif
