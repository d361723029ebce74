/* dtype.h - the element types of the safetensors format and conversions.
 *
 * The enumerators are in the safetensors reference's declaration order,
 * which is "increasing alignment order"; the writer sorts header entries
 * by this order descending (see safetensors.h).  Every dtype is carried
 * byte-exact; conversions exist among the floating types F64, F32, F16,
 * BF16 and the F8 variants, rounding as torch does (round to nearest,
 * ties to even).
 */
#ifndef MK_DTYPE_H
#define MK_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "mk/api.h"
#include "mk/err.h"

enum mk_dtype {
	MK_DT_BOOL,
	MK_DT_F4,          /* E2M1, 4 bits, two per byte */
	MK_DT_F6_E2M3,     /* 6 bits, four per three bytes */
	MK_DT_F6_E3M2,
	MK_DT_U8,
	MK_DT_I8,
	MK_DT_F8_E5M2,
	MK_DT_F8_E4M3,     /* torch float8_e4m3fn */
	MK_DT_F8_E8M0,     /* torch float8_e8m0fnu: exponent only */
	MK_DT_F8_E4M3FNUZ,
	MK_DT_F8_E5M2FNUZ,
	MK_DT_I16,
	MK_DT_U16,
	MK_DT_F16,
	MK_DT_BF16,
	MK_DT_I32,
	MK_DT_U32,
	MK_DT_F32,
	MK_DT_C64,
	MK_DT_F64,
	MK_DT_I64,
	MK_DT_U64,
	MK_DT_COUNT
};

/* The safetensors name ("BF16"), or NULL for an invalid value. */
MK_API const char *mk_dtype_name(enum mk_dtype dt);

/* Look a safetensors name up (exact, case-sensitive).  Returns 0 and sets
 * *out, or -1 when the name is not a safetensors dtype. */
MK_API int mk_dtype_from_name(const char *name, enum mk_dtype *out);

/* Bits per element (4, 6, 8, 16, 32 or 64). */
MK_API unsigned mk_dtype_bits(enum mk_dtype dt);

/* True for F16, BF16, F32, F64 and the F8 variants: the types mk can
 * convert and compute with. */
MK_API bool mk_dtype_is_float(enum mk_dtype dt);

/* Byte size of `nelem` elements.  Returns 0 and sets *out, or -1 when
 * nelem * bits overflows 64 bits or is not a whole number of bytes (the
 * reference's MisalignedSlice rule for sub-byte types). */
MK_API int mk_dtype_nbytes(enum mk_dtype dt, uint64_t nelem, uint64_t *out);

/* Smallest number of elements that spans a whole number of bytes:
 * 1 for byte-sized types, 2 for F4, 4 for F6.  Chunk boundaries inside a
 * tensor are multiples of this. */
MK_API unsigned mk_dtype_elem_granule(enum mk_dtype dt);

/* ---- tensor descriptors ----
 * What a tensor is, without its data: element type and shape (dim 0 is
 * the row axis the stream chunks over).  The safetensors reader, the
 * stream's manifest and job inputs and the method API all describe
 * tensors with it. */
#define MK_MAX_DIMS 8
struct mk_tensor_desc {
	enum mk_dtype dtype;
	unsigned ndim;                  /* 0 for a scalar */
	uint64_t shape[MK_MAX_DIMS];
};

/* Elements of a shape (1 for ndim 0).  Returns 0 and sets *out, or -1
 * when the product overflows 64 bits or ndim > MK_MAX_DIMS. */
MK_API int mk_shape_nelem(unsigned ndim, const uint64_t *shape, uint64_t *out);
/* The product of dims, for a shape already checked (mk_shape_nelem, or a
 * descriptor the stream's decoders or the safetensors reader produced). */
MK_API uint64_t mk_shape_count(unsigned ndim, const uint64_t *shape);
MK_API uint64_t mk_tensor_desc_count(const struct mk_tensor_desc *d);
/* Elements per dim-0 row: the product of dims 1.. (1 for ndim <= 1).
 * The caller has checked the shape with mk_shape_nelem. */
MK_API uint64_t mk_shape_row_len(unsigned ndim, const uint64_t *shape);
/* The same for a descriptor; mk_tensor_desc_nbytes also checks that the
 * elements fill whole bytes (mk_dtype_nbytes). */
MK_API int mk_tensor_desc_nelem(const struct mk_tensor_desc *d, uint64_t *out);
MK_API int mk_tensor_desc_nbytes(const struct mk_tensor_desc *d, uint64_t *out);
/* Same dtype, rank and dims. */
MK_API bool mk_tensor_desc_equal(const struct mk_tensor_desc *a, const struct mk_tensor_desc *b);

/* Elements of `n` (little-endian, dtype dt) that are NaN or infinite; 0
 * for the integer and boolean types and the 4- and 6-bit floats, which
 * have neither. */
MK_API uint64_t mk_dtype_count_nonfinite(enum mk_dtype dt, const void *buf, uint64_t n);

/* ---- scalar conversions (torch semantics: RNE, NaN kept NaN) ---- */
MK_API float mk_bf16_to_f32(uint16_t h);
MK_API uint16_t mk_f32_to_bf16(float f);
MK_API float mk_f16_to_f32(uint16_t h);
MK_API uint16_t mk_f32_to_f16(float f);
MK_API float mk_f8_to_f32(enum mk_dtype dt, uint8_t v);        /* any F8 variant */
MK_API uint8_t mk_f32_to_f8(enum mk_dtype dt, float f);        /* any F8 variant */

/* Convert `n` elements between float dtypes (F64, F32, F16, BF16, F8_*).
 * Buffers are little-endian, may be unaligned, and must not overlap.
 * Conversions to a narrower type round once from the widest exact
 * intermediate as torch does (F64 -> F16/BF16/F8 goes through F32,
 * matching c10's casts).  Returns 0, or -1 when either type is not a
 * convertible float type. */
MK_API int mk_dtype_convert(enum mk_dtype dst_dt, void *dst,
		     enum mk_dtype src_dt, const void *src, size_t n);
/* mk_dtype_convert, and add to *nonfinite how many of the n source
 * elements are NaN or infinite (mk_dtype_count_nonfinite's count), in the
 * same pass over them where there is a kernel for it (BF16 -> F32). */
MK_API int mk_dtype_convert_count(enum mk_dtype dst_dt, void *dst, enum mk_dtype src_dt, const void *src, size_t n,
			   uint64_t *nonfinite);

/* A dtype name: bfloat16, float16, float32, int64 (mergekit's), each
 * optionally "torch."-prefixed, and the extensions float64, bf16, fp16,
 * fp32.  Returns 0 and fills *dt / *canonical (either may be NULL), or
 * -MK_EINVAL with the accepted list in the message. */
MK_API int mk_config_dtype_parse(const char *name, enum mk_dtype *dt,
			  const char **canonical, struct mk_err *err);

#endif
