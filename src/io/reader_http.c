/* reader_http.c - extents of remote files (a Hub model's shards) read by
 * HTTP range requests, up to qdepth of them in flight on one libcurl multi
 * handle, which keeps its connections open between them.  Each queue
 * position has a slot of chunk_bytes in one slab, as the uring backend.
 * A transfer that fails in a way worth retrying (a dropped connection, a
 * stall, 5xx, 429) is asked again for the bytes it still lacks, after a
 * back-off.  Extents of local files (fd >= 0, no remote) are read with
 * pread when their turn comes.  After a redirect (the Hub sends LFS files
 * to its CDN) the address it led to is used directly for the file's next
 * ranges, and dropped again if it stops working. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "reader_impl.h"
#include "hub/hub_impl.h"

struct http_slot {
	CURL *e;
	struct curl_slist *hdrs;
	size_t got;
	unsigned attempt;
	bool running, done, direct;
	int wrc;
	struct mk_err werr;
	void *ctx[2];              /* the write callback's (reader, position) */
};

struct http_state {
	CURLM *m;
	struct http_slot *slots;   /* r->cap of them */
};

static struct http_state *hs(struct mk_reader *r)
{
	return r->backend_state;
}

static size_t slot_write(char *data, size_t sz, size_t nm, void *ctx)
{
	void **pp = ctx;
	struct mk_reader *r = pp[0];
	unsigned p = (unsigned)(uintptr_t)pp[1];
	struct http_slot *s = &hs(r)->slots[p];
	const struct mk_read_req *q = &r->q[p].req;
	size_t n = sz * nm;
	long code = 0;
	char shown[512];

	curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &code);
	if (code != 206 && code != 200)
		return n;                       /* an error page */
	if (code == 200 && !(q->off == 0 && q->len == q->remote->file->size)) {
		s->wrc = mk_err_set(&s->werr, MK_EIO, "%s: the server ignored the byte range (HTTP 200)",
				    mk__hub_url_shown(q->remote->url, shown, sizeof(shown)));
		return 0;
	}
	if (s->got + n > q->len) {
		s->wrc = mk_err_set(&s->werr, MK_ECORRUPT, "%s: more bytes than the range asked for",
				    mk__hub_url_shown(q->remote->url, shown, sizeof(shown)));
		return 0;
	}
	memcpy(r->slab + (size_t)p * r->chunk + s->got, data, n);
	s->got += n;
	mk__hub_count(n);
	return n;
}

static int slot_start(struct mk_reader *r, unsigned p, struct mk_err *err)
{
	struct http_state *st = hs(r);
	struct http_slot *s = &st->slots[p];
	const struct mk_read_req *q = &r->q[p].req;
	struct mk_hub_blob *b = q->remote;
	void **ctx = s->ctx;
	int rc;

	/* libcurl is loaded (and the multi handle made) at the first remote
	 * extent: a reader that only meets local files needs neither */
	if (!st->m) {
		if (!mk__hub_settings(err))
			return -MK_EIO;
		if (!(st->m = curl_multi_init()))
			return mk_err_set(err, MK_ENOMEM, "http reader: out of memory");
	}
	if (!s->e && !(s->e = curl_easy_init()))
		return mk_err_set(err, MK_ENOMEM, "http reader: out of memory");
	curl_easy_reset(s->e);
	s->direct = b->direct != NULL;
	rc = mk__hub_easy_setup(s->e, b->direct ? b->direct : b->url, q->off + s->got, q->off + q->len - 1,
				&s->hdrs, err);
	if (rc < 0)
		return rc;
	ctx[0] = r;
	ctx[1] = (void *)(uintptr_t)p;
	curl_easy_setopt(s->e, CURLOPT_WRITEFUNCTION, slot_write);
	curl_easy_setopt(s->e, CURLOPT_WRITEDATA, ctx);
	curl_easy_setopt(s->e, CURLOPT_PRIVATE, (char *)(uintptr_t)(p + 1));
	if (curl_multi_add_handle(st->m, s->e) != CURLM_OK)
		return mk_err_set(err, MK_EIO, "http reader: libcurl refused a transfer");
	s->running = true;
	return 0;
}

static int http_open(struct mk_reader *r, struct mk_err *err)
{
	struct http_state *st = calloc(1, sizeof(*st));
	int rc = 0;

	if (!st)
		return mk_err_set(err, MK_ENOMEM, "http reader: out of memory");
	r->backend_state = st;
	st->slots = calloc(r->cap, sizeof(*st->slots));
	r->slab = malloc((size_t)r->cap * r->chunk);
	if (!st->slots || !r->slab) {
		rc = mk_err_set(err, MK_ENOMEM, "http reader: cannot allocate %u slots of %zu bytes",
				r->cap, r->chunk);
		goto out;
	}
	snprintf(r->backend, sizeof(r->backend), "http (range requests)");
out:
	return rc;
}

static int http_issue(struct mk_reader *r, unsigned p, struct mk_err *err)
{
	struct http_slot *s = &hs(r)->slots[p];

	s->got = 0;
	s->attempt = 0;
	s->done = false;
	s->wrc = 0;
	if (!r->q[p].req.remote)
		return 0;                       /* a local file: read at wait */
	return slot_start(r, p, err);
}

/* One transfer ended: done, restarted for what it lacks, or failed. */
static int slot_end(struct mk_reader *r, unsigned p, CURLcode res, struct mk_err *err)
{
	struct http_state *st = hs(r);
	struct http_slot *s = &st->slots[p];
	const struct mk_read_req *q = &r->q[p].req;
	struct mk_hub_blob *b = q->remote;
	const struct mk_hub_settings *set = mk__hub_settings(NULL);
	char what[700];
	unsigned wait = 0;
	long code = 0;
	int rc;

	curl_multi_remove_handle(st->m, s->e);
	curl_slist_free_all(s->hdrs);
	s->hdrs = NULL;
	s->running = false;
	if (s->wrc) {
		*err = s->werr;
		return s->wrc;
	}
	curl_easy_getinfo(s->e, CURLINFO_RESPONSE_CODE, &code);
	if (s->direct && res == CURLE_OK && code >= 400 && code < 500 && code != 429) {
		/* the CDN address expired: back to the Hub's */
		free(b->direct);
		b->direct = NULL;
		return slot_start(r, p, err);
	}
	snprintf(what, sizeof(what), "model '%s': %s, bytes %llu..%llu", b->repo->id, b->file->name,
		 (unsigned long long)q->off, (unsigned long long)(q->off + q->len));
	rc = mk__hub_judge(s->e, res, what, s->attempt, &wait, err);
	if (rc == 0 && s->got < q->len) {
		if (s->attempt >= set->retries)
			return mk_err_set(err, MK_EIO, "%s: the server sent %zu of %zu bytes, still after %u retries",
					  what, s->got, q->len, s->attempt);
		rc = 1;
		wait = set->retry_ms;
	}
	if (rc < 0)
		return rc;
	if (rc == 1) {
		s->attempt++;
		mk__hub_sleep_ms(wait);         /* the consumer waits on this one */
		return slot_start(r, p, err);
	}
	if (!b->direct) {
		char *u = NULL;
		if (curl_easy_getinfo(s->e, CURLINFO_EFFECTIVE_URL, &u) == CURLE_OK && u && strcmp(u, b->url))
			b->direct = strdup(u);
	}
	s->done = true;
	return 0;
}

static int http_wait(struct mk_reader *r, unsigned p, const void **data, struct mk_err *err)
{
	struct http_state *st = hs(r);
	struct http_slot *s = &st->slots[p];
	const struct mk_read_req *q = &r->q[p].req;
	void *slot = r->slab + (size_t)p * r->chunk;

	if (!q->remote) {
		int rc = mk__rd_pread(q, slot, err);
		if (rc < 0)
			return rc;
		*data = slot;
		return 0;
	}
	while (!s->done) {
		int running, msgs;
		CURLMsg *msg;

		if (curl_multi_perform(st->m, &running) != CURLM_OK)
			return mk_err_set(err, MK_EIO, "http reader: libcurl failed");
		while ((msg = curl_multi_info_read(st->m, &msgs))) {
			char *priv = NULL;
			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
			int rc = slot_end(r, (unsigned)((uintptr_t)priv - 1), msg->data.result, err);
			if (rc < 0)
				return rc;
		}
		if (!s->done)
			curl_multi_poll(st->m, NULL, 0, 100, NULL);
	}
	/* what the cache lacks of this file, it gets */
	(void)mk_hub_blob_cache(q->remote, q->off, slot, q->len, NULL);
	*data = slot;
	return 0;
}

static void http_close(struct mk_reader *r)
{
	struct http_state *st = hs(r);

	if (st) {
		for (unsigned p = 0; st->slots && p < r->cap; p++) {
			struct http_slot *s = &st->slots[p];
			if (s->e) {
				if (s->running)
					curl_multi_remove_handle(st->m, s->e);
				curl_easy_cleanup(s->e);
			}
			if (s->hdrs)
				curl_slist_free_all(s->hdrs);
		}
		if (st->m)
			curl_multi_cleanup(st->m);
		free(st->slots);
		free(st);
	}
	r->backend_state = NULL;
	free(r->slab);
	r->slab = NULL;
}

const struct rd_ops mk__rd_http_ops = {
	.open = http_open,
	.issue = http_issue,
	.wait = http_wait,
	.close = http_close,
};
