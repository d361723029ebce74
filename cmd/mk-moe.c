/* mk-moe - dense models -> a mixture-of-experts model (mergekit-moe's
 * configuration): mk_moe_plan writes the plan, mk-fetch | mk-merge |
 * mk-pack build OUT from it a chunk at a time. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "core/budget.h"
#include "core/fsutil.h"
#include "moe/moe.h"
#include "journal/outlock.h"
#include "pack/pack.h"
#include "run/procs.h"
#include "mk/run.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... CONFIG OUT\n"
	       "Build a mixture-of-experts model from dense models by a mergekit-moe\n"
	       "configuration: the base model's attention, norms and embeddings, each expert's\n"
	       "MLP weights, routers by the gate mode (hidden, hidden_last, hidden_avg,\n"
	       "cheap_embed, random, uniform_random).\n"
	       "\n"
	       "  --max-memory SIZE         memory budget of the stages together (as mk-yaml)\n"
	       "  --out-shard-size SIZE     shard size (default 5B)\n"
	       "  --random-seed N           seed of the random gates and noise_scale (default 0)\n"
	       "  --copy-tokenizer          copy the base model's tokenizer files (the default);\n"
	       "  --no-copy-tokenizer       do not\n"
	       "  --write-model-card        write mergekit_moe_config.yml (the default);\n"
	       "  --no-write-model-card     do not\n"
	       "  --i-understand-this-is-not-useful-without-training\n"
	       "                            allow experts that are all the same model\n"
	       "  --force                   replace an existing OUT\n"
	       "  --cuda / --no-cuda        the hidden gates' forward pass: matrix products on\n"
	       "                            the GPU (without one: a warning, the CPU)\n"
	       "  --strict                  fail on an output tensor with NaN or infinite values\n"
	       "  --buffered                write the output through the page cache, not O_DIRECT\n"
	       "  --transformers-cache DIR  the Hugging Face cache to find models in (HF_HUB_CACHE)\n"
	       "  -j, --num-threads N       mk-merge worker threads\n"
	       "  --print-pipeline          plan, print the stages' command line and exit (the\n"
	       "                            plan's work directory is kept for it; remove it after)\n"
	       "  -q, --quiet               say less (--no-quiet: not); -v, --verbose: say more\n"
	       "  -h, --help                show this help and exit\n"
	       "  -V, --version             show the version and exit\n"
	       "mergekit-moe's and mergekit-yaml's options without meaning here (--load-in-4bit,\n"
	       "--load-in-8bit, --device, --lazy-unpickle, --allow-crimes, --plugin, --spill, ...)\n"
	       "are accepted with a note.\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-moe(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static struct mk_argv fetch, merge, pack;

static void on_note(void *ctx, const char *msg)
{
	(void)ctx;
	if (!strncmp(msg, "warning: ", 9))
		cli_message("warning", msg + 9);
	else
		cli_info(3, "%s", msg);
}

/* The run options mk-yaml has (CLI_RUN_OPTIONS) that mean nothing to
 * mk-moe, whose plan copies tensors (no merge method, no LoRA, no mixed
 * architectures) from models it opens itself: noted and ignored. */
static bool run_option_ignored(int c)
{
	static const int ign[] = { CLI_RUN_CRIMES, CLI_RUN_NOCRIMES, CLI_RUN_SPILL, CLI_RUN_REMOTE, CLI_RUN_NOCACHE, CLI_RUN_PLUGIN,
				   CLI_RUN_LORA_DT, CLI_RUN_LORA_CACHE, CLI_RUN_TRUNC, CLI_RUN_NOTRUNC,
				   CLI_RUN_DEVICE };
	for (size_t i = 0; i < sizeof(ign) / sizeof(*ign); i++)
		if (c == ign[i])
			return true;
	return false;
}

int main(int argc, char **argv)
{
	enum { O_SAME = 256, O_FORCE, O_PRINT, O_IGN0 };
	static const struct option lo[] = {
		{ "i-understand-this-is-not-useful-without-training", 0, 0, O_SAME },
		{ "force", 0, 0, O_FORCE }, { "print-pipeline", 0, 0, O_PRINT },
		{ "help", 0, 0, 'h' }, { "version", 0, 0, 'V' },
		{ "load-in-4bit", 0, 0, O_IGN0 }, { "load-in-8bit", 0, 0, O_IGN0 },
		CLI_RUN_OPTIONS,
		{ 0 },
	};
	struct mk_moe_opts mo = { .note = on_note };
	struct mk_run_opts ro = { 0 };
	struct mk_err err = { 0 };
	bool print = false, quiet = false;
	int c, li = 0;

	cli_init("mk-moe");
	cli_stage_argvs(&fetch, &merge, &pack);
	while ((c = getopt_long(argc, argv, "j:qvhV", lo, &li)) != -1) {
		switch (c) {
		case O_SAME: mo.allow_all_same = true; break;
		case O_FORCE: ro.force = true; break;
		case O_PRINT: print = true; break;
		case O_IGN0: cli_info(2, "note: --%s means nothing to mk-moe; ignored", lo[li].name); break;
		case 'h': usage(); break;
		case 'V': cli_version(); break;
		default:
			cli_run_option_take(c, optarg, lo[li].name, run_option_ignored(c), &ro, &quiet);
		}
	}
	mo.seed = ro.seed;
	mo.copy_tokenizer = !ro.no_copy_tokenizer;
	mo.write_card = !ro.no_model_card;
	/* the base model's forward pass (hidden gates) runs here before the
	 * stages start: the budget less this process */
	if (ro.max_memory)
		mo.max_memory = mk_budget_less_process(ro.max_memory);
	/* --cuda is the forward pass's: the stages only copy tensors */
	mo.cuda = ro.cuda;
	ro.cuda = false;
	cli_run_stage_args(&ro, NULL, &fetch, &merge, &pack);
	if (argc - optind != 2)
		cli_usage_error(argc - optind < 2 ? "expected CONFIG and OUT" : "too many arguments");
	const char *cfgpath = argv[optind], *out = argv[optind + 1];
	uint8_t *text = NULL;
	size_t len = 0;
	cfgpath = cli_read_config(cfgpath, &text, &len);
	struct mk_moe_config *cfg;
	if (mk_moe_parse((const char *)text, len, cfgpath, &cfg, &err))
		cli_fail(&err);
	free(text);
	mo.cfg = cfg;

	struct mk_pack_opts po = { .out_dir = out, .force = ro.force };
	if (!print && mk_pack_check_out(&po, NULL, &err))
		cli_fail(&err);
	static const char *const names[] = { "model.safetensors", "config.json", "plan" };
	const char *work = cli_work_dir(names, 3), *planpath = cli_work_file(2);
	mo.work_dir = work;
	int fd = open(planpath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		mk_err_sys(&err, errno, "%s", planpath);
		cli_fail(&err);
	}
	enum mk_moe_arch arch;
	/* a signal while planning (the hidden gates' forward pass) cancels:
	 * the pass stops at the next layer, the work directory goes, and the
	 * signal ends the process (no OUT, no OUT.mk-partial: the stages have
	 * not started).  Then a signal removes the work directory and ends
	 * mk-moe by that signal, the stages with it. */
	mo.cancel = &cli_cancel;
	cli_cancel_on_signals();
	int rc = mk_moe_plan(&mo, fd, &arch, &err);
	if (close(fd) && !rc)
		rc = mk_err_sys(&err, errno, "%s", planpath);
	mk_moe_config_free(cfg);
	if (!print)
		cli_work_dir_on_signals();
	if (cli_cancel) {   /* (looked at after the switch: none is lost) */
		cli_work_dir_remove();
		cli_exit_cancelled(NULL);
	}
	if (rc)
		cli_fail(&err);
	cli_argv_push(&fetch, "-i");
	cli_argv_push(&fetch, planpath);
	if (quiet)
		cli_argv_push(&pack, "--no-progress");
	cli_argv_push(&pack, out);
	struct mk_stage st[3] = { { "mk-fetch", fetch.v }, { "mk-merge", merge.v }, { "mk-pack", pack.v } };
	if (print)
		cli_print_pipeline(st, 3);
	char *partial = mk_out_partial_name(out);
	if (!partial)
		cli_fail_oom();
	/* OUT locked for the stages' run, which inherit the lock */
	struct mk_out_lock lock;
	if (mk_out_lock(out, &lock, &err) || mk_out_lock_share(&lock, &err) || mk_pack_check_out(&po, &lock, &err) ||
	    mk_pipeline_run(st, 3, partial, &err)) {
		mk_out_unlock(&lock);
		cli_fail(&err);
	}
	mk_out_unlock(&lock);
	free(partial);
	cli_info(3, "wrote %s (%s)", out, mk_moe_arch_name(arch));
	return EXIT_OK;
}
