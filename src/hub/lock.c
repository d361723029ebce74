/* lock.c - the cache's blob locks: flock(2) on
 * CACHE/.locks/models--ORG--NAME/ETAG.lock, as huggingface_hub takes them.
 *
 * flock belongs to an open file description, so a process that opened a
 * lock file twice and locked both would wait for itself forever.  The
 * locks this process holds are therefore also kept in a table (the lock
 * file's device and inode, the thread holding it): a thread asking again
 * for a blob lock it holds is told so at once, while another thread of
 * the process waits in flock as another process would. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include "hub_impl.h"
#include "core/fsutil.h"

struct held {
	dev_t dev;
	ino_t ino;
	pthread_t owner;
	int fd;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct held *g_held;
static size_t g_nheld, g_capheld;

/* Does this thread hold the lock of the file fd is open on? */
static bool held_here(int fd)
{
	struct stat st;
	bool yes = false;

	if (fstat(fd, &st) < 0)
		return false;
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nheld && !yes; i++)
		yes = g_held[i].dev == st.st_dev && g_held[i].ino == st.st_ino &&
		      pthread_equal(g_held[i].owner, pthread_self());
	pthread_mutex_unlock(&g_mu);
	return yes;
}

static int held_add(int fd)
{
	struct stat st;
	int rc = 0;

	if (fstat(fd, &st) < 0)
		return -1;
	pthread_mutex_lock(&g_mu);
	if (g_nheld == g_capheld) {
		size_t cap = g_capheld ? 2 * g_capheld : 16;
		struct held *h = realloc(g_held, cap * sizeof(*h));
		if (!h)
			rc = -1;
		else {
			g_held = h;
			g_capheld = cap;
		}
	}
	if (rc == 0)
		g_held[g_nheld++] = (struct held){ st.st_dev, st.st_ino, pthread_self(), fd };
	pthread_mutex_unlock(&g_mu);
	return rc;
}

int mk__hub_lock_blob(const char *repo_dir, const char *etag, bool wait, int *fd, struct mk_err *err)
{
	const char *base = strrchr(repo_dir, '/');
	char *p;
	int rc = 0;

	*fd = -1;
	if (!base || asprintf(&p, "%.*s/.locks%s/%s.lock", (int)(base - repo_dir), repo_dir, base, etag) < 0)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (mk_mkdirs_for(p, err) < 0) {
		free(p);
		return -MK_EIO;
	}
	*fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (*fd < 0) {
		rc = mk_err_sys(err, errno, "%s", p);
	} else if (held_here(*fd)) {
		rc = wait ? mk_err_set(err, MK_EINVAL, "%s: this program holds that lock already, for another "
				       "file with the same bytes (blob %s) it is reading", p, etag) : 1;
	} else if (flock(*fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? 1 : mk_err_sys(err, errno, "%s: flock", p);
	} else if (held_add(*fd) < 0) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (rc != 0 && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	free(p);
	return rc;
}

void mk__hub_unlock_blob(int fd)
{
	if (fd < 0)
		return;
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nheld; i++)
		if (g_held[i].fd == fd) {
			g_held[i] = g_held[--g_nheld];
			break;
		}
	if (!g_nheld) {
		free(g_held);
		g_held = NULL;
		g_capheld = 0;
	}
	pthread_mutex_unlock(&g_mu);
	close(fd);
}
