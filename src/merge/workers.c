/* workers.c - mk-merge's worker threads: a range's inputs converted to the
 * compute dtype and the method run over it, in pieces taken by the
 * pool's threads (../core/pool.h) as each is free. */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include "merge_impl.h"
#include "core/pool.h"

/* One mk__workers_run step: the range's elements [b, b + n), cut into
 * tasks of WORK_PIECE elements for the pool's threads. */
struct step {
	struct run *r;
	uint64_t b, n;
	bool apply;              /* also run the method and convert out */
	bool raw;                /* apply: BF16 inputs passed as they are */
	uint64_t *count;         /* non-finite inputs, per slot (mk__counts_on_convert), or NULL */
	void *out;               /* apply: the output, n elements of the output dtype */
	uint64_t *ocount;        /* apply: the output's non-finite elements, per slot, or NULL */
	char **tile;             /* per slot: its tiles, made by its first task */
	const void ***ptrs;      /* per slot: the inputs' pointers */
	pthread_mutex_t mu;      /* the first failure, by task */
	unsigned failed;         /* its task; UINT_MAX: none */
	int rc;
	struct mk_err err;
};

/* Does input i go through a narrower float dtype on load (a cast that
 * rounds, as torch's)? */
static bool casts_on_load(const struct run *r, size_t i)
{
	enum mk_dtype st = r->ib[i].dtype, load = r->pj->inputs[i].load_dtype;

	return load != st && mk_dtype_is_float(load) && mk_dtype_bits(load) < 32;
}

/* Convert n elements of input i's raw bytes from element `off` of the
 * range (cast on load when asked) into dst, in the compute dtype; add
 * the raw elements that are NaN or infinite to *nonfinite (if not NULL),
 * counted while they are in cache. */
static int convert_input(struct run *r, size_t i, uint64_t off, uint64_t n, void *dst, uint64_t *nonfinite,
			 struct mk_err *err)
{
	size_t es = mk_dtype_bits(r->job.compute) / 8;
	enum mk_dtype st = r->ib[i].dtype, load = r->pj->inputs[i].load_dtype;
	const char *src = (const char *)r->ib[i].data + off * mk_dtype_bits(st) / 8;

	/* a cast on load rounds to the load dtype first, as torch; the
	 * conversion goes through float32 either way, so converting the
	 * load-dtype value again is exact */
	if (casts_on_load(r, i)) {
		if (nonfinite)
			*nonfinite += mk_dtype_count_nonfinite(st, src, n);
		for (uint64_t e = 0; e < n; e += 1024) {
			uint64_t k = n - e < 1024 ? n - e : 1024;
			uint16_t tmp[1024 * 4];
			if (mk_dtype_convert(load, tmp, st, src + e * mk_dtype_bits(st) / 8, k) ||
			    mk_dtype_convert(r->job.compute, (char *)dst + e * es, load, tmp, k))
				return mk_err_set(err, MK_EUNSUPPORTED, "cannot cast %s to %s", mk_dtype_name(st),
						  mk_dtype_name(load));
		}
		return 0;
	}
	if (nonfinite ? mk_dtype_convert_count(r->job.compute, dst, st, src, n, nonfinite) :
			mk_dtype_convert(r->job.compute, dst, st, src, n))
		return mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): input %zu is %s, which %s cannot merge", r->pj->id,
				  r->name, i, mk_dtype_name(st), r->m->name);
	return 0;
}

/* Run the method over job elements [b, b + n) (at `off` in the range)
 * from inputs in ptrs (bf16: as BF16) into tmp, and convert the output
 * into the step's at `off`, its non-finite elements added to *ocount (if
 * not NULL) while they are in cache. */
static int apply_out(const struct step *st, uint64_t b, uint64_t off, uint64_t n, const void **ptrs, bool bf16,
		     void *tmp, uint64_t *ocount, struct mk_err *err)
{
	struct run *r = st->r;
	struct mk_job_chunk c = { .elem_begin = b, .count = n, .in = ptrs, .bf16 = bf16 };
	char *dst = (char *)st->out + off * mk_dtype_bits(r->job.out.dtype) / 8;
	int rc = mk_job_apply(&r->job, &c, tmp, err);

	if (!rc && mk_dtype_convert(r->job.out.dtype, dst, r->job.compute, tmp, n))
		rc = mk_err_set(err, MK_EUNSUPPORTED, "job %u (%s): cannot write %s output", r->pj->id, r->name,
				mk_dtype_name(r->job.out.dtype));
	if (!rc && ocount)
		*ocount += mk_dtype_count_nonfinite(r->job.out.dtype, dst, n);
	return rc;
}

/* Are the range's used inputs all BF16 as sent (no cast on load), with
 * float32 computing?  Then a job that takes them so (accumulate_bf16,
 * apply_bf16) gets them unconverted. */
static bool inputs_bf16(const struct run *r)
{
	if (r->job.compute != MK_DT_F32 || r->pj->vocab)
		return false;
	for (size_t i = 0; i < r->d.ninputs; i++)
		if (r->job.used[i] && (r->ib[i].dtype != MK_DT_BF16 || casts_on_load(r, i)))
			return false;
	return true;
}

/* Elements per step when converting, merging and converting back in one
 * go: the inputs, the output and the method's scratch stay in the
 * core's cache instead of going to memory and back between the steps. */
#define WORK_TILE 16384u

/* Elements per task of a step: small enough that the threads share a
 * range evenly when one of them starts late or is descheduled (each
 * takes the next task when it is free), large enough that a task's
 * bookkeeping does not show. */
#define WORK_PIECE (4 * WORK_TILE)

/* Task k of a step: its elements' used inputs converted into the
 * compute dtype, then (apply) the method run and the output converted,
 * tile by tile; or (the GPU's apply, which reads them next) converted
 * into the range's buffers.  Statistics passes go by mk__workers_stats
 * instead. */
static void work(void *arg, unsigned k, unsigned slot)
{
	struct step *st = arg;
	struct run *r = st->r;
	size_t es = mk_dtype_bits(r->job.compute) / 8, nin = r->d.ninputs;
	uint64_t off = (uint64_t)k * WORK_PIECE, n = st->n - off < WORK_PIECE ? st->n - off : WORK_PIECE;
	uint64_t *count = st->count ? &st->count[slot] : NULL, *ocount = st->ocount ? &st->ocount[slot] : NULL;
	struct mk_err err;
	int rc = 0;

	if (!st->ptrs[slot] && !(st->ptrs[slot] = calloc(nin + 1, sizeof(**st->ptrs)))) {
		rc = mk_err_set(&err, MK_ENOMEM, "out of memory");
		goto out;
	}
	const void **ptrs = st->ptrs[slot];
	if (!st->apply) {
		for (size_t i = 0; i < nin && !rc; i++)
			if (r->job.used[i])
				rc = convert_input(r, i, off, n, (char *)r->ib[i].conv + off * es, count, &err);
		goto out;
	}
	if (!st->tile[slot] && !(st->tile[slot] = malloc((nin + 1) * (size_t)WORK_TILE * es))) {
		rc = mk_err_set(&err, MK_ENOMEM, "out of memory");
		goto out;
	}
	char *tile = st->tile[slot];
	for (uint64_t t = 0; t < n && !rc; t += WORK_TILE) {
		uint64_t m = n - t < WORK_TILE ? n - t : WORK_TILE;
		for (size_t i = 0; i < nin && !rc; i++) {
			if (!r->job.used[i])
				continue;
			if (st->raw) {
				/* BF16 to a job that takes it: the method widens it
				 * (counted here, as a conversion would) */
				ptrs[i] = (const uint16_t *)r->ib[i].data + off + t;
				if (count)
					*count += mk_dtype_count_nonfinite(MK_DT_BF16, ptrs[i], m);
				continue;
			}
			ptrs[i] = tile + i * (size_t)WORK_TILE * es;
			rc = convert_input(r, i, off + t, m, (void *)ptrs[i], count, &err);
		}
		if (!rc)
			rc = apply_out(st, st->b + off + t, off + t, m, ptrs, st->raw, tile + nin * (size_t)WORK_TILE * es,
				       ocount, &err);
	}
out:
	if (rc) {
		pthread_mutex_lock(&st->mu);
		if (k < st->failed) {
			st->failed = k;
			st->rc = rc;
			st->err = err;
		}
		pthread_mutex_unlock(&st->mu);
	}
}

/* Elements per block of a statistics pass, unless the job asks for
 * others (accumulate_chunk: DELLA's, which threads a large one): the
 * inputs' converted blocks stay in the core's cache until accumulate
 * reads them.  (Converting the next block on a second thread meanwhile
 * was slower here: ties on three 300 MB BF16 models, 1.43 s against
 * 1.30 s.) */
#define STAT_BLOCK 32768u

int mk__workers_stats(struct run *r, uint64_t b, uint64_t n, struct mk_err *err)
{
	size_t es = mk_dtype_bits(r->job.compute) / 8, nin = r->d.ninputs;
	const void **ptrs = calloc(nin + 1, sizeof(*ptrs));
	uint64_t blk = r->job.accumulate_chunk ? r->job.accumulate_chunk : STAT_BLOCK;
	bool raw = r->job.accumulate_bf16 && inputs_bf16(r);
	int rc = 0;

	if (!ptrs)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	for (size_t i = 0; i < nin && !rc && !raw; i++)
		if (r->job.used[i] && grow(&r->ib[i].conv, &r->ib[i].conv_cap, (size_t)(blk < n ? blk : n) * es + 1))
			rc = mk_err_set(err, MK_ENOMEM, "out of memory");
	for (uint64_t t = 0; t < n && !rc; t += blk) {
		uint64_t k = n - t < blk ? n - t : blk;
		struct mk_job_chunk c = { .elem_begin = b + t, .count = k, .in = ptrs, .bf16 = raw };
		if (mk_job_wants(&r->job) && raw) {
			for (size_t i = 0; i < nin; i++)
				ptrs[i] = r->job.used[i] ? (const uint16_t *)r->ib[i].data + t : NULL;
		} else if (mk_job_wants(&r->job)) {
			for (size_t i = 0; i < nin && !rc; i++) {
				ptrs[i] = r->job.used[i] ? r->ib[i].conv : NULL;
				if (r->job.used[i])
					rc = convert_input(r, i, t, k, r->ib[i].conv, NULL, err);
			}
		} else {
			c.in = NULL;   /* counted, not read */
		}
		if (!rc)
			rc = mk_job_accumulate(&r->job, r->send, &c, err);
	}
	free(ptrs);
	return rc;
}

/* Run work() over the range's elements [b, b + n) on up to r->threads
 * threads. */
int mk__workers_run(struct run *r, uint64_t b, uint64_t n, bool apply, void *out, uint64_t *nonfinite_out,
		    struct mk_err *err)
{
	unsigned t = r->threads ? r->threads : 1;
	uint64_t ntasks = (n + WORK_PIECE - 1) / WORK_PIECE;
	struct step st = { .r = r, .b = b, .n = n, .apply = apply, .out = out, .failed = UINT_MAX };
	int rc = 0;

	if (t > 64)
		t = 64;
	if (ntasks > UINT_MAX)
		return mk_err_set(err, MK_EINVAL, "job %u (%s): a range of %llu elements is too long", r->pj->id, r->name,
				  (unsigned long long)n);
	st.raw = apply && r->job.apply_bf16 && inputs_bf16(r);
	st.tile = calloc(t, sizeof(*st.tile));
	st.ptrs = calloc(t, sizeof(*st.ptrs));
	st.count = mk__counts_on_convert(r) ? calloc(t, sizeof(*st.count)) : NULL;
	st.ocount = apply && nonfinite_out ? calloc(t, sizeof(*st.ocount)) : NULL;
	if (!st.tile || !st.ptrs || (mk__counts_on_convert(r) && !st.count) || (apply && nonfinite_out && !st.ocount)) {
		rc = mk_err_set(err, MK_ENOMEM, "out of memory");
		goto out;
	}
	pthread_mutex_init(&st.mu, NULL);
	mk__pool_run(t, (unsigned)ntasks, work, &st);
	pthread_mutex_destroy(&st.mu);
	if (st.failed != UINT_MAX) {
		rc = st.rc;
		*err = st.err;
	}
	for (unsigned k = 0; st.count && k < t; k++)
		r->gq->nonfinite_in[r->out_index] += st.count[k];
	for (unsigned k = 0; st.ocount && k < t; k++)
		*nonfinite_out += st.ocount[k];
out:
	for (unsigned k = 0; k < t; k++) {
		free(st.tile ? st.tile[k] : NULL);
		free(st.ptrs ? st.ptrs[k] : NULL);
	}
	free(st.tile);
	free(st.ptrs);
	free(st.count);
	free(st.ocount);
	return rc;
}
