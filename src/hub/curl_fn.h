/* curl_fn.h - libcurl, loaded when the Hub is first used (not installed).
 *
 * libmk does not link libcurl: a program that never talks to the Hub
 * (and a fully static one) needs none of libcurl's many libraries.  The
 * calls mk makes go through a table filled by dlopen("libcurl.so.4") the
 * first time; the macros below make them read as the libcurl calls they
 * are.  Only the types and constants come from <curl/curl.h>. */
#ifndef MK_CURL_FN_H
#define MK_CURL_FN_H

#define CURL_DISABLE_TYPECHECK 1
/* the older options are set on purpose when the libcurl loaded lacks
 * their successors (CURLOPT_PROTOCOLS) */
#define CURL_DISABLE_DEPRECATION 1
#include <curl/curl.h>
#include "mk/err.h"

struct mk__curl {
	CURLcode (*global_init)(long);
	CURL *(*easy_init)(void);
	void (*easy_cleanup)(CURL *);
	void (*easy_reset)(CURL *);
	CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
	CURLcode (*easy_perform)(CURL *);
	CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
	const char *(*easy_strerror)(CURLcode);
	CURLHcode (*easy_header)(CURL *, const char *, size_t, unsigned int, int, struct curl_header **);
	struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
	void (*slist_free_all)(struct curl_slist *);
	CURLM *(*multi_init)(void);
	CURLMcode (*multi_cleanup)(CURLM *);
	CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
	CURLMcode (*multi_add_handle)(CURLM *, CURL *);
	CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
	CURLMcode (*multi_perform)(CURLM *, int *);
	CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
	CURLMsg *(*multi_info_read)(CURLM *, int *);
};

extern struct mk__curl mk__curl;

/* Load libcurl ($MK_CURL_LIB, else libcurl.so.4, else
 * libcurl-gnutls.so.4) and fill mk__curl, once; 0, or an error saying
 * what is missing. */
int mk__curl_load(struct mk_err *err);

/* curl.h may define some of these as macros of its own */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_multi_setopt
#define curl_global_init mk__curl.global_init
#define curl_easy_init mk__curl.easy_init
#define curl_easy_cleanup mk__curl.easy_cleanup
#define curl_easy_reset mk__curl.easy_reset
#define curl_easy_setopt mk__curl.easy_setopt
#define curl_easy_perform mk__curl.easy_perform
#define curl_easy_getinfo mk__curl.easy_getinfo
#define curl_easy_strerror mk__curl.easy_strerror
#define curl_easy_header mk__curl.easy_header
#define curl_slist_append mk__curl.slist_append
#define curl_slist_free_all mk__curl.slist_free_all
#define curl_multi_init mk__curl.multi_init
#define curl_multi_cleanup mk__curl.multi_cleanup
#define curl_multi_setopt mk__curl.multi_setopt
#define curl_multi_add_handle mk__curl.multi_add_handle
#define curl_multi_remove_handle mk__curl.multi_remove_handle
#define curl_multi_perform mk__curl.multi_perform
#define curl_multi_poll mk__curl.multi_poll
#define curl_multi_info_read mk__curl.multi_info_read

#endif
