/* top.h - the repository root, for unit tests that read testdata/: $MK_TOP,
 * else three levels above the test's binary (BUILD/test/NAME), else the
 * current directory or one of its two parents; the first that holds
 * `probe` (a path relative to the root).  Include after cmocka.h. */
#ifndef MK_TEST_TOP_H
#define MK_TEST_TOP_H

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static inline const char *test_top(const char *probe)
{
	static char dir[PATH_MAX - 256];
	char exe[PATH_MAX], path[PATH_MAX];
	const char *cand[5] = { getenv("MK_TOP"), NULL, ".", "..", "../.." };
	ssize_t n;

	if (dir[0])
		return dir;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		cand[1] = dirname(dirname(dirname(exe)));
	}
	for (size_t i = 0; i < 5; i++) {
		if (!cand[i])
			continue;
		snprintf(path, sizeof(path), "%s/%s", cand[i], probe);
		if (access(path, R_OK) == 0) {
			snprintf(dir, sizeof(dir), "%s", cand[i]);
			return dir;
		}
	}
	fail_msg("cannot find %s (set MK_TOP to the repository root)", probe);
	return NULL;
}

#endif
