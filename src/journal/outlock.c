/* outlock.c - one run at a time writes an output directory (outlock.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "journal/outlock.h"

char *mk_out_partial_name(const char *out)
{
	size_t n = strlen(out);
	char *p;

	while (n > 1 && out[n - 1] == '/')
		n--;
	p = malloc(n + 16);
	if (p)
		snprintf(p, n + 16, "%.*s.mk-partial", (int)n, out);
	return p;
}

/* Does this process hold the lock on the directory `st` is, through
 * another descriptor than `self` (a thread's run, or one inherited)?
 * flock on a descriptor of the locked open file succeeds; on any other
 * it fails. */
static bool held_here(const struct stat *st, int self)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	bool held = false;

	if (!d)
		return false;
	while (!held && (e = readdir(d))) {
		struct stat s;
		int fd = atoi(e->d_name);
		if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == self || fd == dirfd(d))
			continue;
		if (fstat(fd, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino &&
		    flock(fd, LOCK_EX | LOCK_NB) == 0)
			held = true;
	}
	closedir(d);
	return held;
}

/* The pid that holds a flock on `st`, from /proc/locks; 0 if not found. */
static long holder(const struct stat *st)
{
	FILE *f = fopen("/proc/locks", "re");
	char line[256], type[16];
	long pid = 0, p;
	unsigned maj, mnr;
	unsigned long ino;

	if (!f)
		return 0;
	while (!pid && fgets(line, sizeof(line), f))
		if (!strstr(line, "->") &&
		    sscanf(line, "%*s %15s %*s %*s %ld %x:%x:%lu", type, &p, &maj, &mnr, &ino) == 5 &&
		    !strcmp(type, "FLOCK") && ino == st->st_ino && makedev(maj, mnr) == st->st_dev)
			pid = p;
	fclose(f);
	return pid;
}

int mk_out_lock(const char *out, struct mk_out_lock *lk, struct mk_err *err)
{
	int rc;

	*lk = (struct mk_out_lock){ .fd = -1 };
	if (!(lk->path = mk_out_partial_name(out)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	/* OUT's parents, as mk-pack makes them: the first missing one noted */
	for (char *d = strdup(lk->path), *s; d; free(d), d = NULL) {
		struct stat st;
		while ((s = strrchr(d, '/')) && s != d) {
			*s = '\0';
			if (stat(d, &st) == 0)
				break;
			free(lk->top);
			lk->top = strdup(d);
		}
	}
	if ((rc = mk_mkdirs_for(lk->path, err)))
		return rc;
	for (int tries = 0; tries < 100; tries++) {
		struct stat a, b;
		bool made = mkdir(lk->path, 0755) == 0;
		if (!made && errno != EEXIST)
			return mk_err_sys(err, errno, "%s: cannot create the output", lk->path);
		int fd = open(lk->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			if (errno == ENOENT)
				continue;        /* renamed away meanwhile: look again */
			if (errno == ENOTDIR || errno == ELOOP)
				return mk_err_set(err, MK_EEXIST, "%s is not a directory; remove it", lk->path);
			return mk_err_sys(err, errno, "%s", lk->path);
		}
		if (fstat(fd, &a) < 0) {
			rc = mk_err_sys(err, errno, "%s", lk->path);
			close(fd);
			return rc;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int e = errno;
			if (e == EWOULDBLOCK && held_here(&a, fd)) {
				close(fd);   /* this run's own, or its parent's */
				return 0;
			}
			long pid = e == EWOULDBLOCK ? holder(&a) : 0;
			close(fd);
			if (e != EWOULDBLOCK)
				return mk_err_sys(err, e, "%s: flock", lk->path);
			if (pid)
				return mk_err_set(err, MK_EEXIST, "another mk run is writing %s (pid %ld); wait for it to end",
						  out, pid);
			return mk_err_set(err, MK_EEXIST, "another mk run is writing %s; wait for it to end", out);
		}
		/* still the directory at the path (not renamed into OUT by the
		 * run that held it until just now) */
		if (stat(lk->path, &b) < 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
			close(fd);
			continue;
		}
		lk->fd = fd;
		lk->owner = true;
		lk->made = made;
		return 0;
	}
	return mk_err_set(err, MK_EIO, "%s: the directory keeps changing", lk->path);
}

int mk_out_lock_share(struct mk_out_lock *lk, struct mk_err *err)
{
	if (lk->owner && fcntl(lk->fd, F_SETFD, 0) < 0)
		return mk_err_sys(err, errno, "%s", lk->path);
	return 0;
}

void mk_out_unlock(struct mk_out_lock *lk)
{
	if (lk->owner) {
		struct stat a, b;
		/* made here and left empty: no trace (rmdir refuses a full one) */
		if (lk->made && fstat(lk->fd, &a) == 0 && stat(lk->path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino && rmdir(lk->path) == 0 && lk->top) {
			/* and the parents made for it, up to the first, if empty */
			char *s;
			while ((s = strrchr(lk->path, '/')) && s != lk->path) {
				*s = '\0';
				if (rmdir(lk->path) < 0 || !strcmp(lk->path, lk->top))
					break;
			}
		}
		close(lk->fd);
	}
	free(lk->top);
	free(lk->path);
	*lk = (struct mk_out_lock){ .fd = -1 };
}
