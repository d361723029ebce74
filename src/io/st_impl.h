/* st_impl.h - internals of src/io shared by its files (not installed). */
#ifndef MK_ST_IMPL_H
#define MK_ST_IMPL_H

#include <stdint.h>
#include "io/safetensors.h"

/* An mk_st_file of other origin (a PyTorch checkpoint): the tensors
 * (names and strides copied) sorted by offset, a name index, the given hash; offsets
 * relative to data_start 0.  A name twice is MK_EFORMAT. */
int mk__st_file_make(const char *label, uint64_t file_size, const struct mk_st_tensor *tensors, size_t n,
		     const uint8_t hash[32], struct mk_st_file **out, struct mk_err *err);

#endif
