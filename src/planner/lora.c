/* lora.c - a PEFT LoRA adapter for a BASE+ADAPTER reference: its
 * adapter_config.json (the arithmetic's numbers and what mk refuses) and
 * its tensors, each mapped onto the base weight it changes.  The planner
 * turns an entry into a job input's "lora" (mk/plan.h); mk-fetch does the
 * arithmetic. */
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "core/fsutil.h"
#include "lora.h"

#define PREFIX "base_model.model."
#define MAX_CONFIG (16u << 20)

static void ent_free(struct mk_lora_ent *e)
{
	free(e->target);
	free(e->a);
	free(e->b);
	free(e->replace);
	free(e->magnitude);
	free(e->bias);
}

void mk_lora_free(struct mk_lora *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		ent_free(&l->v[i]);
	free(l->v);
	mk_model_free(l->m);
	free(l);
}

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct mk_lora_ent *)a)->target, ((const struct mk_lora_ent *)b)->target);
}

const struct mk_lora_ent *mk_lora_find(const struct mk_lora *l, const char *target)
{
	struct mk_lora_ent key = { .target = (char *)target };

	return l && l->n ? bsearch(&key, l->v, l->n, sizeof(*l->v), cmp_ent) : NULL;
}

static bool ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), k = strlen(suf);
	return n >= k && !strcmp(s + n - k, suf);
}

/* PEFT's pattern lookup (rank_pattern, alpha_pattern): the first key, in
 * the file's order, that matches the end of the module name after a dot
 * (or all of it) as a regular expression (POSIX extended here).  The key's
 * value, or NULL; -1 in *bad when a key is not a valid expression. */
static json_t *pattern_value(json_t *pat, const char *module, const char **bad)
{
	const char *key;
	json_t *v;

	if (!json_is_object(pat))
		return NULL;
	json_object_foreach(pat, key, v) {
		char *re = NULL;
		regex_t rx;
		int hit;
		if (asprintf(&re, "^(.*\\.)?(%s)$", key) < 0)
			return NULL;
		if (regcomp(&rx, re, REG_EXTENDED | REG_NOSUB)) {
			free(re);
			*bad = key;
			return NULL;
		}
		hit = !regexec(&rx, module, 0, NULL, 0);
		regfree(&rx);
		free(re);
		if (hit)
			return v;
	}
	return NULL;
}

struct pair {                    /* one module's tensors, while reading */
	char *module;
	const struct mk_st_tensor *a, *b;
	const char *aname, *bname;
	bool embedding;
};

struct extra {                   /* a module's DoRA magnitude or lora_B bias */
	char *module;
	const struct mk_st_tensor *t;
	const char *name;
	bool bias;
};

/* PEFT names an lm_head tied to the input embedding by its own name; the
 * checkpoint holds the embedding only (tie_word_embeddings).  The tensor a
 * LoRA of "lm_head" then changes: the embedding, where the base lacks
 * lm_head.weight and has one of the usual embedding names. */
static const char *tied_target(const struct mk_model *base, const char *target)
{
	static const char *const emb[] = { "model.embed_tokens.weight", "transformer.wte.weight",
					   "gpt_neox.embed_in.weight", NULL };

	if (strcmp(target, "lm_head.weight") || mk_model_find(base, target))
		return target;
	for (size_t k = 0; emb[k]; k++)
		if (mk_model_find(base, emb[k]))
			return emb[k];
	return target;
}

static struct pair *pair_of(struct pair **v, size_t *n, const char *module, size_t mlen, bool emb)
{
	for (size_t i = 0; i < *n; i++)
		if (strlen((*v)[i].module) == mlen && !strncmp((*v)[i].module, module, mlen) && (*v)[i].embedding == emb)
			return &(*v)[i];
	struct pair *q = realloc(*v, (*n + 1) * sizeof(*q));
	if (!q)
		return NULL;
	*v = q;
	memset(&q[*n], 0, sizeof(*q));
	if (!(q[*n].module = strndup(module, mlen)))
		return NULL;
	q[*n].embedding = emb;
	return &q[(*n)++];
}

static int add_ent(struct mk_lora *l, struct mk_lora_ent e)
{
	struct mk_lora_ent *q = realloc(l->v, (l->n + 1) * sizeof(*q));
	if (!q)
		return -1;
	l->v = q;
	q[l->n++] = e;
	return 0;
}

static const char *shape_str(const struct mk_tensor_desc *d, char *buf, size_t n)
{
	size_t at = (size_t)snprintf(buf, n, "[");
	for (unsigned k = 0; k < d->ndim && at < n; k++)
		at += (size_t)snprintf(buf + at, n - at, "%s%llu", k ? ", " : "", (unsigned long long)d->shape[k]);
	if (at < n)
		snprintf(buf + at, n - at, "]");
	return buf;
}

/* The config's keys mk reads, and the settings it refuses. */
static int read_config(json_t *c, const char *name, struct mk_err *err)
{
	const char *pt = json_string_value(json_object_get(c, "peft_type"));
	json_t *v;

	if (!json_is_object(c))
		return mk_err_set(err, MK_EFORMAT, "adapter '%s': adapter_config.json is not a JSON object", name);
	if (!pt)
		return mk_err_set(err, MK_EFORMAT, "adapter '%s': adapter_config.json has no \"peft_type\"", name);
	if (strcmp(pt, "LORA"))
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "adapter '%s': peft_type %s is not supported: mk applies LoRA adapters only (peft_type LORA)",
				  name, pt);
	v = json_object_get(c, "bias");
	if (v && !json_is_null(v) && (!json_is_string(v) || strcmp(json_string_value(v), "none")))
		return mk_err_set(err, MK_EUNSUPPORTED,
				  "adapter '%s': bias is %s: adapters that train the base's biases are not supported (only bias \"none\")",
				  name, json_is_string(v) ? json_string_value(v) : "not a string");
	static const char *const refused[] = { "layer_replication", "trainable_token_indices", "target_parameters",
					       "alora_invocation_tokens", NULL };
	for (size_t k = 0; refused[k]; k++) {
		v = json_object_get(c, refused[k]);
		if (v && !json_is_null(v) && !(json_is_array(v) && !json_array_size(v)) &&
		    !(json_is_object(v) && !json_object_size(v)))
			return mk_err_set(err, MK_EUNSUPPORTED, "adapter '%s': %s is set: not supported", name, refused[k]);
	}
	v = json_object_get(c, "r");
	if (!json_is_integer(v) || json_integer_value(v) <= 0)
		return mk_err_set(err, MK_EFORMAT, "adapter '%s': adapter_config.json's \"r\" is not a positive integer", name);
	if (!json_is_number(json_object_get(c, "lora_alpha")))
		return mk_err_set(err, MK_EFORMAT, "adapter '%s': adapter_config.json's \"lora_alpha\" is not a number", name);
	for (int k = 0; k < 2; k++) {
		const char *pk = k ? "alpha_pattern" : "rank_pattern";
		v = json_object_get(c, pk);
		if (v && !json_is_null(v) && !json_is_object(v))
			return mk_err_set(err, MK_EFORMAT, "adapter '%s': \"%s\" is not an object", name, pk);
		const char *key;
		json_t *x;
		json_object_foreach(v, key, x)
			if (k ? !json_is_number(x) : (!json_is_integer(x) || json_integer_value(x) <= 0))
				return mk_err_set(err, MK_EFORMAT, "adapter '%s': %s '%s' is not %s", name, pk, key,
						  k ? "a number" : "a positive integer");
	}
	return 0;
}

/* modules_to_save names a module by its full name or its last parts. */
static bool to_save(json_t *mts, const char *module)
{
	size_t i;
	json_t *x;

	json_array_foreach(mts, i, x) {
		const char *s = json_string_value(x);
		size_t n = strlen(module), k = s ? strlen(s) : 0;
		if (s && (!strcmp(module, s) || (n > k && module[n - k - 1] == '.' && !strcmp(module + n - k, s))))
			return true;
	}
	return false;
}

int mk_lora_open(const char *ref, const char *name, const struct mk_model *base, struct mk_lora **out,
		 struct mk_err *err)
{
	struct mk_lora *l = calloc(1, sizeof(*l));
	struct pair *pairs = NULL;
	struct extra *extras = NULL;
	size_t npairs = 0, nextras = 0;
	json_t *c = NULL;
	uint8_t *buf = NULL;
	size_t len;
	char *path = NULL, s1[96], s2[96], s3[96];
	int rc;

	*out = NULL;
	if (!l)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if ((rc = mk_model_open_adapter(ref, &l->m, err)))
		goto out;
	if ((rc = mk_model_path(l->m, "adapter_config.json", &path, err)) ||
	    (rc = mk_file_read(path, MAX_CONFIG, &buf, &len, err))) {
		mk_err_prefix(err, "adapter '%s': ", name);
		goto out;
	}
	json_error_t je;
	if (!(c = json_loadb((const char *)buf, len, JSON_REJECT_DUPLICATES, &je))) {
		rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': %s: line %d: %s", name, path, je.line, je.text);
		goto out;
	}
	if ((rc = read_config(c, name, err)))
		goto out;
	long long r0 = json_integer_value(json_object_get(c, "r"));
	double alpha0 = json_number_value(json_object_get(c, "lora_alpha"));
	bool rslora = json_is_true(json_object_get(c, "use_rslora"));
	bool fifo = json_is_true(json_object_get(c, "fan_in_fan_out"));
	bool dora = json_is_true(json_object_get(c, "use_dora")), lbias = json_is_true(json_object_get(c, "lora_bias"));
	json_t *rp = json_object_get(c, "rank_pattern"), *ap = json_object_get(c, "alpha_pattern");
	json_t *mts = json_object_get(c, "modules_to_save");
	if (json_is_string(mts)) {
		json_t *one = json_pack("[O]", mts);
		mts = one;
		json_object_set_new(c, "modules_to_save", one);
	}
	/* the tensors: lora_A/lora_B pairs by module, modules_to_save weights */
	for (size_t i = 0; i < l->m->ntensors; i++) {
		const struct mk_st_tensor *t = l->m->tensors[i].t;
		const char *k = t->name, *rest, *at;
		static const struct {
			const char *suf;
			bool b, emb;
		} kinds[] = { { ".lora_A.weight", false, false }, { ".lora_B.weight", true, false },
			      { ".lora_embedding_A", false, true }, { ".lora_embedding_B", true, true } };
		if (strncmp(k, PREFIX, strlen(PREFIX))) {
			rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': tensor '%s' is not under '" PREFIX "' (not a PEFT adapter's name)",
					name, k);
			goto out;
		}
		rest = k + strlen(PREFIX);
		size_t kk;
		for (kk = 0; kk < 4 && !ends_with(rest, kinds[kk].suf); kk++)
			;
		if (kk < 4) {
			size_t mlen = strlen(rest) - strlen(kinds[kk].suf);
			struct pair *p = pair_of(&pairs, &npairs, rest, mlen, kinds[kk].emb);
			if (!p) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			if (t->desc.ndim != 2) {
				rc = mk_err_set(err, MK_EUNSUPPORTED,
						"adapter '%s': tensor '%s' has %u dimensions: only LoRA of linear and embedding layers "
						"(2-dimensional A and B) is supported, not of convolutions",
						name, k, t->desc.ndim);
				goto out;
			}
			if (!mk_dtype_is_float(t->desc.dtype)) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "adapter '%s': tensor '%s' is %s, not a float", name, k,
						mk_dtype_name(t->desc.dtype));
				goto out;
			}
			if (kinds[kk].b) {
				p->b = t;
				p->bname = k;
			} else {
				p->a = t;
				p->aname = k;
			}
			continue;
		}
		/* DoRA's magnitude and lora_B's bias: read as PEFT loads them,
		 * only where the config makes the module have them (use_dora,
		 * lora_bias); otherwise PEFT drops them (an unexpected key), and
		 * so does mk (mergekit-extract-lora writes lora_B.bias without
		 * lora_bias) */
		bool mag = ends_with(rest, ".lora_magnitude_vector") || ends_with(rest, ".lora_magnitude_vector.weight"),
		     lb = ends_with(rest, ".lora_B.bias");
		if (mag || lb) {
			if (!(mag ? dora : lbias))
				continue;
			at = strstr(rest, mag ? ".lora_magnitude_vector" : ".lora_B.bias");
			struct extra *q = realloc(extras, (nextras + 1) * sizeof(*q));
			if (!q || !(q[nextras].module = strndup(rest, (size_t)(at - rest)))) {
				if (q)
					extras = q;
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			extras = q;
			q[nextras].t = t;
			q[nextras].name = k;
			q[nextras++].bias = lb;
			if (t->desc.ndim != 1 || !mk_dtype_is_float(t->desc.dtype)) {
				rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': tensor '%s' is %s %s, not a 1-dimensional float",
						name, k, mk_dtype_name(t->desc.dtype), shape_str(&t->desc, s1, sizeof(s1)));
				goto out;
			}
			continue;
		}
		if (strstr(rest, ".lora_")) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"adapter '%s': tensor '%s' is not a LoRA weight mk applies (lora_A.weight, lora_B.weight, "
					"lora_embedding_A, lora_embedding_B)%s",
					name, k, strstr(rest, ".bias") ? ": a bias on the LoRA layers is not supported" : "");
			goto out;
		}
		/* a modules_to_save weight, or the base layer's weight PEFT saves
		 * with an embedding's LoRA (save_embedding_layers): replaces the
		 * base's (and the LoRA delta, if any, is added to it) */
		const char *dot = strrchr(rest, '.');
		char *module = dot ? strndup(rest, (size_t)(dot - rest)) : NULL, *target = NULL;
		bool saved = module && (to_save(mts, module) || ends_with(module, ".base_layer"));
		if (saved && ends_with(module, ".base_layer") &&
		    asprintf(&target, "%.*s%s", (int)(strlen(module) - strlen(".base_layer")), module, dot) < 0)
			target = NULL;
		free(module);
		if (!saved) {
			rc = mk_err_set(err, MK_EFORMAT,
					"adapter '%s': tensor '%s' is neither a LoRA weight nor of a module in modules_to_save", name, k);
			goto out;
		}
		bool tied = false;
		if (!target && strcmp(tied_target(base, rest), rest)) {
			/* modules_to_save of a tied lm_head: the embedding's, unless it
			 * would untie them (below) */
			if (!(target = strdup(tied_target(base, rest)))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			tied = true;
		} else if (target && strcmp(tied_target(base, target), target)) {
			/* an embedding layer PEFT saved with a LoRA of a tied lm_head */
			tied = true;
			char *te = strdup(tied_target(base, target));
			free(target);
			if (!(target = te)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
		}
		const char *tname = target ? target : rest;
		const struct mk_model_tensor *bt = mk_model_find(base, tname);
		if (!bt || !mk_dtype_is_float(t->desc.dtype) || bt->t->desc.ndim != t->desc.ndim ||
		    memcmp(bt->t->desc.shape, t->desc.shape, t->desc.ndim * sizeof(uint64_t))) {
			rc = bt ? mk_err_set(err, MK_EMISMATCH,
					     "adapter '%s': tensor '%s' (modules_to_save) is %s %s, the base model's '%s' %s %s", name,
					     k, mk_dtype_name(t->desc.dtype), shape_str(&t->desc, s1, sizeof(s1)), tname,
					     mk_dtype_name(bt->t->desc.dtype), shape_str(&bt->t->desc, s2, sizeof(s2))) :
				  mk_err_set(err, MK_EMISMATCH,
					     "adapter '%s': tensor '%s' replaces '%s', which the base model does not have",
					     name, k, tname);
			free(target);
			goto out;
		}
		struct mk_lora_ent e = { .target = target ? target : strdup(rest), .replace = strdup(k), .tied = tied };
		if (!e.target || !e.replace || add_ent(l, e)) {
			free(e.target);
			free(e.replace);
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
	}
	/* each pair: both halves, the rank the config says, the base weight's shape */
	for (size_t i = 0; i < npairs; i++) {
		struct pair *p = &pairs[i];
		const char *sa = p->embedding ? "lora_embedding_A" : "lora_A.weight",
			   *sb = p->embedding ? "lora_embedding_B" : "lora_B.weight";
		if (!p->a || !p->b) {
			rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': module '%s' has %s but no %s", name, p->module,
					p->a ? sa : sb, p->a ? sb : sa);
			goto out;
		}
		const char *bad = NULL;
		json_t *rv = pattern_value(rp, p->module, &bad), *av = pattern_value(ap, p->module, &bad);
		if (bad) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"adapter '%s': pattern '%s' is not a regular expression mk reads (POSIX extended)", name,
					bad);
			goto out;
		}
		long long r = rv ? json_integer_value(rv) : r0;
		double alpha = av ? json_number_value(av) : alpha0;
		if (p->a->desc.shape[0] != (uint64_t)r || p->b->desc.shape[1] != (uint64_t)r) {
			rc = mk_err_set(err, MK_EMISMATCH,
					"adapter '%s': module '%s': %s is %s and %s %s, but its rank is %lld (%s)", name, p->module,
					sa, shape_str(&p->a->desc, s1, sizeof(s1)), sb, shape_str(&p->b->desc, s2, sizeof(s2)), r,
					rv ? "rank_pattern" : "r");
			goto out;
		}
		char *target = NULL;
		if (asprintf(&target, "%s.weight", p->module) < 0) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		bool tr = p->embedding || fifo;
		uint64_t want0 = tr ? p->a->desc.shape[1] : p->b->desc.shape[0],
			 want1 = tr ? p->b->desc.shape[0] : p->a->desc.shape[1];
		const char *tt = tied_target(base, target);
		bool tied = tt != target;
		if (tied) {
			char *te = strdup(tt);
			free(target);
			if (!(target = te)) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
		}
		const struct mk_model_tensor *bt = mk_model_find(base, target);
		if (!bt || bt->t->desc.ndim != 2 || bt->t->desc.shape[0] != want0 || bt->t->desc.shape[1] != want1 ||
		    !mk_dtype_is_float(bt->t->desc.dtype)) {
			if (bt)
				rc = mk_err_set(err, MK_EMISMATCH,
						"adapter '%s': %s %s and %s %s make a [%llu, %llu] delta%s, but the base model's '%s' is %s %s",
						name, p->aname, shape_str(&p->a->desc, s1, sizeof(s1)), p->bname,
						shape_str(&p->b->desc, s2, sizeof(s2)), (unsigned long long)want0,
						(unsigned long long)want1,
						p->embedding ? " (an embedding's, transposed)" : fifo ? " (fan_in_fan_out)" : "", target,
						mk_dtype_name(bt->t->desc.dtype), shape_str(&bt->t->desc, s3, sizeof(s3)));
			else
				rc = mk_err_set(err, MK_EMISMATCH,
						"adapter '%s': tensor '%s' targets '%s', which the base model does not have", name,
						p->aname, target);
			free(target);
			goto out;
		}
		struct mk_lora_ent e = { .target = target, .a = strdup(p->aname), .b = strdup(p->bname),
					 .scale = rslora ? alpha / sqrt((double)r) : alpha / (double)r, .transpose = tr,
					 .embedding = p->embedding, .tied = tied };
		if (!e.a || !e.b || add_ent(l, e)) {
			free(e.target);
			free(e.a);
			free(e.b);
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
	}
	/* the magnitudes and biases onto their pairs' entries (all made above,
	 * in pair order after the replacements) */
	size_t first_pair = l->n - npairs;
	for (size_t x = 0; x < nextras; x++) {
		struct extra *q = &extras[x];
		size_t i;
		for (i = 0; i < npairs && strcmp(pairs[i].module, q->module); i++)
			;
		if (i == npairs) {
			rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': tensor '%s' belongs to module '%s', which has no lora_A/lora_B",
					name, q->name, q->module);
			goto out;
		}
		struct mk_lora_ent *e = &l->v[first_pair + i];
		const struct mk_model_tensor *bt = mk_model_find(base, e->target);
		if (!q->bias) {
			/* one per output channel: W's rows, or its columns where
			 * the delta is transposed (fan_in_fan_out, embeddings) */
			uint64_t want = bt->t->desc.shape[e->transpose ? 1 : 0];
			if (q->t->desc.shape[0] != want) {
				rc = mk_err_set(err, MK_EMISMATCH,
						"adapter '%s': DoRA magnitude '%s' has %llu elements, but '%s' %s has %llu output channels",
						name, q->name, (unsigned long long)q->t->desc.shape[0], e->target,
						shape_str(&bt->t->desc, s1, sizeof(s1)), (unsigned long long)want);
				goto out;
			}
			if (e->magnitude) {
				rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': module '%s' has two DoRA magnitudes", name, q->module);
				goto out;
			}
			if (!(e->magnitude = strdup(q->name))) {
				rc = mk_err_set(err, MK_ENOMEM, "out of memory");
				goto out;
			}
			continue;
		}
		/* lora_B's bias: added to the base layer's bias, which PEFT
		 * requires (its merge fails without one) */
		char *bn = NULL;
		if (e->embedding) {
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"adapter '%s': tensor '%s': lora_bias on an embedding layer (PEFT refuses it too)", name,
					q->name);
			goto out;
		}
		if (asprintf(&bn, "%.*s.bias", (int)(strlen(e->target) - strlen(".weight")), e->target) < 0) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		const struct mk_model_tensor *bb = mk_model_find(base, bn);
		if (!bb || bb->t->desc.ndim != 1 || bb->t->desc.shape[0] != q->t->desc.shape[0] ||
		    !mk_dtype_is_float(bb->t->desc.dtype)) {
			rc = bb ? mk_err_set(err, MK_EMISMATCH, "adapter '%s': tensor '%s' is %s, the base model's '%s' %s", name,
					     q->name, shape_str(&q->t->desc, s1, sizeof(s1)), bn,
					     shape_str(&bb->t->desc, s2, sizeof(s2))) :
				  mk_err_set(err, MK_EUNSUPPORTED,
					     "adapter '%s': lora_bias is true and the adapter has '%s', but the base model has no "
					     "'%s': a LoRA bias merges only into a layer with a bias (PEFT's merge fails too)",
					     name, q->name, bn);
			free(bn);
			goto out;
		}
		struct mk_lora_ent be = { .target = bn, .bias = strdup(q->name), .scale = e->scale };
		if (!be.bias || add_ent(l, be)) {
			free(be.target);
			free(be.bias);
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (dora)
		for (size_t i = 0; i < npairs; i++)
			if (!l->v[first_pair + i].magnitude) {
				rc = mk_err_set(err, MK_EFORMAT,
						"adapter '%s': use_dora is true but module '%s' has no lora_magnitude_vector", name,
						pairs[i].module);
				goto out;
			}
	qsort(l->v, l->n, sizeof(*l->v), cmp_ent);
	/* a replaced base layer with a LoRA on it: one entry (W := saved, then
	 * W + s·B·A); anything else twice is a mistake */
	size_t kept = 0;
	for (size_t i = 0; i < l->n; i++) {
		struct mk_lora_ent *q = kept ? &l->v[kept - 1] : NULL, *e = &l->v[i];
		if (q && !strcmp(q->target, e->target) && q->tied != e->tied) {
			/* the tied lm_head's change beside the embedding's own: one
			 * weight, the embedding's change */
			struct mk_lora_ent *drop = q->tied ? q : e, keep = q->tied ? *e : *q;
			ent_free(drop);
			*q = keep;
			continue;
		}
		if (q && !strcmp(q->target, e->target)) {
			if (!!q->a == !!e->a) {
				rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': '%s' is changed twice (%s)", name, e->target,
						q->a ? "two LoRA pairs" : "two tensors replace it");
				goto out;
			}
			if (q->bias || e->bias) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "adapter '%s': '%s' is changed twice (a lora_B bias and a saved tensor)",
						name, e->target);
				goto out;
			}
			struct mk_lora_ent *lo = q->a ? q : e, *re = q->a ? e : q;
			lo->replace = re->replace;
			re->replace = NULL;
			free(re->target);
			*q = *lo;
			continue;
		}
		l->v[kept++] = *e;
	}
	l->n = kept;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].tied && l->v[i].replace && !l->v[i].a) {
			/* a saved lm_head alone: PEFT's copy unties it */
			rc = mk_err_set(err, MK_EUNSUPPORTED,
					"adapter '%s': tensor '%s' (modules_to_save) replaces lm_head, which the base ties to its "
					"input embedding (no lm_head.weight), and the embedding is not replaced with it: untying "
					"them is not supported", name, l->v[i].replace);
			goto out;
		}
	if (!l->n) {
		rc = mk_err_set(err, MK_EFORMAT, "adapter '%s': no LoRA or modules_to_save tensor in it", name);
		goto out;
	}
	*out = l;
	l = NULL;
out:
	for (size_t i = 0; i < npairs; i++)
		free(pairs[i].module);
	free(pairs);
	for (size_t i = 0; i < nextras; i++)
		free(extras[i].module);
	free(extras);
	json_decref(c);
	free(buf);
	free(path);
	mk_lora_free(l);
	return rc;
}
