/* fuzz_config.c - mk_config_parse on arbitrary bytes, then every query a
 * planner makes of a parsed config (model order, refused features,
 * normalisation, parameter lookups). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config/config.h"
#include "config_queries.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	config_check((const char *)d, n, "fuzz.yml");
	return 0;
}
