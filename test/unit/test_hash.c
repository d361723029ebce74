/* test_hash.c - CRC-32C (both paths) and SHA-256 against known values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include "mk/hash.h"

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
		cmocka_unit_test(test_crc32c_check_value),
		cmocka_unit_test(test_crc32c_rfc3720),
		cmocka_unit_test(test_crc32c_paths_agree),
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_sha256_million_a),
		cmocka_unit_test(test_sha256_incremental),
		cmocka_unit_test(test_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
