/* mk-card - print the README.md model card of a merge configuration. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "mk/plugin.h"
#include "card/card.h"
#include "config/config.h"
#include "core/fsutil.h"
#include "mk/method.h"

static void usage(void)
{
	printf("Usage: %s [--name NAME] CONFIG\n"
	       "Print the README.md model card mergekit (and mk-yaml) writes for the merge\n"
	       "configuration CONFIG ('-': standard input): front matter, the method, the\n"
	       "models merged and the configuration.  No model is opened.\n"
	       "\n"
	       "      --name NAME  the card's title (default: Untitled Model (1); mk-yaml uses\n"
	       "                   the output directory's name)\n"
	       "  -h, --help       show this help and exit\n"
	       "      --plugin FILE.so  load merge methods from a shared object (also MK_PLUGIN_PATH)\n"
	       "  -V, --version    show the version and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 a bad configuration, 2 usage error.\n",
	       cli_prog);
	exit(EXIT_OK);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		CLI_PLUGIN_OPTION,
		{ "name", 1, 0, 'n' }, { "help", 0, 0, 'h' }, { "version", 0, 0, 'V' }, { 0 },
	};
	const char *name = NULL, *label;
	struct mk_config *cfg = NULL;
	struct mk_diags d;
	struct mk_err err = { 0 };
	uint8_t *text = NULL;
	size_t len = 0;
	int c;

	cli_init("mk-card");
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		switch (c) {
		case 'n': name = optarg; break;
		default: cli_common_option(c, optarg, NULL, usage);
		}
	}
	if (optind + 1 != argc)
		cli_usage_error(optind == argc ? "missing CONFIG" : "too many arguments");
	label = cli_read_config(argv[optind], &text, &len);
	int rc = mk_config_parse((const char *)text, len, label, &cfg, &d, &err);
	cli_print_diags(&d);
	mk_diags_free(&d);
	if (rc)
		exit(EXIT_FAIL);
	const struct mk_model_ref **refs;
	size_t n;
	if (mk_config_models(cfg, &refs, &n, &err))
		cli_fail(&err);
	const char **paths = calloc(n + 1, sizeof(*paths)), **loras = calloc(n + 1, sizeof(*loras));
	long base = -1;
	if (!paths || !loras)
		cli_fail_oom();
	for (size_t i = 0; i < n; i++) {
		paths[i] = refs[i]->model.path;
		loras[i] = refs[i]->lora.path;
		if (cfg->base_model && mk_model_ref_equal(refs[i], cfg->base_model))
			base = (long)i;
	}
	const struct mk_method *m = mk_method_find(cfg->merge_method);
	struct mk_card_input ci = { .name = name, .method = cfg->merge_method,
				    .pretty_name = m ? m->pretty_name : NULL,
				    .reference_url = m ? m->reference_url : NULL, .models = paths, .loras = loras,
				    .nmodels = n, .base_index = base, .config_text = cfg->text };
	char *card;
	if (mk_card_render(&ci, &card, &len, &err))
		cli_fail(&err);
	fwrite(card, 1, len, stdout);
	free(card);
	free(paths);
	free(loras);
	free(refs);
	mk_config_free(cfg);
	free(text);
	cli_close_stdout();
	return EXIT_OK;
}
