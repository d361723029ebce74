/* mk-merge - run each job's merge method over its input chunks. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "mk/plugin.h"
#include "core/fsutil.h"
#include "cuda/cuda.h"
#include "merge/merge.h"
#include "mk/run.h"
#include "mk/method.h"

static void usage(void)
{
	printf("Usage: %s [OPTION]...\n"
	       "Read an 'inputs' stream (mk-plan | mk-fetch) and write a 'tensors' stream (for\n"
	       "mk-pack): each output tensor merged by its job's method, chunk by chunk.\n"
	       "mk-merge never opens model files; the config, tokenizer and card files pass\n"
	       "through.\n"
	       "\n"
	       "  -i, --input FILE       read the stream from FILE ('-': standard input, the default)\n"
	       "  -o, --output FILE      write the stream to FILE ('-': standard output, the default)\n"
	       "  -z, --compress[=LEVEL] zstd-compress each output frame (level 1..19, default 3)\n"
	       "      --list-methods     list the merge methods and their parameters, and exit\n"
	       "      --plugin FILE.so   load merge methods from a shared object (also MK_PLUGIN_PATH)\n"
	       "      --max-memory SIZE  refuse jobs the plan holds in memory that need more\n"
	       "      --spill DIR        replay the jobs the plan spills (mk-plan --spill) from a\n"
	       "                         file in DIR instead of having their inputs sent again\n"
	       "      --strict           fail when an output tensor holds NaN or infinite values\n"
	       "                         its inputs did not (by default: a warning naming it)\n"
	       "      --cuda             apply float32 jobs of linear, slerp and the task arithmetic\n"
	       "                         family on the GPU (without one: a note, then the CPU;\n"
	       "                         with --strict: an error)\n"
	       "  -j, --jobs N           worker threads (default: the number of CPUs, at most 8)\n"
	       "  -f, --force            write the binary stream even to a terminal\n"
	       "      --progress         draw progress on stderr (--no-progress: never)\n"
	       "  -v, --verbose          say more; -q, --quiet: say less\n"
	       "  -h, --help             show this help and exit\n"
	       "  -V, --version          show the version and exit\n"
	       "\n"
	       "Exit status: 0 success, 1 failure, 2 usage error.  See mk-merge(1).\n",
	       cli_prog);
	exit(EXIT_OK);
}

static const char *scope_name(enum mk_param_scope s)
{
	return s == MK_SCOPE_GLOBAL ? "global" : s == MK_SCOPE_PER_INPUT ? "per-input" : "per-non-base";
}

static const char *type_name(enum mk_param_type t)
{
	return t == MK_PT_FLOAT ? "float" : t == MK_PT_INT ? "int" : "bool";
}

static void list_methods(void)
{
	static const char *const base[] = { "ignored", "optional", "required", "forbidden" };

	for (size_t i = 0; i < mk_method_count(); i++) {
		const struct mk_method *m = mk_method_at(i);
		printf("%s\t%s\tbase %s, inputs %u..", m->name, m->pretty_name ? m->pretty_name : m->name,
		       base[m->contract.base], m->contract.min_inputs);
		if (m->contract.max_inputs == MK_ARITY_ANY)
			printf("any");
		else
			printf("%u", m->contract.max_inputs);
		printf("%s%s\n", m->reference_url ? ", " : "", m->reference_url ? m->reference_url : "");
		for (size_t p = 0; p < m->nparams; p++) {
			const struct mk_param_spec *ps = &m->params[p];
			printf("\t%s\t%s %s", ps->name, scope_name(ps->scope), type_name(ps->type));
			if (ps->flags & MK_PF_REQUIRED)
				printf(", required");
			else if (ps->def.set && ps->def.type == MK_PT_BOOL)
				printf(", default %s", ps->def.b ? "true" : "false");
			else if (ps->def.set)
				printf(", default %g", ps->def.type == MK_PT_FLOAT ? ps->def.f : (double)ps->def.i);
			if (ps->flags & MK_PF_MIN)
				printf(", %s %g", ps->flags & MK_PF_MIN_EXCL ? ">" : ">=", ps->min);
			if (ps->flags & MK_PF_MAX)
				printf(", %s %g", ps->flags & MK_PF_MAX_EXCL ? "<" : "<=", ps->max);
			printf("\n");
		}
	}
	cli_close_stdout();
	exit(EXIT_OK);
}

static void on_progress(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	cli_progress("mk-merge", done, total, done, total);
}

static void warn(void *ctx, const char *msg)
{
	(void)ctx;
	cli_info(2, "warning: %s", msg);
}

int main(int argc, char **argv)
{
	enum { O_LIST = 256, O_CUDA, O_MEM, O_SPILL, O_STRICT };
	static const struct option longopts[] = {
		CLI_PLUGIN_OPTION,
		{ "input", required_argument, NULL, 'i' },
		{ "output", required_argument, NULL, 'o' },
		{ "compress", optional_argument, NULL, 'z' },
		{ "list-methods", no_argument, NULL, O_LIST },
		{ "cuda", no_argument, NULL, O_CUDA },
		{ "max-memory", required_argument, NULL, O_MEM },
		{ "spill", required_argument, NULL, O_SPILL },
		{ "strict", no_argument, NULL, O_STRICT },
		{ "jobs", required_argument, NULL, 'j' },
		{ "force", no_argument, NULL, 'f' },
		CLI_PROGRESS_OPTIONS,
		CLI_COMMON_OPTIONS,
		CLI_STAGE_FED_OPTION,
		{ 0 },
	};
	struct mk_merge_opts o = { .warn = warn };
	struct mk_merge_stats st;
	struct mk_err err = { 0 };
	const char *input = "-", *output = "-";
	bool force = false, cuda = false;
	int want_progress = 0, c, in_fd = 0, out_fd = 1;
	uint64_t v;

	cli_init("mk-merge");
	o.threads = mk_merge_default_threads();
	if (mk_plugin_load_env(&err))
		cli_fail(&err);
	while ((c = getopt_long(argc, argv, "i:o:z::j:fvqhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'i': input = optarg; break;
		case 'o': output = optarg; break;
		case 'z': o.compress_level = cli_compress_level(optarg); break;
		case O_LIST: list_methods(); break;
		case O_CUDA: cuda = true; break;
		case O_MEM:
			if (mk_size_parse(optarg, &v))
				cli_usage_error("--max-memory: expected a size, not '%s'", optarg);
			o.budget = v;
			break;
		case O_SPILL: o.spill_dir = optarg; break;
		case O_STRICT: o.strict = true; break;
		case 'j':
			if (mk_size_parse(optarg, &v) || v < 1 || v > 64)
				cli_usage_error("--jobs: expected 1..64, not '%s'", optarg);
			o.threads = (unsigned)v;
			break;
		case 'f': force = true; break;
		default: cli_common_option(c, optarg, &want_progress, usage);
		}
	}
	if (optind < argc)
		cli_usage_error("unexpected argument '%s'", argv[optind]);
	struct mk_cuda_ctx *cx = NULL;
	if (cuda) {
		/* MK_CUDA_EMULATE=1: the GPU kernels' element code on the host,
		 * through the same batching (for tests without a GPU) */
		struct mk_cuda_opts co = { .emulate = mk_cuda_emulate_requested() };
		struct mk_err cerr = { 0 };
		if (mk_cuda_open(&cx, &co, &cerr)) {
			if (o.strict) {
				mk_err_prefix(&cerr, "--cuda (with --strict): ");
				cli_fail(&cerr);
			}
			cli_info(2, "note: --cuda: %s; merging on the CPU", cerr.msg);
			cx = NULL;
		} else {
			cli_info(3, "--cuda: %s", mk_cuda_describe(cx));
		}
		o.cuda = cx;
	}
	in_fd = cli_open_input(input);
	out_fd = cli_open_output(output, force);
	if (cli_progress_enabled(want_progress ? 1 : 0))
		o.progress = on_progress;
	if (mk_merge_run(&o, mk_io_fd(in_fd), in_fd ? input : "stdin", mk_io_fd(out_fd), &st, &err)) {
		if (out_fd != 1)
			cli_discard_output(out_fd, output);
		cli_fail(&err);
	}
	cli_progress_end();
	cli_close_output(out_fd, output);
	cli_info(3, "%llu jobs (%llu byte copies, %llu statistics passes added), %llu chunks in, %llu out, %llu bytes out",
		 (unsigned long long)st.jobs, (unsigned long long)st.byte_copies, (unsigned long long)st.passes_added,
		 (unsigned long long)st.chunks_in,
		 (unsigned long long)st.chunks_out, (unsigned long long)st.bytes_out);
	if (o.spill_dir)
		cli_info(3, "spill: at most %llu bytes for one job", (unsigned long long)st.spill_bytes_max);
	if (cx) {
		struct mk_cuda_stats cs;
		mk_cuda_get_stats(cx, &cs);
		cli_info(3, "--cuda: %llu of %llu jobs on the GPU, %llu chunks in %llu launches, %llu bytes in, %llu out",
			 (unsigned long long)st.gpu_jobs, (unsigned long long)st.jobs, (unsigned long long)cs.submits,
			 (unsigned long long)cs.launches, (unsigned long long)cs.bytes_in,
			 (unsigned long long)cs.bytes_out);
		mk_cuda_close(cx);
	}
	return EXIT_OK;
}
