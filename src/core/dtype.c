/* dtype.c - dtype names, sizes and granules (conversions: convert.c). */
#include <string.h>
#include "mk/dtype.h"
#include "simd.h"

static const struct {
	const char *name;
	unsigned bits;
	bool is_float;
} dtypes[MK_DT_COUNT] = {
	[MK_DT_BOOL] = { "BOOL", 8, false },
	[MK_DT_F4] = { "F4", 4, false },
	[MK_DT_F6_E2M3] = { "F6_E2M3", 6, false },
	[MK_DT_F6_E3M2] = { "F6_E3M2", 6, false },
	[MK_DT_U8] = { "U8", 8, false },
	[MK_DT_I8] = { "I8", 8, false },
	[MK_DT_F8_E5M2] = { "F8_E5M2", 8, true },
	[MK_DT_F8_E4M3] = { "F8_E4M3", 8, true },
	[MK_DT_F8_E8M0] = { "F8_E8M0", 8, true },
	[MK_DT_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8, true },
	[MK_DT_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8, true },
	[MK_DT_I16] = { "I16", 16, false },
	[MK_DT_U16] = { "U16", 16, false },
	[MK_DT_F16] = { "F16", 16, true },
	[MK_DT_BF16] = { "BF16", 16, true },
	[MK_DT_I32] = { "I32", 32, false },
	[MK_DT_U32] = { "U32", 32, false },
	[MK_DT_F32] = { "F32", 32, true },
	[MK_DT_C64] = { "C64", 64, false },
	[MK_DT_F64] = { "F64", 64, true },
	[MK_DT_I64] = { "I64", 64, false },
	[MK_DT_U64] = { "U64", 64, false },
};

const char *mk_dtype_name(enum mk_dtype dt)
{
	return (unsigned)dt < MK_DT_COUNT ? dtypes[dt].name : NULL;
}

int mk_dtype_from_name(const char *name, enum mk_dtype *out)
{
	for (unsigned i = 0; i < MK_DT_COUNT; i++)
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum mk_dtype)i;
			return 0;
		}
	return -1;
}

unsigned mk_dtype_bits(enum mk_dtype dt)
{
	return (unsigned)dt < MK_DT_COUNT ? dtypes[dt].bits : 0;
}

bool mk_dtype_is_float(enum mk_dtype dt)
{
	return (unsigned)dt < MK_DT_COUNT && dtypes[dt].is_float;
}

int mk_dtype_nbytes(enum mk_dtype dt, uint64_t nelem, uint64_t *out)
{
	uint64_t bits;

	if ((unsigned)dt >= MK_DT_COUNT)
		return -1;
	if (__builtin_mul_overflow(nelem, (uint64_t)dtypes[dt].bits, &bits))
		return -1;
	if (bits % 8)
		return -1;
	*out = bits / 8;
	return 0;
}

unsigned mk_dtype_elem_granule(enum mk_dtype dt)
{
	switch (mk_dtype_bits(dt)) {
	case 4: return 2;
	case 6: return 4;
	default: return 1;
	}
}

int mk_shape_nelem(unsigned ndim, const uint64_t *shape, uint64_t *out)
{
	uint64_t n = 1;

	if (ndim > MK_MAX_DIMS)
		return -1;
	for (unsigned d = 0; d < ndim; d++)
		if (__builtin_mul_overflow(n, shape[d], &n))
			return -1;
	*out = n;
	return 0;
}

uint64_t mk_shape_count(unsigned ndim, const uint64_t *shape)
{
	uint64_t n = 1;

	for (unsigned d = 0; d < ndim; d++)
		n *= shape[d];
	return n;
}

uint64_t mk_tensor_desc_count(const struct mk_tensor_desc *d)
{
	return mk_shape_count(d->ndim, d->shape);
}

uint64_t mk_shape_row_len(unsigned ndim, const uint64_t *shape)
{
	return ndim > 1 ? mk_shape_count(ndim - 1, shape + 1) : 1;
}

int mk_tensor_desc_nelem(const struct mk_tensor_desc *d, uint64_t *out)
{
	return mk_shape_nelem(d->ndim, d->shape, out);
}

int mk_tensor_desc_nbytes(const struct mk_tensor_desc *d, uint64_t *out)
{
	uint64_t n;

	if (mk_tensor_desc_nelem(d, &n))
		return -1;
	return mk_dtype_nbytes(d->dtype, n, out);
}

bool mk_tensor_desc_equal(const struct mk_tensor_desc *a, const struct mk_tensor_desc *b)
{
	if (a->dtype != b->dtype || a->ndim != b->ndim)
		return false;
	for (unsigned d = 0; d < a->ndim; d++)
		if (a->shape[d] != b->shape[d])
			return false;
	return true;
}

/* Cloned per instruction set behind a local name: a cloned exported
 * function would export its resolver too. */
static MK_HOT_CLONES uint64_t count_nonfinite(enum mk_dtype dt, const void *buf, uint64_t n)
{
	const uint8_t *p = buf;
	uint64_t bad = 0;

	switch (dt) {
	case MK_DT_F32:
		for (uint64_t i = 0; i < n;) {   /* 32-bit sums, as below */
			uint64_t end = n - i > UINT32_MAX ? i + UINT32_MAX : n;
			uint32_t c = 0;
			for (; i < end; i++) {
				uint32_t v;
				memcpy(&v, p + 4 * i, 4);
				c += (v & 0x7f800000u) == 0x7f800000u;
			}
			bad += c;
		}
		break;
	case MK_DT_BF16:
	case MK_DT_F16: {
		uint16_t mask = dt == MK_DT_BF16 ? 0x7f80 : 0x7c00;
		/* counted in 16-bit sums over blocks that cannot overflow
		 * them, so the loop vectorises in 16-bit lanes */
		for (uint64_t i = 0; i < n;) {
			uint64_t end = n - i > 65535 ? i + 65535 : n;
			uint16_t c = 0;
			for (; i < end; i++) {
				uint16_t v;
				memcpy(&v, p + 2 * i, 2);
				c += (v & mask) == mask;
			}
			bad += c;
		}
		break;
	}
	case MK_DT_F64:
		for (uint64_t i = 0; i < n; i++) {
			uint64_t v;
			memcpy(&v, p + 8 * i, 8);
			bad += (v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
		}
		break;
	case MK_DT_F8_E5M2:
	case MK_DT_F8_E4M3:
	case MK_DT_F8_E8M0:
	case MK_DT_F8_E4M3FNUZ:
	case MK_DT_F8_E5M2FNUZ:
		for (uint64_t i = 0; i < n; i++) {
			float f = mk_f8_to_f32(dt, p[i]);
			bad += f != f || f - f != 0.0f;
		}
		break;
	default:
		break;
	}
	return bad;
}

uint64_t mk_dtype_count_nonfinite(enum mk_dtype dt, const void *buf, uint64_t n)
{
	return count_nonfinite(dt, buf, n);
}

/* The dtype names a merge configuration accepts (mk_config_dtype_parse). */
static const struct {
	const char *name, *canonical;
	enum mk_dtype dt;
} config_dtypes[] = {
	{ "bfloat16", "bfloat16", MK_DT_BF16 },
	{ "float16", "float16", MK_DT_F16 },
	{ "float32", "float32", MK_DT_F32 },
	{ "int64", "int64", MK_DT_I64 },
	/* mk's extensions */
	{ "float64", "float64", MK_DT_F64 },
	{ "bf16", "bfloat16", MK_DT_BF16 },
	{ "fp16", "float16", MK_DT_F16 },
	{ "fp32", "float32", MK_DT_F32 },
};

int mk_config_dtype_parse(const char *name, enum mk_dtype *dt,
			  const char **canonical, struct mk_err *err)
{
	const char *n = name;

	if (strncmp(n, "torch.", 6) == 0)
		n += 6;
	for (size_t i = 0; i < sizeof(config_dtypes) / sizeof(config_dtypes[0]); i++)
		if (strcmp(n, config_dtypes[i].name) == 0) {
			if (dt)
				*dt = config_dtypes[i].dt;
			if (canonical)
				*canonical = config_dtypes[i].canonical;
			return 0;
		}
	return mk_err_set(err, MK_EINVAL, "unknown dtype '%s' (accepted: bfloat16, "
			  "float16, float32, int64, float64, bf16, fp16, fp32, each "
			  "optionally prefixed with 'torch.')", name);
}
