/* geom.h - shared statistics for the geometric methods (nuslerp,
 * multislerp, karcher, model_stock): per-vector Gram matrices gathered in
 * one pass, in a fixed order.
 *
 * A tensor is cut into vectors by a layout:
 *   WHOLE  one vector: every element (flattened)
 *   ROWS   vectors along the last axis (a 2-D [out, in] matrix: its rows);
 *          0- and 1-D tensors are one vector
 *   COLS   vectors along axis 0 (a 2-D matrix: its columns); 0- and 1-D
 *          tensors are one vector
 * For k signals s_0..s_{k-1} (input i, or input i minus the base, rounded
 * to the compute dtype as torch's subtraction does) the pass gathers, per
 * vector, G[a][b] = sum_e s_a[e] * s_b[e] in float64:
 *   WHOLE, ROWS  a vector's elements are contiguous; its sums follow the
 *                fixed blocks of method.h (mk_fsum, blocks of MK_SUM_BLOCK
 *                elements of the flat index), so only the vector being
 *                read is held: memory O(k^2);
 *   COLS         every column is open at once; each column's sums are
 *                sequential in element order: memory O(columns * k^2).
 * WHOLE and ROWS with k >= MK_GEOM_BLAS_K signals: a vector's part inside
 * one block (a segment, its extent fixed by the layout) of at least
 * MK_GEOM_BLAS_RUN elements is gathered into a k x MK_SUM_BLOCK float64
 * scratch, held across chunks until the segment is complete, and its Gram
 * taken by OpenBLAS (dgemm A A^T, one BLAS thread), which sums inside the
 * segment in its own order; segments are combined in block order as
 * above.  Shorter segments, fewer signals and COLS keep the scalar sums in
 * element order.
 * Either way the result does not depend on the chunking.  When a vector
 * is complete, `done(ctx, v, G)` receives its k x k symmetric matrix
 * (row-major): in increasing vector order, during accumulate for WHOLE and
 * ROWS, in mk_geom_finish for COLS (and for empty vectors).
 */
#ifndef MK_METHODS_GEOM_H
#define MK_METHODS_GEOM_H

#include <stdbool.h>
#include <stdint.h>
#include "mk/method.h"

enum mk_geom_mode { MK_GEOM_WHOLE, MK_GEOM_ROWS, MK_GEOM_COLS };

/* OpenBLAS for k >= MK_GEOM_BLAS_K signals, on segments of at least
 * MK_GEOM_BLAS_RUN elements (both measured; man/man7/mk-compat.7). */
#define MK_GEOM_BLAS_K 3u
#define MK_GEOM_BLAS_RUN 32u

typedef int (*mk_geom_done_fn)(void *ctx, uint64_t v, const double *g, struct mk_err *err);

struct mk_geom {
	enum mk_geom_mode mode;    /* after the 0-/1-D rule */
	enum mk_dtype compute;
	uint64_t nelem, nvec, veclen;
	size_t k, npairs;
	const int *idx;            /* [k] input index of signal a (borrowed) */
	int base;                  /* input subtracted from every signal, -1: none */
	struct mk_fsum *acc;       /* WHOLE/ROWS: [npairs]; COLS: [nvec * npairs] */
	double *part;              /* [npairs] scratch */
	double *sig;               /* [k] scratch */
	double *g;                 /* [k * k] scratch */
	uint64_t cur;              /* WHOLE/ROWS: the vector being read */
	bool blas;                 /* WHOLE/ROWS, k >= MK_GEOM_BLAS_K: long segments by
				    * OpenBLAS (a test may clear it after init for the
				    * scalar sums) */
	double *blk;               /* blas: [k * MK_SUM_BLOCK] the segment's signals */
	double *bg;                /* blas: [k * k] the segment's Gram */
	mk_geom_done_fn done;
	void *ctx;
};

/* The layout of a tensor of this shape: mode after the 0-/1-D rule,
 * number of vectors and their length. */
void mk_geom_layout(enum mk_geom_mode mode, const struct mk_tensor_desc *t,
		    enum mk_geom_mode *eff, uint64_t *nvec, uint64_t *veclen);

/* The vector element `e` of the flat index belongs to. */
static inline uint64_t mk_geom_vec_of(enum mk_geom_mode eff, uint64_t nvec, uint64_t veclen,
				      uint64_t e)
{
	switch (eff) {
	case MK_GEOM_ROWS: return veclen ? e / veclen : 0;
	case MK_GEOM_COLS: return nvec ? e % nvec : 0;
	default: return 0;
	}
}

int mk_geom_init(struct mk_geom *g, enum mk_geom_mode mode, const struct mk_tensor_desc *out,
		 enum mk_dtype compute, size_t k, const int *idx, int base,
		 mk_geom_done_fn done, void *ctx, struct mk_err *err);
int mk_geom_accumulate(struct mk_geom *g, const struct mk_job_chunk *c, struct mk_err *err);
int mk_geom_finish(struct mk_geom *g, struct mk_err *err);
void mk_geom_release(struct mk_geom *g);

/* Gram-matrix helpers (double, k x k row-major). */
/* a^T G b */
double mk_geom_dot(size_t k, const double *g, const double *a, const double *b);

/* The common output rule pieces: "input 3 ('label')" for messages. */
const char *mk_geom_label(const struct mk_job_desc *d, size_t i, char *buf, size_t len);

#endif
