/* gta_simd_c.c - the task-arithmetic family's primitives (gta_simd.h) in
 * portable C: the reference that gta_simd_avx2.c and gta_simd_avx512.c
 * match bit for bit, and the loops those share with the methods' passes.
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

/* ------------------------------------------------------------ DELLA rows */

/* Each key's class: 2v + d for bucket v (0 for the zero keys, else its
 * upper half's place above lo, from 1) and d = 1 when its lower half is
 * nonzero.  Within a bucket the keys of d = 0 all equal (upper << 16) and
 * lie below those of d = 1, so the classes in order are the keys' order.
 * The indices of d = 1 (few in a bfloat16 model's deltas) go to dl;
 * returns how many. */
uint64_t mk_gta_row_classes_from(const uint32_t *restrict key, uint64_t j, uint64_t L, uint32_t lo,
				 uint32_t *restrict bix, uint32_t *restrict dl, uint64_t nd)
{
	for (; j < L; j++) {
		uint32_t k = key[j], d = ((k & 0xffff) + 0xffff) >> 16;
		bix[j] = k ? 2 * ((k >> 16) - lo + 1) + d : 0;
		dl[nd] = (uint32_t)j;
		nd += d;
	}
	return nd;
}

static uint64_t row_classes_c(const uint32_t *restrict key, uint64_t L, uint32_t lo,
			      uint32_t *restrict bix, uint32_t *restrict dl)
{
	return mk_gta_row_classes_from(key, 0, L, lo, bix, dl, 0);
}

/* The exclusive starts of the classes, in the order of the classes and,
 * within one, the row's first half before its second. */
static uint32_t class_starts_c(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t nc)
{
	uint32_t pos = 0, most = 0;

	for (uint32_t x = 0; x < nc; x += 2) {
		uint32_t n0 = c0[x], n = n0 + c1[x], d0 = c0[x + 1], d = d0 + c1[x + 1];
		c0[x] = pos;
		c1[x] = pos + n0;
		pos += n;
		c0[x + 1] = pos;
		c1[x + 1] = pos + d0;
		pos += d;
		most = d > most ? d : most;
	}
	return most;
}

/* class_starts_c on 16-bit counts (a row of at most 65535 elements: the
 * starts fit), half the bytes to clear and to scan. */
static uint32_t class_starts16_c(uint16_t *restrict c0, uint16_t *restrict c1, uint32_t nc)
{
	uint32_t pos = 0, most = 0;

	for (uint32_t x = 0; x < nc; x += 2) {
		uint32_t n0 = c0[x], n = n0 + c1[x], d0 = c0[x + 1], d = d0 + c1[x + 1];
		c0[x] = (uint16_t)pos;
		c1[x] = (uint16_t)(pos + n0);
		pos += n;
		c0[x + 1] = (uint16_t)pos;
		c1[x + 1] = (uint16_t)(pos + d0);
		pos += d;
		most = d > most ? d : most;
	}
	return most;
}

/* rank[j] += start[bix[j]] on 16-bit starts. */
MK_HOT_CLONES
static void row_rank_add16(uint32_t *restrict rank, const uint32_t *restrict bix,
			   const uint16_t *restrict start, uint64_t L)
{
	for (uint64_t j = 0; j < L; j++)
		rank[j] += start[bix[j]];
}

/* DELLA's draw for elements j0 .. L of one float32 row of elements e0
 * .. e0 + L, ranked: element j kept when its 53 random bits u are below
 * t = thr[rank[j]]; its bit set in the mask (all zero before) and m[j] =
 * |delta| (the key's value) when kept, else 0.  Where t - margin <= u <
 * t + margin, j is flagged (into flag, from nf; returns the new count). */
uint32_t mk_gta_della_draw_row_c(uint64_t stream, uint64_t e0, uint64_t j0, uint64_t L,
				 const uint32_t *restrict rank, const uint64_t *restrict thr,
				 const uint32_t *restrict key, uint8_t *restrict mask, float *restrict m,
				 uint64_t margin, uint32_t *restrict flag, uint32_t nf)
{
	for (uint64_t j = j0; j < L; j++) {
		uint64_t e = e0 + j, u = mk_rng_u64(stream, e) >> 11, t = thr[rank[j]];
		bool keep = u < t;
		float a;
		memcpy(&a, &key[j], sizeof(a));
		mask[e >> 3] |= (uint8_t)((unsigned)keep << (e & 7));
		m[j] = keep ? a : 0.0f;
		flag[nf] = (uint32_t)j;
		nf += della_near(u, t, margin);
	}
	return nf;
}

/* --------------------------------------------------------------- tiles */

/* The loops below that are compiled once per target (MK_HOT_CLONES) are
 * static and called through a plain function where other files call
 * them: GCC gives a clone set's dispatcher default visibility whatever
 * the function's, so a global one would leave libmk.so exported. */

MK_HOT_CLONES
static void fsum_run_f32(struct lsum *s, uint64_t e0, const float *a, uint64_t cnt)
{
	while (cnt) {
		uint64_t r = mk_fsum_run(e0, cnt), k = 0;
		double l[LSUM_LANES];
		for (; k < r && (e0 + k) % LSUM_LANES; k++)
			s->lane[(e0 + k) % LSUM_LANES] += (double)a[k];
		memcpy(l, s->lane, sizeof(l));
		for (; k + LSUM_LANES <= r; k += LSUM_LANES)
			for (unsigned j = 0; j < LSUM_LANES; j++)
				l[j] += (double)a[k + j];
		memcpy(s->lane, l, sizeof(l));
		for (; k < r; k++)
			s->lane[(e0 + k) % LSUM_LANES] += (double)a[k];
		if ((e0 + r) % MK_SUM_BLOCK == 0)
			lsum_close(s);
		e0 += r, a += r, cnt -= r;
	}
}

/* |x - b| of a tile and its key (the bits, ordered like the value). */
MK_HOT_CLONES
static void tile_abs_f32(const float *restrict x, const float *restrict b, uint64_t cnt,
			 float *restrict a, uint32_t *restrict key)
{
	for (uint64_t k = 0; k < cnt; k++) {
		float d = fabsf(x[k] - b[k]);
		uint32_t u;
		memcpy(&u, &d, sizeof(u));
		a[k] = d;
		key[k] = u;
	}
}

/* The same of BF16 inputs, each widened to float32 (exact) first. */
MK_HOT_CLONES
static void tile_abs_bf16(const uint16_t *restrict x, const uint16_t *restrict b, uint64_t cnt,
			  float *restrict a, uint32_t *restrict key)
{
	for (uint64_t k = 0; k < cnt; k++) {
		float d = fabsf(mk__bf16_widen(x[k]) - mk__bf16_widen(b[k]));
		uint32_t u;
		memcpy(&u, &d, sizeof(u));
		a[k] = d;
		key[k] = u;
	}
}

void mk_gta_fsum_run_f32(struct lsum *s, uint64_t e0, const float *a, uint64_t cnt)
{
	fsum_run_f32(s, e0, a, cnt);
}

void mk_gta_tile_abs_f32(const float *restrict x, const float *restrict b, uint64_t cnt, float *restrict a,
			 uint32_t *restrict key)
{
	tile_abs_f32(x, b, cnt, a, key);
}

void mk_gta_tile_abs_bf16(const uint16_t *restrict x, const uint16_t *restrict b, uint64_t cnt, float *restrict a,
			  uint32_t *restrict key)
{
	tile_abs_bf16(x, b, cnt, a, key);
}

/* RAND's keep decision for a tile: 1 or 0 per element. */
MK_HOT_CLONES
static void tile_rand_u8(uint64_t stream, uint64_t thr, uint64_t e0, uint64_t cnt, uint8_t *restrict m)
{
	for (uint64_t k = 0; k < cnt; k++)
		m[k] = (mk_rng_u64(stream, e0 + k) >> 11) < thr;
}

/* Set the bits of a tile's kept elements (m: 1 or 0 each; the mask
 * starts all zero).  Eight bytes of 0/1 become one byte of bits by one
 * multiply: byte q (from the lowest) times 2^(7(7-q)+7) lands on bit
 * 56 + q, and no two terms share a bit, so nothing carries. */
static void tile_setbits(uint8_t *mask, uint64_t e0, uint64_t cnt, const uint8_t *m)
{
	uint64_t k = 0;

	for (; k < cnt && (e0 + k) % 8; k++)
		mask[(e0 + k) >> 3] |= (uint8_t)(m[k] << ((e0 + k) & 7));
	for (; k + 8 <= cnt; k += 8) {
		uint64_t x;
		memcpy(&x, m + k, 8);
		mask[(e0 + k) >> 3] = (uint8_t)((x * 0x0102040810204080ull) >> 56);
	}
	for (; k < cnt; k++)
		mask[(e0 + k) >> 3] |= (uint8_t)(m[k] << ((e0 + k) & 7));
}

/* RAND's statistics of a tile: |delta| into an array, then the draws
 * (a byte each, then the mask's bits), then the sums over the arrays. */
static void rand_tile_c(uint64_t stream, uint64_t thr, uint8_t *mask, uint64_t e0, uint64_t cnt, const void *x,
			const void *b, bool bf16, struct lsum *before, struct lsum *after)
{
	float a[TILE], m[TILE];
	uint32_t key[TILE];
	uint8_t kb[TILE];

	tile_abs(x, b, bf16, 0, cnt, a, key);
	tile_rand_u8(stream, thr, e0, cnt, kb);
	if (mask)
		tile_setbits(mask, e0, cnt, kb);
	fsum_run_f32(before, e0, a, cnt);
	for (uint64_t k = 0; k < cnt; k++)
		m[k] = kb[k] ? a[k] : 0.0f;   /* x + 0.0 is x: terms >= 0 */
	fsum_run_f32(after, e0, m, cnt);
}

/* The low 16 bits of the keys whose high 16 bits are P, in order, into
 * lo; returns how many (each key stored, the count advanced only for
 * those that match: no branch to mispredict).  _from: from key k, n
 * stored. */
uint64_t mk_gta_under_prefix_from(const uint32_t *restrict key, uint64_t k, uint64_t cnt, uint32_t P,
				  uint16_t *restrict lo, uint64_t n)
{
	for (; k < cnt; k++) {
		lo[n] = (uint16_t)key[k];
		n += key[k] >> 16 == P;
	}
	return n;
}

static uint64_t tile_under_prefix_c(const uint32_t *restrict key, uint64_t cnt, uint32_t P,
				    uint16_t *restrict lo)
{
	return mk_gta_under_prefix_from(key, 0, cnt, P, lo, 0);
}

/* The indices (e0 + k) of a tile's keys under the prefix P, in order,
 * into idx (which has room for 16 more than there are). */
uint64_t mk_gta_index_under_prefix_from(const uint32_t *restrict key, uint64_t k, uint64_t cnt, uint32_t P,
					uint32_t e0, uint32_t *restrict idx, uint64_t n)
{
	for (; k < cnt; k++) {
		idx[n] = e0 + (uint32_t)k;
		n += key[k] >> 16 == P;
	}
	return n;
}

static uint64_t tile_index_under_prefix_c(const uint32_t *restrict key, uint64_t cnt, uint32_t P, uint32_t e0,
					  uint32_t *restrict idx)
{
	return mk_gta_index_under_prefix_from(key, 0, cnt, P, e0, idx, 0);
}

/* The indices and keys of a tile's keys whose upper half lies in
 * [lo, hi], in order, into idx and kv (each with room for 16 more than
 * there are); *below counts those whose upper half is below lo. */
uint64_t mk_gta_window_from(const uint32_t *restrict key, uint64_t k, uint64_t cnt, uint32_t lo, uint32_t hi,
			    uint32_t e0, uint32_t *restrict idx, uint32_t *restrict kv, uint64_t n, uint64_t *below)
{
	uint64_t nb = 0;

	for (; k < cnt; k++) {
		idx[n] = e0 + (uint32_t)k;
		kv[n] = key[k];
		n += (key[k] >> 16) - lo <= hi - lo;
		nb += (key[k] >> 16) < lo;
	}
	*below += nb;
	return n;
}

static uint64_t tile_window_c(const uint32_t *restrict key, uint64_t cnt, uint32_t lo, uint32_t hi, uint32_t e0,
			      uint32_t *restrict idx, uint32_t *restrict kv, uint64_t *below)
{
	return mk_gta_window_from(key, 0, cnt, lo, hi, e0, idx, kv, 0, below);
}

/* ---------------------------------------------------------------- apply */

static inline float sgnf(float x)
{
	return (float)((x > 0) - (x < 0));
}

/* The merge of one tile's weighted task vectors v[j * TILE + k] (k in
 * [k0, cnt)) into o[k] = b[k] + mix: the consensus, the sum, the
 * normalisation and lambda, each a loop over the tile (sw, mix, div:
 * TILE floats each). */
MK_HOT_CLONES
static void mix_tile_from(const struct gta_mix *mx, uint64_t k0, uint64_t cnt, const float *v, const float *bt,
			  float *o, float *sw, float *mix, float *div)
{
	const enum mk_gta_consensus cons = mx->cons;

	if (cons != MK_GTA_CONS_NONE) {
		if (cons == MK_GTA_CONS_SUM) {
			for (uint64_t k = k0; k < cnt; k++)
				sw[k] = v[k];
			for (size_t j = 1; j < mx->n; j++)
				for (uint64_t k = k0; k < cnt; k++)
					sw[k] = sw[k] + v[j * TILE + k];
		} else {
			for (uint64_t k = k0; k < cnt; k++)
				sw[k] = sgnf(v[k]);
			for (size_t j = 1; j < mx->n; j++)
				for (uint64_t k = k0; k < cnt; k++)
					sw[k] = sw[k] + sgnf(v[j * TILE + k]);
		}
		for (uint64_t k = k0; k < cnt; k++)
			sw[k] = sw[k] >= 0 ? 1.0f : -1.0f;      /* the majority sign */
		for (size_t j = 0; j < mx->n; j++) {
			const float *vj = v + j * TILE, wj = mx->w[j];
			for (uint64_t k = k0; k < cnt; k++) {
				float kk = sgnf(vj[k]) == sw[k] ? 1.0f : 0.0f;
				float tm = vj[k] * kk, tw = wj * kk;
				mix[k] = j ? mix[k] + tm : tm;
				div[k] = j ? div[k] + tw : tw;
			}
		}
		for (uint64_t k = k0; k < cnt; k++)
			div[k] = div[k] == 0 ? 1.0f : div[k];
	} else {
		for (uint64_t k = k0; k < cnt; k++)
			mix[k] = v[k];
		for (size_t j = 1; j < mx->n; j++)
			for (uint64_t k = k0; k < cnt; k++)
				mix[k] = mix[k] + v[j * TILE + k];
		for (uint64_t k = k0; k < cnt; k++)
			div[k] = mx->div;
	}
	if (mx->normalize)
		for (uint64_t k = k0; k < cnt; k++)
			mix[k] = mix[k] / div[k];
	if (mx->scale_lam)
		for (uint64_t k = k0; k < cnt; k++)
			mix[k] = mix[k] * mx->lam;
	for (uint64_t k = k0; k < cnt; k++)
		o[k] = bt[k] + mix[k];
}

void mk_gta_mix_tile_from(const struct gta_mix *mx, uint64_t k0, uint64_t cnt, const float *v, const float *bt,
			  float *o, float *sw, float *mix, float *div)
{
	mix_tile_from(mx, k0, cnt, v, bt, o, sw, mix, div);
}

static void mix_tile_c(const struct gta_mix *mx, uint64_t cnt, const float *v, const float *bt, float *o,
		       float *scratch)
{
	mix_tile_from(mx, 0, cnt, v, bt, o, scratch, scratch + TILE, scratch + 2 * TILE);
}

void mk_gta_simd_take_c(struct mk_gta_simd *t)
{
	*t = (struct mk_gta_simd){
		.row_classes = row_classes_c,
		.class_starts = class_starts_c,
		.class_starts16 = class_starts16_c,
		.rank_add16 = row_rank_add16,
		.della_draw_row = mk_gta_della_draw_row_c,
		.rand_tile = rand_tile_c,
		.under_prefix = tile_under_prefix_c,
		.index_under_prefix = tile_index_under_prefix_c,
		.window = tile_window_c,
		.mix_tile = mix_tile_c,
		.fused_tile = NULL,
	};
}
