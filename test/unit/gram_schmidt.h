/* gram_schmidt.h - orthonormal columns for the tests that plant singular
 * vectors (test_lowrank, test_lora_extract): the k columns a[j * rows + i]
 * made orthonormal in place, modified Gram-Schmidt run twice per column
 * (one pass leaves float64 rounding in the dot products). */
#ifndef MK_TEST_GRAM_SCHMIDT_H
#define MK_TEST_GRAM_SCHMIDT_H

#include <math.h>
#include <stdint.h>

static inline void gram_schmidt(double *a, uint64_t rows, unsigned k)
{
	for (unsigned j = 0; j < k; j++)
		for (int pass = 0; pass < 2; pass++) {
			for (unsigned l = 0; l < j; l++) {
				double d = 0;
				for (uint64_t i = 0; i < rows; i++)
					d += a[l * rows + i] * a[j * rows + i];
				for (uint64_t i = 0; i < rows; i++)
					a[j * rows + i] -= d * a[l * rows + i];
			}
			double nn = 0;
			for (uint64_t i = 0; i < rows; i++)
				nn += a[j * rows + i] * a[j * rows + i];
			for (uint64_t i = 0; i < rows; i++)
				a[j * rows + i] /= sqrt(nn);
		}
}

#endif
