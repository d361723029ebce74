/* spm_load.c - the SentencePiece helper (libmk-spm.so, built from spm.cc
 * over libsentencepiece) found and loaded the first time a tokenizer.model
 * is read.  Where it is looked for, in order: $MK_SPM_LIB; in mk/ beside
 * the file this code is in (an installed PREFIX/lib/libmk.so: PREFIX/lib/mk);
 * next to the program's directory (a build tree: build/bin/mk-plan and
 * build/libmk-spm.so); PREFIX/lib/mk beside an installed program
 * (bin/../lib/mk).  The fuzz build links it in instead (MK_SPM_DIRECT). */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "vocab_impl.h"

#ifdef MK_SPM_DIRECT
int mk__spm_pieces(const void *data, size_t len, struct mk__spm_piece **out, size_t *n, char *msg, size_t cap)
{
	return mk_spm_pieces_v1(data, len, out, n, msg, cap);
}
#else
typedef int (*spm_fn)(const void *, size_t, struct mk__spm_piece **, size_t *, char *, size_t);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static spm_fn fn;
static char tried[1024];

static void load(void)
{
	char exe[PATH_MAX], cand[6][PATH_MAX + 32];
	Dl_info di;
	size_t nc = 0;
	const char *env = getenv("MK_SPM_LIB");
	ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (env && *env)
		snprintf(cand[nc++], sizeof(cand[0]), "%s", env);
	if (dladdr((void *)mk__spm_pieces, &di) && di.dli_fname && strrchr(di.dli_fname, '/')) {
		const char *f = di.dli_fname;
		snprintf(cand[nc++], sizeof(cand[0]), "%.*s/mk/libmk-spm.so", (int)(strrchr(f, '/') - f), f);
		/* the build tree: beside libmk.so (a program linking the shared
		 * library from there, Python's ctypes) */
		snprintf(cand[nc++], sizeof(cand[0]), "%.*s/libmk-spm.so", (int)(strrchr(f, '/') - f), f);
	}
	if (l > 0) {
		exe[l] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(cand[nc++], sizeof(cand[0]), "%s/../libmk-spm.so", exe);
			snprintf(cand[nc++], sizeof(cand[0]), "%s/../lib/mk/libmk-spm.so", exe);
		}
	}
	for (size_t i = 0; i < nc && !fn; i++) {
		void *h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
		size_t at = strlen(tried);
		snprintf(tried + at, sizeof(tried) - at, "%s%.300s", at ? ", " : "", cand[i]);
		if (h && !(fn = (spm_fn)dlsym(h, "mk_spm_pieces_v1")))
			dlclose(h);
	}
}

int mk__spm_pieces(const void *data, size_t len, struct mk__spm_piece **out, size_t *n, char *msg, size_t cap)
{
	*out = NULL;
	*n = 0;
	pthread_once(&once, load);
	if (!fn) {
		snprintf(msg, cap, "mk's SentencePiece helper libmk-spm.so is not installed (tried %s; set MK_SPM_LIB)", tried);
		return -3;
	}
	return fn(data, len, out, n, msg, cap);
}
#endif
