/* st_gather.c - where a tensor's elements lie in its file, and copying
 * a strided tensor's elements (a PyTorch view) into row-major order. */
#include <string.h>
#include "io/safetensors.h"

/* idx: the multi-index of flat element e (row-major) */
static void unflatten(const struct mk_st_tensor *t, uint64_t e, uint64_t *idx)
{
	for (unsigned d = t->desc.ndim; d-- > 0;) {
		uint64_t n = t->desc.shape[d];
		idx[d] = e % n;
		e /= n;
	}
}

void mk_st_tensor_extent(const struct mk_st_tensor *t, uint64_t e0, uint64_t n, uint64_t *lo, uint64_t *hi)
{
	uint64_t a[MK_MAX_DIMS] = { 0 }, b[MK_MAX_DIMS] = { 0 }, base = 0, last;
	unsigned bits = mk_dtype_bits(t->desc.dtype), es = bits / 8, d = 0, nd = t->desc.ndim;

	if (!t->stride) {
		*lo = t->begin + e0 * bits / 8;
		*hi = t->begin + (e0 + n) * bits / 8;
		return;
	}
	/* the box of the rows (or part of one) the range touches: the common
	 * prefix of its first and last index, dimension d between them, the
	 * dimensions after d whole (strides are never negative) */
	unflatten(t, e0, a);
	unflatten(t, e0 + n - 1, b);
	while (d < nd && a[d] == b[d])
		base += a[d] * t->stride[d], d++;
	if (d == nd) {
		*lo = t->begin + base * es;
		*hi = *lo + es;
		return;
	}
	last = base + b[d] * t->stride[d];
	base += a[d] * t->stride[d];
	for (unsigned k = d + 1; k < nd; k++)
		last += (t->desc.shape[k] - 1) * t->stride[k];
	*lo = t->begin + base * es;
	*hi = t->begin + (last + 1) * es;
}

int mk_st_tensor_gather(const struct mk_st_tensor *t, uint64_t e0, uint64_t n, const void *src, uint64_t src_lo,
			uint64_t src_len, void *dst, struct mk_err *err)
{
	uint64_t lo, hi, idx[MK_MAX_DIMS] = { 0 };
	unsigned bits = mk_dtype_bits(t->desc.dtype), es = bits / 8, nd = t->desc.ndim;
	const uint8_t *s = src;
	uint8_t *o = dst;

	if (n == 0)
		return 0;
	if (e0 > t->nelem || n > t->nelem - e0 || (e0 * bits) % 8 || (n * bits) % 8 || (t->stride && bits % 8))
		return mk_err_set(err, MK_EINVAL, "tensor '%s': elements [%llu, %llu) are not whole bytes of its %llu",
				  t->name, (unsigned long long)e0, (unsigned long long)(e0 + n),
				  (unsigned long long)t->nelem);
	mk_st_tensor_extent(t, e0, n, &lo, &hi);
	if (lo < src_lo || hi - src_lo > src_len)
		return mk_err_set(err, MK_EINVAL,
				  "tensor '%s': elements [%llu, %llu) lie in bytes [%llu, %llu), not all in the %llu read at %llu",
				  t->name, (unsigned long long)e0, (unsigned long long)(e0 + n), (unsigned long long)lo,
				  (unsigned long long)hi, (unsigned long long)src_len, (unsigned long long)src_lo);
	if (!t->stride || nd == 0) {
		memcpy(dst, s + (lo - src_lo), (size_t)(hi - lo));
		return 0;
	}
	/* runs along the last dimension, the index advanced like an odometer */
	unflatten(t, e0, idx);
	uint64_t inner = t->desc.shape[nd - 1], st = t->stride[nd - 1] * es;
	while (n) {
		uint64_t at = 0, run = inner - idx[nd - 1];
		if (run > n)
			run = n;
		for (unsigned d = 0; d < nd; d++)
			at += idx[d] * t->stride[d];
		const uint8_t *p = s + (t->begin + at * es - src_lo);
		if (st == es) {
			memcpy(o, p, (size_t)(run * es));
			o += run * es;
		} else {
			switch (es) {
			case 1: for (uint64_t k = 0; k < run; k++, p += st) *o++ = *p; break;
			case 2: for (uint64_t k = 0; k < run; k++, p += st, o += 2) memcpy(o, p, 2); break;
			case 4: for (uint64_t k = 0; k < run; k++, p += st, o += 4) memcpy(o, p, 4); break;
			case 8: for (uint64_t k = 0; k < run; k++, p += st, o += 8) memcpy(o, p, 8); break;
			default: for (uint64_t k = 0; k < run; k++, p += st, o += es) memcpy(o, p, es);
			}
		}
		n -= run;
		idx[nd - 1] = 0;
		for (unsigned d = nd - 1; d-- > 0;) {
			if (++idx[d] < t->desc.shape[d])
				break;
			idx[d] = 0;
		}
	}
	return 0;
}
