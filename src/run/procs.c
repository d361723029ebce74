/* procs.c - run stages as processes joined by pipes. */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "run/procs.h"

/* Each stage's command line as it is run: a stage fed by another (all
 * but the first) gets MK_STAGE_FED_OPTION first, so that when its
 * producer fails it leaves the report to the runner.  The strings are
 * the caller's; only the vectors are allocated.  0, or -1 out of memory. */
static int stage_argvs(const struct mk_stage *st, size_t n, char ***argv)
{
	for (size_t i = 0; i < n; i++) {
		size_t k = 0, extra = i > 0;
		while (st[i].argv[k])
			k++;
		if (!(argv[i] = calloc(k + extra + 1, sizeof(**argv))))
			return -1;
		argv[i][0] = st[i].argv[0];
		if (extra)
			argv[i][1] = (char *)MK_STAGE_FED_OPTION;
		for (size_t j = 1; j < k; j++)
			argv[i][j + extra] = st[i].argv[j];
	}
	return 0;
}

static void free_argvs(char ***argv, size_t n)
{
	for (size_t i = 0; argv && i < n; i++)
		free(argv[i]);
	free(argv);
}

int mk_pipeline_run(const struct mk_stage *st, size_t n, const char *partial, struct mk_err *err)
{
	pid_t *pid = calloc(n ? n : 1, sizeof(*pid));
	int *status = calloc(n ? n : 1, sizeof(*status));
	bool *stopped = calloc(n ? n : 1, sizeof(*stopped));
	int prev = -1, rc = 0;
	size_t started = 0, live, first_fail = n;
	pid_t parent = getpid();
	char ***argv = calloc(n ? n : 1, sizeof(*argv));

	if (!pid || !status || !stopped || !argv || stage_argvs(st, n, argv)) {
		free(pid);
		free(status);
		free(stopped);
		free_argvs(argv, n);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		int fds[2] = { -1, -1 };
		if (i + 1 < n && pipe2(fds, O_CLOEXEC) < 0) {
			rc = mk_err_sys(err, errno, "pipe");
			break;
		}
		pid[i] = fork();
		if (pid[i] < 0) {
			rc = mk_err_sys(err, errno, "fork");
			if (fds[0] >= 0) {
				close(fds[0]);
				close(fds[1]);
			}
			break;
		}
		if (pid[i] == 0) {
			/* a stage dies with the runner, however the runner ends
			 * (SIGKILL included), so no stage finishes a merge the
			 * runner can no longer report; the check after prctl
			 * covers a runner that died before it */
			if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
				_exit(127);
			int in = prev >= 0 ? prev : open("/dev/null", O_RDONLY);
			if (in < 0 || dup2(in, 0) < 0 || (fds[1] >= 0 && dup2(fds[1], 1) < 0))
				_exit(127);
			execvp(argv[i][0], argv[i]);
			fprintf(stderr, "%s: cannot run %s: %s\n", st[i].name, st[i].argv[0], strerror(errno));
			_exit(127);
		}
		started++;
		if (prev >= 0)
			close(prev);
		if (fds[1] >= 0)
			close(fds[1]);
		prev = fds[0];
	}
	if (prev >= 0)
		close(prev);
	/* wait; on the first failure stop the producers (not the sink, which
	 * cleans up after a truncated stream) */
	live = started;
	while (live > 0) {
		int s;
		pid_t w = wait(&s);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (size_t i = 0; i < started; i++) {
			if (pid[i] != w)
				continue;
			status[i] = s;
			pid[i] = 0;
			live--;
			if ((!WIFEXITED(s) || WEXITSTATUS(s) != 0) && first_fail == n) {
				first_fail = i;
				for (size_t k = 0; k + 1 < started; k++)
					if (pid[k] > 0 && kill(pid[k], SIGTERM) == 0)
						stopped[k] = true;
			}
		}
	}
	if (!rc && started < n)
		rc = -MK_EIO;
	if (!rc && first_fail < n) {
		/* name the cause, not a consequence: the most upstream stage that
		 * failed by itself (not by our SIGTERM, nor SIGPIPE from a dead
		 * reader); else the sink */
		size_t cause = first_fail;
		for (size_t i = 0; i < started; i++) {
			int s = status[i];
			bool failed = !WIFEXITED(s) || WEXITSTATUS(s) != 0;
			bool ours = WIFSIGNALED(s) && (WTERMSIG(s) == SIGPIPE || (WTERMSIG(s) == SIGTERM && stopped[i]));
			if (failed && !ours && (i + 1 < started || cause == first_fail)) {
				cause = i;
				break;
			}
		}
		first_fail = cause;
		int s = status[first_fail];
		if (WIFSIGNALED(s))
			rc = mk_err_set(err, MK_EIO, "%s was killed by signal %d", st[first_fail].name, WTERMSIG(s));
		else
			rc = mk_err_set(err, MK_EIO, "%s exited with status %d", st[first_fail].name, WEXITSTATUS(s));
	}
	if (rc && partial)
		(void)mk_rmtree(partial, NULL);
	free(pid);
	free(status);
	free_argvs(argv, n);
	free(stopped);
	return rc;
}

static void quote(FILE *f, const char *w)
{
	bool plain = *w != '\0';

	for (const char *c = w; *c; c++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%", *c))
			plain = false;
	if (plain) {
		fputs(w, f);
		return;
	}
	fputc('\'', f);
	for (const char *c = w; *c; c++) {
		if (*c == '\'')
			fputs("'\\''", f);
		else
			fputc(*c, f);
	}
	fputc('\'', f);
}

char *mk_pipeline_format(const struct mk_stage *st, size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputs(" | ", f);
		for (size_t k = 0; st[i].argv[k]; k++) {
			if (k)
				fputc(' ', f);
			quote(f, k == 0 ? st[i].name : st[i].argv[k]);
		}
	}
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
