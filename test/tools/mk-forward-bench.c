/* mk-forward-bench - time mk_forward_run on a model.
 *
 *   mk-forward-bench [--max-memory N] MODEL NSEQ LEN
 *
 * Runs NSEQ sequences of LEN token ids (deterministic, the second half of
 * the sequences left-padded to half the length) once, and prints the wall
 * time, the weight bytes held at most, what the run may need, and the
 * mean over sequences of the last token's hidden state's L2 norm per
 * hidden state index (a check two builds agree). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "mk/forward.h"
#include "mk/fsutil.h"

static int last_norm(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim,
		     struct mk_err *err)
{
	double s = 0;
	for (size_t b = 0; b < nseq; b++) {
		const float *r = h + (b * len + len - 1) * dim;
		double q = 0;
		for (size_t j = 0; j < dim; j++)
			q += (double)r[j] * r[j];
		s += sqrt(q);
	}
	printf("hidden %zu: mean last-token norm %.9g\n", index, s / (double)nseq);
	(void)ctx;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "max-memory", 1, 0, 'm' }, { 0 } };
	struct mk_forward_opts o = { 0 };
	struct mk_forward *f = NULL;
	struct mk_forward_info info;
	struct mk_err err = { 0 };
	struct timespec t0, t1;
	uint64_t nseq, len;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		if (c != 'm' || mk_size_parse(optarg, &o.max_memory)) {
			fprintf(stderr, "usage: mk-forward-bench [--max-memory N] MODEL NSEQ LEN\n");
			return 2;
		}
	}
	if (optind + 3 != argc || mk_size_parse(argv[optind + 1], &nseq) || mk_size_parse(argv[optind + 2], &len) ||
	    !nseq || !len) {
		fprintf(stderr, "usage: mk-forward-bench [--max-memory N] MODEL NSEQ LEN\n");
		return 2;
	}
	if (mk_forward_open(argv[optind], &o, &f, &err)) {
		fprintf(stderr, "mk-forward-bench: %s\n", err.msg);
		return 1;
	}
	mk_forward_info(f, &info);
	int64_t *ids = malloc(nseq * len * sizeof(int64_t)), *mask = malloc(nseq * len * sizeof(int64_t));
	if (!ids || !mask)
		return 1;
	uint64_t s = 12345;
	for (uint64_t i = 0; i < nseq * len; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		ids[i] = (int64_t)((s >> 33) % info.vocab);
		mask[i] = !(i / len >= nseq / 2 && i % len < len / 2);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (mk_forward_run(f, ids, mask, nseq, len, last_norm, NULL, &err)) {
		fprintf(stderr, "mk-forward-bench: %s\n", err.msg);
		return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%s, %zu layers, hidden %zu: %llu x %llu tokens in %.3f s; weights held at most %llu bytes "
	       "(largest layer %llu), need %llu\n",
	       info.model_type, info.layers, info.hidden, (unsigned long long)nseq, (unsigned long long)len,
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
	       (unsigned long long)mk_forward_peak_weights(f), (unsigned long long)info.layer_bytes,
	       (unsigned long long)mk_forward_need(f, nseq, len));
	free(ids);
	free(mask);
	mk_forward_close(f);
	return 0;
}
