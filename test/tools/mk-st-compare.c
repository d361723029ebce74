/* mk-st-compare - compare a merged checkpoint with a reference computed
 * from other checkpoints, tensor by tensor, in float64.
 *
 *   mk-st-compare [--tol T] [--only SUBSTR] [--rename FROM=TO]
 *                 [--lin W1,W2,...[/D]] GOT REF1 [REF2 ...]
 *
 * For every float tensor of GOT whose name contains SUBSTR (all when not
 * given): the reference is REF1's tensor of the same name (after
 * replacing FROM by TO in the name), or with --lin the combination
 * (W1*REF1 + W2*REF2 + ...)/D.  Passes when max|got - ref| <=
 * T * max(1, max|ref|) for every tensor (T = 0: values equal).  Prints one
 * line per tensor; exit 0 pass, 1 fail, 2 usage or I/O error. */
#include <fcntl.h>
#include <stdbool.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "mk/model.h"

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
	if (mk_dtype_convert(MK_DT_F64, d, t->t->dtype, b, t->t->nelem)) {
		free(b);
		free(d);
		return NULL;
	}
	free(b);
	return d;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "tol", 1, 0, 't' }, { "only", 1, 0, 'o' }, { "rename", 1, 0, 'r' },
					    { "lin", 1, 0, 'l' }, { 0 } };
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
		default: return 2;
		}
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
	for (size_t k = 0; k < got->ntensors; k++) {
		const struct mk_model_tensor *gt = &got->tensors[k];
		char name[1024];
		if (only && !strstr(gt->t->name, only))
			continue;
		if (!mk_dtype_is_float(gt->t->dtype))
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
		double *g = load(got, gt), *r = calloc(gt->t->nelem + 1, sizeof(double));
		for (int i = 0; i < (nw ? nref : 1); i++) {
			const struct mk_model_tensor *rt = mk_model_find(ref[i], name);
			if (!rt || rt->t->nelem != gt->t->nelem) {
				printf("%s: not in reference %d (or another size)\n", name, i + 1);
				fails++;
				goto next;
			}
			double *x = load(ref[i], rt);
			for (uint64_t e = 0; e < gt->t->nelem; e++)
				r[e] += (nw ? w[i] : 1.0) * x[e];
			free(x);
		}
		double maxd = 0, maxr = 0;
		for (uint64_t e = 0; e < gt->t->nelem; e++) {
			double rv = r[e] / (nw ? div : 1.0);
			double dd = fabs(g[e] - rv);
			if (isnan(g[e]) != isnan(rv))
				dd = INFINITY;
			if (dd > maxd)
				maxd = dd;
			if (fabs(rv) > maxr)
				maxr = fabs(rv);
		}
		double bound = tol * (maxr > 1 ? maxr : 1);
		bool ok = tol == 0 ? maxd == 0 : maxd <= bound;
		printf("%-60s max|diff| %.3g  bound %.3g  %s\n", gt->t->name, maxd, bound, ok ? "ok" : "FAIL");
		fails += !ok;
		checked++;
next:
		free(g);
		free(r);
	}
	mk_model_free(got);
	for (int i = 0; i < nref; i++)
		mk_model_free(ref[i]);
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
