/* mxfp4.c - MXFP4 quantization of a group of 32 values (mxfp4.h). */
#include <math.h>
#include <string.h>
#include "core/mxfp4.h"

static uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* One value, already divided by the group's scale, to its 4-bit code. */
static uint8_t e2m1(float q)
{
	uint32_t u = f2u(q), sign = u >> 31, e = (u >> 23) & 0xff, m = u & 0x7fffff, t;

	if (e < 127) {           /* below 1: E2M1's subnormal 0.5, or 0 */
		uint32_t sh = 126 - e;
		m = sh >= 31 ? 0 : (0x400000u | (m >> 1)) >> sh;
	}
	e = (e > 126 ? e : 126) - 126;
	t = (((e << 2) | (m >> 21)) + 1) >> 1;
	return (uint8_t)(sign << 3 | (t < 7 ? t : 7));
}

void mk_mxfp4_group(const float *v, uint64_t stride, uint8_t codes[16], uint8_t *scale)
{
	float amax = 0.0f, qs;
	uint32_t k;

	for (unsigned j = 0; j < MK_MXFP4_GROUP; j++) {
		float a = fabsf(v[j * stride]);
		amax = a > amax ? a : amax;
	}
	/* volatile: the quotient rounded to float32 before its bits are read */
	volatile float ds = amax / 6.0f;
	k = (f2u(ds) + 0x7fffffu) & 0x7f800000u;
	qs = k ? 1.0f / u2f(k) : 0.0f;
	for (unsigned j = 0; j < MK_MXFP4_GROUP; j += 2)
		codes[j / 2] = (uint8_t)(e2m1(v[j * stride] * qs) | e2m1(v[(j + 1) * stride] * qs) << 4);
	*scale = (uint8_t)(k >> 23);
}
