/* piecewise.h - frames read piecewise (MK_SR_PIECEWISE_FILE: FILE and
 * ancillary frames): the first bytes of a payload, a FILE frame's
 * sub-header and name, so that no reader holds a file's contents to learn
 * its name. */
#ifndef MK_PIECEWISE_H
#define MK_PIECEWISE_H

#include <stddef.h>

#include <limits.h>
#include <stdint.h>
#include "mk/err.h"

struct mk_stream_reader;
struct mk_frame;

/* Fill buf with the next n bytes of the piecewise payload (through
 * mk_sr_read_payload): *have < n when the payload ended first (and was
 * verified). */
int mk_sr_read_exact(struct mk_stream_reader *r, void *buf, size_t n, size_t *have, struct mk_err *err);

/* The piecewise FILE frame f, just returned by mk_sr_next(r): read its
 * mode and name (checked by mk_file_name_check, NUL-terminated into
 * `name`) and set *size to the bytes of contents that follow, which the
 * caller reads with mk_sr_read_payload or leaves for mk_sr_next to drain
 * (and verify).  Errors name the frame. */
int mk_file_read_head(struct mk_stream_reader *r, const struct mk_frame *f, uint32_t *mode,
		      char name[PATH_MAX + 1], uint64_t *size, struct mk_err *err);

#endif
