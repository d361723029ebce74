/* adapter.c - mk_extract_finish: the staging directory mk-pack wrote to a
 * PEFT adapter.  Each module's statistics tensor gives the rank it kept
 * and its relative error; adapter_model.safetensors is written again with
 * A's first rows and B's first columns up to that rank (the statistics
 * left out), then adapter_config.json as mergekit-extract-lora lays it
 * out (Python's json.dump, indent 4), the card and the report. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "card/card.h"
#include "config/config.h"
#include "core/fsutil.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "extract/extract.h"
#include "io/safetensors.h"

#define FINISH_BUFFER_DEFAULT (64u << 20)

struct kept {
	unsigned rank;                /* 0: left out */
	double error;
};

/* A tensor of the new file: where it comes from, how it is cut. */
struct piece {
	const struct mk_st_tensor *src;
	uint64_t shape[2];
	enum { P_WHOLE, P_ROWS, P_COLS } cut;   /* A: its first rows; B: its first columns */
};

static int read_stats(int fd, const struct mk_st_file *f, const struct mk_extract_module *m, struct kept *k,
		      struct mk_err *err)
{
	const struct mk_st_tensor *t = mk_st_find(f, m->stats);
	double v[2];

	if (!t || t->desc.dtype != MK_DT_F64 || t->nelem != 2)
		return mk_err_set(err, MK_ECORRUPT, "%s: no statistics of module '%s' (tensor '%s')", f->path, m->name,
				  m->stats);
	int rc = mk_pread_exact(fd, v, sizeof(v), f->data_start + t->begin, f->path, err);
	if (rc)
		return rc;
	if (!(v[0] >= 0 && v[0] <= (double)m->r0 && v[0] == floor(v[0])) || !(v[1] >= 0))
		return mk_err_set(err, MK_ECORRUPT, "%s: module '%s': rank %g of at most %llu, error %g", f->path, m->name,
				  v[0], (unsigned long long)m->r0, v[1]);
	k->rank = (unsigned)v[0];
	k->error = v[1];
	return 0;
}

/* Copy one tensor's kept part from fd to out at *off, through buf. */
static int copy_piece(int fd, const struct mk_st_file *f, const struct piece *p, unsigned rank, int out,
		      uint64_t *off, uint8_t *buf, size_t blen, const char *opath, struct mk_err *err)
{
	const struct mk_st_tensor *t = p->src;
	size_t es = mk_dtype_bits(t->desc.dtype) / 8;
	uint64_t src = f->data_start + t->begin;
	int rc = 0;

	if (p->cut != P_COLS) {
		uint64_t n = p->cut == P_WHOLE ? t->end - t->begin : (uint64_t)rank * t->desc.shape[1] * es;
		for (uint64_t done = 0; done < n && !rc; ) {
			size_t q = n - done < blen ? (size_t)(n - done) : blen;
			rc = mk_pread_exact(fd, buf, q, src + done, f->path, err);
			if (!rc)
				rc = mk_pwrite_all(out, buf, q, *off, opath, err);
			done += q;
			*off += q;
		}
		return rc;
	}
	/* B [rows, r0] -> [rows, rank]: whole rows read, each cut */
	uint64_t row = t->desc.shape[1] * es, keep = (uint64_t)rank * es, rows = t->desc.shape[0];
	uint64_t per = row ? blen / row : 0;
	if (!per)
		per = 1;
	if (row > blen)
		return mk_err_set(err, MK_ENOMEM, "tensor '%s': a row of %llu bytes is more than the buffer", t->name,
				  (unsigned long long)row);
	for (uint64_t r = 0; r < rows && !rc; r += per) {
		uint64_t q = rows - r < per ? rows - r : per;
		rc = mk_pread_exact(fd, buf, (size_t)(q * row), src + r * row, f->path, err);
		for (uint64_t i = 1; !rc && i < q; i++)
			memmove(buf + i * keep, buf + i * row, (size_t)keep);
		if (!rc)
			rc = mk_pwrite_all(out, buf, (size_t)(q * keep), *off, opath, err);
		*off += q * keep;
	}
	return rc;
}

static int write_file(const char *path, const char *data, size_t len, struct mk_err *err)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return mk_err_sys(err, errno, "%s", path);
	int rc = mk_write_all(fd, data, len, path, err);
	if (!rc && fsync(fd) < 0)
		rc = mk_err_sys(err, errno, "%s", path);
	if (close(fd) < 0 && !rc)
		rc = mk_err_sys(err, errno, "%s", path);
	return rc;
}

static char *join(const char *dir, const char *name)
{
	char *s = NULL;
	return asprintf(&s, "%s/%s", dir, name) < 0 ? NULL : s;
}

static void put_str(struct mk_sbuf *b, const char *s)
{
	mk_json_put_ascii_string(b, s, strlen(s));
}

static void put_list(struct mk_sbuf *b, const char *key, char *const *v, size_t n)
{
	mk_sbuf_fmt(b, "    \"%s\": [", key);
	for (size_t i = 0; i < n; i++) {
		mk_sbuf_str(b, i ? ",\n        " : "\n        ");
		put_str(b, v[i]);
	}
	mk_sbuf_str(b, n ? "\n    ],\n" : "],\n");
}

static void put_pattern(struct mk_sbuf *b, const char *key, const struct mk_extract_info *x, const struct kept *k,
			unsigned r)
{
	size_t n = 0;
	mk_sbuf_fmt(b, "    \"%s\": {", key);
	for (size_t i = 0; i < x->nmodules; i++) {
		if (!k[i].rank || k[i].rank == r)
			continue;
		mk_sbuf_str(b, n++ ? ",\n        " : "\n        ");
		put_str(b, x->modules[i].name);
		mk_sbuf_fmt(b, ": %u", k[i].rank);
	}
	mk_sbuf_str(b, n ? "\n    },\n" : "},\n");
}

/* adapter_config.json: mergekit-extract-lora's keys, in its order, every
 * module's scale lora_alpha / r = 1; lora_bias when bias deltas are
 * written (mk-compat(7)) */
static int adapter_config(const struct mk_extract_opts *o, const struct mk_extract_info *x, const struct kept *k,
			  unsigned r, bool biases, char **out, size_t *len, struct mk_err *err)
{
	struct mk_model_ref ref;
	struct mk_sbuf b = { 0 };
	int rc = mk_model_ref_parse(o->base, &ref, err);

	if (rc)
		return rc;
	/* target_modules: the last components of the modules written */
	char **tm = calloc(x->ntargets + 1, sizeof(*tm));
	size_t ntm = 0;
	if (!tm) {
		mk_model_ref_clear(&ref);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	for (size_t t = 0; t < x->ntargets; t++)
		for (size_t i = 0; i < x->nmodules; i++) {
			const char *dot = strrchr(x->modules[i].name, '.');
			if (k[i].rank && !strcmp(dot ? dot + 1 : x->modules[i].name, x->target_modules[t])) {
				tm[ntm++] = x->target_modules[t];
				break;
			}
		}
	mk_sbuf_str(&b, "{\n    \"base_model_name_or_path\": ");
	put_str(&b, ref.model.path);
	mk_sbuf_str(&b, ",\n    \"peft_type\": \"LORA\",\n    \"use_rslora\": false,\n");
	put_list(&b, "target_modules", tm, ntm);
	put_list(&b, "modules_to_save", x->modules_to_save, x->nsave);
	mk_sbuf_fmt(&b, "    \"task_type\": \"CAUSAL_LM\",\n    \"r\": %u,\n    \"lora_alpha\": %u,\n", r, r);
	put_pattern(&b, "rank_pattern", x, k, r);
	put_pattern(&b, "alpha_pattern", x, k, r);
	mk_sbuf_str(&b, "    \"lora_dropout\": 0.0,\n    \"fan_in_fan_out\": false,\n    \"inference_mode\": true");
	if (biases)
		mk_sbuf_str(&b, ",\n    \"lora_bias\": true");
	mk_sbuf_str(&b, "\n}");
	free(tm);
	mk_model_ref_clear(&ref);
	if (b.oom) {
		free(b.p);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = b.p;
	*len = b.n;
	return 0;
}

static int card(const struct mk_extract_opts *o, const struct mk_extract_info *x, char **out, size_t *len,
		struct mk_err *err)
{
	struct mk_model_ref b, m;
	int rc = mk_model_ref_parse(o->base, &b, err);
	if (rc)
		return rc;
	if ((rc = mk_model_ref_parse(o->model, &m, err))) {
		mk_model_ref_clear(&b);
		return rc;
	}
	/* the title: OUT's last component, as os.path.basename */
	const char *slash = strrchr(o->out, '/');
	struct mk_card_lora in = { .name = slash ? slash + 1 : o->out, .base = b.model.path, .base_lora = b.lora.path,
				   .model = m.model.path, .model_lora = m.lora.path, .invocation = o->invocation,
				   .base_vocab = x->base_vocab, .final_vocab = x->vocab };
	rc = mk_card_render_lora(&in, out, len, err);
	mk_model_ref_clear(&b);
	mk_model_ref_clear(&m);
	return rc;
}

static int report(const struct mk_extract_opts *o, const struct mk_extract_info *x, const struct kept *k,
		  unsigned r, char **out, size_t *len, struct mk_err *err)
{
	json_t *root = json_object(), *mods = json_array();
	int bad = !root || !mods;

	bad |= json_object_set_new(root, "mode", json_string(o->randomized ? "randomized" : "exact"));
	bad |= json_object_set_new(root, "max_rank", json_integer(o->max_rank));
	bad |= json_object_set_new(root, "sv_epsilon", json_real(o->sv_epsilon));
	bad |= json_object_set_new(root, "energy", json_real(o->energy));
	bad |= json_object_set_new(root, "rel_sigma", json_real(o->rel_sigma));
	bad |= json_object_set_new(root, "r", json_integer(r));
	for (size_t i = 0; i < x->nmodules && !bad; i++) {
		json_t *e = json_object();
		bad |= !e || json_object_set_new(e, "module", json_string(x->modules[i].name)) ||
		       json_object_set_new(e, "rank", json_integer(k[i].rank)) ||
		       json_object_set_new(e, "relative_error", json_real(k[i].error)) ||
		       json_object_set_new(e, "shape", json_pack("[II]", (json_int_t)x->modules[i].rows,
								 (json_int_t)x->modules[i].cols)) ||
		       json_object_set_new(e, "written", json_boolean(k[i].rank > 0)) || json_array_append_new(mods, e);
	}
	bad |= json_object_set_new(root, "modules", mods);
	mods = NULL;
	char *s = bad ? NULL : json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(root);
	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	*len = strlen(s);
	*out = s;
	return 0;
}

static bool is_stats(const struct mk_extract_info *x, const char *name)
{
	for (size_t i = 0; i < x->nmodules; i++)
		if (!strcmp(x->modules[i].stats, name))
			return true;
	return false;
}

int mk_extract_finish(const struct mk_extract_opts *o, const struct mk_extract_info *x, const char *dir,
		      uint64_t budget, struct mk_extract_summary *sum, struct mk_err *err)
{
	char *path = join(dir, "adapter_model.safetensors"), *tmp = join(dir, "adapter_model.safetensors.mk-tmp");
	struct mk_st_file *f = NULL;
	struct kept *k = calloc(x->nmodules + 1, sizeof(*k));
	struct piece *pc = NULL;
	struct mk_st_out_tensor *ot = NULL;
	size_t *order = NULL, np = 0;
	uint8_t *hdr = NULL, *buf = NULL;
	size_t hlen, blen = budget ? (size_t)(budget < (1u << 20) ? (1u << 20) : budget / 2) : FINISH_BUFFER_DEFAULT;
	char *text = NULL;
	size_t tlen;
	int fd = -1, out = -1, rc = 0;

	memset(sum, 0, sizeof(*sum));
	if (!path || !tmp || !k) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = mk_st_open(path, &f, err)))
		goto done;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		rc = mk_err_sys(err, errno, "%s", path);
		goto done;
	}
	/* the ranks kept */
	unsigned r = 0;
	for (size_t i = 0; i < x->nmodules && !rc; i++) {
		rc = read_stats(fd, f, &x->modules[i], &k[i], err);
		if (rc)
			break;
		if (!k[i].rank) {
			sum->zero++;
			continue;
		}
		sum->modules++;
		if (k[i].rank > r)
			r = k[i].rank;
		if (k[i].error >= sum->worst_error) {
			sum->worst_error = k[i].error;
			snprintf(sum->worst, sizeof(sum->worst), "%s", x->modules[i].name);
		}
	}
	if (rc)
		goto done;
	if (!r) {
		rc = mk_err_set(err, MK_EINVAL,
				"'%s' and '%s' do not differ in any module decomposed%s: an adapter would be empty",
				o->model, o->base,
				o->sv_epsilon > 0 || o->energy > 0 || o->rel_sigma > 0 ?
					" (or every singular value was dropped by --sv-epsilon, --energy or --rel-sigma)" : "");
		goto done;
	}
	sum->r = r;

	/* the new file's tensors */
	pc = calloc(f->ntensors + 1, sizeof(*pc));
	ot = calloc(f->ntensors + 1, sizeof(*ot));
	order = calloc(f->ntensors + 1, sizeof(*order));
	unsigned *rk = calloc(f->ntensors + 1, sizeof(*rk));
	if (!pc || !ot || !order || !rk) {
		free(rk);
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto done;
	}
	bool biases = false;
	for (size_t t = 0; t < f->ntensors; t++) {
		const struct mk_st_tensor *st = &f->tensors[t];
		struct piece p = { .src = st, .cut = P_WHOLE };
		unsigned rank = 0;
		if (is_stats(x, st->name))
			continue;
		bool drop = false;
		for (size_t i = 0; i < x->nmodules; i++) {
			const struct mk_extract_module *m = &x->modules[i];
			if (!strcmp(m->a, st->name) || !strcmp(m->b, st->name)) {
				bool a = !strcmp(m->a, st->name);
				rank = k[i].rank;
				drop = !rank;
				p.cut = a ? P_ROWS : P_COLS;
				p.shape[0] = a ? rank : st->desc.shape[0];
				p.shape[1] = a ? st->desc.shape[1] : rank;
				break;
			}
		}
		if (drop)
			continue;
		size_t nl = strlen(st->name);
		if (nl > 12 && !strcmp(st->name + nl - 12, ".lora_B.bias"))
			biases = true;
		else if (p.cut == P_WHOLE)
			sum->saved++;
		pc[np] = p;
		rk[np] = rank;
		ot[np] = (struct mk_st_out_tensor){ .name = st->name, .dtype = st->desc.dtype, .ndim = st->desc.ndim,
						    .shape = p.cut == P_WHOLE ? st->desc.shape : pc[np].shape };
		np++;
	}
	if ((rc = mk_st_header_build(ot, np, 8, &hdr, &hlen, order, err))) {
		free(rk);
		goto done;
	}
	if (!(buf = malloc(blen))) {
		free(rk);
		rc = mk_err_set(err, MK_ENOMEM, "out of memory (%zu bytes for copying the adapter)", blen);
		goto done;
	}
	if ((out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
		free(rk);
		rc = mk_err_sys(err, errno, "%s", tmp);
		goto done;
	}
	uint64_t off = 0;
	rc = mk_pwrite_all(out, hdr, hlen, 0, tmp, err);
	off = hlen;
	for (size_t q = 0; q < np && !rc; q++)
		rc = copy_piece(fd, f, &pc[order[q]], rk[order[q]], out, &off, buf, blen, tmp, err);
	free(rk);
	if (!rc && fsync(out) < 0)
		rc = mk_err_sys(err, errno, "%s", tmp);
	if (close(out) < 0 && !rc)
		rc = mk_err_sys(err, errno, "%s", tmp);
	out = -1;
	if (!rc && rename(tmp, path) < 0)
		rc = mk_err_sys(err, errno, "rename %s -> %s", tmp, path);
	if (rc)
		goto done;

	/* the files beside it */
	char *fp = NULL;
	/* PEFT takes lora_bias for linear layers only: beside an embedding's
	 * LoRA it refuses the whole adapter, so there the bias changes stay
	 * in the file, unapplied (the caller warns) */
	bool emb = false;
	for (size_t i = 0; i < x->nmodules; i++)
		emb |= x->modules[i].embedding && k[i].rank;
	sum->biases_unapplied = biases && emb;
	if (!(rc = adapter_config(o, x, k, r, biases && !emb, &text, &tlen, err)) &&
	    !(rc = (fp = join(dir, "adapter_config.json")) ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory")))
		rc = write_file(fp, text, tlen, err);
	free(fp);
	fp = NULL;
	free(text);
	text = NULL;
	if (!rc && !(rc = card(o, x, &text, &tlen, err)) &&
	    !(rc = (fp = join(dir, "README.md")) ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory")))
		rc = write_file(fp, text, tlen, err);
	free(fp);
	fp = NULL;
	free(text);
	text = NULL;
	if (!rc && !(rc = report(o, x, k, r, &text, &tlen, err)) &&
	    !(rc = (fp = join(dir, "extraction_report.json")) ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory")))
		rc = write_file(fp, text, tlen, err);
	free(fp);
	if (!rc)
		rc = mk_fsync_dir(dir, err);
done:
	if (out >= 0) {
		close(out);
		unlink(tmp);
	}
	if (fd >= 0)
		close(fd);
	free(text);
	free(buf);
	free(hdr);
	free(order);
	free(ot);
	free(pc);
	mk_st_file_free(f);
	free(k);
	free(path);
	free(tmp);
	return rc;
}
