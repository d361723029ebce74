/* blas.c - OpenBLAS's thread pool, as mk wants it.
 *
 * OpenBLAS (Debian's pthread build) starts a pool of nproc - 1 threads
 * when it is loaded, and each of them spins on sched_yield for about
 * 2^28 time-stamp cycles (a tenth of a second on a 2-3 GHz CPU) waiting
 * for work before it sleeps -- in every program that links libmk, BLAS
 * used or not, and again after each threaded BLAS call.  On a 2-core
 * machine that is half the CPU for the first 0.1 s of every run (mk-yaml
 * ties on three 300 MB models: 13% of the process's CPU samples).  So
 * the pool is stopped as libmk is loaded; OpenBLAS starts it again by
 * itself at the first BLAS call that wants more than one thread (the
 * forward pass), and mk__blas_one_thread keeps it from starting. */
#include <pthread.h>
#include <stdlib.h>
#include <strings.h>
#include <cblas.h>
#include "blas.h"

/* OpenBLAS's own (exported, not in cblas.h); absent from other BLAS
 * libraries, where there is nothing to stop */
extern int blas_thread_shutdown_(void) __attribute__((weak));

__attribute__((constructor)) static void blas_pool_stop(void)
{
	if (blas_thread_shutdown_)
		blas_thread_shutdown_();
}

static pthread_once_t one_once = PTHREAD_ONCE_INIT;

static void one_thread(void)
{
	openblas_set_num_threads(1);
}

void mk__blas_one_thread(void)
{
	pthread_once(&one_once, one_thread);
}

/* OpenBLAS's own, weak likewise */
extern char *openblas_get_corename(void) __attribute__((weak));

const char *mk_blas_core_better(void)
{
	const char *core;

	if (!openblas_get_corename || getenv("OPENBLAS_CORETYPE"))
		return NULL;
	core = openblas_get_corename();
	if (!core || strcasecmp(core, "Prescott"))
		return NULL;
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512cd"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
	return NULL;
}

const char *mk_blas_core(void)
{
	return openblas_get_corename ? openblas_get_corename() : NULL;
}
