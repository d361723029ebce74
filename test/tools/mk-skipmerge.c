/* mk-skipmerge - mk-fetch and mk-merge on one skip board (mk/chan.h), the
 * board marked before they start, for the tests: what mk-yaml's fetch and
 * merge stages do when the merge marks a pass, made deterministic.
 *
 *   mk-skipmerge [--fetch-only] [--mark JOB:PASS] PLAN OUT
 *
 * Reads the plan stream PLAN (mk-plan's output), runs mk_fetch_plan on a
 * thread into an in-memory channel and mk_merge_run from it into the file
 * OUT (a tensors stream, as mk-merge writes), both given the board; with
 * --mark the board has that pass of that job marked from the start, so
 * mk-fetch sends none of it and mk-merge takes the stream's jump over it
 * (accepted only where the method has what it needs of the pass).
 * --fetch-only: the board given to mk-fetch alone, so mk-merge, which
 * has none, sees a stream that leaves a pass out, as a standalone
 * mk-merge would (refused).
 * Prints "unsent N" (the chunks mk-fetch left out) to stderr; exit 0, or
 * 1 with the first stage's error. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mk/chan.h"
#include "fetch/fetch.h"
#include "merge/merge.h"

struct fetch_arg {
	struct mk_fetch_opts o;
	int in_fd;
	struct mk_chan *ch;
	struct mk_fetch_stats st;
	struct mk_err err;
	int rc;
};

static void *fetch_main(void *p)
{
	struct fetch_arg *a = p;

	a->rc = mk_fetch_plan(&a->o, mk_io_fd(a->in_fd), "plan", mk_io_chan(a->ch), &a->st, &a->err);
	mk_chan_close_write(a->ch);
	return NULL;
}

int main(int argc, char **argv)
{
	struct fetch_arg fa = { 0 };
	struct mk_merge_opts mo = { .threads = 1 };
	struct mk_merge_stats ms;
	struct mk_chan_skip *skip = NULL;
	struct mk_err err = { 0 };
	unsigned long job = 0, pass = 0;
	bool mark = false, fetch_only = false;
	int out, rc, a = 1;
	pthread_t t;

	if (argc > 1 && !strcmp(argv[1], "--fetch-only")) {
		fetch_only = true;
		argv++;
		argc--;
	}
	if (argc == 5 && !strcmp(argv[1], "--mark")) {
		char *e;
		job = strtoul(argv[2], &e, 10);
		if (*e != ':' || !e[1])
			return 2;
		pass = strtoul(e + 1, &e, 10);
		if (*e)
			return 2;
		mark = true;
		a = 3;
	} else if (argc != 3) {
		fprintf(stderr, "usage: mk-skipmerge [--fetch-only] [--mark JOB:PASS] PLAN OUT\n");
		return 2;
	}
	if ((fa.in_fd = open(argv[a], O_RDONLY | O_CLOEXEC)) < 0 ||
	    (out = open(argv[a + 1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
		perror("mk-skipmerge");
		return 1;
	}
	if (mk_chan_skip_new(&skip, &err) || mk_chan_open(&fa.ch, 0, &err)) {
		fprintf(stderr, "mk-skipmerge: %s\n", err.msg);
		return 1;
	}
	if (mark && !mk_chan_skip_mark(skip, (uint32_t)job, (unsigned)pass)) {
		fprintf(stderr, "mk-skipmerge: pass %lu cannot be marked\n", pass);
		return 2;
	}
	fa.o.skip = skip;
	mo.skip = fetch_only ? NULL : skip;
	if (pthread_create(&t, NULL, fetch_main, &fa)) {
		fprintf(stderr, "mk-skipmerge: cannot start a thread\n");
		return 1;
	}
	rc = mk_merge_run(&mo, mk_io_chan(fa.ch), "inputs", mk_io_fd(out), &ms, &err);
	mk_chan_close_read(fa.ch);      /* (a merge that failed: the fetch stops) */
	pthread_join(t, NULL);
	fprintf(stderr, "unsent %llu\n", (unsigned long long)fa.st.chunks_unsent);
	if (rc)
		fprintf(stderr, "mk-skipmerge: mk-merge: %s\n", err.msg);
	else if (fa.rc)
		fprintf(stderr, "mk-skipmerge: mk-fetch: %s\n", fa.err.msg);
	mk_chan_free(fa.ch);
	mk_chan_skip_free(skip);
	close(out);
	close(fa.in_fd);
	return rc || fa.rc ? 1 : 0;
}
