/* mk-run - a whole merge through the library call mk_run_merge (mk/run.h),
 * for the tests: what `mk-yaml CONFIG OUT` does, in this process.
 *
 *   mk-run [--max-memory SIZE] [--out-shard-size SIZE] [--no-copy-tokenizer]
 *          [--no-write-model-card] [--random-seed N] [-j N] [--force]
 *          [--resume] [--validate] [--cancel-after N] CONFIG OUT
 *
 * --parsed: the configuration parsed first (mk_config_parse) and given
 * as such.  --validate: mk_validate_config only.  --cancel-after N: set the cancel
 * flag once the progress callback has seen N tensors written.  Prints the
 * diagnostics and "tensors N" (the last progress count) to stderr; exit
 * 0, or 1 with the error. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "config/config.h"
#include "mk/run.h"

static volatile int cancel;
static size_t cancel_after, last_tensors;

static void on_progress(void *ctx, uint64_t done, uint64_t total, size_t tensors_done, size_t ntensors)
{
	(void)ctx;
	(void)done;
	(void)total;
	(void)ntensors;
	last_tensors = tensors_done;
	if (cancel_after && tensors_done >= cancel_after)
		cancel = 1;
}

int main(int argc, char **argv)
{
	enum { O_MEM = 256, O_SHARD, O_NOTOK, O_NOCARD, O_SEED, O_FORCE, O_RESUME, O_VALIDATE, O_CANCEL, O_PARSED };
	static const struct option lo[] = {
		{ "max-memory", 1, 0, O_MEM }, { "out-shard-size", 1, 0, O_SHARD },
		{ "no-copy-tokenizer", 0, 0, O_NOTOK }, { "no-write-model-card", 0, 0, O_NOCARD },
		{ "random-seed", 1, 0, O_SEED }, { "force", 0, 0, O_FORCE }, { "resume", 0, 0, O_RESUME },
		{ "validate", 0, 0, O_VALIDATE }, { "cancel-after", 1, 0, O_CANCEL }, { "parsed", 0, 0, O_PARSED }, { 0 },
	};
	struct mk_run_opts o = { .progress = on_progress, .cancel = &cancel };
	struct mk_diags d = { 0 };
	struct mk_err err = { 0 };
	bool validate = false, parsed = false;
	struct mk_config *cfg = NULL;
	uint64_t v;
	int c, rc;

	while ((c = getopt_long(argc, argv, "j:", lo, NULL)) != -1) {
		switch (c) {
		case O_MEM: if (mk_size_parse(optarg, &o.max_memory)) return 2; break;
		case O_SHARD: if (mk_size_parse(optarg, &o.out_shard_size)) return 2; break;
		case O_NOTOK: o.no_copy_tokenizer = true; break;
		case O_NOCARD: o.no_model_card = true; break;
		case O_SEED: if (mk_size_parse(optarg, &o.seed)) return 2; break;
		case 'j': if (mk_size_parse(optarg, &v) || !v) return 2; o.threads = (unsigned)v; break;
		case O_FORCE: o.force = true; break;
		case O_RESUME: o.resume = true; break;
		case O_VALIDATE: validate = true; break;
		case O_CANCEL: if (mk_size_parse(optarg, &v)) return 2; cancel_after = (size_t)v; break;
		case O_PARSED: parsed = true; break;
		default: return 2;
		}
	}
	if (argc - optind != (validate ? 1 : 2)) {
		fprintf(stderr, "usage: mk-run [OPTION]... CONFIG OUT\n");
		return 2;
	}
	o.config_path = argv[optind];
	o.out_dir = validate ? NULL : argv[optind + 1];
	if (parsed) {            /* an already-parsed configuration */
		uint8_t *text;
		size_t len;
		if (mk_file_read(argv[optind], 64u << 20, &text, &len, &err) ||
		    mk_config_parse((const char *)text, len, argv[optind], &cfg, &d, &err)) {
			fprintf(stderr, "mk-run: error: %s\n", err.msg);
			return 1;
		}
		free(text);
		mk_diags_free(&d);
		o.config = cfg;
		o.config_path = NULL;
	}
	rc = validate ? mk_validate_config(&o, &d, &err) : mk_run_merge(&o, &d, &err);
	for (size_t i = 0; i < d.n; i++) {
		char line[2048];
		mk_diag_format(&d, &d.v[i], line, sizeof(line));
		fprintf(stderr, "mk-run: %s: %s\n", d.v[i].level == MK_DIAG_ERROR ? "error" : "warning", line);
	}
	mk_diags_free(&d);
	mk_config_free(cfg);
	fprintf(stderr, "tensors %zu\n", last_tensors);
	if (rc) {
		fprintf(stderr, "mk-run: error: %s\n", err.msg);
		return 1;
	}
	return 0;
}
