/* mapguard.h - reads of mapped files that another process truncates.
 *
 * Touching a page of a file mapping past the file's end raises SIGBUS in
 * whichever thread touches it: the reader's copy, a checksum, or a merge
 * worker handed the mapped bytes.  A mapping made through mk_mapguard_add
 * is guarded: on the first guarded mapping libmk installs a SIGBUS
 * handler for the process (SA_SIGINFO; the handler found before is kept
 * and called for every SIGBUS that is not a guarded mapping's).  For a
 * fault in a guarded mapping the handler maps a page of zeros over the
 * lost page, counts the fault and returns, so the thread goes on reading
 * zeros; a reader (mk_reader_get) and the output's commit (mk-pack) ask
 * mk_mapguard_check whether any guarded mapping faulted since they
 * began, and fail with "PATH was truncated while being read" -- the
 * zeros never reach a finished output. */
#ifndef MK_MAPGUARD_H
#define MK_MAPGUARD_H

#include <stddef.h>
#include "mk/err.h"

/* Guard [addr, addr + len), a mapping of the file `name` (copied, for
 * the message).  0, or -1 when every slot is taken (MK_MAPGUARD_SLOTS
 * mappings at once) or the handler cannot be installed: the caller then
 * reads the file another way. */
int mk_mapguard_add(void *addr, size_t len, const char *name);
/* Stop guarding the mapping at addr and munmap it (len bytes). */
void mk_mapguard_unmap(void *addr, size_t len);
/* The count of faults so far, for mk_mapguard_check. */
unsigned long mk_mapguard_faults(void);
/* MK_ECORRUPT "PATH was truncated while being read" when a guarded
 * mapping faulted after `since` (a mk_mapguard_faults value); else 0. */
int mk_mapguard_check(unsigned long since, struct mk_err *err);

#endif
