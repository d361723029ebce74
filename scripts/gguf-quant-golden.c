/* gguf-quant-golden.c - golden blocks for test/unit/test_gguf_quant.c
 * from llama.cpp's own ggml (libggml-base.so), outside `make check`.
 *
 *   sh scripts/gguf-reference-setup      # once: builds the reference
 *   L=~/.cache/mk/llama.cpp-0.3.36
 *   cc -std=gnu11 -O2 -Iinclude -Isrc -I$L/src/ggml/include \
 *      scripts/gguf-quant-golden.c build/libmk.a -L$L/build/bin \
 *      -lggml-base -Wl,-rpath,$L/build/bin -lm -lpthread -o /tmp/gqg
 *   /tmp/gqg testdata/gguf/quant-golden.bin   # write the golden file
 *   /tmp/gqg --exhaustive                     # every float: f16/bf16
 *
 * Each row goes through ggml_quantize_chunk(type, ..., imatrix NULL),
 * the call llama-quantize makes for a tensor without an importance
 * matrix.  File layout (little-endian): "MKGQ1\n\0\0", u32 cases; per
 * case: name[32], u32 n, float x[n], u32 types; per type: u32 ggml type,
 * u32 bytes, the bytes.  The inputs are built from integer noise with
 * exact float steps only, so they do not depend on libm.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "mk/dtype.h"
#include "gguf/gguf_quant.h"

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

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "--exhaustive"))
		return exhaustive();
	if (argc != 2) {
		fprintf(stderr, "usage: gguf-quant-golden OUT.bin | --exhaustive\n");
		return 2;
	}
	return write_golden(argv[1]);
}
