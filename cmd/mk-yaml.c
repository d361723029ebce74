/* mk-yaml - merge by a mergekit YAML configuration, like mergekit-yaml:
 * plan, fetch, merge and pack in this process (mk_run_merge), or, with
 * --processes, mk-plan | mk-fetch | mk-merge | mk-pack joined by pipes. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "core/budget.h"
#include "card/card.h"
#include "core/fsutil.h"
#include "journal/outlock.h"
#include "pack/pack.h"
#include "run/procs.h"
#include "mk/plugin.h"
#include "mk/run.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... CONFIG OUT\n"
	       "Merge models by a mergekit YAML configuration into the directory OUT, as\n"
	       "mergekit-yaml does: the stages of mk-plan | mk-fetch | mk-merge | mk-pack on\n"
	       "threads of this process.  OUT appears only when the merge succeeded.\n"
	       "\n"
	       "  --processes               run the four programs as processes joined by pipes\n"
	       "  --print-pipeline          print the equivalent shell pipeline and exit\n"
	       "  --out-shard-size SIZE     shard size (mk-pack; default 5B)\n"
	       "  --copy-tokenizer / --no-copy-tokenizer      (mk-plan; default on)\n"
	       "  --write-model-card / --no-write-model-card  (mk-plan; default on)\n"
	       "  --allow-crimes            allow mixing architectures (mk-plan)\n"
	       "  --random-seed N           seed for random methods (mk-plan)\n"
	       "  --unsafe-truncate-embeddings  cut embeddings of different vocabulary sizes to the\n"
	       "                            fewest rows, without a tokenizer source (mk-plan)\n"
	       "  --cuda / --no-cuda        merge on the GPU (mk-merge)\n"
	       "  -j, --num-threads N       merge threads (mk-merge)\n"
	       "  --max-memory SIZE         memory budget, split: half to merging (mk-plan, mk-merge),\n"
	       "                            a quarter each to reading (mk-fetch) and writing (mk-pack)\n"
	       "  --spill DIR               jobs over the merge budget are read once and replayed\n"
	       "                            from a file in DIR (mk-plan --spill, mk-merge --spill DIR)\n"
	       "  --plugin FILE.so          load merge methods from a shared object (mk-plan, mk-merge)\n"
	       "  --transformers-cache DIR  the Hugging Face cache to find models in (HF_HUB_CACHE)\n"
	       "  --remote                  read Hub models' shards by range requests, not downloaded\n"
	       "                            first (mk-fetch --remote); --no-cache: keep none of them\n"
	       "  --lora-merge-dtype D      a BASE+ADAPTER model's weights are loaded as D (mk-plan)\n"
	       "  --lora-merge-cache DIR    accepted, not needed: mk applies LoRA adapters while it\n"
	       "                            reads (mk-fetch), with no merged copy on disk\n"
	       "  --force                   replace an existing OUT (mk-pack)\n"
	       "  --strict                  fail on an output that became NaN or infinite (mk-merge)\n"
	       "  --buffered                write the output through the page cache, not O_DIRECT (mk-pack)\n"
	       "  --quantize FORMAT         fp8 or mxfp4: write the weights the base model (else the\n"
	       "                            first) stores in FORMAT so again, with its\n"
	       "                            quantization_config (mk-pack --quantize); not with --resume\n"
	       "  --resume                  continue an interrupted merge into OUT: the tensors\n"
	       "                            OUT.mk-partial has are checked and not made again\n"
	       "                            (mk-fetch --skip-done, mk-pack --resume)\n"
	       "  --quiet / --no-quiet      no progress bar / the bar (default)\n"
	       "  -v, --verbose             say more (repeat for more)\n"
	       "  --gpu-rich                --cuda (in mergekit, --cuda and three options that\n"
	       "                            mean nothing here); --device cuda[:N], --read-to-gpu:\n"
	       "                            --cuda too.  Without a usable GPU: a warning and the\n"
	       "                            CPU (with --strict: an error)\n"
	       "  -h, --help, -V, --version\n"
	       "Every other mergekit-yaml option is accepted with a note and changes nothing\n"
	       "(--lazy-unpickle, --low-cpu-memory, --clone-tensors, --trust-remote-code,\n"
	       "--multi-gpu, --async-write, --safe-serialization and their --no- forms,\n"
	       "--no-read-to-gpu, --write-threads N, --device cpu|auto).  See mk-yaml(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

/* the stages' command lines; static, so they live until exit */
static struct mk_argv plan, fetch, merge, pack;

/* ---- in this process ---- */

static void on_warn(void *ctx, const char *msg)
{
	(void)ctx;
	cli_info(2, "warning: %s", msg);
}

static int run_here(struct mk_run_opts *o, const char *config, const char *partial, char **plugins,
		    size_t nplugins, bool quiet)
{
	struct mk_diags d = { 0 };
	struct mk_run_stats rs = { 0 };
	struct mk_err err = { 0 };
	uint8_t *text = NULL;
	size_t len = 0;
	int rc;

	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	for (size_t i = 0; i < nplugins; i++)
		if (mk_plugin_load(plugins[i], &err))
			cli_fail(&err);
	o->label = cli_read_config(config, &text, &len);
	o->text = (const char *)text;
	o->len = len;
	cli_hub_progress(quiet ? 0 : -1);
	cli_run_draw = !quiet && cli_progress_enabled(-1);
	if (cli_run_draw)
		o->progress = cli_run_progress;
	/* a signal cancels: the stages stop, mk-pack keeps OUT.mk-partial
	 * for --resume (what a killed pipeline leaves), then the signal ends
	 * the process.  A signal ignored when mk-yaml started (nohup, a
	 * background job's SIGINT) stays ignored. */
	o->cancel = &cli_cancel;
	o->keep_partial_on_cancel = true;
	o->warn = on_warn;
	o->stats = &rs;
	cli_cancel_on_signals();
	rc = mk_run_merge(o, &d, &err);
	cli_progress_end();
	cli_print_diags(&d);
	if (cli_cancel && rc) /* (a signal after the merge completed does not undo it) */
		cli_exit_cancelled(partial);
	if (rc) {
		if (!d.nerrors)
			cli_fail(&err);
		exit(EXIT_FAIL);
	}
	mk_diags_free(&d);
	free(text);
	cli_info(3, "%llu statistics passes ended early (%llu input chunks not read), %llu added",
		 (unsigned long long)rs.passes_skipped, (unsigned long long)rs.chunks_unsent,
		 (unsigned long long)rs.passes_added);
	cli_info(3, "wrote %s", o->out_dir);
	return EXIT_OK;
}

/* The four programs' command lines for the options in o (--processes,
 * --print-pipeline): each stage gets the options that are its own. */
static void stage_args(const struct mk_run_opts *o, char **plugins, size_t nplugins)
{
	cli_run_stage_args(o, &plan, &fetch, &merge, &pack);
	for (size_t i = 0; i < nplugins; i++) {
		cli_argv_push(&plan, "--plugin");
		cli_argv_push(&plan, plugins[i]);
		cli_argv_push(&merge, "--plugin");
		cli_argv_push(&merge, plugins[i]);
	}
}

int main(int argc, char **argv)
{
	enum { O_PRINT = 256, O_PROCS, O_FORCE, O_RESUME };
	static const struct option lo[] = {
		{ "print-pipeline", 0, 0, O_PRINT }, { "processes", 0, 0, O_PROCS }, { "force", 0, 0, O_FORCE },
		{ "resume", 0, 0, O_RESUME }, { "help", 0, 0, 'h' }, { "version", 0, 0, 'V' },
		CLI_RUN_OPTIONS,
		{ 0 },
	};
	bool print = false, procs = false, quiet = false, resume = false;
	/* the options, for mk_run_merge or the four programs */
	struct mk_run_opts ro = { 0 };
	static char **plugins; /* (static: lives until exit, as the stages' argv) */
	size_t nplugins = 0;
	const char *mem_arg = NULL; /* --max-memory as given, for the note */
	int c, li = 0;

	cli_init("mk-yaml");
	char *p_plan = cli_stage_path("mk-plan"), *p_fetch = cli_stage_path("mk-fetch"), *p_merge = cli_stage_path("mk-merge"),
	     *p_pack = cli_stage_path("mk-pack");
	cli_argv_push(&plan, p_plan);
	cli_argv_push(&fetch, p_fetch);
	cli_argv_push(&merge, p_merge);
	cli_argv_push(&pack, p_pack);
	free(p_plan);
	free(p_fetch);
	free(p_merge);
	free(p_pack);
	while ((c = getopt_long(argc, argv, "j:vhV", lo, &li)) != -1) {
		switch (c) {
		case O_PRINT: print = true; break;
		case O_PROCS: procs = true; break;
		case O_FORCE: ro.force = true; break;
		case O_RESUME: resume = true; ro.resume = true; break;
		case CLI_RUN_PLUGIN: {
			/* loaded where the merge runs: here (run_here), or by
			 * mk-plan and mk-merge */
			char **q = realloc(plugins, (nplugins + 1) * sizeof(*q));
			if (!q)
				cli_fail_oom();
			plugins = q;
			plugins[nplugins++] = optarg;
			break;
		}
		case 'h': usage(); break;
		case 'V': cli_version(); break;
		default:
			if (c == CLI_RUN_MEM)
				mem_arg = optarg;
			if (!cli_run_option(c == 'v' ? CLI_RUN_VERBOSE : c, optarg, c == 'v' ? "verbose" : lo[li].name,
					    false, &ro, &quiet))
				cli_usage_hint();
		}
	}
	if (ro.max_memory) {
		struct mk_budget_split bs;
		mk_budget_split(ro.max_memory, &bs);
		if (bs.stages + bs.merge + bs.fetch + bs.pack > ro.max_memory)
			cli_info(2, "note: --max-memory %s is less than the stages need at the least; they get %llu bytes in all (%llu for the stages at rest, mk-fetch %llu, mk-pack %llu, merging %llu)",
				 mem_arg,
				 (unsigned long long)(bs.stages + bs.merge + bs.fetch + bs.pack),
				 (unsigned long long)bs.stages, (unsigned long long)bs.fetch, (unsigned long long)bs.pack,
				 (unsigned long long)bs.merge);
	}
	if (argc - optind != 2)
		cli_usage_error(argc - optind < 2 ? "expected CONFIG and OUT" : "too many arguments");
	const char *config = argv[optind], *out = argv[optind + 1];
	/* mk-pack builds in OUT.mk-partial */
	static char *partial;
	if (!(partial = mk_out_partial_name(out)))
		cli_fail_oom();
	if (!print && !procs) {
		ro.out_dir = out;
		return run_here(&ro, config, partial, plugins, nplugins, quiet);
	}
	stage_args(&ro, plugins, nplugins);
	if (resume) {
		cli_argv_push(&fetch, "--skip-done");
		cli_argv_push(&fetch, partial);
		cli_argv_push(&pack, "--resume");
	}
	cli_argv_push(&plan, "--name");
	cli_argv_push(&plan, mk_card_title(out));
	cli_argv_push(&plan, config);
	if (quiet)
		cli_argv_push(&pack, "--no-progress");
	cli_argv_push(&pack, out);
	struct mk_stage st[4] = { { "mk-plan", plan.v }, { "mk-fetch", fetch.v }, { "mk-merge", merge.v },
				  { "mk-pack", pack.v } };
	if (print) {
		char *s = mk_pipeline_format(st, 4);
		printf("%s\n", s ? s : "");
		free(s);
		cli_close_stdout();
		return EXIT_OK;
	}
	/* refuse an existing OUT before any work, as mk-pack would */
	struct mk_err err = { 0 };
	struct mk_pack_opts po = { .out_dir = out, .resume = resume, .force = ro.force, .resumable = true };
	struct mk_out_lock lock;
	/* OUT locked for the whole run, its stages inheriting the lock */
	if (mk_out_lock(out, &lock, &err) || mk_out_lock_share(&lock, &err) || mk_pack_check_out(&po, &lock, &err) ||
	    /* with --resume, a failed run leaves OUT.mk-partial for the next */
	    mk_pipeline_run(st, 4, resume ? NULL : partial, &err)) {
		mk_out_unlock(&lock);
		cli_fail(&err);
	}
	mk_out_unlock(&lock);
	cli_info(3, "wrote %s", out);
	return EXIT_OK;
}
