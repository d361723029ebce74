/* gta_simd.c - which of the task-arithmetic family's primitives
 * (gta_simd.h) run: the CPU asked once, the table filled from the
 * instruction sets it has, up to the limit the tests set. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "gta.h"
#include "gta_simd.h"

struct mk_gta_simd mk_gta_simd;
float mk_gta_byte_f32[256][8];

static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static bool cpu_avx512, cpu_avx512dq, cpu_avx512bw, cpu_avx2;
static int simd_top = MK_GTA_SIMD_AVX512;

/* The table of the sets at most level top, as far as the CPU has them:
 * the C, then each entry of a wider set over it.  The AVX-512 entries
 * that need DQ or BW (and VL, which every CPU with those has and their
 * code is compiled for) only where the CPU has them too; else the AVX2
 * ones stay. */
static void simd_set(int top)
{
	struct mk_gta_simd t;

	simd_top = top;
	mk_gta_simd_take_c(&t);
#if MK_GTA_X86
	if (cpu_avx2 && top >= MK_GTA_SIMD_AVX2)
		mk_gta_simd_take_avx2(&t);
	if (cpu_avx512 && top >= MK_GTA_SIMD_AVX512)
		mk_gta_simd_take_avx512(&t, cpu_avx512dq, cpu_avx512bw);
#endif
	mk_gta_simd = t;
}

static void simd_make(void)
{
#if MK_GTA_X86
	__builtin_cpu_init();
	cpu_avx512 = __builtin_cpu_supports("avx512f");
	cpu_avx512dq = cpu_avx512 && __builtin_cpu_supports("avx512dq") &&
		       __builtin_cpu_supports("avx512vl");
	cpu_avx512bw = cpu_avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
	cpu_avx2 = __builtin_cpu_supports("avx2");
	if (cpu_avx2)
		mk_gta_simd_avx2_tables();
#endif
	for (unsigned v = 0; v < 256; v++)
		for (unsigned q = 0; q < 8; q++)
			mk_gta_byte_f32[v][q] = (v >> q) & 1 ? 1.0f : 0.0f;
	simd_set(simd_top);
}

void mk_gta_simd_init(void)
{
	pthread_once(&simd_once, simd_make);
}

int mk_gta_simd_limit(int top)
{
	int was;

	mk_gta_simd_init();
	was = simd_top;
	simd_set(top);
	return was;
}
