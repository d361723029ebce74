/* test_hash.c - CRC-32C (both paths) and SHA-256 against known values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "core/hash.h"

/* Exported by hash.c for this test; not in hash.h. */

static void test_crc32c_check_value(void **state)
{
	assert_int_equal(mk_crc32c(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(mk_crc32c_sw(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(mk_crc32c_sse42(0, "123456789", 9), 0xE3069283u);
	assert_int_equal(mk_crc32c(0, "", 0), 0);
	assert_int_equal(mk_crc32c(0x12345678u, "", 0), 0x12345678u);
}

/* RFC 3720 B.4 test vectors (iSCSI uses CRC-32C). */
static void test_crc32c_rfc3720(void **state)
{
	uint8_t buf[48];

	memset(buf, 0, 32);
	assert_int_equal(mk_crc32c(0, buf, 32), 0x8A9136AAu);
	memset(buf, 0xff, 32);
	assert_int_equal(mk_crc32c(0, buf, 32), 0x62A8AB43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(mk_crc32c(0, buf, 32), 0x46DD794Eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	assert_int_equal(mk_crc32c(0, buf, 32), 0x113FDB5Cu);
}

/* Both paths agree on every length and misalignment, and chaining
 * crc(crc(a), b) equals crc(a b). */
static void test_crc32c_paths_agree(void **state)
{
	size_t n = 4096 + 61;
	uint8_t *buf = malloc(n);
	uint32_t x = 1;

	assert_non_null(buf);
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
	}
	for (size_t off = 0; off < 9; off++)
		for (size_t len = 0; len + off <= n; len += len < 80 ? 1 : 127) {
			uint32_t a = mk_crc32c_sw(0, buf + off, len);
			uint32_t b = mk_crc32c_sse42(0, buf + off, len);
			assert_int_equal(a, b);
			assert_int_equal(mk_crc32c(0, buf + off, len), a);
		}
	for (size_t cut = 0; cut <= 100; cut++) {
		uint32_t whole = mk_crc32c(0, buf, 100);
		assert_int_equal(mk_crc32c(mk_crc32c(0, buf, cut), buf + cut, 100 - cut),
				 whole);
		assert_int_equal(mk_crc32c_sw(mk_crc32c_sse42(0, buf, cut), buf + cut,
					      100 - cut), whole);
	}
	free(buf);
}

/* ---- the three-chain SSE4.2 path on long buffers ----
 * mk_crc32c_sse42 runs three crc32 chains over adjacent stripes (3 x 128
 * and 3 x 8192 bytes per step) and joins them with tables; whatever the
 * length, alignment and starting value it must give the table path's
 * CRC, and both must give the bit-at-a-time definition. */

static uint64_t rng_state;

static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static uint8_t *random_buf(size_t n, uint64_t seed)
{
	uint8_t *b = malloc(n);

	assert_non_null(b);
	rng_state = seed;
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(rng() >> 29);
	return b;
}

/* The definition: reflected CRC-32C one bit at a time. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t len)
{
	uint32_t c = ~crc;

	while (len--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
	}
	return ~c;
}

static void check_paths(const uint8_t *p, size_t len, uint32_t init)
{
	uint32_t sw = mk_crc32c_sw(init, p, len);
	uint32_t hw = mk_crc32c_sse42(init, p, len);

	if (sw != hw)
		fail_msg("crc32c len %zu at %p from %08x: sse42 %08x, table %08x",
			 len, (const void *)p, init, hw, sw);
	assert_int_equal(mk_crc32c(init, p, len), sw);
}

#define BIG 100000

/* Several threads take the first long CRC at once (the tables behind the
 * three chains are built on first use).  Runs before the other tests. */
struct crc_job {
	const uint8_t *buf;
	size_t off;
	uint32_t got;
};

static void *crc_thread(void *arg)
{
	struct crc_job *j = arg;

	j->got = mk_crc32c_sse42(0, j->buf + j->off, BIG - j->off);
	return NULL;
}

static void test_crc32c_first_use_threads(void **state)
{
	uint8_t *buf = random_buf(BIG, 99);
	struct crc_job job[6];
	pthread_t th[6];

	for (int i = 0; i < 6; i++) {
		job[i] = (struct crc_job){ .buf = buf, .off = (size_t)i * 1001 };
		assert_int_equal(pthread_create(&th[i], NULL, crc_thread, &job[i]), 0);
	}
	for (int i = 0; i < 6; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(job[i].got,
				 mk_crc32c_sw(0, buf + job[i].off, BIG - job[i].off));
	}
	free(buf);
}

static void test_crc32c_long_lengths(void **state)
{
	uint8_t *buf = random_buf(BIG + 64, 1);
	static const size_t offs[] = { 0, 1, 3, 5, 7, 8, 13 };
	size_t nlen = 0;

	/* Every length up to 1200 (one to three short steps and every
	 * tail) at sixteen misalignments. */
	for (size_t off = 0; off < 16; off++)
		for (size_t len = 0; len <= 1200; len++, nlen++)
			check_paths(buf + off, len, (uint32_t)(len * 2654435761u));
	/* Around every multiple of a short step up to 30000 and of a long
	 * step up to BIG, where the loops hand over to each other. */
	for (size_t m = 384; m <= 30000; m += 384)
		for (size_t d = 0; d <= 18; d++)
			for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k += 3) {
				size_t len = m + d - 9;

				check_paths(buf + offs[k], len, (uint32_t)rng());
				nlen++;
			}
	for (size_t m = 24576; m <= BIG; m += 24576)
		for (size_t d = 0; d <= 18; d++)
			for (size_t k = 0; k < sizeof offs / sizeof offs[0]; k++) {
				size_t len = m + d - 9;

				check_paths(buf + offs[k], len, (uint32_t)rng());
				nlen++;
			}
	/* Random lengths and misalignments up to BIG. */
	for (int i = 0; i < 300; i++) {
		size_t off = rng() % 64, len = rng() % (BIG + 1);

		check_paths(buf + off, len, i & 1 ? (uint32_t)rng() : 0);
		nlen++;
	}
	assert_true(nlen > 20000);
	free(buf);
}

/* Independent of both implementations: the bit-at-a-time definition over
 * long buffers, and a few fixed values. */
static void test_crc32c_long_definition(void **state)
{
	uint8_t *buf = random_buf(BIG + 16, 7);
	static const size_t lens[] = { 384, 1000, 8192, 8224, 24576, 24577,
				       65536 + 32, BIG };

	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (size_t off = 0; off < 16; off += 5) {
			uint32_t want = crc32c_bitwise(0x5EED0000u + (uint32_t)i,
						       buf + off, lens[i]);

			assert_int_equal(mk_crc32c_sse42(0x5EED0000u + (uint32_t)i,
							 buf + off, lens[i]), want);
			assert_int_equal(mk_crc32c_sw(0x5EED0000u + (uint32_t)i,
						      buf + off, lens[i]), want);
		}
	/* A megabyte of zeros and of 0xFF, and one of bytes i & 0xff,
	 * against the definition. */
	{
		size_t n = 1u << 20;
		uint8_t *b = malloc(n);

		assert_non_null(b);
		for (int v = 0; v < 3; v++) {
			for (size_t i = 0; i < n; i++)
				b[i] = v == 0 ? 0 : v == 1 ? 0xFF : (uint8_t)i;
			assert_int_equal(mk_crc32c(0, b, n), crc32c_bitwise(0, b, n));
		}
		free(b);
	}
	assert_int_equal(mk_crc32c_sse42(0, "123456789", 9), 0xE3069283u);
	free(buf);
}

/* Cutting a long buffer anywhere and chaining gives the whole CRC, mixing
 * the two paths. */
static void test_crc32c_long_chaining(void **state)
{
	uint8_t *buf = random_buf(BIG, 3);
	uint32_t whole = mk_crc32c_sw(0, buf, BIG);

	for (int i = 0; i < 200; i++) {
		size_t cut = i < 100 ? (size_t)i * 997 : rng() % (BIG + 1);
		uint32_t a = mk_crc32c_sse42(0, buf, cut);

		assert_int_equal(mk_crc32c_sse42(a, buf + cut, BIG - cut), whole);
		assert_int_equal(mk_crc32c_sw(a, buf + cut, BIG - cut), whole);
		assert_int_equal(mk_crc32c_sse42(mk_crc32c_sw(0, buf, cut), buf + cut,
						 BIG - cut), whole);
	}
	free(buf);
}

static void check_sha(const void *data, size_t len, const char *hex)
{
	uint8_t d[32];
	char h[65];

	mk_sha256(data, len, d);
	mk_hex(d, 32, h);
	assert_string_equal(h, hex);
}

/* FIPS 180-4 / NIST CAVP example vectors. */
static void test_sha256_vectors(void **state)
{
	check_sha("abc", 3,
		  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	check_sha("", 0,
		  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	check_sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
		  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	check_sha("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
		  "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu", 112,
		  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_sha256_million_a(void **state)
{
	struct mk_sha256 s;
	uint8_t chunk[1000], d[32];
	char h[65];
	char *all = malloc(1000000);

	assert_non_null(all);
	memset(chunk, 'a', sizeof(chunk));
	mk_sha256_init(&s);
	for (int i = 0; i < 1000; i++)
		mk_sha256_update(&s, chunk, sizeof(chunk));
	mk_sha256_final(&s, d);
	mk_hex(d, 32, h);
	assert_string_equal(h,
		"cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	memset(all, 'a', 1000000);
	check_sha(all, 1000000,
		  "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
	free(all);
}

static void check_sha1(const void *data, size_t len, size_t step, const char *hex)
{
	struct mk_sha1 s;
	uint8_t d[20];
	char h[41];
	const uint8_t *p = data;

	mk_sha1_init(&s);
	for (size_t at = 0; at < len; at += step)
		mk_sha1_update(&s, p + at, len - at < step ? len - at : step);
	mk_sha1_final(&s, d);
	mk_hex(d, 20, h);
	assert_string_equal(h, hex);
}

/* FIPS 180-4 example vectors, a million 'a' fed in odd pieces, and the
 * git blob id of "hello world\n" (what `git hash-object` prints). */
static void test_sha1_vectors(void **state)
{
	char *all = malloc(1000000);

	(void)state;
	assert_non_null(all);
	check_sha1("abc", 3, 3, "a9993e364706816aba3e25717850c26c9cd0d89d");
	check_sha1("", 0, 1, "da39a3ee5e6b4b0d3255bfef95601890afd80709");
	check_sha1("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, 5,
		   "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
	memset(all, 'a', 1000000);
	check_sha1(all, 1000000, 997, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
	check_sha1(all, 1000000, 1000000, "34aa973cd4c4daa4f61eeb2bdbad27316534016f");
	free(all);
	check_sha1("blob 12\0hello world\n", 20, 7, "3b18e512dba79e4c8300dd08aeb37f8e728b8dad");
}

/* Feeding in odd-sized pieces gives the one-shot digest. */
static void test_sha256_incremental(void **state)
{
	uint8_t buf[1000], a[32], b[32];
	struct mk_sha256 s;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7 + 3);
	mk_sha256(buf, sizeof(buf), a);
	for (size_t step = 1; step < 130; step += 7) {
		size_t at = 0;

		mk_sha256_init(&s);
		while (at < sizeof(buf)) {
			size_t k = sizeof(buf) - at < step ? sizeof(buf) - at : step;
			mk_sha256_update(&s, buf + at, k);
			at += k;
		}
		mk_sha256_final(&s, b);
		assert_memory_equal(a, b, 32);
	}
	/* Message lengths around the padding boundary (55, 56, 63, 64). */
	for (size_t len = 50; len < 70; len++) {
		mk_sha256_init(&s);
		mk_sha256_update(&s, buf, len / 2);
		mk_sha256_update(&s, buf + len / 2, len - len / 2);
		mk_sha256_final(&s, b);
		mk_sha256(buf, len, a);
		assert_memory_equal(a, b, 32);
	}
}

static void test_hex(void **state)
{
	const uint8_t in[] = { 0x00, 0x01, 0xab, 0xff, 0x10 };
	char out[11];

	memset(out, 'x', sizeof(out));
	mk_hex(in, 5, out);
	assert_string_equal(out, "0001abff10");
	mk_hex(in, 0, out);
	assert_string_equal(out, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_first_use_threads),
		cmocka_unit_test(test_crc32c_check_value),
		cmocka_unit_test(test_crc32c_rfc3720),
		cmocka_unit_test(test_crc32c_paths_agree),
		cmocka_unit_test(test_crc32c_long_lengths),
		cmocka_unit_test(test_crc32c_long_definition),
		cmocka_unit_test(test_crc32c_long_chaining),
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_million_a),
		cmocka_unit_test(test_sha256_incremental),
		cmocka_unit_test(test_sha1_vectors),
		cmocka_unit_test(test_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
