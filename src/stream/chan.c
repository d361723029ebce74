/* chan.c - an in-memory stream between two threads (mk/chan.h). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/mapguard.h"
#include "chan_impl.h"
#include "mk/stream.h"

struct blk {
	struct blk *next;
	uint8_t *buf;
	size_t len, cap, off;   /* bytes, allocated, read so far */
	void *map;              /* buf lies in this mapping (cap bytes), or NULL */
};

void mk_frame_keep_release(struct mk_frame_keep *k)
{
	if (k->map)
		mk_mapguard_unmap(k->map, k->len);
	*k = (struct mk_frame_keep){ 0 };
}

static void blk_free(struct blk *b)
{
	if (b->map)
		mk_mapguard_unmap(b->map, b->cap);
	else
		free(b->buf);
	free(b);
}

struct mk_chan {
	pthread_mutex_t mu;
	pthread_cond_t can_read, can_write;
	struct blk *head, *tail;
	size_t cap, held, peak; /* held: the queue's buffers, the spare and a
				   buffer reserved (mk__chan_reserve) */
	uint8_t *spare;         /* a buffer the reader gave back */
	size_t spare_cap;
	bool wclosed, rclosed;
};

int mk_chan_open(struct mk_chan **out, size_t cap, struct mk_err *err)
{
	struct mk_chan *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	c->cap = cap ? cap : MK_CHAN_DEFAULT_CAP;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->can_read, NULL);
	pthread_cond_init(&c->can_write, NULL);
	*out = c;
	return 0;
}

static void drop_queue(struct mk_chan *c)
{
	while (c->head) {
		struct blk *b = c->head;
		c->head = b->next;
		c->held -= b->cap;
		blk_free(b);
	}
	c->tail = NULL;
}

void mk_chan_close_write(struct mk_chan *c)
{
	pthread_mutex_lock(&c->mu);
	c->wclosed = true;
	pthread_cond_broadcast(&c->can_read);
	pthread_mutex_unlock(&c->mu);
}

void mk_chan_close_read(struct mk_chan *c)
{
	pthread_mutex_lock(&c->mu);
	c->rclosed = true;
	drop_queue(c);
	pthread_cond_broadcast(&c->can_read);
	pthread_cond_broadcast(&c->can_write);
	pthread_mutex_unlock(&c->mu);
}

size_t mk_chan_peak(const struct mk_chan *c)
{
	return c->peak;
}

void mk_chan_free(struct mk_chan *c)
{
	if (!c)
		return;
	drop_queue(c);
	free(c->spare);
	pthread_cond_destroy(&c->can_read);
	pthread_cond_destroy(&c->can_write);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

/* Append b (its bytes counted in held) for the reader, under the lock. */
static void enqueue(struct mk_chan *c, struct blk *b)
{
	if (c->held > c->peak)
		c->peak = c->held;
	if (c->tail)
		c->tail->next = b;
	else
		c->head = b;
	c->tail = b;
	pthread_cond_signal(&c->can_read);
}

int mk__chan_reserve(struct mk_chan *c, size_t total, uint8_t **buf, size_t *cap)
{
	uint8_t *b = NULL;
	size_t bcap = 0;

	*buf = NULL;
	*cap = 0;
	pthread_mutex_lock(&c->mu);
	/* room for this buffer (the spare, when it is large enough, is
	 * already counted), or an empty queue: a frame over cap passes */
	for (;;) {
		size_t need = c->spare_cap >= total ? 0 : total;
		if (c->rclosed || !c->head || c->held + need <= c->cap)
			break;
		pthread_cond_wait(&c->can_write, &c->mu);
	}
	if (c->rclosed) {
		pthread_mutex_unlock(&c->mu);
		return -EPIPE;
	}
	if (c->spare && c->spare_cap >= total) {
		b = c->spare;
		bcap = c->spare_cap;
	} else if (c->spare) {
		free(c->spare);       /* too small: not kept beside a new one */
		c->held -= c->spare_cap;
	}
	c->spare = NULL;
	c->spare_cap = 0;
	if (!b)
		c->held += total;     /* counted before it is taken */
	pthread_mutex_unlock(&c->mu);
	if (!b) {
		if (!(b = malloc(total ? total : 1))) {
			pthread_mutex_lock(&c->mu);
			c->held -= total;
			pthread_cond_signal(&c->can_write);
			pthread_mutex_unlock(&c->mu);
			return -ENOMEM;
		}
		bcap = total;
	}
	*buf = b;
	*cap = bcap;
	return 0;
}

void mk__chan_unreserve(struct mk_chan *c, uint8_t *buf, size_t cap)
{
	pthread_mutex_lock(&c->mu);
	c->held -= cap;
	pthread_cond_signal(&c->can_write);
	pthread_mutex_unlock(&c->mu);
	free(buf);
}

int mk__chan_commit(struct mk_chan *c, uint8_t *buf, size_t len, size_t cap)
{
	struct blk *b = malloc(sizeof(*b));

	if (!b) {
		mk__chan_unreserve(c, buf, cap);
		return -ENOMEM;
	}
	*b = (struct blk){ .buf = buf, .len = len, .cap = cap };
	pthread_mutex_lock(&c->mu);
	if (c->rclosed) {
		/* the reader went while this was written */
		c->held -= cap;
		pthread_mutex_unlock(&c->mu);
		free(buf);
		free(b);
		return -EPIPE;
	}
	enqueue(c, b);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int mk__chan_write(struct mk_chan *c, const struct iovec *iov, int n)
{
	size_t total = 0, o = 0, cap;
	uint8_t *buf;
	int rc;

	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (!total)
		return 0;
	if ((rc = mk__chan_reserve(c, total, &buf, &cap)) < 0)
		return rc;
	for (int i = 0; i < n; i++) {
		memcpy(buf + o, iov[i].iov_base, iov[i].iov_len);
		o += iov[i].iov_len;
	}
	return mk__chan_commit(c, buf, total, cap);
}

int mk__chan_write_map(struct mk_chan *c, uint8_t *frame, size_t len, void *map, size_t map_len)
{
	struct blk *b = malloc(sizeof(*b));

	if (!b) {
		mk_mapguard_unmap(map, map_len);
		return -ENOMEM;
	}
	*b = (struct blk){ .buf = frame, .len = len, .cap = map_len, .map = map };
	pthread_mutex_lock(&c->mu);
	/* as mk__chan_write: room for it, or an empty queue */
	while (!c->rclosed && c->head && c->held + map_len > c->cap)
		pthread_cond_wait(&c->can_write, &c->mu);
	if (c->rclosed) {
		pthread_mutex_unlock(&c->mu);
		blk_free(b);
		return -EPIPE;
	}
	c->held += map_len;
	enqueue(c, b);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* Take the head off the queue, its bytes no longer counted, under the
 * lock; the caller frees or hands it on, then wakes the writer. */
static struct blk *unlink_head(struct mk_chan *c)
{
	struct blk *b = c->head;

	c->head = b->next;
	if (!c->head)
		c->tail = NULL;
	c->held -= b->cap;
	return b;
}

/* Pop the head (its bytes all read), under the lock. */
static void pop(struct mk_chan *c)
{
	blk_free(unlink_head(c));
	pthread_cond_signal(&c->can_write);
}

ssize_t mk__chan_read(struct mk_chan *c, void *buf, size_t len)
{
	size_t got = 0;

	pthread_mutex_lock(&c->mu);
	while (got < len) {
		while (!c->head && !c->wclosed && !c->rclosed)
			pthread_cond_wait(&c->can_read, &c->mu);
		if (!c->head)
			break;          /* the end */
		struct blk *b = c->head;
		size_t n = b->len - b->off < len - got ? b->len - b->off : len - got;
		memcpy((uint8_t *)buf + got, b->buf + b->off, n);
		b->off += n;
		got += n;
		if (b->off == b->len)
			pop(c);
	}
	pthread_mutex_unlock(&c->mu);
	return (ssize_t)got;
}

bool mk__chan_take(struct mk_chan *c, size_t len, uint8_t **buf, size_t *cap, struct mk__lent *lent)
{
	struct blk *b;
	uint8_t *old = *buf;
	size_t old_cap = *cap;

	*lent = (struct mk__lent){ 0 };
	pthread_mutex_lock(&c->mu);
	b = c->head;
	if (!b || b->off != MK_FRAME_HDR || b->len - b->off != len) {
		pthread_mutex_unlock(&c->mu);
		return false;
	}
	unlink_head(c);
	if (b->map) {
		/* lent: the reader unmaps it when done (mk_frame_keep_release) */
		*lent = (struct mk__lent){ .frame = b->buf, .keep = { b->map, b->cap } };
		free(b);   /* the block; its buffer is the reader's */
		pthread_cond_signal(&c->can_write);
		pthread_mutex_unlock(&c->mu);
		return true;
	}
	*buf = b->buf;
	*cap = b->cap;
	free(b);
	/* the reader holds this buffer now (its frame, as it would hold one
	 * read from a descriptor); its old one is kept for the writer while
	 * that keeps the channel within cap */
	if (old && !c->spare && c->held + old_cap <= c->cap) {
		c->spare = old;
		c->spare_cap = old_cap;
		c->held += old_cap;
		old = NULL;
	}
	pthread_cond_signal(&c->can_write);
	pthread_mutex_unlock(&c->mu);
	free(old);
	return true;
}

/* The job (upper 32 bits) and its marked passes (a bit each). */
struct mk_chan_skip {
	_Atomic uint64_t word;
};

#define SKIP_NONE ((uint64_t)UINT32_MAX << 32)

int mk_chan_skip_new(struct mk_chan_skip **out, struct mk_err *err)
{
	struct mk_chan_skip *s = malloc(sizeof(*s));

	*out = NULL;
	if (!s)
		return mk_err_set(err, MK_ENOMEM, "out of memory");
	atomic_init(&s->word, SKIP_NONE);
	*out = s;
	return 0;
}

void mk_chan_skip_free(struct mk_chan_skip *s)
{
	free(s);
}

bool mk_chan_skip_mark(struct mk_chan_skip *s, uint32_t job, unsigned pass)
{
	uint64_t old = atomic_load(&s->word), want;

	if (pass >= 32 || job == UINT32_MAX)
		return false;
	do {
		want = ((old >> 32) == job ? old : (uint64_t)job << 32) | (uint64_t)1 << pass;
	} while (want != old && !atomic_compare_exchange_weak(&s->word, &old, want));
	return true;
}

bool mk_chan_skip_test(const struct mk_chan_skip *s, uint32_t job, unsigned pass)
{
	uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);

	return pass < 32 && (w >> 32) == job && ((w >> pass) & 1);
}
