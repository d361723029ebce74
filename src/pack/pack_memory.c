/* pack_memory.c - the output stage of a merge into memory: a "tensors"
 * stream -> whole tensors handed to a callback, nothing written.
 *
 * Chunks of one tensor arrive in element order (the merge stage sends
 * each job's output so); several tensors' chunks may interleave.  Each
 * tensor is assembled in a buffer of its output size, allocated at its
 * first chunk, given to the sink when its last element has come and
 * freed when the sink returns.  FILE frames (tokenizer files, the card)
 * are read and dropped. */
#include <stdlib.h>
#include <string.h>
#include "core/fsutil.h"
#include "core/mapguard.h"
#include "stream/manifest.h"
#include "mk/stream.h"
#include "pack.h"

struct memslot {
	uint8_t *buf;
	uint64_t got;                /* elements so far */
	bool done;
};

struct memrun {
	const struct mk_pack_memory_opts *o;
	struct mk_manifest *man;
	struct memslot *slot;
	uint64_t held;               /* bytes of tensors being assembled */
	uint64_t done_bytes;
	size_t ndone;
};

static int give(struct memrun *m, size_t id, struct mk_err *err)
{
	const struct mk_manifest_tensor *t = &m->man->tensors[id];
	struct memslot *sl = &m->slot[id];
	int rc;

	sl->done = true;
	m->ndone++;
	rc = m->o->sink(m->o->sink_ctx, t->name, &t->desc, sl->buf, err);
	if (rc && !err->msg[0])
		mk_err_set(err, MK_EIO, "stopped by the caller at tensor '%s'", t->name);
	m->held -= t->nbytes;
	free(sl->buf);
	sl->buf = NULL;
	if (!rc && m->o->progress)
		m->o->progress(m->o->progress_ctx, m->done_bytes, mk_manifest_total_bytes(m->man), m->ndone,
			       m->man->ntensors);
	return rc ? (rc < 0 ? rc : -MK_EIO) : 0;
}

static int take_chunk(struct memrun *m, const struct mk_frame *f, struct mk_err *err)
{
	struct mk_chunk c;
	const struct mk_manifest_tensor *t;
	struct memslot *sl;
	int rc;

	rc = mk_chunk_decode(f->payload, f->payload_len, &c, err);
	if (!rc)
		rc = mk_chunk_check_data(m->man, &c, err);
	if (rc)
		return mk_err_prefix(err, "frame #%llu (DATA): ", (unsigned long long)f->index);
	t = &m->man->tensors[c.id];
	sl = &m->slot[c.id];
	if (sl->done || c.elem_begin != sl->got)
		return mk_err_set(err, MK_EFORMAT,
				  "frame #%llu (DATA): tensor '%s': chunk [%llu, +%llu) out of order or out of range (expected element %llu of %llu)",
				  (unsigned long long)f->index, t->name, (unsigned long long)c.elem_begin,
				  (unsigned long long)c.elem_count, (unsigned long long)sl->got,
				  (unsigned long long)t->nelem);
	if (!sl->buf) {
		if (m->o->budget && m->held + t->nbytes > m->o->budget)
			return mk_err_set(err, MK_ENOMEM,
					  "tensor '%s': %llu bytes, with the %llu bytes of the tensors being assembled, more than the memory budget of %llu bytes (a merge into memory holds each output tensor whole)",
					  t->name, (unsigned long long)t->nbytes, (unsigned long long)m->held,
					  (unsigned long long)m->o->budget);
		sl->buf = malloc(t->nbytes);
		if (!sl->buf)
			return mk_err_set(err, MK_ENOMEM, "tensor '%s': out of memory for its %llu bytes", t->name,
					  (unsigned long long)t->nbytes);
		m->held += t->nbytes;
	}
	memcpy(sl->buf + c.elem_begin * mk_dtype_bits(t->desc.dtype) / 8, c.data, c.data_len);
	sl->got += c.elem_count;
	m->done_bytes += c.data_len;
	return sl->got == t->nelem ? give(m, c.id, err) : 0;
}

int mk_pack_to_memory(const struct mk_pack_memory_opts *o, struct mk_io in, const char *label, struct mk_err *err)
{
	struct memrun m = { .o = o };
	struct mk_stream_reader *r = NULL;
	struct mk_frame f;
	unsigned long faults0 = mk_mapguard_faults();
	int rc;

	rc = mk_sr_open_io(&r, in, label, 0, err);
	if (rc)
		return rc;
	mk_sr_set_bounds(r, &(struct mk_sr_bounds){ .memory = o->budget });
	rc = mk_sr_head(r, label, "tensors", "a merge into memory reads a 'tensors' stream (from mk-merge)", &m.man, &f,
			err);
	if (rc)
		goto out;
	m.slot = calloc(m.man->ntensors ? m.man->ntensors : 1, sizeof(*m.slot));
	if (!m.slot) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	/* tensors with no elements are complete already */
	for (size_t i = 0; i < m.man->ntensors && !rc; i++)
		if (m.man->tensors[i].nelem == 0)
			rc = give(&m, i, err);
	while (!rc) {
		rc = mk_sr_next(r, &f, err);
		if (rc <= 0)
			break;
		if (!strcmp(f.type, MK_FT_DATA))
			rc = take_chunk(&m, &f, err);
		else if (!strcmp(f.type, MK_FT_FILE) || !strcmp(f.type, MK_FT_END) || !f.critical)
			rc = 0;   /* files are not kept; END is checked by the reader */
		else
			rc = mk_err_set(err, MK_EFORMAT, "%s: frame #%llu: unexpected %s frame in a 'tensors' stream",
					label, (unsigned long long)f.index, f.type);
	}
	if (rc < 0)
		goto out;
	rc = 0;
	/* in one process with the reader, a model file truncated under a
	 * mapping of it gave zeros: the tensors given are suspect */
	if ((rc = mk_mapguard_check(faults0, err)) < 0)
		goto out;
	for (size_t i = 0; i < m.man->ntensors; i++)
		if (!m.slot[i].done) {
			rc = mk_err_set(err, MK_ECORRUPT, "the stream ended with tensor '%s' incomplete (%llu of %llu elements)",
					m.man->tensors[i].name, (unsigned long long)m.slot[i].got,
					(unsigned long long)m.man->tensors[i].nelem);
			goto out;
		}
out:
	for (size_t i = 0; m.slot && i < m.man->ntensors; i++)
		free(m.slot[i].buf);
	free(m.slot);
	mk_manifest_free(m.man);
	mk_sr_free(r);
	return rc;
}
