/* budget.c - how a memory budget is shared out (see budget.h). */
#include "core/budget.h"

void mk_budget_split(uint64_t total, struct mk_budget_split *out)
{
	uint64_t rest;

	out->stages = 4ull * MK_BUDGET_STAGE_BASE;
	out->queue = MK_BUDGET_QUEUE;
	rest = total > out->stages ? total - out->stages : 0;
	out->merge = rest / 2 > MK_BUDGET_MERGE_MIN ? rest / 2 : MK_BUDGET_MERGE_MIN;
	out->fetch = rest / 4 > MK_BUDGET_FETCH_MIN ? rest / 4 : MK_BUDGET_FETCH_MIN;
	out->pack = rest / 4 > MK_BUDGET_PACK_MIN ? rest / 4 : MK_BUDGET_PACK_MIN;
}

uint64_t mk_budget_merge_default(uint64_t phys)
{
	return phys ? phys / 4 : (1ull << 30);
}

uint64_t mk_budget_hold_max(uint64_t budget, uint64_t phys)
{
	uint64_t d;

	if (budget)
		return budget;
	d = mk_budget_merge_default(phys);
	return d < MK_BUDGET_HOLD_DEFAULT ? d : MK_BUDGET_HOLD_DEFAULT;
}

void mk_budget_fetch_fit(uint64_t budget, size_t *chunk, unsigned *qdepth)
{
	size_t c = *chunk ? *chunk : MK_READER_DEFAULT_CHUNK;
	unsigned qd = *qdepth ? *qdepth : MK_READER_DEFAULT_QDEPTH;

	while ((uint64_t)(qd + 2) * c > budget / 2 && qd > MK_BUDGET_FETCH_QDEPTH_MIN)
		qd--;
	while ((uint64_t)(qd + 2) * c > budget / 2 && c > MK_BUDGET_FETCH_CHUNK_MIN)
		c = c / 2 > MK_BUDGET_FETCH_CHUNK_MIN ? c / 2 : MK_BUDGET_FETCH_CHUNK_MIN;
	*chunk = c;
	*qdepth = qd;
}

void mk_budget_fetch_apply(uint64_t budget, size_t *chunk, unsigned *qdepth, uint64_t *hold)
{
	mk_budget_fetch_fit(budget, chunk, qdepth);
	*hold = budget / 4;
}

uint64_t mk_budget_fetch_hold(uint64_t asked)
{
	return asked ? asked : MK_BUDGET_FETCH_HOLD_DEFAULT;
}

uint64_t mk_budget_cat(uint64_t asked)
{
	return asked ? asked : MK_BUDGET_CAT_DEFAULT;
}

uint64_t mk_budget_merge_pool(uint64_t budget)
{
	return budget ? budget / 2 : MK_BUDGET_POOL_DEFAULT;
}

uint64_t mk_budget_pack_frames(uint64_t chunk_bytes)
{
	return 2 * chunk_bytes + MK_BUDGET_PACK_HEADROOM;
}

uint64_t mk_budget_pack_sync(uint64_t budget, uint64_t asked)
{
	uint64_t limit = asked ? asked : MK_BUDGET_SYNC_DEFAULT;

	if (budget && limit > budget / 4)
		limit = budget / 4 ? budget / 4 : 1;
	return limit;
}

uint64_t mk_budget_less_process(uint64_t total)
{
	return total > MK_BUDGET_STAGE_BASE ? total - MK_BUDGET_STAGE_BASE : 1;
}
