/* fuzz_journal.c - mk_journal_parse, the reader of the journal an
 * interrupted mk-pack leaves in OUT.mk-partial (what --resume trusts to
 * say which tensors are done), on arbitrary bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "journal/journal.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_journal *j = NULL;
	struct mk_err err;
	int rc = mk_journal_parse((const char *)d, n, "fuzz/.mk-journal", &j, &err);

	if (rc) {
		if (j || err.code == 0 || !err.msg[0])
			abort();
		return 0;
	}
	/* what it accepted: a whole-line prefix, a key of 64 hex digits or
	 * none (then nothing is done) */
	if (!j || j->valid_len > n || (j->valid_len && d[j->valid_len - 1] != '\n'))
		abort();
	if (j->key[0] && (strlen(j->key) != 64 || strspn(j->key, "0123456789abcdef") != 64))
		abort();
	if (!j->key[0] && (j->ndone || j->valid_len))
		abort();
	mk_journal_free(j);
	return 0;
}
