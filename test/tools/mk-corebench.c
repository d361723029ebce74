/* mk-corebench - time the core byte kernels: CRC-32C and the float
 * conversions behind mk_dtype_convert.
 *
 *   mk-corebench [-m MIB] [-c KIB] [-r REPS] [-a OFF] [-i ISA] [NAME...]
 *
 * Each kernel runs REPS times (default 7) over MIB MiB of input (default
 * 256), either as one call on one big buffer (-c 0, the default) or as
 * calls over a KIB KiB buffer repeated until MIB MiB are done (in cache).
 * Prints one line per kernel: name, input GB/s (10^9 bytes/s) as the
 * median, min and max of the runs, and a checksum of the output so two
 * builds can be compared.  Buffers come from malloc, or with -a at OFF
 * bytes past a 64-byte boundary.  -i runs the conversions with the 16-bit
 * kernels of one instruction set (0 baseline, 1 AVX2, 2 AVX-512) instead
 * of the one mk_dtype_convert picks.  NAMEs pick kernels (crc32c
 * crc32c_sw bf16_f32 f32_bf16 f16_f32 f32_f16 bf16_f16 f16_bf16); default
 * all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "mk/dtype.h"
#include "core/hash.h"
#include "bench_util.h"

/* Exported by convert.c for tests and this tool; not in dtype.h. */
int mk_dtype_convert_isa(int isa, enum mk_dtype dst_dt, void *dst,
			 enum mk_dtype src_dt, const void *src, size_t n);

struct kern {
	const char *name;
	enum mk_dtype src, dst;         /* MK_DT_COUNT: a CRC */
	int sw;
};

static const struct kern kerns[] = {
	{ "crc32c", MK_DT_COUNT, MK_DT_COUNT, 0 },
	{ "crc32c_sw", MK_DT_COUNT, MK_DT_COUNT, 1 },
	{ "bf16_f32", MK_DT_BF16, MK_DT_F32, 0 },
	{ "f32_bf16", MK_DT_F32, MK_DT_BF16, 0 },
	{ "f16_f32", MK_DT_F16, MK_DT_F32, 0 },
	{ "f32_f16", MK_DT_F32, MK_DT_F16, 0 },
	{ "bf16_f16", MK_DT_BF16, MK_DT_F16, 0 },
	{ "f16_bf16", MK_DT_F16, MK_DT_BF16, 0 },
};


/* Plausible weights: normal-ish floats of magnitude ~1e-2, so that the
 * conversions see the common case (plus the odd special value). */
static void fill(enum mk_dtype dt, unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t r = next();
		float f = (float)((int32_t)(r >> 32)) * (1.0f / 2147483648.0f) * 0.05f;

		if ((r & 0xFFFF) == 0)
			f = f / 0.0f;   /* a rare inf or NaN */
		if (dt == MK_DT_F32)
			memcpy(p + 4 * i, &f, 4);
		else if (dt == MK_DT_BF16)
			mk_dtype_convert(MK_DT_BF16, p + 2 * i, MK_DT_F32, &f, 1);
		else if (dt == MK_DT_F16)
			mk_dtype_convert(MK_DT_F16, p + 2 * i, MK_DT_F32, &f, 1);
		else
			p[i] = (unsigned char)r;
	}
}

int main(int argc, char **argv)
{
	size_t mib = 256, kib = 0;
	int reps = 7, opt, off = -1, isa = -1;

	while ((opt = getopt(argc, argv, "m:c:r:a:i:")) != -1) {
		switch (opt) {
		case 'm': mib = strtoul(optarg, NULL, 10); break;
		case 'c': kib = strtoul(optarg, NULL, 10); break;
		case 'r': reps = atoi(optarg); break;
		case 'a': off = atoi(optarg) & 63; break;
		case 'i': isa = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: mk-corebench [-m MIB] [-c KIB] [-r REPS] [-a OFF] [-i ISA] [NAME...]\n");
			return 2;
		}
	}
	if (mib == 0 || reps < 1 || reps > 101)
		return 2;
	if (isa >= 0 && mk_dtype_convert_isa(isa, MK_DT_F32, &mib, MK_DT_F32, &mib, 0)) {
		fprintf(stderr, "mk-corebench: no ISA %d in this build or CPU\n", isa);
		return 1;
	}
	for (size_t k = 0; k < sizeof(kerns) / sizeof(kerns[0]); k++) {
		const struct kern *K = &kerns[k];
		int want = optind == argc;

		for (int a = optind; a < argc; a++)
			want |= !strcmp(argv[a], K->name);
		if (!want)
			continue;

		size_t total = mib << 20;       /* input bytes per run */
		size_t piece = kib ? kib << 10 : total;
		size_t ssz = K->src == MK_DT_COUNT ? 1 : mk_dtype_bits(K->src) / 8;
		size_t dsz = K->dst == MK_DT_COUNT ? 1 : mk_dtype_bits(K->dst) / 8;
		size_t n = piece / ssz;
		unsigned char *sa = malloc(piece + 128), *da = malloc(n * dsz + 129);
		unsigned char *s = sa, *d = da;
		double t[101];
		uint32_t sum = 0;

		if (off >= 0 && sa && da) {
			s = sa + ((64 - (uintptr_t)sa % 64) % 64) + off;
			d = da + ((64 - (uintptr_t)da % 64) % 64) + off;
		}
		if (!s || !d) {
			fprintf(stderr, "mk-corebench: out of memory\n");
			return 1;
		}
		rng = 0x9E3779B97F4A7C15u;     /* same input whatever runs */
		fill(K->src, s, n);
		memset(d, 0, n * dsz + 1);
		for (int r = 0; r < reps; r++) {
			double t0 = now();

			for (size_t done = 0; done < total; done += piece) {
				if (K->src == MK_DT_COUNT)
					sum ^= K->sw ? mk_crc32c_sw(sum, s, piece) :
						       mk_crc32c(sum, s, piece);
				else if (isa >= 0)
					mk_dtype_convert_isa(isa, K->dst, d, K->src, s, n);
				else
					mk_dtype_convert(K->dst, d, K->src, s, n);
			}
			t[r] = now() - t0;
		}
		if (K->src != MK_DT_COUNT)
			sum = mk_crc32c(0, d, n * dsz);
		qsort(t, reps, sizeof(t[0]), cmp_d);
		printf("%-10s  median %6.2f GB/s  (min %6.2f, max %6.2f)  %zu MiB in %s  out %08x\n",
		       K->name, total / t[reps / 2] * 1e-9, total / t[reps - 1] * 1e-9,
		       total / t[0] * 1e-9, mib, kib ? "cached pieces" : "one buffer", sum);
		free(sa);
		free(da);
	}
	return 0;
}
