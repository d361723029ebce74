/* io.c - a stream's transport: a descriptor or a channel end (io.h). */
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include "io.h"

void mk_io_prepare(const struct mk_io *io)
{
	if (!io->chan)
		mk_fd_grow_pipe(io->fd);
}

ssize_t mk_io_read(const struct mk_io *io, void *buf, size_t len)
{
	size_t got = 0;

	if (io->chan)
		return mk__chan_read(io->chan, buf, len);
	while (got < len) {
		ssize_t r = read(io->fd, (char *)buf + got, len - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

int mk_io_writev(const struct mk_io *io, struct iovec *iov, int n, uint64_t *written)
{
	if (io->chan) {
		uint64_t total = 0;
		for (int i = 0; i < n; i++)
			total += iov[i].iov_len;
		int rc = mk__chan_write(io->chan, iov, n);
		if (rc < 0)
			return rc;
		*written += total;
		return 0;
	}
	while (n > 0) {
		ssize_t r = writev(io->fd, iov, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		*written += (uint64_t)r;
		while (n > 0 && (size_t)r >= iov->iov_len) {
			r -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + r;
			iov->iov_len -= (size_t)r;
		}
	}
	return 0;
}

bool mk_io_in_memory(const struct mk_io *io)
{
	return io->chan != NULL;
}

int mk_io_pipe_fd(const struct mk_io *io)
{
	struct stat sb;

	return !io->chan && fstat(io->fd, &sb) == 0 && S_ISFIFO(sb.st_mode) ? io->fd : -1;
}

int mk_io_reserve(const struct mk_io *io, size_t total, uint8_t **buf, size_t *cap)
{
	int rc;

	if (!io->chan)
		return 0;
	rc = mk__chan_reserve(io->chan, total, buf, cap);
	return rc < 0 ? rc : 1;
}

int mk_io_commit(const struct mk_io *io, uint8_t *buf, size_t len, size_t cap)
{
	return mk__chan_commit(io->chan, buf, len, cap);
}

void mk_io_unreserve(const struct mk_io *io, uint8_t *buf, size_t cap)
{
	mk__chan_unreserve(io->chan, buf, cap);
}

int mk_io_write_map(const struct mk_io *io, uint8_t *frame, size_t len, void *map, size_t map_len)
{
	if (!io->chan)
		return -ENOTSUP;
	return mk__chan_write_map(io->chan, frame, len, map, map_len);
}

bool mk_io_take(const struct mk_io *io, size_t len, uint8_t **buf, size_t *cap, struct mk__lent *lent)
{
	return io->chan && mk__chan_take(io->chan, len, buf, cap, lent);
}
