/* pool.c - worker threads kept for the process's data-parallel steps
 * (pool.h).
 *
 * mk-merge used to start a thread for each share of each range and join
 * it: on the 2-vCPU virtual machine of the benchmarks a new thread began
 * running a quarter of a millisecond after pthread_create (waking the
 * idle vCPU), about as long as its share of a 1M-element range took, so
 * the calling thread finished its share and waited for that long at
 * every join (mk-yaml ties on three 300 MB models: 80-100 ms of its
 * 370 ms).  Here the threads stay: after a step each one that took part
 * looks for the next for SPIN_NS, then sleeps on a futex until a step
 * that uses it comes.
 *
 * A step: the caller fills in the task list and publishes a new step
 * number in `claim` (step << 32 | next task), wakes the parked workers it
 * uses (each waits with its own bit of the futex word),
 * and takes tasks itself.  A thread claims task k by a compare-and-swap
 * that also checks the step number, so a worker that comes late never
 * takes a task of a step other than the one it saw; the step cannot end
 * (and its fields cannot change) while a claimed task runs, since the
 * caller returns only when `done` counts every task. */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "pool.h"

#define POOL_MAX 63             /* workers besides the caller */
#define SPIN_NS 300000          /* a worker's look for the next step */

static struct pool {
	pthread_mutex_t mu;     /* held by the step's caller */
	unsigned nthr;          /* workers started */
	_Atomic uint64_t claim; /* step << 32 | next task */
	_Atomic uint32_t step;  /* futex word of the parked workers */
	_Atomic uint32_t done;  /* tasks of the step run; futex of the caller */
	_Atomic uint64_t parked;  /* bit i: worker i sleeps on step */
	uint32_t first[POOL_MAX]; /* worker i: the step it starts after */
	_Atomic bool waiting;   /* the caller sleeps on done */
	/* the step's task list */
	_Atomic(mk__pool_fn *) fn;
	_Atomic(void *) arg;
	_Atomic unsigned ntasks, limit;   /* workers 0 .. limit - 1 take part */
} P = { .mu = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void futex_wait(_Atomic uint32_t *w, uint32_t v)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w, int n)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Parked workers wait on the step word each with the bit of its number
 * (modulo 32, the futex's bitset), so that a step wakes only those that
 * take part in it, and those 32 numbers above them (which park again). */
static uint32_t worker_bit(unsigned id)
{
	return 1u << (id % 32);
}

static void futex_wait_bits(_Atomic uint32_t *w, uint32_t v, uint32_t bits)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_BITSET_PRIVATE, v, NULL, NULL, bits);
}

static void futex_wake_bits(_Atomic uint32_t *w, uint32_t bits)
{
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_BITSET_PRIVATE, INT_MAX, NULL, NULL, bits);
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Claim and run step s's tasks until none is left; slot: the thread's
 * number in the step (the caller 0). */
static void run_tasks(uint32_t s, unsigned slot)
{
	uint64_t v = atomic_load_explicit(&P.claim, memory_order_acquire);

	for (;;) {
		/* a count of the next step's (read after its claim word was
		 * closed) makes the swap below fail */
		unsigned k = (uint32_t)v, n = atomic_load_explicit(&P.ntasks, memory_order_acquire);
		if ((uint32_t)(v >> 32) != s || k >= n)
			return;
		if (!atomic_compare_exchange_weak_explicit(&P.claim, &v, v + 1, memory_order_acq_rel,
							   memory_order_acquire))
			continue;
		/* task k is ours: the step lasts until it is done */
		mk__pool_fn *fn = atomic_load_explicit(&P.fn, memory_order_relaxed);
		fn(atomic_load_explicit(&P.arg, memory_order_relaxed), k, slot);
		if (atomic_fetch_add(&P.done, 1) + 1 == n && atomic_load(&P.waiting))
			futex_wake(&P.done, 1);
		v = atomic_load_explicit(&P.claim, memory_order_acquire);
	}
}

/* A worker looks for the next step only after one it took part in.  One
 * that a step leaves out (a step on fewer threads than there are
 * workers: fewer asked for, or fewer tasks, as a statistics pass of two
 * inputs under -j 16) parks at once, and steps that leave it out do not
 * wake it (but for the bit it shares, above), so it costs next to no
 * CPU while they run.  Woken by every step and looking after each, the
 * 62 workers that 200 two-thread steps left out in test_pool took
 * 1.05-1.09 s of CPU while the caller spent 41 ms; mk-yaml -j 8 on 2
 * CPUs, ties 365 -> 305 ms. */
static void *worker_main(void *p)
{
	unsigned id = (unsigned)(uintptr_t)p;
	uint32_t seen = P.first[id];   /* (written before the thread began) */
	uint64_t bit = 1ull << id;
	bool took_part = false;

	for (;;) {
		uint32_t s = atomic_load_explicit(&P.step, memory_order_acquire);
		if (s == seen) {
			/* look for the next step a while, then park */
			uint64_t end = took_part ? now_ns() + SPIN_NS : 0;
			for (unsigned i = 1; took_part && (s = atomic_load_explicit(&P.step, memory_order_acquire)) == seen;
			     i++) {
				relax();
				if (!(i & 255) && now_ns() > end)
					break;
			}
			if (s == seen) {
				atomic_fetch_or(&P.parked, bit);
				if (atomic_load(&P.step) == seen)
					futex_wait_bits(&P.step, seen, worker_bit(id));
				atomic_fetch_and(&P.parked, ~bit);
				took_part = false;
				continue;
			}
		}
		seen = s;
		took_part = id < atomic_load_explicit(&P.limit, memory_order_relaxed);
		if (took_part)
			run_tasks(s, id + 1);
	}
	return NULL;
}

/* A forked child has the calling thread alone: no workers, and the lock
 * as if never taken. */
static void after_fork_child(void)
{
	pthread_mutex_init(&P.mu, NULL);
	P.nthr = 0;
	atomic_store(&P.parked, 0);
	atomic_store(&P.waiting, false);
}

static void fork_register(void)
{
	pthread_atfork(NULL, NULL, after_fork_child);
}

/* Start workers up to `want` (under P.mu); fewer if the system says no. */
static void grow(unsigned want)
{
	sigset_t all, old;

	if (want > POOL_MAX)
		want = POOL_MAX;
	if (P.nthr >= want)
		return;
	/* workers take no signals: they stay with the program's threads;
	 * but the faults of their own accesses they take (a blocked SIGBUS
	 * kills the process: a worker reading a truncated file's map must
	 * reach core/mapguard.c's handler) */
	sigfillset(&all);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (P.nthr < want) {
		pthread_t t;
		pthread_attr_t at;
		int rc;
		if (pthread_attr_init(&at))
			break;
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		/* the step now: a thread that starts after the caller
		 * publishes the next one takes part in it */
		P.first[P.nthr] = atomic_load(&P.step);
		rc = pthread_create(&t, &at, worker_main, (void *)(uintptr_t)P.nthr);
		pthread_attr_destroy(&at);
		if (rc)
			break;
		P.nthr++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

void mk__pool_run(unsigned threads, unsigned ntasks, mk__pool_fn *fn, void *arg)
{
	if (!ntasks)
		return;
	if (threads > ntasks)
		threads = ntasks;
	if (threads <= 1 || pthread_mutex_trylock(&P.mu)) {
		/* one thread, or inside or beside another step: here */
		for (unsigned k = 0; k < ntasks; k++)
			fn(arg, k, 0);
		return;
	}
	pthread_once(&fork_once, fork_register);
	grow(threads - 1);
	uint32_t s = atomic_load(&P.step) + 1;
	/* closed first: a worker still looking at the last step (its claim
	 * word and task count read, its compare-and-swap not yet done) must
	 * not take a task of it against this step's count */
	atomic_store(&P.claim, (uint64_t)s << 32 | UINT32_MAX);
	atomic_store_explicit(&P.fn, fn, memory_order_relaxed);
	atomic_store_explicit(&P.arg, arg, memory_order_relaxed);
	atomic_store_explicit(&P.limit, threads - 1, memory_order_relaxed);
	atomic_store(&P.done, 0);
	atomic_store_explicit(&P.ntasks, ntasks, memory_order_release);
	atomic_store_explicit(&P.claim, (uint64_t)s << 32, memory_order_release);
	atomic_store(&P.step, s);
	/* wake the workers that take part, 0 .. threads - 2, if one sleeps */
	unsigned used = threads - 1 < POOL_MAX ? threads - 1 : POOL_MAX;
	if (atomic_load(&P.parked) & ((1ull << used) - 1))
		futex_wake_bits(&P.step, used >= 32 ? UINT32_MAX : (1u << used) - 1);   /* worker_bit of each */
	run_tasks(s, 0);
	/* the others' tasks: a short look, then sleep until the last one */
	for (unsigned i = 0; atomic_load(&P.done) != ntasks && i < 4096; i++)
		relax();
	if (atomic_load(&P.done) != ntasks) {
		atomic_store(&P.waiting, true);
		for (uint32_t d; (d = atomic_load(&P.done)) != ntasks;)
			futex_wait(&P.done, d);
		atomic_store(&P.waiting, false);
	}
	pthread_mutex_unlock(&P.mu);
}
