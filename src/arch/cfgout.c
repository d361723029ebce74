/* cfgout.c - the output config.json (see mk-compat(7)): the donor's JSON
 * with dtype, layer counts and vocab size set, written as transformers
 * writes it (json.dumps(indent=2, sort_keys=True) + "\n";
 * mk_jsondoc_write_python). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "arch/arch.h"
#include "core/jsondoc.h"
#include "core/sbuf.h"
#include "arch_impl.h"

/* Set an integer at a dotted path; the intermediate objects must exist
 * (as mergekit's set_config_value): false when one does not. */
static bool dotted_set(struct mk_jsondoc *doc, const char *key, int64_t value, bool *oom)
{
	char num[32];
	struct mk_err e;

	snprintf(num, sizeof(num), "%" PRId64, value);
	if (mk_jsondoc_set(doc, key, num, &e)) {
		*oom |= e.code == MK_ENOMEM;
		return false;
	}
	return true;
}

int mk_hfconfig_edit(const char *donor, size_t len, const char *label, const struct mk_arch *a,
		   const char *dtype, const char *architecture, const int64_t *num_layers, int64_t vocab_size, char **out,
		   size_t *out_len, char **warnings, struct mk_err *err)
{
	struct mk_sbuf w = { 0 };
	struct mk_jsondoc *doc = NULL;
	bool oom = false;
	int rc = 0;

	*out = NULL;
	*out_len = 0;
	if (warnings)
		*warnings = NULL;
	if (!label)
		label = "config.json";
	/* read losslessly (integers of any size), edited, and written as
	 * transformers lays a config out */
	if ((rc = mk_jsondoc_parse(donor, len, label, &doc, err)))
		goto out;
	if (mk_jsondoc_root_type(doc) != MK_JSON_OBJECT) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: not a JSON object (a config.json holds one)", label);
		goto out;
	}
	if (dtype) {
		char *q = mk_json_quote(dtype, strlen(dtype));
		oom |= !q || mk_jsondoc_set(doc, "dtype", q, err) != 0;
		if (q && mk_jsondoc_find(doc, "torch_dtype", NULL) == 0)
			oom |= mk_jsondoc_set(doc, "torch_dtype", q, err) != 0;
		free(q);
	}
	if (architecture) {
		char *q = mk_json_quote(architecture, strlen(architecture)), *list = NULL;
		if (q && (list = malloc(strlen(q) + 3)))
			snprintf(list, strlen(q) + 3, "[%s]", q);
		oom |= !list || mk_jsondoc_set(doc, "architectures", list, err) != 0;
		free(q);
		free(list);
	}
	for (size_t m = 0; a && num_layers && m < a->nmodules; m++) {
		const struct mk_arch_module *mod = &a->modules[m];
		if (num_layers[m] < 0)
			continue;
		if (!mod->num_layers_key) {
			if (num_layers[m] > 0)
				mk_sbuf_fmt(&w, "%smodule '%s' has no configuration key for its layer count, but the "
				       "count is not zero (%" PRId64 ")", w.n ? "\n" : "", mod->name, num_layers[m]);
			continue;
		}
		if (!dotted_set(doc, mod->num_layers_key, num_layers[m], &oom))
			mk_sbuf_fmt(&w, "%s%s: cannot set \"%s\" (a parent object is missing)", w.n ? "\n" : "", label,
			       mod->num_layers_key);
	}
	if (vocab_size >= 0) {
		const char *vk = a ? mk_arch_vocab_key(a) : "vocab_size";
		if (!dotted_set(doc, vk, vocab_size, &oom))
			mk_sbuf_fmt(&w, "%s%s: cannot set \"%s\" (a parent object is missing)", w.n ? "\n" : "", label, vk);
	}
	if (oom || w.oom) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory writing %s", label);
		goto out;
	}
	if ((rc = mk_jsondoc_write_python(doc, out, out_len, err)))
		goto out;
	if (warnings) {
		*warnings = w.p;
		w.p = NULL;
	}
out:
	free(w.p);
	mk_jsondoc_free(doc);
	return rc;
}
