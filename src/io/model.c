/* model.c - resolve a model reference (local directory or Hugging Face
 * cache) and open its safetensors checkpoint, single file or sharded. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "hub/hub.h"
#include "io/model.h"
#include "io/torchbin.h"

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define MAX_INDEX_SIZE (64u << 20)   /* real indexes are ~100 KB */
#define MAX_REF_SIZE 4096

struct name_ref {
	const char *name;
	size_t i;                    /* into mk_model.tensors */
};

/* The public struct plus the name index.  Every mk_model comes from
 * mk_model_open, so the cast is safe. */
struct model {
	struct mk_model pub;         /* first member */
	struct name_ref *by_name;    /* sorted by name, then shard */
	char *root;                  /* what the model's files must resolve
					inside (mk_model_path) */
	struct mk_hub_repo *repo;    /* a Hub model opened over the network */
};

static char *join(const char *a, const char *b)
{
	char *s;

	if (asprintf(&s, "%s/%s", a, b) < 0)
		return NULL;
	return s;
}

static int is_dir(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Read a whole (small) file into a malloc'ed buffer. */
static int slurp(const char *path, size_t max, char **out, size_t *len,
		 struct mk_err *err)
{
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	int fd, rc;

	*out = NULL;
	fd = mk_file_open(path, &st, err);
	if (fd < 0)
		return fd;
	if ((uint64_t)st.st_size > max) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: %lld bytes, larger than the "
				"%zu this file may have", path,
				(long long)st.st_size, max);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		rc = mk_err_set(err, MK_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	while (n < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = mk_err_sys(err, errno, "%s: cannot read", path);
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	close(fd);
	return rc;
}

/* ---- resolution ---- */

/* Read refs/<rev>: a commit hash, trailing whitespace ignored.  Returns a
 * malloc'ed hash, or NULL when the file is missing or not a hash. */
static char *read_ref(const char *path)
{
	char *buf = NULL;
	size_t len;

	if (!is_file(path) || slurp(path, MAX_REF_SIZE, &buf, &len, NULL) < 0)
		return NULL;
	while (len && strchr(" \t\r\n", buf[len - 1]))
		buf[--len] = '\0';
	if (strlen(buf) != len || !len || strchr(buf, '/') || !mk_hub_repo_id_ok(buf)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* A reference split: a local directory (*dir), or a Hub repository id and
 * revision with the snapshot the cache has for it (*dir, or NULL when the
 * cache has none).  `pin` (a commit) replaces the revision. */
struct where {
	char *dir;
	char *id, *rev;              /* Hub references only */
	char *repo;                  /* CACHE/models--ORG--NAME */
	char *commit;                /* the snapshot's name, when found */
	bool dangling;               /* refs/REV names a snapshot not there */
};

static void where_clear(struct where *w)
{
	free(w->dir);
	free(w->id);
	free(w->rev);
	free(w->repo);
	free(w->commit);
	memset(w, 0, sizeof(*w));
}

static int locate(const char *ref, const char *pin, struct where *w, struct mk_err *err)
{
	char *cache = NULL, *path = NULL, *hash = NULL, *at;
	const char *slash;
	int rc = 0;

	memset(w, 0, sizeof(*w));
	if (!ref || !ref[0])
		return mk_err_set(err, MK_EINVAL, "empty model reference");
	if (is_dir(ref))
		return (w->dir = strdup(ref)) ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!(w->id = strdup(ref)))
		goto nomem;
	if ((at = strchr(w->id, '@'))) {
		*at = '\0';
		if (strchr(at + 1, '@')) {
			rc = mk_err_set(err, MK_EINVAL, "model '%s': more than one '@' (expected "
					"path[@revision])", ref);
			goto fail;
		}
		/* mergekit: an existing local path ignores the revision. */
		if (is_dir(w->id)) {
			w->dir = w->id;
			w->id = NULL;
			return 0;
		}
		if (!mk_path_stays_inside(at + 1)) {
			rc = mk_err_set(err, MK_EINVAL, "model '%s': '%s' is not a valid revision", ref, at + 1);
			goto fail;
		}
		if (!(w->rev = strdup(at + 1)))
			goto nomem;
	}
	if (!mk_hub_repo_id_ok(w->id)) {
		rc = mk_err_set(err, MK_ENOENT, "model '%s': not a local directory and not a Hugging Face "
				"repo id (org/name[@revision])", ref);
		goto fail;
	}
	if (!(cache = mk_hub_cache_dir(err))) {
		rc = mk_err_prefix(err, "model '%s': not a local directory: ", ref);
		goto fail;
	}
	slash = strchr(w->id, '/');     /* org/name -> models--org--name */
	if ((slash ? asprintf(&w->repo, "%s/models--%.*s--%s", cache, (int)(slash - w->id), w->id, slash + 1)
		   : asprintf(&w->repo, "%s/models--%s", cache, w->id)) < 0) {
		w->repo = NULL;
		goto nomem;
	}
	if (pin) {
		if (!mk_path_stays_inside(pin) || strchr(pin, '/')) {
			rc = mk_err_set(err, MK_EINVAL, "model '%s': the plan pins it to '%s', not a commit", ref, pin);
			goto fail;
		}
		if (!(w->commit = strdup(pin)))
			goto nomem;
	} else if (is_dir(w->repo)) {
		if (asprintf(&path, "%s/refs/%s", w->repo, w->rev ? w->rev : "main") < 0) {
			path = NULL;
			goto nomem;
		}
		hash = read_ref(path);
		if (!hash && w->rev && !strchr(w->rev, '/'))
			hash = strdup(w->rev);         /* a commit of the snapshots */
		w->commit = hash;
		hash = NULL;
	}
	if (w->commit) {
		free(path);
		if (asprintf(&path, "%s/snapshots/%s", w->repo, w->commit) < 0) {
			path = NULL;
			goto nomem;
		}
		if (is_dir(path)) {
			w->dir = path;
			path = NULL;
		} else if (!pin && !(w->rev && !strcmp(w->rev, w->commit))) {
			w->dangling = true;     /* refs/REV names a snapshot not there */
		}
	}
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "model '%s': out of memory", ref);
fail:
	where_clear(w);
out:
	free(cache);
	free(path);
	free(hash);
	return rc;
}

int mk_model_resolve(const char *ref, char **dir, struct mk_err *err)
{
	struct where w;
	int rc = locate(ref, NULL, &w, err);

	*dir = NULL;
	if (rc < 0)
		return rc;
	if (!w.dir) {
		if (w.dangling)
			rc = mk_err_set(err, MK_ENOENT, "model '%s': refs/%s in the Hugging Face cache points at "
					"snapshot %s, which is missing (%s/snapshots/%s)", ref,
					w.rev ? w.rev : "main", w.commit, w.repo, w.commit);
		else
			rc = mk_err_set(err, MK_ENOENT, "model '%s': not a local directory and not in the "
					"Hugging Face cache (%s%s%s)", ref, w.repo, w.rev ? ", revision " : "",
					w.rev ? w.rev : "");
		where_clear(&w);
		return rc;
	}
	*dir = w.dir;
	w.dir = NULL;
	where_clear(&w);
	return 0;
}

/* ---- the model's files ---- */

/* The folder a model's files must resolve inside: its directory, or for a
 * Hugging Face cache snapshot (.../models--ORG--NAME/snapshots/REV, whose
 * files are links into ../../blobs) the repository folder. */
static char *model_root(const char *dir)
{
	char *r = realpath(dir, NULL), *s, *base;

	if (!r)
		return NULL;
	s = strrchr(r, '/');
	if (s && s > r) {
		*s = '\0';
		char *snap = strrchr(r, '/');
		if (snap && !strcmp(snap, "/snapshots")) {
			*snap = '\0';
			base = strrchr(r, '/');
			if (base && !strncmp(base + 1, "models--", 8))
				return r;         /* the repository folder */
			*snap = '/';
		}
		*s = '/';
	}
	return r;
}

int mk_model_path(const struct mk_model *m, const char *name, char **out, struct mk_err *err)
{
	const struct model *mm = (const struct model *)m;
	char *p = join(m->dir, name), *rp;
	size_t n;

	*out = NULL;
	if (!p)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	rp = realpath(p, NULL);
	if (!rp) {
		int rc = mk_err_sys(err, errno, "%s", p);
		free(p);
		return rc;
	}
	n = strlen(mm->root);
	if (strncmp(rp, mm->root, n) || (rp[n] != '/' && rp[n] != '\0')) {
		int rc = mk_err_set(err, MK_EINVAL,
				    "model '%s': '%s' leads outside the model's directory (to %s); mk reads only files inside %s",
				    m->ref, name, rp, mm->root);
		free(p);
		free(rp);
		return rc;
	}
	free(p);
	*out = rp;
	return 0;
}

/* the model's file `name` resolves inside its root (an error if not) */
static int check_inside(const struct mk_model *m, const char *name, struct mk_err *err)
{
	char *rp;
	int rc = mk_model_path(m, name, &rp, err);

	free(rp);
	return rc;
}

/* ---- opening ---- */

void mk_model_free(struct mk_model *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nshards; i++) {
		mk_st_file_free(m->shards[i]);
		if (m->remote)
			mk_hub_blob_free(m->remote[i]);
		free(m->shard_names[i]);
	}
	free(m->remote);
	free(m->commit);
	mk_hub_repo_free(((struct model *)m)->repo);
	free(m->shards);
	free(m->shard_names);
	free(m->tensors);
	free(m->ref);
	free(m->dir);
	free(((struct model *)m)->by_name);
	free(((struct model *)m)->root);
	free(m);
}

static int cmp_name_ref(const void *a, const void *b)
{
	const struct name_ref *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c)
		return c;
	return x->i < y->i ? -1 : x->i > y->i;
}

static int cmp_entry(const void *a, const void *b)
{
	const struct mk_st_index_entry *const *x = a, *const *y = b;

	return strcmp((*x)->tensor, (*y)->tensor);
}

/* Fill m->tensors (by shard, then offset) and the name index; reject a
 * tensor present in two shards. */
static int build_tensors(struct model *mm, struct mk_err *err)
{
	struct mk_model *m = &mm->pub;
	size_t n = 0, k = 0;

	for (size_t s = 0; s < m->nshards; s++)
		n += m->shards[s]->ntensors;
	/* a model is its tensors: one with none is refused, as mergekit
	 * would find nothing to merge (and an empty output is no model) */
	if (n == 0 && m->nshards == 1)
		return mk_err_set(err, MK_EFORMAT, "model '%s': %s: no tensors", m->ref, m->shards[0]->path);
	if (n == 0)
		return mk_err_set(err, MK_EFORMAT, "model '%s': %s and its %zu other shards: no tensors", m->ref,
				  m->shards[0]->path, m->nshards - 1);
	m->tensors = calloc(n ? n : 1, sizeof(*m->tensors));
	mm->by_name = calloc(n ? n : 1, sizeof(*mm->by_name));
	if (!m->tensors || !mm->by_name)
		return mk_err_set(err, MK_ENOMEM, "model '%s': out of memory",
				  m->ref);
	for (size_t s = 0; s < m->nshards; s++)
		for (size_t i = 0; i < m->shards[s]->ntensors; i++, k++) {
			m->tensors[k].t = &m->shards[s]->tensors[i];
			m->tensors[k].shard = s;
			mm->by_name[k].name = m->tensors[k].t->name;
			mm->by_name[k].i = k;
		}
	m->ntensors = n;
	qsort(mm->by_name, n, sizeof(*mm->by_name), cmp_name_ref);
	for (size_t i = 1; i < n; i++)
		if (!strcmp(mm->by_name[i - 1].name, mm->by_name[i].name))
			return mk_err_set(err, MK_EMISMATCH, "model '%s': tensor '%s' "
					  "is in two shards, %s and %s", m->ref,
					  mm->by_name[i].name,
					  m->shard_names[m->tensors[mm->by_name[i - 1].i].shard],
					  m->shard_names[m->tensors[mm->by_name[i].i].shard]);
	return 0;
}

/* Index and shard headers must agree both ways. */
static int check_index(struct mk_model *m, const struct mk_st_index *idx, const char *index_name,
		       struct mk_err *err)
{
	const struct mk_st_index_entry **sorted = NULL;
	int rc = 0;

	for (size_t i = 0; i < idx->nentries; i++) {
		const struct mk_st_index_entry *e = &idx->entries[i];

		if (!mk_st_find(m->shards[e->shard], e->tensor)) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': %s maps tensor "
					"'%s' to %s, which does not contain it",
					m->ref, index_name, e->tensor,
					idx->shards[e->shard]);
			goto out;
		}
	}
	sorted = malloc((idx->nentries ? idx->nentries : 1) * sizeof(*sorted));
	if (!sorted) {
		rc = mk_err_set(err, MK_ENOMEM, "model '%s': out of memory", m->ref);
		goto out;
	}
	for (size_t i = 0; i < idx->nentries; i++)
		sorted[i] = &idx->entries[i];
	qsort(sorted, idx->nentries, sizeof(*sorted), cmp_entry);
	for (size_t i = 0; i < m->ntensors; i++) {
		struct mk_st_index_entry key = { .tensor = m->tensors[i].t->name };
		const struct mk_st_index_entry *kp = &key;

		if (!bsearch(&kp, sorted, idx->nentries, sizeof(*sorted), cmp_entry)) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': %s holds tensor "
					"'%s', which %s does not list", m->ref,
					m->shard_names[m->tensors[i].shard],
					m->tensors[i].t->name, index_name);
			goto out;
		}
	}
out:
	free(sorted);
	return rc;
}

/* Neither an index nor a weight file as a regular file: say which it is
 * when one of the names exists as something else (a FIFO, a directory,
 * a link to nothing). */
static int weights_missing(const struct mk_model *m, const char *const *names, size_t n,
			   struct mk_err *err)
{
	struct stat st, lst;

	for (size_t i = 0; i < n; i++) {
		char *path = names[i] ? join(m->dir, names[i]) : NULL;
		int got = path ? lstat(path, &lst) : -1, e = got == 0 && stat(path, &st) < 0 ? errno : 0;

		free(path);
		if (got < 0)
			continue;
		if (e)
			return mk_err_sys(err, e, "model '%s': %s in %s is a symbolic link that does not "
					  "resolve", m->ref, names[i], m->dir);
		return mk_err_set(err, MK_EFORMAT, "model '%s': %s in %s is %s, not a regular file", m->ref,
				  names[i], m->dir, mk_file_kind(st.st_mode));
	}
	return mk_err_set(err, MK_ENOENT, "model '%s': no %s or %s in %s", m->ref, names[1], names[0], m->dir);
}

/* The weights' layouts: safetensors (an index, else one file), else
 * PyTorch's torch.save files (the same two), as mergekit looks for them. */
static const struct layout {
	const char *index, *single;
	int (*open)(const char *, struct mk_st_file **, struct mk_err *);
	bool ranged;                 /* headers readable by range requests */
} model_layouts[] = {
	{ INDEX_NAME, SINGLE_NAME, mk_st_open, true },
	{ "pytorch_model.bin.index.json", "pytorch_model.bin", mk_torchbin_open, false },
}, adapter_layouts[] = {
	/* a PEFT adapter: one file, no index (PEFT writes no sharded adapters) */
	{ NULL, "adapter_model.safetensors", mk_st_open, true },
	{ NULL, "adapter_model.bin", mk_torchbin_open, false },
};

/* The file is in the model's directory, or (a Hub model) in its listing. */
static bool has_file(const struct model *mm, const char *name, bool *local)
{
	char *p = join(mm->pub.dir, name);

	*local = p && is_file(p);
	free(p);
	return *local || (mm->repo && mk_hub_repo_file(mm->repo, name));
}

/* Files a merge reads besides the weights: the repository's top-level
 * JSON, text, template and SentencePiece files (config, index, tokenizer,
 * generation and adapter settings). */
static bool is_meta_file(const char *name)
{
	static const char *const ext[] = { ".json", ".txt", ".jinja", ".model", ".tiktoken" };
	size_t n = strlen(name);

	if (strchr(name, '/'))
		return false;
	for (size_t i = 0; i < sizeof(ext) / sizeof(*ext); i++) {
		size_t k = strlen(ext[i]);
		if (n > k && !strcmp(name + n - k, ext[i]))
			return true;
	}
	return false;
}

/* Download the listed files the snapshot lacks. */
static int fetch_missing(struct model *mm, const char *const *names, size_t n, struct mk_err *err)
{
	const char **need = calloc(n + 1, sizeof(*need));
	size_t k = 0;
	bool local;
	int rc;

	if (!need)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (has_file(mm, names[i], &local) && !local)
			need[k++] = names[i];
	rc = k ? mk_hub_download(mm->repo, need, k, NULL, err) : 0;
	free(need);
	return rc;
}

static int fetch_meta(struct model *mm, struct mk_err *err)
{
	const char **names = calloc(mm->repo->nfiles + 1, sizeof(*names));
	size_t n = 0;
	int rc;

	if (!names)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < mm->repo->nfiles; i++)
		if (is_meta_file(mm->repo->files[i].name))
			names[n++] = mm->repo->files[i].name;
	rc = fetch_missing(mm, names, n, err);
	free(names);
	return rc;
}

#define MAX_REMOTE_HEADER (100u << 20)   /* the safetensors format's limit */

/* A remote safetensors shard's header: its 8-byte length, then the
 * header, by two range requests. */
static int remote_header(struct model *mm, const char *name, const char *path, struct mk_st_file **out,
			 uint8_t **bytes, struct mk_err *err)
{
	const struct mk_hub_file *f = mk_hub_repo_file(mm->repo, name);
	uint8_t len8[8], *buf;
	uint64_t n = 0;
	int rc;

	if (f->size < 8)
		return mk_err_set(err, MK_EFORMAT, "%s: %llu bytes, too short for a safetensors file", path,
				  (unsigned long long)f->size);
	rc = mk_hub_read_range(mm->repo, name, 0, 8, len8, err);
	if (rc < 0)
		return rc;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | len8[i];
	if (n > MAX_REMOTE_HEADER || n > f->size - 8)
		return mk_st_parse(len8, 8, f->size, path, out, err);   /* its own message */
	if (!(buf = malloc(8 + n)))
		return mk_err_set(err, MK_ENOMEM, "%s: out of memory", path);
	memcpy(buf, len8, 8);
	rc = mk_hub_read_range(mm->repo, name, 8, (size_t)n, buf + 8, err);
	if (rc == 0)
		rc = mk_st_parse(buf, 8 + n, f->size, path, out, err);
	if (rc == 0 && bytes)
		*bytes = buf;
	else
		free(buf);
	return rc;
}

/* Open one weight file: local, else downloaded before, else (remote) by
 * its header. */
static int open_shard(struct model *mm, const struct layout *lay, const struct mk_model_open_opts *o,
		      size_t i, const char *name, struct mk_err *err)
{
	struct mk_model *m = &mm->pub;
	char *path = join(m->dir, name);
	bool local;
	int rc;

	if (!path)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (!has_file(mm, name, &local) || local) {
		rc = check_inside(m, name, err);
		if (rc == 0)
			rc = lay->open(path, &m->shards[i], err);
	} else {
		uint8_t *head = NULL;
		rc = remote_header(mm, name, path, &m->shards[i], &head, err);
		if (rc == 0 && o->weights == MK_MODEL_STREAM) {
			rc = mk_hub_blob_open(mm->repo, name, o->cache, &m->remote[i], err);
			/* the cache's copy begins with the header */
			if (rc == 0)
				rc = mk_hub_blob_cache(m->remote[i], 0, head, (size_t)m->shards[i]->data_start, err);
		}
		free(head);
	}
	free(path);
	return rc;
}

/* The layout and its weight files.  Returns 1, with err saying what is
 * missing, when `can_ask` (a Hub model's snapshot with no repository
 * open yet) and files are missing: then ask the Hub. */
static int open_weights(struct model *mm, const struct mk_model_open_opts *o, bool can_ask,
			struct mk_err *err)
{
	struct mk_model *m = &mm->pub;
	struct mk_st_index *idx = NULL;
	const struct layout *lay = NULL;
	char *path = NULL, *buf = NULL;
	const char **names = NULL;
	bool indexed = false, local = false;
	size_t len, n;
	int rc = 0;

	const struct layout *layouts = o->adapter ? adapter_layouts : model_layouts;
	for (size_t k = 0; k < 2 && !lay; k++) {
		if (layouts[k].index && has_file(mm, layouts[k].index, &local)) {
			lay = &layouts[k];
			indexed = true;
		} else if (has_file(mm, layouts[k].single, &local)) {
			lay = &layouts[k];
		}
	}
	if (!lay) {
		const char *names4[] = { layouts[0].index, layouts[0].single, layouts[1].index,
					 layouts[1].single };
		rc = weights_missing(m, names4, 4, err);
		if (rc == -MK_ENOENT && o->adapter)
			mk_err_set(err, MK_ENOENT, "adapter '%s': no adapter_model.safetensors or "
				   "adapter_model.bin in %s", m->ref, m->dir);
		if (can_ask && !mm->repo)
			rc = 1;
		goto out;
	}
	if (indexed) {
		if (!local) {
			if (!mm->repo) {
				rc = 1;
				mk_err_set(err, MK_ENOENT, "no %s", lay->index);
				goto out;
			}
			const char *one = lay->index;
			if ((rc = fetch_missing(mm, &one, 1, err)) < 0)
				goto out;
		}
		rc = check_inside(m, lay->index, err);
		if (rc < 0)
			goto out;
		if (!(path = join(m->dir, lay->index)))
			goto nomem;
		rc = slurp(path, MAX_INDEX_SIZE, &buf, &len, err);
		if (rc == 0)
			rc = mk_st_index_parse(buf, len, path, &idx, err);
		if (rc < 0)
			goto out;
		n = idx->nshards;
		if (n == 0) {
			rc = mk_err_set(err, MK_EFORMAT, "model '%s': %s: no tensors (its weight_map is empty)", m->ref, path);
			goto out;
		}
	} else {
		n = 1;
	}
	m->shards = calloc(n ? n : 1, sizeof(*m->shards));
	m->shard_names = calloc(n ? n : 1, sizeof(*m->shard_names));
	m->remote = calloc(n ? n : 1, sizeof(*m->remote));
	names = calloc(n ? n : 1, sizeof(*names));
	if (!m->shards || !m->shard_names || !m->remote || !names)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		if (!(m->shard_names[i] = strdup(indexed ? idx->shards[i] : lay->single)))
			goto nomem;
		m->nshards++;
		names[i] = m->shard_names[i];
	}
	/* missing weights: a Hub model asks the Hub; with a repository open,
	 * they are downloaded unless only their headers are wanted */
	for (size_t i = 0; i < n; i++)
		if (!has_file(mm, names[i], &local) || !local) {
			if (!mm->repo) {
				if (!can_ask)
					break;        /* open_shard says it is missing */
				rc = 1;
				mk_err_set(err, MK_ENOENT, "no %s", names[i]);
				goto out;
			}
			if (o->weights == MK_MODEL_DOWNLOAD || !lay->ranged) {
				rc = fetch_missing(mm, names, n, err);
				if (rc < 0)
					goto out;
			}
			break;
		}
	for (size_t i = 0; i < n; i++) {
		rc = open_shard(mm, lay, o, i, names[i], err);
		if (rc < 0) {
			if (indexed)
				mk_err_prefix(err, "model '%s': shard listed in %s: ", m->ref, lay->index);
			else
				mk_err_prefix(err, "model '%s': ", m->ref);
			goto out;
		}
	}
	rc = build_tensors(mm, err);
	if (rc == 0 && indexed)
		rc = check_index(m, idx, lay->index, err);
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "model '%s': out of memory", m->ref);
out:
	if (rc == 1) {
		/* start again once the Hub said what the files are */
		for (size_t i = 0; i < m->nshards; i++) {
			mk_st_file_free(m->shards[i]);
			mk_hub_blob_free(m->remote[i]);
			free(m->shard_names[i]);
		}
		free(m->shards);
		free(m->shard_names);
		free(m->remote);
		m->shards = NULL;
		m->shard_names = NULL;
		m->remote = NULL;
		m->nshards = 0;
	}
	mk_st_index_free(idx);
	free(names);
	free(buf);
	free(path);
	return rc;
}

static int set_root(struct model *mm, struct mk_err *err)
{
	free(mm->root);
	mm->root = model_root(mm->pub.dir);
	return mm->root ? 0 : mk_err_sys(err, errno, "model '%s': %s", mm->pub.ref, mm->pub.dir);
}

/* A reference that is one regular file (a state dict, as mk-pytorch
 * takes): that file alone, in its directory, read as safetensors when its
 * name ends in .safetensors, else as a torch.save pickle. */
static int open_one_file(struct model *mm, const struct mk_model_open_opts *o, struct mk_err *err)
{
	struct mk_model *m = &mm->pub;
	const char *slash = strrchr(m->ref, '/');
	const char *base = slash ? slash + 1 : m->ref;
	size_t n = strlen(base);
	bool st = n >= 12 && !strcmp(base + n - 12, ".safetensors");
	const struct layout lay = { NULL, base, st ? mk_st_open : mk_torchbin_open, false };
	int rc;

	m->dir = !slash ? strdup(".") : slash == m->ref ? strdup("/") : strndup(m->ref, (size_t)(slash - m->ref));
	m->shards = calloc(1, sizeof(*m->shards));
	m->shard_names = calloc(1, sizeof(*m->shard_names));
	m->remote = calloc(1, sizeof(*m->remote));
	if (!m->dir || !m->shards || !m->shard_names || !m->remote || !(m->shard_names[0] = strdup(base)))
		return mk_err_set(err, MK_ENOMEM, "model '%s': out of memory", m->ref);
	m->nshards = 1;
	if ((rc = set_root(mm, err)) < 0)
		return rc;
	if ((rc = open_shard(mm, &lay, o, 0, base, err)) < 0)
		return mk_err_prefix(err, "model '%s': ", m->ref);
	return build_tensors(mm, err);
}

int mk_model_open_with(const char *ref, const struct mk_model_open_opts *o, struct mk_model **out,
		       struct mk_err *err)
{
	static const struct mk_model_open_opts defaults = { .weights = MK_MODEL_DOWNLOAD, .cache = true };
	struct model *mm = NULL;
	struct mk_model *m;
	struct where w = { 0 };
	int rc;

	*out = NULL;
	if (!o)
		o = &defaults;
	mm = calloc(1, sizeof(*mm));
	if (!mm)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m = &mm->pub;
	m->ref = strdup(ref ? ref : "");
	if (!m->ref)
		goto nomem;
	/* one file: a regular file, or anything else there but a directory,
	 * which its open refuses by name (a FIFO, a device) */
	if (!o->adapter && access(m->ref, F_OK) == 0 && !is_dir(m->ref)) {
		if ((rc = open_one_file(mm, o, err)) < 0)
			goto out;
		*out = m;
		mm = NULL;
		goto out;
	}
	rc = locate(ref, o->commit, &w, err);
	if (rc < 0)
		goto out;
	rc = 1;
	if (w.dir && o->refresh && w.id && !o->commit && !mk_hub_offline()) {
		free(w.dir);            /* a branch may have moved: ask */
		w.dir = NULL;
		free(w.commit);
		w.commit = NULL;
		if (w.rev && strchr(w.rev, '/') == NULL && strlen(w.rev) == 40)
			w.commit = strdup(w.rev);
	}
	if (w.dir) {
		m->dir = w.dir;
		w.dir = NULL;
		if (w.commit && !(m->commit = strdup(w.commit)))
			goto nomem;
		if ((rc = set_root(mm, err)) < 0)
			goto out;
		rc = open_weights(mm, o, w.id != NULL, err);
		if (rc < 0)
			goto out;
	}
	if (rc == 1) {
		/* a Hub model the cache does not hold whole: ask the Hub */
		if (mk_hub_offline()) {
			char why[MK_ERR_MSG_MAX];
			snprintf(why, sizeof(why), "%s", err->msg);
			if (m->dir)
				rc = mk_err_set(err, MK_ENOENT, "model '%s': the Hugging Face cache holds only part "
						"of it (%s: %s), and HF_HUB_OFFLINE=1 forbids downloading the rest; "
						"unset it, or run `mk-get %s` where the Hub is reachable", ref, m->dir,
						why, ref);
			else
				rc = mk_err_set(err, MK_ENOENT, "model '%s': not a local directory and not in the "
						"Hugging Face cache (%s), and HF_HUB_OFFLINE=1 forbids downloading it; "
						"unset it, or run `mk-get %s` where the Hub is reachable", ref, w.repo, ref);
			goto out;
		}
		rc = mk_hub_repo_open(w.id, w.commit ? w.commit : w.rev, &mm->repo, err);
		if (rc < 0) {
			if (!strstr(err->msg, ref))
				mk_err_prefix(err, "model '%s': ", ref);
			goto out;
		}
		free(m->dir);
		free(m->commit);
		m->dir = strdup(mm->repo->snapshot);
		m->commit = strdup(mm->repo->commit);
		if (!m->dir || !m->commit)
			goto nomem;
		if ((rc = mk_hub_repo_pin(mm->repo, err)) < 0 || (rc = set_root(mm, err)) < 0 ||
		    (rc = fetch_meta(mm, err)) < 0)
			goto out;
		rc = open_weights(mm, o, false, err);
		if (rc < 0)
			goto out;
	}
	*out = m;
	mm = NULL;
	rc = 0;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "model '%s': out of memory", ref ? ref : "");
out:
	where_clear(&w);
	if (mm)
		mk_model_free(&mm->pub);
	return rc;
}

int mk_model_open(const char *ref, struct mk_model **out, struct mk_err *err)
{
	return mk_model_open_with(ref, NULL, out, err);
}

int mk_model_open_adapter(const char *ref, struct mk_model **out, struct mk_err *err)
{
	static const struct mk_model_open_opts o = { .weights = MK_MODEL_DOWNLOAD, .cache = true,
						     .adapter = true };
	return mk_model_open_with(ref, &o, out, err);
}

bool mk_model_has_remote(const struct mk_model *m)
{
	for (size_t s = 0; m->remote && s < m->nshards; s++)
		if (m->remote[s])
			return true;
	return false;
}

const struct mk_model_tensor *mk_model_find(const struct mk_model *m,
					    const char *name)
{
	const struct name_ref *idx = ((const struct model *)m)->by_name;
	size_t lo = 0, hi = m->ntensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, idx[mid].name);

		if (c == 0)
			return &m->tensors[idx[mid].i];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int mk_model_open_fds(const struct mk_model *m, int **fds, struct mk_err *err)
{
	int *v = malloc((m->nshards + 1) * sizeof(*v));

	*fds = NULL;
	if (!v)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t s = 0; s < m->nshards; s++) {
		if (m->remote && m->remote[s]) {
			v[s] = -1;           /* read by range requests (m->remote) */
			continue;
		}
		v[s] = mk_file_open(m->shards[s]->path, NULL, err);
		if (v[s] < 0) {
			int rc = v[s] == -MK_ENOENT && ((const struct model *)m)->repo ?
				 mk_err_set(err, MK_ENOENT, "model '%s': %s was not downloaded (opened for its "
					    "headers only)", m->ref, m->shard_names[s]) : v[s];
			while (s-- > 0)
				if (v[s] >= 0)
					close(v[s]);
			free(v);
			return rc;
		}
	}
	*fds = v;
	return 0;
}

void mk_model_close_fds(const struct mk_model *m, int *fds)
{
	if (!fds)
		return;
	for (size_t s = 0; s < m->nshards; s++)
		if (fds[s] >= 0)
			close(fds[s]);
	free(fds);
}
