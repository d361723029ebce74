/* check.c - chunks checked against the manifest or job they belong to. */
#include <stdio.h>
#include "stream/manifest.h"
#include "stream/job.h"
#include "mk/stream.h"

/* elements [b, b + n) of a tensor of nelem elements in rows of row_len */
static int check_range(const struct mk_chunk *c, uint64_t nelem, uint64_t row_len, const char *what,
		       struct mk_err *err)
{
	struct mk_chunk rows = *c;
	unsigned g = mk_dtype_elem_granule(c->dtype);

	if (c->elem_count == 0 || c->elem_begin >= nelem || c->elem_count > nelem - c->elem_begin)
		return mk_err_set(err, MK_EFORMAT, "%s: elements [%llu, +%llu) are outside its %llu elements", what,
				  (unsigned long long)c->elem_begin, (unsigned long long)c->elem_count,
				  (unsigned long long)nelem);
	uint64_t end = c->elem_begin + c->elem_count;
	if (c->elem_begin % g || (end % g && end != nelem))
		return mk_err_set(err, MK_EFORMAT, "%s: elements [%llu, %llu) do not start and end on whole bytes of %s",
				  what, (unsigned long long)c->elem_begin, (unsigned long long)end, mk_dtype_name(c->dtype));
	mk_chunk_set_rows(&rows, row_len);
	if (c->row_begin != rows.row_begin || c->row_count != rows.row_count)
		return mk_err_set(err, MK_EFORMAT, "%s: rows [%llu, +%llu) are not the rows of elements [%llu, %llu)",
				  what, (unsigned long long)c->row_begin, (unsigned long long)c->row_count,
				  (unsigned long long)c->elem_begin, (unsigned long long)end);
	return 0;
}

int mk_chunk_check_data(const struct mk_manifest *head, const struct mk_chunk *c, struct mk_err *err)
{
	char what[96];

	if (c->id >= head->ntensors)
		return mk_err_set(err, MK_EFORMAT, "DATA: tensor id %u not in the manifest (%zu tensors)", c->id,
				  head->ntensors);
	const struct mk_manifest_tensor *t = &head->tensors[c->id];
	if (c->dtype != t->desc.dtype)
		return mk_err_set(err, MK_EFORMAT, "DATA: tensor '%s' is %s, chunk is %s", t->name,
				  mk_dtype_name(t->desc.dtype), mk_dtype_name(c->dtype));
	if (c->input || c->pass)
		return mk_err_set(err, MK_EFORMAT, "DATA: tensor '%s': input and pass must be 0", t->name);
	snprintf(what, sizeof(what), "DATA: tensor '%.64s'", t->name);
	return check_range(c, t->nelem, mk_shape_row_len(t->desc.ndim, t->desc.shape), what, err);
}

int mk_chunk_check_input(const struct mk_plan_job *j, const struct mk_chunk *c, struct mk_err *err)
{
	char what[64];

	if (c->id != j->id)
		return mk_err_set(err, MK_EFORMAT, "INPT for job %u inside job %u", c->id, j->id);
	const struct mk_plan_input *in = mk_plan_job_input(j, c->input);
	if (!in || c->pass >= j->sends)
		return mk_err_set(err, MK_EFORMAT, "INPT: input %u pass %u does not fit job %u (%zu inputs, %u sends)",
				  c->input, c->pass, j->id, j->ninputs + (j->vocab ? j->vocab->naux : 0), j->sends);
	/* a LoRA input with a dtype is sent in it, a quantized one in its
	 * dequantized dtype (stream/job.h) */
	enum mk_dtype want = mk_plan_input_sent_dtype(in);
	if (c->dtype != want)
		return mk_err_set(err, MK_EFORMAT, "INPT: job %u input %u is %s, chunk is %s", j->id, c->input,
				  mk_dtype_name(want), mk_dtype_name(c->dtype));
	snprintf(what, sizeof(what), "INPT: job %u input %u", j->id, c->input);
	uint64_t rl = mk_shape_row_len(in->desc.ndim, in->desc.shape);
	if (j->vocab) {
		/* in the output's rows, within one run of the input's */
		int rc = check_range(c, j->vocab->rows * rl, rl, what, err);
		uint64_t row = rl ? c->elem_begin / rl : 0, last = rl ? (c->elem_begin + c->elem_count - 1) / rl : 0;
		int64_t s0 = mk_plan_vocab_src_row(j, c->input, row), s1 = mk_plan_vocab_src_row(j, c->input, last);
		if (!rc && (s0 < 0 || s1 < 0 || (uint64_t)(s1 - s0) != last - row))
			rc = mk_err_set(err, MK_EFORMAT, "%s: rows %llu .. %llu are not rows of one run of the input's", what,
					(unsigned long long)row, (unsigned long long)last);
		return rc;
	}
	return check_range(c, in->nelem, rl, what, err);
}
