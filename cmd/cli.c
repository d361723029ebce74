/* cli.c - shared helpers of the mk-* programs (messages, exit codes,
 * terminal checks, the progress bar).  Only cmd/ prints or exits. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "config/config.h"
#include "hub/hub.h"
#include "mk/plugin.h"
#include "mk/run.h"
#include "core/blas.h"
#include "core/fsutil.h"
#include "core/text.h"

const char *cli_prog = "mk";
int cli_verbose = 2;
static bool progress_drawn;
static double progress_t0;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The program again, with OPENBLAS_CORETYPE set (mk_blas_core_better):
 * OpenBLAS picks its kernels as it loads, before main.  Done from a
 * constructor of the program (glibc gives it the arguments), before
 * main reads or opens anything, by the program's own path (so its name
 * stays its own for ps and pgrep); on any failure the run goes on as it
 * is. */
__attribute__((constructor)) static void blas_restart(int argc, char **argv, char **envp)
{
	const char *core = mk_blas_core_better();
	char path[PATH_MAX];
	ssize_t n;

	(void)envp;
	if (!core || argc < 1 || !argv || (n = readlink("/proc/self/exe", path, sizeof(path) - 1)) <= 0)
		return;
	path[n] = '\0';
	if (setenv("OPENBLAS_CORETYPE", core, 1))
		return;
	execv(path, argv);
}

void cli_init(const char *prog)
{
	cli_prog = prog;
	progress_t0 = now();
	/* Chunk buffers (4 MiB by default) come and go with every tensor:
	 * keep freed ones in the heap instead of unmapping them, so each new
	 * tensor does not fault in fresh zeroed pages (measured: 13% of
	 * mk-merge's time went to page faults).  The peak stays the peak. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20); /* the most glibc takes */
	mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

void cli_common_option(int c, const char *arg, int *want_progress, void (*usage)(void))
{
	struct mk_err err = { 0 };

	switch (c) {
	case 'v': cli_verbose++; return;
	case 'q': cli_verbose--; return;
	case CLI_PROGRESS: *want_progress = 1; return;
	case CLI_NO_PROGRESS: *want_progress = 0; return;
	case 'P':
		if (mk_plugin_load(arg, &err))
			cli_fail(&err);
		return;
	case CLI_STAGE_FED: cli_fed_by_stage = true; return;
	case 'h': usage(); break; /* exits */
	case 'V': cli_version();
	}
	cli_usage_hint();
}

int cli_compress_level(const char *arg)
{
	uint64_t v;

	if (!arg)
		return 3;
	if (mk_size_parse(arg, &v) || v < 1 || v > 19)
		cli_usage_error("--compress: level must be 1..19, not '%s'", arg);
	return (int)v;
}

void cli_message(const char *kind, const char *msg)
{
	/* a message names tensors, paths and files, which may hold control
	 * characters: never send those to the terminal raw */
	char buf[4 * MK_ERR_MSG_MAX + 16];

	cli_progress_end();
	fprintf(stderr, "%s: %s%s%s\n", cli_prog, kind ? kind : "", kind ? ": " : "",
		mk_text_escape(msg, (size_t)-1, buf, sizeof(buf)));
}

bool cli_fed_by_stage;

/* In a pipeline run by mk-yaml or mk-moe (MK_STAGE_FED_OPTION given, see
 * run/procs.h) an empty or cut input means the producer failed, and the
 * runner names that stage after its own message: this stage's would only
 * bury it. */
static bool empty_input_from_stage(const struct mk_err *err)
{
	/* the reader's two words for it: "empty input ... (did the producer
	 * fail?)" and "ended ... (truncated, or the producer failed)" */
	return cli_fed_by_stage && err && err->code == MK_ECORRUPT &&
	       (strstr(err->msg, "(did the producer fail?)") ||
		strstr(err->msg, "(truncated, or the producer failed)"));
}

void cli_fail(const struct mk_err *err)
{
	if (cli_verbose >= 1 && !empty_input_from_stage(err))
		cli_message("error", err && err->msg[0] ? err->msg : "failed");
	cli_progress_end();
	exit(EXIT_FAIL);
}

void cli_fail_oom(void)
{
	struct mk_err err;

	mk_err_set(&err, MK_ENOMEM, "out of memory");
	cli_fail(&err);
}

void cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", cli_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", cli_prog);
	exit(EXIT_USAGE);
}

void cli_usage_hint(void)
{
	fprintf(stderr, "Try '%s --help' for more information.\n", cli_prog);
	exit(EXIT_USAGE);
}

void cli_info(int level, const char *fmt, ...)
{
	char msg[4 * MK_ERR_MSG_MAX];
	va_list ap;

	if (cli_verbose < level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cli_message(NULL, msg);
}

void cli_version(void)
{
	const char *core = mk_blas_core();

	printf("%s %s\n", cli_prog, MK_VERSION);
	if (core)
		printf("OpenBLAS kernels: %s\n", core);
	exit(EXIT_OK);
}

void cli_check_binary_out(int fd, bool force)
{
	if (!force && isatty(fd)) {
		fprintf(stderr, "%s: error: refusing to write a binary stream to a terminal; "
				"redirect it or pipe it to another mk program (-f to force)\n", cli_prog);
		exit(EXIT_USAGE);
	}
}

void cli_check_binary_in(int fd, bool force)
{
	if (!force && isatty(fd)) {
		fprintf(stderr, "%s: error: refusing to read a binary stream from a terminal; "
				"pipe mk-fetch (or mk-merge) into it, or give a file\n", cli_prog);
		exit(EXIT_USAGE);
	}
}

static int open_or_fail(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC, 0644);
	struct mk_err err;

	if (fd < 0) {
		mk_err_sys(&err, errno, "%s", path);
		cli_fail(&err);
	}
	return fd;
}

int cli_open_read(const char *path)
{
	return open_or_fail(path, O_RDONLY);
}

int cli_open_write(const char *path)
{
	return open_or_fail(path, O_WRONLY | O_CREAT | O_TRUNC);
}

int cli_open_input(const char *path)
{
	if (strcmp(path, "-"))
		return cli_open_read(path);
	cli_check_binary_in(0, false);
	return 0;
}

int cli_open_output(const char *path, bool force)
{
	if (strcmp(path, "-"))
		return cli_open_write(path);
	cli_check_binary_out(1, force);
	return 1;
}

void cli_close_output(int fd, const char *path)
{
	struct mk_err err;

	if (fd != 1 && close(fd) < 0) {
		mk_err_sys(&err, errno, "%s", path);
		cli_fail(&err);
	}
}

void cli_close_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
		fprintf(stderr, "%s: error: writing standard output failed\n", cli_prog);
		exit(EXIT_FAIL);
	}
}

bool cli_progress_enabled(int want)
{
	if (want >= 0)
		return want > 0;
	return cli_verbose >= 2 && isatty(2);
}

void cli_progress(const char *what, uint64_t done, uint64_t total, uint64_t items_done,
		  uint64_t items_total)
{
	static double last;
	double t = now(), el = t - progress_t0, frac = total ? (double)done / (double)total : 1;
	char a[32], b[32], eta[32] = "";
	int width = 30, fill = (int)(frac * width + 0.5);

	if (t - last < 0.1 && done < total)
		return;
	last = t;
	if (frac > 0.001 && frac < 1) {
		double rest = el / frac - el;
		snprintf(eta, sizeof(eta), " ETA %d:%02d", (int)rest / 60, (int)rest % 60);
	}
	char items[64] = "";
	if (items_total)             /* a download counts bytes only */
		snprintf(items, sizeof(items), " %llu/%llu tensors", (unsigned long long)items_done,
			 (unsigned long long)items_total);
	fprintf(stderr, "\r%s [%.*s%*s] %5.1f%% %s/%s%s%s\033[K", what, fill,
		"==============================", width - fill, "", frac * 100, mk_size_human(done, a, sizeof(a)),
		mk_size_human(total, b, sizeof(b)), items, eta);
	progress_drawn = true;
}

void cli_progress_end(void)
{
	if (progress_drawn) {
		fputc('\n', stderr);
		progress_drawn = false;
	}
}

void cli_discard_output(int fd, const char *path)
{
	struct stat fs, ls;

	if (fstat(fd, &fs) == 0 && S_ISREG(fs.st_mode)) {
		if (lstat(path, &ls) == 0 && ls.st_dev == fs.st_dev && ls.st_ino == fs.st_ino)
			(void)unlink(path);
		else
			(void)!ftruncate(fd, 0);
	}
	close(fd);
}

static void hub_progress(void *ctx, const char *what, uint64_t done, uint64_t total)
{
	char label[160];

	(void)ctx;
	snprintf(label, sizeof(label), "download %s", what);
	cli_progress(label, done, total, 0, 0);
	if (done == total)
		cli_progress_end();
}

void cli_hub_progress(int want)
{
	struct mk_hub_opts o = { 0 };

	if (cli_progress_enabled(want))
		o.progress = hub_progress;
	mk_hub_configure(&o);
}

const char *cli_read_config(const char *path, uint8_t **text, size_t *len)
{
	struct mk_err err = { 0 };
	const char *label;

	if (mk_config_read(path, text, len, &label, &err))
		cli_fail(&err);
	return label;
}

void cli_print_diags(const struct mk_diags *d)
{
	for (size_t i = 0; i < d->n; i++) {
		char line[2048];
		if (cli_verbose < (d->v[i].level == MK_DIAG_ERROR ? 1 : 2))
			continue;
		mk_diag_format(d, &d->v[i], line, sizeof(line));
		cli_message(d->v[i].level == MK_DIAG_ERROR ? "error" : "warning", line);
	}
}

bool cli_run_option(int c, const char *arg, const char *name, bool state_dicts, struct mk_run_opts *o,
		    bool *quiet)
{
	struct mk_err err = { 0 };
	uint64_t v;

	if (state_dicts && (c == CLI_RUN_COPY || c == CLI_RUN_NOCOPY || c == CLI_RUN_CARD || c == CLI_RUN_NOCARD ||
			    c == CLI_RUN_CRIMES || c == CLI_RUN_NOCRIMES || c == CLI_RUN_LORA_DT ||
			    c == CLI_RUN_LORA_CACHE || c == CLI_RUN_REMOTE || c == CLI_RUN_NOCACHE ||
			    c == CLI_RUN_CACHE || c == CLI_RUN_TRUNC || c == CLI_RUN_NOTRUNC))
		c = CLI_RUN_IGN0;
	switch (c) {
	case CLI_RUN_SHARD:
		if (mk_size_parse(arg, &o->out_shard_size) || !o->out_shard_size)
			cli_usage_error("--out-shard-size: expected a size like 5B, 200K or 64MiB, not '%s'", arg);
		return true;
	case CLI_RUN_COPY: o->no_copy_tokenizer = false; return true;
	case CLI_RUN_NOCOPY: o->no_copy_tokenizer = true; return true;
	case CLI_RUN_CARD: o->no_model_card = false; return true;
	case CLI_RUN_NOCARD: o->no_model_card = true; return true;
	case CLI_RUN_CRIMES: o->allow_crimes = true; return true;
	case CLI_RUN_TRUNC: o->unsafe_truncate_embeddings = true; return true;
	case CLI_RUN_NOTRUNC: o->unsafe_truncate_embeddings = false; return true;
	case CLI_RUN_NOCRIMES: o->allow_crimes = false; return true;
	case CLI_RUN_SEED:
		if (mk_size_parse(arg, &o->seed))
			cli_usage_error("--random-seed: expected a non-negative integer, not '%s'", arg);
		return true;
	case CLI_RUN_CUDA: o->cuda = true; return true;
	case CLI_RUN_GPU_RICH:
		/* mergekit's --cuda --low-cpu-memory --read-to-gpu --multi-gpu:
		 * the first is mk's --cuda, the others mean nothing here */
		o->cuda = true;
		cli_info(2, "note: --gpu-rich is --cuda here (its --low-cpu-memory, --read-to-gpu and --multi-gpu mean nothing to %s)",
			 cli_prog);
		return true;
	case CLI_RUN_NOCUDA: o->cuda = false; return true;
	case CLI_RUN_DEVICE:
		/* mergekit's --device: "cuda" or "cuda:N" is mk's --cuda (one
		 * GPU, the first); "cpu" and "auto" leave it as it is */
		if (!strncmp(arg, "cuda", 4) && (!arg[4] || arg[4] == ':'))
			o->cuda = true;
		else if (strcmp(arg, "cpu") && strcmp(arg, "auto"))
			cli_usage_error("--device: expected cpu, cuda, cuda:N or auto, not '%s'", arg);
		return true;
	case 'j':
		if (mk_size_parse(arg, &v) || v < 1 || v > 1024)
			cli_usage_error("--num-threads: expected a positive integer, not '%s'", arg);
		o->threads = (unsigned)v;
		return true;
	case CLI_RUN_MEM:
		if (mk_size_parse(arg, &o->max_memory))
			cli_usage_error("--max-memory: expected a size like 8G or 512MiB, not '%s'", arg);
		return true;
	case CLI_RUN_SPILL: o->spill_dir = arg; return true;
	case CLI_RUN_STRICT: o->strict = true; return true;
	case CLI_RUN_BUFFERED: o->buffered = true; return true;
	case CLI_RUN_QUANT:
		if (state_dicts)
			cli_usage_error("--quantize is not an option of %s: PyTorch state dicts carry no quantization",
					cli_prog);
		(void)cli_quantize_arg(arg);
		o->quantize = arg;
		return true;
	case CLI_RUN_REMOTE: o->remote = true; return true;
	case CLI_RUN_NOCACHE: o->no_cache = true; return true;
	case CLI_RUN_QUIET: *quiet = true; return true;
	case CLI_RUN_NOQUIET: *quiet = false; return true;
	case CLI_RUN_VERBOSE: cli_verbose++; return true;
	case CLI_RUN_PLUGIN:
		if (mk_plugin_load(arg, &err))
			cli_fail(&err);
		return true;
	case CLI_RUN_CACHE:
		/* the Hugging Face cache models are found in (HF_HUB_CACHE) */
		if (setenv("HF_HUB_CACHE", arg, 1))
			cli_fail_oom();
		return true;
	case CLI_RUN_LORA_DT:
		if (mk_config_dtype_parse(arg, &o->lora_dtype, NULL, NULL) || !mk_dtype_is_float(o->lora_dtype))
			cli_usage_error("--lora-merge-dtype: expected a float dtype (bfloat16, float16, float32), not '%s'",
					arg);
		o->has_lora_dtype = true;
		return true;
	case CLI_RUN_LORA_CACHE:
		cli_info(2, "note: --lora-merge-cache is not needed: mk applies LoRA adapters as it reads the weights, "
			    "with no merged copy on disk; ignored");
		return true;
	case CLI_RUN_IGN0:
	case CLI_RUN_IGN1:
		cli_info(2, "note: --%s means nothing to %s; ignored", name, cli_prog);
		return true;
	default:
		return false;
	}
}

enum mk_requant cli_quantize_arg(const char *arg)
{
	enum mk_requant k;

	if (mk_requant_parse(arg, &k))
		cli_usage_error("--quantize: expected fp8 or mxfp4 (the format the inputs were in), not '%s'", arg);
	return k;
}

volatile int cli_cancel;
bool cli_run_draw;

static void on_cancel_signal(int sig)
{
	cli_cancel = sig;
}

static const int cancel_sigs[] = { SIGINT, SIGTERM, SIGHUP };
static bool sig_ignored[sizeof(cancel_sigs) / sizeof(*cancel_sigs)], sig_checked;

void cli_signals_handle(void (*handler)(int))
{
	struct sigaction sa = { .sa_handler = handler };

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(cancel_sigs) / sizeof(*cancel_sigs); i++) {
		struct sigaction old;
		/* ignored when the program started: left so (the first call
		 * looks; a later one finds its own handler there) */
		if (!sig_checked)
			sig_ignored[i] = sigaction(cancel_sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN;
		if (!sig_ignored[i])
			sigaction(cancel_sigs[i], &sa, NULL);
	}
	sig_checked = true;
}

void cli_cancel_on_signals(void)
{
	cli_signals_handle(on_cancel_signal);
}

void cli_run_progress(void *ctx, uint64_t done, uint64_t total, size_t td, size_t tn)
{
	if (cli_run_draw)
		cli_progress(ctx ? ctx : cli_prog, done, total, td, tn);
}

void cli_exit_cancelled(const char *partial)
{
	int sig = cli_cancel;
	struct stat st;

	if (partial && stat(partial, &st) == 0)
		cli_info(2, "stopped by SIG%s; %s is kept: run again with --resume to continue it, or remove it",
			 sigabbrev_np(sig), partial);
	else
		cli_info(2, "stopped by SIG%s", sigabbrev_np(sig));
	signal(sig, SIG_DFL);
	raise(sig);
	exit(EXIT_FAIL); /* (not reached) */
}

char *cli_stage_path(const char *name)
{
	char self[PATH_MAX], *p;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (n > 0) {
		self[n] = '\0';
		char *dir = dirname(self);
		size_t len = strlen(dir) + strlen(name) + 2;
		p = malloc(len);
		if (!p)
			cli_fail_oom();
		snprintf(p, len, "%s/%s", dir, name);
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	p = strdup(name);
	if (!p)
		cli_fail_oom();
	return p;
}

/* the work directory and its files: paths made before any signal
 * handler can need them (removing them is async-signal-safe) */
static char work_dir[PATH_MAX], work_files[CLI_WORK_FILES_MAX][PATH_MAX + 32];
static size_t work_nfiles;
static pid_t work_pid;

void cli_work_dir_remove(void)
{
	if (!work_dir[0])
		return;
	for (size_t i = 0; i < work_nfiles; i++)
		unlink(work_files[i]);
	rmdir(work_dir);
	work_dir[0] = '\0';
}

void cli_work_dir_keep(void)
{
	work_dir[0] = '\0';
}

/* a signal while the stages run: the work directory goes, then the
 * signal ends the program (and the stages with it); a forked stage
 * before its exec leaves it to the program */
static void work_signal(int sig)
{
	if (getpid() == work_pid)
		cli_work_dir_remove();
	signal(sig, SIG_DFL);
	raise(sig);
}

void cli_work_dir_on_signals(void)
{
	cli_signals_handle(work_signal);
}

const char *cli_work_dir(const char *const *names, size_t n)
{
	const char *tmp = getenv("TMPDIR");
	struct mk_err err = { 0 };

	if (n > CLI_WORK_FILES_MAX)
		n = CLI_WORK_FILES_MAX;
	if ((size_t)snprintf(work_dir, sizeof(work_dir), "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", cli_prog) >=
	    sizeof(work_dir)) {
		work_dir[0] = '\0';
		mk_err_set(&err, MK_EINVAL, "TMPDIR '%s' is too long for %s's work directory (%zu bytes at most)", tmp,
			   cli_prog, sizeof(work_dir) - 16 - strlen(cli_prog));
		cli_fail(&err);
	}
	if (!mkdtemp(work_dir)) {
		mk_err_sys(&err, errno, "%s", work_dir);
		work_dir[0] = '\0';
		cli_fail(&err);
	}
	for (size_t i = 0; i < n; i++)
		snprintf(work_files[i], sizeof(work_files[i]), "%s/%s", work_dir, names[i]);
	work_nfiles = n;
	work_pid = getpid();
	atexit(cli_work_dir_remove);
	return work_dir;
}

const char *cli_work_file(size_t i)
{
	return i < work_nfiles ? work_files[i] : NULL;
}

void cli_print_pipeline(const struct mk_stage *st, size_t n)
{
	cli_work_dir_keep();
	char *s = mk_pipeline_format(st, n);
	printf("%s\n", s ? s : "");
	free(s);
	cli_close_stdout();
	exit(EXIT_OK);
}

void cli_stage_argvs(struct mk_argv *fetch, struct mk_argv *merge, struct mk_argv *pack)
{
	struct mk_argv *v[3] = { fetch, merge, pack };
	static const char *const names[3] = { "mk-fetch", "mk-merge", "mk-pack" };

	for (int i = 0; i < 3; i++) {
		char *p = cli_stage_path(names[i]);
		cli_argv_push(v[i], p);
		free(p);
	}
}

void cli_run_option_take(int c, const char *arg, const char *name, bool ignored, struct mk_run_opts *o, bool *quiet)
{
	c = c == 'q' ? CLI_RUN_QUIET : c == 'v' ? CLI_RUN_VERBOSE : c;
	if (c == CLI_RUN_QUIET)
		cli_verbose = 1;
	else if (c == CLI_RUN_NOQUIET && cli_verbose == 1)
		cli_verbose = 2;      /* -q undone; a -v kept */
	/* (mk-moe reads unquantized models only; an adapter is not quantized) */
	if (c == CLI_RUN_QUANT)
		cli_usage_error("--quantize is not an option of %s: it writes no weights that were stored quantized",
				cli_prog);
	if (!cli_run_option(ignored ? CLI_RUN_IGN0 : c, arg, name, false, o, quiet))
		cli_usage_hint();
}


void cli_argv_push(struct mk_argv *a, const char *s)
{
	struct mk_err err = { 0 };

	if (mk_argv_push(a, s, &err))
		cli_fail(&err);
}

void cli_run_stage_args(const struct mk_run_opts *o, struct mk_argv *plan, struct mk_argv *fetch,
			struct mk_argv *merge, struct mk_argv *pack)
{
	struct mk_err err = { 0 };

	/* cli_verbose starts at 2: each -v beyond it is passed on */
	if (mk_run_stage_args(o, cli_verbose > 2 ? (unsigned)(cli_verbose - 2) : 0, plan, fetch, merge, pack, &err))
		cli_fail(&err);
}
