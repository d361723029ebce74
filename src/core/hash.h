/* hash.h - checksums and digests used by the stream and the plan.
 *
 *   crc32c   CRC-32C (Castagnoli, reflected poly 0x82F63B78, init and final
 *            xor 0xFFFFFFFF), the stream's per-frame checksum; uses the
 *            SSE4.2 crc32 instruction when the CPU has it.
 *   sha256   FIPS 180-4 SHA-256, for shard header hashes in the plan and
 *            the Hub's LFS file ids.
 *   sha1     FIPS 180-4 SHA-1, only for the git blob ids the Hugging Face
 *            Hub gives its small files (not for anything secret).
 */
#ifndef MK_HASH_H
#define MK_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Continue a CRC-32C: start with crc = 0; crc32c(crc32c(0,a),b) equals the
 * CRC of a followed by b.  crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t mk_crc32c(uint32_t crc, const void *buf, size_t len);

/* The two implementations behind mk_crc32c, for tests: the table one and
 * the SSE4.2 one (which itself falls back to the table without SSE4.2). */
uint32_t mk_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t mk_crc32c_sse42(uint32_t crc, const void *buf, size_t len);

/* What SHA-256 and SHA-1 keep between updates: the chaining value (SHA-1
 * uses five words of it), the bytes hashed so far and the partial block. */
struct mk_md {
	uint32_t h[8];
	uint64_t nbytes;
	uint8_t buf[64];
	size_t nbuf;
};

struct mk_sha256 { struct mk_md md; };
void mk_sha256_init(struct mk_sha256 *s);
void mk_sha256_update(struct mk_sha256 *s, const void *data, size_t len);
void mk_sha256_final(struct mk_sha256 *s, uint8_t out[32]);
/* One-shot digest. */
void mk_sha256(const void *data, size_t len, uint8_t out[32]);

struct mk_sha1 { struct mk_md md; };
void mk_sha1_init(struct mk_sha1 *s);
void mk_sha1_update(struct mk_sha1 *s, const void *data, size_t len);
void mk_sha1_final(struct mk_sha1 *s, uint8_t out[20]);

/* Lower-case hex of `n` bytes into out (2n+1 bytes, NUL-terminated). */
void mk_hex(const uint8_t *in, size_t n, char *out);

#endif
