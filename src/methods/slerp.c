/* slerp.c - spherical interpolation between the base and one other input
 * (t optional, as proposed in mergekit #640).
 *
 * One statistics pass sums |v0|^2, |v1|^2 and <v0, v1> over the whole
 * tensor (float64, fixed blocks: chunking does not change a bit).  Then:
 *   n_k = sqrt(|v_k|^2), a unit vector only when n_k > 1e-8 (eps);
 *   d   = <v0, v1> / (n0' * n1')  with n_k' = n_k > 1e-8 ? n_k : 1;
 *   |d| > 0.9995 (DOT_THRESHOLD, parallel or anti-parallel):
 *       out = (1 - t) * v0 + t * v1                       (lerp)
 *   else  theta0 = acos(d), theta_t = theta0 * t,
 *         s0 = sin(theta0 - theta_t) / sin(theta0), s1 = sin(theta_t) / sin(theta0),
 *         out = s0 * v0 + s1 * v1
 * The scalars are computed in float64 (numpy 1.x legacy promotion does the
 * same for theta_t, s0, s1); the two coefficients are rounded to the
 * compute dtype and the products rounded before the sum, as numpy does.
 *
 * t is optional (mergekit #640): when no value resolves for a tensor the output
 * is the base, the other input is not read (its shape may differ) and
 * there is no pass.  A job with the base alone (an optional tensor the
 * other model lacks) also returns the base.  The output has the base's
 * dtype.
 *
 * Deliberate differences: mergekit normalises both tensors in float32 and
 * sums the dot product in float32 (numpy); mk sums in float64, so d is
 * closer to the exact value (agreement ~1e-7 relative, more near the
 * threshold).  mergekit computes slerp in float32 even for float64
 * inputs; mk computes in float64 when both inputs are float64.
 */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "mk/device.h"
#include "mk/method.h"
#include "core/simd.h"
#include "methods/builtin.h"

#define DOT_THRESHOLD 0.9995
#define EPS 1e-8

enum { P_T, NPARAMS };

static const struct mk_param_spec params[NPARAMS] = {
	[P_T] = { .name = "t", .scope = MK_SCOPE_GLOBAL, .type = MK_PT_FLOAT,
		  .doc = "interpolation factor: 0 = base, 1 = the other model "
			 "(unset: the tensor is the base's)" },
};

struct state {
	int other;                 /* index of the non-base input, -1: copy base */
	struct mk_fsum sum[3];     /* |v0|^2, |v1|^2, <v0, v1> */
	double c0, c1;             /* output = c0 * base + c1 * other */
	bool lerp;                 /* finish took the lerp path (diagnostics) */
};

/* The job interpolates when t is set and there are two inputs. */
static int other_input(const struct mk_job_desc *d)
{
	if (!d->global[P_T].set || d->ninputs < 2)
		return -1;
	return d->base == 0 ? 1 : 0;
}

static int output(const struct mk_method *m, const struct mk_job_desc *d,
		  struct mk_plan_out *po, bool *used, struct mk_err *err)
{
	const struct mk_tensor_desc *b = &d->in[d->base];
	int o = other_input(d);
	bool rectified;
	int rc = 0;

	if (o < 0) {
		for (size_t i = 0; i < d->ninputs; i++)
			used[i] = (int)i == d->base;
		po->out = *b;
		po->compute = b->dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
		goto out;
	}
	rc = mk_require_float_inputs(m, d, used, err);
	if (rc)
		goto out;
	rc = mk_rectify_shapes(m, d, used, &po->out, &rectified, err);
	if (rc)
		goto out;
	{
		/* torch's promotion, as mergekit's lerp gives it (a bfloat16
		 * base and a float32 model: float32) */
		enum mk_dtype dts[2] = { b->dtype, d->in[o].dtype };
		po->out.dtype = mk_promote_dtypes(2, dts);
	}
	po->compute = b->dtype == MK_DT_F64 && d->in[o].dtype == MK_DT_F64 ? MK_DT_F64 : MK_DT_F32;
out:
	return rc;
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return other_input(d) >= 0 ? 1 : 0;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s = calloc(1, sizeof(*s));

	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	s->other = other_input(&job->d);
	if (s->other < 0) {
		s->c0 = 1.0;
		job->copy_input = job->d.base;
	}
	job->apply_bf16 = s->other >= 0 && job->compute == MK_DT_F32;   /* apply_bf16 */
	/* the statistics pass on BF16 as it is, in large chunks that
	 * mk_fsum_dots_bf16 splits over threads */
	job->accumulate_bf16 = job->apply_bf16;
	job->accumulate_chunk = job->apply_bf16 ? 1u << 20 : 0;
	job->state = s;
	return 0;
}

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	struct state *s = job->state;
	const void *x0 = c->in[job->d.base], *x1 = c->in[s->other];

	if (c->bf16)
		return mk_fsum_dots_bf16(s->sum, c->elem_begin, c->count, x0, x1, job->threads, err);
	if (job->compute == MK_DT_F64)
		mk_fsum_dots_f64(s->sum, c->elem_begin, c->count, x0, x1);
	else
		mk_fsum_dots(s->sum, c->elem_begin, c->count, x0, x1);
	return 0;
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	struct state *s = job->state;
	double t = mk_job_param(job, P_T)->f;
	double n0 = sqrt(mk_fsum_value(&s->sum[0])), n1 = sqrt(mk_fsum_value(&s->sum[1]));
	double d, theta0, theta_t, sin0;

	if (!(n0 > EPS))
		n0 = 1.0;
	if (!(n1 > EPS))
		n1 = 1.0;
	d = mk_fsum_value(&s->sum[2]) / (n0 * n1);
	if (fabs(d) > DOT_THRESHOLD) {
		s->lerp = true;
		s->c0 = 1.0 - t;
		s->c1 = t;
		return 0;
	}
	theta0 = acos(d);
	sin0 = sin(theta0);
	theta_t = theta0 * t;
	s->c0 = sin(theta0 - theta_t) / sin0;
	s->c1 = sin(theta_t) / sin0;
	return 0;
}

/* apply's float32 branch on BF16 inputs, each widened (exactly) as read. */
MK_HOT_CLONES
static void apply_bf16(uint64_t n, const uint16_t *x0, const uint16_t *x1, float a, float b, float *o)
{
	for (uint64_t e = 0; e < n; e++) {
		float p = a * mk__bf16_widen(x0[e]), q = b * mk__bf16_widen(x1[e]);
		o[e] = p + q;
	}
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct state *s = job->state;
	uint64_t n = c->count;

	if (c->bf16) {
		apply_bf16(n, c->in[job->d.base], c->in[s->other], (float)s->c0, (float)s->c1, out);
		return 0;
	}
	if (job->compute == MK_DT_F64) {
		const double *x0 = c->in[job->d.base], *x1;
		double *o = out, a = s->c0, b = s->c1;
		if (s->other < 0) {
			memcpy(o, x0, n * sizeof(*o));
			return 0;
		}
		x1 = c->in[s->other];
		for (uint64_t e = 0; e < n; e++) {
			double p = a * x0[e], q = b * x1[e];
			o[e] = p + q;
		}
	} else {
		const float *x0 = c->in[job->d.base], *x1;
		float *o = out, a = (float)s->c0, b = (float)s->c1;
		if (s->other < 0) {
			memcpy(o, x0, n * sizeof(*o));
			return 0;
		}
		x1 = c->in[s->other];
		for (uint64_t e = 0; e < n; e++) {
			float p = a * x0[e], q = b * x1[e];
			o[e] = p + q;
		}
	}
	return 0;
}

static void release(struct mk_job *job)
{
	free(job->state);
	job->state = NULL;
}

/* The device hook: apply's float32 branch is the device's SLERP kernel
 * with the coefficients rounded to float32, or COPY of the base. */
static enum mk_device_kernel device_kernel(const struct mk_job *job)
{
	const struct state *s = job->state;

	if (!s)
		return MK_DEVICE_NONE;
	return s->other < 0 ? MK_DEVICE_COPY : MK_DEVICE_SLERP;
}

static int device_state(const struct mk_job *job, struct mk_device_job *dj, struct mk_err *err)
{
	const struct state *s = job->state;

	if (!s || job->compute != MK_DT_F32)
		return mk_err_set(err, MK_EUNSUPPORTED, "slerp, tensor '%s': no device kernel for %s",
				  job->d.tensor ? job->d.tensor : "?", mk_dtype_name(job->compute));
	*dj = (struct mk_device_job){ .kernel = device_kernel(job), .base = job->d.base, .other = s->other,
				      .c0 = (float)s->c0, .c1 = (float)s->c1 };
	return 0;
}

static const struct mk_device_hook device_hook = { .kernel = device_kernel, .state = device_state };

const struct mk_method mk_method_slerp = {
	.abi = MK_METHOD_ABI,
	.name = "slerp",
	.pretty_name = "SLERP",
	.reference_url = "https://en.wikipedia.org/wiki/Slerp",
	.params = params,
	.nparams = NPARAMS,
	.contract = { .base = MK_BASE_REQUIRED, .min_inputs = 1, .max_inputs = 2,
		      .min_non_base = 0, .max_non_base = 1 },
	.device = &device_hook,
	.output = output,
	.npasses = npasses,
	.init = init,
	.accumulate = accumulate,
	.finish = finish,
	.apply = apply,
	.release = release,
};
