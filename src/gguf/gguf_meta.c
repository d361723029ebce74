/* gguf_meta.c - convert_hf_to_gguf.py's model keys (gguf_meta.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "gguf/gguf_meta.h"
#include "gguf/gguf_card.h"

#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "gguf/gguf_names.h"
#include "gguf/gguf_write.h"
#include "mk/err.h"

#define CONFIG_MAX (16u << 20)

/* ------------------------------------------------------------ config */

/* config.json with text_config merged over the root: a key is looked
 * up in text_config first, then the root, then in the defaults
 * transformers' config class fills in (convert reads the config through
 * AutoConfig.from_pretrained(...).to_dict()). */
struct cfg {
	struct mk_jsondoc *doc;
	size_t root, text;
	char label[4096];
};

/* transformers 5.25's defaults, per architecture, of the keys convert
 * reads: {hidden, heads} stand for the config's (or default) hidden_size
 * and num_attention_heads where a default is computed from them. */
static int cfg_defaults(struct cfg *c, struct mk_err *err)
{
	size_t an = mk_jsondoc_get(c->doc, c->root, "architectures");
	size_t a0 = an != SIZE_MAX && mk_jsondoc_type(c->doc, an) == MK_JSON_ARRAY ? mk_jsondoc_first(c->doc, an)
										       : SIZE_MAX;
	size_t len;
	char *arch = a0 != SIZE_MAX && mk_jsondoc_type(c->doc, a0) == MK_JSON_STRING ?
		     mk_jsondoc_node_string(c->doc, a0, &len) : NULL;
	const char *g = arch ? mk_gguf_arch_for_hf(arch) : NULL;
	bool mistral = arch && !strcmp(arch, "MistralForCausalLM");
	free(arch);
	if (!g)
		return 0;
	static const struct {
		const char *arch;
		long long hidden, heads;
		const char *json;   /* %lld: head_dim (computed), then num_key_value_heads (computed) */
	} t[] = {
		{ "llama", 4096, 32, "{\"head_dim\": %lld, \"num_key_value_heads\": %lld, \"rms_norm_eps\": 1e-06, "
		  "\"rope_theta\": 10000.0, \"max_position_embeddings\": 2048, \"vocab_size\": 32000, "
		  "\"intermediate_size\": 11008, \"num_hidden_layers\": 32}" },
		{ "mistral", 4096, 32, "{\"head_dim\": %lld, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06, "
		  "\"rope_theta\": 10000.0, \"max_position_embeddings\": 131072, \"sliding_window\": 4096, "
		  "\"vocab_size\": 32000, \"intermediate_size\": 14336, \"num_hidden_layers\": 32}" },
		{ "qwen2", 4096, 32, "{\"num_key_value_heads\": 32, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0, "
		  "\"max_position_embeddings\": 32768, \"vocab_size\": 151936, \"intermediate_size\": 22016, "
		  "\"num_hidden_layers\": 32}" },
		{ "qwen3", 4096, 32, "{\"head_dim\": 128, \"num_key_value_heads\": 32, \"rms_norm_eps\": 1e-06, "
		  "\"rope_theta\": 10000.0, \"max_position_embeddings\": 32768, \"vocab_size\": 151936, "
		  "\"intermediate_size\": 22016, \"num_hidden_layers\": 32}" },
		{ "gemma2", 2304, 8, "{\"head_dim\": 256, \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-06, "
		  "\"max_position_embeddings\": 8192, \"sliding_window\": 4096, \"attn_logit_softcapping\": 50.0, "
		  "\"final_logit_softcapping\": 30.0, \"vocab_size\": 256000, \"intermediate_size\": 9216, "
		  "\"num_hidden_layers\": 26}" },
		{ "gemma3", 2304, 8, "{\"head_dim\": 256, \"num_key_value_heads\": 4, \"rms_norm_eps\": 1e-06, "
		  "\"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, \"max_position_embeddings\": 131072, "
		  "\"sliding_window\": 4096, \"vocab_size\": 262208, \"intermediate_size\": 9216, "
		  "\"num_hidden_layers\": 26}" },
		{ "phi3", 3072, 32, "{\"num_key_value_heads\": %lld, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
		  "\"max_position_embeddings\": 4096, \"original_max_position_embeddings\": 4096, "
		  "\"vocab_size\": 32064, \"intermediate_size\": 8192, \"num_hidden_layers\": 32}" },
	};
	size_t i = 0;
	const char *key = mistral ? "mistral" : g;
	while (i < sizeof t / sizeof t[0] && strcmp(t[i].arch, key))
		i++;
	if (i == sizeof t / sizeof t[0])
		return 0;
	long long hidden = t[i].hidden, heads = t[i].heads;
	size_t n = mk_jsondoc_get(c->doc, c->text != SIZE_MAX ? c->text : c->root, "hidden_size");
	if (n == SIZE_MAX)
		n = mk_jsondoc_get(c->doc, c->root, "hidden_size");
	if (n != SIZE_MAX)
		mk_jsondoc_node_int(c->doc, n, &hidden);
	n = mk_jsondoc_get(c->doc, c->text != SIZE_MAX ? c->text : c->root, "num_attention_heads");
	if (n == SIZE_MAX)
		n = mk_jsondoc_get(c->doc, c->root, "num_attention_heads");
	if (n != SIZE_MAX)
		mk_jsondoc_node_int(c->doc, n, &heads);
	char text[1024];
	long long head_dim = heads > 0 ? hidden / heads : 0;
	if (!strcmp(key, "llama"))
		snprintf(text, sizeof text, t[i].json, head_dim, heads);
	else if (!strcmp(key, "mistral"))
		snprintf(text, sizeof text, t[i].json, head_dim);
	else if (!strcmp(key, "phi3"))
		snprintf(text, sizeof text, t[i].json, heads);
	else
		snprintf(text, sizeof text, "%s", t[i].json);
	/* each default the config lacks (root and text_config) set at its
	 * root, the document written and read again */
	struct mk_jsondoc *defs;
	int rc = mk_jsondoc_parse(text, strlen(text), "config defaults", &defs, err);
	if (rc < 0)
		return rc;
	bool any = false;
	size_t dr = mk_jsondoc_at(defs, "");
	for (size_t it = mk_jsondoc_first(defs, dr); it != SIZE_MAX && rc == 0; it = mk_jsondoc_next(defs, it)) {
		const char *k = mk_jsondoc_key(defs, it);
		if (mk_jsondoc_get(c->doc, c->root, k) != SIZE_MAX ||
		    (c->text != SIZE_MAX && mk_jsondoc_get(c->doc, c->text, k) != SIZE_MAX))
			continue;
		size_t vl;
		const char *v = mk_jsondoc_node_text(defs, it, &vl);
		char *vz = strndup(v, vl);
		if (!vz) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		rc = mk_jsondoc_set(c->doc, k, vz, err);
		free(vz);
		any = true;
	}
	mk_jsondoc_free(defs);
	if (rc < 0 || !any)
		return rc;
	char *out;
	size_t ol;
	if ((rc = mk_jsondoc_write(c->doc, &out, &ol, err)) < 0)
		return rc;
	struct mk_jsondoc *nd;
	rc = mk_jsondoc_parse(out, ol, c->label, &nd, err);
	free(out);
	if (rc < 0)
		return rc;
	mk_jsondoc_free(c->doc);
	c->doc = nd;
	c->root = mk_jsondoc_at(c->doc, "");
	size_t tt = mk_jsondoc_get(c->doc, c->root, "text_config");
	c->text = tt != SIZE_MAX && mk_jsondoc_type(c->doc, tt) == MK_JSON_OBJECT ? tt : SIZE_MAX;
	return 0;
}

static int cfg_open(struct cfg *c, const char *dir, const char *file, bool need, struct mk_err *err)
{
	uint8_t *buf = NULL;
	size_t len = 0;
	struct stat st;

	memset(c, 0, sizeof *c);
	c->root = c->text = SIZE_MAX;
	snprintf(c->label, sizeof c->label, "%s/%s", dir, file);
	if (stat(c->label, &st) != 0 || !S_ISREG(st.st_mode)) {
		if (!need)
			return 0;
		return mk_err_set(err, MK_ENOENT, "%s: no such file; a GGUF's keys come from the model's config.json",
				  c->label);
	}
	int rc = mk_file_read(c->label, CONFIG_MAX, &buf, &len, err);
	if (rc < 0)
		return rc;
	rc = mk_jsondoc_parse((const char *)buf, len, c->label, &c->doc, err);
	free(buf);
	if (rc < 0)
		return rc;
	if (mk_jsondoc_root_type(c->doc) != MK_JSON_OBJECT) {
		mk_jsondoc_free(c->doc);
		c->doc = NULL;
		return mk_err_set(err, MK_EFORMAT, "%s: not a JSON object", c->label);
	}
	c->root = mk_jsondoc_at(c->doc, "");
	size_t t = mk_jsondoc_get(c->doc, c->root, "text_config");
	if (t != SIZE_MAX && mk_jsondoc_type(c->doc, t) == MK_JSON_OBJECT)
		c->text = t;
	if (!strcmp(file, "config.json") && (rc = cfg_defaults(c, err)) < 0) {
		mk_jsondoc_free(c->doc);
		c->doc = NULL;
		return rc;
	}
	return 1;
}

static void cfg_close(struct cfg *c)
{
	mk_jsondoc_free(c->doc);
	c->doc = NULL;
}

/* A key's node (text_config first), SIZE_MAX when absent. */
static size_t cfg_get(const struct cfg *c, const char *key)
{
	if (!c->doc)
		return SIZE_MAX;
	if (c->text != SIZE_MAX) {
		size_t n = mk_jsondoc_get(c->doc, c->text, key);
		if (n != SIZE_MAX)
			return n;
	}
	return mk_jsondoc_get(c->doc, c->root, key);
}

static bool node_is(const struct cfg *c, size_t n, enum mk_json_type t)
{
	return n != SIZE_MAX && mk_jsondoc_type(c->doc, n) == t;
}

/* A number node as a double (Python's float of it). */
static bool node_num(const struct cfg *c, size_t n, double *v)
{
	size_t len;
	char tmp[64];

	if (!node_is(c, n, MK_JSON_NUMBER))
		return false;
	const char *s = mk_jsondoc_node_text(c->doc, n, &len);
	if (!s || len >= sizeof tmp)
		return false;
	memcpy(tmp, s, len);
	tmp[len] = 0;
	*v = strtod(tmp, NULL);
	return true;
}

/* An integer node (a JSON integer). */
static bool node_int(const struct cfg *c, size_t n, long long *v)
{
	return node_is(c, n, MK_JSON_NUMBER) && mk_jsondoc_node_int(c->doc, n, v) == 0;
}

/* find_hparam: the first of keys present (its value may be null). */
static size_t cfg_find(const struct cfg *c, const char *const *keys)
{
	for (; *keys; keys++) {
		size_t n = cfg_get(c, *keys);
		if (n != SIZE_MAX)
			return n;
	}
	return SIZE_MAX;
}

/* ------------------------------------------------- pending key-values */

/* Keys gathered before they go to the mk_gguf: convert's writer lets a
 * later add of a key replace the value in the first one's place. */
struct kv {
	char key[96];
	int vt;
	union { uint32_t u; int32_t i; float f; bool b; } v;
	char *s;
	char **sv;      /* MK_GGUF_V_ARRAY: strings */
	size_t nsv;
};

struct kvs {
	struct kv *a;
	size_t n, cap;
	const char *arch;
};

static struct kv *kv_slot(struct kvs *k, const char *key, int vt)
{
	for (size_t i = 0; i < k->n; i++)
		if (!strcmp(k->a[i].key, key)) {
			free(k->a[i].s);
			k->a[i].s = NULL;
			for (size_t j = 0; j < k->a[i].nsv; j++)
				free(k->a[i].sv[j]);
			free(k->a[i].sv);
			k->a[i].sv = NULL;
			k->a[i].nsv = 0;
			k->a[i].vt = vt;
			return &k->a[i];
		}
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 64;
		struct kv *a = realloc(k->a, cap * sizeof *a);
		if (!a)
			return NULL;
		k->a = a;
		k->cap = cap;
	}
	struct kv *e = &k->a[k->n++];
	memset(e, 0, sizeof *e);
	snprintf(e->key, sizeof e->key, "%s", key);
	e->vt = vt;
	return e;
}

/* "%s" in key stands for the architecture. */
static const char *kname(struct kvs *k, const char *key, char *buf, size_t cap)
{
	if (!strstr(key, "%s"))
		return key;
	snprintf(buf, cap, key, k->arch);
	return buf;
}

static int put_u32(struct kvs *k, const char *key, uint32_t v)
{
	char b[96];
	struct kv *e = kv_slot(k, kname(k, key, b, sizeof b), MK_GGUF_V_U32);
	if (!e)
		return -1;
	e->v.u = v;
	return 0;
}

static int put_i32(struct kvs *k, const char *key, int32_t v)
{
	char b[96];
	struct kv *e = kv_slot(k, kname(k, key, b, sizeof b), MK_GGUF_V_I32);
	if (!e)
		return -1;
	e->v.i = v;
	return 0;
}

static int put_f32(struct kvs *k, const char *key, double v)
{
	char b[96];
	struct kv *e = kv_slot(k, kname(k, key, b, sizeof b), MK_GGUF_V_F32);
	if (!e)
		return -1;
	e->v.f = (float)v;
	return 0;
}

static int put_str(struct kvs *k, const char *key, const char *v)
{
	char b[96];
	struct kv *e = kv_slot(k, kname(k, key, b, sizeof b), MK_GGUF_V_STRING);
	if (!e || !(e->s = strdup(v)))
		return -1;
	return 0;
}

static int put_strv(struct kvs *k, const char *key, char *const *v, size_t n)
{
	struct kv *e = kv_slot(k, key, MK_GGUF_V_ARRAY);
	if (!e || !(e->sv = calloc(n ? n : 1, sizeof *e->sv)))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!(e->sv[i] = strdup(v[i])))
			return -1;
		e->nsv = i + 1;
	}
	return 0;
}

static void kvs_free(struct kvs *k)
{
	for (size_t i = 0; i < k->n; i++) {
		for (size_t j = 0; j < k->a[i].nsv; j++)
			free(k->a[i].sv[j]);
		free(k->a[i].sv);
	}
	for (size_t i = 0; i < k->n; i++)
		free(k->a[i].s);
	free(k->a);
}

static int kvs_flush(struct kvs *k, struct mk_gguf *g, struct mk_err *err)
{
	for (size_t i = 0; i < k->n; i++) {
		struct kv *e = &k->a[i];
		int rc;
		switch (e->vt) {
		case MK_GGUF_V_U32: rc = mk_gguf_kv_u32(g, e->key, e->v.u, err); break;
		case MK_GGUF_V_I32: rc = mk_gguf_kv_i32(g, e->key, e->v.i, err); break;
		case MK_GGUF_V_F32: rc = mk_gguf_kv_f32(g, e->key, e->v.f, err); break;
		case MK_GGUF_V_BOOL: rc = mk_gguf_kv_bool(g, e->key, e->v.b, err); break;
		case MK_GGUF_V_ARRAY:
			rc = mk_gguf_kv_strv(g, e->key, (const char *const *)e->sv, e->nsv, err);
			break;
		default: rc = mk_gguf_kv_str(g, e->key, e->s, err); break;
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* ------------------------------------------------------ hyperparameters */

static const char *const K_LAYERS[] = { "n_layers", "num_hidden_layers", "n_layer", "num_layers", NULL };
static const char *const K_CTX[] = { "max_position_embeddings", "n_ctx", "n_positions", "max_length",
	"max_sequence_length", "model_max_length", NULL };
static const char *const K_EMBD[] = { "hidden_size", "n_embd", "dim", NULL };
static const char *const K_FF[] = { "prefix_dense_intermediate_size", "dense_intermediate_size",
	"intermediate_size", "n_inner", "hidden_dim", NULL };
static const char *const K_HEAD[] = { "num_attention_heads", "n_head", "n_heads", NULL };
static const char *const K_HEAD_KV[] = { "num_key_value_heads", "n_kv_heads", NULL };
static const char *const K_RMS[] = { "rms_norm_eps", "norm_eps", NULL };
static const char *const K_LN[] = { "layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", NULL };
static const char *const K_THETA[] = { "global_rope_theta", "rope_global_theta", "rope_theta_global",
	"rope_theta", "rotary_emb_base", NULL };
static const char *const K_LOCAL_THETA[] = { "local_rope_theta", "rope_local_theta", "rope_theta_local",
	"swa_rope_theta", "rope_local_base_freq", NULL };
static const char *const K_EXPERTS[] = { "num_local_experts", "num_experts", "n_routed_experts", NULL };

/* The rope parameters as convert gathers them: rope_parameters (or
 * rope_scaling) with, where it lacks them, the top-level rope_theta,
 * "type" as rope_type, partial_rotary_factor and
 * original_max_position_embeddings; its full_attention part where it has
 * one. */
struct rope {
	size_t obj;           /* rope_parameters / rope_scaling (object) or SIZE_MAX */
	size_t full;          /* the parameters in use: obj, or obj.full_attention */
	bool split;           /* obj has full_attention or sliding_attention */
	size_t theta_top, local_theta_top, orig_top;
};

static void rope_read(const struct cfg *c, struct rope *r)
{
	r->obj = cfg_get(c, "rope_parameters");
	if (r->obj == SIZE_MAX || node_is(c, r->obj, MK_JSON_NULL))
		r->obj = cfg_get(c, "rope_scaling");
	if (!node_is(c, r->obj, MK_JSON_OBJECT))
		r->obj = SIZE_MAX;
	r->full = r->obj;
	r->split = false;
	if (r->obj != SIZE_MAX) {
		size_t fa = mk_jsondoc_get(c->doc, r->obj, "full_attention");
		size_t sa = mk_jsondoc_get(c->doc, r->obj, "sliding_attention");
		r->split = fa != SIZE_MAX || sa != SIZE_MAX;
		if (fa != SIZE_MAX)
			r->full = node_is(c, fa, MK_JSON_OBJECT) ? fa : SIZE_MAX;
	}
	r->theta_top = cfg_find(c, K_THETA);
	r->local_theta_top = cfg_find(c, K_LOCAL_THETA);
	static const char *const orig[] = { "original_max_position_embeddings", NULL };
	r->orig_top = cfg_find(c, orig);
}

/* A rope parameter: in the parameters in use, else (when they are the
 * plain object and it lacks the key) the mirrored top-level value. */
static size_t rope_get(const struct cfg *c, const struct rope *r, const char *key)
{
	size_t n = SIZE_MAX;
	if (r->full != SIZE_MAX)
		n = mk_jsondoc_get(c->doc, r->full, key);
	if (n != SIZE_MAX || r->split)
		return n;
	if (!strcmp(key, "rope_theta"))
		return node_is(c, r->theta_top, MK_JSON_NULL) ? SIZE_MAX : r->theta_top;
	if (!strcmp(key, "original_max_position_embeddings"))
		return node_is(c, r->orig_top, MK_JSON_NULL) ? SIZE_MAX : r->orig_top;
	if (!strcmp(key, "rope_type") && r->full != SIZE_MAX)
		return mk_jsondoc_get(c->doc, r->full, "type");
	return SIZE_MAX;
}

static char *node_str(const struct cfg *c, size_t n)
{
	size_t len;
	if (!node_is(c, n, MK_JSON_STRING))
		return NULL;
	return mk_jsondoc_node_string(c->doc, n, &len);
}

static int need_int(const struct cfg *c, const char *const *keys, long long *v, struct mk_err *err)
{
	size_t n = cfg_find(c, keys);
	if (!node_int(c, n, v) || *v < 0 || *v > UINT32_MAX)
		return mk_err_set(err, MK_EFORMAT, "%s: %s must be a non-negative integer", c->label, keys[0]);
	return 0;
}

/* Optional key: 1 and the value, 0 when absent or null. */
static int opt_int(const struct cfg *c, size_t n, long long *v, const char *what, struct mk_err *err)
{
	if (n == SIZE_MAX || node_is(c, n, MK_JSON_NULL))
		return 0;
	if (!node_int(c, n, v) || *v < 0 || *v > UINT32_MAX)
		return mk_err_set(err, MK_EFORMAT, "%s: %s must be a non-negative integer", c->label, what);
	return 1;
}

static int opt_num(const struct cfg *c, size_t n, double *v, const char *what, struct mk_err *err)
{
	if (n == SIZE_MAX || node_is(c, n, MK_JSON_NULL))
		return 0;
	if (!node_num(c, n, v))
		return mk_err_set(err, MK_EFORMAT, "%s: %s must be a number", c->label, what);
	return 1;
}

#define TRY(x) do { int rc_ = (x); if (rc_ < 0) { rc = rc_ == -1 ? mk_err_set(err, MK_ENOMEM, "out of memory") : rc_; goto out; } } while (0)

/* TextModel.set_gguf_parameters: the keys every text model gets. */
static int base_params(struct kvs *k, const struct cfg *c, const struct rope *r, int file_type,
		       struct mk_err *err)
{
	long long v;
	double d;
	int rc = 0, got;
	char *s = NULL;

	TRY(need_int(c, K_LAYERS, &v, err));
	TRY(put_u32(k, "%s.block_count", (uint32_t)v));
	TRY(got = opt_int(c, cfg_find(c, K_CTX), &v, "max_position_embeddings", err));
	if (got)
		TRY(put_u32(k, "%s.context_length", (uint32_t)v));
	TRY(got = opt_int(c, cfg_find(c, K_EMBD), &v, "hidden_size", err));
	if (got)
		TRY(put_u32(k, "%s.embedding_length", (uint32_t)v));
	TRY(got = opt_int(c, cfg_find(c, K_FF), &v, "intermediate_size", err));
	if (got)
		TRY(put_u32(k, "%s.feed_forward_length", (uint32_t)v));
	TRY(got = opt_int(c, cfg_find(c, K_HEAD), &v, "num_attention_heads", err));
	if (got)
		TRY(put_u32(k, "%s.attention.head_count", (uint32_t)v));
	TRY(got = opt_int(c, cfg_find(c, K_HEAD_KV), &v, "num_key_value_heads", err));
	if (got)
		TRY(put_u32(k, "%s.attention.head_count_kv", (uint32_t)v));
	if (node_is(c, cfg_get(c, "is_causal"), MK_JSON_FALSE)) {
		char b[96];
		struct kv *e = kv_slot(k, kname(k, "%s.attention.causal", b, sizeof b), MK_GGUF_V_BOOL);
		TRY(e ? 0 : -1);
		e->v.b = false;
	}
	size_t tn = rope_get(c, r, "rope_type");
	if (tn != SIZE_MAX && !node_is(c, tn, MK_JSON_NULL)) {
		if (!(s = node_str(c, tn)))
			TRY(mk_err_set(err, MK_EFORMAT, "%s: rope_type must be a string", c->label));
		double factor;
		TRY(got = opt_num(c, rope_get(c, r, "factor"), &factor, "rope factor", err));
		if (!strcmp(s, "linear") && got) {
			TRY(put_str(k, "%s.rope.scaling.type", "linear"));
			TRY(put_f32(k, "%s.rope.scaling.factor", factor));
		} else if (!strcmp(s, "yarn") && got) {
			TRY(put_str(k, "%s.rope.scaling.type", "yarn"));
			TRY(put_f32(k, "%s.rope.scaling.factor", factor));
			if (opt_int(c, rope_get(c, r, "original_max_position_embeddings"), &v,
				    "original_max_position_embeddings", err) != 1)
				TRY(mk_err_set(err, MK_EFORMAT, "%s: yarn rope scaling needs an integer "
					       "original_max_position_embeddings", c->label));
			TRY(put_u32(k, "%s.rope.scaling.original_context_length", (uint32_t)v));
			static const struct { const char *hf, *alt, *gguf; } yarn[] = {
				{ "extrapolation_factor", NULL, "%s.rope.scaling.yarn_ext_factor" },
				{ "attention_factor", "attn_factor", "%s.rope.scaling.yarn_attn_factor" },
				{ "beta_fast", NULL, "%s.rope.scaling.yarn_beta_fast" },
				{ "beta_slow", NULL, "%s.rope.scaling.yarn_beta_slow" },
			};
			for (size_t i = 0; i < sizeof yarn / sizeof yarn[0]; i++) {
				size_t n = rope_get(c, r, yarn[i].hf);
				if (n == SIZE_MAX && yarn[i].alt)
					n = rope_get(c, r, yarn[i].alt);
				TRY(got = opt_num(c, n, &d, yarn[i].hf, err));
				if (got)
					TRY(put_f32(k, yarn[i].gguf, d));
			}
		} else if (!strcmp(s, "su") || !strcmp(s, "longrope")) {
			TRY(put_str(k, "%s.rope.scaling.type", "longrope"));
		} else if (!strcmp(s, "dynamic") || !strcasecmp(s, "llama3") || !strcmp(s, "default")) {
			/* dynamic: model-specific; llama3: rope_freqs.weight; default: none */
		} else if (strcmp(s, "linear") && strcmp(s, "yarn")) {
			TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: rope_type \"%s\" is not one convert_hf_to_gguf.py "
				       "knows (linear, yarn, longrope, llama3)", c->label, s));
		}
		free(s);
		s = NULL;
	}
	if (cfg_get(c, "mrope_section") != SIZE_MAX ||
	    (r->obj != SIZE_MAX && mk_jsondoc_get(c->doc, r->obj, "mrope_section") != SIZE_MAX))
		TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: mrope_section (multimodal rope) is not covered", c->label));
	TRY(got = opt_num(c, rope_get(c, r, "rope_theta"), &d, "rope_theta", err));
	if (got)
		TRY(put_f32(k, "%s.rope.freq_base", d));
	{
		size_t n = SIZE_MAX;
		if (r->obj != SIZE_MAX) {
			size_t sa = mk_jsondoc_get(c->doc, r->obj, "sliding_attention");
			if (node_is(c, sa, MK_JSON_OBJECT))
				n = mk_jsondoc_get(c->doc, sa, "rope_theta");
		}
		if (!r->split && !node_is(c, r->local_theta_top, MK_JSON_NULL))
			n = r->local_theta_top;
		TRY(got = opt_num(c, n, &d, "local rope_theta", err));
		if (got)
			TRY(put_f32(k, "%s.rope.freq_base_swa", d));
	}
	TRY(got = opt_num(c, cfg_find(c, K_RMS), &d, "rms_norm_eps", err));
	if (got)
		TRY(put_f32(k, "%s.attention.layer_norm_rms_epsilon", d));
	TRY(got = opt_num(c, cfg_find(c, K_LN), &d, "layer_norm_eps", err));
	if (got)
		TRY(put_f32(k, "%s.attention.layer_norm_epsilon", d));
	if (!node_is(c, cfg_find(c, K_EXPERTS), MK_JSON_NULL) && cfg_find(c, K_EXPERTS) != SIZE_MAX)
		TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: mixture-of-experts models are not covered", c->label));
	if (cfg_get(c, "n_group") != SIZE_MAX && !node_is(c, cfg_get(c, "n_group"), MK_JSON_NULL))
		TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: expert groups (n_group) are not covered", c->label));
	TRY(got = opt_int(c, cfg_get(c, "head_dim"), &v, "head_dim", err));
	if (got) {
		TRY(put_u32(k, "%s.attention.key_length", (uint32_t)v));
		TRY(put_u32(k, "%s.attention.value_length", (uint32_t)v));
	}
	TRY(put_u32(k, "general.file_type", (uint32_t)file_type));
out:
	free(s);
	return rc;
}

/* Each architecture's own keys after (or instead of) the base's. */
static int arch_params(struct kvs *k, const struct cfg *c, const struct rope *r, const char *arch,
		       int file_type, struct mk_err *err)
{
	long long v;
	double d;
	int rc = 0, got;

	if (!strcmp(arch, "llama")) {
		TRY(base_params(k, c, r, file_type, err));
		long long n_embd, n_head;
		TRY(got = opt_int(c, cfg_get(c, "vocab_size"), &v, "vocab_size", err));
		if (!got)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: llama needs vocab_size", c->label));
		TRY(put_u32(k, "%s.vocab_size", (uint32_t)v));
		TRY(got = opt_int(c, cfg_get(c, "head_dim"), &v, "head_dim", err));
		if (!got) {
			static const char *const e[] = { "hidden_size", NULL }, *const h[] = { "num_attention_heads", NULL };
			TRY(need_int(c, e, &n_embd, err));
			TRY(need_int(c, h, &n_head, err));
			if (!n_head)
				TRY(mk_err_set(err, MK_EFORMAT, "%s: num_attention_heads is 0", c->label));
			v = n_embd / n_head;
		}
		TRY(put_u32(k, "%s.rope.dimension_count", (uint32_t)v));
	} else if (!strcmp(arch, "qwen2") || !strcmp(arch, "qwen3")) {
		TRY(base_params(k, c, r, file_type, err));
		/* _try_set_pooling_type: embedding and classifier models only */
		size_t cp = cfg_get(c, "classifier_pooling");
		if (cp != SIZE_MAX && !node_is(c, cp, MK_JSON_NULL))
			TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: classifier_pooling (a classifier's pooling key) "
				       "is not covered", c->label));
	} else if (!strcmp(arch, "gemma2")) {
		static const char *const ctx[] = { "max_position_embeddings", NULL },
			*const emb[] = { "hidden_size", NULL }, *const ff[] = { "intermediate_size", NULL },
			*const hd[] = { "num_attention_heads", NULL }, *const hk[] = { "num_key_value_heads", NULL },
			*const hdim[] = { "head_dim", NULL }, *const sw[] = { "sliding_window", NULL };
		long long nh;
		TRY(need_int(c, ctx, &v, err));
		TRY(put_u32(k, "%s.context_length", (uint32_t)v));
		TRY(need_int(c, emb, &v, err));
		TRY(put_u32(k, "%s.embedding_length", (uint32_t)v));
		TRY(need_int(c, K_LAYERS, &v, err));
		TRY(put_u32(k, "%s.block_count", (uint32_t)v));
		TRY(need_int(c, ff, &v, err));
		TRY(put_u32(k, "%s.feed_forward_length", (uint32_t)v));
		TRY(need_int(c, hd, &nh, err));
		TRY(put_u32(k, "%s.attention.head_count", (uint32_t)nh));
		if (cfg_get(c, "num_key_value_heads") != SIZE_MAX)
			TRY(need_int(c, hk, &v, err));
		else
			v = nh;
		TRY(put_u32(k, "%s.attention.head_count_kv", (uint32_t)v));
		if (opt_num(c, cfg_get(c, "rms_norm_eps"), &d, "rms_norm_eps", err) != 1)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: gemma2 needs rms_norm_eps", c->label));
		TRY(put_f32(k, "%s.attention.layer_norm_rms_epsilon", d));
		TRY(need_int(c, hdim, &v, err));
		TRY(put_u32(k, "%s.attention.key_length", (uint32_t)v));
		TRY(put_u32(k, "%s.attention.value_length", (uint32_t)v));
		TRY(put_u32(k, "general.file_type", (uint32_t)file_type));
		if (opt_num(c, cfg_get(c, "attn_logit_softcapping"), &d, "attn_logit_softcapping", err) != 1)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: gemma2 needs attn_logit_softcapping", c->label));
		TRY(put_f32(k, "%s.attn_logit_softcapping", d));
		if (opt_num(c, cfg_get(c, "final_logit_softcapping"), &d, "final_logit_softcapping", err) != 1)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: gemma2 needs final_logit_softcapping", c->label));
		TRY(put_f32(k, "%s.final_logit_softcapping", d));
		TRY(need_int(c, sw, &v, err));
		TRY(put_u32(k, "%s.attention.sliding_window", (uint32_t)v));
	} else if (!strcmp(arch, "gemma3")) {
		TRY(base_params(k, c, r, file_type, err));
		TRY(got = opt_int(c, cfg_get(c, "max_position_embeddings"), &v, "max_position_embeddings", err));
		TRY(put_u32(k, "%s.context_length", got ? (uint32_t)v : 131072));
		TRY(got = opt_int(c, cfg_get(c, "num_attention_heads"), &v, "num_attention_heads", err));
		TRY(put_u32(k, "%s.attention.head_count", got ? (uint32_t)v : 8));
		TRY(got = opt_num(c, cfg_get(c, "rms_norm_eps"), &d, "rms_norm_eps", err));
		TRY(put_f32(k, "%s.attention.layer_norm_rms_epsilon", got ? d : 1e-6));
		TRY(got = opt_int(c, cfg_get(c, "head_dim"), &v, "head_dim", err));
		TRY(put_u32(k, "%s.attention.key_length", got ? (uint32_t)v : 256));
		TRY(put_u32(k, "%s.attention.value_length", got ? (uint32_t)v : 256));
		TRY(got = opt_num(c, rope_get(c, r, "rope_theta"), &d, "rope_theta", err));
		TRY(put_f32(k, "%s.rope.freq_base", got ? d : 1000000.0));
		size_t n = cfg_get(c, "attn_logit_softcapping");
		if (n != SIZE_MAX && !node_is(c, n, MK_JSON_NULL))
			TRY(mk_err_set(err, MK_EFORMAT, "%s: gemma3 has no attn_logit_softcapping", c->label));
		TRY(got = opt_num(c, cfg_get(c, "final_logit_softcapping"), &d, "final_logit_softcapping", err));
		if (got && d != 0)
			TRY(put_f32(k, "%s.final_logit_softcapping", d));
		long long pat = 0;
		size_t pn = cfg_get(c, "sliding_window_pattern");
		if (!(node_int(c, pn, &pat) && pat == 1)) {
			static const char *const sw[] = { "sliding_window", NULL };
			TRY(need_int(c, sw, &v, err));
			TRY(put_u32(k, "%s.attention.sliding_window", (uint32_t)v));
		}
		TRY(got = opt_int(c, cfg_get(c, "num_key_value_heads"), &v, "num_key_value_heads", err));
		TRY(put_u32(k, "%s.attention.head_count_kv", got ? (uint32_t)v : 4));
	} else if (!strcmp(arch, "phi3")) {
		static const char *const emb[] = { "hidden_size", "n_embd", NULL },
			*const hd[] = { "num_attention_heads", "n_head", NULL },
			*const hk[] = { "num_key_value_heads", "n_head_kv", NULL },
			*const ctx[] = { "n_positions", "max_position_embeddings", NULL },
			*const ff[] = { "intermediate_size", NULL };
		long long n_embd, n_head, orig;
		TRY(need_int(c, emb, &n_embd, err));
		TRY(need_int(c, hd, &n_head, err));
		if (!n_head)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: num_attention_heads is 0", c->label));
		if (opt_int(c, rope_get(c, r, "original_max_position_embeddings"), &orig,
			    "original_max_position_embeddings", err) != 1)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: phi3 needs original_max_position_embeddings", c->label));
		double pct = 1.0;
		TRY(got = opt_num(c, rope_get(c, r, "partial_rotary_factor"), &pct, "partial_rotary_factor", err));
		if (!got)
			pct = 1.0;
		long long rope_dims = (long long)(pct * (double)n_embd) / n_head;
		TRY(need_int(c, ctx, &v, err));
		TRY(put_u32(k, "%s.context_length", (uint32_t)v));
		TRY(put_u32(k, "%s.rope.scaling.original_context_length", (uint32_t)orig));
		TRY(put_u32(k, "%s.embedding_length", (uint32_t)n_embd));
		TRY(need_int(c, ff, &v, err));
		TRY(put_u32(k, "%s.feed_forward_length", (uint32_t)v));
		TRY(need_int(c, K_LAYERS, &v, err));
		TRY(put_u32(k, "%s.block_count", (uint32_t)v));
		TRY(put_u32(k, "%s.attention.head_count", (uint32_t)n_head));
		TRY(need_int(c, hk, &v, err));
		TRY(put_u32(k, "%s.attention.head_count_kv", (uint32_t)v));
		if (opt_num(c, cfg_get(c, "rms_norm_eps"), &d, "rms_norm_eps", err) != 1)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: phi3 needs rms_norm_eps", c->label));
		TRY(put_f32(k, "%s.attention.layer_norm_rms_epsilon", d));
		TRY(put_u32(k, "%s.rope.dimension_count", (uint32_t)rope_dims));
		if (opt_num(c, rope_get(c, r, "rope_theta"), &d, "rope_theta", err) != 1)
			TRY(mk_err_set(err, MK_EFORMAT, "%s: phi3 needs rope_theta", c->label));
		TRY(put_f32(k, "%s.rope.freq_base", d));
		TRY(put_u32(k, "general.file_type", (uint32_t)file_type));
		TRY(got = opt_int(c, cfg_get(c, "sliding_window"), &v, "sliding_window", err));
		TRY(put_u32(k, "%s.attention.sliding_window", got ? (uint32_t)v : 0));
	} else {
		TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: the GGUF keys of architecture %s are not covered",
			       c->label, arch));
	}
out:
	return rc;
}

/* ------------------------------------------------------------ hparams */

/* A list of numbers as floats (malloc'ed). */
static int float_list(const struct cfg *c, size_t n, float **out, size_t *len, const char *what,
		      struct mk_err *err)
{
	*out = NULL;
	*len = 0;
	if (!node_is(c, n, MK_JSON_ARRAY))
		return mk_err_set(err, MK_EFORMAT, "%s: %s must be a list of numbers", c->label, what);
	size_t cnt = mk_jsondoc_count(c->doc, n), i = 0;
	float *a = malloc((cnt ? cnt : 1) * sizeof *a);
	if (!a)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t it = mk_jsondoc_first(c->doc, n); it != SIZE_MAX; it = mk_jsondoc_next(c->doc, it)) {
		double d;
		if (!node_num(c, it, &d)) {
			free(a);
			return mk_err_set(err, MK_EFORMAT, "%s: %s must be a list of numbers", c->label, what);
		}
		a[i++] = (float)d;
	}
	*out = a;
	*len = cnt;
	return 0;
}

/* phi3's long rope (convert's generate_extra_tensors): with long_factor,
 * rope_factors_long/short.weight and the rope.scaling.attn_factor key. */
static int phi3_rope(const struct cfg *c, const struct rope *r, struct mk_gguf_hparams *hp, struct mk_err *err)
{
	size_t ln = rope_get(c, r, "long_factor");
	if (ln == SIZE_MAX || node_is(c, ln, MK_JSON_NULL) ||
	    (node_is(c, ln, MK_JSON_ARRAY) && mk_jsondoc_count(c->doc, ln) == 0))
		return 0;
	static const char *const ctx[] = { "n_positions", "max_position_embeddings", NULL };
	long long max_pos, orig;
	double pct = 1.0;
	int rc;
	if ((rc = need_int(c, ctx, &max_pos, err)) < 0)
		return rc;
	if (opt_int(c, rope_get(c, r, "original_max_position_embeddings"), &orig,
		    "original_max_position_embeddings", err) != 1 || orig == 0)
		return mk_err_set(err, MK_EFORMAT, "%s: phi3 needs original_max_position_embeddings", c->label);
	if (opt_num(c, rope_get(c, r, "partial_rotary_factor"), &pct, "partial_rotary_factor", err) != 1)
		pct = 1.0;
	char *type = node_str(c, rope_get(c, r, "rope_type"));
	if (!type || !*type) {
		free(type);
		return mk_err_set(err, MK_EFORMAT, "%s: phi3's long rope needs rope_scaling.type", c->label);
	}
	for (char *q = type; *q; q++)
		*q = (char)tolower((unsigned char)*q);
	double scale = (double)max_pos / (double)orig;
	if (!strcmp(type, "su") || !strcmp(type, "longrope"))
		hp->rope_attn_factor = scale > 1.0 ? sqrt(1 + log(scale) / log((double)orig)) : 1.0;
	else if (!strcmp(type, "yarn"))
		hp->rope_attn_factor = scale > 1.0 ? 0.1 * log(scale) + 1.0 : 1.0;
	else
		rc = mk_err_set(err, MK_EUNSUPPORTED, "%s: phi3 rope scaling type %s is not one convert knows "
				"(longrope, su, yarn)", c->label, type);
	free(type);
	if (rc < 0)
		return rc;
	size_t nl, ns;
	if ((rc = float_list(c, ln, &hp->rope_long, &nl, "rope_scaling.long_factor", err)) < 0)
		return rc;
	if ((rc = float_list(c, rope_get(c, r, "short_factor"), &hp->rope_short, &ns, "rope_scaling.short_factor",
			     err)) < 0)
		return rc;
	long long rope_dims = (long long)(pct * (double)hp->n_embd) / (hp->n_head ? hp->n_head : 1);
	if (nl != ns || 2 * (long long)nl != rope_dims)
		return mk_err_set(err, MK_EFORMAT, "%s: rope long and short factors must be %lld each, not %zu and "
				  "%zu", c->label, rope_dims / 2, nl, ns);
	hp->phi3_longrope = true;
	hp->n_rope_factors = nl;
	return 0;
}

int mk_gguf_hparams_read(const char *dir, struct mk_gguf_hparams *hp, struct mk_err *err)
{
	struct cfg c;
	struct rope r;
	long long v;
	double d;
	int rc;
	char *s = NULL;

	memset(hp, 0, sizeof *hp);
	if ((rc = cfg_open(&c, dir, "config.json", true, err)) < 0)
		return rc;
	rc = 0;
	size_t an = mk_jsondoc_get(c.doc, c.root, "architectures");
	size_t a0 = node_is(&c, an, MK_JSON_ARRAY) ? mk_jsondoc_first(c.doc, an) : SIZE_MAX;
	if (!(s = node_str(&c, a0)))
		TRY(mk_err_set(err, MK_EFORMAT, "%s: no architectures[0]; convert_hf_to_gguf.py picks the "
			       "model class by it", c.label));
	const char *arch = mk_gguf_arch_for_hf(s);
	if (!arch)
		TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: architecture %s is not one mk writes as GGUF "
			       "(LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
			       "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM)", c.label, s));
	snprintf(hp->arch, sizeof hp->arch, "%s", arch);
	snprintf(hp->hf_arch, sizeof hp->hf_arch, "%s", s);
	TRY(need_int(&c, K_LAYERS, &v, err));
	hp->n_layer = (unsigned)v;
	TRY(need_int(&c, K_HEAD, &v, err));
	hp->n_head = (unsigned)v;
	if (opt_int(&c, cfg_find(&c, K_HEAD_KV), &v, "num_key_value_heads", err) == 1)
		hp->n_head_kv = (unsigned)v;
	else
		hp->n_head_kv = hp->n_head;
	TRY(need_int(&c, K_EMBD, &v, err));
	hp->n_embd = (unsigned)v;
	if (opt_int(&c, cfg_get(&c, "head_dim"), &v, "head_dim", err) == 1)
		hp->head_dim = (unsigned)v;
	else if (hp->n_head)
		hp->head_dim = hp->n_embd / hp->n_head;
	if (opt_int(&c, cfg_get(&c, "vocab_size"), &v, "vocab_size", err) == 1)
		hp->vocab_size = (unsigned long long)v;
	hp->permute_qk = !strcmp(arch, "llama");
	rope_read(&c, &r);
	free(s);
	s = NULL;
	size_t tn = rope_get(&c, &r, "rope_type");
	if ((s = node_str(&c, tn)) && !strcasecmp(s, "llama3") && !strcmp(arch, "llama")) {
		static const struct { const char *key; double def; } f[] = {
			{ "rope_theta", 10000.0 }, { "factor", 8.0 }, { "low_freq_factor", 1.0 },
			{ "high_freq_factor", 4.0 }, { "original_max_position_embeddings", 8192 },
		};
		float *dst[] = { &hp->rope_theta, &hp->rope_factor, &hp->rope_low_freq, &hp->rope_high_freq,
				 &hp->rope_orig_ctx };
		hp->llama3_rope = true;
		for (int i = 0; i < 5; i++) {
			int got;
			TRY(got = opt_num(&c, rope_get(&c, &r, f[i].key), &d, f[i].key, err));
			*dst[i] = (float)(got ? d : f[i].def);
		}
	}
	if (!strcmp(arch, "phi3") && (rc = phi3_rope(&c, &r, hp, err)) < 0)
		goto out;
out:
	free(s);
	cfg_close(&c);
	return rc;
}

void mk_gguf_hparams_clear(struct mk_gguf_hparams *hp)
{
	free(hp->rope_long);
	free(hp->rope_short);
	memset(hp, 0, sizeof *hp);
}

int mk_gguf_extra_tensors(const struct mk_gguf_hparams *hp, struct mk_gguf_extra **out, size_t *n,
			  struct mk_err *err)
{
	struct mk_gguf_extra *x = calloc(2, sizeof *x);
	*out = NULL;
	*n = 0;
	if (!x)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (hp->llama3_rope) {
		x[0].n = hp->head_dim / 2;
		snprintf(x[0].name, sizeof x[0].name, "rope_freqs.weight");
		if (!(x[0].v = malloc((x[0].n ? x[0].n : 1) * sizeof(float)))) {
			free(x);
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		mk_gguf_llama3_rope_freqs(hp->head_dim, hp->rope_theta, hp->rope_factor, hp->rope_low_freq,
					  hp->rope_high_freq, hp->rope_orig_ctx, x[0].v);
		*n = 1;
	} else if (hp->phi3_longrope) {
		const float *src[2] = { hp->rope_long, hp->rope_short };
		static const char *const names[2] = { "rope_factors_long.weight", "rope_factors_short.weight" };
		for (int i = 0; i < 2; i++) {
			x[i].n = hp->n_rope_factors;
			snprintf(x[i].name, sizeof x[i].name, "%s", names[i]);
			if (!(x[i].v = malloc((x[i].n ? x[i].n : 1) * sizeof(float)))) {
				mk_gguf_extra_free(x, 2);
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			}
			memcpy(x[i].v, src[i], x[i].n * sizeof(float));
		}
		*n = 2;
	}
	*out = x;
	return 0;
}

void mk_gguf_extra_free(struct mk_gguf_extra *x, size_t n)
{
	for (size_t i = 0; x && i < n; i++)
		free(x[i].v);
	free(x);
}

/* ------------------------------------------------------- model name */

static pcre2_code *re_compile(const char *pat)
{
	int e;
	PCRE2_SIZE off;
	return pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
			     PCRE2_UTF | PCRE2_UCP | PCRE2_CASELESS | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
			     &e, &off, NULL);
}

static bool re_full(pcre2_code *re, const char *s)
{
	pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
	if (!md)
		return false;
	int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
	pcre2_match_data_free(md);
	return rc >= 0;
}

enum { T_BASENAME = 1, T_SIZE = 2, T_FINETUNE = 4, T_VERSION = 8, T_TYPE = 16 };

static char *join(char **parts, const int *types, size_t n, int want, int unless, bool dedup)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++)
		len += strlen(parts[i]) + 1;
	char *o = malloc(len + 1);
	if (!o)
		return NULL;
	o[0] = 0;
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		if (!(types[i] & want) || (types[i] & unless))
			continue;
		if (dedup) {
			bool seen = false;
			for (size_t j = 0; j < i; j++)
				if ((types[j] & want) && !(types[j] & unless) && !strcmp(parts[j], parts[i]))
					seen = true;
			if (seen)
				continue;
		}
		if (any)
			strcat(o, "-");
		strcat(o, parts[i]);
		any = true;
	}
	if (!any) {
		free(o);
		return NULL;
	}
	return o;
}

static bool all_alpha(const char *s)
{
	/* Python's str.isalpha on ASCII; other bytes count as letters */
	if (!*s)
		return false;
	for (; *s; s++)
		if (!((unsigned char)*s >= 0x80 || isalpha((unsigned char)*s)))
			return false;
	return true;
}

int mk_gguf_model_id_parse(const char *id, uint64_t n_params, struct mk_gguf_model_id *m,
			   struct mk_err *err)
{
	memset(m, 0, sizeof *m);
	if (!id)
		return 0;
	if (strchr(id, ' ')) {
		if (!(m->name = strdup(id)))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		return 0;
	}
	const char *slash = strchr(id, '/');
	const char *full = slash ? slash + 1 : id;
	if (slash && id[0] != '.') {
		m->org = strndup(id, (size_t)(slash - id));
		if (!m->org)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (!(m->name = strdup(full)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");

	size_t cap = strlen(full) / 2 + 2, n = 0;
	char **parts = calloc(cap, sizeof *parts);
	int *types = calloc(cap, sizeof *types);
	pcre2_code *re_ver = re_compile("(v|iter)?\\d+([.]\\d+)*");
	pcre2_code *re_type = re_compile("i?q\\d(_\\w)*|b?fp?(16|32)");
	pcre2_code *re_size = re_compile("(([A]|\\d+[x])?\\d+([._]\\d+)?[KMBT][\\d]?|small|mini|medium|large|x?xl)");
	pcre2_code *re_ft = re_compile("chat|instruct|vision|lora");
	int rc = 0;
	if (!parts || !types || !re_ver || !re_type || !re_size || !re_ft) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (const char *p = full; ; ) {
		const char *e = strchr(p, '-');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (l) {
			if (!(parts[n] = malloc(l + 8))) {   /* room for a "." */
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			memcpy(parts[n], p, l);
			parts[n][l] = 0;
			n++;
		}
		if (!e)
			break;
		p = e + 1;
	}
	for (size_t i = 0; i < n; i++) {
		char *part = parts[i];
		if (re_full(re_ver, part)) {
			types[i] |= T_VERSION;
		} else if (re_full(re_type, part)) {
			types[i] |= T_TYPE;
			for (char *q = part; *q; q++)
				*q = (char)toupper((unsigned char)*q);
		} else if (i > 0 && re_full(re_size, part)) {
			for (char *q = part; *q; q++)
				if (*q == '_')
					*q = '.';
			size_t l = strlen(part);
			if (isdigit((unsigned char)part[l - 1]) && l >= 2) {
				/* bloom-7b1: "7.1b" */
				char last = part[l - 1], prev = part[l - 2];
				part[l - 2] = '.';
				part[l - 1] = last;
				part[l] = prev;
				part[l + 1] = 0;
				l++;
			}
			if (l > 1 && isdigit((unsigned char)part[l - 2]) && strchr("kmbt", part[l - 1]))
				part[l - 1] = (char)toupper((unsigned char)part[l - 1]);
			if (n_params != 0) {
				char num[64];
				char *endp;
				snprintf(num, sizeof num, "%.*s", (int)(l - 1), part);
				double x = strtod(num, &endp);
				bool ok = l > 1 && endp != num && *endp == 0 && !isspace((unsigned char)num[0]);
				if (ok) {
					const char *sc = " KMBT";
					const char *f = strchr(sc, part[l - 1]);
					double mul = f && part[l - 1] ? pow(1000, (double)(f - sc)) : 0.001;
					double label = x * mul;
					double total = (double)n_params;
					if (fabs(label - total) > (double)(7 * n_params / 8)) {
						types[i] |= T_FINETUNE;
						part[l - 1] = (char)tolower((unsigned char)part[l - 1]);
					}
				}
			}
			if (!types[i])
				types[i] |= T_SIZE;
		} else if (i > 0 && re_full(re_ft, part)) {
			types[i] |= T_FINETUNE;
		}
	}
	bool numeric_size = false;
	for (size_t i = 0; i < n; i++)
		if (types[i] & T_SIZE)
			for (const char *q = parts[i]; *q; q++)
				if (isdigit((unsigned char)*q))
					numeric_size = true;
	if (numeric_size)
		for (size_t i = 0; i < n; i++)
			if ((types[i] & T_SIZE) && all_alpha(parts[i]))
				types[i] &= ~T_SIZE;
	bool at_start = true;
	for (size_t i = 0; i < n; i++) {
		if (at_start && ((!types[i] && (isalpha((unsigned char)parts[i][0]) ||
						(unsigned char)parts[i][0] >= 0x80)) || (types[i] & T_VERSION))) {
			types[i] |= T_BASENAME;
		} else {
			at_start = false;
			if (!types[i])
				types[i] |= T_FINETUNE;
		}
	}
	for (size_t i = n; i-- > 0; ) {
		if ((types[i] & T_BASENAME) && types[i] != T_BASENAME)
			types[i] &= ~T_BASENAME;
		else
			break;
	}
	m->basename = join(parts, types, n, T_BASENAME, 0, false);
	m->size_label = join(parts, types, n, T_SIZE, 0, true);
	m->finetune = join(parts, types, n, T_FINETUNE, 0, false);
	m->version = join(parts, types, n, T_VERSION, T_BASENAME, false);
	if (!m->size_label && !m->finetune && !m->version) {
		free(m->basename);
		m->basename = NULL;
	}
out:
	for (size_t i = 0; parts && i < n; i++)
		free(parts[i]);
	free(parts);
	free(types);
	pcre2_code_free(re_ver);
	pcre2_code_free(re_type);
	pcre2_code_free(re_size);
	pcre2_code_free(re_ft);
	return rc;
}

void mk_gguf_model_id_clear(struct mk_gguf_model_id *m)
{
	free(m->name);
	free(m->org);
	free(m->basename);
	free(m->finetune);
	free(m->version);
	free(m->size_label);
	memset(m, 0, sizeof *m);
}

/* ^(v\d+(?:\.\d+)*|\d.*)$ on a word */
static bool title_keeps(const char *w, size_t l)
{
	if (l && isdigit((unsigned char)w[0]))
		return true;
	if (l < 2 || w[0] != 'v' || !isdigit((unsigned char)w[1]))
		return false;
	size_t i = 1;
	while (i < l) {
		if (!isdigit((unsigned char)w[i]))
			return false;
		while (i < l && isdigit((unsigned char)w[i]))
			i++;
		if (i == l)
			return true;
		if (w[i] != '.' || i + 1 >= l || !isdigit((unsigned char)w[i + 1]))
			return false;
		i++;
	}
	return true;
}

char *mk_gguf_id_to_title(const char *s)
{
	size_t n = strlen(s);
	char *o = malloc(n + 1), *w = o;
	if (!o)
		return NULL;
	const char *p = s;
	bool first = true;
	for (;;) {
		while (*p && (isspace((unsigned char)*p) || *p == '-'))
			p++;
		if (!*p)
			break;
		const char *b = p;
		while (*p && !isspace((unsigned char)*p) && *p != '-')
			p++;
		size_t l = (size_t)(p - b);
		bool has_lower = false, has_upper = false;
		for (size_t i = 0; i < l; i++) {
			has_lower |= islower((unsigned char)b[i]) != 0;
			has_upper |= isupper((unsigned char)b[i]) != 0;
		}
		bool title = has_lower && !has_upper && !title_keeps(b, l);
		if (!first)
			*w++ = ' ';
		first = false;
		bool prev_cased = false;
		for (size_t i = 0; i < l; i++) {
			unsigned char ch = (unsigned char)b[i];
			if (title && isalpha(ch)) {
				*w++ = (char)(prev_cased ? tolower(ch) : toupper(ch));
				prev_cased = true;
			} else {
				*w++ = (char)ch;
				prev_cased = title ? false : prev_cased;
			}
		}
	}
	*w = 0;
	return o;
}

void mk_gguf_size_label(uint64_t n_params, char *buf, size_t cap)
{
	double x = (double)n_params, scaled;
	char suffix;

	if (x > 1e12) {
		scaled = x * 1e-12;
		suffix = 'T';
	} else if (x > 1e9) {
		scaled = x * 1e-9;
		suffix = 'B';
	} else if (x > 1e6) {
		scaled = x * 1e-6;
		suffix = 'M';
	} else {
		scaled = x * 1e-3;
		suffix = 'K';
	}
	char r[64];
	snprintf(r, sizeof r, "%.0f", nearbyint(scaled));
	const char *q = r;
	while (*q == '0')
		q++;
	int fix = 2 - (int)strlen(q);
	if (fix < 0)
		fix = 0;
	snprintf(buf, cap, "%.*f%c", fix, scaled, suffix);
}

/* ------------------------------------------------------------ the keys */

static int sampling(struct kvs *k, const char *dir, struct mk_err *err)
{
	struct cfg g;
	int rc = cfg_open(&g, dir, "generation_config.json", false, err);
	if (rc <= 0) {
		/* convert skips a generation_config.json it cannot read */
		if (rc < 0)
			mk_err_clear(err);
		return 0;
	}
	rc = 0;
	static const struct { const char *hf, *alt, *key; int vt; } s[] = {
		{ "sequence", NULL, "general.sampling.sequence", MK_GGUF_V_STRING },
		{ "top_k", NULL, "general.sampling.top_k", MK_GGUF_V_I32 },
		{ "top_p", NULL, "general.sampling.top_p", MK_GGUF_V_F32 },
		{ "min_p", NULL, "general.sampling.min_p", MK_GGUF_V_F32 },
		{ "xtc_probability", NULL, "general.sampling.xtc_probability", MK_GGUF_V_F32 },
		{ "xtc_threshold", NULL, "general.sampling.xtc_threshold", MK_GGUF_V_F32 },
		{ "temperature", NULL, "general.sampling.temp", MK_GGUF_V_F32 },
		{ "penalty_last_n", NULL, "general.sampling.penalty_last_n", MK_GGUF_V_I32 },
		{ "penalty_repeat", "repetition_penalty", "general.sampling.penalty_repeat", MK_GGUF_V_F32 },
		{ "mirostat", NULL, "general.sampling.mirostat", MK_GGUF_V_I32 },
		{ "mirostat_tau", NULL, "general.sampling.mirostat_tau", MK_GGUF_V_F32 },
		{ "mirostat_eta", NULL, "general.sampling.mirostat_eta", MK_GGUF_V_F32 },
	};
	for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
		size_t n = mk_jsondoc_get(g.doc, g.root, s[i].hf);
		if (n == SIZE_MAX && s[i].alt)
			n = mk_jsondoc_get(g.doc, g.root, s[i].alt);
		if (n == SIZE_MAX || node_is(&g, n, MK_JSON_NULL))
			continue;
		long long v = 0;
		double d = 0;
		char *str;
		switch (s[i].vt) {
		case MK_GGUF_V_STRING:
			if (!(str = node_str(&g, n)))
				TRY(mk_err_set(err, MK_EFORMAT, "%s: %s must be a string", g.label, s[i].hf));
			rc = put_str(k, s[i].key, str);
			free(str);
			TRY(rc);
			break;
		case MK_GGUF_V_I32:
			if (!node_int(&g, n, &v) || v < INT32_MIN || v > INT32_MAX)
				TRY(mk_err_set(err, MK_EFORMAT, "%s: %s must be a 32-bit integer", g.label, s[i].hf));
			TRY(put_i32(k, s[i].key, (int32_t)v));
			break;
		default:
			if (!node_num(&g, n, &d))
				TRY(mk_err_set(err, MK_EFORMAT, "%s: %s must be a number", g.label, s[i].hf));
			TRY(put_f32(k, s[i].key, d));
			break;
		}
	}
out:
	cfg_close(&g);
	return rc;
}

/* general.name and the rest of gguf-py's Metadata: README.md's front
 * matter first, then the heuristics on _name_or_path and the directory's
 * name for what is still missing; in set_gguf_meta_model's order. */
static int naming(struct kvs *k, const char *dir, const struct cfg *c, uint64_t n_params,
		  const char *name_override, const char *arch, struct mk_err *err)
{
	struct mk_gguf_model_id ids[2];
	struct mk_gguf_card card;
	int rc = 0;
	char *nop = node_str(c, mk_jsondoc_get(c->doc, c->root, "_name_or_path"));
	char path[4096], key[96];

	memset(ids, 0, sizeof ids);
	if ((rc = mk_gguf_card_read(dir, n_params, &card, err)) < 0) {
		free(nop);
		return rc;
	}
	if (nop) {
		size_t slashes = 0;
		for (const char *q = nop; *q; q++)
			slashes += *q == '/';
		if (slashes <= 1)
			TRY(mk_gguf_model_id_parse(nop, n_params, &ids[0], err));
	}
	/* the directory's name, as pathlib gives it: trailing slashes dropped */
	snprintf(path, sizeof path, "%s", dir);
	size_t l = strlen(path);
	while (l > 1 && path[l - 1] == '/')
		path[--l] = 0;
	while (l > 2 && !strcmp(path + l - 2, "/.")) {
		path[l -= 2] = 0;
		while (l > 1 && path[l - 1] == '/')
			path[--l] = 0;
	}
	const char *bn = strrchr(path, '/');
	bn = bn ? bn + 1 : path;
	if (!*bn || !strcmp(bn, ".") || !strcmp(bn, ".."))
		TRY(mk_err_set(err, MK_EINVAL, "%s: name the model directory by its path (not \"%s\"): "
			       "convert_hf_to_gguf.py takes general.name from it", dir, bn));
	TRY(mk_gguf_model_id_parse(bn, n_params, &ids[1], err));
	if (!strcmp(arch, "qwen3")) {
		/* convert turns a Qwen3 reranker into a rank-pooling model */
		bool rerank = false;
		const char *hints[] = { bn, nop };
		for (int i = 0; i < 2; i++)
			if (hints[i] && (strcasestr(hints[i], "qwen3-reranker") || strcasestr(hints[i], "qwen3-vl-reranker")))
				rerank = true;
		if (card.text && (strcasestr(card.text, "# qwen3-reranker") || strcasestr(card.text, "# qwen3-vl-reranker")))
			rerank = true;
		if (rerank)
			TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: a Qwen3 reranker (by its name or README.md): "
				       "convert writes it as a ranking model, which mk does not cover", dir));
	}
	for (int i = 0; i < 2; i++) {
		struct mk_gguf_model_id *m = &ids[i];
#define FIRST(dst, src) do { if (!(dst) && (src)) { (dst) = (src); (src) = NULL; } } while (0)
		if (!card.name && m->name)
			TRY((card.name = mk_gguf_id_to_title(m->name)) ? 0 : -1);
		if (!card.organization && m->org)
			TRY((card.organization = mk_gguf_id_to_title(m->org)) ? 0 : -1);
		FIRST(card.basename, m->basename);
		FIRST(card.finetune, m->finetune);
		FIRST(card.version, m->version);
		FIRST(card.size_label, m->size_label);
#undef FIRST
	}
	if (!card.name)
		TRY((card.name = strdup(bn)) ? 0 : -1);
	char lab[32];
	if (!card.size_label && n_params > 0) {
		mk_gguf_size_label(n_params, lab, sizeof lab);
		TRY((card.size_label = strdup(lab)) ? 0 : -1);
	}
	TRY(put_str(k, "general.name", name_override ? name_override : card.name));
	const struct { const char *key; const char *v; } one[] = {
		{ "general.author", card.author }, { "general.version", card.version },
		{ "general.organization", card.organization }, { "general.finetune", card.finetune },
		{ "general.basename", card.basename }, { "general.description", card.description },
		{ "general.size_label", card.size_label }, { "general.license", card.license },
		{ "general.license.name", card.license_name }, { "general.license.link", card.license_link },
		{ "general.source.url", card.source_url }, { "general.source.doi", card.source_doi },
		{ "general.source.uuid", card.source_uuid }, { "general.source.repo_url", card.source_repo_url },
	};
	for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
		if (one[i].v)
			TRY(put_str(k, one[i].key, one[i].v));
	static const char *const field[MK_GGUF_REF_N] = { "name", "author", "version", "organization",
		"description", "url", "doi", "uuid", "repo_url" };
	for (int kind = 0; kind < 2; kind++) {
		bool has = kind ? card.has_data : card.has_base;
		size_t n = kind ? card.ndata : card.nbase;
		const struct mk_gguf_card_ref *refs = kind ? card.data : card.base;
		const char *what = kind ? "dataset" : "base_model";
		if (!has)
			continue;
		snprintf(key, sizeof key, "general.%s.count", what);
		TRY(put_u32(k, key, (uint32_t)n));
		for (size_t i = 0; i < n; i++)
			for (int f = 0; f < MK_GGUF_REF_N; f++)
				if (refs[i].f[f]) {
					snprintf(key, sizeof key, "general.%s.%zu.%s", what, i, field[f]);
					TRY(put_str(k, key, refs[i].f[f]));
				}
	}
	const struct { const char *key; bool has; char **v; size_t n; } arr[] = {
		{ "general.tags", card.has_tags, card.tags, card.ntags },
		{ "general.languages", card.has_langs, card.langs, card.nlangs },
	};
	for (int i = 0; i < 2; i++)
		if (arr[i].has)
			TRY(put_strv(k, arr[i].key, arr[i].v, arr[i].n));
out:
	mk_gguf_model_id_clear(&ids[0]);
	mk_gguf_model_id_clear(&ids[1]);
	mk_gguf_card_clear(&card);
	free(nop);
	return rc;
}

int mk_gguf_meta_add(struct mk_gguf *g, const char *dir, int file_type, uint64_t n_params,
		     const char *name, struct mk_err *err)
{
	struct mk_gguf_hparams hp;
	struct cfg c;
	struct rope r;
	struct kvs k = { 0 };
	int rc;

	if (mk_gguf_n_kv(g) != 0)
		return mk_err_set(err, MK_EINVAL, "GGUF metadata: the file has keys already; the model's "
				  "keys come first");
	if ((rc = mk_gguf_hparams_read(dir, &hp, err)) < 0)
		return rc;
	if ((rc = cfg_open(&c, dir, "config.json", true, err)) < 0) {
		mk_gguf_hparams_clear(&hp);
		return rc;
	}
	rc = 0;
	k.arch = hp.arch;
	rope_read(&c, &r);
	if (!strcmp(hp.arch, "qwen2") || !strcmp(hp.arch, "qwen3")) {
		char mp[4096];
		struct stat st;
		snprintf(mp, sizeof mp, "%s/modules.json", dir);
		if (stat(mp, &st) == 0)
			TRY(mk_err_set(err, MK_EUNSUPPORTED, "%s: a sentence-transformers model (convert adds its "
				       "pooling type): not covered", mp));
	}
	TRY(put_str(&k, "general.architecture", hp.arch));
	/* phi3's attn factor is set while the tensors are prepared, before
	 * the rest of the metadata */
	if (hp.phi3_longrope)
		TRY(put_f32(&k, "%s.rope.scaling.attn_factor", hp.rope_attn_factor));
	TRY(put_str(&k, "general.type", "model"));
	TRY(sampling(&k, dir, err));
	TRY(naming(&k, dir, &c, n_params, name, hp.arch, err));
	TRY(arch_params(&k, &c, &r, hp.arch, file_type, err));
	TRY(put_u32(&k, "general.quantization_version", 2));
	TRY(kvs_flush(&k, g, err));
out:
	kvs_free(&k);
	cfg_close(&c);
	mk_gguf_hparams_clear(&hp);
	return rc;
}
