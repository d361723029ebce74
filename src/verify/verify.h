/* verify.h - check a stream whole, as the stage that consumes it would
 * (mk-cat --verify).
 *
 * Common to every kind: the prelude, every checksum, END's counts, the
 * first critical frame a HEAD (decoded whole) and no second one.  Then by
 * the HEAD's kind:
 *   plan     mk-fetch's rules: only FILE and JOB frames, every JOB decoded
 *            against the HEAD (mk_plan_job_decode), as many as "jobs";
 *   inputs   mk-merge's engine itself runs on the stream with its output
 *            discarded (a spill directory in $TMPDIR or /tmp), so the
 *            stream verifies exactly when mk-merge accepts it;
 *   tensors  mk-pack's rules: only FILE and DATA frames, no FILE over a
 *            weight file (mk_pack_file_name_check) or sent twice, every
 *            DATA against the manifest (mk_chunk_check_data), each
 *            tensor's chunks in order and, at the end, every tensor whole.
 * What depends on more than the stream (model files for mk-fetch, disk
 * space and --max-memory for the stages) is not checked. */
#ifndef MK_VERIFY_H
#define MK_VERIFY_H

#include <stdint.h>
#include "mk/err.h"

struct mk_verify_summary {
	char kind[16];
	uint64_t frames, bytes, jobs, chunks;
	uint64_t ntensors, nfiles;
};

/* Read the stream on fd to its end.  0 and *sum, or an error naming the
 * frame.  `label` names the stream in messages.  No frame is held whole
 * above mk_budget_cat(budget) bytes (a larger one is an error); FILE
 * frames are read in pieces, whatever their size. */
int mk_stream_verify(int fd, const char *label, uint64_t budget, struct mk_verify_summary *sum,
		     struct mk_err *err);

#endif
