/* plan_vocab.c - the planner's vocabulary: the merged vocabulary of a
 * tokenizer source, and the jobs of the vocabulary-indexed weights over it
 * (each input's rows, the fills where an input lacks a token). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "planner/planner_impl.h"

/* ------------------------------------------------ vocabulary-indexed weights */

/* Under a tokenizer source, every input of a vocabulary-indexed weight is,
 * as the method sees it, the merged vocabulary's rows in the inputs'
 * promoted dtype: mergekit aligns the embeddings so before merging. */
int tplan_vocab_shapes(struct tplan *t)
{
	struct mk_plan *p = t->p;
	enum mk_dtype dts[64], D;

	if (!p->tok || !t->ow->is_embed || t->check_equal)
		return TP_NEXT;
	if (t->n > 64) {
		diag(t->d, MK_DIAG_ERROR, t->tc->loc, "tensor '%s': more than 64 inputs to a vocabulary merge", t->ow->name);
		return TP_DONE;
	}
	for (size_t i = 0; i < t->n; i++) {
		dts[i] = t->in[i].dtype;
		if (t->in[i].ndim < 1 || !t->in[i].shape[0] ||
		    mk_shape_row_len(t->in[i].ndim, t->in[i].shape) != mk_shape_row_len(t->in[0].ndim, t->in[0].shape)) {
			diag(t->d, MK_DIAG_ERROR, tplan_input_loc(t, i),
			     "tensor '%s': model '%s' has rows of another length than model '%s' (a vocabulary merge aligns rows of one length)",
			     t->ow->name, t->labels[i], t->labels[0]);
			return TP_DONE;
		}
	}
	D = mk_promote_dtypes(t->n, dts);
	for (size_t i = 0; i < t->n; i++) {
		t->in[i].shape[0] = p->tok_rows;
		t->in[i].dtype = D;
	}
	return TP_NEXT;
}

static int run_push(struct mk_vocab_run **v, size_t *n, size_t *cap, uint64_t out, uint64_t src)
{
	if (*n && (*v)[*n - 1].out + (*v)[*n - 1].n == out && (*v)[*n - 1].src + (*v)[*n - 1].n == src) {
		(*v)[*n - 1].n++;
		return 0;
	}
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 8;
		struct mk_vocab_run *q = realloc(*v, nc * sizeof(*q));
		if (!q)
			return -1;
		*v = q;
		*cap = nc;
	}
	(*v)[(*n)++] = (struct mk_vocab_run){ out, src, 1 };
	return 0;
}

static int fill_push(struct mk_plan_vocab *vc, size_t *cap, struct mk_vocab_fill f)
{
	struct mk_vocab_fill *l = vc->nfill ? &vc->fill[vc->nfill - 1] : NULL;

	if (l && l->out + l->n == f.out && l->kind == f.kind && l->from == f.from && l->force == f.force) {
		l->n += f.n;
		return 0;
	}
	if (vc->nfill == *cap) {
		size_t nc = *cap ? 2 * *cap : 8;
		struct mk_vocab_fill *q = realloc(vc->fill, nc * sizeof(*q));
		if (!q)
			return -1;
		vc->fill = q;
		*cap = nc;
	}
	vc->fill[vc->nfill++] = f;
	return 0;
}

/* Has tokens: entry k's mistake not been said yet?  (Once, not per tensor.) */
static bool say_once(struct mk_plan *p, long k)
{
	if (p->tok_said[k])
		return false;
	p->tok_said[k] = 1;
	return true;
}

/* The input of model m in the job, or -1. */
static long job_input_of(const struct mk_plan_job *j, long m)
{
	for (size_t i = 0; i < j->ninputs; i++)
		if ((long)j->inputs[i].model == m)
			return (long)i;
	return -1;
}

/* The aux input reading rows of input ix's tensor (made on first use). */
static long aux_of(struct mk_plan_vocab *vc, const struct mk_plan_input *src, size_t ninputs, size_t *aux_caps)
{
	for (size_t k = 0; k < vc->naux; k++)
		if (vc->aux[k].model == src->model)
			return (long)(ninputs + k);
	struct mk_plan_input *q = realloc(vc->aux, (vc->naux + 1) * sizeof(*q));
	if (!q)
		return -1;
	vc->aux = q;
	memset(&q[vc->naux], 0, sizeof(*q));
	q[vc->naux].model = src->model;
	q[vc->naux].desc = src->desc;
	q[vc->naux].load_dtype = src->desc.dtype;
	q[vc->naux].nelem = src->nelem;
	if (!(q[vc->naux].tensor = strdup(src->tensor)))
		return -1;
	if (src->lora && plan_lora_copy(&q[vc->naux].lora, src->lora)) {
		vc->naux++; /* freed with the job */
		return -1;
	}
	aux_caps[vc->naux] = 0;
	return (long)(ninputs + vc->naux++);
}

/* The job's rows: each input's runs, the fills where an input lacks a
 * token (mergekit's rules: a tokens: entry; else the one model that has
 * it; none: zeros; the base when it has it; else the average), padding
 * rows as their means; rows of other tokens of a model (model_token) as
 * aux inputs.  Every mistake a tokens: entry can hold is said here. */
int tplan_vocab_job(struct tplan *t, struct mk_err *err)
{
	struct mk_plan *p = t->p;
	struct mk_plan_job *j = t->j;
	const struct mk_tokenizer_config *tc = p->cfg->tokenizer;
	const struct mk_tokmerge *tm = p->tok;
	struct mk_plan_vocab *vc;
	size_t *caps = NULL, fcap = 0, aux_caps[64], zeros = 0;
	bool *has = NULL;
	int rc = TP_NEXT;

	if (!tm || !t->ow->is_embed || t->check_equal)
		return TP_NEXT;
	if (!(vc = j->vocab = calloc(1, sizeof(*vc))) || !(caps = calloc(j->ninputs + 1, sizeof(*caps))) ||
	    !(has = calloc(j->ninputs + 1, sizeof(*has))))
		goto nomem;
	vc->rows = p->tok_rows;
	vc->tokens = tm->n;
	vc->dtype = t->in[0].dtype;
	for (size_t id = 0; id < tm->n; id++) {
		size_t npresent = 0, one = 0;
		for (size_t i = 0; i < j->ninputs; i++) {
			struct mk_plan_input *pi = &j->inputs[i];
			int32_t src = tm->map[pi->model][id];
			has[i] = src >= 0;
			if (!has[i])
				continue;
			if ((uint64_t)src >= pi->desc.shape[0]) {
				diag(t->d, MK_DIAG_ERROR, tplan_input_loc(t, i),
				     "tensor '%s': model '%s' has token '%s' at id %d, past the tensor's %llu rows",
				     t->ow->name, t->labels[i], tm->token[id], (int)src,
				     (unsigned long long)pi->desc.shape[0]);
				rc = TP_DONE;
				goto out;
			}
			if (run_push(&pi->runs, &pi->nruns, &caps[i], id, (uint64_t)src))
				goto nomem;
			npresent++;
			one = i;
		}
		long k = p->tok_cfg[id];
		const struct mk_token_embed *te = k >= 0 ? &tc->tokens[k] : NULL;
		bool force = te && te->force;
		if (!force && npresent == j->ninputs)
			continue;
		struct mk_vocab_fill f = { .out = id, .n = 1, .force = force };
		if (te && te->kind != MK_TOKEMB_DEFAULT) {
			long mi = te->kind == MK_TOKEMB_ZERO ? -1 : plan_model_index(p, &te->model);
			long ix = mi >= 0 ? job_input_of(j, mi) : -1;
			if (te->kind == MK_TOKEMB_ZERO) {
				f.kind = MK_FILL_ZERO;
			} else if (ix < 0) {
				if (say_once(p, k))
					diag(t->d, MK_DIAG_ERROR, &te->loc,
					     "tokens: '%s' takes its embedding from model '%s', which has no '%s' to take it from",
					     te->token, mi >= 0 ? p->models[mi].display : "?", t->ow->name);
				rc = TP_DONE;
				goto out;
			} else if (te->kind == MK_TOKEMB_MODEL) {
				if (!has[ix]) {
					if (say_once(p, k))
						diag(t->d, MK_DIAG_ERROR, &te->loc,
						     "tokens: '%s' takes its embedding from model '%s', which does not have the token",
						     te->token, p->models[mi].display);
					rc = TP_DONE;
					goto out;
				}
				f.kind = MK_FILL_COPY;
				f.from = (uint32_t)ix;
			} else {
				long long sid = te->has_token_id ? te->token_id : mk_vocab_find(tm->orig[mi], te->src_token);
				const struct mk_plan_input *sx = &j->inputs[ix];
				if (sid < 0 || (uint64_t)sid >= sx->desc.shape[0]) {
					if (say_once(p, k))
						diag(t->d, MK_DIAG_ERROR, &te->loc,
						     "tokens: '%s': token id %lld is outside model '%s''s %s (%llu rows)",
						     te->token, sid, p->models[mi].display, t->ow->name,
						     (unsigned long long)sx->desc.shape[0]);
					rc = TP_DONE;
					goto out;
				}
				long a = vc->naux >= 64 ? -1 : aux_of(vc, sx, j->ninputs, aux_caps);
				if (a < 0)
					goto nomem;
				struct mk_plan_input *ax = &vc->aux[a - (long)j->ninputs];
				if (run_push(&ax->runs, &ax->nruns, &aux_caps[a - (long)j->ninputs], id, (uint64_t)sid))
					goto nomem;
				f.kind = MK_FILL_COPY;
				f.from = (uint32_t)a;
			}
		} else if (npresent == 1) {
			f.kind = MK_FILL_COPY;
			f.from = (uint32_t)one;
		} else if (npresent == 0) {
			f.kind = MK_FILL_ZERO;
			zeros++;
		} else if (t->base >= 0 && has[t->base]) {
			f.kind = MK_FILL_COPY;
			f.from = (uint32_t)t->base;
		} else {
			f.kind = MK_FILL_AVERAGE;
		}
		if (fill_push(vc, &fcap, f))
			goto nomem;
	}
	if (vc->rows > vc->tokens &&
	    fill_push(vc, &fcap, (struct mk_vocab_fill){ .out = vc->tokens, .n = vc->rows - vc->tokens, .kind = MK_FILL_MEAN }))
		goto nomem;
	if (zeros && !p->tok_warned) {
		p->tok_warned = true;
		diag(t->d, MK_DIAG_WARNING, tc ? &tc->loc : &p->cfg->tokenizer_source.loc,
		     "%zu token%s of the output vocabulary %s in no model's %s: %s embedding is zeros", zeros,
		     zeros == 1 ? "" : "s", zeros == 1 ? "is" : "are", t->ow->name, zeros == 1 ? "its" : "their");
	}
	goto out;
nomem:
	rc = mk_err_set(err, MK_ENOMEM, "out of memory");
out:
	free(caps);
	free(has);
	return rc;
}

/* ------------------------------------------------------------ tokenizer */

/* tokenizer_source / tokenizer.source: the output vocabulary and every
 * model's map into it (mk_tokmerge_build), from the models' tokenizer.json
 * files and config.json vocab sizes, before any tensor is planned; the
 * embedding jobs are then planned over it (tplan_vocab_*). */
static void tok_warn(void *ctx, const char *msg)
{
	struct { struct mk_diags *d; const struct mk_config_loc *loc; } *w = ctx;
	diag(w->d, MK_DIAG_WARNING, w->loc, "%s", msg);
}

int plan_build_tokenizer(struct mk_plan *p, struct mk_diags *d, struct mk_err *err)
{
	const struct mk_tokenizer_config *tc = p->cfg->tokenizer;
	const struct mk_tok_source *src = tc ? &tc->source : &p->cfg->tokenizer_source;
	const struct mk_config_loc *loc = tc ? &tc->loc : &p->cfg->tokenizer_source.loc;
	const char *vk = p->arch ? mk_arch_vocab_key(p->arch) : "vocab_size";
	struct mk_vocab **v = calloc(p->nmodels + 1, sizeof(*v));
	long long *vs = calloc(p->nmodels + 1, sizeof(*vs));
	const char **labels = calloc(p->nmodels + 1, sizeof(*labels));
	const char **extra = calloc((tc ? tc->ntokens : 0) + 1, sizeof(*extra));
	struct { struct mk_diags *d; const struct mk_config_loc *loc; } wctx = { d, loc };
	struct mk_tokmerge_in in = { .nmodels = p->nmodels, .vocab = (const struct mk_vocab *const *)v,
				     .vocab_size = vs, .label = labels, .warn = tok_warn, .warn_ctx = &wctx };
	int rc = 0;

	if (!v || !vs || !labels || !extra) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (src->kind == MK_TOKSRC_NONE && !tc)
		goto out;
	/* the base: base_model, else the first model */
	if (p->cfg->base_model) {
		long b = plan_model_index(p, p->cfg->base_model);
		in.base = b >= 0 ? (size_t)b : 0;
	}
	in.source = src->kind == MK_TOKSRC_BASE ? MK_TOKMERGE_BASE :
		    src->kind == MK_TOKSRC_MODEL ? MK_TOKMERGE_MODEL : MK_TOKMERGE_UNION;
	if (src->kind == MK_TOKSRC_MODEL) {
		long i = plan_model_index(p, &src->model);
		if (i < 0) {
			diag(d, MK_DIAG_ERROR, &src->loc,
			     "the tokenizer source is not one of the merged models: a tokenizer from another model is not supported yet");
			goto out;
		}
		in.source_model = (size_t)i;
	}
	for (size_t i = 0; i < p->nmodels; i++) {
		struct mk_err e = { 0 };
		uint8_t *buf = NULL;
		size_t len;
		char label[4096];
		int64_t n = -1;
		labels[i] = p->models[i].display;
		vs[i] = !mk_hfconfig_int(p->models[i].hf, vk, &n, NULL) && n > 0 ? n : -1;
		/* a slow tokenizer's files alone (SentencePiece tokenizer.model,
		 * GPT-2 vocab.json, WordPiece vocab.txt): its vocabulary, and the
		 * added tokens its tokenizer_config.json lists */
		const char *slow = plan_has_file(&p->models[i], "tokenizer.json") ? NULL :
				   plan_has_file(&p->models[i], "tokenizer.model") ? "tokenizer.model" :
				   plan_has_file(&p->models[i], "vocab.json") ? "vocab.json" :
				   plan_has_file(&p->models[i], "vocab.txt") ? "vocab.txt" : NULL;
		if (slow) {
			snprintf(label, sizeof(label), "%s/%s", p->models[i].m->dir, slow);
			rc = plan_model_file_read(p->models[i].m, slow, &buf, &len, &e);
			if (!rc)
				rc = !strcmp(slow, "tokenizer.model") ? mk_vocab_parse_spm(buf, len, label, &v[i], &e) :
				     mk_vocab_parse_plain((const char *)buf, len, label, !strcmp(slow, "vocab.txt"), &v[i], &e);
			free(buf);
			buf = NULL;
			/* a legacy added_tokens.json: transformers 5 (and so mergekit)
			 * no longer loads it; nor does mk, saying so */
			if (!rc && plan_has_file(&p->models[i], "added_tokens.json"))
				diag(d, MK_DIAG_WARNING, loc,
				     "model '%s': its added_tokens.json is not read (transformers 5 and mergekit do not load it); "
				     "the tokens of tokenizer_config.json's added_tokens_decoder are",
				     p->models[i].display);
			if (!rc && plan_has_file(&p->models[i], "tokenizer_config.json")) {
				snprintf(label, sizeof(label), "%s/tokenizer_config.json", p->models[i].m->dir);
				rc = plan_model_file_read(p->models[i].m, "tokenizer_config.json", &buf, &len, &e);
				if (!rc)
					rc = mk_vocab_add_decoder(v[i], (const char *)buf, len, label, &e);
				free(buf);
			}
			if (rc) {
				if (e.code == MK_ENOMEM) {
					rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
					goto out;
				}
				rc = 0;
				diag(d, MK_DIAG_ERROR, loc, "model '%s': %s", p->models[i].display, e.msg);
				goto out;
			}
			continue;
		}
		if (!plan_has_file(&p->models[i], "tokenizer.json")) {
			if (i == in.base || (in.source == MK_TOKMERGE_MODEL && i == in.source_model)) {
				diag(d, MK_DIAG_ERROR, loc, "model '%s' has no tokenizer to build the output's on",
				     p->models[i].display);
				goto out;
			}
			/* as mergekit: a model without a tokenizer is taken to have the base's */
			diag(d, MK_DIAG_WARNING, loc, "model '%s' has no tokenizer: taken to have the base model's vocabulary",
			     p->models[i].display);
			continue;
		}
		snprintf(label, sizeof(label), "%s/tokenizer.json", p->models[i].m->dir);
		if (plan_model_file_read(p->models[i].m, "tokenizer.json", &buf, &len, &e) ||
		    mk_vocab_parse((const char *)buf, len, label, &v[i], &e)) {
			free(buf);
			if (e.code == MK_ENOMEM) {
				rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
				goto out;
			}
			diag(d, MK_DIAG_ERROR, loc, "model '%s': %s", p->models[i].display, e.msg);
			goto out;
		}
		free(buf);
	}
	for (size_t k = 0; tc && k < tc->ntokens; k++)
		extra[k] = tc->tokens[k].token;
	in.nextra = tc ? tc->ntokens : 0;
	in.extra = extra;
	{
		struct mk_err e = { 0 };
		if (mk_tokmerge_build(&in, &p->tok, &e)) {
			if (e.code == MK_ENOMEM) {
				rc = mk_err_set(err, MK_ENOMEM, "%s", e.msg);
				goto out;
			}
			diag(d, MK_DIAG_ERROR, loc, "%s", e.msg);
			goto out;
		}
	}
	for (size_t k = 0; k < p->tok->n; k++)
		if (!p->tok->token[k]) {
			diag(d, MK_DIAG_ERROR, loc,
			     "model '%s': its tokenizer has no token with id %zu: a vocabulary with gaps is not supported yet",
			     p->models[p->tok->from_model].display, k);
			goto out;
		}
	p->tok_donor = p->tok->from_model;
	p->tok_rows = p->tok->n;
	if (tc && tc->has_pad_to_multiple_of && p->tok_rows % (uint64_t)tc->pad_to_multiple_of)
		p->tok_rows += (uint64_t)tc->pad_to_multiple_of - p->tok_rows % (uint64_t)tc->pad_to_multiple_of;
	/* tokens: each entry's output id; the models it names in the merge,
	 * a named source token in that model's vocabulary */
	if (!(p->tok_cfg = malloc((p->tok->n + 1) * sizeof(*p->tok_cfg))) ||
	    !(p->tok_said = calloc((tc ? tc->ntokens : 0) + 1, 1))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < p->tok->n; k++)
		p->tok_cfg[k] = -1;
	for (size_t k = 0; tc && k < tc->ntokens; k++) {
		const struct mk_token_embed *te = &tc->tokens[k];
		long long id = mk_tokmerge_find(p->tok, te->token);
		if (id >= 0)
			p->tok_cfg[id] = (long)k;
		if (te->kind != MK_TOKEMB_MODEL && te->kind != MK_TOKEMB_MODEL_TOKEN)
			continue;
		long m = plan_model_index(p, &te->model);
		if (m < 0) {
			char *name = NULL;
			struct mk_err fe;
			(void)mk_model_ref_format(&te->model, &name, &fe);
			diag(d, MK_DIAG_ERROR, &te->loc, "tokens: '%s' takes its embedding from model '%s', which is not in the merge",
			     te->token, name ? name : "?");
			free(name);
			continue;
		}
		if (te->kind == MK_TOKEMB_MODEL_TOKEN && !te->has_token_id &&
		    mk_vocab_find(p->tok->orig[m], te->src_token) < 0)
			diag(d, MK_DIAG_ERROR, &te->loc, "tokens: '%s' takes the embedding of token '%s', which model '%s' does not have",
			     te->token, te->src_token, p->models[m].display);
		if (te->kind == MK_TOKEMB_MODEL_TOKEN && te->has_token_id && te->token_id < 0)
			diag(d, MK_DIAG_ERROR, &te->loc, "tokens: '%s': token_id %lld is negative", te->token, te->token_id);
	}
out:
	if (p->tok) {
		/* the merged vocabulary borrows them: kept with the plan */
		p->tok_vocabs = v;
	} else {
		for (size_t i = 0; v && i < p->nmodels; i++)
			mk_vocab_free(v[i]);
		free(v);
	}
	free(vs);
	free(labels);
	free(extra);
	return rc;
}
