/* hub.h - the Hugging Face Hub: repository metadata, downloads into the
 * Hugging Face cache, and ranges of remote files (libcurl).
 *
 * The cache is the one huggingface_hub and transformers use, so each reads
 * what the other downloaded:
 *
 *   CACHE/models--ORG--NAME/blobs/ETAG           a file's bytes
 *   CACHE/models--ORG--NAME/blobs/ETAG.incomplete  a download under way
 *                                                (resumed from its size)
 *   CACHE/models--ORG--NAME/snapshots/COMMIT/F   a relative link to
 *                                                ../../blobs/ETAG
 *   CACHE/models--ORG--NAME/refs/REV             the commit REV names
 *   CACHE/.locks/models--ORG--NAME/ETAG.lock     flock(2) while writing
 *
 * ETAG is the file's LFS sha256 or, for a small file kept in git, its git
 * blob id (sha1 of "blob SIZE\0" + bytes).  A blob is renamed into place
 * only after its size and that digest were checked, so a partial or
 * corrupt download never becomes a cache entry.
 *
 * Files with the same bytes share one blob: it is downloaded once (one
 * lock, taken once) and every name is linked to it.  Blobs are locked in
 * the order of their ids, so two downloaders never wait for each other.
 *
 * Settings come from the environment, as huggingface_hub reads them:
 * HF_ENDPOINT (default https://huggingface.co; http or https only),
 * HF_TOKEN, else the file $HF_TOKEN_PATH, else $HF_HOME/token (HF_HOME
 * default ~/.cache/huggingface; white space around it stripped, a control
 * character inside refused); HF_HUB_OFFLINE=1 (no request at all); the
 * cache HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.  mk's
 * own: MK_HUB_PARALLEL (transfers at once, default 8), MK_HUB_RETRIES
 * (default 5), MK_HUB_RETRY_MS (first back-off, default 500, doubled each
 * time up to 30 s; a 429 or 503's Retry-After wins), MK_HUB_MIN_SPEED
 * and MK_HUB_STALL_S (a transfer slower than MIN_SPEED bytes/s, default
 * 1024, for STALL_S seconds, default HF_HUB_DOWNLOAD_TIMEOUT else 30, is
 * retried).  Every request and redirect is http or https; a download is
 * refused when the cache's file system lacks its listed sizes plus 64 MiB.
 */
#ifndef MK_HUB_H
#define MK_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

/* Progress of the downloads under way, for a terminal: called at most a
 * few times a second and once when the batch ends (done == total). */
typedef void (*mk_hub_progress_fn)(void *ctx, const char *what, uint64_t done,
				   uint64_t total);

struct mk_hub_opts {
	mk_hub_progress_fn progress; /* NULL: none */
	void *progress_ctx;
};

/* Set the process's options (the programs call it once, before opening
 * models; the library's own callers read them). */
void mk_hub_configure(const struct mk_hub_opts *o);

/* The cache root (malloc'ed), or NULL with err set. */
char *mk_hub_cache_dir(struct mk_err *err);
/* True when HF_HUB_OFFLINE is set to 1 / true / yes / on. */
bool mk_hub_offline(void);

/* Hugging Face repo ids: [org/]name, each part of [A-Za-z0-9._-], not "."
 * or "..".  A revision must also stay inside refs/ and snapshots/
 * (mk_path_stays_inside, core/fsutil.h). */
bool mk_hub_repo_id_ok(const char *id);

struct mk_hub_file {
	char *name;           /* path in the repository ("a/b.json") */
	uint64_t size;
	char etag[65];        /* sha256 (LFS) or git blob sha1, lower-case hex */
	bool lfs;
};

struct mk_hub_repo {
	char *id;             /* org/name */
	char *rev;            /* as asked ("main" when none was) */
	char commit[41];
	char *dir;            /* CACHE/models--ORG--NAME */
	char *snapshot;       /* dir/snapshots/COMMIT */
	size_t nfiles;
	struct mk_hub_file *files;
	struct mk_hub *hub;   /* the connection state, owned */
};

/* Ask the Hub what `rev` (NULL: main) of repository `id` is: its commit
 * and its files with their sizes and ids (GET
 * ENDPOINT/api/models/ID/revision/REV?blobs=true).  A 401/403 says the
 * repository is gated or private and what to do; a 404 that it or the
 * revision does not exist.  HF_HUB_OFFLINE=1 is an MK_ENOENT error. */
int mk_hub_repo_open(const char *id, const char *rev, struct mk_hub_repo **out,
		     struct mk_err *err);
void mk_hub_repo_free(struct mk_hub_repo *r);

/* Parse a listing as the Hub answers it (JSON: "sha", and "siblings" with
 * "rfilename", "size", "blobId" and "lfs": {"sha256", "size"}) into a
 * repository with no connection (*out, freed with mk_hub_repo_free).
 * Names that would leave the snapshot, ids that are not hex of the right
 * length and missing sizes are errors. */
int mk_hub_listing_parse(const char *id, const void *text, size_t len, struct mk_hub_repo **out,
			 struct mk_err *err);

/* A file of the listing, or NULL. */
const struct mk_hub_file *mk_hub_repo_file(const struct mk_hub_repo *r, const char *name);

/* Download the listed files `names` (those not yet in the snapshot) into
 * the cache, several at once, then link them into the snapshot and write
 * refs/REV.  Each is resumed from its .incomplete, retried on 5xx, 429,
 * dropped connections and stalls, and checked against its id before it
 * is renamed into blobs/.  *bytes (may be NULL) gets the body bytes
 * received. */
int mk_hub_download(struct mk_hub_repo *r, const char *const *names, size_t n,
		    uint64_t *bytes, struct mk_err *err);

/* Write refs/REV (when REV is not the commit itself) and make the
 * snapshot folder. */
int mk_hub_repo_pin(struct mk_hub_repo *r, struct mk_err *err);

/* Bytes [off, off+len) of the repository's file `name` into buf, by an
 * HTTP range request (retried, resumed where it broke off). */
int mk_hub_read_range(struct mk_hub_repo *r, const char *name, uint64_t off, size_t len,
		      void *buf, struct mk_err *err);

/* Body bytes this process received from the Hub so far (all requests). */
uint64_t mk_hub_bytes_received(void);

/* ---- remote files for the streaming reader (reader.h, MK_IO=http) ---- */

/* One remote file, as a reader reads it by ranges.  When cache_fd >= 0,
 * bytes read at the end of what is already there (the .incomplete's
 * size) are appended to it; when the file is whole it is checked and
 * becomes the cache's blob, as mk_hub_download would leave it. */
struct mk_hub_blob {
	struct mk_hub_repo *repo;     /* borrowed */
	const struct mk_hub_file *file; /* borrowed from repo */
	char *url;                    /* ENDPOINT/ID/resolve/COMMIT/NAME */
	int cache_fd;                 /* the .incomplete, or -1 */
	uint64_t cached;              /* its length */
	/* private */
	int lock;
	char *part, *blob;
	char *direct;                 /* where the last redirect led */
	struct mk__hub_digest *dg;
};

/* A blob for `name` (which must be listed); with `cache`, its bytes go to
 * the cache as they are read. */
int mk_hub_blob_open(struct mk_hub_repo *r, const char *name, bool cache,
		     struct mk_hub_blob **out, struct mk_err *err);
/* Give the bytes [off, off+len) just read to the cache (no-op unless they
 * extend it). */
int mk_hub_blob_cache(struct mk_hub_blob *b, uint64_t off, const void *data, size_t len,
		      struct mk_err *err);
void mk_hub_blob_free(struct mk_hub_blob *b);

#endif
