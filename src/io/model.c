/* model.c - resolve a model reference (local directory or Hugging Face
 * cache) and open its safetensors checkpoint, single file or sharded. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "mk/model.h"
#include "mk/torchbin.h"

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
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mk_err_sys(err, errno, "%s: cannot open", path);
	if (fstat(fd, &st) < 0) {
		rc = mk_err_sys(err, errno, "%s: cannot stat", path);
		goto out;
	}
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

/* Hugging Face repo ids: [org/]name, each part of [A-Za-z0-9._-], not
 * "." or "..". */
static int repo_part_ok(const char *s, size_t n)
{
	if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && !strncmp(s, "..", 2)))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
			    "0123456789._-", s[i]))
			return 0;
	return 1;
}

static int repo_id_ok(const char *id)
{
	const char *slash = strchr(id, '/');

	if (!slash)
		return repo_part_ok(id, strlen(id));
	return repo_part_ok(id, (size_t)(slash - id)) &&
	       repo_part_ok(slash + 1, strlen(slash + 1));
}

/* A revision is a branch/tag name (may hold '/') or a commit hash; it
 * must stay inside refs/ and snapshots/. */
static int rev_ok(const char *rev)
{
	const char *p = rev;

	if (!rev[0] || rev[0] == '/' || strchr(rev, '\\'))
		return 0;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return 0;
		p += n;
		if (*p)
			p++;
	}
	return rev[strlen(rev) - 1] != '/';
}

/* The hub cache root: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (the
 * order huggingface_hub uses).  NULL on allocation failure or no $HOME. */
static char *hub_cache(void)
{
	const char *e;
	char *s = NULL;

	if ((e = getenv("HF_HUB_CACHE")) && e[0])
		return strdup(e);
	if ((e = getenv("HF_HOME")) && e[0])
		return join(e, "hub");
	if ((e = getenv("XDG_CACHE_HOME")) && e[0]) {
		if (asprintf(&s, "%s/huggingface/hub", e) < 0)
			return NULL;
		return s;
	}
	if ((e = getenv("HOME")) && e[0]) {
		if (asprintf(&s, "%s/.cache/huggingface/hub", e) < 0)
			return NULL;
		return s;
	}
	return NULL;
}

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
	if (strlen(buf) != len || !repo_part_ok(buf, len)) {
		free(buf);
		return NULL;
	}
	return buf;
}

int mk_model_resolve(const char *ref, char **dir, struct mk_err *err)
{
	char *id = NULL, *cache = NULL, *repo = NULL, *path = NULL, *hash = NULL;
	const char *rev = NULL, *slash;
	char *at;
	int rc;

	*dir = NULL;
	if (!ref || !ref[0])
		return mk_err_set(err, MK_EINVAL, "empty model reference");
	if (is_dir(ref)) {
		*dir = strdup(ref);
		return *dir ? 0 : mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	id = strdup(ref);
	if (!id)
		goto nomem;
	at = strchr(id, '@');
	if (at) {
		*at = '\0';
		rev = at + 1;
		if (strchr(rev, '@')) {
			rc = mk_err_set(err, MK_EINVAL, "model '%s': more than one "
					"'@' (expected path[@revision])", ref);
			goto out;
		}
		/* mergekit: an existing local path ignores the revision. */
		if (is_dir(id)) {
			*dir = id;
			id = NULL;
			rc = 0;
			goto out;
		}
		if (!rev_ok(rev)) {
			rc = mk_err_set(err, MK_EINVAL, "model '%s': '%s' is not a "
					"valid revision", ref, rev);
			goto out;
		}
	}
	if (!repo_id_ok(id)) {
		rc = mk_err_set(err, MK_ENOENT, "model '%s': not a local directory "
				"and not a Hugging Face repo id (org/name[@revision])",
				ref);
		goto out;
	}
	cache = hub_cache();
	if (!cache) {
		rc = mk_err_set(err, MK_ENOENT, "model '%s': not a local directory, "
				"and no Hugging Face cache to look in (set "
				"HF_HUB_CACHE, HF_HOME or HOME)", ref);
		goto out;
	}
	slash = strchr(id, '/');     /* org/name -> models--org--name */
	if ((slash ? asprintf(&repo, "%s/models--%.*s--%s", cache,
			      (int)(slash - id), id, slash + 1) :
		     asprintf(&repo, "%s/models--%s", cache, id)) < 0) {
		repo = NULL;
		goto nomem;
	}
	if (is_dir(repo)) {
		if (asprintf(&path, "%s/refs/%s", repo, rev ? rev : "main") < 0) {
			path = NULL;
			goto nomem;
		}
		hash = read_ref(path);
		free(path);
		path = NULL;
		if (hash) {
			if (asprintf(&path, "%s/snapshots/%s", repo, hash) < 0) {
				path = NULL;
				goto nomem;
			}
			if (!is_dir(path)) {
				rc = mk_err_set(err, MK_ENOENT, "model '%s': refs/%s in "
						"the Hugging Face cache points at "
						"snapshot %s, which is missing (%s)",
						ref, rev ? rev : "main", hash, path);
				goto out;
			}
			*dir = path;
			path = NULL;
			rc = 0;
			goto out;
		}
		if (rev) {
			if (asprintf(&path, "%s/snapshots/%s", repo, rev) < 0) {
				path = NULL;
				goto nomem;
			}
			if (is_dir(path)) {
				*dir = path;
				path = NULL;
				rc = 0;
				goto out;
			}
		}
	}
	rc = mk_err_set(err, MK_ENOENT, "model '%s': not a local directory and "
			"not in the Hugging Face cache (%s%s%s); mk does not "
			"download models (yet): fetch it first, e.g. with "
			"`huggingface-cli download %s%s%s`", ref, repo,
			rev ? ", revision " : "", rev ? rev : "", id,
			rev ? " --revision " : "", rev ? rev : "");
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "model '%s': out of memory", ref);
out:
	free(id);
	free(cache);
	free(repo);
	free(path);
	free(hash);
	return rc;
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
		free(m->shard_names[i]);
	}
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

/* Neither an index nor model.safetensors as a regular file: say which it
 * is when the name exists as something else. */
static int single_missing(const struct mk_model *m, const char *path, struct mk_err *err)
{
	struct stat st, lst;

	if (lstat(path, &lst) < 0)
		return mk_err_set(err, MK_ENOENT, "model '%s': no %s or %s in %s", m->ref, SINGLE_NAME,
				  INDEX_NAME, m->dir);
	if (stat(path, &st) < 0)
		return mk_err_sys(err, errno, "model '%s': %s in %s is a symbolic link that does not "
				  "resolve", m->ref, SINGLE_NAME, m->dir);
	return mk_err_set(err, MK_EFORMAT, "model '%s': %s in %s is %s, not a regular file", m->ref, SINGLE_NAME,
			  m->dir, S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" :
			  S_ISSOCK(st.st_mode) ? "a socket" : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ?
			  "a device" : "not a file");
}

/* A PEFT adapter's weights: adapter_model.safetensors, else adapter_model.bin
 * (one file, no index: PEFT writes no sharded adapters). */
static int model_open(const char *ref, bool adapter, struct mk_model **out, struct mk_err *err);

int mk_model_open(const char *ref, struct mk_model **out, struct mk_err *err)
{
	return model_open(ref, false, out, err);
}

int mk_model_open_adapter(const char *ref, struct mk_model **out, struct mk_err *err)
{
	return model_open(ref, true, out, err);
}

static int model_open(const char *ref, bool adapter, struct mk_model **out, struct mk_err *err)
{
	struct model *mm = NULL;
	struct mk_model *m;
	struct mk_st_index *idx = NULL;
	char *path = NULL, *buf = NULL;
	size_t len;
	int rc;

	*out = NULL;
	mm = calloc(1, sizeof(*mm));
	if (!mm)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m = &mm->pub;
	m->ref = strdup(ref ? ref : "");
	if (!m->ref)
		goto nomem;
	rc = mk_model_resolve(ref, &m->dir, err);
	if (rc < 0)
		goto out;
	mm->root = model_root(m->dir);
	if (!mm->root) {
		rc = mk_err_sys(err, errno, "model '%s': %s", m->ref, m->dir);
		goto out;
	}

	/* the weights: safetensors (an index, else one file), else PyTorch's
	 * torch.save files (the same two layouts), as mergekit looks for them */
	static const struct layout {
		const char *index, *single;
		int (*open)(const char *, struct mk_st_file **, struct mk_err *);
	} model_layouts[] = {
		{ INDEX_NAME, SINGLE_NAME, mk_st_open },
		{ "pytorch_model.bin.index.json", "pytorch_model.bin", mk_torchbin_open },
	}, adapter_layouts[] = {
		{ NULL, "adapter_model.safetensors", mk_st_open },
		{ NULL, "adapter_model.bin", mk_torchbin_open },
	};
	const struct layout *layouts = adapter ? adapter_layouts : model_layouts;
	size_t lay = 0;
	bool indexed = false;
	for (size_t k = 0; k < 2; k++) {
		free(path);
		path = NULL;
		if (layouts[k].index && !(path = join(m->dir, layouts[k].index)))
			goto nomem;
		if (path && is_file(path)) {
			lay = k;
			indexed = true;
			break;
		}
		free(path);
		if (!(path = join(m->dir, layouts[k].single)))
			goto nomem;
		if (is_file(path)) {
			lay = k;
			break;
		}
		lay = SIZE_MAX;
	}
	if (lay == SIZE_MAX && adapter) {
		rc = mk_err_set(err, MK_ENOENT, "adapter '%s': no adapter_model.safetensors or adapter_model.bin in %s",
				m->ref, m->dir);
		goto out;
	}
	if (lay == SIZE_MAX) {
		free(path);
		if (!(path = join(m->dir, SINGLE_NAME)))
			goto nomem;
		rc = single_missing(m, path, err);
		goto out;
	}
	const char *iname = layouts[lay].index, *sname = layouts[lay].single;
	if (indexed) {
		rc = check_inside(m, iname, err);
		if (rc < 0)
			goto out;
		rc = slurp(path, MAX_INDEX_SIZE, &buf, &len, err);
		if (rc < 0)
			goto out;
		rc = mk_st_index_parse(buf, len, path, &idx, err);
		if (rc < 0)
			goto out;
		m->shards = calloc(idx->nshards ? idx->nshards : 1, sizeof(*m->shards));
		m->shard_names = calloc(idx->nshards ? idx->nshards : 1,
					sizeof(*m->shard_names));
		if (!m->shards || !m->shard_names)
			goto nomem;
		for (size_t i = 0; i < idx->nshards; i++) {
			m->shard_names[i] = strdup(idx->shards[i]);
			if (!m->shard_names[i])
				goto nomem;
			m->nshards++;
			free(path);
			path = join(m->dir, idx->shards[i]);
			if (!path)
				goto nomem;
			rc = check_inside(m, idx->shards[i], err);
			if (rc == 0)
				rc = layouts[lay].open(path, &m->shards[i], err);
			if (rc < 0) {
				mk_err_prefix(err, "model '%s': shard listed in %s: ",
					      m->ref, iname);
				goto out;
			}
		}
		rc = build_tensors(mm, err);
		if (rc < 0)
			goto out;
		rc = check_index(m, idx, iname, err);
		if (rc < 0)
			goto out;
	} else {
		m->shards = calloc(1, sizeof(*m->shards));
		m->shard_names = calloc(1, sizeof(*m->shard_names));
		if (!m->shards || !m->shard_names)
			goto nomem;
		m->shard_names[0] = strdup(sname);
		if (!m->shard_names[0])
			goto nomem;
		m->nshards = 1;
		rc = check_inside(m, sname, err);
		if (rc == 0)
			rc = layouts[lay].open(path, &m->shards[0], err);
		if (rc < 0) {
			mk_err_prefix(err, "model '%s': ", m->ref);
			goto out;
		}
		rc = build_tensors(mm, err);
		if (rc < 0)
			goto out;
	}
	*out = m;
	mm = NULL;
	rc = 0;
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "model '%s': out of memory",
			ref ? ref : "");
out:
	mk_st_index_free(idx);
	free(buf);
	free(path);
	if (mm)
		mk_model_free(&mm->pub);
	return rc;
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
		v[s] = open(m->shards[s]->path, O_RDONLY | O_CLOEXEC);
		if (v[s] < 0) {
			int rc = mk_err_sys(err, errno, "%s", m->shards[s]->path);
			while (s-- > 0)
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
		close(fds[s]);
	free(fds);
}
