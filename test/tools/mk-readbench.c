/* mk-readbench - read files front to back through one reader backend.
 *
 *   mk-readbench [-k uring|mmap|pread|auto] [-c CHUNK] [-q QDEPTH] FILE...
 *
 * Every byte is summed (so mmap pays for its page faults like the others
 * pay for their copies).  Prints one line of tab-separated key=value:
 * backend, qdepth, chunk, bytes, secs, MBps (10^6 bytes/s), peak_rss_kb
 * (getrusage), sum, note.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "io/reader.h"

struct walk {
	int *fd;
	uint64_t *size;
	int n, i;
	uint64_t off;
	size_t chunk;
};

static int walk_next(void *ctx, struct mk_read_req *req, struct mk_err *err)
{
	struct walk *w = ctx;

	while (w->i < w->n && w->off >= w->size[w->i]) {
		w->i++;
		w->off = 0;
	}
	if (w->i == w->n)
		return 0;
	req->fd = w->fd[w->i];
	req->off = w->off;
	req->len = w->size[w->i] - w->off < w->chunk ?
		   (size_t)(w->size[w->i] - w->off) : w->chunk;
	req->tag = NULL;
	w->off += req->len;
	return 1;
}

static uint64_t sum_bytes(const unsigned char *p, size_t n)
{
	uint64_t s = 0, w;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, p + i, 8);
		s += w;
	}
	for (; i < n; i++)
		s += p[i];
	return s;
}

static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (*end == 'k' || *end == 'K')
		v <<= 10;
	else if (*end == 'm' || *end == 'M')
		v <<= 20;
	return (size_t)v;
}

static void usage(void)
{
	fprintf(stderr, "usage: mk-readbench [-k uring|mmap|pread|auto] "
		"[-c CHUNK[K|M]] [-q QDEPTH] FILE...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct mk_reader_opts o = { .kind = MK_IO_AUTO };
	struct walk w = { 0 };
	struct mk_reader *r = NULL;
	struct mk_read_req req;
	struct timespec t0, t1;
	struct rusage ru;
	const void *data;
	struct mk_err err;
	uint64_t total = 0, sum = 0;
	double secs;
	int c, i, rc;

	while ((c = getopt(argc, argv, "k:c:q:")) != -1) {
		switch (c) {
		case 'k':
			if (mk_io_kind_parse(optarg, &o.kind) < 0)
				usage();
			break;
		case 'c':
			o.chunk_bytes = parse_size(optarg);
			break;
		case 'q':
			o.qdepth = (unsigned)atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (optind >= argc)
		usage();
	w.n = argc - optind;
	w.fd = calloc((size_t)w.n, sizeof(*w.fd));
	w.size = calloc((size_t)w.n, sizeof(*w.size));
	if (!w.fd || !w.size)
		return 1;
	for (i = 0; i < w.n; i++) {
		struct stat st;

		w.fd[i] = open(argv[optind + i], O_RDONLY);
		if (w.fd[i] < 0 || fstat(w.fd[i], &st) < 0) {
			fprintf(stderr, "mk-readbench: %s: %s\n", argv[optind + i],
				strerror(errno));
			return 1;
		}
		w.size[i] = (uint64_t)st.st_size;
	}
	/* open starts pulling extents at once: the chunk must be known */
	w.chunk = o.chunk_bytes ? o.chunk_bytes : MK_READER_DEFAULT_CHUNK;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (mk_reader_open(&r, &o, walk_next, &w, &err) < 0) {
		fprintf(stderr, "mk-readbench: %s\n", err.msg);
		return 1;
	}
	while ((rc = mk_reader_get(r, &data, &req, &err)) == 1) {
		sum += sum_bytes(data, req.len);
		total += req.len;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc < 0) {
		fprintf(stderr, "mk-readbench: %s\n", err.msg);
		return 1;
	}
	secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	getrusage(RUSAGE_SELF, &ru);
	printf("backend=%s\tqdepth=%u\tchunk=%zu\tbytes=%llu\tsecs=%.3f\t"
	       "MBps=%.1f\tpeak_rss_kb=%ld\tsum=%016llx\tnote=%s\n",
	       mk_reader_backend(r), mk_reader_qdepth(r), mk_reader_chunk_bytes(r),
	       (unsigned long long)total, secs, total / secs / 1e6, ru.ru_maxrss,
	       (unsigned long long)sum, mk_reader_note(r));
	mk_reader_free(r);
	for (i = 0; i < w.n; i++)
		close(w.fd[i]);
	free(w.fd);
	free(w.size);
	return 0;
}
