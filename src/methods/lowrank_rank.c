/* rank.c - how many singular triplets a LoRA keeps: the rules of
 * lowrank.h (max_rank, sv_epsilon, energy, rel_sigma), the strictest
 * wins.  Sums in double: each s_i^2 of a float is exact there. */
#include "lowrank_impl.h"

unsigned lr_rank(const float *s, unsigned ns, double total, bool complete, const struct mk_lowrank_opts *o)
{
	unsigned r = o->max_rank < ns ? o->max_rank : ns;

	if (o->sv_epsilon > 0) {            /* mergekit: count of s > epsilon */
		unsigned c = 0;
		for (unsigned i = 0; i < ns; i++)
			c += (double)s[i] > o->sv_epsilon;
		r = c < r ? c : r;
	}
	if (o->rel_sigma > 0) {
		double floor = ns ? o->rel_sigma * (double)s[0] : 0;
		unsigned c = 0;
		while (c < ns && s[c] > 0 && (double)s[c] >= floor)
			c++;
		r = c < r ? c : r;
	}
	if (o->energy > 0) {
		if (complete) {             /* the same sum, the same order: energy 1 is reached */
			total = 0;
			for (unsigned i = 0; i < ns; i++)
				total += (double)s[i] * s[i];
		}
		double want = o->energy * total, sum = 0;
		unsigned c = 0;
		while (c < ns && sum < want) {
			sum += (double)s[c] * s[c];
			c++;
		}
		/* not reached among ns values: the energy lies beyond the ones
		 * computed, max_rank bounds (randomized) or all are needed */
		if (sum >= want || complete)
			r = c < r ? c : r;
	}
	return r;
}
