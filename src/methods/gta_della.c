/* gta_della.c - DELLA's statistics pass (gta.c has its semantics): each
 * slab's rows ranked by |delta|, the mask drawn by rank, the kept
 * magnitudes summed for the rescale. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "gta.h"
#include "gta_simd.h"
#include "gta_state.h"
#include "rng.h"
#include "core/simd.h"

float mk_gta_della_prob_f32(uint64_t rank0, uint64_t len, double density, double epsilon)
{
	float q;

	if (len < 2)
		return (float)density;
	q = ((float)(rank0 + 1) - 1.0f) / ((float)len - 1.0f);
	if (q < 0.0f)
		q = 0.0f;
	if (q > 1.0f)
		q = 1.0f;
	return (float)(density - epsilon) + q * 2.0f * (float)epsilon;
}

double mk_gta_della_prob_f64(uint64_t rank0, uint64_t len, double density, double epsilon)
{
	double q;

	if (len < 2)
		return density;
	q = ((double)(rank0 + 1) - 1.0) / ((double)len - 1.0);
	if (q < 0.0)
		q = 0.0;
	if (q > 1.0)
		q = 1.0;
	return (density - epsilon) + q * 2.0 * epsilon;
}

/* DELLA: rank one slab's rows, draw the mask, sum |kept delta|.  A row
 * is ranked by a stable LSD radix sort on its keys, 8 bits a digit (the
 * digits all elements share skipped): the rows start in index order, so
 * equal keys keep the lower index first, the order (key, index) a
 * comparison sort would give, in a few linear passes instead of
 * L log L comparisons. */
static const struct rk *rank_sort(struct rk *r, struct rk *tmp, uint64_t L, unsigned keybits)
{
	uint64_t cnt[8][256];
	unsigned nd = keybits / 8;

	memset(cnt, 0, nd * sizeof(cnt[0]));
	for (uint64_t i = 0; i < L; i++)
		for (unsigned d = 0; d < nd; d++)
			cnt[d][(r[i].key >> (8 * d)) & 0xff]++;
	for (unsigned d = 0; d < nd; d++) {
		unsigned sh = 8 * d;
		uint64_t pos = 0, *c = cnt[d];
		struct rk *t;
		if (c[(r[0].key >> sh) & 0xff] == L)
			continue;           /* one digit for all: the order stays */
		for (unsigned v = 0; v < 256; v++) {
			uint64_t x = c[v];
			c[v] = pos;
			pos += x;
		}
		for (uint64_t i = 0; i < L; i++)
			tmp[c[(r[i].key >> sh) & 0xff]++] = r[i];
		t = r, r = tmp, tmp = t;
	}
	return r;
}

/* The float32 rows: (key << 32 | index) sorted as one 64-bit word on its
 * upper half (rank_sort's order), the mask then drawn in index order. */
static const uint64_t *rank_sort32(uint64_t *r, uint64_t *tmp, uint64_t L)
{
	uint64_t cnt[4][256];

	memset(cnt, 0, sizeof(cnt));
	for (uint64_t i = 0; i < L; i++)
		for (unsigned d = 0; d < 4; d++)
			cnt[d][(r[i] >> (32 + 8 * d)) & 0xff]++;
	for (unsigned d = 0; d < 4; d++) {
		unsigned sh = 32 + 8 * d;
		uint64_t pos = 0, *c = cnt[d], *t;
		if (c[(r[0] >> sh) & 0xff] == L)
			continue;
		for (unsigned v = 0; v < 256; v++) {
			uint64_t x = c[v];
			c[v] = pos;
			pos += x;
		}
		for (uint64_t i = 0; i < L; i++)
			tmp[c[(r[i] >> sh) & 0xff]++] = r[i];
		t = r, r = tmp, tmp = t;
	}
	return r;
}

/* The least nonzero and the greatest upper halves (key >> 16) of a
 * row's float32 keys (lo > hi when all keys are 0). */
MK_HOT_CLONES
static void row_span16(const uint32_t *restrict key, uint64_t L, uint32_t *lo, uint32_t *hi)
{
	uint32_t mn = UINT32_MAX, mx = 0;

	for (uint64_t j = 0; j < L; j++) {
		uint32_t k = key[j], u = k >> 16, v = u | (0u - (uint32_t)(k == 0));
		mn = v < mn ? v : mn;
		mx = u > mx ? u : mx;
	}
	*lo = mn, *hi = mx;
}

/* rank[j] += start[bix[j]]. */
MK_HOT_CLONES
static void row_rank_add(uint32_t *restrict rank, const uint32_t *restrict bix,
			 const uint32_t *restrict start, uint64_t L)
{
	for (uint64_t j = 0; j < L; j++)
		rank[j] += start[bix[j]];
}

/* Sort the words x[0..nb) (key << 32 | index) ascending: insertion when
 * few, else rank_sort32 (w: room for nb). */
static void bucket_sort32(uint64_t *x, uint64_t *w, uint32_t nb)
{
	uint32_t i = 1;

	while (i < nb && x[i - 1] < x[i])
		i++;
	if (i >= nb)
		return;
	if (nb > 64) {
		const uint64_t *r = rank_sort32(x, w, nb);
		if (r != x)
			memcpy(x, r, nb * sizeof(uint64_t));
		return;
	}
	for (; i < nb; i++) {
		uint64_t y = x[i];
		uint32_t q = i;
		for (; q && x[q - 1] > y; q--)
			x[q] = x[q - 1];
		x[q] = y;
	}
}

/* What rank_row32 leaves for the draw and della_settle_row: the row's
 * nonzero lower halves (nd, their indices after bix[L]), its classes (nc,
 * their starts in g->cnt) and the most elements a class of nonzero lower
 * halves holds (most; 0 when every rank is exact). */
struct row_ranked {
	uint64_t nd;
	uint32_t nc, most;
	bool narrow;                /* the starts are 16-bit words */
};

/* Class x's start (rank_row32's tables). */
static inline uint32_t class_start(const struct gin *g, struct row_ranked rr, uint32_t x)
{
	return rr.narrow ? ((const uint16_t *)(const void *)g->cnt)[x] : g->cnt[x];
}

/* The ranks of a row's float32 keys key[0..L) (contiguous) in the order
 * (key, index), rank_sort32's order, into g->rank.  When the keys' upper
 * halves span at most RANK_TABLE - 1 values (bfloat16 models' deltas: a
 * few octaves, few mantissa bits), not many more than L, and L < 2^31,
 * by counting on the classes of row_classes: one pass gives each element
 * its place among its class's (index order) and counts the classes, the
 * two halves of the row into two tables (two chains of increments, not
 * one, where runs of one class are common); the classes' starts then
 * make the ranks.  A class of nonzero lower halves may hold several
 * keys in another order than their indices': its elements' ranks are
 * then places in the class's range, not yet their own, and
 * della_settle_row sorts the class where its draws need that.  The
 * counts are 16-bit words where L <= 65535 (rr.narrow; g->cnt has room
 * past the two tables for row_rank_add16_avx2's wider reads), else
 * 32-bit.  Else rank_sort32 on the whole row (every rank exact). */
/* Each element's place among its class's (index order), the counts of
 * the first half's classes into T0 and the second's into T1. */
#define COUNT_CLASSES(T0, T1) do {						\
		for (uint64_t j = 0; j < h; j++) {				\
			uint32_t a = bix[j], b = bix[h + j];			\
			rank[j] = (T0)[a]++;					\
			rank[h + j] = (T1)[b]++;				\
		}								\
		if (L % 2)							\
			rank[L - 1] = (T1)[bix[L - 1]]++;			\
	} while (0)

static struct row_ranked rank_row32(struct gin *g, const uint32_t *restrict key, uint64_t L)
{
	uint64_t *w = g->w64, *tmp = w + L;
	uint32_t *rank = g->rank, *bix = g->bix, *c0 = g->cnt, *c1;
	uint32_t lo, hi, span, nc, most, *dl = g->bix + L;
	uint64_t h = L / 2, nd;

	row_span16(key, L, &lo, &hi);
	span = lo > hi ? 1 : hi - lo + 2;
	if (span > RANK_TABLE || span > L + 1024 || L > INT32_MAX) {
		/* (a short row of keys spread wide: its classes would cost
		 * more than the row) */
		const uint64_t *r;
		for (uint64_t j = 0; j < L; j++)
			w[j] = (uint64_t)key[j] << 32 | j;
		r = rank_sort32(w, tmp, L);
		for (uint64_t i = 0; i < L; i++)
			rank[(uint32_t)r[i]] = (uint32_t)i;
		return (struct row_ranked){ 0, 0, 0, false };
	}
	nc = (2 * span + 15) & ~15u;     /* class_starts takes 16 at a time */
	nd = mk_gta_simd.row_classes(key, L, lo, bix, dl);
	if (L <= UINT16_MAX) {
		/* 16-bit counts: the tables' clearing and scan, which grow with
		 * the span, not the row (about 2.5 classes an element in rows
		 * of 1024), take half the bytes (with AVX-512 too: on an AMD
		 * Zen 5 mk-bench-kernels -c 1024 della 1.23-1.24 -> 1.32-1.36
		 * GB/s against the 32-bit tables, the AVX-512 scan included) */
		uint16_t *s0 = (uint16_t *)(void *)g->cnt, *s1 = s0 + nc;
		memset(s0, 0, 2 * nc * sizeof(uint16_t));
		COUNT_CLASSES(s0, s1);
		most = mk_gta_simd.class_starts16(s0, s1, nc);
		mk_gta_simd.rank_add16(rank, bix, s0, h);
		mk_gta_simd.rank_add16(rank + h, bix + h, s1, L - h);
		return (struct row_ranked){ nd, nc, most > 1 ? most : 0, true };
	}
	c1 = c0 + nc;
	memset(c0, 0, 2 * nc * sizeof(uint32_t));
	COUNT_CLASSES(c0, c1);
	most = mk_gta_simd.class_starts(c0, c1, nc);
	row_rank_add(rank, bix, c0, h);
	row_rank_add(rank + h, bix + h, c1, L - h);
	return (struct row_ranked){ nd, nc, most > 1 ? most : 0, false };
}
#undef COUNT_CLASSES

/* How far a draw's threshold may be from the one of its element's own
 * rank: the ranks of a class of rr.most elements differ by at most
 * rr.most - 1, neighbouring thresholds by at most dstep (the bound holds
 * for any thresholds, not only monotone ones); at least 2^54 (every
 * draw checked) where it is larger than that. */
static uint64_t della_margin(const struct gin *g, struct row_ranked rr)
{
	if (rr.most < 2 || !g->dstep)
		return 0;
	if (rr.most - 1 > (UINT64_C(1) << 54) / g->dstep)
		return UINT64_C(1) << 54;
	return (uint64_t)(rr.most - 1) * g->dstep;
}

/* The flagged draws of a row (flag[0..nf), indices into it; element j is
 * element e0 + j * stride of the tensor), drawn against the threshold of
 * a rank in its class's range: where the element's class holds several
 * nonzero lower halves, it is drawn again on its own rank (its class
 * sorted, once, among the nonzero lower halves placed by their ranks),
 * the mask bit set or cleared and m[j] (when m) set -- unless the
 * thresholds are monotone and its random number lies outside those at
 * the range's two ends (then every rank of the range draws the same). */
static void della_settle_row(struct gin *g, const uint32_t *restrict key, uint64_t L, struct row_ranked rr,
			     uint64_t e0, uint64_t stride, const uint32_t *flag, uint32_t nf, float *m)
{
	const uint32_t *bix = g->bix, *dl = g->bix + L;
	const uint64_t *thr = g->dthr;
	uint8_t *sorted = (uint8_t *)(void *)(g->cnt + 2 * rr.nc);
	uint64_t *w = g->w64, *tmp = w + L;
	uint32_t *rank = g->rank;
	bool placed = false;

	for (uint32_t q = 0; q < nf; q++) {
		uint32_t j = flag[q], x = bix[j], b0 = class_start(g, rr, x);
		uint32_t nb = (x + 1 < rr.nc ? class_start(g, rr, x + 1) : (uint32_t)L) - b0;
		uint64_t e = e0 + j * stride, u = mk_rng_u64(g->stream, e) >> 11, ta, tb;
		bool keep;
		if (!(x & 1) || nb < 2)
			continue;               /* its rank is its own */
		ta = thr[b0], tb = thr[b0 + nb - 1];
		if (g->dmono && (u < (ta < tb ? ta : tb) || u >= (ta < tb ? tb : ta)))
			continue;               /* the same draw at every rank of the class */
		if (!placed) {
			for (uint64_t p = 0; p < rr.nd; p++)
				tmp[rank[dl[p]]] = (uint64_t)key[dl[p]] << 32 | dl[p];
			memset(sorted, 0, rr.nc);
			placed = true;
		}
		if (!sorted[x]) {
			bucket_sort32(tmp + b0, w, nb);
			for (uint32_t i = 0; i < nb; i++)
				rank[(uint32_t)tmp[b0 + i]] = b0 + i;
			sorted[x] = 1;
		}
		keep = u < thr[rank[j]];
		g->mask[e >> 3] = (uint8_t)((g->mask[e >> 3] & ~(1u << (e & 7))) | (unsigned)keep << (e & 7));
		if (m) {
			float a;
			memcpy(&a, &key[j], sizeof(a));
			m[j] = keep ? a : 0.0f;
		}
	}
}

/* DELLA float32: rank the slab's rows, draw the mask, sum |kept delta|
 * (in element order). */
void mk_gta_della_slab32(struct state *s, struct gin *g, uint64_t start)
{
	const uint64_t L = s->L, S = s->S;

	if (S == 1) {
		struct row_ranked rr = rank_row32(g, g->key32, L);
		uint32_t nf = mk_gta_simd.della_draw_row(g->stream, start, 0, L, g->rank, g->dthr, g->key32, g->mask,
							 g->mf, della_margin(g, rr), g->flag, 0);
		della_settle_row(g, g->key32, L, rr, start, 1, g->flag, nf, g->mf);
		mk_gta_fsum_run_f32(&g->after, start, g->mf, L);   /* x + 0.0 is x: terms >= 0 */
		return;
	}
	for (uint64_t c = 0; c < S; c++) {
		uint32_t *row = (uint32_t *)(void *)g->mf;
		for (uint64_t j = 0; j < L; j++)
			row[j] = g->key32[j * S + c];
		struct row_ranked rr = rank_row32(g, row, L);
		uint64_t margin = della_margin(g, rr);
		uint32_t nf = 0;
		for (uint64_t j = 0; j < L; j++) {
			uint64_t e = start + j * S + c, u = mk_rng_u64(g->stream, e) >> 11, t = g->dthr[g->rank[j]];
			if (u < t)
				g->mask[e >> 3] |= (uint8_t)(1u << (e & 7));
			g->flag[nf] = (uint32_t)j;
			nf += della_near(u, t, margin);
		}
		della_settle_row(g, row, L, rr, start + c, S, g->flag, nf, NULL);
	}
	for (uint64_t p = 0; p < s->slab; p += TILE) {
		uint64_t cnt = s->slab - p < TILE ? s->slab - p : TILE;
		float m[TILE];
		for (uint64_t k = 0; k < cnt; k++)
			m[k] = getbit(g->mask, start + p + k) ? (float)key_value(false, g->key32[p + k]) : 0.0f;
		mk_gta_fsum_run_f32(&g->after, start + p, m, cnt);
	}
}

/* DELLA float64: the same with rank_sort on (key, index) pairs and the
 * probabilities as doubles. */
void mk_gta_della_slab(struct state *s, struct gin *g, uint64_t start)
{
	for (uint64_t c = 0; c < s->S; c++) {
		const struct rk *r;
		for (uint64_t j = 0; j < s->L; j++) {
			g->rk[j].key = g->slab[j * s->S + c];
			g->rk[j].j = j;
		}
		r = rank_sort(g->rk, g->rk + s->L, s->L, s->keybits);
		for (uint64_t i = 0; i < s->L; i++) {
			uint64_t e = start + r[i].j * s->S + c;
			if (mk_rng_uniform(g->stream, e) < g->prob[i])
				g->mask[e >> 3] |= (uint8_t)(1u << (e & 7));
		}
	}
	for (uint64_t p = 0; p < s->slab; p++)
		if (getbit(g->mask, start + p))
			fsum_add(&g->after, start + p, key_value(s->f64, g->slab[p]));
}
