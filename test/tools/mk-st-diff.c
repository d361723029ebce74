/* mk-st-diff - compare the tensors of two checkpoints bit for bit.
 *
 *   mk-st-diff A B      exit 0 when both hold the same tensor names, each
 *                       with the same dtype, shape and bytes; else print
 *                       the first differences and exit 1.
 * A and B are model references (directories); sharding may differ. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/model.h"

static uint8_t *load(const struct mk_model *m, const struct mk_model_tensor *t)
{
	uint64_t n = t->t->end - t->t->begin;
	uint8_t *b = malloc(n ? n : 1);
	int fd = open(m->shards[t->shard]->path, O_RDONLY);
	uint64_t got = 0;

	if (!b || fd < 0)
		abort();
	while (got < n) {
		ssize_t r = pread(fd, b + got, n - got, (off_t)(m->shards[t->shard]->data_start + t->t->begin + got));
		if (r <= 0) {
			fprintf(stderr, "mk-st-diff: short read in %s\n", m->shards[t->shard]->path);
			exit(2);
		}
		got += (uint64_t)r;
	}
	close(fd);
	if (t->t->stride) { /* a view in a PyTorch checkpoint: its elements in order */
		uint64_t bytes = t->t->nelem * (mk_dtype_bits(t->t->desc.dtype) / 8);
		uint8_t *g = malloc(bytes ? bytes : 1);
		struct mk_err err;
		if (!g || mk_st_tensor_gather(t->t, 0, t->t->nelem, b, t->t->begin, n, g, &err))
			abort();
		free(b);
		b = g;
	}
	return b;
}

int main(int argc, char **argv)
{
	struct mk_model *a, *b;
	struct mk_err err = { 0 };
	int diffs = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: mk-st-diff A B\n");
		return 2;
	}
	if (mk_model_open(argv[1], &a, &err) || mk_model_open(argv[2], &b, &err)) {
		fprintf(stderr, "mk-st-diff: %s\n", err.msg);
		return 2;
	}
	if (a->ntensors != b->ntensors) {
		printf("tensor count differs: %zu vs %zu\n", a->ntensors, b->ntensors);
		diffs++;
	}
	for (size_t i = 0; i < a->ntensors && diffs < 10; i++) {
		const struct mk_model_tensor *x = &a->tensors[i];
		const struct mk_model_tensor *y = mk_model_find(b, x->t->name);
		if (!y) {
			printf("%s: missing in %s\n", x->t->name, argv[2]);
			diffs++;
			continue;
		}
		if (x->t->desc.dtype != y->t->desc.dtype || x->t->desc.ndim != y->t->desc.ndim ||
		    memcmp(x->t->desc.shape, y->t->desc.shape, x->t->desc.ndim * sizeof(uint64_t))) {
			printf("%s: dtype or shape differs\n", x->t->name);
			diffs++;
			continue;
		}
		uint8_t *p = load(a, x), *q = load(b, y);
		uint64_t nb = 0;
		mk_dtype_nbytes(x->t->desc.dtype, x->t->nelem, &nb);
		if (memcmp(p, q, nb)) {
			printf("%s: bytes differ\n", x->t->name);
			diffs++;
		}
		free(p);
		free(q);
	}
	mk_model_free(a);
	mk_model_free(b);
	return diffs ? 1 : 0;
}
