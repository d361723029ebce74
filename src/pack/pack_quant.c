/* pack_quant.c - mk-pack --quantize: the weights the HEAD marks
 * "requant" written quantized again, in the format of the HEAD's
 * quantization_config; config.json gets that quantization_config back.
 *
 * fp8: as transformers' FineGrainedFP8 quantizer writes them
 * (core/fp8block.h): NAME in F8_E4M3 and, right after it,
 * NAME_scale_inv in float32, one per block of weight_block_size.  A
 * block's scale needs the whole block, so a weight's chunks are gathered
 * a block-row at a time (block rows x its columns, float32), quantized
 * and written when the block-row is complete, and the next block-row
 * takes its place.
 *
 * mxfp4: as gpt-oss stores its experts (core/mxfp4.h): a weight [E, C, R]
 * (transformers' layout) as NAME_blocks, U8 [E, R, C/32, 16], and
 * NAME_scales, U8 [E, R, C/32]: groups of 32 run along C, the stored
 * matrices are the transposes.  The chunks of an expert come row by row
 * of C; 32 rows (a group-row, 32 x R float32) are gathered, each column
 * quantized into its place in the expert's codes and scales (R x C/2 +
 * R x C/32 bytes), which are written when the expert is complete.
 *
 * Either way a weight holds one block-row or group-row (plus an
 * expert's codes) at a time, whatever its size; chunks of several
 * weights may interleave in a stream, each then holding its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fp8block.h"
#include "core/mxfp4.h"
#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "pack_impl.h"

struct rq {                      /* a requant weight being received */
	float *rows;             /* its current block-row (group-row), NULL until needed */
	uint8_t *q;              /* fp8: its F8 bytes; mxfp4: the expert's codes */
	float *inv;              /* fp8: its scales */
	uint8_t *sc;             /* mxfp4: the expert's scale bytes */
	uint64_t got;            /* elements received */
	uint64_t filled;         /* of them in rows */
	uint64_t brow;           /* the current block-row (over all leading axes) */
};

/* A weight as mats matrices of rows x cols (its parts, when the HEAD
 * gives them, else the last two axes). */
static void shape_rc(const struct mk_manifest_tensor *t, uint64_t *rows, uint64_t *cols, uint64_t *mats)
{
	const struct mk_tensor_desc *d = &t->desc;

	*cols = d->shape[d->ndim - 1];
	if (t->nrequant_parts) {
		*mats = t->nrequant_parts;
		*rows = t->nelem / *mats / *cols;
		return;
	}
	*rows = d->shape[d->ndim - 2];
	*mats = 1;
	for (unsigned k = 0; k + 2 < d->ndim; k++)
		*mats *= d->shape[k];
}

/* What requant weight t holds while it is received. */
static uint64_t held_bytes(const struct mk_manifest *in, const struct mk_manifest_tensor *t)
{
	uint64_t rows, cols, mats, b0 = in->quant_block[0], b1 = in->quant_block[1], n;

	shape_rc(t, &rows, &cols, &mats);
	if (in->quant_kind == MK_REQUANT_MXFP4)   /* [E, C, R]: rows = C, cols = R */
		return MK_MXFP4_GROUP * cols * sizeof(float) + cols * rows / 2 + cols * (rows / MK_MXFP4_GROUP);
	n = (rows < b0 ? rows : b0) * cols;
	return n * (sizeof(float) + 1) + ((cols + b1 - 1) / b1) * sizeof(float);
}

uint64_t mk__pack_quant_row_bytes(const struct mk_manifest *in)
{
	uint64_t most = 0;

	for (size_t i = 0; i < in->ntensors; i++) {
		if (!in->tensors[i].requant)
			continue;
		uint64_t n = held_bytes(in, &in->tensors[i]);
		most = n > most ? n : most;
	}
	return most;
}

/* The output tensors of requant weight t: fp8: NAME (F8_E4M3) and
 * NAME_scale_inv; mxfp4: NAME_blocks and NAME_scales. */
static int add_outputs(const struct mk_manifest *in, const struct mk_manifest_tensor *t, struct mk_manifest *out,
		       struct mk_err *err)
{
	const bool mx = in->quant_kind == MK_REQUANT_MXFP4;
	const char *suf[2] = { mx ? "_blocks" : "", mx ? "_scales" : "_scale_inv" };
	uint64_t sh[2][MK_MAX_DIMS];
	unsigned nd[2] = { t->desc.ndim, t->desc.ndim };
	enum mk_dtype dt[2] = { mx ? MK_DT_U8 : MK_DT_F8_E4M3, mx ? MK_DT_U8 : MK_DT_F32 };
	size_t n = strlen(t->name);
	int rc = 0;

	if (t->nrequant_parts) { /* each part a matrix [rows, cols] and its scales */
		uint64_t rows, cols, mats;
		shape_rc(t, &rows, &cols, &mats);
		uint64_t psh[2][2] = { { rows, cols }, { (rows + in->quant_block[0] - 1) / in->quant_block[0],
							  (cols + in->quant_block[1] - 1) / in->quant_block[1] } };
		for (size_t k = 0; !rc && k < t->nrequant_parts; k++) {
			const char *pn = t->requant_parts[k];
			char *sn = malloc(strlen(pn) + sizeof("_scale_inv"));
			if (!sn)
				return mk_err_set(err, MK_ENOMEM, "out of memory");
			strcpy(sn, pn);
			strcat(sn, "_scale_inv");
			if (mk_manifest_find(in, pn) >= 0 || mk_manifest_find(in, sn) >= 0 || mk_manifest_find(out, pn) >= 0)
				rc = mk_err_set(err, MK_EFORMAT,
						"--quantize fp8: tensor '%s' would be written twice (a part of '%s')", pn,
						t->name);
			if (!rc)
				rc = mk_manifest_add_tensor(out, pn, MK_DT_F8_E4M3, 2, psh[0], err);
			if (!rc)
				rc = mk_manifest_add_tensor(out, sn, MK_DT_F32, 2, psh[1], err);
			free(sn);
		}
		return rc;
	}
	if (mx) {                /* [E, C, R] -> [E, R, C/32, 16] and [E, R, C/32] */
		const uint64_t *d = t->desc.shape;
		uint64_t g = d[1] / MK_MXFP4_GROUP;
		memcpy(sh[0], (uint64_t[4]){ d[0], d[2], g, 16 }, 4 * sizeof(uint64_t));
		memcpy(sh[1], (uint64_t[3]){ d[0], d[2], g }, 3 * sizeof(uint64_t));
		nd[0] = 4;
	} else {
		memcpy(sh[0], t->desc.shape, t->desc.ndim * sizeof(uint64_t));
		memcpy(sh[1], t->desc.shape, t->desc.ndim * sizeof(uint64_t));
		for (unsigned k = 0; k < 2; k++) {
			uint64_t b = in->quant_block[k];
			sh[1][t->desc.ndim - 2 + k] = (sh[1][t->desc.ndim - 2 + k] + b - 1) / b;
		}
	}
	for (unsigned k = 0; !rc && k < 2; k++) {
		char *name = malloc(n + strlen(suf[k]) + 1);
		if (!name)
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		memcpy(name, t->name, n);
		strcpy(name + n, suf[k]);
		if ((mx || k) && mk_manifest_find(in, name) >= 0)
			rc = mk_err_set(err, MK_EFORMAT, "--quantize %s: tensor '%s' would be written twice (the %s of '%s')",
					mk_requant_name(in->quant_kind), name, k ? "scales" : "codes", t->name);
		if (!rc)
			rc = mk_manifest_add_tensor(out, name, dt[k], nd[k], sh[k], err);
		free(name);
	}
	return rc;
}

int mk__pack_quant_setup(struct pack *p, struct mk_manifest *in, struct mk_err *err)
{
	const char *want = mk_requant_name(p->o->quantize);
	struct mk_manifest *out;
	size_t nq = 0;
	int rc = 0;

	for (size_t i = 0; i < in->ntensors; i++)
		nq += in->tensors[i].requant != MK_REQUANT_NONE;
	if (!in->quant_config || !nq)
		return mk_err_set(err, MK_EINVAL,
				  "--quantize %s: the stream marks no weight as quantized (\"requant\" in its HEAD): its "
				  "base model (or first model) was not a %s checkpoint",
				  want, p->o->quantize == MK_REQUANT_FP8 ? "block-FP8" : "MXFP4");
	if (in->quant_kind != p->o->quantize)
		return mk_err_set(err, MK_EINVAL,
				  "--quantize %s: the stream's weights were %s in its base model (or first model): "
				  "write them so with --quantize %s",
				  want, in->quant_kind == MK_REQUANT_FP8 ? "block FP8" : "MXFP4",
				  mk_requant_name(in->quant_kind));
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
		if (!t->requant)
			rc = mk_manifest_add_tensor(out, t->name, t->desc.dtype, t->desc.ndim, t->desc.shape, err);
		else
			rc = add_outputs(in, t, out, err);
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
		free(p->rq[i].sc);
	}
	free(p->rq);
	free(p->omap);
	mk_manifest_free(p->in);
}

/* Block-row k of weight t: its rows. */
static uint64_t brow_rows(const struct mk_manifest *in, const struct mk_manifest_tensor *t, uint64_t k)
{
	uint64_t rows, cols, mats, b0 = in->quant_block[0], per = 0;

	shape_rc(t, &rows, &cols, &mats);
	per = (rows + b0 - 1) / b0;
	uint64_t r0 = (k % per) * b0;
	return rows - r0 < b0 ? rows - r0 : b0;
}

static void rq_release(struct pack *p, const struct mk_manifest_tensor *t, struct rq *q)
{
	free(q->rows);
	free(q->q);
	free(q->inv);
	free(q->sc);
	q->rows = NULL;
	q->q = NULL;
	q->inv = NULL;
	q->sc = NULL;
	p->quant_held -= held_bytes(p->in, t);
}

/* A fp8 weight's chunk: its values in q->rows; each complete block-row
 * quantized and written. */
static int fp8_chunk(struct pack *p, const struct mk_chunk *c, const struct mk_manifest_tensor *t, struct rq *q,
		     struct mk_err *err)
{
	size_t w0 = p->omap[c->id];
	uint64_t rows, cols, mats, b1 = p->in->quant_block[1], scols, b0 = p->in->quant_block[0];
	const uint8_t *src = c->data;
	size_t es = mk_dtype_bits(t->desc.dtype) / 8;
	int rc;

	shape_rc(t, &rows, &cols, &mats);
	scols = (cols + b1 - 1) / b1;
	for (uint64_t e = 0; e < c->elem_count;) {
		uint64_t nr = brow_rows(p->in, t, q->brow), want = nr * cols - q->filled;
		uint64_t k = c->elem_count - e < want ? c->elem_count - e : want;
		(void)mk_dtype_convert(MK_DT_F32, q->rows + q->filled, t->desc.dtype, src + e * es, k);
		q->filled += k;
		e += k;
		if (q->filled < nr * cols)
			continue;
		mk_fp8_block_row(q->rows, nr, cols, (uint32_t)b1, q->q, q->inv);
		/* parts: block-row brow is in part brow / (block-rows a part) */
		size_t wi = w0 + (t->nrequant_parts ? 2 * (q->brow / ((rows + b0 - 1) / b0)) : 0), si = wi + 1;
		if ((rc = mk__pack_slot_write(p, wi, q->q, nr * cols, err)) ||
		    (rc = mk__pack_slot_write(p, si, (const uint8_t *)q->inv, scols, err)))
			return rc;
		q->filled = 0;
		q->brow++;
	}
	return 0;
}

/* A mxfp4 weight's chunk: its values (BF16-rounded first, as
 * transformers' quantizer takes them) in q->rows; each complete
 * group-row quantized into the expert's codes, written with its scales
 * when the expert is complete. */
static int mxfp4_chunk(struct pack *p, const struct mk_chunk *c, const struct mk_manifest_tensor *t, struct rq *q,
		       struct mk_err *err)
{
	size_t bi = p->omap[c->id], si = bi + 1;
	const uint64_t C = t->desc.shape[1], R = t->desc.shape[2], G = C / MK_MXFP4_GROUP;
	const uint8_t *src = c->data;
	size_t es = mk_dtype_bits(t->desc.dtype) / 8;
	uint16_t bf[256];
	int rc;

	for (uint64_t e = 0; e < c->elem_count;) {
		uint64_t want = MK_MXFP4_GROUP * R - q->filled;
		uint64_t k = c->elem_count - e < want ? c->elem_count - e : want;
		for (uint64_t d = 0; d < k; d += 256) {
			uint64_t n = k - d < 256 ? k - d : 256;
			(void)mk_dtype_convert(MK_DT_BF16, bf, t->desc.dtype, src + (e + d) * es, n);
			(void)mk_dtype_convert(MK_DT_F32, q->rows + q->filled + d, MK_DT_BF16, bf, n);
		}
		q->filled += k;
		e += k;
		if (q->filled < MK_MXFP4_GROUP * R)
			continue;
		uint64_t g = q->brow % G;
		for (uint64_t r = 0; r < R; r++)
			mk_mxfp4_group(q->rows + r, R, q->q + (r * G + g) * 16, q->sc + r * G + g);
		q->filled = 0;
		q->brow++;
		if (g + 1 < G)
			continue;
		if ((rc = mk__pack_slot_write(p, bi, q->q, R * G * 16, err)) ||
		    (rc = mk__pack_slot_write(p, si, q->sc, R * G, err)))
			return rc;
	}
	return 0;
}

int mk__pack_quant_chunk(struct pack *p, const struct mk_chunk *c, struct mk_err *err)
{
	const struct mk_manifest_tensor *t = &p->in->tensors[c->id];
	struct rq *q = &p->rq[c->id];
	const bool mx = p->in->quant_kind == MK_REQUANT_MXFP4;
	int rc;

	if (c->elem_begin != q->got)
		return mk_err_set(err, MK_EFORMAT,
				  "tensor '%s': chunk [%llu, +%llu) out of order or out of range (expected element %llu of %llu)",
				  t->name, (unsigned long long)c->elem_begin, (unsigned long long)c->elem_count,
				  (unsigned long long)q->got, (unsigned long long)t->nelem);
	if (!mk_dtype_is_float(t->desc.dtype))
		return mk_err_set(err, MK_EUNSUPPORTED, "tensor '%s': --quantize reads float tensors, not %s", t->name,
				  mk_dtype_name(t->desc.dtype));
	if (!q->rows) {
		uint64_t rows, cols, mats, b0 = p->in->quant_block[0], b1 = p->in->quant_block[1];
		shape_rc(t, &rows, &cols, &mats);
		if (mx) {        /* [E, C, R]: a group-row of R, an expert's codes */
			q->rows = malloc(MK_MXFP4_GROUP * cols * sizeof(float));
			q->q = malloc(cols * rows / 2);
			q->sc = malloc(cols * (rows / MK_MXFP4_GROUP));
		} else {
			uint64_t n = (rows < b0 ? rows : b0) * cols;
			q->rows = malloc(n * sizeof(float) + 1);
			q->q = malloc(n + 1);
			q->inv = malloc(((cols + b1 - 1) / b1) * sizeof(float) + 1);
		}
		if (!q->rows || !q->q || (mx ? !q->sc : !q->inv))
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		p->quant_held += held_bytes(p->in, t);
		if (p->quant_held > p->st->quant_held_max)
			p->st->quant_held_max = p->quant_held;
	}
	if ((rc = mx ? mxfp4_chunk(p, c, t, q, err) : fp8_chunk(p, c, t, q, err)))
		return rc;
	q->got += c->elem_count;
	if (q->got == t->nelem)
		rq_release(p, t, q);
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
