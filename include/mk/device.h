/* device.h - what a merge method hands a math device (the GPU of
 * mk/cuda.h): the element kernels the device code implements, the
 * parameters each one reads, and the hook through which a method offers
 * its jobs to them.
 *
 * A method with device kernels points struct mk_method's `device` at a
 * struct mk_device_hook (mk/method.h).  A backend asks the hook, never
 * the other way round: for a job, kernel() names the element kernel and
 * state() gives that kernel's parameters once the job's statistics passes
 * are finished; the backend then computes what apply() would, chunk by
 * chunk, bit for bit.  A method without a hook (device == NULL) is applied
 * on the CPU.  A plugin fills the same hook with these public types only;
 * the built-ins linear, slerp and the task arithmetic family use it too.
 *
 * Every kernel computes in float32, each operation rounded (no fused
 * multiply-add), in the order written below; a backend asks only about
 * jobs whose compute dtype is float32 (mk_job.compute == MK_DT_F32).
 * "x_i" is element e of the chunk's in[i] (e the output's flat index),
 * "b" is x_base.
 *
 * These layouts are part of the method ABI: changing them bumps
 * MK_METHOD_ABI (mk/method.h).  Plain C (C11, and valid C++ for device
 * compilers): no other mk header.
 */
#ifndef MK_DEVICE_H
#define MK_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mk_job;
struct mk_err;

/* The element kernels. */
enum mk_device_kernel {
	MK_DEVICE_NONE,            /* no device kernel: apply on the CPU */
	MK_DEVICE_COPY,            /* out = b */
	MK_DEVICE_LINEAR,          /* acc = w_0 x_idx0, acc = acc + w_j x_idxj for j = 1..n-1
				      in order; out = normalize ? acc / sum : acc */
	MK_DEVICE_SLERP,           /* out = c0 b + c1 x_other (p = c0 b, q = c1 x_other, p + q) */
	MK_DEVICE_TASK_ARITHMETIC, /* the task arithmetic family: out = b + mix (below) */
	MK_DEVICE_KERNEL_COUNT
};

/* TASK_ARITHMETIC: how an input's delta is sparsified.  With
 * delta = x_idx - b and key the bits of fabsf(delta) as a uint32:
 *   DENSE      m = delta                        ZERO  m = 0
 *   otherwise  m = delta * (kept ? 1 : 0), then m = m * factor when scale,
 *     kept:  MAGNITUDE  key > lo_key || (key == lo_key && e < lo_cut1)
 *            OUTLIERS   (key > lo_key || (key == lo_key && e >= lo_cut1)) &&
 *                       (key < hi_key || (key == hi_key && e < hi_cut1))
 *            RANDOM     (z >> 11) < thr, with (uint64 arithmetic)
 *                       z = stream + (e + 1) * 0x9E3779B97F4A7C15,
 *                       z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9,
 *                       z = (z ^ (z >> 27)) * 0x94D049BB133111EB,
 *                       z = z ^ (z >> 31)
 *            DELLA      bit e & 7 of mask[e >> 3]
 * and v = m * w. */
enum mk_device_sparsify {
	MK_DEVICE_DENSE,
	MK_DEVICE_ZERO,
	MK_DEVICE_MAGNITUDE,
	MK_DEVICE_OUTLIERS,
	MK_DEVICE_RANDOM,
	MK_DEVICE_DELLA,
	MK_DEVICE_SPARSIFY_COUNT
};

/* TASK_ARITHMETIC: the sign consensus (TIES), per element.
 *   NONE   mix = v_0 + v_1 + ... (in order); normalize: mix = mix / div
 *   SUM    s = v_0 + v_1 + ...;            maj = s >= 0 ? 1 : -1
 *   COUNT  s = sign(v_0) + sign(v_1) + ...; maj likewise
 *     (SUM, COUNT) k_j = sign(v_j) == maj ? 1 : 0; mix = sum_j v_j k_j,
 *     d = sum_j w_j k_j (in order), d == 0 -> 1; normalize: mix = mix / d
 * then mix = mix * lam when scale_lam, and out = b + mix.  sign(NaN) = 0. */
enum mk_device_consensus {
	MK_DEVICE_CONS_NONE,
	MK_DEVICE_CONS_SUM,
	MK_DEVICE_CONS_COUNT
};

/* One input a kernel reads (LINEAR, TASK_ARITHMETIC), in the kernel's order. */
struct mk_device_input {
	int idx;                   /* the input's index in a chunk's in[] */
	float w;                   /* weight */
	/* TASK_ARITHMETIC only */
	enum mk_device_sparsify kind;
	bool scale;                /* multiply kept deltas by factor */
	float factor;
	uint32_t lo_key, hi_key;   /* MAGNITUDE: lo; OUTLIERS: both */
	uint64_t lo_cut1, hi_cut1;
	uint64_t stream, thr;      /* RANDOM */
	const uint8_t *mask;       /* DELLA: one bit per output element (nelem / 8 + 1
				      bytes), owned by the job */
};

/* A job's kernel and its parameters (state() fills it). */
struct mk_device_job {
	enum mk_device_kernel kernel;
	int base;                  /* COPY, SLERP, TASK_ARITHMETIC: the index of b in in[] */
	int other;                 /* SLERP */
	float c0, c1;              /* SLERP */
	bool normalize;            /* LINEAR (by sum), TASK_ARITHMETIC (by div or d) */
	float sum;                 /* LINEAR */
	enum mk_device_consensus cons;    /* TASK_ARITHMETIC */
	bool scale_lam;                   /* TASK_ARITHMETIC */
	float lam, div;                   /* TASK_ARITHMETIC (div: without consensus) */
	size_t n;                  /* LINEAR, TASK_ARITHMETIC: inputs below */
	const struct mk_device_input *in; /* [n], owned by the job */
};

/* What struct mk_method.device points at.  Both functions are required
 * (a backend treats a hook lacking one as no hook).  They are called from
 * the backend's thread, one job at a time, while no apply() of that job
 * runs on another thread. */
struct mk_device_hook {
	/* The element kernel of a float32 job, asked once mk_job_init has
	 * returned (its passes need not have run): an MK_DEVICE_* kernel, or
	 * MK_DEVICE_NONE when this job has none (the caller applies it on the
	 * CPU).  A backend offers the job to the device only when it
	 * implements the answer. */
	enum mk_device_kernel (*kernel)(const struct mk_job *job);
	/* The kernel's parameters of a float32 job whose passes are finished:
	 * fills *dj, dj->kernel being kernel()'s answer.  Pointers in *dj
	 * stay valid until mk_job_release.  Returns 0 or a negative MK_E*
	 * with a message. */
	int (*state)(const struct mk_job *job, struct mk_device_job *dj, struct mk_err *err);
};

#endif
