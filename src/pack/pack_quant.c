/* pack_quant.c - mk-pack --quantize fp8: the weights the HEAD marks
 * "requant" written block FP8 again, as transformers' quantizer writes
 * them (core/fp8block.h): NAME.weight in F8_E4M3 and, right after it,
 * NAME.weight_scale_inv in float32, one per block of the HEAD's
 * quantization_config's weight_block_size; config.json gets that
 * quantization_config back.
 *
 * A block's scale needs the whole block, so a weight's chunks are
 * gathered a block-row at a time (block rows x its columns, float32),
 * quantized and written when the block-row is complete, and the next
 * block-row takes its place: what a weight holds at a time is one
 * block-row (plus its F8 bytes and scales), whatever its size; chunks of
 * several weights may interleave in a stream, each then holding its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fp8block.h"
#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "pack_impl.h"

struct rq {                      /* a requant weight being received */
	float *rows;             /* its current block-row, NULL until needed */
	uint8_t *q;
	float *inv;
	uint64_t got;            /* elements received */
	uint64_t filled;         /* of them in rows */
	uint64_t brow;           /* the current block-row (over all leading axes) */
};

static void shape_rc(const struct mk_tensor_desc *d, uint64_t *rows, uint64_t *cols, uint64_t *mats)
{
	*rows = d->shape[d->ndim - 2];
	*cols = d->shape[d->ndim - 1];
	*mats = 1;
	for (unsigned k = 0; k + 2 < d->ndim; k++)
		*mats *= d->shape[k];
}

uint64_t mk__pack_quant_row_bytes(const struct mk_manifest *in)
{
	uint64_t most = 0;

	for (size_t i = 0; i < in->ntensors; i++) {
		uint64_t rows, cols, mats, b0 = in->quant_block[0], b1 = in->quant_block[1], n;
		if (!in->tensors[i].requant)
			continue;
		shape_rc(&in->tensors[i].desc, &rows, &cols, &mats);
		n = (rows < b0 ? rows : b0) * cols;
		n = n * (sizeof(float) + 1) + ((cols + b1 - 1) / b1) * sizeof(float);
		most = n > most ? n : most;
	}
	return most;
}

int mk__pack_quant_setup(struct pack *p, struct mk_manifest *in, struct mk_err *err)
{
	struct mk_manifest *out;
	size_t nq = 0;
	int rc = 0;

	for (size_t i = 0; i < in->ntensors; i++)
		nq += in->tensors[i].requant;
	if (!in->quant_config || !nq)
		return mk_err_set(err, MK_EINVAL,
				  "--quantize fp8: the stream marks no weight as block FP8 (\"requant\" in its HEAD): its "
				  "base model (or first model) was not a block-FP8 checkpoint");
	out = mk_manifest_new("tensors", in->producer);
	p->omap = calloc(in->ntensors + 1, sizeof(*p->omap));
	p->rq = calloc(in->ntensors + 1, sizeof(*p->rq));
	if (!out || !p->omap || !p->rq) {
		mk_manifest_free(out);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	out->chunk_bytes = in->chunk_bytes;
	for (size_t i = 0; !rc && i < in->ntensors; i++) {
		const struct mk_manifest_tensor *t = &in->tensors[i];
		p->omap[i] = out->ntensors;
		if (!t->requant) {
			rc = mk_manifest_add_tensor(out, t->name, t->desc.dtype, t->desc.ndim, t->desc.shape, err);
			continue;
		}
		uint64_t sh[MK_MAX_DIMS];
		size_t n = strlen(t->name);
		char *sname = malloc(n + sizeof("_scale_inv"));
		if (!sname) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		memcpy(sname, t->name, n);
		memcpy(sname + n, "_scale_inv", sizeof("_scale_inv"));
		memcpy(sh, t->desc.shape, t->desc.ndim * sizeof(sh[0]));
		for (unsigned k = 0; k < 2; k++) {
			uint64_t b = in->quant_block[k];
			sh[t->desc.ndim - 2 + k] = (sh[t->desc.ndim - 2 + k] + b - 1) / b;
		}
		if (mk_manifest_find(in, sname) >= 0)
			rc = mk_err_set(err, MK_EFORMAT, "--quantize fp8: tensor '%s' would be written twice (the scales of '%s')",
					sname, t->name);
		if (!rc)
			rc = mk_manifest_add_tensor(out, t->name, MK_DT_F8_E4M3, t->desc.ndim, t->desc.shape, err);
		if (!rc)
			rc = mk_manifest_add_tensor(out, sname, MK_DT_F32, t->desc.ndim, sh, err);
		free(sname);
	}
	/* config.json grows by its quantization_config (free space checked) */
	for (size_t i = 0; !rc && i < in->nfiles; i++)
		rc = mk_manifest_add_file(out, in->files[i].name,
					  in->files[i].size + (strcmp(in->files[i].name, "config.json") ? 0 :
							       strlen(in->quant_config) + 64), err);
	if (rc) {
		mk_manifest_free(out);
		return rc;
	}
	p->in = in;
	p->man = out;
	return 0;
}

void mk__pack_quant_free(struct pack *p)
{
	for (size_t i = 0; p->rq && p->in && i < p->in->ntensors; i++) {
		free(p->rq[i].rows);
		free(p->rq[i].q);
		free(p->rq[i].inv);
	}
	free(p->rq);
	free(p->omap);
	mk_manifest_free(p->in);
}

/* Block-row k of weight t: its rows. */
static uint64_t brow_rows(const struct mk_manifest *in, const struct mk_manifest_tensor *t, uint64_t k)
{
	uint64_t rows, cols, mats, b0 = in->quant_block[0], per = 0;

	shape_rc(&t->desc, &rows, &cols, &mats);
	per = (rows + b0 - 1) / b0;
	uint64_t r0 = (k % per) * b0;
	return rows - r0 < b0 ? rows - r0 : b0;
}

int mk__pack_quant_chunk(struct pack *p, const struct mk_chunk *c, struct mk_err *err)
{
	const struct mk_manifest_tensor *t = &p->in->tensors[c->id];
	struct rq *q = &p->rq[c->id];
	size_t wi = p->omap[c->id], si = wi + 1;
	uint64_t rows, cols, mats, b1 = p->in->quant_block[1], scols, b0 = p->in->quant_block[0];
	const uint8_t *src = c->data;
	size_t es = mk_dtype_bits(t->desc.dtype) / 8;
	int rc;

	shape_rc(&t->desc, &rows, &cols, &mats);
	scols = (cols + b1 - 1) / b1;
	if (c->elem_begin != q->got)
		return mk_err_set(err, MK_EFORMAT,
				  "tensor '%s': chunk [%llu, +%llu) out of order or out of range (expected element %llu of %llu)",
				  t->name, (unsigned long long)c->elem_begin, (unsigned long long)c->elem_count,
				  (unsigned long long)q->got, (unsigned long long)t->nelem);
	if (!q->rows) {
		uint64_t n = (rows < b0 ? rows : b0) * cols;
		q->rows = malloc(n * sizeof(float) + 1);
		q->q = malloc(n + 1);
		q->inv = malloc(scols * sizeof(float) + 1);
		if (!q->rows || !q->q || !q->inv)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		p->quant_held += n * (sizeof(float) + 1) + scols * sizeof(float);
		if (p->quant_held > p->st->quant_held_max)
			p->st->quant_held_max = p->quant_held;
	}
	for (uint64_t e = 0; e < c->elem_count;) {
		uint64_t nr = brow_rows(p->in, t, q->brow), want = nr * cols - q->filled;
		uint64_t k = c->elem_count - e < want ? c->elem_count - e : want;
		if (mk_dtype_convert(MK_DT_F32, q->rows + q->filled, t->desc.dtype, src + e * es, k))
			return mk_err_set(err, MK_EUNSUPPORTED, "tensor '%s': --quantize fp8 reads float tensors, not %s",
					  t->name, mk_dtype_name(t->desc.dtype));
		q->filled += k;
		e += k;
		if (q->filled < nr * cols)
			continue;
		mk_fp8_block_row(q->rows, nr, cols, (uint32_t)b1, q->q, q->inv);
		if ((rc = mk__pack_slot_write(p, wi, q->q, nr * cols, err)) ||
		    (rc = mk__pack_slot_write(p, si, (const uint8_t *)q->inv, scols, err)))
			return rc;
		q->filled = 0;
		q->brow++;
	}
	q->got += c->elem_count;
	if (q->got == t->nelem) {
		uint64_t n = (rows < b0 ? rows : b0) * cols;
		free(q->rows);
		free(q->q);
		free(q->inv);
		q->rows = NULL;
		q->q = NULL;
		q->inv = NULL;
		p->quant_held -= n * (sizeof(float) + 1) + scols * sizeof(float);
	}
	return 0;
}

int mk__pack_quant_config(struct pack *p, const char *path, struct mk_err *err)
{
	struct mk_jsondoc *d = NULL;
	uint8_t *text = NULL;
	char *out = NULL, *tmp = NULL;
	size_t len, n;
	int rc, fd = -1;

	if ((rc = mk_file_read(path, 16u << 20, &text, &len, err)))
		return rc;
	rc = mk_jsondoc_parse((const char *)text, len, "config.json", &d, err);
	if (!rc)
		rc = mk_jsondoc_set(d, "quantization_config", p->in->quant_config, err);
	if (!rc)
		rc = mk_jsondoc_write(d, &out, &n, err);
	if (rc)
		goto done;
	tmp = mk__pack_join(path, "..mk-tmp");
	if (!tmp) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto done;
	}
	tmp[strlen(path)] = '.';     /* "config.json..mk-tmp" beside it */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = mk_err_sys(err, errno, "%s", tmp);
		goto done;
	}
	rc = mk_write_all(fd, out, n, tmp, err);
	if (!rc && fsync(fd) < 0)
		rc = mk_err_sys(err, errno, "%s: fsync", tmp);
	close(fd);
	if (!rc && rename(tmp, path) < 0)
		rc = mk_err_sys(err, errno, "%s", path);
	if (rc)
		(void)unlink(tmp);
	else
		p->st->bytes_written += n - len;
done:
	mk_jsondoc_free(d);
	free(text);
	free(out);
	free(tmp);
	return rc;
}
