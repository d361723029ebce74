/* test_merge_record.c - mk-merge's middle layers, alone: the buffer pool
 * that hands finished jobs' buffers to the next (buffers.c) and the replay
 * record of a job's inputs, in memory and in a spill file (spill.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "core/fsutil.h"
#include "merge/merge_impl.h"

/* ---------------------------------------------------------- buffer pool */

static size_t pool_bytes(const struct pool *pl)
{
	size_t b = 0;

	for (size_t k = 0; k < pl->n; k++)
		b += pl->cap[k];
	return b;
}

static bool pool_has(const struct pool *pl, size_t cap)
{
	for (size_t k = 0; k < pl->n; k++)
		if (pl->cap[k] == cap)
			return true;
	return false;
}

/* Buffers are kept up to the byte limit; over it the smallest go first,
 * and a buffer smaller than all that are kept is the one dropped. */
static void test_pool_limit(void **state)
{
	struct pool pl = { .limit = 1000 };

	(void)state;
	mk__pool_put(&pl, malloc(300), 300);
	mk__pool_put(&pl, malloc(400), 400);
	assert_int_equal(pl.n, 2);
	assert_int_equal(pl.bytes, 700);
	/* 500 more: the smallest (300) goes */
	mk__pool_put(&pl, malloc(500), 500);
	assert_int_equal(pl.n, 2);
	assert_int_equal(pl.bytes, 900);
	assert_true(pool_has(&pl, 400) && pool_has(&pl, 500));
	/* 200, smaller than every kept one: dropped, the pool unchanged */
	mk__pool_put(&pl, malloc(200), 200);
	assert_int_equal(pl.n, 2);
	assert_int_equal(pl.bytes, 900);
	assert_false(pool_has(&pl, 200));
	/* over the limit alone: never kept */
	mk__pool_put(&pl, malloc(1001), 1001);
	assert_int_equal(pl.bytes, 900);
	assert_int_equal(pool_bytes(&pl), pl.bytes);
	/* NULL, and no pool: nothing kept, nothing leaked (ASan says) */
	mk__pool_put(&pl, NULL, 0);
	mk__pool_put(NULL, malloc(10), 10);
	assert_int_equal(pl.n, 2);
	mk__pool_free(&pl);
	assert_int_equal(pl.n, 0);
	assert_int_equal(pl.bytes, 0);
}

/* At most POOL_MAX buffers, whatever the limit. */
static void test_pool_count(void **state)
{
	struct pool pl = { .limit = UINT64_MAX };

	(void)state;
	for (size_t k = 0; k < POOL_MAX + 5; k++)
		mk__pool_put(&pl, malloc(16 + k), 16 + k);
	assert_int_equal(pl.n, POOL_MAX);
	/* the largest were kept */
	for (size_t k = 5; k < POOL_MAX + 5; k++)
		assert_true(pool_has(&pl, 16 + k));
	assert_int_equal(pool_bytes(&pl), pl.bytes);
	mk__pool_free(&pl);
}

/* grow takes the smallest kept buffer that fits, else allocates; the
 * buffer it replaces goes to the pool. */
static void test_pool_grow(void **state)
{
	struct pool pl = { .limit = 1 << 20 };
	void *a = malloc(100), *b = malloc(800), *c = malloc(300);
	void *p = NULL;
	size_t cap = 0;

	(void)state;
	mk__pool_put(&pl, a, 100);
	mk__pool_put(&pl, b, 800);
	mk__pool_put(&pl, c, 300);
	assert_int_equal(mk__pool_grow(&pl, &p, &cap, 250), 0);
	assert_ptr_equal(p, c);
	assert_int_equal(cap, 300);
	assert_int_equal(pl.n, 2);
	assert_int_equal(pl.bytes, 900);
	/* already large enough: nothing moves */
	assert_int_equal(mk__pool_grow(&pl, &p, &cap, 300), 0);
	assert_ptr_equal(p, c);
	/* larger: the 300 goes back, the 800 comes out */
	assert_int_equal(mk__pool_grow(&pl, &p, &cap, 301), 0);
	assert_ptr_equal(p, b);
	assert_int_equal(cap, 800);
	assert_true(pool_has(&pl, 300) && pool_has(&pl, 100));
	/* larger than any kept: a new one, the 800 kept */
	assert_int_equal(mk__pool_grow(&pl, &p, &cap, 5000), 0);
	assert_non_null(p);
	assert_int_equal(cap, 5000);
	assert_true(pool_has(&pl, 800));
	memset(p, 1, cap);
	free(p);
	mk__pool_free(&pl);
}

/* ---------------------------------------------------------- replay record */

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 31 + seed * 7 + (i >> 8));
}

/* Chunks recorded then read back, in any order, equal to what was put:
 * their fields and bytes; in a spill file (fd) or in memory. */
static void record_roundtrip(bool in_file)
{
	static const size_t len[] = { 1, 4096, 0, 70000, 13 };
	enum { N = sizeof(len) / sizeof(*len) };
	uint8_t *data[N];
	struct spill sp = { .fd = -1 };
	struct mk_err err = { 0 };
	uint64_t total = 0;

	for (size_t i = 0; i < N; i++) {
		data[i] = malloc(len[i] ? len[i] : 1);
		assert_non_null(data[i]);
		fill(data[i], len[i], (unsigned)i);
		total += len[i];
	}
	if (in_file)
		assert_int_equal(mk__spill_open(&sp, mk_tmpdir(), &err), 0);
	else
		assert_int_equal(mk__spill_reserve(&sp, total, &err), 0);
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < N; i++) {
			struct mk_chunk c = { .id = (uint32_t)(7 + i), .dtype = MK_DT_U8, .row_begin = i,
					      .row_count = 1, .elem_begin = 100 * i, .elem_count = len[i],
					      .data = data[i], .data_len = len[i] };
			const void *stored = NULL;
			assert_int_equal(mk__spill_put(&sp, &c, NULL, &stored, &err), 0);
			/* in memory the record keeps its own copy */
			if (!in_file && len[i]) {
				assert_non_null(stored);
				assert_ptr_not_equal(stored, data[i]);
				assert_memory_equal(stored, data[i], len[i]);
			}
		}
		for (size_t j = 0; j < N; j++) {
			size_t i = (j * 3 + 1) % N;      /* not in the order put */
			struct mk_chunk c = { 0 };
			assert_int_equal(mk__spill_get(&sp, i, &c, &err), 0);
			assert_int_equal(c.id, 7 + i);
			assert_int_equal(c.elem_begin, 100 * i);
			assert_int_equal(c.row_begin, i);
			assert_int_equal(c.data_len, len[i]);
			if (len[i])
				assert_memory_equal(c.data, data[i], len[i]);
		}
		/* the next job starts empty */
		mk__spill_reset(&sp);
		assert_int_equal(sp.n, 0);
		if (!in_file)
			assert_int_equal(mk__spill_reserve(&sp, total, &err), 0);
	}
	mk__spill_close(&sp);
	for (size_t i = 0; i < N; i++)
		free(data[i]);
}

static void test_record_file(void **state)
{
	(void)state;
	record_roundtrip(true);
}

static void test_record_memory(void **state)
{
	(void)state;
	record_roundtrip(false);
}

/* In memory, more bytes than the job reserved is a damaged plan, refused
 * (the record never moves under pointers the job keeps). */
static void test_record_over(void **state)
{
	struct spill sp = { .fd = -1 };
	struct mk_err err = { 0 };
	uint8_t b[64] = { 0 };
	struct mk_chunk c = { .dtype = MK_DT_U8, .row_count = 1, .elem_count = 64, .data = b, .data_len = 64 };
	const void *stored;

	(void)state;
	assert_int_equal(mk__spill_reserve(&sp, 100, &err), 0);
	assert_int_equal(mk__spill_put(&sp, &c, NULL, &stored, &err), 0);
	assert_int_not_equal(mk__spill_put(&sp, &c, NULL, &stored, &err), 0);
	assert_non_null(strstr(err.msg, "more than their 100 bytes"));
	mk__spill_close(&sp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_limit),
		cmocka_unit_test(test_pool_count),
		cmocka_unit_test(test_pool_grow),
		cmocka_unit_test(test_record_file),
		cmocka_unit_test(test_record_memory),
		cmocka_unit_test(test_record_over),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
