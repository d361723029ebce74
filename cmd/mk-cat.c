/* mk-cat - show an mk stream's frames readably, or verify it. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "core/budget.h"
#include "core/fsutil.h"
#include "core/hash.h"
#include "stream/piecewise.h"
#include "stream/manifest.h"
#include "mk/plugin.h"
#include "mk/stream.h"
#include "verify/verify.h"
#include "core/text.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... [FILE|-]\n"
	       "Print the frames of an mk stream (mk-stream(5)) one per line: type, sizes,\n"
	       "checksum, and what each carries (manifest, file names, tensor chunks).\n"
	       "With no FILE, or FILE '-', read standard input.\n"
	       "\n"
	       "      --verify   check the stream whole, as the stage that reads it would:\n"
	       "                 checksums, END's counts, every HEAD, JOB, INPT, DATA and\n"
	       "                 FILE frame and their cross-references, each tensor whole and\n"
	       "                 in order; print one summary line; exit 1 on any fault\n"
	       "      --max-memory SIZE  refuse a frame that would take more than SIZE held\n"
	       "                 whole (default 256M); FILE frames are read in pieces\n"
	       "      --plugin FILE.so  load merge methods from a shared object (also\n"
	       "                 MK_PLUGIN_PATH), to verify an inputs stream that uses them\n"
	       "  -v, --verbose  also print the HEAD frame's JSON and each tensor of the manifest\n"
	       "  -h, --help     show this help and exit\n"
	       "  -V, --version  show the version and exit\n"
	       "\n"
	       "Exit status: 0 a sound stream, 1 a damaged stream or failure, 2 usage error.\n",
	       cli_prog);
	exit(EXIT_OK);
}

/* Names and payloads are printed escaped (mk_text_escape): a stream can
 * hold control characters that would drive the terminal. */
static const char *esc_name(const char *s, char *buf)
{
	return mk_text_escape(s, (size_t)-1, buf, 4096);
}
#define ESC(s) esc_name((s), (char[4096]){ 0 })

/* The same for a payload of any length, printed in pieces cut at a
 * character, so that its escaped copy is never held whole. */
static void print_payload(const void *p, size_t len)
{
	enum { PIECE = 64 << 10 };
	static char b[4 * PIECE + 8];
	const uint8_t *s = p;

	while (len) {
		size_t n = len < PIECE ? len : PIECE;
		while (n < len && n > PIECE - 4 && (s[n] & 0xC0) == 0x80)
			n--;
		fputs(mk_text_escape((const char *)s, n, b, sizeof(b)), stdout);
		s += n;
		len -= n;
	}
}

static void print_shape(const uint64_t *shape, unsigned ndim)
{
	putchar('[');
	for (unsigned i = 0; i < ndim; i++)
		printf("%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
	putchar(']');
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "verify", no_argument, NULL, 'c' },
		{ "max-memory", required_argument, NULL, 'm' },
		CLI_PLUGIN_OPTION,
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct mk_stream_reader *r = NULL;
	struct mk_manifest *man = NULL;
	struct mk_err err = { 0 };
	struct mk_frame f;
	const char *input = "-";
	bool verify = false, bad = false;
	uint64_t budget = 0;

	int c, fd = 0, rc, verbose = 0;

	cli_init("mk-cat");
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "vhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': verify = true; break;
		case 'm':
			if (mk_size_parse(optarg, &budget) || !budget)
				cli_usage_error("--max-memory: expected a size, not '%s'", optarg);
			break;
		case 'v': verbose++; break; /* more output, not more messages */
		default: cli_common_option(c, optarg, NULL, usage);
		}
	}
	if (argc - optind > 1)
		cli_usage_error("too many arguments");
	if (optind < argc)
		input = argv[optind];
	fd = cli_open_input(input);
	if (verify) {
		struct mk_verify_summary sum;
		if (mk_stream_verify(fd, fd ? input : "stdin", budget, &sum, &err))
			cli_fail(&err);
		printf("ok: %s stream, %llu frames, %llu bytes, %llu tensors, %llu jobs, %llu chunks\n", sum.kind,
		       (unsigned long long)sum.frames, (unsigned long long)sum.bytes,
		       (unsigned long long)sum.ntensors, (unsigned long long)sum.jobs,
		       (unsigned long long)sum.chunks);
		cli_close_stdout();
		return EXIT_OK;
	}
	if (mk_sr_open(&r, fd, fd ? input : "stdin", MK_SR_NO_VERIFY | MK_SR_PIECEWISE_FILE, &err))
		cli_fail(&err);
	mk_sr_set_bounds(r, &(struct mk_sr_bounds){ .memory = mk_budget_cat(budget) });
	printf("mk stream %d.%d\n", MK_STREAM_MAJOR, MK_STREAM_MINOR);
	while ((rc = mk_sr_next(r, &f, &err)) > 0) {
		uint32_t crc = f.crc;
		if (!f.csum_ok)
			bad = true;
		printf("#%llu %s %s len=%llu%s raw=%llu crc32c=%08x%s", (unsigned long long)f.index, f.type,
		       f.critical ? "critical" : "ancillary", (unsigned long long)f.len,
		       (f.flags & MK_FRAME_F_ZSTD) ? " zstd" : "", (unsigned long long)f.raw_len,
		       crc, f.csum_ok ? "" : " CHECKSUM-MISMATCH");
		if (!strcmp(f.type, MK_FT_HEAD)) {
			mk_manifest_free(man);
			man = NULL;
			if (mk_manifest_decode(f.payload, f.payload_len, &man, &err)) {
				mk_err_prefix(&err, "frame #%llu: ", (unsigned long long)f.index);
				cli_fail(&err);
			}
			printf(" kind=%s producer=\"%s\" chunk=%llu tensors=%zu files=%zu\n", ESC(man->kind),
			       ESC(man->producer), (unsigned long long)man->chunk_bytes, man->ntensors, man->nfiles);
			if (verbose) {
				fputs("  ", stdout);
				print_payload(f.payload, f.payload_len);
				putchar('\n');
				for (size_t i = 0; i < man->ntensors; i++) {
					printf("  tensor %zu %s %s ", i, ESC(man->tensors[i].name),
					       mk_dtype_name(man->tensors[i].desc.dtype));
					print_shape(man->tensors[i].desc.shape, man->tensors[i].desc.ndim);
					printf(" %llu bytes\n", (unsigned long long)man->tensors[i].nbytes);
				}
			}
		} else if (!strcmp(f.type, MK_FT_FILE)) {
			/* its name only: the contents are drained, verified,
			 * by the next mk_sr_next, never held */
			char name[PATH_MAX + 1];
			uint32_t mode;
			uint64_t size;
			if (mk_file_read_head(r, &f, &mode, name, &size, &err))
				cli_fail(&err);
			printf(" name=%s mode=%04o size=%llu\n", ESC(name), mode, (unsigned long long)size);
		} else if (!strcmp(f.type, MK_FT_DATA) || !strcmp(f.type, MK_FT_INPT)) {
			struct mk_chunk ch;
			const char *name = "?";
			if (mk_chunk_decode(f.payload, f.payload_len, &ch, &err)) {
				mk_err_prefix(&err, "frame #%llu: ", (unsigned long long)f.index);
				cli_fail(&err);
			}
			if (!strcmp(f.type, MK_FT_DATA) && man && ch.id < man->ntensors)
				name = man->tensors[ch.id].name;
			printf(" id=%u", ch.id);
			if (!strcmp(f.type, MK_FT_INPT))
				printf(" input=%u pass=%u", ch.input, ch.pass);
			printf(" tensor=%s dtype=%s rows=[%llu,%llu) elems=[%llu,%llu) data-crc32c=%08x\n", ESC(name),
			       mk_dtype_name(ch.dtype), (unsigned long long)ch.row_begin,
			       (unsigned long long)(ch.row_begin + ch.row_count), (unsigned long long)ch.elem_begin,
			       (unsigned long long)(ch.elem_begin + ch.elem_count), mk_crc32c(0, ch.data, ch.data_len));
		} else if (!strcmp(f.type, MK_FT_JOB)) {
			putchar(' ');
			print_payload(f.payload, f.payload_len);
			putchar('\n');
		} else if (f.piecewise) {
			/* an ancillary frame, read in pieces: its first bytes */
			uint8_t head[200];
			size_t have;
			if (mk_sr_read_exact(r, head, f.raw_len < sizeof(head) ? (size_t)f.raw_len : sizeof(head),
					     &have, &err))
				cli_fail(&err);
			putchar(' ');
			print_payload(head, have);
			putchar('\n');
		} else {
			putchar(' ');
			print_payload(f.payload, f.payload_len > 200 ? 200 : f.payload_len);
			putchar('\n');
		}
	}
	if (rc < 0)
		cli_fail(&err);
	if (bad) {
		mk_err_set(&err, MK_ECORRUPT, "checksum mismatch in the stream");
		cli_fail(&err);
	}
	mk_manifest_free(man);
	mk_sr_free(r);
	cli_close_stdout();
	return EXIT_OK;
}
