/* verify.c - a stream checked whole by the stages' decoders and rules. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include "core/budget.h"
#include "core/fsutil.h"
#include "stream/piecewise.h"
#include "stream/manifest.h"
#include "merge/merge.h"
#include "pack/pack.h"
#include "stream/job.h"
#include "mk/stream.h"
#include "verify/verify.h"

struct vs {
	const struct mk_manifest *head;
	uint64_t *got;               /* tensors: elements written so far */
	char **files;                /* tensors: FILE names so far */
	size_t nfiles;
	bool plan, tensors;
};

/* Is `a` inside folder `b` ("b/...")? */
static bool path_under(const char *a, const char *b)
{
	size_t n = strlen(b);

	return !strncmp(a, b, n) && a[n] == '/';
}

/* One frame after the HEAD of a plan (mk-fetch's rules) or a tensors
 * stream (mk-pack's). */
static int frame(struct vs *v, struct mk_stream_reader *r, const struct mk_frame *f, struct mk_err *err)
{
	int rc;

	if (!strcmp(f->type, MK_FT_HEAD))
		return mk_err_set(err, MK_EFORMAT, "a second HEAD");
	if (!strcmp(f->type, MK_FT_END) || !f->critical)
		return 0;
	if (!strcmp(f->type, MK_FT_FILE)) {
		/* read in pieces: its name here, its contents drained (and
		 * verified) by the next mk_sr_next, never held */
		char name[PATH_MAX + 1], *copy;
		uint32_t mode;
		uint64_t size;
		rc = mk_file_read_head(r, f, &mode, name, &size, err);
		if (rc || !v->tensors)
			return rc;
		/* mk-pack writes it: not over a weight file, not twice */
		rc = mk_pack_file_name_check(name, err);
		if (!rc)
			rc = mk_pack_file_size_check(v->head, name, size, err);
		for (size_t k = 0; !rc && k < v->nfiles; k++)
			if (!strcmp(v->files[k], name))
				rc = mk_err_set(err, MK_EFORMAT, "FILE '%s' sent twice", name);
			else if (path_under(name, v->files[k]) || path_under(v->files[k], name))
				rc = mk_err_set(err, MK_EFORMAT, "FILE '%s' and FILE '%s': one would be the other's folder",
						v->files[k], name);
		if (rc)
			return rc;
		char **q = realloc(v->files, (v->nfiles + 1) * sizeof(*q));
		if (!q || !(copy = strdup(name))) {
			if (q)
				v->files = q;
			return mk_err_set(err, MK_ENOMEM, "out of memory");
		}
		v->files = q;
		v->files[v->nfiles++] = copy;
		return 0;
	}
	if (!strcmp(f->type, MK_FT_JOB) && v->plan) {
		struct mk_plan_job *j;
		rc = mk_plan_job_decode(f->payload, f->payload_len, v->head, &j, err);
		mk_plan_job_free(j);
		return rc;
	}
	if (!strcmp(f->type, MK_FT_DATA) && v->tensors) {
		struct mk_chunk c;
		if ((rc = mk_chunk_decode(f->payload, f->payload_len, &c, err)) ||
		    (rc = mk_chunk_check_data(v->head, &c, err)))
			return rc;
		if (c.elem_begin != v->got[c.id])
			return mk_err_set(err, MK_EFORMAT,
					  "DATA: tensor '%s': chunk at element %llu out of order (expected element %llu)",
					  v->head->tensors[c.id].name, (unsigned long long)c.elem_begin,
					  (unsigned long long)v->got[c.id]);
		v->got[c.id] += c.elem_count;
		return 0;
	}
	return mk_err_set(err, MK_EFORMAT, "unexpected %s frame in a '%s' stream", f->type, v->head->kind);
}

int mk_stream_verify(int fd, const char *label, uint64_t budget, struct mk_verify_summary *sum,
		     struct mk_err *err)
{
	struct mk_stream_reader *r = NULL;
	struct mk_manifest *head = NULL;
	struct mk_frame f;
	struct vs v = { 0 };
	int rc;

	memset(sum, 0, sizeof(*sum));
	rc = mk_sr_open(&r, fd, label, MK_SR_PIECEWISE_FILE, err);
	if (rc)
		return rc;
	mk_sr_set_bounds(r, &(struct mk_sr_bounds){ .memory = mk_budget_cat(budget) });
	rc = mk_sr_head(r, label, NULL, NULL, &head, &f, err);
	if (rc)
		goto out;
	snprintf(sum->kind, sizeof(sum->kind), "%s", head->kind);
	sum->ntensors = head->ntensors;
	sum->nfiles = head->nfiles;
	v.head = head;
	v.plan = !strcmp(head->kind, "plan");
	v.tensors = !strcmp(head->kind, "tensors");
	if (!strcmp(head->kind, "inputs")) {
		/* mk-merge's engine itself, its output discarded: an inputs
		 * stream verifies exactly when mk-merge accepts it */
		struct mk_merge_opts mo = { .spill_dir = mk_tmpdir() };
		struct mk_merge_stats ms;
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (null < 0) {
			rc = mk_err_sys(err, errno, "/dev/null");
			goto out;
		}
		rc = mk_merge_run_from(&mo, r, head, label, mk_io_fd(null), &ms, err);
		close(null);
		mk_sr_position(r, &sum->frames, &sum->bytes);
		sum->jobs = ms.jobs;
		sum->chunks = ms.chunks_in;
		goto out;
	}
	if (v.tensors && !(v.got = calloc(head->ntensors + 1, sizeof(*v.got)))) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	while ((rc = mk_sr_next(r, &f, err)) > 0) {
		if (!strcmp(f.type, MK_FT_JOB))
			sum->jobs++;
		if (!strcmp(f.type, MK_FT_INPT) || !strcmp(f.type, MK_FT_DATA))
			sum->chunks++;
		rc = frame(&v, r, &f, err);
		if (rc) {
			mk_err_prefix(err, "%s: frame #%llu: ", label, (unsigned long long)f.index);
			goto out;
		}
	}
	if (rc < 0)
		goto out;
	mk_sr_position(r, &sum->frames, &sum->bytes);
	if (v.plan && sum->jobs != head->njobs) {
		rc = mk_err_set(err, MK_EFORMAT, "%s: the HEAD announces %llu jobs, the stream has %llu", label,
				(unsigned long long)head->njobs, (unsigned long long)sum->jobs);
		goto out;
	}
	for (size_t i = 0; v.tensors && i < head->ntensors; i++)
		if (v.got[i] != head->tensors[i].nelem) {
			rc = mk_err_set(err, MK_ECORRUPT, "%s: tensor '%s' incomplete: %llu of %llu elements", label,
					head->tensors[i].name, (unsigned long long)v.got[i],
					(unsigned long long)head->tensors[i].nelem);
			goto out;
		}
out:
	for (size_t k = 0; k < v.nfiles; k++)
		free(v.files[k]);
	free(v.files);
	free(v.got);
	mk_manifest_free(head);
	mk_sr_free(r);
	return rc;
}
