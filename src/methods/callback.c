/* callback.c - merge methods whose kernel is a callback on whole tensors:
 * a language binding's methods (the Python package's methods written in
 * Python) run by the same planner and merge stage as the built-ins.
 *
 * By default the kernel sees every input of one output tensor whole, so
 * the method is whole_tensor (mk-plan checks each tensor fits the merge
 * budget) and has one statistics pass: it gathers the inputs' elements in
 * the compute dtype, finish calls the kernel once, apply hands out the
 * result's elements.  A kernel that computes each element from the same
 * element of the inputs alone (MK_CALLBACK_PIECES) is called in apply on
 * each chunk instead, with no pass and nothing gathered.  The output rule is mergekit's for its methods: the inputs'
 * shapes must agree (embeddings of different vocabularies merge over their
 * common top-left block, mk_rectify_shapes), the output dtype is their
 * promotion, the compute dtype float64 when an input is float64, else
 * float32. */
#include <stdlib.h>
#include <string.h>
#include "mk/method.h"

struct callback_method {
	struct mk_method m;          /* first: the registry's pointer is this struct's */
	mk_callback_fn fn;
	void *ctx;
	bool pieces;                 /* MK_CALLBACK_PIECES: called on chunks in apply */
};

struct state {
	size_t n;
	size_t es;                   /* bytes per element of the compute dtype */
	uint8_t **in;                /* [n] whole inputs */
	uint8_t *result;
};

static int output(const struct mk_method *m, const struct mk_job_desc *d, struct mk_plan_out *po, bool *used,
		  struct mk_err *err)
{
	if (!d->ninputs)
		return mk_err_set(err, MK_EINVAL, "%s: tensor '%s': no inputs", m->name, d->tensor);
	return mk_output_promoted(m, d, used, po, err);
}

static unsigned npasses(const struct mk_method *m, const struct mk_job_desc *d, const bool *used)
{
	return ((const struct callback_method *)m)->pieces ? 0 : 1;
}

static void release(struct mk_job *job)
{
	struct state *s = job->state;

	if (!s)
		return;
	for (size_t i = 0; s->in && i < s->n; i++)
		free(s->in[i]);
	free(s->in);
	free(s->result);
	free(s);
	job->state = NULL;
}

static int init(struct mk_job *job, struct mk_err *err)
{
	struct state *s;
	uint64_t bytes;

	if (((const struct callback_method *)job->method)->pieces)
		return 0;   /* nothing gathered: apply calls the kernel */
	s = calloc(1, sizeof(*s));
	job->state = s;
	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	s->n = job->d.ninputs;
	s->es = mk_dtype_bits(job->compute) / 8;
	if (mk_dtype_nbytes(job->compute, job->nelem, &bytes) || bytes > SIZE_MAX)
		return mk_err_set(err, MK_ENOMEM, "%s: tensor '%s' is too large", job->method->name, job->d.tensor);
	s->in = calloc(s->n, sizeof(*s->in));
	if (!s->in)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	/* (a zero-sized tensor still gets buffers: malloc(1)) */
	for (size_t i = 0; i < s->n; i++)
		if (!(s->in[i] = malloc(bytes ? bytes : 1)))
			return mk_err_set(err, MK_ENOMEM, "%s: tensor '%s': out of memory for its inputs", job->method->name,
					  job->d.tensor);
	if (!(s->result = calloc(1, bytes ? bytes : 1)))
		return mk_err_set(err, MK_ENOMEM, "%s: tensor '%s': out of memory for its output", job->method->name,
				  job->d.tensor);
	return 0;
}

static int accumulate(struct mk_job *job, unsigned pass, const struct mk_job_chunk *c, struct mk_err *err)
{
	struct state *s = job->state;

	for (size_t i = 0; i < s->n; i++)
		memcpy(s->in[i] + c->elem_begin * s->es, c->in[i], c->count * s->es);
	return 0;
}

/* The kernel's call, its failure reported as the method's. */
static int run_kernel(const struct callback_method *cm, const struct mk_callback_call *call, struct mk_err *err)
{
	int rc;

	err->msg[0] = '\0';
	rc = cm->fn(cm->ctx, call, err);
	if (rc) {
		if (!err->msg[0])
			mk_err_set(err, MK_EIO, "%s: tensor '%s': the kernel failed", cm->m.name, call->d->tensor);
		return rc < 0 ? rc : -MK_EIO;
	}
	return 0;
}

static int finish(struct mk_job *job, unsigned pass, struct mk_err *err)
{
	const struct callback_method *cm = (const struct callback_method *)job->method;
	struct state *s = job->state;
	struct mk_tensor_desc out = job->out;
	struct mk_callback_call whole = { .d = &job->d, .global = job->global, .input = job->input, .out = &out,
					  .in = (const void *const *)s->in, .result = s->result };

	out.dtype = job->compute;
	return run_kernel(cm, &whole, err);
}

static int apply(struct mk_job *job, const struct mk_job_chunk *c, void *out, struct mk_err *err)
{
	const struct callback_method *cm = (const struct callback_method *)job->method;
	struct state *s = job->state;

	if (cm->pieces) {
		/* the chunk as a tensor of its own: count elements */
		struct mk_tensor_desc piece = { .dtype = job->compute, .ndim = 1, .shape = { c->count } };
		struct mk_callback_call pc = { .d = &job->d, .global = job->global, .input = job->input, .out = &piece,
					       .in = c->in, .result = out, .elem_begin = c->elem_begin };
		return run_kernel(cm, &pc, err);
	}
	memcpy(out, s->result + c->elem_begin * s->es, c->count * s->es);
	return 0;
}

/* A copy the registry may keep: the strings and the parameter specs. */
static void callback_free(struct callback_method *cm)
{
	if (!cm)
		return;
	for (size_t p = 0; p < cm->m.nparams; p++) {
		free((char *)cm->m.params[p].name);
		free((char *)cm->m.params[p].doc);
	}
	free((struct mk_param_spec *)cm->m.params);
	free((char *)cm->m.name);
	free((char *)cm->m.pretty_name);
	free((char *)cm->m.reference_url);
	free(cm);
}

static char *dup_or_null(const char *s, bool *bad)
{
	char *d = s ? strdup(s) : NULL;

	if (s && !d)
		*bad = true;
	return d;
}

int mk_method_register_callback(const char *name, const char *pretty_name, const char *reference_url,
				const struct mk_param_spec *params, size_t nparams, const struct mk_contract *contract,
				unsigned flags, mk_callback_fn fn, void *ctx, struct mk_err *err)
{
	struct callback_method *cm;
	struct mk_param_spec *ps;
	bool bad = false;
	int rc;

	if (!name || !fn || !contract || (nparams && !params))
		return mk_err_set(err, MK_EINVAL, "a callback method needs a name, a contract and a kernel");
	cm = calloc(1, sizeof(*cm));
	ps = calloc(nparams ? nparams : 1, sizeof(*ps));
	if (!cm || !ps) {
		free(cm);
		free(ps);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	if (flags & ~MK_CALLBACK_PIECES) {
		free(cm);
		free(ps);
		return mk_err_set(err, MK_EINVAL, "%s: unknown callback method flags 0x%x", name, flags);
	}
	cm->pieces = flags & MK_CALLBACK_PIECES;
	cm->m = (struct mk_method){ .abi = MK_METHOD_ABI, .params = ps, .contract = *contract, .whole_tensor = !cm->pieces,
				    .output = output, .npasses = npasses, .init = init, .accumulate = accumulate,
				    .finish = finish, .apply = apply, .release = release };
	cm->fn = fn;
	cm->ctx = ctx;
	for (size_t p = 0; p < nparams; p++) {
		ps[p] = params[p];
		ps[p].name = dup_or_null(params[p].name, &bad);
		ps[p].doc = dup_or_null(params[p].doc, &bad);
		cm->m.nparams = p + 1;
	}
	cm->m.name = dup_or_null(name, &bad);
	cm->m.pretty_name = dup_or_null(pretty_name ? pretty_name : name, &bad);
	cm->m.reference_url = dup_or_null(reference_url, &bad);
	if (bad) {
		callback_free(cm);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	rc = mk_method_register(&cm->m, err);
	if (rc)
		callback_free(cm);   /* refused: nothing kept it */
	return rc;
}
