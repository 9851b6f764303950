/* The process-local share: single-flight per key and a bounded LRU fallback
 * cache, under one mutex. A slot's key is the client's namespace (where its
 * values come from: servers, db, user) followed by its Redis key, so clients
 * of different servers or dbs never serve each other's values; an
 * acknowledged write or delete drops the slot, so the share never serves
 * what Redis itself would no longer serve. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "client_io.h"
#include "near_impl.h"
#include "refresh.h"
#include "share.h"

#define DEFAULT_MAX_ENTRIES 10000
#define DEFAULT_MAX_BYTES (64u * 1024 * 1024)
#define INTERRUPT_SLICE_MS 50 /* how often a waiter asks options.interrupt */

typedef struct slot {
  struct slot *prev, *next; /* LRU list, most recent first */
  char *key;
  size_t keylen;
  char *value; /* NULL: none (never loaded, or the flight failed) */
  size_t len;
  int64_t expires_ms;
  int loading;          /* a leader is loading it */
  unsigned long flight; /* bumped when a flight ends */
  int outcome;          /* the last flight's code */
  int waiters;          /* followers holding a pointer to it */
  int dropped;          /* a write or delete came during the flight: its
                           value goes to its followers, never kept */
} slot;

struct xf_share {
  pthread_mutex_t mu;
  pthread_cond_t landed;
  size_t max_entries, max_bytes, entries, bytes;
  slot *head, *tail;
  struct xf_share *next_open;        /* in the list of open shares (fork) */
  struct xf__refreshers *refreshers; /* background refresh (refresh.h) */
  struct xf__ncache *near;           /* NULL: no near cache */
  int refs; /* the owner's (until xf_share_close) + one per client opened with it */
};

struct xf__refreshers **xf__share_refreshers(xf_share *s) {
  return &s->refreshers;
}

void (*xf__share_test_yield)(void);

/* fork(): a share's lock may be held, and its slots half-changed, by a
 * thread of the parent that does not exist in the child. Checking for a fork
 * on first use in the child (as before) ran outside the lock, so two of the
 * child's threads could both reset the share, the second clearing the
 * first's flight (two loads of one key). Instead, as POSIX's rationale for
 * pthread_atfork has it, fork() itself takes every open share's lock before
 * forking (so no thread is inside one: the slots are whole) and releases it
 * in both processes; in the child, before any thread of its own can run,
 * the share forgets the flights and waiters of the parent's threads. */
static pthread_mutex_t open_shares_mu = PTHREAD_MUTEX_INITIALIZER;
static xf_share *open_shares;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void before_fork(void) {
  pthread_mutex_lock(&open_shares_mu);
  for (xf_share *s = open_shares; s; s = s->next_open) {
    pthread_mutex_lock(&s->mu);
    if (s->near)
      xf__near_before_fork(s->near);
  }
}

static void after_fork_in_parent(void) {
  for (xf_share *s = open_shares; s; s = s->next_open) {
    if (s->near)
      xf__near_after_fork(s->near, 0);
    pthread_mutex_unlock(&s->mu);
  }
  pthread_mutex_unlock(&open_shares_mu);
}

static void forget_parent_threads(xf_share *s);

static void after_fork_in_child(void) {
  for (xf_share *s = open_shares; s; s = s->next_open) {
    forget_parent_threads(s);
    if (s->near) /* the child's near cache starts empty */
      xf__near_after_fork(s->near, 1);
    pthread_mutex_unlock(&s->mu); /* held by this very thread since before_fork */
  }
  pthread_mutex_unlock(&open_shares_mu);
}

static void register_atfork(void) {
  pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

int xf_share_open(xf_share **out, const xf_share_options *o) {
  if (!out)
    return XF_EINVAL;
  xf_share *s = calloc(1, sizeof *s);
  if (!s)
    return XF_ENOMEM;
  s->max_entries = o && o->max_entries ? o->max_entries : DEFAULT_MAX_ENTRIES;
  s->max_bytes = o && o->max_bytes ? o->max_bytes : DEFAULT_MAX_BYTES;
  if (o && o->near_cache_bytes && xf__near_open(&s->near, o->near_cache_bytes) != XF_OK) {
    free(s);
    return XF_ENOMEM;
  }
  s->refs = 1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->landed, NULL);
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&open_shares_mu);
  s->next_open = open_shares;
  open_shares = s;
  pthread_mutex_unlock(&open_shares_mu);
  *out = s;
  return XF_OK;
}

static void unlink_slot(xf_share *s, slot *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    s->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    s->tail = e->prev;
  e->prev = e->next = NULL;
}

static void push_front(xf_share *s, slot *e) {
  e->next = s->head;
  e->prev = NULL;
  if (s->head)
    s->head->prev = e;
  s->head = e;
  if (!s->tail)
    s->tail = e;
}

static void drop_value(xf_share *s, slot *e) {
  s->bytes -= e->len;
  free(e->value);
  e->value = NULL;
  e->len = 0;
}

static void free_slot(xf_share *s, slot *e) {
  unlink_slot(s, e);
  drop_value(s, e);
  s->bytes -= e->keylen;
  s->entries--;
  free(e->key);
  free(e);
}

/* The share's memory, its slots and its near cache (whose tracker a client's
 * connections report to when they close) go with the last reference: the
 * owner's xf_share_close or, when clients outlive it, the last one's
 * xf_client_close (a garbage collector closing objects in any order, as
 * Python's at interpreter exit, closed a share before its clients). */
static void unref(xf_share *s) {
  pthread_mutex_lock(&s->mu);
  int last = --s->refs == 0;
  pthread_mutex_unlock(&s->mu);
  if (!last)
    return;
  while (s->head)
    free_slot(s, s->head);
  xf__near_close(s->near);
  pthread_cond_destroy(&s->landed);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

void xf__share_ref(xf_share *s) {
  pthread_mutex_lock(&s->mu);
  s->refs++;
  pthread_mutex_unlock(&s->mu);
}

void xf__share_unref(xf_share *s) {
  if (s)
    unref(s);
}

void xf_share_close(xf_share *s) {
  if (!s)
    return;
  pthread_mutex_lock(&open_shares_mu);
  xf_share **at = &open_shares;
  while (*at != s)
    at = &(*at)->next_open;
  *at = s->next_open;
  pthread_mutex_unlock(&open_shares_mu);
  xf__refreshers_close(s->refreshers, XF_REFRESH_DRAIN_MS);
  unref(s);
}

/* Evicts least recently used slots nobody is using until within bounds. */
static void evict(xf_share *s) {
  slot *e = s->tail;
  while (e && (s->entries > s->max_entries || s->bytes > s->max_bytes)) {
    slot *prev = e->prev;
    if (!e->loading && e->waiters == 0)
      free_slot(s, e);
    e = prev;
  }
}

void (*xf__share_test_yield)(void);

/* The child's only thread runs this inside fork(): no flight is in progress
 * and nobody waits. The condition variable is made anew: the parent's
 * waiters are counted in it, and a broadcast (or a destroy) could wait for
 * them forever. */
static void forget_parent_threads(xf_share *s) {
  for (slot *e = s->head; e; e = e->next)
    e->loading = e->waiters = e->dropped = 0;
  pthread_cond_init(&s->landed, NULL);
}

static slot *find(xf_share *s, const xf_client *c, const char *key, size_t keylen) {
  size_t nslen = c->ns_len;
  for (slot *e = s->head; e; e = e->next)
    if (e->keylen == nslen + keylen && memcmp(e->key, c->ns, nslen) == 0 &&
        memcmp(e->key + nslen, key, keylen) == 0)
      return e;
  return NULL;
}

static slot *new_slot(xf_share *s, const xf_client *c, const char *key, size_t keylen) {
  slot *e = calloc(1, sizeof *e);
  if (!e || !(e->key = malloc(c->ns_len + keylen))) {
    free(e);
    return NULL;
  }
  memcpy(e->key, c->ns, c->ns_len);
  memcpy(e->key + c->ns_len, key, keylen);
  e->keylen = c->ns_len + keylen;
  s->entries++;
  s->bytes += e->keylen;
  push_front(s, e);
  return e;
}

static int copy_value(const slot *e, char **data, size_t *len) {
  char *copy = malloc(e->len + 1);
  if (!copy)
    return XF_ENOMEM;
  memcpy(copy, e->value, e->len);
  copy[e->len] = '\0';
  *data = copy;
  *len = e->len;
  return XF_OK;
}

static void wait_until(xf_share *s, int64_t deadline_ms) {
  struct timespec now, ts;
  clock_gettime(CLOCK_REALTIME, &now);
  int64_t left = deadline_ms - xf__now_ms();
  if (left <= 0)
    return;
  ts.tv_sec = now.tv_sec + left / 1000;
  ts.tv_nsec = now.tv_nsec + (left % 1000) * 1000000;
  if (ts.tv_nsec >= 1000000000)
    ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_cond_timedwait(&s->landed, &s->mu, &ts);
}

/* Waits for the flight to land, in slices, asking interrupt (without the
 * lock: it may run a binding's code) between them. Returns 1 when it asked
 * to stop. */
static int wait_flight(xf_share *s, slot *e, unsigned long flight, int64_t deadline_ms,
                       xf_interrupt_fn interrupt, void *ud) {
  while (e->flight == flight && xf__now_ms() < deadline_ms) {
    int64_t slice_ms = xf__now_ms() + INTERRUPT_SLICE_MS;
    wait_until(s, interrupt && slice_ms < deadline_ms ? slice_ms : deadline_ms);
    if (interrupt && e->flight == flight) {
      pthread_mutex_unlock(&s->mu);
      int stop = interrupt(ud);
      pthread_mutex_lock(&s->mu);
      if (stop)
        return 1;
    }
  }
  return 0;
}

/* Ends a begin or a try, under the lock: the slot served or led goes to the
 * front, the share is evicted down to its size, and the lock is released. */
static xf__share_role unlock_after(xf_share *s, slot *e, xf__share_role role) {
  if (role != XF_SHARE_ALONE) {
    unlink_slot(s, e);
    push_front(s, e);
  }
  evict(s);
  pthread_mutex_unlock(&s->mu);
  return role;
}

xf__share_role xf__share_begin(const xf_client *c, const char *key, size_t keylen,
                               int64_t now_ms, int64_t deadline_ms, char **data,
                               size_t *len, int *rc) {
  xf_share *s = c->share;
  if (!s)
    return XF_SHARE_ALONE;
  if (xf__share_test_yield)
    xf__share_test_yield();
  xf_interrupt_fn interrupt = c->interrupt;
  void *ud = c->interrupt_ud;
  pthread_mutex_lock(&s->mu);
  slot *e = find(s, c, key, keylen);
  xf__share_role role = XF_SHARE_LEAD;
  if (e && e->value && e->expires_ms > now_ms && !e->loading) {
    *rc = copy_value(e, data, len);
    role = XF_SHARE_SERVED;
  } else if (e && e->loading) {
    unsigned long flight = e->flight;
    e->waiters++;
    int stopped = wait_flight(s, e, flight, deadline_ms, interrupt, ud);
    e->waiters--;
    if (stopped) {
      *rc = XF_ECANCELED;
      role = XF_SHARE_SERVED;
    } else if (e->flight == flight) {
      role = XF_SHARE_ALONE;
    } else {
      *rc = e->value && e->outcome == XF_OK ? copy_value(e, data, len) : e->outcome;
      role = XF_SHARE_SERVED;
    }
  } else {
    if (!e && !(e = new_slot(s, c, key, keylen))) {
      pthread_mutex_unlock(&s->mu);
      return XF_SHARE_ALONE;
    }
    e->loading = 1;
  }
  return unlock_after(s, e, role);
}

xf__share_role xf__share_try(const xf_client *c, const char *key, size_t keylen,
                             int64_t now_ms, unsigned long *seen, char **data, size_t *len,
                             int *rc) {
  xf_share *s = c->share;
  if (!s)
    return XF_SHARE_ALONE;
  pthread_mutex_lock(&s->mu);
  slot *e = find(s, c, key, keylen);
  xf__share_role role = XF_SHARE_LEAD;
  if (e && *seen && e->flight + 1 != *seen) { /* the flight seen in progress landed */
    *rc = e->value && e->outcome == XF_OK ? copy_value(e, data, len) : e->outcome;
    role = XF_SHARE_SERVED;
  } else if (e && e->value && e->expires_ms > now_ms && !e->loading) {
    *rc = copy_value(e, data, len);
    role = XF_SHARE_SERVED;
  } else if (e && e->loading) {
    *seen = e->flight + 1;
    role = XF_SHARE_ALONE; /* busy: ask again later */
  } else if (!e && !(e = new_slot(s, c, key, keylen))) {
    pthread_mutex_unlock(&s->mu);
    return XF_SHARE_ALONE;
  } else {
    e->loading = 1;
  }
  return unlock_after(s, e, role);
}

void xf__share_end(const xf_client *c, const char *key, size_t keylen, int rc,
                   const char *data, size_t len, int64_t expires_ms) {
  xf_share *s = c->share;
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  slot *e = find(s, c, key, keylen);
  if (e) {
    drop_value(s, e);
    if (rc == XF_OK && data && (e->value = malloc(len ? len : 1))) {
      memcpy(e->value, data, len);
      e->len = len;
      s->bytes += len;
    }
    e->outcome = rc == XF_OK && !e->value ? XF_ENOMEM : rc;
    e->expires_ms = e->dropped ? INT64_MIN : expires_ms;
    e->dropped = 0;
    e->loading = 0;
    e->flight++;
    pthread_cond_broadcast(&s->landed);
    evict(s);
  }
  pthread_mutex_unlock(&s->mu);
}

void xf__share_drop(const xf_client *c, const char *key, size_t keylen) {
  xf_share *s = c->share;
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  slot *e = find(s, c, key, keylen);
  if (e && !e->loading && e->waiters == 0) {
    free_slot(s, e);
  } else if (e) { /* followers still take the flight's value: only never again */
    e->expires_ms = INT64_MIN;
    e->dropped = e->loading;
  }
  pthread_mutex_unlock(&s->mu);
}

struct xf__ncache *xf__share_near(const xf_share *s) {
  return s ? s->near : NULL;
}
