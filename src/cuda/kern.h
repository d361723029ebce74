/* kern.h - the element code of the GPU kernels, written once for the
 * device and the host.  Internal to src/cuda.
 *
 * Included by device.cu (nvcc: every function here is then __host__
 * __device__, instantiated for the GPU and for the host) and by ctx.c
 * (cc, a build without CUDA: the host copy only).  The language is the
 * common subset of C11 and CUDA C++.
 *
 * A launch is a list of pieces: elements [e0, e0 + count) of one job's
 * output, with the piece's slice of every array the job reads (inputs,
 * base, DELLA mask bytes) in device memory (host memory when emulated),
 * and per-input parameters in a shared array of struct mkcu_in.  Every
 * output element is a pure function of the element index and the same
 * element of the inputs, so a chunk may be cut into pieces anywhere.
 *
 * The arithmetic is mk/device.h's, operation for operation, in float32 -
 * what the apply() of a method offering these kernels through its device
 * hook computes: on the device every operation is an explicitly rounded
 * intrinsic (__fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn), which nvcc
 * never contracts into a fused multiply-add; on the host the plain
 * operators with floating-point contraction off.  Results are therefore
 * bit-identical to those apply()s (NaNs aside: a NaN result may carry
 * another payload).
 *
 * The matrix product of the forward pass (mkcu_host_gemm_nt, below) is the
 * one place that fuses: each step is an explicit fma, on both sides.
 */
#ifndef MK_CUDA_KERN_H
#define MK_CUDA_KERN_H

/* Host copies: cc compiles with -ffp-contract=off (CFLAGS); nvcc's host
 * compiler runs in ISO mode (-std=c++17), where GCC does not contract. */
#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "mk/device.h"

#if defined(__CUDACC__)
#define MKCU_HD static inline __host__ __device__
#else
#define MKCU_HD static inline
#endif

#if defined(__CUDA_ARCH__)
#define MKCU_ADD(a, b) __fadd_rn((a), (b))
#define MKCU_SUB(a, b) __fsub_rn((a), (b))
#define MKCU_MUL(a, b) __fmul_rn((a), (b))
#define MKCU_DIV(a, b) __fdiv_rn((a), (b))
#define MKCU_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#else
#define MKCU_ADD(a, b) ((float)(a) + (float)(b))
#define MKCU_SUB(a, b) ((float)(a) - (float)(b))
#define MKCU_MUL(a, b) ((float)(a) * (float)(b))
#define MKCU_DIV(a, b) ((float)(a) / (float)(b))
#define MKCU_FMA(a, b, c) fmaf((a), (b), (c))
#endif

/* Elements per thread and loop turn (independent loads in flight). */
#define MKCU_U 8
/* Threads per block. */
#define MKCU_THREADS 256
/* Alignment of every array in a launch's buffer. */
#define MKCU_ALIGN 256u

/* The kernel ids and the sparsification and consensus codes are
 * mk/device.h's (plain C, valid C++): a piece's kind is an enum
 * mk_device_kernel other than NONE, an input's kind an enum
 * mk_device_sparsify, a piece's cons an enum mk_device_consensus; the
 * arithmetic is the one that header describes. */

/* One input of a piece.  LINEAR: x, w.  TASK_ARITHMETIC: everything (one
 * per struct mk_device_input of the job). */
struct mkcu_in {
	const float *x;          /* the piece's elements of this input */
	const uint8_t *mask;     /* DELLA: the job's mask from byte e0 >> 3 on */
	float w, factor;
	uint32_t kind, scale;
	uint32_t lo_key, hi_key;
	uint64_t lo_cut1, hi_cut1;
	uint64_t stream, thr;
};

struct mkcu_piece {
	uint32_t kind;           /* enum mk_device_kernel */
	uint32_t nin, in0;       /* inputs: ins[in0 .. in0 + nin) */
	uint32_t cons;           /* TASK_ARITHMETIC consensus */
	uint32_t normalize;      /* LINEAR: divide by sum; TASK_ARITHMETIC: by div */
	uint32_t scale_lam;      /* TASK_ARITHMETIC: multiply by lam */
	uint64_t e0, count;      /* elements [e0, e0 + count) of the job's output */
	const float *base;       /* COPY, TASK_ARITHMETIC: the base; SLERP: x0 */
	const float *other;      /* SLERP: x1 */
	float *out;              /* count elements */
	float sum;               /* LINEAR */
	float lam, div;          /* TASK_ARITHMETIC */
	float c0, c1;            /* SLERP */
};

/* ctx.c (cc) writes these, the kernel (nvcc) reads them: one layout. */
typedef char mkcu_layout_check[sizeof(struct mkcu_piece) == 88 && sizeof(struct mkcu_in) == 72 &&
			       offsetof(struct mkcu_piece, e0) == 24 && offsetof(struct mkcu_piece, sum) == 64 &&
			       offsetof(struct mkcu_in, w) == 16 && offsetof(struct mkcu_in, lo_cut1) == 40 ? 1 : -1];

/* rng.h's mk_rng_u64, bit for bit. */
MKCU_HD uint64_t mkcu_rng_u64(uint64_t stream, uint64_t e)
{
	uint64_t z = stream + (e + 1) * 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

MKCU_HD uint32_t mkcu_fbits(float f)
{
#if defined(__CUDA_ARCH__)
	return __float_as_uint(f);
#else
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

/* sign(v) as gta.c: +1, -1, 0 (NaN: 0). */
MKCU_HD float mkcu_sign(float v)
{
	return (float)((v > 0.0f) - (v < 0.0f));
}

/* ---------------------------------------------------------------- linear */

/* linear.c: out = w_0 * x_0, then out = out + w_i * x_i in input order. */
MKCU_HD float mkcu_linear_step(float acc, float w, float x, int first)
{
	float p = MKCU_MUL(w, x);
	return first ? p : MKCU_ADD(acc, p);
}

MKCU_HD float mkcu_linear_finish(float acc, int normalize, float sum)
{
	return normalize ? MKCU_DIV(acc, sum) : acc;
}

/* ----------------------------------------------------------------- slerp */

/* slerp.c: p = c0 * x0, q = c1 * x1, out = p + q. */
MKCU_HD float mkcu_slerp_elem(float c0, float c1, float x0, float x1)
{
	return MKCU_ADD(MKCU_MUL(c0, x0), MKCU_MUL(c1, x1));
}

/* ------------------------------------------------------------------- gta */

/* v_j of mk/device.h's enum mk_device_sparsify comment, for element e
 * (mask bit mbit of in->mask). */
MKCU_HD float mkcu_gta_v(const struct mkcu_in *in, float x, float b, uint64_t e, uint64_t mbit)
{
	float delta = MKCU_SUB(x, b), m;

	if (in->kind == MK_DEVICE_DENSE) {
		m = delta;
	} else if (in->kind == MK_DEVICE_ZERO) {
		m = 0.0f;
	} else {
		uint32_t key = mkcu_fbits(fabsf(delta));
		int kept;
		switch (in->kind) {
		case MK_DEVICE_MAGNITUDE:
			kept = key > in->lo_key || (key == in->lo_key && e < in->lo_cut1);
			break;
		case MK_DEVICE_OUTLIERS:
			kept = (key > in->lo_key || (key == in->lo_key && e >= in->lo_cut1)) &&
			       (key < in->hi_key || (key == in->hi_key && e < in->hi_cut1));
			break;
		case MK_DEVICE_RANDOM:
			kept = (mkcu_rng_u64(in->stream, e) >> 11) < in->thr;
			break;
		default: /* DELLA */
			kept = (in->mask[mbit >> 3] >> (mbit & 7)) & 1;
			break;
		}
		m = MKCU_MUL(delta, kept ? 1.0f : 0.0f);
		if (in->scale)
			m = MKCU_MUL(m, in->factor);
	}
	return MKCU_MUL(m, in->w);
}

/* Output element k of a TASK_ARITHMETIC piece (gta.c's GTA_APPLY for float).  The
 * consensus needs every v_j twice: the second time it is computed again
 * (the same operations: the same value), not stored. */
MKCU_HD float mkcu_gta_elem(const struct mkcu_piece *p, const struct mkcu_in *I, uint64_t k)
{
	float b = p->base[k], mix = 0.0f, div = p->div;
	uint64_t e = p->e0 + k, mbit = (p->e0 & 7) + k;
	uint32_t n = p->nin;

	if (n == 0)
		return b;
	if (p->cons != MK_DEVICE_CONS_NONE) {
		float sw = 0.0f, maj;
		for (uint32_t j = 0; j < n; j++) {
			float v = mkcu_gta_v(&I[j], I[j].x[k], b, e, mbit);
			float t = p->cons == MK_DEVICE_CONS_SUM ? v : mkcu_sign(v);
			sw = j ? MKCU_ADD(sw, t) : t;
		}
		maj = sw >= 0.0f ? 1.0f : -1.0f;
		for (uint32_t j = 0; j < n; j++) {
			float v = mkcu_gta_v(&I[j], I[j].x[k], b, e, mbit);
			float kk = mkcu_sign(v) == maj ? 1.0f : 0.0f;
			float tm = MKCU_MUL(v, kk), tw = MKCU_MUL(I[j].w, kk);
			mix = j ? MKCU_ADD(mix, tm) : tm;
			div = j ? MKCU_ADD(div, tw) : tw;
		}
		if (div == 0.0f)
			div = 1.0f;
	} else {
		for (uint32_t j = 0; j < n; j++) {
			float v = mkcu_gta_v(&I[j], I[j].x[k], b, e, mbit);
			mix = j ? MKCU_ADD(mix, v) : v;
		}
	}
	if (p->normalize)
		mix = MKCU_DIV(mix, div);
	if (p->scale_lam)
		mix = MKCU_MUL(mix, p->lam);
	return MKCU_ADD(b, mix);
}

/* ------------------------------------------------------------ one thread */

/* Elements k0, k0 + step, ..., k0 + (MKCU_U - 1) * step of piece p (those
 * below p->count): what one GPU thread does per loop turn. */
MKCU_HD void mkcu_run(const struct mkcu_piece *p, const struct mkcu_in *I, uint64_t k0, uint64_t step)
{
	uint64_t n = p->count;

	switch (p->kind) {
	case MK_DEVICE_LINEAR: {
		float acc[MKCU_U];
		for (int u = 0; u < MKCU_U; u++)
			acc[u] = 0.0f;
		if (k0 + (uint64_t)(MKCU_U - 1) * step < n) {
			/* all MKCU_U elements exist: no bounds checks, every load of
			 * an input issued before its sums */
			for (uint32_t j = 0; j < p->nin; j++) {
				const float *x = I[j].x;
				float w = I[j].w;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
				for (int u = 0; u < MKCU_U; u++)
					acc[u] = mkcu_linear_step(acc[u], w, x[k0 + (uint64_t)u * step], j == 0);
			}
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
			for (int u = 0; u < MKCU_U; u++)
				p->out[k0 + (uint64_t)u * step] = mkcu_linear_finish(acc[u], (int)p->normalize, p->sum);
			break;
		}
		for (uint32_t j = 0; j < p->nin; j++) {
			const float *x = I[j].x;
			float w = I[j].w;
			for (int u = 0; u < MKCU_U; u++) {
				uint64_t k = k0 + (uint64_t)u * step;
				if (k < n)
					acc[u] = mkcu_linear_step(acc[u], w, x[k], j == 0);
			}
		}
		for (int u = 0; u < MKCU_U; u++) {
			uint64_t k = k0 + (uint64_t)u * step;
			if (k < n)
				p->out[k] = mkcu_linear_finish(acc[u], (int)p->normalize, p->sum);
		}
		break;
	}
	case MK_DEVICE_TASK_ARITHMETIC:
		for (int u = 0; u < MKCU_U; u++) {
			uint64_t k = k0 + (uint64_t)u * step;
			if (k < n)
				p->out[k] = mkcu_gta_elem(p, I, k);
		}
		break;
	case MK_DEVICE_SLERP:
		for (int u = 0; u < MKCU_U; u++) {
			uint64_t k = k0 + (uint64_t)u * step;
			if (k < n)
				p->out[k] = mkcu_slerp_elem(p->c0, p->c1, p->base[k], p->other[k]);
		}
		break;
	default: /* COPY */
		for (int u = 0; u < MKCU_U; u++) {
			uint64_t k = k0 + (uint64_t)u * step;
			if (k < n)
				p->out[k] = p->base[k];
		}
		break;
	}
}

/* --------------------------------------------------- matrix products */

/* The matrix product of mk_cuda_gemm_nt: y[n][outd] = x[n][in] w[outd][in]^T,
 * each output a float32 sum over k = 0, 1, ..., in - 1 in that order,
 * acc = fma(x[r][k], w[c][k], acc) from acc = 0, one rounding per step.
 * The device kernel (device.cu: tiles of x and w in shared memory, 4 x 4
 * outputs per thread) sums every output in exactly this order with
 * __fmaf_rn, so this host loop (the emulation) gives its bits. */
static inline void mkcu_host_gemm_nt(const float *x, const float *w, float *y, uint64_t n, uint64_t in,
				     uint64_t outd)
{
	for (uint64_t r = 0; r < n; r++)
		for (uint64_t c = 0; c < outd; c++) {
			const float *a = x + r * in, *b = w + c * in;
			float acc = 0.0f;
			for (uint64_t k = 0; k < in; k++)
				acc = MKCU_FMA(a[k], b[k], acc);
			y[r * outd + c] = acc;
		}
}

/* A launch on the host: the GPU's threads one after another, each piece
 * swept as the device sweeps it (blocks of MKCU_THREADS threads, MKCU_U
 * elements each, MKCU_THREADS apart). */
static inline void mkcu_host_run(const struct mkcu_piece *P, const struct mkcu_in *I, size_t np)
{
	const uint64_t span = (uint64_t)MKCU_THREADS * MKCU_U;

	for (size_t i = 0; i < np; i++) {
		const struct mkcu_piece *p = &P[i];
		const struct mkcu_in *in = I + p->in0;
		for (uint64_t base = 0; base < p->count; base += span)
			for (uint64_t t = 0; t < MKCU_THREADS && base + t < p->count; t++)
				mkcu_run(p, in, base + t, MKCU_THREADS);
	}
}

#endif
