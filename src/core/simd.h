/* simd.h - build the hot loops of the kernels more than once.  Internal.
 *
 * mk is built for generic x86-64 (SSE2), so that one binary runs
 * anywhere.  A function marked MK_HOT_CLONES is compiled three times (for
 * x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the generic target) and the
 * loader picks the best one for the CPU it runs on (GNU ifunc).  The
 * arithmetic is the same in each: the build has -ffp-contract=off, so no
 * clone fuses a multiply and an add, and vectorising elementwise loops
 * does not reorder any sum. */
#ifndef MK_CORE_SIMD_H
#define MK_CORE_SIMD_H

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MK_SIMD_SANITIZED 1
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__) && \
	!defined(MK_SIMD_SANITIZED)
#define MK_HOT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MK_HOT_CLONES
#endif

#include <stdint.h>
#include <string.h>

/* A BF16 value widened to float32 (exact: its bits are the float's upper
 * half), inline so that the loops that read BF16 as they go vectorise. */
static inline float mk__bf16_widen(uint16_t v)
{
	uint32_t u = (uint32_t)v << 16;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

#endif
