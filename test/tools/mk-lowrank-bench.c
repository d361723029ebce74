/* mk-lowrank-bench - randomized against exact truncated SVD
 * (src/methods/lowrank.h) on planted matrices: the error ratio at the
 * same rank and the time of each, to choose the randomized defaults.
 *
 *   mk-lowrank-bench [-m M] [-n N] [-t decay|noise] [-a ALPHA]
 *                    [-r R,R..] [-o P,P..] [-q Q,Q..] [-x] [-g]
 *
 * decay: F = U diag(i^-ALPHA) V^T with U, V random orthonormal, full
 * rank (a fine-tune delta's slowly decaying spectrum; ALPHA default 0.5);
 * noise: a rank-64 signal (singular values 1 down to 0.1) plus Gaussian
 * noise whose largest singular value is about a tenth of the signal's.
 * The exact SVD runs once (-x: skip it), at the largest R; its error at
 * each R is the tail of its spectrum.  Each randomized run is one call
 * with max_rank R, oversample P, power_iters Q; -g: on the GPU (opts.cuda).  Prints one line per
 * run: size, kind, R, P, Q, errors, ratio, seconds, speedup.  Wall
 * times; BLAS on its default threads.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>
#include <unistd.h>
#include "methods/lowrank_impl.h"
#include "bench_util.h"

static double gauss(void)
{
	double u1 = ((next() >> 11) + 1) * 0x1p-53, u2 = (next() >> 11) * 0x1p-53;
	return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

/* A random orthonormal rows x k matrix, column-major. */
static float *orthonormal(uint64_t rows, unsigned k)
{
	float *a = malloc(4 * rows * k), *tau = malloc(4 * k), w;
	int r = (int)rows, c = (int)k, info, lw = -1;
	for (uint64_t i = 0; i < rows * k; i++)
		a[i] = (float)gauss();
	sgeqrf_(&r, &c, a, &r, tau, &w, &lw, &info);
	lw = (int)w + k;
	float *work = malloc(4 * (uint64_t)lw);
	sgeqrf_(&r, &c, a, &r, tau, work, &lw, &info);
	sorgqr_(&r, &c, &c, a, &r, tau, work, &lw, &info);
	free(work);
	free(tau);
	return a;
}

/* F (m x n row-major) = U diag(s) V^T */
static float *planted(uint64_t m, uint64_t n, unsigned k, const double *s)
{
	float *u = orthonormal(m, k), *v = orthonormal(n, k), *f = malloc(4 * m * n);
	for (unsigned j = 0; j < k; j++)
		for (uint64_t i = 0; i < m; i++)
			u[j * m + i] *= (float)s[j];
	/* row-major m x n = column-major n x m = V U^T */
	cblas_sgemm(CblasColMajor, CblasNoTrans, CblasTrans, (blasint)n, (blasint)m, (blasint)k, 1.0f, v,
		    (blasint)n, u, (blasint)m, 0.0f, f, (blasint)n);
	free(u);
	free(v);
	return f;
}

static int parse_list(const char *s, unsigned *v, int max)
{
	int n = 0;
	for (char *e; *s && n < max; s = *e ? e + 1 : e)
		v[n++] = (unsigned)strtoul(s, &e, 10);
	return n;
}

int main(int argc, char **argv)
{
	uint64_t m = 1024, n = 1024;
	const char *kind = "decay";
	double alpha = 0.5;
	unsigned ranks[8] = { 16, 64, 128 }, os[8] = { 8, 16, 32 }, qs[8] = { 0, 1, 2, 3 };
	int nr = 3, no = 3, nq = 4, skip_exact = 0, gpu = 0, c;

	while ((c = getopt(argc, argv, "m:n:t:a:r:o:q:xg")) != -1)
		switch (c) {
		case 'm': m = strtoull(optarg, NULL, 10); break;
		case 'n': n = strtoull(optarg, NULL, 10); break;
		case 't': kind = optarg; break;
		case 'a': alpha = atof(optarg); break;
		case 'r': nr = parse_list(optarg, ranks, 8); break;
		case 'o': no = parse_list(optarg, os, 8); break;
		case 'q': nq = parse_list(optarg, qs, 8); break;
		case 'x': skip_exact = 1; break;
		case 'g': gpu = 1; break;
		default:
			fprintf(stderr, "usage: mk-lowrank-bench [-m M] [-n N] [-t decay|noise] [-a ALPHA] [-r R,..] [-o P,..] [-q Q,..] [-x] [-g]\n");
			return 2;
		}
	uint64_t mn = m < n ? m : n;
	double t0 = now();
	float *f;
	if (!strcmp(kind, "noise")) {
		double s[64];
		for (int i = 0; i < 64; i++)
			s[i] = pow(10, -i / 63.0);
		f = planted(m, n, 64, s);
		double eps = 0.1 / (sqrt((double)m) + sqrt((double)n));
		for (uint64_t i = 0; i < m * n; i++)
			f[i] += (float)(eps * gauss());
	} else {
		double *s = malloc(8 * mn);
		for (uint64_t i = 0; i < mn; i++)
			s[i] = pow((double)(i + 1), -alpha);
		f = planted(m, n, (unsigned)mn, s);
		free(s);
	}
	fprintf(stderr, "generated %llux%llu %s in %.1fs\n", (unsigned long long)m, (unsigned long long)n, kind, now() - t0);

	unsigned rmax = 0;
	for (int i = 0; i < nr; i++)
		rmax = ranks[i] > rmax ? ranks[i] : rmax;
	struct mk_lowrank_opts o;
	struct mk_lowrank ex, rr;
	struct mk_err err;
	double t_exact = NAN, exact_err[8];
	for (int i = 0; i < nr; i++)
		exact_err[i] = NAN;
	if (!skip_exact) {
		mk_lowrank_opts_default(&o, rmax);
		t0 = now();
		if (mk_lowrank_factor(f, m, n, false, &o, &ex, &err)) {
			fprintf(stderr, "exact: %s\n", err.msg);
			return 1;
		}
		t_exact = now() - t0;
		double tot = 0;
		for (unsigned i = 0; i < ex.ns; i++)
			tot += (double)ex.s[i] * ex.s[i];
		for (int j = 0; j < nr; j++) {
			double tail = 0;
			for (unsigned i = ranks[j]; i < ex.ns; i++)
				tail += (double)ex.s[i] * ex.s[i];
			exact_err[j] = sqrt(tail / tot);
		}
		printf("# exact %llux%llu rank %u: %.2fs, measured error %.6f (from the spectrum %.6f), peak %.0f MiB\n",
		       (unsigned long long)m, (unsigned long long)n, rmax, t_exact, ex.rel_error, exact_err[nr - 1],
		       ex.peak_bytes / 1048576.0);
		mk_lowrank_free(&ex);
	}
	printf("# size kind rank oversample power err_rand err_exact ratio t_rand t_exact speedup peak_MiB\n");
	for (int a = 0; a < nr; a++)
		for (int b = 0; b < no; b++)
			for (int q = 0; q < nq; q++) {
				mk_lowrank_opts_default(&o, ranks[a]);
				o.randomized = true;
				o.oversample = os[b];
				o.power_iters = qs[q];
				o.seed = 42;
				o.cuda = gpu;
				t0 = now();
				if (mk_lowrank_factor(f, m, n, false, &o, &rr, &err)) {
					fprintf(stderr, "randomized: %s\n", err.msg);
					return 1;
				}
				double t = now() - t0;
				char label[32];
				if (strcmp(kind, "noise"))
					snprintf(label, sizeof label, "%s/a=%.2g", kind, alpha);
				else
					snprintf(label, sizeof label, "%s", kind);
				printf("%llux%llu %s %u %u %u %.6f %.6f %.4f %.3f %.2f %.1f %.0f\n",
				       (unsigned long long)m, (unsigned long long)n, label, ranks[a], os[b], qs[q], rr.rel_error, exact_err[a],
				       rr.rel_error / exact_err[a], t, t_exact, t_exact / t, rr.peak_bytes / 1048576.0);
				fflush(stdout);
				mk_lowrank_free(&rr);
			}
	free(f);
	return 0;
}
