/* fuzz_st_index.c - mk_st_index_parse on arbitrary bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_st_index *idx = NULL;
	struct mk_err err;

	if (mk_st_index_parse(d, n, "fuzz", &idx, &err) == 0) {
		for (size_t i = 1; i < idx->nshards; i++)
			if (strcmp(idx->shards[i - 1], idx->shards[i]) >= 0)
				abort();
		for (size_t i = 0; i < idx->nentries; i++)
			if (idx->entries[i].shard >= idx->nshards)
				abort();
		mk_st_index_free(idx);
	} else if (idx != NULL || err.code == 0 || err.msg[0] == '\0') {
		abort();
	}
	return 0;
}
