/* fsutil.h - small file-system helpers shared by the stages. */
#ifndef MK_FSUTIL_H
#define MK_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "mk/err.h"

/* Open a file named by path for reading, only if it is a regular file.
 * Anything else -- a FIFO, a socket, a character or block device, a
 * directory -- is refused with "PATH: not a regular file (a FIFO)" and
 * never waited on: the name is stat'ed first (a device is not opened at
 * all), then opened with O_NONBLOCK (an open(2) of a FIFO with no writer
 * would wait for one forever) and O_NOCTTY, fstat'ed again (the name may
 * have changed in between), and O_NONBLOCK cleared.  Every input libmk
 * opens by name goes through here; stdin and descriptors a caller hands
 * over are not by name.  Returns the descriptor (O_CLOEXEC) and fills *st
 * when st is not NULL, or a negative MK_E* code. */
int mk_file_open(const char *path, struct stat *st, struct mk_err *err);
/* What a file's type is in words, for messages: "a FIFO", "a directory",
 * "a character device", ... ("a regular file" for one). */
const char *mk_file_kind(mode_t mode);
/* Read a whole regular file (at most max bytes) into a malloc'ed buffer
 * (NUL-terminated, the terminator not counted in *len). */
int mk_file_read(const char *path, size_t max, uint8_t **buf, size_t *len,
		 struct mk_err *err);
/* Read a file descriptor to its end (a pipe too), at most max bytes, into
 * a malloc'ed NUL-terminated buffer; `label` names it in messages. */
int mk_fd_read_all(int fd, size_t max, const char *label, uint8_t **buf,
		   size_t *len, struct mk_err *err);
/* pwrite/write all of buf, retrying short writes and EINTR. */
int mk_pwrite_all(int fd, const void *buf, size_t len, uint64_t off,
		  const char *label, struct mk_err *err);
int mk_write_all(int fd, const void *buf, size_t len, const char *label,
		 struct mk_err *err);
/* pread exactly len bytes at off, retrying short reads and EINTR; a
 * file that ends first is an MK_EIO error ("LABEL: ... is short"). */
int mk_pread_exact(int fd, void *buf, size_t len, uint64_t off, const char *label,
		   struct mk_err *err);
/* An unlinked scratch file in dir, read-write (O_TMPFILE, else mkostemp
 * and unlink): *fd, gone with the last close.  `what` names it in the
 * message when dir will not take one ("--spill /x: cannot create a
 * spill file there"). */
int mk_tmpfile_open(const char *dir, const char *what, int *fd, struct mk_err *err);
/* $TMPDIR, or /tmp when unset or empty. */
const char *mk_tmpdir(void);
/* mkdir -p of the directories leading to `path` (below an existing dir). */
int mk_mkdirs_for(const char *path, struct mk_err *err);
/* Remove a file or a directory tree (no symlink is followed).  A missing
 * path is not an error. */
int mk_rmtree(const char *path, struct mk_err *err);
/* Remove what a directory holds, keeping the directory itself. */
int mk_rmtree_contents(const char *dir, struct mk_err *err);
/* fsync a directory so renames and new entries in it are durable. */
int mk_fsync_dir(const char *path, struct mk_err *err);
/* The directory `path` is in (malloc'ed; NULL when out of memory):
 * trailing slashes dropped, then up to the last slash; "." when there is
 * none, "/" for a path right under the root. */
char *mk_path_parent(const char *path);
/* Parse a size: an integer with an optional suffix.  mergekit's forms
 * (k, m, b: decimal 1e3, 1e6, 1e9, either case) and binary K/M/G with
 * 'i' (KiB, MiB, GiB) or a trailing B: "200K", "5B", "64MiB", "1g".
 * Returns 0 and *out, or -1. */
int mk_size_parse(const char *s, uint64_t *out);
/* Human-readable size into buf ("1.5 GB"). */
const char *mk_size_human(uint64_t n, char *buf, size_t len);

/* Whether `path` names something inside the directory it is relative
 * to: not empty, not absolute, no backslash, no empty, "." or ".."
 * component and no trailing slash (a Hub revision, a file of a snapshot). */
bool mk_path_stays_inside(const char *path);

/* The file behind descriptor fd, for messages: its path quoted ('PATH',
 * cut with "...'" to fit size), or "fd N" when /proc does not say. */
void mk_fd_name(int fd, char *buf, size_t size);

#endif
