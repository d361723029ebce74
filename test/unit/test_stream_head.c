/* test_stream_head.c - the mk stream's HEAD and JOB frames: the manifest
 * and plan jobs encoded, decoded and refused, and chunks checked against
 * them (the frames themselves: test_stream.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "stream/manifest.h"
#include "stream/job.h"
#include "mk/stream.h"

static void assert_msg(const struct mk_err *err, const char *sub)
{
	if (!strstr(err->msg, sub))
		fail_msg("message '%s' lacks '%s'", err->msg, sub);
}

/* -------------------------------------------------------------- manifest */

static void test_manifest_roundtrip(void **state)
{
	struct mk_manifest *m = mk_manifest_new("plan", "mk-test 1.0"), *d;
	struct mk_err err;
	char *s, *s2;
	size_t len, len2;

	assert_non_null(m);
	m->chunk_bytes = 4194304;
	m->planned = true; /* a plan carries its (here empty) model table */
	assert_int_equal(mk_manifest_add_tensor(m, "model.embed", MK_DT_BF16, 2, (uint64_t[]){ 8, 16 }, &err), 0);
	assert_int_equal(mk_manifest_add_tensor(m, "scale", MK_DT_F32, 0, NULL, &err), 0);
	assert_int_equal(mk_manifest_add_tensor(m, "q", MK_DT_F4, 3, (uint64_t[]){ 2, 3, 5 }, &err), 0);
	assert_int_equal(mk_manifest_add_tensor(m, "empty", MK_DT_I64, 2, (uint64_t[]){ 0, 7 }, &err), 0);
	assert_int_equal(mk_manifest_add_tensor(m, "big", MK_DT_U8, 1, (uint64_t[]){ 1ull << 40 }, &err), 0);
	/* 17 more: crosses the first allocation */
	for (int i = 0; i < 17; i++) {
		char nm[16];
		snprintf(nm, sizeof(nm), "t%02d", i);
		assert_int_equal(mk_manifest_add_tensor(m, nm, MK_DT_F16, 1, (uint64_t[]){ (uint64_t)i + 1 }, &err), 0);
	}
	assert_int_equal(mk_manifest_add_file(m, "config.json", 663, &err), 0);
	assert_int_equal(mk_manifest_add_file(m, "tok/vocab.txt", 0, &err), 0);
	/* an odd number of F4 elements is refused */
	assert_int_equal(mk_manifest_add_tensor(m, "odd", MK_DT_F4, 1, (uint64_t[]){ 3 }, &err), -MK_EFORMAT);
	assert_int_equal(m->ntensors, 22);
	assert_int_equal(m->tensors[0].nbytes, 256);
	assert_int_equal(m->tensors[2].nbytes, 15);
	assert_int_equal(mk_manifest_total_bytes(m), 256 + 4 + 15 + 0 + (1ull << 40) + 2 * (17 * 18 / 2));

	assert_int_equal(mk_manifest_encode(m, &s, &len, &err), 0);
	assert_int_equal(strlen(s), len);
	assert_int_equal(mk_manifest_decode(s, len, &d, &err), 0);
	assert_string_equal(d->kind, "plan");
	assert_string_equal(d->producer, "mk-test 1.0");
	assert_int_equal(d->chunk_bytes, 4194304);
	assert_int_equal(d->ntensors, m->ntensors);
	for (size_t i = 0; i < m->ntensors; i++) {
		assert_string_equal(d->tensors[i].name, m->tensors[i].name);
		assert_int_equal(d->tensors[i].desc.dtype, m->tensors[i].desc.dtype);
		assert_int_equal(d->tensors[i].desc.ndim, m->tensors[i].desc.ndim);
		for (unsigned k = 0; k < m->tensors[i].desc.ndim; k++)
			assert_int_equal(d->tensors[i].desc.shape[k], m->tensors[i].desc.shape[k]);
		assert_int_equal(d->tensors[i].nelem, m->tensors[i].nelem);
		assert_int_equal(d->tensors[i].nbytes, m->tensors[i].nbytes);
	}
	assert_int_equal(d->tensors[1].desc.ndim, 0);
	assert_int_equal(d->tensors[1].nelem, 1);
	assert_int_equal(d->tensors[3].nelem, 0);
	assert_int_equal(d->nfiles, 2);
	assert_string_equal(d->files[0].name, "config.json");
	assert_int_equal(d->files[0].size, 663);
	assert_string_equal(d->files[1].name, "tok/vocab.txt");
	assert_int_equal(d->files[1].size, 0);
	assert_int_equal(mk_manifest_find(d, "q"), 2);
	assert_int_equal(mk_manifest_find(d, "t16"), 21);
	assert_int_equal(mk_manifest_find(d, "nope"), -1);
	assert_int_equal(mk_manifest_total_bytes(d), mk_manifest_total_bytes(m));
	/* encoding the decoded manifest gives the same bytes */
	assert_int_equal(mk_manifest_encode(d, &s2, &len2, &err), 0);
	assert_int_equal(len2, len);
	assert_memory_equal(s2, s, len);
	free(s);
	free(s2);
	mk_manifest_free(d);
	mk_manifest_free(m);

	/* the plan's fields are typed; unknown keys survive decode -> encode
	 * -> decode */
	static const char in[] =
		"{\"kind\":\"tensors\",\"models\":[{\"ref\":\"org/a\",\"shards\":[{\"name\":\"m.safetensors\","
		"\"size\":77,\"header_sha256\":\"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\"}]}],"
		"\"seed\":42,\"jobs\":3,\"held_bytes_max\":1024,\"spilled_jobs\":1,"
		"\"plugins\":[{\"name\":\"wavg\",\"abi\":2,\"spec_sha256\":\"ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100\"}],"
		"\"tensors\":[{\"name\":\"w\",\"dtype\":\"BF16\",\"shape\":[2,2],\"extra\":true}],"
		"\"future\":{\"x\":[1,2,3]}}";
	for (int round = 0; round < 2; round++) {
		assert_int_equal(mk_manifest_decode(round ? s : in, round ? len : strlen(in), &d, &err), 0);
		assert_string_equal(d->kind, "tensors");
		assert_string_equal(d->producer, "");
		assert_int_equal(d->chunk_bytes, 0);
		assert_int_equal(d->nfiles, 0);
		assert_int_equal(d->ntensors, 1);
		assert_int_equal(d->tensors[0].nbytes, 8);
		assert_true(d->planned);
		assert_int_equal(d->nmodels, 1);
		assert_string_equal(d->models[0].ref, "org/a");
		assert_int_equal(d->models[0].nshards, 1);
		assert_string_equal(d->models[0].shards[0].name, "m.safetensors");
		assert_int_equal(d->models[0].shards[0].size, 77);
		assert_int_equal(d->models[0].shards[0].header_sha256[1], 0x11);
		assert_int_equal(d->models[0].shards[0].header_sha256[31], 0xff);
		assert_int_equal(d->seed, 42);
		assert_int_equal(d->njobs, 3);
		assert_int_equal(d->held_bytes_max, 1024);
		assert_int_equal(d->spilled_jobs, 1);
		assert_int_equal(d->nplugins, 1);
		assert_string_equal(d->plugins[0].name, "wavg");
		assert_int_equal(d->plugins[0].abi, 2);
		assert_string_equal(d->plugins[0].spec_sha256,
				    "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100");
		assert_non_null(d->extra);
		assert_int_equal(json_array_size(json_object_get(json_object_get(d->extra, "future"), "x")), 3);
		assert_null(json_object_get(d->extra, "seed"));   /* typed, not extra */
		if (round)
			free(s);
		assert_int_equal(mk_manifest_encode(d, &s, &len, &err), 0);
		mk_manifest_free(d);
	}
	free(s);
	mk_manifest_free(NULL);
}

static void expect_bad_manifest(const char *json, const char *sub)
{
	struct mk_manifest *m = (struct mk_manifest *)1;
	struct mk_err err;

	mk_err_clear(&err);
	if (mk_manifest_decode(json, strlen(json), &m, &err) != -MK_EFORMAT)
		fail_msg("accepted: %s", json);
	assert_null(m);
	assert_int_equal(err.code, MK_EFORMAT);
	if (sub)
		assert_msg(&err, sub);
}

static void test_manifest_errors(void **state)
{
	expect_bad_manifest("", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[]} x", "valid JSON");
	expect_bad_manifest("[1,2]", "not a JSON object");
	expect_bad_manifest("{\"tensors\":[]}", "missing \"kind\"");
	expect_bad_manifest("{\"kind\":3,\"tensors\":[]}", "missing \"kind\"");
	expect_bad_manifest("{\"kind\":\"tensors\"}", "\"tensors\" is not an array");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":{}}", "\"tensors\" is not an array");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"BF17\",\"shape\":[1]}]}",
			    "tensor #0");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"bf16\",\"shape\":[1]}]}",
			    "known dtype");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"shape\":[1]}]}", "tensor #0");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"dtype\":\"F32\",\"shape\":[1]}]}", "tensor #0");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\"}]}", "tensor #0");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[7]}", "tensor #0");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":["
			    "{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[1]},"
			    "{\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[1]},"
			    "{\"name\":\"a\",\"dtype\":\"F16\",\"shape\":[2]}]}",
			    "tensor 'a' is listed twice");
	expect_bad_manifest("{\"kind\":\"tensors\",\"kind\":\"plan\",\"tensors\":[]}", "duplicate");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"name\":\"b\",\"dtype\":\"F32\",\"shape\":[1]}]}",
			    "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[-1]}]}",
			    "tensor 'a': bad shape");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2.5]}]}",
			    "bad shape");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[2.0]}]}",
			    "bad shape");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[\"2\"]}]}",
			    "bad shape");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[null]}]}",
			    "bad shape");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[4294967296,4294967296]}]}",
			    "overflows");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[4611686018427387904]}]}",
			    NULL);
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F4\",\"shape\":[3]}]}",
			    "not whole bytes");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"__metadata__\",\"dtype\":\"F32\",\"shape\":[1]}]}",
			    "may not be named '__metadata__'");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[],\"files\":{}}", "\"files\" is not an array");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[],\"files\":[{\"name\":\"a\"}]}", "file #0");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[],\"files\":[{\"name\":\"a\",\"size\":-5}]}", "file #0");
	/* read a member at a time: the same strictness, and bounds */
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[],\"tensors\":[]}", "duplicate key \"tensors\"");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[],}", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"F32\",\"shape\":[1]},]}",
			    "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[] \"files\":[]}", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\" \"x\",\"tensors\":[]}", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a]\",\"dtype\":\"F32\",\"shape\":[1}]}",
			    "valid JSON");
	expect_bad_manifest("{\"kind\":\"tens\\\"ors\",\"tensors\":[]}", "unknown kind");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\"", "valid JSON");
	expect_bad_manifest("{\"kind\":\"tensors\",\"tensors\":[],\"x\":tru}", "valid JSON");
	expect_bad_manifest("{\"kind\":\"plan\",\"tensors\":[]}", "needs a \"models\" table");
	{
		/* an entry over MK_HEAD_VALUE_MAX; the other values over it together */
		size_t n = MK_HEAD_VALUE_MAX + 64;
		char *big = malloc(n + 256);
		assert_non_null(big);
		int k = snprintf(big, 256, "{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"");
		memset(big + k, 'a', n);
		strcpy(big + k + n, "\",\"dtype\":\"F32\",\"shape\":[1]}]}");
		expect_bad_manifest(big, "tensors #0 (at position 29): 1048677 bytes of JSON");
		k = snprintf(big, 256, "{\"kind\":\"tensors\",\"tensors\":[],\"x\":\"");
		memset(big + k, 'a', n / 2);
		k += snprintf(big + k + n / 2, 256, "\",\"y\":\"") + (int)(n / 2);
		memset(big + k, 'a', n / 2);
		strcpy(big + k + n / 2, "\"}");
		expect_bad_manifest(big, "the values beside its lists");
		free(big);
	}

	/* too many dimensions is an error, MK_MAX_DIMS is fine */
	char buf[1024];
	struct mk_manifest *m;
	struct mk_err err;
	for (int nd = MK_MAX_DIMS; nd <= MK_MAX_DIMS + 1; nd++) {
		int o = snprintf(buf, sizeof(buf),
				 "{\"kind\":\"tensors\",\"tensors\":[{\"name\":\"a\",\"dtype\":\"U8\",\"shape\":[");
		for (int i = 0; i < nd; i++)
			o += snprintf(buf + o, sizeof(buf) - (size_t)o, "%s1", i ? "," : "");
		snprintf(buf + o, sizeof(buf) - (size_t)o, "]}]}");
		int rc = mk_manifest_decode(buf, strlen(buf), &m, &err);
		if (nd == MK_MAX_DIMS) {
			assert_int_equal(rc, 0);
			assert_int_equal(m->tensors[0].desc.ndim, MK_MAX_DIMS);
			mk_manifest_free(m);
		} else {
			assert_int_equal(rc, -MK_EFORMAT);
			assert_null(m);
		}
	}
	/* the decoder does not read past len */
	static const char tail[] = "{\"kind\":\"tensors\",\"tensors\":[]}GARBAGE";
	assert_int_equal(mk_manifest_decode(tail, strlen(tail) - 7, &m, &err), 0);
	assert_int_equal(m->ntensors, 0);
	mk_manifest_free(m);
}

/* an inputs HEAD with 2 models and 2 tensors, for the JOB and chunk checks */
static struct mk_manifest *job_head(void)
{
	static const uint8_t h[32] = { 1 };
	struct mk_manifest *m = mk_manifest_new("inputs", "test");
	struct mk_err err;

	assert_non_null(m);
	assert_int_equal(mk_manifest_add_tensor(m, "a", MK_DT_F32, 2, (uint64_t[]){ 4, 3 }, &err), 0);
	assert_int_equal(mk_manifest_add_tensor(m, "b", MK_DT_BF16, 1, (uint64_t[]){ 5 }, &err), 0);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(mk_manifest_add_model(m, i ? "m1" : "m0", NULL, &err), 0);
		assert_int_equal(mk_manifest_add_shard(m, "model.safetensors", 100, h, &err), 0);
	}
	m->njobs = 1;
	return m;
}

#define GOOD_JOB "{\"id\":3,\"output\":0,\"method\":\"linear\",\"inputs\":[" \
	"{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,3]}," \
	"{\"model\":1,\"tensor\":\"a\",\"dtype\":\"BF16\",\"shape\":[4,3],\"load_dtype\":\"F32\"}]," \
	"\"base\":1,\"passes\":0,\"sends\":1,\"is_embed\":true,\"spare\":true," \
	"\"params\":{\"global\":{\"normalize\":true},\"inputs\":[{\"weight\":0.25},{\"weight\":2}]},\"later\":[1]}"

static void test_job_roundtrip(void **state)
{
	struct mk_manifest *head = job_head();
	struct mk_plan_job *j, *k;
	struct mk_err err;
	char *s;
	size_t len;

	assert_int_equal(mk_plan_job_decode(GOOD_JOB, strlen(GOOD_JOB), head, &j, &err), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(j->id, 3);
		assert_int_equal(j->output, 0);
		assert_string_equal(j->method, "linear");
		assert_int_equal(j->ninputs, 2);
		assert_int_equal(j->base, 1);
		assert_true(j->is_embed);
		assert_true(j->spare);
		assert_false(j->check_equal);
		assert_false(j->spill);
		assert_int_equal(j->inputs[1].model, 1);
		assert_int_equal(j->inputs[1].desc.dtype, MK_DT_BF16);
		assert_int_equal(j->inputs[1].load_dtype, MK_DT_F32);
		assert_int_equal(j->inputs[1].nelem, 12);
		/* the parameters in the method's index, as written (2 stays an
		 * integer: the method resolves the values) */
		int pn = mk_method_param_index(j->m, "normalize"), pw = mk_method_param_index(j->m, "weight");
		assert_ptr_equal(j->m, mk_method_find("linear"));
		assert_true(pn >= 0 && pw >= 0);
		for (size_t p = 0; p < j->m->nparams; p++) {
			assert_int_equal(j->params.global[p].set, (int)p == pn);
			assert_int_equal(j->params.input[p].set, (int)p == pw);
		}
		assert_int_equal(j->params.global[pn].type, MK_PT_BOOL);
		assert_true(j->params.global[pn].b);
		assert_int_equal(j->params.input[pw].type, MK_PT_FLOAT);
		assert_true(j->params.input[pw].f == 0.25);
		assert_int_equal(j->params.input[j->m->nparams + pw].type, MK_PT_INT);
		assert_int_equal(j->params.input[j->m->nparams + pw].i, 2);
		assert_non_null(j->extra); /* "later" is kept */
		assert_int_equal(mk_plan_job_encode(j, &s, &len, &err), 0);
		assert_non_null(strstr(s, "\"later\":[1]"));
		/* names on the wire, as they came */
		assert_non_null(strstr(s, "\"params\":{\"global\":{\"normalize\":true},"
					  "\"inputs\":[{\"weight\":0.25},{\"weight\":2}]}"));
		assert_int_equal(mk_plan_job_decode(s, len, head, &k, &err), 0);
		free(s);
		mk_plan_job_free(j);
		j = k;
	}
	mk_plan_job_free(j);
	mk_manifest_free(head);
}

static void expect_bad_job(const struct mk_manifest *head, const char *json, const char *sub);
/* a part of output "a" ([4, 3], 12 elements): its rows 2-3 from a [2, 3]
 * input, as mk-moe writes one expert's tensor into a fused one */
#define PART_IN "{\"model\":1,\"tensor\":\"e1\",\"dtype\":\"BF16\",\"shape\":[2,3],\"load_dtype\":\"F32\"}"
#define PART_JOB(method, part) "{\"id\":5,\"output\":0,\"method\":\"" method "\",\"inputs\":[" PART_IN "]," part "}"
static void test_job_part(void **state)
{
	struct mk_manifest *head = job_head();
	const char *good = PART_JOB("passthrough", "\"part\":{\"begin\":6}");
	struct mk_plan_job *j, *k;
	struct mk_err err;
	char *s;
	size_t len;

	(void)state;
	assert_int_equal(mk_plan_job_decode(good, strlen(good), head, &j, &err), 0);
	for (int round = 0; round < 2; round++) {
		assert_true(j->has_part);
		assert_int_equal(j->part_begin, 6);
		assert_null(j->extra); /* "part" is a key of the format, not kept as unknown */
		assert_int_equal(mk_plan_job_encode(j, &s, &len, &err), 0);
		assert_non_null(strstr(s, "\"part\":{\"begin\":6}"));
		assert_int_equal(mk_plan_job_decode(s, len, head, &k, &err), 0);
		free(s);
		mk_plan_job_free(j);
		j = k;
	}
	mk_plan_job_free(j);
	/* a job without one makes the whole tensor, and says nothing of parts */
	assert_int_equal(mk_plan_job_decode(GOOD_JOB, strlen(GOOD_JOB), head, &j, &err), 0);
	assert_false(j->has_part);
	assert_int_equal(mk_plan_job_encode(j, &s, &len, &err), 0);
	assert_null(strstr(s, "\"part\""));
	free(s);
	mk_plan_job_free(j);
	/* the last six elements fit; one further does not */
	expect_bad_job(head, PART_JOB("passthrough", "\"part\":{\"begin\":7}"),
		       "part [7, +6) is outside tensor 'a' (12 elements)");
	expect_bad_job(head, PART_JOB("passthrough", "\"part\":{\"begin\":9223372036854775807}"),
		       "is outside tensor 'a'");
	expect_bad_job(head, PART_JOB("linear", "\"part\":{\"begin\":0}"), "made by passthrough of one input, not by linear");
	expect_bad_job(head, PART_JOB("passthrough", "\"part\":{\"begin\":-1}"), "bad \"part\"");
	expect_bad_job(head, PART_JOB("passthrough", "\"part\":{}"), "bad \"part\"");
	expect_bad_job(head, PART_JOB("passthrough", "\"part\":[6]"), "bad \"part\"");
	mk_manifest_free(head);
}

/* a job with several outputs: "more_outputs" beside "output", its inputs
 * sent for the passes alone (sends 1 or passes) */
#define MORE_JOB(more, passes, sends) "{\"id\":6,\"output\":0,\"method\":\"karcher\",\"inputs\":[" PART_IN "]," \
	"\"more_outputs\":" more ",\"passes\":" passes ",\"sends\":" sends "}"
static void test_job_more_outputs(void **state)
{
	struct mk_manifest *head = job_head();
	const char *good = MORE_JOB("[1]", "1", "1");
	struct mk_plan_job *j, *k;
	struct mk_err err;
	char *s;
	size_t len;

	(void)state;
	assert_int_equal(mk_plan_job_decode(good, strlen(good), head, &j, &err), 0);
	for (int round = 0; round < 2; round++) {
		assert_int_equal(j->nmore, 1);
		assert_int_equal(j->more[0], 1);
		assert_null(j->extra); /* a key of the format */
		assert_int_equal(mk_plan_job_encode(j, &s, &len, &err), 0);
		assert_non_null(strstr(s, "\"more_outputs\":[1]"));
		assert_int_equal(mk_plan_job_decode(s, len, head, &k, &err), 0);
		free(s);
		mk_plan_job_free(j);
		j = k;
	}
	mk_plan_job_free(j);
	/* held (sends 1) with two passes: the later replayed */
	assert_int_equal(mk_plan_job_decode(MORE_JOB("[1]", "2", "1"), strlen(MORE_JOB("[1]", "2", "1")), head, &j, &err), 0);
	mk_plan_job_free(j);
	/* one output: no key written */
	assert_int_equal(mk_plan_job_decode(GOOD_JOB, strlen(GOOD_JOB), head, &j, &err), 0);
	assert_int_equal(j->nmore, 0);
	assert_int_equal(mk_plan_job_encode(j, &s, &len, &err), 0);
	assert_null(strstr(s, "more_outputs"));
	free(s);
	mk_plan_job_free(j);
	expect_bad_job(head, MORE_JOB("[0]", "1", "1"), "output #0 given twice");
	expect_bad_job(head, MORE_JOB("[1,1]", "1", "1"), "output #1 given twice");
	expect_bad_job(head, MORE_JOB("[2]", "1", "1"), "output #2 is not in the manifest");
	expect_bad_job(head, MORE_JOB("[]", "1", "1"), "is not an array of 1 to 7 outputs");
	expect_bad_job(head, MORE_JOB("[1,1,1,1,1,1,1,1]", "1", "1"), "is not an array of 1 to 7 outputs");
	expect_bad_job(head, MORE_JOB("[-1]", "1", "1"), "\"more_outputs\"[0] is not an index");
	/* no pass to compute them from; an apply send they do not read */
	expect_bad_job(head, MORE_JOB("[1]", "0", "1"), "a job with several outputs: passes >= 1");
	expect_bad_job(head, MORE_JOB("[1]", "2", "3"), "a job with several outputs: passes >= 1, sends 1 or passes");
	mk_manifest_free(head);
}

/* a vocabulary job: 6 output rows (5 tokens + 1 padding); input 0 has
 * rows 0-1 and 3, input 1 rows 0-3; row 4 is filled from aux 0 (model 0's
 * stored row 2), row 2 averaged... by the fill list */
#define VOCAB_JOB "{\"id\":4,\"output\":0,\"method\":\"linear\",\"inputs\":[" \
	"{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,3],\"rows\":[0,0,2,3,3,1]}," \
	"{\"model\":1,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,3],\"rows\":[0,0,4]}]," \
	"\"base\":null,\"is_embed\":true,\"vocab\":{\"rows\":6,\"tokens\":5,\"dtype\":\"F32\"," \
	"\"fill\":[[2,1,\"copy\",1,false],[4,1,\"copy\",2,true],[5,1,\"mean\",0,false]]," \
	"\"aux\":[{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,3],\"rows\":[4,2,1]}]}}"

static void test_job_vocab(void **state)
{
	struct mk_manifest *head = job_head();
	struct mk_plan_job *j, *k;
	struct mk_err err;
	char *s;
	size_t len;

	(void)state;
	assert_int_equal(mk_plan_job_decode(VOCAB_JOB, strlen(VOCAB_JOB), head, &j, &err), 0);
	for (int round = 0; round < 2; round++) {
		assert_non_null(j->vocab);
		assert_int_equal(j->vocab->rows, 6);
		assert_int_equal(j->vocab->tokens, 5);
		assert_int_equal(j->vocab->nfill, 3);
		assert_int_equal(j->vocab->naux, 1);
		assert_int_equal(j->inputs[0].nruns, 2);
		assert_int_equal(mk_plan_vocab_src_row(j, 0, 1), 1);
		assert_int_equal(mk_plan_vocab_src_row(j, 0, 2), -1);
		assert_int_equal(mk_plan_vocab_src_row(j, 0, 3), 3);
		assert_int_equal(mk_plan_vocab_src_row(j, 1, 3), 3);
		assert_int_equal(mk_plan_vocab_src_row(j, 1, 4), -1);
		assert_int_equal(mk_plan_vocab_src_row(j, 2, 4), 2);
		assert_int_equal(mk_plan_vocab_src_row(j, 2, 3), -1);
		assert_null(mk_plan_vocab_fill_at(j, 0));
		assert_int_equal(mk_plan_vocab_fill_at(j, 2)->kind, MK_FILL_COPY);
		assert_true(mk_plan_vocab_fill_at(j, 4)->force);
		assert_int_equal(mk_plan_vocab_fill_at(j, 5)->kind, MK_FILL_MEAN);
		/* cuts: where a run or a fill begins or ends, and the tokens' end */
		assert_int_equal(mk_plan_vocab_next_cut(j, 0), 2);
		assert_int_equal(mk_plan_vocab_next_cut(j, 2), 3);
		assert_int_equal(mk_plan_vocab_next_cut(j, 3), 4);
		assert_int_equal(mk_plan_vocab_next_cut(j, 4), 5);
		assert_int_equal(mk_plan_vocab_next_cut(j, 5), 6);
		assert_int_equal(mk_plan_input_sent_bytes(j, 0), 3 * 3 * 4);
		assert_int_equal(mk_plan_input_sent_bytes(j, 2), 3 * 4);
		/* a chunk of input 0 over rows 0-1 fits; one over 1-2 does not */
		struct mk_chunk c = { .id = 4, .input = 0, .dtype = MK_DT_F32, .elem_begin = 0, .elem_count = 6 };
		mk_chunk_set_rows(&c, 3);
		assert_int_equal(mk_chunk_check_input(j, &c, &err), 0);
		c.elem_begin = 3;
		mk_chunk_set_rows(&c, 3);
		assert_int_equal(mk_chunk_check_input(j, &c, &err), -MK_EFORMAT);
		c = (struct mk_chunk){ .id = 4, .input = 2, .dtype = MK_DT_F32, .elem_begin = 12, .elem_count = 3 };
		mk_chunk_set_rows(&c, 3);
		assert_int_equal(mk_chunk_check_input(j, &c, &err), 0);
		assert_int_equal(mk_plan_job_encode(j, &s, &len, &err), 0);
		assert_int_equal(mk_plan_job_decode(s, len, head, &k, &err), 0);
		free(s);
		mk_plan_job_free(j);
		j = k;
	}
	mk_plan_job_free(j);
	/* runs out of order or past the stored rows, a fill from no input */
	struct { const char *from, *to, *msg; } bad[] = {
		{ "\"rows\":[0,0,2,3,3,1]", "\"rows\":[3,3,1,0,0,2]", "does not fit" },
		{ "\"rows\":[0,0,4]", "\"rows\":[0,1,4]", "does not fit" },
		{ "[4,1,\"copy\",2,true]", "[4,1,\"copy\",3,true]", "vocab fill 1" },
		{ "\"tokens\":5", "\"tokens\":7", "bad \"vocab\"" },
		{ "[5,1,\"mean\",0,false]", "[5,1,\"median\",0,false]", "vocab fill 2" },
	};
	for (size_t b = 0; b < sizeof(bad) / sizeof(*bad); b++) {
		char buf[2048];
		const char *at = strstr(VOCAB_JOB, bad[b].from);
		assert_non_null(at);
		snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - VOCAB_JOB), VOCAB_JOB, bad[b].to, at + strlen(bad[b].from));
		expect_bad_job(head, buf, bad[b].msg);
	}
	mk_manifest_free(head);
}

static void expect_bad_job(const struct mk_manifest *head, const char *json, const char *sub)
{
	struct mk_plan_job *j = (struct mk_plan_job *)1;
	struct mk_err err;

	assert_int_equal(mk_plan_job_decode(json, strlen(json), head, &j, &err), -MK_EFORMAT);
	assert_null(j);
	if (!strstr(err.msg, sub)) {
		print_error("message '%s' lacks '%s'\n", err.msg, sub);
		fail();
	}
}

#define IN1 "{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,3]}"
static void test_job_errors(void **state)
{
	struct mk_manifest *head = job_head();

	/* unknown keys kept, at most MK_JOB_EXTRA_MAX of JSON together;
	 * a key given twice */
	{
		size_t n = MK_JOB_EXTRA_MAX / 2 + 16;
		char *big = malloc(2 * n + 512);
		assert_non_null(big);
		int k = snprintf(big, 512, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"x\":\"");
		memset(big + k, 'a', n);
		k += (int)n;
		k += snprintf(big + k, 512, "\",\"y\":\"");
		memset(big + k, 'a', n);
		strcpy(big + k + n, "\"}");
		expect_bad_job(head, big, "unknown key \"y\"");
		free(big);
	}
	expect_bad_job(head, "{\"id\":0,\"id\":1,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "]}",
		       "duplicate key \"id\"");
	/* the base must be one of the inputs (a JOB like this crashed
	 * mk-merge and mk-fetch: the error path freed inputs never made) */
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"base\":1}",
		       "base 1 is not one of its 1 inputs");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"base\":99999}",
		       "is not one of");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"base\":-1}", "bad \"base\"");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"base\":\"0\"}", "bad \"base\"");
	/* cross-references into the HEAD */
	expect_bad_job(head, "{\"id\":0,\"output\":2,\"method\":\"linear\",\"inputs\":[" IN1 "]}",
		       "output #2 is not in the manifest (2 tensors)");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":["
		       "{\"model\":2,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,3]}]}",
		       "model #2 is not in the HEAD's table (2 models)");
	/* counts agree */
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],"
		       "\"params\":{\"inputs\":[{},{}]}}", "per-input parameters for 2 inputs, the job has 1");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[]}", "1 to 65535 inputs");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"ties\",\"inputs\":[" IN1 "],\"passes\":2,\"sends\":2}",
		       "sends 2 with 2 passes");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"ties\",\"inputs\":[" IN1 "],\"spill\":true}",
		       "spill with sends 1 and 0 passes");
	/* types */
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"check_equal\":true}",
		       "check_equal goes with passthrough");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"is_embed\":1}", "booleans");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],\"spare\":1}", "booleans");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],"
		       "\"params\":{\"global\":{\"t\":\"x\"}}}", "parameter 't' is not a number");
	/* a registered method's parameters: names it has, at their scope */
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],"
		       "\"params\":{\"global\":{\"normalise\":true}}}",
		       "JOB 0 ('a'): linear has no parameter 'normalise' (did you mean 'normalize'?); was the plan made by another mk?");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"slerp\",\"inputs\":[" IN1 "],"
		       "\"params\":{\"global\":{\"zap\":1}}}", "slerp has no parameter 'zap' (slerp's are: t)");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],"
		       "\"params\":{\"global\":{\"weight\":1}}}",
		       "parameter 'weight' is given once for all inputs, but linear's 'weight' is set per input");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "],"
		       "\"params\":{\"inputs\":[{\"normalize\":true}]}}",
		       "parameter 'normalize' is given per input, but linear's 'normalize' is one value for all inputs");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":["
		       "{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4,-3]}]}", "input 0: bad shape");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":["
		       "{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[4294967296,4294967296]}]}",
		       "shape overflows");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"inputs\":[" IN1 "]}", "missing \"method\"");
	expect_bad_job(head, "{\"id\":4294967296,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 "]}", "bad \"id\"");
	expect_bad_job(head, "[]", "not a JSON object");
	/* a method the reader has not registered (a plugin's): its
	 * parameters are checked as JSON, not kept */
	{
		static const char nm[] = "{\"id\":0,\"output\":0,\"method\":\"not_loaded\",\"inputs\":[" IN1 "],"
					 "\"params\":{\"global\":{\"zap\":1},\"inputs\":[{\"w\":true}]}}";
		struct mk_plan_job *j;
		struct mk_err err;
		assert_int_equal(mk_plan_job_decode(nm, strlen(nm), head, &j, &err), 0);
		assert_null(j->m);
		assert_null(j->params.global);
		assert_null(j->params.input);
		mk_plan_job_free(j);
		expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"not_loaded\",\"inputs\":[" IN1 "],"
			       "\"params\":{\"global\":{\"zap\":[1]}}}", "parameter 'zap' is not a number");
	}
	/* inputs read in one range must agree */
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":[" IN1 ","
		       "{\"model\":1,\"tensor\":\"a\",\"dtype\":\"F32\",\"shape\":[12]}]}",
		       "inputs 0 and 1 have rows of different lengths (3 and 1 elements)");
	expect_bad_job(head, "{\"id\":0,\"output\":0,\"method\":\"linear\",\"inputs\":["
		       "{\"model\":0,\"tensor\":\"a\",\"dtype\":\"F4\",\"shape\":[4,4]},"
		       "{\"model\":1,\"tensor\":\"a\",\"dtype\":\"BF16\",\"shape\":[4,4]}]}",
		       "a F4 input goes only with inputs of its own dtype");
	mk_manifest_free(head);
}

static void test_chunk_checks(void **state)
{
	struct mk_manifest *head = job_head();
	struct mk_plan_job *j;
	struct mk_err err;
	struct mk_chunk c = { .id = 0, .dtype = MK_DT_F32, .row_begin = 1, .row_count = 2, .elem_begin = 3,
			      .elem_count = 6 };

	assert_int_equal(mk_chunk_check_data(head, &c, &err), 0);
	c.row_count = 3;
	assert_int_equal(mk_chunk_check_data(head, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "are not the rows of elements [3, 9)"));
	c.row_count = 2;
	c.elem_count = 10;
	assert_int_equal(mk_chunk_check_data(head, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "outside its 12 elements"));
	c.elem_count = 6;
	c.dtype = MK_DT_BF16;
	assert_int_equal(mk_chunk_check_data(head, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "is F32, chunk is BF16"));
	c.id = 2;
	assert_int_equal(mk_chunk_check_data(head, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "tensor id 2 not in the manifest"));
	/* sub-byte elements start and end on whole bytes */
	{
		struct mk_manifest *h4 = mk_manifest_new("tensors", "test");
		assert_int_equal(mk_manifest_add_tensor(h4, "q", MK_DT_F4, 1, (uint64_t[]){ 8 }, &err), 0);
		struct mk_chunk q = { .id = 0, .dtype = MK_DT_F4, .row_begin = 1, .row_count = 2, .elem_begin = 1,
				      .elem_count = 2 };
		assert_int_equal(mk_chunk_check_data(h4, &q, &err), -MK_EFORMAT);
		assert_non_null(strstr(err.msg, "do not start and end on whole bytes of F4"));
		q = (struct mk_chunk){ .id = 0, .dtype = MK_DT_F4, .row_begin = 2, .row_count = 6, .elem_begin = 2,
				       .elem_count = 6 };
		assert_int_equal(mk_chunk_check_data(h4, &q, &err), 0);
		mk_manifest_free(h4);
	}
	/* a 1-D tensor: a row is an element */
	c = (struct mk_chunk){ .id = 1, .dtype = MK_DT_BF16, .row_begin = 2, .row_count = 3, .elem_begin = 2,
			       .elem_count = 3 };
	assert_int_equal(mk_chunk_check_data(head, &c, &err), 0);

	assert_int_equal(mk_plan_job_decode(GOOD_JOB, strlen(GOOD_JOB), head, &j, &err), 0);
	c = (struct mk_chunk){ .id = 3, .input = 1, .dtype = MK_DT_BF16, .row_begin = 0, .row_count = 4,
			       .elem_begin = 0, .elem_count = 12 };
	assert_int_equal(mk_chunk_check_input(j, &c, &err), 0);
	c.input = 2;
	assert_int_equal(mk_chunk_check_input(j, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "input 2 pass 0 does not fit job 3"));
	c.input = 1;
	c.pass = 1;
	assert_int_equal(mk_chunk_check_input(j, &c, &err), -MK_EFORMAT);
	c.pass = 0;
	c.dtype = MK_DT_F32;  /* input 1 is stored as BF16 (loaded as F32) */
	assert_int_equal(mk_chunk_check_input(j, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "is BF16, chunk is F32"));
	c.dtype = MK_DT_BF16;
	c.id = 4;
	assert_int_equal(mk_chunk_check_input(j, &c, &err), -MK_EFORMAT);
	assert_non_null(strstr(err.msg, "INPT for job 4 inside job 3"));
	mk_plan_job_free(j);
	mk_manifest_free(head);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_manifest_roundtrip),
		cmocka_unit_test(test_manifest_errors),
		cmocka_unit_test(test_job_roundtrip),
		cmocka_unit_test(test_job_vocab),
		cmocka_unit_test(test_job_part),
		cmocka_unit_test(test_job_more_outputs),
		cmocka_unit_test(test_job_errors),
		cmocka_unit_test(test_chunk_checks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
