/* approx.h - mk-tokensurgeon's approximations: embeddings for the donor's
 * tokens the model lacks, from the model's own embedding rows, as
 * mergekit-tokensurgeon (0.1.5) computes them.
 *
 * Every matrix is float32, row-major, a row per token.  "targets" are the
 * donor's rows of the tokens to approximate (b x dd); "shared" are the
 * rows of the tokens both vocabularies have (mk_surgeon_shared's order),
 * in the donor (n x dd) and in the model (n x dm).  The answer is b x dm.
 * Where mergekit draws random numbers (randn, john_hewitt) the caller
 * gives the standard normals (mk_surgeon_normals makes some): torch's
 * generator is not reproduced.
 *
 * Errors are returned (mk_err), never printed.
 */
#ifndef MK_SURGEON_APPROX_H
#define MK_SURGEON_APPROX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/err.h"

/* ------------------------------------------------------------------ omp
 * Batched orthogonal matching pursuit (omp.c): for each target, k shared
 * rows picked greedily by the largest |<residual, row>| (a row once
 * only), the residual the target less its projection on the picked rows
 * (Gram-Schmidt, re-orthogonalised by QR every 256 picks), and at the
 * end the least-squares coefficients of the picked rows.  idx and coef
 * are b x k, in the order picked.  Refused: k of 0 or above n. */
int mk_surgeon_omp(const float *targets, size_t b, const float *points, size_t n, size_t d, size_t k, int64_t *idx,
		   float *coef, struct mk_err *err);

/* out (b x d2) = for each row, sum over j of coef[j] x rows2[idx[j]]: the
 * donor's picks and weights applied to the model's shared rows. */
void mk_surgeon_combine(const int64_t *idx, const float *coef, size_t b, size_t k, const float *rows2, size_t d2,
			float *out);

/* ------------------------------------------------- common_interpolation
 * (interp.c) The k nearest shared rows (k 0: all of them) by Euclidean
 * distance, or by cosine distance (1 - cosine similarity) when cosine;
 * weights by the scheme:
 *   DISTPROP     1 / distance (Euclidean, distance at least 1e-6) or the
 *                similarity (cosine), divided by their sum (at least 1e-6)
 *   BARYCENTRIC  the least-squares solution of the Gram system bordered
 *                by ones (weights summing to one)
 *   LSQ          least squares of the target on the neighbours' rows
 * idx and coef are b x k (k = n when 0 was given), nearest first. */
enum mk_surgeon_weights { MK_SURGEON_DISTPROP, MK_SURGEON_BARYCENTRIC, MK_SURGEON_LSQ };
int mk_surgeon_interp(const float *targets, size_t b, const float *points, size_t n, size_t d, size_t k, bool cosine,
		      enum mk_surgeon_weights scheme, int64_t *idx, float *coef, struct mk_err *err);

/* --------------------------------------------------------- landmark_pca
 * (pca.c) Both shared sets centred on their means, each projected on its
 * principal axes (min(da, db) of them), the Procrustes rotation between
 * the projections taken, and the targets sent through it into the
 * model's space.  mergekit's axes come from torch.pca_lowrank, whose
 * signs follow its random draw; mk's are the exact singular vectors,
 * each signed so that its entry of largest magnitude is positive. */
int mk_surgeon_landmark_pca(const float *targets, size_t b, const float *shared_donor, size_t n, size_t da,
			    const float *shared_model, size_t db, float *out, struct mk_err *err);

/* -------------------------------------------------------------- mp_rope
 * (rope.c) Matching pursuit of k picks in which each picked row is
 * rotated by RoPE (heads_a heads, base base_a) to the position that
 * best turns it towards the residual, then a least-squares fit on the
 * rotated rows, whose coefficients combine the model's rows rotated at
 * the same positions (heads_b, base_b).  Refused: k of 0 or above n, a
 * width that does not split into heads of an even size. */
int mk_surgeon_mp_rope(const float *targets, size_t b, const float *shared_donor, size_t n, size_t da,
		       const float *shared_model, size_t db, size_t k, size_t heads_a, size_t heads_b, float base_a,
		       float base_b, float *out, struct mk_err *err);

/* ------------------------------------------------------- the rest (fill.c) */
/* mean: every row the mean of the model's `rows` rows */
void mk_surgeon_mean(const float *embed, size_t rows, size_t d, size_t b, float *out);
/* zero */
void mk_surgeon_zero(size_t b, size_t d, float *out);

/* subword: from the model tokenizer's encoding of each token's text
 * (mk_surgeon_key_text; ids[i], nids[i] of them, no special tokens, as
 * transformers' tokenizer class for the model encodes it):
 *   MEAN / SUM       their rows' mean / sum (zero when there are none)
 *   WEIGHTED_MEAN    weights 1..n, the last token the heaviest in the
 *                    input embedding, the first in the lm_head
 *   FIRST_LAST       the last token's row (embedding) or the first's
 *                    (lm_head); zero when there are none
 * mergekit sums in the embedding's dtype: bf16 rounds every sum, product
 * and quotient to bfloat16 (nearest even) as torch does for a bfloat16
 * model (embed holds its values as float32).  Refused: an id at or past
 * `rows`. */
enum mk_surgeon_subword { MK_SURGEON_SUB_MEAN, MK_SURGEON_SUB_SUM, MK_SURGEON_SUB_WEIGHTED, MK_SURGEON_SUB_FIRST_LAST };
int mk_surgeon_subword(const float *embed, size_t rows, size_t d, const int32_t *const *ids, const size_t *nids,
		       size_t b, enum mk_surgeon_subword how, bool lm_head, bool bf16, float *out, struct mk_err *err);

/* john_hewitt: draws of the normal distribution with the model rows'
 * mean and covariance (divided by rows): mean + L z, L the covariance's
 * Cholesky factor, z each row of `z` (b x d standard normals).  Refused
 * when the covariance is not positive definite (mergekit 0.1.5 fails
 * there too, on its own fallback). */
int mk_surgeon_john_hewitt(const float *embed, size_t rows, size_t d, const float *z, size_t b, float *out,
			   struct mk_err *err);

/* n standard normals from a seeded generator of mk's own (xoshiro256**,
 * Box-Muller in double): randn's rows, john_hewitt's z.  Not torch's. */
void mk_surgeon_normals(uint64_t seed, size_t n, float *out);

/* ------------------------------------------------------------ stb (stb.c)
 * The sparse token basis: the principal axes (e = min(dm, dd) of them)
 * of the shared rows of the narrower model (the model's when the widths
 * are equal), each approximated by omp with k of those rows (centred);
 * the same picks and weights applied to the other side's shared rows
 * (not centred) give donor_basis (e x dd) and model_basis (e x dm). */
int mk_surgeon_stb_basis(const float *shared_donor, const float *shared_model, size_t n, size_t dd, size_t dm,
			 size_t k, float *donor_basis, float *model_basis, struct mk_err *err);
/* Then each target less donor_mean (the mean of all the donor's rows)
 * solved on donor_basis by least squares, and the coefficients applied to
 * model_basis plus model_mean (of all the model's rows).  e = min(dm, dd). */
int mk_surgeon_stb(const float *targets, size_t b, const float *donor_mean, const float *donor_basis, size_t dd,
		   const float *model_basis, const float *model_mean, size_t dm, float *out, struct mk_err *err);

#endif
