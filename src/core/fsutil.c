/* fsutil.c - file-system helpers shared by the stages. */
#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"

const char *mk_file_kind(mode_t mode)
{
	return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a directory" :
	       S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket" :
	       S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device" :
	       "not a file";
}

static int not_regular(const char *path, mode_t mode, struct mk_err *err)
{
	return mk_err_set(err, MK_EINVAL, "%s: not a regular file (%s)", path, mk_file_kind(mode));
}

int mk_file_open(const char *path, struct stat *st, struct mk_err *err)
{
	struct stat sb;
	int fd, fl;

	if (!st)
		st = &sb;
	if (stat(path, st) < 0)
		return mk_err_sys(err, errno, "%s", path);
	if (!S_ISREG(st->st_mode))
		return not_regular(path, st->st_mode, err);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return mk_err_sys(err, errno, "%s", path);
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode) || (fl = fcntl(fd, F_GETFL)) < 0 ||
	    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		int e = errno, rc = S_ISREG(st->st_mode) ? mk_err_sys(err, e, "%s", path) :
						      not_regular(path, st->st_mode, err);
		close(fd);
		return rc;
	}
	return fd;
}

int mk_file_read(const char *path, size_t max, uint8_t **buf, size_t *len,
		 struct mk_err *err)
{
	struct stat st;
	uint8_t *b = NULL;
	size_t got = 0;
	int fd, rc = 0;

	*buf = NULL;
	*len = 0;
	fd = mk_file_open(path, &st, err);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max) {
		rc = mk_err_set(err, MK_EINVAL, "%s: %lld bytes, more than the %zu allowed", path,
				(long long)st.st_size, max);
		goto out;
	}
	b = malloc((size_t)st.st_size + 1);
	if (!b) {
		rc = mk_err_set(err, MK_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, b + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = mk_err_sys(err, errno, "%s: read", path);
			goto out;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	b[got] = 0;
	*buf = b;
	*len = got;
	b = NULL;
out:
	free(b);
	close(fd);
	return rc;
}

int mk_fd_read_all(int fd, size_t max, const char *label, uint8_t **buf, size_t *len,
		   struct mk_err *err)
{
	size_t cap = 65536, n = 0;
	uint8_t *b = malloc(cap + 1);

	*buf = NULL;
	*len = 0;
	if (!b)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (;;) {
		if (n == cap) {
			if (cap >= max) {
				free(b);
				return mk_err_set(err, MK_EINVAL, "%s: more than the %zu bytes allowed", label, max);
			}
			cap *= 2;
			uint8_t *q = realloc(b, cap + 1);
			if (!q) {
				free(b);
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			}
			b = q;
		}
		ssize_t r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(b);
			return mk_err_sys(err, e, "%s: read", label);
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	b[n] = 0;
	*buf = b;
	*len = n;
	return 0;
}

int mk_pwrite_all(int fd, const void *buf, size_t len, uint64_t off,
		  const char *label, struct mk_err *err)
{
	const char *p = buf;

	while (len) {
		ssize_t w = pwrite(fd, p, len, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return mk_err_sys(err, errno, "%s: write of %zu bytes at offset %llu", label, len,
					  (unsigned long long)off);
		}
		p += w;
		off += (uint64_t)w;
		len -= (size_t)w;
	}
	return 0;
}

int mk_pread_exact(int fd, void *buf, size_t len, uint64_t off, const char *label,
		   struct mk_err *err)
{
	size_t got = 0;

	while (got < len) {
		ssize_t k = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return mk_err_sys(err, errno, "%s: read of %zu bytes at offset %llu", label, len - got,
					  (unsigned long long)(off + got));
		if (k == 0)
			return mk_err_set(err, MK_EIO, "%s: the file is short (%llu bytes wanted at offset %llu)",
					  label, (unsigned long long)len, (unsigned long long)off);
		got += (size_t)k;
	}
	return 0;
}

int mk_tmpfile_open(const char *dir, const char *what, int *fd, struct mk_err *err)
{
	*fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (*fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/mk-scratch.XXXXXX", dir);
		*fd = mkostemp(path, O_CLOEXEC);
		if (*fd >= 0)
			unlink(path);
	}
	if (*fd < 0)
		return mk_err_sys(err, errno, "%s: cannot create a scratch file there (for %s)", dir, what);
	return 0;
}

const char *mk_tmpdir(void)
{
	const char *t = getenv("TMPDIR");

	return t && *t ? t : "/tmp";
}

int mk_write_all(int fd, const void *buf, size_t len, const char *label,
		 struct mk_err *err)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return mk_err_sys(err, errno, "%s: write", label);
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int mk_mkdirs_for(const char *path, struct mk_err *err)
{
	char *p = strdup(path), *s;
	int rc = 0;

	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (s = strchr(p + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			rc = mk_err_sys(err, errno, "%s: mkdir", p);
			break;
		}
		*s = '/';
	}
	free(p);
	return rc;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 ? -1 : 0;
}

int mk_rmtree(const char *path, struct mk_err *err)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : mk_err_sys(err, errno, "%s", path);
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? mk_err_sys(err, errno, "%s: unlink", path) : 0;
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
		return mk_err_sys(err, errno, "%s: remove", path);
	return 0;
}

int mk_rmtree_contents(const char *dir, struct mk_err *err)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return mk_err_sys(err, errno, "%s", dir);
	while (!rc && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		size_t n = strlen(dir) + strlen(e->d_name) + 2;
		char *p = malloc(n);
		if (!p) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		snprintf(p, n, "%s/%s", dir, e->d_name);
		rc = mk_rmtree(p, err);
		free(p);
	}
	closedir(d);
	return rc;
}

char *mk_path_parent(const char *path)
{
	char *parent = strdup(path);
	if (!parent)
		return NULL;
	char *slash = strrchr(parent, '/');
	while (slash && slash[1] == '\0' && slash != parent) {
		*slash = '\0';
		slash = strrchr(parent, '/');
	}
	if (!slash)
		strcpy(parent, ".");
	else if (slash == parent)
		parent[1] = '\0';
	else
		*slash = '\0';
	return parent;
}

int mk_fsync_dir(const char *path, struct mk_err *err)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;

	if (fd < 0)
		return mk_err_sys(err, errno, "%s", path);
	if (fsync(fd) < 0 && errno != EINVAL)
		rc = mk_err_sys(err, errno, "%s: fsync", path);
	close(fd);
	return rc;
}

int mk_size_parse(const char *s, uint64_t *out)
{
	uint64_t v = 0, mul = 1;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -1;
	while (isdigit((unsigned char)*p)) {
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
			return -1;
		p++;
	}
	if (*p) {
		char c = (char)tolower((unsigned char)*p++);
		bool bin = false;
		if (*p == 'i' || *p == 'I') {
			bin = true;
			p++;
		}
		switch (c) {
		case 'k': mul = bin ? 1ull << 10 : 1000ull; break;
		case 'm': mul = bin ? 1ull << 20 : 1000000ull; break;
		case 'g': mul = bin ? 1ull << 30 : 1000000000ull; break;
		case 'b': mul = bin ? 0 : 1000000000ull; break; /* mergekit: b = billion */
		case 't': mul = bin ? 1ull << 40 : 1000000000000ull; break;
		default: return -1;
		}
		if (!mul)
			return -1;
		if (bin && (*p == 'b' || *p == 'B'))
			p++;
		if (*p)
			return -1;
	}
	if (__builtin_mul_overflow(v, mul, &v))
		return -1;
	*out = v;
	return 0;
}

const char *mk_size_human(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = { "B", "kB", "MB", "GB", "TB" };
	double d = (double)n;
	int u = 0;

	while (d >= 1000 && u < 4) {
		d /= 1000;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)n);
	else
		snprintf(buf, len, "%.1f %s", d, unit[u]);
	return buf;
}

bool mk_path_stays_inside(const char *path)
{
	const char *p = path;

	if (!path[0] || path[0] == '/' || strchr(path, '\\'))
		return false;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		p += n;
		if (*p)
			p++;
	}
	return path[strlen(path) - 1] != '/';
}

void mk_fd_name(int fd, char *buf, size_t size)
{
	char link[64], path[4096];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n > 0) {
		path[n] = '\0';
		/* a path longer than the message's room ends in "...'" */
		if (snprintf(buf, size, "'%s'", path) >= (int)size && size > 5)
			memcpy(buf + size - 5, "...'", 5);
	} else {
		snprintf(buf, size, "fd %d", fd);
	}
}
