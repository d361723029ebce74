/* mk-pytorch - merge raw state dicts (.safetensors or torch pickles) by a
 * configuration, like mergekit-pytorch: plan, fetch, merge and pack in
 * this process (mk_run_state_dicts). */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "journal/outlock.h"
#include "pack/pack.h"
#include "mk/plugin.h"
#include "mk/run.h"
#include "run/state_dicts.h"

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
	       "  --buffered                 write the output through the page cache, not O_DIRECT\n"
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

int main(int argc, char **argv)
{
	enum { O_FORCE = 256, O_RESUME };
	static const struct option lo[] = {
		{ "tensor-intersection", 0, 0, 'i' }, { "tensor-union", 0, 0, 'u' },
		{ "force", 0, 0, O_FORCE }, { "resume", 0, 0, O_RESUME },
		{ "help", 0, 0, 'h' }, { "version", 0, 0, 'V' },
		CLI_RUN_OPTIONS,
		{ 0 },
	};
	/* a signal cancels and keeps OUT.mk-partial for --resume, as mk-yaml */
	struct mk_run_opts o = { .progress = cli_run_progress, .cancel = &cli_cancel, .keep_partial_on_cancel = true };
	enum mk_raw_missing missing = MK_RAW_MISSING_ERROR;
	bool inter = false, uni = false, quiet = false;
	struct mk_diags d = { 0 };
	struct mk_err err = { 0 };
	uint8_t *text = NULL;
	int c, li = 0, rc;

	cli_init("mk-pytorch");
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "iuj:vhV", lo, &li)) != -1) {
		if (cli_run_option(c == 'v' ? CLI_RUN_VERBOSE : c, optarg, lo[li].name, true, &o, &quiet))
			continue;
		switch (c) {
		case 'i': inter = true; break;
		case 'u': uni = true; break;
		case O_FORCE: o.force = true; break;
		case O_RESUME: o.resume = true; break;
		default: cli_common_option(c, optarg, NULL, usage);
		}
	}
	if (argc - optind != 2)
		cli_usage_error(argc - optind < 2 ? "expected CONFIG and OUT" : "too many arguments");
	if (inter && uni)
		cli_usage_error("--tensor-intersection and --tensor-union exclude each other");
	missing = inter ? MK_RAW_MISSING_SKIP : uni ? MK_RAW_MISSING_MERGE : MK_RAW_MISSING_ERROR;
	o.label = argv[optind];
	o.label = cli_read_config(o.label, &text, &o.len);
	o.text = (const char *)text;
	o.out_dir = argv[optind + 1];
	cli_run_draw = !quiet && cli_progress_enabled(-1);
	cli_cancel_on_signals();
	rc = mk_run_state_dicts(&o, missing, &d, &err);
	cli_progress_end();
	cli_print_diags(&d);
	if (rc && cli_cancel) {
		char *partial = mk_out_partial_name(o.out_dir);
		cli_exit_cancelled(partial);
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
