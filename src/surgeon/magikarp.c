/* magikarp.c - --magikarp's well-trained tokens (match.h), after "Fishing
 * for Magikarp" as mergekit 0.1.5 applies it.
 *
 * Unused rows: those no token has, and those of tokens whose text holds
 * "unused_token" or "reserved_special_token".  Bad rows: the unused ones;
 * with an lm_head, the input rows whose norm is under the 1st percentile;
 * where there are unused rows, the rows (input, and output with an
 * lm_head) whose cosine similarity to the unused rows' mean is over the
 * 99th percentile, or 0.5 when that is lower.  Percentiles as
 * torch.quantile takes them (linear between the sorted values). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "surgeon/match.h"
#include "surgeon_impl.h"

static int fcmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* torch.quantile(v, q), linear; v is sorted in place */
static float quantile(float *v, size_t n, double q)
{
	qsort(v, n, sizeof(float), fcmp);
	double pos = q * (double)(n - 1);
	size_t lo = (size_t)floor(pos), hi = lo + 1 < n ? lo + 1 : lo;
	float w = (float)(pos - (double)lo);
	return v[lo] + w * (v[hi] - v[lo]);
}

static void row_mean(const float *m, size_t d, const uint8_t *sel, size_t rows, float *mean)
{
	double *acc = calloc(d, sizeof(double));
	size_t cnt = 0;
	for (size_t i = 0; i < rows; i++)
		if (sel[i]) {
			for (size_t l = 0; l < d; l++)
				acc[l] += m[i * d + l];
			cnt++;
		}
	for (size_t l = 0; l < d; l++)
		mean[l] = (float)(acc[l] / (double)cnt);
	free(acc);
}

/* rows whose cosine similarity to mean is over max(99th percentile, 0.5) -> bad */
static void mark_similar(const float *m, size_t rows, size_t d, const float *mean, float *tmp, float *sim,
			 uint8_t *bad)
{
	double mn = 0;
	for (size_t l = 0; l < d; l++)
		mn += (double)mean[l] * mean[l];
	float mnorm = fmaxf(sqrtf((float)mn), 1e-8f);
	for (size_t i = 0; i < rows; i++) {
		float dot = 0, nn = 0;
		for (size_t l = 0; l < d; l++)
			dot += m[i * d + l] * mean[l], nn += m[i * d + l] * m[i * d + l];
		sim[i] = dot / (fmaxf(sqrtf(nn), 1e-8f) * mnorm);
	}
	memcpy(tmp, sim, rows * sizeof(float));
	float th = quantile(tmp, rows, 0.99);
	if (th < 0.5f)
		th = 0.5f;
	for (size_t i = 0; i < rows; i++)
		if (sim[i] > th)
			bad[i] = 1;
}

int mk_surgeon_well_trained(const struct mk_surgeon_vocab *v, const float *embed, const float *lm_head, size_t rows,
			    size_t d, uint8_t *good, struct mk_err *err)
{
	uint8_t *unused = surgeon_alloc(rows, 1), *bad = surgeon_alloc(rows, 1);
	float *tmp = surgeon_alloc(rows, sizeof(float)), *val = surgeon_alloc(rows, sizeof(float));
	float *mean = surgeon_alloc(d, sizeof(float));
	size_t nunused = 0;
	int rc = 0;

	if (!unused || !bad || !tmp || !val || !mean || rows == 0) {
		rc = rows ? mk_err_set(err, MK_ENOMEM, "magikarp: out of memory for %zu rows", rows)
			  : mk_err_set(err, MK_EINVAL, "magikarp: an embedding of no rows");
		goto out;
	}
	for (size_t i = 0; i < rows; i++)
		unused[i] = 1;
	for (size_t id = 0; id < v->n; id++) {
		const char *k = v->key[id];
		if (!k || id >= rows)
			continue;
		/* the text as mergekit unnormalises it: a word start's mark is
		 * a space, which cannot start either marker */
		unused[id] = strstr(k + 1, "unused_token") || strstr(k + 1, "reserved_special_token");
	}
	for (size_t i = 0; i < rows; i++)
		nunused += unused[i], bad[i] = unused[i];
	if (lm_head) {
		for (size_t i = 0; i < rows; i++) {
			float s = 0;
			for (size_t l = 0; l < d; l++)
				s += embed[i * d + l] * embed[i * d + l];
			val[i] = sqrtf(s);
		}
		memcpy(tmp, val, rows * sizeof(float));
		float th = quantile(tmp, rows, 0.01);
		for (size_t i = 0; i < rows; i++)
			if (val[i] < th)
				bad[i] = 1;
	}
	if (nunused) {
		row_mean(embed, d, unused, rows, mean);
		mark_similar(embed, rows, d, mean, tmp, val, bad);
		if (lm_head) {
			row_mean(lm_head, d, unused, rows, mean);
			mark_similar(lm_head, rows, d, mean, tmp, val, bad);
		}
	}
	for (size_t id = 0; id < v->n; id++)
		good[id] = v->key[id] && id < rows && !bad[id];
out:
	free(unused), free(bad), free(tmp), free(val), free(mean);
	return rc;
}
