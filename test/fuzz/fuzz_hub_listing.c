/* fuzz_hub_listing.c - mk_hub_listing_parse (the Hub's answer to a
 * repository listing) on arbitrary bytes. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "hub/hub.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static int hex_ok(const char *s, size_t n)
{
	if (strlen(s) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return 0;
	return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_hub_repo *r = NULL;
	struct mk_err err;

	if (mk_hub_listing_parse("org/name", d, n, &r, &err) == 0) {
		if (!hex_ok(r->commit, 40) || !strstr(r->snapshot, r->commit))
			abort();
		for (size_t i = 0; i < r->nfiles; i++) {
			const struct mk_hub_file *f = &r->files[i];
			/* a name stays inside the snapshot: no empty, "." or
			 * ".." component, not absolute */
			if (!f->name[0] || f->name[0] == '/' || !hex_ok(f->etag, f->lfs ? 64 : 40) ||
			    mk_hub_repo_file(r, f->name) != f)
				abort();
			for (const char *c = f->name; *c;) {
				size_t k = strcspn(c, "/");
				if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.'))
					abort();
				c += k;
				if (*c && !*++c)
					abort();      /* a trailing '/' */
			}
		}
		mk_hub_repo_free(r);
	} else if (r != NULL || err.code == 0 || err.msg[0] == '\0') {
		abort();
	}
	return 0;
}
