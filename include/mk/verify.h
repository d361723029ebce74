/* verify.h - check a stream whole, as the stage that consumes it would
 * (mk-cat --verify).
 *
 * The frames are decoded with the decoders the stages use and checked by
 * the same rules: the prelude, every checksum, END's counts; the first
 * critical frame a HEAD, and no second one; only the frames the HEAD's
 * kind carries (a plan: FILE and JOB; inputs: FILE, JOB, INPT; tensors:
 * FILE and DATA); every JOB against the HEAD (mk_plan_job_decode) and, in
 * an inputs stream, as mk-merge checks it before data (mk_merge_job_check,
 * with the plugins' methods loaded); the number of JOB frames the HEAD's
 * "jobs"; every INPT against its job (mk_chunk_check_input), passes never
 * going back; every DATA against the manifest (mk_chunk_check_data), each
 * tensor's chunks in order and, at the end, every tensor whole. */
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
 * frame.  `label` names the stream in messages. */
int mk_stream_verify(int fd, const char *label, struct mk_verify_summary *sum, struct mk_err *err);

#endif
