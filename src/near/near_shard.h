/* The near cache's entries, shared by near.c (hits, puts, LRU eviction)
 * and near_wake.c (invalidations, node drops, wake-on-write): 8 to 64
 * shards (64 once each gets 256 KiB of the budget), each under its own lock
 * with its own hash table, LRU list and share of the byte budget, so
 * concurrent hits on different keys rarely meet on a lock. An entry is
 * keyed by the client's namespace and the Redis key, hashed by the key
 * alone: an invalidation names only the key, and drops it for every
 * namespace (dbs share Redis' tracking table).
 *
 * Pending marker: a global sequence counts invalidations and node drops;
 * each shard remembers, in a small table indexed by key hash, the sequence
 * of the last invalidation that hashed there, and each node the sequence of
 * its last drop. A read takes the sequence before it is sent (its token);
 * its value is kept only if neither its key's slot nor its node moved past
 * the token, checked under the shard's lock the invalidation also takes. A
 * collision only refuses a value that could have been kept. The same slots
 * wake callers waiting on a key (wake-on-write). */
#ifndef XF_NEAR_SHARD_H
#define XF_NEAR_SHARD_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "near_impl.h"

#define NSHARDS 64             /* at most; at least MIN_SHARDS */
#define MIN_SHARDS 8           /* a small cache: fewer, larger shards (LRU per */
#define MIN_SHARD_BYTES 262144 /* shard evicts worse when a shard holds few) */
#define PENDING_SLOTS 256
#define MIN_BUCKETS 16
#define ENTRY_OVERHEAD 16 /* malloc's own, counted against the budget */

typedef struct entry {
  struct entry *hnext;       /* bucket chain */
  struct entry *prev, *next; /* LRU, most recent first */
  uint64_t hash, token;
  struct xf__track_node *node;
  int64_t expires_ms, delta_us;
  int64_t redis_expiry_ms; /* the Redis entry's (server ms): xf__port_hit's */
  int negative;
  int data_fd; /* the socket of the connection that read it */
  /* Its stamp (near.h), under its shard's lock: current while stamp_epoch
   * is the near cache's tag epoch (0: none) and until stamp_until_ms; the
   * versions' other connections, polled by a hit (-1: none). */
  uint64_t stamp_epoch, stamp_names;
  int64_t stamp_until_ms;
  int stamp_fds[XF__STAMP_FDS];
  size_t nslen, keylen, len, tags_len, size;
  char bytes[]; /* namespace, key, value, NUL, tag record (xf__port_hit's) */
} entry;

typedef struct shard {
  pthread_mutex_t mu;
  pthread_cond_t changed; /* an invalidation or a node drop (wake-on-write) */
  entry **buckets;
  size_t nbuckets, count, bytes, max_bytes;
  entry *head, *tail;
  uint64_t drops; /* node drops seen: every waiter wakes */
  uint64_t pending[PENDING_SLOTS];
} __attribute__((aligned(64))) shard;

struct xf__ncache {
  shard shards[NSHARDS];
  unsigned nshards;  /* a power of two */
  uint64_t drop_seq; /* the sequence of the last node drop (__atomic) */
  pthread_mutex_t notify_mu;
  int *notify_fds; /* wake pipes' write ends (xf_call_wake_open): a byte on */
  size_t nnotify;  /* every invalidation; nnotify read __atomic first */
  uint64_t seq;    /* invalidations and drops so far (__atomic) */
  uint64_t invalidations, evictions;
  uint64_t tag_epoch; /* tags' keys invalidated or dropped (near.h), from 1
                         (__atomic) */
  struct xf__near_tracker *tracker;
  struct xf__near_log *log; /* XF_EV_INVALIDATION's (near_events.c) */
};

static inline shard *shard_of(struct xf__ncache *n, uint64_t h) {
  return &n->shards[h & (n->nshards - 1)];
}
static inline size_t slot_of(uint64_t h) { return (h / NSHARDS) % PENDING_SLOTS; }
static inline entry **bucket_of(shard *s, uint64_t h) {
  return &s->buckets[(h / NSHARDS / PENDING_SLOTS) & (s->nbuckets - 1)];
}

/* Takes e out of s's table and LRU list and frees it. Under s->mu. */
void xf__near_unlink(shard *s, entry *e);

#endif
