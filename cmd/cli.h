/* cli.h - what the mk-* mains share: messages, exit codes, progress. */
#ifndef MK_CLI_H
#define MK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include "mk/err.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

extern const char *cli_prog;
extern int cli_verbose;   /* 0 quiet, 1 errors, 2 warnings (default), 3 info, 4 debug */

void cli_init(const char *prog);
/* "prog: KIND: msg" on stderr (KIND NULL: "prog: msg"), the message's
 * control characters and bytes that are not UTF-8 escaped (mk_text_escape). */
void cli_message(const char *kind, const char *msg);
/* "prog: error: msg" and exit 1. */
void cli_fail(const struct mk_err *err) __attribute__((noreturn));
/* cli_fail with "out of memory" (a main's own allocation failed). */
void cli_fail_oom(void) __attribute__((noreturn));
/* "prog: msg\nTry 'prog --help' for more information." and exit 2. */
void cli_usage_error(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* After getopt reported a bad option itself: the hint line, exit 2. */
void cli_usage_hint(void) __attribute__((noreturn));
void cli_info(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cli_version(void) __attribute__((noreturn));
/* Refuse to write a binary stream to a terminal unless forced. */
void cli_check_binary_out(int fd, bool force);
void cli_check_binary_in(int fd, bool force);
/* After a failure, make the stream written to fd (opened from -o path)
 * unusable and close fd: a regular file named by path is removed, one
 * reached through a symlink is emptied (the link stays); a device, pipe
 * or socket (-o /dev/null, a FIFO) is left alone. */
void cli_discard_output(int fd, const char *path);
/* Flush and close stdout, failing loudly on a write error. */
void cli_close_stdout(void);

/* Progress on stderr: on when stderr is a terminal (and not quiet),
 * unless forced on/off (-1 auto, 0 off, 1 on). */
bool cli_progress_enabled(int want);
void cli_progress(const char *what, uint64_t done, uint64_t total,
		  uint64_t items_done, uint64_t items_total);
void cli_progress_end(void);
/* Hub downloads draw their progress (cli_progress) when it is enabled
 * (want as cli_progress_enabled). */
void cli_hub_progress(int want);

/* A stage program (mk-fetch, ...) next to this one (/proc/self/exe's
 * directory), else its bare name for a PATH lookup; malloc'ed (exits on
 * out of memory). */
char *cli_stage_path(const char *name);
/* A NULL-terminated argument vector grown one copied string at a time
 * (exits on out of memory). */
struct cli_argv {
	char **v;
	size_t n;
};
void cli_argv_push(struct cli_argv *a, const char *s);

#endif
