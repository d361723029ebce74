/* method.c - the merge-method registry, parameter checks, planning and
 * the job wrappers every caller goes through. */
#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"
#include "core/bug.h"
#include "methods/builtin.h"
#include "methods/spec.h"

/* ------------------------------------------------------------- registry */

static const struct mk_method **reg;
static size_t nreg, capreg;
static pthread_once_t builtins_once = PTHREAD_ONCE_INIT;

/* In mergekit's registration order (its static registry first, then the
 * methods defined with its merge_method decorator). */
static const struct mk_method *const builtins[] = {
	&mk_method_linear,
	&mk_method_slerp,
	&mk_method_nuslerp,
	&mk_method_passthrough,
	&mk_method_model_stock,
	&mk_method_arcee_fusion,
	&mk_method_karcher,
	&mk_method_task_arithmetic,
	&mk_method_ties,
	&mk_method_dare_ties,
	&mk_method_dare_linear,
	&mk_method_breadcrumbs,
	&mk_method_breadcrumbs_ties,
	&mk_method_della,
	&mk_method_della_linear,
	&mk_method_multislerp,
	&mk_method_nearswap,
	&mk_method_ram,
	&mk_method_ramplus_tl,
	&mk_method_sce,
};

static const struct mk_method *const unlisted[] = {
	&mk_method_lora_extract,
	&mk_method_delta,
};

static const struct mk_method *find_unlisted(const char *name)
{
	for (size_t i = 0; i < sizeof(unlisted) / sizeof(unlisted[0]); i++)
		if (!strcmp(unlisted[i]->name, name))
			return unlisted[i];
	return NULL;
}

bool mk_method_is_tool(const struct mk_method *m)
{
	return m && find_unlisted(m->name) == m;
}

static int do_register(const struct mk_method *m, struct mk_err *err);

static bool builtins_short;   /* out of memory while registering them */

static void register_builtins(void)
{
	struct mk_err e;

	for (size_t i = 0; i < sizeof(builtins) / sizeof(builtins[0]); i++)
		if (do_register(builtins[i], &e)) {
			if (e.code != MK_ENOMEM)
				MK_BUG("built-in method '%s' does not register: %s", builtins[i]->name, e.msg);
			builtins_short = true;
			return;
		}
}

static void ensure_builtins(void)
{
	pthread_once(&builtins_once, register_builtins);
}

static bool valid_name(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_'))
			return false;
	return true;
}

static bool pval_in_bounds(const struct mk_param_spec *ps, double v)
{
	if (ps->flags & MK_PF_MIN) {
		if (ps->flags & MK_PF_MIN_EXCL ? !(v > ps->min) : !(v >= ps->min))
			return false;
	}
	if (ps->flags & MK_PF_MAX) {
		if (ps->flags & MK_PF_MAX_EXCL ? !(v < ps->max) : !(v <= ps->max))
			return false;
	}
	return true;
}

static int check_spec(const struct mk_method *m, struct mk_err *err)
{
	const struct mk_contract *c = &m->contract;

	if (c->min_inputs > c->max_inputs || c->min_non_base > c->max_non_base)
		return mk_err_set(err, MK_EINVAL, "method '%s': arity bounds are inverted", m->name);
	if (m->nparams && !m->params)
		return mk_err_set(err, MK_EINVAL, "method '%s': %zu parameters but no table",
				  m->name, m->nparams);
	for (size_t p = 0; p < m->nparams; p++) {
		const struct mk_param_spec *ps = &m->params[p];
		if (!valid_name(ps->name))
			return mk_err_set(err, MK_EINVAL, "method '%s': parameter %zu: bad name",
					  m->name, p);
		for (size_t q = 0; q < p; q++)
			if (!strcmp(m->params[q].name, ps->name))
				return mk_err_set(err, MK_EINVAL,
						  "method '%s': parameter '%s' declared twice",
						  m->name, ps->name);
		if (ps->scope > MK_SCOPE_PER_NON_BASE || ps->type > MK_PT_BOOL)
			return mk_err_set(err, MK_EINVAL, "method '%s': parameter '%s': bad scope or type",
					  m->name, ps->name);
		if ((ps->flags & MK_PF_REQUIRED) && ps->def.set)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s': parameter '%s' is required and has a default",
					  m->name, ps->name);
		if (ps->def.set) {
			if (ps->def.type != ps->type)
				return mk_err_set(err, MK_EINVAL,
						  "method '%s': parameter '%s': default of the wrong type",
						  m->name, ps->name);
			if (ps->type != MK_PT_BOOL &&
			    !pval_in_bounds(ps, ps->type == MK_PT_FLOAT ? ps->def.f : (double)ps->def.i))
				return mk_err_set(err, MK_EINVAL,
						  "method '%s': parameter '%s': default out of bounds",
						  m->name, ps->name);
		}
	}
	return 0;
}

static int do_register(const struct mk_method *m, struct mk_err *err)
{
	int rc;

	if (!m)
		return mk_err_set(err, MK_EINVAL, "no method given");
	if (m->abi != MK_METHOD_ABI)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s': built for method ABI %u, this libmk has ABI %u",
				  m->name ? m->name : "?", (unsigned)m->abi, (unsigned)MK_METHOD_ABI);
	if (!valid_name(m->name))
		return mk_err_set(err, MK_EINVAL, "method name '%s' is not [a-z0-9_]+",
				  m->name ? m->name : "");
	if (!m->apply || !m->output)
		return mk_err_set(err, MK_EINVAL, "method '%s': no apply kernel or output rule", m->name);
	rc = check_spec(m, err);
	if (rc)
		return rc;
	for (size_t i = 0; i < nreg; i++)
		if (!strcmp(reg[i]->name, m->name))
			return mk_err_set(err, MK_EEXIST, "merge method '%s' is already registered",
					  m->name);
	if (find_unlisted(m->name))
		return mk_err_set(err, MK_EEXIST, "'%s' is the name of one of libmk's own methods", m->name);
	if (nreg == capreg) {
		size_t cap = capreg ? capreg * 2 : 16;
		const struct mk_method **p = realloc(reg, cap * sizeof(*reg));
		if (!p)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		reg = p;
		capreg = cap;
	}
	reg[nreg++] = m;
	return 0;
}

int mk_method_register(const struct mk_method *m, struct mk_err *err)
{
	ensure_builtins();
	return do_register(m, err);
}

const struct mk_method *mk_method_find(const char *name)
{
	ensure_builtins();
	if (!name)
		return NULL;
	for (size_t i = 0; i < nreg; i++)
		if (!strcmp(reg[i]->name, name))
			return reg[i];
	return find_unlisted(name);
}

size_t mk_method_count(void)
{
	ensure_builtins();
	return nreg;
}

const struct mk_method *mk_method_at(size_t i)
{
	ensure_builtins();
	return i < nreg ? reg[i] : NULL;
}

size_t mk_edit_distance(const char *a, const char *b)
{
	/* Optimal string alignment: insert, delete, substitute, swap two
	 * neighbours; three rows of the dynamic programme. */
	size_t la = strlen(a), lb = strlen(b), d = SIZE_MAX;
	size_t *buf = malloc(3 * (lb + 1) * sizeof(*buf));
	size_t *pp, *prev, *cur;

	if (!buf)
		goto out;
	pp = buf;
	prev = buf + lb + 1;
	cur = buf + 2 * (lb + 1);
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		int ca = tolower((unsigned char)a[i - 1]);
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			int cb = tolower((unsigned char)b[j - 1]);
			size_t v = prev[j - 1] + (ca != cb);
			if (prev[j] + 1 < v)
				v = prev[j] + 1;
			if (cur[j - 1] + 1 < v)
				v = cur[j - 1] + 1;
			if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == cb && pp[j - 2] + 1 < v)
				v = pp[j - 2] + 1;
			cur[j] = v;
		}
		size_t *t = pp;
		pp = prev;
		prev = cur;
		cur = t;
	}
	d = prev[lb];
out:
	free(buf);
	return d;
}

const char *mk_method_closest(const char *name)
{
	const char *best = NULL;
	size_t bestd = SIZE_MAX, limit;

	ensure_builtins();
	if (!name)
		return NULL;
	limit = strlen(name) / 3;
	if (limit < 1)
		limit = 1;
	for (size_t i = 0; i < nreg; i++) {
		size_t d = mk_edit_distance(name, reg[i]->name);
		if (d < bestd) {
			bestd = d;
			best = reg[i]->name;
		}
	}
	return bestd <= limit ? best : NULL;
}

int mk_method_lookup(const char *name, const struct mk_method **out, struct mk_err *err)
{
	const struct mk_method *m = mk_method_find(name);
	const char *near;

	*out = m;
	if (m)
		return 0;
	if (builtins_short)
		return mk_err_set(err, MK_ENOMEM, "out of memory registering the built-in merge methods");
	near = mk_method_closest(name);
	if (near)
		return mk_err_set(err, MK_ENOENT, "unknown merge method '%s' (did you mean '%s'?)",
				  name ? name : "", near);
	return mk_err_set(err, MK_ENOENT,
			  "unknown merge method '%s' (mk-merge --list-methods lists them)",
			  name ? name : "");
}

int mk_method_param_index(const struct mk_method *m, const char *name)
{
	for (size_t p = 0; p < m->nparams; p++)
		if (!strcmp(m->params[p].name, name))
			return (int)p;
	return -1;
}

const char *mk_method_param_hint(const struct mk_method *m, const char *name, char *buf, size_t len)
{
	const char *best = NULL;
	size_t bd = SIZE_MAX, n = strlen(name), at;

	for (size_t k = 0; k < m->nparams; k++) {
		size_t dist = mk_edit_distance(name, m->params[k].name);
		if (dist < bd) {
			bd = dist;
			best = m->params[k].name;
		}
	}
	if (best && bd <= (n >= 10 ? 3u : n >= 5 ? 2u : 1u)) {
		snprintf(buf, len, "did you mean '%s'?", best);
		return buf;
	}
	if (!m->nparams) {
		snprintf(buf, len, "%s takes none", m->name);
		return buf;
	}
	at = (size_t)snprintf(buf, len, "%s's are: ", m->name);
	for (size_t k = 0; k < m->nparams && at < len; k++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", k ? ", " : "", m->params[k].name);
	return buf;
}

int mk_method_param_put(const struct mk_method *m, const char *name, long input, size_t ninputs,
			bool broadcast, struct mk_pval v, struct mk_pval *global, struct mk_pval *inputs,
			struct mk_err *err)
{
	int p = mk_method_param_index(m, name);
	char hint[512];

	if (p < 0)
		return mk_err_set(err, MK_EINVAL, "%s has no parameter '%s' (%s)", m->name, name,
				  mk_method_param_hint(m, name, hint, sizeof(hint)));
	if (m->params[p].scope == MK_SCOPE_GLOBAL) {
		if (input >= 0)
			return mk_err_set(err, MK_EINVAL,
					  "parameter '%s' is given per input, but %s's '%s' is one value for all inputs",
					  name, m->name, name);
		global[p] = v;
		return 0;
	}
	if (input < 0 && !broadcast)
		return mk_err_set(err, MK_EINVAL,
				  "parameter '%s' is given once for all inputs, but %s's '%s' is set per input",
				  name, m->name, name);
	if (input >= 0 && (size_t)input >= ninputs)
		return mk_err_set(err, MK_EINVAL, "parameter '%s' is given for input %ld of %zu", name, input,
				  ninputs);
	size_t i0 = input < 0 ? 0 : (size_t)input, i1 = input < 0 ? ninputs : i0 + 1;
	for (size_t i = i0; i < i1; i++)
		inputs[i * m->nparams + (size_t)p] = v;
	return 0;
}

/* --------------------------------------------------------- parameters */

static const char *type_name(enum mk_param_type t)
{
	switch (t) {
	case MK_PT_FLOAT: return "a number";
	case MK_PT_INT: return "an integer";
	case MK_PT_BOOL: return "true or false";
	}
	return "?";
}

/* "input 2 ('model-b')" into buf. */
static const char *input_label(const struct mk_job_desc *d, size_t i, char *buf, size_t len)
{
	if (d->labels && d->labels[i])
		snprintf(buf, len, " for input %zu ('%s')", i, d->labels[i]);
	else
		snprintf(buf, len, " for input %zu", i);
	return buf;
}

/* Check and normalise one value; `where` names the input ("" for global). */
static int resolve_one(const struct mk_method *m, const struct mk_job_desc *d,
		       const struct mk_param_spec *ps, const struct mk_pval *in,
		       struct mk_pval *outv, const char *where, struct mk_err *err)
{
	struct mk_pval v = in ? *in : (struct mk_pval){ .set = false };
	const char *tn = d->tensor ? d->tensor : "?";

	if (!v.set) {
		if (ps->flags & MK_PF_REQUIRED)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter '%s' is required%s",
					  m->name, tn, ps->name, where);
		v = ps->def;
		goto out;
	}
	switch (ps->type) {
	case MK_PT_FLOAT:
		if (v.type == MK_PT_INT) {
			v.f = (double)v.i;
			v.type = MK_PT_FLOAT;
		}
		if (v.type != MK_PT_FLOAT)
			goto bad_type;
		if (!isfinite(v.f))
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter '%s'%s must be a finite number",
					  m->name, tn, ps->name, where);
		break;
	case MK_PT_INT:
		if (v.type == MK_PT_FLOAT) {
			if (!isfinite(v.f) || v.f != floor(v.f) || v.f < -0x1p63 || v.f >= 0x1p63)
				return mk_err_set(err, MK_EINVAL,
						  "method '%s', tensor '%s': parameter '%s'%s must be an integer (got %g)",
						  m->name, tn, ps->name, where, v.f);
			v.i = (int64_t)v.f;
			v.type = MK_PT_INT;
		}
		if (v.type != MK_PT_INT)
			goto bad_type;
		break;
	case MK_PT_BOOL:
		if (v.type != MK_PT_BOOL)
			goto bad_type;
		break;
	}
	if (ps->type != MK_PT_BOOL) {
		double x = ps->type == MK_PT_FLOAT ? v.f : (double)v.i;
		if (!pval_in_bounds(ps, x)) {
			char lo[64] = "", hi[64] = "";
			if (ps->flags & MK_PF_MIN)
				snprintf(lo, sizeof(lo), " %s %g", ps->flags & MK_PF_MIN_EXCL ? ">" : ">=",
					 ps->min);
			if (ps->flags & MK_PF_MAX)
				snprintf(hi, sizeof(hi), "%s %s %g", *lo ? " and" : "",
					 ps->flags & MK_PF_MAX_EXCL ? "<" : "<=", ps->max);
			return mk_err_set(err, MK_EINVAL,
					  "method '%s', tensor '%s': parameter '%s'%s is %g; it must be%s%s",
					  m->name, tn, ps->name, where, x, lo, hi);
		}
	}
	goto out;
bad_type:
	return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': parameter '%s'%s must be %s",
			  m->name, tn, ps->name, where, type_name(ps->type));
out:
	*outv = v;
	return 0;
}

int mk_method_check_params(const struct mk_method *m, const struct mk_job_desc *d,
			   struct mk_pval *global_out, struct mk_pval *input_out,
			   struct mk_err *err)
{
	size_t np = m->nparams;
	char where[512];
	int rc = 0;

	for (size_t p = 0; p < np; p++) {
		const struct mk_param_spec *ps = &m->params[p];
		struct mk_pval v;

		if (global_out)
			global_out[p] = (struct mk_pval){ .set = false };
		for (size_t i = 0; input_out && i < d->ninputs; i++)
			input_out[i * np + p] = (struct mk_pval){ .set = false };
		if (ps->scope == MK_SCOPE_GLOBAL) {
			rc = resolve_one(m, d, ps, d->global ? &d->global[p] : NULL, &v, "", err);
			if (rc)
				goto out;
			if (global_out)
				global_out[p] = v;
			continue;
		}
		for (size_t i = 0; i < d->ninputs; i++) {
			if (ps->scope == MK_SCOPE_PER_NON_BASE && (int)i == d->base)
				continue;
			rc = resolve_one(m, d, ps, d->input ? &d->input[i * np + p] : NULL, &v,
					 input_label(d, i, where, sizeof(where)), err);
			if (rc)
				goto out;
			if (input_out)
				input_out[i * np + p] = v;
		}
	}
out:
	return rc;
}

static int check_contract(const struct mk_method *m, const struct mk_job_desc *d,
			  struct mk_err *err)
{
	const struct mk_contract *c = &m->contract;
	const char *tn = d->tensor ? d->tensor : "?";
	size_t n = d->ninputs, nb;

	if (d->base < -1 || (d->base >= 0 && (size_t)d->base >= n))
		return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': base index %d out of range",
				  m->name, tn, d->base);
	if (n && !d->in)
		return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': no input descriptions",
				  m->name, tn);
	if (c->base == MK_BASE_REQUIRED && d->base < 0)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s' needs a base model, and tensor '%s' has none",
				  m->name, tn);
	if (c->base == MK_BASE_FORBIDDEN && d->base >= 0)
		return mk_err_set(err, MK_EINVAL, "method '%s' takes no base model (tensor '%s')",
				  m->name, tn);
	nb = n - (d->base >= 0);
	if (n < c->min_inputs || n > c->max_inputs) {
		if (c->min_inputs == c->max_inputs)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s' expects exactly %u input tensor%s, tensor '%s' has %zu",
					  m->name, (unsigned)c->min_inputs, c->min_inputs == 1 ? "" : "s", tn, n);
		if (n < c->min_inputs)
			return mk_err_set(err, MK_EINVAL,
					  "method '%s' expects at least %u input tensors, tensor '%s' has %zu",
					  m->name, (unsigned)c->min_inputs, tn, n);
		return mk_err_set(err, MK_EINVAL,
				  "method '%s' expects at most %u input tensors, tensor '%s' has %zu",
				  m->name, (unsigned)c->max_inputs, tn, n);
	}
	if (nb < c->min_non_base)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s': tensor '%s' has %zu inputs besides the base, it needs at least %u",
				  m->name, tn, nb, (unsigned)c->min_non_base);
	if (nb > c->max_non_base)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s': tensor '%s' has %zu inputs besides the base, it takes at most %u",
				  m->name, tn, nb, (unsigned)c->max_non_base);
	for (size_t i = 0; i < n; i++)
		if (d->in[i].ndim > MK_MAX_DIMS)
			return mk_err_set(err, MK_EINVAL, "method '%s', tensor '%s': input %zu has %u dimensions",
					  m->name, tn, i, d->in[i].ndim);
	return 0;
}

/* ------------------------------------------------------------- planning */

/* The output rule and the passes of d, its contract checked and its
 * parameters resolved. */
static int run_rule(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		    struct mk_err *err)
{
	int rc;

	memset(po, 0, sizeof(*po));
	po->compute = MK_DT_F32;
	for (size_t i = 0; i < d->ninputs; i++)
		used[i] = true;
	rc = m->output(m, d, po, used, err);
	if (rc)
		return rc;
	if (po->compute != MK_DT_F32 && po->compute != MK_DT_F64)
		MK_BUG("method '%s': compute dtype %d", m->name, po->compute);
	po->npasses = m->npasses ? m->npasses(m, d, used) : 0;
	if (po->nmore > MK_MORE_OUTPUTS_MAX)
		MK_BUG("method '%s': %u further outputs", m->name, po->nmore);
	if (po->nmore && !po->npasses)
		return mk_err_set(err, MK_EINVAL,
				  "method '%s', tensor '%s': %u outputs but no statistics pass to compute them from",
				  m->name, d->tensor ? d->tensor : "?", po->nmore + 1);
	return 0;
}

int mk_method_replan(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po,
		     bool *used, struct mk_err *err)
{
	int rc = check_contract(m, d, err);

	return rc ? rc : run_rule(m, d, po, used, err);
}

int mk_method_plan(const struct mk_method *m, const struct mk_job_desc *d,
		   struct mk_plan_out *po, struct mk_pval *global_out,
		   struct mk_pval *input_out, bool *used, struct mk_err *err)
{
	size_t np = m->nparams, n = d->ninputs;
	struct mk_pval *g = global_out, *in = input_out;
	bool *u = used;
	struct mk_job_desc rd;
	int rc;

	if (!g)
		g = calloc(np + 1, sizeof(*g));
	if (!in)
		in = calloc(np * n + 1, sizeof(*in));
	if (!u)
		u = calloc(n + 1, sizeof(*u));
	if (!g || !in || !u) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = check_contract(m, d, err);
	if (rc)
		goto out;
	rc = mk_method_check_params(m, d, g, in, err);
	if (rc)
		goto out;
	rd = *d;
	rd.global = g;
	rd.input = in;
	rc = run_rule(m, &rd, po, u, err);
out:
	if (g != global_out)
		free(g);
	if (in != input_out)
		free(in);
	if (u != used)
		free(u);
	return rc;
}

/* ------------------------------------------------------------------ jobs */

void mk_job_release(struct mk_job *job)
{
	if (!job)
		return;
	if (job->method && job->method->release)
		job->method->release(job);
	free(job->global);
	free(job->input);
	free(job->used);
	memset(job, 0, sizeof(*job));
}

static bool same_shape(const struct mk_tensor_desc *a, const struct mk_tensor_desc *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (unsigned k = 0; k < a->ndim; k++)
		if (a->shape[k] != b->shape[k])
			return false;
	return true;
}

int mk_job_init(struct mk_job *job, const struct mk_method *m, const struct mk_job_desc *d,
		enum mk_dtype out_dtype, struct mk_err *err)
{
	size_t np = m->nparams, n = d->ninputs;
	struct mk_plan_out po;
	int rc;

	memset(job, 0, sizeof(*job));
	job->method = m;
	job->copy_input = -1;
	job->global = calloc(np + 1, sizeof(*job->global));
	job->input = calloc(np * n + 1, sizeof(*job->input));
	job->used = calloc(n + 1, sizeof(*job->used));
	if (!job->global || !job->input || !job->used) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = mk_method_plan(m, d, &po, job->global, job->input, job->used, err);
	if (rc)
		goto out;
	job->d = *d;
	job->d.global = job->global;
	job->d.input = job->input;
	job->out = po.out;
	job->compute = po.compute;
	job->npasses = po.npasses;
	job->nelem = mk_tensor_desc_count(&po.out);
	job->nmore = po.nmore;
	job->pass_nelem = job->nelem;
	if (po.nmore) {
		/* the passes go over the inputs' own elements: one shape */
		int first = -1;
		for (size_t i = 0; i < n; i++) {
			if (!job->used[i])
				continue;
			if (first < 0)
				first = (int)i;
			else if (!same_shape(&d->in[i], &d->in[first])) {
				rc = mk_err_set(err, MK_EMISMATCH,
						"method '%s', tensor '%s': inputs %d and %zu differ in shape (a job with several outputs reads inputs of one shape)",
						m->name, d->tensor ? d->tensor : "?", first, i);
				goto out;
			}
		}
		job->pass_nelem = first < 0 ? 0 : mk_tensor_desc_count(&d->in[first]);
	}
	for (unsigned k = 0; k < po.nmore; k++)
		job->more[k] = po.more[k];   /* (out_dtype is output 0's alone) */
	if (out_dtype != MK_DT_COUNT && out_dtype != po.out.dtype) {
		if (out_dtype > MK_DT_COUNT || !mk_dtype_is_float(out_dtype) ||
		    !mk_dtype_is_float(po.out.dtype)) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"method '%s', tensor '%s': cannot write %s output as %s",
					m->name, d->tensor ? d->tensor : "?",
					mk_dtype_name(po.out.dtype) ? mk_dtype_name(po.out.dtype) : "?",
					mk_dtype_name(out_dtype) ? mk_dtype_name(out_dtype) : "?");
			goto out;
		}
		job->out.dtype = out_dtype;
	}
	if (m->init) {
		rc = m->init(job, err);
		if (rc) {
			/* a failed init may have set up part of its state */
			if (m->release)
				m->release(job);
			goto out;
		}
	}
	if (job->copy_input >= 0) {
		const struct mk_tensor_desc *src = &d->in[job->copy_input];
		job->byte_copy = src->dtype == job->out.dtype && same_shape(src, &job->out);
	}
out:
	if (rc) {
		/* the method's state is released (or was never made) */
		job->method = NULL;
		mk_job_release(job);
	}
	return rc;
}

int mk_job_accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c,
		      struct mk_err *err)
{
	if (pass >= job->npasses || pass != job->pass_done)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': statistics pass %u out of order",
				  job->d.tensor ? job->d.tensor : "?", pass);
	if (c->elem_begin != job->next_elem || c->count > job->pass_nelem - job->next_elem)
		return mk_err_set(err, MK_EINVAL,
				  "tensor '%s': pass %u chunk at element %llu (+%llu), expected element %llu of %llu",
				  job->d.tensor ? job->d.tensor : "?", pass,
				  (unsigned long long)c->elem_begin, (unsigned long long)c->count,
				  (unsigned long long)job->next_elem, (unsigned long long)job->pass_nelem);
	if (!c->count)
		return 0;
	job->next_elem += c->count;
	if (job->pass_enough)
		return 0;   /* the kernel has what this pass gathers */
	if (c->bf16 && c->in && !job->accumulate_bf16)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': BF16 inputs passed to a %s statistics pass, which takes %s",
				  job->d.tensor ? job->d.tensor : "?", job->method->name, mk_dtype_name(job->compute));
	return job->method->accumulate(job, pass, c, err);
}

bool mk_job_wants(const struct mk_job *job)
{
	return job->pass_done < job->npasses && !job->pass_enough;
}

int mk_job_finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	int rc;

	if (pass >= job->npasses || pass != job->pass_done)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': statistics pass %u out of order",
				  job->d.tensor ? job->d.tensor : "?", pass);
	/* (a pass may end early once the kernel said it has what it gathers) */
	if (job->next_elem != job->pass_nelem && !job->pass_enough)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': pass %u saw %llu of %llu elements",
				  job->d.tensor ? job->d.tensor : "?", pass,
				  (unsigned long long)job->next_elem, (unsigned long long)job->pass_nelem);
	job->pass_enough = false;   /* finish may say the next pass needs none */
	unsigned np = job->npasses;
	rc = job->method->finish(job, pass, err);
	if (rc)
		return rc;
	/* a pass added: only to a held job, one at a time */
	if (job->npasses != np && (!job->held || job->npasses != np + 1)) {
		unsigned got = job->npasses;
		job->npasses = np;
		return mk_err_set(err, MK_EINVAL,
				  "tensor '%s': method '%s' changed the job's statistics passes from %u to %u after pass %u (the job is %s)",
				  job->d.tensor ? job->d.tensor : "?", job->method->name, np, got, pass,
				  job->held ? "held" : "not held: its inputs are sent once per planned pass");
	}
	job->pass_done++;
	job->next_elem = 0;
	return 0;
}

int mk_job_apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	if (job->pass_done != job->npasses)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': apply before its %u statistics passes",
				  job->d.tensor ? job->d.tensor : "?", job->npasses);
	if (c->output > job->nmore)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': output %u of a job with %u", job->d.tensor ? job->d.tensor : "?",
				  c->output, job->nmore + 1);
	uint64_t nelem = c->output ? mk_tensor_desc_count(&job->more[c->output - 1]) : job->nelem;
	if (c->elem_begin > nelem || c->count > nelem - c->elem_begin)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': chunk [%llu, +%llu) of output %u outside %llu elements",
				  job->d.tensor ? job->d.tensor : "?",
				  (unsigned long long)c->elem_begin, (unsigned long long)c->count, c->output,
				  (unsigned long long)nelem);
	if (!c->count)
		return 0;
	if (c->bf16 && !job->apply_bf16)
		return mk_err_set(err, MK_EINVAL, "tensor '%s': BF16 inputs passed to %s's apply, which takes %s",
				  job->d.tensor ? job->d.tensor : "?", job->method->name, mk_dtype_name(job->compute));
	/* the output is one input as it is (the method said so in init) */
	if (job->copy_input >= 0 && c->in && c->in[job->copy_input]) {
		memcpy(out, c->in[job->copy_input], c->count * (job->compute == MK_DT_F64 ? 8 : 4));
		return 0;
	}
	return job->method->apply(job, c, out, err);
}

int mk_method_batch(const struct mk_method *m, const struct mk_batch *b, struct mk_err *err)
{
	if (!m->batch)
		return mk_err_set(err, MK_EUNSUPPORTED, "method '%s' has no batch kernel", m->name);
	if (b->compute != MK_DT_F32 && b->compute != MK_DT_F64)
		return mk_err_set(err, MK_EINVAL, "method '%s': batch compute dtype must be F32 or F64",
				  m->name);
	if (!b->B || !b->nelem)
		return 0;
	return m->batch(m, b, err);
}

const struct mk_pval *mk_job_input_param(const struct mk_job *job, size_t i, size_t p)
{
	return &job->input[i * job->method->nparams + p];
}

/* -------------------------------------------------------- dtype helpers */

enum mk_dtype mk_compute_dtype_of(size_t n, const enum mk_dtype *dts)
{
	for (size_t i = 0; i < n; i++)
		if (dts[i] == MK_DT_F64)
			return MK_DT_F64;
	return MK_DT_F32;
}

static int float_rank(enum mk_dtype dt)
{
	switch (dt) {
	case MK_DT_F64: return 4;
	case MK_DT_F32: return 3;
	case MK_DT_F16: case MK_DT_BF16: return 2;
	default: return 1;   /* F8 variants */
	}
}

enum mk_dtype mk_promote_dtypes(size_t n, const enum mk_dtype *dts)
{
	enum mk_dtype r;

	if (!n)
		return MK_DT_F32;
	r = dts[0];
	for (size_t i = 1; i < n; i++) {
		enum mk_dtype x = dts[i];
		int a = float_rank(r), b = float_rank(x);
		if (x == r)
			continue;
		if (a == b)
			r = MK_DT_F32;   /* F16 + BF16, or two F8 variants */
		else if (b > a)
			r = x;
	}
	return r;
}

/* --------------------------------------------------------- embeddings */

static void shape_str(const struct mk_tensor_desc *t, char *buf, size_t len)
{
	size_t o = 0;

	o += (size_t)snprintf(buf + o, len - o, "[");
	for (unsigned k = 0; k < t->ndim && o < len; k++)
		o += (size_t)snprintf(buf + o, len - o, "%s%llu", k ? ", " : "",
				      (unsigned long long)t->shape[k]);
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

int mk_rectify_shapes(const struct mk_method *m, const struct mk_job_desc *d, const bool *used,
		      struct mk_tensor_desc *out_desc, bool *rectified, struct mk_err *err)
{
	const struct mk_tensor_desc *first = NULL;
	bool all2d = true;
	uint64_t r = UINT64_MAX, c = UINT64_MAX;
	char a[128], b[128];

	*rectified = false;
	for (size_t i = 0; i < d->ninputs; i++) {
		if (used && !used[i])
			continue;
		if (!first)
			first = &d->in[i];
		if (d->in[i].ndim != 2) {
			all2d = false;
			continue;
		}
		if (d->in[i].shape[0] < r)
			r = d->in[i].shape[0];
		if (d->in[i].shape[1] < c)
			c = d->in[i].shape[1];
	}
	if (!first)
		MK_BUG("rectify over no inputs");
	out_desc->ndim = first->ndim;
	memcpy(out_desc->shape, first->shape, sizeof(out_desc->shape));
	if (d->is_embed && all2d) {
		out_desc->shape[0] = r;
		out_desc->shape[1] = c;
	}
	for (size_t i = 0; i < d->ninputs; i++) {
		if (used && !used[i])
			continue;
		if (same_shape(&d->in[i], out_desc))
			continue;
		if (d->is_embed && all2d) {
			*rectified = true;
			continue;
		}
		shape_str(first, a, sizeof(a));
		shape_str(&d->in[i], b, sizeof(b));
		return mk_err_set(err, MK_EMISMATCH,
				  "method '%s', tensor '%s': tensor size mismatch: input %zu%s%s%s has shape %s, expected %s",
				  m->name, d->tensor ? d->tensor : "?", i,
				  d->labels && d->labels[i] ? " ('" : "",
				  d->labels && d->labels[i] ? d->labels[i] : "",
				  d->labels && d->labels[i] ? "')" : "", b, a);
	}
	return 0;
}

int mk_require_float_inputs(const struct mk_method *m, const struct mk_job_desc *d,
			    const bool *used, struct mk_err *err)
{
	for (size_t i = 0; i < d->ninputs; i++) {
		const char *dn;
		if ((used && !used[i]) || mk_dtype_is_float(d->in[i].dtype))
			continue;
		dn = mk_dtype_name(d->in[i].dtype);
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "method '%s', tensor '%s': input %zu is %s; only float tensors can be merged",
				  m->name, d->tensor ? d->tensor : "?", i, dn ? dn : "an unknown dtype");
	}
	return 0;
}

int mk_output_promoted(const struct mk_method *m, const struct mk_job_desc *d, const bool *used,
		       struct mk_plan_out *po, struct mk_err *err)
{
	size_t n = d->ninputs;
	enum mk_dtype dts[n ? n : 1];
	bool rectified;
	int rc;

	if ((rc = mk_require_float_inputs(m, d, used, err)) || (rc = mk_rectify_shapes(m, d, used, &po->out, &rectified, err)))
		return rc;
	for (size_t i = 0; i < n; i++)
		dts[i] = d->in[i].dtype;
	po->out.dtype = mk_promote_dtypes(n, dts);
	po->compute = mk_compute_dtype_of(n, dts);
	return 0;
}
