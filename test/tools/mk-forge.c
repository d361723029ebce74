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
 *   named-file=NAME    the same, announced in the HEAD's files list
 *   plan               HEAD of kind "plan"
 *   job-edit=FROM/TO   not made up: the stream on stdin with the first
 *                      occurrence of FROM in each JOB frame's JSON
 *                      replaced by TO (checksums made anew)
 *   drop-input=J/I     not made up either: the inputs stream on stdin
 *                      without the INPT frames of job J's input I
 *   plan-file=N        a plan of no jobs: HEAD, a FILE frame "big.bin" of N
 *                      zero bytes (announced), END
 *   out-of-order       the two DATA chunks swapped
 *   missing-data       one DATA chunk left out (END counts still right)
 *   no-end             no END frame
 *   bad-dtype          a DATA chunk whose dtype differs from the manifest
 *   big-file=N         a FILE frame "big.bin" of N bytes the HEAD does not
 *                      announce (so no free-space check can foresee it)
 *   file-twice         the FILE frame config.json sent twice
 *   file-folder        FILE frames config.json and config.json/x
 *   data-pass          a DATA chunk whose pass field is not 0
 *   file=N             a FILE frame "big.bin" of N zero bytes, announced
 *   zstd-file=N        the same, zstd-compressed (the stream at level 3)
 *   zstd-bomb=N        a zstd FILE frame "big.bin" announced as 3 bytes
 *                      that declares (and inflates to) N content bytes
 *   zstd-liar=N        the same announced and declaring 1 MiB: only
 *                      the inflating shows it is larger
 *   data-bomb=N        a zstd DATA frame declaring N bytes (of zeros)
 *   interleaved=SEED   tensors of many sizes (a few bytes to some hundred
 *                      KiB; 1-, 2- and 4-byte dtypes) sent in chunks of
 *                      random lengths, the tensors' chunks interleaved at
 *                      random (each tensor's in order); every byte a hash
 *                      of its tensor and place
 *   big-chunk=N        HEAD with chunk_bytes N, one DATA frame of N bytes
 *                      (a tensor "t" of N/4 F32 zeros), not compressed
 *   big-note=N         the ok stream with an ancillary "note" frame of N
 *                      zero bytes, zstd-compressed, before its DATA
 *   big-head=N         a tensors stream whose HEAD lists N tensors of one
 *                      element (long names; zstd-compressed), and no DATA:
 *                      END follows the HEAD
 *   big-job=N          a plan of one JOB frame whose JSON is N bytes: an
 *                      array of zeros under an unknown key (what the JOB
 *                      decoder's tree costs)
 * The three bombs are compressed in pieces (N may be larger than memory)
 * and written around the writer, so END does not count them: a reader
 * must refuse them before it gets there.
 *
 * In every stream but big-file, bad-file and the bombs, the HEAD
 * announces the FILE frame's name and size.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>
#include "core/hash.h"
#include "stream/manifest.h"
#include "mk/stream.h"

static struct mk_err err;

static void check(int rc)
{
	if (rc) {
		fprintf(stderr, "mk-forge: %s\n", err.msg);
		exit(1);
	}
}

static void put32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = v >> (8 * i); }
static void put64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = v >> (8 * i); }

static void write_all(const void *buf, size_t n)
{
	for (size_t o = 0; o < n;) {
		ssize_t w = write(1, (const char *)buf + o, n - o);
		if (w <= 0) {
			perror("mk-forge: write");
			exit(1);
		}
		o += (size_t)w;
	}
}

/* A zstd frame of `type` whose payload is `pre` then `zeros` zero bytes,
 * compressed in pieces; its header declares raw_len `declare`. */
static void bomb(const char *type, const void *pre, size_t npre, uint64_t zeros, uint64_t declare)
{
	ZSTD_CCtx *z = ZSTD_createCCtx();
	static uint8_t in[1 << 20];
	size_t cap = ZSTD_compressBound(sizeof(in)) + 4096, len = 0, outcap = cap;
	uint8_t *out = malloc(outcap), h[32] = { 0 };
	uint64_t left = zeros;
	uint32_t crc;

	ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 3);
	ZSTD_CCtx_setPledgedSrcSize(z, npre + zeros);
	memcpy(in, pre, npre);
	for (bool first = true;; first = false) {
		size_t n = first ? npre : 0, fill = sizeof(in) - n;
		if (!first)
			memset(in, 0, npre);
		n += left < fill ? (size_t)left : fill;
		left -= n - (first ? npre : 0);
		ZSTD_inBuffer ib = { in, n, 0 };
		ZSTD_EndDirective end = left ? ZSTD_e_continue : ZSTD_e_end;
		size_t rem;
		do {
			if (outcap - len < cap) {
				outcap *= 2;
				out = realloc(out, outcap);
			}
			ZSTD_outBuffer ob = { out + len, outcap - len, 0 };
			rem = ZSTD_compressStream2(z, &ob, &ib, end);
			if (ZSTD_isError(rem)) {
				fprintf(stderr, "mk-forge: zstd: %s\n", ZSTD_getErrorName(rem));
				exit(1);
			}
			len += ob.pos;
		} while (ib.pos < ib.size || (end == ZSTD_e_end && rem));
		if (!left)
			break;
	}
	memcpy(h, type, 4);
	h[4] = MK_FRAME_F_ZSTD;
	h[5] = MK_CSUM_CRC32C;
	put64(h + 8, len);
	put64(h + 16, declare);
	crc = mk_crc32c(mk_crc32c(0, h, 32), out, len);
	put32(h + 24, crc);
	write_all(h, 32);
	write_all(out, len);
	free(out);
	ZSTD_freeCCtx(z);
}

static void raw_file(struct mk_stream_writer *w, const char *name, size_t nlen)
{
	uint8_t hdr[8] = { 0xa4, 0x01, 0, 0, (uint8_t)nlen, 0, 0, 0 };
	const void *p[3] = { hdr, name, "x" };
	size_t l[3] = { 8, nlen, 1 };

	check(mk_sw_frame(w, MK_FT_FILE, p, l, 3, &err));
}

/* job-edit: copy stdin to stdout, editing JOB frames */
static int job_edit(const char *spec)
{
	const char *slash = strchr(spec, '/');
	struct mk_stream_reader *r;
	struct mk_stream_writer *w;
	struct mk_frame f;
	size_t nfrom;
	int rc;

	if (!slash) {
		fprintf(stderr, "mk-forge: job-edit=FROM/TO\n");
		return 2;
	}
	nfrom = (size_t)(slash - spec);
	check(mk_sr_open(&r, 0, "stdin", 0, &err));
	check(mk_sw_open(&w, 1, 0, &err));
	while ((rc = mk_sr_next(r, &f, &err)) > 0) {
		if (!strcmp(f.type, MK_FT_END))
			break;
		if (strcmp(f.type, MK_FT_JOB)) {
			check(mk_sw_pass(w, &f, &err));
			continue;
		}
		const char *at = memmem(f.payload, f.payload_len, spec, nfrom);
		if (!at) {
			check(mk_sw_frame1(w, MK_FT_JOB, f.payload, f.payload_len, &err));
			continue;
		}
		size_t pre = (size_t)(at - (const char *)f.payload), nto = strlen(slash + 1);
		const void *pc[3] = { f.payload, slash + 1, at + nfrom };
		size_t pl[3] = { pre, nto, f.payload_len - pre - nfrom };
		check(mk_sw_frame(w, MK_FT_JOB, pc, pl, 3, &err));
	}
	check(rc < 0 ? rc : 0);
	check(mk_sw_end(w, &err));
	mk_sw_free(w);
	mk_sr_free(r);
	return 0;
}

/* drop-input: copy stdin to stdout without job J's input I */
static int drop_input(const char *spec)
{
	unsigned job, input;
	struct mk_stream_reader *r;
	struct mk_stream_writer *w;
	struct mk_frame f;
	int rc;

	if (sscanf(spec, "%u/%u", &job, &input) != 2) {
		fprintf(stderr, "mk-forge: drop-input=JOB/INPUT\n");
		return 2;
	}
	check(mk_sr_open(&r, 0, "stdin", 0, &err));
	check(mk_sw_open(&w, 1, 0, &err));
	while ((rc = mk_sr_next(r, &f, &err)) > 0) {
		struct mk_chunk c;
		if (!strcmp(f.type, MK_FT_END))
			break;
		if (!strcmp(f.type, MK_FT_INPT)) {
			check(mk_chunk_decode(f.payload, f.payload_len, &c, &err));
			if (c.id == job && c.input == input)
				continue;
		}
		check(mk_sw_pass(w, &f, &err));
	}
	check(rc < 0 ? rc : 0);
	check(mk_sw_end(w, &err));
	mk_sw_free(w);
	mk_sr_free(r);
	return 0;
}

static uint64_t forge_rand(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static int interleaved(uint64_t seed)
{
	enum { NT = 24 };
	static const enum mk_dtype dts[3] = { MK_DT_I8, MK_DT_BF16, MK_DT_F32 };
	struct mk_manifest *m = mk_manifest_new("tensors", "mk-forge");
	struct mk_stream_writer *w;
	uint64_t n[NT], sent[NT] = { 0 }, left = NT, st = seed;
	unsigned es[NT];
	uint8_t *data[NT];
	char *head, name[32];
	size_t hlen;

	m->chunk_bytes = 1 << 20;
	for (unsigned t = 0; t < NT; t++) {
		uint64_t r = forge_rand(&st), shape[1];
		enum mk_dtype dt = dts[r % 3];
		es[t] = dt == MK_DT_I8 ? 1 : dt == MK_DT_BF16 ? 2 : 4;
		/* a third under a 4 KiB block, the rest up to 400 KiB */
		n[t] = shape[0] = 1 + (r >> 8) % (t % 3 ? 400000 / es[t] : 4096 / es[t]);
		snprintf(name, sizeof(name), "t%02u", t);
		check(mk_manifest_add_tensor(m, name, dt, 1, shape, &err));
		data[t] = malloc(n[t] * es[t]);
		if (!data[t])
			return 1;
		for (uint64_t b = 0; b < n[t] * es[t]; b++) {
			uint64_t h = ((uint64_t)t << 40) ^ b;
			data[t][b] = (uint8_t)(forge_rand(&h) >> 56);
		}
	}
	check(mk_manifest_encode(m, &head, &hlen, &err));
	check(mk_sw_open(&w, 1, 0, &err));
	check(mk_sw_frame1(w, MK_FT_HEAD, head, hlen, &err));
	while (left) {
		uint64_t r = forge_rand(&st), t = r % NT, k;
		struct mk_chunk c = { .dtype = m->tensors[t].desc.dtype };
		if (sent[t] == n[t])
			continue;
		/* from one element to 150 KiB */
		k = 1 + (r >> 8) % (150000 / es[t]);
		k = k < n[t] - sent[t] ? k : n[t] - sent[t];
		c.id = (uint32_t)t;
		c.elem_begin = sent[t];
		c.elem_count = k;
		mk_chunk_set_rows(&c, 1);
		c.data = data[t] + sent[t] * es[t];
		c.data_len = k * es[t];
		check(mk_sw_chunk(w, MK_FT_DATA, &c, &err));
		sent[t] += k;
		left -= sent[t] == n[t];
	}
	check(mk_sw_end(w, &err));
	mk_sw_free(w);
	mk_manifest_free(m);
	free(head);
	for (unsigned t = 0; t < NT; t++)
		free(data[t]);
	return 0;
}

/* A writer on stdout (zstd at `level`, 0: none) that has written m as
 * its HEAD; m is freed. */
static struct mk_stream_writer *open_with_head(struct mk_manifest *m, int level)
{
	struct mk_stream_writer *w;
	char *head;
	size_t hlen;

	check(mk_manifest_encode(m, &head, &hlen, &err));
	check(mk_sw_open(&w, 1, level, &err));
	check(mk_sw_frame1(w, MK_FT_HEAD, head, hlen, &err));
	mk_manifest_free(m);
	free(head);
	return w;
}

/* END, and the writer freed. */
static int finish(struct mk_stream_writer *w)
{
	check(mk_sw_end(w, &err));
	mk_sw_free(w);
	return 0;
}

static int big_head(uint64_t n)
{
	struct mk_manifest *m = mk_manifest_new("tensors", "mk-forge");
	uint64_t shape[1] = { 1 };
	char name[96];

	m->chunk_bytes = 1 << 20;
	for (uint64_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "model.layers.%llu.self_attn.q_proj.weight.%08llx",
			 (unsigned long long)(i / 8), (unsigned long long)i);
		check(mk_manifest_add_tensor(m, name, MK_DT_F32, 1, shape, &err));
	}
	return finish(open_with_head(m, 3));
}

static int big_job(uint64_t n)
{
	struct mk_manifest *m = mk_manifest_new("plan", "mk-forge");
	struct mk_stream_writer *w;
	uint64_t shape[2] = { 4, 2 };
	static const char pre[] = "{\"id\":0,\"output\":0,\"method\":\"passthrough\",\"inputs\":[{\"model\":0,"
		"\"tensor\":\"t\",\"dtype\":\"F32\",\"shape\":[4,2]}],\"base\":null,\"is_embed\":false,"
		"\"params\":{\"global\":{},\"inputs\":[{}]},\"passes\":0,\"sends\":1,\"zzz\":[0";
	char *job;
	size_t len = sizeof(pre) - 1;

	m->planned = true;
	m->njobs = 1;
	check(mk_manifest_add_tensor(m, "t", MK_DT_F32, 2, shape, &err));
	check(mk_manifest_add_model(m, "a", NULL, &err));
	job = malloc(n + sizeof(pre) + 4);
	memcpy(job, pre, len);
	while (len + 4 < n) {
		memcpy(job + len, ",0", 2);
		len += 2;
	}
	memcpy(job + len, "]}", 2);
	len += 2;
	w = open_with_head(m, 3);
	check(mk_sw_frame1(w, MK_FT_JOB, job, len, &err));
	free(job);
	return finish(w);
}

static int big_chunk(uint64_t n)
{
	struct mk_manifest *m = mk_manifest_new("tensors", "mk-forge");
	struct mk_stream_writer *w;
	uint64_t shape[1] = { n / 4 };
	struct mk_chunk c = { .dtype = MK_DT_F32, .row_count = 1, .elem_count = n / 4 };

	m->chunk_bytes = n;
	check(mk_manifest_add_tensor(m, "t", MK_DT_F32, 1, shape, &err));
	w = open_with_head(m, 0);
	mk_chunk_set_rows(&c, 1);
	c.data_len = n / 4 * 4;
	c.data = calloc(c.data_len ? c.data_len : 1, 1);
	check(mk_sw_chunk(w, MK_FT_DATA, &c, &err));
	free((void *)c.data);
	return finish(w);
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
	if (!strncmp(kind, "job-edit=", 9))
		return job_edit(kind + 9);
	if (!strncmp(kind, "drop-input=", 11))
		return drop_input(kind + 11);
	if (!strncmp(kind, "interleaved=", 12))
		return interleaved(strtoull(kind + 12, NULL, 10));
	if (!strncmp(kind, "big-head=", 9))
		return big_head(strtoull(kind + 9, NULL, 10));
	if (!strncmp(kind, "big-job=", 8))
		return big_job(strtoull(kind + 8, NULL, 10));
	if (!strncmp(kind, "big-chunk=", 10))
		return big_chunk(strtoull(kind + 10, NULL, 10));
	bool plan = !strcmp(kind, "plan") || !strncmp(kind, "plan-file=", 10);
	m = mk_manifest_new(plan ? "plan" : "tensors", "mk-forge");
	m->planned = plan; /* a plan has a (here empty) model table */
	if (!m->planned)
		m->chunk_bytes = 1 << 20;
	const char *eq = strchr(kind, '=');
	uint64_t n = eq ? strtoull(eq + 1, NULL, 10) : 0;
	bool is_bomb = !strncmp(kind, "zstd-bomb=", 10) || !strncmp(kind, "zstd-liar=", 10);
	check(mk_manifest_add_tensor(m, "t", MK_DT_F32, 2, shape, &err));
	if (!strncmp(kind, "file=", 5) || !strncmp(kind, "zstd-file=", 10) || !strncmp(kind, "plan-file=", 10))
		check(mk_manifest_add_file(m, "big.bin", n, &err));
	else if (is_bomb)
		check(mk_manifest_add_file(m, "big.bin", kind[5] == 'b' ? 3 : 1 << 20, &err));
	else if (!strncmp(kind, "named-file=", 11))
		check(mk_manifest_add_file(m, kind + 11, 1, &err));
	else if (strncmp(kind, "big-file=", 9) && strncmp(kind, "bad-file=", 9))
		check(mk_manifest_add_file(m, "config.json", 3, &err));
	check(mk_manifest_encode(m, &head, &hlen, &err));
	check(mk_sw_open(&w, 1, !strncmp(kind, "zstd-file=", 10) || !strncmp(kind, "big-note=", 9) ? 3 : 0, &err));
	check(mk_sw_frame1(w, MK_FT_HEAD, head, hlen, &err));
	if (is_bomb) {
		uint8_t pre[15] = { 0xa4, 0x01, 0, 0, 7, 0, 0, 0, 'b', 'i', 'g', '.', 'b', 'i', 'n' };
		bomb(MK_FT_FILE, pre, sizeof(pre), n, sizeof(pre) + (kind[5] == 'b' ? n : 1 << 20));
	} else if (!strncmp(kind, "data-bomb=", 10)) {
		uint8_t pre[MK_CHUNK_HDR];
		struct mk_chunk b = { .dtype = MK_DT_F32, .row_count = 1, .elem_count = n / 4 };
		mk_chunk_encode(&b, pre);
		bomb(MK_FT_DATA, pre, sizeof(pre), n, sizeof(pre) + n);
	} else if (!strncmp(kind, "file=", 5) || !strncmp(kind, "zstd-file=", 10) ||
		   !strncmp(kind, "plan-file=", 10)) {
		char *big = calloc(n ? n : 1, 1);
		check(mk_sw_file(w, "big.bin", 0644, big, n, &err));
		free(big);
		if (plan) {
			check(mk_sw_end(w, &err));
			mk_sw_free(w);
			mk_manifest_free(m);
			free(head);
			return 0;
		}
	} else if (!strncmp(kind, "bad-file=", 9)) {
		raw_file(w, kind + 9, strlen(kind + 9));
	} else if (!strncmp(kind, "named-file=", 11)) {
		raw_file(w, kind + 11, strlen(kind + 11));
	} else if (!strncmp(kind, "big-file=", 9)) {
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
	if (!strncmp(kind, "big-note=", 9)) {
		char *big = calloc(n ? n : 1, 1);
		check(mk_sw_frame1(w, MK_FT_NOTE, big, n, &err));
		free(big);
	}
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
