/* cli.c - shared helpers of the mk-* programs (messages, exit codes,
 * terminal checks, the progress bar).  Only cmd/ prints or exits. */
#include <libgen.h>
#include <limits.h>
#include <malloc.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "mk/hub.h"
#include "mk/fsutil.h"

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

void cli_message(const char *kind, const char *msg)
{
	/* a message names tensors, paths and files, which may hold control
	 * characters: never send those to the terminal raw */
	char buf[4 * MK_ERR_MSG_MAX + 16];

	cli_progress_end();
	fprintf(stderr, "%s: %s%s%s\n", cli_prog, kind ? kind : "", kind ? ": " : "",
		mk_text_escape(msg, (size_t)-1, buf, sizeof(buf)));
}

/* In a pipeline run by mk-yaml (MK_PIPELINE_INPUT set, see mk/pipeline.h)
 * an empty or cut input means the producer failed, and mk-yaml names that
 * stage after its own message: this stage's would only bury it. */
static bool empty_input_from_stage(const struct mk_err *err)
{
	const char *v = getenv("MK_PIPELINE_INPUT");

	/* the reader's two words for it: "empty input ... (did the producer
	 * fail?)" and "ended ... (truncated, or the producer failed)" */
	return v && !strcmp(v, "1") && err && err->code == MK_ECORRUPT &&
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
	printf("%s %s\n", cli_prog, MK_VERSION);
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

void cli_argv_push(struct cli_argv *a, const char *s)
{
	char **q = realloc(a->v, (a->n + 2) * sizeof(*a->v));
	if (!q)
		cli_fail_oom();
	a->v = q;
	a->v[a->n] = strdup(s);
	if (!a->v[a->n])
		cli_fail_oom();
	a->n++;
	a->v[a->n] = NULL;
}
