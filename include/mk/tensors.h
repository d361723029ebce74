/* tensors.h - merging in process, from C: tensors in memory, no stream.
 *
 * For C callers that hold tensors already (the role mergekit's
 * merge_tensors plays for Python callers).  Every method of
 * the registry (plugins included) works here, through the same method API
 * as mk-merge; whole tensors are in memory, so this is for tensors that
 * fit it.  Inputs are borrowed; outputs are malloc'ed and owned by the
 * caller (mk_tensor_release).
 */
#ifndef MK_TENSORS_H
#define MK_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/dtype.h"
#include "mk/err.h"
#include "mk/method.h"

struct mk_tensor {
	struct mk_tensor_desc desc;
	void *data;                  /* little-endian elements, row-major */
};

/* Free an output's data and zero it. */
MK_API void mk_tensor_release(struct mk_tensor *t);

/* Parameter values by name: global (input -1) or for one input. */
struct mk_param_values;
MK_API struct mk_param_values *mk_param_values_new(void);
MK_API int mk_param_values_set(struct mk_param_values *pv, const char *name, int input,
			struct mk_pval v, struct mk_err *err);
MK_API void mk_param_values_free(struct mk_param_values *pv);

/* Merge one output from n inputs with `method` (a registry name).  base:
 * the base input's index or -1.  pv may be NULL (defaults only).
 * out_dtype MK_DT_COUNT: the method's output dtype.  `name` (may be NULL)
 * names the tensor in messages and keys the random methods with `seed`.
 * Parameters and the input contract are checked as at plan time. */
MK_API int mk_merge_tensors(const char *method, const struct mk_tensor *in, size_t n,
		     int base, const struct mk_param_values *pv,
		     enum mk_dtype out_dtype, const char *name, uint64_t seed,
		     struct mk_tensor *out, struct mk_err *err);

/* Many outputs.  Groups of one shape, input count, base and option values
 * that follow each other go to the method's batch kernel together (seed
 * 000's batch form, coefficients [B] or [B, N]) when it has one, at most
 * max_groups groups (0: no limit) and max_bytes input bytes (0: no limit)
 * per call; the others one by one.  The results do not depend on the
 * limits. */
struct mk_group {
	const char *name;
	const struct mk_tensor *in;
	size_t n;
	int base;
	const struct mk_param_values *pv;
	struct mk_tensor out;        /* filled */
};
MK_API int mk_merge_groups(const char *method, struct mk_group *g, size_t ng,
		    enum mk_dtype out_dtype, uint64_t seed, uint64_t max_bytes,
		    size_t max_groups, struct mk_err *err);

/* Merge safetensors files tensor by tensor, by name, into out_path (one
 * file).  strict: every file must hold the same names (else an error
 * naming the first difference); otherwise the names all hold are merged
 * and the rest left out.  Tensors that are not floats must be equal in
 * every file and are copied.  pv's per-input values are by file index. */
MK_API int mk_merge_safetensors(const char *method, const char *const *paths,
			 size_t n, int base, const struct mk_param_values *pv,
			 bool strict, enum mk_dtype out_dtype, uint64_t seed,
			 const char *out_path, struct mk_err *err);

#endif
