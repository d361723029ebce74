/* fuzz_stream.c - libFuzzer harness for the stream reader and the frame
 * payload decoders (HEAD manifest, FILE, DATA/INPT chunks).
 *
 * The input is a whole stream, read from a memfd.  It is read twice,
 * verifying checksums and with MK_SR_NO_VERIFY.  Besides "no crash, no
 * leak", it checks invariants: frames are numbered 0, 1, ...; a frame's
 * wire bytes are its header and payload as they appear in the input; a
 * decoded manifest encodes to one that decodes to the same tensors; and
 * a stream read to its END, passed frame by frame through a writer, is
 * the input byte for byte (after the prelude). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "stream/manifest.h"
#include "mk/stream.h"

static void check(int cond, const char *what)
{
	if (!cond) {
		fprintf(stderr, "fuzz_stream: invariant broken: %s\n", what);
		abort();
	}
}

static void manifest_roundtrip(const struct mk_manifest *m)
{
	struct mk_manifest *d;
	struct mk_err err;
	char *s;
	size_t len;

	if (mk_manifest_encode(m, &s, &len, &err))
		return;   /* only out of memory */
	check(mk_manifest_decode(s, len, &d, &err) == 0, "encoded manifest decodes");
	check(d->ntensors == m->ntensors && d->nfiles == m->nfiles, "manifest counts");
	check(!strcmp(d->kind, m->kind) && !strcmp(d->producer, m->producer), "manifest kind");
	check(d->chunk_bytes == m->chunk_bytes, "manifest chunk_bytes");
	for (size_t i = 0; i < m->ntensors; i++) {
		const struct mk_manifest_tensor *a = &m->tensors[i], *b = &d->tensors[i];
		check(!strcmp(a->name, b->name) && a->desc.dtype == b->desc.dtype && a->desc.ndim == b->desc.ndim &&
		      a->nelem == b->nelem && a->nbytes == b->nbytes, "manifest tensor");
		for (unsigned k = 0; k < a->desc.ndim; k++)
			check(a->desc.shape[k] == b->desc.shape[k], "manifest shape");
	}
	for (size_t i = 0; i < m->nfiles; i++)
		check(!strcmp(m->files[i].name, d->files[i].name) && m->files[i].size == d->files[i].size,
		      "manifest file");
	mk_manifest_free(d);
	free(s);
}

static void decode_payload(const struct mk_frame *f)
{
	struct mk_err err;

	if (!strcmp(f->type, MK_FT_HEAD)) {
		struct mk_manifest *m;
		if (mk_manifest_decode(f->payload, f->payload_len, &m, &err) == 0) {
			check(m != NULL && m->kind != NULL, "manifest");
			manifest_roundtrip(m);
			mk_manifest_free(m);
		}
	} else if (!strcmp(f->type, MK_FT_FILE)) {
		struct mk_file_frame ff;
		if (mk_file_decode(f->payload, f->payload_len, &ff, &err) == 0) {
			size_t n = strlen(ff.name);
			check(mk_file_name_check(ff.name, n, NULL) == 0, "FILE name valid");
			check(8 + n + ff.len == f->payload_len, "FILE lengths");
			check(ff.data == f->payload + 8 + n, "FILE data");
			free(ff.name);
		} else {
			check(ff.name == NULL, "FILE name freed on error");
		}
	} else if (!strcmp(f->type, MK_FT_DATA) || !strcmp(f->type, MK_FT_INPT)) {
		struct mk_chunk c;
		if (mk_chunk_decode(f->payload, f->payload_len, &c, &err) == 0) {
			uint64_t nb;
			uint8_t hdr[MK_CHUNK_HDR];
			check(mk_dtype_nbytes(c.dtype, c.elem_count, &nb) == 0 && nb == c.data_len,
			      "chunk size");
			check(c.data_len + MK_CHUNK_HDR == f->payload_len, "chunk data_len");
			mk_chunk_encode(&c, hdr);
			/* bytes 12..15 are reserved and not kept */
			check(!memcmp(hdr, f->payload, 12) && !memcmp(hdr + 16, f->payload + 16, 32),
			      "chunk re-encodes");
		}
	}
}

/* Read the stream in fd; when `copy` >= 0, pass every frame through a
 * writer on it.  Returns the final code of mk_sr_next (0 at a good END). */
static int read_all(int fd, unsigned flags, int copy, size_t size)
{
	struct mk_stream_reader *r;
	struct mk_stream_writer *w = NULL;
	struct mk_frame f;
	struct mk_err err;
	uint64_t idx = 0, pos = MK_STREAM_PRELUDE;
	int rc;

	if (lseek(fd, 0, SEEK_SET) != 0)
		abort();
	rc = mk_sr_open(&r, fd, "fuzz", flags, &err);
	if (rc) {
		check(r == NULL && rc < 0 && err.msg[0], "open error");
		return rc;
	}
	if (copy >= 0 && mk_sw_open(&w, copy, 0, &err))
		abort();
	while ((rc = mk_sr_next(r, &f, &err)) == 1) {
		check(f.index == idx++, "frame index");
		check(f.wire_len == MK_FRAME_HDR + f.len && f.payload_len == f.raw_len, "frame lengths");
		check(pos + f.wire_len <= size, "frame within the input");
		check(!memcmp(f.wire, f.type, 4) && f.type[4] == '\0', "frame type");
		check(f.critical == (f.type[0] >= 'A' && f.type[0] <= 'Z'), "frame critical");
		check(!f.critical || mk_frame_type_known(f.type), "critical type known");
		check(flags & MK_SR_NO_VERIFY || f.csum_ok, "checksum verified");
		if (!(f.flags & MK_FRAME_F_ZSTD))
			check(f.payload == f.wire + MK_FRAME_HDR, "raw payload in place");
		pos += f.wire_len;
		decode_payload(&f);
		if (w && mk_sw_pass(w, &f, &err))
			abort();
	}
	if (rc == 0)
		check(pos == size, "END is the last byte");
	else
		check(rc < 0 && err.msg[0], "error has a message");
	mk_sr_free(r);
	mk_sw_free(w);
	return rc;
}

static int memfd_with(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz_stream", 0);
	size_t off = 0;

	if (fd < 0)
		abort();
	while (off < size) {
		ssize_t n = write(fd, data + off, size - off);
		if (n <= 0)
			abort();
		off += (size_t)n;
	}
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_with(data, size), copy = memfd_create("fuzz_copy", 0);

	if (copy < 0)
		abort();
	if (read_all(fd, 0, copy, size) == 0) {
		/* the pass-through copy equals the input after the prelude */
		off_t n = lseek(copy, 0, SEEK_END);
		uint8_t *b;
		check(n == (off_t)size, "copy size");
		b = malloc(size);
		if (!b || pread(copy, b, size, 0) != (ssize_t)size)
			abort();
		check(!memcmp(b + MK_STREAM_PRELUDE, data + MK_STREAM_PRELUDE, size - MK_STREAM_PRELUDE),
		      "pass-through is byte for byte");
		check(!memcmp(b, data, 10), "prelude magic and version");
		free(b);
		/* a verified stream reads the same without verification */
		check(read_all(fd, MK_SR_NO_VERIFY, -1, size) == 0, "NO_VERIFY reads a good stream");
	} else {
		(void)read_all(fd, MK_SR_NO_VERIFY, -1, size);
	}
	close(copy);
	close(fd);
	return 0;
}
