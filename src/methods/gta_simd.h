/* gta_simd.h - the primitives of the task-arithmetic family (gta*.c)
 * that are written once per instruction set, behind one table.  Internal
 * to src/methods.
 *
 * Each primitive is a loop over a tile or a row whose result is stated by
 * its portable C in gta_simd_c.c (the reference); gta_simd_avx2.c and
 * gta_simd_avx512.c make the same bytes faster, and finish the elements
 * their vectors leave over by calling the reference's _from functions
 * below, so that the rule itself is written once.  gta_simd.c detects the
 * CPU once and fills mk_gta_simd: the C entries, each replaced by the AVX2
 * one where the CPU has AVX2, then by the AVX-512 one where it has the
 * AVX-512 subsets that entry needs (F; DQ for the 64-bit multiplies of the
 * random draws; BW for 16-bit words), up to the limit of
 * mk_gta_simd_limit (gta.h).  The methods call through the table only. */
#ifndef MK_METHODS_GTA_SIMD_H
#define MK_METHODS_GTA_SIMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "mk/method.h"
#include "gta.h"
#include "rng.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define MK_GTA_X86 1
#else
#define MK_GTA_X86 0
#endif

/* The elements a kernel takes at a time (its arrays on the stack). */
#define TILE 1024u

/* The L1 sums of the rescale, in float64 over the fixed blocks of
 * MK_SUM_BLOCK elements (method.h), but each block summed in 8 lanes:
 * lane j takes the block's elements e with e % 8 == j in element order,
 * and the block's sum is ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7));
 * blocks combined in order.  Fixed by the element indices alone, so
 * independent of the chunking, and eight independent additions the CPU
 * (and the vectoriser) can overlap instead of one chain. */
#define LSUM_LANES 8
struct lsum {
	double total;
	double lane[LSUM_LANES];
};

static inline double lsum_block(const struct lsum *s)
{
	const double *l = s->lane;
	return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static inline void lsum_close(struct lsum *s)
{
	s->total += lsum_block(s);
	memset(s->lane, 0, sizeof(s->lane));
}

/* RAND's draw of element e (random bits u kept when below thr): its bit
 * set in mask (when there is one; all zero before) and *m = a when kept,
 * else 0. */
static inline void rand_keep_one(uint64_t stream, uint64_t thr, uint64_t e, float a, float *m, uint8_t *mask)
{
	bool keep = (mk_rng_u64(stream, e) >> 11) < thr;

	if (mask)
		mask[e >> 3] |= (uint8_t)((unsigned)keep << (e & 7));
	*m = keep ? a : 0.0f;
}

/* DELLA: a draw of u against threshold t that a threshold within margin
 * of t might decide otherwise (u, t < 2^53 + 1, margin <= 2^54: no
 * overflow). */
static inline bool della_near(uint64_t u, uint64_t t, uint64_t margin)
{
	return (u + margin >= t) & (u < t + margin);
}

/* What the merge of a tile's weighted task vectors needs (gta.c's state
 * for float32): the consensus, the inputs' weights w[0 .. n), the
 * normalisation and lambda. */
struct gta_mix {
	enum mk_gta_consensus cons;
	size_t n;
	const float *w;
	bool normalize, scale_lam;
	float lam;
	float div;                  /* the divisor without a consensus */
};

/* The fused apply of a tile, for up to FUSE_MAX inputs whose masks in
 * the tile are plain (gta.c's fuse_of): what each input's mask is there. */
#define FUSE_MAX 8
enum fuse_kind { FU_DENSE, FU_ZERO, FU_RANGE, FU_BITS };
struct fuse_in {
	enum fuse_kind kind;
	const void *x;              /* float32, or BF16 (the tile's bf16) */
	const uint8_t *mask;        /* FU_BITS */
	uint32_t lo, hi;            /* FU_RANGE: kept when lo <= key <= hi */
	bool none;                  /* FU_RANGE: the range is empty */
	bool scale;
	float f, w;
};

/* The eight 1.0f / 0.0f of each byte of a mask (made once, with the
 * table). */
extern float mk_gta_byte_f32[256][8];

struct mk_gta_simd {
	/* DELLA float32 rows (gta_della.c).  Each key's class, 2v + d for
	 * bucket v (0 for the zero keys, else its upper half's place above
	 * lo, from 1) and d = 1 when its lower half is nonzero, into bix;
	 * the indices of d = 1 in order into dl (room for 16 more); returns
	 * how many. */
	uint64_t (*row_classes)(const uint32_t *restrict key, uint64_t L, uint32_t lo, uint32_t *restrict bix,
				uint32_t *restrict dl);
	/* The exclusive starts of the classes (x in order: the counts c0[x] of
	 * the row's first half, then c1[x] of its second) into c0 and c1;
	 * returns the most elements a class of nonzero lower halves (x odd)
	 * holds.  nc a multiple of 16.  class_starts16: on 16-bit counts (a
	 * row of at most 65535 elements). */
	uint32_t (*class_starts)(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t nc);
	uint32_t (*class_starts16)(uint16_t *restrict c0, uint16_t *restrict c1, uint32_t nc);
	/* rank[j] += start[bix[j]], 16-bit starts (start may be read one word
	 * past the last one bix names). */
	void (*rank_add16)(uint32_t *restrict rank, const uint32_t *restrict bix, const uint16_t *restrict start,
			   uint64_t L);
	/* The draw of elements j0 .. L of a ranked row of elements e0 .. e0 +
	 * L: element j kept when its 53 random bits u are below t =
	 * thr[rank[j]]; its bit set in the mask (all zero before) and m[j] =
	 * |delta| (the key's value) when kept, else 0.  Where della_near(u,
	 * t, margin), j is flagged (into flag, from nf; returns the new
	 * count). */
	uint32_t (*della_draw_row)(uint64_t stream, uint64_t e0, uint64_t j0, uint64_t L,
				   const uint32_t *restrict rank, const uint64_t *restrict thr,
				   const uint32_t *restrict key, uint8_t *restrict mask, float *restrict m,
				   uint64_t margin, uint32_t *restrict flag, uint32_t nf);
	/* RAND's statistics over elements e0 .. e0 + cnt of a tile (cnt <=
	 * TILE; x and b at the tile, float32 or BF16): |x - b| in float32,
	 * each element's draw (rand_keep_one; its bit into mask when there is
	 * one) and both lane sums, before (every |delta|) and after (the kept
	 * ones, 0.0 for the others), in element order. */
	void (*rand_tile)(uint64_t stream, uint64_t thr, uint8_t *mask, uint64_t e0, uint64_t cnt, const void *x,
			  const void *b, bool bf16, struct lsum *before, struct lsum *after);
	/* The selections' scans of a tile's float32 keys (cnt <= TILE).
	 * under_prefix: the low 16 bits of the keys whose high 16 bits are P,
	 * in order, into lo (room for 16 more); returns how many.
	 * index_under_prefix: their indices (e0 + k), into idx (room for 16
	 * more).  window: the indices and keys of the keys whose upper half
	 * lies in [lo, hi], in order, into idx and kv (room for 16 more each);
	 * adds to *below those whose upper half is below lo. */
	uint64_t (*under_prefix)(const uint32_t *restrict key, uint64_t cnt, uint32_t P, uint16_t *restrict lo);
	uint64_t (*index_under_prefix)(const uint32_t *restrict key, uint64_t cnt, uint32_t P, uint32_t e0,
				       uint32_t *restrict idx);
	uint64_t (*window)(const uint32_t *restrict key, uint64_t cnt, uint32_t lo, uint32_t hi, uint32_t e0,
			   uint32_t *restrict idx, uint32_t *restrict kv, uint64_t *below);
	/* The merge of one tile's weighted task vectors v[j * TILE + k] (k <
	 * cnt) into o[k] = bt[k] + mix: the consensus, the sum, the
	 * normalisation and lambda (scratch: three tiles). */
	void (*mix_tile)(const struct gta_mix *mx, uint64_t cnt, const float *v, const float *bt, float *o,
			 float *scratch);
	/* The fused apply of a tile whose every input fi[0 .. mx->n) is plain
	 * (n <= FUSE_MAX): o[k] = bt[k] + the merge of each input's delta,
	 * mask, rescale and weight (gta.c's tile_f32, then mix_tile: the same
	 * operations in the same order); returns how many elements from the
	 * first it did (the rest: those two).  NULL: none. */
	uint64_t (*fused_tile)(const struct gta_mix *mx, const struct fuse_in *fi, uint64_t e0, uint64_t cnt,
			       const void *bt, float *o, bool bf16);
};

/* The table in use (mk_gta_simd_init makes it). */
extern struct mk_gta_simd mk_gta_simd;

/* Make the table and mk_gta_byte_f32, once (any thread). */
void mk_gta_simd_init(void);

/* The reference's parts that the other sets call: the rule from element
 * (or key, or index) k on, with n results already stored. */
uint64_t mk_gta_row_classes_from(const uint32_t *restrict key, uint64_t j, uint64_t L, uint32_t lo,
				 uint32_t *restrict bix, uint32_t *restrict dl, uint64_t nd);
uint32_t mk_gta_della_draw_row_c(uint64_t stream, uint64_t e0, uint64_t j0, uint64_t L,
				 const uint32_t *restrict rank, const uint64_t *restrict thr,
				 const uint32_t *restrict key, uint8_t *restrict mask, float *restrict m,
				 uint64_t margin, uint32_t *restrict flag, uint32_t nf);
uint64_t mk_gta_under_prefix_from(const uint32_t *restrict key, uint64_t k, uint64_t cnt, uint32_t P,
				  uint16_t *restrict lo, uint64_t n);
uint64_t mk_gta_index_under_prefix_from(const uint32_t *restrict key, uint64_t k, uint64_t cnt, uint32_t P,
					uint32_t e0, uint32_t *restrict idx, uint64_t n);
uint64_t mk_gta_window_from(const uint32_t *restrict key, uint64_t k, uint64_t cnt, uint32_t lo, uint32_t hi,
			    uint32_t e0, uint32_t *restrict idx, uint32_t *restrict kv, uint64_t n, uint64_t *below);
/* mix_tile of elements k0 .. cnt (sw, mix, div: the three scratch tiles) */
void mk_gta_mix_tile_from(const struct gta_mix *mx, uint64_t k0, uint64_t cnt, const float *v, const float *bt,
			  float *o, float *sw, float *mix, float *div);

/* The loops of the methods' own passes that the sets share: |x - b| of
 * a tile (float32, or BF16 widened first) and its keys (the bits, ordered
 * like the value); a[0 .. cnt) (terms of elements e0, e0 + 1, ...) added
 * to a lane sum, closing blocks at their boundaries. */
void mk_gta_tile_abs_f32(const float *restrict x, const float *restrict b, uint64_t cnt, float *restrict a,
			 uint32_t *restrict key);
void mk_gta_tile_abs_bf16(const uint16_t *restrict x, const uint16_t *restrict b, uint64_t cnt, float *restrict a,
			  uint32_t *restrict key);
void mk_gta_fsum_run_f32(struct lsum *s, uint64_t e0, const float *a, uint64_t cnt);

/* |x - b| of elements [t0, t0 + cnt) of a chunk's inputs, float32 or
 * (bf16) BF16. */
static inline void tile_abs(const void *x, const void *b, bool bf16, uint64_t t0, uint64_t cnt, float *a,
			    uint32_t *key)
{
	if (bf16)
		mk_gta_tile_abs_bf16((const uint16_t *)x + t0, (const uint16_t *)b + t0, cnt, a, key);
	else
		mk_gta_tile_abs_f32((const float *)x + t0, (const float *)b + t0, cnt, a, key);
}

/* The sets: each fills the entries it has. */
void mk_gta_simd_take_c(struct mk_gta_simd *t);
#if MK_GTA_X86
void mk_gta_simd_avx2_tables(void);
void mk_gta_simd_take_avx2(struct mk_gta_simd *t);
void mk_gta_simd_take_avx512(struct mk_gta_simd *t, bool dq, bool bw);
#endif

#endif
