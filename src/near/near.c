/* The near cache (near.h, near_impl.h): open and close, a hit (xf__near_get:
 * the entry copied under its shard's lock, then checked against what the
 * tracker thread has not applied yet), a read's value kept (xf__near_put,
 * behind the pending marker, evicting LRU), fork. The shards and the
 * marker: near_shard.h; invalidations and waits: near_wake.c. */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "client_io.h"
#include "near_impl.h"
#include "near_shard.h"
#include "now.h"

void (*xf__near_test_before_put)(void);
void (*xf__near_test_on_check)(void);
void (*xf__near_test_after_hit)(void);
#ifdef __SANITIZE_THREAD__
int xf__near_fence_dummy;
#endif

static void init_shard(shard *s, size_t max_bytes) {
  pthread_mutex_init(&s->mu, NULL);
  xf__cond_init_monotonic(&s->changed);
  s->max_bytes = max_bytes;
}

int xf__near_open(struct xf__ncache **out, size_t max_bytes) {
  struct xf__ncache *n;
  if (posix_memalign((void **)&n, 64, sizeof *n) != 0)
    return XF_ENOMEM;
  memset(n, 0, sizeof *n);
  pthread_mutex_init(&n->notify_mu, NULL);
  n->tag_epoch = 1; /* a stamp's 0: none */
  n->nshards = NSHARDS;
  while (n->nshards > MIN_SHARDS && max_bytes / n->nshards < MIN_SHARD_BYTES)
    n->nshards /= 2;
  for (int i = 0; i < NSHARDS; i++) {
    init_shard(&n->shards[i], max_bytes / n->nshards);
    if (!(n->shards[i].buckets = calloc(MIN_BUCKETS, sizeof(entry *)))) {
      xf__near_close(n);
      return XF_ENOMEM;
    }
    n->shards[i].nbuckets = MIN_BUCKETS;
  }
  xf__near_link_hooks();        /* the connections arm tracking through it */
  n->log = xf__near_log_open(); /* NULL: no events reported, the rest works */
  if (!(n->tracker = xf__tracker_open(n))) {
    xf__near_close(n);
    return XF_ENOMEM;
  }
  *out = n;
  return XF_OK;
}

void xf__near_unlink(shard *s, entry *e) {
  entry **at = bucket_of(s, e->hash);
  while (*at != e)
    at = &(*at)->hnext;
  *at = e->hnext;
  if (e->prev)
    e->prev->next = e->next;
  else
    s->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    s->tail = e->prev;
  s->count--;
  s->bytes -= e->size;
  free(e);
}

static void clear_shard(shard *s) {
  while (s->head)
    xf__near_unlink(s, s->head);
}

void xf__near_close(struct xf__ncache *n) {
  if (!n)
    return;
  if (n->tracker)
    xf__tracker_close(n->tracker);
  xf__near_log_close(n->log);
  for (int i = 0; i < NSHARDS; i++) {
    shard *s = &n->shards[i];
    if (s->buckets)
      clear_shard(s);
    free(s->buckets);
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->mu);
  }
  free(n->notify_fds);
  pthread_mutex_destroy(&n->notify_mu);
  free(n);
}

uint64_t xf__near_token(struct xf__ncache *n) {
  return __atomic_load_n(&n->seq, __ATOMIC_ACQUIRE);
}

static void push_front(shard *s, entry *e) {
  e->prev = NULL;
  e->next = s->head;
  if (s->head)
    s->head->prev = e;
  s->head = e;
  if (!s->tail)
    s->tail = e;
}

static void move_front(shard *s, entry *e) {
  if (s->head == e)
    return;
  e->prev->next = e->next; /* not the head: has a prev */
  if (e->next)
    e->next->prev = e->prev;
  else
    s->tail = e->prev;
  push_front(s, e);
}

static int same(const entry *e, uint64_t h, const xf_client *c, const char *key,
                size_t keylen) {
  return e->hash == h && e->keylen == keylen && e->nslen == c->ns_len &&
         memcmp(e->bytes + e->nslen, key, keylen) == 0 &&
         memcmp(e->bytes, c->ns, c->ns_len) == 0;
}

/* Whether e may still be served at now_ms: its node not dropped since it
 * was kept, within its life. */
static int alive(const entry *e, int64_t now_ms) {
  return e->expires_ms > now_ms &&
         e->token >= __atomic_load_n(&e->node->drop_seq, __ATOMIC_ACQUIRE);
}

/* Whether what the tracker thread has not applied yet may concern an
 * entry of node, whose sequence was `reading` when the entry was found:
 * bytes waiting on its node's invalidation connection (an invalidation, a
 * flush, the connection closed), or the connection that read it closed by
 * the server (never read by the thread: it stays so until closed, after its
 * node is dropped), or bytes the thread has read and not yet applied (the
 * sequence odd, or moved). The thread handles them within microseconds,
 * unless the machine is so loaded that it is not scheduled for
 * milliseconds: the hit then goes to Redis instead of serving what may be
 * stale. One poll(), one fence. */
static int news_pending(const struct xf__track_node *node, uint64_t reading, int inval_fd,
                        int data_fd, const int stamp_fds[XF__STAMP_FDS]) {
  /* a stamped hit's versions' connections too (poll() skips a -1) */
  struct pollfd pf[2 + XF__STAMP_FDS] = {{.fd = inval_fd, .events = POLLIN},
                                         {.fd = data_fd, .events = POLLRDHUP}};
  nfds_t npf = 2;
  for (int i = 0; i < XF__STAMP_FDS; i++)
    if (stamp_fds[i] >= 0)
      pf[npf++] = (struct pollfd){.fd = stamp_fds[i], .events = POLLRDHUP};
  if (poll(pf, npf, 0) != 0)
    return 1;
  /* The thread makes the sequence odd (and fences) before it takes bytes off
   * the socket: a poll that found them gone is followed by a load that sees
   * it moved. */
  XF__NEAR_FENCE();
  return __atomic_load_n(&node->reading, __ATOMIC_RELAXED) != reading;
}

int xf__near_find(struct xf__ncache *n, const xf_client *c, const char *key, size_t keylen,
                  int64_t now_ms, xf__port_hit *hit, xf__near_seen *seen) {
  uint64_t h = xf__key_hash(key, keylen);
  shard *s = shard_of(n, h);
  int found = 0;
  pthread_mutex_lock(&s->mu);
  for (entry *e = *bucket_of(s, h); e; e = e->hnext) {
    if (!same(e, h, c, key, keylen))
      continue;
    if (!alive(e, now_ms)) {
      xf__near_unlink(s, e);
      break;
    }
    /* Loaded after the entry was found under the lock an invalidation's
     * drop takes: the drop's thread made it odd before, even after. */
    uint64_t reading = __atomic_load_n(&e->node->reading, __ATOMIC_ACQUIRE);
    if (reading & 1)
      break; /* the thread holds unapplied bytes of this node: go to Redis */
    /* After the sequence (acquire): a tag's invalidation the thread applied
     * before it made the sequence even again has moved the epoch. */
    int stamped = e->stamp_epoch &&
                  e->stamp_epoch == __atomic_load_n(&n->tag_epoch, __ATOMIC_ACQUIRE) &&
                  e->stamp_until_ms > now_ms;
    if ((hit->data = malloc(e->len + 1 + e->tags_len))) {
      memcpy(hit->data, e->bytes + e->nslen + e->keylen, e->len + 1 + e->tags_len);
      hit->len = e->len;
      hit->tags = e->tags_len ? (const unsigned char *)hit->data + e->len + 1 : NULL;
      hit->tags_len = e->tags_len;
      hit->delta_us = e->delta_us;
      hit->remaining_ms = e->expires_ms - now_ms;
      hit->redis_expiry_ms = e->redis_expiry_ms;
      hit->negative = e->negative;
      hit->stamp_names = stamped ? e->stamp_names : 0;
      hit->node = e->node;
      hit->fd = e->data_fd;
      *seen =
          (xf__near_seen){.node = e->node,
                          .reading = reading,
                          .inval_fd = __atomic_load_n(&e->node->inval_fd, __ATOMIC_ACQUIRE),
                          .data_fd = e->data_fd};
      for (int i = 0; i < XF__STAMP_FDS; i++)
        seen->stamp_fds[i] = stamped ? e->stamp_fds[i] : -1;
      move_front(s, e);
      found = 1;
    }
    break;
  }
  pthread_mutex_unlock(&s->mu);
  return found;
}

static int near_lookup(struct xf__ncache *n, const xf_client *c, const char *key,
                       size_t keylen, int64_t now_ms, xf__port_hit *hit) {
  int got = c->near_batch ? xf__near_batch_take(c->near_batch, c, key, keylen, hit) : -1;
  if (got >= 0) /* a batch's key: looked up and checked with the batch's others */
    return got;
  xf__near_seen seen;
  if (!xf__near_find(n, c, key, keylen, now_ms, hit, &seen))
    return 0;
  if (xf__near_test_on_check)
    xf__near_test_on_check();
  if (news_pending(seen.node, seen.reading, seen.inval_fd, seen.data_fd, seen.stamp_fds)) {
    free(hit->data);
    return 0;
  }
  return 1;
}

int xf__near_get(struct xf__ncache *n, const xf_client *c, const char *key, size_t keylen,
                 int64_t now_ms, xf__port_hit *hit) {
  int got = near_lookup(n, c, key, keylen, now_ms, hit);
  if (got && xf__near_test_after_hit)
    xf__near_test_after_hit();
  return got;
}

/* Doubles s's table when it holds more entries than buckets. */
static void grow(shard *s) {
  size_t nb = s->nbuckets * 2;
  entry **b = calloc(nb, sizeof *b);
  if (!b)
    return; /* longer chains, still correct */
  for (size_t i = 0; i < s->nbuckets; i++)
    for (entry *e = s->buckets[i], *next; e; e = next) {
      next = e->hnext;
      entry **at = &b[(e->hash / NSHARDS / PENDING_SLOTS) & (nb - 1)];
      e->hnext = *at;
      *at = e;
    }
  free(s->buckets);
  s->buckets = b;
  s->nbuckets = nb;
}

uint64_t xf__near_put(struct xf__ncache *n, const xf_client *c, const xf__track *t,
                      uint64_t token, const char *key, size_t keylen, const char *value,
                      size_t len, const unsigned char *tags, size_t tags_len,
                      int64_t delta_us, int64_t redis_expiry_ms, int64_t expires_ms,
                      int negative) {
  if (!t->node || xf__track_stale(t))
    return 0;
  uint64_t h = xf__key_hash(key, keylen);
  shard *s = shard_of(n, h);
  size_t size = sizeof(entry) + c->ns_len + keylen + len + 1 + tags_len + ENTRY_OVERHEAD;
  if (size > s->max_bytes)
    return 0;
  entry *e = malloc(size - ENTRY_OVERHEAD);
  if (!e)
    return 0;
  *e = (entry){.hash = h,
               .token = token,
               .stamp_fds = {-1, -1},
               .node = t->node,
               .expires_ms = expires_ms,
               .delta_us = delta_us,
               .redis_expiry_ms = redis_expiry_ms,
               .negative = negative,
               .data_fd = t->fd,
               .nslen = c->ns_len,
               .keylen = keylen,
               .len = len,
               .tags_len = tags_len,
               .size = size};
  memcpy(e->bytes, c->ns, c->ns_len);
  memcpy(e->bytes + c->ns_len, key, keylen);
  memcpy(e->bytes + c->ns_len + keylen, value, len);
  e->bytes[c->ns_len + keylen + len] = '\0';
  if (tags_len)
    memcpy(e->bytes + c->ns_len + keylen + len + 1, tags, tags_len);
  if (xf__near_test_before_put)
    xf__near_test_before_put();
  uint64_t evicted = 0;
  pthread_mutex_lock(&s->mu);
  if (s->pending[slot_of(h)] > token ||
      __atomic_load_n(&t->node->drop_seq, __ATOMIC_ACQUIRE) > token) {
    pthread_mutex_unlock(&s->mu); /* overtaken by an invalidation: not kept */
    free(e);
    return 0;
  }
  for (entry *old = *bucket_of(s, h); old; old = old->hnext)
    if (same(old, h, c, key, keylen)) {
      xf__near_unlink(s, old);
      break;
    }
  if (s->count >= s->nbuckets)
    grow(s);
  entry **at = bucket_of(s, h);
  e->hnext = *at;
  *at = e;
  push_front(s, e);
  s->count++;
  s->bytes += size;
  while (s->bytes > s->max_bytes && s->tail != e) {
    xf__near_unlink(s, s->tail);
    evicted++;
  }
  pthread_mutex_unlock(&s->mu);
  if (evicted)
    __atomic_add_fetch(&n->evictions, evicted, __ATOMIC_RELAXED);
  return evicted;
}

uint64_t xf__near_tag_epoch(struct xf__ncache *n) {
  return __atomic_load_n(&n->tag_epoch, __ATOMIC_ACQUIRE);
}

/* The versions' connections other than the entry's own, into fds: 0 when
 * more than a hit polls. */
static int other_fds(const entry *e, const xf__tag_stamp *st, int fds[XF__STAMP_FDS]) {
  int n = 0;
  for (size_t i = 0; i < st->nfds; i++) {
    int fd = st->fds[i], seen = fd == e->data_fd;
    for (int j = 0; j < n; j++)
      seen |= fds[j] == fd;
    if (seen)
      continue;
    if (n == XF__STAMP_FDS)
      return 0;
    fds[n++] = fd;
  }
  for (int j = n; j < XF__STAMP_FDS; j++)
    fds[j] = -1;
  return 1;
}

void xf__near_stamp_entry(struct xf__ncache *n, const xf_client *c, const char *key,
                          size_t keylen, const unsigned char *tags, size_t tags_len,
                          const xf__tag_stamp *st) {
  uint64_t h = xf__key_hash(key, keylen);
  shard *s = shard_of(n, h);
  pthread_mutex_lock(&s->mu);
  for (entry *e = *bucket_of(s, h); e; e = e->hnext) {
    if (!same(e, h, c, key, keylen))
      continue;
    int fds[XF__STAMP_FDS];
    if (e->node == st->node && e->tags_len == tags_len &&
        memcmp(e->bytes + e->nslen + e->keylen + e->len + 1, tags, tags_len) == 0 &&
        st->epoch == __atomic_load_n(&n->tag_epoch, __ATOMIC_ACQUIRE) &&
        other_fds(e, st, fds)) {
      e->stamp_epoch = st->epoch;
      e->stamp_names = st->names;
      e->stamp_until_ms = st->until_ms;
      memcpy(e->stamp_fds, fds, sizeof fds);
    }
    break;
  }
  pthread_mutex_unlock(&s->mu);
}

struct xf__near_tracker *xf__near_tracker(struct xf__ncache *n) {
  return n->tracker;
}

uint64_t xf__near_invalidations(const struct xf__ncache *n) {
  return __atomic_load_n(&n->invalidations, __ATOMIC_ACQUIRE);
}

uint64_t xf__near_evictions(const struct xf__ncache *n) {
  return __atomic_load_n(&n->evictions, __ATOMIC_RELAXED);
}

void xf__near_before_fork(struct xf__ncache *n) {
  xf__tracker_before_fork(n->tracker);
  pthread_mutex_lock(&n->notify_mu);
  for (int i = 0; i < NSHARDS; i++)
    pthread_mutex_lock(&n->shards[i].mu);
  xf__near_log_fork(n->log, 0);
}

void xf__near_after_fork(struct xf__ncache *n, int child) {
  xf__near_log_fork(n->log, child ? 2 : 1);
  for (int i = 0; i < NSHARDS; i++) {
    shard *s = &n->shards[i];
    if (child) { /* the parent's waiters are not here; its entries not ours */
      clear_shard(s);
      xf__cond_init_monotonic(&s->changed);
    }
    pthread_mutex_unlock(&s->mu);
  }
  if (child) /* the parent's event loops' pipes: not this process's to wake */
    n->nnotify = 0;
  pthread_mutex_unlock(&n->notify_mu);
  xf__tracker_after_fork(n->tracker, child);
}
