/* fp8block.c - block-scaled FP8 quantization, transformers' rule
 * (fp8block.h). */
#include <math.h>
#include "core/fp8block.h"
#include "mk/dtype.h"

void mk_fp8_block_row(float *v, uint64_t rows, uint64_t cols, uint32_t bcols, uint8_t *q, float *inv)
{
	uint64_t nb = (cols + bcols - 1) / bcols;

	for (uint64_t b = 0; b < nb; b++) {
		uint64_t c0 = b * bcols, c1 = c0 + bcols < cols ? c0 + bcols : cols;
		float amax = 0.0f, k;
		for (uint64_t r = 0; r < rows; r++)
			for (uint64_t c = c0; c < c1; c++) {
				float a = fabsf(v[r * cols + c]);
				amax = a > amax ? a : amax;
			}
		/* volatile: the reciprocal rounded to float32 before the product */
		volatile float rcp = amax > 0.0f ? 1.0f / amax : 0.0f;
		k = amax > 0.0f ? rcp * MK_FP8_E4M3_MAX : 1.0f;
		inv[b] = 1.0f / k;
		for (uint64_t r = 0; r < rows; r++)
			for (uint64_t c = c0; c < c1; c++) {
				float x = v[r * cols + c] * k;
				v[r * cols + c] = x > MK_FP8_E4M3_MAX ? MK_FP8_E4M3_MAX :
						  x < -MK_FP8_E4M3_MAX ? -MK_FP8_E4M3_MAX : x;
			}
	}
	(void)mk_dtype_convert(MK_DT_F8_E4M3, q, MK_DT_F32, v, rows * cols);
}
