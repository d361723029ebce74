/* fuzz_jsondoc.c - the lossless JSON reader and editor on arbitrary
 * bytes: a document it accepts writes back byte for byte, and after an
 * edit (a key replaced, a key added) reads back with the new value and
 * every other top-level member's text unchanged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);

static void edit_and_check(struct mk_jsondoc *doc, const char *path, const char *value)
{
	struct mk_jsondoc *back = NULL;
	struct mk_err err;
	char *out = NULL, *t;
	size_t len;

	if (mk_jsondoc_set(doc, path, value, &err))
		return; /* the parent is not an object: fine */
	if (mk_jsondoc_write(doc, &out, &len, &err))
		abort();
	if (mk_jsondoc_parse(out, len, "edited", &back, &err))
		abort(); /* an edit made the text unreadable */
	t = mk_jsondoc_text(back, path);
	if (!t || strcmp(t, value))
		abort();
	free(t);
	mk_jsondoc_free(back);
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct mk_jsondoc *doc = NULL;
	struct mk_err err;
	char *out = NULL;
	size_t len;

	if (mk_jsondoc_parse((const char *)d, n, "fuzz.json", &doc, &err)) {
		if (doc || err.code == 0 || !err.msg[0])
			abort();
		return 0;
	}
	if (mk_jsondoc_write(doc, &out, &len, &err) || len != n || memcmp(out, d, n))
		abort();
	free(out);
	/* the jansson bridge and transformers' layout read back */
	{
		struct mk_jsondoc *back = NULL;
		if (mk_jsondoc_int64_text(doc, &out, &len, &err))
			abort();
		if (mk_jsondoc_parse(out, len, "int64", &back, &err))
			abort();
		mk_jsondoc_free(back);
		free(out);
		if (mk_jsondoc_write_python(doc, &out, &len, &err))
			abort();
		if (mk_jsondoc_parse(out, len, "python", &back, &err))
			abort();
		mk_jsondoc_free(back);
		free(out);
	}
	/* strings and texts of the top level's first keys come out whole */
	free(mk_jsondoc_text(doc, ""));
	free(mk_jsondoc_string(doc, "chat_template", NULL));
	if (mk_jsondoc_root_type(doc) == MK_JSON_OBJECT) {
		edit_and_check(doc, "chat_template", "\"{{ messages }}\"");
		edit_and_check(doc, "vocab_size", "32002");
		edit_and_check(doc, "text_config.vocab_size", "1e400");
	}
	mk_jsondoc_free(doc);
	return 0;
}
