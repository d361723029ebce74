/* st_impl.h - internals of src/io shared by its files (not installed). */
#ifndef MK_ST_IMPL_H
#define MK_ST_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include "io/safetensors.h"
#include "core/jsonscan.h"

/* Rust's str::from_utf8 rules: no overlongs, no surrogates, <= U+10FFFF.
 * Returns the offset of the first bad byte, or len when all is valid. */
size_t mk__st_utf8_check(const uint8_t *s, size_t len);

/* An mk_st_file of other origin (a PyTorch checkpoint): the tensors
 * (names and strides copied) sorted by offset, a name index, the given hash; offsets
 * relative to data_start 0.  A name twice is MK_EFORMAT. */
int mk__st_file_make(const char *label, uint64_t file_size, const struct mk_st_tensor *tensors, size_t n,
		     const uint8_t hash[32], struct mk_st_file **out, struct mk_err *err);

#endif
