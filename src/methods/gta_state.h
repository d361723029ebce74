/* gta_state.h - what the files of the task-arithmetic family share:
 * a job's state and each input's (gta.c makes them), the selections'
 * targets, and the small rules that the statistics passes (gta_stats.c),
 * DELLA's ranking (gta_della.c) and apply (gta.c) all read.  Internal to
 * src/methods. */
#ifndef MK_METHODS_GTA_STATE_H
#define MK_METHODS_GTA_STATE_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "mk/method.h"
#include "gta.h"
#include "gta_simd.h"

#define NBUCKET 65536u
#define RANK_TABLE 4096u        /* DELLA: rank_row32's buckets */

/* The window (struct target): opened once the first digit pass reaches
 * an eighth of tensors of at least WIN_MIN elements; its buckets hold the
 * ranks within WIN_FRAC of the target's, as the first eighth has them
 * (for about 2 * WIN_FRAC of the elements, 8 bytes each, the arrays grown
 * as they fill; at most a sixteenth of them and WIN_CAP, else it is
 * dropped and the last digit pass reads everything).  (1/64 held four
 * times as many and took mk-merge over its budget in test/cli/memory.sh.)
 * A held job's windows also count (state.wcount): past w0 the first
 * digit pass counts no histogram, only the elements below each window;
 * its finish takes the window's keys into the histogram of [0, w0) when
 * the rank lies among the window's buckets, else adds a pass that counts
 * [w0, N) into the histogram (level_of).  So do a streamed job's when the
 * plan offered a spare pass (spare_wanted): that pass is the one added.  mk-yaml ties on three 7B-like
 * BF16 models of two layers: 1.32 -> 1.22 s, medians of 9 interleaved
 * runs (the embeddings, streamed, not held, keep the full histogram). */
#define WIN_MIN (1ull << 18)
#define WIN_FRAC (1.0 / 256)
#define WIN_CAP (2ull << 20)    /* entries: 16 MiB */

enum kind { K_DENSE, K_ZERO, K_MAG, K_OUTL, K_RAND, K_DELLA };

/* One order statistic being selected: the element of ascending rank
 * `rank` by (|delta| bits, index). */
struct target {
	uint64_t rank;
	uint64_t prefix;    /* digits chosen so far, then the key V itself */
	uint64_t below;     /* elements whose key is below the prefix's range */
	uint64_t eq;        /* elements whose key equals V */
	uint64_t need;      /* cut pass: which tie (1-based) sets the cut; 0: none */
	uint64_t seen;      /* cut pass: ties met so far */
	uint64_t cut1;      /* index + 1 of the need-th tie (0 when need = 0) */
	uint64_t *hist;     /* [NBUCKET] */
	/* float32: four histograms counted round robin (element k into
	 * sub[k % 4]), so that a run of equal digits (common: a bf16 model's
	 * deltas have few distinct values, their low digits mostly 0) makes
	 * four chains of increments instead of one; added into hist at the
	 * end of the pass, or before a count could pass 2^32 */
	uint32_t *sub;      /* [4][NBUCKET] */
	uint64_t since;     /* elements counted into sub since it was added */
	/* float32 without a rescale, when the last digit's bucket is small:
	 * its elements (index, low digit) in order, recorded by the last
	 * digit pass so that it finds the cut itself and the cut pass has
	 * nothing to do.  NULL: none (the cut pass finds it) */
	uint32_t *ridx;     /* [rcap + TILE + 16] */
	uint16_t *rlo;      /* [rcap + TILE + 16] */
	uint64_t nrec, rcap;
	/* float32 without a rescale, the first digit pass: from element w0
	 * on, the elements whose key's upper half lies in [wlo, whi] (the
	 * buckets around where the histogram of [0, w0) puts the rank), index
	 * and key in order.  When the cut's bucket is among them (wuse), the
	 * last digit pass reads only [0, w0) and takes [w0, N) from here
	 * (wdone).  w0 0: not opened yet; widx NULL: none (dropped, or taken
	 * in); wuse is set by the first digit pass's finish */
	uint64_t w0;
	uint32_t wlo, whi;
	uint32_t *widx;     /* [wroom] */
	uint32_t *wkey;     /* [wroom] */
	uint64_t nw, wcap, wroom;
	bool wuse, wdone;
	/* the elements of [w0, N) whose key's upper half is below wlo; when
	 * the job's windows count (state.wcount) these and the window stand
	 * for the histogram of [w0, N), which the first digit pass then does
	 * not count.  redo: they did not hold the rank (or the window was
	 * dropped), so the pass finish added counts [w0, N) into it */
	uint64_t wbelow;
	bool redo;
};

struct gin {
	int idx;
	enum kind kind;
	float wf;
	double wd;
	double density, extra;
	uint64_t k;                 /* MAG: elements kept; OUTL: target */
	struct target t[2];         /* MAG: t[0]; OUTL: t[0] lower, t[1] upper end */
	unsigned nt;
	struct lsum before, after;
	bool scale;                 /* rescale factor applies */
	float ff;
	double fd;
	uint64_t stream;            /* RAND, DELLA */
	float pf;                   /* RAND: density in the compute dtype */
	double pd;
	uint64_t thr;               /* RAND: kept when (mk_rng_u64 >> 11) < thr */
	uint8_t *mask;              /* DELLA, RAND with rescale: kept bits [N] (+ 8 bytes) */
	uint64_t *slab;             /* DELLA float64: keys of the current slab */
	uint32_t *key32;            /* DELLA float32: keys of the current slab */
	double *prob;               /* DELLA: keep probability by rank [L] */
	struct rk *rk;              /* DELLA: one row being ranked, and room to sort [2L] */
	uint64_t *dthr;             /* DELLA float32: kept when (mk_rng_u64 >> 11) < thr[rank] [L] */
	uint64_t dstep;             /* DELLA float32: the largest |dthr[r + 1] - dthr[r]| */
	bool dmono;                 /* DELLA float32: dthr monotone in rank (della_settle_row) */
	uint32_t *cnt;              /* DELLA float32: rank_row32's two count tables, then
				     * della_settle_row's sorted classes [3][2 * RANK_TABLE] */
	uint32_t *flag;             /* DELLA float32: the row's draws to check [L + 8] */
	uint64_t *w64;              /* DELLA float32: words to sort [2L + 1] */
	uint32_t *rank;             /* DELLA float32: each row element's rank [L] */
	uint32_t *bix;              /* DELLA float32: each row element's class [L], then
				     * the indices of the nonzero lower halves [L + 16] */
	float *mf;                  /* DELLA float32: a row's keys, kept |delta| [L] */
};

struct rk {
	uint64_t key;
	uint64_t j;
};

struct state {
	const struct cfg *cfg;
	size_t n;                   /* used non-base inputs */
	struct gin *g;
	bool f64, normalize, rescale, scale_lam;
	float lamf, divf;
	double lamd, divd;
	unsigned nlevels, keybits;
	bool win;                   /* the selections open windows (struct target) */
	bool wcount;                /* ... and count past them (a held job: a pass added costs
				     * no input read again; or the plan's spare pass) */
	bool spare;                 /* the plan's spare pass is pass 1 (spare_wanted) */
	unsigned extra;             /* 1: pass 1 repeats the first digit pass (level_of) */
	uint64_t nelem;
	uint64_t L, S, slab;        /* DELLA rows: length, stride, slab = L*S */
	struct mk_device_input *ex;       /* the device hook's inputs [n] */
	struct gta_mix mix;         /* the float32 merge's parameters, for gta_simd.h */
	float *wf;                  /* mix.w: each input's weight [n] */
};

/* ------------------------------------------------------------ primitives */

/* delta and its key (the bits of |delta|; ordered like |delta|, NaN last). */
static inline double delta_key(bool f64, const void *x, const void *b, uint64_t k, uint64_t *key)
{
	if (f64) {
		double d = ((const double *)x)[k] - ((const double *)b)[k], a = fabs(d);
		memcpy(key, &a, sizeof(a));
		return d;
	} else {
		float d = ((const float *)x)[k] - ((const float *)b)[k], a = fabsf(d);
		uint32_t u;
		memcpy(&u, &a, sizeof(u));
		*key = u;
		return d;
	}
}

static inline double key_value(bool f64, uint64_t key)
{
	if (f64) {
		double a;
		memcpy(&a, &key, sizeof(a));
		return a;
	} else {
		uint32_t u = (uint32_t)key;
		float a;
		memcpy(&a, &u, sizeof(a));
		return a;
	}
}

static inline void fsum_add(struct lsum *s, uint64_t e, double v)
{
	s->lane[e % LSUM_LANES] += v;
	if ((e + 1) % MK_SUM_BLOCK == 0)
		lsum_close(s);
}

static inline bool getbit(const uint8_t *m, uint64_t e)
{
	return (m[e >> 3] >> (e & 7)) & 1;
}

/* Kept by a selection, in apply (cuts known). */
static inline bool sel_keep(const struct gin *g, uint64_t key, uint64_t e)
{
	const struct target *a = &g->t[0], *z = &g->t[1];

	if (g->kind == K_MAG)
		return key > a->prefix || (key == a->prefix && e < a->cut1);
	return (key > a->prefix || (key == a->prefix && e >= a->cut1)) &&
	       (key < z->prefix || (key == z->prefix && e < z->cut1));
}

/* The inputs whose statistics accumulate_f32 (gta_stats.c) takes: every
 * selected float32 one. */
static inline bool fast_f32(const struct state *s, const struct gin *g)
{
	return !s->f64 && (g->kind == K_MAG || g->kind == K_OUTL || g->kind == K_RAND || g->kind == K_DELLA);
}

/* The passes (gta_stats.c): the mk_method calls. */
int mk_gta_accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c, struct mk_err *err);
int mk_gta_finish(struct mk_job *job, unsigned pass, struct mk_err *err);

/* DELLA (gta_della.c): rank the rows of the slab of elements start ..
 * start + s->slab (its keys in g->key32, float32, or g->slab), draw the
 * mask, sum |kept delta|. */
void mk_gta_della_slab32(struct state *s, struct gin *g, uint64_t start);
void mk_gta_della_slab(struct state *s, struct gin *g, uint64_t start);

#endif
