/* yaml_bounds.c - what mk reads of any YAML document (a merge
 * configuration, mk-multi's recipes, mk-moe's configuration), checked by
 * libyaml's event parser before the document is loaded: nesting, nodes,
 * size.  libyaml's scanner does work proportional to the nesting for
 * every token (its stack of possible simple keys), so a text of 2 MB of
 * '[' took an hour; stopped at MK_YAML_MAX_DEPTH the scan stays linear,
 * and the loader never sees such a text. */
#include <stdio.h>
#include <yaml.h>
#include "config/config.h"

int mk_yaml_check(const char *text, size_t len, struct mk_yaml_over *over)
{
	yaml_parser_t yp;
	yaml_event_t e;
	size_t depth = 0, nodes = 0;
	int rc = 0;

	*over = (struct mk_yaml_over){ .line = 1, .col = 1 };
	if (len > MK_CONFIG_MAX) {
		snprintf(over->msg, sizeof(over->msg), "the document is %zu bytes, more than the %u MiB mk reads", len,
			 MK_CONFIG_MAX >> 20);
		return 1;
	}
	if (!yaml_parser_initialize(&yp))
		return -1;
	yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
	for (bool done = false; !done && !rc;) {
		if (!yaml_parser_parse(&yp, &e)) {
			/* a syntax error: the loader reports it, as ever */
			if (yp.error == YAML_MEMORY_ERROR)
				rc = -1;
			break;
		}
		switch (e.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_MAPPING_START_EVENT:
		case YAML_SEQUENCE_START_EVENT:
			if (++depth > MK_YAML_MAX_DEPTH) {
				snprintf(over->msg, sizeof(over->msg),
					 "lists and maps nested more than %d deep (a merge configuration nests 6 or so)",
					 MK_YAML_MAX_DEPTH);
				rc = 1;
			}
			/* fall through */
		case YAML_SCALAR_EVENT:
		case YAML_ALIAS_EVENT:
			if (!rc && ++nodes > MK_YAML_MAX_NODES) {
				snprintf(over->msg, sizeof(over->msg),
					 "more than %d YAML nodes (lists, maps, scalars and aliases; a merge of 400 slices of "
					 "10 models has about 20000)",
					 MK_YAML_MAX_NODES);
				rc = 1;
			}
			if (e.type == YAML_ALIAS_EVENT)
				over->aliases++;
			break;
		case YAML_MAPPING_END_EVENT:
		case YAML_SEQUENCE_END_EVENT:
			depth--;
			break;
		default:
			break;
		}
		if (rc == 1) {
			over->line = (unsigned)e.start_mark.line + 1;
			over->col = (unsigned)e.start_mark.column + 1;
		}
		yaml_event_delete(&e);
	}
	yaml_parser_delete(&yp);
	return rc;
}
