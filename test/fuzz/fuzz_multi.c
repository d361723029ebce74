/* fuzz_multi.c - mk_multi_parse (mk-multi's recipes) on arbitrary bytes:
 * whatever it is given, it fails with diagnostics or gives steps whose
 * dependencies come before them and whose texts parse as configurations. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "multi/multi.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_multi *m = NULL;
	struct mk_diags dg;
	struct mk_err err = { 0 };
	int rc = mk_multi_parse((const char *)d, n, "fuzz.yml", "I", (n & 1) ? "OUT" : NULL, &m, &dg, &err);

	if (rc == 0) {
		if (!m || dg.nerrors)
			abort();
		for (size_t i = 0; i < m->nsteps; i++) {
			const struct mk_multi_step *s = &m->steps[i];
			struct mk_config *c = NULL;
			struct mk_diags cd;
			struct mk_err ce = { 0 };
			for (size_t k = 0; k < s->ndeps; k++)
				if (s->deps[k] >= i)
					abort();      /* a step before what it reads */
			/* the rewritten text is still a configuration */
			if (mk_config_parse(s->text, strlen(s->text), s->label, &c, &cd, &ce) && ce.code != MK_ENOMEM)
				abort();
			mk_config_free(c);
			mk_diags_free(&cd);
		}
	} else if (rc == -MK_EINVAL && !dg.nerrors) {
		abort();                      /* refused without saying why */
	}
	mk_multi_free(m);
	mk_diags_free(&dg);
	return 0;
}
