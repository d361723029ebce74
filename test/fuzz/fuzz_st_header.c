/* fuzz_st_header.c - mk_st_parse on arbitrary bytes (the whole input is
 * the file), plus mk_st_find on every parsed name. */
#include <stdint.h>
#include <stdlib.h>
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_st_file *f = NULL;
	struct mk_err err;

	if (mk_st_parse(d, n, n, "fuzz", &f, &err) == 0) {
		for (size_t i = 0; i < f->ntensors; i++)
			if (mk_st_find(f, f->tensors[i].name) == NULL)
				abort();
		mk_st_file_free(f);
	} else if (f != NULL || err.code == 0 || err.msg[0] == '\0') {
		abort();
	}
	return 0;
}
