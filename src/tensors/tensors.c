/* tensors.c - merging in process: tensors in memory, the method API. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/fsutil.h"
#include "io/safetensors.h"
#include "methods/spec.h"
#include "mk/tensors.h"

struct pv_entry {
	char *name;
	int input;
	struct mk_pval v;
};

struct mk_param_values {
	size_t n;
	struct pv_entry *e;
};

void mk_tensor_release(struct mk_tensor *t)
{
	if (!t)
		return;
	free(t->data);
	memset(t, 0, sizeof(*t));
}

struct mk_param_values *mk_param_values_new(void)
{
	return calloc(1, sizeof(struct mk_param_values));
}

void mk_param_values_free(struct mk_param_values *pv)
{
	if (!pv)
		return;
	for (size_t i = 0; i < pv->n; i++)
		free(pv->e[i].name);
	free(pv->e);
	free(pv);
}

int mk_param_values_set(struct mk_param_values *pv, const char *name, int input, struct mk_pval v,
			struct mk_err *err)
{
	for (size_t i = 0; i < pv->n; i++)
		if (pv->e[i].input == input && !strcmp(pv->e[i].name, name)) {
			pv->e[i].v = v;
			return 0;
		}
	struct pv_entry *q = realloc(pv->e, (pv->n + 1) * sizeof(*q));
	if (!q)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	pv->e = q;
	q[pv->n] = (struct pv_entry){ strdup(name), input, v };
	if (!q[pv->n].name)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	pv->n++;
	return 0;
}

/* pv -> the raw arrays of a job desc, each name put in its place by the
 * method's spec; unknown names are an error.  As in a configuration's
 * top-level parameters, a value given with input -1 for a per-input
 * parameter applies to every input; a value for one input wins over it. */
static int raw_params(const struct mk_method *m, const struct mk_param_values *pv, size_t n,
		      struct mk_pval *g, struct mk_pval *in, struct mk_err *err)
{
	for (int pass = 0; pass < 2; pass++)
		for (size_t k = 0; pv && k < pv->n; k++) {
			const struct pv_entry *e = &pv->e[k];
			int rc = (e->input >= 0) != (pass == 1) ? 0 :
				 mk_method_param_put(m, e->name, e->input, n, true, e->v, g, in, err);
			if (rc)
				return rc;
		}
	return 0;
}

int mk_merge_tensors(const char *method, const struct mk_tensor *in, size_t n, int base,
		     const struct mk_param_values *pv, enum mk_dtype out_dtype, const char *name, uint64_t seed,
		     struct mk_tensor *out, struct mk_err *err)
{
	const struct mk_method *m;
	struct mk_tensor_desc *td = NULL;
	struct mk_pval *g = NULL, *iv = NULL;
	void **conv = NULL, *res = NULL;
	struct mk_job job = { 0 };
	bool live = false;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = mk_method_lookup(method, &m, err);
	if (rc)
		return rc;
	td = calloc(n + 1, sizeof(*td));
	g = calloc(m->nparams + 1, sizeof(*g));
	iv = calloc((m->nparams + 1) * (n + 1), sizeof(*iv));
	conv = calloc(n + 1, sizeof(*conv));
	if (!td || !g || !iv || !conv) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		td[i] = in[i].desc;
	rc = raw_params(m, pv, n, g, iv, err);
	if (rc)
		goto out;
	struct mk_job_desc d = { .tensor = name ? name : "tensor", .seed = seed, .ninputs = n, .base = base,
				 .in = td, .global = g, .input = iv };
	rc = mk_job_init(&job, m, &d, out_dtype, err);
	if (rc)
		goto out;
	live = true;
	uint64_t ne = job.nelem, ob;
	out->desc = job.out;
	if (mk_dtype_nbytes(out->desc.dtype, ne, &ob)) {
		rc = mk_err_set(err, MK_EINVAL, "output size");
		goto out;
	}
	out->data = malloc(ob ? ob : 1);
	if (!out->data) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	if (job.byte_copy) {
		memcpy(out->data, in[job.copy_input].data, ob);
		goto out;
	}
	/* the inputs' views in the compute dtype: a rectified input is read
	 * through its top-left block of the output's shape */
	size_t es = mk_dtype_bits(job.compute) / 8;
	uint64_t rl = mk_shape_row_len(out->desc.ndim, out->desc.shape);
	for (size_t i = 0; i < n; i++) {
		if (!job.used[i])
			continue;
		conv[i] = malloc(ne * es + 1);
		if (!conv[i]) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		uint64_t irl = mk_shape_row_len(in[i].desc.ndim, in[i].desc.shape);
		uint64_t rows = ne / (rl ? rl : 1), bits = mk_dtype_bits(in[i].desc.dtype);
		for (uint64_t r = 0; r < (rl ? rows : 0); r++)
			if (mk_dtype_convert(job.compute, (char *)conv[i] + r * rl * es, in[i].desc.dtype,
					     (const char *)in[i].data + r * irl * bits / 8, rl)) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "input %zu is %s, which %s cannot merge", i,
						mk_dtype_name(in[i].desc.dtype), m->name);
				goto out;
			}
	}
	struct mk_job_chunk c = { .elem_begin = 0, .count = ne, .in = (const void *const *)conv };
	job.held = true;   /* the views are here for every pass */
	for (unsigned p = 0; p < job.npasses; p++) {
		rc = mk_job_accumulate(&job, p, &c, err);
		if (!rc)
			rc = mk_job_finish(&job, p, err);
		if (rc)
			goto out;
	}
	res = malloc(ne * es + 1);
	if (!res) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	rc = mk_job_apply(&job, &c, res, err);
	if (!rc && mk_dtype_convert(out->desc.dtype, out->data, job.compute, res, ne))
		rc = mk_err_set(err, MK_EUNSUPPORTED, "cannot write %s output", mk_dtype_name(out->desc.dtype));
out:
	if (live)
		mk_job_release(&job);
	for (size_t i = 0; conv && i < n; i++)
		free(conv[i]);
	free(conv);
	free(res);
	free(td);
	free(g);
	free(iv);
	if (rc)
		mk_tensor_release(out);
	return rc;
}

/* Can groups a and b share one batch call? */
static bool same_batch(const struct mk_method *m, const struct mk_group *a, const struct mk_pval *ga,
		       const struct mk_group *b, const struct mk_pval *gb)
{
	if (a->n != b->n || a->base != b->base)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (!mk_tensor_desc_equal(&a->in[i].desc, &b->in[i].desc))
			return false;
	for (size_t p = 0; p < m->nparams; p++) {
		if (m->params[p].flags & MK_PF_COEF)
			continue;
		if (m->params[p].scope != MK_SCOPE_GLOBAL)
			return false; /* per-input options: keep it simple, one by one */
		if (ga[p].set != gb[p].set || (ga[p].set && memcmp(&ga[p], &gb[p], sizeof(ga[p]))))
			return false;
	}
	return true;
}

/* The B groups from g, of one plan *pp (every group's), their parameters
 * resolved into gres and ires, in one batch call. */
static int run_batch(const struct mk_method *m, struct mk_group *g, size_t B, const struct mk_plan_out *pp,
		     struct mk_pval *gres, struct mk_pval *ires, enum mk_dtype out_dtype, struct mk_err *err)
{
	const struct mk_plan_out po = *pp;
	size_t n = g[0].n, np = m->nparams;
	void **in = calloc(n + 1, sizeof(*in)), **coef = calloc(np + 1, sizeof(*coef)), *out = NULL;
	int rc = 0;

	if (!in || !coef) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	uint64_t ne = mk_tensor_desc_count(&po.out);
	size_t es = mk_dtype_bits(po.compute) / 8;
	for (size_t i = 0; i < n; i++) {
		in[i] = malloc(B * ne * es + 1);
		if (!in[i]) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t b = 0; b < B; b++)
			if (mk_dtype_convert(po.compute, (char *)in[i] + b * ne * es, g[b].in[i].desc.dtype, g[b].in[i].data, ne)) {
				rc = mk_err_set(err, MK_EUNSUPPORTED, "input %zu is not a float tensor", i);
				goto out;
			}
	}
	for (size_t p = 0; p < np; p++) {
		const struct mk_param_spec *ps = &m->params[p];
		if (!(ps->flags & MK_PF_COEF))
			continue;
		size_t cols = ps->scope == MK_SCOPE_GLOBAL ? 1 : ps->scope == MK_SCOPE_PER_INPUT ? n : n - (g[0].base >= 0);
		size_t w = ps->type == MK_PT_FLOAT ? es : ps->type == MK_PT_INT ? 8 : sizeof(bool);
		coef[p] = calloc(B * cols + 1, w);
		if (!coef[p]) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			goto out;
		}
		for (size_t b = 0; b < B; b++) {
			size_t c = 0;
			for (size_t i = 0; i < (ps->scope == MK_SCOPE_GLOBAL ? 1 : n); i++) {
				if (ps->scope == MK_SCOPE_PER_NON_BASE && (int)i == g[0].base)
					continue;
				const struct mk_pval *v = ps->scope == MK_SCOPE_GLOBAL ? &gres[b * np + p] :
							  &ires[(b * n + i) * np + p];
				char *dst = (char *)coef[p] + (b * cols + c) * w;
				if (ps->type == MK_PT_FLOAT && es == 8)
					memcpy(dst, &v->f, 8);
				else if (ps->type == MK_PT_FLOAT) {
					float f = (float)v->f;
					memcpy(dst, &f, 4);
				} else if (ps->type == MK_PT_INT)
					memcpy(dst, &v->i, 8);
				else
					memcpy(dst, &v->b, sizeof(bool));
				c++;
			}
		}
	}
	out = malloc(B * ne * es + 1);
	if (!out) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	struct mk_batch bt = { .B = B, .ninputs = n, .base = g[0].base, .nelem = ne, .compute = po.compute,
			       .in = (const void *const *)in, .coef = (const void *const *)coef, .opt = gres,
			       .out = out };
	rc = mk_method_batch(m, &bt, err);
	if (rc)
		goto out;
	enum mk_dtype odt = out_dtype == MK_DT_COUNT ? po.out.dtype : out_dtype;
	uint64_t ob;
	mk_dtype_nbytes(odt, ne, &ob);
	for (size_t b = 0; b < B && !rc; b++) {
		g[b].out.desc = po.out;
		g[b].out.desc.dtype = odt;
		g[b].out.data = malloc(ob ? ob : 1);
		if (!g[b].out.data)
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		else if (mk_dtype_convert(odt, g[b].out.data, po.compute, (char *)out + b * ne * es, ne))
			rc = mk_err_set(err, MK_EUNSUPPORTED, "cannot write %s output", mk_dtype_name(odt));
	}
out:
	for (size_t i = 0; in && i < n; i++)
		free(in[i]);
	for (size_t p = 0; coef && p < np; p++)
		free(coef[p]);
	free(in);
	free(coef);
	free(out);
	return rc;
}

int mk_merge_groups(const char *method, struct mk_group *g, size_t ng, enum mk_dtype out_dtype, uint64_t seed,
		    uint64_t max_bytes, size_t max_groups, struct mk_err *err)
{
	const struct mk_method *m;
	int rc = mk_method_lookup(method, &m, err);
	size_t np, i = 0;
	struct mk_pval *gres = NULL, *ires = NULL;

	if (rc)
		return rc;
	np = m->nparams;
	for (size_t k = 0; k < ng; k++)
		memset(&g[k].out, 0, sizeof(g[k].out));
	while (i < ng && !rc) {
		/* resolve this group's parameters (and check them) */
		size_t n = g[i].n, B = 0;
		uint64_t bytes = 0;
		struct mk_plan_out po0 = { .npasses = 0 };
		free(gres);
		free(ires);
		gres = calloc((ng - i) * np + 1, sizeof(*gres));
		ires = calloc((ng - i) * n * np + 1, sizeof(*ires));
		if (!gres || !ires) {
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
			break;
		}
		while (m->batch && i + B < ng && (!max_groups || B < max_groups)) {
			struct mk_group *x = &g[i + B];
			struct mk_tensor_desc td[64];
			struct mk_pval graw[64] = { 0 }, iraw[64 * 64];
			uint64_t gb = 0;
			if (x->n > 64 || np > 64 || x->n != n)
				break;
			memset(iraw, 0, sizeof(iraw[0]) * x->n * np);
			for (size_t k = 0; k < x->n; k++) {
				td[k] = x->in[k].desc;
				gb += mk_tensor_desc_count(&x->in[k].desc) * mk_dtype_bits(x->in[k].desc.dtype) / 8;
			}
			if (B && max_bytes && bytes + gb > max_bytes)
				break;
			rc = raw_params(m, x->pv, x->n, graw, iraw, err);
			if (rc)
				break;
			struct mk_job_desc d = { .tensor = x->name ? x->name : "tensor", .seed = seed, .ninputs = x->n,
						 .base = x->base, .in = td, .global = graw, .input = iraw };
			struct mk_plan_out po;
			rc = mk_method_plan(m, &d, &po, &gres[B * np], &ires[B * n * np], NULL, err);
			if (rc)
				break;
			if (po.npasses || (B && !same_batch(m, &g[i], gres, x, &gres[B * np])))
				break;
			if (!B)
				po0 = po;
			bytes += gb;
			B++;
		}
		if (rc)
			break;
		if (B >= 1 && m->batch) {
			rc = run_batch(m, &g[i], B, &po0, gres, ires, out_dtype, err);
			i += B;
		} else {
			rc = mk_merge_tensors(method, g[i].in, g[i].n, g[i].base, g[i].pv, out_dtype, g[i].name, seed,
					      &g[i].out, err);
			i++;
		}
	}
	free(gres);
	free(ires);
	if (rc)
		for (size_t k = 0; k < ng; k++)
			mk_tensor_release(&g[k].out);
	return rc;
}

static int read_tensor(const struct mk_st_file *f, const struct mk_st_tensor *t, void **out, struct mk_err *err)
{
	uint64_t len = t->end - t->begin;
	int fd = mk_file_open(f->path, NULL, err), rc = 0;
	char *b = malloc(len ? len : 1);
	uint64_t got = 0;

	*out = NULL;
	if (fd < 0 || !b) {
		rc = fd < 0 ? fd : mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	while (got < len) {
		ssize_t r = pread(fd, b + got, len - got, (off_t)(f->data_start + t->begin + got));
		if (r <= 0) {
			rc = r < 0 ? mk_err_sys(err, errno, "%s: read", f->path) :
				     mk_err_set(err, MK_ECORRUPT, "%s: tensor '%s' is cut short", f->path, t->name);
			goto out;
		}
		got += (uint64_t)r;
	}
	*out = b;
	b = NULL;
out:
	free(b);
	if (fd >= 0)
		close(fd);
	return rc;
}

int mk_merge_safetensors(const char *method, const char *const *paths, size_t n, int base,
			 const struct mk_param_values *pv, bool strict, enum mk_dtype out_dtype, uint64_t seed,
			 const char *out_path, struct mk_err *err)
{
	struct mk_st_file **f = calloc(n + 1, sizeof(*f));
	struct mk_tensor *outs = NULL, *in = calloc(n + 1, sizeof(*in));
	struct mk_st_out_tensor *ot = NULL;
	const struct mk_st_tensor **names = NULL;
	size_t nout = 0;
	uint8_t *hdr = NULL;
	size_t hlen;
	int rc = 0, fd = -1;
	char *tmp = NULL;

	if (!f || !in)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	if (n == 0) {
		rc = mk_err_set(err, MK_EINVAL, "no input file");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		rc = mk_st_open(paths[i], &f[i], err);
		if (rc)
			goto out;
	}
	/* the names to merge, in the first file's (offset) order */
	names = calloc(f[0]->ntensors + 1, sizeof(*names));
	if (!names) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < f[0]->ntensors; k++) {
		const struct mk_st_tensor *t = &f[0]->tensors[k];
		bool all = true;
		for (size_t i = 1; i < n; i++)
			if (!mk_st_find(f[i], t->name)) {
				all = false;
				if (strict) {
					rc = mk_err_set(err, MK_EMISMATCH, "tensor '%s' is in %s but not in %s (strict)", t->name,
							paths[0], paths[i]);
					goto out;
				}
			}
		if (all)
			names[nout++] = t;
	}
	if (strict)
		for (size_t i = 1; i < n; i++)
			if (f[i]->ntensors != f[0]->ntensors)
				for (size_t k = 0; k < f[i]->ntensors; k++)
					if (!mk_st_find(f[0], f[i]->tensors[k].name)) {
						rc = mk_err_set(err, MK_EMISMATCH, "tensor '%s' is in %s but not in %s (strict)",
								f[i]->tensors[k].name, paths[i], paths[0]);
						goto out;
					}
	outs = calloc(nout + 1, sizeof(*outs));
	ot = calloc(nout + 1, sizeof(*ot));
	if (!outs || !ot) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < nout; k++) {
		const char *nm = names[k]->name;
		bool is_float = true;
		for (size_t i = 0; i < n; i++) {
			const struct mk_st_tensor *t = mk_st_find(f[i], nm);
			in[i].desc = t->desc;
			rc = read_tensor(f[i], t, &in[i].data, err);
			if (rc)
				goto out;
			is_float &= mk_dtype_is_float(t->desc.dtype);
		}
		if (is_float) {
			rc = mk_merge_tensors(method, in, n, base, pv, out_dtype, nm, seed, &outs[k], err);
			if (rc) {
				mk_err_prefix(err, "tensor '%s': ", nm);
				goto out;
			}
		} else {
			/* not floats: must agree, then copied */
			const struct mk_st_tensor *t0 = mk_st_find(f[0], nm);
			for (size_t i = 1; i < n; i++) {
				const struct mk_st_tensor *t = mk_st_find(f[i], nm);
				if (!mk_tensor_desc_equal(&t->desc, &t0->desc) ||
				    memcmp(in[i].data, in[0].data, t0->end - t0->begin)) {
					rc = mk_err_set(err, MK_EMISMATCH,
							"tensor '%s' (%s) differs between %s and %s: tensors that are not floats must be equal",
							nm, mk_dtype_name(t0->desc.dtype), paths[0], paths[i]);
					goto out;
				}
			}
			outs[k] = in[0];
			in[0].data = NULL;
		}
		for (size_t i = 0; i < n; i++) {
			free(in[i].data);
			in[i].data = NULL;
		}
		ot[k] = (struct mk_st_out_tensor){ .name = nm, .dtype = outs[k].desc.dtype, .ndim = outs[k].desc.ndim,
						   .shape = outs[k].desc.shape };
	}
	rc = mk_st_header_build(ot, nout, 8, &hdr, &hlen, NULL, err);
	if (rc)
		goto out;
	/* write to a temporary beside out_path, then rename */
	tmp = malloc(strlen(out_path) + 16);
	if (!tmp) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	sprintf(tmp, "%s.tmp.XXXXXX", out_path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		rc = mk_err_sys(err, errno, "%s", out_path);
		goto out;
	}
	rc = mk_pwrite_all(fd, hdr, hlen, 0, out_path, err);
	for (size_t k = 0; !rc && k < nout; k++)
		rc = mk_pwrite_all(fd, outs[k].data, ot[k].nbytes, hlen + ot[k].begin, out_path, err);
	if (!rc && fsync(fd) < 0)
		rc = mk_err_sys(err, errno, "%s: fsync", out_path);
	if (!rc && rename(tmp, out_path) < 0)
		rc = mk_err_sys(err, errno, "%s", out_path);
out:
	if (fd >= 0) {
		close(fd);
		if (rc)
			unlink(tmp);
	}
	free(tmp);
	free(hdr);
	for (size_t k = 0; outs && k < nout; k++)
		mk_tensor_release(&outs[k]);
	for (size_t i = 0; i < n; i++)
		free(in[i].data);
	free(outs);
	free(ot);
	free(in);
	free(names);
	for (size_t i = 0; i < n; i++)
		mk_st_file_free(f[i]);
	free(f);
	return rc;
}
