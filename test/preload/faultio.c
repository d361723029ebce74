/* faultio.so - make the Nth read, write or sync of mk's own code fail or
 * come up short, for the I/O fault tests (test/cli/faultio.sh).
 *
 *   MK_FAULT_IO=OP:N:KIND LD_PRELOAD=.../faultio.so mk-pack ...
 *
 * OP is one of read, pread, write, pwrite, dpwrite (a pwrite on a file
 * opened O_DIRECT, or a write to one sent by io_uring_submit; pwrite
 * counts the others), writev, splice, fsync,
 * fdatasync, ftruncate, fallocate (posix_fallocate), rename; N counts that OP's calls
 * from 1; KIND is
 *   eio      the call fails with EIO (nothing done)
 *   enospc   the call fails with ENOSPC (nothing done)
 *   eintr    the call fails with EINTR (nothing done; a caller retries)
 *   einval   the call fails with EINVAL (nothing done), as an O_DIRECT
 *            write of an alignment the file system refuses
 *   short    the call moves half of what was asked (at least 1 byte;
 *            reads and writes only)
 *   shortall every call from the Nth on is short
 *   kill     the process is killed (SIGKILL) as it makes the call: a crash
 *            there, for the resume tests
 *   stop     the process stops (SIGSTOP) as it makes the call, then makes
 *            it as asked once continued: a test waits for the stop (state
 *            T in /proc/PID/stat), changes what the program reads (a file
 *            truncated under its maps) and sends SIGCONT
 * Only calls made from the program itself (libmk and the main, which the
 * programs link statically) after main has started are counted, and none
 * on fd 2 (the messages).  With MK_FAULT_IO_PROG=NAME only the program of
 * that name counts and fails (one stage of a pipeline run under it).  With MK_FAULT_IO_COUNT set, the counts are
 * written to stderr at exit ("faultio: read=R pread=P ..."), so a test
 * knows which N to try.  io_uring and mmap reads do not go through these
 * calls: the tests read with MK_IO=pread.  mk-pack's O_DIRECT writes by
 * io_uring do (io_uring_submit, below): each is a dpwrite, its fault
 * made by changing the write before the kernel sees it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include "preload.h"

enum op { READ, PREAD, WRITE, PWRITE, DPWRITE, WRITEV, SPLICE, FSYNC, FDATASYNC, FTRUNCATE, FALLOCATE, RENAME,
	  NOPS };
static const char *const op_names[NOPS] = { "read", "pread", "write", "pwrite", "dpwrite", "writev", "splice",
					    "fsync", "fdatasync", "ftruncate", "fallocate", "rename" };
enum kind { NONE, EIO_, ENOSPC_, EINTR_, EINVAL_, SHORT, SHORTALL, KILL, STOP };

static unsigned long seen[NOPS];
static int fault_op = -1;
static unsigned long fault_at;
static enum kind fault_kind;
static int other_prog;               /* not MK_FAULT_IO_PROG: left alone */


static void report(void)
{
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "faultio:");

	if (!getenv("MK_FAULT_IO_COUNT") || other_prog)
		return;
	for (int i = 0; i < NOPS; i++)
		n += snprintf(buf + n, sizeof(buf) - (size_t)n, " %s=%lu", op_names[i], seen[i]);
	n += snprintf(buf + n, sizeof(buf) - (size_t)n, "\n");
	(void)!write(2, buf, (size_t)n);
}

__attribute__((constructor)) static void init(void)
{
	const char *spec = getenv("MK_FAULT_IO");
	char op[32], kind[32];

	const char *prog = getenv("MK_FAULT_IO_PROG");

	preload_init();
	other_prog = prog && strcmp(prog, program_invocation_short_name);
	atexit(report);
	if (!spec || sscanf(spec, "%31[a-z]:%lu:%31[a-z]", op, &fault_at, kind) != 3)
		return;
	for (int i = 0; i < NOPS; i++)
		if (!strcmp(op, op_names[i]))
			fault_op = i;
	fault_kind = !strcmp(kind, "eio") ? EIO_ : !strcmp(kind, "enospc") ? ENOSPC_ :
		     !strcmp(kind, "eintr") ? EINTR_ : !strcmp(kind, "einval") ? EINVAL_ : !strcmp(kind, "short") ? SHORT :
		     !strcmp(kind, "shortall") ? SHORTALL : !strcmp(kind, "kill") ? KILL : !strcmp(kind, "stop") ? STOP : NONE;
	if (fault_op < 0 || fault_kind == NONE) {
		fprintf(stderr, "faultio: bad MK_FAULT_IO '%s'\n", spec);
		_exit(99);
	}
}


/* The fault for this call of op (NONE: do it as asked). */
static enum kind fault(enum op op, int fd, void *caller)
{
	unsigned long n;

	if (fd == 2 || other_prog || !from_mk(caller))
		return NONE;
	n = ++seen[op];
	if ((int)op != fault_op)
		return NONE;
	if (n == fault_at && fault_kind == KILL)
		raise(SIGKILL);
	if (n == fault_at && fault_kind == STOP) {
		raise(SIGSTOP);
		return NONE;
	}
	if (n == fault_at || (fault_kind == SHORTALL && n >= fault_at))
		return fault_kind;
	return NONE;
}

/* Fail with the kind's errno: -1, or (posix_fallocate) the error. */
static int fail_errno(enum kind k)
{
	return k == EIO_ ? EIO : k == ENOSPC_ ? ENOSPC : k == EINVAL_ ? EINVAL : EINTR;
}

static size_t shorter(size_t n)
{
	return n > 1 ? n / 2 : n;
}

#define REAL(name) static __typeof__(name) *real_##name; \
	if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

/* A read or write of n bytes: failed as the fault says, or cut short. */
#define RW(name, OP, bufdecl, ...)                                                      \
	ssize_t name(int fd, bufdecl buf, size_t n __VA_OPT__(, ) __VA_ARGS__)           \
	{                                                                                \
		REAL(name);                                                              \
		enum kind k = fault(OP, fd, __builtin_return_address(0));                \
		if (k == SHORT || k == SHORTALL)                                         \
			n = shorter(n);                                                  \
		else if (k != NONE)                                                      \
			return errno = fail_errno(k), -1;                                \
		return real_##name(fd, buf, n __VA_OPT__(, ) OFF_ARG(__VA_ARGS__));      \
	}
#define OFF_ARG(...) __VA_OPT__(off)

RW(read, READ, void *)
RW(pread, PREAD, void *, off_t off)
RW(pread64, PREAD, void *, off_t off)
RW(write, WRITE, const void *)
/* (pwrite on an O_DIRECT file counts as dpwrite) */
#define PWRITE_OP (fcntl(fd, F_GETFL) & O_DIRECT ? DPWRITE : PWRITE)
RW(pwrite, PWRITE_OP, const void *, off_t off)
RW(pwrite64, PWRITE_OP, const void *, off_t off)

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	REAL(writev);
	enum kind k = fault(WRITEV, fd, __builtin_return_address(0));
	if (k == SHORT || k == SHORTALL) {
		/* half of the first non-empty piece */
		for (int i = 0; i < cnt; i++)
			if (iov[i].iov_len) {
				struct iovec one = { iov[i].iov_base, shorter(iov[i].iov_len) };
				return real_writev(fd, &one, 1);
			}
	} else if (k != NONE) {
		return errno = fail_errno(k), -1;
	}
	return real_writev(fd, iov, cnt);
}

/* splice(2), as mk-fetch and mk-pack use it to and from pipes: counted
 * on the pipe end or the file, whichever is not fd 2 */
ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t n, unsigned flags)
{
	REAL(splice);
	enum kind k = fault(SPLICE, out, __builtin_return_address(0));
	if (k == SHORT || k == SHORTALL)
		n = shorter(n);
	else if (k != NONE)
		return errno = fail_errno(k), -1;
	return real_splice(in, in_off, out, out_off, n, flags);
}

int fsync(int fd)
{
	REAL(fsync);
	enum kind k = fault(FSYNC, fd, __builtin_return_address(0));
	if (k != NONE && k != SHORT && k != SHORTALL)
		return errno = fail_errno(k), -1;
	return real_fsync(fd);
}

int fdatasync(int fd)
{
	REAL(fdatasync);
	enum kind k = fault(FDATASYNC, fd, __builtin_return_address(0));
	if (k != NONE && k != SHORT && k != SHORTALL)
		return errno = fail_errno(k), -1;
	return real_fdatasync(fd);
}

int ftruncate(int fd, off_t len)
{
	REAL(ftruncate);
	enum kind k = fault(FTRUNCATE, fd, __builtin_return_address(0));
	if (k != NONE && k != SHORT && k != SHORTALL)
		return errno = fail_errno(k), -1;
	return real_ftruncate(fd, len);
}

int posix_fallocate(int fd, off_t off, off_t len)
{
	REAL(posix_fallocate);
	enum kind k = fault(FALLOCATE, fd, __builtin_return_address(0));
	if (k != NONE && k != SHORT && k != SHORTALL)
		return fail_errno(k);
	return real_posix_fallocate(fd, off, len);
}

int rename(const char *from, const char *to)
{
	REAL(rename);
	enum kind k = fault(RENAME, -1, __builtin_return_address(0));
	if (k != NONE && k != SHORT && k != SHORTALL)
		return errno = fail_errno(k), -1;
	return real_rename(from, to);
}

/* io_uring_submit(3), as mk-pack sends its O_DIRECT writes: each write
 * on a file opened O_DIRECT is a dpwrite call, and its fault is one the
 * kernel makes itself, the request changed before it goes: short (half
 * the length asked), einval (an offset off the block size, which
 * O_DIRECT refuses), enospc (the write sent to /dev/full), eio (to
 * /proc/self/mem at offset 0, where nothing is mapped); eintr fails the
 * call with -EINTR, nothing sent (the caller sends again). */
int io_uring_submit(struct io_uring *ring)
{
	REAL(io_uring_submit);
	struct io_uring_sq *sq = &ring->sq;

	for (unsigned h = sq->sqe_head; h != sq->sqe_tail; h++) {
		struct io_uring_sqe *sqe = &sq->sqes[h & sq->ring_mask];
		int fl;
		if (sqe->opcode != IORING_OP_WRITE || (fl = fcntl(sqe->fd, F_GETFL)) < 0 || !(fl & O_DIRECT))
			continue;
		switch (fault(DPWRITE, sqe->fd, __builtin_return_address(0))) {
		case NONE:
		case KILL:             /* (fault() has killed the process) */
		case STOP:             /* (fault() stopped it, then went on) */
			break;
		case SHORT:
		case SHORTALL:
			sqe->len = (unsigned)shorter(sqe->len);
			break;
		case EINVAL_:
			sqe->off += 1;
			break;
		case ENOSPC_:
			sqe->fd = open("/dev/full", O_WRONLY | O_CLOEXEC);
			break;
		case EIO_:
			sqe->fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
			sqe->off = 0;
			break;
		case EINTR_:
			return -EINTR;
		}
	}
	return real_io_uring_submit(ring);
}
