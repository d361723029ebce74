/* cli.h - what the mk-* mains share: messages, exit codes, progress. */
#ifndef MK_CLI_H
#define MK_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "run/argv.h"
#include "run/procs.h"
#include "mk/err.h"
#include "core/text.h"
#include "stream/manifest.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

extern const char *cli_prog;
extern int cli_verbose;
/* MK_STAGE_FED_OPTION was given: a runner feeds this stage from another
 * and reports that one's failure (an empty or cut input is not reported
 * again).  The stage programs put CLI_STAGE_FED_OPTION in their option
 * tables and set it on CLI_STAGE_FED. */
extern bool cli_fed_by_stage;
#define CLI_STAGE_FED 0x5fed
#define CLI_STAGE_FED_OPTION { MK_STAGE_FED_OPTION + 2, 0, 0, CLI_STAGE_FED }   /* 0 quiet, 1 errors, 2 warnings (default), 3 info, 4 debug */

/* The options most mk-* programs share, in their getopt_long tables:
 * CLI_PLUGIN_OPTION (--plugin FILE.so), CLI_PROGRESS_OPTIONS (--progress,
 * --no-progress) and, at the end, CLI_COMMON_OPTIONS (-v, -q, -h, -V).
 * The option switch ends in `default: cli_common_option(c, optarg,
 * &want_progress, usage);`, which acts on them: -v and -q step
 * cli_verbose, --progress and --no-progress set *want_progress to 1 or 0
 * (want_progress NULL: the table has no CLI_PROGRESS_OPTIONS), --plugin
 * loads a plugin (failing on error), -h calls usage, -V prints the version,
 * CLI_STAGE_FED sets cli_fed_by_stage; anything else is a bad option
 * (cli_usage_hint). */
enum { CLI_PROGRESS = 0x5f01, CLI_NO_PROGRESS };
#define CLI_PLUGIN_OPTION { "plugin", 1, 0, 'P' }
#define CLI_PROGRESS_OPTIONS { "progress", 0, 0, CLI_PROGRESS }, { "no-progress", 0, 0, CLI_NO_PROGRESS }
#define CLI_COMMON_OPTIONS \
	{ "verbose", 0, 0, 'v' }, { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { "version", 0, 0, 'V' }
void cli_common_option(int c, const char *arg, int *want_progress, void (*usage)(void));
/* The zstd level of -z[LEVEL], --compress[=LEVEL] (arg NULL: 3); a usage
 * error outside 1..19. */
int cli_compress_level(const char *arg);

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
/* The file of -i FILE (cli_open_read) or -o FILE (cli_open_write: created
 * or truncated, mode 0644), opened close-on-exec; fails ("prog: error:
 * FILE: reason") when it cannot be. */
int cli_open_read(const char *path);
int cli_open_write(const char *path);
/* A binary stream's -i FILE: the file, or for "-" standard input (0),
 * refused when it is a terminal (cli_check_binary_in). */
int cli_open_input(const char *path);
/* A binary stream's -o FILE: the file, or for "-" standard output (1),
 * refused when it is a terminal unless force (cli_check_binary_out). */
int cli_open_output(const char *path, bool force);
/* Close fd, opened on -o path (standard output, 1, stays open), failing
 * on an error. */
void cli_close_output(int fd, const char *path);
/* Read a configuration (mk-plan, mk-yaml): the file `path`, a pipe
 * (mk-plan <(...)) to its end, or "-" standard input; fails on error.
 * Returns the label for its messages ("stdin" for "-"). */
const char *cli_read_config(const char *path, uint8_t **text, size_t *len);
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

/* Each diagnostic as "prog: error|warning: label:line:col: path: msg"
 * (warnings from verbosity 2, errors from 1). */
struct mk_diags;
void cli_print_diags(const struct mk_diags *d);

/* The options of a merge run in this process (mk-pytorch, mk-multi):
 * CLI_RUN_OPTIONS in a getopt_long table (with "j:" among the short
 * options), and cli_run_option for what getopt returns: true when it was
 * one of them, its value in *o (or *quiet).  state_dicts: mk-pytorch,
 * where the tokenizer, card, architecture and LoRA options mean nothing
 * (they are noted).  mergekit's options without meaning for mk are
 * accepted with a note; --gpu-rich, which in mergekit implies --cuda, sets
 * cuda (the rest of what it implies means nothing to mk). */
enum { CLI_RUN_FIRST = 1000, CLI_RUN_SHARD = CLI_RUN_FIRST, CLI_RUN_COPY, CLI_RUN_NOCOPY, CLI_RUN_CARD,
       CLI_RUN_NOCARD, CLI_RUN_CRIMES, CLI_RUN_NOCRIMES, CLI_RUN_SEED, CLI_RUN_CUDA, CLI_RUN_NOCUDA, CLI_RUN_MEM, CLI_RUN_SPILL,
       CLI_RUN_STRICT, CLI_RUN_REMOTE, CLI_RUN_NOCACHE, CLI_RUN_QUIET, CLI_RUN_NOQUIET, CLI_RUN_CACHE,
       CLI_RUN_LORA_DT, CLI_RUN_LORA_CACHE, CLI_RUN_PLUGIN, CLI_RUN_VERBOSE, CLI_RUN_BUFFERED, CLI_RUN_IGN0,
       CLI_RUN_IGN1, CLI_RUN_GPU_RICH, CLI_RUN_TRUNC, CLI_RUN_NOTRUNC, CLI_RUN_QUANT, CLI_RUN_DEVICE };
/* --quantize's value (mk-pack and the programs that run it): "fp8" or
 * "mxfp4", else a usage error. */
enum mk_requant cli_quantize_arg(const char *arg);

#define CLI_RUN_OPTIONS \
	{ "out-shard-size", 1, 0, CLI_RUN_SHARD }, \
	{ "copy-tokenizer", 0, 0, CLI_RUN_COPY }, { "no-copy-tokenizer", 0, 0, CLI_RUN_NOCOPY }, \
	{ "write-model-card", 0, 0, CLI_RUN_CARD }, { "no-write-model-card", 0, 0, CLI_RUN_NOCARD }, \
	{ "allow-crimes", 0, 0, CLI_RUN_CRIMES }, { "no-allow-crimes", 0, 0, CLI_RUN_NOCRIMES }, \
	{ "unsafe-truncate-embeddings", 0, 0, CLI_RUN_TRUNC }, { "no-unsafe-truncate-embeddings", 0, 0, CLI_RUN_NOTRUNC }, \
	{ "random-seed", 1, 0, CLI_RUN_SEED }, { "cuda", 0, 0, CLI_RUN_CUDA }, { "no-cuda", 0, 0, CLI_RUN_NOCUDA }, \
	{ "num-threads", 1, 0, 'j' }, { "max-memory", 1, 0, CLI_RUN_MEM }, { "spill", 1, 0, CLI_RUN_SPILL }, \
	{ "strict", 0, 0, CLI_RUN_STRICT }, { "buffered", 0, 0, CLI_RUN_BUFFERED }, { "quantize", 1, 0, CLI_RUN_QUANT }, { "remote", 0, 0, CLI_RUN_REMOTE }, { "no-cache", 0, 0, CLI_RUN_NOCACHE }, \
	{ "quiet", 0, 0, CLI_RUN_QUIET }, { "no-quiet", 0, 0, CLI_RUN_NOQUIET }, { "verbose", 0, 0, CLI_RUN_VERBOSE }, \
	{ "plugin", 1, 0, CLI_RUN_PLUGIN }, { "transformers-cache", 1, 0, CLI_RUN_CACHE }, \
	{ "lora-merge-dtype", 1, 0, CLI_RUN_LORA_DT }, { "lora-merge-cache", 1, 0, CLI_RUN_LORA_CACHE }, \
	{ "lazy-unpickle", 0, 0, CLI_RUN_IGN0 }, { "no-lazy-unpickle", 0, 0, CLI_RUN_IGN0 }, \
	{ "low-cpu-memory", 0, 0, CLI_RUN_IGN0 }, { "no-low-cpu-memory", 0, 0, CLI_RUN_IGN0 }, \
	{ "clone-tensors", 0, 0, CLI_RUN_IGN0 }, { "no-clone-tensors", 0, 0, CLI_RUN_IGN0 }, \
	{ "trust-remote-code", 0, 0, CLI_RUN_IGN0 }, { "no-trust-remote-code", 0, 0, CLI_RUN_IGN0 }, \
	{ "read-to-gpu", 0, 0, CLI_RUN_CUDA }, { "no-read-to-gpu", 0, 0, CLI_RUN_IGN0 }, \
	{ "multi-gpu", 0, 0, CLI_RUN_IGN0 }, { "no-multi-gpu", 0, 0, CLI_RUN_IGN0 }, { "gpu-rich", 0, 0, CLI_RUN_GPU_RICH }, \
	{ "async-write", 0, 0, CLI_RUN_IGN0 }, { "no-async-write", 0, 0, CLI_RUN_IGN0 }, \
	{ "safe-serialization", 0, 0, CLI_RUN_IGN0 }, { "no-safe-serialization", 0, 0, CLI_RUN_IGN0 }, \
	{ "write-threads", 1, 0, CLI_RUN_IGN1 }, { "device", 1, 0, CLI_RUN_DEVICE }
struct mk_run_opts;
bool cli_run_option(int c, const char *arg, const char *name, bool state_dicts, struct mk_run_opts *o,
		    bool *quiet);

/* A merge run in this process (mk-yaml, mk-pytorch, mk-multi):
 * cli_cancel_on_signals makes SIGINT, SIGTERM and SIGHUP set cli_cancel
 * to the signal's number (for mk_run_opts.cancel; a signal ignored when
 * the program started stays ignored), and cli_run_progress, a
 * mk_run_opts.progress, draws the bar labelled ctx when cli_run_draw. */
extern volatile int cli_cancel;
extern bool cli_run_draw;
void cli_cancel_on_signals(void);
/* SIGINT, SIGTERM and SIGHUP to handler instead (the same rule for a
 * signal ignored at the start; mk-moe: after its planning, a handler that
 * removes its work directory and dies by the signal). */
void cli_signals_handle(void (*handler)(int));
void cli_run_progress(void *ctx, uint64_t done, uint64_t total, size_t td, size_t tn);
/* After a merge that failed because a signal cancelled it (cli_cancel
 * set): say so, and that `partial` (NULL: none) is kept for --resume when
 * it is there, then end the process by that signal. */
void cli_exit_cancelled(const char *partial);

/* A stage program (mk-fetch, ...) next to this one (/proc/self/exe's
 * directory), else its bare name for a PATH lookup; malloc'ed (exits on
 * out of memory). */
char *cli_stage_path(const char *name);
/* A program that plans in its own process and then runs the stages on
 * files it made (mk-moe, mk-extract-lora): cli_work_dir makes
 * TMPDIR/PROG.XXXXXX (failing with a message when it cannot) for the files
 * `names` (at most CLI_WORK_FILES_MAX; cli_work_file(i): the path of
 * names[i]), removed at exit; cli_work_dir_on_signals has a signal while
 * the stages run remove it before the signal ends the program;
 * cli_work_dir_keep leaves it (--print-pipeline's command reads it);
 * cli_work_dir_remove removes it now. */
#define CLI_WORK_FILES_MAX 4
const char *cli_work_dir(const char *const *names, size_t n);
const char *cli_work_file(size_t i);
void cli_work_dir_on_signals(void);
void cli_work_dir_keep(void);
void cli_work_dir_remove(void);
/* --print-pipeline: the stages' command line on standard output (the
 * work directory kept for it to read), then exit 0. */
void cli_print_pipeline(const struct mk_stage *st, size_t n) __attribute__((noreturn));
/* Program mk-fetch, mk-merge and mk-pack's paths (cli_stage_path) as
 * the first words of the three stages' vectors. */
void cli_stage_argvs(struct mk_argv *fetch, struct mk_argv *merge, struct mk_argv *pack);
/* A program that runs the stages (mk-moe, mk-extract-lora), at getopt's
 * `default:`: c as one of CLI_RUN_OPTIONS (-q and -v as --quiet and
 * --verbose, cli_verbose set; `ignored`: noted and ignored), or a bad
 * option (cli_usage_hint). */
void cli_run_option_take(int c, const char *arg, const char *name, bool ignored, struct mk_run_opts *o, bool *quiet);
/* mk_argv_push (run/argv.h), exiting on out of memory. */
void cli_argv_push(struct mk_argv *a, const char *s);
/* mk_run_stage_args for this program's -v count, exiting on an error. */
void cli_run_stage_args(const struct mk_run_opts *o, struct mk_argv *plan, struct mk_argv *fetch,
			struct mk_argv *merge, struct mk_argv *pack);

#endif
