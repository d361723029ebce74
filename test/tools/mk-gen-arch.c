/* mk-gen-arch - write a tiny checkpoint for one architecture definition.
 *
 *   mk-gen-arch --list
 *   mk-gen-arch [--layers N] [--seed S] [--required-only] [--unfused E]
 *               [--quantized fp8 [--quant-block B]] [--dim D] NAME OUTDIR
 *
 * NAME is a definition's file stem (llama, qwen3_moe, whisper, ...).
 * OUTDIR gets config.json (the class, model_type, the layer count at each
 * module's key, vocab_size 16 at the vocab key, and what the procedural
 * classes need: afmoe_partial is written as AfmoeForCausalLM with 2
 * experts; glm4moe, deepseek_v3 and glm4_moe_lite with n_routed_experts 2
 * and first_k_dense_replace 1; qwen3_next with full_attention_interval 2)
 * and model.safetensors with one small F32 tensor per planned weight
 * (I64 where force_dtype says int64): embeddings [16, 8], fused experts
 * gate_up_proj [2, 16, 8] and down_proj [2, 8, 8], other ".weight" [8, 8]
 * unless a norm, the rest [8].  --required-only leaves optional weights
 * out (tied lm_heads then resolve to the embedding); --unfused E writes
 * the fused expert tensors in the per-expert checkpoint layout with E
 * experts (mixtral: block_sparse_moe.experts.{e}.w1/w2/w3 and
 * block_sparse_moe.gate; others: mlp.experts.{e}.gate/up/down_proj).
 * --quantized fp8 stores every 2-dimensional layer weight but the
 * routers' (the per-expert ones too) block FP8 as DeepSeek-V3 ships them:
 * F8_E4M3 beside NAME_scale_inv (float32, one per BxB block, B 4 unless
 * --quant-block), quantized from the values it would have by libmk's
 * mk_fp8_block_row (transformers' rule), and config.json gets the
 * quantization_config.  --dim D makes the matrices' sides D in place of 8
 * (embeddings [16, D], gate_up_proj [E, 2D, D]).  Data are deterministic
 * from --seed. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <jansson.h>
#include "arch/arch.h"
#include "mk/dtype.h"
#include "core/fsutil.h"
#include "core/fp8block.h"
#include "io/safetensors.h"

struct gt {
	char *name;
	enum mk_dtype dt;
	unsigned ndim;
	uint64_t shape[3];
};

static struct gt *ts;
static size_t nts;
static uint64_t dim = 8;      /* --dim: the side of the matrices */

static void add(const char *name, enum mk_dtype dt, unsigned ndim, uint64_t a, uint64_t b, uint64_t c)
{
	for (size_t i = 0; i < nts; i++)
		if (!strcmp(ts[i].name, name))
			return;
	ts = realloc(ts, (nts + 1) * sizeof(*ts));
	if (!ts || !(ts[nts].name = strdup(name)))
		abort();
	ts[nts].dt = dt;
	ts[nts].ndim = ndim;
	ts[nts].shape[0] = a;
	ts[nts].shape[1] = b;
	ts[nts].shape[2] = c;
	nts++;
}

static bool ends(const char *s, const char *suf)
{
	size_t a = strlen(s), b = strlen(suf);
	return a >= b && !strcmp(s + a - b, suf);
}

static void add_weight(const struct mk_weight *w, const char *model_type, uint64_t unfused)
{
	enum mk_dtype dt = w->force_dtype && !strcmp(w->force_dtype, "int64") ? MK_DT_I64 : MK_DT_F32;
	bool mix = model_type && (!strcmp(model_type, "mixtral") || !strcmp(model_type, "minimax"));
	char buf[1024];

	if (unfused && (ends(w->name, ".mlp.experts.gate_up_proj") || ends(w->name, ".mlp.experts.down_proj"))) {
		size_t stem = strlen(w->name) - (ends(w->name, "gate_up_proj") ? strlen("gate_up_proj")
									   : strlen("down_proj"));
		bool gu = ends(w->name, "gate_up_proj");
		for (uint64_t e = 0; e < unfused; e++) {
			static const char *const mixp[] = { "w1", "w3", "w2" }, *const qp[] = { "gate_proj", "up_proj",
												 "down_proj" };
			for (int p = gu ? 0 : 2; p < (gu ? 2 : 3); p++) {
				if (mix)
					snprintf(buf, sizeof(buf), "%.*sblock_sparse_moe.experts.%" PRIu64 ".%s.weight",
						 (int)(stem - strlen("mlp.experts.")), w->name, e, mixp[p]);
				else
					snprintf(buf, sizeof(buf), "%.*s%" PRIu64 ".%s.weight", (int)stem, w->name, e,
						 qp[p]);
				add(buf, MK_DT_F32, 2, dim, dim, 0);
			}
		}
		return;
	}
	if (unfused && mix && ends(w->name, ".mlp.gate.weight")) {
		snprintf(buf, sizeof(buf), "%.*s.block_sparse_moe.gate.weight",
			 (int)(strlen(w->name) - strlen(".mlp.gate.weight")), w->name);
		add(buf, MK_DT_F32, 2, dim, dim, 0);
		return;
	}
	if (w->is_embed)
		add(w->name, dt, 2, 16, dim, 0);
	else if (ends(w->name, ".mlp.experts.gate_up_proj"))
		add(w->name, dt, 3, 2, 2 * dim, dim);
	else if (ends(w->name, ".mlp.experts.down_proj"))
		add(w->name, dt, 3, 2, dim, dim);
	else if (ends(w->name, ".weight") && !strstr(w->name, "norm") && !strstr(w->name, "ln_"))
		add(w->name, dt, 2, dim, dim, 0);
	else
		add(w->name, dt, 1, dim, 0, 0);
}

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* obj[key] at a dotted path, creating parent objects. */
static void set_dotted(json_t *root, const char *key, json_t *val)
{
	char *k = strdup(key), *p = k, *dot;
	json_t *o = root;

	while ((dot = strchr(p, '.'))) {
		*dot = '\0';
		json_t *c = json_object_get(o, p);
		if (!json_is_object(c)) {
			c = json_object();
			json_object_set_new(o, p, c);
		}
		o = c;
		p = dot + 1;
	}
	json_object_set_new(o, p, val);
	free(k);
}

static int die(const char *what, const struct mk_err *err)
{
	fprintf(stderr, "mk-gen-arch: %s: %s\n", what, err->msg);
	return 1;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "list", 0, 0, 'L' }, { "layers", 1, 0, 'l' }, { "seed", 1, 0, 's' },
		{ "required-only", 0, 0, 'r' }, { "unfused", 1, 0, 'u' }, { "quantized", 1, 0, 'z' },
		{ "quant-block", 1, 0, 'q' }, { "dim", 1, 0, 'd' }, { 0 },
	};
	uint64_t layers = 2, seed = 1, unfused = 0, qblock = 4;
	const char *quant = NULL;
	bool list = false, required_only = false;
	struct mk_arch_registry *reg = NULL;
	struct mk_err err = { 0 };
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		uint64_t *dst = NULL;
		switch (c) {
		case 'L': list = true; break;
		case 'r': required_only = true; break;
		case 'l': dst = &layers; break;
		case 's': dst = &seed; break;
		case 'u': dst = &unfused; break;
		case 'q': dst = &qblock; break;
		case 'd': dst = &dim; break;
		case 'z': quant = optarg; break;
		default: return 2;
		}
		if (dst && mk_size_parse(optarg, dst)) {
			fprintf(stderr, "mk-gen-arch: bad number %s\n", optarg);
			return 2;
		}
	}
	if (mk_arch_registry_open(&reg, &err))
		return die("registry", &err);
	if (list) {
		for (size_t i = 0; i < mk_arch_registry_count(reg); i++)
			printf("%s\n", mk_arch_registry_at(reg, i)->file);
		mk_arch_registry_free(reg);
		return 0;
	}
	if ((quant && strcmp(quant, "fp8")) || !qblock || qblock > 128 || !dim || dim > 1024) {
		fprintf(stderr, "mk-gen-arch: --quantized fp8 only, --quant-block 1 to 128, --dim 1 to 1024\n");
		return 2;
	}
	if (optind + 2 != argc) {
		fprintf(stderr, "usage: mk-gen-arch [--list] [--layers N] [--seed S] [--required-only] "
				"[--unfused E] [--quantized fp8 [--quant-block B]] [--dim D] NAME OUTDIR\n");
		return 2;
	}
	const char *name = argv[optind], *dir = argv[optind + 1];
	const struct mk_arch *def = mk_arch_registry_file(reg, name);
	if (!def || !def->narchitectures) {
		fprintf(stderr, "mk-gen-arch: no definition named '%s' (see --list)\n", name);
		return 2;
	}
	/* config.json */
	json_t *cfg = json_object(), *classes = json_array();
	const char *cls = def->architectures[0];
	if (!strcmp(cls, "_AfmoePartialForCausalLM")) {
		cls = "AfmoeForCausalLM";
		json_object_set_new(cfg, "num_experts", json_integer(2));
	}
	if (!strcmp(cls, "Glm4MoeForCausalLM") || !strcmp(cls, "DeepseekV3ForCausalLM") ||
	    !strcmp(cls, "Glm4MoeLiteForCausalLM")) {
		json_object_set_new(cfg, "n_routed_experts", json_integer(2));
		json_object_set_new(cfg, "first_k_dense_replace", json_integer(1));
	}
	if (!strcmp(cls, "Qwen3NextForCausalLM"))
		json_object_set_new(cfg, "full_attention_interval", json_integer(2));
	json_array_append_new(classes, json_string(cls));
	json_object_set_new(cfg, "architectures", classes);
	json_object_set_new(cfg, "model_type", json_string(def->model_type));
	for (size_t m = 0; m < def->nmodules; m++)
		if (def->modules[m].num_layers_key)
			set_dotted(cfg, def->modules[m].num_layers_key, json_integer((json_int_t)layers));
	set_dotted(cfg, mk_arch_vocab_key(def), json_integer(16));
	json_object_set_new(cfg, "torch_dtype", json_string("float32"));
	if (quant)
		json_object_set_new(cfg, "quantization_config",
				    json_pack("{s:s,s:s,s:s,s:[I,I]}", "activation_scheme", "dynamic", "fmt", "e4m3",
					      "quant_method", "fp8", "weight_block_size", (json_int_t)qblock,
					      (json_int_t)qblock));
	char *text = json_dumps(cfg, JSON_SORT_KEYS | JSON_INDENT(2));
	json_decref(cfg);

	/* the planned weights, through the library's own choice */
	struct mk_hfconfig *hc = NULL;
	struct mk_arch *a = NULL;
	struct mk_weight_list wl = { 0 };
	int64_t nl[16];
	if (mk_hfconfig_parse(text, strlen(text), "config.json", &hc, &err) ||
	    mk_arch_for_config(reg, hc, NULL, &a, NULL, &err))
		return die(name, &err);
	if (!a || a->nmodules > 16) {
		fprintf(stderr, "mk-gen-arch: %s: the class %s is not chosen from its own config\n", name, cls);
		return 1;
	}
	for (size_t m = 0; m < a->nmodules; m++)
		if (mk_arch_num_layers(a, m, hc, &nl[m], &err))
			return die(name, &err);
	if (mk_arch_planned(a, nl, &wl, &err))
		return die(name, &err);
	for (size_t i = 0; i < wl.n; i++)
		if (!required_only || !wl.w[i].optional)
			add_weight(&wl.w[i], a->model_type, unfused);

	/* --quantized fp8: the layer matrices (not the routers') F8_E4M3
	 * beside their scales */
	for (size_t i = 0, n0 = nts; quant && i < n0; i++) {
		if (ts[i].ndim != 2 || ts[i].dt != MK_DT_F32 || !strstr(ts[i].name, "layers.") ||
		    !ends(ts[i].name, ".weight") || ends(ts[i].name, "mlp.gate.weight") ||
		    ends(ts[i].name, "moe.gate.weight"))
			continue;
		char sn[1100];
		snprintf(sn, sizeof(sn), "%s_scale_inv", ts[i].name);
		ts[i].dt = MK_DT_F8_E4M3;
		add(sn, MK_DT_F32, 2, (ts[i].shape[0] + qblock - 1) / qblock, (ts[i].shape[1] + qblock - 1) / qblock, 0);
	}

	/* write */
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	char path[4096];
	snprintf(path, sizeof(path), "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f)) {
		perror(path);
		return 1;
	}
	struct mk_st_out_tensor *ot = calloc(nts ? nts : 1, sizeof(*ot));
	for (size_t i = 0; i < nts; i++)
		ot[i] = (struct mk_st_out_tensor){ ts[i].name, ts[i].dt, ts[i].ndim, ts[i].shape, 0, 0 };
	uint8_t *hdr;
	size_t hlen;
	if (mk_st_header_build(ot, nts, 8, &hdr, &hlen, NULL, &err))
		return die(name, &err);
	uint64_t total = 0;
	for (size_t i = 0; i < nts; i++)
		if (ot[i].begin + ot[i].nbytes > total)
			total = ot[i].begin + ot[i].nbytes;
	uint8_t *data = calloc(total ? total : 1, 1);
	for (size_t i = 0; i < nts; i++) {
		if (ot[i].dtype == MK_DT_F8_E4M3)
			continue;     /* below, with its scales */
		uint64_t s = seed * 1000003, n = ot[i].nbytes / (ot[i].dtype == MK_DT_I64 ? 8 : 4);
		for (const char *q = ot[i].name; *q; q++)
			s = s * 131 + (uint8_t)*q;
		for (uint64_t k = 0; k < n; k++) {
			if (ot[i].dtype == MK_DT_I64) {
				int64_t v = (int64_t)k;
				memcpy(data + ot[i].begin + 8 * k, &v, 8);
			} else {
				float v = (float)(((double)(splitmix(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.08);
				memcpy(data + ot[i].begin + 4 * k, &v, 4);
			}
		}
	}
	for (size_t i = 0; i < nts; i++) {
		if (ot[i].dtype != MK_DT_F8_E4M3)
			continue;
		uint64_t s = seed * 1000003, rows = ts[i].shape[0], cols = ts[i].shape[1], n = rows * cols;
		uint64_t sc = (cols + qblock - 1) / qblock;
		float *v = malloc(n * sizeof(float) + 1), *row = malloc(sc * sizeof(float) + 1);
		char sn[1100];
		size_t j = 0;
		for (const char *q = ot[i].name; *q; q++)
			s = s * 131 + (uint8_t)*q;
		if (!v || !row)
			abort();
		for (uint64_t k = 0; k < n; k++)   /* the values as F32 would have them */
			v[k] = (float)(((double)(splitmix(&s) >> 11) / 9007199254740992.0 - 0.5) * 0.08);
		snprintf(sn, sizeof(sn), "%s_scale_inv", ot[i].name);
		while (j < nts && strcmp(ot[j].name, sn))
			j++;
		if (j == nts)
			abort();
		for (uint64_t r0 = 0; r0 < rows; r0 += qblock) {
			uint64_t nr = rows - r0 < qblock ? rows - r0 : qblock;
			mk_fp8_block_row(v + r0 * cols, nr, cols, (uint32_t)qblock, data + ot[i].begin + r0 * cols, row);
			memcpy(data + ot[j].begin + (r0 / qblock) * sc * sizeof(float), row, sc * sizeof(float));
		}
		free(v);
		free(row);
	}
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	f = fopen(path, "wb");
	if (!f || fwrite(hdr, 1, hlen, f) != hlen || fwrite(data, 1, total, f) != total || fclose(f)) {
		perror(path);
		return 1;
	}
	free(data);
	free(hdr);
	free(ot);
	for (size_t i = 0; i < nts; i++)
		free(ts[i].name);
	free(ts);
	free(text);
	mk_weight_list_free(&wl);
	mk_arch_free(a);
	mk_hfconfig_free(hc);
	mk_arch_registry_free(reg);
	return 0;
}
