/* fetch.c - mk-fetch's copy mode: models -> HEAD, FILE and DATA frames. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fetch/fetch.h"
#include "core/fsutil.h"
#include "stream/manifest.h"
#include "io/model.h"
#include "journal/journal.h"
#include "mk/stream.h"
#include "fetch_impl.h"

const char *const mk_fetch_copy_files[] = {
	"config.json", "generation_config.json", "tokenizer_config.json",
	"special_tokens_map.json", "tokenizer.json", "tokenizer.model",
	"added_tokens.json", "merges.txt", "vocab.json", "chat_template.jinja",
	"chat_template.json", "preprocessor_config.json",
	"video_preprocessor_config.json", NULL,
};

#define MAX_FILE_BYTES (1ull << 30)

struct src_tensor {            /* one manifest entry's source */
	const struct mk_model *m;
	const struct mk_model_tensor *mt;
	int fd;
	struct mk_hub_blob *remote;  /* or NULL */
};

void mk_fetch_model_opts(const struct mk_fetch_opts *o, const char *commit,
			 struct mk_model_open_opts *mo)
{
	const char *e = getenv("MK_IO");
	bool remote = o->remote || o->io == MK_IO_HTTP || (o->io == MK_IO_AUTO && e && !strcmp(e, "http"));

	*mo = (struct mk_model_open_opts){ .weights = remote ? MK_MODEL_STREAM : MK_MODEL_DOWNLOAD,
					   .commit = commit, .cache = !o->no_cache };
}

void mk_fetch_reader_pick(const struct mk_fetch_opts *o, struct mk_model *const *models, size_t n,
			  const struct mk_stream_writer *w, struct mk_reader_opts *ro)
{
	ro->kind = o->io;
	for (size_t i = 0; i < n; i++)
		if (models[i] && mk_model_has_remote(models[i]))
			ro->kind = MK_IO_HTTP;
	/* Into a pipe the mapped pages fault as the pipe copies them, and
	 * uring is faster (reader.c); into a channel the one copy is ours,
	 * and mmap saves the kernel's: mk-yaml on three 300 MB BF16 models
	 * (page cache warm, medians of 3 interleaved runs), linear 0.56 ->
	 * 0.46 s, ties 1.88 -> 1.73 s. */
	ro->prefer = mk_sw_in_process(w) ? MK_IO_MMAP : MK_IO_AUTO;
}

struct pending {               /* a chunk whose read is in flight */
	uint32_t id;
	struct mk_chunk c;
	struct mk__gread g;    /* a strided tensor's read; g.t NULL for others */
};

struct fetch {
	size_t ntensors;
	struct src_tensor *src;
	size_t cur;                    /* tensor being split */
	struct mk_chunker ck;
	bool ck_live;
	bool *skip;                    /* done in the partial output: not sent */
	size_t chunk_bytes;
	struct pending *ring;
	size_t ring_len;
	uint64_t seq;
	int last_fd;
	uint64_t last_end;
	uint64_t backward;
	struct mk__gfill fill;         /* a strided chunk's reads being asked */
	struct mk_chunk fill_c;
	struct mk__held held;
};

static void track(struct fetch *f, const struct mk_read_req *req)
{
	if (req->fd == f->last_fd && req->off < f->last_end)
		f->backward++;
	f->last_fd = req->fd;
	f->last_end = req->off + req->len;
	f->seq++;
}

/* the next read of the strided chunk being asked for */
static int fill_next(struct fetch *f, struct mk_read_req *req)
{
	struct pending *p = &f->ring[f->seq % f->ring_len];

	if (!mk__gfill_next(&f->fill, f->chunk_bytes, req, &p->g))
		return 0;
	p->id = f->fill_c.id;
	p->c = f->fill_c;
	req->tag = p;
	track(f, req);
	return 1;
}

static uint64_t tensor_bytes(const struct mk_st_tensor *t)
{
	uint64_t b = 0;

	mk_dtype_nbytes(t->desc.dtype, t->nelem, &b);
	return b;
}

static int next_extent(void *ctx, struct mk_read_req *req, struct mk_err *err)
{
	struct fetch *f = ctx;
	struct mk_chunk c = { 0 };   /* input and pass stay 0 in DATA */

	if (f->fill.live)
		return fill_next(f, req);
	for (;;) {
		if (f->cur >= f->ntensors)
			return 0;
		if (f->skip && f->skip[f->cur]) {
			f->cur++;
			continue;
		}
		const struct mk_st_tensor *t = f->src[f->cur].mt->t;
		if (!f->ck_live) {
			int rc = mk_chunker_init(&f->ck, t->desc.dtype, t->desc.ndim, t->desc.shape, f->chunk_bytes, err);
			if (rc)
				return mk_err_prefix(err, "tensor '%s': ", t->name);
			f->ck_live = true;
		}
		if (mk_chunker_next(&f->ck, &c))
			break;
		f->ck_live = false;
		f->cur++;
	}
	const struct src_tensor *s = &f->src[f->cur];
	const struct mk_st_file *sh = s->m->shards[s->mt->shard];
	uint64_t boff = c.elem_begin * mk_dtype_bits(c.dtype) / 8, blen;
	struct pending *p = &f->ring[f->seq % f->ring_len];

	c.id = (uint32_t)f->cur;
	if (s->mt->t->stride) {
		f->fill_c = c;
		mk__gfill_start(&f->fill, &f->held, s->fd, sh->data_start, s->mt->t, c.elem_begin, c.elem_count);
		return fill_next(f, req);
	}
	mk_dtype_nbytes(c.dtype, c.elem_count, &blen);
	p->id = (uint32_t)f->cur;
	p->c = c;
	p->g.t = NULL;
	req->fd = s->fd;
	req->remote = s->remote;
	req->off = sh->data_start + s->mt->t->begin + boff;
	req->len = (size_t)blen;
	req->tag = p;
	track(f, req);
	return 1;
}

static const char *s_path(const struct fetch *f, uint32_t i)
{
	return f->src[i].m->shards[f->src[i].mt->shard]->path;
}

static int cmp_name(const void *a, const void *b)
{
	const struct src_tensor *x = a, *y = b;
	return strcmp(x->mt->t->name, y->mt->t->name);
}

int mk_fetch_copy(const struct mk_fetch_opts *o, struct mk_io out,
		  struct mk_fetch_stats *st, struct mk_err *err)
{
	struct mk_model **models = NULL;
	struct mk_manifest *man = NULL;
	struct mk_stream_writer *w = NULL;
	struct mk_reader *rd = NULL;
	struct fetch f = { .last_fd = -1 };
	struct mk_reader_opts ropts = { .kind = o->io, .chunk_bytes = o->chunk_bytes, .qdepth = o->qdepth };
	int **fds = NULL;
	uint8_t **fbuf = NULL, *gbuf = NULL;
	size_t gcap = 0;
	size_t *flen = NULL, nfiles = 0, k;
	char *head = NULL;
	size_t head_len;
	uint64_t total = 0, done = 0, sent = 0;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	f.chunk_bytes = o->chunk_bytes ? o->chunk_bytes : MK_READER_DEFAULT_CHUNK;
	ropts.chunk_bytes = f.chunk_bytes;
	if (!o->nmodels)
		return mk_err_set(err, MK_EINVAL, "no model given");
	models = calloc(o->nmodels, sizeof(*models));
	fds = calloc(o->nmodels, sizeof(*fds));
	if (!models || !fds) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < o->nmodels; i++) {
		struct mk_model_open_opts mo;
		mk_fetch_model_opts(o, NULL, &mo);
		rc = mk_model_open_with(o->models[i], &mo, &models[i], err);
		if (rc)
			goto out;
		f.ntensors += models[i]->ntensors;
	}
	f.src = calloc(f.ntensors ? f.ntensors : 1, sizeof(*f.src));
	if (!f.src) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	/* open every shard once */
	k = 0;
	for (size_t i = 0; i < o->nmodels; i++) {
		struct mk_model *m = models[i];
		rc = mk_model_open_fds(m, &fds[i], err);
		if (rc)
			goto out;
		for (size_t t = 0; t < m->ntensors; t++) {
			f.src[k].m = m;
			f.src[k].mt = &m->tensors[t];
			f.src[k].fd = fds[i][m->tensors[t].shard];
			f.src[k].remote = m->remote ? m->remote[m->tensors[t].shard] : NULL;
			k++;
		}
	}
	/* several models: names must be disjoint */
	if (o->nmodels > 1 && f.ntensors > 1) {
		struct src_tensor *sorted = malloc(f.ntensors * sizeof(*sorted));
		if (!sorted) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		memcpy(sorted, f.src, f.ntensors * sizeof(*sorted));
		qsort(sorted, f.ntensors, sizeof(*sorted), cmp_name);
		for (size_t i = 1; i < f.ntensors; i++)
			if (!strcmp(sorted[i - 1].mt->t->name, sorted[i].mt->t->name)) {
				rc = mk_err_set(err, MK_EMISMATCH,
						"tensor '%s' is in both %s and %s: copy mode needs models with disjoint tensor names",
						sorted[i].mt->t->name,
						sorted[i - 1].m->shards[sorted[i - 1].mt->shard]->path,
						sorted[i].m->shards[sorted[i].mt->shard]->path);
				break;
			}
		free(sorted);
		if (rc)
			goto out;
	}
	/* manifest */
	man = mk_manifest_new("tensors", "mk-fetch " MK_VERSION);
	if (!man) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	man->chunk_bytes = f.chunk_bytes;
	for (size_t i = 0; i < f.ntensors; i++) {
		const struct mk_st_tensor *t = f.src[i].mt->t;
		rc = mk_manifest_add_tensor(man, t->name, t->desc.dtype, t->desc.ndim, t->desc.shape, err);
		if (rc)
			goto out;
		total += tensor_bytes(t);
	}
	/* the first model's non-weight files */
	for (k = 0; mk_fetch_copy_files[k]; k++)
		;
	fbuf = calloc(k, sizeof(*fbuf));
	flen = calloc(k, sizeof(*flen));
	if (!fbuf || !flen) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (k = 0; mk_fetch_copy_files[k]; k++) {
		char path[4096];
		struct stat sb;
		snprintf(path, sizeof(path), "%s/%s", models[0]->dir, mk_fetch_copy_files[k]);
		if (stat(path, &sb) < 0)
			continue;         /* there as anything else: refused by the read */
		rc = mk_file_read(path, MAX_FILE_BYTES, &fbuf[k], &flen[k], err);
		if (rc)
			goto out;
		rc = mk_manifest_add_file(man, mk_fetch_copy_files[k], flen[k], err);
		if (rc)
			goto out;
		nfiles++;
	}
	/* --skip-done: the tensors an interrupted mk-pack finished (the
	 * manifest complete: its key covers the files) */
	if (o->skip_done) {
		struct mk_journal *j = NULL;
		rc = mk_journal_read(o->skip_done, &j, err);
		if (!rc)
			rc = mk_journal_check(j, o->skip_done, man, UINT64_MAX, err);
		if (!rc && j->key[0] && j->ndone) {
			f.skip = calloc(f.ntensors, sizeof(*f.skip));
			if (!f.skip)
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			for (size_t d = 0; !rc && d < j->ndone; d++) {
				const struct mk_st_tensor *t = f.src[j->done[d].index].mt->t;
				if (!f.skip[j->done[d].index])
					st->skipped++;
				f.skip[j->done[d].index] = true;
				total -= tensor_bytes(t);
			}
		}
		mk_journal_free(j);
		if (rc)
			goto out;
	}
	rc = mk_manifest_encode(man, &head, &head_len, err);
	if (rc)
		goto out;
	rc = mk_sw_open_io(&w, out, o->compress_level, err);
	if (rc)
		goto out;
	rc = mk_sw_frame1(w, MK_FT_HEAD, head, head_len, err);
	if (rc)
		goto out;
	for (k = 0; mk_fetch_copy_files[k]; k++) {
		if (!fbuf[k])
			continue;
		rc = mk_sw_file(w, mk_fetch_copy_files[k], 0644, fbuf[k], flen[k], err);
		if (rc)
			goto out;
		free(fbuf[k]);
		fbuf[k] = NULL;
	}
	/* tensor data, read ahead by the reader */
	f.ring_len = 2 * (o->qdepth ? o->qdepth : MK_READER_DEFAULT_QDEPTH) + 4;
	f.ring = calloc(f.ring_len, sizeof(*f.ring));
	if (!f.ring) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	mk_fetch_reader_pick(o, models, o->nmodels, w, &ropts);
	rc = mk_reader_open(&rd, &ropts, next_extent, &f, err);
	if (rc)
		goto out;
	snprintf(st->backend, sizeof(st->backend), "%s", mk_reader_backend(rd));
	snprintf(st->note, sizeof(st->note), "%s", mk_reader_note(rd));
	st->qdepth = mk_reader_qdepth(rd);
	st->chunk_bytes = mk_reader_chunk_bytes(rd);
	for (;;) {
		const void *data;
		struct mk_read_req req;
		struct pending *p;

		rc = mk_reader_get(rd, &data, &req, err);
		if (rc < 0)
			goto out;
		if (rc == 0)
			break;
		p = req.tag;
		done += req.len;
		p->c.data = data;
		p->c.data_len = req.len;
		if (p->g.t) {
			/* a strided tensor: its chunk once its reads are in */
			rc = mk__gread_take(&p->g, &req, data, &gbuf, &gcap, &p->c.data, &p->c.data_len, err);
			if (rc < 0) {
				mk_err_prefix(err, "%s: ", s_path(&f, p->id));
				goto out;
			}
			if (rc == 0)
				continue;
		}
		if (!p->g.t && !req.remote && !o->no_splice)
			rc = mk_sw_chunk_splice(w, MK_FT_DATA, &p->c, req.fd, req.off, err);
		else
			rc = mk_sw_chunk(w, MK_FT_DATA, &p->c, err);
		if (rc) {
			rc = mk_reader_explain(rd, &req, rc, err);
			goto out;
		}
		st->chunks++;
		sent += p->c.data_len;
		if (o->progress)
			o->progress(o->progress_ctx, sent, total);
	}
	rc = mk_sw_end(w, err);
	if (rc)
		goto out;
	st->tensors = f.ntensors;
	st->bytes_read = done;
	st->stream_bytes = mk_sw_bytes(w);
	st->backward_seeks = f.backward;
	(void)nfiles;
out:
	mk_reader_free(rd);
	mk_sw_free(w);
	free(head);
	if (fbuf)
		for (k = 0; mk_fetch_copy_files[k]; k++)
			free(fbuf[k]);
	free(fbuf);
	free(flen);
	free(f.ring);
	free(gbuf);
	mk__held_free(&f.held);
	free(f.skip);
	free(f.src);
	mk_manifest_free(man);
	for (size_t i = 0; models && i < o->nmodels; i++) {
		if (fds && models[i])
			mk_model_close_fds(models[i], fds[i]);
		mk_model_free(models[i]);
	}
	free(fds);
	free(models);
	return rc;
}
