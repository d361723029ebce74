/* hub.c - the Hugging Face Hub client: settings, repository listings,
 * downloads into the Hugging Face cache, range reads (libcurl). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "hub_impl.h"
#include "core/fsutil.h"
#include "core/hash.h"

#define API_MAX (64u << 20)          /* a listing of a huge repository */
/* Space a download leaves free on the cache's file system, above the
 * listed sizes of its files (mk-get(1)) */
#define FREE_MARGIN ((uint64_t)64 << 20)
/* A transfer slower than MIN_SPEED bytes a second for STALL_S seconds is
 * a stall, retried (MK_HUB_MIN_SPEED, MK_HUB_STALL_S; mk-get(1)) */
#define MIN_SPEED 1024u
#define STALL_S 30u

struct mk_hub {
	CURL *easy;                  /* single requests, kept for its connection */
};

static struct mk_hub_opts g_opts;
static struct mk_hub_settings g_set;
static int g_set_rc;
static struct mk_err g_set_err;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t g_bytes;

void mk_hub_configure(const struct mk_hub_opts *o)
{
	g_opts = o ? *o : (struct mk_hub_opts){ 0 };
}

void mk__hub_count(uint64_t n)
{
	atomic_fetch_add(&g_bytes, n);
}

uint64_t mk_hub_bytes_received(void)
{
	return atomic_load(&g_bytes);
}

void mk__hub_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static bool env_true(const char *name)
{
	const char *e = getenv(name);

	return e && (!strcmp(e, "1") || !strcasecmp(e, "true") || !strcasecmp(e, "yes") ||
		     !strcasecmp(e, "on"));
}

bool mk_hub_offline(void)
{
	return env_true("HF_HUB_OFFLINE");
}

static unsigned env_uint(const char *name, unsigned def, unsigned lo, unsigned hi)
{
	const char *e = getenv(name);
	char *end;
	unsigned long v;

	if (!e || !e[0])
		return def;
	errno = 0;
	v = strtoul(e, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return def;
	return (unsigned)v;
}

static char *hf_home(void)
{
	const char *e;
	char *s;

	if ((e = getenv("HF_HOME")) && e[0])
		return strdup(e);
	if ((e = getenv("XDG_CACHE_HOME")) && e[0])
		return asprintf(&s, "%s/huggingface", e) < 0 ? NULL : s;
	if ((e = getenv("HOME")) && e[0])
		return asprintf(&s, "%s/.cache/huggingface", e) < 0 ? NULL : s;
	return NULL;
}

char *mk_hub_cache_dir(struct mk_err *err)
{
	const char *e;
	char *s = NULL, *home;

	if ((e = getenv("HF_HUB_CACHE")) && e[0])
		s = strdup(e);
	else if ((home = hf_home())) {
		if (asprintf(&s, "%s/hub", home) < 0)
			s = NULL;
		free(home);
	} else {
		mk_err_set(err, MK_ENOENT, "no Hugging Face cache: set HF_HUB_CACHE, HF_HOME or HOME");
		return NULL;
	}
	if (!s)
		mk_err_set(err, MK_ENOMEM, "out of memory");
	return s;
}

/* A token as huggingface_hub cleans it: white space around it stripped;
 * empty is none (*out NULL).  One with a control character inside (a
 * second line, a carriage return: another HTTP header) is refused, and
 * never shown.  `src` names where it came from. */
static int token_clean(const char *t, size_t n, const char *src, char **out, struct mk_err *err)
{
	*out = NULL;
	while (n && isspace((unsigned char)*t)) {
		t++;
		n--;
	}
	while (n && isspace((unsigned char)t[n - 1]))
		n--;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)t[i] < 0x20 || t[i] == 0x7f)
			return mk_err_set(err, MK_EINVAL, "the Hub token in %s has a control character inside "
					  "(byte %zu of %zu: a line break or the like), so it is not sent (and not shown "
					  "here); set it to the token alone", src, i + 1, n);
	if (n && !(*out = strndup(t, n)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	return 0;
}

/* The token: $HF_TOKEN, else the file $HF_TOKEN_PATH or $HF_HOME/token
 * (cleaned: token_clean). */
static int read_token(char **out, struct mk_err *err)
{
	const char *e = getenv("HF_TOKEN");
	char *path = NULL, *home;
	uint8_t *buf = NULL;
	size_t len;
	int rc;

	*out = NULL;
	if (e && e[0])
		return token_clean(e, strlen(e), "HF_TOKEN", out, err);
	if ((e = getenv("HF_TOKEN_PATH")) && e[0])
		path = strdup(e);
	else if ((home = hf_home())) {
		if (asprintf(&path, "%s/token", home) < 0)
			path = NULL;
		free(home);
	}
	if (!path || mk_file_read(path, 4096, &buf, &len, NULL) < 0) {
		free(path);
		return 0;
	}
	rc = token_clean((const char *)buf, len, path, out, err);
	free(buf);
	free(path);
	return rc;
}

/* Whole seconds, at least 1, from a variable huggingface_hub reads as a
 * float (rounded up; def when unset, not above 0 or above hi). */
static unsigned env_seconds(const char *name, unsigned def, unsigned hi)
{
	const char *e = getenv(name);
	char *end;
	double v;

	if (!e || !e[0])
		return def;
	v = strtod(e, &end);
	if (*end || !(v > 0 && v <= hi))
		return def;
	return (unsigned)v + (v > (unsigned)v);
}

/* MK_HUB_MIN_SPEED: bytes a second, with a size suffix ("1K"). */
static unsigned env_speed(const char *name, unsigned def)
{
	const char *e = getenv(name);
	uint64_t v;

	if (!e || !e[0] || mk_size_parse(e, &v) < 0 || v < 1 || v > (1u << 30))
		return def;
	return (unsigned)v;
}

static void settings_init(void)
{
	const char *e = getenv("HF_ENDPOINT");

	if (mk__curl_load(&g_set_err)) {
		g_set_rc = -g_set_err.code;
		return;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		g_set_rc = mk_err_set(&g_set_err, MK_EIO, "libcurl could not be initialised");
		return;
	}
	g_set.endpoint = strdup(e && e[0] ? e : "https://huggingface.co");
	if (!g_set.endpoint) {
		g_set_rc = mk_err_set(&g_set_err, MK_ENOMEM, "out of memory");
		return;
	}
	for (size_t n = strlen(g_set.endpoint); n > 0 && g_set.endpoint[n - 1] == '/'; n--)
		g_set.endpoint[n - 1] = '\0';
	if ((g_set_rc = mk__hub_endpoint_check(g_set.endpoint, &g_set_err)) < 0 ||
	    (g_set_rc = read_token(&g_set.token, &g_set_err)) < 0)
		return;
	g_set.parallel = env_uint("MK_HUB_PARALLEL", 8, 1, 64);
	g_set.retries = env_uint("MK_HUB_RETRIES", 5, 0, 100);
	g_set.retry_ms = env_uint("MK_HUB_RETRY_MS", 500, 0, 600000);
	g_set.stall_s = env_uint("MK_HUB_STALL_S", env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", STALL_S, 3600),
				 1, 3600);
	g_set.min_speed = env_speed("MK_HUB_MIN_SPEED", MIN_SPEED);
}

const struct mk_hub_settings *mk__hub_settings(struct mk_err *err)
{
	pthread_once(&g_once, settings_init);
	if (g_set_rc) {
		if (err)
			*err = g_set_err;
		return NULL;
	}
	return &g_set;
}

/* ---- names ---- */

static bool part_ok(const char *s, size_t n)
{
	if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && !strncmp(s, "..", 2)))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

bool mk_hub_repo_id_ok(const char *id)
{
	const char *slash = strchr(id, '/');

	if (!slash)
		return part_ok(id, strlen(id));
	return part_ok(id, (size_t)(slash - id)) && part_ok(slash + 1, strlen(slash + 1));
}

/* A repository file's name must stay inside the snapshot. */
static bool file_name_ok(const char *s)
{
	return s[0] && mk_path_stays_inside(s) && !strchr(s, '\n');
}

static bool is_commit(const char *s)
{
	size_t n = strlen(s);

	if (n != 40)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	return true;
}

static bool is_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* URL-escape `s`, keeping '/' when keep_slash. */
static char *url_escape(const char *s, bool keep_slash)
{
	size_t n = strlen(s);
	char *o = malloc(3 * n + 1), *p = o;

	if (!o)
		return NULL;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (isalnum(c) || strchr("-._~", c) || (keep_slash && c == '/'))
			*p++ = (char)c;
		else
			p += sprintf(p, "%%%02X", c);
	}
	*p = '\0';
	return o;
}

/* ---- requests ---- */

/* http and https only, for the request and every redirect: libcurl
 * 7.85's names for the lists where the libcurl loaded knows them, else
 * the older bitmasks; -1 when neither is taken. */
static int restrict_protocols(CURL *e)
{
	const long bits = CURLPROTO_HTTP | CURLPROTO_HTTPS;
	int ok = 0;

#if LIBCURL_VERSION_NUM >= 0x075500
	ok += curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK ||
	      curl_easy_setopt(e, CURLOPT_PROTOCOLS, bits) == CURLE_OK;
	ok += curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") == CURLE_OK ||
	      curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, bits) == CURLE_OK;
#else
	ok += curl_easy_setopt(e, CURLOPT_PROTOCOLS, bits) == CURLE_OK;
	ok += curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, bits) == CURLE_OK;
#endif
	return ok == 2 ? 0 : -1;
}

int mk__hub_easy_setup(CURL *e, const char *url, uint64_t from, uint64_t to,
		       struct curl_slist **hdrs, struct mk_err *err)
{
	const struct mk_hub_settings *s = mk__hub_settings(err);
	char range[64];
	struct curl_slist *h = NULL, *t;

	*hdrs = NULL;
	if (!s)
		return -MK_EIO;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
	if (restrict_protocols(e) < 0)
		return mk_err_set(err, MK_EUNSUPPORTED, "the libcurl loaded cannot be limited to http and https");
	curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "mk/" MK_VERSION);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, (long)s->stall_s);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, (long)s->min_speed);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)s->stall_s);
	curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL);  /* identity: sizes are exact */
	if (from != UINT64_MAX) {
		snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)from,
			 (unsigned long long)to);
		curl_easy_setopt(e, CURLOPT_RANGE, range);
	} else {
		curl_easy_setopt(e, CURLOPT_RANGE, NULL);
	}
	if (s->token) {
		char *a;
		if (asprintf(&a, "Authorization: Bearer %s", s->token) < 0)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		/* curl sends a header set here to the Hub only: not to the
		 * host of a redirect (the CDN) */
		t = curl_slist_append(h, a);
		free(a);
		if (!t)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		h = t;
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	*hdrs = h;
	return 0;
}

/* Retry-After in seconds, from the last response's headers (0: none). */
static unsigned retry_after_ms(CURL *e)
{
	struct curl_header *h;

	if (curl_easy_header && curl_easy_header(e, "Retry-After", 0, CURLH_HEADER, -1, &h) == CURLHE_OK) {
		char *end;
		unsigned long v = strtoul(h->value, &end, 10);
		if (end != h->value && v < 3600)
			return (unsigned)v * 1000u;
	}
	return 0;
}

int mk__hub_judge(CURL *e, CURLcode res, const char *what, unsigned attempt,
		  unsigned *wait_ms, struct mk_err *err)
{
	const struct mk_hub_settings *s = mk__hub_settings(err);
	long code = 0;
	char why[160];
	unsigned back;

	if (!s)
		return -MK_EIO;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
	back = s->retry_ms;
	for (unsigned i = 0; i < attempt && back < 30000; i++)
		back *= 2;
	if (back > 30000)
		back = 30000;
	if (res == CURLE_OK && (code == 200 || code == 206))
		return 0;
	if (res == CURLE_OK) {
		if (code == 401 || code == 403)
			return mk_err_set(err, MK_EUNSUPPORTED,
					  "%s: the Hub answered %ld (%s): the repository is gated or private. "
					  "Accept its terms on its Hub page with your account, then give mk a token "
					  "with read access: set HF_TOKEN, or run `hf auth login` (HF_HOME/token)%s",
					  what, code, code == 401 ? "unauthorized" : "forbidden",
					  s->token ? "; the token mk sent was refused" : "; mk sent no token");
		if (code == 404)
			return mk_err_set(err, MK_ENOENT, "%s: the Hub answered 404: no such repository, "
					  "revision or file (a private repository also looks like this without a token)",
					  what);
		if (code == 416)
			return mk_err_set(err, MK_ECORRUPT, "%s: the Hub refused the byte range (416): "
					  "the file is shorter than its listing says", what);
		if (code != 429 && code < 500)
			return mk_err_set(err, MK_EIO, "%s: the Hub answered HTTP %ld", what, code);
		snprintf(why, sizeof(why), "HTTP %ld", code);
		unsigned ra = retry_after_ms(e);
		if (ra > back)
			back = ra;
	} else {
		char *to = NULL, shown[512];
		switch (res) {
		case CURLE_UNSUPPORTED_PROTOCOL:
			/* HF_ENDPOINT is checked: a redirect led elsewhere */
			curl_easy_getinfo(e, CURLINFO_EFFECTIVE_URL, &to);   /* where it led */
			return mk_err_set(err, MK_EUNSUPPORTED, "%s: the Hub redirected to %s, which is not http or "
					  "https; mk follows http and https only", what,
					  to ? mk__hub_url_shown(to, shown, sizeof(shown)) : "another protocol");
		case CURLE_OPERATION_TIMEDOUT:
			/* (a kept connection has no connect time: the status
			 * says whether the server answered) */
			if (code > 0)
				snprintf(why, sizeof(why), "the transfer was slower than %u bytes/s for %u s "
					 "(MK_HUB_MIN_SPEED, MK_HUB_STALL_S)", s->min_speed, s->stall_s);
			else
				snprintf(why, sizeof(why), "no answer within %u s, or one slower than %u bytes/s "
					 "(MK_HUB_STALL_S, MK_HUB_MIN_SPEED)", s->stall_s, s->min_speed);
			break;
		case CURLE_COULDNT_CONNECT: case CURLE_PARTIAL_FILE:
		case CURLE_RECV_ERROR: case CURLE_SEND_ERROR: case CURLE_GOT_NOTHING:
		case CURLE_HTTP2: case CURLE_HTTP2_STREAM: case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_SSL_CONNECT_ERROR:
			snprintf(why, sizeof(why), "%s", curl_easy_strerror(res));
			break;
		default:
			return mk_err_set(err, MK_EIO, "%s: %s", what, curl_easy_strerror(res));
		}
	}
	if (attempt >= s->retries)
		return mk_err_set(err, MK_EIO, "%s: %s, still after %u retries (MK_HUB_RETRIES)",
				  what, why, s->retries);
	*wait_ms = back;
	return 1;
}

/* A growing buffer for a small response body. */
struct membuf {
	CURL *e;
	char *p;
	size_t n, cap, max;
	bool over;
};

static size_t membuf_write(char *data, size_t sz, size_t nm, void *ctx)
{
	struct membuf *b = ctx;
	size_t n = sz * nm;
	long code = 0;

	mk__hub_count(n);
	curl_easy_getinfo(b->e, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200 && code != 206)
		return n;                 /* an error page: the status is judged */
	if (b->n + n > b->max) {
		b->over = true;
		return 0;
	}
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q)
			return 0;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = '\0';
	return n;
}

/* GET url (a range when from != UINT64_MAX) into a buffer, retried. */
static int get_small(struct mk_hub *h, const char *url, uint64_t from, uint64_t to, size_t max,
		     const char *what, struct membuf *out, struct mk_err *err)
{
	for (unsigned attempt = 0;; attempt++) {
		struct curl_slist *hdrs = NULL;
		struct membuf b = { .e = h->easy, .max = max };
		unsigned wait = 0;
		int rc;

		curl_easy_reset(h->easy);
		rc = mk__hub_easy_setup(h->easy, url, from, to, &hdrs, err);
		if (rc < 0)
			return rc;
		curl_easy_setopt(h->easy, CURLOPT_WRITEFUNCTION, membuf_write);
		curl_easy_setopt(h->easy, CURLOPT_WRITEDATA, &b);
		CURLcode res = curl_easy_perform(h->easy);
		curl_slist_free_all(hdrs);
		if (b.over) {
			long code = 0;
			char *eff = NULL;
			curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &code);
			curl_easy_getinfo(h->easy, CURLINFO_EFFECTIVE_URL, &eff);
			free(b.p);
			char shown[512];
			return mk_err_set(err, MK_EFORMAT, "%s: the answer (HTTP %ld from %s) is larger than %zu bytes",
					  what, code, eff ? mk__hub_url_shown(eff, shown, sizeof(shown)) : "?", max);
		}
		rc = mk__hub_judge(h->easy, res, what, attempt, &wait, err);
		if (rc == 0) {
			*out = b;
			return 0;
		}
		free(b.p);
		if (rc < 0)
			return rc;
		mk__hub_sleep_ms(wait);
	}
}

/* ---- the repository ---- */

void mk_hub_repo_free(struct mk_hub_repo *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->nfiles; i++)
		free(r->files[i].name);
	free(r->files);
	free(r->id);
	free(r->rev);
	free(r->dir);
	free(r->snapshot);
	if (r->hub) {
		if (r->hub->easy)
			curl_easy_cleanup(r->hub->easy);
		free(r->hub);
	}
	free(r);
}

const struct mk_hub_file *mk_hub_repo_file(const struct mk_hub_repo *r, const char *name)
{
	for (size_t i = 0; i < r->nfiles; i++)
		if (!strcmp(r->files[i].name, name))
			return &r->files[i];
	return NULL;
}

static int parse_listing(struct mk_hub_repo *r, const char *text, size_t len, struct mk_err *err)
{
	json_error_t je;
	json_t *o = json_loadb(text, len, 0, &je), *sib, *v;
	const char *sha;
	size_t i;
	int rc = 0;

	if (!o || !json_is_object(o)) {
		json_decref(o);
		return mk_err_set(err, MK_EFORMAT, "model '%s': the Hub's listing is not a JSON object (%s)",
				  r->id, je.text);
	}
	sha = json_string_value(json_object_get(o, "sha"));
	if (!sha || !is_commit(sha)) {
		rc = mk_err_set(err, MK_EFORMAT, "model '%s': the Hub's listing has no commit (\"sha\")", r->id);
		goto out;
	}
	memcpy(r->commit, sha, 41);
	sib = json_object_get(o, "siblings");
	if (!json_is_array(sib)) {
		rc = mk_err_set(err, MK_EFORMAT, "model '%s': the Hub's listing has no \"siblings\"", r->id);
		goto out;
	}
	r->files = calloc(json_array_size(sib) + 1, sizeof(*r->files));
	if (!r->files) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	json_array_foreach(sib, i, v) {
		struct mk_hub_file *f = &r->files[r->nfiles];
		const char *name = json_string_value(json_object_get(v, "rfilename"));
		json_t *lfs = json_object_get(v, "lfs"), *size = json_object_get(v, "size");
		const char *id;

		if (!name || !file_name_ok(name)) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': the Hub lists a file with a bad name%s%s",
					r->id, name ? ": " : "", name ? name : "");
			goto out;
		}
		if (json_is_object(lfs)) {
			id = json_string_value(json_object_get(lfs, "sha256"));
			size = json_object_get(lfs, "size");
			f->lfs = true;
		} else {
			id = json_string_value(json_object_get(v, "blobId"));
		}
		if (!id || !is_hex(id, f->lfs ? 64 : 40)) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': the Hub's listing gives %s no %s (%u hex digits)",
					r->id, name, f->lfs ? "sha256" : "blob id", f->lfs ? 64 : 40);
			goto out;
		}
		if (!json_is_integer(size) || json_integer_value(size) < 0) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': the Hub's listing gives %s no size", r->id, name);
			goto out;
		}
		if (mk_hub_repo_file(r, name)) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': the Hub's listing has %s twice", r->id, name);
			goto out;
		}
		for (size_t k = 0; id[k]; k++)
			f->etag[k] = (char)tolower((unsigned char)id[k]);
		f->size = (uint64_t)json_integer_value(size);
		if (!(f->name = strdup(name))) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		r->nfiles++;
	}
out:
	json_decref(o);
	return rc;
}

static int repo_new(const char *id, const char *rev, struct mk_hub_repo **out, struct mk_err *err)
{
	struct mk_hub_repo *r = calloc(1, sizeof(*r));
	char *cache = NULL;
	const char *slash = strchr(id, '/');
	int rc = 0;

	*out = NULL;
	if (!r)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!(cache = mk_hub_cache_dir(err))) {
		free(r);
		return -MK_ENOENT;
	}
	r->id = strdup(id);
	r->rev = strdup(rev ? rev : "main");
	if ((slash ? asprintf(&r->dir, "%s/models--%.*s--%s", cache, (int)(slash - id), id, slash + 1)
		   : asprintf(&r->dir, "%s/models--%s", cache, id)) < 0)
		r->dir = NULL;
	free(cache);
	if (!r->id || !r->rev || !r->dir) {
		mk_hub_repo_free(r);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = r;
	return rc;
}

int mk_hub_listing_parse(const char *id, const void *text, size_t len, struct mk_hub_repo **out,
			 struct mk_err *err)
{
	struct mk_hub_repo *r = NULL;
	int rc;

	*out = NULL;
	if (!mk_hub_repo_id_ok(id))
		return mk_err_set(err, MK_EINVAL, "'%s' is not a Hugging Face repo id (org/name)", id);
	rc = repo_new(id, NULL, &r, err);
	if (rc == 0)
		rc = parse_listing(r, text, len, err);
	if (rc == 0 && asprintf(&r->snapshot, "%s/snapshots/%s", r->dir, r->commit) < 0) {
		r->snapshot = NULL;
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (rc < 0) {
		mk_hub_repo_free(r);
		return rc;
	}
	*out = r;
	return 0;
}

int mk_hub_repo_open(const char *id, const char *rev, struct mk_hub_repo **out, struct mk_err *err)
{
	const struct mk_hub_settings *s;
	struct mk_hub_repo *r = NULL;
	struct membuf b = { 0 };
	char *erev = NULL, *url = NULL, what[512];
	int rc;

	*out = NULL;
	if (!mk_hub_repo_id_ok(id))
		return mk_err_set(err, MK_EINVAL, "'%s' is not a Hugging Face repo id (org/name)", id);
	if (rev && !mk_path_stays_inside(rev))
		return mk_err_set(err, MK_EINVAL, "model '%s': '%s' is not a valid revision", id, rev);
	if (mk_hub_offline())
		return mk_err_set(err, MK_ENOENT, "model '%s%s%s': not in the Hugging Face cache, and "
				  "HF_HUB_OFFLINE=1 forbids asking the Hub; unset it, or download the model where "
				  "the network is reachable (mk-get %s%s%s)", id, rev ? "@" : "", rev ? rev : "",
				  id, rev ? "@" : "", rev ? rev : "");
	if (!(s = mk__hub_settings(err)))
		return -MK_EIO;
	rc = repo_new(id, rev, &r, err);
	if (rc < 0)
		return rc;
	r->hub = calloc(1, sizeof(*r->hub));
	if (!r->hub || !(r->hub->easy = curl_easy_init())) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (!(erev = url_escape(r->rev, false)) ||
	    asprintf(&url, "%s/api/models/%s/revision/%s?blobs=true", s->endpoint, id, erev) < 0) {
		url = NULL;
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	{
		char shown[400];
		snprintf(what, sizeof(what), "model '%s', revision %s (%s)", id, r->rev,
			 mk__hub_url_shown(url, shown, sizeof(shown)));
	}
	rc = get_small(r->hub, url, UINT64_MAX, 0, API_MAX, what, &b, err);
	if (rc < 0)
		goto out;
	rc = parse_listing(r, b.p ? b.p : "", b.n, err);
	if (rc < 0)
		goto out;
	if (asprintf(&r->snapshot, "%s/snapshots/%s", r->dir, r->commit) < 0) {
		r->snapshot = NULL;
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	*out = r;
	r = NULL;
out:
	free(b.p);
	free(erev);
	free(url);
	mk_hub_repo_free(r);
	return rc;
}

static char *file_url(const struct mk_hub_repo *r, const char *name)
{
	const struct mk_hub_settings *s = mk__hub_settings(NULL);
	char *en = url_escape(name, true), *u = NULL;

	if (s && en && asprintf(&u, "%s/%s/resolve/%s/%s", s->endpoint, r->id, r->commit, en) < 0)
		u = NULL;
	free(en);
	return u;
}

int mk_hub_read_range(struct mk_hub_repo *r, const char *name, uint64_t off, size_t len,
		      void *buf, struct mk_err *err)
{
	const struct mk_hub_file *f = mk_hub_repo_file(r, name);
	struct membuf b = { 0 };
	char what[600];
	char *url;
	int rc;

	if (!f)
		return mk_err_set(err, MK_ENOENT, "model '%s': the Hub lists no file %s", r->id, name);
	if (len == 0)
		return 0;
	if (off > f->size || len > f->size - off)
		return mk_err_set(err, MK_ECORRUPT, "model '%s': %s: bytes %llu..%llu are past its %llu",
				  r->id, name, (unsigned long long)off, (unsigned long long)(off + len),
				  (unsigned long long)f->size);
	if (!(url = file_url(r, name)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	snprintf(what, sizeof(what), "model '%s': %s, bytes %llu..%llu", r->id, name,
		 (unsigned long long)off, (unsigned long long)(off + len));
	/* a short answer (a dropped connection the server closed cleanly) is
	 * asked for again from where it stopped */
	size_t got = 0;
	for (unsigned attempt = 0; got < len; attempt++) {
		rc = get_small(r->hub, url, off + got, off + len - 1, len - got, what, &b, err);
		if (rc < 0)
			break;
		memcpy((char *)buf + got, b.p, b.n);
		got += b.n;
		free(b.p);
		b = (struct membuf){ 0 };
		if (got < len && attempt >= mk__hub_settings(NULL)->retries) {
			rc = mk_err_set(err, MK_EIO, "%s: the Hub sent %zu of %zu bytes", what, got, len);
			break;
		}
	}
	free(url);
	return got == len ? 0 : rc;
}

/* ---- the cache ---- */

/* A relative link target from snapshots/COMMIT/NAME to blobs/ETAG. */
static char *blob_link(const char *name, const char *etag)
{
	size_t depth = 0;
	char *s, *p;

	for (const char *c = name; *c; c++)
		depth += *c == '/';
	s = malloc(3 * (depth + 2) + 6 + strlen(etag) + 1);
	if (!s)
		return NULL;
	p = s;
	for (size_t i = 0; i < depth + 2; i++)
		p = stpcpy(p, "../");
	p = stpcpy(p, "blobs/");
	strcpy(p, etag);
	return s;
}

static int write_small(const char *path, const char *text, struct mk_err *err)
{
	char *tmp;
	int fd, rc;

	if (mk_mkdirs_for(path, err) < 0)
		return -MK_EIO;
	if (asprintf(&tmp, "%s.mk-tmp.%d", path, (int)getpid()) < 0)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = mk_err_sys(err, errno, "%s", tmp);
		free(tmp);
		return rc;
	}
	rc = mk_write_all(fd, text, strlen(text), tmp, err);
	if (close(fd) < 0 && rc == 0)
		rc = mk_err_sys(err, errno, "%s", tmp);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = mk_err_sys(err, errno, "%s", path);
	if (rc < 0)
		unlink(tmp);
	free(tmp);
	return rc;
}

int mk_hub_repo_pin(struct mk_hub_repo *r, struct mk_err *err)
{
	char *p;
	int rc = 0;

	if (asprintf(&p, "%s/.keep", r->snapshot) < 0)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rc = mk_mkdirs_for(p, err);
	free(p);
	if (rc < 0 || !strcmp(r->rev, r->commit))
		return rc;
	if (asprintf(&p, "%s/refs/%s", r->dir, r->rev) < 0)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rc = write_small(p, r->commit, err);
	free(p);
	return rc;
}

/* Link snapshots/COMMIT/NAME to its blob (replacing what is there). */
static int link_snapshot(const struct mk_hub_repo *r, const struct mk_hub_file *f, struct mk_err *err)
{
	char *path = NULL, *tmp = NULL, *target = blob_link(f->name, f->etag);
	int rc = 0;

	if (!target || asprintf(&path, "%s/%s", r->snapshot, f->name) < 0 ||
	    asprintf(&tmp, "%s.mk-link.%d", path, (int)getpid()) < 0) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (mk_mkdirs_for(path, err) < 0) {
		rc = -MK_EIO;
		goto out;
	}
	unlink(tmp);
	if (symlink(target, tmp) < 0 || rename(tmp, path) < 0) {
		rc = mk_err_sys(err, errno, "%s", path);
		unlink(tmp);
	}
out:
	free(path);
	free(tmp);
	free(target);
	return rc;
}

static char *blob_path(const struct mk_hub_repo *r, const struct mk_hub_file *f, const char *suffix)
{
	char *p;

	return asprintf(&p, "%s/blobs/%s%s", r->dir, f->etag, suffix) < 0 ? NULL : p;
}

static bool file_is(const char *path, uint64_t size)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == size;
}

/* The digest a file of the listing must have. */
struct mk__hub_digest {
	bool lfs;
	struct mk_sha256 s256;
	struct mk_sha1 s1;
};

static void digest_init(struct mk__hub_digest *d, const struct mk_hub_file *f)
{
	d->lfs = f->lfs;
	if (f->lfs) {
		mk_sha256_init(&d->s256);
	} else {
		char hdr[64];
		int n = snprintf(hdr, sizeof(hdr), "blob %llu", (unsigned long long)f->size);
		mk_sha1_init(&d->s1);
		mk_sha1_update(&d->s1, hdr, (size_t)n + 1);   /* with its NUL */
	}
}

static void digest_update(struct mk__hub_digest *d, const void *p, size_t n)
{
	if (d->lfs)
		mk_sha256_update(&d->s256, p, n);
	else
		mk_sha1_update(&d->s1, p, n);
}

static void digest_hex(struct mk__hub_digest *d, char out[65])
{
	uint8_t h[32];

	if (d->lfs) {
		mk_sha256_final(&d->s256, h);
		mk_hex(h, 32, out);
	} else {
		mk_sha1_final(&d->s1, h);
		mk_hex(h, 20, out);
	}
}

/* Hash the first n bytes of fd into d. */
static int digest_fd(struct mk__hub_digest *d, int fd, uint64_t n, const char *label, struct mk_err *err)
{
	static const size_t bs = 1u << 20;
	uint8_t *buf = malloc(bs);
	uint64_t at = 0;
	int rc = 0;

	if (!buf)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	while (at < n && rc == 0) {
		size_t k = n - at < bs ? (size_t)(n - at) : bs;
		rc = mk_pread_exact(fd, buf, k, at, label, err);
		digest_update(d, buf, k);
		at += k;
	}
	free(buf);
	return rc;
}

/* ---- downloads ---- */

struct xfer {
	struct mk_hub_repo *r;
	const struct mk_hub_file *f;
	const struct mk_hub_file **names; /* every file asked for with these bytes */
	size_t nnames;
	char *part, *blob, *url;
	int fd, lock;
	uint64_t have;              /* bytes in the .incomplete */
	struct mk__hub_digest dg;
	unsigned attempt;
	unsigned corrupt;           /* wrong-bytes restarts */
	uint64_t not_before_ms;     /* retry wait */
	CURL *e;
	struct curl_slist *hdrs;
	bool running, done;
	bool body;                  /* this attempt's body has begun */
	int wrc;                    /* a write error in the callback */
	struct mk_err werr;
	uint64_t *total_got;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static size_t xfer_write(char *data, size_t sz, size_t nm, void *ctx)
{
	struct xfer *x = ctx;
	size_t n = sz * nm;
	long code = 0;

	curl_easy_getinfo(x->e, CURLINFO_RESPONSE_CODE, &code);
	if (code != 200 && code != 206)
		return n;                 /* an error page: judged when it ends */
	if (code == 200 && x->have && !x->body) {
		/* asked to resume, the server sent the whole file: start again */
		if (ftruncate(x->fd, 0) < 0) {
			x->wrc = mk_err_sys(&x->werr, errno, "%s", x->part);
			return 0;
		}
		x->have = 0;
		digest_init(&x->dg, x->f);
	}
	if (x->have + n > x->f->size) {
		/* the bytes up to the listed size are kept (the next run checks
		 * them, and continues or starts again); none past it */
		size_t k = (size_t)(x->f->size - x->have);
		if (k && mk_pwrite_all(x->fd, data, k, x->have, x->part, NULL) == 0) {
			digest_update(&x->dg, data, k);
			x->have += k;
			*x->total_got += k;
		}
		x->wrc = mk_err_set(&x->werr, MK_ECORRUPT, "model '%s': %s: the Hub sent more than the %llu bytes "
				    "its listing gives the file; stopped there",
				    x->r->id, x->f->name, (unsigned long long)x->f->size);
		return 0;
	}
	if (mk_pwrite_all(x->fd, data, n, x->have, x->part, &x->werr) < 0) {
		x->wrc = -MK_EIO;
		return 0;
	}
	digest_update(&x->dg, data, n);
	x->have += n;
	x->body = true;
	*x->total_got += n;
	mk__hub_count(n);
	return n;
}

static int xfer_start(CURLM *m, struct xfer *x, struct mk_err *err)
{
	int rc;

	if (!x->e && !(x->e = curl_easy_init()))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	curl_easy_reset(x->e);
	rc = mk__hub_easy_setup(x->e, x->url, x->have ? x->have : UINT64_MAX,
				x->f->size ? x->f->size - 1 : 0, &x->hdrs, err);
	if (rc < 0)
		return rc;
	curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, xfer_write);
	curl_easy_setopt(x->e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(x->e, CURLOPT_PRIVATE, x);
	x->body = false;
	if (curl_multi_add_handle(m, x->e) != CURLM_OK)
		return mk_err_set(err, MK_EIO, "libcurl refused a transfer");
	x->running = true;
	return 0;
}

/* The .incomplete, whole and checked, becomes the blob. */
static int xfer_finish(struct xfer *x, struct mk_err *err)
{
	if (fsync(x->fd) < 0)
		return mk_err_sys(err, errno, "%s", x->part);
	if (rename(x->part, x->blob) < 0)
		return mk_err_sys(err, errno, "%s", x->blob);
	x->done = true;
	return 0;
}

/* A transfer ended: 0 done, 1 to be retried, or an error. */
static int xfer_end(CURLM *m, struct xfer *x, CURLcode res, struct mk_err *err)
{
	char what[600], hex[65];
	unsigned wait = 0;
	int rc;

	curl_multi_remove_handle(m, x->e);
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	x->running = false;
	if (x->wrc) {
		*err = x->werr;
		return x->wrc;
	}
	snprintf(what, sizeof(what), "model '%s': downloading %s", x->r->id, x->f->name);
	rc = mk__hub_judge(x->e, res, what, x->attempt, &wait, err);
	if (rc == 0 && x->have < x->f->size) {
		/* the body ended early but cleanly: resume */
		if (x->attempt >= mk__hub_settings(NULL)->retries)
			return mk_err_set(err, MK_EIO, "%s: the Hub sent %llu of %llu bytes, still after %u retries",
					  what, (unsigned long long)x->have, (unsigned long long)x->f->size,
					  x->attempt);
		rc = 1;
		wait = mk__hub_settings(NULL)->retry_ms;
	}
	if (rc == 1) {
		x->attempt++;
		x->not_before_ms = now_ms() + wait;
		return 1;
	}
	if (rc < 0)
		return rc;
	digest_hex(&x->dg, hex);
	if (strcmp(hex, x->f->etag)) {
		/* wrong bytes: thrown away, downloaded again from the start */
		if (ftruncate(x->fd, 0) < 0)
			return mk_err_sys(err, errno, "%s", x->part);
		x->have = 0;
		digest_init(&x->dg, x->f);
		if (++x->corrupt > 2)
			return mk_err_set(err, MK_ECORRUPT, "%s: the bytes received have %s %s, the Hub lists %s; "
					  "tried %u times, nothing was kept", what, x->f->lfs ? "sha256" : "git blob id",
					  hex, x->f->etag, x->corrupt);
		x->attempt++;
		x->not_before_ms = now_ms() + mk__hub_settings(NULL)->retry_ms;
		return 1;
	}
	return xfer_finish(x, err);
}

static void xfer_clear(CURLM *m, struct xfer *x)
{
	if (x->e) {
		if (x->running)
			curl_multi_remove_handle(m, x->e);
		curl_easy_cleanup(x->e);
	}
	curl_slist_free_all(x->hdrs);
	if (x->fd >= 0)
		close(x->fd);
	mk__hub_unlock_blob(x->lock);
	free(x->part);
	free(x->blob);
	free(x->url);
}

/* Prepare a transfer: lock, then skip a blob already whole, else open the
 * .incomplete and hash what it holds (one as long as the listing says is
 * the blob if its digest is right, else begun again).  Returns 0, or 1
 * when nothing is to be downloaded. */
static int xfer_prepare(struct xfer *x, struct mk_err *err)
{
	struct stat st;
	char hex[65];
	int rc;

	if (!(x->part = blob_path(x->r, x->f, ".incomplete")) || !(x->blob = blob_path(x->r, x->f, "")) ||
	    !(x->url = file_url(x->r, x->f->name)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (file_is(x->blob, x->f->size))
		return 1;
	rc = mk__hub_lock_blob(x->r->dir, x->f->etag, true, &x->lock, err);
	if (rc < 0)
		return rc;
	if (file_is(x->blob, x->f->size))   /* another process finished it */
		return 1;
	if (mk_mkdirs_for(x->part, err) < 0)
		return -MK_EIO;
	/* a .incomplete is a regular file of the cache's own: never written
	 * through a link, never waited on (a FIFO put there) */
	x->fd = open(x->part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
	if (x->fd < 0 || fstat(x->fd, &st) < 0)
		return mk_err_sys(err, errno, "%s", x->part);
	if (!S_ISREG(st.st_mode))
		return mk_err_set(err, MK_EINVAL, "%s: not a regular file (%s); remove it", x->part,
				  mk_file_kind(st.st_mode));
	x->have = (uint64_t)st.st_size;
	if (x->have > x->f->size) {
		if (ftruncate(x->fd, 0) < 0)
			return mk_err_sys(err, errno, "%s", x->part);
		x->have = 0;
	}
	digest_init(&x->dg, x->f);
	rc = digest_fd(&x->dg, x->fd, x->have, x->part, err);
	if (rc < 0 || x->have < x->f->size)
		return rc;
	digest_hex(&x->dg, hex);
	if (!strcmp(hex, x->f->etag))
		return (rc = xfer_finish(x, err)) < 0 ? rc : 1;
	if (ftruncate(x->fd, 0) < 0)
		return mk_err_sys(err, errno, "%s", x->part);
	x->have = 0;
	digest_init(&x->dg, x->f);
	return 0;
}

/* Link every name of a blob now whole into the snapshot. */
static int xfer_link(const struct xfer *x, struct mk_err *err)
{
	int rc = 0;

	for (size_t i = 0; i < x->nnames && rc == 0; i++)
		rc = link_snapshot(x->r, x->names[i], err);
	return rc;
}

/* The files to download in the order their blobs are locked: by blob id
 * (every mk locks in one order, so two never wait for each other), then
 * by name. */
static int cmp_by_blob(const void *a, const void *b)
{
	const struct mk_hub_file *x = *(const struct mk_hub_file *const *)a;
	const struct mk_hub_file *y = *(const struct mk_hub_file *const *)b;
	int c = strcmp(x->etag, y->etag);

	return c ? c : strcmp(x->name, y->name);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Does dir's file system have need bytes free to this user, and
 * FREE_MARGIN more?  (*free_b: what it has; true when statvfs fails: the
 * writes will say.) */
static bool fits(const char *dir, uint64_t need, uint64_t *free_b)
{
	struct statvfs vs;

	if (statvfs(dir, &vs) < 0)
		return true;
	*free_b = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
	return add_sat(need, FREE_MARGIN) <= *free_b;
}

/* Refuse a download the cache's file system cannot hold: the listed sizes
 * of the blobs not yet whole, less what their .incomplete files hold,
 * plus FREE_MARGIN, against the space free to this user. */
static int check_space(const struct mk_hub_repo *r, const struct xfer *xs, size_t nx, struct mk_err *err)
{
	uint64_t need = 0, free_b = 0;
	size_t files = 0;
	char a[32], b[32], c[32];

	for (size_t i = 0; i < nx; i++) {
		char *part = blob_path(r, xs[i].f, ".incomplete"), *blob = blob_path(r, xs[i].f, "");
		uint64_t have = 0;
		struct stat st;

		if (!part || !blob) {
			free(part);
			free(blob);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		if (!file_is(blob, xs[i].f->size)) {
			if (stat(part, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= xs[i].f->size)
				have = (uint64_t)st.st_size;
			need = add_sat(need, xs[i].f->size - have);
			files++;
		}
		free(part);
		free(blob);
	}
	if (!files || fits(r->dir, need, &free_b))
		return 0;
	return mk_err_set(err, MK_ENOSPC, "model '%s': the %zu file%s to download need %s (%llu bytes, as the Hub "
			  "lists them) and a margin of %s, but %s has %s free; free some space, or set HF_HUB_CACHE "
			  "to another file system", r->id, files, files == 1 ? "" : "s",
			  mk_size_human(need, a, sizeof(a)), (unsigned long long)need,
			  mk_size_human(FREE_MARGIN, c, sizeof(c)), r->dir, mk_size_human(free_b, b, sizeof(b)));
}

int mk_hub_download(struct mk_hub_repo *r, const char *const *names, size_t n, uint64_t *bytes,
		    struct mk_err *err)
{
	const struct mk_hub_settings *s = mk__hub_settings(err);
	const struct mk_hub_file **fs = NULL;
	struct xfer *xs = NULL;
	CURLM *m = NULL;
	uint64_t got = 0, last = 0;
	size_t nx = 0, nf = 0, left = 0;
	int rc = 0;

	if (bytes)
		*bytes = 0;
	if (!s)
		return -MK_EIO;
	if (mk_hub_offline())
		return mk_err_set(err, MK_ENOENT, "model '%s': files are missing from the cache and "
				  "HF_HUB_OFFLINE=1 forbids downloading them", r->id);
	xs = calloc(n + 1, sizeof(*xs));
	fs = calloc(n + 1, sizeof(*fs));
	if (!xs || !fs || !(m = curl_multi_init())) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)s->parallel);
	rc = mk_hub_repo_pin(r, err);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct mk_hub_file *f = mk_hub_repo_file(r, names[i]);
		bool dup = false;

		if (!f) {
			rc = mk_err_set(err, MK_ENOENT, "model '%s': the Hub lists no file %s at %s",
					r->id, names[i], r->commit);
			goto out;
		}
		for (size_t k = 0; k < nf; k++)
			dup |= fs[k] == f;
		if (!dup)
			fs[nf++] = f;
	}
	/* one transfer per blob: files with the same bytes (two empty
	 * files, say) share it, and are all linked to it */
	qsort(fs, nf, sizeof(*fs), cmp_by_blob);
	for (size_t i = 0; i < nf; i++) {
		if (nx && !strcmp(xs[nx - 1].f->etag, fs[i]->etag)) {
			xs[nx - 1].nnames++;
			continue;
		}
		xs[nx++] = (struct xfer){ .r = r, .f = fs[i], .names = &fs[i], .nnames = 1, .fd = -1,
					  .lock = -1, .total_got = &got };
	}
	rc = check_space(r, xs, nx, err);
	if (rc < 0)
		goto out;
	for (size_t i = 0; i < nx; i++) {
		rc = xfer_prepare(&xs[i], err);
		if (rc < 0)
			goto out;
		if (rc == 1) {
			xs[i].done = true;
			rc = 0;
			continue;
		}
		left++;
	}
	while (left) {
		int running = 0, active = 0, msgs;
		uint64_t t = now_ms(), soonest = UINT64_MAX;
		CURLMsg *msg;

		for (size_t i = 0; i < nx; i++) {
			struct xfer *x = &xs[i];
			if (x->done || x->running)
				continue;
			if (active + 0u >= s->parallel)
				break;
			if (x->not_before_ms > t) {
				if (x->not_before_ms < soonest)
					soonest = x->not_before_ms;
				continue;
			}
			rc = xfer_start(m, x, err);
			if (rc < 0)
				goto out;
		}
		for (size_t i = 0; i < nx; i++)
			active += xs[i].running;
		if (curl_multi_perform(m, &running) != CURLM_OK) {
			rc = mk_err_set(err, MK_EIO, "libcurl failed");
			goto out;
		}
		while ((msg = curl_multi_info_read(m, &msgs))) {
			struct xfer *x = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			rc = xfer_end(m, x, msg->data.result, err);
			if (rc < 0)
				goto out;
			if (rc == 0) {
				left--;
				rc = xfer_link(x, err);
				if (rc < 0)
					goto out;
			}
			rc = 0;
		}
		if (g_opts.progress && (now_ms() - last >= 250 || !left)) {
			uint64_t have = 0, all = 0;
			for (size_t i = 0; i < nx; i++) {
				have += xs[i].done ? xs[i].f->size : xs[i].have;
				all += xs[i].f->size;
			}
			g_opts.progress(g_opts.progress_ctx, r->id, have, all);
			last = now_ms();
		}
		if (left) {
			int wait = 200;
			if (!active && soonest != UINT64_MAX) {
				uint64_t d = soonest > now_ms() ? soonest - now_ms() : 0;
				wait = d > 1000 ? 1000 : (int)d;
			}
			curl_multi_poll(m, NULL, 0, wait, NULL);
		}
	}
	/* the files already whole are linked too (a snapshot made by another
	 * revision's download, or by huggingface_hub) */
	for (size_t i = 0; i < nx && rc == 0; i++)
		if (xs[i].done)
			rc = xfer_link(&xs[i], err);
out:
	for (size_t i = 0; i < nx; i++)
		xfer_clear(m, &xs[i]);
	free(xs);
	free(fs);
	if (m)
		curl_multi_cleanup(m);
	if (bytes)
		*bytes = got;
	return rc;
}

/* ---- blobs for the streaming reader ---- */

/* Start caching a blob the reader reads, best effort: a blob another
 * process is writing, a cache that cannot be written or lacks the space
 * leaves it only read.  An .incomplete already whole becomes the blob
 * when its digest is right, else is begun again. */
static void blob_cache_open(struct mk_hub_blob *b)
{
	struct mk_hub_repo *r = b->repo;
	const struct mk_hub_file *f = b->file;
	struct mk_err e = { 0 };
	char *part = blob_path(r, f, ".incomplete"), *blob = blob_path(r, f, ""), hex[65];
	uint64_t have = 0, free_b;
	struct stat st;

	if (!part || !blob)
		goto out;
	if (file_is(blob, f->size)) {
		(void)link_snapshot(r, f, NULL);   /* its bytes came under another name */
		goto out;
	}
	if (stat(part, &st) == 0 && (uint64_t)st.st_size <= f->size)
		have = (uint64_t)st.st_size;
	if (!fits(r->dir, f->size - have, &free_b) || mk_hub_repo_pin(r, &e) < 0 ||
	    mk__hub_lock_blob(r->dir, f->etag, false, &b->lock, &e) != 0 || mk_mkdirs_for(part, &e) < 0)
		goto out;
	b->cache_fd = open(part, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
	/* (never through a link, never a FIFO put there: a regular file) */
	if (b->cache_fd < 0 || fstat(b->cache_fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size > f->size || !(b->dg = malloc(sizeof(*b->dg))))
		goto drop;
	b->cached = (uint64_t)st.st_size;
	b->part = part;
	b->blob = blob;
	part = blob = NULL;
	digest_init(b->dg, f);
	if (digest_fd(b->dg, b->cache_fd, b->cached, b->part, &e) < 0)
		goto drop;
	if (b->cached < f->size)
		goto out;
	digest_hex(b->dg, hex);
	if (!strcmp(hex, f->etag)) {
		if (fsync(b->cache_fd) == 0 && rename(b->part, b->blob) == 0)
			(void)link_snapshot(r, f, NULL);
		goto drop;
	}
	if (ftruncate(b->cache_fd, 0) < 0)
		goto drop;
	b->cached = 0;
	digest_init(b->dg, f);
	goto out;
drop:
	if (b->cache_fd >= 0)
		close(b->cache_fd);
	b->cache_fd = -1;
out:
	free(part);
	free(blob);
}

int mk_hub_blob_open(struct mk_hub_repo *r, const char *name, bool cache, struct mk_hub_blob **out,
		     struct mk_err *err)
{
	const struct mk_hub_file *f = mk_hub_repo_file(r, name);
	struct mk_hub_blob *b;

	*out = NULL;
	if (!f)
		return mk_err_set(err, MK_ENOENT, "model '%s': the Hub lists no file %s", r->id, name);
	if (!(b = calloc(1, sizeof(*b))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	b->repo = r;
	b->file = f;
	b->cache_fd = -1;
	b->lock = -1;
	if (!(b->url = file_url(r, name))) {
		free(b);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (cache)
		blob_cache_open(b);
	*out = b;
	return 0;
}

int mk_hub_blob_cache(struct mk_hub_blob *b, uint64_t off, const void *data, size_t len,
		      struct mk_err *err)
{
	char hex[65];

	(void)err;
	if (b->cache_fd < 0 || off > b->cached || off + len <= b->cached)
		return 0;
	data = (const char *)data + (b->cached - off);
	len -= (size_t)(b->cached - off);
	/* a cache that fails to take the bytes is given up, not the merge */
	if (mk_pwrite_all(b->cache_fd, data, len, b->cached, b->part, NULL) < 0)
		goto drop;
	digest_update(b->dg, data, len);
	b->cached += len;
	if (b->cached < b->file->size)
		return 0;
	digest_hex(b->dg, hex);
	if (strcmp(hex, b->file->etag) || fsync(b->cache_fd) < 0 || rename(b->part, b->blob) < 0) {
		/* wrong bytes never become a blob */
		unlink(b->part);
		goto drop;
	}
	(void)link_snapshot(b->repo, b->file, NULL);
drop:
	close(b->cache_fd);
	b->cache_fd = -1;
	return 0;
}

void mk_hub_blob_free(struct mk_hub_blob *b)
{
	if (!b)
		return;
	if (b->cache_fd >= 0)
		close(b->cache_fd);
	mk__hub_unlock_blob(b->lock);
	free(b->part);
	free(b->blob);
	free(b->dg);
	free(b->direct);
	free(b->url);
	free(b);
}
