/* procs.h - run the mk stages as processes joined by pipes (mk-yaml).
 *
 * Stage i's standard output feeds stage i+1's standard input; the first
 * stage reads /dev/null, the last writes nothing to the pipe.  Standard
 * error is shared.  When a stage fails (non-zero exit or a signal), every
 * stage before the last is stopped (SIGTERM) and the last one (mk-pack),
 * seeing its input end without an END frame, removes its partial output
 * itself; `partial` (if not NULL) is removed afterwards as a safety net.
 * Every stage dies with the process that runs them (a parent-death
 * signal, SIGKILL): killing mk-yaml by any signal stops the stages at
 * once, and no stage completes an output after mk-yaml is gone (mk-pack's
 * partial directory stays; OUT never appears).
 * Each stage fed by another is told so on its command line
 * (MK_STAGE_FED_OPTION, its first argument): its input is empty or cut
 * short only when its producer failed, which the runner reports, so the
 * stage says nothing about that input; the first stage runs without it.
 */
#ifndef MK_RUN_PROCS_H
#define MK_RUN_PROCS_H

#include <stddef.h>
#include "mk/err.h"

/* The option the stage programs (mk-fetch, mk-merge, mk-pack) take when
 * a runner feeds them from another stage. */
#define MK_STAGE_FED_OPTION "--fed-by-stage"

struct mk_stage {
	const char *name;            /* for messages ("mk-merge") */
	char *const *argv;           /* argv[0] is the program to exec */
};

/* Run the stages.  0 when every stage exited 0; else MK_EIO with a message
 * naming the first stage that failed and how ("mk-merge exited with
 * status 1", "mk-merge was killed by signal 9"). */
int mk_pipeline_run(const struct mk_stage *st, size_t n, const char *partial,
		    struct mk_err *err);

/* The stages as one shell command line ("a | b | c"), words quoted for
 * sh where needed (malloc'ed). */
char *mk_pipeline_format(const struct mk_stage *st, size_t n);

#endif
