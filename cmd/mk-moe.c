/* mk-moe - dense models -> a mixture-of-experts model (mergekit-moe's
 * configuration): mk_moe_plan writes the plan, mk-fetch | mk-merge |
 * mk-pack build OUT from it a chunk at a time. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "mk/budget.h"
#include "mk/fsutil.h"
#include "mk/moe.h"
#include "mk/pack.h"
#include "mk/pipeline.h"

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
	       "  --random-seed N           seed of the random gates (default 0)\n"
	       "  --copy-tokenizer          copy the base model's tokenizer files (the default);\n"
	       "  --no-copy-tokenizer       do not\n"
	       "  --write-model-card        write mergekit_moe_config.yml (the default);\n"
	       "  --no-write-model-card     do not\n"
	       "  --i-understand-this-is-not-useful-without-training\n"
	       "                            allow experts that are all the same model\n"
	       "  --force                   replace an existing OUT\n"
	       "  --cuda / --no-cuda        the hidden gates' forward pass: matrix products on\n"
	       "                            the GPU (without one: a warning, the CPU)\n"
	       "  -j, --num-threads N       mk-merge worker threads\n"
	       "  --print-pipeline          plan, print the stages' command line and exit (the\n"
	       "                            plan's work directory is kept for it; remove it after)\n"
	       "  -q, --quiet               say less; -v, --verbose: say more\n"
	       "  -h, --help                show this help and exit\n"
	       "  -V, --version             show the version and exit\n"
	       "mergekit-moe's --load-in-4bit, --load-in-8bit, --device, --lazy-unpickle and\n"
	       "the like are accepted with a note.\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-moe(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static struct cli_argv fetch, merge, pack;

static void push(struct cli_argv *a, const char *s)
{
	cli_argv_push(a, s);
}

static void on_note(void *ctx, const char *msg)
{
	(void)ctx;
	if (!strncmp(msg, "warning: ", 9))
		cli_message("warning", msg + 9);
	else
		cli_info(3, "%s", msg);
}

static char work[PATH_MAX];

static void rm_work(void)
{
	char p[PATH_MAX + 32];
	const char *names[] = { "model.safetensors", "config.json", "plan" };
	if (!work[0])
		return;
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", work, names[i]);
		unlink(p);
	}
	rmdir(work);
}

int main(int argc, char **argv)
{
	enum { O_MEM = 256, O_SHARD, O_SEED, O_COPY, O_NOCOPY, O_CARD, O_NOCARD, O_SAME, O_FORCE, O_PRINT,
	       O_IGN0, O_IGN1, O_CUDA, O_NOCUDA };
	static const struct option lo[] = {
		{ "max-memory", 1, 0, O_MEM }, { "out-shard-size", 1, 0, O_SHARD }, { "random-seed", 1, 0, O_SEED },
		{ "copy-tokenizer", 0, 0, O_COPY }, { "no-copy-tokenizer", 0, 0, O_NOCOPY },
		{ "write-model-card", 0, 0, O_CARD }, { "no-write-model-card", 0, 0, O_NOCARD },
		{ "i-understand-this-is-not-useful-without-training", 0, 0, O_SAME },
		{ "force", 0, 0, O_FORCE }, { "num-threads", 1, 0, 'j' }, { "print-pipeline", 0, 0, O_PRINT },
		{ "quiet", 0, 0, 'q' }, { "verbose", 0, 0, 'v' }, { "help", 0, 0, 'h' }, { "version", 0, 0, 'V' },
		{ "load-in-4bit", 0, 0, O_IGN0 }, { "load-in-8bit", 0, 0, O_IGN0 },
		{ "lazy-unpickle", 0, 0, O_IGN0 }, { "no-lazy-unpickle", 0, 0, O_IGN0 },
		{ "low-cpu-memory", 0, 0, O_IGN0 }, { "clone-tensors", 0, 0, O_IGN0 },
		{ "trust-remote-code", 0, 0, O_IGN0 }, { "cuda", 0, 0, O_CUDA }, { "no-cuda", 0, 0, O_NOCUDA },
		{ "safe-serialization", 0, 0, O_IGN0 }, { "async-write", 0, 0, O_IGN0 },
		{ "allow-crimes", 0, 0, O_IGN0 }, { "device", 1, 0, O_IGN1 }, { "write-threads", 1, 0, O_IGN1 },
		{ 0 },
	};
	struct mk_moe_opts mo = { .copy_tokenizer = true, .write_card = true, .note = on_note };
	struct mk_err err = { 0 };
	bool print = false, quiet = false;
	int c, li = 0;
	uint64_t v;

	cli_init("mk-moe");
	char *p;
	push(&fetch, p = cli_stage_path("mk-fetch"));
	free(p);
	push(&merge, p = cli_stage_path("mk-merge"));
	free(p);
	push(&pack, p = cli_stage_path("mk-pack"));
	free(p);
	while ((c = getopt_long(argc, argv, "j:qvhV", lo, &li)) != -1) {
		switch (c) {
		case O_MEM: {
			if (mk_size_parse(optarg, &v))
				cli_usage_error("--max-memory: expected a size, not '%s'", optarg);
			/* the base model's forward pass (hidden gates) runs here
			 * before the stages start: the budget less this process */
			mo.max_memory = v > MK_BUDGET_STAGE_BASE ? v - MK_BUDGET_STAGE_BASE : 1;
			cli_argv_push_budget(v, NULL, &fetch, &merge, &pack);
			break;
		}
		case O_SHARD:
			if (mk_size_parse(optarg, &v))
				cli_usage_error("--out-shard-size: expected a size like 5B, 200K or 64MiB, not '%s'", optarg);
			push(&pack, "--out-shard-size");
			push(&pack, optarg);
			break;
		case O_SEED:
			if (mk_size_parse(optarg, &v))
				cli_usage_error("--random-seed: expected a non-negative integer, not '%s'", optarg);
			mo.seed = v;
			break;
		case O_COPY: mo.copy_tokenizer = true; break;
		case O_NOCOPY: mo.copy_tokenizer = false; break;
		case O_CARD: mo.write_card = true; break;
		case O_NOCARD: mo.write_card = false; break;
		case O_SAME: mo.allow_all_same = true; break;
		case O_FORCE: push(&pack, "--force"); break;
		case O_PRINT: print = true; break;
		case O_CUDA: mo.cuda = true; break;
		case O_NOCUDA: mo.cuda = false; break;
		case 'j':
			if (mk_size_parse(optarg, &v) || v < 1)
				cli_usage_error("--num-threads: expected a positive integer, not '%s'", optarg);
			push(&merge, "-j");
			push(&merge, optarg);
			break;
		case 'q': quiet = true; cli_verbose = 1; break;
		case 'v': cli_verbose++; break;
		case O_IGN0:
		case O_IGN1: cli_info(2, "note: --%s means nothing to mk-moe; ignored", lo[li].name); break;
		case 'h': usage(); break;
		case 'V': cli_version(); break;
		default: cli_usage_hint();
		}
	}
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

	struct mk_pack_opts po = { .out_dir = out };
	for (size_t i = 0; i < pack.n; i++)
		if (!strcmp(pack.v[i], "--force"))
			po.force = true;
	if (!print && mk_pack_check_out(&po, &err))
		cli_fail(&err);
	const char *tmp = getenv("TMPDIR");
	if ((size_t)snprintf(work, sizeof(work), "%s/mk-moe.XXXXXX", tmp && *tmp ? tmp : "/tmp") >= sizeof(work))
	{
		mk_err_set(&err, MK_EINVAL, "TMPDIR '%s' is too long for mk-moe's work directory (%zu bytes at most)", tmp,
			   sizeof(work) - 16);
		cli_fail(&err);
	}
	if (!mkdtemp(work)) {
		mk_err_sys(&err, errno, "%s", work);
		work[0] = '\0';
		cli_fail(&err);
	}
	atexit(rm_work);
	mo.work_dir = work;
	char planpath[sizeof(work) + 8];
	snprintf(planpath, sizeof(planpath), "%s/plan", work);
	int fd = open(planpath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		mk_err_sys(&err, errno, "%s", planpath);
		cli_fail(&err);
	}
	enum mk_moe_arch arch;
	int rc = mk_moe_plan(&mo, fd, &arch, &err);
	if (close(fd) && !rc)
		rc = mk_err_sys(&err, errno, "%s", planpath);
	mk_moe_config_free(cfg);
	if (rc)
		cli_fail(&err);
	push(&fetch, "-i");
	push(&fetch, planpath);
	if (quiet)
		push(&pack, "--no-progress");
	push(&pack, out);
	struct mk_stage st[3] = { { "mk-fetch", fetch.v }, { "mk-merge", merge.v }, { "mk-pack", pack.v } };
	if (print) {   /* the plan stays, for the printed command to read */
		work[0] = '\0';
		char *s = mk_pipeline_format(st, 3);
		printf("%s\n", s ? s : "");
		free(s);
		cli_close_stdout();
		return EXIT_OK;
	}
	char *partial = mk_pack_partial_name(out);
	if (!partial)
		cli_fail_oom();
	if (mk_pipeline_run(st, 3, partial, &err))
		cli_fail(&err);
	free(partial);
	cli_info(3, "wrote %s (%s)", out, mk_moe_arch_name(arch));
	return EXIT_OK;
}
