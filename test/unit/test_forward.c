/* test_forward.c - mk_forward's hidden states against transformers'.
 *
 * Every case of testdata/forward/cases is a small model mk-gen-model
 * makes (next to this test: ../tools/mk-gen-model); its reference
 * testdata/forward/NAME.safetensors holds the token ids, the attention
 * mask (three left-padded prompts, one right-padded) and the hidden states transformers 5
 * computed in float32 (scripts/forward-conformance makes them;
 * MK_FORWARD_REF=DIR reads them from DIR instead).
 *
 * Metric: per hidden state (each index of the tuple), max |mk - ref| <=
 * TOL * max |ref|, and the same for each token's vector alone.  Both sides compute in float32; they differ in the
 * order of sums (OpenBLAS's sgemm against PyTorch's kernels, softmax and
 * RMSNorm sums, which mk accumulates in double) and in the libm's cos,
 * sin, exp and pow, each a few float32 roundings (~1e-7 relative) per
 * operation, grown through two or three layers whose weights are scaled
 * so that attention is far from uniform.  TOL = 1e-5 leaves room for
 * that and is still 1000 times below what a wrong detail moves (the test
 * checks the linear rope case differs from the default one by more than
 * 100 * TOL: a wrong rope formula, mask or position would fail). */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "cuda/cuda.h"
#include "mk/forward.h"
#include "core/fsutil.h"
#include "io/safetensors.h"
#include "forward/forward_impl.h"

#define TOL 1e-5

static char top[PATH_MAX], tools[PATH_MAX], work[PATH_MAX];

static void find_dirs(void)
{
	char exe[PATH_MAX], tmp[PATH_MAX], probe[PATH_MAX + 64];
	const char *cand[4] = { getenv("MK_TOP"), NULL, ".", ".." };
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	assert_true(n > 0);
	exe[n] = 0;
	snprintf(tmp, sizeof(tmp), "%s", exe);
	snprintf(tools, sizeof(tools), "%s/../tools", dirname(tmp)); /* BUILD/test -> BUILD/tools */
	snprintf(tmp, sizeof(tmp), "%s", exe);
	cand[1] = dirname(dirname(dirname(tmp)));
	for (size_t i = 0; i < 4; i++) {
		if (!cand[i])
			continue;
		snprintf(probe, sizeof(probe), "%s/testdata/forward/cases", cand[i]);
		if (access(probe, R_OK) == 0) {
			snprintf(top, sizeof(top), "%s", cand[i]);
			return;
		}
	}
	fail_msg("cannot find testdata/forward (set MK_TOP to the repository root)");
}

/* mk-gen-model ARGS DIR (args: space-separated options) */
static void gen(const char *args, const char *dir)
{
	char buf[4096], prog[PATH_MAX + 32];
	char *argv[64];
	int argc = 0, st;
	pid_t pid;

	snprintf(prog, sizeof(prog), "%s/mk-gen-model", tools);
	snprintf(buf, sizeof(buf), "%s", args);
	argv[argc++] = prog;
	for (char *t = strtok(buf, " \t\n"); t && argc < 62; t = strtok(NULL, " \t\n"))
		argv[argc++] = t;
	argv[argc++] = (char *)dir;
	argv[argc] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0)
			dup2(fd, 1);
		execv(prog, argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail_msg("%s failed for %s", prog, dir);
}

struct ref {
	int64_t *ids, *mask;
	float *hs;
	size_t layers1, nseq, len, dim;
};

static void *read_tensor(const struct mk_st_file *sf, int fd, const char *name, enum mk_dtype dt, unsigned ndim,
			 uint64_t *shape)
{
	const struct mk_st_tensor *t = mk_st_find(sf, name);
	struct mk_err err = { 0 };
	assert_non_null(t);
	assert_int_equal(t->desc.dtype, dt);
	assert_int_equal(t->desc.ndim, ndim);
	for (unsigned i = 0; i < ndim; i++)
		shape[i] = t->desc.shape[i];
	void *b = malloc(t->end - t->begin);
	assert_non_null(b);
	if (mk_pread_exact(fd, b, t->end - t->begin, sf->data_start + t->begin, sf->path, &err))
		fail_msg("%s", err.msg);
	return b;
}

static void ref_load(const char *name, struct ref *r)
{
	char path[PATH_MAX + 128];
	const char *dir = getenv("MK_FORWARD_REF");
	struct mk_st_file *sf = NULL;
	struct mk_err err = { 0 };
	uint64_t s2[2], s4[4];

	if (dir)
		snprintf(path, sizeof(path), "%s/%s.safetensors", dir, name);
	else
		snprintf(path, sizeof(path), "%s/testdata/forward/%s.safetensors", top, name);
	if (mk_st_open(path, &sf, &err))
		fail_msg("%s", err.msg);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	r->ids = read_tensor(sf, fd, "input_ids", MK_DT_I64, 2, s2);
	r->nseq = s2[0];
	r->len = s2[1];
	r->mask = read_tensor(sf, fd, "attention_mask", MK_DT_I64, 2, s2);
	assert_true(s2[0] == r->nseq && s2[1] == r->len);
	r->hs = read_tensor(sf, fd, "hidden_states", MK_DT_F32, 4, s4);
	assert_true(s4[1] == r->nseq && s4[2] == r->len);
	r->layers1 = s4[0];
	r->dim = s4[3];
	close(fd);
	mk_st_file_free(sf);
}

static void ref_free(struct ref *r)
{
	free(r->ids);
	free(r->mask);
	free(r->hs);
}

struct cmp {
	const struct ref *r;
	const char *name;
	size_t seen;
	double worst; /* max over indexes of max|d| / max|ref| */
	double worst_row; /* the same per token */
};

static int compare(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim, struct mk_err *err)
{
	struct cmp *c = ctx;
	const struct ref *r = c->r;
	const size_t n = nseq * len * dim;
	const float *want = r->hs + index * n;
	double md = 0, mr = 0;

	assert_int_equal(index, c->seen);
	assert_true(index < r->layers1 && nseq == r->nseq && len == r->len && dim == r->dim);
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)h[i] - want[i]);
		assert_false(isnan(h[i]));
		if (d > md)
			md = d;
		if (fabs(want[i]) > mr)
			mr = fabs(want[i]);
	}
	if (md / mr > c->worst)
		c->worst = md / mr;
	if (md > TOL * mr)
		fail_msg("%s: hidden state %zu: max |mk - transformers| %.3g > %.0e * max|ref| (%.3g)", c->name, index, md,
			 TOL, mr);
	/* and each token's vector against its own size (the pads' too, which
	 * mergekit's hidden_avg averages) */
	for (size_t t = 0; t < nseq * len; t++) {
		double rd = 0, rr = 0;
		for (size_t j = 0; j < dim; j++) {
			rd = fmax(rd, fabs((double)h[t * dim + j] - want[t * dim + j]));
			rr = fmax(rr, fabs((double)want[t * dim + j]));
		}
		c->worst_row = fmax(c->worst_row, rd / rr);
		if (rd > TOL * rr)
			fail_msg("%s: hidden state %zu, sequence %zu, position %zu: max |mk - transformers| %.3g > %.0e * %.3g",
				 c->name, index, t / len, t % len, rd, TOL, rr);
	}
	c->seen++;
	return 0;
}

/* every case: the hidden states, one layer's weights held at most; with a
 * CUDA context (cx), the layers' products on it */
static void run_cases(struct mk_cuda_ctx *cx, const char *label)
{
	char path[PATH_MAX + 64], line[4096], dir[PATH_MAX + 128];
	struct mk_forward_opts o = { .cuda = cx };
	FILE *cf;
	size_t ncases = 0;
	double worst = 0;

	snprintf(path, sizeof(path), "%s/testdata/forward/cases", top);
	cf = fopen(path, "r");
	assert_non_null(cf);
	while (fgets(line, sizeof(line), cf)) {
		char *name = strtok(line, " \n"), *args = strtok(NULL, "\n");
		struct mk_forward *f = NULL;
		struct mk_forward_info info;
		struct mk_err err = { 0 };
		struct ref r;

		if (!name || name[0] == '#')
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", work, name);
		gen(args ? args : "", dir);
		ref_load(name, &r);
		if (mk_forward_open(dir, &o, &f, &err))
			fail_msg("%s: %s", name, err.msg);
		mk_forward_info(f, &info);
		assert_int_equal(info.layers + 1, r.layers1);
		assert_int_equal(info.hidden, r.dim);
		struct cmp c = { &r, name, 0, 0, 0 };
		if (mk_forward_run(f, r.ids, r.mask, r.nseq, r.len, compare, &c, &err))
			fail_msg("%s: %s", name, err.msg);
		assert_int_equal(c.seen, r.layers1);
		/* one layer at a time: never more than the largest layer */
		assert_true(mk_forward_peak_weights(f) > 0);
		assert_true(mk_forward_peak_weights(f) <= info.layer_bytes);
		print_message("%s%-17s %-7s rope %-7s max|d|/max|ref| %.2e (per token %.2e), weights held at most %llu bytes "
			      "(one layer %llu)\n",
			      label, name, info.model_type, info.rope_type, c.worst, c.worst_row,
			      (unsigned long long)mk_forward_peak_weights(f), (unsigned long long)info.layer_bytes);
		if (c.worst > worst)
			worst = c.worst;
		mk_forward_close(f);
		ref_free(&r);
		ncases++;
	}
	fclose(cf);
	assert_true(ncases >= 10);
	print_message("%sworst over %zu cases: %.2e (tolerance %.0e)\n", label, ncases, worst, TOL);
}

static void test_cases(void **state)
{
	run_cases(NULL, "");
	(void)state;
}

/* The same through a CUDA context: the emulated device (the GPU's
 * products, summed in its order, on the host) everywhere, and the device
 * itself where there is one.  The same tolerance against transformers
 * holds: the products' order is one more float32 rounding difference of
 * the kind TOL allows for. */
static void test_cases_cuda(void **state)
{
	struct mk_cuda_opts co = { .max_bytes = 64u << 10, .streams = 2, .emulate = true };
	struct mk_cuda_ctx *cx = NULL;
	struct mk_err err = { 0 };
	struct mk_cuda_stats st;
	const char *why = NULL;

	if (mk_cuda_open(&cx, &co, &err))
		fail_msg("emulated CUDA context: %s", err.msg);
	run_cases(cx, "emulated cuda: ");
	mk_cuda_get_stats(cx, &st);
	assert_true(st.launches > 0); /* the products went through the context */
	mk_cuda_close(cx);
	if (!mk_cuda_available(&why)) {
		print_message("cuda device: none (%s): that half skipped\n", why);
		return;
	}
	co.emulate = false;
	if (mk_cuda_open(&cx, &co, &err))
		fail_msg("CUDA context: %s", err.msg);
	run_cases(cx, "cuda device: ");
	mk_cuda_close(cx);
	(void)state;
}

/* the cases test something: each rope type moves layer 0's output far
 * more than TOL from the default rotation's (same weights and prompts) */
static void test_rope_matters(void **state)
{
	static const char *const other[] = { "llama-linear", "llama-dynamic", "llama-llama3", "llama-yarn" };
	struct ref a, b;
	ref_load("llama-default", &a);
	for (size_t k = 0; k < sizeof(other) / sizeof(*other); k++) {
		ref_load(other[k], &b);
		size_t n = a.nseq * a.len * a.dim;
		double md = 0, mr = 0;
		assert_memory_equal(a.ids, b.ids, a.nseq * a.len * sizeof(int64_t));
		for (size_t i = n; i < 2 * n; i++) {
			md = fmax(md, fabs((double)a.hs[i] - b.hs[i]));
			mr = fmax(mr, fabs((double)a.hs[i]));
		}
		print_message("default vs %s, layer 0's output: max|d|/max|ref| %.2e\n", other[k], md / mr);
		assert_true(md > 100 * TOL * mr);
		ref_free(&b);
	}
	ref_free(&a);
	(void)state;
}

struct far {
	const struct ref *r;
	double worst;
};

static int distance(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim, struct mk_err *err)
{
	struct far *c = ctx;
	const size_t n = nseq * len * dim;
	double md = 0, mr = 0;
	for (size_t i = 0; i < n; i++) {
		md = fmax(md, fabs((double)h[i] - c->r->hs[index * n + i]));
		mr = fmax(mr, fabs((double)c->r->hs[index * n + i]));
	}
	c->worst = fmax(c->worst, md / mr);
	return 0;
}

/* and mistral's window (3, under the prompt's 7 tokens) matters: without
 * it the states are far from transformers' */
static void test_window_matters(void **state)
{
	char path[PATH_MAX + 64], line[4096], dir[PATH_MAX + 128], args[4200];
	struct mk_forward *f = NULL;
	struct mk_err err = { 0 };
	struct ref r;
	FILE *cf;
	bool found = false;

	snprintf(path, sizeof(path), "%s/testdata/forward/cases", top);
	cf = fopen(path, "r");
	assert_non_null(cf);
	while (!found && fgets(line, sizeof(line), cf)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "mistral-window ", 15)) {
			snprintf(args, sizeof(args), "%s,\"sliding_window\":null", line + 15);
			found = true;
		}
	}
	fclose(cf);
	assert_true(found);
	snprintf(dir, sizeof(dir), "%s/nowindow", work);
	gen(args, dir);
	ref_load("mistral-window", &r);
	assert_int_equal(mk_forward_open(dir, NULL, &f, &err), 0);
	struct far c = { &r, 0 };
	assert_int_equal(mk_forward_run(f, r.ids, r.mask, r.nseq, r.len, distance, &c, &err), 0);
	print_message("mistral without its window: max|d|/max|ref| %.2e\n", c.worst);
	assert_true(c.worst > 100 * TOL);
	mk_forward_close(f);
	ref_free(&r);
	(void)state;
}

static const char *const base_args =
	"--arch llama --dtype BF16 --hidden 32 --heads 2 --inter 48 --vocab 16 --layers 1";

static int open_with(const char *extra, const struct mk_forward_opts *o, struct mk_forward **f, struct mk_err *err)
{
	static int k;
	char args[1024], dir[PATH_MAX + 64];
	snprintf(args, sizeof(args), "%s%s%s", base_args, extra ? " --config-extra " : "", extra ? extra : "");
	snprintf(dir, sizeof(dir), "%s/m%d", work, k++);
	gen(args, dir);
	return mk_forward_open(dir, o, f, err);
}

static int nop(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim, struct mk_err *err)
{
	(*(size_t *)ctx)++;
	return 0;
}

/* what is refused, by name */
static void test_refusals(void **state)
{
	struct mk_forward *f = NULL;
	struct mk_err err = { 0 };

	assert_int_equal(open_with("\"model_type\":\"gemma\"", NULL, &f, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "\"gemma\""));
	assert_int_equal(open_with("\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2.0}", NULL, &f, &err),
			 -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "\"longrope\""));
	assert_int_equal(open_with("\"hidden_act\":\"gelu\"", NULL, &f, &err), -MK_EUNSUPPORTED);
	assert_non_null(strstr(err.msg, "gelu"));
	assert_int_equal(open_with("\"partial_rotary_factor\":0.5", NULL, &f, &err), -MK_EUNSUPPORTED);
	assert_int_equal(open_with("\"rope_scaling\":{\"rope_type\":\"linear\"}", NULL, &f, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "factor"));
	/* a config that disagrees with the weights: the tensor is named */
	assert_int_equal(open_with("\"num_key_value_heads\":1", NULL, &f, &err), 0);
	int64_t ids[3] = { 1, 2, 3 };
	size_t calls = 0;
	assert_int_equal(mk_forward_run(f, ids, NULL, 1, 3, nop, &calls, &err), -MK_EMISMATCH);
	assert_non_null(strstr(err.msg, "self_attn.k_proj.weight"));
	assert_int_equal(calls, 1); /* the embeddings came, then layer 0's weights failed */
	mk_forward_close(f);
	(void)state;
}

/* the memory budget is checked before anything is read; ids are checked */
static void test_budget(void **state)
{
	struct mk_forward *f = NULL;
	struct mk_err err = { 0 };
	struct mk_forward_opts o = { 0 };
	int64_t ids[6] = { 1, 2, 3, 4, 5, 15 }, bad[2] = { 0, 16 }, mask[6] = { 0, 1, 1, 0, 0, 1 };
	size_t calls = 0;

	assert_int_equal(open_with(NULL, NULL, &f, &err), 0);
	uint64_t need = mk_forward_need(f, 2, 3);
	struct mk_forward_info info;
	mk_forward_info(f, &info);
	assert_true(need > info.layer_bytes);
	mk_forward_close(f);
	o.max_memory = need - 1;
	assert_int_equal(open_with(NULL, &o, &f, &err), 0);
	assert_int_equal(mk_forward_run(f, ids, mask, 2, 3, nop, &calls, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "memory budget"));
	assert_int_equal(calls, 0);
	assert_int_equal(mk_forward_peak_weights(f), 0);
	mk_forward_close(f);
	o.max_memory = need;
	assert_int_equal(open_with(NULL, &o, &f, &err), 0);
	assert_int_equal(mk_forward_run(f, ids, mask, 2, 3, nop, &calls, &err), 0);
	assert_int_equal(calls, 2);
	assert_int_equal(mk_forward_run(f, bad, NULL, 1, 2, nop, &calls, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "token id 16"));
	mk_forward_close(f);
	(void)state;
}

/* the cancel flag: checked before the embeddings and each layer */
static volatile int cancel_flag;
static size_t cancel_at;

static int cancel_after(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim,
			struct mk_err *err)
{
	(*(size_t *)ctx)++;
	if (index == cancel_at)
		cancel_flag = 1;   /* as a signal would, between two layers */
	return 0;
}

static void test_cancel(void **state)
{
	struct mk_forward *f = NULL;
	struct mk_err err = { 0 };
	struct mk_forward_opts o = { .cancel = &cancel_flag };
	int64_t ids[3] = { 1, 2, 3 };
	size_t calls = 0;

	/* 4 layers: hidden states 0..4; a cancel after state 1 (layer 0's
	 * output) stops before layer 1 runs */
	static const char *const args = "--arch llama --dtype BF16 --hidden 32 --heads 2 --inter 48 --vocab 16 --layers 4";
	char dir[PATH_MAX + 64];
	snprintf(dir, sizeof(dir), "%s/cancel", work);
	gen(args, dir);
	assert_int_equal(mk_forward_open(dir, &o, &f, &err), 0);
	cancel_flag = 0;
	cancel_at = 1;
	assert_int_equal(mk_forward_run(f, ids, NULL, 1, 3, cancel_after, &calls, &err), -MK_EIO);
	assert_non_null(strstr(err.msg, "cancelled"));
	assert_int_equal(calls, 2);
	/* set before the run: nothing is read, no callback */
	calls = 0;
	assert_int_equal(mk_forward_run(f, ids, NULL, 1, 3, nop, &calls, &err), -MK_EIO);
	assert_int_equal(calls, 0);
	/* cleared: the whole run */
	cancel_flag = 0;
	cancel_at = 99;
	assert_int_equal(mk_forward_run(f, ids, NULL, 1, 3, cancel_after, &calls, &err), 0);
	assert_int_equal(calls, 5);
	mk_forward_close(f);
	(void)state;
}

static void parse_ok(const char *json, struct mk_fwd_config *c)
{
	struct mk_err err = { 0 };
	if (mk_fwd_config_parse(json, strlen(json), "config.json", c, &err))
		fail_msg("%s: %s", json, err.msg);
}

#define SHAPE "\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"vocab_size\":10"

/* the configuration classes' defaults and precedences, as transformers 5 */
static void test_config_defaults(void **state)
{
	struct mk_fwd_config c;
	float inv[64], sc;

	parse_ok("{\"model_type\":\"qwen3\",\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":64,"
		 "\"vocab_size\":10}", &c);
	assert_int_equal(c.kv_heads, 32); /* absent: 32 */
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"qwen3\",\"num_key_value_heads\":2," SHAPE "}", &c);
	assert_int_equal(c.head_dim, 128); /* Qwen3Config's default, not 64 / 4 */
	assert_true(c.qk_norm && !c.qkv_bias);
	assert_true(c.eps == 1e-6 && c.rope.theta == 10000);
	assert_int_equal(c.window[2], 0);
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"mistral\",\"hidden_size\":64,\"num_hidden_layers\":3,\"num_attention_heads\":16,"
		 "\"vocab_size\":10}", &c);
	assert_int_equal(c.kv_heads, 8); /* MistralConfig's default... */
	assert_int_equal(c.head_dim, 4);
	assert_int_equal(c.window[0], 4096); /* ... and its window */
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"mistral\",\"num_key_value_heads\":null,\"sliding_window\":null," SHAPE "}", &c);
	assert_int_equal(c.kv_heads, 4);
	assert_int_equal(c.window[0], 0);
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"llama\"," SHAPE ",\"attention_bias\":true,\"mlp_bias\":true}", &c);
	assert_int_equal(c.kv_heads, 4);
	assert_true(c.attn_bias && c.qkv_bias && c.mlp_bias && !c.qk_norm);
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"qwen2\",\"num_key_value_heads\":2," SHAPE ",\"use_sliding_window\":true,\"sliding_window\":5,"
		 "\"layer_types\":[\"sliding_attention\",\"full_attention\",\"sliding_attention\"]}", &c);
	assert_true(c.qkv_bias && !c.attn_bias);
	assert_true(c.window[0] == 5 && c.window[1] == 0 && c.window[2] == 5);
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"qwen2\",\"num_key_value_heads\":2," SHAPE ",\"use_sliding_window\":true,\"max_window_layers\":2}", &c);
	assert_true(c.window[0] == 0 && c.window[1] == 0 && c.window[2] == 4096);
	mk_fwd_config_free(&c);
	/* rope_scaling wins over rope_parameters; the dict's theta over the
	 * top level's; a top-level original_max_position_embeddings over the
	 * dict's */
	parse_ok("{\"model_type\":\"llama\"," SHAPE ",\"rope_theta\":5.0,\"original_max_position_embeddings\":7,"
		 "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":2,\"original_max_position_embeddings\":9,\"rope_theta\":6.0},"
		 "\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":3}}", &c);
	assert_int_equal(c.rope.type, MK_ROPE_YARN);
	assert_true(c.rope.theta == 6.0 && c.rope.factor == 2 && c.rope.orig_mpe == 7);
	assert_true(c.rope.beta_fast == 32 && c.rope.beta_slow == 1 && c.rope.truncate);
	mk_fwd_config_free(&c);
	/* default frequencies: theta^(-2j/d); linear divides them */
	parse_ok("{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
		 "\"vocab_size\":4,\"rope_theta\":100.0}", &c);
	mk_fwd_rope_inv_freq(&c, 10, inv, &sc);
	assert_true(inv[0] == 1.0f && fabsf(inv[1] - 0.1f) < 1e-7f && sc == 1.0f);
	mk_fwd_config_free(&c);
	parse_ok("{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
		 "\"vocab_size\":4,\"rope_theta\":100.0,\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":4}}", &c);
	mk_fwd_rope_inv_freq(&c, 10, inv, &sc);
	assert_true(inv[0] == 0.25f && fabsf(inv[1] - 0.025f) < 1e-8f);
	mk_fwd_config_free(&c);
	/* dynamic: unchanged within max_position_embeddings, a larger base past it */
	parse_ok("{\"model_type\":\"llama\",\"hidden_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":2,"
		 "\"vocab_size\":4,\"rope_theta\":100.0,\"max_position_embeddings\":8,"
		 "\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}", &c);
	mk_fwd_rope_inv_freq(&c, 8, inv, &sc);
	assert_true(fabsf(inv[1] - 0.1f) < 1e-7f);
	mk_fwd_rope_inv_freq(&c, 16, inv, &sc); /* base 100 * (2*16/8 - 1)^(4/2) = 900 */
	assert_true(fabsf(inv[1] - 1.0f / 30.0f) < 1e-7f);
	mk_fwd_config_free(&c);
	(void)state;
}

static int setup(void **state)
{
	snprintf(work, sizeof(work), "%s/mk-forward-XXXXXX", mk_tmpdir());
	if (!mkdtemp(work))
		return -1;
	find_dirs();
	(void)state;
	return 0;
}

static int teardown(void **state)
{
	mk_rmtree(work, NULL);
	(void)state;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cases),
		cmocka_unit_test(test_cases_cuda),
		cmocka_unit_test(test_rope_matters),
		cmocka_unit_test(test_window_matters),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_budget),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_config_defaults),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
