/* mk-get - download Hugging Face Hub models into the Hugging Face cache. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "core/fsutil.h"
#include "hub/hub.h"
#include "io/model.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]... REF...\n"
	       "Download Hugging Face Hub models (REF: org/name[@revision]) into the Hugging Face\n"
	       "cache as a merge reads them: the top-level configuration, tokenizer and template\n"
	       "files and the weights (model.safetensors or its shards, else pytorch_model.bin\n"
	       "or its shards).  Print each model's snapshot directory.  A branch is always\n"
	       "asked for its newest commit (unless HF_HUB_OFFLINE=1); what the cache holds\n"
	       "already is not downloaded again, and an interrupted download is resumed.\n"
	       "\n"
	       "      --headers-only      only the files a plan needs: configuration, tokenizer,\n"
	       "                          index, and the shards' headers (read, not stored)\n"
	       "      --cache-dir DIR     the Hugging Face cache (HF_HUB_CACHE)\n"
	       "      --progress          draw progress on stderr (--no-progress: never)\n"
	       "  -v, --verbose          say more; -q, --quiet: less\n"
	       "  -h, --help             show this help and exit\n"
	       "  -V, --version          show the version and exit\n"
	       "\n"
	       "Environment: HF_ENDPOINT, HF_TOKEN (or HF_HOME/token), HF_HUB_OFFLINE,\n"
	       "HF_HUB_CACHE, HF_HOME, HF_HUB_DOWNLOAD_TIMEOUT; MK_HUB_PARALLEL, MK_HUB_RETRIES,\n"
	       "MK_HUB_STALL_S, MK_HUB_MIN_SPEED.\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-get(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

int main(int argc, char **argv)
{
	enum { O_HEADERS = 256, O_CACHE };
	static const struct option lo[] = {
		{ "headers-only", no_argument, NULL, O_HEADERS },
		{ "cache-dir", required_argument, NULL, O_CACHE },
		CLI_PROGRESS_OPTIONS,
		CLI_COMMON_OPTIONS,
		{ 0 },
	};
	struct mk_model_open_opts o = { .weights = MK_MODEL_DOWNLOAD, .refresh = true };
	int c, want = -1;

	cli_init("mk-get");
	while ((c = getopt_long(argc, argv, "vqhV", lo, NULL)) != -1) {
		switch (c) {
		case O_HEADERS: o.weights = MK_MODEL_HEADERS; break;
		case O_CACHE:
			if (!optarg[0])
				cli_usage_error("--cache-dir: expected a directory");
			if (setenv("HF_HUB_CACHE", optarg, 1))
				cli_fail_oom();
			break;
		default: cli_common_option(c, optarg, &want, usage);
		}
	}
	if (optind >= argc)
		cli_usage_error("expected at least one REF (org/name[@revision])");
	cli_hub_progress(want);
	for (int i = optind; i < argc; i++) {
		struct mk_err err = { 0 };
		struct mk_model *m = NULL;
		uint64_t before = mk_hub_bytes_received();
		char a[32];

		if (mk_model_open_with(argv[i], &o, &m, &err)) {
			/* no model weights: a PEFT adapter's, perhaps */
			struct mk_model_open_opts ao = o;
			struct mk_err e2 = { 0 };
			ao.adapter = true;
			ao.refresh = false;     /* the listing was just asked for */
			if (err.code != MK_ENOENT || mk_model_open_with(argv[i], &ao, &m, &e2))
				cli_fail(&err);
		}
		printf("%s\n", m->dir);
		cli_info(3, "%s: commit %s, %s received", argv[i], m->commit ? m->commit : "(local)",
			 mk_size_human(mk_hub_bytes_received() - before, a, sizeof(a)));
		mk_model_free(m);
	}
	cli_close_stdout();
	return EXIT_OK;
}
