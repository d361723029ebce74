/* mk-multi - run a recipe of merges, the later ones reading the earlier
 * ones' outputs, like mergekit-multi (mk_multi_parse, mk_multi_run). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"
#include "core/fsutil.h"
#include "multi/multi.h"
#include "run/multi_steps.h"
#include "mk/plugin.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... CONFIG --intermediate-dir DIR [--out-path OUT]\n"
	       "Run the merges of a multi-document YAML recipe, as mergekit-multi does: each\n"
	       "document a merge configuration with a 'name' (its output goes to DIR/NAME);\n"
	       "at most one without, the final merge (to OUT).  A model named as a merge is\n"
	       "that merge's output; the merges run after those they read.\n"
	       "\n"
	       "  -I, --intermediate-dir DIR  where the named merges go (made if missing)\n"
	       "  --out-path OUT            where the unnamed merge goes\n"
	       "  --lazy / --no-lazy        skip a merge whose output is finished (default);\n"
	       "                            --no-lazy: every merge again, replacing its output\n"
	       "  --no-intermediates        stream a merge that one later merge reads into it,\n"
	       "                            without writing DIR/NAME, where that merge can take\n"
	       "                            it so (else it is written, and a note says why)\n"
	       "  --print-order             print the merges in the order they run, and exit\n"
	       "  --out-shard-size SIZE     shard size (default 5B)\n"
	       "  --copy-tokenizer / --no-copy-tokenizer      (default on)\n"
	       "  --write-model-card / --no-write-model-card  (default on)\n"
	       "  --allow-crimes            allow mixing architectures\n"
	       "  --unsafe-truncate-embeddings  without a tokenizer source, merge vocabularies of\n"
	       "                            different sizes over their smallest\n"
	       "  --random-seed N           seed for random methods\n"
	       "  --cuda / --no-cuda        merge on the GPU where a kernel exists\n"
	       "  -j, --num-threads N       merge threads\n"
	       "  --max-memory SIZE         each merge's memory budget\n"
	       "  --spill DIR               jobs over the merge budget replayed from a file in DIR\n"
	       "  --plugin FILE.so          load merge methods from a shared object\n"
	       "  --transformers-cache DIR  the Hugging Face cache to find models in\n"
	       "  --remote, --no-cache      read Hub models' shards by range requests\n"
	       "  --lora-merge-dtype D      a BASE+ADAPTER model's weights are loaded as D\n"
	       "  --strict                  fail on an output that became NaN or infinite\n"
	       "  --buffered                write the outputs through the page cache, not O_DIRECT\n"
	       "  --quantize FORMAT         fp8 or mxfp4: each merge's weights its base model\n"
	       "                            stores in FORMAT written so again (mk-yaml --quantize)\n"
	       "  --quiet                   no progress\n"
	       "  -v, --verbose             say more\n"
	       "  -h, --help, -V, --version\n"
	       "mergekit options that mean nothing here are accepted with a note.  See mk-multi(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static void on_step(void *ctx, const struct mk_multi_step *s, size_t i, enum mk_multi_how how)
{
	struct mk_run_opts *o = ctx;

	o->progress_ctx = s->name ? s->name : "final";

	cli_progress_end();
	if (how == MK_MULTI_STREAMING)
		cli_info(3, "streaming '%s' (not written to %s)", s->name, s->out_dir);
	else if (how == MK_MULTI_NOT_NEEDED)
		cli_info(2, "skipped, not needed: '%s' (every merge reading it is there)", s->name);
	else
		cli_info(how == MK_MULTI_SKIPPED ? 2 : 3, "%s '%s' (%s)",
			 how == MK_MULTI_SKIPPED ? "skipped, already there:" : "merging", s->name ? s->name : "final",
			 s->out_dir);
	(void)i;
}

static void on_note(void *ctx, const char *msg)
{
	(void)ctx;
	cli_progress_end();
	cli_info(2, "%s", msg);
}

int main(int argc, char **argv)
{
	enum { O_OUT = 256, O_LAZY, O_NOLAZY, O_ORDER, O_NOINTER };
	static const struct option lo[] = {
		{ "intermediate-dir", 1, 0, 'I' }, { "out-path", 1, 0, O_OUT },
		{ "lazy", 0, 0, O_LAZY }, { "no-lazy", 0, 0, O_NOLAZY }, { "print-order", 0, 0, O_ORDER },
		{ "no-intermediates", 0, 0, O_NOINTER },
		{ "help", 0, 0, 'h' }, { "version", 0, 0, 'V' },
		CLI_RUN_OPTIONS,
		{ 0 },
	};
	/* a signal cancels the running merge (its OUT.mk-partial removed: a
	 * --lazy run makes it again) and ends mk-multi by that signal */
	struct mk_run_opts o = { .progress = cli_run_progress, .cancel = &cli_cancel };
	const char *dir = NULL, *out = NULL;
	bool lazy = true, quiet = false, print_order = false, stream = false;
	struct mk_multi *m = NULL;
	struct mk_diags d = { 0 };
	struct mk_err err = { 0 };
	uint8_t *text = NULL;
	size_t len = 0;
	int c, li = 0;

	cli_init("mk-multi");
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "I:j:vhV", lo, &li)) != -1) {
		if (cli_run_option(c == 'v' ? CLI_RUN_VERBOSE : c, optarg, lo[li].name, false, &o, &quiet))
			continue;
		switch (c) {
		case 'I': dir = optarg; break;
		case O_OUT: out = optarg; break;
		case O_LAZY: lazy = true; break;
		case O_NOLAZY: lazy = false; break;
		case O_ORDER: print_order = true; break;
		case O_NOINTER: stream = true; break;
		default: cli_common_option(c, optarg, NULL, usage);
		}
	}
	if (argc - optind != 1)
		cli_usage_error(argc - optind < 1 ? "expected CONFIG" : "too many arguments");
	if (!dir)
		cli_usage_error("--intermediate-dir (-I) is required");
	const char *label = argv[optind];
	label = cli_read_config(label, &text, &len);
	int rc = mk_multi_parse((const char *)text, len, label, dir, out, &m, &d, &err);
	cli_print_diags(&d);
	if (rc) {
		bool said = d.nerrors > 0;
		/* an unnamed merge without OUT is a usage error, as in mergekit-multi */
		bool usage_err = said && !out && d.nerrors == 1 && strstr(d.v[d.n - 1].msg, "--out-path");
		mk_diags_free(&d);
		free(text);
		if (usage_err)
			cli_usage_error("--out-path is required: the recipe has a merge without a name");
		if (said)
			exit(EXIT_FAIL);
		cli_fail(&err);
	}
	mk_diags_free(&d);
	if (print_order) {
		for (size_t i = 0; i < m->nsteps; i++)
			printf("%s\t%s\n", m->steps[i].name ? m->steps[i].name : "-", m->steps[i].out_dir);
		cli_close_stdout();
		mk_multi_free(m);
		free(text);
		return EXIT_OK;
	}
	if (mk_mkdirs_for(dir, &err))
		cli_fail(&err);
	if (mkdir(dir, 0777) && errno != EEXIST) {
		mk_err_sys(&err, errno, "%s", dir);
		cli_fail(&err);
	}
	cli_run_draw = !quiet && cli_progress_enabled(-1);
	cli_cancel_on_signals();
	o.progress_ctx = "mk-multi";
	struct mk_multi_run_opts ro = { .lazy = lazy, .stream = stream, .on_step = on_step, .on_note = on_note,
					.ctx = &o };
	rc = mk_multi_run(m, &o, &ro, &d, &err);
	cli_progress_end();
	cli_print_diags(&d);
	if (rc && cli_cancel)
		cli_exit_cancelled(NULL);
	if (rc) {
		bool said = d.nerrors > 0;
		mk_diags_free(&d);
		mk_multi_free(m);
		free(text);
		if (said)
			exit(EXIT_FAIL);
		cli_fail(&err);
	}
	mk_diags_free(&d);
	mk_multi_free(m);
	free(text);
	return EXIT_OK;
}
