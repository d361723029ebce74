/* mk-forge - write small, deliberately odd mk streams for the CLI tests.
 *
 *   mk-forge KIND > stream
 *
 * Every stream has valid checksums and (except where KIND says) an END
 * frame with the right counts, so each tests exactly one rule:
 *   ok                 HEAD (one F32 tensor "t" [4, 2]), FILE, 2 DATA, END
 *   unknown-critical   an unknown critical frame "ZZZZ" in the middle
 *   unknown-ancillary  an unknown ancillary frame "zzzz" in the middle
 *   bad-file=NAME      a FILE frame named NAME (no validation by the writer)
 *   plan               HEAD of kind "plan"
 *   out-of-order       the two DATA chunks swapped
 *   missing-data       one DATA chunk left out (END counts still right)
 *   no-end             no END frame
 *   bad-dtype          a DATA chunk whose dtype differs from the manifest
 *   big-file=N         a FILE frame "big.bin" of N bytes the HEAD does not
 *                      announce (so no free-space check can foresee it)
 *   file-twice         the FILE frame config.json sent twice
 *   file-folder        FILE frames config.json and config.json/x
 *   data-pass          a DATA chunk whose pass field is not 0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mk/manifest.h"
#include "mk/stream.h"

static struct mk_err err;

static void check(int rc)
{
	if (rc) {
		fprintf(stderr, "mk-forge: %s\n", err.msg);
		exit(1);
	}
}

static void raw_file(struct mk_stream_writer *w, const char *name, size_t nlen)
{
	uint8_t hdr[8] = { 0xa4, 0x01, 0, 0, (uint8_t)nlen, 0, 0, 0 };
	const void *p[3] = { hdr, name, "x" };
	size_t l[3] = { 8, nlen, 1 };

	check(mk_sw_frame(w, MK_FT_FILE, p, l, 3, &err));
}

int main(int argc, char **argv)
{
	const char *kind = argc > 1 ? argv[1] : "ok";
	struct mk_manifest *m;
	struct mk_stream_writer *w;
	uint64_t shape[2] = { 4, 2 };
	float data[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct mk_chunk c[2] = {
		{ .dtype = MK_DT_F32, .row_begin = 0, .row_count = 2, .elem_begin = 0, .elem_count = 4,
		  .data = data, .data_len = 16 },
		{ .dtype = MK_DT_F32, .row_begin = 2, .row_count = 2, .elem_begin = 4, .elem_count = 4,
		  .data = data + 4, .data_len = 16 },
	};
	char *head;
	size_t hlen;

	if (isatty(1)) {
		fprintf(stderr, "mk-forge: redirect the output\n");
		return 2;
	}
	m = mk_manifest_new(!strcmp(kind, "plan") ? "plan" : "tensors", "mk-forge");
	m->planned = !strcmp(kind, "plan"); /* a plan has a (here empty) model table */
	check(mk_manifest_add_tensor(m, "t", MK_DT_F32, 2, shape, &err));
	check(mk_manifest_encode(m, &head, &hlen, &err));
	check(mk_sw_open(&w, 1, 0, &err));
	check(mk_sw_frame1(w, MK_FT_HEAD, head, hlen, &err));
	if (!strncmp(kind, "bad-file=", 9)) {
		raw_file(w, kind + 9, strlen(kind + 9));
	} else if (!strncmp(kind, "big-file=", 9)) {
		size_t n = strtoul(kind + 9, NULL, 10);
		char *big = calloc(n ? n : 1, 1);
		check(mk_sw_file(w, "big.bin", 0644, big, n, &err));
		free(big);
	}
	else
		check(mk_sw_file(w, "config.json", 0644, "{}\n", 3, &err));
	if (!strcmp(kind, "file-twice"))
		check(mk_sw_file(w, "config.json", 0644, "{}\n", 3, &err));
	if (!strcmp(kind, "file-folder"))
		check(mk_sw_file(w, "config.json/x", 0644, "{}\n", 3, &err));
	if (!strcmp(kind, "data-pass"))
		c[1].pass = 1;
	if (!strcmp(kind, "unknown-critical"))
		check(mk_sw_frame1(w, "ZZZZ", "?", 1, &err));
	if (!strcmp(kind, "unknown-ancillary"))
		check(mk_sw_frame1(w, "zzzz", "?", 1, &err));
	if (!strcmp(kind, "bad-dtype"))
		c[1].dtype = MK_DT_I32;
	if (!strcmp(kind, "out-of-order")) {
		check(mk_sw_chunk(w, MK_FT_DATA, &c[1], &err));
		check(mk_sw_chunk(w, MK_FT_DATA, &c[0], &err));
	} else {
		check(mk_sw_chunk(w, MK_FT_DATA, &c[0], &err));
		if (strcmp(kind, "missing-data"))
			check(mk_sw_chunk(w, MK_FT_DATA, &c[1], &err));
	}
	if (strcmp(kind, "no-end"))
		check(mk_sw_end(w, &err));
	mk_sw_free(w);
	mk_manifest_free(m);
	free(head);
	return 0;
}
