/* curl_load.c - libcurl loaded on first use (curl_fn.h says why). */
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "curl_fn.h"

struct mk__curl mk__curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_rc;
static struct mk_err load_err;

static void load(void)
{
	const char *env = getenv("MK_CURL_LIB");
	const char *cand[] = { env && env[0] ? env : NULL, "libcurl.so.4", "libcurl-gnutls.so.4" };
	char why[512] = "";
	void *h = NULL;

	for (size_t i = 0; i < sizeof(cand) / sizeof(*cand) && !h; i++) {
		if (!cand[i])
			continue;
		h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL);
		if (!h && !why[0])
			snprintf(why, sizeof(why), "%s", dlerror());
		if (env && env[0] && i == 0 && !h)
			break;                 /* the one asked for, or nothing */
	}
	if (!h) {
		load_rc = mk_err_set(&load_err, MK_EUNSUPPORTED, "the Hugging Face Hub needs libcurl, which "
				     "cannot be loaded (%s): install it (Debian: libcurl4), or set MK_CURL_LIB "
				     "to its file", why);
		return;
	}
	static const struct { const char *name; size_t off; bool optional; } fns[] = {
#define F(n, f, opt) { "curl_" n, offsetof(struct mk__curl, f), opt }
		F("global_init", global_init, false), F("easy_init", easy_init, false),
		F("easy_cleanup", easy_cleanup, false), F("easy_reset", easy_reset, false),
		F("easy_setopt", easy_setopt, false), F("easy_perform", easy_perform, false),
		F("easy_getinfo", easy_getinfo, false), F("easy_strerror", easy_strerror, false),
		F("easy_header", easy_header, true), F("slist_append", slist_append, false),
		F("slist_free_all", slist_free_all, false), F("multi_init", multi_init, false),
		F("multi_cleanup", multi_cleanup, false), F("multi_setopt", multi_setopt, false),
		F("multi_add_handle", multi_add_handle, false),
		F("multi_remove_handle", multi_remove_handle, false),
		F("multi_perform", multi_perform, false), F("multi_poll", multi_poll, false),
		F("multi_info_read", multi_info_read, false),
#undef F
	};
	for (size_t i = 0; i < sizeof(fns) / sizeof(*fns); i++) {
		void *p = dlsym(h, fns[i].name);
		if (!p && !fns[i].optional) {
			load_rc = mk_err_set(&load_err, MK_EUNSUPPORTED, "the libcurl loaded lacks %s (mk needs "
					     "libcurl 7.66 or newer)", fns[i].name);
			memset(&mk__curl, 0, sizeof(mk__curl));
			dlclose(h);
			return;
		}
		memcpy((char *)&mk__curl + fns[i].off, &p, sizeof(p));
	}
}

int mk__curl_load(struct mk_err *err)
{
	pthread_once(&once, load);
	if (load_rc && err)
		*err = load_err;
	return load_rc;
}
