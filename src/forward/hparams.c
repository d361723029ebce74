/* hparams.c - what the forward pass takes from config.json: the shapes,
 * the family's options and the rotary embedding's parameters, with the
 * defaults transformers' configuration classes give when a key is absent
 * (or null), and the rotary inverse frequencies as transformers 5 computes
 * them (modeling_rope_utils), in float32 where it computes in float32. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "forward_impl.h"

/* ---- reading values ---- */

/* The member `key` of object node `obj`, SIZE_MAX when absent or null. */
static size_t member(const struct mk_jsondoc *d, size_t obj, const char *key)
{
	size_t n = obj == SIZE_MAX ? SIZE_MAX : mk_jsondoc_get(d, obj, key);
	return n != SIZE_MAX && mk_jsondoc_type(d, n) == MK_JSON_NULL ? SIZE_MAX : n;
}

static int num_at(const struct mk_jsondoc *d, size_t n, const char *key, double *v, struct mk_err *err)
{
	size_t len;
	const char *t;
	char buf[64], *end;

	if (mk_jsondoc_type(d, n) == MK_JSON_TRUE || mk_jsondoc_type(d, n) == MK_JSON_FALSE) {
		*v = mk_jsondoc_type(d, n) == MK_JSON_TRUE; /* Python's bools are numbers */
		return 0;
	}
	t = mk_jsondoc_node_text(d, n, &len);
	if (mk_jsondoc_type(d, n) != MK_JSON_NUMBER || !t || len >= sizeof(buf))
		return mk_err_set(err, MK_EFORMAT, "config.json: %s is not a number", key);
	memcpy(buf, t, len);
	buf[len] = 0;
	*v = strtod(buf, &end);
	if (*end)
		return mk_err_set(err, MK_EFORMAT, "config.json: %s is not a number", key);
	return 0;
}

/* A number member, or `def` when absent/null. */
static int num(const struct mk_jsondoc *d, size_t obj, const char *key, double def, double *v, struct mk_err *err)
{
	size_t n = member(d, obj, key);
	if (n == SIZE_MAX) {
		*v = def;
		return 0;
	}
	return num_at(d, n, key, v, err);
}

/* A positive integer member, `def` when absent (0: required). */
static int count(const struct mk_jsondoc *d, size_t obj, const char *key, size_t def, size_t *v, struct mk_err *err)
{
	double x = 0;
	int rc = num(d, obj, key, (double)def, &x, err);
	if (rc)
		return rc;
	if (!(x >= 1 && x <= 1e7 && x == floor(x)))
		return x == 0 && !def && member(d, obj, key) == SIZE_MAX
			       ? mk_err_set(err, MK_EFORMAT, "config.json: %s is missing", key)
			       : mk_err_set(err, MK_EFORMAT, "config.json: %s must be a positive integer", key);
	*v = (size_t)x;
	return 0;
}

static int flag(const struct mk_jsondoc *d, size_t obj, const char *key, bool *v)
{
	size_t n = member(d, obj, key);
	*v = n != SIZE_MAX && mk_jsondoc_type(d, n) == MK_JSON_TRUE;
	return 0;
}

static char *str(const struct mk_jsondoc *d, size_t obj, const char *key)
{
	size_t n = member(d, obj, key), len;
	return n != SIZE_MAX && mk_jsondoc_type(d, n) == MK_JSON_STRING ? mk_jsondoc_node_string(d, n, &len) : NULL;
}

/* ---- the rotary embedding ---- */

static const char *const rope_names[] = { "default", "linear", "dynamic", "llama3", "yarn" };

static int rope_parse(const struct mk_jsondoc *d, size_t root, struct mk_fwd_config *c, struct mk_err *err)
{
	struct mk_fwd_rope *r = &c->rope;
	size_t rp = member(d, root, "rope_scaling");
	char *type;
	double prf;
	int rc;

	/* rope_scaling (the older key) wins over rope_parameters, as in
	 * transformers' conversion, when it is a non-empty object */
	if (rp == SIZE_MAX || mk_jsondoc_type(d, rp) != MK_JSON_OBJECT || !mk_jsondoc_count(d, rp))
		rp = member(d, root, "rope_parameters");
	if (rp != SIZE_MAX && mk_jsondoc_type(d, rp) != MK_JSON_OBJECT)
		return mk_err_set(err, MK_EFORMAT, "config.json: rope_scaling/rope_parameters is not an object");
	if (rp != SIZE_MAX && (member(d, rp, "full_attention") != SIZE_MAX ||
			       member(d, rp, "sliding_attention") != SIZE_MAX))
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "config.json: rope parameters per layer type are not supported by mk's forward pass");
	type = str(d, rp, "rope_type");
	if (!type)
		type = str(d, rp, "type");
	r->type = MK_ROPE_DEFAULT;
	if (type) {
		size_t i;
		for (i = 0; i < sizeof(rope_names) / sizeof(*rope_names); i++)
			if (!strcmp(type, rope_names[i]))
				break;
		if (i == sizeof(rope_names) / sizeof(*rope_names)) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"config.json: rope type \"%.64s\" is not supported by mk's forward pass "
					"(default, linear, dynamic, llama3, yarn)",
					type);
			free(type);
			return rc;
		}
		r->type = (enum mk_rope_type)i;
		free(type);
	}
	c->rope_name = rope_names[r->type];
	/* theta: the rope dict's, else the top level's, else 10000 */
	if ((rc = num(d, root, "rope_theta", 10000.0, &r->theta, err)) ||
	    (rc = num(d, rp, "rope_theta", r->theta, &r->theta, err)))
		return rc;
	if ((rc = num(d, root, "partial_rotary_factor", 1.0, &prf, err)) ||
	    (rc = num(d, rp, "partial_rotary_factor", prf, &prf, err)))
		return rc;
	if (prf != 1.0)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "config.json: partial_rotary_factor %g is not supported for %s (only 1)", prf,
				  c->model_type);
	if (!(r->theta > 0))
		return mk_err_set(err, MK_EFORMAT, "config.json: rope_theta must be positive");
	if ((rc = num(d, root, "max_position_embeddings", c->mpe_default, &r->mpe, err)))
		return rc;
	if (r->type == MK_ROPE_DEFAULT)
		return 0;
	/* factor: required (yarn's may be null: max_position_embeddings over
	 * the pretraining length) */
	r->factor = NAN;
	{
		size_t fn = rp == SIZE_MAX ? SIZE_MAX : mk_jsondoc_get(d, rp, "factor");
		if (fn == SIZE_MAX || (mk_jsondoc_type(d, fn) == MK_JSON_NULL && r->type != MK_ROPE_YARN))
			return mk_err_set(err, MK_EFORMAT, "config.json: rope type %s needs a factor", c->rope_name);
		if (mk_jsondoc_type(d, fn) != MK_JSON_NULL && (rc = num_at(d, fn, "factor", &r->factor, err)))
			return rc;
	}
	/* the pretraining length: a top-level original_max_position_embeddings
	 * wins, then the rope dict's, then max_position_embeddings */
	if ((rc = num(d, rp, "original_max_position_embeddings", r->mpe, &r->orig_mpe, err)) ||
	    (rc = num(d, root, "original_max_position_embeddings", r->orig_mpe, &r->orig_mpe, err)))
		return rc;
	if (r->type == MK_ROPE_LLAMA3) {
		if (member(d, rp, "low_freq_factor") == SIZE_MAX || member(d, rp, "high_freq_factor") == SIZE_MAX)
			return mk_err_set(err, MK_EFORMAT,
					  "config.json: rope type llama3 needs low_freq_factor and high_freq_factor");
		if ((rc = num(d, rp, "low_freq_factor", 1, &r->low_ff, err)) ||
		    (rc = num(d, rp, "high_freq_factor", 4, &r->high_ff, err)))
			return rc;
	}
	if (r->type == MK_ROPE_YARN) {
		bool tr = true;
		size_t tn = member(d, rp, "truncate");
		if (tn != SIZE_MAX)
			tr = mk_jsondoc_type(d, tn) != MK_JSON_FALSE;
		r->truncate = tr;
		r->has_attn_factor = member(d, rp, "attention_factor") != SIZE_MAX;
		if ((rc = num(d, rp, "attention_factor", 1, &r->attn_factor, err)) ||
		    (rc = num(d, rp, "mscale", 0, &r->mscale, err)) ||
		    (rc = num(d, rp, "mscale_all_dim", 0, &r->mscale_all_dim, err)))
			return rc;
		/* beta_fast/beta_slow: absent, null or 0 take the defaults */
		if ((rc = num(d, rp, "beta_fast", 32, &r->beta_fast, err)) ||
		    (rc = num(d, rp, "beta_slow", 1, &r->beta_slow, err)))
			return rc;
		if (r->beta_fast == 0)
			r->beta_fast = 32;
		if (r->beta_slow == 0)
			r->beta_slow = 1;
		if (isnan(r->factor))
			r->factor = r->mpe / r->orig_mpe;
	}
	if (!(r->factor > 0))
		return mk_err_set(err, MK_EFORMAT, "config.json: rope factor must be positive");
	return 0;
}

/* float32 base ** (i / dim) for i = 0, 2, ..., as torch's pow of a scalar
 * and a float tensor */
static float pos_freq(float base, size_t i, size_t dim)
{
	return powf(base, (float)i / (float)dim);
}

void mk_fwd_rope_inv_freq(const struct mk_fwd_config *c, size_t seq_len, float *inv, float *scale)
{
	const struct mk_fwd_rope *r = &c->rope;
	const size_t dim = c->head_dim, half = dim / 2;
	float base = (float)r->theta;

	*scale = 1.0f;
	switch (r->type) {
	case MK_ROPE_DYNAMIC:
		if ((double)seq_len > r->mpe) {
			/* recomputed for the batch's length, in float32 */
			float fac = (float)r->factor;
			float ratio = fac * (float)seq_len / (float)r->mpe - (fac - 1.0f);
			base = (float)r->theta * powf(ratio, (float)dim / (float)(dim - 2));
		}
		/* fall through */
	case MK_ROPE_DEFAULT:
	case MK_ROPE_LINEAR:
		for (size_t j = 0; j < half; j++) {
			inv[j] = 1.0f / pos_freq(base, 2 * j, dim);
			if (r->type == MK_ROPE_LINEAR)
				inv[j] /= (float)r->factor;
		}
		return;
	case MK_ROPE_LLAMA3: {
		const double low_wl = r->orig_mpe / r->low_ff, high_wl = r->orig_mpe / r->high_ff;
		const float fac = (float)r->factor;
		for (size_t j = 0; j < half; j++) {
			float f = 1.0f / pos_freq(base, 2 * j, dim);
			float wl = (float)(2 * M_PI) / f;
			float fl = wl > (float)low_wl ? f / fac : f;
			if (!(wl < (float)high_wl) && !(wl > (float)low_wl)) {
				float sm = ((float)r->orig_mpe / wl - (float)r->low_ff) / (float)(r->high_ff - r->low_ff);
				fl = (1.0f - sm) * fl / fac + sm * fl;
			}
			inv[j] = fl;
		}
		return;
	}
	case MK_ROPE_YARN: {
		const double fac = r->factor, b = r->theta;
		double low, high, af;
#define CORR_DIM(rot) ((double)dim * log(r->orig_mpe / ((rot) * 2 * M_PI)) / (2 * log(b)))
		low = CORR_DIM(r->beta_fast);
		high = CORR_DIM(r->beta_slow);
#undef CORR_DIM
		if (r->truncate) {
			low = floor(low);
			high = ceil(high);
		}
		if (low < 0)
			low = 0;
		if (high > (double)(dim - 1))
			high = (double)(dim - 1);
		if (low == high)
			high += 0.001;
		if (r->has_attn_factor)
			af = r->attn_factor;
		else if (r->mscale != 0 && r->mscale_all_dim != 0)
			af = (fac <= 1 ? 1.0 : 0.1 * r->mscale * log(fac) + 1.0) /
			     (fac <= 1 ? 1.0 : 0.1 * r->mscale_all_dim * log(fac) + 1.0);
		else
			af = fac <= 1 ? 1.0 : 0.1 * log(fac) + 1.0;
		for (size_t j = 0; j < half; j++) {
			float pf = pos_freq(base, 2 * j, dim);
			float extra = 1.0f / pf, inter = 1.0f / ((float)fac * pf);
			float ramp = ((float)j - (float)low) / (float)(high - low);
			ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
			float ef = 1.0f - ramp;
			inv[j] = inter * (1.0f - ef) + extra * ef;
		}
		*scale = (float)af;
		return;
	}
	}
}

/* ---- the whole config ---- */

int mk_fwd_config_parse(const char *text, size_t len, const char *label, struct mk_fwd_config *c,
			struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	size_t root;
	char *mt = NULL, *act = NULL;
	int rc;

	memset(c, 0, sizeof(*c));
	if ((rc = mk_jsondoc_parse(text, len, label, &d, err)))
		return rc;
	root = mk_jsondoc_at(d, "");
	if (mk_jsondoc_type(d, root) != MK_JSON_OBJECT) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: not a JSON object", label);
		goto out;
	}
	mt = str(d, root, "model_type");
	if (!mt || (strcmp(mt, "llama") && strcmp(mt, "mistral") && strcmp(mt, "qwen2") && strcmp(mt, "qwen3"))) {
		rc = mk_err_set(err, MK_EUNSUPPORTED,
				"%s: model_type \"%.64s\" has no forward pass in mk (llama, mistral, qwen2, qwen3)", label,
				mt ? mt : "(none)");
		goto out;
	}
	c->family = !strcmp(mt, "llama") ? MK_FWD_LLAMA : !strcmp(mt, "mistral") ? MK_FWD_MISTRAL
		    : !strcmp(mt, "qwen2") ? MK_FWD_QWEN2 : MK_FWD_QWEN3;
	static const char *const names[] = { "llama", "mistral", "qwen2", "qwen3" };
	c->model_type = names[c->family];
	/* the configuration classes' defaults */
	static const double mpe_def[] = { 2048, 4096 * 32, 32768, 32768 };
	c->mpe_default = mpe_def[c->family];
	if ((rc = count(d, root, "hidden_size", 0, &c->hidden, err)) ||
	    (rc = count(d, root, "num_hidden_layers", 0, &c->layers, err)) ||
	    (rc = count(d, root, "num_attention_heads", 0, &c->heads, err)) ||
	    (rc = count(d, root, "vocab_size", 0, &c->vocab, err)))
		goto out;
	/* num_key_value_heads: absent -> mistral 8, qwen2/qwen3 32; null (or
	 * llama's absent) -> num_attention_heads */
	{
		size_t kn = mk_jsondoc_get(d, root, "num_key_value_heads");
		size_t def = c->family == MK_FWD_MISTRAL ? 8 : c->family == MK_FWD_LLAMA ? c->heads : 32;
		if (kn != SIZE_MAX && mk_jsondoc_type(d, kn) == MK_JSON_NULL)
			def = c->heads;
		if ((rc = count(d, root, "num_key_value_heads", def, &c->kv_heads, err)))
			goto out;
	}
	if (c->heads % c->kv_heads) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: num_attention_heads %zu is not a multiple of num_key_value_heads %zu",
				label, c->heads, c->kv_heads);
		goto out;
	}
	if (c->family == MK_FWD_QWEN3)
		rc = count(d, root, "head_dim", 128, &c->head_dim, err);
	else
		rc = count(d, root, "head_dim", c->hidden / c->heads ? c->hidden / c->heads : 1, &c->head_dim, err);
	if (rc)
		goto out;
	if (c->head_dim % 2) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: head_dim %zu is odd (rotary embeddings need pairs)", label,
				c->head_dim);
		goto out;
	}
	if ((rc = num(d, root, "rms_norm_eps", 1e-6, &c->eps, err)))
		goto out;
	act = str(d, root, "hidden_act");
	if (act && strcmp(act, "silu")) {
		rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: hidden_act \"%.32s\" is not supported (silu)", label, act);
		goto out;
	}
	flag(d, root, "attention_bias", &c->attn_bias);
	flag(d, root, "mlp_bias", &c->mlp_bias);
	if (c->family == MK_FWD_MISTRAL || c->family == MK_FWD_QWEN2)
		c->attn_bias = false; /* their attention has no such option */
	if (c->family != MK_FWD_LLAMA)
		c->mlp_bias = false;
	c->qkv_bias = c->attn_bias || c->family == MK_FWD_QWEN2;
	c->qk_norm = c->family == MK_FWD_QWEN3;
	/* sliding windows, per layer */
	c->window = calloc(c->layers, sizeof(*c->window));
	if (!c->window) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (c->family != MK_FWD_LLAMA) {
		double w;
		bool on = c->family == MK_FWD_MISTRAL;
		if (c->family != MK_FWD_MISTRAL)
			flag(d, root, "use_sliding_window", &on);
		size_t wn = mk_jsondoc_get(d, root, "sliding_window");
		if (wn != SIZE_MAX && mk_jsondoc_type(d, wn) == MK_JSON_NULL)
			on = false;
		if ((rc = num(d, root, "sliding_window", 4096, &w, err)))
			goto out;
		if (on && !(w >= 1 && w <= 1e15 && w == floor(w))) {
			rc = mk_err_set(err, MK_EFORMAT, "%s: sliding_window must be a positive integer", label);
			goto out;
		}
		if (on) {
			size_t lt = member(d, root, "layer_types");
			double mwl = 28;
			if ((rc = num(d, root, "max_window_layers", 28, &mwl, err)))
				goto out;
			if (lt != SIZE_MAX && (mk_jsondoc_type(d, lt) != MK_JSON_ARRAY || mk_jsondoc_count(d, lt) != c->layers)) {
				rc = mk_err_set(err, MK_EFORMAT, "%s: layer_types is not a list of %zu layer types", label,
						c->layers);
				goto out;
			}
			size_t e = lt == SIZE_MAX ? SIZE_MAX : mk_jsondoc_first(d, lt);
			for (size_t l = 0; l < c->layers; l++) {
				bool sl;
				if (c->family == MK_FWD_MISTRAL) {
					sl = true;
				} else if (lt != SIZE_MAX) {
					size_t n;
					char *s = mk_jsondoc_node_string(d, e, &n);
					sl = s && !strcmp(s, "sliding_attention");
					free(s);
					e = mk_jsondoc_next(d, e);
				} else {
					sl = (double)l >= mwl;
				}
				c->window[l] = sl ? (size_t)w : 0;
			}
		}
	}
	rc = rope_parse(d, root, c, err);
out:
	if (rc) {
		free(c->window);
		c->window = NULL;
	}
	free(mt);
	free(act);
	mk_jsondoc_free(d);
	return rc;
}

void mk_fwd_config_free(struct mk_fwd_config *c)
{
	free(c->window);
	c->window = NULL;
}
