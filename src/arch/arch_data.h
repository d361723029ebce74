/* arch_data.h - the embedded definitions ($(BUILD)/gen/arch_data.c). */
#ifndef MK_ARCH_DATA_H
#define MK_ARCH_DATA_H

#include <stddef.h>
#include "arch/arch.h"

extern const struct mk_arch_file mk_arch_data[];
extern const size_t mk_arch_data_n;

#endif
