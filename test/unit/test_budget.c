/* test_budget.c - the memory-budget policy: mk-yaml's split among the
 * stages and mk-fetch's reads fitted to its share, against the numbers
 * the stages were given and chose before the policy moved into libmk; and
 * what one job held in memory may take, as mk-plan(1) documents it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include "core/budget.h"
#include "io/reader.h"

static void assert_split(uint64_t total, uint64_t merge, uint64_t fetch, uint64_t pack)
{
	struct mk_budget_split s = { 1, 1, 1, 1, 1 };

	mk_budget_split(total, &s);
	/* in one process, the three queues fit where three stage bases were */
	assert_int_equal(s.queue, MK_BUDGET_QUEUE);
	assert_true(3 * s.queue + MK_BUDGET_STAGE_BASE <= s.stages);
	assert_int_equal(s.merge, merge);
	assert_int_equal(s.fetch, fetch);
	assert_int_equal(s.pack, pack);
}

/* mk-yaml --max-memory SIZE --print-pipeline: mk-plan/mk-merge, mk-fetch,
 * mk-pack --max-memory */
/* mk-yaml --max-memory SIZE --print-pipeline: mk-plan/mk-merge, mk-fetch,
 * mk-pack --max-memory, after 32 MiB (8 MiB a process) set aside */
static void test_split_values(void **state)
{
	assert_split(256000000, 111222784, 55611392, 55611392);               /* 256M */
	assert_split(1000000000, 483222784, 241611392, 241611392);            /* 1G */
	assert_split(8000000000ull, 3983222784ull, 1991611392, 1991611392);   /* 8G */
	assert_split(1073741824, 520093696, 260046848, 260046848);            /* 1GiB */
	assert_split(123456789, 44951178, 22475589, 22475589);                /* odd: rounded down */
	assert_split(67108864, 16777216, 8388608, 8388608);                   /* 64MiB: all at the floor */
	/* the minimums: merging and mk-fetch 4 MiB, mk-pack 8 MiB */
	assert_split(64000000, 15222784, 7611392, 8388608);
	assert_split(50000000, 8222784, 4194304, 8388608);
	assert_split(40000000, 4194304, 4194304, 8388608);
	assert_split(33554432, 4194304, 4194304, 8388608);
	assert_split(1, 4194304, 4194304, 8388608);
	assert_split(0, 4194304, 4194304, 8388608);
}

/* 8 MiB a process, half of the rest to merging and a quarter to each of
 * the others: the shares add up to the total once the quarters are over
 * their minimums (from 64 MiB). */
static void test_split_adds_up(void **state)
{
	for (uint64_t t = 64ull << 20; t < (1ull << 50); t = t * 3 / 2 + 7) {
		struct mk_budget_split s;
		mk_budget_split(t, &s);
		assert_int_equal(s.stages, 4 * MK_BUDGET_STAGE_BASE);
		assert_true(s.stages + s.merge + s.fetch + s.pack <= t);
		assert_true(s.stages + s.merge + s.fetch + s.pack + 3 > t);
		assert_true(s.fetch >= MK_BUDGET_FETCH_MIN && s.pack >= MK_BUDGET_PACK_MIN);
		assert_true(s.merge >= MK_BUDGET_MERGE_MIN);
	}
}

static void assert_fit(uint64_t budget, size_t chunk, unsigned qd, size_t want_chunk, unsigned want_qd)
{
	mk_budget_fetch_fit(budget, &chunk, &qd);
	assert_int_equal(chunk, want_chunk);
	assert_int_equal(qd, want_qd);
}

/* mk-fetch -v --max-memory BUDGET [--chunk-size C] [--queue-depth Q]:
 * "queue depth Q, chunk C bytes" */
static void test_fetch_values(void **state)
{
	/* the defaults: 8 reads of 4 MiB */
	assert_int_equal(MK_READER_DEFAULT_CHUNK, 4194304);
	assert_int_equal(MK_READER_DEFAULT_QDEPTH, 8);
	assert_fit(8000000000ull, 0, 0, 4194304, 8);
	assert_fit(1000000000, 0, 0, 4194304, 8);
	assert_fit(256000000, 0, 0, 4194304, 8);
	assert_fit(64000000, 0, 0, 4194304, 5); /* mk-yaml --max-memory 256M */
	assert_fit(16000000, 0, 0, 1048576, 2); /* mk-yaml --max-memory 64M */
	assert_fit(8000000, 0, 0, 524288, 2);
	assert_fit(4194304, 0, 0, 524288, 2);   /* the least mk-fetch accepts */
	/* as asked, lowered only as far as needed */
	assert_fit(256000000, 0, 64, 4194304, 28);
	assert_fit(1000000000, 0, 64, 4194304, 64);
	assert_fit(1000000000, 64000000, 0, 64000000, 5);
	assert_fit(256000000, 64000000, 0, 32000000, 2);
	assert_fit(64000000, 64000000, 0, 8000000, 2);
	assert_fit(16000000, 1000000, 0, 1000000, 6);
	assert_fit(8000000, 1000000, 0, 1000000, 2);
	assert_fit(8000000, 0, 1, 1048576, 1);
	assert_fit(5000000, 64000000, 0, 500000, 2);
	assert_fit(4194304, 1024, 3, 1024, 3);
	/* under 512 KiB the minimums do not fit: they are kept */
	assert_fit(100000, 0, 0, 65536, 2);
	assert_fit(100000, 100000, 0, 65536, 2);    /* halved to the floor, not below it */
	assert_fit(1000, 1024, 1, 1024, 1);
}

/* The promise: (qdepth + 2) chunks within half the budget, unless both
 * are at their minimums; nothing grows; nothing is lowered more than
 * needed. */
static void test_fetch_invariant(void **state)
{
	static const size_t chunks[] = { 0, 1024, 65536, 100000, 1000000, 4194304, 64000000, 1u << 30 };
	static const unsigned qds[] = { 0, 1, 2, 3, 8, 64, 1024 };

	for (uint64_t b = 1000; b < (1ull << 44); b = b * 5 / 4 + 1)
		for (size_t ci = 0; ci < sizeof(chunks) / sizeof(*chunks); ci++)
			for (size_t qi = 0; qi < sizeof(qds) / sizeof(*qds); qi++) {
				size_t c0 = chunks[ci] ? chunks[ci] : MK_READER_DEFAULT_CHUNK, c = chunks[ci];
				unsigned q0 = qds[qi] ? qds[qi] : MK_READER_DEFAULT_QDEPTH, q = qds[qi];
				mk_budget_fetch_fit(b, &c, &q);
				bool fits = (uint64_t)(q + 2) * c <= b / 2;
				if (b >= (512u << 10))
					assert_true(fits);
				if (!fits)
					assert_true(q <= MK_BUDGET_FETCH_QDEPTH_MIN && c <= MK_BUDGET_FETCH_CHUNK_MIN);
				assert_true(c <= c0 && q <= q0);
				/* never below the floor unless asked for less */
				assert_true(c >= (c0 < MK_BUDGET_FETCH_CHUNK_MIN ? c0 : MK_BUDGET_FETCH_CHUNK_MIN));
				assert_true(q >= (q0 < MK_BUDGET_FETCH_QDEPTH_MIN ? q0 : MK_BUDGET_FETCH_QDEPTH_MIN));
				if (c < c0) /* halved: the queue first went as low as it goes */
					assert_true(q == (q0 < MK_BUDGET_FETCH_QDEPTH_MIN ? q0 : MK_BUDGET_FETCH_QDEPTH_MIN) &&
						    (uint64_t)(q + 2) * c * 2 > b / 2);
				else if (q < q0) /* one more read would not have fitted */
					assert_true((uint64_t)(q + 3) * c > b / 2);
			}
}

/* What one held job may take: an explicit budget as given, whatever its
 * size; by default a quarter of the machine's memory (1 GiB when unknown),
 * at most 256 MiB. */
static void test_hold_values(void **state)
{
	const uint64_t Mi = 1ull << 20, Gi = 1ull << 30;

	assert_int_equal(MK_BUDGET_HOLD_DEFAULT, 256 * Mi);
	/* --max-memory: the budget, above or below the default's cap */
	assert_int_equal(mk_budget_hold_max(4 * Gi, 64 * Gi), 4 * Gi);
	assert_int_equal(mk_budget_hold_max(1, 64 * Gi), 1);
	assert_int_equal(mk_budget_hold_max(100 * Mi, 0), 100 * Mi);
	/* the default: capped on machines whose quarter is more */
	assert_int_equal(mk_budget_hold_max(0, 64 * Gi), 256 * Mi);
	assert_int_equal(mk_budget_hold_max(0, 1 * Gi), 256 * Mi);
	assert_int_equal(mk_budget_hold_max(0, 0), 256 * Mi);
	/* ... the quarter where that is less */
	assert_int_equal(mk_budget_hold_max(0, 512 * Mi), 128 * Mi);
	assert_int_equal(mk_budget_hold_max(0, 1000), 250);
	/* the default merge budget itself is the quarter, uncapped */
	assert_int_equal(mk_budget_merge_default(64 * Gi), 16 * Gi);
	assert_int_equal(mk_budget_merge_default(0), Gi);
	for (uint64_t phys = 1; phys < (1ull << 46); phys = phys * 3 + 1) {
		uint64_t h = mk_budget_hold_max(0, phys);
		assert_true(h <= MK_BUDGET_HOLD_DEFAULT && h <= mk_budget_merge_default(phys));
		assert_true(h == MK_BUDGET_HOLD_DEFAULT || h == mk_budget_merge_default(phys));
	}
}

/* The stages' other shares: each the one place its fraction is decided. */
static void test_stage_shares(void **state)
{
	const uint64_t M = 1u << 20;
	size_t chunk = 0;
	unsigned qd = 0;
	uint64_t hold = 0;

	(void)state;
	/* mk-fetch: its reads fitted in half, a quarter held */
	mk_budget_fetch_apply(100 * M, &chunk, &qd, &hold);
	assert_int_equal(hold, 25 * M);
	assert_true((uint64_t)(qd + 2) * chunk <= 50 * M);
	assert_int_equal(mk_budget_fetch_hold(0), MK_BUDGET_FETCH_HOLD_DEFAULT);
	assert_int_equal(mk_budget_fetch_hold(7), 7);
	/* mk-merge's pool: half, or the default */
	assert_int_equal(mk_budget_merge_pool(0), MK_BUDGET_POOL_DEFAULT);
	assert_int_equal(mk_budget_merge_pool(100 * M), 50 * M);
	/* mk-pack: two frames and the headers; the sync batch at most a
	 * quarter, never 0 */
	assert_int_equal(mk_budget_pack_frames(4 * M), 8 * M + MK_BUDGET_PACK_HEADROOM);
	assert_int_equal(mk_budget_pack_sync(0, 0), MK_BUDGET_SYNC_DEFAULT);
	assert_int_equal(mk_budget_pack_sync(0, 5 * M), 5 * M);
	assert_int_equal(mk_budget_pack_sync(40 * M, 0), 10 * M);
	assert_int_equal(mk_budget_pack_sync(40 * M, 1 * M), 1 * M);
	assert_int_equal(mk_budget_pack_sync(3, 0), 1);
	/* a program's own base taken off, never down to "no bound" */
	assert_int_equal(mk_budget_less_process(MK_BUDGET_STAGE_BASE + 5), 5);
	assert_int_equal(mk_budget_less_process(MK_BUDGET_STAGE_BASE), 1);
	assert_int_equal(mk_budget_less_process(1), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_values),
		cmocka_unit_test(test_split_adds_up),
		cmocka_unit_test(test_fetch_values),
		cmocka_unit_test(test_fetch_invariant),
		cmocka_unit_test(test_hold_values),
		cmocka_unit_test(test_stage_shares),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
