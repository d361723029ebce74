/* gta_simd_avx2.c - the task-arithmetic family's primitives (gta_simd.h)
 * with AVX2: the bytes of gta_simd_c.c's, eight 32-bit lanes (or four
 * 64-bit ones) at a time, for CPUs without AVX-512 (and, where they have
 * it, for the primitives the AVX-512 set leaves to this one).
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <stdint.h>
#include <string.h>
#include "gta_simd.h"
#include "rng.h"

#if MK_GTA_X86
#include <immintrin.h>

/* For the AVX2 paths' left-packing (AVX2 has no vpcompressd): comp8[m]
 * lists the lanes of the set bits of m in order, for vpermd. */
static uint32_t comp8[256][8];

void mk_gta_simd_avx2_tables(void)
{
	for (unsigned v = 0; v < 256; v++) {
		unsigned n = 0;
		for (unsigned q = 0; q < 8; q++)
			if ((v >> q) & 1)
				comp8[v][n++] = q;
		while (n < 8)
			comp8[v][n++] = 0;
	}
}

/* The lanes of x whose bits are set in m (8 bits) packed to the front. */
__attribute__((target("avx2"), always_inline))
static inline __m256i pack8(__m256i x, unsigned m)
{
	return _mm256_permutevar8x32_epi32(x, _mm256_loadu_si256((const __m256i *)(const void *)comp8[m]));
}

/* The lane mask (8 bits) of a 32-bit compare's result. */
__attribute__((target("avx2"), always_inline))
static inline unsigned lanes8(__m256i c)
{
	return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(c));
}

/* row_classes_c with AVX2, eight keys at a time, the indices of d = 1
 * packed by pack8. */
__attribute__((target("avx2")))
static uint64_t row_classes_avx2(const uint32_t *restrict key, uint64_t L, uint32_t lo,
				 uint32_t *restrict bix, uint32_t *restrict dl)
{
	const __m256i one = _mm256_set1_epi32(1), lom = _mm256_set1_epi32((int)(1 - lo));
	const __m256i low = _mm256_set1_epi32(0xffff), zero = _mm256_setzero_si256(), step = _mm256_set1_epi32(8);
	__m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	uint64_t nd = 0, j = 0;

	for (; j + 8 <= L; j += 8) {
		__m256i k = _mm256_loadu_si256((const __m256i *)(const void *)(key + j));
		__m256i z = _mm256_cmpeq_epi32(k, zero), d0 = _mm256_cmpeq_epi32(_mm256_and_si256(k, low), zero);
		__m256i v = _mm256_add_epi32(_mm256_srli_epi32(k, 16), lom);
		unsigned d = ~lanes8(d0) & 0xffu;
		v = _mm256_add_epi32(_mm256_add_epi32(v, v), _mm256_andnot_si256(d0, one));
		_mm256_storeu_si256((__m256i *)(void *)(bix + j), _mm256_andnot_si256(z, v));
		_mm256_storeu_si256((__m256i *)(void *)(dl + nd), pack8(idx, d));
		nd += (unsigned)__builtin_popcount(d);
		idx = _mm256_add_epi32(idx, step);
	}
	return mk_gta_row_classes_from(key, j, L, lo, bix, dl, nd);
}

/* class_starts_c with AVX2: eight classes at a time, the scan within each
 * 128-bit half (shifts by 1 and 2 lanes) and then across them; nc a
 * multiple of 8.  (Skipping the scan for eight empty classes, about 40%
 * of the blocks in the emb bench models' rows, took more samples, not
 * fewer, on an AMD Zen 3: the branch mispredicts.) */
__attribute__((target("avx2")))
static uint32_t class_starts_avx2(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t nc)
{
	const __m256i zero = _mm256_setzero_si256(), last = _mm256_set1_epi32(7);
	const __m256i odd = _mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1);
	__m256i carry = zero, most = zero;
	uint32_t m[8], r = 0;

	for (uint32_t x = 0; x < nc; x += 8) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(c0 + x));
		__m256i n = _mm256_add_epi32(a, _mm256_loadu_si256((const __m256i *)(const void *)(c1 + x))), t = n, ex;
		most = _mm256_max_epu32(most, _mm256_and_si256(n, odd));
		t = _mm256_add_epi32(t, _mm256_slli_si256(t, 4));
		t = _mm256_add_epi32(t, _mm256_slli_si256(t, 8));
		/* the lower half's total onto each lane of the upper half */
		t = _mm256_add_epi32(t, _mm256_shuffle_epi32(_mm256_permute2x128_si256(t, t, 0x08), 0xff));
		ex = _mm256_add_epi32(_mm256_sub_epi32(t, n), carry);
		_mm256_storeu_si256((__m256i *)(void *)(c0 + x), ex);
		_mm256_storeu_si256((__m256i *)(void *)(c1 + x), _mm256_add_epi32(ex, a));
		carry = _mm256_add_epi32(carry, _mm256_permutevar8x32_epi32(t, last));
	}
	_mm256_storeu_si256((__m256i *)(void *)m, most);
	for (unsigned q = 0; q < 8; q++)
		r = m[q] > r ? m[q] : r;
	return r;
}

/* class_starts16_c with AVX2: sixteen classes at a time, the scan within
 * each 128-bit half (shifts by 1, 2 and 4 lanes) and then across them;
 * nc a multiple of 16.  No sum passes 65535 (the row's length). */
__attribute__((target("avx2")))
static uint32_t class_starts16_avx2(uint16_t *restrict c0, uint16_t *restrict c1, uint32_t nc)
{
	const __m256i zero = _mm256_setzero_si256(), last = _mm256_set1_epi32(7);
	const __m256i odd = _mm256_set1_epi32((int)0xffff0000u);
	const __m256i w7 = _mm256_set1_epi16(0x0f0e), w1 = _mm256_set1_epi16(0x0302);
	__m256i carry = zero, most = zero;
	uint16_t m[16];
	uint32_t r = 0;

	for (uint32_t x = 0; x < nc; x += 16) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(c0 + x));
		__m256i n = _mm256_add_epi16(a, _mm256_loadu_si256((const __m256i *)(const void *)(c1 + x))), t = n, ex;
		most = _mm256_max_epu16(most, _mm256_and_si256(n, odd));
		t = _mm256_add_epi16(t, _mm256_slli_si256(t, 2));
		t = _mm256_add_epi16(t, _mm256_slli_si256(t, 4));
		t = _mm256_add_epi16(t, _mm256_slli_si256(t, 8));
		/* the lower half's total (its word 7) onto each word of the upper half */
		t = _mm256_add_epi16(t, _mm256_shuffle_epi8(_mm256_permute2x128_si256(t, t, 0x08), w7));
		ex = _mm256_add_epi16(_mm256_sub_epi16(t, n), carry);
		_mm256_storeu_si256((__m256i *)(void *)(c0 + x), ex);
		_mm256_storeu_si256((__m256i *)(void *)(c1 + x), _mm256_add_epi16(ex, a));
		/* word 15, the block's total, onto every word */
		carry = _mm256_add_epi16(carry, _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(t, last), w1));
	}
	_mm256_storeu_si256((__m256i *)(void *)m, most);
	for (unsigned q = 0; q < 16; q++)
		r = m[q] > r ? m[q] : r;
	return r;
}

/* A 32-bit load at p (any alignment). */
static inline uint32_t load32(const void *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* row_rank_add16 with AVX2, eight at a time: each start read as 32 bits
 * (the word after it masked off; start has room for one more), four
 * chains of two inserts (the compiler's own loop for the 16-bit starts
 * is one load-add-store an element, about a third slower on an AMD Zen
 * 3). */
__attribute__((target("avx2")))
static void row_rank_add16_avx2(uint32_t *restrict rank, const uint32_t *restrict bix,
				const uint16_t *restrict start, uint64_t L)
{
	const __m256i low = _mm256_set1_epi32(0xffff);
	uint64_t j = 0;

	for (; j + 8 <= L; j += 8) {
		const uint32_t *b = bix + j;
		__m128i x0 = _mm_insert_epi32(_mm_cvtsi32_si128((int)load32(start + b[0])), (int)load32(start + b[1]), 1);
		__m128i x1 = _mm_insert_epi32(_mm_cvtsi32_si128((int)load32(start + b[2])), (int)load32(start + b[3]), 1);
		__m128i x2 = _mm_insert_epi32(_mm_cvtsi32_si128((int)load32(start + b[4])), (int)load32(start + b[5]), 1);
		__m128i x3 = _mm_insert_epi32(_mm_cvtsi32_si128((int)load32(start + b[6])), (int)load32(start + b[7]), 1);
		__m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi64(x0, x1)),
						    _mm_unpacklo_epi64(x2, x3), 1);
		__m256i r = _mm256_loadu_si256((const __m256i *)(const void *)(rank + j));
		_mm256_storeu_si256((__m256i *)(void *)(rank + j), _mm256_add_epi32(r, _mm256_and_si256(v, low)));
	}
	for (; j < L; j++)
		rank[j] += start[bix[j]];
}

/* a * b for four 64-bit lanes (AVX2 multiplies 32 by 32 bits): bh is b's
 * upper halves (b >> 32). */
__attribute__((target("avx2"), always_inline))
static inline __m256i mul64x4(__m256i a, __m256i b, __m256i bh)
{
	__m256i c = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b), _mm256_mul_epu32(a, bh));
	return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(c, 32));
}

/* mk_rng_u64 >> 11 of four counters' states z (mk_rng_mix64's steps). */
__attribute__((target("avx2"), always_inline))
static inline __m256i rng53x4(__m256i z)
{
	const __m256i c1 = _mm256_set1_epi64x((long long)0xBF58476D1CE4E5B9ull);
	const __m256i c2 = _mm256_set1_epi64x((long long)0x94D049BB133111EBull);
	z = mul64x4(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c1, _mm256_srli_epi64(c1, 32));
	z = mul64x4(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c2, _mm256_srli_epi64(c2, 32));
	return _mm256_srli_epi64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 31)), 11);
}

/* The counters' states of eight elements from z (that of the first) in
 * two sets of four. */
__attribute__((target("avx2"), always_inline))
static inline void rng_lanes8(uint64_t z, __m256i *za, __m256i *zb)
{
	*za = _mm256_setr_epi64x((long long)z, (long long)(z + MK_RNG_GOLDEN), (long long)(z + 2 * MK_RNG_GOLDEN),
				 (long long)(z + 3 * MK_RNG_GOLDEN));
	*zb = _mm256_add_epi64(*za, _mm256_set1_epi64x((long long)(4 * MK_RNG_GOLDEN)));
}

/* Two sets of four 64-bit compare results as eight bits (the first set
 * the low four), and as eight 32-bit lanes in order. */
__attribute__((target("avx2"), always_inline))
static inline unsigned bits8(__m256i ka, __m256i kb)
{
	return (unsigned)(_mm256_movemask_pd(_mm256_castsi256_pd(ka)) |
			  _mm256_movemask_pd(_mm256_castsi256_pd(kb)) << 4);
}

__attribute__((target("avx2"), always_inline))
static inline __m256 lanes32(__m256i ka, __m256i kb)
{
	__m256 x = _mm256_shuffle_ps(_mm256_castsi256_ps(ka), _mm256_castsi256_ps(kb), 0x88);
	return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(x), 0xd8));
}

/* DELLA's draw (mk_gta_della_draw_row_c) with AVX2: eight elements at a
 * time in two sets of four, their eight bits one mask byte (e0 a multiple
 * of 8).  Every value compared is below 2^63 (u < 2^53, t <= 2^53, margin
 * <= 2^54), so the signed 64-bit compare orders them as unsigned.  The thresholds by scalar
 * loads, not vpgatherdq: on the AMD Zen 3 of the AVX2 figures the draw
 * took 11% fewer samples so (the gathers' latency was where its samples
 * fell). */
__attribute__((target("avx2")))
static uint32_t della_draw_row_avx2(uint64_t stream, uint64_t e0, uint64_t j0, uint64_t L,
				    const uint32_t *restrict rank, const uint64_t *restrict thr,
				    const uint32_t *restrict key, uint8_t *restrict mask, float *restrict m,
				    uint64_t margin, uint32_t *restrict flag, uint32_t nf)
{
	const __m256i mg = _mm256_set1_epi64x((long long)margin);
	const __m256i step = _mm256_set1_epi64x((long long)(8 * MK_RNG_GOLDEN));
	const long long *tp = (const long long *)(const void *)thr;
	uint64_t j = j0;
	__m256i za, zb;

	rng_lanes8(stream + (e0 + j0 + 1) * MK_RNG_GOLDEN, &za, &zb);

	if ((e0 + j0) % 8 == 0) {
		for (; j + 8 <= L; j += 8) {
			__m256i ua = rng53x4(za), ub = rng53x4(zb);
			__m256i ta = _mm256_setr_epi64x(tp[rank[j]], tp[rank[j + 1]], tp[rank[j + 2]], tp[rank[j + 3]]);
			__m256i tb = _mm256_setr_epi64x(tp[rank[j + 4]], tp[rank[j + 5]], tp[rank[j + 6]], tp[rank[j + 7]]);
			__m256i ka = _mm256_cmpgt_epi64(ta, ua), kb = _mm256_cmpgt_epi64(tb, ub);
			/* near: u + margin >= t and t + margin > u */
			__m256i fa = _mm256_andnot_si256(_mm256_cmpgt_epi64(ta, _mm256_add_epi64(ua, mg)),
							 _mm256_cmpgt_epi64(_mm256_add_epi64(ta, mg), ua));
			__m256i fb = _mm256_andnot_si256(_mm256_cmpgt_epi64(tb, _mm256_add_epi64(ub, mg)),
							 _mm256_cmpgt_epi64(_mm256_add_epi64(tb, mg), ub));
			za = _mm256_add_epi64(za, step);
			zb = _mm256_add_epi64(zb, step);
			mask[(e0 + j) >> 3] = (uint8_t)bits8(ka, kb);
			_mm256_storeu_ps(m + j, _mm256_and_ps(lanes32(ka, kb),
							      _mm256_loadu_ps((const float *)(const void *)(key + j))));
			for (unsigned f = bits8(fa, fb); f; f &= f - 1)
				flag[nf++] = (uint32_t)j + (uint32_t)__builtin_ctz(f);
		}
	}
	return mk_gta_della_draw_row_c(stream, e0, j, L, rank, thr, key, mask, m, margin, flag, nf);
}

/* rand_keep_one for the elements e0 .. e0 + cnt of a tile (a: their
 * |delta|), with AVX2: eight elements a time from a multiple of 8 on,
 * their bits one mask byte (rng53x4, thr <= 2^53: the signed compare
 * orders them).  For CPUs without AVX-512 DQ, where tile_rand_u8's
 * 64-bit multiplies are emulated anyway: this one also makes the bits and
 * the kept values without the bytes in between. */
__attribute__((target("avx2")))
static void rand_keep_avx2(uint64_t stream, uint64_t thr, uint64_t e0, uint64_t cnt, const float *restrict a,
			   float *restrict m, uint8_t *restrict mask)
{
	const __m256i vt = _mm256_set1_epi64x((long long)thr);
	const __m256i step = _mm256_set1_epi64x((long long)(8 * MK_RNG_GOLDEN));
	uint64_t k = 0;
	__m256i za, zb;

	for (; k < cnt && (e0 + k) % 8; k++)
		rand_keep_one(stream, thr, e0 + k, a[k], m + k, mask);
	rng_lanes8(stream + (e0 + k + 1) * MK_RNG_GOLDEN, &za, &zb);
	for (; k + 8 <= cnt; k += 8) {
		__m256i ka = _mm256_cmpgt_epi64(vt, rng53x4(za)), kb = _mm256_cmpgt_epi64(vt, rng53x4(zb));
		if (mask)
			mask[(e0 + k) >> 3] = (uint8_t)bits8(ka, kb);
		_mm256_storeu_ps(m + k, _mm256_and_ps(lanes32(ka, kb), _mm256_loadu_ps(a + k)));
		za = _mm256_add_epi64(za, step);
		zb = _mm256_add_epi64(zb, step);
	}
	for (; k < cnt; k++)
		rand_keep_one(stream, thr, e0 + k, a[k], m + k, mask);
}

/* RAND's statistics of a tile: |delta| into an array, then the draws
 * and bits (rand_keep_avx2), then the sums over the arrays. */
__attribute__((target("avx2")))
static void rand_tile_avx2(uint64_t stream, uint64_t thr, uint8_t *mask, uint64_t e0, uint64_t cnt, const void *x,
			   const void *b, bool bf16, struct lsum *before, struct lsum *after)
{
	float a[TILE], m[TILE];
	uint32_t key[TILE];

	tile_abs(x, b, bf16, 0, cnt, a, key);
	rand_keep_avx2(stream, thr, e0, cnt, a, m, mask);
	mk_gta_fsum_run_f32(before, e0, a, cnt);
	mk_gta_fsum_run_f32(after, e0, m, cnt);
}

/* tile_under_prefix_c with AVX2: eight keys at a time, packed by pack8,
 * their low halves gathered into eight words (vpshufb, vpermq); the store
 * writes 8 words at lo + n. */
__attribute__((target("avx2")))
static uint64_t tile_under_prefix_avx2(const uint32_t *restrict key, uint64_t cnt, uint32_t P,
				       uint16_t *restrict lo)
{
	const __m256i vp = _mm256_set1_epi32((int)P);
	const __m256i halves = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
						0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
	uint64_t n = 0, k = 0;

	for (; k + 8 <= cnt; k += 8) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(key + k));
		unsigned m = lanes8(_mm256_cmpeq_epi32(_mm256_srli_epi32(x, 16), vp));
		__m256i w = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(pack8(x, m), halves), 0x08);
		_mm_storeu_si128((__m128i *)(void *)(lo + n), _mm256_castsi256_si128(w));
		n += (unsigned)__builtin_popcount(m);
	}
	return mk_gta_under_prefix_from(key, k, cnt, P, lo, n);
}

/* tile_index_under_prefix_c with AVX2, packed by pack8. */
__attribute__((target("avx2")))
static uint64_t tile_index_under_prefix_avx2(const uint32_t *restrict key, uint64_t cnt, uint32_t P, uint32_t e0,
					     uint32_t *restrict idx)
{
	const __m256i vp = _mm256_set1_epi32((int)P), step = _mm256_set1_epi32(8);
	__m256i vi = _mm256_add_epi32(_mm256_set1_epi32((int)e0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	uint64_t n = 0, k = 0;

	for (; k + 8 <= cnt; k += 8) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(key + k));
		unsigned m = lanes8(_mm256_cmpeq_epi32(_mm256_srli_epi32(x, 16), vp));
		_mm256_storeu_si256((__m256i *)(void *)(idx + n), pack8(vi, m));
		n += (unsigned)__builtin_popcount(m);
		vi = _mm256_add_epi32(vi, step);
	}
	return mk_gta_index_under_prefix_from(key, k, cnt, P, e0, idx, n);
}

/* tile_window_c with AVX2 (unsigned <= as min(a, b) == a). */
__attribute__((target("avx2")))
static uint64_t tile_window_avx2(const uint32_t *restrict key, uint64_t cnt, uint32_t lo, uint32_t hi, uint32_t e0,
				 uint32_t *restrict idx, uint32_t *restrict kv, uint64_t *below)
{
	const __m256i vlo = _mm256_set1_epi32((int)lo), vspan = _mm256_set1_epi32((int)(hi - lo));
	const __m256i step = _mm256_set1_epi32(8);
	__m256i vi = _mm256_add_epi32(_mm256_set1_epi32((int)e0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	uint64_t n = 0, k = 0, nb = 0;

	for (; k + 8 <= cnt; k += 8) {
		__m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(key + k)), u = _mm256_srli_epi32(x, 16);
		__m256i v = _mm256_sub_epi32(u, vlo);
		unsigned m = lanes8(_mm256_cmpeq_epi32(_mm256_min_epu32(v, vspan), v));
		_mm256_storeu_si256((__m256i *)(void *)(idx + n), pack8(vi, m));
		_mm256_storeu_si256((__m256i *)(void *)(kv + n), pack8(x, m));
		n += (unsigned)__builtin_popcount(m);
		/* u < lo: u != max(u, lo) */
		nb += (unsigned)__builtin_popcount(~lanes8(_mm256_cmpeq_epi32(_mm256_max_epu32(u, vlo), u)) & 0xffu);
		vi = _mm256_add_epi32(vi, step);
	}
	*below += nb;
	return mk_gta_window_from(key, k, cnt, lo, hi, e0, idx, kv, n, below);
}

/* The fused apply with AVX2, eight elements at a time (the operations of
 * gta_simd_avx512.c's fused_tile_k in their order: the same bits), the
 * masks as lanes of all ones or zeros. */
__attribute__((target("avx2"), always_inline)) static inline __m256 sgn8(__m256 x)
{
	const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
	__m256 r = _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), one);
	return _mm256_blendv_ps(r, _mm256_set1_ps(-1.0f), _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
}

__attribute__((target("avx2"), always_inline)) static inline __m256 merge8(const struct gta_mix *mx,
									   const __m256 *vv, const size_t n)
{
	const enum mk_gta_consensus cons = mx->cons;
	const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
	__m256 m, d;

	if (cons != MK_GTA_CONS_NONE) {
		__m256 t = cons == MK_GTA_CONS_SUM ? vv[0] : sgn8(vv[0]), maj;
		for (size_t j = 1; j < n; j++)
			t = _mm256_add_ps(t, cons == MK_GTA_CONS_SUM ? vv[j] : sgn8(vv[j]));
		maj = _mm256_blendv_ps(_mm256_set1_ps(-1.0f), one, _mm256_cmp_ps(t, zero, _CMP_GE_OQ));
		m = d = zero;
		for (size_t j = 0; j < n; j++) {
			__m256 kk = _mm256_and_ps(_mm256_cmp_ps(sgn8(vv[j]), maj, _CMP_EQ_OQ), one);
			__m256 tm = _mm256_mul_ps(vv[j], kk), tw = _mm256_mul_ps(_mm256_set1_ps(mx->w[j]), kk);
			m = j ? _mm256_add_ps(m, tm) : tm;
			d = j ? _mm256_add_ps(d, tw) : tw;
		}
		d = _mm256_blendv_ps(d, one, _mm256_cmp_ps(d, zero, _CMP_EQ_OQ));
	} else {
		m = vv[0];
		for (size_t j = 1; j < n; j++)
			m = _mm256_add_ps(m, vv[j]);
		d = _mm256_set1_ps(mx->div);
	}
	if (mx->normalize)
		m = _mm256_div_ps(m, d);
	if (mx->scale_lam)
		m = _mm256_mul_ps(m, _mm256_set1_ps(mx->lam));
	return m;
}

__attribute__((target("avx2"), always_inline))
static inline __m256 load8(const void *p, uint64_t k, const bool B)
{
	if (!B)
		return _mm256_loadu_ps((const float *)p + k);
	__m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)p + k));
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* cnt a multiple of 8; N: mx->n where it is a constant (2, the common
 * case: unrolled, the deltas kept in registers), else 0. */
__attribute__((target("avx2"), always_inline))
static inline void fused_tile8_k(const struct gta_mix *mx, const struct fuse_in *fi, uint64_t e0, uint64_t cnt,
				 const void *bt, float *o, const int K, const bool B, const size_t N)
{
	const size_t n = N ? N : mx->n;
	const __m256 zero = _mm256_setzero_ps();
	const __m256i absm = _mm256_set1_epi32(0x7fffffff);

	for (uint64_t k = 0; k < cnt; k += 8) {
		const __m256 b = load8(bt, k, B);
		__m256 vv[FUSE_MAX];
		vv[0] = zero;
		for (size_t j = 0; j < n; j++) {
			const struct fuse_in *f = &fi[j];
			__m256 dl = _mm256_sub_ps(load8(f->x, k, B), b), keep = zero, v;
			switch (K >= 0 ? (enum fuse_kind)K : f->kind) {
			case FU_DENSE:
				vv[j] = _mm256_mul_ps(dl, _mm256_set1_ps(f->w));
				continue;
			case FU_ZERO:
				vv[j] = _mm256_mul_ps(zero, _mm256_set1_ps(f->w));
				continue;
			case FU_RANGE:
				if (!f->none) {
					__m256i key = _mm256_and_si256(_mm256_castps_si256(dl), absm);
					__m256i ge = _mm256_cmpeq_epi32(_mm256_max_epu32(key, _mm256_set1_epi32((int)f->lo)), key);
					__m256i le = _mm256_cmpeq_epi32(_mm256_min_epu32(key, _mm256_set1_epi32((int)f->hi)), key);
					keep = _mm256_and_ps(_mm256_castsi256_ps(_mm256_and_si256(ge, le)), _mm256_set1_ps(1.0f));
				}
				break;
			case FU_BITS: {
				uint64_t e = e0 + k;
				uint16_t w16;
				memcpy(&w16, f->mask + (e >> 3), sizeof(w16));
				keep = _mm256_loadu_ps(mk_gta_byte_f32[(uint8_t)(w16 >> (e & 7))]);
				break;
			}
			}
			v = _mm256_mul_ps(dl, keep);
			if (f->scale)
				v = _mm256_mul_ps(v, _mm256_set1_ps(f->f));
			vv[j] = _mm256_mul_ps(v, _mm256_set1_ps(f->w));
		}
		_mm256_storeu_ps(o + k, _mm256_add_ps(b, merge8(mx, vv, n)));
	}
}

/* The fused apply of the first cnt & ~7 elements; returns how many. */
__attribute__((target("avx2")))
static uint64_t fused_tile_avx2(const struct gta_mix *mx, const struct fuse_in *fi, uint64_t e0, uint64_t cnt,
				const void *bt, float *o, bool bf16)
{
	int k = (int)fi[0].kind;

	cnt &= ~(uint64_t)7;
	for (size_t j = 1; j < mx->n; j++)
		if ((int)fi[j].kind != k)
			k = -1;
#define FUSED8(K, B)                                                      \
	(mx->n == 2 ? fused_tile8_k(mx, fi, e0, cnt, bt, o, K, B, 2) : fused_tile8_k(mx, fi, e0, cnt, bt, o, K, B, 0))
	if (bf16) {
		switch (k) {
		case FU_DENSE: FUSED8(FU_DENSE, true); break;
		case FU_RANGE: FUSED8(FU_RANGE, true); break;
		case FU_BITS: FUSED8(FU_BITS, true); break;
		default: fused_tile8_k(mx, fi, e0, cnt, bt, o, -1, true, 0); break;
		}
		return cnt;
	}
	switch (k) {
	case FU_DENSE: FUSED8(FU_DENSE, false); break;
	case FU_RANGE: FUSED8(FU_RANGE, false); break;
	case FU_BITS: FUSED8(FU_BITS, false); break;
	default: fused_tile8_k(mx, fi, e0, cnt, bt, o, -1, false, 0); break;
	}
#undef FUSED8
	return cnt;
}

void mk_gta_simd_take_avx2(struct mk_gta_simd *t)
{
	t->row_classes = row_classes_avx2;
	t->class_starts = class_starts_avx2;
	t->class_starts16 = class_starts16_avx2;
	t->rank_add16 = row_rank_add16_avx2;
	t->della_draw_row = della_draw_row_avx2;
	t->rand_tile = rand_tile_avx2;
	t->under_prefix = tile_under_prefix_avx2;
	t->index_under_prefix = tile_index_under_prefix_avx2;
	t->window = tile_window_avx2;
	t->fused_tile = fused_tile_avx2;
}
#endif
