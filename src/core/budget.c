/* budget.c - how a memory budget is shared out (see budget.h). */
#include "mk/budget.h"
#include "mk/reader.h"

void mk_budget_split(uint64_t total, struct mk_budget_split *out)
{
	out->merge = total / 2;
	out->fetch = total / 4 > MK_BUDGET_FETCH_MIN ? total / 4 : MK_BUDGET_FETCH_MIN;
	out->pack = total / 4 > MK_BUDGET_PACK_MIN ? total / 4 : MK_BUDGET_PACK_MIN;
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
