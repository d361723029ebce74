/* test_planner_sends.c - how the planner sends a job's inputs (tplan_sends,
 * src/planner/plan_tensors.c): a statistics method's job under a budget is
 * sent once and held when its used inputs, as stored, fit what one held job
 * may take (the boundary included), else spilled with --spill, else
 * streamed once per pass; streamed jobs take the spare pass where offered,
 * held and spilled ones do not; a single-pass job is sent once and a job
 * without a budget streamed; the plan's held_max is the largest held job and its
 * spilled count the spilled jobs; a vocabulary job counts every input's
 * rows in its runs and its aux inputs, used or not. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include "planner/planner_impl.h"

#define N 3

struct fixture {
	struct mk_plan_opts o;
	struct mk_plan p;
	bool used[N + 1];
	struct tplan t;
};

/* A plan with budget and hold_max, and a tplan of N inputs of `nelem`
 * elements stored as `dtype` (loaded as float32), every one used, base
 * input 0, a method of `npasses` statistics passes (spare: with the spare
 * pass offered, one more). */
static void setup_job(struct fixture *f, uint64_t budget, uint64_t hold_max, bool spill, enum mk_dtype dtype,
		      uint64_t nelem, unsigned npasses, bool spare)
{
	memset(f, 0, sizeof(*f));
	f->o.spill = spill;
	f->p.o = &f->o;
	f->p.budget = budget;
	f->p.hold_max = hold_max;
	f->t.p = &f->p;
	f->t.n = N;
	f->t.base = 0;
	f->t.used = f->used;
	f->t.po.npasses = npasses;
	f->t.spare_passes = npasses + (spare ? 1 : 0);
	f->t.j = mk_plan_job_new(N);
	assert_non_null(f->t.j);
	for (size_t i = 0; i < N; i++) {
		struct mk_plan_input *in = &f->t.j->inputs[i];
		in->desc.dtype = dtype;
		in->desc.ndim = 1;
		in->desc.shape[0] = nelem;
		in->load_dtype = MK_DT_F32;
		in->nelem = nelem;
		f->used[i] = true;
	}
}

static void expect(const struct fixture *f, unsigned passes, unsigned sends, bool spill, bool spare)
{
	assert_int_equal(f->t.j->passes, passes);
	assert_int_equal(f->t.j->sends, sends);
	assert_int_equal(f->t.j->spill, spill);
	assert_int_equal(f->t.j->spare, spare);
}

/* Held: the used inputs as stored (bfloat16: 2 bytes an element, not the
 * float32 they are loaded as) fit hold_max exactly; an unused input is not
 * counted.  The spare pass offered is not taken (a held job adds a pass
 * as it needs). */
static void test_held(void **state)
{
	struct fixture f;

	setup_job(&f, 1 << 30, 2 * 100 * 2, false, MK_DT_BF16, 100, 2, true);
	f.used[1] = false;
	tplan_sends(&f.t);
	expect(&f, 2, 1, false, false);
	assert_int_equal(f.p.held_max, 400);
	assert_int_equal(f.p.spilled, 0);
	assert_int_equal(f.t.j->base, 0);
	mk_plan_job_free(f.t.j);
}

/* One byte over hold_max: streamed once per pass, the spare pass taken;
 * held_max untouched.  With --spill: sent once and replayed. */
static void test_over_hold(void **state)
{
	struct fixture f;

	setup_job(&f, 1 << 30, 3 * 100 * 4 - 1, false, MK_DT_F32, 100, 2, true);
	f.p.held_max = 7;
	tplan_sends(&f.t);
	expect(&f, 3, 4, false, true);
	assert_int_equal(f.p.held_max, 7);
	assert_int_equal(f.p.spilled, 0);
	mk_plan_job_free(f.t.j);

	setup_job(&f, 1 << 30, 3 * 100 * 4 - 1, true, MK_DT_F32, 100, 2, true);
	tplan_sends(&f.t);
	expect(&f, 2, 1, true, false);
	assert_int_equal(f.p.spilled, 1);
	assert_int_equal(f.p.held_max, 0);
	tplan_sends(&f.t);
	assert_int_equal(f.p.spilled, 2);
	mk_plan_job_free(f.t.j);
}

/* Without a budget nothing is held, however small: streamed (--spill
 * changes nothing), the spare pass taken where offered, not otherwise. */
static void test_no_budget(void **state)
{
	struct fixture f;

	setup_job(&f, 0, 1 << 30, true, MK_DT_F32, 1, 1, false);
	tplan_sends(&f.t);
	expect(&f, 1, 2, false, false);
	assert_int_equal(f.p.held_max, 0);
	assert_int_equal(f.p.spilled, 0);
	mk_plan_job_free(f.t.j);

	setup_job(&f, 0, 1 << 30, false, MK_DT_F32, 1, 1, true);
	tplan_sends(&f.t);
	expect(&f, 2, 3, false, true);
	mk_plan_job_free(f.t.j);
}

/* A single-pass method (passthrough of inputs that must agree too): sent
 * once, neither held (held_max stays) nor spilled, even over the budget;
 * a job that must agree has no base. */
static void test_single_pass(void **state)
{
	struct fixture f;

	setup_job(&f, 1, 1, true, MK_DT_F32, 1000, 0, false);
	tplan_sends(&f.t);
	expect(&f, 0, 1, false, false);
	assert_int_equal(f.p.held_max, 0);
	assert_int_equal(f.p.spilled, 0);
	assert_int_equal(f.t.j->base, 0);
	f.t.check_equal = true;
	tplan_sends(&f.t);
	expect(&f, 0, 1, false, false);
	assert_int_equal(f.t.j->base, -1);
	mk_plan_job_free(f.t.j);
}

/* held_max is the largest held job's, not the last's. */
static void test_held_max(void **state)
{
	struct fixture f;

	setup_job(&f, 1 << 30, 1 << 20, false, MK_DT_F32, 100, 1, false);
	f.p.held_max = 5000;
	tplan_sends(&f.t);
	expect(&f, 1, 1, false, false);
	assert_int_equal(f.p.held_max, 5000);
	mk_plan_job_free(f.t.j);

	setup_job(&f, 1 << 30, 1 << 20, false, MK_DT_F32, 1000, 1, false);
	f.p.held_max = 5000;
	tplan_sends(&f.t);
	expect(&f, 1, 1, false, false);
	assert_int_equal(f.p.held_max, 12000);
	mk_plan_job_free(f.t.j);
}

/* A vocabulary job: every input counted (the fills read them), by the
 * rows of its runs (row length 4, bfloat16), and its aux inputs' rows. */
static void test_vocab(void **state)
{
	struct fixture f;
	static const uint64_t rows[N] = { 10, 3, 7 };

	setup_job(&f, 1 << 30, 1 << 20, false, MK_DT_BF16, 100 * 4, 2, false);
	for (size_t i = 0; i < N; i++) {
		struct mk_plan_input *in = &f.t.j->inputs[i];
		in->desc.ndim = 2;
		in->desc.shape[0] = 100;
		in->desc.shape[1] = 4;
		in->runs = calloc(2, sizeof(*in->runs));
		assert_non_null(in->runs);
		in->runs[0] = (struct mk_vocab_run){ 0, 0, rows[i] - 1 };
		in->runs[1] = (struct mk_vocab_run){ 50, 60, 1 };
		in->nruns = 2;
		f.used[i] = false;
	}
	struct mk_plan_vocab *vc = calloc(1, sizeof(*vc));
	assert_non_null(vc);
	f.t.j->vocab = vc;
	vc->aux = calloc(1, sizeof(*vc->aux));
	assert_non_null(vc->aux);
	vc->naux = 1;
	vc->aux[0] = f.t.j->inputs[0];
	vc->aux[0].runs = calloc(1, sizeof(*vc->aux[0].runs));
	assert_non_null(vc->aux[0].runs);
	vc->aux[0].runs[0] = (struct mk_vocab_run){ 99, 5, 5 };
	vc->aux[0].nruns = 1;
	/* (10 + 3 + 7 + 5) rows of 4 bfloat16 */
	f.p.hold_max = 25 * 4 * 2;
	tplan_sends(&f.t);
	expect(&f, 2, 1, false, false);
	assert_int_equal(f.p.held_max, 200);
	f.p.held_max = 0;
	f.p.hold_max = 199;
	tplan_sends(&f.t);
	assert_int_equal(f.t.j->sends, 3);
	assert_int_equal(f.p.held_max, 0);
	mk_plan_job_free(f.t.j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_held),
		cmocka_unit_test(test_over_hold),
		cmocka_unit_test(test_no_budget),
		cmocka_unit_test(test_single_pass),
		cmocka_unit_test(test_held_max),
		cmocka_unit_test(test_vocab),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
