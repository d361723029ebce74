/* mk-bench-kernels - time the task-arithmetic kernels alone, on one core.
 *
 *   mk-bench-kernels [-n MELEM] [-c COLS] [-k INPUTS] [-r REPS] [-d DENSITY] [-w] [METHOD...]
 *
 * Makes INPUTS (default 3: a base and two fine-tunes) in-memory bfloat16
 * tensors of MELEM Mi elements (default 64) in rows of COLS (default
 * 4096, a power of two up to 2^20: shape [MELEM Mi / COLS, COLS]; the
 * row-wise methods, DELLA's ranks, work row by row):
 * the base normal-ish of scale 0.02, each fine-tune the base plus a delta
 * of scale 1e-3, rounded to bfloat16 (so equal magnitudes are common, as in
 * real checkpoints).  Then, on this thread only:
 *
 *   memcpy     the inputs' bytes copied into one buffer as large
 *   bf16_f32   the inputs converted to float32 16384 elements at a time
 *              into a buffer that stays in cache (what mk-merge does)
 *   METHOD     the job run as mk-merge's workers run it: for each
 *              statistics pass, each tile of 16384 elements converted to
 *              float32 (or, to a job that takes them, accumulate_bf16,
 *              passed as they are) and accumulated; then each tile
 *              converted (or passed so, apply_bf16), applied and its
 *              output converted back to bfloat16
 *
 * Each runs REPS times (default 3); the line gives the median.  Times are
 * this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that other load on
 * a shared machine does not count (-w: wall-clock time instead).  Rates are
 * GB/s (10^9 bytes/s) of bfloat16 input (INPUTS * MELEM * 2 MiB per run):
 * "apply" times the method's apply calls alone, "kernel" its statistics
 * passes' accumulate calls and its apply calls (the method's whole work,
 * no conversion), "apply+cvt" the apply with the conversions around it,
 * "job" the passes and the apply with all conversions (each pass converts
 * the inputs again where it converts them, as mk-merge does).  "crc" is a CRC-32C of the float32 outputs of apply, to
 * compare two builds bit for bit.  Methods default to the task-arithmetic
 * family with weights 0.6 and 0.4 (1/(INPUTS-1) each beyond three inputs)
 * and density DENSITY (default 0.5).  Built by make, never run by make
 * check: a benchmark reports, it asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mk/dtype.h"
#include "mk/err.h"
#include "core/hash.h"
#include "mk/method.h"
#include "bench_util.h"

#define TILE 16384u
#define MAXK 8

static const char *const family[] = {
	"task_arithmetic", "ties", "dare_linear", "dare_ties",
	"breadcrumbs", "breadcrumbs_ties", "della", "della_linear",
};


/* Roughly normal: the sum of four uniforms in [-1, 1), scale s. */
static float normalish(float s)
{
	uint64_t r = next();
	float t = 0.0f;

	for (int k = 0; k < 4; k++)
		t += (float)(int16_t)(r >> (16 * k)) * (1.0f / 32768.0f);
	return t * 0.5f * s;
}

struct bench {
	size_t k;
	uint64_t n, cols;
	uint16_t *in[MAXK];
	float *cv;             /* [k + 1][TILE]: converted inputs, then the output */
	uint16_t *ob;          /* [TILE] bf16 output */
	int reps;
	double density;
};

static void usage(void)
{
	fprintf(stderr, "usage: mk-bench-kernels [-n MELEM] [-c COLS] [-k INPUTS] [-r REPS] [-d DENSITY] [-w] [METHOD...]\n");
}

static double median(double *t, int n)
{
	qsort(t, (size_t)n, sizeof(t[0]), cmp_d);
	return t[n / 2];
}

static void convert_tile(struct bench *B, uint64_t e, uint64_t cnt)
{
	for (size_t i = 0; i < B->k; i++)
		mk_dtype_convert(MK_DT_F32, B->cv + i * TILE, MK_DT_BF16, B->in[i] + e, cnt);
}

/* The chunk of elements [e, e + cnt) as mk-merge hands it over: the
 * inputs as BF16 (in raw) to a job that takes them so, else converted
 * (into B->cv, which ptr points at). */
static struct mk_job_chunk tile_chunk(struct bench *B, uint64_t e, uint64_t cnt, bool bf16, const void **ptr,
				      const void **raw)
{
	struct mk_job_chunk c = { .elem_begin = e, .count = cnt, .in = ptr };

	if (!bf16) {
		convert_tile(B, e, cnt);
		return c;
	}
	for (size_t i = 0; i < B->k; i++)
		raw[i] = B->in[i] + e;
	c.in = raw;
	c.bf16 = true;
	return c;
}

/* One method: returns 0, or 1 with a message. */
static int run_method(struct bench *B, const char *name)
{
	static const char *labels[MAXK] = { "a", "b", "c", "d", "e", "f", "g", "h" };
	const struct mk_method *m = mk_method_find(name);
	struct mk_tensor_desc td[MAXK];
	struct mk_pval pin[MAXK * 16];
	struct mk_job_desc d;
	struct mk_err err;
	double ta[64], tc[64], tj[64], tk[64], bytes = (double)B->k * (double)B->n * 2.0;
	uint32_t crc = 0;
	unsigned npasses = 0;
	int pw, pd;

	if (!m || m->nparams > 16) {
		fprintf(stderr, "mk-bench-kernels: no method '%s'\n", name);
		return 1;
	}
	pw = mk_method_param_index(m, "weight");
	pd = mk_method_param_index(m, "density");
	memset(pin, 0, sizeof(pin));
	for (size_t i = 0; i < B->k; i++) {
		td[i] = (struct mk_tensor_desc){ .dtype = MK_DT_BF16, .ndim = 2 };
		td[i].shape[0] = B->n / B->cols;
		td[i].shape[1] = B->cols;
		if (i == 0)
			continue;
		if (pw >= 0)
			pin[i * m->nparams + (size_t)pw] =
				mk_pval_float(B->k == 3 ? (i == 1 ? 0.6 : 0.4) : 1.0 / (double)(B->k - 1));
		if (pd >= 0)
			pin[i * m->nparams + (size_t)pd] = mk_pval_float(B->density);
	}
	d = (struct mk_job_desc){ .tensor = "model.layers.0.mlp.down_proj.weight", .seed = 42,
				  .ninputs = B->k, .base = 0, .in = td, .labels = labels, .input = pin };
	for (int r = 0; r < B->reps; r++) {
		struct mk_job job;
		const void *ptr[MAXK], *raw[MAXK];
		float *out = B->cv + B->k * TILE;
		double t0 = now(), tapply = 0.0, tacc = 0.0, t1, a0;

		mk_err_clear(&err);
		if (mk_job_init(&job, m, &d, MK_DT_BF16, &err)) {
			fprintf(stderr, "mk-bench-kernels: %s: %s\n", name, err.msg);
			return 1;
		}
		npasses = job.npasses;
		for (size_t i = 0; i < B->k; i++)
			ptr[i] = B->cv + i * TILE;
		for (unsigned p = 0; p < job.npasses; p++) {
			for (uint64_t e = 0; e < B->n; e += TILE) {
				uint64_t cnt = B->n - e < TILE ? B->n - e : TILE;
				struct mk_job_chunk c = tile_chunk(B, e, cnt, job.accumulate_bf16, ptr, raw);
				a0 = now();
				if (mk_job_accumulate(&job, p, &c, &err))
					goto fail;
				tacc += now() - a0;
			}
			if (mk_job_finish(&job, p, &err))
				goto fail;
		}
		t1 = now();
		if (r == 0)
			crc = 0;
		for (uint64_t e = 0; e < B->n; e += TILE) {
			uint64_t cnt = B->n - e < TILE ? B->n - e : TILE;
			struct mk_job_chunk c = tile_chunk(B, e, cnt, job.apply_bf16, ptr, raw);
			a0 = now();
			if (mk_job_apply(&job, &c, out, &err))
				goto fail;
			tapply += now() - a0;
			if (r == 0)
				crc = mk_crc32c(crc, out, cnt * sizeof(float));
			mk_dtype_convert(MK_DT_BF16, B->ob, MK_DT_F32, out, cnt);
		}
		tj[r] = now() - t0;
		tc[r] = tj[r] - (t1 - t0);
		ta[r] = tapply;
		tk[r] = tapply + tacc;
		mk_job_release(&job);
		continue;
fail:
		fprintf(stderr, "mk-bench-kernels: %s: %s\n", name, err.msg);
		mk_job_release(&job);
		return 1;
	}
	printf("%-17s passes %u  apply %6.2f  kernel %6.2f  apply+cvt %6.2f  job %6.2f GB/s  crc %08x\n",
	       name, npasses, bytes / median(ta, B->reps) * 1e-9, bytes / median(tk, B->reps) * 1e-9,
	       bytes / median(tc, B->reps) * 1e-9, bytes / median(tj, B->reps) * 1e-9, crc);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench B = { .k = 3, .n = 64u << 20, .cols = 4096, .reps = 3, .density = 0.5 };
	unsigned long melem = 64, cols = 4096;
	double t[64], bytes;
	int opt, rc = 0;
	uint16_t *cp;

	bench_clock = CLOCK_THREAD_CPUTIME_ID; /* CPU time unless -w */

	while ((opt = getopt(argc, argv, "n:c:k:r:d:wh")) != -1) {
		switch (opt) {
		case 'n': melem = strtoul(optarg, NULL, 10); break;
		case 'c': cols = strtoul(optarg, NULL, 10); break;
		case 'k': B.k = strtoul(optarg, NULL, 10); break;
		case 'r': B.reps = atoi(optarg); break;
		case 'd': B.density = strtod(optarg, NULL); break;
		case 'w': bench_clock = CLOCK_MONOTONIC; break;
		default: usage(); return 2;
		}
	}
	if (melem == 0 || melem > 4096 || cols == 0 || cols > (1u << 20) || (cols & (cols - 1)) || B.k < 2 || B.k > MAXK || B.reps < 1 || B.reps > 63) {
		usage();
		return 2;
	}
	B.n = (uint64_t)melem << 20;
	B.cols = cols;
	bytes = (double)B.k * (double)B.n * 2.0;
	B.cv = malloc((B.k + 1) * TILE * sizeof(float));
	B.ob = malloc(TILE * sizeof(uint16_t));
	cp = malloc(B.k * B.n * sizeof(uint16_t));
	for (size_t i = 0; i < B.k; i++)
		B.in[i] = malloc(B.n * sizeof(uint16_t));
	for (size_t i = 0; i < B.k; i++)
		if (!B.in[i])
			cp = NULL;
	if (!B.cv || !B.ob || !cp) {
		fprintf(stderr, "mk-bench-kernels: out of memory\n");
		return 1;
	}
	for (uint64_t e = 0; e < B.n; e += TILE) {
		float f[TILE], g[TILE];
		for (unsigned k = 0; k < TILE; k++)
			f[k] = normalish(0.02f);
		mk_dtype_convert(MK_DT_BF16, B.in[0] + e, MK_DT_F32, f, TILE);
		mk_dtype_convert(MK_DT_F32, f, MK_DT_BF16, B.in[0] + e, TILE);
		for (size_t i = 1; i < B.k; i++) {
			for (unsigned k = 0; k < TILE; k++)
				g[k] = f[k] + normalish(1e-3f);
			mk_dtype_convert(MK_DT_BF16, B.in[i] + e, MK_DT_F32, g, TILE);
		}
	}
	printf("mk-bench-kernels: %zu bf16 inputs of %lu Mi elements in rows of %lu, %d runs, one thread; "
	       "GB/s of bf16 input (medians of %s time)\n", B.k, melem, cols, B.reps,
	       bench_clock == CLOCK_MONOTONIC ? "wall-clock" : "CPU");
	for (int r = 0; r < B.reps; r++) {
		double t0 = now();
		for (size_t i = 0; i < B.k; i++)
			memcpy(cp + i * B.n, B.in[i], B.n * sizeof(uint16_t));
		t[r] = now() - t0;
	}
	printf("%-17s %6.2f GB/s\n", "memcpy", bytes / median(t, B.reps) * 1e-9);
	for (int r = 0; r < B.reps; r++) {
		double t0 = now();
		for (uint64_t e = 0; e < B.n; e += TILE)
			convert_tile(&B, e, B.n - e < TILE ? B.n - e : TILE);
		t[r] = now() - t0;
	}
	printf("%-17s %6.2f GB/s\n", "bf16_f32", bytes / median(t, B.reps) * 1e-9);
	free(cp);
	for (int a = optind; a < argc && !rc; a++)
		rc = run_method(&B, argv[a]);
	for (size_t f = 0; optind == argc && f < sizeof(family) / sizeof(family[0]) && !rc; f++)
		rc = run_method(&B, family[f]);
	for (size_t i = 0; i < B.k; i++)
		free(B.in[i]);
	free(B.cv);
	free(B.ob);
	return rc;
}
