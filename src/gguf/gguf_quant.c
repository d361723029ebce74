/* gguf_quant.c - GGUF's block quantizers, written to give the bytes of
 * ggml's reference quantizers (ggml-quants.c, the *_ref row functions
 * llama-quantize reaches through ggml_quantize_chunk when no importance
 * matrix is given).  Same algorithm, same float operations in the same
 * order: the scale searches below compare sums of float products, so a
 * reordered or fused operation would pick another scale now and then.
 *
 * Layouts (little-endian, per block):
 *   Q8_0  32 values:  f16 d, 32 x int8
 *   Q5_0  32 values:  f16 d, u32 high bits, 16 bytes of low nibbles
 *   Q5_1  32 values:  f16 d, f16 m, u32 high bits, 16 bytes of nibbles
 *   Q4_K 256 values:  f16 d, f16 dmin, 12 bytes of 6-bit scales and
 *                     mins, 128 bytes of nibbles
 *   Q5_K 256 values:  as Q4_K, then 32 bytes of fifth bits before the
 *                     nibbles
 *   Q6_K 256 values:  128 bytes of low nibbles, 64 bytes of high 2-bit
 *                     pairs, 16 x int8 scales, f16 d
 */
#include "gguf/gguf_quant.h"

#include <math.h>
#include <string.h>

#include "gguf/gguf_type.h"
#include "mk/dtype.h"
#include "mk/err.h"

#define QK 256          /* values in a k-quant super-block */
#define TINY 1e-15f     /* below this a group counts as all zero */

/* Round to the nearest integer, ties to even, by letting the FPU align
 * v + 1.5 * 2^23 to units: the integer is then the low mantissa bits.
 * Valid for |v| < 2^22, which every caller keeps to; outside that it
 * returns what the same bit trick gives in ggml. */
static inline int round_even(float v)
{
	float t = v + 12582912.0f;
	int32_t bits;

	memcpy(&bits, &t, sizeof bits);
	return (bits & 0x7FFFFF) - 0x400000;
}

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

/* f16 through the half-precision grid and back, as a block's scale is
 * read back before the values are requantized against it. */
static inline float half_of(const uint8_t *p)
{
	return mk_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

uint16_t mk_gguf_f32_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	if ((u & 0x7FFFFFFFu) > 0x7F800000u)
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* ---- Q8_0: symmetric, 127 steps each side, round half away ---- */

void mk_gguf_q8_0_row(const float *x, uint64_t n, uint8_t *out)
{
	for (uint64_t b = 0; b < n / 32; b++, x += 32, out += 34) {
		float amax = 0.0f;

		for (int i = 0; i < 32; i++) {
			float a = fabsf(x[i]);

			amax = amax > a ? amax : a;
		}
		float d = amax / 127;
		float inv = d != 0.0f ? 1.0f / d : 0.0f;

		put16(out, mk_f32_to_f16(d));
		for (int i = 0; i < 32; i++)
			out[2 + i] = (uint8_t)(int8_t)roundf(x[i] * inv);
	}
}

/* ---- Q5_0 and Q5_1: the legacy 5-bit types, fallbacks of Q4_K/Q5_K ---- */

static void put_five(uint8_t *qh, uint8_t *qs, const uint8_t *v)
{
	uint32_t hi = 0;

	for (int j = 0; j < 16; j++) {
		qs[j] = (uint8_t)((v[j] & 0x0F) | (v[j + 16] & 0x0F) << 4);
		hi |= (uint32_t)(v[j] >> 4 & 1) << j;
		hi |= (uint32_t)(v[j + 16] >> 4 & 1) << (j + 16);
	}
	for (int k = 0; k < 4; k++)
		qh[k] = (uint8_t)(hi >> 8 * k);
}

void mk_gguf_q5_0_row(const float *x, uint64_t n, uint8_t *out)
{
	for (uint64_t b = 0; b < n / 32; b++, x += 32, out += 22) {
		float amax = 0.0f, peak = 0.0f;
		uint8_t v[32];

		for (int i = 0; i < 32; i++) {
			if (fabsf(x[i]) > amax) {
				amax = fabsf(x[i]);
				peak = x[i];
			}
		}
		/* The value of largest magnitude maps to -16. */
		float d = peak / -16;
		float inv = d != 0.0f ? 1.0f / d : 0.0f;

		put16(out, mk_f32_to_f16(d));
		for (int i = 0; i < 32; i++) {
			int8_t t = (int8_t)(x[i] * inv + 16.5f);

			v[i] = (uint8_t)imin(31, t);
		}
		put_five(out + 2, out + 6, v);
	}
}

void mk_gguf_q5_1_row(const float *x, uint64_t n, uint8_t *out)
{
	for (uint64_t b = 0; b < n / 32; b++, x += 32, out += 24) {
		float lo = 3.40282347e38f, hi = -3.40282347e38f;
		uint8_t v[32];

		for (int i = 0; i < 32; i++) {
			if (x[i] < lo)
				lo = x[i];
			if (x[i] > hi)
				hi = x[i];
		}
		float d = (hi - lo) / 31;
		float inv = d != 0.0f ? 1.0f / d : 0.0f;

		put16(out, mk_f32_to_f16(d));
		put16(out + 2, mk_f32_to_f16(lo));
		for (int i = 0; i < 32; i++)
			v[i] = (uint8_t)((x[i] - lo) * inv + 0.5f);
		put_five(out + 4, out + 8, v);
	}
}

/* ---- Q4_K and Q5_K: 8 groups of 32, each x ~ s * q - m ---- */

/* Fit one group of 32 as scale * q + lo, q in 0..qmax, lo <= 0, with
 * weights w, minimising the weighted squared error: start from the
 * min-max grid, then try nstep + 1 stretched grids, each refit by
 * weighted least squares (lo pinned to 0 when the fit wants it
 * positive), keeping the best.  q goes to `q`; returns the scale and
 * stores -lo in *neg_lo. */
static float fit_group(const float *x, const float *w, int qmax,
		       float stretch0, float stretch_step, int nstep,
		       uint8_t *q, float *neg_lo)
{
	enum { N = 32 };
	uint8_t trial[N];
	float lo = x[0], hi = x[0];
	float sw = w[0], swx = w[0] * x[0];

	for (int i = 1; i < N; i++) {
		if (x[i] < lo)
			lo = x[i];
		if (x[i] > hi)
			hi = x[i];
		sw += w[i];
		swx += w[i] * x[i];
	}
	if (lo > 0)
		lo = 0;
	if (hi == lo) {
		memset(q, 0, N);
		*neg_lo = -lo;
		return 0.0f;
	}
	float inv = qmax / (hi - lo);
	float scale = 1 / inv;
	float best = 0;

	for (int i = 0; i < N; i++) {
		int l = round_even(inv * (x[i] - lo));

		q[i] = (uint8_t)imax(0, imin(qmax, l));
		float e = scale * q[i] + lo - x[i];

		best += w[i] * (e * e);
	}
	for (int s = 0; s <= nstep; s++) {
		float is = (stretch0 + stretch_step * s + qmax) / (hi - lo);
		float sl = 0, sll = 0, sxl = 0;

		for (int i = 0; i < N; i++) {
			int l = imax(0, imin(qmax, round_even(is * (x[i] - lo))));

			trial[i] = (uint8_t)l;
			sl += w[i] * l;
			sll += w[i] * l * l;
			sxl += w[i] * l * x[i];
		}
		float det = sw * sll - sl * sl;

		if (!(det > 0))
			continue;
		float ts = (sw * sxl - swx * sl) / det;
		float tm = (sll * swx - sl * sxl) / det;

		if (tm > 0) {
			tm = 0;
			ts = sxl / sll;
		}
		float err = 0;

		for (int i = 0; i < N; i++) {
			float e = ts * trial[i] + tm - x[i];

			err += w[i] * (e * e);
		}
		if (err < best) {
			memcpy(q, trial, N);
			best = err;
			scale = ts;
			lo = tm;
		}
	}
	*neg_lo = -lo;
	return scale;
}

/* The 12 bytes of eight 6-bit scales and eight 6-bit mins: groups 0-3
 * whole in bytes 0-3 (scale) and 4-7 (min); groups 4-7 as nibbles in
 * bytes 8-11, their top two bits in the top of bytes 0-7. */
static void pack_scales(uint8_t *s, const uint8_t *sc, const uint8_t *mn)
{
	for (int j = 0; j < 4; j++) {
		s[j] = sc[j];
		s[j + 4] = mn[j];
	}
	for (int j = 4; j < 8; j++) {
		s[j + 4] = (uint8_t)((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
		s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
		s[j] |= (uint8_t)((mn[j] >> 4) << 6);
	}
}

static void unpack_scale(const uint8_t *s, int j, uint8_t *sc, uint8_t *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (uint8_t)((s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4);
		*mn = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
	}
}

/* One super-block of Q4_K (qmax 15) or Q5_K (qmax 31): header (d, dmin,
 * scales) into hdr[0..15], the levels 0..qmax into L[256]. */
static void affine_superblock(const float *x, int qmax, float stretch0,
			      int nstep, uint8_t *hdr, uint8_t *L)
{
	float scale[8], negmin[8], w[32];
	float top_s = 0, top_m = 0;
	uint8_t sc[8], mn[8];

	for (int g = 0; g < 8; g++) {
		const float *xg = x + 32 * g;
		float ss = 0;

		for (int i = 0; i < 32; i++)
			ss += xg[i] * xg[i];
		float rms = sqrtf(ss / 32);

		for (int i = 0; i < 32; i++)
			w[i] = rms + fabsf(xg[i]);
		scale[g] = fit_group(xg, w, qmax, stretch0, 0.1f, nstep,
				     L + 32 * g, &negmin[g]);
		if (scale[g] > top_s)
			top_s = scale[g];
		if (negmin[g] > top_m)
			top_m = negmin[g];
	}
	float to_s = top_s > 0 ? 63.f / top_s : 0.f;
	float to_m = top_m > 0 ? 63.f / top_m : 0.f;

	for (int g = 0; g < 8; g++) {
		/* ggml stores the rounded int in a byte before clamping */
		uint8_t a = (uint8_t)round_even(to_s * scale[g]);
		uint8_t b = (uint8_t)round_even(to_m * negmin[g]);

		sc[g] = a < 63 ? a : 63;
		mn[g] = b < 63 ? b : 63;
	}
	put16(hdr, mk_f32_to_f16(top_s / 63.f));
	put16(hdr + 2, mk_f32_to_f16(top_m / 63.f));
	pack_scales(hdr + 4, sc, mn);

	/* Requantize each group against the scales as stored. */
	float d_all = half_of(hdr), m_all = half_of(hdr + 2);

	for (int g = 0; g < 8; g++) {
		uint8_t s6, m6;

		unpack_scale(hdr + 4, g, &s6, &m6);
		float d = d_all * s6;

		if (d == 0.0f)
			continue;       /* keeps the fit's levels */
		float m = m_all * m6;

		for (int i = 0; i < 32; i++) {
			int l = round_even((x[32 * g + i] + m) / d);

			L[32 * g + i] = (uint8_t)imax(0, imin(qmax, l));
		}
	}
}

void mk_gguf_q4_k_row(const float *x, uint64_t n, uint8_t *out)
{
	uint8_t L[QK];

	for (uint64_t b = 0; b < n / QK; b++, x += QK, out += 144) {
		affine_superblock(x, 15, -1.0f, 20, out, L);
		/* nibbles: 64 values per 32 bytes, low half then high half */
		for (int c = 0; c < 4; c++)
			for (int i = 0; i < 32; i++)
				out[16 + 32 * c + i] = (uint8_t)(L[64 * c + i] |
					L[64 * c + 32 + i] << 4);
	}
}

void mk_gguf_q5_k_row(const float *x, uint64_t n, uint8_t *out)
{
	uint8_t L[QK];

	for (uint64_t b = 0; b < n / QK; b++, x += QK, out += 176) {
		uint8_t *qh = out + 16, *ql = out + 48;

		affine_superblock(x, 31, -0.5f, 15, out, L);
		memset(qh, 0, 32);
		/* chunk c of 64 values: fifth bits at bit 2c (first 32) and
		 * 2c + 1 (second 32) of qh[i] */
		for (int c = 0; c < 4; c++) {
			for (int i = 0; i < 32; i++) {
				int a = L[64 * c + i], z = L[64 * c + 32 + i];

				if (a > 15) {
					a -= 16;
					qh[i] |= (uint8_t)(1u << (2 * c));
				}
				if (z > 15) {
					z -= 16;
					qh[i] |= (uint8_t)(2u << (2 * c));
				}
				ql[32 * c + i] = (uint8_t)(a | z << 4);
			}
		}
	}
}

/* ---- Q6_K: 16 groups of 16, symmetric, levels -32..31 ---- */

/* Symmetric fit of 16 values to levels -32..31 weighted by x^2: the
 * largest-magnitude value maps to -32, then 18 nearby grids are tried
 * and the one with the best sum(w x l)^2 / sum(w l^2) kept.  Levels
 * (offset by 32) go to L; returns the scale. */
static float fit_symmetric16(const float *x, int8_t *L)
{
	enum { N = 16, NMAX = 32 };
	float amax = 0, peak = 0;

	for (int i = 0; i < N; i++) {
		if (fabsf(x[i]) > amax) {
			amax = fabsf(x[i]);
			peak = x[i];
		}
	}
	if (amax < TINY) {
		memset(L, 0, N);
		return 0.f;
	}
	float inv = -NMAX / peak;
	float sxl = 0, sll = 0;

	for (int i = 0; i < N; i++) {
		int l = imax(-NMAX, imin(NMAX - 1, round_even(inv * x[i])));
		float w = x[i] * x[i];

		L[i] = (int8_t)(l + NMAX);
		sxl += w * x[i] * l;
		sll += w * l * l;
	}
	float scale = sll != 0 ? sxl / sll : 0.0f;
	float best = scale * sxl;

	for (int s = -9; s <= 9; s++) {
		if (s == 0)
			continue;
		inv = -(NMAX + 0.1f * s) / peak;
		sxl = sll = 0;
		for (int i = 0; i < N; i++) {
			int l = imax(-NMAX, imin(NMAX - 1, round_even(inv * x[i])));
			float w = x[i] * x[i];

			sxl += w * x[i] * l;
			sll += w * l * l;
		}
		if (sll > 0 && sxl * sxl > best * sll) {
			for (int i = 0; i < N; i++) {
				int l = round_even(inv * x[i]);

				L[i] = (int8_t)(NMAX + imax(-NMAX, imin(NMAX - 1, l)));
			}
			scale = sxl / sll;
			best = scale * sxl;
		}
	}
	return scale;
}

void mk_gguf_q6_k_row(const float *x, uint64_t n, uint8_t *out)
{
	int8_t L[QK];
	float scale[16];

	for (uint64_t b = 0; b < n / QK; b++, x += QK, out += 210) {
		uint8_t *ql = out, *qh = out + 128, *sc = out + 192;
		float top = 0, top_abs = 0;

		for (int g = 0; g < 16; g++) {
			scale[g] = fit_symmetric16(x + 16 * g, L + 16 * g);
			if (fabsf(scale[g]) > top_abs) {
				top_abs = fabsf(scale[g]);
				top = scale[g];
			}
		}
		if (top_abs < TINY) {
			memset(out, 0, 210);
			continue;
		}
		float inv = -128.f / top;

		put16(out + 208, mk_f32_to_f16(1 / inv));
		for (int g = 0; g < 16; g++)
			sc[g] = (uint8_t)(int8_t)imin(127, round_even(inv * scale[g]));
		float d_all = half_of(out + 208);

		for (int g = 0; g < 16; g++) {
			float d = d_all * (int8_t)sc[g];

			if (d == 0.0f)
				continue;
			for (int i = 0; i < 16; i++) {
				int l = round_even(x[16 * g + i] / d);

				L[16 * g + i] = (int8_t)(imax(-32, imin(31, l)) + 32);
			}
		}
		/* 128 values per half: low nibbles of values c and c+64 share
		 * a byte (c in 0..63), the top two bits of c, c+32, c+64, c+96
		 * share qh[c] (c in 0..31). */
		for (int h = 0; h < 2; h++) {
			const int8_t *v = L + 128 * h;
			uint8_t *lo = ql + 64 * h, *hb = qh + 32 * h;

			for (int i = 0; i < 32; i++) {
				lo[i] = (uint8_t)((v[i] & 0xF) | (v[i + 64] & 0xF) << 4);
				lo[i + 32] = (uint8_t)((v[i + 32] & 0xF) |
						       (v[i + 96] & 0xF) << 4);
				hb[i] = (uint8_t)((v[i] >> 4) | (v[i + 32] >> 4) << 2 |
						  (v[i + 64] >> 4) << 4 |
						  (v[i + 96] >> 4) << 6);
			}
		}
	}
}

/* ---- dispatch ---- */

int mk_gguf_quant_supported(int type)
{
	switch (type) {
	case MK_GGUF_F32: case MK_GGUF_F16: case MK_GGUF_BF16:
	case MK_GGUF_Q8_0: case MK_GGUF_Q5_0: case MK_GGUF_Q5_1:
	case MK_GGUF_Q4_K: case MK_GGUF_Q5_K: case MK_GGUF_Q6_K:
		return 1;
	default:
		return 0;
	}
}

int mk_gguf_quantize_row(int type, const float *x, uint64_t n, void *out,
			 struct mk_err *err)
{
	uint8_t *o = out;

	if (!mk_gguf_quant_supported(type))
		return mk_err_set(err, MK_EINVAL, "GGUF type %s (%d) cannot be "
				  "written by mk; it writes f32, f16, bf16, q8_0, "
				  "q5_0, q5_1, q4_K, q5_K and q6_K",
				  mk_gguf_type_name(type) ? mk_gguf_type_name(type)
				  : "unknown", type);
	if (n % mk_gguf_type_block(type))
		return mk_err_set(err, MK_EINVAL, "a row of %llu values cannot be "
				  "stored as %s: it needs a multiple of %u",
				  (unsigned long long)n, mk_gguf_type_name(type),
				  mk_gguf_type_block(type));
	switch (type) {
	case MK_GGUF_F32:
		memcpy(o, x, n * 4);    /* little-endian hosts only, as libmk */
		break;
	case MK_GGUF_F16:
		for (uint64_t i = 0; i < n; i++)
			put16(o + 2 * i, mk_f32_to_f16(x[i]));
		break;
	case MK_GGUF_BF16:
		for (uint64_t i = 0; i < n; i++)
			put16(o + 2 * i, mk_gguf_f32_to_bf16(x[i]));
		break;
	case MK_GGUF_Q8_0: mk_gguf_q8_0_row(x, n, o); break;
	case MK_GGUF_Q5_0: mk_gguf_q5_0_row(x, n, o); break;
	case MK_GGUF_Q5_1: mk_gguf_q5_1_row(x, n, o); break;
	case MK_GGUF_Q4_K: mk_gguf_q4_k_row(x, n, o); break;
	case MK_GGUF_Q5_K: mk_gguf_q5_k_row(x, n, o); break;
	case MK_GGUF_Q6_K: mk_gguf_q6_k_row(x, n, o); break;
	}
	return 0;
}
