/* blas.h - how mk uses OpenBLAS's threads.  Internal. */
#ifndef MK_CORE_BLAS_H
#define MK_CORE_BLAS_H

/* From here on BLAS runs on the calling thread alone (mk's own threads
 * split the work; BLAS must not add its own under them).  Once per
 * process, any thread. */
void mk__blas_one_thread(void);

/* OpenBLAS's kernels for the CPU: a DYNAMIC_ARCH build that does not
 * recognize the processor (a virtual machine's CPUID model, say) falls
 * back to its Prescott kernels, SSE3 only: sgemm at a fifth of what the
 * AVX-512 or AVX2 kernels reach on the same host (measured 60 against 284
 * GFLOPS).  The core to ask for instead (OPENBLAS_CORETYPE, read when the
 * library loads: "SkylakeX", "Haswell") when that fallback is in use and
 * the CPU and OS have those instructions; NULL otherwise, or when
 * OPENBLAS_CORETYPE is set already. */
const char *mk_blas_core_better(void);
/* The kernels in use, as OpenBLAS names them ("SkylakeX"), or NULL for
 * another BLAS library. */
const char *mk_blas_core(void);

#endif
