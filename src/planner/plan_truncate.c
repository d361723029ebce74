/* plan_truncate.c - --unsafe-truncate-embeddings (mk_plan_opts.
 * unsafe_truncate_embeddings): the vocabulary-indexed weights of models
 * whose vocabularies differ in size merged over the first rows they all
 * have, as mergekit 0.1.5 does with the option and no tokenizer source.
 *
 * Every input of such a weight (all the models that have it, used by the
 * method or not) is cut to the fewest rows among them; the other
 * dimensions must already agree.  Nothing checks that the kept rows mean
 * the same tokens in every model (hence "unsafe"), and config.json's
 * vocabulary size is left as the donor's.  A tokenizer source aligns the
 * vocabularies instead (plan_vocab.c), and then the option does nothing.
 * The cut is planned as a vocabulary job whose every input keeps its
 * rows 0 .. R-1 (one run, no fills): mk-fetch sends only those rows, and
 * the method sees inputs of one shape.
 *
 * Without the option, mk keeps mergekit 0.1.4's rectifying of the methods
 * that have it (mk_rectify_shapes); where a method refuses inputs of
 * different vocabulary sizes, tplan_truncate_hint says how to merge
 * them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/planner_impl.h"

/* The weight's inputs as a list of shapes, "[16, 8], [12, 8]", in buf. */
static void shapes_str(const struct tplan *t, const struct mk_tensor_desc *d, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < t->n && o < len; i++) {
		o += (size_t)snprintf(buf + o, len - o, "%s[", i ? ", " : "");
		for (unsigned k = 0; k < d[i].ndim && o < len; k++)
			o += (size_t)snprintf(buf + o, len - o, "%s%llu", k ? ", " : "",
					      (unsigned long long)d[i].shape[k]);
		if (o < len)
			o += (size_t)snprintf(buf + o, len - o, "]");
	}
}

static bool applies(const struct tplan *t)
{
	return t->p->o->unsafe_truncate_embeddings && !t->p->tok && t->ow->is_embed && !t->check_equal;
}

/* The inputs' rows cut to the fewest among them, as the method sees them
 * (t->trunc_rows; 0: nothing cut); inputs whose other dimensions differ
 * are an error, as are inputs without rows. */
int tplan_truncate_shapes(struct tplan *t)
{
	const struct mk_tensor_desc *in = t->in;
	enum mk_dtype dts[64], D;
	uint64_t rows = UINT64_MAX;
	char shapes[512];

	t->trunc_rows = 0;
	if (!applies(t) || t->n < 2)
		return TP_NEXT;
	for (size_t i = 0; i < t->n; i++) {
		if (in[i].ndim < 1 || !in[i].shape[0] || in[i].ndim != in[0].ndim ||
		    memcmp(in[i].shape + 1, in[0].shape + 1, (in[0].ndim - 1) * sizeof(uint64_t))) {
			shapes_str(t, in, shapes, sizeof(shapes));
			diag(t->d, MK_DIAG_ERROR, tplan_input_loc(t, i),
			     "tensor '%s': %s: --unsafe-truncate-embeddings cuts the vocabulary rows only; "
			     "model '%s' differs from model '%s' in %s",
			     t->ow->name, shapes, t->labels[i], t->labels[0],
			     in[i].ndim < 1 || !in[i].shape[0] ? "having no rows" : "its other dimensions");
			return TP_DONE;
		}
		if (in[i].shape[0] < rows)
			rows = in[i].shape[0];
	}
	size_t cut = 0;
	for (size_t i = 0; i < t->n; i++)
		cut += in[i].shape[0] != rows;
	if (!cut)
		return TP_NEXT;
	if (t->n > 64) {
		diag(t->d, MK_DIAG_ERROR, t->tc->loc, "tensor '%s': more than 64 inputs to a vocabulary merge", t->ow->name);
		return TP_DONE;
	}
	shapes_str(t, in, shapes, sizeof(shapes));
	diag(t->d, MK_DIAG_WARNING, t->tc->loc,
	     "tensor '%s': %s cut to their first %llu rows (--unsafe-truncate-embeddings): the rows dropped are lost, "
	     "and the output is wrong unless the models number their first %llu tokens alike; a tokenizer setting "
	     "(tokenizer: {source: base}) aligns the vocabularies instead",
	     t->ow->name, shapes, (unsigned long long)rows, (unsigned long long)rows);
	for (size_t i = 0; i < t->n; i++)
		dts[i] = t->in[i].dtype;
	D = mk_promote_dtypes(t->n, dts);
	for (size_t i = 0; i < t->n; i++) {
		t->in[i].shape[0] = rows;
		t->in[i].dtype = D;
	}
	t->trunc_rows = rows;
	return TP_NEXT;
}

/* The job of a cut weight: a vocabulary of trunc_rows rows that every
 * input has, at the same ids. */
int tplan_truncate_job(struct tplan *t, struct mk_err *err)
{
	struct mk_plan_job *j = t->j;
	struct mk_plan_vocab *vc;

	if (!t->trunc_rows)
		return TP_NEXT;
	if (!(vc = j->vocab = calloc(1, sizeof(*vc))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	vc->rows = vc->tokens = t->trunc_rows;
	vc->dtype = t->in[0].dtype;
	for (size_t i = 0; i < j->ninputs; i++) {
		struct mk_plan_input *pi = &j->inputs[i];
		if (!(pi->runs = malloc(sizeof(*pi->runs))))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		pi->runs[0] = (struct mk_vocab_run){ .out = 0, .src = 0, .n = t->trunc_rows };
		pi->nruns = 1;
	}
	return TP_NEXT;
}

/* A method's refusal of an embedding whose inputs differ in rows (a
 * message about their shapes), with neither a tokenizer source nor the
 * option: what would merge them, appended to msg (of size len). */
void tplan_truncate_hint(const struct tplan *t, char *msg, size_t len)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	size_t n = strlen(msg);

	if (t->p->o->unsafe_truncate_embeddings || t->p->tok || !t->ow->is_embed || t->check_equal ||
	    !strstr(msg, "shape"))
		return;
	for (size_t i = 0; i < t->n; i++) {
		if (t->in[i].ndim < 1)
			return;
		if (t->in[i].shape[0] < lo)
			lo = t->in[i].shape[0];
		if (t->in[i].shape[0] > hi)
			hi = t->in[i].shape[0];
	}
	if (lo >= hi || n + 1 >= len)
		return;
	snprintf(msg + n, len - n,
		 " (the models' vocabularies differ in size, %llu to %llu rows: a tokenizer setting such as "
		 "tokenizer: {source: base} aligns them; --unsafe-truncate-embeddings cuts every input to its "
		 "first %llu rows, assuming the models number those tokens alike)",
		 (unsigned long long)lo, (unsigned long long)hi, (unsigned long long)lo);
}
