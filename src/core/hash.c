/* hash.c - CRC-32C (table, or the SSE4.2 crc32 instruction, three chains
 * at a time on long buffers) and SHA-256. */
#include <pthread.h>
#include <string.h>
#include "core/hash.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
#endif
#ifdef __x86_64__
#define HAVE_CRC3_PATH 1        /* three chains of crc32q (64-bit only) */
#endif

/* Both CRC paths are exported (undeclared in hash.h) so the unit test can
 * check them against each other. */

/* ---- CRC-32C ---- */

#define CRC32C_POLY 0x82F63B78u

/* Slicing-by-8 tables: tab[0] is the classic byte table, tab[k][i] the
 * CRC of byte i followed by k zero bytes.  Built once (pthread_once). */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_tab_once = PTHREAD_ONCE_INIT;

static void crc_tab_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_tab[0][i] = c;
	}
	for (unsigned i = 0; i < 256; i++)
		for (int k = 1; k < 8; k++)
			crc_tab[k][i] = (crc_tab[k - 1][i] >> 8) ^
					crc_tab[0][crc_tab[k - 1][i] & 0xff];
}

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

uint32_t mk_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	uint32_t c = ~crc;

	pthread_once(&crc_tab_once, crc_tab_init);
	while (len >= 8) {
		uint64_t v = load_le64(p) ^ c;
		c = crc_tab[7][v & 0xff] ^ crc_tab[6][(v >> 8) & 0xff] ^
		    crc_tab[5][(v >> 16) & 0xff] ^ crc_tab[4][(v >> 24) & 0xff] ^
		    crc_tab[3][(v >> 32) & 0xff] ^ crc_tab[2][(v >> 40) & 0xff] ^
		    crc_tab[1][(v >> 48) & 0xff] ^ crc_tab[0][v >> 56];
		p += 8;
		len -= 8;
	}
	while (len--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
	return ~c;
}

/* ---- CRC-32C, three chains at once ----
 *
 * The crc32 instruction has a latency of three cycles but issues every
 * cycle, so one dependency chain uses a third of it.  Long buffers are cut
 * into steps of three adjacent stripes of `len` bytes each, run as three
 * independent chains from a zero register and joined with "append n zero
 * bytes" operators: the register update is linear over GF(2), so for a
 * register r and stripes A, B, C
 *     reg(r, A B C) = Z(3 len)(r) ^ Z(2 len)(reg(0, A)) ^ Z(len)(reg(0, B))
 *                     ^ reg(0, C)
 * where Z(n) is the (linear) effect of n zero bytes on the register.  Each
 * Z is applied through a 4 x 256 table, one entry per byte of the
 * register, built on first use (24 KiB in all, a fraction of a ms).
 * Two stripe lengths: long for megabyte frames, short so that frames of a
 * few KiB gain too; what is left goes through one chain, so that the
 * result is the same CRC as the table path's for every length. */

#ifdef HAVE_CRC3_PATH
#define CRC_LONG 8192
#define CRC_SHORT 128

struct crc_zeros {
	uint32_t t[4][256];
};

/* Z(n LONG) and Z(n SHORT) for n = 1, 2, 3 */
static struct crc_zeros crc_z_long[3], crc_z_short[3];
static pthread_once_t crc_z_once = PTHREAD_ONCE_INIT;

/* The register after `n` zero bytes (n a multiple of 8), from register c:
 * the slicing step with a zero word, i.e. v = c. */
static uint32_t crc_zeros_sw(uint32_t c, size_t n)
{
	for (; n >= 8; n -= 8)
		c = crc_tab[7][c & 0xff] ^ crc_tab[6][(c >> 8) & 0xff] ^
		    crc_tab[5][(c >> 16) & 0xff] ^ crc_tab[4][c >> 24];
	return c;
}

static inline uint32_t crc_zeros_apply(const struct crc_zeros *z, uint32_t c)
{
	return z->t[0][c & 0xff] ^ z->t[1][(c >> 8) & 0xff] ^
	       z->t[2][(c >> 16) & 0xff] ^ z->t[3][c >> 24];
}

/* z[0..2] = Z(len), Z(2 len), Z(3 len).  A table from the images of the
 * 32 unit registers (col): every byte value of every register byte is the
 * xor of its bits' images.  Z(len) by running zeros through the slicing
 * tables, the others as Z(len) after the one before. */
static void crc_zeros_build(struct crc_zeros z[3], size_t len)
{
	uint32_t col[32];

	for (int b = 0; b < 32; b++)
		col[b] = crc_zeros_sw(1u << b, len);
	for (int m = 0; m < 3; m++) {
		if (m)
			for (int b = 0; b < 32; b++)
				col[b] = crc_zeros_apply(&z[0], col[b]);
		for (int k = 0; k < 4; k++) {
			z[m].t[k][0] = 0;
			for (unsigned v = 1; v < 256; v++)
				z[m].t[k][v] = z[m].t[k][v & (v - 1)] ^
					       col[8 * k + __builtin_ctz(v)];
		}
	}
}

static void crc_z_init(void)
{
	pthread_once(&crc_tab_once, crc_tab_init);
	crc_zeros_build(crc_z_long, CRC_LONG);
	crc_zeros_build(crc_z_short, CRC_SHORT);
}

/* One step: three stripes of `len` bytes (a multiple of 8) from p.  The
 * running register c joins through Z(3 len) rather than seeding the first
 * chain, so that a step's table look-ups overlap the next step's crc32
 * chains instead of delaying them. */
__attribute__((target("sse4.2"), always_inline))
static inline uint32_t crc32c_hw3(uint32_t c, const uint8_t *p, size_t len,
				  const struct crc_zeros z[3])
{
	uint64_t c0 = 0, c1 = 0, c2 = 0;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t v0, v1, v2;

		memcpy(&v0, p + i, 8);
		memcpy(&v1, p + len + i, 8);
		memcpy(&v2, p + 2 * len + i, 8);
		c0 = _mm_crc32_u64(c0, v0);
		c1 = _mm_crc32_u64(c1, v1);
		c2 = _mm_crc32_u64(c2, v2);
	}
	return crc_zeros_apply(&z[2], c) ^ crc_zeros_apply(&z[1], (uint32_t)c0) ^
	       crc_zeros_apply(&z[0], (uint32_t)c1) ^ (uint32_t)c2;
}
#endif /* HAVE_CRC3_PATH */

#ifdef HAVE_SSE42_PATH
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t len)
{
	uint32_t c = ~crc;

#ifdef HAVE_CRC3_PATH
	if (len >= 3 * CRC_SHORT) {
		pthread_once(&crc_z_once, crc_z_init);
		/* Align the loads (it changes nothing but speed). */
		while ((uintptr_t)p & 7) {
			c = _mm_crc32_u8(c, *p++);
			len--;
		}
		while (len >= 3 * CRC_LONG) {
			c = crc32c_hw3(c, p, CRC_LONG, crc_z_long);
			p += 3 * CRC_LONG;
			len -= 3 * CRC_LONG;
		}
		while (len >= 3 * CRC_SHORT) {
			c = crc32c_hw3(c, p, CRC_SHORT, crc_z_short);
			p += 3 * CRC_SHORT;
			len -= 3 * CRC_SHORT;
		}
	}
#endif
#ifdef __x86_64__
	if (len >= 8) {
		uint64_t c64 = c;       /* no zero-extension inside the chain */

		do {
			uint64_t v;
			memcpy(&v, p, 8);
			c64 = _mm_crc32_u64(c64, v);
			p += 8;
			len -= 8;
		} while (len >= 8);
		c = (uint32_t)c64;
	}
#endif
	while (len >= 4) {
		uint32_t v;
		memcpy(&v, p, 4);
		c = _mm_crc32_u32(c, v);
		p += 4;
		len -= 4;
	}
	while (len--)
		c = _mm_crc32_u8(c, *p++);
	return ~c;
}

static int have_sse42(void)
{
	return __builtin_cpu_supports("sse4.2");
}
#endif

/* The SSE4.2 path when the CPU has it, else the table (so calling this on
 * an old CPU is always safe). */
uint32_t mk_crc32c_sse42(uint32_t crc, const void *buf, size_t len)
{
#ifdef HAVE_SSE42_PATH
	if (have_sse42())
		return crc32c_hw(crc, buf, len);
#endif
	return mk_crc32c_sw(crc, buf, len);
}

uint32_t mk_crc32c(uint32_t crc, const void *buf, size_t len)
{
	return mk_crc32c_sse42(crc, buf, len);
}

/* ---- what SHA-256 and SHA-1 share ---- */

/* block: one 64-byte block into the chaining value h. */
typedef void md_block_fn(uint32_t *h, const uint8_t *p);

static void md_init(struct mk_md *m, const uint32_t *iv, size_t nwords)
{
	memset(m, 0, sizeof(*m));
	memcpy(m->h, iv, nwords * sizeof(*iv));
}

/* The 64-byte block buffering. */
static void md_update(struct mk_md *m, md_block_fn *block, const void *data, size_t len)
{
	const uint8_t *p = data;

	m->nbytes += len;
	if (m->nbuf) {
		size_t k = 64 - m->nbuf < len ? 64 - m->nbuf : len;
		memcpy(m->buf + m->nbuf, p, k);
		m->nbuf += k;
		p += k;
		len -= k;
		if (m->nbuf < 64)
			return;
		block(m->h, m->buf);
		m->nbuf = 0;
	}
	for (; len >= 64; p += 64, len -= 64)
		block(m->h, p);
	memcpy(m->buf, p, len);
	m->nbuf = len;
}

/* The final padding (a 1 bit, zeros, the message's length in bits,
 * big-endian), then the digest: the first nwords words of h, big-endian.
 * m is wiped. */
static void md_final(struct mk_md *m, md_block_fn *block, uint8_t *out, size_t nwords)
{
	uint64_t bits = m->nbytes * 8;
	size_t n = m->nbuf;

	m->buf[n++] = 0x80;
	if (n > 56) {
		memset(m->buf + n, 0, 64 - n);
		block(m->h, m->buf);
		n = 0;
	}
	memset(m->buf + n, 0, 56 - n);
	for (int i = 0; i < 8; i++)
		m->buf[56 + i] = (uint8_t)(bits >> (56 - 8 * i));
	block(m->h, m->buf);
	for (size_t i = 0; i < nwords; i++) {
		out[4 * i] = (uint8_t)(m->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(m->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(m->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)m->h[i];
	}
	memset(m, 0, sizeof(*m));
}

/* ---- SHA-256 (FIPS 180-4) ---- */

static const uint32_t sha_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror32(uint32_t x, unsigned n)
{
	return x >> n | x << (32 - n);
}

static void sha_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, hh;

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ror32(w[i - 15], 7) ^ ror32(w[i - 15], 18) ^ w[i - 15] >> 3;
		uint32_t s1 = ror32(w[i - 2], 17) ^ ror32(w[i - 2], 19) ^ w[i - 2] >> 10;
		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	a = h[0]; b = h[1]; c = h[2]; d = h[3];
	e = h[4]; f = h[5]; g = h[6]; hh = h[7];
	for (int i = 0; i < 64; i++) {
		uint32_t s1 = ror32(e, 6) ^ ror32(e, 11) ^ ror32(e, 25);
		uint32_t ch = (e & f) ^ (~e & g);
		uint32_t t1 = hh + s1 + ch + sha_k[i] + w[i];
		uint32_t s0 = ror32(a, 2) ^ ror32(a, 13) ^ ror32(a, 22);
		uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
		uint32_t t2 = s0 + maj;
		hh = g; g = f; f = e; e = d + t1;
		d = c; c = b; b = a; a = t1 + t2;
	}
	h[0] += a; h[1] += b; h[2] += c; h[3] += d;
	h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void mk_sha256_init(struct mk_sha256 *s)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	md_init(&s->md, iv, 8);
}

void mk_sha256_update(struct mk_sha256 *s, const void *data, size_t len)
{
	md_update(&s->md, sha_block, data, len);
}

void mk_sha256_final(struct mk_sha256 *s, uint8_t out[32])
{
	md_final(&s->md, sha_block, out, 8);
}

void mk_sha256(const void *data, size_t len, uint8_t out[32])
{
	struct mk_sha256 s;

	mk_sha256_init(&s);
	mk_sha256_update(&s, data, len);
	mk_sha256_final(&s, out);
}

void mk_hex(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * n] = '\0';
}

/* ---- SHA-1 (FIPS 180-4 section 6.1) ---- */

static uint32_t rol32(uint32_t x, unsigned n)
{
	return (x << n) | (x >> (32 - n));
}

static void sha1_block(uint32_t h[5], const uint8_t *p)
{
	uint32_t w[80], a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		       (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (int i = 16; i < 80; i++)
		w[i] = rol32(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
	for (int i = 0; i < 80; i++) {
		uint32_t f, k;
		if (i < 20) {
			f = (b & c) | (~b & d);
			k = 0x5a827999;
		} else if (i < 40) {
			f = b ^ c ^ d;
			k = 0x6ed9eba1;
		} else if (i < 60) {
			f = (b & c) | (b & d) | (c & d);
			k = 0x8f1bbcdc;
		} else {
			f = b ^ c ^ d;
			k = 0xca62c1d6;
		}
		uint32_t t = rol32(a, 5) + f + e + k + w[i];
		e = d; d = c; c = rol32(b, 30); b = a; a = t;
	}
	h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
}

void mk_sha1_init(struct mk_sha1 *s)
{
	static const uint32_t iv[5] = { 0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476, 0xc3d2e1f0 };

	md_init(&s->md, iv, 5);
}

void mk_sha1_update(struct mk_sha1 *s, const void *data, size_t len)
{
	md_update(&s->md, sha1_block, data, len);
}

void mk_sha1_final(struct mk_sha1 *s, uint8_t out[20])
{
	md_final(&s->md, sha1_block, out, 5);
}
