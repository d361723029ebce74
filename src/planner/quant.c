/* quant.c - quantized checkpoints, refused at plan time (quant.h). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"
#include "io/model.h"
#include "io/safetensors.h"
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
