/* param.c - parameter settings: evaluation for (tensor, t), the precedence
 * of levels, and dtype names. */
#include <math.h>
#include <string.h>
#include "config_impl.h"

const struct mk_pvalue *mk_params_find(const struct mk_params *p, const char *name)
{
	if (!p)
		return NULL;
	for (size_t i = 0; i < p->n; i++)
		if (strcmp(p->v[i].name, name) == 0)
			return &p->v[i].value;
	return NULL;
}

/* mergekit's gradient formula, in double, in its operation order.  The
 * products go through volatile stores so that no compiler contracts them
 * into a fused multiply-add (-ffp-contract=fast is GCC's default). */
static double gradient(const double *v, size_t n, double t)
{
	double s = t * (double)(n - 1);
	size_t i0 = (size_t)s;              /* trunc; s >= 0 */
	size_t i1 = i0 + 1 < n ? i0 + 1 : n - 1;
	double f = s - (double)i0;
	volatile double a, b;

	if (i0 > n - 1)                     /* cannot happen for t <= 1 */
		i0 = n - 1;
	a = (1 - f) * v[i0];
	b = f * v[i1];
	return a + b;
}

static bool matches(const char *filter, const char *tensor)
{
	if (!filter || strcmp(filter, "*") == 0)
		return true;
	return tensor && tensor[0] && strstr(tensor, filter) != NULL;
}

bool mk_pvalue_eval(const struct mk_pvalue *v, const char *tensor, double t,
		    double *out)
{
	if (!(t >= 0))
		t = 0;
	if (t > 1)
		t = 1;
	switch (v->kind) {
	case MK_PV_SCALAR:
		*out = v->scalar;
		return true;
	case MK_PV_GRADIENT:
		if (v->n == 0)
			return false;
		*out = gradient(v->grad, v->n, t);
		return true;
	case MK_PV_CONDS:
		for (size_t i = 0; i < v->nconds; i++)
			if (matches(v->conds[i].filter, tensor))
				/* Conditionals do not nest: the value decides,
				 * even with no result (as mergekit). */
				return v->conds[i].value.kind != MK_PV_CONDS &&
				       mk_pvalue_eval(&v->conds[i].value, tensor, t, out);
		return false;
	}
	return false;
}

static bool eval_in(const struct mk_params *p, const char *name,
		    const char *tensor, double t, double *out)
{
	const struct mk_pvalue *v = mk_params_find(p, name);

	return v && mk_pvalue_eval(v, tensor, t, out);
}

enum mk_param_level mk_param_lookup(const struct mk_param_ctx *sc,
				    const char *name,
				    const struct mk_model_ref *model,
				    const char *tensor, double t, double *out)
{
	const struct mk_output_slice *s = sc->slice;

	if (s && model)
		for (size_t i = 0; i < s->nsources; i++)
			if (mk_model_ref_equal(&s->sources[i].model, model) &&
			    eval_in(&s->sources[i].params, name, tensor, t, out))
				return MK_PL_SOURCE;
	if (s && eval_in(&s->params, name, tensor, t, out))
		return MK_PL_SLICE;
	if (eval_in(sc->module, name, tensor, t, out))
		return MK_PL_MODULE;
	if (eval_in(sc->top, name, tensor, t, out))
		return MK_PL_TOP;
	return MK_PL_NONE;
}

