/* url.c - the addresses mk talks to and shows: HF_ENDPOINT checked, and
 * every URL put in a message or a log without its secrets. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "hub_impl.h"

/* Query keys whose values are mk's own and say nothing secret. */
static bool key_shown(const char *k, size_t n)
{
	static const char *const keys[] = { "blobs", "recursive", "expand" };

	for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
		if (strlen(keys[i]) == n && !strncasecmp(k, keys[i], n))
			return true;
	return false;
}

/* Append n bytes of s to out (cap bytes, always terminated). */
static void put(char *out, size_t cap, size_t *at, const char *s, size_t n)
{
	for (size_t i = 0; i < n && *at + 1 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		out[(*at)++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
	}
	out[*at < cap ? *at : cap - 1] = '\0';
}

const char *mk__hub_url_shown(const char *url, char *out, size_t cap)
{
	const char *p = url, *sep = strstr(url, "://"), *end;
	size_t at = 0;

	if (!cap)
		return out;
	out[0] = '\0';
	if (!url)
		return out;
	if (sep) {
		/* userinfo: "user:password@" before the host */
		const char *auth = sep + 3, *stop = auth + strcspn(auth, "/?#"), *atsign = NULL;
		for (const char *q = auth; q < stop; q++)
			if (*q == '@')
				atsign = q;
		put(out, cap, &at, url, (size_t)(auth - url));
		if (atsign) {
			put(out, cap, &at, "***@", 4);
			auth = atsign + 1;
		}
		p = auth;
	}
	end = p + strcspn(p, "?#");
	put(out, cap, &at, p, (size_t)(end - p));
	if (*end != '?')
		return out;                    /* a fragment is never shown */
	/* the query: each value hidden unless its key is one of mk's own */
	p = end + 1;
	put(out, cap, &at, "?", 1);
	while (*p && *p != '#') {
		size_t n = strcspn(p, "&#"), k = strcspn(p, "=&#");
		if (k < n && key_shown(p, k))
			put(out, cap, &at, p, n);
		else if (k < n) {
			put(out, cap, &at, p, k + 1);
			put(out, cap, &at, "***", 3);
		} else if (n)
			put(out, cap, &at, "***", 3);
		p += n;
		if (*p == '&') {
			put(out, cap, &at, "&", 1);
			p++;
		}
	}
	return out;
}

int mk__hub_endpoint_check(const char *endpoint, struct mk_err *err)
{
	char shown[512];

	for (const char *c = endpoint; *c; c++)
		if ((unsigned char)*c <= 0x20 || *c == 0x7f)
			return mk_err_set(err, MK_EINVAL, "HF_ENDPOINT '%s' holds a space or a control character",
					  mk__hub_url_shown(endpoint, shown, sizeof(shown)));
	if (strncasecmp(endpoint, "http://", 7) && strncasecmp(endpoint, "https://", 8))
		return mk_err_set(err, MK_EINVAL, "HF_ENDPOINT '%s' is not an http:// or https:// address "
				  "(mk speaks http and https only)", mk__hub_url_shown(endpoint, shown, sizeof(shown)));
	return 0;
}
