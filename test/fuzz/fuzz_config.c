/* fuzz_config.c - mk_config_parse on arbitrary bytes, then every query a
 * planner makes of a parsed config (model order, refused features,
 * normalisation, parameter lookups). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/config.h"
#include "config_queries.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_config *cfg = NULL;
	struct mk_diags diags;
	struct mk_err err;
	char line[2048];
	int rc;

	rc = mk_config_parse((const char *)d, n, "fuzz.yml", &cfg, &diags, &err);
	for (size_t i = 0; i < diags.n; i++)
		mk_diag_format(&diags, &diags.v[i], line, sizeof(line));
	if (rc == 0) {
		if (!cfg || diags.nerrors)
			abort();
		if (cfg->len != n || memcmp(cfg->text, d, n) != 0)
			abort();
		config_queries(cfg);
		mk_config_free(cfg);
	} else if (cfg || err.code == 0 || err.msg[0] == '\0' ||
		   (rc != -MK_ENOMEM && diags.nerrors == 0)) {
		abort();
	}
	mk_diags_free(&diags);
	return 0;
}
