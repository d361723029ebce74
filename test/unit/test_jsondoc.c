/* test_jsondoc.c - lossless JSON: what Python's json reads is read, what
 * it refuses is refused with the line and column, and an edit changes
 * one value and no other byte. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include "core/jsondoc.h"

static struct mk_jsondoc *parse_ok(const char *s)
{
	struct mk_jsondoc *d = NULL;
	struct mk_err err;

	if (mk_jsondoc_parse(s, strlen(s), "t.json", &d, &err)) {
		print_error("refused '%s': %s\n", s, err.msg);
		fail();
	}
	return d;
}

static void parse_bad(const char *s, const char *msg)
{
	struct mk_jsondoc *d = (struct mk_jsondoc *)1;
	struct mk_err err;

	assert_int_equal(mk_jsondoc_parse(s, strlen(s), "t.json", &d, &err), -MK_EFORMAT);
	assert_null(d);
	if (!strstr(err.msg, msg)) {
		print_error("'%s': message '%s' lacks '%s'\n", s, err.msg, msg);
		fail();
	}
}

/* set path to value in s; the written text must be want */
static void set_is(const char *s, const char *path, const char *value, const char *want)
{
	struct mk_jsondoc *d = parse_ok(s), *again;
	struct mk_err err;
	char *out, *t;
	size_t len;

	assert_int_equal(mk_jsondoc_set(d, path, value, &err), 0);
	assert_int_equal(mk_jsondoc_write(d, &out, &len, &err), 0);
	assert_string_equal(out, want);
	assert_int_equal(len, strlen(want));
	/* and it reads back, with the new value there */
	again = parse_ok(out);
	t = mk_jsondoc_text(again, path);
	assert_non_null(t);
	assert_string_equal(t, value);
	free(t);
	mk_jsondoc_free(again);
	free(out);
	mk_jsondoc_free(d);
}

static void test_reads_what_python_reads(void **state)
{
	static const char *const ok[] = {
		"{}", "[]", "0", "-0", "1.5e-300", "\"x\"", "null", "true", " {\"a\" : [1, 2, {\"b\": null}] } \n",
		/* transformers' model_max_length: beyond 64 bits */
		"{\"model_max_length\": 1000000000000000019884624838656}",
		"NaN", "[Infinity, -Infinity]", "\"\\u00e9\\ud83d\\ude00\\n\"", "\"caf\xc3\xa9\"",
		"{\"a\": 1, \"a\": 2}",
	};
	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		mk_jsondoc_free(parse_ok(ok[i]));
}

static void test_refuses_with_position(void **state)
{
	(void)state;
	parse_bad("{\"a\": 1,}", "t.json:1:9: a comma before the closing bracket");
	parse_bad("{\n  \"a\": 01\n}", "t.json:2:9: expected ',' or '}' after an object member");
	parse_bad("{\"a\" 1}", "t.json:1:6: expected ':' after the key");
	parse_bad("{a: 1}", "t.json:1:2: expected a key");
	parse_bad("[1, 2", "t.json:1:6: expected ',' or ']'");
	parse_bad("\"ab", "t.json:1:1: a string that never ends");
	parse_bad("\"a\tb\"", "a control character inside a string");
	parse_bad("\"\\x\"", "an unknown escape");
	parse_bad("\"\\u12\"", "a \\u escape without four hex digits");
	parse_bad("\"\xff\"", "bytes that are not UTF-8");
	parse_bad("\"\xed\xa0\x80\"", "bytes that are not UTF-8"); /* a surrogate in UTF-8 */
	parse_bad("1.", "expected digits after the decimal point");
	parse_bad("1e", "expected digits in the exponent");
	parse_bad("{} x", "t.json:1:4: more after the JSON value");
	parse_bad("", "expected a value, found the end of the file");
	parse_bad("\xef\xbb\xbf{}", "t.json:1:1: expected a value");
	parse_bad("// c\n{}", "expected a value");
	parse_bad("{\"caf\xc3\xa9\": x}", "t.json:1:10: expected a value"); /* columns count characters */
	{
		/* nesting is bounded */
		char deep[2 * MK_JSONDOC_MAX_DEPTH + 8];
		size_t n = MK_JSONDOC_MAX_DEPTH + 2;
		memset(deep, '[', n);
		memset(deep + n, ']', n);
		deep[2 * n] = '\0';
		parse_bad(deep, "nested too deeply");
	}
}

static void test_lookup(void **state)
{
	struct mk_jsondoc *d = parse_ok("{\"a\": {\"b\": \"x\\ty\"}, \"n\": 12345678901234567890123, \"a.b\": 1,"
					" \"d\": 1, \"d\": [2]}");
	enum mk_json_type t;
	size_t len;
	char *s;

	(void)state;
	assert_int_equal(mk_jsondoc_root_type(d), MK_JSON_OBJECT);
	assert_int_equal(mk_jsondoc_find(d, "a.b", &t), 0);
	assert_int_equal(t, MK_JSON_STRING);
	s = mk_jsondoc_string(d, "a.b", &len);
	assert_string_equal(s, "x\ty");
	assert_int_equal(len, 3);
	free(s);
	s = mk_jsondoc_text(d, "n");
	assert_string_equal(s, "12345678901234567890123"); /* the digits, kept */
	free(s);
	assert_int_equal(mk_jsondoc_find(d, "d", &t), 0);
	assert_int_equal(t, MK_JSON_ARRAY);                /* the last one counts */
	assert_int_equal(mk_jsondoc_find(d, "a.c", NULL), -1);
	assert_int_equal(mk_jsondoc_find(d, "n.x", NULL), -1);
	assert_null(mk_jsondoc_string(d, "n", NULL));
	{
		struct mk_jsondoc *q = parse_ok("\"\\u0000\\ud83d\\ude00\\ud800\"");
		s = mk_jsondoc_string(q, "", &len);
		mk_jsondoc_free(q);
	}
	assert_int_equal(len, 1 + 4 + 3);                  /* NUL, U+1F600, U+FFFD for the lone half */
	assert_memory_equal(s, "\0\xf0\x9f\x98\x80\xef\xbf\xbd", 8);
	free(s);
	mk_jsondoc_free(d);
}

static void test_edits_keep_every_other_byte(void **state)
{
	struct mk_jsondoc *d;
	struct mk_err err;
	char *out;
	size_t len;
	static const char *donor = "{\n    \"bos_token\": \"<s>\",\n    \"model_max_length\": 1000000000000000019884624838656,\n"
				   "    \"x\":{ \"y\" :1 }\n}\n";

	(void)state;
	/* unedited: the same bytes */
	d = parse_ok(donor);
	assert_int_equal(mk_jsondoc_write(d, &out, &len, &err), 0);
	assert_int_equal(len, strlen(donor));
	assert_string_equal(out, donor);
	free(out);
	mk_jsondoc_free(d);
	/* a value replaced in place */
	set_is(donor, "bos_token", "\"<|begin|>\"",
	       "{\n    \"bos_token\": \"<|begin|>\",\n    \"model_max_length\": 1000000000000000019884624838656,\n"
	       "    \"x\":{ \"y\" :1 }\n}\n");
	set_is(donor, "x.y", "[1, 2]",
	       "{\n    \"bos_token\": \"<s>\",\n    \"model_max_length\": 1000000000000000019884624838656,\n"
	       "    \"x\":{ \"y\" :[1, 2] }\n}\n");
	/* a new member: last, indented and spaced as the last one */
	set_is(donor, "chat_template", "\"{{ m }}\"",
	       "{\n    \"bos_token\": \"<s>\",\n    \"model_max_length\": 1000000000000000019884624838656,\n"
	       "    \"x\":{ \"y\" :1 },\n    \"chat_template\":\"{{ m }}\"\n}\n");
	set_is(donor, "x.z", "true",
	       "{\n    \"bos_token\": \"<s>\",\n    \"model_max_length\": 1000000000000000019884624838656,\n"
	       "    \"x\":{ \"y\" :1, \"z\" :true }\n}\n");
	set_is("{}", "a", "1", "{\"a\": 1}");
	set_is("{\"a\":1,\"b\":2}", "c", "3", "{\"a\":1,\"b\":2,\"c\":3}");
	set_is("{\n  \"a\": 1,\n  \"b\": 2\n}", "c", "3", "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}");
	/* the last of a duplicate key is the one replaced */
	set_is("{\"a\": 1, \"a\": 2}", "a", "3", "{\"a\": 1, \"a\": 3}");
	/* two edits, one place: in the order made; the second of one path wins */
	d = parse_ok("{\"a\": 1}");
	assert_int_equal(mk_jsondoc_set(d, "b", "2", &err), 0);
	assert_int_equal(mk_jsondoc_set(d, "c", "3", &err), 0);
	assert_int_equal(mk_jsondoc_set(d, "a", "0", &err), 0);
	assert_int_equal(mk_jsondoc_set(d, "a", "9", &err), 0);
	assert_int_equal(mk_jsondoc_write(d, &out, &len, &err), 0);
	assert_string_equal(out, "{\"a\": 9, \"b\": 2, \"c\": 3}");
	free(out);
	mk_jsondoc_free(d);
	d = parse_ok("{}");
	assert_int_equal(mk_jsondoc_set(d, "b", "2", &err), 0);
	assert_int_equal(mk_jsondoc_set(d, "c", "3", &err), 0);
	assert_int_equal(mk_jsondoc_write(d, &out, &len, &err), 0);
	assert_string_equal(out, "{\"b\": 2, \"c\": 3}");
	free(out);
	/* what cannot be set */
	assert_int_equal(mk_jsondoc_set(d, "a.b", "1", &err), -MK_EINVAL);   /* a is a number */
	assert_int_equal(mk_jsondoc_set(d, "q.r", "1", &err), -MK_EINVAL);   /* q is missing */
	assert_int_equal(mk_jsondoc_set(d, "a", "1 2", &err), -MK_EINVAL);   /* not one value */
	assert_non_null(strstr(err.msg, "setting a in t.json: the new value:1:3: more after the JSON value"));
	mk_jsondoc_free(d);
}

/* as Python writes json.loads(text) with json.dumps(indent=2,
 * sort_keys=True): the strings below are what python3 printed */
static void python_is(const char *text, const char *want)
{
	struct mk_jsondoc *d = parse_ok(text);
	struct mk_err err;
	char *out;
	size_t len;

	assert_int_equal(mk_jsondoc_write_python(d, &out, &len, &err), 0);
	assert_string_equal(out, want);
	assert_int_equal(len, strlen(want));
	free(out);
	mk_jsondoc_free(d);
}

/* remove path from s; the written text must be want, and must read
 * back without the key */
static void remove_is(const char *s, const char *path, const char *want)
{
	struct mk_jsondoc *d = parse_ok(s), *again;
	enum mk_json_type ty;
	struct mk_err err;
	char *out;
	size_t len;

	assert_int_equal(mk_jsondoc_remove(d, path, &err), 0);
	assert_int_equal(mk_jsondoc_write(d, &out, &len, &err), 0);
	assert_string_equal(out, want);
	assert_int_equal(len, strlen(want));
	again = parse_ok(out);
	assert_int_equal(mk_jsondoc_find(again, path, &ty), -1);
	mk_jsondoc_free(again);
	free(out);
	mk_jsondoc_free(d);
}

static void test_remove(void **state)
{
	(void)state;
	/* last, first, middle, only member; two layouts */
	remove_is("{\n  \"a\": 1,\n  \"b\": [2, 3],\n  \"c\": \"x\"\n}\n", "c", "{\n  \"a\": 1,\n  \"b\": [2, 3]\n}\n");
	remove_is("{\n  \"a\": 1,\n  \"b\": [2, 3],\n  \"c\": \"x\"\n}\n", "a", "{\n  \"b\": [2, 3],\n  \"c\": \"x\"\n}\n");
	remove_is("{\n  \"a\": 1,\n  \"b\": [2, 3],\n  \"c\": \"x\"\n}\n", "b", "{\n  \"a\": 1,\n  \"c\": \"x\"\n}\n");
	remove_is("{\"a\":1,\"b\":{\"c\":2}}", "b", "{\"a\":1}");
	remove_is("{\"a\":1,\"b\":{\"c\":2}}", "b.c", "{\"a\":1,\"b\":{}}");
	remove_is("{ \"only\" : {\"x\": [1]} }", "only", "{}");
	/* missing: nothing changes */
	remove_is("{\"a\": 1}", "z", "{\"a\": 1}");
	/* a value set before is removed with its member */
	{
		struct mk_jsondoc *d = parse_ok("{\"a\": 1, \"b\": 2}");
		struct mk_err err;
		char *out;
		size_t len;
		assert_int_equal(mk_jsondoc_set(d, "b", "\"new\"", &err), 0);
		assert_int_equal(mk_jsondoc_remove(d, "b", &err), 0);
		assert_int_equal(mk_jsondoc_write(d, &out, &len, &err), 0);
		assert_string_equal(out, "{\"a\": 1}");
		free(out);
		mk_jsondoc_free(d);
	}
}

static void test_python_layout(void **state)
{
	(void)state;
	python_is("{\"b\": 1, \"a\": [1.0, 1e-5, 0.02, 1E3, -0, -0.0, 1e400, 12345678901234567890123]}",
		  "{\n  \"a\": [\n    1.0,\n    1e-05,\n    0.02,\n    1000.0,\n    0,\n    -0.0,\n    Infinity,\n"
		  "    12345678901234567890123\n  ],\n  \"b\": 1\n}\n");
	python_is("{\"k\": \"caf\xc3\xa9 \\u00e9 \\ud83d\\ude00 \\/\", \"k\": {}, \"e\": [], \"n\": [NaN, true, null]}",
		  "{\n  \"e\": [],\n  \"k\": {},\n  \"n\": [\n    NaN,\n    true,\n    null\n  ]\n}\n");
	python_is("{\"s\": \"caf\xc3\xa9 \\ud83d\\ude00 \\/\\t\"}",
		  "{\n  \"s\": \"caf\\u00e9 \\ud83d\\ude00 /\\t\"\n}\n");
	python_is("[]", "[]\n");
}

static void test_quote(void **state)
{
	char *q = mk_json_quote("a\"b\\c\n\x01\xc3\xa9/", 10);

	(void)state;
	assert_string_equal(q, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9/\"");
	free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_what_python_reads),
		cmocka_unit_test(test_refuses_with_position),
		cmocka_unit_test(test_lookup),
		cmocka_unit_test(test_edits_keep_every_other_byte),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_python_layout),
		cmocka_unit_test(test_quote),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
