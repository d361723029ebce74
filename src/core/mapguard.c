/* mapguard.c - guarded file mappings and the SIGBUS handler (mapguard.h).
 *
 * The slots are read by the handler, which may run on any thread at any
 * time: they are fixed, their fields atomics, and a slot is published by
 * its start address (set last, cleared first).  The handler calls only
 * mmap, sigaction and memcpy-like copies.  A mapping being removed while
 * a fault in it is handled is not possible: a fault is raised by an
 * access, and the owner unmaps only after its accesses are done. */
#include <pthread.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/mapguard.h"

#define MK_MAPGUARD_SLOTS 4096
#define NAME_MAX_LEN 512

struct slot {
	_Atomic uintptr_t start;     /* 0: free */
	_Atomic size_t len;
	char name[NAME_MAX_LEN];
};

static struct slot slots[MK_MAPGUARD_SLOTS];
static _Atomic unsigned long faults;
static char last_name[NAME_MAX_LEN];    /* the file of a recent fault ... */
static _Atomic unsigned long named_at;  /* ... and its number (faults' value) */
static _Atomic int naming;              /* a handler is writing last_name */
static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int installed;
static uintptr_t page = 4096;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	int saved = errno;      /* mmap below must not change what the thread sees */

	if (si->si_code == BUS_ADRERR) {
		for (size_t i = 0; i < MK_MAPGUARD_SLOTS; i++) {
			uintptr_t s = atomic_load(&slots[i].start);
			if (!s || a < s || a - s >= atomic_load(&slots[i].len))
				continue;
			if (mmap((void *)(a & ~(page - 1)), page, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
				break;
			unsigned long n = atomic_fetch_add(&faults, 1) + 1;
			/* one writer at a time; a fault meanwhile keeps the name before */
			if (!atomic_exchange(&naming, 1)) {
				for (size_t k = 0; k < NAME_MAX_LEN && (last_name[k] = slots[i].name[k]); k++)
					;
				atomic_store(&named_at, n);
				atomic_store(&naming, 0);
			}
			errno = saved;
			return;                 /* the access is tried again: zeros */
		}
	}
	/* not ours: what was there before */
	if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction) {
		previous.sa_sigaction(sig, si, uc);
	} else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
		previous.sa_handler(sig);
	} else {
		/* the default action: the access faults again, now fatal */
		struct sigaction dfl;
		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGBUS, &dfl, NULL);
	}
	errno = saved;
}

static void install(void)
{
	struct sigaction sa;
	long pg = sysconf(_SC_PAGESIZE);

	if (pg > 0)
		page = (uintptr_t)pg;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	installed = sigaction(SIGBUS, &sa, &previous) == 0;
}

int mk_mapguard_add(void *addr, size_t len, const char *name)
{
	int rc = -1;

	pthread_once(&once, install);
	if (!installed || !addr || !len)
		return -1;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < MK_MAPGUARD_SLOTS; i++) {
		if (atomic_load(&slots[i].start))
			continue;
		snprintf(slots[i].name, sizeof(slots[i].name), "%s", name ? name : "a mapped file");
		atomic_store(&slots[i].len, len);
		atomic_store(&slots[i].start, (uintptr_t)addr);
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

void mk_mapguard_unmap(void *addr, size_t len)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; addr && i < MK_MAPGUARD_SLOTS; i++)
		if (atomic_load(&slots[i].start) == (uintptr_t)addr) {
			atomic_store(&slots[i].start, 0);
			break;
		}
	pthread_mutex_unlock(&mu);
	munmap(addr, len);
}

unsigned long mk_mapguard_faults(void)
{
	return atomic_load(&faults);
}

int mk_mapguard_check(unsigned long since, struct mk_err *err)
{
	if (atomic_load(&faults) == since)
		return 0;
	/* the name of a fault since `since`, when one was recorded whole */
	if (atomic_load(&named_at) > since && !atomic_load(&naming))
		return mk_err_set(err, MK_ECORRUPT, "%s was truncated while being read", last_name);
	return mk_err_set(err, MK_ECORRUPT, "a model file was truncated while being read");
}
