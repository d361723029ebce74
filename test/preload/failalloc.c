/* failalloc.so - make the Nth allocation of mk's own code fail, for the
 * allocation-failure tests (SQLite's habit: fail every allocation in turn
 * over a small merge; each must end in a clean error, never a crash).
 *
 *   MK_FAIL_ALLOC=N LD_PRELOAD=.../failalloc.so mk-plan ...
 *
 * Only calls made from the program itself (libmk and the main, which the
 * programs link statically) are counted and failed; the C library's,
 * libyaml's and jansson's own allocations are left alone, as is anything
 * before main.  N counts from 1; MK_FAIL_ALLOC unset or 0: nothing fails,
 * and the count of mk's allocations is written to stderr at exit when
 * MK_FAIL_ALLOC_COUNT is set (so a test knows how many N to try). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "preload.h"

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static char *(*real_strdup)(const char *);
static char *(*real_strndup)(const char *, size_t);
static unsigned long fail_at, seen;


static void report(void)
{
	if (getenv("MK_FAIL_ALLOC_COUNT"))
		fprintf(stderr, "failalloc: %lu allocations\n", seen);
}

static int resolving;

/* the real functions, looked up on first use (libraries allocate before
 * this object's constructor runs); dlsym's own calloc is served from a
 * static buffer meanwhile */
static void resolve(void)
{
	if (real_calloc || resolving)
		return;
	resolving = 1;
	real_malloc = dlsym(RTLD_NEXT, "malloc");
	real_realloc = dlsym(RTLD_NEXT, "realloc");
	real_strdup = dlsym(RTLD_NEXT, "strdup");
	real_strndup = dlsym(RTLD_NEXT, "strndup");
	real_calloc = dlsym(RTLD_NEXT, "calloc");
	resolving = 0;
}

__attribute__((constructor)) static void init(void)
{
	const char *n = getenv("MK_FAIL_ALLOC");

	resolve();
	preload_init();
	fail_at = n ? strtoul(n, NULL, 10) : 0;
	atexit(report);
}


/* an allocation asked for by mk's code: counted, and the Nth fails */
static int fail_here(void *caller)
{
	if (!from_mk(caller))
		return 0;
	return ++seen == fail_at;
}

void *malloc(size_t n)
{
	resolve();
	if (fail_here(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_malloc(n);
}

void *calloc(size_t a, size_t b)
{
	static char early[4096];     /* for dlsym's calloc while resolving */
	static size_t used;
	resolve();
	if (!real_calloc) {
		size_t n = (a * b + 15) & ~(size_t)15;
		if (used + n > sizeof(early))
			return NULL;
		used += n;
		return early + used - n;
	}
	if (fail_here(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
	resolve();
	if (fail_here(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_realloc(p, n);
}

char *strdup(const char *s)
{
	resolve();
	if (fail_here(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_strdup(s);
}

char *strndup(const char *s, size_t n)
{
	resolve();
	if (fail_here(__builtin_return_address(0))) {
		errno = ENOMEM;
		return NULL;
	}
	return real_strndup(s, n);
}
