/* mk-rss - run a command and record its peak resident set size.
 *
 *   mk-rss FILE COMMAND [ARG]...
 *
 * Writes the child's peak RSS in KiB (getrusage ru_maxrss) to FILE and
 * exits with the child's status, so it can wrap each stage of a pipe:
 *   mk-rss f.rss mk-fetch --model M | mk-rss p.rss mk-pack OUT */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	struct rusage ru;
	int status;
	pid_t pid;
	FILE *f;

	if (argc < 3) {
		fprintf(stderr, "usage: mk-rss FILE COMMAND [ARG]...\n");
		return 2;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 2;
	}
	if (pid == 0) {
		execvp(argv[2], argv + 2);
		perror(argv[2]);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &ru) < 0) {
		perror("wait4");
		return 2;
	}
	f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%ld\n", ru.ru_maxrss) < 0 || fclose(f) != 0) {
		perror(argv[1]);
		return 2;
	}
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}
