/* buffers.c - mk-merge's buffer pool: buffers of finished jobs, kept for the
 * next ones (see struct pool in merge_impl.h). */
#include <stdlib.h>
#include "merge_impl.h"

void mk__pool_put(struct pool *pl, void *p, size_t cap)
{
	if (!p)
		return;
	if (!pl || cap > pl->limit) {
		free(p);
		return;
	}
	while (pl->n == POOL_MAX || pl->bytes + cap > pl->limit) {
		size_t s = 0;     /* drop the smallest */
		for (size_t k = 1; k < pl->n; k++)
			if (pl->cap[k] < pl->cap[s])
				s = k;
		if (pl->cap[s] > cap) {
			free(p);
			return;
		}
		free(pl->p[s]);
		pl->bytes -= pl->cap[s];
		pl->p[s] = pl->p[--pl->n];
		pl->cap[s] = pl->cap[pl->n];
	}
	pl->p[pl->n] = p;
	pl->cap[pl->n++] = cap;
	pl->bytes += cap;
}

void mk__pool_free(struct pool *pl)
{
	for (size_t k = 0; k < pl->n; k++)
		free(pl->p[k]);
	pl->n = 0;
	pl->bytes = 0;
}

/* A buffer of at least `need` bytes in *p; the old contents are not kept
 * (every caller overwrites it). */
int mk__pool_grow(struct pool *pl, void **p, size_t *cap, size_t need)
{
	size_t best = SIZE_MAX;

	if (need <= *cap)
		return 0;
	mk__pool_put(pl, *p, *cap);
	*p = NULL;
	*cap = 0;
	for (size_t k = 0; pl && k < pl->n; k++)
		if (pl->cap[k] >= need && (best == SIZE_MAX || pl->cap[k] < pl->cap[best]))
			best = k;
	if (best != SIZE_MAX) {
		*p = pl->p[best];
		*cap = pl->cap[best];
		pl->bytes -= pl->cap[best];
		pl->p[best] = pl->p[--pl->n];
		pl->cap[best] = pl->cap[pl->n];
		return 0;
	}
	if (!(*p = malloc(need)))
		return -1;
	*cap = need;
	return 0;
}
