/* ctx.c - mk/cuda.h: jobs to kernel descriptors, pinned staging, launches
 * over round-robin streams.  Compiled in every build (cc), so every
 * function of mk/cuda.h is defined here; the CUDA calls go through dev.h
 * (device.cu, or cuda_stub.c's failing versions), and the emulated context
 * runs the kernels' element code (kern.h) on the host. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cuda/cuda.h"
#include "mk/device.h"
#include "mk/method.h"
#include "dev.h"
#include "kern.h"
#include "core/bug.h"

#define DEF_BYTES (64ull << 20)
#define MIN_BYTES (64ull << 10)
#define DEF_GROUPS 1024u
#define MAX_GROUPS 65535u
#define DEF_STREAMS 3u
#define MAX_STREAMS 8u
/* A chunk is cut at a launch's end only when at least this many of its
 * elements still fit there; else the launch goes and the chunk starts the
 * next one. */
#define MIN_PIECE 65536u

struct pend {                   /* an output to copy out of staging */
	unsigned char *out;
	size_t off, bytes;
};

struct slot {
	unsigned char *h;           /* staging (pinned; emulated: malloc) */
	unsigned char *d;           /* device buffer (emulated: h) */
	void *stream;
	size_t lo, hi;              /* arrays in [0, lo); outputs in [hi, cap) */
	size_t desc;                /* bytes kept for the descriptors */
	struct mkcu_piece *P;
	size_t np, pcap;
	struct mkcu_in *I;
	size_t ni, icap;
	struct pend *pd;            /* [np] */
	size_t dcap;
	uint64_t maxcount;
	bool busy;                  /* launched, outputs not yet copied out */
};

struct mk_cuda_ctx {
	bool emulate, broken;
	int device;
	struct mkcu_dev_info info;
	size_t cap;                 /* bytes per slot */
	size_t max_groups;
	unsigned nslots, cur;
	struct slot *s;
	struct mk_cuda_stats st;
	char desc[256];
	/* a group being prepared */
	struct mkcu_in *tin;
	const float **tx;
	const uint8_t **tmask;
	size_t tcap;
};

/* A group ready to pack: the piece template (kind, parameters, nin) and,
 * in cx->tin/tx/tmask, its inputs (parameters, host pointers at chunk
 * element 0, DELLA masks of the whole job). */
struct prep {
	struct mkcu_piece p;
	const float *base, *other;
	uint64_t elem_begin, count;
	unsigned char *out;
};

static size_t al(size_t n)
{
	return (n + MKCU_ALIGN - 1) & ~(size_t)(MKCU_ALIGN - 1);
}

static int grow(void **p, size_t *cap, size_t need, size_t esz)
{
	size_t c = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*p, c * esz);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

static int cuda_err(struct mk_cuda_ctx *cx, struct mk_err *err, int rc, const char *what)
{
	cx->broken = true;
	return mk_err_set(err, MK_EIO, "CUDA: %s: %s", what, mkcu_dev_errstr(rc));
}

static void slot_reset(struct slot *s, size_t cap)
{
	s->lo = 0;
	s->hi = cap;
	s->desc = 2 * MKCU_ALIGN;
	s->np = s->ni = 0;
	s->maxcount = 0;
	s->busy = false;
}

/* ---------------------------------------------------------------- device */

bool mk_cuda_built(void)
{
	return mkcu_dev_built() != 0;
}

bool mk_cuda_available(const char **why)
{
	const char *w = NULL;

	if (mkcu_dev_count(&w) > 0)
		return true;
	if (why)
		*why = w ? w : "no CUDA device";
	return false;
}

int mk_cuda_bench_run(struct mk_cuda_bench *r, uint64_t bytes, unsigned ninputs, int device, struct mk_err *err)
{
	return mkcu_dev_bench(r, bytes, ninputs, device, err);
}

/* ------------------------------------------------------------ open/close */

int mk_cuda_open(struct mk_cuda_ctx **out, const struct mk_cuda_opts *opts, struct mk_err *err)
{
	struct mk_cuda_opts o = { 0 };
	struct mk_cuda_ctx *cx;
	const char *why = NULL;
	int rc;

	*out = NULL;
	if (opts)
		o = *opts;
	if (!o.max_bytes)
		o.max_bytes = DEF_BYTES;
	if (o.max_bytes < MIN_BYTES)
		o.max_bytes = MIN_BYTES;
	if (o.max_bytes > ((uint64_t)1 << 40))
		return mk_err_set(err, MK_EINVAL, "CUDA: max_bytes %llu is too large",
				  (unsigned long long)o.max_bytes);
	if (!o.max_groups)
		o.max_groups = DEF_GROUPS;
	if (o.max_groups > MAX_GROUPS)
		o.max_groups = MAX_GROUPS;
	if (!o.streams)
		o.streams = DEF_STREAMS;
	if (o.streams < 2)
		o.streams = 2;
	if (o.streams > MAX_STREAMS)
		o.streams = MAX_STREAMS;
	cx = calloc(1, sizeof(*cx));
	if (!cx || !(cx->s = calloc(o.streams, sizeof(*cx->s)))) {
		free(cx);
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	}
	cx->emulate = o.emulate;
	cx->device = o.device;
	cx->cap = (size_t)o.max_bytes & ~(size_t)(MKCU_ALIGN - 1);
	cx->max_groups = o.max_groups;
	cx->nslots = o.streams;
	if (!cx->emulate && (rc = mkcu_dev_open(o.device, &cx->info, &why))) {
		rc = mk_err_set(err, MK_EUNSUPPORTED, "CUDA: %s", why ? why : "no usable device");
		goto fail;
	}
	for (unsigned i = 0; i < cx->nslots; i++) {
		struct slot *s = &cx->s[i];
		if (cx->emulate) {
			s->h = s->d = malloc(cx->cap);
		} else {
			s->h = mkcu_dev_host_alloc(cx->cap);
			s->d = s->h ? mkcu_dev_alloc(cx->cap) : NULL;
		}
		if (!s->h || !s->d) {
			rc = mk_err_set(err, MK_ENOMEM, "CUDA: cannot allocate %u x %zu bytes of %s", cx->nslots,
					cx->cap, !s->h ? "pinned host memory" : "device memory");
			goto fail;
		}
		if (!cx->emulate && (rc = mkcu_dev_stream_new(&s->stream))) {
			rc = mk_err_set(err, MK_EIO, "CUDA: cudaStreamCreate: %s", mkcu_dev_errstr(rc));
			goto fail;
		}
		slot_reset(s, cx->cap);
	}
	if (cx->emulate)
		snprintf(cx->desc, sizeof(cx->desc),
			 "host emulation of the GPU kernels (%s), %u x %zu KiB staging",
#ifdef MK_HAVE_CUDA
			 "nvcc's host build",
#else
			 "cc build",
#endif
			 cx->nslots, cx->cap >> 10);
	else
		snprintf(cx->desc, sizeof(cx->desc), "%s (sm_%d%d, %d SMs, %zu MiB), %u x %zu MiB pinned staging",
			 cx->info.name, cx->info.cc_major, cx->info.cc_minor, cx->info.sm_count,
			 cx->info.mem_total >> 20, cx->nslots, cx->cap >> 20);
	*out = cx;
	return 0;
fail:
	mk_cuda_close(cx);
	return rc;
}

void mk_cuda_close(struct mk_cuda_ctx *cx)
{
	if (!cx)
		return;
	if (!cx->broken)
		(void)mk_cuda_flush(cx, NULL);
	for (unsigned i = 0; cx->s && i < cx->nslots; i++) {
		struct slot *s = &cx->s[i];
		if (cx->emulate) {
			free(s->h);
		} else {
			if (s->stream) {
				(void)mkcu_dev_sync(s->stream);
				mkcu_dev_stream_free(s->stream);
			}
			if (s->h)
				mkcu_dev_host_free(s->h);
			if (s->d)
				mkcu_dev_free(s->d);
		}
		free(s->P);
		free(s->I);
		free(s->pd);
	}
	free(cx->s);
	free(cx->tin);
	free(cx->tx);
	free(cx->tmask);
	free(cx);
}

const char *mk_cuda_describe(const struct mk_cuda_ctx *cx)
{
	return cx ? cx->desc : "no CUDA context";
}

void mk_cuda_get_stats(const struct mk_cuda_ctx *cx, struct mk_cuda_stats *st)
{
	if (cx)
		*st = cx->st;
	else
		memset(st, 0, sizeof(*st));
}

/* --------------------------------------------------------------- methods */

/* What the device knows of a method: its device hook (mk/device.h), when
 * it has a complete one. */
static const struct mk_device_hook *hook_of(const struct mk_job *job)
{
	const struct mk_device_hook *h = job && job->method ? job->method->device : NULL;

	return h && h->kernel && h->state ? h : NULL;
}

/* The kernels kern.h implements. */
static bool kernel_implemented(enum mk_device_kernel k)
{
	return k == MK_DEVICE_COPY || k == MK_DEVICE_LINEAR || k == MK_DEVICE_SLERP || k == MK_DEVICE_TASK_ARITHMETIC;
}

bool mk_cuda_job_supported(const struct mk_job *job)
{
	const struct mk_device_hook *h = hook_of(job);

	return h && job->compute == MK_DT_F32 && kernel_implemented(h->kernel(job));
}

static int tgrow(struct mk_cuda_ctx *cx, size_t n, struct mk_err *err)
{
	size_t c1 = cx->tcap, c2 = cx->tcap, c3 = cx->tcap;

	if (n <= cx->tcap)
		return 0;
	if (grow((void **)&cx->tin, &c1, n, sizeof(*cx->tin)) ||
	    grow((void **)&cx->tx, &c2, n, sizeof(*cx->tx)) ||
	    grow((void **)&cx->tmask, &c3, n, sizeof(*cx->tmask)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	cx->tcap = c1 < c2 ? (c1 < c3 ? c1 : c3) : (c2 < c3 ? c2 : c3);
	return 0;
}

static int chunk_input(const struct mk_job *job, const struct mk_job_chunk *c, int i, const float **x,
		       struct mk_err *err)
{
	if (i < 0 || (size_t)i >= job->d.ninputs || !c->in[i])
		return mk_err_set(err, MK_EINVAL, "CUDA: method '%s', tensor '%s': the chunk lacks input %d",
				  job->method->name, job->d.tensor ? job->d.tensor : "?", i);
	*x = c->in[i];
	return 0;
}

/* The job's chunk as a piece template (struct prep + cx->tin/tx/tmask). */
static int prepare(struct mk_cuda_ctx *cx, const struct mk_job *job, const struct mk_job_chunk *c, void *out,
		   struct prep *pr, struct mk_err *err)
{
	const struct mk_method *m = job ? job->method : NULL;
	struct mk_device_job dj;
	const char *tn;
	int rc;

	if (!m || !c || (c->count && !out))
		return mk_err_set(err, MK_EINVAL, "CUDA: no job, chunk or output");
	tn = job->d.tensor ? job->d.tensor : "?";
	if (!mk_cuda_job_supported(job))
		return mk_err_set(err, MK_EUNSUPPORTED, "CUDA: method '%s' has no GPU kernel%s", m->name,
				  job->compute != MK_DT_F32 ? " for float64" : "");
	if (job->pass_done != job->npasses)
		return mk_err_set(err, MK_EINVAL, "CUDA: method '%s', tensor '%s': %u of %u passes finished",
				  m->name, tn, job->pass_done, job->npasses);
	if (c->elem_begin > job->nelem || c->count > job->nelem - c->elem_begin)
		return mk_err_set(err, MK_EINVAL, "CUDA: tensor '%s': chunk [%llu, +%llu) outside its %llu elements",
				  tn, (unsigned long long)c->elem_begin, (unsigned long long)c->count,
				  (unsigned long long)job->nelem);
	memset(pr, 0, sizeof(*pr));
	pr->elem_begin = c->elem_begin;
	pr->count = c->count;
	pr->out = out;
	memset(&dj, 0, sizeof(dj));
	if ((rc = hook_of(job)->state(job, &dj, err)))
		return rc;
	if (!kernel_implemented(dj.kernel))
		return mk_err_set(err, MK_EUNSUPPORTED, "CUDA: method '%s', tensor '%s': its device hook gave kernel %d, "
				  "which the GPU does not implement", m->name, tn, (int)dj.kernel);
	pr->p.kind = (uint32_t)dj.kernel;
	if (dj.kernel != MK_DEVICE_LINEAR && (rc = chunk_input(job, c, dj.base, &pr->base, err)))
		return rc;
	if (dj.kernel == MK_DEVICE_COPY)
		return 0;
	if (dj.kernel == MK_DEVICE_SLERP) {
		pr->p.c0 = dj.c0;
		pr->p.c1 = dj.c1;
		return chunk_input(job, c, dj.other, &pr->other, err);
	}
	/* LINEAR, TASK_ARITHMETIC: the inputs in the kernel's order */
	if (dj.n && !dj.in)
		return mk_err_set(err, MK_EINVAL, "CUDA: method '%s', tensor '%s': its device hook gave %zu inputs "
				  "without their parameters", m->name, tn, dj.n);
	if ((rc = tgrow(cx, dj.n, err)))
		return rc;
	for (size_t j = 0; j < dj.n; j++) {
		const struct mk_device_input *g = &dj.in[j];
		struct mkcu_in *t = &cx->tin[j];
		if ((rc = chunk_input(job, c, g->idx, &cx->tx[j], err)))
			return rc;
		memset(t, 0, sizeof(*t));
		t->w = g->w;
		cx->tmask[j] = NULL;
		if (dj.kernel != MK_DEVICE_TASK_ARITHMETIC)
			continue;
		if ((unsigned)g->kind >= MK_DEVICE_SPARSIFY_COUNT || (g->kind == MK_DEVICE_DELLA && !g->mask))
			return mk_err_set(err, MK_EUNSUPPORTED, "CUDA: tensor '%s': unknown sparsification %d%s", tn,
					  (int)g->kind, g->kind == MK_DEVICE_DELLA ? " (a DELLA input without its mask)" : "");
		t->kind = (uint32_t)g->kind;
		t->scale = g->scale;
		t->factor = g->factor;
		t->lo_key = g->lo_key;
		t->hi_key = g->hi_key;
		t->lo_cut1 = g->lo_cut1;
		t->hi_cut1 = g->hi_cut1;
		t->stream = g->stream;
		t->thr = g->thr;
		cx->tmask[j] = g->kind == MK_DEVICE_DELLA ? g->mask : NULL;
	}
	pr->p.nin = (uint32_t)dj.n;
	pr->p.normalize = dj.normalize;
	if (dj.kernel == MK_DEVICE_LINEAR) {
		pr->p.sum = dj.sum;
		return 0;
	}
	if ((unsigned)dj.cons > MK_DEVICE_CONS_COUNT)
		return mk_err_set(err, MK_EUNSUPPORTED, "CUDA: tensor '%s': unknown consensus %d", tn, (int)dj.cons);
	pr->p.cons = (uint32_t)dj.cons;
	pr->p.scale_lam = dj.scale_lam;
	pr->p.lam = dj.lam;
	pr->p.div = dj.div;
	return 0;
}

/* ---------------------------------------------------------------- launches */

/* Bytes of staging a piece of cnt elements from element e0 takes. */
static size_t piece_bytes(const struct prep *pr, size_t nmask, uint64_t e0, uint64_t cnt)
{
	size_t narr = pr->p.nin + (pr->base ? 1 : 0) + (pr->other ? 1 : 0);
	size_t mb = cnt ? (size_t)(((e0 + cnt - 1) >> 3) - (e0 >> 3) + 1) : 0;

	if (pr->p.kind == MK_DEVICE_SLERP || pr->p.kind == MK_DEVICE_COPY)
		narr = (pr->base ? 1 : 0) + (pr->other ? 1 : 0);
	return narr * al(cnt * 4) + nmask * al(mb) + al(cnt * 4) + sizeof(struct mkcu_piece) +
	       pr->p.nin * sizeof(struct mkcu_in);
}

/* The most elements from e0 (at most left) that fit the slot's free bytes. */
static uint64_t fit(const struct prep *pr, size_t nmask, uint64_t e0, uint64_t left, size_t free)
{
	size_t narr = (pr->p.kind == MK_DEVICE_LINEAR || pr->p.kind == MK_DEVICE_TASK_ARITHMETIC ? pr->p.nin : 0) +
		      (pr->base ? 1 : 0) + (pr->other ? 1 : 0);
	size_t fixed = piece_bytes(pr, nmask, e0, 0) + (narr + 1 + nmask) * MKCU_ALIGN + nmask * 2;
	uint64_t k;

	if (piece_bytes(pr, nmask, e0, left) <= free)
		return left;
	if (free <= fixed)
		return 0;
	/* 4 bytes per array and output, 1/8 per mask */
	k = (uint64_t)(free - fixed) * 8 / (32 * (narr + 1) + nmask);
	if (k > left)
		k = left;
	while (k && piece_bytes(pr, nmask, e0, k) > free)
		k--;
	return k;
}

static size_t put(struct slot *s, const void *src, size_t n)
{
	size_t off = s->lo;

	memcpy(s->h + off, src, n);
	s->lo += al(n);
	return off;
}

static int launch(struct mk_cuda_ctx *cx, struct slot *s, struct mk_err *err)
{
	size_t op, oi, end;
	int rc;

	if (!s->np)
		return 0;
	op = al(s->lo);
	oi = al(op + s->np * sizeof(struct mkcu_piece));
	end = oi + s->ni * sizeof(struct mkcu_in);
	if (end > s->hi)
		MK_BUG("cuda: descriptors overflow the staging buffer (%zu > %zu)", end, s->hi);
	memcpy(s->h + op, s->P, s->np * sizeof(struct mkcu_piece));
	if (s->ni)
		memcpy(s->h + oi, s->I, s->ni * sizeof(struct mkcu_in));
	if (cx->emulate) {
#ifdef MK_HAVE_CUDA
		mkcu_dev_host_run((const struct mkcu_piece *)(s->h + op), (const struct mkcu_in *)(s->h + oi), s->np);
#else
		mkcu_host_run((const struct mkcu_piece *)(s->h + op), (const struct mkcu_in *)(s->h + oi), s->np);
#endif
	} else {
		if ((rc = mkcu_dev_h2d(s->d, s->h, end, s->stream)))
			return cuda_err(cx, err, rc, "copy to the device");
		if ((rc = mkcu_dev_launch((const struct mkcu_piece *)(s->d + op), (const struct mkcu_in *)(s->d + oi),
					  s->np, s->maxcount, cx->info.resident_blocks, s->stream)))
			return cuda_err(cx, err, rc, "kernel launch");
		if ((rc = mkcu_dev_d2h(s->h + s->hi, s->d + s->hi, cx->cap - s->hi, s->stream)))
			return cuda_err(cx, err, rc, "copy from the device");
	}
	cx->st.launches++;
	cx->st.pieces += s->np;
	cx->st.bytes_in += end;
	cx->st.bytes_out += cx->cap - s->hi;
	s->busy = true;
	return 0;
}

/* Wait for a launched slot, copy its outputs out, make it empty. */
static int collect(struct mk_cuda_ctx *cx, struct slot *s, struct mk_err *err)
{
	int rc;

	if (!s->busy)
		return 0;
	if (!cx->emulate && (rc = mkcu_dev_sync(s->stream)))
		return cuda_err(cx, err, rc, "kernel or copy");
	for (size_t i = 0; i < s->np; i++)
		memcpy(s->pd[i].out, s->h + s->pd[i].off, s->pd[i].bytes);
	slot_reset(s, cx->cap);
	return 0;
}

/* Launch the current slot and move to the next, emptied. */
static int next_slot(struct mk_cuda_ctx *cx, struct mk_err *err)
{
	int rc = launch(cx, &cx->s[cx->cur], err);

	if (rc)
		return rc;
	cx->cur = (cx->cur + 1) % cx->nslots;
	return collect(cx, &cx->s[cx->cur], err);
}

/* Pack elements [k0, k0 + cnt) of the prepared chunk into the slot
 * (which has room: fit()). */
static int pack(struct mk_cuda_ctx *cx, struct slot *s, const struct prep *pr, uint64_t k0, uint64_t cnt,
		struct mk_err *err)
{
	struct mkcu_piece p = pr->p;
	uint64_t e0 = pr->elem_begin + k0;
	size_t bytes = (size_t)cnt * 4, nin = p.kind == MK_DEVICE_LINEAR || p.kind == MK_DEVICE_TASK_ARITHMETIC ? p.nin : 0;

	if (grow((void **)&s->P, &s->pcap, s->np + 1, sizeof(*s->P)) ||
	    grow((void **)&s->pd, &s->dcap, s->np + 1, sizeof(*s->pd)) ||
	    grow((void **)&s->I, &s->icap, s->ni + nin, sizeof(*s->I)))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	s->desc += sizeof(struct mkcu_piece) + nin * sizeof(struct mkcu_in);
	p.e0 = e0;
	p.count = cnt;
	p.in0 = (uint32_t)s->ni;
	p.nin = (uint32_t)nin;
	for (size_t j = 0; j < nin; j++) {
		struct mkcu_in *t = &s->I[s->ni + j];
		*t = cx->tin[j];
		t->x = (const float *)(s->d + put(s, cx->tx[j] + k0, bytes));
		if (cx->tmask[j]) {
			size_t b0 = (size_t)(e0 >> 3), nb = (size_t)(((e0 + cnt - 1) >> 3) - (e0 >> 3) + 1);
			t->mask = s->d + put(s, cx->tmask[j] + b0, nb);
		}
	}
	s->ni += nin;
	if (pr->base)
		p.base = (const float *)(s->d + put(s, pr->base + k0, bytes));
	if (pr->other)
		p.other = (const float *)(s->d + put(s, pr->other + k0, bytes));
	s->hi -= al(bytes);
	p.out = (float *)(s->d + s->hi);
	s->pd[s->np] = (struct pend){ .out = pr->out + k0 * 4, .off = s->hi, .bytes = bytes };
	s->P[s->np++] = p;
	if (cnt > s->maxcount)
		s->maxcount = cnt;
	if (s->lo + s->desc > s->hi)
		MK_BUG("cuda: staging overflow (%zu + %zu > %zu)", s->lo, s->desc, s->hi);
	return 0;
}

static int submit_prep(struct mk_cuda_ctx *cx, const struct prep *pr, struct mk_err *err)
{
	size_t nmask = 0;
	uint64_t done = 0;
	int rc;

	if (cx->broken)
		return mk_err_set(err, MK_EIO, "CUDA: the context failed earlier");
	if (!cx->emulate && (rc = mkcu_dev_use(cx->device)))
		return cuda_err(cx, err, rc, "cudaSetDevice");
	if (pr->p.kind == MK_DEVICE_TASK_ARITHMETIC)
		for (size_t j = 0; j < pr->p.nin; j++)
			nmask += cx->tmask[j] != NULL;
	cx->st.submits++;
	cx->st.elements += pr->count;
	while (done < pr->count) {
		struct slot *s = &cx->s[cx->cur];
		uint64_t left = pr->count - done, k, e0 = pr->elem_begin + done;
		size_t free = s->hi - s->lo - s->desc;
		if (s->np >= cx->max_groups) {
			if ((rc = next_slot(cx, err)))
				return rc;
			continue;
		}
		k = fit(pr, nmask, e0, left, free);
		if (k < left && k < MIN_PIECE && s->np) {
			if ((rc = next_slot(cx, err)))
				return rc;
			continue;
		}
		if (!k)
			return mk_err_set(err, MK_EINVAL,
					  "CUDA: max_bytes %zu is too small for a job with %u inputs", cx->cap,
					  pr->p.nin + (pr->base ? 1 : 0) + (pr->other ? 1 : 0));
		if ((rc = pack(cx, s, pr, done, k, err)))
			return rc;
		done += k;
	}
	return 0;
}

int mk_cuda_submit(struct mk_cuda_ctx *cx, const struct mk_job *job, const struct mk_job_chunk *c, void *out,
		   struct mk_err *err)
{
	struct prep pr;
	int rc;

	if (!cx)
		return mk_err_set(err, MK_EINVAL, "CUDA: no context");
	if ((rc = prepare(cx, job, c, out, &pr, err)))
		return rc;
	return submit_prep(cx, &pr, err);
}

/* A context that can be used: its device made current for this thread. */
static int ctx_ready(struct mk_cuda_ctx *cx, struct mk_err *err)
{
	int rc;

	if (!cx)
		return mk_err_set(err, MK_EINVAL, "CUDA: no context");
	if (cx->broken)
		return mk_err_set(err, MK_EIO, "CUDA: the context failed earlier");
	if (!cx->emulate && (rc = mkcu_dev_use(cx->device)))
		return cuda_err(cx, err, rc, "cudaSetDevice");
	return 0;
}

int mk_cuda_flush(struct mk_cuda_ctx *cx, struct mk_err *err)
{
	int rc;

	if ((rc = ctx_ready(cx, err)))
		return rc;
	if ((rc = launch(cx, &cx->s[cx->cur], err)))
		return rc;
	for (unsigned i = 1; i <= cx->nslots; i++)
		if ((rc = collect(cx, &cx->s[(cx->cur + i) % cx->nslots], err)))
			return rc;
	return 0;
}

int mk_cuda_job_apply(struct mk_cuda_ctx *cx, const struct mk_job *job, const struct mk_job_chunk *c, void *out,
		      struct mk_err *err)
{
	int rc = mk_cuda_submit(cx, job, c, out, err);

	return rc ? rc : mk_cuda_flush(cx, err);
}

int mk_cuda_apply(struct mk_cuda_ctx *cx, const struct mk_cuda_group *g, size_t ng, struct mk_err *err)
{
	int rc;

	for (size_t i = 0; i < ng; i++)
		if (!mk_cuda_job_supported(g[i].job))
			return mk_err_set(err, MK_EUNSUPPORTED, "CUDA: group %zu: method '%s' has no GPU kernel%s", i,
					  g[i].job && g[i].job->method ? g[i].job->method->name : "?",
					  g[i].job && g[i].job->compute != MK_DT_F32 ? " for float64" : "");
	for (size_t i = 0; i < ng; i++)
		if ((rc = mk_cuda_submit(cx, g[i].job, g[i].c, g[i].out, err)))
			return rc;
	return mk_cuda_flush(cx, err);
}

/* ------------------------------------------------------- older entry point */

int mk_cuda_linear(const float *const *in, size_t n, const float *w, size_t B, uint64_t nelem, bool normalize,
		   float *out, struct mk_err *err)
{
	struct mk_cuda_ctx *cx;
	int rc;

	if (!n)
		return mk_err_set(err, MK_EINVAL, "CUDA: linear needs an input");
	if ((rc = mk_cuda_open(&cx, NULL, err)))
		return rc;
	if ((rc = tgrow(cx, n, err)))
		goto out;
	for (size_t b = 0; b < B && !rc; b++) {
		struct prep pr = { .p = { .kind = MK_DEVICE_LINEAR, .nin = (uint32_t)n, .normalize = normalize },
				   .count = nelem, .out = (unsigned char *)(out + b * nelem) };
		float sum = 0.0f;
		for (size_t i = 0; i < n; i++) {
			memset(&cx->tin[i], 0, sizeof(cx->tin[i]));
			cx->tin[i].w = w[b * n + i];
			cx->tx[i] = in[i] + b * nelem;
			cx->tmask[i] = NULL;
			sum += w[b * n + i];
		}
		pr.p.sum = sum;
		rc = submit_prep(cx, &pr, err);
	}
	if (!rc)
		rc = mk_cuda_flush(cx, err);
out:
	mk_cuda_close(cx);
	return rc;
}

/* -------------------------------------------------------- matrix products */

struct mk_cuda_mat {
	float *p;                   /* device memory (emulated: host) */
	size_t n;                   /* floats */
};

bool mk_cuda_emulate_requested(void)
{
	const char *em = getenv("MK_CUDA_EMULATE");

	return em && !strcmp(em, "1");
}

int mk_cuda_mat_new(struct mk_cuda_ctx *cx, size_t nfloat, struct mk_cuda_mat **out, struct mk_err *err)
{
	struct mk_cuda_mat *m;
	int rc;

	*out = NULL;
	if ((rc = ctx_ready(cx, err)))
		return rc;
	if (nfloat > SIZE_MAX / sizeof(float))
		return mk_err_set(err, MK_EINVAL, "CUDA: an array of %zu floats is too large", nfloat);
	if (!(m = calloc(1, sizeof(*m))))
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	m->n = nfloat;
	m->p = cx->emulate ? malloc(nfloat ? nfloat * sizeof(float) : 1) : mkcu_dev_alloc(nfloat * sizeof(float));
	if (!m->p) {
		free(m);
		return mk_err_set(err, MK_ENOMEM, "CUDA: cannot allocate %zu bytes of %s memory", nfloat * sizeof(float),
				  cx->emulate ? "host" : "device");
	}
	*out = m;
	return 0;
}

void mk_cuda_mat_free(struct mk_cuda_ctx *cx, struct mk_cuda_mat *m)
{
	if (!m)
		return;
	if (cx && cx->emulate)
		free(m->p);
	else
		mkcu_dev_free(m->p);
	free(m);
}

static int mat_span(const struct mk_cuda_mat *m, size_t n, const char *what, struct mk_err *err)
{
	if (!m || n > m->n)
		return mk_err_set(err, MK_EINVAL, "CUDA: %s of %zu floats into an array of %zu", what, n, m ? m->n : 0);
	return 0;
}

int mk_cuda_mat_put(struct mk_cuda_ctx *cx, struct mk_cuda_mat *m, const float *src, size_t n, struct mk_err *err)
{
	int rc;

	if ((rc = ctx_ready(cx, err)) || (rc = mat_span(m, n, "a copy", err)) || !n)
		return rc;
	if (cx->emulate) {
		memcpy(m->p, src, n * sizeof(float));
		return 0;
	}
	if ((rc = mkcu_dev_put(m->p, src, n * sizeof(float))))
		return cuda_err(cx, err, rc, "copy to the device");
	cx->st.bytes_in += n * sizeof(float);
	return 0;
}

int mk_cuda_mat_get(struct mk_cuda_ctx *cx, const struct mk_cuda_mat *m, float *dst, size_t n, struct mk_err *err)
{
	int rc;

	if ((rc = ctx_ready(cx, err)) || (rc = mat_span(m, n, "a copy", err)) || !n)
		return rc;
	if (cx->emulate) {
		memcpy(dst, m->p, n * sizeof(float));
		return 0;
	}
	if ((rc = mkcu_dev_get(dst, m->p, n * sizeof(float))))
		return cuda_err(cx, err, rc, "matrix product or copy from the device");
	cx->st.bytes_out += n * sizeof(float);
	return 0;
}

int mk_cuda_gemm_nt(struct mk_cuda_ctx *cx, const struct mk_cuda_mat *x, size_t n, size_t in,
		    const struct mk_cuda_mat *w, size_t outd, struct mk_cuda_mat *y, struct mk_err *err)
{
	int rc;

	if ((rc = ctx_ready(cx, err)))
		return rc;
	if ((in && n > SIZE_MAX / in) || (in && outd > SIZE_MAX / in) || (outd && n > SIZE_MAX / outd))
		return mk_err_set(err, MK_EINVAL, "CUDA: a %zu x %zu by %zu x %zu product is too large", n, in, outd, in);
	if ((rc = mat_span(x, n * in, "a matrix product's input", err)) ||
	    (rc = mat_span(w, outd * in, "a matrix product's weights", err)) ||
	    (rc = mat_span(y, n * outd, "a matrix product's output", err)))
		return rc;
	if (x == y || w == y)
		return mk_err_set(err, MK_EINVAL, "CUDA: a matrix product's output is one of its inputs");
	cx->st.launches++;
	if (cx->emulate) {
		mkcu_host_gemm_nt(x->p, w->p, y->p, n, in, outd);
		return 0;
	}
	if ((rc = mkcu_dev_gemm_nt(x->p, w->p, y->p, n, in, outd)))
		return cuda_err(cx, err, rc, "matrix product launch");
	return 0;
}
