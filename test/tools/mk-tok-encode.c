/* mk-tok-encode - encode text with libmk's tokenizer, for comparing with
 * the `tokenizers` package (scripts/conformance).
 *
 *   mk-tok-encode TOKENIZER < LINES          one JSON string a line in;
 *                                            [ids] TAB [ids with special] out
 *   mk-tok-encode --prompts TOKENIZER < LINES  the lines as one batch of
 *                                            mergekit-moe prompts: a JSON
 *                                            {"input_ids", "attention_mask"}
 *
 * TOKENIZER: a directory (tokenizer.json, tokenizer_config.json) or a
 * tokenizer.json.  Exit 0 ok, 1 an error (its message on stderr), 2 usage. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/tokenize.h"

static void put_ids(const int32_t *ids, size_t n)
{
	putchar('[');
	for (size_t i = 0; i < n; i++)
		printf("%s%d", i ? ", " : "", ids[i]);
	putchar(']');
}

int main(int argc, char **argv)
{
	struct mk_tokenizer *t;
	struct mk_err err;
	bool prompts = argc == 3 && !strcmp(argv[1], "--prompts");
	char *line = NULL, **texts = NULL;
	size_t cap = 0, nt = 0;
	ssize_t got;
	int rc = 0;

	if (argc != 2 + prompts || argv[argc - 1][0] == '-') {
		fprintf(stderr, "usage: mk-tok-encode [--prompts] TOKENIZER < LINES\n");
		return 2;
	}
	if (mk_tokenizer_open(argv[argc - 1], &t, &err)) {
		fprintf(stderr, "mk-tok-encode: %s\n", err.msg);
		return 1;
	}
	while ((got = getline(&line, &cap, stdin)) > 0) {
		json_error_t je;
		json_t *j = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
		if (!json_is_string(j)) {
			fprintf(stderr, "mk-tok-encode: line %zu is not a JSON string\n", nt + 1);
			json_decref(j);
			rc = 1;
			break;
		}
		const char *s = json_string_value(j);
		size_t len = json_string_length(j);
		if (prompts) {
			char **p = realloc(texts, (nt + 1) * sizeof *p);
			if (!p || !(p[nt] = strdup(s))) {
				free(p ? p : texts);
				return 1;
			}
			texts = p;
		} else {
			int32_t *a = NULL, *b = NULL;
			size_t na, nb;
			if (mk_tokenizer_encode(t, s, len, false, &a, &na, &err) ||
			    mk_tokenizer_encode(t, s, len, true, &b, &nb, &err)) {
				fprintf(stderr, "mk-tok-encode: line %zu: %s\n", nt + 1, err.msg);
				rc = 1;
			} else {
				put_ids(a, na);
				putchar('\t');
				put_ids(b, nb);
				putchar('\n');
			}
			free(a), free(b);
		}
		json_decref(j);
		nt++;
		if (rc)
			break;
	}
	if (!rc && prompts) {
		struct mk_tokbatch b;
		if (mk_tokenizer_encode_prompts(t, (const char *const *)texts, nt, &b, &err)) {
			fprintf(stderr, "mk-tok-encode: %s\n", err.msg);
			rc = 1;
		} else {
			printf("{\"input_ids\": [");
			for (size_t r = 0; r < b.rows; r++) {
				printf("%s", r ? ", " : "");
				put_ids(b.ids + r * b.cols, b.cols);
			}
			printf("], \"attention_mask\": [");
			for (size_t r = 0; r < b.rows; r++) {
				printf("%s[", r ? ", " : "");
				for (size_t c = 0; c < b.cols; c++)
					printf("%s%d", c ? ", " : "", b.mask[r * b.cols + c]);
				putchar(']');
			}
			printf("]}\n");
			mk_tokbatch_free(&b);
		}
	}
	for (size_t i = 0; prompts && i < nt; i++)
		free(texts[i]);
	free(texts);
	free(line);
	mk_tokenizer_free(t);
	return rc;
}
