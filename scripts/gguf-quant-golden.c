/* gguf-quant-golden.c - golden blocks for test/unit/test_gguf_quant.c
 * from llama.cpp's own ggml (libggml-base.so), outside `make check`.
 *
 *   sh scripts/gguf-reference-setup      # once: builds the reference
 *   L=~/.cache/mk/llama.cpp-0.3.36
 *   make build/libmk.a
 *   cc -std=gnu11 -O2 -Iinclude -Isrc -I$L/src/ggml/include \
 *      scripts/gguf-quant-golden.c build/libmk.a -L$L/build/bin \
 *      -lggml-base -Wl,-rpath,$L/build/bin $(pkg-config --libs yaml-0.1 \
 *      libzstd liburing jansson libpcre2-8 icu-uc) -lopenblas -ldl -lm \
 *      -lpthread -o /tmp/gqg
 *   /tmp/gqg testdata/gguf/quant-golden.bin   # write the golden file
 *   /tmp/gqg --exhaustive                     # every float: f16/bf16
 *   /tmp/gqg --random 20000                   # N random rows of 256..4096
 *       # values, each of a random kind and scale: mk against ggml
 *   /tmp/gqg --compare M-f32.gguf M-Q4_K_M.gguf
 *       # a whole file llama-quantize wrote from M-f32.gguf: mk's type
 *       # choice (gguf_mix.c) and every tensor's bytes, quantized by mk
 *       # from the f32 file, must equal llama-quantize's
 *
 * Each row goes through ggml_quantize_chunk(type, ..., imatrix NULL),
 * the call llama-quantize makes for a tensor without an importance
 * matrix.  File layout (little-endian): "MKGQ1\n\0\0", u32 cases; per
 * case: name[32], u32 n, float x[n], u32 types; per type: u32 ggml type,
 * u32 bytes, the bytes.  The inputs are built from integer noise with
 * exact float steps only, so they do not depend on libm.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "mk/dtype.h"
#include "gguf/gguf_mix.h"
#include "gguf/gguf_quant.h"
#include "gguf/gguf_type.h"
#include "mk/err.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t next32(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545F4914F6CDD1Dull) >> 32);
}

/* roughly normal: sum of four uniforms in [-1, 1) */
static float noise(void)
{
	float s = 0;

	for (int i = 0; i < 4; i++)
		s += (float)(int32_t)next32() * 0x1p-31f;
	return s;
}

struct gcase {
	const char *name;
	unsigned n;
	void (*fill)(float *x, unsigned n, float scale);
	float scale;
};

static void f_gauss(float *x, unsigned n, float s) { for (unsigned i = 0; i < n; i++) x[i] = noise() * s; }
static void f_zero(float *x, unsigned n, float s) { (void)s; memset(x, 0, n * 4); }
static void f_const(float *x, unsigned n, float s) { for (unsigned i = 0; i < n; i++) x[i] = s; }
static void f_neg(float *x, unsigned n, float s) { for (unsigned i = 0; i < n; i++) x[i] = -fabsf(noise() * s); }
static void f_pos(float *x, unsigned n, float s) { for (unsigned i = 0; i < n; i++) x[i] = fabsf(noise() * s); }
static void f_outlier(float *x, unsigned n, float s)
{
	f_gauss(x, n, 0.02f);
	x[n / 3] = s;
}
static void f_groups(float *x, unsigned n, float s)
{
	/* each group of 32 another magnitude, 1e-4 .. 1e2 */
	static const float mag[8] = { 1e-4f, 3e-3f, 0.05f, 1.0f, 0.2f, 40.0f, 1e-2f, 100.0f };

	for (unsigned i = 0; i < n; i++)
		x[i] = noise() * mag[(i / 32) % 8] * s;
}
static void f_ramp(float *x, unsigned n, float s)
{
	for (unsigned i = 0; i < n; i++)
		x[i] = ((float)i - (float)n / 2) / (float)n * s;
}
static void f_sparse(float *x, unsigned n, float s)
{
	for (unsigned i = 0; i < n; i++)
		x[i] = next32() % 7 == 0 ? noise() * s : 0.0f;
}

static const struct gcase cases[] = {
	{ "gauss-0.02-256", 256, f_gauss, 0.02f },
	{ "gauss-1-256", 256, f_gauss, 1.0f },
	{ "gauss-30-256", 256, f_gauss, 30.0f },
	{ "gauss-1e-3-512", 512, f_gauss, 1e-3f },
	{ "gauss-0.02-4096", 4096, f_gauss, 0.02f },
	{ "zeros-256", 256, f_zero, 0 },
	{ "const-256", 256, f_const, 0.5f },
	{ "const-neg-256", 256, f_const, -0.25f },
	{ "outlier-1e3-512", 512, f_outlier, 1000.0f },
	{ "outlier-neg-256", 256, f_outlier, -3e4f },
	{ "negative-256", 256, f_neg, 0.5f },
	{ "positive-256", 256, f_pos, 0.5f },
	{ "tiny-1e-6-256", 256, f_gauss, 1e-6f },
	{ "tiny-1e-9-256", 256, f_gauss, 1e-9f },
	{ "tiny-1e-30-256", 256, f_gauss, 1e-30f },
	{ "groups-256", 256, f_groups, 1.0f },
	{ "groups-4096", 4096, f_groups, 0.1f },
	{ "ramp-512", 512, f_ramp, 2.0f },
	{ "sparse-4096", 4096, f_sparse, 0.05f },
};

static const enum ggml_type types[] = {
	GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q5_0,
	GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

static void put32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }

static int write_golden(const char *path)
{
	FILE *f = fopen(path, "wb");
	unsigned nc = sizeof cases / sizeof cases[0];
	unsigned nt = sizeof types / sizeof types[0];

	if (!f) {
		perror(path);
		return 1;
	}
	fwrite("MKGQ1\n\0\0", 8, 1, f);
	put32(f, nc);
	for (unsigned c = 0; c < nc; c++) {
		const struct gcase *g = &cases[c];
		float *x = calloc(g->n, 4);
		char name[32] = { 0 };

		g->fill(x, g->n, g->scale);
		strncpy(name, g->name, sizeof name - 1);
		fwrite(name, 32, 1, f);
		put32(f, g->n);
		fwrite(x, 4, g->n, f);
		put32(f, nt);
		for (unsigned t = 0; t < nt; t++) {
			size_t sz = ggml_row_size(types[t], g->n);
			void *q = calloc(1, sz);
			uint8_t *m = calloc(1, sz);
			size_t got = ggml_quantize_chunk(types[t], x, q, 0, 1, g->n, NULL);

			if (got != sz) {
				fprintf(stderr, "%s %s: %zu bytes, expected %zu\n",
					g->name, ggml_type_name(types[t]), got, sz);
				return 1;
			}
			put32(f, (uint32_t)types[t]);
			put32(f, (uint32_t)sz);
			fwrite(q, 1, sz, f);
			/* report here already whether mk agrees */
			mk_gguf_quantize_row((int)types[t], x, g->n, m, NULL);
			if (memcmp(m, q, sz))
				fprintf(stderr, "mk differs: %s %s\n", g->name,
					ggml_type_name(types[t]));
			free(q);
			free(m);
		}
		free(x);
	}
	return fclose(f) != 0;
}


/* --random N: rows of random length, kind and scale through ggml and mk */
static int random_rows(long count)
{
	static const unsigned lens[] = { 256, 512, 768, 1024, 4096 };
	static void (*const fills[])(float *, unsigned, float) = {
		f_gauss, f_neg, f_pos, f_outlier, f_groups, f_ramp, f_sparse, f_const,
	};
	float *x = malloc(4096 * 4);
	uint8_t *q = malloc(4096 * 4), *m = malloc(4096 * 4);
	unsigned nt = sizeof types / sizeof types[0];
	unsigned long bad[64] = { 0 }, rows = 0;

	for (long r = 0; r < count; r++) {
		unsigned n = lens[next32() % 5];
		/* scales 2^-40 .. 2^12, log-uniform */
		float scale = ldexpf(1.0f + (float)(next32() % 1000) / 1000.0f,
				     (int)(next32() % 53) - 40);

		fills[next32() % 8](x, n, scale);
		rows++;
		for (unsigned t = 0; t < nt; t++) {
			size_t sz = ggml_row_size(types[t], n);

			ggml_quantize_chunk(types[t], x, q, 0, 1, n, NULL);
			mk_gguf_quantize_row((int)types[t], x, n, m, NULL);
			if (memcmp(q, m, sz))
				bad[types[t]]++;
		}
	}
	printf("%lu random rows:", rows);
	for (unsigned t = 0; t < nt; t++)
		printf(" %s %lu", ggml_type_name(types[t]), bad[types[t]]);
	printf(" differ\n");
	for (unsigned t = 0; t < nt; t++)
		if (bad[types[t]])
			return 1;
	return 0;
}

/* every float32 bit pattern through ggml's and mk's f16 and bf16 */
static int exhaustive(void)
{
	enum { CH = 1 << 20 };
	float *x = malloc(CH * 4);
	ggml_fp16_t *h = malloc(CH * 2);
	ggml_bf16_t *b = malloc(CH * 2);
	uint64_t bad16 = 0, badb = 0, nan16 = 0;

	for (uint64_t base = 0; base < (1ull << 32); base += CH) {
		for (uint32_t i = 0; i < CH; i++) {
			uint32_t u = (uint32_t)(base + i);

			memcpy(&x[i], &u, 4);
		}
		ggml_fp32_to_fp16_row(x, h, CH);
		ggml_fp32_to_bf16_row_ref(x, b, CH);
		for (uint32_t i = 0; i < CH; i++) {
			uint16_t hb;

			memcpy(&hb, &h[i], 2);
			if (mk_f32_to_f16(x[i]) != hb) {
				if (isnan(x[i]))
					nan16++;
				else if (bad16++ < 5)
					fprintf(stderr, "f16 %08x: ggml %04x mk %04x\n",
						(unsigned)(base + i), hb, mk_f32_to_f16(x[i]));
			}
			if (mk_gguf_f32_to_bf16(x[i]) != b[i].bits && badb++ < 5)
				fprintf(stderr, "bf16 %08x: ggml %04x mk %04x\n",
					(unsigned)(base + i), b[i].bits,
					mk_gguf_f32_to_bf16(x[i]));
		}
	}
	printf("f16: %llu finite/inf mismatches, %llu NaN mismatches; "
	       "bf16: %llu mismatches (of 2^32)\n", (unsigned long long)bad16,
	       (unsigned long long)nan16, (unsigned long long)badb);
	return bad16 || badb;
}


/* ---- --compare: a minimal GGUF reader ---- */

struct gt {
	char name[96];
	unsigned nd;
	uint64_t ne[4], off;
	int type;
};

struct gfile {
	uint8_t *p;
	size_t len, data;
	struct gt *t;
	size_t nt;
	char arch[64];
	uint64_t u[8];          /* file_type, block_count, heads, heads_kv, experts */
};

static uint64_t rd(const uint8_t *p, unsigned w)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < w; i++)
		v |= (uint64_t)p[i] << 8 * i;
	return v;
}

static unsigned vwidth(uint32_t vt)
{
	static const unsigned w[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

	return vt < 13 ? w[vt] : 0;
}

static size_t skip_value(const uint8_t *p, size_t off, uint32_t vt)
{
	if (vt == 8)
		return off + 8 + rd(p + off, 8);
	if (vt == 9) {
		uint32_t et = (uint32_t)rd(p + off, 4);
		uint64_t n = rd(p + off + 4, 8);

		off += 12;
		for (uint64_t i = 0; i < n; i++)
			off = skip_value(p, off, et);
		return off;
	}
	return off + vwidth(vt);
}

static int load(const char *path, struct gfile *g)
{
	FILE *f = fopen(path, "rb");
	size_t off = 24, align = 32;

	memset(g, 0, sizeof *g);
	if (!f)
		return perror(path), 1;
	fseek(f, 0, SEEK_END);
	g->len = (size_t)ftell(f);
	rewind(f);
	g->p = malloc(g->len);
	if (fread(g->p, 1, g->len, f) != g->len)
		return fclose(f), 1;
	fclose(f);
	g->nt = rd(g->p + 8, 8);
	g->t = calloc(g->nt, sizeof *g->t);
	for (uint64_t i = 0, nkv = rd(g->p + 16, 8); i < nkv; i++) {
		uint64_t kl = rd(g->p + off, 8);
		char key[256] = { 0 };

		memcpy(key, g->p + off + 8, kl < 255 ? kl : 255);
		off += 8 + kl;
		uint32_t vt = (uint32_t)rd(g->p + off, 4);

		off += 4;
		const char *dot = strchr(key, '.');
		static const char *const want[] = { "file_type", "block_count",
			"attention.head_count", "attention.head_count_kv", "expert_count" };

		if (!strcmp(key, "general.architecture"))
			memcpy(g->arch, g->p + off + 8, rd(g->p + off, 8) < 63 ? rd(g->p + off, 8) : 63);
		if (!strcmp(key, "general.alignment"))
			align = rd(g->p + off, 4);
		for (int k = 0; k < 5 && dot && vwidth(vt); k++)
			if (!strcmp(dot + 1, want[k]))
				g->u[k] = rd(g->p + off, vwidth(vt));
		off = skip_value(g->p, off, vt);
	}
	for (size_t i = 0; i < g->nt; i++) {
		struct gt *t = &g->t[i];
		uint64_t nl = rd(g->p + off, 8);

		memcpy(t->name, g->p + off + 8, nl < 95 ? nl : 95);
		off += 8 + nl;
		t->nd = (unsigned)rd(g->p + off, 4);
		off += 4;
		for (unsigned d = 0; d < 4; d++)
			t->ne[d] = 1;
		for (unsigned d = 0; d < t->nd; d++, off += 8)
			t->ne[d] = rd(g->p + off, 8);
		t->type = (int)rd(g->p + off, 4);
		t->off = rd(g->p + off + 4, 8);
		off += 12;
	}
	g->data = (off + align - 1) / align * align;
	return 0;
}

static int compare(const char *f32path, const char *qpath)
{
	struct gfile a, q;
	unsigned same[64] = { 0 }, bad = 0;

	if (load(f32path, &a) || load(qpath, &q))
		return 2;
	struct mk_gguf_mix_model m = { a.arch, (unsigned)a.u[1], (unsigned)a.u[2],
				       (unsigned)a.u[3], (unsigned)a.u[4] };
	struct mk_gguf_mix_tensor *mt = calloc(a.nt, sizeof *mt);
	int *types = calloc(a.nt, sizeof *types);
	struct mk_err err = { 0 };

	for (size_t i = 0; i < a.nt; i++)
		mt[i] = (struct mk_gguf_mix_tensor){ a.t[i].name, a.t[i].nd,
			{ a.t[i].ne[0], a.t[i].ne[1], a.t[i].ne[2], a.t[i].ne[3] },
			a.t[i].type };
	if (mk_gguf_mix_types((int)q.u[0], &m, mt, a.nt, types, &err)) {
		fprintf(stderr, "mix: %s\n", err.msg);
		return 1;
	}
	for (size_t i = 0; i < a.nt; i++) {
		const struct gt *s = &a.t[i], *d = NULL;

		for (size_t j = 0; j < q.nt; j++)
			if (!strcmp(q.t[j].name, s->name))
				d = &q.t[j];
		if (!d || s->type != 0) {
			fprintf(stderr, "%s: missing or not f32\n", s->name);
			return 2;
		}
		if (types[i] != d->type) {
			fprintf(stderr, "%s: mk chose %s, llama-quantize %s\n", s->name,
				mk_gguf_type_name(types[i]), mk_gguf_type_name(d->type));
			bad++;
			continue;
		}
		uint64_t rows = s->ne[1] * s->ne[2] * s->ne[3];
		uint64_t rb = mk_gguf_row_bytes(d->type, s->ne[0]);
		uint8_t *row = malloc(rb);
		const float *x = (const float *)(a.p + a.data + s->off);
		const uint8_t *want = q.p + q.data + d->off;
		bool ok = true;

		for (uint64_t r = 0; r < rows && ok; r++) {
			if (mk_gguf_quantize_row(d->type, x + r * s->ne[0], s->ne[0], row, &err)) {
				fprintf(stderr, "%s: %s\n", s->name, err.msg);
				return 2;
			}
			ok = !memcmp(row, want + r * rb, rb);
		}
		free(row);
		if (ok) {
			same[d->type]++;
		} else {
			fprintf(stderr, "%s (%s): bytes differ\n", s->name,
				mk_gguf_type_name(d->type));
			bad++;
		}
	}
	printf("%s: %zu tensors,", qpath, a.nt);
	for (int t = 0; t < 64; t++)
		if (same[t])
			printf(" %s %u", mk_gguf_type_name(t), same[t]);
	printf(" equal; %u differ\n", bad);
	return bad != 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--random"))
		return random_rows(atol(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "--compare"))
		return compare(argv[2], argv[3]);
	if (argc == 2 && !strcmp(argv[1], "--exhaustive"))
		return exhaustive();
	if (argc != 2) {
		fprintf(stderr, "usage: gguf-quant-golden OUT.bin | --exhaustive | --random N | "
			"--compare F32.gguf QUANT.gguf\n");
		return 2;
	}
	return write_golden(argv[1]);
}
