/* test_pool.c - the worker threads kept for data-parallel steps
 * (src/core/pool.h): every task of a step runs once and the step returns
 * after the last; a slot runs one task at a time and stays under the
 * threads asked for; one thread runs all on the caller; a step started
 * inside a task, or beside another thread's step, runs on its caller;
 * steps in quick succession (workers arriving late to one) take no task
 * twice; a forked child can run steps; workers a step leaves out take next
 * to no CPU while it runs, and a step wakes every worker it uses. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "core/pool.h"

#define MAXT 2000
#define MAXS 64

struct rec {
	unsigned threads;
	_Atomic unsigned runs[MAXT];       /* per task */
	_Atomic int busy[MAXS];            /* per slot: a task on it now */
	_Atomic unsigned on_slot[MAXS];
	_Atomic unsigned bad_slot, overlap;
	unsigned sleep_every;              /* task k % sleep_every == 0 sleeps (0: none) */
	long sleep_ns;
	pthread_t caller;
	_Atomic unsigned off_caller;       /* slot 0 tasks not on the caller's thread */
	bool wait_slot1;                   /* a task on slot 0 waits until slot 1 ran one */
};

static void nap(long ns)
{
	struct timespec t = { 0, ns };
	nanosleep(&t, NULL);
}

static void record(void *arg, unsigned k, unsigned slot)
{
	struct rec *r = arg;

	if (slot >= r->threads || slot >= MAXS) {
		atomic_fetch_add(&r->bad_slot, 1);
		return;
	}
	if (atomic_exchange(&r->busy[slot], 1))
		atomic_fetch_add(&r->overlap, 1);
	if (slot == 0 && !pthread_equal(pthread_self(), r->caller))
		atomic_fetch_add(&r->off_caller, 1);
	atomic_fetch_add(&r->runs[k], 1);
	atomic_fetch_add(&r->on_slot[slot], 1);
	if (r->sleep_every && k % r->sleep_every == 0)
		nap(r->sleep_ns);
	/* a state, not a time: however slowly the worker is scheduled, the
	 * caller holds a task until the worker has taken one (a pool that
	 * never starts it fails below, after 60 s, instead of hanging) */
	for (int i = 0; r->wait_slot1 && slot == 0 && !atomic_load(&r->on_slot[1]) && i < 60000; i++)
		nap(1000000);
	atomic_store(&r->busy[slot], 0);
}

static void check_once(struct rec *r, unsigned ntasks)
{
	for (unsigned k = 0; k < ntasks; k++)
		assert_int_equal(atomic_load(&r->runs[k]), 1);
	for (unsigned k = ntasks; k < MAXT; k++)
		assert_int_equal(atomic_load(&r->runs[k]), 0);
	assert_int_equal(atomic_load(&r->bad_slot), 0);
	assert_int_equal(atomic_load(&r->overlap), 0);
	assert_int_equal(atomic_load(&r->off_caller), 0);
}

static struct rec *rec_new(unsigned threads)
{
	struct rec *r = calloc(1, sizeof(*r));

	assert_non_null(r);
	r->threads = threads;
	r->caller = pthread_self();
	return r;
}

static void test_each_task_once(void **state)
{
	(void)state;
	static const unsigned threads[] = { 2, 3, 4, 8, 64 };
	static const unsigned ntasks[] = { 1, 2, 3, 7, 100, MAXT };

	for (size_t a = 0; a < sizeof(threads) / sizeof(*threads); a++)
		for (size_t b = 0; b < sizeof(ntasks) / sizeof(*ntasks); b++) {
			struct rec *r = rec_new(threads[a]);
			r->sleep_every = 13;
			r->sleep_ns = 20000;
			mk__pool_run(threads[a], ntasks[b], record, r);
			check_once(r, ntasks[b]);
			free(r);
		}
}

/* Both slots take tasks: the caller holds its first until the worker has
 * run one. */
static void test_shared(void **state)
{
	(void)state;
	struct rec *r = rec_new(2);

	r->wait_slot1 = true;
	mk__pool_run(2, 8, record, r);
	check_once(r, 8);
	assert_true(atomic_load(&r->on_slot[1]) > 0);
	assert_int_equal(atomic_load(&r->on_slot[0]) + atomic_load(&r->on_slot[1]), 8);
	free(r);
}

static void test_one_thread(void **state)
{
	(void)state;
	struct rec *r = rec_new(1);

	mk__pool_run(1, 50, record, r);
	check_once(r, 50);
	assert_int_equal(atomic_load(&r->on_slot[0]), 50);
	mk__pool_run(4, 0, record, r);   /* no tasks: nothing runs */
	check_once(r, 50);
	free(r);
}

/* A step inside a task: its tasks all on that task's thread, slot 0. */
struct nest {
	_Atomic unsigned outer_runs, inner_runs, inner_elsewhere;
};

struct inner_arg {
	struct nest *n;
	pthread_t self;
};

static void inner(void *arg, unsigned k, unsigned slot)
{
	struct inner_arg *a = arg;

	(void)k;
	if (slot != 0 || !pthread_equal(pthread_self(), a->self))
		atomic_fetch_add(&a->n->inner_elsewhere, 1);
	atomic_fetch_add(&a->n->inner_runs, 1);
}

static void outer(void *arg, unsigned k, unsigned slot)
{
	struct nest *n = arg;
	struct inner_arg a = { n, pthread_self() };

	(void)k;
	(void)slot;
	atomic_fetch_add(&n->outer_runs, 1);
	mk__pool_run(4, 5, inner, &a);
}

static void test_nested(void **state)
{
	(void)state;
	struct nest n = { 0 };

	mk__pool_run(4, 6, outer, &n);
	assert_int_equal(atomic_load(&n.outer_runs), 6);
	assert_int_equal(atomic_load(&n.inner_runs), 30);
	assert_int_equal(atomic_load(&n.inner_elsewhere), 0);
}

/* Many short steps in a row, some tasks slow: a worker that arrives
 * late to a step must not take a task of the next. */
static void test_many_steps(void **state)
{
	(void)state;
	struct rec *r = rec_new(3);

	for (unsigned s = 0; s < 20000; s++) {
		unsigned n = 1 + s % 5;
		memset(r->runs, 0, sizeof(r->runs));
		r->sleep_every = s % 7 == 0 ? 2 : 0;
		r->sleep_ns = 1000;
		mk__pool_run(3, n, record, r);
		for (unsigned k = 0; k < n + 1; k++)
			assert_int_equal(atomic_load(&r->runs[k]), k < n);
	}
	assert_int_equal(atomic_load(&r->bad_slot), 0);
	assert_int_equal(atomic_load(&r->overlap), 0);
	assert_int_equal(atomic_load(&r->off_caller), 0);
	free(r);
}

/* Two threads running steps at once: each step's tasks all run, once. */
static void *stepper(void *p)
{
	struct rec *r = p;

	r->caller = pthread_self();
	for (unsigned s = 0; s < 2000; s++) {
		memset(r->runs, 0, sizeof(r->runs));
		mk__pool_run(2, 9, record, r);
		for (unsigned k = 0; k < 10; k++)
			if (atomic_load(&r->runs[k]) != (k < 9))
				return (void *)1;
	}
	return NULL;
}

static void test_concurrent_callers(void **state)
{
	(void)state;
	struct rec *a = rec_new(2), *b = rec_new(2);
	pthread_t ta, tb;
	void *ra, *rb;

	assert_int_equal(pthread_create(&ta, NULL, stepper, a), 0);
	assert_int_equal(pthread_create(&tb, NULL, stepper, b), 0);
	pthread_join(ta, &ra);
	pthread_join(tb, &rb);
	assert_null(ra);
	assert_null(rb);
	assert_int_equal(atomic_load(&a->bad_slot) + atomic_load(&b->bad_slot), 0);
	assert_int_equal(atomic_load(&a->overlap) + atomic_load(&b->overlap), 0);
	assert_int_equal(atomic_load(&a->off_caller) + atomic_load(&b->off_caller), 0);
	free(a);
	free(b);
}

/* After fork the child has no workers: its steps still run, all tasks. */
static void test_fork(void **state)
{
	(void)state;
#ifdef __SANITIZE_THREAD__
	skip();   /* TSan cannot start threads after a multi-threaded fork */
#endif
	struct rec *r = rec_new(4);

	mk__pool_run(4, 100, record, r);   /* workers started */
	check_once(r, 100);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		memset(r->runs, 0, sizeof(r->runs));
		r->caller = pthread_self();
		mk__pool_run(4, 100, record, r);
		for (unsigned k = 0; k < 100; k++)
			if (atomic_load(&r->runs[k]) != 1)
				_exit(1);
		_exit(0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	free(r);
}

/* CPU time (ns) of thread `tid` (0: the process's threads but `a` and
 * `b`), from /proc/self/task/TID/schedstat (its first field). */
static uint64_t cpu_ns(pid_t tid, pid_t a, pid_t b)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	uint64_t sum = 0;

	assert_non_null(d);
	while ((e = readdir(d))) {
		char path[300];
		unsigned long long ns;
		pid_t t = (pid_t)atoi(e->d_name);
		FILE *f;
		if (e->d_name[0] == '.' || (tid ? t != tid : t == a || t == b))
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
		if ((f = fopen(path, "r"))) {
			if (fscanf(f, "%llu", &ns) == 1)
				sum += ns;
			fclose(f);
		}
	}
	closedir(d);
	return sum;
}

/* Wait until every thread but the caller sleeps (state S in
 * /proc/self/task/TID/stat): the pool's workers have stopped looking for
 * work and parked.  A state, not a time (10 s only if one never does). */
static void wait_parked(pid_t self)
{
	for (int i = 0; i < 10000; i++) {
		DIR *d = opendir("/proc/self/task");
		struct dirent *e;
		bool all = true;

		assert_non_null(d);
		while ((e = readdir(d)) && all) {
			char path[300], buf[512], *rp;
			FILE *f;
			if (e->d_name[0] == '.' || (pid_t)atoi(e->d_name) == self)
				continue;
			snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
			if (!(f = fopen(path, "r")))
				continue;
			if (fgets(buf, sizeof(buf), f) && (rp = strrchr(buf, ')')) && rp[1] == ' ' && rp[2] != 'S')
				all = false;
			fclose(f);
		}
		closedir(d);
		if (all)
			return;
		nap(1000000);
	}
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static _Atomic pid_t slot1_tid;

static void note_slot1(void *arg, unsigned k, unsigned slot)
{
	(void)arg;
	(void)k;
	if (slot == 1)
		atomic_store(&slot1_tid, (pid_t)syscall(SYS_gettid));
	nap(1000000);   /* long enough for the worker to take the other task */
}

/* Workers started by a step on nine threads (more where the tests before
 * started them), then steps on two with the caller working 200 us between
 * them (less than a worker's look for the next step): the workers left
 * out stay parked, so they take almost none of the CPU time the caller
 * spends.  (Woken by every step and looking after each, the 62 left out
 * of the suite's 63 took 25 times the caller's.)  Skipped where the
 * kernel's schedstat does not count a thread's CPU time. */
static void test_left_out_parked(void **state)
{
	(void)state;
	struct rec *r = rec_new(9);
	pid_t self = (pid_t)syscall(SYS_gettid);

	mk__pool_run(9, 9, record, r);
	check_once(r, 9);
	wait_parked(self);    /* every worker parked */
	/* the one worker that takes part: its CPU is not counted */
	for (unsigned s = 0; s < 100 && !atomic_load(&slot1_tid); s++)
		mk__pool_run(2, 2, note_slot1, NULL);
	assert_true(atomic_load(&slot1_tid) != 0);
	pid_t w = atomic_load(&slot1_tid);
	wait_parked(self);    /* and the one that took part too */
	uint64_t w0 = cpu_ns(0, self, w), s0 = cpu_ns(self, 0, 0), c0 = thread_cpu_ns();
	for (unsigned s = 0; s < 200; s++) {
		memset(r->runs, 0, sizeof(r->runs));
		mk__pool_run(2, 2, record, r);
		check_once(r, 2);
		for (uint64_t t = thread_cpu_ns(), end = t + 200000; t < end; t = thread_cpu_ns())
			;
	}
	uint64_t busy = thread_cpu_ns() - c0, idle = cpu_ns(0, self, w) - w0, seen = cpu_ns(self, 0, 0) - s0;
	free(r);
	if (seen < busy / 2)
		skip();   /* schedstat does not count (the caller's 200 x 200 us) */
	print_message("caller %llu us, workers left out %llu us\n", (unsigned long long)(busy / 1000),
		      (unsigned long long)(idle / 1000));
	assert_true(idle < busy / 4);
}

/* Parked workers, then a step that needs every one of them: nine tasks
 * on nine threads, each waiting (5 s at most) until all nine have
 * begun, which happens only if the step woke every worker it uses. */
struct gather {
	_Atomic unsigned arrived;
	_Atomic unsigned full;
};

static void wait_all(void *arg, unsigned k, unsigned slot)
{
	struct gather *g = arg;

	(void)k;
	(void)slot;
	atomic_fetch_add(&g->arrived, 1);
	for (unsigned i = 0; i < 50000 && atomic_load(&g->arrived) < 9; i++)
		nap(100000);
	if (atomic_load(&g->arrived) >= 9)
		atomic_fetch_add(&g->full, 1);
}

static void test_all_woken(void **state)
{
	(void)state;
	struct rec *r = rec_new(9);

	mk__pool_run(9, 9, record, r);   /* the workers started */
	free(r);
	for (unsigned round = 0; round < 3; round++) {
		struct gather g = { 0 };
		wait_parked((pid_t)syscall(SYS_gettid));    /* every worker parked */
		mk__pool_run(9, 9, wait_all, &g);
		assert_int_equal(atomic_load(&g.arrived), 9);
		assert_int_equal(atomic_load(&g.full), 9);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_task_once),
		cmocka_unit_test(test_shared),
		cmocka_unit_test(test_one_thread),
		cmocka_unit_test(test_nested),
		cmocka_unit_test(test_many_steps),
		cmocka_unit_test(test_concurrent_callers),
		cmocka_unit_test(test_fork),
		cmocka_unit_test(test_left_out_parked),
		cmocka_unit_test(test_all_woken),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
