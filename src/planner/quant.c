/* quant.c - quantized checkpoints: the formats mk dequantizes while it
 * reads (block FP8, MXFP4), the others refused at plan time (quant.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "io/model.h"
#include "io/safetensors.h"
#include "stream/job.h"
#include "planner/quant.h"

#define DEQUANTIZE "mk merges unquantized weights only and would merge the stored numbers as if they were " \
	"weights; dequantize it to BF16 first (for example load it with transformers and save_pretrained it " \
	"without the quantization), as mergekit requires too"

/* Where config.json says a model is quantized. */
static const char *const config_keys[] = {
	"quantization_config", "compression_config", "text_config.quantization_config",
	"text_config.compression_config",
};

/* Names of the tensors quantized formats keep beside their data. */
static const char *const scale_suffixes[] = {
	"_scale_inv", "_scales", "_blocks", ".weight_scale", ".input_scale", ".qweight", ".qzeros",
	".g_idx", ".absmax", ".quant_map", ".nested_absmax", ".quant_state.bitsandbytes__nf4",
	".quant_state.bitsandbytes__fp4", ".SCB", ".weight_packed", ".weight_zero_point",
};

static bool narrow(enum mk_dtype dt)
{
	switch (dt) {
	case MK_DT_F4: case MK_DT_F6_E2M3: case MK_DT_F6_E3M2: case MK_DT_U8: case MK_DT_I8:
	case MK_DT_F8_E5M2: case MK_DT_F8_E4M3: case MK_DT_F8_E8M0: case MK_DT_F8_E4M3FNUZ:
	case MK_DT_F8_E5M2FNUZ:
		return true;
	default:
		return false;
	}
}

static bool ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);

	return n > k && !strcmp(s + n - k, suf);
}

static int check_config(const char *config, size_t len, const char *display, struct mk_err *err)
{
	struct mk_jsondoc *d;
	struct mk_err ignored = { 0 };
	int rc = 0;

	/* (a config.json that does not parse is reported where it is read) */
	if (!config || mk_jsondoc_parse(config, len, "config.json", &d, &ignored))
		return 0;
	for (size_t i = 0; !rc && i < sizeof(config_keys) / sizeof(config_keys[0]); i++) {
		enum mk_json_type t;
		char path[96], *method;
		size_t n;
		if (mk_jsondoc_find(d, config_keys[i], &t) || t == MK_JSON_NULL)
			continue;
		snprintf(path, sizeof(path), "%s.quant_method", config_keys[i]);
		method = mk_jsondoc_string(d, path, &n);
		if (!method) {
			snprintf(path, sizeof(path), "%s.format", config_keys[i]);
			method = mk_jsondoc_string(d, path, &n);
		}
		rc = mk_err_set(err, MK_EUNSUPPORTED, "model '%s' is quantized (%s%s%s, its config.json's \"%s\"): " DEQUANTIZE,
				display, method ? "quant_method '" : "an unnamed format", method ? method : "",
				method ? "'" : "", config_keys[i]);
		free(method);
	}
	mk_jsondoc_free(d);
	return rc;
}

int mk_quant_check(const struct mk_model *m, const char *config, size_t config_len, const char *display,
		   struct mk_err *err)
{
	const struct mk_st_tensor *data = NULL, *scale = NULL;
	int rc = check_config(config, config_len, display, err);

	if (rc)
		return rc;
	/* a scale (by the first suffix, in the order above, any tensor has),
	 * then a narrow tensor beside it */
	for (size_t k = 0; !scale && k < sizeof(scale_suffixes) / sizeof(scale_suffixes[0]); k++)
		for (size_t i = 0; !scale && i < m->ntensors; i++)
			if (ends_with(m->tensors[i].t->name, scale_suffixes[k]))
				scale = m->tensors[i].t;
	for (size_t i = 0; scale && !data && i < m->ntensors; i++)
		if (m->tensors[i].t != scale && narrow(m->tensors[i].t->desc.dtype))
			data = m->tensors[i].t;
	if (data && scale)
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "model '%s' holds quantized weights (tensor '%s' in %s, beside '%s', named as a "
				  "quantized format names its scales)%s: " DEQUANTIZE,
				  display, data->name, mk_dtype_name(data->desc.dtype), scale->name,
				  config ? ", though its config.json has no quantization_config" : "");
	return 0;
}

struct mk_quant {
	enum mk_quant_kind kind;
	uint32_t block[2];
	enum mk_dtype dtype;
	char *config_key;             /* where config.json says it */
};

/* A block size [BR, BC] of positive integers, or -1. */
static int block_size(const struct mk_jsondoc *d, const char *key, uint32_t b[2])
{
	char path[128];
	size_t at;

	snprintf(path, sizeof(path), "%s.weight_block_size", key);
	at = mk_jsondoc_at(d, path);
	if (!at || mk_jsondoc_type(d, at) != MK_JSON_ARRAY || mk_jsondoc_count(d, at) != 2)
		return -1;
	size_t e = mk_jsondoc_first(d, at);
	for (int k = 0; k < 2; k++, e = mk_jsondoc_next(d, e)) {
		long long v;
		if (mk_jsondoc_node_int(d, e, &v) || v <= 0 || v > (1 << 20))
			return -1;
		b[k] = (uint32_t)v;
	}
	return 0;
}

/* The dtype the model's config names (transformers' "dtype", or the
 * older "torch_dtype"), if a float one; else BF16. */
static enum mk_dtype model_dtype(const struct mk_jsondoc *d)
{
	static const struct { const char *name; enum mk_dtype dt; } names[] = {
		{ "bfloat16", MK_DT_BF16 }, { "float16", MK_DT_F16 }, { "float32", MK_DT_F32 },
	};
	const char *keys[] = { "dtype", "torch_dtype", "text_config.dtype", "text_config.torch_dtype" };

	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		size_t n;
		char *v = mk_jsondoc_string(d, keys[k], &n);
		for (size_t i = 0; v && i < sizeof(names) / sizeof(names[0]); i++)
			if (!strcmp(v, names[i].name)) {
				free(v);
				return names[i].dt;
			}
		free(v);
	}
	return MK_DT_BF16;
}

int mk_quant_open(const struct mk_model *m, const char *config, size_t config_len, const char *display,
		  struct mk_quant **out, struct mk_err *err)
{
	struct mk_jsondoc *d;
	struct mk_err ignored = { 0 };
	int rc = 0;

	*out = NULL;
	if (!config || mk_jsondoc_parse(config, config_len, "config.json", &d, &ignored))
		return mk_quant_check(m, config, config_len, display, err);
	for (size_t i = 0; i < sizeof(config_keys) / sizeof(config_keys[0]); i++) {
		enum mk_json_type t;
		char path[96], *method;
		size_t n;
		uint32_t b[2];
		if (strcmp(config_keys[i], "quantization_config") || mk_jsondoc_find(d, config_keys[i], &t) ||
		    t == MK_JSON_NULL)
			continue;
		snprintf(path, sizeof(path), "%s.quant_method", config_keys[i]);
		method = mk_jsondoc_string(d, path, &n);
		if (method && !strcmp(method, "mxfp4")) {
			if (!(*out = calloc(1, sizeof(**out)))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			} else {
				(*out)->kind = MK_QUANT_MXFP4;
				(*out)->dtype = model_dtype(d);
			}
		} else if (method && !strcmp(method, "fp8")) {
			if (block_size(d, config_keys[i], b)) {
				rc = mk_err_set(err, MK_EUNSUPPORTED,
						"model '%s' is quantized (quant_method 'fp8') without a \"weight_block_size\" "
						"of two positive sides in its config.json's \"%s\": mk reads block-scaled FP8 "
						"only (as DeepSeek-V3 ships it); " "dequantize it to BF16 first",
						display, config_keys[i]);
			} else if (!(*out = calloc(1, sizeof(**out)))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			} else {
				(*out)->kind = MK_QUANT_FP8;
				(*out)->block[0] = b[0];
				(*out)->block[1] = b[1];
				(*out)->dtype = model_dtype(d);
			}
		}
		free(method);
		break;
	}
	mk_jsondoc_free(d);
	if (rc || *out)
		return rc;
	return mk_quant_check(m, config, config_len, display, err);
}

void mk_quant_free(struct mk_quant *q)
{
	free(q);
}

enum mk_dtype mk_quant_dtype(const struct mk_quant *q)
{
	return q->dtype;
}

const char *mk_quant_packed(const struct mk_quant *q, const struct mk_model *m, const char *name,
			    struct mk_tensor_desc *desc)
{
	const struct mk_model_tensor *b;
	size_t n = strlen(name);
	char *bname;

	if (!q || q->kind != MK_QUANT_MXFP4 || !(bname = malloc(n + sizeof("_blocks"))))
		return NULL;
	memcpy(bname, name, n);
	memcpy(bname + n, "_blocks", sizeof("_blocks"));
	b = mk_model_find(m, bname);
	free(bname);
	if (!b)
		return NULL;
	const struct mk_tensor_desc *bd = &b->t->desc;
	*desc = *bd;
	if (bd->dtype == MK_DT_U8 && bd->ndim == 4 && bd->shape[3] == 16 && bd->shape[2] <= UINT64_MAX / 32)
		*desc = (struct mk_tensor_desc){ .dtype = MK_DT_F4, .ndim = 3,
						 .shape = { bd->shape[0], bd->shape[2] * 32, bd->shape[1] } };
	return b->t->name;
}

/* MXFP4: `name` ending _blocks (U8 [E, R, G, 16]) beside its U8 scales
 * [E, R, G]. */
static int find_mxfp4(const struct mk_quant *q, const struct mk_model *m, const char *name, const char *display,
		      struct mk_plan_quant **out, struct mk_err *err)
{
	const struct mk_model_tensor *w = mk_model_find(m, name), *s;
	size_t n = strlen(name) - (sizeof("_blocks") - 1);
	char *sname;

	if (!ends_with(name, "_blocks"))
		return 0;       /* stored unquantized (modules_to_not_convert) */
	if (!(sname = malloc(n + sizeof("_scales"))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	memcpy(sname, name, n);
	memcpy(sname + n, "_scales", sizeof("_scales"));
	s = mk_model_find(m, sname);
	const struct mk_tensor_desc *wd = &w->t->desc, *sd = s ? &s->t->desc : NULL;
	if (!sd || wd->dtype != MK_DT_U8 || wd->ndim != 4 || wd->shape[3] != 16 || sd->dtype != MK_DT_U8 ||
	    sd->ndim != 3 || memcmp(sd->shape, wd->shape, 3 * sizeof(uint64_t))) {
		int rc = mk_err_set(err, MK_EUNSUPPORTED,
				    "model '%s': tensor '%s' (%s) is not MXFP4 as its config.json says: expected it U8 "
				    "[E, R, C/32, 16] beside '%s', U8 [E, R, C/32] (one E8M0 scale per 32 values); "
				    "dequantize the model to BF16 first",
				    display, name, mk_dtype_name(wd->dtype), sname);
		free(sname);
		return rc;
	}
	if (!(*out = calloc(1, sizeof(**out)))) {
		free(sname);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	(*out)->kind = MK_QUANT_MXFP4;
	(*out)->scale = sname;
	(*out)->dtype = q->dtype;
	return 0;
}

int mk_quant_find(const struct mk_quant *q, const struct mk_model *m, const char *name, const char *display,
		  struct mk_plan_quant **out, struct mk_err *err)
{
	const struct mk_model_tensor *w = mk_model_find(m, name), *s;
	size_t n = strlen(name);
	char *sname;

	*out = NULL;
	if (!q || !w)
		return 0;
	if (q->kind == MK_QUANT_MXFP4)
		return find_mxfp4(q, m, name, display, out, err);
	/* NAME.weight's scales are NAME.weight_scale_inv (transformers' rule) */
	if (!(sname = malloc(n + sizeof("_scale_inv"))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	memcpy(sname, name, n);
	memcpy(sname + n, "_scale_inv", sizeof("_scale_inv"));
	s = mk_model_find(m, sname);
	if (!s && w->t->desc.dtype != MK_DT_F8_E4M3) {
		free(sname);       /* stored unquantized (modules_to_not_convert) */
		return 0;
	}
	const struct mk_tensor_desc *wd = &w->t->desc;
	bool ok = s && wd->dtype == MK_DT_F8_E4M3 && wd->ndim >= 2 && s->t->desc.ndim == wd->ndim &&
		  (s->t->desc.dtype == MK_DT_F32 || s->t->desc.dtype == MK_DT_BF16);
	for (unsigned k = 0; ok && k < wd->ndim; k++) {
		uint64_t want = wd->shape[k];
		if (k + 2 >= wd->ndim) {
			uint32_t b = q->block[k + 2 - wd->ndim];
			want = (want + b - 1) / b;
		}
		ok = s->t->desc.shape[k] == want;
	}
	if (!ok) {
		int rc = mk_err_set(err, MK_EUNSUPPORTED,
				    "model '%s': tensor '%s' (%s) is not block FP8 as its config.json says: expected it "
				    "F8_E4M3 of 2 or more axes beside '%s', float32 scales of one per %ux%u block; "
				    "dequantize the model to BF16 first",
				    display, name, mk_dtype_name(wd->dtype), sname, q->block[0], q->block[1]);
		free(sname);
		return rc;
	}
	if (!(*out = calloc(1, sizeof(**out)))) {
		free(sname);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	(*out)->kind = MK_QUANT_FP8;
	(*out)->scale = sname;
	(*out)->block[0] = q->block[0];
	(*out)->block[1] = q->block[1];
	(*out)->dtype = q->dtype;
	return 0;
}
