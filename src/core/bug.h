/* bug.h - libmk's internal invariants: a broken one aborts with its
 * place, since continuing would write wrong bytes.  Never for bad input.
 */
#ifndef MK_CORE_BUG_H
#define MK_CORE_BUG_H

/* Abort on a broken internal invariant (never on bad input). */
#define MK_BUG(...) mk_bug(__FILE__, __LINE__, __VA_ARGS__)
void mk_bug(const char *file, int line, const char *fmt, ...)
	__attribute__((noreturn, format(printf, 3, 4)));

#endif
