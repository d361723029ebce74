/* plan_fetch_impl.h - internals of mk-fetch's plan mode shared by its files
 * (not installed): the state of the reads (struct pf) and the calls between
 *   plan_fetch.c    mk_fetch_plan: the plan read, the inputs placed, the
 *                   chunks sent as the reads arrive
 *   plan_extents.c  the reads asked of the reader: each job's chunk ranges
 *   plan_feeds.c    models read from the streams that feed them
 *   plan_held.c     the plan's frames held until the HEAD has gone out
 *   plan_lora.c     LoRA inputs
 *   plan_quant.c    quantized weights, dequantized
 */
#ifndef MK_PLAN_FETCH_IMPL_H
#define MK_PLAN_FETCH_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "mk/err.h"
#include "mk/stream.h"
#include "fetch/fetch.h"
#include "io/model.h"
#include "io/reader.h"
#include "stream/job.h"
#include "fetch_impl.h"

struct mk_chan_skip;

struct held {                    /* a frame kept to be passed on later */
	uint8_t *wire;           /* in memory: header + payload; or NULL ... */
	size_t len;
	uint64_t off;            /* ... in the spool file at off, len bytes */
	uint8_t hdr[MK_FRAME_HDR]; /* (spooled: its header, to pass it on) */
};

/* Where a plan's FILE frames wait for the HEAD to go out: in memory up
 * to a bound, then in an unlinked scratch file. */
struct spool {
	int fd;                  /* -1 until needed */
	uint64_t end;            /* bytes in the file */
	uint64_t in_memory;      /* bytes of frames held in memory */
	uint64_t bound;          /* what may be held in memory */
	uint8_t *buf;            /* a piece (SPOOL_PIECE) */
};
#define SPOOL_PIECE (256u << 10)

struct seg {                     /* a run of an input's elements on disk */
	int fd;
	struct mk_hub_blob *remote;  /* or NULL */
	uint64_t data_off;       /* file offset of the run's first element */
	uint64_t elem_begin;     /* the input's element index it starts at */
	const struct mk_st_tensor *strided; /* a view: read by gathering */
	uint64_t data_start;     /* (of its file) */
};

struct src {                     /* an input tensor's place on disk: one run,
				    or one per source tensor of an assembly */
	size_t nseg;
	struct seg *seg;
	enum mk_dtype rdt;       /* the dtype read: the input's, or that of the
				    adapter tensor that replaces it */
	struct mk__held held;    /* storage bytes of a strided source */
	long feed;               /* its bytes from feeds[feed], or -1 */
	size_t feed_tensor;      /* (that stream's tensor index) */
};

/* A model's tensors from a live tensors stream (mk_fetch_opts.feeds):
 * the DATA frame being taken apart, and which tensors the plan reads. */
struct feed {
	const char *ref;
	struct mk_stream_reader *r;
	struct mk_manifest *head;
	bool *wanted;            /* per stream tensor: a job reads it */
	bool *done;              /* per stream tensor: read (in wanted's block) */
	struct mk_chunk c;       /* the current DATA frame (have) */
	bool have;
	uint64_t used;           /* its elements already taken */
	uint64_t next_elem;      /* of the tensor being taken: the next element */
	long cur;                /* that tensor, or -1 */
};

struct tag {                     /* what an extent is */
	size_t job;
	size_t input;
	uint64_t at;             /* the input's stored element it begins at */
	struct mk_chunk c;
	struct mk__gread g;      /* a strided source's read; g.t NULL for others */
};

/* A LoRA input's A and B (mk/plan.h), in float32, read whole when its job's
 * first chunk comes: r·(in + out) elements, small beside W; DoRA's factor
 * per output channel, or a bias: one vector of W's rows or columns. */
struct lora_ab {
	size_t job, input;
	bool live;
	float *a, *b;
	uint64_t r, a1, b0;      /* A [r, a1], B [b0, r] */
	float *fac;              /* DoRA: magnitude / norm per output channel
				    (computed from the whole W first), or NULL */
	float *bias;             /* lora_B's bias (a bias input), or NULL */
};

/* W + s·B·A for a chunk, in float32, rounded to W's dtype (mk-stream(5)):
 * the scratch of the current chunk. */
struct lora_work {
	struct lora_ab *ab;      /* per input of the current job */
	size_t nab;
	float *w, *d;            /* the chunk as float32; the delta over its rows */
	size_t wcap, dcap;       /* in elements */
	uint8_t *out;            /* the chunk sent */
	size_t ocap;
};

/* A quantized input's scales (float32, read whole when its job's first
 * chunk comes) and the scratch of the current chunk. */
struct quant_work {
	size_t job, input, src;  /* src: the source of an assembly whose scales */
	bool live;
	float *scale;
	size_t scap;             /* in elements */
	float *w;                /* the chunk as float32 */
	size_t wcap;
	uint8_t *out;            /* the chunk sent */
	size_t ocap;
	struct mxfp4_expert *mx; /* mxfp4: per input index of the job */
	size_t nmx;
};

/* An MXFP4 input's current expert: its codes and scales (2^(s - 127)),
 * read as the chunks reach it (the inputs' chunks interleave: one each). */
struct mxfp4_expert {
	size_t job;
	uint64_t expert;
	bool live;
	uint8_t *codes;
	float *scale;
	size_t ccap, scap;
};

struct pf {
	struct mk_plan_job **jobs;
	size_t njobs;
	struct src **src;        /* [job][input] */
	size_t chunk_bytes;
	/* iteration state */
	size_t j;                /* job */
	unsigned send;
	struct mk_chunker ck;
	bool ck_live;
	struct mk_chunk cur;     /* current chunk range (in the job's elements) */
	size_t input;            /* next input of the current range */
	bool have_range;
	struct tag *ring;
	size_t ring_len;
	uint64_t seq;
	uint64_t *last_end;      /* per file descriptor: where its last read ended */
	size_t nlast;
	uint64_t backward;       /* reads that went back in their file */
	struct mk__gfill fill;   /* a strided chunk's reads being asked */
	struct tag fill_tag;
	const struct mk_chan_skip *skip;   /* mk_fetch_opts.skip */
	uint64_t unsent;         /* chunks of skipped passes not asked for */
};

/* buf grown to hold n elements of es bytes; -1 when out of memory. */
static inline int mk__pf_grow(void **buf, size_t *cap, size_t n, size_t es)
{
	if (n <= *cap)
		return 0;
	void *q = realloc(*buf, n * es);
	if (!q)
		return -1;
	*buf = q;
	*cap = n;
	return 0;
}

/* ----------------------------------------------------- plan_extents.c */

/* Whether job j's chunks of pass `pass` are left out (mk_fetch_opts.skip). */
bool mk__pf_pass_unsent(const struct pf *p, size_t j, unsigned pass);
/* The inputs of a job read: its own and a vocabulary's auxiliary ones. */
size_t mk__pf_njob_inputs(const struct mk_plan_job *jb);
/* The reader's next extent (ctx: struct pf): 1 with *req, 0 at the end. */
int mk__pf_next_extent(void *ctx, struct mk_read_req *req, struct mk_err *err);

/* ------------------------------------------------------- plan_feeds.c */

/* Elements [at, at + n) of stream tensor `ix` into dst, from the DATA
 * frames as they come. */
int mk__pf_feed_take(struct feed *fd, size_t ix, uint64_t at, uint64_t n, enum mk_dtype dt, uint8_t *dst,
		     struct mk_err *err);
/* Open the feeds of the plan's models (o->nfeeds of them into fv). */
int mk__pf_feeds_open(const struct mk_fetch_opts *o, struct feed *fv, struct mk_err *err);
/* The feed of the model `ref`, or -1. */
long mk__pf_feed_of(const struct mk_fetch_opts *o, const char *ref);
/* A fed model's input placed: which tensor of its stream it is. */
void mk__pf_feed_place(struct feed *fd, const struct mk_plan_input *in, struct src *sr);
/* After the last job: the rest of each stream read. */
int mk__pf_feeds_drain(struct feed *fv, size_t n, struct mk_err *err);
void mk__pf_feeds_free(struct feed *fv, size_t n);

/* -------------------------------------------------------- plan_held.c */

/* A frame kept whole in memory. */
int mk__pf_hold(struct held **v, size_t *n, const struct mk_frame *f, struct mk_err *err);
/* A piecewise FILE frame kept in memory (under the spool's bound) or in
 * the spool file. */
int mk__pf_hold_piecewise(struct held **v, size_t *n, struct spool *sp, struct mk_stream_reader *r,
			  const struct mk_frame *f, struct mk_err *err);
/* A held frame passed on to w as it came. */
int mk__pf_pass_held(struct mk_stream_writer *w, const struct spool *sp, const struct held *h,
		     struct mk_err *err);

/* -------------------------------------------------------- plan_lora.c */

/* A LoRA input's adapter tensors against the plan (*rep: a replacement
 * of W, or NULL). */
int mk__pf_lora_check(const struct mk_manifest *head, struct mk_model **models, const struct mk_plan_job *jb,
		      size_t i, const struct mk_plan_input *in, const struct mk_model_tensor **rep,
		      struct mk_err *err);
/* The dtype a LoRA input's chunks are sent in: the plan's "dtype", else W's. */
static inline enum mk_dtype mk__pf_lora_dtype(const struct mk_plan_input *in)
{
	return in->lora->has_dtype ? in->lora->dtype : in->desc.dtype;
}
/* The chunk of a LoRA input made into what mk-fetch sends (*sent). */
int mk__pf_lora_apply(struct lora_work *lw, const struct pf *p, struct mk_model **models, int **fds,
		      const struct tag *t, const void *data, const void **sent, struct mk_err *err);

/* ------------------------------------------------------- plan_quant.c */

/* A quantized input's scales against the plan: in its model's files, of
 * one float per block. */
int mk__pf_quant_check(const struct mk_manifest *head, struct mk_model **models, int **fds,
		       const struct mk_plan_job *jb, size_t i, const struct mk_plan_input *in, struct mk_err *err);
/* Whether stored tensor sd holds MXFP4 input in (F4 [E, C, R]): U8
 * [E, R, C/32, 16]. */
bool mk__pf_mxfp4_fits(const struct mk_tensor_desc *sd, const struct mk_tensor_desc *in);
/* What reading input `in` dequantized keeps in memory: an MXFP4 input's
 * expert (codes, scale bytes, scales as floats: R * C/32 * 21 bytes),
 * kept in its input slot of the job from job to job; 0 for the others. */
uint64_t mk__pf_quant_held(const struct mk_plan_input *in);
/* The chunk of a quantized input dequantized into what mk-fetch sends
 * (*sent), in the input's quant dtype. */
int mk__pf_quant_apply(struct quant_work *qw, const struct pf *p, struct mk_model **models, int **fds,
		       const struct tag *t, const void *data, const void **sent, struct mk_err *err);

#endif
