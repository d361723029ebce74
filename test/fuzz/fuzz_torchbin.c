/* fuzz_torchbin.c - mk_torchbin_parse (a torch.save zip: its central
 * directory, the restricted pickle machine, the tensors placed in their
 * storages) on arbitrary bytes: a refusal says why; an accepted file's
 * tensors lie inside it, each spans exactly its shape's bytes, and each
 * is found by its name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "mk/torchbin.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_st_file *f = NULL;
	struct mk_err err;

	if (mk_torchbin_parse(d, n, "fuzz/pytorch_model.bin", &f, &err)) {
		if (f || err.code == 0 || !err.msg[0])
			abort();
		return 0;
	}
	for (size_t i = 0; i < f->ntensors; i++) {
		const struct mk_st_tensor *t = &f->tensors[i];
		uint64_t bytes;
		if (t->end < t->begin || t->end > n || mk_dtype_nbytes(t->desc.dtype, t->nelem, &bytes) ||
		    bytes != t->end - t->begin || mk_st_find(f, t->name) == NULL)
			abort();
		if (i && f->tensors[i - 1].begin > t->begin)
			abort();
	}
	mk_st_file_free(f);
	return 0;
}
