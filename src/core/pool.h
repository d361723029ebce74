/* pool.h - worker threads kept for the process's data-parallel steps.
 * Internal. */
#ifndef MK_CORE_POOL_H
#define MK_CORE_POOL_H

/* One task of a step: task k, run on the step's thread `slot` (the
 * caller 0, the others 1 .. threads - 1: an index for per-thread
 * scratch; no two tasks run on one slot at once). */
typedef void mk__pool_fn(void *arg, unsigned k, unsigned slot);

/* Run fn(arg, k, slot) for k = 0 .. ntasks - 1 on up to `threads` threads, the
 * calling thread one of them, and return when every task has run.  Tasks
 * go out in order of k, each to the next thread that is free, so a
 * thread that is slow (descheduled, or started late) takes fewer; which
 * thread runs a task is the only thing that varies, so tasks that write
 * only their own results give the same results on any number of
 * threads.  The threads are started on first use and kept (parked after
 * a short wait for the next step): starting a thread per step costs a
 * wake-up of an idle CPU each time, which on a virtual machine was a
 * quarter of a millisecond.  A step on fewer threads than there are
 * workers (fewer asked for, or fewer tasks) wakes only the workers it
 * uses (and any 32 above one of them, which parks again at once); the
 * others stay parked.  A call made from inside a task, or while
 * another thread's step is running, runs its tasks on the calling thread
 * alone. */
void mk__pool_run(unsigned threads, unsigned ntasks, mk__pool_fn *fn, void *arg);

#endif
