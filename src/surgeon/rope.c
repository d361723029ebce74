/* rope.c - mp_rope (approx.h): matching pursuit in which each picked
 * row is first rotated by RoPE at the position that best turns it
 * towards the residual.
 *
 * Per pick (the pick itself as omp's, mk__surgeon_pick): the angle of
 * each rotation pair (i, i + head_dim / 2 of a head) from the row to the
 * residual, atan2(x_i r_j - x_j r_i, x_i r_i + x_j r_j), projected on the
 * unit vector of the inverse frequencies (repeated per head) and divided
 * by sqrt(heads) |inv_freq| is the position; the same against the
 * negated residual gives another, and the one nearer zero is kept.  The
 * rotated row's coefficient is <residual, row> / max(|row|^2, 1e-8) and
 * the residual loses that much of it.  At the end the coefficients are
 * solved again by least squares on the rotated rows (torch's gelsy, as
 * mk__surgeon_lstsq), and the model's rows, rotated at the same
 * positions with the model's heads and base, combined with them.
 *
 * inv_freq[i] = 1 / base^(2i / head_dim), in float32 as torch computes
 * it.  (mergekit 0.1.5's command line reads the bases as
 * config.rope_theta, which transformers 5's LlamaConfig no longer has:
 * there `-a mp_rope` fails before any arithmetic.) */
#include <math.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon_impl.h"

struct rope {
	size_t heads, hd, half;
	float *inv;   /* half */
	float *unit;  /* heads x half: inv_freq repeated, unit length */
	float scale;  /* sqrt(heads) |inv_freq| + 1e-8 */
};

static int rope_init(struct rope *r, size_t width, size_t heads, float base, const char *what, struct mk_err *err)
{
	if (heads == 0 || width % heads || (width / heads) % 2)
		return mk_err_set(err, MK_EINVAL, "mp_rope: the %s width %zu does not split into %zu heads of an even size",
				  what, width, heads);
	r->heads = heads, r->hd = width / heads, r->half = r->hd / 2;
	r->inv = surgeon_alloc(r->half, sizeof(float));
	r->unit = surgeon_alloc(heads * r->half, sizeof(float));
	if (!r->inv || !r->unit)
		return mk_err_set(err, MK_ENOMEM, "mp_rope: out of memory");
	float fn = 0;
	for (size_t i = 0; i < r->half; i++) {
		float e = (float)(2 * i) / (float)r->hd;
		r->inv[i] = 1.0f / powf(base, e);
		fn += r->inv[i] * r->inv[i];
	}
	float un = sqrtf(fn * (float)heads);
	for (size_t h = 0; h < heads; h++)
		for (size_t i = 0; i < r->half; i++)
			r->unit[h * r->half + i] = r->inv[i] / (un + 1e-8f);
	r->scale = sqrtf((float)heads) * sqrtf(fn) + 1e-8f;
	return 0;
}

static void rope_free(struct rope *r)
{
	free(r->inv), free(r->unit);
}

/* the position that turns x towards y (sign: y or -y) */
static float rope_position(const struct rope *r, const float *x, const float *y, float sign)
{
	float proj = 0;
	for (size_t h = 0; h < r->heads; h++) {
		const float *xh = x + h * r->hd, *yh = y + h * r->hd;
		for (size_t i = 0; i < r->half; i++) {
			float xi = xh[i], xj = xh[i + r->half], yi = sign * yh[i], yj = sign * yh[i + r->half];
			float a = xi * yi + xj * yj, b = xi * yj - xj * yi;
			proj += atan2f(b, a) * r->unit[h * r->half + i];
		}
	}
	return proj / r->scale;
}

/* out = x rotated to position pos */
static void rope_apply(const struct rope *r, const float *x, float pos, float *out)
{
	for (size_t h = 0; h < r->heads; h++) {
		const float *xh = x + h * r->hd;
		float *oh = out + h * r->hd;
		for (size_t i = 0; i < r->half; i++) {
			float th = pos * r->inv[i], c = cosf(th), s = sinf(th);
			float xi = xh[i], xj = xh[i + r->half];
			oh[i] = xi * c - xj * s;
			oh[i + r->half] = xj * c + xi * s;
		}
	}
}

int mk_surgeon_mp_rope(const float *targets, size_t b, const float *shared_donor, size_t n, size_t da,
		       const float *shared_model, size_t db, size_t k, size_t heads_a, size_t heads_b, float base_a,
		       float base_b, float *out, struct mk_err *err)
{
	struct rope ra = { 0 }, rb = { 0 };
	int rc;

	if (k == 0 || k > n)
		return mk_err_set(err, MK_EINVAL, "mp_rope: cannot pick %zu of %zu shared tokens (-k from 1 to %zu)", k,
				  n, n);
	if ((rc = rope_init(&ra, da, heads_a, base_a, "donor's", err)) != 0 ||
	    (rc = rope_init(&rb, db, heads_b, base_b, "model's", err)) != 0) {
		rope_free(&ra), rope_free(&rb);
		return rc;
	}
	if (b == 0) {
		rope_free(&ra), rope_free(&rb);
		return 0;
	}
	size_t blk = mk__surgeon_pick_block(b, n), ld = da > k ? da : k;
	float *res = surgeon_alloc(b * da, sizeof(float)), *corr = surgeon_alloc(b * blk, sizeof(float));
	float *best = surgeon_alloc(b, sizeof(float)), *pos = surgeon_alloc(b * k, sizeof(float));
	int64_t *idx = surgeon_alloc(b * k, sizeof(int64_t));
	float *atom = surgeon_alloc(da > db ? da : db, sizeof(float));
	float *a = surgeon_alloc(da * k, sizeof(float)), *rhs = surgeon_alloc(ld, sizeof(float));

	if (!res || !corr || !best || !pos || !idx || !atom || !a || !rhs) {
		rc = mk_err_set(err, MK_ENOMEM, "mp_rope: out of memory for a batch of %zu", b);
		goto out;
	}
	memcpy(res, targets, b * da * sizeof(float));
	for (size_t t = 0; t < k; t++) {
		mk__surgeon_pick(res, b, shared_donor, n, da, idx, k, t, corr, blk, best);
		for (size_t i = 0; i < b; i++) {
			const float *x = shared_donor + (size_t)idx[i * k + t] * da;
			float *ri = res + i * da;
			float p = rope_position(&ra, x, ri, 1.0f), q = rope_position(&ra, x, ri, -1.0f);
			p = fabsf(p) < fabsf(q) ? p : q;
			pos[i * k + t] = p;
			rope_apply(&ra, x, p, atom);
			float num = 0, den = 0;
			for (size_t l = 0; l < da; l++)
				num += ri[l] * atom[l], den += atom[l] * atom[l];
			float c = num / (den > 1e-8f ? den : 1e-8f);
			for (size_t l = 0; l < da; l++)
				ri[l] -= c * atom[l];
		}
	}
	for (size_t i = 0; i < b; i++) {
		/* least squares on the rotated rows: column j of a (da x k) */
		for (size_t j = 0; j < k; j++)
			rope_apply(&ra, shared_donor + (size_t)idx[i * k + j] * da, pos[i * k + j], a + j * da);
		memset(rhs, 0, ld * sizeof(float));
		memcpy(rhs, targets + i * da, da * sizeof(float));
		if ((rc = mk__surgeon_lstsq((int)da, (int)k, 1, a, rhs, err)) != 0)
			goto out;
		float *o = out + i * db;
		memset(o, 0, db * sizeof(float));
		for (size_t j = 0; j < k; j++) {
			rope_apply(&rb, shared_model + (size_t)idx[i * k + j] * db, pos[i * k + j], atom);
			for (size_t l = 0; l < db; l++)
				o[l] += rhs[j] * atom[l];
		}
	}
out:
	free(res), free(corr), free(best), free(pos), free(idx), free(atom), free(a), free(rhs);
	rope_free(&ra), rope_free(&rb);
	return rc;
}
