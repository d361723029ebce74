/* mk-pytorch - merge raw state dicts (.safetensors or torch pickles) by a
 * configuration, like mergekit-pytorch: plan, fetch, merge and pack in
 * this process (mk_run_state_dicts). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "mk/fsutil.h"
#include "mk/plugin.h"
#include "mk/run.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... CONFIG OUT\n"
	       "Merge state dicts (one .safetensors file or torch pickle per model) by a\n"
	       "configuration (merge_method, models, base_model, parameters, dtype) into the\n"
	       "directory OUT, as mergekit-pytorch does: no architecture, slices, tokenizer,\n"
	       "config.json or model card.  CONFIG '-' is stdin.  OUT appears only when the\n"
	       "merge succeeded.\n"
	       "\n"
	       "  -i, --tensor-intersection  leave out the tensors some model lacks\n"
	       "  -u, --tensor-union         merge each tensor from the models that have it\n"
	       "                             (default: a tensor some model lacks is an error)\n"
	       "  --out-shard-size SIZE      shard size (default 5B)\n"
	       "  --random-seed N            seed for random methods\n"
	       "  --cuda / --no-cuda         merge on the GPU where a kernel exists\n"
	       "  -j, --num-threads N        merge threads\n"
	       "  --max-memory SIZE          memory budget of the whole merge\n"
	       "  --spill DIR                jobs over the merge budget are read once and\n"
	       "                             replayed from a file in DIR\n"
	       "  --plugin FILE.so           load merge methods from a shared object\n"
	       "  --force                    replace an existing OUT\n"
	       "  --strict                   fail on an output that became NaN or infinite\n"
	       "  --resume                   continue an interrupted merge into OUT\n"
	       "  --quiet                    no progress bar\n"
	       "  -v, --verbose              say more\n"
	       "  -h, --help, -V, --version\n"
	       "mergekit options that mean nothing here (--lazy-unpickle, --copy-tokenizer,\n"
	       "--write-model-card, --low-cpu-memory, --device, ...) are accepted with a note.\n"
	       "See mk-pytorch(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static volatile int cancel;
static bool draw;

static void on_signal(int sig)
{
	(void)sig;
	cancel = 1;
}

static void on_progress(void *ctx, uint64_t done, uint64_t total, size_t td, size_t tn)
{
	(void)ctx;
	if (draw)
		cli_progress("mk-pytorch", done, total, td, tn);
}

int main(int argc, char **argv)
{
	enum { O_SHARD = 256, O_SEED, O_CUDA, O_NOCUDA, O_MEM, O_SPILL, O_FORCE, O_STRICT, O_RESUME, O_QUIET,
	       O_NOQUIET, O_IGN0, O_IGN1 };
	static const struct option lo[] = {
		{ "tensor-intersection", 0, 0, 'i' }, { "tensor-union", 0, 0, 'u' },
		{ "out-shard-size", 1, 0, O_SHARD }, { "random-seed", 1, 0, O_SEED },
		{ "cuda", 0, 0, O_CUDA }, { "no-cuda", 0, 0, O_NOCUDA }, { "num-threads", 1, 0, 'j' },
		{ "max-memory", 1, 0, O_MEM }, { "spill", 1, 0, O_SPILL }, { "force", 0, 0, O_FORCE },
		{ "strict", 0, 0, O_STRICT }, { "resume", 0, 0, O_RESUME }, { "quiet", 0, 0, O_QUIET },
		{ "no-quiet", 0, 0, O_NOQUIET }, { "verbose", 0, 0, 'v' }, { "help", 0, 0, 'h' },
		{ "version", 0, 0, 'V' }, { "plugin", 1, 0, 'P' },
		/* mergekit options without meaning here */
		{ "lazy-unpickle", 0, 0, O_IGN0 }, { "no-lazy-unpickle", 0, 0, O_IGN0 },
		{ "copy-tokenizer", 0, 0, O_IGN0 }, { "no-copy-tokenizer", 0, 0, O_IGN0 },
		{ "write-model-card", 0, 0, O_IGN0 }, { "no-write-model-card", 0, 0, O_IGN0 },
		{ "allow-crimes", 0, 0, O_IGN0 }, { "no-allow-crimes", 0, 0, O_IGN0 },
		{ "low-cpu-memory", 0, 0, O_IGN0 }, { "no-low-cpu-memory", 0, 0, O_IGN0 },
		{ "clone-tensors", 0, 0, O_IGN0 }, { "no-clone-tensors", 0, 0, O_IGN0 },
		{ "trust-remote-code", 0, 0, O_IGN0 }, { "no-trust-remote-code", 0, 0, O_IGN0 },
		{ "read-to-gpu", 0, 0, O_IGN0 }, { "no-read-to-gpu", 0, 0, O_IGN0 },
		{ "multi-gpu", 0, 0, O_IGN0 }, { "no-multi-gpu", 0, 0, O_IGN0 }, { "gpu-rich", 0, 0, O_IGN0 },
		{ "async-write", 0, 0, O_IGN0 }, { "no-async-write", 0, 0, O_IGN0 },
		{ "safe-serialization", 0, 0, O_IGN0 }, { "no-safe-serialization", 0, 0, O_IGN0 },
		{ "write-threads", 1, 0, O_IGN1 }, { "device", 1, 0, O_IGN1 },
		{ "transformers-cache", 1, 0, O_IGN1 }, { "lora-merge-cache", 1, 0, O_IGN1 },
		{ "lora-merge-dtype", 1, 0, O_IGN1 },
		{ 0 },
	};
	struct mk_run_opts o = { .progress = on_progress, .cancel = &cancel };
	enum mk_raw_missing missing = MK_RAW_MISSING_ERROR;
	bool inter = false, uni = false, quiet = false;
	struct mk_diags d = { 0 };
	struct mk_err err = { 0 };
	uint8_t *text = NULL;
	int c, li = 0, rc;
	uint64_t v;

	cli_init("mk-pytorch");
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "iuj:vhV", lo, &li)) != -1) {
		switch (c) {
		case 'i': inter = true; break;
		case 'u': uni = true; break;
		case O_SHARD:
			if (mk_size_parse(optarg, &o.out_shard_size) || !o.out_shard_size)
				cli_usage_error("--out-shard-size: expected a size like 5B, 200K or 64MiB, not '%s'", optarg);
			break;
		case O_SEED:
			if (mk_size_parse(optarg, &o.seed))
				cli_usage_error("--random-seed: expected a non-negative integer, not '%s'", optarg);
			break;
		case O_CUDA: o.cuda = true; break;
		case O_NOCUDA: o.cuda = false; break;
		case 'j':
			if (mk_size_parse(optarg, &v) || v < 1 || v > 1024)
				cli_usage_error("--num-threads: expected a positive integer, not '%s'", optarg);
			o.threads = (unsigned)v;
			break;
		case O_MEM:
			if (mk_size_parse(optarg, &o.max_memory))
				cli_usage_error("--max-memory: expected a size like 8G or 512MiB, not '%s'", optarg);
			break;
		case O_SPILL: o.spill_dir = optarg; break;
		case O_FORCE: o.force = true; break;
		case O_STRICT: o.strict = true; break;
		case O_RESUME: o.resume = true; break;
		case O_QUIET: quiet = true; break;
		case O_NOQUIET: quiet = false; break;
		case O_IGN0:
		case O_IGN1:
			cli_info(2, "note: --%s means nothing to mk-pytorch; ignored", lo[li].name);
			break;
		case 'v': cli_verbose++; break;
		case 'P':
			if (mk_plugin_load(optarg, &err))
				cli_fail(&err);
			break;
		case 'h': usage(); break;
		case 'V': cli_version(); break;
		default: cli_usage_hint();
		}
	}
	if (argc - optind != 2)
		cli_usage_error(argc - optind < 2 ? "expected CONFIG and OUT" : "too many arguments");
	if (inter && uni)
		cli_usage_error("--tensor-intersection and --tensor-union exclude each other");
	missing = inter ? MK_RAW_MISSING_SKIP : uni ? MK_RAW_MISSING_MERGE : MK_RAW_MISSING_ERROR;
	if (!strcmp(argv[optind], "-")) {
		if (mk_fd_read_all(0, 64u << 20, "stdin", &text, &o.len, &err))
			cli_fail(&err);
		o.text = (const char *)text;
		o.label = "stdin";
	} else {
		o.config_path = argv[optind];
	}
	o.out_dir = argv[optind + 1];
	draw = !quiet && cli_progress_enabled(-1);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	rc = mk_run_state_dicts(&o, missing, &d, &err);
	cli_progress_end();
	for (size_t i = 0; i < d.n; i++) {
		char line[2048];
		if (cli_verbose < (d.v[i].level == MK_DIAG_ERROR ? 1 : 2))
			continue;
		mk_diag_format(&d, &d.v[i], line, sizeof(line));
		cli_message(d.v[i].level == MK_DIAG_ERROR ? "error" : "warning", line);
	}
	if (rc) {
		bool said = d.nerrors > 0;
		mk_diags_free(&d);
		free(text);
		if (said)
			exit(EXIT_FAIL);
		cli_fail(&err);
	}
	mk_diags_free(&d);
	free(text);
	cli_info(3, "wrote %s", o.out_dir);
	return EXIT_OK;
}
