/* mk-extract-lora - a fine-tune and its base -> a PEFT LoRA adapter of
 * their difference (mergekit-extract-lora's options): mk_extract_plan
 * writes the plan, mk-fetch | mk-merge | mk-pack write its tensors into
 * a staging directory under OUT's lock, mk_extract_finish makes the
 * adapter of them, and OUT is put in place. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"
#include "core/budget.h"
#include "core/fsutil.h"
#include "extract/extract.h"
#include "journal/outlock.h"
#include "mk/diag.h"
#include "mk/run.h"
#include "pack/pack.h"
#include "planner/planner.h"
#include "run/procs.h"

static void usage(void)
{
	printf("Usage: %s --model FT --base-model BASE --out-path OUT [OPTION]...\n"
	       "Extract a PEFT LoRA adapter from a fine-tune FT and its base BASE: for each\n"
	       "matrix of the architecture, the difference FT - BASE factored by a truncated\n"
	       "SVD as B A; norms (and embeddings, without --embed-lora) saved whole as\n"
	       "modules_to_save; bias changes as lora_B.bias.  Writes OUT/adapter_model.safetensors,\n"
	       "adapter_config.json, README.md and extraction_report.json (each module's rank\n"
	       "and relative error).  FT and BASE are any model reference (a directory, a Hub\n"
	       "repository, BASE+ADAPTER).\n"
	       "\n"
	       "      --max-rank N            the most rank a module keeps (default 128)\n"
	       "      --sv-epsilon X          drop singular values at or below X (default 0)\n"
	       "      --energy F              the smallest rank keeping the fraction F of the\n"
	       "                              squared singular values (0 < F <= 1)\n"
	       "      --rel-sigma F           keep singular values of at least F times the largest\n"
	       "      --randomized            a randomized truncated SVD (fast; see mk-extract-lora(1))\n"
	       "      --oversample N          randomized: extra columns (default 16)\n"
	       "      --power-iters N         randomized: subspace iterations (default 2)\n"
	       "      --distribute-scale      sqrt(sigma) into A and B (the default);\n"
	       "      --no-distribute-scale   sigma into A alone\n"
	       "      --embed-lora            decompose the embeddings too (--no-embed-lora: save them)\n"
	       "      --skip-undecomposable   leave out what is not a matrix (norms) instead of saving it\n"
	       "  -i, --include-regex RE      decompose only modules RE finds (repeatable)\n"
	       "  -e, --exclude-regex RE      never modules RE finds (repeatable)\n"
	       "      --save-module NAME      save module NAME (or every module so named) whole\n"
	       "                              (repeatable)\n"
	       "      --max-memory SIZE       memory budget of the stages together (as mk-yaml);\n"
	       "                              a module whose SVD does not fit is refused\n"
	       "  -j, --num-threads N         mk-merge's worker threads\n"
	       "      --cuda / --no-cuda      the SVDs on the GPU (without one: a warning, the\n"
	       "                              CPU)\n"
	       "      --lora-merge-dtype DT   BASE+ADAPTER models merged in DT\n"
	       "      --transformers-cache DIR  the Hugging Face cache to find models in\n"
	       "      --force                 replace an existing OUT\n"
	       "      --print-pipeline        plan, print the stages' command line and exit\n"
	       "  -q, --quiet                 say less; -v, --verbose: say more\n"
	       "  -h, --help                  show this help and exit\n"
	       "  -V, --version               show the version and exit\n"
	       "--device cuda[:N] and --read-to-gpu are --cuda; mergekit-extract-lora's options\n"
	       "without meaning here (--no-lazy-unpickle, --trust-remote-code, ...) are\n"
	       "accepted with a note.\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-extract-lora(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static struct mk_argv fetch, merge, pack;

/* what main owns, freed at any exit (cli_fail exits from anywhere) */
static struct {
	struct mk_plan *plan;
	char *invocation, *partial, *stage;
	const char **inc, **exc, **save;
} own;

static void free_own(void)
{
	mk_plan_free(own.plan);
	free(own.invocation);
	free(own.partial);
	free(own.stage);
	free(own.inc);
	free(own.exc);
	free(own.save);
	mk_argv_free(&fetch);
	mk_argv_free(&merge);
	mk_argv_free(&pack);
}

/* The run options (CLI_RUN_OPTIONS) that mean nothing to an extraction:
 * noted and ignored. */
static bool run_option_ignored(int c)
{
	static const int ign[] = { CLI_RUN_CRIMES, CLI_RUN_NOCRIMES, CLI_RUN_SPILL, CLI_RUN_PLUGIN, CLI_RUN_TRUNC,
				   CLI_RUN_NOTRUNC, CLI_RUN_COPY, CLI_RUN_NOCOPY, CLI_RUN_CARD, CLI_RUN_NOCARD,
				   CLI_RUN_SHARD };
	for (size_t i = 0; i < sizeof(ign) / sizeof(*ign); i++)
		if (c == ign[i])
			return true;
	return false;
}

static void push_list(const char ***v, size_t *n, const char *s)
{
	const char **q = realloc(*v, (*n + 1) * sizeof(**v));
	if (!q)
		cli_fail_oom();
	q[(*n)++] = s;
	*v = q;
}

static double num_arg(const char *opt, const char *s, double lo, double hi)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !(v >= lo && v <= hi))
		cli_usage_error("%s: expected a number from %g to %g, not '%s'", opt, lo, hi, s);
	return v;
}

static unsigned uint_arg(const char *opt, const char *s, unsigned lo)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || errno || *s == '-' || v < lo || v > 0x7fffffffUL)
		cli_usage_error("%s: expected a whole number of at least %u, not '%s'", opt, lo, s);
	return (unsigned)v;
}

/* The command line, for the card: the words joined by spaces, as
 * mergekit writes sys.argv. */
static char *invocation(int argc, char **argv)
{
	size_t n = 1;
	for (int i = 0; i < argc; i++)
		n += strlen(argv[i]) + 1;
	char *s = malloc(n), *p = s;
	if (!s)
		cli_fail_oom();
	for (int i = 0; i < argc; i++)
		p += sprintf(p, "%s%s", i ? " " : "", argv[i]);
	*p = '\0';
	return s;
}

int main(int argc, char **argv)
{
	enum { O_MODEL = 256, O_BASE, O_OUT, O_RANK, O_EPS, O_ENERGY, O_RELSIG, O_RAND, O_OVER, O_POWER, O_DIST,
	       O_NODIST, O_EMBED, O_NOEMBED, O_SKIP, O_SAVE, O_FORCE, O_PRINT };
	static const struct option lo[] = {
		{ "model", 1, 0, O_MODEL }, { "base-model", 1, 0, O_BASE }, { "out-path", 1, 0, O_OUT },
		{ "max-rank", 1, 0, O_RANK }, { "sv-epsilon", 1, 0, O_EPS }, { "energy", 1, 0, O_ENERGY },
		{ "rel-sigma", 1, 0, O_RELSIG }, { "randomized", 0, 0, O_RAND }, { "oversample", 1, 0, O_OVER },
		{ "power-iters", 1, 0, O_POWER }, { "distribute-scale", 0, 0, O_DIST },
		{ "no-distribute-scale", 0, 0, O_NODIST }, { "embed-lora", 0, 0, O_EMBED },
		{ "no-embed-lora", 0, 0, O_NOEMBED }, { "skip-undecomposable", 0, 0, O_SKIP },
		{ "include-regex", 1, 0, 'i' }, { "exclude-regex", 1, 0, 'e' }, { "save-module", 1, 0, O_SAVE },
		{ "force", 0, 0, O_FORCE }, { "print-pipeline", 0, 0, O_PRINT },
		{ "help", 0, 0, 'h' }, { "version", 0, 0, 'V' },
		CLI_RUN_OPTIONS,
		{ 0 },
	};
	struct mk_extract_opts eo = { .max_rank = 128 };
	struct mk_run_opts ro = { 0 };
	struct mk_err err = { 0 };
	size_t ninc = 0, nexc = 0, nsave = 0;
	bool print = false, quiet = false;
	int c, li = 0;

	cli_init("mk-extract-lora");
	atexit(free_own);
	cli_stage_argvs(&fetch, &merge, &pack);
	while ((c = getopt_long(argc, argv, "i:e:j:qvhV", lo, &li)) != -1) {
		switch (c) {
		case O_MODEL: eo.model = optarg; break;
		case O_BASE: eo.base = optarg; break;
		case O_OUT: eo.out = optarg; break;
		case O_RANK: eo.max_rank = uint_arg("--max-rank", optarg, 1); break;
		case O_EPS: eo.sv_epsilon = num_arg("--sv-epsilon", optarg, 0, 1e300); break;
		case O_ENERGY: eo.energy = num_arg("--energy", optarg, 0, 1); break;
		case O_RELSIG: eo.rel_sigma = num_arg("--rel-sigma", optarg, 0, 1); break;
		case O_RAND: eo.randomized = true; break;
		case O_OVER: eo.oversample = uint_arg("--oversample", optarg, 1); break;
		case O_POWER: eo.power_iters = uint_arg("--power-iters", optarg, 0); break;
		case O_DIST: eo.no_distribute_scale = false; break;
		case O_NODIST: eo.no_distribute_scale = true; break;
		case O_EMBED: eo.sel.embed_lora = true; break;
		case O_NOEMBED: eo.sel.embed_lora = false; break;
		case O_SKIP: eo.sel.skip_undecomposable = true; break;
		case 'i': push_list(&own.inc, &ninc, optarg); break;
		case 'e': push_list(&own.exc, &nexc, optarg); break;
		case O_SAVE: push_list(&own.save, &nsave, optarg); break;
		case O_FORCE: ro.force = true; break;
		case O_PRINT: print = true; break;
		case 'h': usage(); break;
		case 'V': cli_version(); break;
		default:
			cli_run_option_take(c, optarg, lo[li].name, run_option_ignored(c), &ro, &quiet);
		}
	}
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	if (!eo.model || !eo.base || !eo.out)
		cli_usage_error("--model, --base-model and --out-path are required");
	if (!*eo.out)
		cli_usage_error("--out-path: empty");
	eo.sel.include = own.inc;
	eo.sel.ninclude = ninc;
	eo.sel.exclude = own.exc;
	eo.sel.nexclude = nexc;
	eo.sel.save = own.save;
	eo.sel.nsave = nsave;
	eo.has_lora_dtype = ro.has_lora_dtype;
	eo.lora_dtype = ro.lora_dtype;
	eo.invocation = own.invocation = invocation(argc, argv);
	eo.cuda = ro.cuda;
	if (ro.max_memory) {
		struct mk_budget_split sp;
		mk_budget_split(ro.max_memory, &sp);
		eo.budget = sp.merge;
	}
	cli_run_stage_args(&ro, NULL, &fetch, &merge, &pack);

	/* the plan: every error that does not depend on values, now */
	struct mk_plan *plan = NULL;
	struct mk_diags d;
	int rc = mk_extract_plan(&eo, &plan, &d, &err);
	own.plan = plan;
	cli_print_diags(&d);
	mk_diags_free(&d);
	if (rc)
		cli_fail(&err);

	struct mk_pack_opts po = { .out_dir = eo.out, .force = ro.force };
	if (!print && mk_pack_check_out(&po, NULL, &err))
		cli_fail(&err);
	static const char *const names[] = { "plan" };
	cli_work_dir(names, 1);
	const char *work_plan = cli_work_file(0);
	int fd = open(work_plan, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		mk_err_sys(&err, errno, "%s", work_plan);
		cli_fail(&err);
	}
	rc = mk_plan_write(plan, mk_io_fd(fd), 0, &err);
	if (close(fd) && !rc)
		rc = mk_err_sys(&err, errno, "%s", work_plan);
	if (rc)
		cli_fail(&err);

	/* the stages write the plan's tensors into OUT.mk-partial/adapter */
	char *partial = own.partial = mk_out_partial_name(eo.out), *stage = NULL;
	if (!partial || asprintf(&stage, "%s/adapter", partial) < 0)
		cli_fail_oom();
	own.stage = stage;
	cli_argv_push(&fetch, "-i");
	cli_argv_push(&fetch, work_plan);
	cli_argv_push(&pack, "--basename");
	cli_argv_push(&pack, "adapter_model");
	cli_argv_push(&pack, "--out-shard-size");
	cli_argv_push(&pack, "1000000000B");   /* one file, as mergekit writes it */
	cli_argv_push(&pack, "--force");
	if (quiet)
		cli_argv_push(&pack, "--no-progress");
	cli_argv_push(&pack, stage);
	struct mk_stage st[3] = { { "mk-fetch", fetch.v }, { "mk-merge", merge.v }, { "mk-pack", pack.v } };
	if (print)
		cli_print_pipeline(st, 3);
	cli_work_dir_on_signals();
	struct mk_out_lock lock;
	struct mk_extract_summary sum;
	char warning[1024] = "";
	if (mk_out_lock(eo.out, &lock, &err) || mk_pack_check_out(&po, &lock, &err) ||
	    (ro.force && mk_rmtree_contents(partial, &err)) || mk_out_lock_share(&lock, &err) ||
	    mk_pipeline_run(st, 3, NULL, &err) ||
	    mk_extract_finish(&eo, mk_plan_extract_info(plan), stage, ro.max_memory, &sum, &err) ||
	    mk_pack_put_in_place(stage, eo.out, ro.force, warning, sizeof(warning), &err)) {
		struct mk_err e2 = { 0 };
		mk_rmtree(stage, &e2);
		mk_out_unlock(&lock);
		cli_fail(&err);
	}
	mk_out_unlock(&lock);
	if (warning[0])
		cli_message("warning", warning);
	if (sum.biases_unapplied)
		cli_message("warning", "the bias changes (lora_B.bias) are written without lora_bias: PEFT refuses lora_bias "
				       "beside an embedding's LoRA, so PEFT and mk-yaml leave them out (without --embed-lora "
				       "they are applied)");
	cli_info(3, "wrote %s: %zu modules of rank up to %u (largest relative error %.3g, %s), %zu tensors saved whole%s",
		 eo.out, sum.modules, sum.r, sum.worst_error, sum.worst, sum.saved,
		 sum.zero ? "; modules that did not change left out" : "");
	return EXIT_OK;
}
