/* journal.h - the journal of an output directory being written
 * (OUT.mk-partial/.mk-journal): which tensors an interrupted mk-pack
 * finished, so that a run with --resume (mk-pack) and --skip-done
 * (mk-fetch) leaves them out.  One text format, read and written here.
 *
 *   mk-pack journal 2
 *   stream-sha256 KEY          (mk_journal_stream_key)
 *   shard-size N
 *   done INDEX CRC32C [NAME]   (one line per finished tensor)
 *
 * A line is complete only with its newline: a torn last line was never
 * synced and is ignored.
 */
#ifndef MK_JOURNAL_H
#define MK_JOURNAL_H

#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

#define MK_JOURNAL_NAME ".mk-journal"

struct mk_manifest;

/* A stream's key, as the journal records it: the SHA-256 (hex) of its
 * HEAD with the fields that do not change the output cleared (kind,
 * producer, chunk_bytes, jobs, held_bytes_max, spilled_jobs), so a plan,
 * the inputs stream and the tensors stream made from it, whole or with
 * done jobs left out (mk-fetch --skip-done), have the same key.  It covers
 * the tensors (names, dtypes, shapes, order), files, model table (shard
 * sizes and header hashes), seed, plugins and unknown keys; not the jobs'
 * methods and parameters, which no HEAD carries. */
int mk_journal_stream_key(const struct mk_manifest *m, char hex[65], struct mk_err *err);

/* A partial directory's journal: what an interrupted run finished. */
struct mk_journal_done {
	size_t index;                /* in the manifest */
	uint32_t crc32c;             /* of its bytes in the shard */
	char *name;                  /* NULL when the line left it out */
};
struct mk_journal {
	char key[65];                /* "" when the header is incomplete */
	uint64_t shard_size;
	size_t ndone;
	struct mk_journal_done *done;
	size_t valid_len;            /* bytes up to the last complete line */
};

/* Read PARTIAL/.mk-journal.  A missing directory or journal, or a journal
 * cut before its header was complete, gives an empty journal (key "",
 * nothing done); a torn last line is ignored.  Another format is
 * MK_EFORMAT. */
int mk_journal_read(const char *partial, struct mk_journal **out, struct mk_err *err);
/* The same on a journal's text (label names it in messages). */
int mk_journal_parse(const char *text, size_t len, const char *label, struct mk_journal **out,
			  struct mk_err *err);
/* Check a journal (with a key) belongs to the stream whose HEAD is m:
 * the key, and each done entry's index and name.  shard_size is checked
 * too unless it is UINT64_MAX (mk-fetch does not know it). */
int mk_journal_check(const struct mk_journal *j, const char *partial,
			  const struct mk_manifest *m, uint64_t shard_size, struct mk_err *err);
void mk_journal_free(struct mk_journal *j);

/* The header lines of a new journal, in buf (at least 128 bytes): its
 * length. */
int mk_journal_header(char *buf, size_t size, const char *key, uint64_t shard_size);
/* One "done" line for tensor `index` (its bytes' CRC32C), its name kept
 * when the line fits in `size` (at least 64 bytes): the line's length. */
int mk_journal_done_line(char *buf, size_t size, size_t index, uint32_t crc32c, const char *name);

#endif
