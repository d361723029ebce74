/* gta_simd_avx512.c - the task-arithmetic family's primitives (gta_simd.h)
 * with AVX-512: the bytes of gta_simd_c.c's, sixteen 32-bit lanes (or
 * eight 64-bit ones) at a time, packing with vpcompressd and selecting
 * with mask registers.  F for most; DQ for the random draws' 64-bit
 * multiplies; BW for 16-bit words.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "core/simd.h"
#include "gta_simd.h"
#include "rng.h"

#if MK_GTA_X86
#include <immintrin.h>

/* row_classes_c with AVX-512, sixteen keys at a time, the indices of
 * d = 1 packed with vpcompressd (dl has room for 16 more). */
__attribute__((target("avx512f")))
static uint64_t row_classes_avx512(const uint32_t *restrict key, uint64_t L, uint32_t lo,
				   uint32_t *restrict bix, uint32_t *restrict dl)
{
	const __m512i one = _mm512_set1_epi32(1), lom = _mm512_set1_epi32((int)(1 - lo));
	const __m512i low = _mm512_set1_epi32(0xffff), step = _mm512_set1_epi32(16);
	__m512i idx = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	uint64_t nd = 0, j = 0;

	for (; j + 16 <= L; j += 16) {
		__m512i k = _mm512_loadu_si512((const void *)(key + j));
		__mmask16 nz = _mm512_test_epi32_mask(k, k), d = _mm512_test_epi32_mask(k, low);
		__m512i v = _mm512_add_epi32(_mm512_srli_epi32(k, 16), lom);
		v = _mm512_mask_add_epi32(_mm512_add_epi32(v, v), d, _mm512_add_epi32(v, v), one);
		_mm512_storeu_si512((void *)(bix + j), _mm512_maskz_mov_epi32(nz, v));
		_mm512_storeu_si512((void *)(dl + nd), _mm512_maskz_compress_epi32(d, idx));
		nd += (unsigned)__builtin_popcount(d);
		idx = _mm512_add_epi32(idx, step);
	}
	return mk_gta_row_classes_from(key, j, L, lo, bix, dl, nd);
}

/* class_starts_c with AVX-512: sixteen classes at a time, their counts
 * summed by a scan in the register (shifts by 1, 2, 4, 8 lanes); nc a
 * multiple of 16. */
__attribute__((target("avx512f")))
static uint32_t class_starts_avx512(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t nc)
{
	const __m512i zero = _mm512_setzero_si512(), last = _mm512_set1_epi32(15);
	__m512i carry = zero, most = zero;

	for (uint32_t x = 0; x < nc; x += 16) {
		__m512i a = _mm512_loadu_si512((const void *)(c0 + x));
		__m512i n = _mm512_add_epi32(a, _mm512_loadu_si512((const void *)(c1 + x))), t = n, ex;
		most = _mm512_mask_max_epu32(most, 0xaaaa, most, n);
		t = _mm512_add_epi32(t, _mm512_alignr_epi32(t, zero, 15));
		t = _mm512_add_epi32(t, _mm512_alignr_epi32(t, zero, 14));
		t = _mm512_add_epi32(t, _mm512_alignr_epi32(t, zero, 12));
		t = _mm512_add_epi32(t, _mm512_alignr_epi32(t, zero, 8));
		ex = _mm512_add_epi32(_mm512_sub_epi32(t, n), carry);
		_mm512_storeu_si512((void *)(c0 + x), ex);
		_mm512_storeu_si512((void *)(c1 + x), _mm512_add_epi32(ex, a));
		carry = _mm512_add_epi32(carry, _mm512_permutexvar_epi32(last, t));
	}
	return _mm512_reduce_max_epu32(most);
}

/* class_starts16_c with AVX-512 BW: thirty-two classes at a time, the
 * scan within each 128-bit lane (shifts by 1, 2 and 4 words), then the
 * lanes' totals across; the last sixteen of an nc that is an odd
 * multiple of 16 under a mask.  No sum passes 65535 (the row's length). */
__attribute__((target("avx512f,avx512bw")))
static uint32_t class_starts16_avx512(uint16_t *restrict c0, uint16_t *restrict c1, uint32_t nc)
{
	const __m512i zero = _mm512_setzero_si512(), last = _mm512_set1_epi16(31);
	const __m512i w7 = _mm512_set1_epi16(0x0f0e);
	const __mmask32 odd = 0xaaaaaaaau;
	__m512i carry = zero, most = zero;

	for (uint32_t x = 0; x < nc; x += 32) {
		__mmask32 live = nc - x >= 32 ? ~(__mmask32)0 : (__mmask32)0xffffu;
		__m512i a = _mm512_maskz_loadu_epi16(live, c0 + x);
		__m512i n = _mm512_add_epi16(a, _mm512_maskz_loadu_epi16(live, c1 + x)), t = n, lt, ex;
		most = _mm512_mask_max_epu16(most, odd, most, n);
		t = _mm512_add_epi16(t, _mm512_bslli_epi128(t, 2));
		t = _mm512_add_epi16(t, _mm512_bslli_epi128(t, 4));
		t = _mm512_add_epi16(t, _mm512_bslli_epi128(t, 8));
		/* each lane's total (its word 7) onto every word of the lanes above */
		lt = _mm512_shuffle_epi8(t, w7);
		t = _mm512_add_epi16(t, _mm512_alignr_epi64(lt, zero, 6));
		t = _mm512_add_epi16(t, _mm512_alignr_epi64(lt, zero, 4));
		t = _mm512_add_epi16(t, _mm512_alignr_epi64(lt, zero, 2));
		ex = _mm512_add_epi16(_mm512_sub_epi16(t, n), carry);
		_mm512_mask_storeu_epi16(c0 + x, live, ex);
		_mm512_mask_storeu_epi16(c1 + x, live, _mm512_add_epi16(ex, a));
		carry = _mm512_add_epi16(carry, _mm512_permutexvar_epi16(last, t));
	}
	return (uint32_t)_mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_and_si512(most, _mm512_set1_epi32(0xffff)),
								 _mm512_srli_epi32(most, 16)));
}

/* The counters of elements e .. e + 7 of a stream (mk_rng_u64's, before
 * the mix), eight 64-bit lanes; the next eight: + 8 * MK_RNG_GOLDEN. */
__attribute__((target("avx512f,avx512dq"), always_inline))
static inline __m512i rng_counters8(uint64_t stream, uint64_t e)
{
	return _mm512_add_epi64(_mm512_set1_epi64((long long)(stream + (e + 1) * MK_RNG_GOLDEN)),
				_mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
						   _mm512_set1_epi64((long long)MK_RNG_GOLDEN)));
}

/* mk_rng_mix64 of eight lanes, then >> 11: the 53 bits a draw compares. */
__attribute__((target("avx512f,avx512dq"), always_inline))
static inline __m512i rng_draw8(__m512i z)
{
	z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
			       _mm512_set1_epi64((long long)0xBF58476D1CE4E5B9ull));
	z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
			       _mm512_set1_epi64((long long)0x94D049BB133111EBull));
	return _mm512_srli_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 31)), 11);
}

/* DELLA's draw (mk_gta_della_draw_row_c) with AVX-512 (DQ for the 64-bit
 * multiplies): eight elements at a time, their eight bits one mask byte
 * (e0 a multiple of 8). */
__attribute__((target("avx512f,avx512dq,avx512vl")))
static uint32_t della_draw_row_avx512(uint64_t stream, uint64_t e0, uint64_t j0, uint64_t L,
				      const uint32_t *restrict rank, const uint64_t *restrict thr,
				      const uint32_t *restrict key, uint8_t *restrict mask, float *restrict m,
				      uint64_t margin, uint32_t *restrict flag, uint32_t nf)
{
	const __m512i mg = _mm512_set1_epi64((long long)margin);
	const __m512i step = _mm512_set1_epi64((long long)(8 * MK_RNG_GOLDEN));
	__m512i z0 = rng_counters8(stream, e0 + j0);
	uint64_t j = j0;

	if ((e0 + j0) % 8 == 0) {
		for (; j + 8 <= L; j += 8) {
			__m512i z = rng_draw8(z0), t;
			__mmask8 k;
			z0 = _mm512_add_epi64(z0, step);
			t = _mm512_i32gather_epi64(_mm256_loadu_si256((const __m256i *)(const void *)(rank + j)),
						   (const void *)thr, 8);
			k = _mm512_cmplt_epu64_mask(z, t);
			mask[(e0 + j) >> 3] = (uint8_t)k;
			_mm256_storeu_ps(m + j, _mm256_maskz_mov_ps(k, _mm256_loadu_ps((const float *)(const void *)(key + j))));
			for (__mmask8 f = _mm512_cmpge_epu64_mask(_mm512_add_epi64(z, mg), t) &
					  _mm512_cmplt_epu64_mask(z, _mm512_add_epi64(t, mg));
			     f; f &= (__mmask8)(f - 1))
				flag[nf++] = (uint32_t)j + (uint32_t)__builtin_ctz(f);
		}
	}
	return mk_gta_della_draw_row_c(stream, e0, j, L, rank, thr, key, mask, m, margin, flag, nf);
}

/* RAND's statistics pass over elements e0 .. e0 + cnt of a tile in one
 * loop, with AVX-512 (DQ for the 64-bit multiplies): |x - b| in float32
 * as tile_abs makes it, each element's draw as rand_keep_one makes it
 * (its bit into the mask when there is one), and both lane sums, before
 * (every |delta|) and after (the kept ones, 0.0 for the others, as the
 * separate loops add them): eight elements a time from a multiple of 8
 * on, one float64 lane each, in element order, so the bits are those of
 * fsum_run_f32 over the arrays.  (The separate loops, each over the
 * tile's arrays, took about a third of dare_ties' samples.) */
__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline __m256 rand_d8(const void *x, const void *b,
										 uint64_t k, const bool B)
{
	__m256 vx, vb;

	if (B) {
		vx = _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)x + k))), 16));
		vb = _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)b + k))), 16));
	} else {
		vx = _mm256_loadu_ps((const float *)x + k);
		vb = _mm256_loadu_ps((const float *)b + k);
	}
	return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(vx, vb));
}

/* One element (k of the tile) of rand_tile_k, outside its vectors. */
static inline void rand_sum_one(uint64_t stream, uint64_t thr, uint8_t *mask, struct lsum *before,
				struct lsum *after, uint64_t e0, uint64_t k, const void *x, const void *b, const bool B)
{
	float d = B ? fabsf(mk__bf16_widen(((const uint16_t *)x)[k]) - mk__bf16_widen(((const uint16_t *)b)[k])) :
		      fabsf(((const float *)x)[k] - ((const float *)b)[k]);
	float m;

	rand_keep_one(stream, thr, e0 + k, d, &m, mask);
	before->lane[(e0 + k) % LSUM_LANES] += (double)d;
	after->lane[(e0 + k) % LSUM_LANES] += (double)m;
}

__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline void
rand_tile_k(uint64_t stream, uint64_t thr, uint8_t *mask, struct lsum *before, struct lsum *after, uint64_t e0,
	    uint64_t cnt, const void *x, const void *b, const bool B)
{
	const __m512i vt = _mm512_set1_epi64((long long)thr);
	const __m512i step = _mm512_set1_epi64((long long)(8 * MK_RNG_GOLDEN));
	uint64_t k = 0;

	while (k < cnt) {
		uint64_t r = k + mk_fsum_run(e0 + k, cnt - k);
		for (; k < r && (e0 + k) % LSUM_LANES; k++)
			rand_sum_one(stream, thr, mask, before, after, e0, k, x, b, B);
		if (k + 8 <= r) {
			__m512d lb = _mm512_loadu_pd(before->lane), la = _mm512_loadu_pd(after->lane);
			__m512i z = rng_counters8(stream, e0 + k);
			for (; k + 8 <= r; k += 8) {
				__mmask8 keep = _mm512_cmplt_epu64_mask(rng_draw8(z), vt);
				__m512d d = _mm512_cvtps_pd(rand_d8(x, b, k, B));
				if (mask)
					mask[(e0 + k) >> 3] = (uint8_t)keep;
				lb = _mm512_add_pd(lb, d);
				la = _mm512_add_pd(la, _mm512_maskz_mov_pd(keep, d));
				z = _mm512_add_epi64(z, step);
			}
			_mm512_storeu_pd(before->lane, lb);
			_mm512_storeu_pd(after->lane, la);
		}
		for (; k < r; k++)
			rand_sum_one(stream, thr, mask, before, after, e0, k, x, b, B);
		if ((e0 + r) % MK_SUM_BLOCK == 0) {
			lsum_close(before);
			lsum_close(after);
		}
	}
}

__attribute__((target("avx512f,avx512dq,avx512vl")))
static void rand_tile_avx512(uint64_t stream, uint64_t thr, uint8_t *mask, uint64_t e0, uint64_t cnt,
			     const void *x, const void *b, bool bf16, struct lsum *before, struct lsum *after)
{
	if (bf16)
		rand_tile_k(stream, thr, mask, before, after, e0, cnt, x, b, true);
	else
		rand_tile_k(stream, thr, mask, before, after, e0, cnt, x, b, false);
}

/* tile_under_prefix_c with AVX-512: sixteen keys compared at once, those
 * that match packed to the front (vpcompressd) and stored as 16-bit words
 * (the store writes 16 words at lo + n: lo has TILE + 16). */
__attribute__((target("avx512f")))
static uint64_t tile_under_prefix_avx512(const uint32_t *restrict key, uint64_t cnt, uint32_t P,
					 uint16_t *restrict lo)
{
	const __m512i vp = _mm512_set1_epi32((int)P);
	uint64_t n = 0, k = 0;

	for (; k + 16 <= cnt; k += 16) {
		__m512i x = _mm512_loadu_si512((const void *)(key + k));
		__mmask16 m = _mm512_cmpeq_epi32_mask(_mm512_srli_epi32(x, 16), vp);
		_mm256_storeu_si256((__m256i *)(void *)(lo + n), _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(m, x)));
		n += (unsigned)__builtin_popcount(m);
	}
	return mk_gta_under_prefix_from(key, k, cnt, P, lo, n);
}

/* tile_index_under_prefix_c with AVX-512, the same way. */
__attribute__((target("avx512f")))
static uint64_t tile_index_under_prefix_avx512(const uint32_t *restrict key, uint64_t cnt, uint32_t P, uint32_t e0,
					       uint32_t *restrict idx)
{
	const __m512i vp = _mm512_set1_epi32((int)P), step = _mm512_set1_epi32(16);
	__m512i vi = _mm512_add_epi32(_mm512_set1_epi32((int)e0),
				      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
	uint64_t n = 0, k = 0;

	for (; k + 16 <= cnt; k += 16) {
		__m512i x = _mm512_loadu_si512((const void *)(key + k));
		__mmask16 m = _mm512_cmpeq_epi32_mask(_mm512_srli_epi32(x, 16), vp);
		_mm512_storeu_si512((void *)(idx + n), _mm512_maskz_compress_epi32(m, vi));
		n += (unsigned)__builtin_popcount(m);
		vi = _mm512_add_epi32(vi, step);
	}
	return mk_gta_index_under_prefix_from(key, k, cnt, P, e0, idx, n);
}

/* tile_window_c with AVX-512, the same way. */
__attribute__((target("avx512f")))
static uint64_t tile_window_avx512(const uint32_t *restrict key, uint64_t cnt, uint32_t lo, uint32_t hi, uint32_t e0,
				   uint32_t *restrict idx, uint32_t *restrict kv, uint64_t *below)
{
	const __m512i vlo = _mm512_set1_epi32((int)lo), vspan = _mm512_set1_epi32((int)(hi - lo));
	const __m512i step = _mm512_set1_epi32(16);
	__m512i vi = _mm512_add_epi32(_mm512_set1_epi32((int)e0),
				      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
	uint64_t n = 0, k = 0, nb = 0;

	for (; k + 16 <= cnt; k += 16) {
		__m512i x = _mm512_loadu_si512((const void *)(key + k)), u = _mm512_srli_epi32(x, 16);
		__mmask16 m = _mm512_cmple_epu32_mask(_mm512_sub_epi32(u, vlo), vspan);
		_mm512_storeu_si512((void *)(idx + n), _mm512_maskz_compress_epi32(m, vi));
		_mm512_storeu_si512((void *)(kv + n), _mm512_maskz_compress_epi32(m, x));
		n += (unsigned)__builtin_popcount(m);
		nb += (unsigned)__builtin_popcount(_mm512_cmplt_epu32_mask(u, vlo));
		vi = _mm512_add_epi32(vi, step);
	}
	*below += nb;
	return mk_gta_window_from(key, k, cnt, lo, hi, e0, idx, kv, n, below);
}

/* sgnf of sixteen floats: 1, -1, or 0 (zeros and NaN). */
__attribute__((target("avx512f"))) static inline __m512 sgn16(__m512 x)
{
	const __m512 zero = _mm512_setzero_ps();
	__m512 r = _mm512_mask_mov_ps(zero, _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), _mm512_set1_ps(1.0f));
	return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), _mm512_set1_ps(-1.0f));
}

/* The merge of sixteen elements' weighted deltas vv[0 .. mx->n): the
 * consensus (majority sign, each delta kept where its sign is the
 * majority's, the kept weights summed, 0 made 1) or the plain sum, then
 * the normalisation and lambda; mk_gta_mix_tile_from's operations in its
 * order. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 merge16(const struct gta_mix *mx,
									       const __m512 *vv)
{
	const enum mk_gta_consensus cons = mx->cons;
	const size_t n = mx->n;
	const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
	__m512 m, d;

	if (cons != MK_GTA_CONS_NONE) {
		__m512 t = cons == MK_GTA_CONS_SUM ? vv[0] : sgn16(vv[0]), maj;
		for (size_t j = 1; j < n; j++)
			t = _mm512_add_ps(t, cons == MK_GTA_CONS_SUM ? vv[j] : sgn16(vv[j]));
		maj = _mm512_mask_mov_ps(_mm512_set1_ps(-1.0f), _mm512_cmp_ps_mask(t, zero, _CMP_GE_OQ), one);
		m = d = zero;
		for (size_t j = 0; j < n; j++) {
			__m512 kk = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(sgn16(vv[j]), maj, _CMP_EQ_OQ), one);
			__m512 tm = _mm512_mul_ps(vv[j], kk), tw = _mm512_mul_ps(_mm512_set1_ps(mx->w[j]), kk);
			m = j ? _mm512_add_ps(m, tm) : tm;
			d = j ? _mm512_add_ps(d, tw) : tw;
		}
		d = _mm512_mask_mov_ps(d, _mm512_cmp_ps_mask(d, zero, _CMP_EQ_OQ), one);
	} else {
		m = vv[0];
		for (size_t j = 1; j < n; j++)
			m = _mm512_add_ps(m, vv[j]);
		d = _mm512_set1_ps(mx->div);
	}
	if (mx->normalize)
		m = _mm512_div_ps(m, d);
	if (mx->scale_lam)
		m = _mm512_mul_ps(m, _mm512_set1_ps(mx->lam));
	return m;
}

/* The merge of a tile in one pass: sixteen elements through all the
 * inputs at a time, the same operations on each element in the same
 * order (so the same bits); the rest of the tile by the reference. */
__attribute__((target("avx512f")))
static void mix_tile_avx512(const struct gta_mix *mx, uint64_t cnt, const float *v, const float *bt, float *o,
			    float *scratch)
{
	const size_t n = mx->n;
	__m512 vv[n ? n : 1];
	uint64_t k = 0;

	for (; k + 16 <= cnt; k += 16) {
		for (size_t j = 0; j < n; j++)
			vv[j] = _mm512_loadu_ps(v + j * TILE + k);
		_mm512_storeu_ps(o + k, _mm512_add_ps(_mm512_loadu_ps(bt + k), merge16(mx, vv)));
	}
	if (k < cnt)
		mk_gta_mix_tile_from(mx, k, cnt, v, bt, o, scratch, scratch + TILE, scratch + 2 * TILE);
}

/* Sixteen float32 at element k of p, or (B) sixteen BF16 widened: the
 * same values. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline))
static inline __m512 load16(const void *p, uint64_t k, __mmask16 live, const bool B)
{
	if (!B)
		return _mm512_maskz_loadu_ps(live, (const float *)p + k);
	__m256i h = _mm256_maskz_loadu_epi16(live, (const uint16_t *)p + k);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* K: the kind of every input, or -1 for each its own (a constant where
 * this is inlined, so that the common tiles have no switch); B: the
 * inputs are BF16. */
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline))
static inline void fused_tile_k(const struct gta_mix *mx, const struct fuse_in *fi, uint64_t e0, uint64_t cnt,
				const void *bt, float *o, const int K, const bool B)
{
	const size_t n = mx->n;
	const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
	const __m512i absm = _mm512_set1_epi32(0x7fffffff);

	for (uint64_t k = 0; k < cnt; k += 16) {
		const __mmask16 live = cnt - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cnt - k)) - 1);
		const __m512 b = load16(bt, k, live, B);
		__m512 vv[FUSE_MAX];
		vv[0] = zero;
		for (size_t j = 0; j < n; j++) {
			const struct fuse_in *f = &fi[j];
			__m512 dl = _mm512_sub_ps(load16(f->x, k, live, B), b), v;
			__mmask16 keep = 0;
			switch (K >= 0 ? (enum fuse_kind)K : f->kind) {
			case FU_DENSE:
				vv[j] = _mm512_mul_ps(dl, _mm512_set1_ps(f->w));
				continue;
			case FU_ZERO:
				vv[j] = _mm512_mul_ps(zero, _mm512_set1_ps(f->w));
				continue;
			case FU_RANGE:
				if (!f->none) {
					__m512i key = _mm512_and_si512(_mm512_castps_si512(dl), absm);
					keep = _mm512_cmpge_epu32_mask(key, _mm512_set1_epi32((int)f->lo)) &
					       _mm512_cmple_epu32_mask(key, _mm512_set1_epi32((int)f->hi));
				}
				break;
			case FU_BITS: {
				uint64_t e = e0 + k;
				uint32_t w32;
				memcpy(&w32, f->mask + (e >> 3), sizeof(w32));
				keep = (__mmask16)(w32 >> (e & 7));
				break;
			}
			}
			v = _mm512_mul_ps(dl, _mm512_maskz_mov_ps(keep, one));
			if (f->scale)
				v = _mm512_mul_ps(v, _mm512_set1_ps(f->f));
			vv[j] = _mm512_mul_ps(v, _mm512_set1_ps(f->w));
		}
		_mm512_mask_storeu_ps(o + k, live, _mm512_add_ps(b, merge16(mx, vv)));
	}
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static uint64_t fused_tile_avx512(const struct gta_mix *mx, const struct fuse_in *fi, uint64_t e0, uint64_t cnt,
				  const void *bt, float *o, bool bf16)
{
	int k = (int)fi[0].kind;

	for (size_t j = 1; j < mx->n; j++)
		if ((int)fi[j].kind != k)
			k = -1;
	if (bf16) {
		switch (k) {
		case FU_DENSE: fused_tile_k(mx, fi, e0, cnt, bt, o, FU_DENSE, true); break;
		case FU_RANGE: fused_tile_k(mx, fi, e0, cnt, bt, o, FU_RANGE, true); break;
		case FU_BITS: fused_tile_k(mx, fi, e0, cnt, bt, o, FU_BITS, true); break;
		default: fused_tile_k(mx, fi, e0, cnt, bt, o, -1, true); break;
		}
		return cnt;
	}
	switch (k) {
	case FU_DENSE: fused_tile_k(mx, fi, e0, cnt, bt, o, FU_DENSE, false); break;
	case FU_RANGE: fused_tile_k(mx, fi, e0, cnt, bt, o, FU_RANGE, false); break;
	case FU_BITS: fused_tile_k(mx, fi, e0, cnt, bt, o, FU_BITS, false); break;
	default: fused_tile_k(mx, fi, e0, cnt, bt, o, -1, false); break;
	}
	return cnt;
}

void mk_gta_simd_take_avx512(struct mk_gta_simd *t, bool dq, bool bw)
{
	t->row_classes = row_classes_avx512;
	t->class_starts = class_starts_avx512;
	t->under_prefix = tile_under_prefix_avx512;
	t->index_under_prefix = tile_index_under_prefix_avx512;
	t->window = tile_window_avx512;
	t->mix_tile = mix_tile_avx512;
	if (dq) {
		t->della_draw_row = della_draw_row_avx512;
		t->rand_tile = rand_tile_avx512;
	}
	if (bw) {
		t->class_starts16 = class_starts16_avx512;
		t->fused_tile = fused_tile_avx512;
	}
}
#endif
