/* plan.c - mk-moe: the output architecture's config.json, the router
 * checkpoint and the plan stream (one passthrough job per output tensor). */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cuda/cuda.h"
#include "mk/forward.h"
#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "planner/quant.h"
#include "moe/moe.h"
#include "stream/job.h"
#include "mk/stream.h"
#include "methods/rng.h"

/* ------------------------------------------------------------ gates */

int mk_moe_gates_random(enum mk_moe_gate g, uint64_t seed, size_t nlayers, size_t nexperts,
			size_t hidden, float *out, struct mk_err *err)
{
	if (g != MK_MOE_GATE_RANDOM && g != MK_MOE_GATE_UNIFORM_RANDOM)
		return mk_err_set(err, MK_EINVAL, "gate_mode %s is not a random one", mk_moe_gate_name(g));
	double scale = sqrt(1.0 / (double)hidden);
	for (size_t l = 0; l < nlayers; l++) {
		char name[48];
		snprintf(name, sizeof(name), "moe.gate.%zu", l);
		uint64_t st = mk_rng_stream(seed, name, 0);
		float *o = out + l * nexperts * hidden;
		for (uint64_t e = 0; e < (uint64_t)(nexperts * hidden); e++) {
			if (g == MK_MOE_GATE_UNIFORM_RANDOM) {
				o[e] = (float)((mk_rng_uniform(st, e) * 2.0 - 1.0) * scale);
			} else {
				o[e] = (float)mk_rng_normal(st, e);
			}
		}
	}
	return 0;
}

/* ------------------------------------------------------------ models */

struct pm {
	const char *ref;
	struct mk_model *m;
	json_t *cfg;
	char *cfgtext;              /* config.json as read */
	size_t cfglen;
	size_t index;               /* in the plan's model table */
};


static int open_model(const char *ref, struct pm *p, struct mk_err *err)
{
	char *path = NULL;
	json_error_t je;
	int rc;

	p->ref = ref;
	if ((rc = mk_model_open(ref, &p->m, err)))
		return rc;
	if ((rc = mk_model_path(p->m, "config.json", &path, err)))
		return mk_err_prefix(err, "model '%s': ", ref);
	rc = mk_file_read(path, 64u << 20, (uint8_t **)&p->cfgtext, &p->cfglen, err);
	free(path);
	if (rc)
		return mk_err_prefix(err, "model '%s': ", ref);
	p->cfg = json_loadb(p->cfgtext, p->cfglen, JSON_REJECT_DUPLICATES, &je);
	if (!p->cfg || !json_is_object(p->cfg))
		return mk_err_set(err, MK_EFORMAT, "model '%s': config.json: %s", ref,
				  p->cfg ? "not a JSON object" : je.text);
	return mk_quant_check(p->m, p->cfgtext, p->cfglen, ref, err);
}

static const char *cfg_str(json_t *cfg, const char *key)
{
	return json_string_value(json_object_get(cfg, key));
}

static int cfg_uint(const struct pm *p, const char *key, uint64_t *out, struct mk_err *err)
{
	json_t *v = json_object_get(p->cfg, key);
	if (!json_is_integer(v) || json_integer_value(v) <= 0)
		return mk_err_set(err, MK_EFORMAT, "model '%s': config.json has no positive integer '%s'", p->ref, key);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static enum mk_dtype torch_dtype(const char *s)
{
	if (!s)
		return MK_DT_COUNT;
	if (!strcmp(s, "bfloat16"))
		return MK_DT_BF16;
	if (!strcmp(s, "float16"))
		return MK_DT_F16;
	if (!strcmp(s, "float32"))
		return MK_DT_F32;
	return MK_DT_COUNT;
}

static const char *torch_name(enum mk_dtype d)
{
	return d == MK_DT_BF16 ? "bfloat16" : d == MK_DT_F16 ? "float16" : "float32";
}

/* ------------------------------------------------------------ config.json */

/* mk_jsondoc_set with a printf-made value; false when out of memory or
 * refused */
static bool set(struct mk_jsondoc *d, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool set(struct mk_jsondoc *d, const char *key, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return mk_jsondoc_set(d, key, buf, NULL) == 0;
}

/* The output config.json: the base's, read losslessly, with the output
 * architecture's keys set, laid out as transformers writes a config. */
static int out_config(const struct mk_moe_config *c, enum mk_moe_arch a, const struct pm *base, enum mk_dtype odt,
		      char **out, size_t *len, struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	long long ne = (long long)c->nexperts, k = c->experts_per_token;
	char *inter = NULL;
	bool ok = true;
	int rc;

	if ((rc = mk_jsondoc_parse(base->cfgtext, base->cfglen, "config.json", &d, err)))
		return mk_err_prefix(err, "model '%s': ", base->ref);
	inter = mk_jsondoc_text(d, "intermediate_size");
	if (!inter) {
		mk_jsondoc_free(d);
		return mk_err_set(err, MK_EFORMAT, "model '%s': config.json has no intermediate_size", base->ref);
	}
	if (odt != MK_DT_COUNT) {
		ok &= set(d, "dtype", "\"%s\"", torch_name(odt));
		if (a == MK_MOE_DEEPSEEK || mk_jsondoc_find(d, "torch_dtype", NULL) == 0)
			ok &= set(d, "torch_dtype", "\"%s\"", torch_name(odt));
	}
	switch (a) {
	case MK_MOE_MIXTRAL:
		ok &= set(d, "architectures", "[\"MixtralForCausalLM\"]") && set(d, "model_type", "\"mixtral\"") &&
		      set(d, "num_local_experts", "%lld", ne) && set(d, "num_experts_per_tok", "%lld", k) &&
		      set(d, "sliding_window", "null");
		break;
	case MK_MOE_DEEPSEEK:
		ok &= set(d, "architectures", "[\"DeepseekForCausalLM\"]") && set(d, "model_type", "\"deepseek\"") &&
		      set(d, "n_routed_experts", "%lld", ne) &&
		      (c->nshared ? set(d, "n_shared_experts", "%zu", c->nshared) : set(d, "n_shared_experts", "null")) &&
		      set(d, "num_experts_per_tok", "%lld", k) && set(d, "first_k_dense_replace", "0") &&
		      set(d, "moe_layer_freq", "1") && set(d, "scoring_func", "\"softmax\"") &&
		      set(d, "norm_topk_prob", "true") && set(d, "moe_intermediate_size", "%s", inter) &&
		      set(d, "auto_map",
			  "{\"AutoConfig\": \"deepseek-ai/deepseek-moe-16b-base--configuration_deepseek.DeepseekConfig\", "
			  "\"AutoModel\": \"deepseek-ai/deepseek-moe-16b-base--modeling_deepseek.DeepseekModel\", "
			  "\"AutoModelForCausalLM\": \"deepseek-ai/deepseek-moe-16b-base--modeling_deepseek.DeepseekForCausalLM\"}");
		break;
	case MK_MOE_QWEN2:
	case MK_MOE_QWEN3:
		ok &= set(d, "architectures", a == MK_MOE_QWEN2 ? "[\"Qwen2MoeForCausalLM\"]" : "[\"Qwen3MoeForCausalLM\"]") &&
		      set(d, "model_type", a == MK_MOE_QWEN2 ? "\"qwen2_moe\"" : "\"qwen3_moe\"") &&
		      set(d, "num_experts", "%lld", ne) && set(d, "num_experts_per_tok", "%lld", k) &&
		      set(d, "decoder_sparse_step", "1") && set(d, "norm_topk_prob", "true") &&
		      set(d, "mlp_only_layers", "[]") && set(d, "moe_intermediate_size", "%s", inter);
		if (a == MK_MOE_QWEN2)
			ok &= set(d, "sliding_window", "null") && set(d, "use_sliding_window", "false") &&
			      set(d, "shared_expert_intermediate_size", "%s", inter);
		break;
	default:
		break;
	}
	free(inter);
	if (!ok)
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	else
		rc = mk_jsondoc_write_python(d, out, len, err);
	mk_jsondoc_free(d);
	return rc;
}

/* ------------------------------------------------------------ the router checkpoint */

struct newt {                /* a tensor mk-moe makes (routers, zero biases) */
	char name[160];
	uint64_t rows, cols; /* rows 0: a vector of cols */
	float *data;         /* rows * cols; NULL: zeros */
};

/* work_dir/model.safetensors (and a config.json so it opens as a model) */
static int write_newt(const char *dir, const struct newt *t, size_t n, enum mk_dtype dt, struct mk_err *err)
{
	json_t *h = json_object();
	uint64_t off = 0, esz = dt == MK_DT_F32 ? 4 : 2;
	char path[4096];
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t nb = (t[i].rows ? t[i].rows : 1) * t[i].cols * esz;
		json_t *shape = t[i].rows ? json_pack("[I,I]", (json_int_t)t[i].rows, (json_int_t)t[i].cols) :
					    json_pack("[I]", (json_int_t)t[i].cols);
		json_object_set_new(h, t[i].name,
				    json_pack("{s:s,s:o,s:[I,I]}", "dtype", mk_dtype_name(dt), "shape", shape,
					      "data_offsets", (json_int_t)off, (json_int_t)(off + nb)));
		off += nb;
	}
	char *hs = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(h);
	if (!hs)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	size_t hl = strlen(hs), pad = (8 - hl % 8) % 8;
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		free(hs);
		return mk_err_sys(err, errno, "%s", path);
	}
	uint64_t hl8 = hl + pad;
	unsigned char le[8];
	for (int b = 0; b < 8; b++)
		le[b] = (unsigned char)(hl8 >> (8 * b));
	uint64_t at = 0;
	if (!(rc = mk_pwrite_all(fd, le, 8, at, path, err)) && !(rc = mk_pwrite_all(fd, hs, hl, at += 8, path, err)))
		rc = mk_pwrite_all(fd, "        ", pad, at += hl, path, err);
	at += pad;
	free(hs);
	unsigned char *buf = NULL;
	for (size_t i = 0; !rc && i < n; i++) {
		size_t cnt = (size_t)((t[i].rows ? t[i].rows : 1) * t[i].cols);
		unsigned char *nb = realloc(buf, cnt * esz + 1);
		if (!nb) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		buf = nb;
		if (t[i].data)
			mk_dtype_convert(dt, buf, MK_DT_F32, t[i].data, cnt);
		else
			memset(buf, 0, cnt * esz);
		rc = mk_pwrite_all(fd, buf, cnt * esz, at, path, err);
		at += cnt * esz;
	}
	free(buf);
	if (close(fd) && !rc)
		rc = mk_err_sys(err, errno, "%s", path);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s/config.json", dir);
	FILE *f = fopen(path, "w");
	if (!f || fputs("{\"model_type\": \"mk-moe-routers\"}\n", f) < 0 || fclose(f))
		return mk_err_sys(err, errno, "%s", path);
	return 0;
}

/* ------------------------------------------------------------ the plan */

struct plan {
	struct mk_manifest *man;
	struct mk_plan_job **jobs;
	size_t njobs;
	enum mk_dtype odt;
};

/* Where a job's output goes: a part of an output tensor already in the
 * manifest (a fused expert tensor), from element `begin`. */
struct part {
	size_t output;
	uint64_t begin;
};

/* A passthrough job: output `out` (dtype odt, or the stored one) from
 * model table entry `mi`'s tensor `src`, plus normal noise of standard
 * deviation `noise` (0: none; passthrough's noise_scale, seeded by the
 * plan's seed, the output tensor and the element), times `scale`.  With
 * `pt`, the job makes that part of an existing output, cast on load to
 * its dtype; else it makes a new output tensor of the source's shape. */
static int add_job(struct plan *p, const struct pm *m, const char *src, const char *out, double scale,
		   double noise, const struct part *pt, struct mk_err *err)
{
	const struct mk_model_tensor *mt = mk_model_find(m->m, src);
	if (!mt)
		return mk_err_set(err, MK_ENOENT, "model '%s' has no tensor '%s' (for %s)", m->ref, src, out);
	const struct mk_tensor_desc *d = &mt->t->desc;
	enum mk_dtype odt = pt ? p->man->tensors[pt->output].desc.dtype : p->odt != MK_DT_COUNT ? p->odt : d->dtype;
	int rc = pt ? 0 : mk_manifest_add_tensor(p->man, out, odt, d->ndim, d->shape, err);
	if (rc)
		return rc;
	struct mk_plan_job *j = mk_plan_job_new(1), **nj = realloc(p->jobs, (p->njobs + 1) * sizeof(*nj));
	if (!j || !nj) {
		mk_plan_job_free(j);
		if (nj)
			p->jobs = nj;
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	p->jobs = nj;
	p->jobs[p->njobs++] = j;
	j->id = (uint32_t)(p->njobs - 1);
	j->output = pt ? pt->output : p->man->ntensors - 1;
	j->has_part = pt != NULL;
	j->part_begin = pt ? pt->begin : 0;
	const struct mk_method *pt_method;
	int prc = mk_method_lookup("passthrough", &pt_method, err);
	if (prc || (prc = mk_plan_job_set_method(j, pt_method, err)))
		return prc;
	j->inputs[0].model = m->index;
	j->inputs[0].tensor = strdup(src);
	j->inputs[0].desc = *d;
	j->inputs[0].load_dtype = odt;
	j->inputs[0].nelem = mk_tensor_desc_count(d);
	j->base = -1;
	j->passes = 0;
	j->sends = 1;
	if (!j->inputs[0].tensor)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	prc = mk_plan_job_set_param(j, 0, "scale", mk_pval_float(scale), err);
	if (!prc && noise != 0)
		prc = mk_plan_job_set_param(j, 0, "noise_scale", mk_pval_float(noise), err);
	return prc;
}

static const char *const mlp_parts[] = { "gate_proj", "up_proj", "down_proj" };

/* mergekit-moe's order: the noise (every MLP tensor), then residual_scale
 * (down_proj, part 2) */
static double part_scale(const struct mk_moe_expert *ex, int q)
{
	return q == 2 && ex->has_residual ? ex->residual_scale : 1.0;
}

/* Mixtral's and Qwen3-MoE's experts of layer l in transformers 5's fused
 * layout, as mergekit-moe writes them: mlp.experts.gate_up_proj
 * [E, 2I, H] (expert e's gate_proj rows, then its up_proj rows) and
 * mlp.experts.down_proj [E, H, I]; each expert's tensor one job that
 * makes its part.  Every expert's tensor must have the first expert's
 * shape. */
static int add_fused(struct plan *p, struct pm *ms, const struct mk_moe_config *c, uint64_t l, struct mk_err *err)
{
	for (int f = 0; f < 2; f++) {
		/* f 0: gate_up_proj from parts 0 and 1; f 1: down_proj from part 2 */
		int q0 = f ? 2 : 0, nq = f ? 1 : 2;
		struct mk_tensor_desc d0 = { 0 };
		char src[160], dst[192];
		int rc;

		for (size_t e = 0; e < c->nexperts; e++)
			for (int q = q0; q < q0 + nq; q++) {
				snprintf(src, sizeof(src), "model.layers.%llu.mlp.%s.weight", (unsigned long long)l,
					 mlp_parts[q]);
				const struct mk_model_tensor *mt = mk_model_find(ms[1 + e].m, src);
				if (!mt)
					return mk_err_set(err, MK_ENOENT, "model '%s' has no tensor '%s' (expert %zu)",
							  ms[1 + e].ref, src, e);
				const struct mk_tensor_desc *d = &mt->t->desc;
				if (!d0.ndim)
					d0 = *d;
				if (d->ndim != 2 || d0.ndim != 2 || d->shape[0] != d0.shape[0] || d->shape[1] != d0.shape[1])
					return mk_err_set(err, MK_EINVAL,
							  "model '%s': %s is [%llu, %llu], not 2-dimensional like the first expert's [%llu, %llu]: the experts' MLPs must have one shape to be stacked",
							  ms[1 + e].ref, src, (unsigned long long)d->shape[0],
							  (unsigned long long)(d->ndim > 1 ? d->shape[1] : 0),
							  (unsigned long long)d0.shape[0], (unsigned long long)d0.shape[1]);
			}
		uint64_t per = d0.shape[0] * d0.shape[1];
		uint64_t shape[3] = { c->nexperts, d0.shape[0] * (uint64_t)nq, d0.shape[1] };
		snprintf(dst, sizeof(dst), "model.layers.%llu.mlp.experts.%s", (unsigned long long)l,
			 f ? "down_proj" : "gate_up_proj");
		if ((rc = mk_manifest_add_tensor(p->man, dst, p->odt != MK_DT_COUNT ? p->odt : d0.dtype, 3, shape, err)))
			return rc;
		struct part pt = { .output = p->man->ntensors - 1 };
		for (size_t e = 0; e < c->nexperts; e++) {
			const struct mk_moe_expert *ex = &c->experts[e];
			for (int q = q0; q < q0 + nq; q++, pt.begin += per) {
				snprintf(src, sizeof(src), "model.layers.%llu.mlp.%s.weight", (unsigned long long)l,
					 mlp_parts[q]);
				if ((rc = add_job(p, &ms[1 + e], src, dst, part_scale(ex, q),
						  ex->has_noise ? ex->noise_scale : 0.0, &pt, err)))
					return rc;
			}
		}
	}
	return 0;
}

static void note(const struct mk_moe_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const struct mk_moe_opts *o, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	if (!o->note)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	o->note(o->note_ctx, buf);
}

/* --cuda: a context for the base model's forward pass, or NULL (the CPU)
 * with a warning saying why, as mk-merge --cuda falls back. */
static struct mk_cuda_ctx *open_cuda(const struct mk_moe_opts *o)
{
	/* the forward pass uses no staging: the smallest */
	struct mk_cuda_opts co = { .max_bytes = 64u << 10, .streams = 2, .emulate = mk_cuda_emulate_requested() };
	struct mk_cuda_ctx *cx = NULL;
	struct mk_err cerr = { 0 };

	if (mk_cuda_open(&cx, &co, &cerr)) {
		note(o, "warning: --cuda: %s; the base model's forward pass runs on the CPU", cerr.msg);
		return NULL;
	}
	note(o, "--cuda: the base model's matrix products on %s", mk_cuda_describe(cx));
	return cx;
}

/* the tokenizer files mk-moe copies from the base */
static const char *const tok_files[] = {
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
	"vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja",
};

int mk_moe_plan(const struct mk_moe_opts *o, int fd, enum mk_moe_arch *arch_out, struct mk_err *err)
{
	const struct mk_moe_config *c = o->cfg;
	size_t nm = 1 + c->nexperts + c->nshared, ng = 0;
	struct pm *ms = calloc(nm + 1, sizeof(*ms)), gm = { 0 };
	const char **types = calloc(nm, sizeof(*types));
	struct plan p = { 0 };
	struct newt *nt = NULL;
	float *gates = NULL;
	struct mk_stream_writer *w = NULL;
	char *cfgjson = NULL;
	enum mk_moe_arch a = MK_MOE_MIXTRAL;
	uint64_t nl = 0, hid = 0;
	int rc;

	if (!ms || !types) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = mk_moe_check(c, o->allow_all_same, err)))
		goto out;
	for (size_t i = 0; i < nm && !rc; i++) {
		const char *ref = i == 0 ? c->base_model :
				  i <= c->nexperts ? c->experts[i - 1].source_model :
						     c->shared[i - 1 - c->nexperts].source_model;
		rc = open_model(ref, &ms[i], err);
		if (!rc)
			types[i] = cfg_str(ms[i].cfg, "model_type");
	}
	if (rc || (rc = mk_moe_select_arch(c, types, &a, err)))
		goto out;
	note(o, "output architecture: %s", mk_moe_arch_name(a));
	if ((rc = cfg_uint(&ms[0], "num_hidden_layers", &nl, err)) || (rc = cfg_uint(&ms[0], "hidden_size", &hid, err)))
		goto out;
	p.odt = c->has_dtype ? c->dtype : torch_dtype(cfg_str(ms[0].cfg, "dtype"));
	if (p.odt == MK_DT_COUNT)
		p.odt = torch_dtype(cfg_str(ms[0].cfg, "torch_dtype"));
	if (c->nexperts & (c->nexperts - 1))
		note(o, "warning: %zu experts, not a power of two: llama.cpp cannot use the model", c->nexperts);

	/* the routers: the experts' and, when they take part, the shared ones' */
	bool shared_gated = c->nshared && (c->shared[0].npositive || c->gate == MK_MOE_GATE_RANDOM ||
					   c->gate == MK_MOE_GATE_UNIFORM_RANDOM);
	size_t ngate = c->nexperts + (shared_gated ? c->nshared : 0);
	size_t nfloats, nbytes;
	/* sizes from config.json: refuse what would overflow, not wrap */
	if (nl > SIZE_MAX / 8 || __builtin_mul_overflow(nl, ngate, &nfloats) ||
	    __builtin_mul_overflow(nfloats, hid, &nfloats) ||
	    __builtin_mul_overflow(nfloats, sizeof(*gates), &nbytes)) {
		rc = mk_err_set(err, MK_EINVAL, "%s: config.json: num_hidden_layers %llu and hidden_size %llu are too large "
				"for %zu routers", c->base_model, (unsigned long long)nl, (unsigned long long)hid, ngate);
		goto out;
	}
	gates = malloc(nbytes);
	nt = calloc(nl * 5 + 1, sizeof(*nt));
	if (!gates || !nt) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory (router weights: %llu floats)",
				(unsigned long long)(nl * ngate * hid));
		goto out;
	}
	/* [L, ngate, H]: the experts' rows, then the shared experts' */
	if (c->gate == MK_MOE_GATE_RANDOM || c->gate == MK_MOE_GATE_UNIFORM_RANDOM) {
		rc = mk_moe_gates_random(c->gate, o->seed, nl, ngate, hid, gates, err);
	} else {
		const struct mk_moe_expert **ex = calloc(ngate, sizeof(*ex));
		if (!ex) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t i = 0; i < ngate; i++)
			ex[i] = i < c->nexperts ? &c->experts[i] : &c->shared[i - c->nexperts];
		note(o, "router weights (%s): tokenising the prompts, running the base model", mk_moe_gate_name(c->gate));
		struct mk_forward_opts fo = { .max_memory = o->max_memory, .cancel = o->cancel };
		if (o->cuda && c->gate != MK_MOE_GATE_CHEAP_EMBED)
			fo.cuda = open_cuda(o);
		rc = mk_moe_gates_prompts(c->gate, c->base_model, ex, ngate, nl, hid, &fo, gates, err);
		mk_cuda_close(fo.cuda);
		free(ex);
	}
	if (rc)
		goto out;
	size_t ndeg = 0, first_deg = 0;
	for (uint64_t l = 0; l < nl; l++)
		if (mk_moe_gate_cond(gates + l * ngate * hid, ngate, hid) > 5.0 && !ndeg++)
			first_deg = l;
	if (ndeg)
		note(o, "warning: %zu of %llu layers (the first: layer %zu) have routers that barely tell the experts apart (condition number over 5): the prompts may be too alike, and some experts will be used little",
		     ndeg, (unsigned long long)nl, first_deg);
	/* Qwen2-MoE wants attention biases the base may lack: zeros */
	for (uint64_t l = 0; l < nl && a == MK_MOE_QWEN2; l++) {
		static const char *const qkv[] = { "q_proj", "k_proj", "v_proj" };
		uint64_t heads = 0, kv = 0, hd;
		if ((rc = cfg_uint(&ms[0], "num_attention_heads", &heads, err)))
			goto out;
		if (cfg_uint(&ms[0], "num_key_value_heads", &kv, NULL))
			kv = heads;
		hd = hid / heads;
		for (int q = 0; q < 3; q++) {
			char nmb[160];
			snprintf(nmb, sizeof(nmb), "model.layers.%llu.self_attn.%s.bias", (unsigned long long)l, qkv[q]);
			if (mk_model_find(ms[0].m, nmb))
				continue;
			snprintf(nt[ng].name, sizeof(nt[ng].name), "%s", nmb);
			nt[ng].rows = 0;
			nt[ng].cols = (q ? kv : heads) * hd;
			ng++;
		}
	}
	for (uint64_t l = 0; l < nl; l++) {
		snprintf(nt[ng].name, sizeof(nt[ng].name), "model.layers.%llu.mlp.gate.weight", (unsigned long long)l);
		nt[ng].rows = c->nexperts;
		nt[ng].cols = hid;
		nt[ng].data = gates + l * ngate * hid;
		ng++;
		if (a == MK_MOE_QWEN2) {
			snprintf(nt[ng].name, sizeof(nt[ng].name), "model.layers.%llu.mlp.shared_expert_gate.weight",
				 (unsigned long long)l);
			nt[ng].rows = 1;
			nt[ng].cols = hid;
			nt[ng].data = gates + (l * ngate + c->nexperts) * hid;
			ng++;
		}
	}
	if ((rc = write_newt(o->work_dir, nt, ng, p.odt != MK_DT_COUNT ? p.odt : MK_DT_F32, err)))
		goto out;
	if ((rc = open_model(o->work_dir, &gm, err)))
		goto out;

	/* the model table: each distinct reference once, the routers last */
	p.man = mk_manifest_new("plan", "mk-moe " MK_VERSION);
	if (!p.man) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	p.man->planned = true;
	p.man->seed = o->seed;
	ms[nm] = gm;
	memset(&gm, 0, sizeof(gm));
	size_t nt_models = 0;
	for (size_t i = 0; i <= nm && !rc; i++) {
		size_t k;
		for (k = 0; k < i && strcmp(ms[k].ref, ms[i].ref); k++)
			;
		if (k < i) {
			ms[i].index = ms[k].index;
			continue;
		}
		ms[i].index = nt_models++;
		const struct mk_model *m = ms[i].m;
		rc = mk_manifest_add_model(p.man, ms[i].ref, m->commit, err);
		for (size_t s = 0; !rc && s < m->nshards; s++)
			rc = mk_manifest_add_shard(p.man, m->shard_names[s], m->shards[s]->file_size,
						   m->shards[s]->header_hash, err);
	}
	if (rc)
		goto out;

	/* the tensors: the base's outside the MLPs, then per layer the
	 * experts' MLP weights, then the routers */
	const struct mk_model *bm = ms[0].m;
	for (size_t t = 0; t < bm->ntensors && !rc; t++) {
		const char *name = bm->tensors[t].t->name;
		if (!strstr(name, ".mlp."))
			rc = add_job(&p, &ms[0], name, name, 1.0, 0.0, NULL, err);
	}
	bool fused = a == MK_MOE_MIXTRAL || a == MK_MOE_QWEN3;
	for (uint64_t l = 0; l < nl && !rc; l++) {
		if (fused && (rc = add_fused(&p, ms, c, l, err)))
			break;
		for (size_t e = fused ? c->nexperts : 0; e < c->nexperts + c->nshared && !rc; e++) {
			const struct mk_moe_expert *ex = e < c->nexperts ? &c->experts[e] : &c->shared[e - c->nexperts];
			for (int q = 0; q < 3 && !rc; q++) {
				char src[160], dst[192];
				double s = part_scale(ex, q);
				double ns = ex->has_noise ? ex->noise_scale : 0.0;
				snprintf(src, sizeof(src), "model.layers.%llu.mlp.%s.weight", (unsigned long long)l,
					 mlp_parts[q]);
				if (e >= c->nexperts)
					snprintf(dst, sizeof(dst), "model.layers.%llu.mlp.%s.%s.weight",
						 (unsigned long long)l, a == MK_MOE_QWEN2 ? "shared_expert" : "shared_experts",
						 mlp_parts[q]);
				else /* DeepSeek MoE, Qwen2-MoE: per-expert names, as mergekit-moe */
					snprintf(dst, sizeof(dst), "model.layers.%llu.mlp.experts.%zu.%s.weight",
						 (unsigned long long)l, e, mlp_parts[q]);
				rc = add_job(&p, &ms[1 + e], src, dst, s, ns, NULL, err);
			}
		}
	}
	for (size_t g = 0; g < ng && !rc; g++)
		rc = add_job(&p, &ms[nm], nt[g].name, nt[g].name, 1.0, 0.0, NULL, err);
	if (rc)
		goto out;

	/* the files: config.json, the tokenizer, the configuration */
	size_t cl;
	if ((rc = out_config(c, a, &ms[0], p.odt, &cfgjson, &cl, err)))
		goto out;
	struct { const char *name; char *data; size_t len; } files[16];
	size_t nf = 0;
	files[nf++] = (typeof(files[0])){ "config.json", cfgjson, cl };
	for (size_t i = 0; o->copy_tokenizer && i < sizeof(tok_files) / sizeof(tok_files[0]); i++) {
		char *path = NULL;
		if (mk_model_path(ms[0].m, tok_files[i], &path, NULL))
			continue;
		uint8_t *d;
		size_t dl;
		rc = mk_file_read(path, SIZE_MAX / 2, &d, &dl, err);
		free(path);
		if (rc) {
			mk_err_prefix(err, "model '%s': ", ms[0].ref);
			goto files_out;
		}
		files[nf++] = (typeof(files[0])){ tok_files[i], (char *)d, dl };
	}
	/* the pad token is the BOS (else the EOS), as mergekit-moe saves the
	 * tokenizer: set in tokenizer_config.json and special_tokens_map.json,
	 * the rest of each file as it was */
	char *padv = NULL;
	for (int pass = 0; pass < 2 && !padv; pass++)
		for (size_t i = 0; i < nf && !padv; i++) {
			if (strcmp(files[i].name, "special_tokens_map.json") && strcmp(files[i].name, "tokenizer_config.json"))
				continue;
			struct mk_jsondoc *jd = NULL;
			if (mk_jsondoc_parse(files[i].data, files[i].len, files[i].name, &jd, NULL))
				continue;
			/* special_tokens_map.json has the last word, as transformers reads them */
			if (!strcmp(files[i].name, "special_tokens_map.json") || pass == 1) {
				enum mk_json_type ty;
				const char *key = mk_jsondoc_find(jd, "bos_token", &ty) == 0 && ty != MK_JSON_NULL ? "bos_token" :
						  mk_jsondoc_find(jd, "eos_token", &ty) == 0 && ty != MK_JSON_NULL ? "eos_token" : NULL;
				if (key)
					padv = mk_jsondoc_text(jd, key);
			}
			mk_jsondoc_free(jd);
		}
	for (size_t i = 0; padv && i < nf; i++) {
		if (strcmp(files[i].name, "special_tokens_map.json") && strcmp(files[i].name, "tokenizer_config.json"))
			continue;
		struct mk_jsondoc *jd = NULL;
		char *nd = NULL;
		size_t nl2;
		if (mk_jsondoc_parse(files[i].data, files[i].len, files[i].name, &jd, NULL) ||
		    mk_jsondoc_root_type(jd) != MK_JSON_OBJECT || mk_jsondoc_set(jd, "pad_token", padv, NULL) ||
		    mk_jsondoc_write(jd, &nd, &nl2, NULL)) {
			mk_jsondoc_free(jd);
			continue;   /* not an object: copied as it is */
		}
		mk_jsondoc_free(jd);
		free(files[i].data);
		files[i].data = nd;
		files[i].len = nl2;
	}
	free(padv);
	if (o->write_card)
		files[nf++] = (typeof(files[0])){ "mergekit_moe_config.yml", c->text, c->len };
	for (size_t i = 0; i < nf && !rc; i++)
		rc = mk_manifest_add_file(p.man, files[i].name, files[i].len, err);
	p.man->njobs = p.njobs;
	char *head = NULL;
	size_t hlen;
	if (!rc)
		rc = mk_manifest_encode(p.man, &head, &hlen, err);
	if (!rc)
		rc = mk_sw_open(&w, fd, 0, err);
	if (!rc)
		rc = mk_sw_frame1(w, MK_FT_HEAD, head, hlen, err);
	free(head);
	for (size_t i = 0; i < nf && !rc; i++)
		rc = mk_sw_file(w, files[i].name, 0644, files[i].data, files[i].len, err);
	for (size_t i = 0; i < p.njobs && !rc; i++) {
		char *j;
		size_t jl;
		rc = mk_plan_job_encode(p.jobs[i], &j, &jl, err);
		if (!rc)
			rc = mk_sw_frame1(w, MK_FT_JOB, j, jl, err);
		free(j);
	}
	if (!rc)
		rc = mk_sw_end(w, err);
files_out:
	for (size_t i = 1; i < nf; i++)
		if (files[i].data != c->text)
			free(files[i].data);
out:
	if (!rc && arch_out)
		*arch_out = a;
	mk_sw_free(w);
	free(cfgjson);
	for (size_t i = 0; ms && i <= nm; i++) {
		mk_model_free(ms[i].m);
		json_decref(ms[i].cfg);
		free(ms[i].cfgtext);
	}
	mk_model_free(gm.m);
	json_decref(gm.cfg);
	free(gm.cfgtext);
	free(ms);
	free(types);
	free(gates);
	free(nt);
	for (size_t i = 0; i < p.njobs; i++)
		mk_plan_job_free(p.jobs[i]);
	free(p.jobs);
	mk_manifest_free(p.man);
	return rc;
}
