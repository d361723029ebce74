/* hub_impl.h - what the Hub client shares with the streaming reader (not
 * installed). */
#ifndef MK_HUB_IMPL_H
#define MK_HUB_IMPL_H

#include "curl_fn.h"
#include <stdbool.h>
#include <stdint.h>
#include "hub/hub.h"

struct mk_hub_settings {
	char *endpoint;        /* without a trailing '/' */
	char *token;           /* or NULL */
	unsigned parallel;
	unsigned retries;
	unsigned retry_ms;
	unsigned stall_s;      /* the window of the speed floor, and the connect timeout */
	unsigned min_speed;    /* bytes/s: slower for stall_s seconds is a stall */
};

/* The process's settings, read from the environment on first use. */
const struct mk_hub_settings *mk__hub_settings(struct mk_err *err);

/* Set the options every mk request has (user agent, token, redirects,
 * stall timeouts, no signals) on a fresh or reset easy handle; `hdrs`
 * (out) must be freed with curl_slist_free_all after the transfer. */
int mk__hub_easy_setup(CURL *e, const char *url, uint64_t range_from, uint64_t range_to,
		       struct curl_slist **hdrs, struct mk_err *err);

/* What a finished transfer means: 0 success; 1 retry (after *wait_ms);
 * or a negative MK_E* code with err set naming `what`. */
int mk__hub_judge(CURL *e, CURLcode res, const char *what, unsigned attempt,
		  unsigned *wait_ms, struct mk_err *err);

/* Sleep for ms milliseconds (interrupted sleeps resumed). */
void mk__hub_sleep_ms(unsigned ms);

/* Count body bytes received (all requests). */
void mk__hub_count(uint64_t n);

/* `url` as mk shows it in messages and logs (url.c): userinfo as "***@",
 * every query value but mk's own (blobs, recursive, expand) as "***", no
 * fragment, control characters as '?'; into out (cap bytes, truncated),
 * which is returned.  Every URL a message names goes through it. */
const char *mk__hub_url_shown(const char *url, char *out, size_t cap);

/* HF_ENDPOINT must be an http:// or https:// address with no space or
 * control character: 0, or an error saying so (the address shown). */
int mk__hub_endpoint_check(const char *endpoint, struct mk_err *err);

/* Lock blob ETAG of the repository cached in repo_dir (lock.c): *fd, 0;
 * 1 when !wait and another holds it (or this thread does); an error
 * when this thread holds it already and wait (it would wait for itself).
 * Released by mk__hub_unlock_blob (fd < 0: nothing). */
int mk__hub_lock_blob(const char *repo_dir, const char *etag, bool wait, int *fd, struct mk_err *err);
void mk__hub_unlock_blob(int fd);

#endif
