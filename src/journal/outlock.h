/* outlock.h - one run at a time writes an output directory.
 *
 * A run that writes OUT (mk-pack, and mk-yaml, mk-moe, mk-multi,
 * mk-pytorch around their stages) holds an exclusive flock(2) on the
 * directory OUT.mk-partial itself, from before it looks at OUT or at an
 * earlier run's OUT.mk-partial until OUT is renamed into place (the lock
 * goes with the directory) or the run ends: a second run into the same
 * OUT, with or without --resume, is refused ("another mk run is writing
 * OUT (pid N)", the holder as /proc/locks names it) and touches neither.
 * The directory is made when missing (made so, it is no earlier run's,
 * for mk_pack_check_out) and removed again by a run that made it and
 * left it empty.  No other file: a run killed leaves only
 * what it wrote.  The lock is the open directory's: a thread of the
 * owner, or a stage process that inherited the descriptor
 * (mk_out_lock_share), finds it its own.
 */
#ifndef MK_OUTLOCK_H
#define MK_OUTLOCK_H

#include <stdbool.h>
#include "mk/err.h"

struct mk_out_lock {
	int fd;          /* OUT.mk-partial, open, when owner; else -1 */
	char *path;      /* OUT.mk-partial */
	bool owner;      /* taken here (else held by this process already,
			    or by the parent that started it) */
	bool made;       /* the directory was made here */
	char *top;       /* the first of OUT's parents made here, or NULL */
};

/* OUT.mk-partial for OUT (trailing slashes dropped), malloc'ed. */
char *mk_out_partial_name(const char *out);
/* Take OUT's lock (or find that this process holds it already): 0, or an
 * error naming the run that holds it.  OUT's parent directories are made
 * when missing, as mk-pack makes them.  *lk is always set
 * (mk_out_unlock). */
int mk_out_lock(const char *out, struct mk_out_lock *lk, struct mk_err *err);
/* Let processes started after this (mk_pipeline_run's stages) inherit
 * the lock, so that their own mk_out_lock finds it theirs. */
int mk_out_lock_share(struct mk_out_lock *lk, struct mk_err *err);
/* Release: the owner removes the directory if it made it and it is still
 * there and empty (and then the parents it made, when empty), and closes
 * it; else nothing. */
void mk_out_unlock(struct mk_out_lock *lk);

#endif
