/* blas.h - how mk uses OpenBLAS's threads.  Internal. */
#ifndef MK_CORE_BLAS_H
#define MK_CORE_BLAS_H

/* From here on BLAS runs on the calling thread alone (mk's own threads
 * split the work; BLAS must not add its own under them).  Once per
 * process, any thread. */
void mk__blas_one_thread(void);

#endif
