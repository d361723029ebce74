/* gta_stats.c - the statistics passes of the task-arithmetic family
 * (gta.c has the methods and what the passes find): the selections'
 * digit histograms, windows, records and cuts (ties, breadcrumbs), DARE's
 * draws and L1 sums, DELLA's slabs handed to gta_della.c, and the finish
 * of each pass. */
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
#include "core/pool.h"
#include "core/bug.h"

/* Kept by a selection, during the cut pass (elements in order). */
static inline bool sel_keep_scan(struct gin *g, uint64_t key, uint64_t e)
{
	struct target *a = &g->t[0], *z = &g->t[1];
	bool lo, hi;

	if (g->kind == K_MAG) {
		if (key != a->prefix)
			return key > a->prefix;
		if (++a->seen == a->need)
			a->cut1 = e + 1;
		return a->seen <= a->need;
	}
	lo = key > a->prefix;
	if (key == a->prefix) {
		if (++a->seen == a->need)
			a->cut1 = e + 1;
		lo = a->seen > a->need;    /* the first `need` ties are dropped */
	}
	hi = key < z->prefix;
	if (key == z->prefix) {
		if (++z->seen == z->need)
			z->cut1 = e + 1;
		hi = z->seen <= z->need;
	}
	return lo && hi;
}

/* No record: the cut pass finds the cut. */
static void rec_drop(struct target *tg)
{
	free(tg->ridx);
	free(tg->rlo);
	tg->ridx = NULL;
	tg->rlo = NULL;
	tg->nrec = tg->rcap = 0;
}

/* The most elements a selection records (6 bytes each): a sixteenth of
 * the tensor's, at most 4 Mi (24 MiB). */
#define REC_MAX (4ull << 20)

static void win_drop(struct target *tg)
{
	free(tg->widx);
	free(tg->wkey);
	tg->widx = tg->wkey = NULL;
	tg->nw = tg->wcap = tg->wroom = 0;
}

/* Add a target's four float32 histograms into its hist, and clear them. */
static void sub_flush(struct target *tg)
{
	uint32_t *h = tg->sub;

	for (size_t b = 0; b < NBUCKET; b++)
		tg->hist[b] += (uint64_t)h[b] + h[b + NBUCKET] + h[b + 2 * NBUCKET] + h[b + 3 * NBUCKET];
	memset(h, 0, 4 * (size_t)NBUCKET * sizeof(uint32_t));
	tg->since = 0;
}

/* ------------------------------------------------------------- passes */

/* How many of a tile's keys equal P. */
MK_HOT_CLONES
static uint64_t tile_count_eq(const uint32_t *restrict key, uint64_t cnt, uint32_t P)
{
	uint64_t n = 0;

	for (uint64_t k = 0; k < cnt; k++)
		n += key[k] == P;
	return n;
}

/* The first bucket whose running total of t0's counts (hist and the four
 * sub-histograms) passes rank r. */
static uint32_t bucket_of_rank(const struct target *t0, uint64_t r)
{
	const uint32_t *h = t0->sub;
	uint64_t below = 0;

	for (uint32_t b = 0; b < NBUCKET; b++) {
		below += t0->hist[b] + (uint64_t)h[b] + h[b + NBUCKET] + h[b + 2 * NBUCKET] + h[b + 3 * NBUCKET];
		if (below > r)
			return b;
	}
	return NBUCKET - 1;
}

/* Open target tg's window at element e0 of the first digit pass, from the
 * histogram of [0, e0) that t0 (the gin's first target) has counted. */
static void win_open(const struct state *s, struct target *tg, const struct target *t0, uint64_t e0)
{
	uint64_t N = s->nelem, cap = N / 16 < WIN_CAP ? N / 16 : WIN_CAP;
	double at = (double)tg->rank * (double)e0 / (double)N, d = WIN_FRAC * (double)e0;
	uint64_t rlo = at - d > 0 ? (uint64_t)(at - d) : 0, rhi = (uint64_t)(at + d);

	tg->w0 = e0;
	if (rhi >= e0)
		rhi = e0 - 1;
	tg->wlo = bucket_of_rank(t0, rlo);
	tg->whi = bucket_of_rank(t0, rhi);
	tg->wroom = (cap < (1u << 16) ? cap : (1u << 16)) + TILE + 16;
	if (!(tg->widx = malloc(tg->wroom * sizeof(uint32_t))) || !(tg->wkey = malloc(tg->wroom * sizeof(uint32_t)))) {
		win_drop(tg);
		return;
	}
	tg->wcap = cap;
	tg->nw = 0;
}

/* Room in tg's window for a tile more (TILE + 16 entries past nw), or
 * the window dropped. */
static void win_room(struct target *tg)
{
	if (tg->nw + TILE + 16 <= tg->wroom)
		return;
	uint64_t room = tg->wroom * 2, top = tg->wcap + TILE + 16;
	if (room > top)
		room = top;
	uint32_t *a = realloc(tg->widx, room * sizeof(uint32_t));
	if (a)
		tg->widx = a;
	uint32_t *k = a ? realloc(tg->wkey, room * sizeof(uint32_t)) : NULL;
	if (!k) {
		win_drop(tg);
		return;
	}
	tg->wkey = k;
	tg->wroom = room;
}

/* The last digit pass has read [0, w0): take the window's elements of the
 * bucket in, as the pass would have counted and recorded them. */
static void win_take(struct target *tg)
{
	uint32_t P = (uint32_t)tg->prefix;
	uint32_t *h0 = tg->sub;

	if (tg->since + tg->nw > UINT32_MAX)
		sub_flush(tg);
	tg->since += tg->nw;
	for (uint64_t q = 0; q < tg->nw; q++) {
		uint32_t k = tg->wkey[q];
		if (k >> 16 != P)
			continue;
		h0[k & 0xffff]++;
		if (tg->ridx) {
			if (tg->nrec == tg->rcap) {
				rec_drop(tg);   /* more than pass 0 counted */
				continue;
			}
			tg->ridx[tg->nrec] = tg->widx[q];
			tg->rlo[tg->nrec++] = (uint16_t)k;
		}
	}
	win_drop(tg);
	tg->wdone = true;
}

/* RAND's statistics over the elements e0 .. e0 + cnt of a tile (element
 * t0 on of the chunk's x and b, float32 or BF16): each element's draw (its
 * bit into g->mask when there is one) and the L1 lane sums before and
 * after, in element order (gta_simd.h's rand_tile). */
static void rand_stats_tile(struct gin *g, uint64_t e0, uint64_t cnt, const void *x, const void *b, bool bf16,
			    uint64_t t0)
{
	size_t es = bf16 ? 2 : 4;

	mk_gta_simd.rand_tile(g->stream, g->thr, g->mask, e0, cnt, (const char *)x + t0 * es,
			      (const char *)b + t0 * es, bf16, &g->before, &g->after);
}

void mk_gta_rand_sums(uint64_t stream, uint64_t thr, uint64_t e0, uint64_t n, const void *x, const void *b, bool bf16,
		      uint8_t *mask, double before[LSUM_LANES + 1], double after[LSUM_LANES + 1])
{
	struct gin g = { .kind = K_RAND, .stream = stream, .thr = thr, .mask = mask };

	mk_gta_simd_init();
	for (uint64_t t0 = 0; t0 < n; t0 += TILE)
		rand_stats_tile(&g, e0 + t0, n - t0 < TILE ? n - t0 : TILE, x, b, bf16, t0);
	memcpy(before, g.before.lane, sizeof(g.before.lane));
	before[LSUM_LANES] = g.before.total;
	memcpy(after, g.after.lane, sizeof(g.after.lane));
	after[LSUM_LANES] = g.after.total;
}

/* The level of digit pass a statistics pass is: pass 1 repeats the
 * first (level 0) when pass 0's finish added it for a window that did
 * not hold its rank (state.extra). */
static inline unsigned level_of(const struct state *s, unsigned pass)
{
	return pass ? pass - s->extra : 0;
}

/* A tile's keys into target tg's first-digit histograms. */
static void hist_tile(struct target *tg, const uint32_t *restrict key, uint64_t cnt)
{
	uint32_t *h0 = tg->sub, *h1 = h0 + NBUCKET, *h2 = h1 + NBUCKET, *h3 = h2 + NBUCKET;
	uint64_t k = 0;

	if (tg->since + cnt > UINT32_MAX)
		sub_flush(tg);
	tg->since += cnt;
	for (; k + 4 <= cnt; k += 4) {
		h0[key[k] >> 16]++;
		h1[key[k + 1] >> 16]++;
		h2[key[k + 2] >> 16]++;
		h3[key[k + 3] >> 16]++;
	}
	for (; k < cnt; k++)
		h0[key[k] >> 16]++;
}

/* A tile's keys (elements e0 on) whose upper half lies in tw's window
 * into it, those below it counted; the window dropped when it cannot
 * grow or holds more than it may. */
static void window_tile(struct target *tw, const uint32_t *restrict key, uint64_t cnt, uint64_t e0)
{
	win_room(tw);
	if (!tw->widx)
		return;
	tw->nw += mk_gta_simd.window(key, cnt, tw->wlo, tw->whi, (uint32_t)e0, tw->widx + tw->nw, tw->wkey + tw->nw,
				     &tw->wbelow);
	if (tw->nw > tw->wcap)
		win_drop(tw);
}

/* A tile of the first digit pass (elements e0 on, their keys): into the
 * first target's histograms (both ends of OUTL count the same: copied in
 * finish), and from a window's w0 on, the keys in the window into it.
 * When the windows count (state.wcount), the histogram stops at w0: the
 * windows count the rest as below them or in them.  In the pass repeating
 * it (redo): the elements from w0 on into the histograms of the targets
 * whose windows did not hold the rank. */
static void level0_tile(const struct state *s, struct gin *g, bool redo, uint64_t e0, uint64_t cnt,
			const uint32_t *restrict key)
{
	if (redo) {
		/* (a later pass's chunks need not be pass 0's: a tile may
		 * straddle w0) */
		for (unsigned t = 0; t < g->nt; t++)
			if (g->t[t].redo && e0 + cnt > g->t[t].w0) {
				uint64_t s0 = g->t[t].w0 > e0 ? g->t[t].w0 - e0 : 0;
				hist_tile(&g->t[t], key + s0, cnt - s0);
			}
		return;
	}
	if (!s->wcount || !g->t[0].w0 || e0 < g->t[0].w0)
		hist_tile(&g->t[0], key, cnt);
	for (unsigned u = 0; u < g->nt; u++)
		if (g->t[u].widx && e0 >= g->t[u].w0)
			window_tile(&g->t[u], key, cnt, e0);
}

/* A tile of the first digit pass past w0 whose windows count (state.wcount):
 * its keys only into the windows (the histogram stops at w0); none made
 * when every window was dropped.  (Making the keys in tile_window's loop,
 * without the arrays, was no faster: mk-yaml ties on 7B-like models,
 * 1.50 s against 1.47 s.) */
static void counted_tile(struct gin *g, const void *x, const void *b, bool bf16, uint64_t t0, uint64_t e0,
			 uint64_t cnt)
{
	float a[TILE];
	uint32_t key[TILE];
	bool keys = false;

	for (unsigned u = 0; u < g->nt; u++) {
		if (!g->t[u].widx)
			continue;   /* dropped: the pass added counts [w0, N) */
		if (!keys)
			tile_abs(x, b, bf16, t0, cnt, a, key);
		keys = true;
		window_tile(&g->t[u], key, cnt, e0);
	}
}

/* The float32 statistics of the selections and of RAND, tile by tile: the
 * same counts and sums as the generic loop below, without a sum nobody
 * reads (L1 norms only for the rescale) and, once a cut is found, without
 * looking at the rest. */
static void accumulate_f32(struct state *s, struct gin *g, unsigned pass, const struct mk_job_chunk *c,
			   const void *x, const void *b)
{
	float a[TILE], m[TILE];
	uint32_t key[TILE];
	unsigned lv = level_of(s, pass);
	bool redo = s->extra && pass == 1;

	for (uint64_t t0 = 0; t0 < c->count; t0 += TILE) {
		uint64_t cnt = c->count - t0 < TILE ? c->count - t0 : TILE, e0 = c->elem_begin + t0;
		if (lv == s->nlevels && !s->rescale && (g->kind == K_MAG || g->kind == K_OUTL)) {
			/* the cut pass without a rescale: done once the cuts are */
			bool done = true;
			for (unsigned t = 0; t < g->nt; t++)
				done &= g->t[t].seen >= g->t[t].need;
			if (done)
				return;
		}
		if (redo) {
			/* only [w0, N) of the targets that missed */
			bool any = false;
			for (unsigned t = 0; t < g->nt; t++)
				any |= g->t[t].redo && e0 + cnt > g->t[t].w0;
			if (!any)
				continue;
		}
		if (g->kind == K_DELLA && e0 % s->slab + cnt <= s->slab) {
			/* the tile within one slab: its keys straight into it */
			uint64_t p = e0 % s->slab;
			tile_abs(x, b, c->bf16, t0, cnt, a, g->key32 + p);
			mk_gta_fsum_run_f32(&g->before, e0, a, cnt);
			if (p + cnt == s->slab)
				mk_gta_della_slab32(s, g, e0 + cnt - s->slab);
			continue;
		}
		if (g->kind == K_RAND) {
			rand_stats_tile(g, e0, cnt, x, b, c->bf16, t0);
			continue;
		}
		if (pass == 0 && s->wcount && g->t[0].w0 && e0 >= g->t[0].w0) {
			counted_tile(g, x, b, c->bf16, t0, e0, cnt);
			continue;
		}
		tile_abs(x, b, c->bf16, t0, cnt, a, key);
		if (g->kind == K_DELLA) {
			mk_gta_fsum_run_f32(&g->before, e0, a, cnt);
			for (uint64_t k = 0; k < cnt;) {
				uint64_t e = e0 + k, p = e % s->slab, r = s->slab - p;
				if (r > cnt - k)
					r = cnt - k;
				memcpy(g->key32 + p, key + k, r * sizeof(uint32_t));
				k += r;
				if (p + r == s->slab)
					mk_gta_della_slab32(s, g, e + r - s->slab);
			}
			continue;
		}
		if (lv < s->nlevels) {
			if (pass == 0 && s->rescale)
				mk_gta_fsum_run_f32(&g->before, e0, a, cnt);
			/* the windows open on the histogram of the elements
			 * before this tile */
			for (unsigned t = 0; pass == 0 && s->win && t < g->nt; t++)
				if (!g->t[t].w0 && e0 >= s->nelem / 8)
					win_open(s, &g->t[t], &g->t[0], e0);
			if (lv == 0) {
				level0_tile(s, g, redo, e0, cnt, key);
				continue;
			}
			for (unsigned t = 0; t < g->nt; t++) {
				struct target *tg = &g->t[t];
				uint32_t *h0 = tg->sub, *h1 = h0 + NBUCKET, *h2 = h1 + NBUCKET, *h3 = h2 + NBUCKET;
				uint64_t k = 0, ct = cnt;
				if (tg->wuse) {
					/* the window has [w0, N) */
					if (tg->wdone)
						continue;
					if (e0 >= tg->w0) {
						win_take(tg);
						continue;
					}
					if (e0 + cnt > tg->w0)
						ct = tg->w0 - e0;
				}
				if (tg->since + ct > UINT32_MAX)
					sub_flush(tg);
				tg->since += ct;
				/* the low digits of the keys under the prefix,
				 * gathered without a branch, then counted;
				 * recorded: the low digits straight into the
				 * record, counted from there */
				uint16_t lo_tile[TILE + 16], *lo = tg->ridx ? tg->rlo + tg->nrec : lo_tile;
				uint64_t nl = mk_gta_simd.under_prefix(key, ct, (uint32_t)tg->prefix, lo);
				if (tg->ridx) {
					(void)mk_gta_simd.index_under_prefix(key, ct, (uint32_t)tg->prefix, (uint32_t)e0,
									     tg->ridx + tg->nrec);
					tg->nrec += nl;
					if (tg->nrec > tg->rcap)
						rec_drop(tg);   /* more than pass 0 counted */
				}
				for (; k + 4 <= nl; k += 4) {
					h0[lo[k]]++;
					h1[lo[k + 1]]++;
					h2[lo[k + 2]]++;
					h3[lo[k + 3]]++;
				}
				for (; k < nl; k++)
					h0[lo[k]]++;
				if (tg->wuse && e0 + ct == tg->w0)
					win_take(tg);
			}
		} else if (s->rescale) {
			for (uint64_t k = 0; k < cnt; k++)
				m[k] = sel_keep_scan(g, key[k], e0 + k) ? a[k] : 0.0f;
			mk_gta_fsum_run_f32(&g->after, e0, m, cnt);
		} else {
			/* only the cuts: the index of the need-th tie */
			for (unsigned t = 0; t < g->nt; t++) {
				struct target *tg = &g->t[t];
				uint32_t P = (uint32_t)tg->prefix;
				uint64_t ne;
				if (tg->seen >= tg->need)
					continue;
				ne = tile_count_eq(key, cnt, P);
				if (tg->seen + ne < tg->need) {
					tg->seen += ne;     /* the cut lies further on */
					continue;
				}
				for (uint64_t k = 0; k < cnt; k++)
					if (key[k] == P && ++tg->seen == tg->need) {
						tg->cut1 = e0 + k + 1;
						break;
					}
			}
		}
	}
}

struct acc_arg {
	struct state *s;
	unsigned pass;
	const struct mk_job_chunk *c;
	const void *b;
	unsigned n;
	size_t gi[16];   /* the fast_f32 inputs, one task each */
};

static void acc_task(void *p, unsigned k, unsigned slot)
{
	struct acc_arg *a = p;
	struct gin *g = &a->s->g[a->gi[k]];

	(void)slot;
	accumulate_f32(a->s, g, a->pass, a->c, a->c->in[g->idx], a->b);
}

static bool cuts_found(const struct state *s);

int mk_gta_accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c, struct mk_err *err)
{
	struct state *s = job->state;
	const void *b = c->in[job->d.base];
	unsigned lv = level_of(s, pass);

	/* a held job's windows count past them (pass 0's finish adds a pass
	 * for any that did not hold its rank: only memory read again) */
	if (pass == 0 && c->elem_begin == 0)
		s->wcount = s->win && (job->held || s->spare);
	/* each input's statistics are its own: on large chunks (a held
	 * job's whole tensor) the inputs are tasks for the job's threads */
	bool par = c->count >= (1u << 20) && s->n > 1 && s->n <= 16 && job->threads > 1;
	if (par) {
		struct acc_arg a = { .s = s, .pass = pass, .c = c, .b = b };
		for (size_t j = 0; j < s->n; j++)
			if (fast_f32(s, &s->g[j]))
				a.gi[a.n++] = j;
		mk__pool_run(job->threads, a.n, acc_task, &a);
	}
	for (size_t j = 0; j < s->n; j++) {
		struct gin *g = &s->g[j];
		if (fast_f32(s, g)) {
			if (!par)
				accumulate_f32(s, g, pass, c, c->in[g->idx], b);
			continue;
		}
		const void *x = c->in[g->idx];
		uint64_t key;
		double dv;

		switch (g->kind) {
		case K_MAG:
		case K_OUTL:
			if (lv < s->nlevels) {
				unsigned lo = s->keybits - 16 * (lv + 1);
				for (uint64_t k = 0; k < c->count; k++) {
					uint64_t e = c->elem_begin + k;
					dv = delta_key(s->f64, x, b, k, &key);
					if (lv == 0)
						fsum_add(&g->before, e, fabs(dv));
					for (unsigned t = 0; t < g->nt; t++) {
						struct target *tg = &g->t[t];
						if (lv && (key >> (lo + 16)) != tg->prefix)
							continue;
						tg->hist[(key >> lo) & 0xffff]++;
					}
				}
			} else {
				for (uint64_t k = 0; k < c->count; k++) {
					uint64_t e = c->elem_begin + k;
					dv = delta_key(s->f64, x, b, k, &key);
					if (sel_keep_scan(g, key, e))
						fsum_add(&g->after, e, fabs(dv));
				}
			}
			break;
		case K_RAND:
			for (uint64_t k = 0; k < c->count; k++) {
				uint64_t e = c->elem_begin + k;
				bool keep = (mk_rng_u64(g->stream, e) >> 11) < g->thr;
				if (keep && g->mask)
					g->mask[e >> 3] |= (uint8_t)(1u << (e & 7));
				dv = delta_key(s->f64, x, b, k, &key);
				fsum_add(&g->before, e, fabs(dv));
				if (keep)
					fsum_add(&g->after, e, fabs(dv));
			}
			break;
		case K_DELLA:
			for (uint64_t k = 0; k < c->count; k++) {
				uint64_t e = c->elem_begin + k, p = e % s->slab;
				dv = delta_key(s->f64, x, b, k, &key);
				fsum_add(&g->before, e, fabs(dv));
				g->slab[p] = key;
				if (p == s->slab - 1)
					mk_gta_della_slab(s, g, e + 1 - s->slab);
			}
			break;
		default:
			break;
		}
	}
	/* the rest of the last digit pass is in the windows */
	if (s->win && lv + 1 == s->nlevels) {
		bool all = true;
		for (size_t j = 0; j < s->n; j++)
			for (unsigned t = 0; (s->g[j].kind == K_MAG || s->g[j].kind == K_OUTL) && t < s->g[j].nt; t++)
				all &= s->g[j].t[t].wdone;
		if (all)
			job->pass_enough = true;
	}
	/* the rest of the cut pass has nothing to find */
	if (lv == s->nlevels && cuts_found(s))
		job->pass_enough = true;
	return 0;
}

static void set_factor(struct state *s, struct gin *g)
{
	double before = g->before.total + lsum_block(&g->before), after = g->after.total + lsum_block(&g->after);

	if (!s->rescale)
		return;
	if (s->f64) {
		g->scale = !(before < 1e-7 || after < 1e-7);
		g->fd = before / after;
	} else {
		float bf = (float)before, af = (float)after;
		g->scale = !(bf < (float)1e-7 || af < (float)1e-7);
		g->ff = bf / af;
	}
}

/* Whether the cut pass (no rescale) has what it looks for: every
 * selection's cuts found, or known without it. */
static bool cuts_found(const struct state *s)
{
	if (s->rescale)
		return false;
	for (size_t j = 0; j < s->n; j++) {
		const struct gin *g = &s->g[j];
		if (g->kind != K_MAG && g->kind != K_OUTL)
			continue;
		for (unsigned t = 0; t < g->nt; t++)
			if (g->t[t].seen < g->t[t].need)
				return false;
	}
	return true;
}

/* The end of a first digit pass whose window counted past it: whether
 * the rank lies among the window's buckets (the histogram of [0, w0) and
 * the window's keys, all that the pass counted there).  If so the
 * window's keys join the histogram, tg->below counts every element below
 * the window, and the search for the rank's bucket starts at *bk; if not
 * (or the window was dropped), the histogram is left as it is, for the
 * pass that counts [w0, N) again. */
static bool win_settle(struct target *tg, uint64_t *bk)
{
	uint64_t below = tg->wbelow, in = tg->nw;

	if (!tg->widx)
		return false;
	for (uint32_t b = 0; b < tg->wlo; b++)
		below += tg->hist[b];
	for (uint32_t b = tg->wlo; b <= tg->whi; b++)
		in += tg->hist[b];
	if (tg->rank < below || tg->rank - below >= in)
		return false;
	for (uint64_t q = 0; q < tg->nw; q++)
		tg->hist[tg->wkey[q] >> 16]++;
	tg->below = below;
	*bk = tg->wlo;
	return true;
}

int mk_gta_finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	uint64_t N = s->nelem;
	unsigned lv = level_of(s, pass);
	bool redo = s->extra && pass == 1, add = false;

	for (size_t j = 0; j < s->n; j++) {
		struct gin *g = &s->g[j];
		switch (g->kind) {
		case K_MAG:
		case K_OUTL:
			if (lv < s->nlevels) {
				if (pass == 0 && g->nt == 2 && g->t[0].sub) {
					sub_flush(&g->t[0]);
					memcpy(g->t[1].hist, g->t[0].hist, NBUCKET * sizeof(uint64_t));
				}
				for (unsigned t = 0; t < g->nt; t++) {
					struct target *tg = &g->t[t];
					uint64_t bk = 0;
					if (redo && !tg->redo)
						continue;   /* its bucket found in pass 0 */
					if (tg->sub)
						sub_flush(tg);
					if (pass == 0 && s->wcount && !win_settle(tg, &bk)) {
						/* the next pass counts [w0, N) into the histogram */
						win_drop(tg);
						tg->redo = add = true;
						continue;
					}
					for (; bk < NBUCKET; bk++) {
						if (tg->below + tg->hist[bk] > tg->rank)
							break;
						tg->below += tg->hist[bk];
					}
					if (bk == NBUCKET)
						MK_BUG("gta: rank %llu not found",
						       (unsigned long long)tg->rank);
					tg->prefix = (tg->prefix << 16) | bk;
					tg->eq = tg->hist[bk];
					/* the window holds the bucket's elements from w0 on,
					 * or is of no use */
					if (tg->widx && pass == 0 && bk >= tg->wlo && bk <= tg->whi)
						tg->wuse = true;
					else
						win_drop(tg);
					memset(tg->hist, 0, NBUCKET * sizeof(uint64_t));
					/* before the last digit pass: record its elements
					 * when they are few (else the cut pass runs) */
					if (lv + 2 == s->nlevels && !s->f64 && !s->rescale && N <= UINT32_MAX &&
					    tg->eq && tg->eq <= REC_MAX && tg->eq <= N / 16) {
						tg->ridx = malloc((tg->eq + TILE + 16) * sizeof(uint32_t));
						tg->rlo = malloc((tg->eq + TILE + 16) * sizeof(uint16_t));
						tg->rcap = tg->eq;
						tg->nrec = 0;
						if (!tg->ridx || !tg->rlo)
							rec_drop(tg);
					}
				}
				if (lv + 1 == s->nlevels) {
					struct target *a = &g->t[0], *z = &g->t[1];
					if (g->kind == K_MAG) {
						uint64_t greater = N - a->below - a->eq;
						a->need = g->k - greater;
					} else {
						a->need = a->rank - a->below;       /* ties dropped */
						z->need = z->rank - z->below + 1;   /* ties kept */
					}
					for (unsigned t = 0; t < g->nt; t++) {
						struct target *tg = &g->t[t];
						/* the cut from the record: the need-th tie
						 * in element order */
						if (tg->ridx && tg->nrec == tg->rcap) {
							uint16_t L = (uint16_t)tg->prefix;
							uint64_t ties = 0;
							tg->cut1 = 0;
							for (uint64_t q = 0; q < tg->nrec && ties < tg->need; q++)
								if (tg->rlo[q] == L && ++ties == tg->need)
									tg->cut1 = (uint64_t)tg->ridx[q] + 1;
							if (ties == tg->need)
								tg->seen = tg->need;
						}
						rec_drop(tg);
						/* all ties on the cut's side: the cut is past
						 * the last one, found without a pass (the one
						 * the pass would find, as no later tie is);
						 * with a rescale the pass counts them anew */
						if (!s->rescale && tg->need == tg->eq && tg->need) {
							tg->cut1 = UINT64_MAX;
							tg->seen = tg->need;
						}
						free(tg->hist);
						free(tg->sub);
						tg->hist = NULL;
						tg->sub = NULL;
					}
				}
			} else {
				set_factor(s, g);
			}
			break;
		case K_RAND:
		case K_DELLA:
			set_factor(s, g);
			break;
		default:
			break;
		}
	}
	/* a window that did not hold its rank: one pass more, counting
	 * [w0, N) again (the job is held: wcount), or the plan's spare pass;
	 * which, when every window held, is skipped */
	if (add && !s->spare) {
		s->extra = 1;
		job->npasses++;
	} else if (s->spare && pass == 0 && !add) {
		job->pass_enough = true;
	}
	/* the cut pass, when it is next and has nothing to find */
	if (lv + 1 == s->nlevels && cuts_found(s))
		job->pass_enough = true;
	(void)err;
	return 0;
}
