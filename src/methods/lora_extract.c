/* lora_extract.c - mk-extract-lora's method: one weight's LoRA pair from a
 * fine-tune and its base.
 *
 * Inputs: the base's weight (the job's base) and the fine-tune's, one
 * shape [m, n].  The statistics pass gathers delta = FT - BASE, each
 * difference rounded to the inputs' promoted dtype first (mergekit
 * subtracts the tensors in their own dtypes, as torch promotes them) and
 * widened to float32; finish factors it
 * (methods/lowrank.h: F = delta, or delta^T for an embedding, ~= B A) and
 * apply hands out three outputs:
 *   0  A       [r0, Fn]  in the inputs' promoted dtype
 *   1  B       [Fm, r0]  in the inputs' promoted dtype
 *   2  stats   [2] F64: the rank kept, the relative Frobenius error
 * r0 = min(max_rank, Fm, Fn) is the rank the plan can know; rows of A and
 * columns of B past the rank kept are zeros (mk-extract-lora cuts them,
 * reading the rank from the stats).  Unlisted: mk-extract-lora's plans
 * name it; a merge configuration cannot (its planner refuses a method of
 * several outputs a weight).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "methods/lowrank.h"
#include "methods/builtin.h"

enum { P_MAX_RANK, P_SV_EPSILON, P_ENERGY, P_REL_SIGMA, P_DISTRIBUTE, P_RANDOMIZED, P_OVERSAMPLE, P_POWER_ITERS,
       P_TRANSPOSE, P_CUDA, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_MAX_RANK] = { .name = "max_rank", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_INT, .flags = MK_PF_MIN, .min = 1,
			 .def = { .set = true, .type = MK_PT_INT, .i = 128 }, .doc = "the most rank kept" },
	[P_SV_EPSILON] = { .name = "sv_epsilon", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT, .flags = MK_PF_MIN,
			   .def = { .set = true, .type = MK_PT_FLOAT, .f = 0 },
			   .doc = "singular values at or below it are dropped (0: none)" },
	[P_ENERGY] = { .name = "energy", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT, .flags = MK_PF_MIN | MK_PF_MAX,
		       .max = 1, .def = { .set = true, .type = MK_PT_FLOAT, .f = 0 },
		       .doc = "the smallest rank keeping this fraction of the sum of sigma^2 (0: off)" },
	[P_REL_SIGMA] = { .name = "rel_sigma", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
			  .flags = MK_PF_MIN | MK_PF_MAX, .max = 1, .def = { .set = true, .type = MK_PT_FLOAT, .f = 0 },
			  .doc = "keep sigma_i >= rel_sigma * sigma_1 (0: off)" },
	[P_DISTRIBUTE] = { .name = "distribute_scale", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			   .def = { .set = true, .type = MK_PT_BOOL, .b = true },
			   .doc = "sqrt(sigma) into both factors (else sigma into A)" },
	[P_RANDOMIZED] = { .name = "randomized", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			   .def = { .set = true, .type = MK_PT_BOOL, .b = false },
			   .doc = "a randomized truncated SVD instead of the exact one" },
	[P_OVERSAMPLE] = { .name = "oversample", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_INT, .flags = MK_PF_MIN,
			   .def = { .set = true, .type = MK_PT_INT, .i = MK_LOWRANK_OVERSAMPLE },
			   .doc = "randomized: columns beyond the rank" },
	[P_POWER_ITERS] = { .name = "power_iters", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_INT, .flags = MK_PF_MIN,
			    .def = { .set = true, .type = MK_PT_INT, .i = MK_LOWRANK_POWER_ITERS },
			    .doc = "randomized: subspace iterations" },
	[P_TRANSPOSE] = { .name = "transpose", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
			  .def = { .set = true, .type = MK_PT_BOOL, .b = false },
			  .doc = "factor the delta's transpose (an embedding: PEFT's lora_embedding_A/B)" },
	[P_CUDA] = { .name = "cuda", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_BOOL,
		     .def = { .set = true, .type = MK_PT_BOOL, .b = false },
		     .doc = "the SVD (or the randomized one's products and QRs) on a CUDA device (none usable: the CPU)" },
};

struct state {
	float *delta;                 /* [m, n] */
	uint64_t m, n, r0;
	struct mk_lowrank lr;
	bool done;
};

/* The engine's options from the job's resolved parameters. */
static void lowrank_opts(const struct mk_pval *g, uint64_t seed, struct mk_lowrank_opts *o)
{
	mk_lowrank_opts_default(o, (unsigned)(g[P_MAX_RANK].i > 0x7fffffff ? 0x7fffffff : g[P_MAX_RANK].i));
	o->sv_epsilon = g[P_SV_EPSILON].f;
	o->energy = g[P_ENERGY].f;
	o->rel_sigma = g[P_REL_SIGMA].f;
	o->distribute_scale = g[P_DISTRIBUTE].b;
	o->randomized = g[P_RANDOMIZED].b;
	o->oversample = (unsigned)(g[P_OVERSAMPLE].i > 0xffff ? 0xffff : g[P_OVERSAMPLE].i);
	o->power_iters = (unsigned)(g[P_POWER_ITERS].i > 0xffff ? 0xffff : g[P_POWER_ITERS].i);
	o->seed = seed;
	o->cuda = g[P_CUDA].b;
}

/* The factored matrix's shape and the plan's rank. */
static void shape_of(const struct mk_job_desc *d, const struct mk_pval *g, uint64_t *fm, uint64_t *fn, uint64_t *r0)
{
	uint64_t m = d->in[0].shape[0], n = d->in[0].shape[1];
	bool t = g[P_TRANSPOSE].b;
	uint64_t mr = (uint64_t)g[P_MAX_RANK].i;

	*fm = t ? n : m;
	*fn = t ? m : n;
	*r0 = mr < *fm ? mr : *fm;
	if (*fn < *r0)
		*r0 = *fn;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		  struct mk_err *err)
{
	uint64_t fm, fn, r0;
	int rc;

	if ((rc = mk_require_float_inputs(m, d, used, err)))
		return rc;
	for (size_t i = 0; i < d->ninputs; i++)
		if (d->in[i].ndim != 2 || d->in[i].shape[0] != d->in[0].shape[0] || d->in[i].shape[1] != d->in[0].shape[1])
			return mk_err_set(err, MK_EMISMATCH,
					  "method 'lora_extract', tensor '%s': the base's and the fine-tune's weights are not matrices of one shape",
					  d->tensor ? d->tensor : "?");
	shape_of(d, d->global, &fm, &fn, &r0);
	po->compute = MK_DT_F32;
	enum mk_dtype dts[2] = { d->in[0].dtype, d->in[1].dtype };
	po->out = (struct mk_tensor_desc){ .dtype = mk_promote_dtypes(2, dts), .ndim = 2, .shape = { r0, fn } };
	po->nmore = 2;
	po->more[0] = (struct mk_tensor_desc){ .dtype = po->out.dtype, .ndim = 2, .shape = { fm, r0 } };
	po->more[1] = (struct mk_tensor_desc){ .dtype = MK_DT_F64, .ndim = 1, .shape = { 2 } };
	/* the delta gathered (float32), then the factorisation's allocations */
	struct mk_lowrank_opts o;
	lowrank_opts(d->global, d->seed, &o);
	uint64_t ws = mk_lowrank_working_set(d->in[0].shape[0], d->in[0].shape[1], d->global[P_TRANSPOSE].b, &o);
	uint64_t m0 = d->in[0].shape[0], n0 = d->in[0].shape[1];
	uint64_t delta = m0 && n0 > UINT64_MAX / sizeof(float) / m0 ? UINT64_MAX : m0 * n0 * sizeof(float);
	po->work_bytes = ws && delta <= UINT64_MAX - ws ? delta + ws : UINT64_MAX;
	return 0;
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return 1;
}

static void release(struct mk_job *job)
{
	struct state *s = job->state;

	if (!s)
		return;
	free(s->delta);
	mk_lowrank_free(&s->lr);
	free(s);
	job->state = NULL;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));
	uint64_t fm, fn;

	job->state = s;
	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	s->m = job->d.in[0].shape[0];
	s->n = job->d.in[0].shape[1];
	shape_of(&job->d, job->global, &fm, &fn, &s->r0);
	if (s->m && s->n > SIZE_MAX / sizeof(float) / s->m)
		return mk_err_set(err, MK_ENOMEM, "tensor '%s' is too large", job->d.tensor);
	uint64_t count = s->m * s->n;
	s->delta = malloc((size_t)(count ? count : 1) * sizeof(float));
	return s->delta ? 0 : mk_err_set(err, MK_ENOMEM, "tensor '%s': out of memory for its delta (%llu bytes)",
					 job->d.tensor, (unsigned long long)(s->m * s->n * sizeof(float)));
}

/* FT - BASE, rounded to the inputs' promoted dtype as mergekit's
 * subtraction is */
static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c, struct mk_err *err)
{
	struct state *s = job->state;
	int b = job->d.base < 0 ? 0 : job->d.base;
	const float *base = c->in[b], *ft = c->in[1 - b];
	float *dst = s->delta + c->elem_begin;
	enum mk_dtype dt = job->out.dtype;

	for (uint64_t k = 0; k < c->count; k++)
		dst[k] = ft[k] - base[k];
	if (dt != MK_DT_F32 && dt != MK_DT_F64) {
		/* round each difference to the dtype, in place through a small buffer */
		uint16_t tmp[512];
		for (uint64_t k = 0; k < c->count; k += 512) {
			uint64_t q = c->count - k < 512 ? c->count - k : 512;
			if (mk_dtype_bits(dt) != 16 || mk_dtype_convert(dt, tmp, MK_DT_F32, dst + k, q) ||
			    mk_dtype_convert(MK_DT_F32, dst + k, dt, tmp, q))
				return mk_err_set(err, MK_EUNSUPPORTED, "tensor '%s': differences in %s are not supported",
						  job->d.tensor, mk_dtype_name(dt));
		}
	}
	return 0;
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	const struct mk_pval *g = job->global;
	struct mk_lowrank_opts o;
	int rc;

	lowrank_opts(g, job->d.seed, &o);
	rc = mk_lowrank_factor(s->delta, s->m, s->n, g[P_TRANSPOSE].b, &o, &s->lr, err);
	if (rc == -MK_EUNSUPPORTED && o.cuda) {   /* no device after all: the CPU */
		mk_lowrank_free(&s->lr);
		o.cuda = false;
		rc = mk_lowrank_factor(s->delta, s->m, s->n, g[P_TRANSPOSE].b, &o, &s->lr, err);
	}
	free(s->delta);
	s->delta = NULL;
	if (rc)
		return mk_err_prefix(err, "tensor '%s': ", job->d.tensor ? job->d.tensor : "?");
	s->done = true;
	return 0;
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	struct state *s = job->state;
	const struct mk_lowrank *lr = &s->lr;
	float *o = out;

	for (uint64_t k = 0; k < c->count; k++) {
		uint64_t e = c->elem_begin + k;
		switch (c->output) {
		case 0: {   /* A [r0, n]: row i is kept row i, or zeros */
			uint64_t i = e / lr->n, j = e % lr->n;
			o[k] = i < lr->rank ? lr->a[i * lr->n + j] : 0.0f;
			break;
		}
		case 1: {   /* B [m, r0] */
			uint64_t i = e / s->r0, j = e % s->r0;
			o[k] = j < lr->rank ? lr->b[i * lr->rank + j] : 0.0f;
			break;
		}
		default:
			o[k] = e == 0 ? (float)lr->rank : (float)lr->rel_error;
		}
	}
	return 0;
}

const struct mk_method mk_method_lora_extract = {
	.abi = MK_METHOD_ABI,
	.name = "lora_extract",
	.pretty_name = "LoRA extraction",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 2, .max_inputs = 2, .min_non_base = 1, .max_non_base = 1 },
	.whole_tensor = true,
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
