/* misc_methods.h - helpers shared by sce, ram, ramplus_tl, nearswap and
 * arcee_fusion (internal to src/methods).
 *
 * - misc_same_shapes: the used inputs must have one shape (these methods
 *   do no embedding rectification, as in mergekit, which fails on a
 *   stacking or subtraction error, mk names the tensor and both shapes).
 * - misc_out_dtype: torch's result dtype of the used inputs.
 * - misc_fkey: an order-preserving map of a float32 onto uint32 (negative
 *   floats below positive ones, -0 just below +0), so "largest value"
 *   selections can run as radix histograms on the key's bits: 16 high
 *   bits in one pass, the 16 low bits inside the chosen bucket in the
 *   next.
 */
#ifndef MK_MISC_METHODS_H
#define MK_MISC_METHODS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "mk/method.h"

#define MISC_NBUCKET 65536u


static inline uint32_t misc_fkey(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline float misc_fkey_value(uint32_t k)
{
	uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static inline void misc_shape_str(const struct mk_tensor_desc *t, char *buf, size_t len)
{
	size_t o = (size_t)snprintf(buf, len, "[");
	for (unsigned k = 0; k < t->ndim && o < len; k++)
		o += (size_t)snprintf(buf + o, len - o, "%s%llu", k ? ", " : "",
				      (unsigned long long)t->shape[k]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

static inline int misc_same_shapes(const struct mk_method *m, const struct mk_job_desc *d,
				   const bool *used, struct mk_tensor_desc *out,
				   struct mk_err *err)
{
	const struct mk_tensor_desc *b = &d->in[d->base];
	char sa[128], sb[128];

	for (size_t i = 0; i < d->ninputs; i++) {
		const struct mk_tensor_desc *x = &d->in[i];
		bool same = x->ndim == b->ndim;
		for (unsigned k = 0; same && k < x->ndim; k++)
			same = x->shape[k] == b->shape[k];
		if (!used[i] || same)
			continue;
		misc_shape_str(x, sa, sizeof(sa));
		misc_shape_str(b, sb, sizeof(sb));
		return mk_err_set(err, MK_EMISMATCH,
				  "method '%s', tensor '%s': tensor size mismatch: input %zu%s%s%s has "
				  "shape %s, the base %s (this method does not cut embeddings)",
				  m->name, d->tensor ? d->tensor : "?", i,
				  d->labels && d->labels[i] ? " ('" : "",
				  d->labels && d->labels[i] ? d->labels[i] : "",
				  d->labels && d->labels[i] ? "')" : "", sa, sb);
	}
	out->ndim = b->ndim;
	memcpy(out->shape, b->shape, sizeof(out->shape));
	return 0;
}

/* Promoted dtype and compute dtype of the used inputs. */
static inline void misc_dtypes(const struct mk_job_desc *d, const bool *used,
			       enum mk_dtype *promoted, enum mk_dtype *compute)
{
	enum mk_dtype dts[64];
	size_t n = 0;

	for (size_t i = 0; i < d->ninputs && n < 64; i++)
		if (used[i])
			dts[n++] = d->in[i].dtype;
	*promoted = mk_promote_dtypes(n, dts);
	*compute = mk_compute_dtype_of(n, dts);
}

/* Number of non-base inputs. */
static inline size_t misc_nonbase(const struct mk_job_desc *d)
{
	return d->ninputs - (d->base >= 0);
}

/* From a histogram over [MISC_NBUCKET] buckets, the bucket holding the
 * k-th largest key (1-based), and how many keys lie strictly above it. */
static inline uint32_t misc_pick_bucket(const uint64_t *hist, uint64_t k, uint64_t *above)
{
	uint64_t acc = 0;
	uint32_t b = MISC_NBUCKET;

	while (b > 0) {
		b--;
		if (acc + hist[b] >= k)
			break;
		acc += hist[b];
	}
	*above = acc;
	return b;
}

#endif
