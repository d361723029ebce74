/* plan_write.c - the plan out: its stream (mk_plan_write) and the plan in
 * words (mk_plan_explain). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mk/stream.h"
#include "planner/planner_impl.h"

int mk_plan_write(const struct mk_plan *p, struct mk_io out, int level, struct mk_err *err)
{
	struct mk_stream_writer *w = NULL;
	char *head = NULL;
	size_t hlen;
	int rc = 0;

	if (!rc)
		rc = mk_manifest_encode(p->man, &head, &hlen, err);
	if (!rc)
		rc = mk_sw_open_io(&w, out, level, err);
	if (!rc)
		rc = mk_sw_frame1(w, MK_FT_HEAD, head, hlen, err);
	for (size_t i = 0; !rc && i < p->nfiles; i++)
		rc = mk_sw_file(w, p->files[i].name, 0644, p->files[i].data, p->files[i].len, err);
	for (size_t i = 0; !rc && i < p->njobs; i++) {
		char *j;
		size_t jl;
		rc = mk_plan_job_encode(p->jobs[i], &j, &jl, err);
		if (!rc)
			rc = mk_sw_frame1(w, MK_FT_JOB, j, jl, err);
		free(j);
	}
	if (!rc)
		rc = mk_sw_end(w, err);
	mk_sw_free(w);
	free(head);
	return rc;
}

/* ------------------------------------------------------------ explain */

/* {"name":value,...} of the job's GLOBAL parameters (input -1) or of
 * input i's per-input ones, as the JOB frame writes them */
static void format_params(const struct mk_plan_job *j, long input, char *buf, size_t n)
{
	size_t at = (size_t)snprintf(buf, n, "{"), k = 0;

	for (size_t p = 0; p < j->m->nparams && at < n; p++) {
		const struct mk_pval *v = mk_plan_job_param(j, input, p);
		if (!v)
			continue;
		at += (size_t)snprintf(buf + at, n - at, "%s\"%s\":", k++ ? "," : "", j->m->params[p].name);
		if (at >= n)
			break;
		if (v->type == MK_PT_BOOL)
			at += (size_t)snprintf(buf + at, n - at, "%s", v->b ? "true" : "false");
		else if (v->type == MK_PT_INT)
			at += (size_t)snprintf(buf + at, n - at, "%lld", (long long)v->i);
		else
			at += (size_t)snprintf(buf + at, n - at, "%.17g", v->f);
	}
	if (at < n)
		snprintf(buf + at, n - at, "}");
}

int mk_plan_explain(const struct mk_plan *p, char **out, struct mk_err *err)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	fprintf(f, "merge method %s (%s); %zu models; %zu output tensors; %zu files\n", p->method->name,
		p->method->pretty_name, p->nmodels, p->man->ntensors, p->nfiles);
	for (size_t i = 0; i < p->nmodels; i++)
		fprintf(f, "model %zu: %s%s (%s)\n", i, p->models[i].display,
			p->cfg->base_model && mk_model_ref_equal(p->models[i].ref, p->cfg->base_model) ? " [base]" : "",
			p->models[i].m->dir);
	for (size_t k = 0; k < p->njobs; k++) {
		const struct mk_plan_job *j = p->jobs[k];
		const struct mk_manifest_tensor *t = &p->man->tensors[j->output];
		char g[512];
		format_params(j, -1, g, sizeof(g));
		fprintf(f, "\n%s %s [", t->name, mk_dtype_name(t->desc.dtype));
		for (unsigned dd = 0; dd < t->desc.ndim; dd++)
			fprintf(f, "%s%llu", dd ? ", " : "", (unsigned long long)t->desc.shape[dd]);
		/* how the inputs are sent; by default, why one is streamed */
		char sent[160] = "";
		if (j->passes && (j->spill || j->sends == 1 || p->o->budget))
			snprintf(sent, sizeof(sent), "%s", j->spill ? " (replayed from mk-merge's spill file)" :
				 j->sends == 1 ? " (held in memory)" : " (inputs streamed once per pass)");
		else if (j->passes)
			snprintf(sent, sizeof(sent),
				 " (inputs streamed once per pass: over the %.0f MiB a job is held in by default)",
				 (double)p->hold_max / (1 << 20));
		fprintf(f, "]\n  %s, %u statistics pass%s%s, parameters %s\n", j->method, j->passes,
			j->passes == 1 ? "" : "es", sent, g);
		for (size_t i = 0; i < j->ninputs; i++) {
			char ip[512];
			format_params(j, (long)i, ip, sizeof(ip));
			char asm_[512] = "";
			if (j->inputs[i].nsources)
				snprintf(asm_, sizeof(asm_), " (%s of %zu tensors)", j->inputs[i].assembly, j->inputs[i].nsources);
			const struct mk_plan_lora *lo = j->inputs[i].lora;
			if (lo) {
				char d[96] = "";
				if (lo->a)
					snprintf(d, sizeof(d), lo->transpose ? " + %.6g·(B·A)ᵀ%s" : " + %.6g·B·A%s", lo->scale,
						 lo->magnitude ? lo->transpose ? ", DoRA (columns' norms)" : ", DoRA (rows' norms)" : "");
				else if (lo->bias)
					snprintf(d, sizeof(d), " + %.6g·lora_B.bias", lo->scale);
				snprintf(asm_, sizeof(asm_), "%s%s%.400s%s", lo->replace ? " (the adapter's " : "",
					 lo->replace ? lo->replace : "", lo->replace ? ")" : "", d);
			}
			fprintf(f, "  input %zu: %s: %s%s %s%s%s %s\n", i, p->models[j->inputs[i].model].display,
				j->inputs[i].tensor, asm_, mk_dtype_name(j->inputs[i].desc.dtype),
				j->inputs[i].load_dtype != j->inputs[i].desc.dtype ? " as " : "",
				j->inputs[i].load_dtype != j->inputs[i].desc.dtype ? mk_dtype_name(j->inputs[i].load_dtype) : "",
				(long)i == j->base ? "[base]" : (strcmp(ip, "{}") ? ip : ""));
		}
	}
	for (size_t i = 0; i < p->nfiles; i++)
		fprintf(f, "%sfile %s (%zu bytes)\n", i ? "" : "\n", p->files[i].name, p->files[i].len);
	if (fclose(f) != 0) {
		free(buf);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	*out = buf;
	return 0;
}
