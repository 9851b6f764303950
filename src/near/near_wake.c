/* The near cache's invalidations (near_impl.h): a key's drop (an
 * invalidation from Redis, or this process's own write), a node's drop (a
 * flush, a lost connection), and wake-on-write: callers waiting on a key
 * (xf__near_wait, on the key's shard's condition variable and pending
 * slot) and event loops' wake pipes (xf__near_notify_add). Entries and
 * shards: near_shard.h. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "client_io.h"
#include "near_impl.h"
#include "near_shard.h"

/* A byte on every wake pipe: an event loop's waiting calls look again. */
static void notify(struct xf__ncache *n) {
  if (!__atomic_load_n(&n->nnotify, __ATOMIC_ACQUIRE))
    return;
  pthread_mutex_lock(&n->notify_mu);
  for (size_t i = 0; i < n->nnotify; i++) {
    ssize_t r = write(n->notify_fds[i], "", 1); /* full: a wake is pending anyway */
    (void)r;
  }
  pthread_mutex_unlock(&n->notify_mu);
}

int xf__near_notify_add(struct xf__ncache *n, int fd) {
  pthread_mutex_lock(&n->notify_mu);
  int *fds = realloc(n->notify_fds, (n->nnotify + 1) * sizeof *fds);
  if (fds) {
    n->notify_fds = fds;
    fds[n->nnotify] = fd;
    __atomic_store_n(&n->nnotify, n->nnotify + 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&n->notify_mu);
  return fds ? XF_OK : XF_ENOMEM;
}

void xf__near_notify_remove(struct xf__ncache *n, int fd) {
  pthread_mutex_lock(&n->notify_mu);
  for (size_t i = 0; i < n->nnotify; i++)
    if (n->notify_fds[i] == fd) {
      n->notify_fds[i] = n->notify_fds[n->nnotify - 1];
      __atomic_store_n(&n->nnotify, n->nnotify - 1, __ATOMIC_RELEASE);
      break;
    }
  pthread_mutex_unlock(&n->notify_mu);
}

int xf__near_changed(struct xf__ncache *n, const char *key, size_t keylen, uint64_t token) {
  uint64_t h = xf__key_hash(key, keylen);
  shard *s = shard_of(n, h);
  pthread_mutex_lock(&s->mu);
  int changed = s->pending[slot_of(h)] > token ||
                __atomic_load_n(&n->drop_seq, __ATOMIC_ACQUIRE) > token;
  pthread_mutex_unlock(&s->mu);
  return changed;
}

void xf__near_drop(struct xf__ncache *n, const char *key, size_t keylen) {
  uint64_t h = xf__key_hash(key, keylen);
  shard *s = shard_of(n, h);
  if (xf__is_tag_key(key, keylen)) /* its version may be kept or stamped */
    __atomic_add_fetch(&n->tag_epoch, 1, __ATOMIC_ACQ_REL);
  uint64_t seq = __atomic_add_fetch(&n->seq, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_lock(&s->mu);
  s->pending[slot_of(h)] = seq;
  for (entry *e = *bucket_of(s, h), *next; e; e = next) {
    next = e->hnext;
    if (e->hash == h && e->keylen == keylen &&
        memcmp(e->bytes + e->nslen, key, keylen) == 0)
      xf__near_unlink(s, e);
  }
  pthread_cond_broadcast(&s->changed);
  pthread_mutex_unlock(&s->mu);
  notify(n);
}

/* Counted last: once the count shows it, the next call reports it. */
void xf__near_invalidate(struct xf__ncache *n, const char *key, size_t keylen) {
  xf__near_drop(n, key, keylen);
  xf__near_log_add(n->log, key, keylen, NULL, 0);
  __atomic_add_fetch(&n->invalidations, 1, __ATOMIC_RELEASE);
}

struct xf__near_log *xf__near_log(struct xf__ncache *n) {
  return n->log;
}

void xf__near_drop_node(struct xf__ncache *n, struct xf__track_node *node, int rc) {
  xf__near_log_add(n->log, NULL, 0, node, rc);
  uint64_t seq = __atomic_add_fetch(&n->seq, 1, __ATOMIC_ACQ_REL);
  __atomic_store_n(&node->drop_seq, seq, __ATOMIC_RELEASE);
  __atomic_store_n(&n->drop_seq, seq, __ATOMIC_RELEASE);
  for (int i = 0; i < NSHARDS; i++) { /* the entries go lazily: never served */
    shard *s = &n->shards[i];
    pthread_mutex_lock(&s->mu);
    s->drops++;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
  }
  __atomic_add_fetch(&n->invalidations, 1, __ATOMIC_RELEASE);
  notify(n);
}

int xf__near_wait(struct xf__ncache *n, const char *key, size_t keylen, uint64_t token,
                  int64_t until_ms) {
  uint64_t h = xf__key_hash(key, keylen);
  shard *s = shard_of(n, h);
  size_t slot = slot_of(h);
  struct timespec ts; /* until_ms on CLOCK_MONOTONIC (the driver's, unskewed) */
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t left_ms = until_ms - xf__now_ms();
  if (left_ms < 0)
    left_ms = 0;
  ts.tv_sec += left_ms / 1000;
  ts.tv_nsec += (left_ms % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000)
    ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_mutex_lock(&s->mu);
  uint64_t drops = s->drops;
  int woke = 0, rc = 0;
  while (!(woke = s->pending[slot] > token || s->drops != drops) && rc == 0)
    rc = pthread_cond_timedwait(&s->changed, &s->mu, &ts);
  pthread_mutex_unlock(&s->mu);
  return woke;
}
