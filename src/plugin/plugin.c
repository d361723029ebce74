/* plugin.c - load merge methods from shared objects. */
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/fsutil.h"
#include "core/hash.h"
#include "mk/plugin.h"

struct loaded {
	const struct mk_method *m;
	char *path;
};
static struct loaded *loaded;
static size_t nloaded;

const char *mk_plugin_of(const struct mk_method *m)
{
	for (size_t i = 0; i < nloaded; i++)
		if (loaded[i].m == m)
			return loaded[i].path;
	return NULL;
}

#define PLUGIN_MAX_BYTES (256u << 20)

/* May a file or directory of a plugin's be trusted: owned by root or the
 * user, and writable by no one else (a directory that others may write
 * counts when it is sticky, as /tmp: they can add files there, but not
 * replace or rename the user's or root's, and a plugin file must be the
 * user's or root's).  NULL, or what is wrong. */
static const char *untrusted(const struct stat *st, bool dir)
{
	if (st->st_uid != 0 && st->st_uid != getuid())
		return "owned by another user";
	if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(dir && (st->st_mode & S_ISVTX)))
		return dir ? "writable by group or others and not sticky" : "writable by group or others";
	return NULL;
}

/* Every directory from the one the open file fd lies in (as the kernel
 * names it: symbolic links resolved) up to the root, trusted. */
static int check_dirs(int fd, const char *path, struct mk_err *err)
{
	char link[64], dir[PATH_MAX + 1];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, dir, sizeof(dir) - 1);
	if (n <= 0 || dir[0] != '/')
		return mk_err_set(err, MK_EINVAL, "plugin %s: cannot tell the directory it is in (is /proc mounted?)",
				  path);
	dir[n] = '\0';
	for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
		struct stat st;
		const char *why;
		if (slash == dir)
			slash[1] = '\0';   /* "/" itself, last */
		else
			*slash = '\0';
		if (lstat(dir, &st) < 0)
			return mk_err_sys(err, errno, "plugin %s: directory %s", path, dir);
		if ((why = untrusted(&st, true)))
			return mk_err_set(err, MK_EINVAL,
					  "plugin %s: its directory %s is %s; others could put their code in its place (chmod go-w, or move the plugin)",
					  path, dir, why);
		if (slash == dir)
			break;
	}
	return 0;
}

/* Open the plugin and check everything that can be checked before dlopen
 * runs its code: *fd is the very file checked, for dlopen to load by
 * /proc/self/fd (never the path again, which could name another file by
 * then). */
static int check_before_dlopen(const char *path, int *fd, struct mk_err *err)
{
	struct stat st;
	uint8_t *buf = NULL;
	const char *why;
	size_t len;
	int rc;

	/* O_NONBLOCK: a FIFO must not hang the open; it fails S_ISREG below */
	*fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (*fd < 0 && errno == ELOOP)
		return mk_err_set(err, MK_EINVAL, "plugin %s: a symbolic link; name the file itself", path);
	if (*fd < 0)
		return mk_err_sys(err, errno, "plugin %s", path);
	if (fstat(*fd, &st) < 0)
		rc = mk_err_sys(err, errno, "plugin %s", path);
	else if (!S_ISREG(st.st_mode))
		rc = mk_err_set(err, MK_EINVAL, "plugin %s: not a regular file", path);
	else if ((why = untrusted(&st, false)))
		rc = mk_err_set(err, MK_EINVAL,
				"plugin %s: %s; others could put their code in it (chmod go-w, or chown it to yourself)",
				path, why);
	else if (!(rc = check_dirs(*fd, path, err)) &&
		 !(rc = mk_fd_read_all(*fd, PLUGIN_MAX_BYTES, path, &buf, &len, err)))
		rc = mk_plugin_elf_check(buf, len, path, MK_PLUGIN_INIT, err);
	free(buf);
	if (rc) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

int mk_plugin_load(const char *path, struct mk_err *err)
{
	const struct mk_method *const *ms = NULL;
	mk_plugin_init_fn init;
	size_t n = 0;
	char self[64];
	void *h;
	int fd, rc;

	/* dlopen needs a slash to read a path instead of searching */
	char *p = strchr(path, '/') ? strdup(path) : NULL;
	if (!p) {
		size_t len = strlen(path) + 3;
		p = malloc(len);
		if (p)
			snprintf(p, len, "./%s", path);
	}
	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = check_before_dlopen(p, &fd, err))) {
		free(p);
		return rc;
	}
	/* the file checked, whatever the path names now.  dlopen knows a
	 * library by the name it was opened by, and a plugin is never
	 * unloaded: so the descriptor stays open with it, or the next plugin,
	 * given the same descriptor number, would be taken for this one.  A
	 * file loaded before is known by its inode and comes back under its
	 * first name; its new descriptor is not needed. */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	h = dlopen(self, RTLD_NOW | RTLD_LOCAL);
	{
		struct link_map *lm = NULL;
		if (!h || dlinfo(h, RTLD_DI_LINKMAP, &lm) || !lm || strcmp(lm->l_name, self))
			close(fd);
	}
	if (!h) {
		rc = mk_err_set(err, MK_EINVAL, "plugin %s: %s", path, dlerror());
		free(p);
		return rc;
	}
	*(void **)&init = dlsym(h, MK_PLUGIN_INIT);
	if (!init) {
		free(p);
		return mk_err_set(err, MK_EINVAL, "plugin %s: no %s function (not an mk plugin?)", path,
				  MK_PLUGIN_INIT);
	}
	if (init(MK_METHOD_ABI, &ms, &n) || (n && !ms)) {
		free(p);
		return mk_err_set(err, MK_EUNSUPPORTED, "plugin %s: does not serve method ABI %d", path, MK_METHOD_ABI);
	}
	for (size_t i = 0; i < n; i++) {
		rc = mk_method_register(ms[i], err);
		if (rc) {
			mk_err_prefix(err, "plugin %s: ", path);
			free(p);
			return rc;
		}
		struct loaded *q = realloc(loaded, (nloaded + 1) * sizeof(*q));
		if (!q) {
			free(p);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		loaded = q;
		loaded[nloaded].m = ms[i];
		loaded[nloaded].path = strdup(p);
		nloaded++;
	}
	/* the handle stays open: the methods live in it */
	free(p);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int mk_plugin_load_env(struct mk_err *err)
{
	const char *env = getenv("MK_PLUGIN_PATH");
	char *copy, *tok, *save = NULL;
	int rc = 0;

	if (!env || !*env)
		return 0;
	copy = strdup(env);
	if (!copy)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (tok = strtok_r(copy, ":", &save); tok && !rc; tok = strtok_r(NULL, ":", &save)) {
		struct stat st;
		if (stat(tok, &st) != 0) {
			rc = mk_err_set(err, MK_ENOENT, "MK_PLUGIN_PATH: %s does not exist", tok);
			break;
		}
		if (!S_ISDIR(st.st_mode)) {
			rc = mk_plugin_load(tok, err);
			continue;
		}
		/* every *.so of a directory, in name order */
		DIR *d = opendir(tok);
		struct dirent *e;
		char **names = NULL;
		size_t nn = 0;
		while (d && (e = readdir(d))) {
			size_t l = strlen(e->d_name);
			if (l > 3 && !strcmp(e->d_name + l - 3, ".so")) {
				char **q = realloc(names, (nn + 1) * sizeof(*q));
				if (!q)
					break;
				names = q;
				names[nn] = malloc(strlen(tok) + l + 2);
				if (names[nn])
					sprintf(names[nn++], "%s/%s", tok, e->d_name);
			}
		}
		if (d)
			closedir(d);
		qsort(names, nn, sizeof(*names), cmp_str);
		for (size_t i = 0; i < nn; i++) {
			if (!rc)
				rc = mk_plugin_load(names[i], err);
			free(names[i]);
		}
		free(names);
	}
	free(copy);
	return rc;
}

void mk_method_spec_hash(const struct mk_method *m, char hex[65])
{
	struct mk_sha256 s;
	uint8_t dg[32];
	char buf[512];
	int n;

	mk_sha256_init(&s);
	n = snprintf(buf, sizeof(buf), "mk-method-spec 1\nname %s\nabi %u\nbase %d inputs %u %u nonbase %u %u\nwhole %d\n",
		     m->name, m->abi, (int)m->contract.base, m->contract.min_inputs, m->contract.max_inputs,
		     m->contract.min_non_base, m->contract.max_non_base, (int)m->whole_tensor);
	mk_sha256_update(&s, buf, (size_t)n);
	for (size_t i = 0; i < m->nparams; i++) {
		const struct mk_param_spec *p = &m->params[i];
		n = snprintf(buf, sizeof(buf), "param %s scope %d type %d flags %u def %d %d %.17g %lld min %.17g max %.17g\n",
			     p->name, (int)p->scope, (int)p->type, p->flags, (int)p->def.set, (int)p->def.type,
			     p->def.type == MK_PT_FLOAT ? p->def.f : 0.0,
			     (long long)(p->def.type == MK_PT_INT ? p->def.i : p->def.type == MK_PT_BOOL ? p->def.b : 0),
			     p->min, p->max);
		mk_sha256_update(&s, buf, (size_t)n);
	}
	mk_sha256_final(&s, dg);
	mk_hex(dg, 32, hex);
}
