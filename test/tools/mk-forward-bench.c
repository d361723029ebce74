/* mk-forward-bench - time mk_forward_run on a model.
 *
 *   mk-forward-bench [--max-memory N] [--cuda [--compare [--tolerance T]]] MODEL NSEQ LEN
 *
 * Runs NSEQ sequences of LEN token ids (deterministic, the second half of
 * the sequences left-padded to half the length) once, and prints the wall
 * time, the weight bytes held at most, what the run may need, and the
 * mean over sequences of the last token's hidden state's L2 norm per
 * hidden state index (a check two builds agree).
 *
 * --cuda: the layers' matrix products on the GPU (mk_forward_opts.cuda;
 * MK_CUDA_EMULATE=1: the emulated device); no usable device is an error
 * (exit 1).  --compare: run the batch on the CPU too and print, per
 * hidden state index and over all, max |cuda - cpu| against max |cpu|,
 * and both times (the "cuda vs cpu" line; each run is timed once, the
 * weights read from the page cache after the first); exit 1 when a ratio
 * is over T (default 1e-5) or a difference is NaN. */
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cuda/cuda.h"
#include "mk/forward.h"
#include "core/fsutil.h"

struct keep {
	float *all;          /* [layers + 1][nseq * len * dim], or NULL */
	bool print;
};

static int on_hidden(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim,
		     struct mk_err *err)
{
	struct keep *k = ctx;
	double s = 0;

	if (k->all)
		memcpy(k->all + index * nseq * len * dim, h, nseq * len * dim * sizeof(float));
	if (!k->print)
		return 0;
	for (size_t b = 0; b < nseq; b++) {
		const float *r = h + (b * len + len - 1) * dim;
		double q = 0;
		for (size_t j = 0; j < dim; j++)
			q += (double)r[j] * r[j];
		s += sqrt(q);
	}
	printf("hidden %zu: mean last-token norm %.9g\n", index, s / (double)nseq);
	(void)err;
	return 0;
}

static double secs(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static int usage(void)
{
	fprintf(stderr, "usage: mk-forward-bench [--max-memory N] [--cuda [--compare [--tolerance T]]] MODEL NSEQ LEN\n");
	return 2;
}

/* One run; the hidden states kept in k.  Returns the wall seconds, or < 0. */
static double run(const char *model, const struct mk_forward_opts *o, const int64_t *ids, const int64_t *mask,
		  uint64_t nseq, uint64_t len, struct keep *k, struct mk_forward_info *info, bool report)
{
	struct mk_forward *f = NULL;
	struct mk_err err = { 0 };
	struct timespec t0, t1;

	if (mk_forward_open(model, o, &f, &err)) {
		fprintf(stderr, "mk-forward-bench: %s\n", err.msg);
		return -1;
	}
	mk_forward_info(f, info);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (mk_forward_run(f, ids, mask, nseq, len, on_hidden, k, &err)) {
		fprintf(stderr, "mk-forward-bench: %s\n", err.msg);
		mk_forward_close(f);
		return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (report)
		printf("%s, %zu layers, hidden %zu: %llu x %llu tokens in %.3f s; weights held at most %llu bytes "
		       "(largest layer %llu), need %llu\n",
		       info->model_type, info->layers, info->hidden, (unsigned long long)nseq, (unsigned long long)len,
		       secs(&t0, &t1), (unsigned long long)mk_forward_peak_weights(f),
		       (unsigned long long)info->layer_bytes, (unsigned long long)mk_forward_need(f, nseq, len));
	mk_forward_close(f);
	return secs(&t0, &t1);
}

int main(int argc, char **argv)
{
	enum { O_MEM = 'm', O_CUDA = 256, O_CMP, O_TOL };
	static const struct option lo[] = { { "max-memory", 1, 0, O_MEM }, { "cuda", 0, 0, O_CUDA },
					    { "compare", 0, 0, O_CMP }, { "tolerance", 1, 0, O_TOL }, { 0 } };
	double tol = 1e-5;
	char *end;
	struct mk_forward_opts o = { 0 };
	struct mk_forward_info info;
	struct mk_err err = { 0 };
	struct mk_cuda_ctx *cx = NULL;
	bool cuda = false, compare = false;
	uint64_t nseq, len;
	int c, rc = 1;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c == O_CUDA)
			cuda = true;
		else if (c == O_CMP)
			compare = true;
		else if (c == O_TOL && ((tol = strtod(optarg, &end)), end != optarg && !*end && tol >= 0))
			;
		else if (c != O_MEM || mk_size_parse(optarg, &o.max_memory))
			return usage();
	}
	if (optind + 3 != argc || mk_size_parse(argv[optind + 1], &nseq) || mk_size_parse(argv[optind + 2], &len) ||
	    !nseq || !len || (compare && !cuda))
		return usage();
	const char *model = argv[optind];
	if (cuda) {
		struct mk_cuda_opts co = { .max_bytes = 64u << 10, .streams = 2, .emulate = mk_cuda_emulate_requested() };
		if (mk_cuda_open(&cx, &co, &err)) {
			fprintf(stderr, "mk-forward-bench: --cuda: %s\n", err.msg);
			return 1;
		}
		printf("cuda: %s\n", mk_cuda_describe(cx));
		o.cuda = cx;
	}
	/* the shapes, for the token ids and the kept states */
	{
		struct mk_forward *f = NULL;
		if (mk_forward_open(model, &o, &f, &err)) {
			fprintf(stderr, "mk-forward-bench: %s\n", err.msg);
			mk_cuda_close(cx);
			return 1;
		}
		mk_forward_info(f, &info);
		mk_forward_close(f);
	}
	const size_t n1 = (size_t)(nseq * len * info.hidden), nstates = info.layers + 1;
	int64_t *ids = malloc(nseq * len * sizeof(int64_t)), *mask = malloc(nseq * len * sizeof(int64_t));
	float *a = compare ? malloc(nstates * n1 * sizeof(float)) : NULL;
	float *b = compare ? malloc(nstates * n1 * sizeof(float)) : NULL;
	if (!ids || !mask || (compare && (!a || !b))) {
		fprintf(stderr, "mk-forward-bench: out of memory\n");
		goto out;
	}
	uint64_t s = 12345;
	for (uint64_t i = 0; i < nseq * len; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int64_t)((s >> 33) % info.vocab);
		mask[i] = !(i / len >= nseq / 2 && i % len < len / 2);
	}
	struct keep k = { a, true };
	double tg = run(model, &o, ids, mask, nseq, len, &k, &info, true);
	if (tg < 0)
		goto out;
	if (compare) {
		struct mk_forward_opts oc = o;
		struct keep kc = { b, false };
		struct mk_cuda_stats st;
		double worst = 0, mdall = 0, mrall = 0;
		bool nan = false;
		oc.cuda = NULL;
		double tc = run(model, &oc, ids, mask, nseq, len, &kc, &info, false);
		if (tc < 0)
			goto out;
		for (size_t x = 0; x < nstates; x++) {
			double md = 0, mr = 0;
			size_t nn = 0;
			for (size_t i = 0; i < n1; i++) {
				double d = fabs((double)a[x * n1 + i] - b[x * n1 + i]);
				if (isnan(d))
					nn++;
				else
					md = fmax(md, d);
				mr = fmax(mr, fabs((double)b[x * n1 + i]));
			}
			printf("compare %zu: max |cuda - cpu| %.3g, max |cpu| %.3g, ratio %.3g%s\n", x, md, mr,
			       mr > 0 ? md / mr : md, nn ? " (and NaN differences)" : "");
			worst = fmax(worst, mr > 0 ? md / mr : md);
			nan = nan || nn;
			mdall = fmax(mdall, md);
			mrall = fmax(mrall, mr);
		}
		mk_cuda_get_stats(cx, &st);
		printf("cuda vs cpu: max abs diff %.3g (max |cpu| %.3g), worst per-state ratio %.3g; cpu %.3f s, "
		       "cuda %.3f s; %llu products, %llu bytes to the device, %llu back\n",
		       mdall, mrall, worst, tc, tg, (unsigned long long)st.launches, (unsigned long long)st.bytes_in,
		       (unsigned long long)st.bytes_out);
		if (nan || worst > tol) {
			fprintf(stderr, "mk-forward-bench: cuda and cpu differ: worst ratio %.3g%s over the tolerance %.3g\n",
				worst, nan ? " and NaN" : "", tol);
			goto out;
		}
		printf("cuda vs cpu: within the tolerance %.3g\n", tol);
	}
	rc = 0;
out:
	free(ids);
	free(mask);
	free(a);
	free(b);
	mk_cuda_close(cx);
	return rc;
}
