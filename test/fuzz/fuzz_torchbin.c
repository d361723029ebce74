/* fuzz_torchbin.c - mk_torchbin_parse (a torch.save zip: its central
 * directory, the restricted pickle machine, the tensors placed in their
 * storages) on arbitrary bytes: a refusal says why; an accepted file's
 * tensors lie inside it, each found by its name; a contiguous one spans
 * exactly its shape's bytes, a strided one (a view) has its elements
 * inside its span, and gathering them from the file's bytes stays there
 * (the sanitizers watch). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "io/torchbin.h"

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
		uint64_t bytes, lo, hi;
		if (t->end < t->begin || t->end > n || mk_dtype_nbytes(t->desc.dtype, t->nelem, &bytes) ||
		    (!t->stride && bytes != t->end - t->begin) || mk_st_find(f, t->name) == NULL)
			abort();
		if (t->stride && t->nelem) {
			static uint8_t out[1 << 16];
			uint64_t es = mk_dtype_bits(t->desc.dtype) / 8, k = t->nelem < sizeof(out) / es ? t->nelem : sizeof(out) / es;
			mk_st_tensor_extent(t, 0, t->nelem, &lo, &hi);
			if (lo != t->begin || hi != t->end)
				abort();
			/* the first and the last elements */
			if (mk_st_tensor_gather(t, 0, k, d + t->begin, t->begin, t->end - t->begin, out, &err) ||
			    mk_st_tensor_gather(t, t->nelem - k, k, d + t->begin, t->begin, t->end - t->begin, out, &err))
				abort();
		}
		if (i && f->tensors[i - 1].begin > t->begin)
			abort();
	}
	mk_st_file_free(f);
	return 0;
}
