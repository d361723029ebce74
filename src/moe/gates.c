/* gates.c - router weights from prompts: cheap_embed (the prompts' token
 * embeddings) and hidden / hidden_last / hidden_avg (the base model's
 * residual stream at each layer's input), as mergekit-moe computes them;
 * and the check that a layer's router rows are not nearly dependent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/forward.h"
#include "io/model.h"
#include "moe/moe.h"
#include "mk/tokenize.h"

struct acc {
	enum mk_moe_gate mode;
	const uint8_t *mask;        /* [nseq][len] */
	size_t nlayers, hidden;
	float *v;                   /* [nlayers][hidden] */
};

static void normalise(float *v, size_t dim)
{
	double n2 = 0;
	for (size_t d = 0; d < dim; d++)
		n2 += (double)v[d] * v[d];
	float nrm = (float)sqrt(n2);
	if (nrm < 1e-8f)
		nrm = 1e-8f;
	for (size_t d = 0; d < dim; d++)
		v[d] /= nrm;
}

#define STOP 1                  /* the callback's "enough" (cheap_embed) */

static int on_hidden(void *ctx, size_t index, const float *h, size_t nseq, size_t len, size_t dim,
		     struct mk_err *err)
{
	struct acc *a = ctx;
	(void)err;
	if (index >= a->nlayers || dim != a->hidden)
		return 0;
	float *v = a->v + index * dim;
	if (a->mode == MK_MOE_GATE_CHEAP_EMBED) {
		/* the sum over positions (tokens only), then over prompts,
		 * in float32 in that order; the same for every layer */
		memset(v, 0, dim * sizeof(*v));
		for (size_t b = 0; b < nseq; b++) {
			float *row = calloc(dim, sizeof(*row));
			if (!row)
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			for (size_t s = 0; s < len; s++)
				if (a->mask[b * len + s])
					for (size_t d = 0; d < dim; d++)
						row[d] += h[(b * len + s) * dim + d];
			for (size_t d = 0; d < dim; d++)
				v[d] += row[d];
			free(row);
		}
		/* normalised here already (and again with the negatives) */
		normalise(v, dim);
		for (size_t l = 1; l < a->nlayers; l++)
			memcpy(a->v + l * dim, v, dim * sizeof(*v));
		return STOP;
	}
	/* hidden / hidden_last: the last position; hidden_avg: the mean over
	 * all positions, padding included; then the mean over prompts */
	memset(v, 0, dim * sizeof(*v));
	for (size_t b = 0; b < nseq; b++) {
		for (size_t d = 0; d < dim; d++) {
			float x;
			if (a->mode == MK_MOE_GATE_HIDDEN_AVG) {
				float s = 0;
				for (size_t p = 0; p < len; p++)
					s += h[(b * len + p) * dim + d];
				x = s / (float)len;
			} else {
				x = h[(b * len + len - 1) * dim + d];
			}
			v[d] += x;
		}
	}
	for (size_t d = 0; d < dim; d++)
		v[d] /= (float)nseq;
	return 0;
}

static int prompts_vec(struct mk_forward *fw, const struct mk_tokenizer *tk, enum mk_moe_gate mode,
		       char *const *prompts, size_t n, size_t nlayers, size_t hidden, float *v, struct mk_err *err)
{
	struct mk_tokbatch tb = { 0 };
	int rc = mk_tokenizer_encode_prompts(tk, (const char *const *)prompts, n, &tb, err);
	if (rc)
		return rc;
	size_t cnt = tb.rows * tb.cols;
	int64_t *ids = malloc((cnt ? cnt : 1) * sizeof(*ids)), *mask = malloc((cnt ? cnt : 1) * sizeof(*mask));
	if (!ids || !mask) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < cnt; i++) {
		ids[i] = tb.ids[i];
		mask[i] = tb.mask[i];
	}
	struct acc a = { mode, tb.mask, nlayers, hidden, v };
	rc = mk_forward_run(fw, ids, mask, tb.rows, tb.cols, on_hidden, &a, err);
	if (rc == STOP)
		rc = 0;
out:
	free(ids);
	free(mask);
	mk_tokbatch_free(&tb);
	return rc;
}

int mk_moe_gates_prompts(enum mk_moe_gate mode, const char *base_ref, const struct mk_moe_expert *const *ex,
			 size_t nex, size_t nlayers, size_t hidden, const struct mk_forward_opts *fo, float *out,
			 struct mk_err *err)
{
	struct mk_forward *fw = NULL;
	struct mk_tokenizer *tk = NULL;
	char *dir = NULL;
	float *pos = NULL, *neg = NULL;
	int rc;

	if (mode == MK_MOE_GATE_RANDOM || mode == MK_MOE_GATE_UNIFORM_RANDOM)
		return mk_err_set(err, MK_EINVAL, "gate_mode %s needs no prompts", mk_moe_gate_name(mode));
	if ((rc = mk_model_resolve(base_ref, &dir, err)))
		goto out;
	if ((rc = mk_tokenizer_open(dir, &tk, err))) {
		mk_err_prefix(err, "base model '%s': tokenizer (for the prompts): ", base_ref);
		goto out;
	}
	if ((rc = mk_forward_open(base_ref, fo, &fw, err))) {
		mk_err_prefix(err, "base model '%s': ", base_ref);
		goto out;
	}
	struct mk_forward_info fi;
	mk_forward_info(fw, &fi);
	if (fi.layers != nlayers || fi.hidden != hidden) {
		rc = mk_err_set(err, MK_EFORMAT, "base model '%s': %zu layers of %zu, config.json says %zu of %zu",
				base_ref, fi.layers, fi.hidden, nlayers, hidden);
		goto out;
	}
	pos = malloc(nlayers * hidden * sizeof(*pos));
	neg = malloc(nlayers * hidden * sizeof(*neg));
	if (!pos || !neg) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t e = 0; e < nex && !rc; e++) {
		rc = prompts_vec(fw, tk, mode, ex[e]->positive, ex[e]->npositive, nlayers, hidden, pos, err);
		if (!rc && ex[e]->nnegative) {
			rc = prompts_vec(fw, tk, mode, ex[e]->negative, ex[e]->nnegative, nlayers, hidden, neg, err);
			for (size_t i = 0; !rc && i < nlayers * hidden; i++)
				pos[i] -= neg[i];
		}
		if (rc) {
			mk_err_prefix(err, "expert '%s' (line %u): ", ex[e]->source_model, ex[e]->line);
			break;
		}
		for (size_t l = 0; l < nlayers; l++) {
			normalise(pos + l * hidden, hidden);
			memcpy(out + (l * nex + e) * hidden, pos + l * hidden, hidden * sizeof(*out));
		}
	}
out:
	free(pos);
	free(neg);
	free(dir);
	mk_forward_close(fw);
	mk_tokenizer_free(tk);
	return rc;
}

/* ------------------------------------------------------------ degenerate routers */

/* Eigenvalues of the symmetric n x n matrix a (destroyed) by cyclic Jacobi. */
static void jacobi(double *a, size_t n, double *ev)
{
	for (int sweep = 0; sweep < 100; sweep++) {
		double off = 0;
		for (size_t p = 0; p < n; p++)
			for (size_t q = p + 1; q < n; q++)
				off += a[p * n + q] * a[p * n + q];
		if (off < 1e-30)
			break;
		for (size_t p = 0; p < n; p++)
			for (size_t q = p + 1; q < n; q++) {
				double apq = a[p * n + q];
				if (fabs(apq) < 1e-300)
					continue;
				double th = (a[q * n + q] - a[p * n + p]) / (2 * apq);
				double t = (th >= 0 ? 1 : -1) / (fabs(th) + sqrt(th * th + 1));
				double c = 1 / sqrt(t * t + 1), s = t * c;
				for (size_t k = 0; k < n; k++) {
					double akp = a[k * n + p], akq = a[k * n + q];
					a[k * n + p] = c * akp - s * akq;
					a[k * n + q] = s * akp + c * akq;
				}
				for (size_t k = 0; k < n; k++) {
					double apk = a[p * n + k], aqk = a[q * n + k];
					a[p * n + k] = c * apk - s * aqk;
					a[q * n + k] = s * apk + c * aqk;
				}
			}
	}
	for (size_t i = 0; i < n; i++)
		ev[i] = a[i * n + i];
}

double mk_moe_gate_cond(const float *g, size_t rows, size_t cols)
{
	size_t n = rows < cols ? rows : cols;
	double *a = calloc(n * n, sizeof(*a)), *ev = calloc(n ? n : 1, sizeof(*ev));
	double r = INFINITY;

	if (!a || !ev || !n)
		goto out;
	/* the Gram matrix of the shorter side: its eigenvalues are the
	 * squared singular values */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i; j < n; j++) {
			double s = 0;
			if (rows <= cols)
				for (size_t k = 0; k < cols; k++)
					s += (double)g[i * cols + k] * g[j * cols + k];
			else
				for (size_t k = 0; k < rows; k++)
					s += (double)g[k * cols + i] * g[k * cols + j];
			a[i * n + j] = a[j * n + i] = s;
		}
	jacobi(a, n, ev);
	double lo = INFINITY, hi = 0;
	for (size_t i = 0; i < n; i++) {
		double v = ev[i] > 0 ? ev[i] : 0;
		lo = v < lo ? v : lo;
		hi = v > hi ? v : hi;
	}
	r = lo > 0 ? sqrt(hi / lo) : INFINITY;
out:
	free(a);
	free(ev);
	return r;
}
