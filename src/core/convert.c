/* convert.c - conversions among F64, F32, F16, BF16 and the F8 variants.
 *
 * Every rule here reproduces PyTorch's scalar c10 casts bit for bit:
 *   BF16 <- F32   round to nearest even; any NaN becomes 0x7FC0 (sign lost).
 *   F16  <- F32   round to nearest even, overflow to inf, subnormals kept;
 *                 any NaN becomes sign|0x7E00 (payload dropped).
 *   F32  <- F16   exact; a signalling NaN comes back quieted, payload kept
 *                 (c10 passes it through a float multiply).
 *   F32  <- BF16  exact bit shift (a signalling NaN stays signalling).
 *   F8            see the f8_* helpers below.
 *   F64  -> narrow types goes through float first (c10's types only have a
 *   float constructor, so static_cast from double rounds twice).
 *
 * Buffers are little-endian and possibly unaligned: every access is a
 * memcpy.  The F32<->BF16/F16 loops are branch-free selects over fixed-size
 * blocks so that gcc -O2 (very-cheap cost model) and clang vectorise them,
 * and on x86-64 they come in AVX-512, AVX2 and SSE2 builds (see KERN16).
 */
#include <string.h>
#include "mk/dtype.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LE16(x) __builtin_bswap16(x)
#define LE32(x) __builtin_bswap32(x)
#define LE64(x) __builtin_bswap64(x)
#else
#define LE16(x) (x)
#define LE32(x) (x)
#define LE64(x) (x)
#endif

/* Inner loops run over this many elements at a time: a constant trip count
 * is what lets gcc's -O2 vectoriser accept them. */
#define BLOCK 64

static inline uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline uint16_t ld16(const unsigned char *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return LE16(v);
}

static inline uint32_t ld32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return LE32(v);
}

static inline uint64_t ld64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return LE64(v);
}

static inline void st16(unsigned char *p, uint16_t v)
{
	v = LE16(v);
	memcpy(p, &v, 2);
}

static inline void st32(unsigned char *p, uint32_t v)
{
	v = LE32(v);
	memcpy(p, &v, 4);
}

static inline void st64(unsigned char *p, uint64_t v)
{
	v = LE64(v);
	memcpy(p, &v, 8);
}

/* ---- BF16 ---- */

/* All-ones when c holds: lets the hot loops select without branches,
 * which gcc's if-conversion does not always manage from ?: alone. */
static inline uint32_t mask(bool c)
{
	return -(uint32_t)c;
}

static inline uint32_t sel(uint32_t m, uint32_t a, uint32_t b)
{
	return (a & m) | (b & ~m);
}

static inline uint32_t bf16_to_bits(uint16_t h)
{
	return (uint32_t)h << 16;
}

static inline uint16_t bits_to_bf16(uint32_t u)
{
	/* Adding 0x7FFF plus the kept LSB rounds to nearest even; carries
	 * into the exponent give the next binade or inf, as they should. */
	uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1)) >> 16;

	return (uint16_t)sel(mask((u & 0x7FFFFFFFu) > 0x7F800000u), 0x7FC0, r);
}

/* ---- F16 ---- */

static inline uint32_t f16_to_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t a = h & 0x7FFF;
	/* Rebias the exponent from 15 to 127. */
	uint32_t norm = (a << 13) + (112u << 23);
	/* Exponent 31: inf or NaN; NaNs get the quiet bit. */
	uint32_t special = (a << 13) | 0x7F800000u | (mask(a > 0x7C00) & 0x400000u);
	/* Subnormals (and zero) are a * 2^-24: put a under the last place
	 * of 0.5 and take 0.5 away again, both steps exact. */
	uint32_t sub = f2u(u2f(a | 0x3F000000u) - 0.5f);

	return sign | sel(mask(a < 0x400), sub,
			  sel(mask(a >= 0x7C00), special, norm));
}

static inline uint16_t bits_to_f16(uint32_t u)
{
	uint32_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7FFFFFFFu;
	/* Normal range: rebias 127 -> 15, round on the 13 dropped bits. */
	uint32_t norm = (a - (112u << 23) + 0xFFFu + ((a >> 13) & 1)) >> 13;
	/* Below 2^-14: adding 0.5 puts the f16 subnormal step (2^-24) at
	 * the float's last place, so the FPU rounds to nearest even for us;
	 * a result of 0x400 is the smallest normal, which is also right. */
	uint32_t sub = f2u(u2f(a) + 0.5f) - 0x3F000000u;
	uint32_t r = sel(mask(a < 0x38800000u), sub, norm);

	r = sel(mask(a >= 0x47800000u), 0x7C00, r);     /* >= 65536: inf */
	r = sel(mask(a > 0x7F800000u), 0x7E00, r);      /* NaN */
	return (uint16_t)(sign | r);
}

/* ---- F8 ----
 *
 * The four sign-magnitude variants share one rounding core; they differ
 * in bias, mantissa width and what happens past the largest finite value:
 *   E4M3 (fn)   bias 7, |f| >= 480 (or inf/NaN) -> 0x7F|sign (NaN); the
 *               rounding itself turns (464, 480) into 0x7F too, and
 *               464 (a tie) into 448.
 *   E5M2        bias 15, |f| >= 65536 -> 0x7C|sign (inf), NaN -> 0x7F|sign;
 *               [61440, 65536) rounds up to inf.
 *   E4M3FNUZ    bias 8, |f| >= 256, inf or NaN -> 0x80; [248, 256) rounds
 *               into 0x80 as well; a result of -0 becomes +0.
 *   E5M2FNUZ    bias 16, |f| >= 65536 -> 0x80; [61440, 65536) likewise.
 * E8M0 is separate (f8e8m0_*).
 */
struct f8fmt {
	unsigned mbits;         /* stored mantissa bits */
	unsigned bias;
	uint32_t limit;         /* |f| bits at or above this are special */
	bool fnuz;              /* NaN is 0x80, no -0 */
};

static const struct f8fmt fmt_e4m3 = { 3, 7, 0x43F00000u, false };
static const struct f8fmt fmt_e5m2 = { 2, 15, 0x47800000u, false };
static const struct f8fmt fmt_e4m3fnuz = { 3, 8, 0x43800000u, true };
static const struct f8fmt fmt_e5m2fnuz = { 2, 16, 0x47800000u, true };

static uint8_t f8_encode(const struct f8fmt *fm, uint32_t u)
{
	uint32_t sign = (u >> 24) & 0x80;
	uint32_t a = u & 0x7FFFFFFFu;
	unsigned drop = 23 - fm->mbits;
	uint32_t r;

	if (a >= fm->limit) {
		if (fm->fnuz)
			return 0x80;
		if (fm->mbits == 2)             /* E5M2 has inf */
			return (uint8_t)(sign | (a > 0x7F800000u ? 0x7F : 0x7C));
		return (uint8_t)(sign | 0x7F);
	}
	if (a < (128u - fm->bias) << 23) {
		/* Subnormal target: a float whose last place equals the
		 * F8 subnormal step makes the FPU do the rounding. */
		uint32_t magic = (151u - fm->bias - fm->mbits) << 23;

		r = f2u(u2f(a) + u2f(magic)) - magic;
		if (fm->fnuz && r == 0)
			return 0;
	} else {
		r = (a - ((127u - fm->bias) << 23) + (1u << (drop - 1)) - 1
		     + ((a >> drop) & 1)) >> drop;
	}
	/* r can reach 0x80 on fnuz (that is their NaN) or the NaN/inf
	 * pattern on the others; or-ing the sign matches c10 either way. */
	return (uint8_t)(sign | r);
}

static uint32_t f8_decode(const struct f8fmt *fm, uint8_t v)
{
	uint32_t sign = (uint32_t)(v & 0x80) << 24;
	uint32_t a = v & 0x7F;
	uint32_t e = a >> fm->mbits, m = a & ((1u << fm->mbits) - 1);

	if (fm->fnuz) {
		if (v == 0x80)
			return 0x7F800001u;     /* c10's NaN, signalling bits */
	} else if (fm->mbits == 3) {
		if (a == 0x7F)
			return sign | 0x7FF00000u;
	} else if (e == 31) {
		/* E5M2 is the top byte of an F16. */
		return f16_to_bits((uint16_t)(v << 8));
	}
	if (e == 0) {
		/* m * 2^(1 - bias - mbits), exact in float. */
		uint32_t scale = (127u + 1 - fm->bias - fm->mbits) << 23;

		return sign | f2u((float)m * u2f(scale));
	}
	return sign | ((e + 127 - fm->bias) << 23) | (m << (23 - fm->mbits));
}

/* E8M0 (unsigned power of two, 255 = NaN).  c10 ignores the sign, maps
 * inf/NaN to 255 and rounds the mantissa away with the implicit bit as the
 * LSB: a normal float goes up whenever mantissa bit 22 is set (so
 * 1.5 * 2^e and above become 2^(e+1), and 1.5 * 2^127 becomes NaN); a
 * subnormal (LSB 0) goes up only when bit 22 and some lower bit are set. */
static uint8_t f8e8m0_encode(uint32_t u)
{
	uint32_t e = (u >> 23) & 0xFF;
	bool g = u & 0x400000, rs = u & 0x3FFFFF;

	if (e == 0xFF)
		return 0xFF;
	if (g && (rs || e > 0))
		e++;
	return (uint8_t)e;
}

static uint32_t f8e8m0_decode(uint8_t v)
{
	if (v == 0)
		return 0x00400000u;             /* 2^-127, a float subnormal */
	if (v == 0xFF)
		return 0x7F800001u;
	return (uint32_t)v << 23;
}

static const struct f8fmt *f8fmt_of(enum mk_dtype dt)
{
	switch (dt) {
	case MK_DT_F8_E4M3: return &fmt_e4m3;
	case MK_DT_F8_E5M2: return &fmt_e5m2;
	case MK_DT_F8_E4M3FNUZ: return &fmt_e4m3fnuz;
	case MK_DT_F8_E5M2FNUZ: return &fmt_e5m2fnuz;
	default: return NULL;
	}
}

static bool is_f8(enum mk_dtype dt)
{
	return dt == MK_DT_F8_E8M0 || f8fmt_of(dt);
}

/* ---- scalar API ---- */

float mk_bf16_to_f32(uint16_t h)
{
	return u2f(bf16_to_bits(h));
}

uint16_t mk_f32_to_bf16(float f)
{
	return bits_to_bf16(f2u(f));
}

float mk_f16_to_f32(uint16_t h)
{
	return u2f(f16_to_bits(h));
}

uint16_t mk_f32_to_f16(float f)
{
	return bits_to_f16(f2u(f));
}

float mk_f8_to_f32(enum mk_dtype dt, uint8_t v)
{
	const struct f8fmt *fm = f8fmt_of(dt);

	if (fm)
		return u2f(f8_decode(fm, v));
	if (dt == MK_DT_F8_E8M0)
		return u2f(f8e8m0_decode(v));
	return u2f(0x7FC00000u);
}

uint8_t mk_f32_to_f8(enum mk_dtype dt, float f)
{
	const struct f8fmt *fm = f8fmt_of(dt);

	if (fm)
		return f8_encode(fm, f2u(f));
	if (dt == MK_DT_F8_E8M0)
		return f8e8m0_encode(f2u(f));
	return 0;
}

/* ---- buffer kernels: float bits <-> one type ----
 * "enc" writes type `dt` from little-endian F32 at `s`; "dec" writes
 * little-endian F32 at `d` from type `dt`.  Both sides are bytes. */

#define BLOCKED(n, body)						\
	do {								\
		size_t i_ = 0;						\
		for (; i_ + BLOCK <= (n); i_ += BLOCK)			\
			for (size_t j_ = 0; j_ < BLOCK; j_++) {		\
				size_t i = i_ + j_;			\
				body;					\
			}						\
		for (; i_ < (n); i_++) {				\
			size_t i = i_;					\
			body;						\
		}							\
	} while (0)

/* The four 16-bit kernels are where mk-merge spends its conversion time.
 * On x86-64 each is built three times -- baseline SSE2, AVX2, and AVX-512
 * (F, VL, BW) kept to 256-bit vectors, which is as fast here as 512 and
 * spares older Xeons the wide-vector clock penalty (clang has no
 * per-function vector width, so its build uses 512) -- and every call
 * takes the best one the CPU has.  Their per-element helpers are twins of
 * the scalar ones above (which the scalar API keeps), with the same
 * results bit for bit -- test_dtype runs every build on every 16-bit code
 * and on millions of floats -- shaped for the vectoriser: every magnitude
 * compared is below 2^31, so the compares are signed (AVX2 has no
 * unsigned one), and the clamp to inf is a min(). */

static inline uint32_t min32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static inline uint16_t vbits_to_bf16(uint32_t u)
{
	int32_t a = (int32_t)(u & 0x7FFFFFFFu);
	uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1)) >> 16;

	return (uint16_t)sel(mask(a > 0x7F800000), 0x7FC0, r);
}

static inline uint32_t vf16_to_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	int32_t a = h & 0x7FFF;
	/* Rebias 15 -> 127; exponent 31 goes up by as much again, to 255,
	 * and its NaNs get the quiet bit. */
	uint32_t norm = (((uint32_t)a << 13) + (112u << 23) +
			 (mask(a >= 0x7C00) & (112u << 23))) |
			(mask(a > 0x7C00) & 0x400000u);
	uint32_t sub = f2u(u2f((uint32_t)a | 0x3F000000u) - 0.5f);

	return sign | sel(mask(a < 0x400), sub, norm);
}

static inline uint16_t vbits_to_f16(uint32_t u)
{
	uint32_t sign = (u >> 16) & 0x8000;
	int32_t a = (int32_t)(u & 0x7FFFFFFFu);
	/* From 65520 up (and for inf) the rounded value reaches 0x7C00:
	 * the min() makes all of them inf. */
	uint32_t norm = min32(((uint32_t)a - (112u << 23) + 0xFFFu +
			       (((uint32_t)a >> 13) & 1)) >> 13, 0x7C00);
	uint32_t sub = f2u(u2f((uint32_t)a) + 0.5f) - 0x3F000000u;
	uint32_t r = sel(mask(a < 0x38800000), sub, norm);

	return (uint16_t)(sign | sel(mask(a > 0x7F800000), 0x7E00, r));
}

typedef void kern_fn(unsigned char *restrict d, const unsigned char *restrict s,
		     size_t n);

typedef uint64_t kern_count_fn(unsigned char *restrict d, const unsigned char *restrict s, size_t n);

struct kern16 {
	kern_fn *enc_bf16, *dec_bf16, *enc_f16, *dec_f16;
	kern_count_fn *dec_bf16_count;
};

/* The kernels of struct kern16: n float32 bit patterns to 16-bit values
 * by conv (ENC16), or n 16-bit values to float32 bit patterns (DEC16). */
#define ENC16(name, attr, conv)						\
	attr static void name(unsigned char *restrict d, const unsigned char *restrict s, size_t n) \
	{								\
		BLOCKED(n, st16(d + 2 * i, conv(ld32(s + 4 * i))));	\
	}
#define DEC16(name, attr, conv)						\
	attr static void name(unsigned char *restrict d, const unsigned char *restrict s, size_t n) \
	{								\
		BLOCKED(n, st32(d + 4 * i, conv(ld16(s + 2 * i))));	\
	}

#define KERN16(isa, attr)						\
	ENC16(enc_bf16_##isa, attr, vbits_to_bf16)			\
	DEC16(dec_bf16_##isa, attr, bf16_to_bits)			\
	ENC16(enc_f16_##isa, attr, vbits_to_f16)			\
	DEC16(dec_f16_##isa, attr, vf16_to_bits)			\
	/* dec_bf16, and how many are NaN or infinite (exponent all	\
	 * ones), counted in 32-bit sums of blocks that cannot overflow */ \
	attr static uint64_t dec_bf16_count_##isa(unsigned char *restrict d, \
						  const unsigned char *restrict s, \
						  size_t n)		\
	{								\
		uint64_t bad = 0;					\
		for (size_t b_ = 0; b_ < n; b_ += 65536) {		\
			size_t m_ = n - b_ < 65536 ? n - b_ : 65536;	\
			uint32_t c_ = 0;				\
			for (size_t i = b_; i < b_ + m_; i++) {		\
				uint16_t v_ = ld16(s + 2 * i);		\
				st32(d + 4 * i, bf16_to_bits(v_));	\
				c_ += (v_ & 0x7F80u) == 0x7F80u;	\
			}						\
			bad += c_;					\
		}							\
		return bad;						\
	}								\
	static const struct kern16 kern16_##isa = {			\
		enc_bf16_##isa, dec_bf16_##isa, enc_f16_##isa, dec_f16_##isa, \
		dec_bf16_count_##isa,					\
	};

KERN16(base, )

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KERN16_X86 1
#ifdef __clang__
#define TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512vl,avx512bw")))
#else
#define TARGET_AVX512 __attribute__((target("avx2,avx512f,avx512vl,avx512bw," \
					    "prefer-vector-width=256")))
#endif
KERN16(avx2, __attribute__((target("avx2"))))
KERN16(avx512, TARGET_AVX512)
#endif

/* The kernels for instruction set `isa` (0 baseline, 1 AVX2, 2 AVX-512),
 * or NULL when this build or this CPU lacks it. */
static const struct kern16 *kern16_for(int isa)
{
#ifdef KERN16_X86
	__builtin_cpu_init();           /* cheap after the first time */
	if (isa == 2 && __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512bw"))
		return &kern16_avx512;
	if (isa == 1 && __builtin_cpu_supports("avx2"))
		return &kern16_avx2;
#endif
	return isa == 0 ? &kern16_base : NULL;
}

static const struct kern16 *kern16_best(void)
{
	const struct kern16 *k;

	for (int isa = 2; isa > 0; isa--)
		if ((k = kern16_for(isa)))
			return k;
	return &kern16_base;
}

static void enc_f64(unsigned char *restrict d, const unsigned char *restrict s,
		    size_t n)
{
	for (size_t i = 0; i < n; i++) {
		double x = u2f(ld32(s + 4 * i));
		uint64_t b;

		memcpy(&b, &x, 8);
		st64(d + 8 * i, b);
	}
}

static void dec_f64(unsigned char *restrict d, const unsigned char *restrict s,
		    size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t b = ld64(s + 8 * i);
		double x;

		memcpy(&x, &b, 8);
		st32(d + 4 * i, f2u((float)x));
	}
}

static void enc_f8(enum mk_dtype dt, unsigned char *restrict d,
		   const unsigned char *restrict s, size_t n)
{
	const struct f8fmt *fm = f8fmt_of(dt);

	if (fm)
		for (size_t i = 0; i < n; i++)
			d[i] = f8_encode(fm, ld32(s + 4 * i));
	else
		for (size_t i = 0; i < n; i++)
			d[i] = f8e8m0_encode(ld32(s + 4 * i));
}

static uint32_t f8_to_bits(enum mk_dtype dt, uint8_t v)
{
	const struct f8fmt *fm = f8fmt_of(dt);

	return fm ? f8_decode(fm, v) : f8e8m0_decode(v);
}

static void dec_f8(enum mk_dtype dt, unsigned char *restrict d,
		   const unsigned char *restrict s, size_t n)
{
	uint32_t lut[256];

	if (n < 1024) {
		for (size_t i = 0; i < n; i++)
			st32(d + 4 * i, f8_to_bits(dt, s[i]));
		return;
	}
	/* Long runs: 256 decodes up front beat n branchy ones. */
	for (unsigned v = 0; v < 256; v++)
		lut[v] = f8_to_bits(dt, (uint8_t)v);
	for (size_t i = 0; i < n; i++)
		st32(d + 4 * i, lut[s[i]]);
}

static void enc(const struct kern16 *k, enum mk_dtype dt,
		unsigned char *restrict d, const unsigned char *restrict s,
		size_t n)
{
	switch (dt) {
	case MK_DT_F32: memcpy(d, s, 4 * n); break;
	case MK_DT_F64: enc_f64(d, s, n); break;
	case MK_DT_F16: k->enc_f16(d, s, n); break;
	case MK_DT_BF16: k->enc_bf16(d, s, n); break;
	default: enc_f8(dt, d, s, n); break;
	}
}

static void dec(const struct kern16 *k, enum mk_dtype dt,
		unsigned char *restrict d, const unsigned char *restrict s,
		size_t n)
{
	switch (dt) {
	case MK_DT_F32: memcpy(d, s, 4 * n); break;
	case MK_DT_F64: dec_f64(d, s, n); break;
	case MK_DT_F16: k->dec_f16(d, s, n); break;
	case MK_DT_BF16: k->dec_bf16(d, s, n); break;
	default: dec_f8(dt, d, s, n); break;
	}
}

static bool convertible(enum mk_dtype dt)
{
	return dt == MK_DT_F64 || dt == MK_DT_F32 || dt == MK_DT_F16 ||
	       dt == MK_DT_BF16 || is_f8(dt);
}

static int convert(const struct kern16 *k, enum mk_dtype dst_dt, void *dst,
		   enum mk_dtype src_dt, const void *src, size_t n)
{
	unsigned char *d = dst;
	const unsigned char *s = src;
	size_t dsz, ssz;

	if (!convertible(dst_dt) || !convertible(src_dt))
		return -1;
	if (n == 0)
		return 0;
	dsz = mk_dtype_bits(dst_dt) / 8;
	ssz = mk_dtype_bits(src_dt) / 8;
	if (dst_dt == src_dt) {
		/* Byte copy, as torch's same-dtype copy: NaNs untouched. */
		memcpy(d, s, n * dsz);
		return 0;
	}
	if (src_dt == MK_DT_F32) {
		enc(k, dst_dt, d, s, n);
		return 0;
	}
	if (dst_dt == MK_DT_F32) {
		dec(k, src_dt, d, s, n);
		return 0;
	}
	/* Anything else goes through F32 in a stack block (F64 -> narrow
	 * rounds to float first, as c10 does). */
	for (size_t done = 0; done < n;) {
		float tmp[16 * BLOCK];
		size_t m = n - done < 16 * BLOCK ? n - done : 16 * BLOCK;

		dec(k, src_dt, (unsigned char *)tmp, s + done * ssz, m);
		enc(k, dst_dt, d + done * dsz, (const unsigned char *)tmp, m);
		done += m;
	}
	return 0;
}

int mk_dtype_convert(enum mk_dtype dst_dt, void *dst,
		     enum mk_dtype src_dt, const void *src, size_t n)
{
	return convert(kern16_best(), dst_dt, dst, src_dt, src, n);
}

int mk_dtype_convert_count(enum mk_dtype dst_dt, void *dst, enum mk_dtype src_dt, const void *src, size_t n,
			   uint64_t *nonfinite)
{
	const struct kern16 *k = kern16_best();
	int rc;

	if (dst_dt == MK_DT_F32 && src_dt == MK_DT_BF16) {
		*nonfinite += k->dec_bf16_count(dst, src, n);   /* one pass */
		return 0;
	}
	rc = convert(k, dst_dt, dst, src_dt, src, n);
	if (!rc)
		*nonfinite += mk_dtype_count_nonfinite(src_dt, src, n);
	return rc;
}

/* For test_dtype and mk-corebench (not in dtype.h): mk_dtype_convert with
 * the 16-bit kernels of instruction set `isa` (0 baseline, 1 AVX2,
 * 2 AVX-512); -1 when this build or CPU lacks it. */
int mk_dtype_convert_isa(int isa, enum mk_dtype dst_dt, void *dst,
			 enum mk_dtype src_dt, const void *src, size_t n);

int mk_dtype_convert_isa(int isa, enum mk_dtype dst_dt, void *dst,
			 enum mk_dtype src_dt, const void *src, size_t n)
{
	const struct kern16 *k = kern16_for(isa);

	return k ? convert(k, dst_dt, dst, src_dt, src, n) : -1;
}
