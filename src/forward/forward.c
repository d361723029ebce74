/* forward.c - the decoder forward pass (forward.h): weights read layer by
 * layer from the checkpoint, converted to float32, applied to the whole
 * batch with OpenBLAS (or, the layers' matrix products, on a CUDA device),
 * freed. */
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda.h"
#include "mk/dtype.h"
#include "mk/forward.h"
#include "core/fsutil.h"
#include "io/model.h"
#include "forward_impl.h"
#include "core/bug.h"

#define READ_CHUNK (4u << 20) /* raw bytes read at once */
#define CONFIG_MAX (16u << 20)

struct mk_forward {
	struct mk_model *m;
	int *fds;
	struct mk_fwd_config c;
	size_t inter;            /* intermediate_size, from layer 0's gate_proj */
	uint64_t max_memory;
	struct mk_cuda_ctx *cuda;  /* borrowed; NULL: the CPU */
	const volatile int *cancel;
	uint64_t layer_bytes;    /* the largest layer's float32 weights */
	uint64_t held, peak;     /* weight bytes held now, at most */
	uint8_t *rbuf, *gbuf;    /* read and gather buffers */
	size_t rcap, gcap;
};

/* one layer's weights (NULL: absent) */
struct layer {
	float *in_norm, *post_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo, *qn, *kn;
	float *wg, *wu, *wd, *bg, *bu, *bd;
};

static int grow(uint8_t **buf, size_t *cap, size_t n, struct mk_err *err)
{
	if (n <= *cap)
		return 0;
	uint8_t *b = realloc(*buf, n);
	if (!b)
		return mk_err_set(err, MK_ENOMEM, "out of memory reading weights (%zu bytes)", n);
	*buf = b;
	*cap = n;
	return 0;
}

/* Elements [e0, e0 + n) of tensor t, in row-major order, as float32. */
static int read_f32(struct mk_forward *f, const struct mk_model_tensor *mt, uint64_t e0, uint64_t n, float *dst,
		    struct mk_err *err)
{
	const struct mk_st_tensor *t = mt->t;
	const struct mk_st_file *sf = f->m->shards[mt->shard];
	const enum mk_dtype dt = t->desc.dtype;
	const unsigned bits = mk_dtype_bits(dt);
	int rc;

	if (!mk_dtype_is_float(dt) || bits < 8 || dt == MK_DT_F8_E8M0)
		return mk_err_set(err, MK_EUNSUPPORTED, "%s: tensor %s is %s, not a float type the forward pass reads",
				  sf->path, t->name, mk_dtype_name(dt));
	const uint64_t es = bits / 8, step = READ_CHUNK / es;
	for (uint64_t done = 0; done < n;) {
		uint64_t k = n - done < step ? n - done : step, lo, hi;
		const uint8_t *src;
		mk_st_tensor_extent(t, e0 + done, k, &lo, &hi);
		if ((rc = grow(&f->rbuf, &f->rcap, hi - lo, err)) ||
		    (rc = mk_pread_exact(f->fds[mt->shard], f->rbuf, hi - lo, sf->data_start + lo, sf->path, err)))
			return rc;
		src = f->rbuf;
		if (t->stride) {
			if ((rc = grow(&f->gbuf, &f->gcap, k * es, err)) ||
			    (rc = mk_st_tensor_gather(t, e0 + done, k, f->rbuf, lo, hi - lo, f->gbuf, err)))
				return rc;
			src = f->gbuf;
		}
		if (mk_dtype_convert(MK_DT_F32, dst + done, dt, src, k))
			return mk_err_set(err, MK_EUNSUPPORTED, "%s: tensor %s: cannot convert %s to F32", sf->path,
					  t->name, mk_dtype_name(dt));
		done += k;
	}
	return 0;
}

/* The tensor `name`, its shape checked: [d0] (d1 == 0) or [d0, d1]. */
static const struct mk_model_tensor *find(struct mk_forward *f, const char *name, size_t d0, size_t d1,
					  bool required, int *rc, struct mk_err *err)
{
	const struct mk_model_tensor *mt = mk_model_find(f->m, name);
	*rc = 0;
	if (!mt) {
		if (required)
			*rc = mk_err_set(err, MK_ENOENT, "%s: no tensor %s (a %s checkpoint has one)", f->m->dir, name,
					 f->c.model_type);
		return NULL;
	}
	const struct mk_tensor_desc *d = &mt->t->desc;
	if (d->ndim != (d1 ? 2u : 1u) || d->shape[0] != d0 || (d1 && d->shape[1] != d1)) {
		char want[64];
		if (d1)
			snprintf(want, sizeof(want), "[%zu, %zu]", d0, d1);
		else
			snprintf(want, sizeof(want), "[%zu]", d0);
		*rc = mk_err_set(err, MK_EMISMATCH, "%s: tensor %s has %u dimensions [%llu, ...], config.json says %s",
				 f->m->dir, name, d->ndim, d->ndim ? (unsigned long long)d->shape[0] : 0ull, want);
		return NULL;
	}
	return mt;
}

static int load(struct mk_forward *f, const char *name, size_t d0, size_t d1, bool required, float **out,
		struct mk_err *err)
{
	int rc;
	const struct mk_model_tensor *mt = find(f, name, d0, d1, required, &rc, err);
	uint64_t n = (uint64_t)d0 * (d1 ? d1 : 1);

	*out = NULL;
	if (!mt)
		return rc;
	float *w = malloc(n * sizeof(float));
	if (!w)
		return mk_err_set(err, MK_ENOMEM, "out of memory for %s (%llu floats)", name, (unsigned long long)n);
	if ((rc = read_f32(f, mt, 0, n, w, err))) {
		free(w);
		return rc;
	}
	*out = w;
	f->held += n * sizeof(float);
	if (f->held > f->peak)
		f->peak = f->held;
	return 0;
}

static void unload(struct mk_forward *f, float **w, size_t nelem)
{
	if (*w) {
		free(*w);
		*w = NULL;
		f->held -= nelem * sizeof(float);
	}
}

/* ---- the layer's shapes ---- */

struct shape {
	const char *suffix;
	size_t d0, d1;
	bool required;
	size_t off; /* offsetof(struct layer, ...) */
};

static size_t layer_shapes(const struct mk_forward *f, struct shape *s)
{
	const struct mk_fwd_config *c = &f->c;
	const size_t H = c->hidden, qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim, NI = f->inter;
	size_t n = 0;
#define S(sfx, a, b, req, field) s[n++] = (struct shape){ sfx, a, b, req, offsetof(struct layer, field) }
	S("input_layernorm.weight", H, 0, true, in_norm);
	S("post_attention_layernorm.weight", H, 0, true, post_norm);
	S("self_attn.q_proj.weight", qd, H, true, wq);
	S("self_attn.k_proj.weight", kvd, H, true, wk);
	S("self_attn.v_proj.weight", kvd, H, true, wv);
	S("self_attn.o_proj.weight", H, qd, true, wo);
	if (c->qkv_bias) {
		S("self_attn.q_proj.bias", qd, 0, true, bq);
		S("self_attn.k_proj.bias", kvd, 0, true, bk);
		S("self_attn.v_proj.bias", kvd, 0, true, bv);
	}
	if (c->attn_bias)
		S("self_attn.o_proj.bias", H, 0, true, bo);
	if (c->qk_norm) {
		S("self_attn.q_norm.weight", c->head_dim, 0, true, qn);
		S("self_attn.k_norm.weight", c->head_dim, 0, true, kn);
	}
	S("mlp.gate_proj.weight", NI, H, true, wg);
	S("mlp.up_proj.weight", NI, H, true, wu);
	S("mlp.down_proj.weight", H, NI, true, wd);
	if (c->mlp_bias) {
		S("mlp.gate_proj.bias", NI, 0, true, bg);
		S("mlp.up_proj.bias", NI, 0, true, bu);
		S("mlp.down_proj.bias", H, 0, true, bd);
	}
#undef S
	return n;
}

static void layer_free(struct mk_forward *f, struct layer *w)
{
	struct shape s[24];
	size_t n = layer_shapes(f, s);
	for (size_t i = 0; i < n; i++)
		unload(f, (float **)((char *)w + s[i].off), s[i].d0 * (s[i].d1 ? s[i].d1 : 1));
}

static int layer_load(struct mk_forward *f, size_t l, struct layer *w, struct mk_err *err)
{
	struct shape s[24];
	size_t n = layer_shapes(f, s);
	char name[256];
	int rc;

	memset(w, 0, sizeof(*w));
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "model.layers.%zu.%s", l, s[i].suffix);
		if ((rc = load(f, name, s[i].d0, s[i].d1, s[i].required, (float **)((char *)w + s[i].off), err))) {
			layer_free(f, w);
			return rc;
		}
	}
	return 0;
}

/* ---- open ---- */

int mk_forward_open(const char *ref, const struct mk_forward_opts *opts, struct mk_forward **out,
		    struct mk_err *err)
{
	struct mk_forward *f = calloc(1, sizeof(*f));
	char *path = NULL;
	uint8_t *text = NULL;
	size_t len;
	int rc;

	*out = NULL;
	if (!f)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	f->max_memory = opts ? opts->max_memory : 0;
	f->cuda = opts ? opts->cuda : NULL;
	f->cancel = opts ? opts->cancel : NULL;
	if ((rc = mk_model_open(ref, &f->m, err)))
		goto fail;
	if (mk_model_has_remote(f->m)) {
		rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: the forward pass reads local shards only", ref);
		goto fail;
	}
	if ((rc = mk_model_path(f->m, "config.json", &path, err)) ||
	    (rc = mk_file_read(path, CONFIG_MAX, &text, &len, err)) ||
	    (rc = mk_fwd_config_parse((const char *)text, len, path, &f->c, err)))
		goto fail;
	free(text);
	text = NULL;
	{
		int frc;
		const struct mk_model_tensor *g = mk_model_find(f->m, "model.layers.0.mlp.gate_proj.weight");
		if (!g || g->t->desc.ndim != 2) {
			rc = mk_err_set(err, MK_ENOENT, "%s: no 2-D tensor model.layers.0.mlp.gate_proj.weight", f->m->dir);
			goto fail;
		}
		f->inter = (size_t)g->t->desc.shape[0];
		if (!find(f, "model.embed_tokens.weight", f->c.vocab, f->c.hidden, true, &frc, err) ||
		    !find(f, "model.norm.weight", f->c.hidden, 0, true, &frc, err)) {
			rc = frc;
			goto fail;
		}
	}
	{
		struct shape s[24];
		size_t n = layer_shapes(f, s);
		for (size_t i = 0; i < n; i++)
			f->layer_bytes += (uint64_t)s[i].d0 * (s[i].d1 ? s[i].d1 : 1) * sizeof(float);
	}
	if ((rc = mk_model_open_fds(f->m, &f->fds, err)))
		goto fail;
	free(path);
	*out = f;
	return 0;
fail:
	if (f->m)
		mk_err_prefix(err, "forward pass of %s: ", ref);
	free(path);
	free(text);
	mk_forward_close(f);
	return rc;
}

void mk_forward_close(struct mk_forward *f)
{
	if (!f)
		return;
	if (f->fds)
		mk_model_close_fds(f->m, f->fds);
	mk_model_free(f->m);
	mk_fwd_config_free(&f->c);
	free(f->rbuf);
	free(f->gbuf);
	free(f);
}

void mk_forward_info(const struct mk_forward *f, struct mk_forward_info *o)
{
	*o = (struct mk_forward_info){ f->c.model_type, f->c.rope_name, f->c.layers, f->c.hidden, f->c.heads,
				       f->c.kv_heads, f->c.head_dim, f->inter, f->c.vocab, f->layer_bytes };
}

uint64_t mk_forward_peak_weights(const struct mk_forward *f)
{
	return f->peak;
}

/* activations: h, x, q, k, v, attention output, gate, up [N rows]; the
 * scores [len, len]; cos, sin [len, head_dim] */
static uint64_t act_floats(const struct mk_forward *f, size_t nseq, size_t len)
{
	const struct mk_fwd_config *c = &f->c;
	const uint64_t N = (uint64_t)nseq * len, qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
	return N * (2 * c->hidden + 2 * qd + 2 * kvd + 2 * f->inter) + (uint64_t)len * len +
	       2 * (uint64_t)len * c->head_dim + c->head_dim;
}

uint64_t mk_forward_need(const struct mk_forward *f, size_t nseq, size_t len)
{
	return f->layer_bytes + act_floats(f, nseq, len) * sizeof(float) + 2 * (uint64_t)READ_CHUNK;
}

/* ---- the device's part: the layers' seven matrices ---- */

/* the 2-D tensors of layer_shapes, in its order */
enum { WQ, WK, WV, WO, WG, WU, WD, NMAT };

struct gpu {
	struct mk_cuda_ctx *cx;
	struct mk_cuda_mat *w[NMAT];  /* one layer's matrices */
	struct mk_cuda_mat *in, *out; /* a product's input and output */
};

static void gpu_free(struct gpu *g)
{
	for (size_t i = 0; i < NMAT; i++)
		mk_cuda_mat_free(g->cx, g->w[i]);
	mk_cuda_mat_free(g->cx, g->in);
	mk_cuda_mat_free(g->cx, g->out);
	memset(g, 0, sizeof(*g));
}

static size_t max2(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* The device arrays of a run of N rows: made once, reused by every layer. */
static int gpu_setup(struct mk_forward *f, size_t N, struct gpu *g, struct mk_err *err)
{
	const struct mk_fwd_config *c = &f->c;
	const size_t qd = c->heads * c->head_dim, kvd = c->kv_heads * c->head_dim;
	const size_t widest = max2(max2(c->hidden, qd), max2(kvd, f->inter));
	struct shape s[24];
	size_t n = layer_shapes(f, s), j = 0;
	int rc;

	memset(g, 0, sizeof(*g));
	g->cx = f->cuda;
	for (size_t i = 0; i < n && j < NMAT; i++)
		if (s[i].d1 && (rc = mk_cuda_mat_new(g->cx, s[i].d0 * s[i].d1, &g->w[j++], err)))
			goto fail;
	if (j != NMAT)
		MK_BUG("forward: %zu matrices in a layer, expected %d", j, NMAT);
	if ((rc = mk_cuda_mat_new(g->cx, N * widest, &g->in, err)) ||
	    (rc = mk_cuda_mat_new(g->cx, N * widest, &g->out, err)))
		goto fail;
	return 0;
fail:
	mk_err_prefix(err, "forward pass on %s: one layer's matrices and the activations (%zu rows): ",
		      mk_cuda_describe(g->cx), N);
	gpu_free(g);
	return rc;
}

/* Copy the layer's matrices to the device. */
static int gpu_upload(struct mk_forward *f, const struct layer *w, struct gpu *g, struct mk_err *err)
{
	struct shape s[24];
	size_t n = layer_shapes(f, s), j = 0;
	int rc;

	for (size_t i = 0; i < n && j < NMAT; i++) {
		if (!s[i].d1)
			continue;
		const float *m = *(float *const *)((const char *)w + s[i].off);
		if ((rc = mk_cuda_mat_put(g->cx, g->w[j++], m, s[i].d0 * s[i].d1, err)))
			return rc;
	}
	return 0;
}

/* ---- the arithmetic ---- */

static void add_bias(float *y, size_t n, size_t outd, const float *b)
{
	if (b)
		for (size_t i = 0; i < n; i++)
			for (size_t j = 0; j < outd; j++)
				y[i * outd + j] += b[j];
}

/* y = x W^T (+ b): x [n, in], W [out, in], y [n, out] */
static void linear(const float *x, size_t n, size_t in, const float *w, const float *b, size_t outd, float *y)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)outd, (blasint)in, 1.0f, x,
		    (blasint)in, w, (blasint)in, 0.0f, y, (blasint)outd);
	add_bias(y, n, outd, b);
}

/* RMSNorm of n rows of d: y = w * (x / sqrt(mean(x^2) + eps)); y may be x */
static void rmsnorm(const float *x, size_t n, size_t d, const float *w, double eps, float *y)
{
	for (size_t i = 0; i < n; i++) {
		const float *r = x + i * d;
		double s = 0;
		for (size_t j = 0; j < d; j++)
			s += (double)r[j] * r[j];
		float var = (float)(s / (double)d);
		float inv = 1.0f / sqrtf(var + (float)eps);
		for (size_t j = 0; j < d; j++)
			y[i * d + j] = w[j] * (r[j] * inv);
	}
}

/* rotate each head of n rows (stride `ld`, nh heads of hd) at position
 * row % len: x*cos + rotate_half(x)*sin */
static void rope(float *x, size_t n, size_t len, size_t ld, size_t nh, size_t hd, const float *cs, const float *sn)
{
	const size_t half = hd / 2;
	for (size_t i = 0; i < n; i++) {
		const float *c = cs + (i % len) * hd, *s = sn + (i % len) * hd;
		for (size_t h = 0; h < nh; h++) {
			float *v = x + i * ld + h * hd;
			for (size_t j = 0; j < half; j++) {
				float a = v[j], b = v[j + half];
				v[j] = a * c[j] + (-b) * s[j];
				v[j + half] = b * c[j + half] + a * s[j + half];
			}
		}
	}
}

/* y = x W^T (+ b): with OpenBLAS (gpu NULL), or on the device with its
 * copy of matrix `wi`; put_x false: the device's input is x already (the
 * previous product's). */
static int proj(struct gpu *gpu, int wi, bool put_x, const float *x, size_t n, size_t in, const float *w,
		const float *b, size_t outd, float *y, struct mk_err *err)
{
	int rc;

	if (!gpu) {
		linear(x, n, in, w, b, outd, y);
		return 0;
	}
	if ((put_x && (rc = mk_cuda_mat_put(gpu->cx, gpu->in, x, n * in, err))) ||
	    (rc = mk_cuda_gemm_nt(gpu->cx, gpu->in, n, in, gpu->w[wi], outd, gpu->out, err)) ||
	    (rc = mk_cuda_mat_get(gpu->cx, gpu->out, y, n * outd, err)))
		return rc;
	add_bias(y, n, outd, b);
	return 0;
}

static int run_layer(struct mk_forward *f, size_t l, const struct layer *w, struct gpu *gpu, float *h, float *x,
		     float *q, float *k, float *v, float *att, float *g, float *u, float *sc, const float *cs,
		     const float *sn, const int64_t *mask, size_t nseq, size_t len, struct mk_err *err)
{
	const struct mk_fwd_config *c = &f->c;
	const size_t N = nseq * len, H = c->hidden, hd = c->head_dim, qd = c->heads * hd, kvd = c->kv_heads * hd;
	const size_t NI = f->inter, rep = c->heads / c->kv_heads, win = c->window[l];
	const float scale = (float)(1.0 / sqrt((double)hd));
	int rc;

	rmsnorm(h, N, H, w->in_norm, c->eps, x);
	if ((rc = proj(gpu, WQ, true, x, N, H, w->wq, w->bq, qd, q, err)) ||
	    (rc = proj(gpu, WK, false, x, N, H, w->wk, w->bk, kvd, k, err)) ||
	    (rc = proj(gpu, WV, false, x, N, H, w->wv, w->bv, kvd, v, err)))
		return rc;
	if (c->qk_norm) {
		rmsnorm(q, N * c->heads, hd, w->qn, c->eps, q);
		rmsnorm(k, N * c->kv_heads, hd, w->kn, c->eps, k);
	}
	rope(q, N, len, qd, c->heads, hd, cs, sn);
	rope(k, N, len, kvd, c->kv_heads, hd, cs, sn);
	for (size_t b = 0; b < nseq; b++) {
		const int64_t *mb = mask ? mask + b * len : NULL;
		for (size_t hh = 0; hh < c->heads; hh++) {
			const float *qb = q + b * len * qd + hh * hd;
			const float *kb = k + b * len * kvd + (hh / rep) * hd, *vb = v + b * len * kvd + (hh / rep) * hd;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)len, (blasint)len, (blasint)hd, scale,
				    qb, (blasint)qd, kb, (blasint)kvd, 0.0f, sc, (blasint)len);
			for (size_t t = 0; t < len; t++) {
				float *r = sc + t * len, mx = -INFINITY;
				size_t lo = win && t + 1 > win ? t + 1 - win : 0; /* keys s with t - s < win */
				for (size_t s = 0; s < len; s++)
					if (s < lo || s > t || (mb && !mb[s]))
						r[s] = -INFINITY;
					else if (r[s] > mx)
						mx = r[s];
				if (mx == -INFINITY) { /* sees no key: a zero output */
					memset(r, 0, len * sizeof(float));
					continue;
				}
				double sum = 0;
				for (size_t s = 0; s < len; s++) {
					r[s] = r[s] == -INFINITY ? 0.0f : expf(r[s] - mx);
					sum += r[s];
				}
				float is = (float)(1.0 / sum);
				for (size_t s = 0; s < len; s++)
					r[s] *= is;
			}
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)len, (blasint)hd, (blasint)len, 1.0f,
				    sc, (blasint)len, vb, (blasint)kvd, 0.0f, att + b * len * qd + hh * hd, (blasint)qd);
		}
	}
	if ((rc = proj(gpu, WO, true, att, N, qd, w->wo, w->bo, H, x, err)))
		return rc;
	for (size_t i = 0; i < N * H; i++)
		h[i] += x[i];
	rmsnorm(h, N, H, w->post_norm, c->eps, x);
	if ((rc = proj(gpu, WG, true, x, N, H, w->wg, w->bg, NI, g, err)) ||
	    (rc = proj(gpu, WU, false, x, N, H, w->wu, w->bu, NI, u, err)))
		return rc;
	for (size_t i = 0; i < N * NI; i++)
		g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	if ((rc = proj(gpu, WD, true, g, N, NI, w->wd, w->bd, H, x, err)))
		return rc;
	for (size_t i = 0; i < N * H; i++)
		h[i] += x[i];
	return 0;
}

/* the caller's cancel flag, checked between the run's steps */
static int check_cancel(const struct mk_forward *f, struct mk_err *err)
{
	if (f->cancel && *f->cancel)
		return mk_err_set(err, MK_EIO, "forward pass cancelled");
	return 0;
}

int mk_forward_run(struct mk_forward *f, const int64_t *ids, const int64_t *mask, size_t nseq, size_t len,
		   mk_forward_fn fn, void *ctx, struct mk_err *err)
{
	const struct mk_fwd_config *c = &f->c;
	const size_t N = nseq * len, H = c->hidden, hd = c->head_dim, qd = c->heads * hd, kvd = c->kv_heads * hd;
	float *buf = NULL, *nw = NULL;
	struct layer w;
	struct gpu gpu = { 0 };
	int rc = 0;

	memset(&w, 0, sizeof(w));
	if (!nseq || !len)
		return mk_err_set(err, MK_EINVAL, "forward pass: an empty batch (%zu sequences of %zu tokens)", nseq, len);
	for (size_t i = 0; i < N; i++)
		if (ids[i] < 0 || (uint64_t)ids[i] >= c->vocab)
			return mk_err_set(err, MK_EINVAL, "forward pass: token id %lld (sequence %zu) is outside the vocabulary of %zu",
					  (long long)ids[i], i / len, c->vocab);
	if (f->max_memory && mk_forward_need(f, nseq, len) > f->max_memory) {
		char a[32], b[32];
		return mk_err_set(err, MK_EINVAL,
				  "forward pass: %zu sequences of %zu tokens need %s (one layer's weights in float32 and the "
				  "activations), over the memory budget of %s",
				  nseq, len, mk_size_human(mk_forward_need(f, nseq, len), a, sizeof(a)),
				  mk_size_human(f->max_memory, b, sizeof(b)));
	}
	buf = malloc(act_floats(f, nseq, len) * sizeof(float));
	if (!buf)
		return mk_err_set(err, MK_ENOMEM, "forward pass: out of memory for the activations");
	float *h = buf, *x = h + N * H, *q = x + N * H, *att = q + N * qd, *k = att + N * qd, *v = k + N * kvd;
	float *g = v + N * kvd, *u = g + N * f->inter, *sc = u + N * f->inter, *cs = sc + len * len, *sn = cs + len * hd;
	float *inv = sn + len * hd, ascale;

	/* the embeddings: each token's row */
	if ((rc = check_cancel(f, err)))
		goto out;
	{
		const struct mk_model_tensor *e = mk_model_find(f->m, "model.embed_tokens.weight");
		for (size_t i = 0; i < N && !rc; i++)
			rc = read_f32(f, e, (uint64_t)ids[i] * H, H, h + i * H, err);
		if (rc)
			goto out;
	}
	/* cos and sin for positions 0..len-1 (transformers' position ids
	 * when only an attention mask is given) */
	mk_fwd_rope_inv_freq(c, len, inv, &ascale);
	for (size_t p = 0; p < len; p++)
		for (size_t j = 0; j < hd / 2; j++) {
			float fr = (float)p * inv[j];
			cs[p * hd + j] = cs[p * hd + j + hd / 2] = cosf(fr) * ascale;
			sn[p * hd + j] = sn[p * hd + j + hd / 2] = sinf(fr) * ascale;
		}
	if (f->cuda && (rc = gpu_setup(f, N, &gpu, err)))
		goto out;
	if ((rc = fn(ctx, 0, h, nseq, len, H, err)))
		goto out;
	for (size_t l = 0; l < c->layers; l++) {
		if ((rc = check_cancel(f, err)) || (rc = layer_load(f, l, &w, err)))
			goto out;
		if ((f->cuda && (rc = gpu_upload(f, &w, &gpu, err))) ||
		    (rc = run_layer(f, l, &w, f->cuda ? &gpu : NULL, h, x, q, k, v, att, g, u, sc, cs, sn, mask, nseq,
				    len, err))) {
			mk_err_prefix(err, "forward pass, layer %zu, on %s: ", l, mk_cuda_describe(f->cuda));
			goto out;
		}
		layer_free(f, &w);
		if (l + 1 == c->layers) {
			if ((rc = load(f, "model.norm.weight", H, 0, true, &nw, err)))
				goto out;
			rmsnorm(h, N, H, nw, c->eps, h);
			unload(f, &nw, H);
		}
		if ((rc = fn(ctx, l + 1, h, nseq, len, H, err)))
			goto out;
	}
out:
	gpu_free(&gpu);
	layer_free(f, &w);
	unload(f, &nw, H);
	free(buf);
	return rc;
}
