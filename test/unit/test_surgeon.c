/* test_surgeon.c - src/surgeon: mk-tokensurgeon's matching and
 * approximations against mergekit 0.1.5's own functions
 * (testdata/tokensurgeon, scripts/tokensurgeon-golden.py).
 *
 * Metric: per approximated row, ||mk - mergekit|| / ||mergekit|| (zero
 * rows: ||mk|| itself); the largest over the case, under the method's
 * tolerance (tol[] below, each a few times what was measured).  Copied
 * rows: bit for bit.  omp and interp: the picks themselves too. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "top.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "surgeon/approx.h"
#include "surgeon/match.h"
#include "io/safetensors.h"
#include "mk/tokenize.h"
#include "tokenizer/vocab.h"

#define GOLD "testdata/tokensurgeon"

static void *load(const char *name, size_t *bytes)
{
	char path[PATH_MAX];
	snprintf(path, sizeof path, "%s/" GOLD "/%s", test_top(GOLD "/cases.txt"), name);
	FILE *f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	void *p = malloc(n ? (size_t)n : 1);
	assert_non_null(p);
	assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	if (bytes)
		*bytes = (size_t)n;
	return p;
}

static void *loadf(size_t want, const char *fmt, ...)
{
	char name[256];
	va_list ap;
	size_t got;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	void *p = load(name, &got);
	if (want && got != want)
		fail_msg("%s: %zu bytes, expected %zu", name, got, want);
	return p;
}

struct set {
	char name[16];
	size_t mrows, mw, drows, dw, nt;
	float *model, *donor;
	int32_t *map, *targets;
	/* derived: shared rows in donor id order, targets' donor rows */
	size_t n;
	float *sd, *sm, *tg;
};

static struct set sets[8];
static size_t nsets;

static struct set *get_set(const char *name)
{
	for (size_t i = 0; i < nsets; i++)
		if (strcmp(sets[i].name, name) == 0)
			return &sets[i];
	fail_msg("no set %s", name);
	return NULL;
}

static void read_sets(void)
{
	size_t len;
	char *txt = load("sets.txt", &len), *save = NULL;
	txt = realloc(txt, len + 1);
	txt[len] = 0;
	for (char *l = strtok_r(txt, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		struct set *s = &sets[nsets++];
		memset(s, 0, sizeof *s);
		assert_int_equal(sscanf(l, "%15s %zu %zu %zu %zu %zu", s->name, &s->mrows, &s->mw, &s->drows, &s->dw,
					&s->nt), 6);
		if (s->drows == 0) {
			/* a model alone (subword's), or omp's raw points (r) */
			if (strcmp(s->name, "r") != 0)
				s->model = loadf(4 * s->mrows * s->mw, "%s-model.f32", s->name);
			continue;
		}
		s->model = loadf(4 * s->mrows * s->mw, "%s-model.f32", s->name);
		s->donor = loadf(4 * s->drows * s->dw, "%s-donor.f32", s->name);
		s->map = loadf(4 * s->drows, "%s-map.i32", s->name);
		s->targets = loadf(4 * s->nt, "%s-targets.i32", s->name);
		s->sd = malloc(4 * s->drows * s->dw), s->sm = malloc(4 * s->drows * s->mw);
		s->tg = malloc(4 * s->nt * s->dw);
		for (size_t i = 0; i < s->drows; i++)
			if (s->map[i] >= 0) {
				memcpy(s->sd + s->n * s->dw, s->donor + i * s->dw, 4 * s->dw);
				memcpy(s->sm + s->n * s->mw, s->model + (size_t)s->map[i] * s->mw, 4 * s->mw);
				s->n++;
			}
		for (size_t i = 0; i < s->nt; i++)
			memcpy(s->tg + i * s->dw, s->donor + (size_t)s->targets[i] * s->dw, 4 * s->dw);
	}
	free(txt);
}

static double rowerr(const float *got, const float *want, size_t b, size_t d)
{
	double worst = 0;
	for (size_t i = 0; i < b; i++) {
		double e = 0, w = 0;
		for (size_t l = 0; l < d; l++) {
			double x = (double)got[i * d + l] - want[i * d + l];
			e += x * x, w += (double)want[i * d + l] * want[i * d + l];
		}
		double r = w > 0 ? sqrt(e / w) : sqrt(e);
		if (r > worst || isnan(r))
			worst = isnan(r) ? INFINITY : r;
	}
	return worst;
}

static const struct {
	const char *method;
	double tol;
} tol[] = {
	/* measured (largest over the cases): omp 1.1e-4 (k 48; 8.6e-7 up to
	 * k 16), omp past 256 picks 1.7e-6, interp 9.8e-5 (barycentric with
	 * k 96 > 64 dimensions, rank-deficient; 3.8e-6 otherwise), mean
	 * 1.1e-7, landmark_pca 8.3e-5 (mergekit's float32 answer is itself
	 * 5e-5 to 9e-4 from float64's), stb 7.5e-7, john_hewitt 5.2e-5 (an
	 * ill-conditioned covariance; 4.4e-7 on a well-conditioned one), mp_rope
	 * 5.5e-7 */
	{ "omp", 5e-4 }, { "ompraw", 2e-5 }, { "interp", 5e-4 }, { "mean", 1e-6 }, { "zero", 0 },
	{ "pca", 5e-4 },  { "stb", 1e-5 },    { "jh", 3e-4 },     { "subword", 0 },
	{ "rope", 1e-5 },
};

static enum mk_surgeon_weights scheme_of(const char *opt, bool *cosine)
{
	*cosine = strncmp(opt, "cosine-", 7) == 0;
	const char *w = strchr(opt, '-') + 1;
	return strcmp(w, "barycentric") == 0 ? MK_SURGEON_BARYCENTRIC :
	       strcmp(w, "least_squares") == 0 ? MK_SURGEON_LSQ : MK_SURGEON_DISTPROP;
}

static void run_case(const char *name, const char *method, struct set *s, size_t k, const char *opt)
{
	struct mk_err err = { 0 };
	size_t b = s->nt, dm = s->mw;
	float *want = loadf(4 * b * dm, "%s.out.f32", name);
	float *got = calloc(b * dm + 1, 4);
	int64_t *idx = NULL;
	float *coef = NULL;
	int rc = 0;
	long long picks_differ = -1;
	double worst_fit = 0;  /* mk's residual / mergekit's, rows picked otherwise */
	size_t other_rows = 0;

	if (strcmp(method, "omp") == 0 || strcmp(method, "ompraw") == 0 || strcmp(method, "interp") == 0) {
		bool raw = strcmp(method, "ompraw") == 0;
		const float *tg = s->tg, *pts = s->sd, *rows2 = s->sm;
		size_t n = s->n, d = s->dw;
		float *rp = NULL, *rt = NULL;
		if (raw) {
			rp = loadf(4 * s->mrows * s->mw, "r-points.f32");
			rt = loadf(4 * b * s->mw, "r-targets.f32");
			tg = rt, pts = rows2 = rp, n = s->mrows, d = s->mw;
		}
		idx = calloc(b * k, 8), coef = calloc(b * k, 4);
		if (method[0] == 'o')
			rc = mk_surgeon_omp(tg, b, pts, n, d, k, idx, coef, &err);
		else {
			bool cosine;
			enum mk_surgeon_weights w = scheme_of(opt, &cosine);
			rc = mk_surgeon_interp(tg, b, pts, n, d, k, cosine, w, idx, coef, &err);
		}
		if (rc == 0)
			mk_surgeon_combine(idx, coef, b, k, rows2, dm, got);
		if (rc == 0 && method[0] == 'o') {
			int32_t *gi = loadf(4 * b * k, "%s.idx.i32", name);
			float *gres = raw ? NULL : loadf(8 * b, "%s.res.f32", name);
			picks_differ = 0;
			for (size_t i = 0; i < b; i++) {
				size_t differ = 0;
				for (size_t j = 0; j < k; j++)
					differ += gi[i * k + j] != idx[i * k + j];
				picks_differ += (long long)differ;
				if (!differ || !gres)
					continue;
				/* other picks: compare the fit in the donor's space
				 * instead, and leave the row out of the row error */
				float *fit = calloc(d, 4);
				mk_surgeon_combine(idx + i * k, coef + i * k, 1, k, pts, d, fit);
				double r = 0;
				for (size_t l = 0; l < d; l++)
					r += ((double)tg[i * d + l] - fit[l]) * ((double)tg[i * d + l] - fit[l]);
				/* against the worse of mergekit's batch and lone runs */
				double g = gres[2 * i] > gres[2 * i + 1] ? gres[2 * i] : gres[2 * i + 1];
				double ratio = sqrt(r) / g;
				if (ratio > worst_fit)
					worst_fit = ratio;
				memcpy(got + i * dm, want + i * dm, 4 * dm);
				other_rows++;
				free(fit);
			}
			free(gi), free(gres);
		}
		free(rp), free(rt);
	} else if (strcmp(method, "mean") == 0) {
		mk_surgeon_mean(s->model, s->mrows, dm, b, got);
	} else if (strcmp(method, "zero") == 0) {
		mk_surgeon_zero(b, dm, got);
	} else if (strcmp(method, "pca") == 0) {
		rc = mk_surgeon_landmark_pca(s->tg, b, s->sd, s->n, s->dw, s->sm, dm, got, &err);
	} else if (strcmp(method, "stb") == 0) {
		size_t e = s->dw < dm ? s->dw : dm;
		float *db = malloc(4 * e * s->dw), *mb = malloc(4 * e * dm);
		float *dmean = malloc(4 * s->dw), *mmean = malloc(4 * dm);
		mk_surgeon_mean(s->donor, s->drows, s->dw, 1, dmean);
		mk_surgeon_mean(s->model, s->mrows, dm, 1, mmean);
		rc = mk_surgeon_stb_basis(s->sd, s->sm, s->n, s->dw, dm, k, db, mb, &err);
		if (rc == 0)
			rc = mk_surgeon_stb(s->tg, b, dmean, db, s->dw, mb, mmean, dm, got, &err);
		free(db), free(mb), free(dmean), free(mmean);
	} else if (strcmp(method, "rope") == 0) {
		size_t ha, hb;
		float ba, bb;
		assert_int_equal(sscanf(opt, "%zu-%zu-%f-%f", &ha, &hb, &ba, &bb), 4);
		rc = mk_surgeon_mp_rope(s->tg, b, s->sd, s->n, s->dw, s->sm, dm, k, ha, hb, ba, bb, got, &err);
	} else if (strcmp(method, "jh") == 0) {
		float *z = loadf(4 * b * dm, "%s.z.f32", name);
		rc = mk_surgeon_john_hewitt(s->model, s->mrows, dm, z, b, got, &err);
		free(z);
	} else if (strcmp(method, "subword") == 0) {
		size_t bytes;
		int32_t *all = loadf(0, "sw.ids.i32"), *p = all;
		(void)bytes;
		const int32_t **ids = calloc(b, sizeof *ids);
		size_t *nids = calloc(b, sizeof *nids);
		for (size_t i = 0; i < b; i++)
			nids[i] = (size_t)*p++, ids[i] = p, p += nids[i];
		char how[32];
		int head;
		assert_int_equal(sscanf(opt, "%31[a-z_]-%d", how, &head), 2);
		enum mk_surgeon_subword h = strcmp(how, "mean") == 0 ? MK_SURGEON_SUB_MEAN :
					    strcmp(how, "sum") == 0 ? MK_SURGEON_SUB_SUM :
					    strcmp(how, "weighted_mean") == 0 ? MK_SURGEON_SUB_WEIGHTED :
										 MK_SURGEON_SUB_FIRST_LAST;
		rc = mk_surgeon_subword(s->model, s->mrows, dm, ids, nids, b, h, head, false, got, &err);
		free(ids), free(nids), free(all);
	} else {
		fail_msg("unknown method %s", method);
	}
	if (rc != 0)
		fail_msg("%s: %s", name, err.msg);
	double e = rowerr(got, want, b, dm), t = -1;
	for (size_t i = 0; i < sizeof tol / sizeof tol[0]; i++)
		if (strcmp(tol[i].method, method) == 0)
			t = tol[i].tol;
	print_message("%-42s max row rel. error %.3g (tolerance %.0e)", name, e, t);
	if (picks_differ >= 0)
		print_message(", picks differing %lld of %zu", picks_differ, b * k);
	if (other_rows)
		print_message(" in %zu rows (their residual at most %.4f x mergekit's worse run)", other_rows, worst_fit);
	print_message("\n");
	if (!(e <= t))
		fail_msg("%s: error %.3g over %.0e", name, e, t);
	/* picks are exact up to k = 16; at 48 of 64 dimensions mergekit's own
	 * picks change with the batch (a target alone: 38 and 67 of 1920
	 * differed, in two runs; its residual up to 1.52 x the batch's, 0.08%
	 * to 0.6% of the target): there a row of mk's whose picks differ must
	 * fit its target within that spread (measured: 1.05 and 1.10 x the
	 * worse of mergekit's two runs) */
	if (picks_differ > 0 && (k <= 16 || !(worst_fit <= 1.25)))
		fail_msg("%s: %lld picks differ from mergekit's (fit ratio %.3f)", name, picks_differ, worst_fit);
	free(want), free(got), free(idx), free(coef);
}

static void test_methods(void **state)
{
	size_t len;
	char *txt = load("cases.txt", &len), *save = NULL;
	txt = realloc(txt, len + 1);
	txt[len] = 0;
	read_sets();
	for (char *l = strtok_r(txt, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char name[96], method[16], set[16], opt[64];
		size_t k;
		assert_int_equal(sscanf(l, "%95s %15s %15s %zu %63s", name, method, set, &k, opt), 5);
		run_case(name, method, get_set(set), k, opt);
	}
	free(txt);
}

/* ---- matching on real tokenizers ---- */

static const struct tok {
	const char *name, *dir, *cls;
	const char *special[MK_SURGEON_NSPECIAL]; /* bos eos unk sep pad cls mask */
} toks[] = {
	{ "llama2-spm", "llama2", "LlamaTokenizerFast", { "<s>", "</s>", "<unk>" } },
	{ "qwen2", "qwen2", "PreTrainedTokenizerFast", { NULL, "<|im_end|>", NULL, NULL, "<|endoftext|>" } },
	{ "gpt2", "gpt2", "PreTrainedTokenizerFast", { "<|endoftext|>", "<|endoftext|>" } },
	{ "llama3", "llama3", "PreTrainedTokenizerFast", { "<|begin_of_text|>", "<|eot_id|>" } },
	{ "mistral", "mistral", "PreTrainedTokenizerFast", { "<s>", "</s>", "<unk>" } },
	{ "misc-a", "misc-a", "PreTrainedTokenizerFast", { "<cls>", "<sep>" } },
};

static struct mk_surgeon_vocab *open_vocab(const char *name)
{
	for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
		if (strcmp(toks[i].name, name) != 0)
			continue;
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/testdata/tokenizers/encode/%s/tokenizer.json",
			 test_top(GOLD "/cases.txt"), toks[i].dir);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		fseek(f, 0, SEEK_SET);
		char *buf = malloc((size_t)n);
		assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
		fclose(f);
		struct mk_err err = { 0 };
		struct mk_vocab *v;
		if (mk_vocab_parse(buf, (size_t)n, path, &v, &err) != 0)
			fail_msg("%s", err.msg);
		free(buf);
		bool ghello = mk_vocab_find(v, "\xc4\xa0hello") >= 0;
		struct mk_surgeon_vocab *sv;
		if (mk_surgeon_vocab_build((const char *const *)v->token, v->n, toks[i].special,
					   mk_surgeon_space_of(toks[i].cls, ghello), &sv, &err) != 0)
			fail_msg("%s", err.msg);
		mk_vocab_free(v);
		return sv;
	}
	fail_msg("no tokenizer %s", name);
	return NULL;
}

static void test_match(void **state)
{
	size_t len;
	char *txt = load("match.txt", &len), *save = NULL;
	txt = realloc(txt, len + 1);
	txt[len] = 0;
	size_t ncases = 0;
	for (char *l = strtok_r(txt, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (l[0] == '#')
			continue;
		char mname[32], dname[32];
		int byte, prefix;
		assert_int_equal(sscanf(l, "%31s %31s %d %d", mname, dname, &byte, &prefix), 4);
		char *want = strtok_r(NULL, "\n", &save);
		assert_non_null(want);
		struct mk_surgeon_vocab *m = open_vocab(mname), *d = open_vocab(dname);
		struct mk_surgeon_match_opts o = { m->n, d->n, byte, prefix, NULL, NULL };
		int64_t *row = calloc(d->n, 8);
		struct mk_surgeon_stats st;
		struct mk_err err = { 0 };
		assert_int_equal(mk_surgeon_match(m, d, &o, row, &st, &err), 0);
		char *sv = NULL, *w = strtok_r(want, " ", &sv);
		size_t bad = 0, i;
		for (i = 0; w && i < d->n; i++, w = strtok_r(NULL, " ", &sv)) {
			int64_t expect = w[0] == 'A' ? MK_SURGEON_APPROX : w[0] == 'Z' ? MK_SURGEON_ZERO : atoll(w);
			if (row[i] != expect && bad++ < 5)
				print_message("%s <- %s byte %d prefix %d: donor id %zu ('%s'): mk %lld, mergekit %s\n",
					      mname, dname, byte, prefix, i, d->key[i] ? d->key[i] : "(none)",
					      (long long)row[i], w);
		}
		assert_int_equal(i, d->n);
		assert_null(w);
		print_message("%s <- %s byte %d prefix %d: exact %zu byte %zu prefix %zu approx %zu; %zu differ\n",
			      mname, dname, byte, prefix, st.exact, st.byte, st.prefix, st.approx, bad);
		assert_int_equal(bad, 0);
		free(row);
		mk_surgeon_vocab_free(m), mk_surgeon_vocab_free(d);
		ncases++;
	}
	assert_int_equal(ncases, 16);
	free(txt);
}


/* ---- end to end: mergekit-tokensurgeon's own output (e2e/) ----
 *
 * The core driven as the program will drive it, on the tiny llamas of
 * e2e/ (bfloat16): matched rows must be the model's bits; approximated
 * rows, computed in float32 and rounded to bfloat16 (nearest even, as
 * torch's .to), are counted bit-equal or not, and their largest relative
 * error and the count are held to the run's bounds (measured values
 * beside each). */

static float bf16_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static uint16_t f32_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* a BF16 matrix of an e2e model, its bits and as float32 */
static uint16_t *e2e_tensor(const char *dir, const char *name, size_t *rows, size_t *cols, float **f32)
{
	char path[PATH_MAX];
	struct mk_err err = { 0 };
	struct mk_st_file *st;
	snprintf(path, sizeof path, "%s/" GOLD "/e2e/%s/model.safetensors", test_top(GOLD "/cases.txt"), dir);
	if (mk_st_open(path, &st, &err) != 0)
		fail_msg("%s", err.msg);
	const struct mk_st_tensor *t = mk_st_find(st, name);
	assert_non_null(t);
	assert_int_equal(t->desc.ndim, 2);
	*rows = t->desc.shape[0], *cols = t->desc.shape[1];
	uint16_t *h = malloc(t->end - t->begin);
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fseek(f, (long)(st->data_start + t->begin), SEEK_SET), 0);
	assert_int_equal(fread(h, 1, t->end - t->begin, f), t->end - t->begin);
	fclose(f);
	assert_int_equal(t->end - t->begin, 2 * *rows * *cols);
	*f32 = malloc(4 * *rows * *cols);
	for (size_t i = 0; i < *rows * *cols; i++)
		(*f32)[i] = bf16_f32(h[i]);
	mk_st_file_free(st);
	return h;
}

static struct mk_surgeon_vocab *e2e_vocab(const char *dir, const char *cls, const char *const *special,
					  struct mk_tokenizer **tok)
{
	char path[PATH_MAX];
	struct mk_err err = { 0 };
	snprintf(path, sizeof path, "%s/" GOLD "/e2e/%s/tokenizer.json", test_top(GOLD "/cases.txt"), dir);
	size_t len;
	char *txt;
	{
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		fseek(f, 0, SEEK_END);
		len = (size_t)ftell(f);
		fseek(f, 0, SEEK_SET);
		txt = malloc(len);
		assert_int_equal(fread(txt, 1, len, f), len);
		fclose(f);
	}
	struct mk_vocab *v;
	if (mk_vocab_parse(txt, len, path, &v, &err) != 0)
		fail_msg("%s", err.msg);
	if (tok && mk_tokenizer_parse(txt, len, path, tok, &err) != 0)
		fail_msg("%s", err.msg);
	free(txt);
	struct mk_surgeon_vocab *sv;
	if (mk_surgeon_vocab_build((const char *const *)v->token, v->n, special,
				   mk_surgeon_space_of(cls, mk_vocab_find(v, "\xc4\xa0hello") >= 0), &sv, &err) != 0)
		fail_msg("%s", err.msg);
	mk_vocab_free(v);
	return sv;
}

enum e2e_method { E2E_OMP, E2E_INTERP_LSQ, E2E_SUBWORD };

static void e2e_run(const char *run, enum e2e_method how, size_t k, bool match_more, double bound, size_t min_equal)
{
	static const char *const mspecial[MK_SURGEON_NSPECIAL] = { "<s>", "</s>", "<unk>" };
	static const char *const dspecial[MK_SURGEON_NSPECIAL] = { NULL, "<|im_end|>", NULL, NULL, "<|endoftext|>" };
	static const char *const names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
	struct mk_tokenizer *mtok = NULL;
	struct mk_surgeon_vocab *mv = e2e_vocab("model", "LlamaTokenizerFast", mspecial, &mtok);
	struct mk_surgeon_vocab *dv = e2e_vocab("donor", "PreTrainedTokenizerFast", dspecial, NULL);
	struct mk_err err = { 0 };

	for (int w = 0; w < 2; w++) {
		size_t mr, mc, dr, dc, orr, oc;
		float *mf, *df, *of;
		uint16_t *mh = e2e_tensor("model", names[w], &mr, &mc, &mf);
		uint16_t *dh = e2e_tensor("donor", names[w], &dr, &dc, &df);
		uint16_t *oh = e2e_tensor(run, names[w], &orr, &oc, &of);
		(void)dh;
		assert_int_equal(orr, dv->n);
		assert_int_equal(oc, mc);
		struct mk_surgeon_match_opts o = { mr, dr, match_more, match_more, NULL, NULL };
		int64_t *row = calloc(dv->n, 8);
		struct mk_surgeon_stats st;
		assert_int_equal(mk_surgeon_match(mv, dv, &o, row, &st, &err), 0);
		size_t na = 0, copied_bad = 0;
		for (size_t i = 0; i < dv->n; i++) {
			if (row[i] >= 0)
				copied_bad += memcmp(oh + i * oc, mh + (size_t)row[i] * mc, 2 * mc) != 0;
			else if (row[i] == MK_SURGEON_ZERO)
				for (size_t l = 0; l < oc; l++)
					copied_bad += oh[i * oc + l] != 0;
			na += row[i] == MK_SURGEON_APPROX;
		}
		/* the rows to approximate, in donor id order */
		int64_t *aid = malloc(8 * (na + 1));
		float *tg = malloc(4 * (na + 1) * dc), *got = malloc(4 * (na + 1) * mc);
		na = 0;
		for (size_t i = 0; i < dv->n; i++)
			if (row[i] == MK_SURGEON_APPROX) {
				memcpy(tg + na * dc, df + i * dc, 4 * dc);
				aid[na++] = (int64_t)i;
			}
		if (how == E2E_SUBWORD) {
			/* mergekit's encodings (transformers' LlamaTokenizer);
			 * mk's encoder (tokenizer.json, as `tokenizers` reads
			 * it) counted against them */
			const int32_t **ids = calloc(na + 1, sizeof *ids);
			size_t *nids = calloc(na + 1, sizeof *nids), enc_differ = 0;
			int32_t *all = loadf(0, "e2e/subword-ids.i32"), *p = all;
			char buf[512];
			for (size_t i = 0; i < na; i++) {
				nids[i] = (size_t)*p++, ids[i] = p, p += nids[i];
				const char *text = mk_surgeon_key_text(dv->key[aid[i]], buf, sizeof buf);
				int32_t *e;
				size_t ne;
				assert_non_null(text);
				if (mk_tokenizer_encode(mtok, text, strlen(text), false, &e, &ne, &err) != 0)
					fail_msg("%s", err.msg);
				enc_differ += ne != nids[i] || memcmp(e, ids[i], 4 * ne) != 0;
				free(e);
			}
			if (w == 0)
				print_message("e2e subword: mk's encoder gives other ids than transformers' "
					      "LlamaTokenizer for %zu of %zu texts\n", enc_differ, na);
			assert_int_equal(mk_surgeon_subword(mf, mr, mc, ids, nids, na, MK_SURGEON_SUB_MEAN, w == 1, true,
							    got, &err), 0);
			free(ids), free(nids), free(all);
		} else {
			size_t n;
			int64_t *sd, *sm;
			assert_int_equal(mk_surgeon_shared(mv, dv, &o, &n, &sd, &sm, &err), 0);
			float *pd = malloc(4 * n * dc), *pm = malloc(4 * n * mc), *cf = malloc(4 * na * k);
			int64_t *ix = malloc(8 * na * k);
			for (size_t j = 0; j < n; j++) {
				memcpy(pd + j * dc, df + (size_t)sd[j] * dc, 4 * dc);
				memcpy(pm + j * mc, mf + (size_t)sm[j] * mc, 4 * mc);
			}
			int rc = how == E2E_OMP ? mk_surgeon_omp(tg, na, pd, n, dc, k, ix, cf, &err) :
						  mk_surgeon_interp(tg, na, pd, n, dc, k, false, MK_SURGEON_LSQ, ix, cf, &err);
			if (rc != 0)
				fail_msg("%s", err.msg);
			mk_surgeon_combine(ix, cf, na, k, pm, mc, got);
			free(pd), free(pm), free(cf), free(ix), free(sd), free(sm);
		}
		size_t same = 0;
		double worst = 0;
		for (size_t i = 0; i < na; i++) {
			const uint16_t *want = oh + (size_t)aid[i] * oc;
			bool eq = true;
			double e = 0, nrm = 0;
			for (size_t l = 0; l < mc; l++) {
				float g = bf16_f32(f32_bf16(got[i * mc + l])), x = bf16_f32(want[l]);
				eq = eq && f32_bf16(got[i * mc + l]) == want[l];
				e += ((double)g - x) * ((double)g - x), nrm += (double)x * x;
			}
			same += eq;
			double r = nrm > 0 ? sqrt(e / nrm) : sqrt(e);
			if (r > worst)
				worst = r;
		}
		print_message("e2e %-20s %-26s exact %zu byte %zu prefix %zu (%zu rows not the model's); approximated "
			      "%zu, %zu bit-equal (at least %zu), max row rel. error %.3g (bound %.0e)\n",
			      run, names[w], st.exact, st.byte, st.prefix, copied_bad, na, same, min_equal, worst, bound);
		assert_int_equal(copied_bad, 0);
		assert_true(worst <= bound);
		assert_true(same >= min_equal);
		free(mh), free(dh), free(oh), free(mf), free(df), free(of), free(row), free(aid), free(tg), free(got);
	}
	mk_surgeon_vocab_free(mv), mk_surgeon_vocab_free(dv);
	mk_tokenizer_free(mtok);
}

static void test_e2e(void **state)
{
	/* omp: measured 651 and 655 of 656 rows bit-equal, the others one
	 * bfloat16 step off in an element (row error 2.5e-4, 4.4e-4) */
	e2e_run("omp-k8", E2E_OMP, 8, false, 1e-3, 640);
	/* common_interpolation: mergekit ranks the neighbours by distances
	 * computed in bfloat16 (torch.cdist on the model's dtype), where
	 * ties are many; mk ranks by float32 distances, so a row whose 8th
	 * nearest is tied there takes other neighbours (measured: 180 and
	 * 184 of 219 rows bit-equal, the rest up to 1.15 apart) */
	e2e_run("interp-k8-lsq-match", E2E_INTERP_LSQ, 8, true, 2.0, 170);
	/* subword with mergekit's encodings: all bit-equal, bfloat16 sums */
	e2e_run("subword", E2E_SUBWORD, 0, false, 0.0, 656);
}


/* ---- refusals, and the small helpers ---- */
static void test_errors(void **state)
{
	struct mk_err err = { 0 };
	float pts[4 * 3] = { 1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1 }, tg[3] = { 1, 2, 3 }, out[4 * 3], coef[8];
	int64_t idx[8];
	const int32_t bad[1] = { 4 }, *ids[1] = { bad };
	size_t nids[1] = { 1 };

	assert_int_equal(mk_surgeon_omp(tg, 1, pts, 4, 3, 5, idx, coef, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "cannot pick 5 of 4"));
	assert_int_equal(mk_surgeon_omp(tg, 1, pts, 4, 3, 0, idx, coef, &err), -MK_EINVAL);
	assert_int_equal(mk_surgeon_interp(tg, 1, pts, 4, 3, 5, false, MK_SURGEON_DISTPROP, idx, coef, &err), -MK_EINVAL);
	assert_int_equal(mk_surgeon_subword(pts, 4, 3, ids, nids, 1, MK_SURGEON_SUB_MEAN, false, false, out, &err),
			 -MK_EINVAL);
	assert_non_null(strstr(err.msg, "past the model's 4 embedding rows"));
	/* two rows in three dimensions: a singular covariance */
	float z[3] = { 0 };
	assert_int_equal(mk_surgeon_john_hewitt(pts, 2, 3, z, 1, out, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "not positive definite"));
	assert_int_equal(mk_surgeon_landmark_pca(tg, 1, pts, 2, 3, pts, 3, out, &err), -MK_EINVAL);
	assert_int_equal(mk_surgeon_stb_basis(pts, pts, 4, 3, 3, 9, out, out, &err), -MK_EINVAL);

	/* omp with k = 1 picks the row of largest |correlation|, the first of equals */
	assert_int_equal(mk_surgeon_omp(tg, 1, pts, 4, 3, 1, idx, coef, &err), 0);
	assert_int_equal(idx[0], 3);
	assert_float_equal(coef[0], 6.0f / 3.0f, 1e-6);

	assert_int_equal(mk_surgeon_space_of("LlamaTokenizerFast", false), MK_SURGEON_SPACE_METASPACE);
	assert_int_equal(mk_surgeon_space_of("GemmaTokenizer", true), MK_SURGEON_SPACE_BYTELEVEL);
	assert_int_equal(mk_surgeon_space_of("Qwen2TokenizerFast", false), MK_SURGEON_SPACE_BYTELEVEL);
	assert_int_equal(mk_surgeon_space_of("PreTrainedTokenizerFast", false), MK_SURGEON_SPACE_BYTELEVEL);
	assert_int_equal(mk_surgeon_space_of(NULL, false), MK_SURGEON_SPACE_BYTELEVEL);

	const char *tok[] = { "<s>", "\xe2\x96\x81the", "the", NULL, "a", "\xe2\x96\x81" };
	const char *special[MK_SURGEON_NSPECIAL] = { "<s>", "<s>" };
	struct mk_surgeon_vocab *v;
	char buf[8];
	assert_int_equal(mk_surgeon_vocab_build(tok, 6, special, MK_SURGEON_SPACE_METASPACE, &v, &err), 0);
	assert_string_equal(v->key[0], "Sbos_token");
	assert_string_equal(v->key[1], "Wthe");
	assert_string_equal(v->key[2], "Tthe");
	assert_null(v->key[3]);
	assert_string_equal(v->key[5], "W");
	assert_string_equal(mk_surgeon_key_text(v->key[1], buf, sizeof buf), " the");
	assert_string_equal(mk_surgeon_key_text(v->key[0], buf, sizeof buf), "bos_token");
	assert_null(mk_surgeon_key_text(v->key[1], buf, 3));
	assert_int_equal(mk_surgeon_vocab_find(v, "Wthe"), 1);
	assert_int_equal(mk_surgeon_vocab_find(v, "Tnone"), -1);
	mk_surgeon_vocab_free(v);
	const char *dup[] = { "x", "x" };
	assert_int_equal(mk_surgeon_vocab_build(dup, 2, NULL, MK_SURGEON_SPACE_BYTELEVEL, &v, &err), -MK_EINVAL);
	assert_non_null(strstr(err.msg, "normalise alike"));
}


/* ---- --magikarp: mergekit's well_trained_tokens on planted rows ---- */
static void test_magikarp(void **state)
{
	size_t len, n = 0;
	char *txt = load("magikarp-tokens.txt", &len);
	const char *tok[300];
	struct mk_err err = { 0 };
	float *emb = loadf(4 * 300 * 64, "magikarp-model.f32"), *head = loadf(4 * 300 * 64, "magikarp-lm_head.f32");

	for (char *p = txt, *e; p < txt + len && n < 300; p = e + 1) {
		e = memchr(p, '\n', (size_t)(txt + len - p));
		assert_non_null(e);
		*e = 0;
		tok[n++] = *p ? p : NULL;
	}
	assert_int_equal(n, 300);
	struct mk_surgeon_vocab *v;
	assert_int_equal(mk_surgeon_vocab_build(tok, 300, NULL, MK_SURGEON_SPACE_BYTELEVEL, &v, &err), 0);
	for (int h = 0; h < 2; h++) {
		uint8_t good[300];
		int32_t *want = loadf(4 * 280, "magikarp-%s.good.i32", h ? "nohead" : "head");
		assert_int_equal(mk_surgeon_well_trained(v, emb, h ? NULL : head, 300, 64, good, &err), 0);
		size_t kept = 0, differ = 0;
		for (size_t i = 0; i < 280; i++)
			kept += good[i], differ += good[i] != (want[i] != 0);
		for (size_t i = 280; i < 300; i++)
			assert_int_equal(good[i], 0);
		print_message("magikarp %s: %zu of 280 kept, %zu differ from mergekit\n", h ? "no lm_head" : "lm_head",
			      kept, differ);
		assert_int_equal(differ, 0);
		free(want);
	}
	mk_surgeon_vocab_free(v);
	free(txt), free(emb), free(head);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_methods),
		cmocka_unit_test(test_match),
		cmocka_unit_test(test_e2e),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_magikarp),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
