/* mk-fetch - read model checkpoints and emit an mk stream. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "core/budget.h"
#include "fetch/fetch.h"
#include "core/fsutil.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... [-i PLAN]\n"
	       "  or:  %s --model REF [--model REF ...] [OPTION]...\n"
	       "Read model checkpoints (safetensors) and write an mk stream (mk-stream(5)).\n"
	       "Plan mode (the default): read mk-plan's plan from standard input (or -i) and\n"
	       "attach each job's input tensors in chunks.  Copy mode (--model): a HEAD\n"
	       "manifest, the first model's config and tokenizer files, and every tensor.\n"
	       "Models given together must have disjoint tensor names.\n"
	       "REF is a local directory or org/name[@rev] in the Hugging Face cache.\n"
	       "\n"
	       "  -i, --input FILE       read the plan from FILE ('-': standard input)\n"
	       "  -m, --model REF        a model to copy (repeatable)\n"
	       "  -o, --output FILE      write the stream to FILE ('-': standard output, the default)\n"
	       "  -z, --compress[=LEVEL] zstd-compress each frame (level 1..19, default 3)\n"
	       "      --chunk-size SIZE  bytes per chunk (default 4MiB)\n"
	       "      --queue-depth N    reads in flight (default %u)\n"
	       "      --io KIND          reader: auto, uring, mmap, pread or http (default: $MK_IO,\n"
	       "                         else auto)\n"
	       "      --remote           read the shards of Hub models the cache lacks by HTTP range\n"
	       "                         requests instead of downloading them first (as --io http)\n"
	       "      --no-cache         with --remote: keep nothing of what is read in the cache\n"
	       "      --no-splice        write every tensor byte from user space, never by splice(2)\n"
	       "      --max-memory SIZE  fit the reads in flight in half of SIZE (smaller chunks, queue)\n"
	       "      --skip-done DIR    DIR is an interrupted mk-pack's OUT.mk-partial: leave out\n"
	       "                         the tensors (plan: the jobs) its journal lists as done,\n"
	       "                         for mk-pack --resume\n"
	       "  -f, --force            write the binary stream even to a terminal\n"
	       "      --progress         draw progress on stderr (--no-progress: never)\n"
	       "  -v, --verbose          say more (backend, queue depth, seeks); -q, --quiet: less\n"
	       "  -h, --help             show this help and exit\n"
	       "  -V, --version          show the version and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-fetch(1).\n",
	       cli_prog, cli_prog, MK_READER_DEFAULT_QDEPTH);
	exit(EXIT_OK);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	cli_progress("mk-fetch", done, total, 0, 0);
}

int main(int argc, char **argv)
{
	enum { O_CHUNK = 256, O_QD, O_IO, O_MEM, O_SKIP, O_REMOTE, O_NOCACHE, O_NOSPLICE };
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "input", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "compress", optional_argument, NULL, 'z' },
		{ "chunk-size", required_argument, NULL, O_CHUNK },
		{ "queue-depth", required_argument, NULL, O_QD },
		{ "max-memory", required_argument, NULL, O_MEM },
		{ "io", required_argument, NULL, O_IO },
		{ "remote", no_argument, NULL, O_REMOTE },
		{ "no-cache", no_argument, NULL, O_NOCACHE },
		{ "no-splice", no_argument, NULL, O_NOSPLICE },
		{ "skip-done", required_argument, NULL, O_SKIP },
		{ "force", no_argument, NULL, 'f' },
		CLI_PROGRESS_OPTIONS,
		CLI_COMMON_OPTIONS,
		CLI_STAGE_FED_OPTION,
		{ 0 },
	};
	struct mk_fetch_opts o = { 0 };
	struct mk_fetch_stats st;
	struct mk_err err = { 0 };
	const char **models = NULL, *output = "-", *input = NULL;
	bool force = false;
	int want_progress = 0, c, fd = 1;
	uint64_t v, budget = 0;

	cli_init("mk-fetch");
	while ((c = getopt_long(argc, argv, "m:i:o:z::fvqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': {
			const char **q = realloc(models, (o.nmodels + 1) * sizeof(*models));
			if (!q)
				cli_fail_oom();
			models = q;
			models[o.nmodels++] = optarg;
			break;
		}
		case 'o': output = optarg; break;
		case 'i': input = optarg; break;
		case 'z': o.compress_level = cli_compress_level(optarg); break;
		case O_CHUNK:
			if (mk_size_parse(optarg, &v) || v < 1024 || v > (1u << 30))
				cli_usage_error("--chunk-size: expected a size from 1KiB to 1GiB, not '%s'", optarg);
			o.chunk_bytes = (size_t)v;
			break;
		case O_QD:
			if (mk_size_parse(optarg, &v) || v < 1 || v > 1024)
				cli_usage_error("--queue-depth: expected 1..1024, not '%s'", optarg);
			o.qdepth = (unsigned)v;
			break;
		case O_MEM:
			if (mk_size_parse(optarg, &v) || v < MK_BUDGET_FETCH_MIN)
				cli_usage_error("--max-memory: expected a size of at least 4MiB, not '%s'", optarg);
			budget = v;
			break;
		case O_IO:
			if (mk_io_kind_parse(optarg, &o.io))
				cli_usage_error("--io: expected auto, uring, mmap, pread or http, not '%s'", optarg);
			break;
		case O_REMOTE: o.remote = true; break;
		case O_NOCACHE: o.no_cache = true; break;
		case O_NOSPLICE: o.no_splice = true; break;
		case O_SKIP:
			if (!optarg[0])
				cli_usage_error("--skip-done: expected a directory (OUT.mk-partial)");
			o.skip_done = optarg;
			break;
		case 'f': force = true; break;
		default: cli_common_option(c, optarg, &want_progress, usage);
		}
	}
	if (optind < argc)
		cli_usage_error("unexpected argument '%s' (models are given with --model)", argv[optind]);
	if (budget)
		mk_budget_fetch_apply(budget, &o.chunk_bytes, &o.qdepth, &o.hold_bytes);
	if (o.nmodels && input)
		cli_usage_error("--model (copy mode) and --input (plan mode) do not go together");
	int in_fd = 0;
	if (!o.nmodels) {
		if (input && strcmp(input, "-"))
			in_fd = cli_open_read(input);
		else if (isatty(0))
			cli_usage_error("no --model given and standard input is a terminal (pipe a plan from mk-plan)");
	}
	fd = cli_open_output(output, force);
	o.models = models;
	cli_hub_progress(-1);
	if (cli_progress_enabled(want_progress ? 1 : 0))
		o.progress = on_progress;
	int rc = o.nmodels ? mk_fetch_copy(&o, mk_io_fd(fd), &st, &err) :
			     mk_fetch_plan(&o, mk_io_fd(in_fd), in_fd ? input : "stdin", mk_io_fd(fd), &st, &err);
	if (rc) {
		if (fd != 1)
			cli_discard_output(fd, output); /* never leave a stream that looks complete */
		cli_fail(&err);
	}
	cli_progress_end();
	cli_close_output(fd, output);
	if (st.note[0])
		cli_info(3, "%s", st.note);
	if (st.skipped)
		cli_info(3, "left out %llu %s done in %s", (unsigned long long)st.skipped,
			 o.nmodels ? "tensors" : "jobs", o.skip_done);
	cli_info(3, "reader %s, queue depth %u, chunk %zu bytes", st.backend, st.qdepth, st.chunk_bytes);
	if (st.dequant_held)
		cli_info(3, "dequantizing: %llu bytes of MXFP4 experts held", (unsigned long long)st.dequant_held);
	cli_info(3, "%llu tensors, %llu chunks, %llu bytes read, %llu stream bytes, %llu backward seeks",
		 (unsigned long long)st.tensors, (unsigned long long)st.chunks,
		 (unsigned long long)st.bytes_read, (unsigned long long)st.stream_bytes,
		 (unsigned long long)st.backward_seeks);
	free(models);
	return EXIT_OK;
}
