/* mk-plan - turn a mergekit YAML configuration into a plan stream. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "mk/plugin.h"
#include "card/card.h"
#include "core/fsutil.h"
#include "planner/planner.h"
#include "io/reader.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... CONFIG\n"
	       "Read a mergekit YAML configuration (CONFIG, or '-' for standard input) and\n"
	       "the metadata of its models, and write the plan (mk-stream(5)): the output\n"
	       "manifest, the output's config, tokenizer and card files, and one job per\n"
	       "output tensor.  Every error that does not depend on tensor values is\n"
	       "reported here, all of them, before a weight byte is read.\n"
	       "\n"
	       "  -o, --output FILE        write the plan to FILE ('-': standard output, the default)\n"
	       "      --explain            print the plan in words instead\n"
	       "      --name NAME          the model card's title (default: Untitled Model (1))\n"
	       "      --allow-crimes       allow mixing architectures\n"
	       "      --plugin FILE.so     load merge methods from a shared object (also MK_PLUGIN_PATH)\n"
	       "      --copy-tokenizer     copy the donor's tokenizer files (default)\n"
	       "      --no-copy-tokenizer  do not\n"
	       "      --write-model-card   write README.md and mergekit_config.yml (default)\n"
	       "      --no-write-model-card  do not\n"
	       "      --random-seed N      seed for the random methods (default 0)\n"
	       "      --max-memory SIZE    the merge memory budget recorded in the plan\n"
	       "      --spill              jobs over the budget are sent once; mk-merge --spill DIR\n"
	       "                           replays their statistics passes from a local file\n"
	       "      --lora-merge-dtype D a BASE+ADAPTER model's weights are loaded as D (bfloat16,\n"
	       "                           float16, float32) where the configuration sets no dtype\n"
	       "      --unsafe-truncate-embeddings  without a tokenizer source, cut the embeddings of\n"
	       "                           models whose vocabularies differ in size to the fewest\n"
	       "                           rows among them (--no-unsafe-truncate-embeddings: refuse)\n"
	       "      --state-dicts        the models are state-dict files, merged without an\n"
	       "                           architecture, as mk-pytorch(1) plans them\n"
	       "      --tensor-intersection, --tensor-union  with --state-dicts: a tensor some\n"
	       "                           files lack is left out, or merged from those that have it\n"
	       "  -f, --force              write the binary plan even to a terminal\n"
	       "  -v, --verbose            say more; -q, --quiet: say less (warnings too)\n"
	       "  -h, --help               show this help and exit\n"
	       "  -V, --version            show the version and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 a bad configuration or model, 2 usage error.\n"
	       "See mk-plan(1) and mk-config(5).\n",
	       cli_prog);
	exit(EXIT_OK);
}

int main(int argc, char **argv)
{
	enum { O_EXPLAIN = 256, O_NAME, O_CRIMES, O_COPY_TOK, O_NO_COPY_TOK, O_CARD, O_NO_CARD, O_SEED, O_MEM, O_SPILL, O_LORA_DT, O_RAW, O_INTER, O_UNION,
	       O_CUT_VOCAB, O_NO_CUT_VOCAB };
	static const struct option longopts[] = {
		CLI_PLUGIN_OPTION,
		{ "output", required_argument, NULL, 'o' },
		{ "explain", no_argument, NULL, O_EXPLAIN },
		{ "state-dicts", no_argument, NULL, O_RAW },
		{ "tensor-intersection", no_argument, NULL, O_INTER },
		{ "tensor-union", no_argument, NULL, O_UNION },
		{ "name", required_argument, NULL, O_NAME },
		{ "allow-crimes", no_argument, NULL, O_CRIMES },
		{ "copy-tokenizer", no_argument, NULL, O_COPY_TOK },
		{ "no-copy-tokenizer", no_argument, NULL, O_NO_COPY_TOK },
		{ "write-model-card", no_argument, NULL, O_CARD },
		{ "no-write-model-card", no_argument, NULL, O_NO_CARD },
		{ "random-seed", required_argument, NULL, O_SEED },
		{ "max-memory", required_argument, NULL, O_MEM },
		{ "spill", no_argument, NULL, O_SPILL },
		{ "lora-merge-dtype", required_argument, NULL, O_LORA_DT },
		{ "unsafe-truncate-embeddings", no_argument, NULL, O_CUT_VOCAB },
		{ "no-unsafe-truncate-embeddings", no_argument, NULL, O_NO_CUT_VOCAB },
		{ "force", no_argument, NULL, 'f' },
		CLI_COMMON_OPTIONS,
		{ 0 },
	};
	struct mk_plan_opts o = { .copy_tokenizer = true, .write_card = true };
	struct mk_plan *plan = NULL;
	struct mk_diags d;
	struct mk_err err = { 0 };
	const char *output = "-";
	bool explain = false, force = false;
	uint8_t *text = NULL;
	size_t len = 0;
	int c, fd = 1, rc;

	cli_init("mk-plan");
	cli_hub_progress(-1);
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "o:fvqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case O_EXPLAIN: explain = true; break;
		case O_RAW: o.raw = true; break;
		case O_INTER:
		case O_UNION:
			if (o.raw_missing != MK_RAW_MISSING_ERROR &&
			    o.raw_missing != (c == O_INTER ? MK_RAW_MISSING_SKIP : MK_RAW_MISSING_MERGE))
				cli_usage_error("--tensor-intersection and --tensor-union exclude each other");
			o.raw_missing = c == O_INTER ? MK_RAW_MISSING_SKIP : MK_RAW_MISSING_MERGE;
			break;
		case O_NAME: o.out_name = optarg; break;
		case O_CRIMES: o.allow_crimes = true; break;
		case O_COPY_TOK: o.copy_tokenizer = true; break;
		case O_NO_COPY_TOK: o.copy_tokenizer = false; break;
		case O_CUT_VOCAB: o.unsafe_truncate_embeddings = true; break;
		case O_NO_CUT_VOCAB: o.unsafe_truncate_embeddings = false; break;
		case O_CARD: o.write_card = true; break;
		case O_NO_CARD: o.write_card = false; break;
		case O_SEED:
			if (mk_size_parse(optarg, &o.seed))
				cli_usage_error("--random-seed: expected a non-negative integer, not '%s'", optarg);
			break;
		case O_SPILL:
			o.spill = true;
			break;
		case O_LORA_DT:
			if (mk_config_dtype_parse(optarg, &o.lora_dtype, NULL, NULL) || !mk_dtype_is_float(o.lora_dtype))
				cli_usage_error("--lora-merge-dtype: expected a float dtype (bfloat16, float16, float32), not '%s'",
						optarg);
			o.has_lora_dtype = true;
			break;
		case O_MEM:
			if (mk_size_parse(optarg, &o.budget))
				cli_usage_error("--max-memory: expected a size like 8G or 512MiB, not '%s'", optarg);
			break;
		case 'f': force = true; break;
		default: cli_common_option(c, optarg, NULL, usage);
		}
	}
	if (optind + 1 != argc)
		cli_usage_error(optind == argc ? "missing CONFIG (a mergekit YAML file)" : "too many arguments");
	if (o.raw_missing != MK_RAW_MISSING_ERROR && !o.raw)
		cli_usage_error("--tensor-intersection and --tensor-union go with --state-dicts");
	o.label = cli_read_config(argv[optind], &text, &len);
	o.text = (const char *)text;
	o.len = len;
	if (!explain && !strcmp(output, "-"))
		cli_check_binary_out(1, force);
	rc = mk_plan_build(&o, &plan, &d, &err);
	cli_print_diags(&d);
	if (rc) {
		if (!d.nerrors)
			cli_fail(&err);
		mk_diags_free(&d);
		exit(EXIT_FAIL);
	}
	mk_diags_free(&d);
	if (explain) {
		char *s;
		if (mk_plan_explain(plan, &s, &err))
			cli_fail(&err);
		fputs(s, stdout);
		free(s);
		cli_close_stdout();
	} else {
		if (strcmp(output, "-")) {
			fd = cli_open_write(output);
			/* -o /dev/stdout, -o /dev/tty: the same refusal as for '-' */
			cli_check_binary_out(fd, force);
		}
		if (mk_plan_write(plan, mk_io_fd(fd), 0, &err)) {
			if (fd != 1)
				cli_discard_output(fd, output);
			cli_fail(&err);
		}
		cli_close_output(fd, output);
	}
	mk_plan_free(plan);
	free(text);
	return EXIT_OK;
}
