/* mk-st-compare - compare a merged checkpoint with a reference computed
 * from other checkpoints, tensor by tensor, in float64.
 *
 *   mk-st-compare [--tol T] [--only SUBSTR] [--rename FROM=TO]
 *                 [--lin W1,W2,...[/D]] [--bf16-ulps N --inputs D1,D2,..] [--by-token]
 *                 [--slice K/N] GOT REF1 [REF2 ...]
 *
 * For every float tensor of GOT whose name contains SUBSTR (all when not
 * given): the reference is REF1's tensor of the same name (after
 * replacing FROM by TO in the name), or with --lin the combination
 * (W1*REF1 + W2*REF2 + ...)/D.  Passes when max|got - ref| <=
 * T * max(1, max|ref|) for every tensor (T = 0: values equal).  With
 * --bf16-ulps N the bound is per element instead: N bf16 ulps of the
 * largest |input| at that element over the checkpoints D1, D2, ...
 * (mergekit computes bf16 merges in bf16, mk in float32), and a histogram
 * of |diff| in those ulps is printed.  --by-token: GOT's and REF1's
 * vocabularies (tokenizer.json) may give tokens other ids (mergekit's
 * union order is a hash set's): the rows of the embeddings (embed_tokens,
 * lm_head, wte with GOT's config.json vocab_size rows) are compared token
 * by token, padding rows
 * past them by position.  --slice K/N: GOT's tensor is cut into N equal
 * runs of elements and run K (from 0) is compared (one expert's part of a
 * stacked MoE tensor).  One line per tensor; exit 0 pass,
 * 1 fail, 2 usage or I/O error. */
#include <fcntl.h>
#include <stdbool.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "io/model.h"
#include "core/jsondoc.h"
#include "tokenizer/vocab.h"

static double *load(const struct mk_model *m, const struct mk_model_tensor *t)
{
	uint64_t n = t->t->end - t->t->begin;
	uint8_t *b = malloc(n ? n : 1);
	double *d = malloc((t->t->nelem ? t->t->nelem : 1) * sizeof(double));
	int fd = open(m->shards[t->shard]->path, O_RDONLY);

	if (!b || !d || fd < 0 ||
	    pread(fd, b, n, (off_t)(m->shards[t->shard]->data_start + t->t->begin)) != (ssize_t)n) {
		fprintf(stderr, "mk-st-compare: cannot read %s\n", t->t->name);
		exit(2);
	}
	close(fd);
	if (t->t->stride) { /* a view in a PyTorch checkpoint: its elements in order */
		uint64_t bytes = t->t->nelem * (mk_dtype_bits(t->t->desc.dtype) / 8);
		uint8_t *g = malloc(bytes ? bytes : 1);
		struct mk_err err;
		if (!g || mk_st_tensor_gather(t->t, 0, t->t->nelem, b, t->t->begin, n, g, &err)) {
			fprintf(stderr, "mk-st-compare: cannot read %s\n", t->t->name);
			exit(2);
		}
		free(b);
		b = g;
	}
	if (mk_dtype_convert(MK_DT_F64, d, t->t->desc.dtype, b, t->t->nelem)) {
		free(b);
		free(d);
		return NULL;
	}
	free(b);
	return d;
}

/* DIR/tokenizer.json's vocabulary */
static char *read_all(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	FILE *f;
	long n;
	char *buf = NULL;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (!(f = fopen(path, "rb")) || fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) ||
	    !(buf = malloc((size_t)n + 1)) || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		fprintf(stderr, "mk-st-compare: cannot read %s\n", path);
		if (f)
			fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* DIR/config.json's vocab_size (the embeddings' rows), 0 when none */
static uint64_t config_rows(const char *dir)
{
	size_t n;
	char *buf = read_all(dir, "config.json", &n), *v = NULL;
	struct mk_jsondoc *d = NULL;
	struct mk_err err;
	uint64_t rows = 0;

	if (buf && !mk_jsondoc_parse(buf, n, "config.json", &d, &err) && (v = mk_jsondoc_text(d, "vocab_size")))
		rows = strtoull(v, NULL, 10);
	free(v);
	mk_jsondoc_free(d);
	free(buf);
	return rows;
}

static int read_vocab(const char *dir, struct mk_vocab **out)
{
	struct mk_err err;
	size_t n;
	char path[4096];
	char *buf;
	int rc;

	snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
	if (access(path, F_OK) == 0) {
		if (!(buf = read_all(dir, "tokenizer.json", &n)))
			return -1;
		rc = mk_vocab_parse(buf, n, path, out, &err);
	} else {
		/* a slow tokenizer's files and the added tokens of its config */
		static const char *const slow[] = { "tokenizer.model", "vocab.json", "vocab.txt" };
		size_t k = 0;
		for (; k < 3; k++) {
			snprintf(path, sizeof(path), "%s/%s", dir, slow[k]);
			if (access(path, F_OK) == 0)
				break;
		}
		if (k == 3 || !(buf = read_all(dir, slow[k], &n)))
			return -1;
		rc = k == 0 ? mk_vocab_parse_spm(buf, n, path, out, &err) :
			      mk_vocab_parse_plain(buf, n, path, k == 2, out, &err);
		free(buf);
		buf = read_all(dir, "tokenizer_config.json", &n);
		if (!rc && buf)
			rc = mk_vocab_add_decoder(*out, buf, n, "tokenizer_config.json", &err);
	}
	if (rc)
		fprintf(stderr, "mk-st-compare: %s\n", err.msg);
	free(buf);
	return rc;
}

/* --by-token: g's rows (rows x cols, GOT's ids) put in the reference's
 * token order, rows past the reference's tokens (padding) as they are */
static int permute_rows(double *g, uint64_t rows, uint64_t cols, const struct mk_vocab *gv, const struct mk_vocab *rv)
{
	double *t = malloc((rows * cols + 1) * sizeof(*t));

	if (!t)
		return -1;
	memcpy(t, g, rows * cols * sizeof(*t));
	for (size_t r = 0; r < rv->n; r++) {
		long long at = rv->token[r] ? mk_vocab_find(gv, rv->token[r]) : (long long)r;
		if (at < 0 || (uint64_t)at >= rows) {
			free(t);
			return -1;
		}
		memcpy(g + r * cols, t + (uint64_t)at * cols, cols * sizeof(*g));
	}
	free(t);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "tol", 1, 0, 't' }, { "only", 1, 0, 'o' }, { "rename", 1, 0, 'r' },
					    { "lin", 1, 0, 'l' }, { "bf16-ulps", 1, 0, 'u' },
					    { "inputs", 1, 0, 'i' }, { "by-token", 0, 0, 'k' }, { "slice", 1, 0, 's' },
					    { 0 } };
	unsigned long slice_k = 0, slice_n = 0;
	struct mk_vocab *gv = NULL, *rv0 = NULL;
	bool by_token = false;
	double ulps = 0;
	struct mk_model *inp[16];
	size_t ninp = 0;
	uint64_t hist[4] = { 0 };
	double qmax = 0;
	double tol = 1e-6, w[16], div = 1;
	size_t nw = 0;
	const char *only = NULL;
	char *from = NULL, *to = NULL;
	struct mk_model *got, *ref[16];
	struct mk_err err = { 0 };
	int c, fails = 0, checked = 0;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 't': tol = atof(optarg); break;
		case 'o': only = optarg; break;
		case 'r':
			from = strdup(optarg);
			to = strchr(from, '=');
			if (!to)
				return 2;
			*to++ = '\0';
			break;
		case 'l': {
			char *s = strdup(optarg), *slash = strchr(s, '/'), *tok;
			if (slash) {
				*slash = '\0';
				div = atof(slash + 1);
			}
			for (tok = strtok(s, ","); tok && nw < 16; tok = strtok(NULL, ","))
				w[nw++] = atof(tok);
			free(s);
			break;
		}
		case 'u': ulps = atof(optarg); break;
		case 'k': by_token = true; break;
		case 's':
			if (sscanf(optarg, "%lu/%lu", &slice_k, &slice_n) != 2 || !slice_n || slice_k >= slice_n)
				return 2;
			break;
		case 'i': {
			char *s2 = strdup(optarg), *tok;
			for (tok = strtok(s2, ","); tok && ninp < 16; tok = strtok(NULL, ","))
				if (mk_model_open(tok, &inp[ninp++], &err))
					goto ioerr;
			free(s2);
			break;
		}
		default: return 2;
		}
	}
	if (ulps > 0 && !ninp) {
		fprintf(stderr, "mk-st-compare: --bf16-ulps needs --inputs\n");
		return 2;
	}
	int nref = argc - optind - 1;
	if (nref < 1 || nref > 16 || (nw && nw != (size_t)nref)) {
		fprintf(stderr, "usage: mk-st-compare [--tol T] [--only S] [--rename F=T] [--lin W1,..[/D]] GOT REF...\n");
		return 2;
	}
	if (mk_model_open(argv[optind], &got, &err))
		goto ioerr;
	for (int i = 0; i < nref; i++)
		if (mk_model_open(argv[optind + 1 + i], &ref[i], &err))
			goto ioerr;
	uint64_t vrows = 0;
	if (by_token && (read_vocab(argv[optind], &gv) || read_vocab(argv[optind + 1], &rv0) ||
			 !(vrows = config_rows(argv[optind]))))
		return 2;
	for (size_t k = 0; k < got->ntensors; k++) {
		const struct mk_model_tensor *gt = &got->tensors[k];
		char name[1024];
		if (only && !strstr(gt->t->name, only))
			continue;
		if (!mk_dtype_is_float(gt->t->desc.dtype))
			continue;
		snprintf(name, sizeof(name), "%s", gt->t->name);
		if (from) {
			char *at = strstr(name, from);
			if (at) {
				char rest[1024];
				snprintf(rest, sizeof(rest), "%s", at + strlen(from));
				snprintf(at, sizeof(name) - (size_t)(at - name), "%s%s", to, rest);
			}
		}
		double *g = load(got, gt), *r = NULL;
		uint64_t n = gt->t->nelem;
		if (slice_n) {
			if (!g || n % slice_n) {
				printf("%s: %llu elements, not %lu equal runs\n", gt->t->name, (unsigned long long)n, slice_n);
				fails++;
				goto next;
			}
			n /= slice_n;
			memmove(g, g + slice_k * n, n * sizeof(*g));
		}
		r = calloc(n + 1, sizeof(double));
		if (by_token && gt->t->desc.ndim == 2 && gt->t->desc.shape[0] == vrows &&
		    (strstr(gt->t->name, "embed_tokens") || strstr(gt->t->name, "lm_head") || strstr(gt->t->name, "wte")) &&
		    permute_rows(g, gt->t->desc.shape[0], gt->t->desc.shape[1], gv, rv0)) {
			printf("%s: the reference's tokens are not all in GOT's vocabulary\n", name);
			fails++;
			goto next;
		}
		for (int i = 0; i < (nw ? nref : 1); i++) {
			const struct mk_model_tensor *rt = mk_model_find(ref[i], name);
			if (!rt || rt->t->nelem != n) {
				printf("%s: not in reference %d (or another size)\n", name, i + 1);
				fails++;
				goto next;
			}
			double *x = load(ref[i], rt);
			for (uint64_t e = 0; e < n; e++)
				r[e] += (nw ? w[i] : 1.0) * x[e];
			free(x);
		}
		double maxd = 0, maxr = 0, *mx = NULL;
		bool ulp_fail = false;
		if (ulps > 0) {
			mx = calloc(n + 1, sizeof(double));
			for (size_t i = 0; i < ninp; i++) {
				const struct mk_model_tensor *it = mk_model_find(inp[i], name);
				if (!it || it->t->nelem != n)
					continue;
				double *x = load(inp[i], it);
				for (uint64_t e = 0; e < n; e++)
					if (fabs(x[e]) > mx[e])
						mx[e] = fabs(x[e]);
				free(x);
			}
		}
		for (uint64_t e = 0; e < n; e++) {
			double rv = r[e] / (nw ? div : 1.0);
			double dd = fabs(g[e] - rv);
			if (isnan(g[e]) != isnan(rv))
				dd = INFINITY;
			if (dd > maxd)
				maxd = dd;
			if (fabs(rv) > maxr)
				maxr = fabs(rv);
			if (mx) {
				int ex;
				frexp(mx[e] > 0 ? mx[e] : ldexp(1, -126), &ex);
				double ulp = ldexp(1.0, ex - 8); /* bf16: 8 significant bits */
				double q = dd / ulp;
				hist[q == 0 ? 0 : q <= 1 ? 1 : q <= 2 ? 2 : 3]++;
				if (q > qmax)
					qmax = q;
				if (q > ulps)
					ulp_fail = true;
			}
		}
		free(mx);
		double bound = tol * (maxr > 1 ? maxr : 1);
		bool ok = ulps > 0 ? !ulp_fail : tol == 0 ? maxd == 0 : maxd <= bound;
		printf("%-60s max|diff| %.3g  bound %.3g  %s\n", gt->t->name, maxd, bound, ok ? "ok" : "FAIL");
		fails += !ok;
		checked++;
next:
		free(g);
		free(r);
	}
	if (ulps > 0)
		printf("bf16 ulp histogram (elements): 0: %llu, (0,1]: %llu, (1,2]: %llu, >2: %llu; largest %.2f ulps\n",
		       (unsigned long long)hist[0], (unsigned long long)hist[1], (unsigned long long)hist[2],
		       (unsigned long long)hist[3], qmax);
	mk_vocab_free(gv);
	mk_vocab_free(rv0);
	mk_model_free(got);
	for (int i = 0; i < nref; i++)
		mk_model_free(ref[i]);
	for (size_t i = 0; i < ninp; i++)
		mk_model_free(inp[i]);
	free(from);
	if (!checked) {
		printf("no tensor compared\n");
		return 1;
	}
	return fails ? 1 : 0;
ioerr:
	fprintf(stderr, "mk-st-compare: %s\n", err.msg);
	return 2;
}
