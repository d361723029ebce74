/* mk-pack - write an mk stream of tensors as a sharded safetensors model. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "core/fsutil.h"
#include "pack/pack.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... OUT\n"
	       "Read an mk stream of tensors (from mk-fetch or mk-merge) and write the\n"
	       "directory OUT: model.safetensors, or model-NNNNN-of-NNNNN.safetensors shards\n"
	       "with model.safetensors.index.json, and the files the stream carries.\n"
	       "OUT appears only when everything is written and synced.\n"
	       "\n"
	       "  -i, --input FILE         read the stream from FILE ('-': standard input, the default)\n"
	       "      --out-shard-size SIZE  shard size in bytes: 5B (default), 200K, 2G, 64MiB...\n"
	       "      --basename NAME      the weight files' name instead of 'model' (a PEFT adapter:\n"
	       "                           adapter_model): NAME.safetensors ...\n"
	       "                           (k, m, b as in mergekit: 1e3, 1e6, 1e9)\n"
	       "      --force              replace an existing OUT (and a leftover OUT.mk-partial)\n"
	       "      --keep-partial       on failure, keep OUT.mk-partial for inspection\n"
	       "      --resume             continue an interrupted run from OUT.mk-partial: check\n"
	       "                           the tensors its journal lists, write only the others\n"
	       "                           (and keep OUT.mk-partial if this run fails too)\n"
	       "      --no-splice          read each tensor chunk into memory and write it from\n"
	       "                           there, never by splice(2)\n"
	       "      --buffered           write the tensors through the page cache (default: by\n"
	       "                           O_DIRECT where the file system takes it)\n"
	       "      --quantize FORMAT    write the weights the stream marks \"requant\" in FORMAT\n"
	       "                           again, the inputs' format: fp8 (F8_E4M3 and\n"
	       "                           NAME_scale_inv) or mxfp4 (NAME_blocks and NAME_scales);\n"
	       "                           config.json with the quantization_config\n"
	       "      --max-memory SIZE    refuse a stream whose chunks cannot fit; commit at most\n"
	       "                           a quarter of SIZE to disk at a time\n"
	       "      --progress           draw progress even when stderr is not a terminal\n"
	       "      --no-progress        never draw progress\n"
	       "  -v, --verbose            say more; -q, --quiet: say less\n"
	       "  -h, --help               show this help and exit\n"
	       "  -V, --version            show the version and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-pack(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total, size_t td, size_t tn)
{
	(void)ctx;
	cli_progress("mk-pack", done, total, td, tn);
}

int main(int argc, char **argv)
{
	enum { O_SHARD = 256, O_FORCE, O_KEEP, O_RESUME, O_MEM, O_NOSPLICE, O_BUFFERED, O_BASENAME, O_QUANT };
	static const struct option longopts[] = {
		{ "input", required_argument, NULL, 'i' },
		{ "out-shard-size", required_argument, NULL, O_SHARD },
		{ "basename", required_argument, NULL, O_BASENAME },
		{ "force", no_argument, NULL, O_FORCE },
		{ "max-memory", required_argument, NULL, O_MEM },
		{ "keep-partial", no_argument, NULL, O_KEEP },
		{ "resume", no_argument, NULL, O_RESUME },
		{ "no-splice", no_argument, NULL, O_NOSPLICE },
		{ "buffered", no_argument, NULL, O_BUFFERED },
		{ "quantize", required_argument, NULL, O_QUANT },
		CLI_PROGRESS_OPTIONS,
		CLI_COMMON_OPTIONS,
		CLI_STAGE_FED_OPTION,
		{ 0 },
	};
	struct mk_pack_opts o = { .shard_size = MK_PACK_DEFAULT_SHARD, .resumable = true };
	struct mk_pack_stats st;
	struct mk_err err = { 0 };
	const char *input = "-";
	int want_progress = -1, c, fd = 0;
	char a[32];

	cli_init("mk-pack");
	while ((c = getopt_long(argc, argv, "i:vqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': input = optarg; break;
		case O_BASENAME: {
			const char *b;
			struct mk_err be = { 0 };
			o.basename = optarg;
			if (mk_pack_basename(&o, &b, &be))
				cli_usage_error("--basename: %s", be.msg);
			break;
		}
		case O_SHARD:
			if (mk_size_parse(optarg, &o.shard_size))
				cli_usage_error("--out-shard-size: expected a size like 5B, 200K or 64MiB, not '%s'",
						optarg);
			break;
		case O_FORCE: o.force = true; break;
		case O_MEM:
			if (mk_size_parse(optarg, &o.budget) || !o.budget)
				cli_usage_error("--max-memory: expected a size, not '%s'", optarg);
			break;
		case O_KEEP: o.keep_partial = true; break;
		case O_RESUME: o.resume = true; break;
		case O_NOSPLICE: o.no_splice = true; break;
		case O_BUFFERED: o.buffered = true; break;
		case O_QUANT: o.quantize = cli_quantize_arg(optarg); break;
		default: cli_common_option(c, optarg, &want_progress, usage);
		}
	}
	if (optind + 1 != argc)
		cli_usage_error(optind == argc ? "missing output directory OUT" : "too many arguments");
	o.out_dir = argv[optind];
	if (!o.out_dir[0])
		cli_usage_error("the output directory name is empty");
	/* refuse early, before the producer has done any work */
	if (mk_pack_check_out(&o, NULL, &err))
		cli_fail(&err);
	fd = cli_open_input(input);
	if (cli_progress_enabled(want_progress))
		o.progress = on_progress;
	if (mk_pack_run(&o, mk_io_fd(fd), strcmp(input, "-") ? input : "stdin", &st, &err))
		cli_fail(&err);
	cli_progress_end();
	if (st.warning[0])
		cli_info(2, "warning: %s", st.warning);
	if (st.resumed)
		cli_info(3, "resumed %s: %zu tensors (%s) were done and checked", o.out_dir, st.resumed,
			 mk_size_human(st.resumed_bytes, a, sizeof(a)));
	if (o.quantize)
		cli_info(3, "quantized: at most %s of block-rows held at once",
			 mk_size_human(st.quant_held_max, a, sizeof(a)));
	cli_info(3, "wrote %s: %zu tensors in %zu shard%s (%s), %zu files", o.out_dir, st.ntensors, st.nshards,
		 st.nshards == 1 ? "" : "s", mk_size_human(st.tensor_bytes, a, sizeof(a)), st.nfiles);
	if (fd)
		close(fd);
	return EXIT_OK;
}
