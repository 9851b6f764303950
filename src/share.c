/* The process-local share: single-flight per key and a bounded LRU fallback
 * cache, under one mutex. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
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
} slot;

struct xf_share {
  pthread_mutex_t mu;
  pthread_cond_t landed;
  size_t max_entries, max_bytes, entries, bytes;
  slot *head, *tail;
  unsigned long fork_generation;
};

int xf_share_open(xf_share **out, const xf_share_options *o) {
  if (!out)
    return XF_EINVAL;
  xf_share *s = calloc(1, sizeof *s);
  if (!s)
    return XF_ENOMEM;
  s->max_entries = o && o->max_entries ? o->max_entries : DEFAULT_MAX_ENTRIES;
  s->max_bytes = o && o->max_bytes ? o->max_bytes : DEFAULT_MAX_BYTES;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->landed, NULL);
  s->fork_generation = xf__fork_generation();
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

void xf_share_close(xf_share *s) {
  if (!s)
    return;
  while (s->head)
    free_slot(s, s->head);
  pthread_cond_destroy(&s->landed);
  pthread_mutex_destroy(&s->mu);
  free(s);
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

/* A forked child has no leaders: nothing is loading there. Its locks are
 * made anew (a parent's thread may have held them at the fork). */
static void check_fork(xf_share *s) {
  if (s->fork_generation == xf__fork_generation())
    return;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->landed, NULL);
  for (slot *e = s->head; e; e = e->next)
    e->loading = e->waiters = 0;
  s->fork_generation = xf__fork_generation();
}

static slot *find(xf_share *s, const char *key, size_t keylen) {
  for (slot *e = s->head; e; e = e->next)
    if (e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
      return e;
  return NULL;
}

static slot *new_slot(xf_share *s, const char *key, size_t keylen) {
  slot *e = calloc(1, sizeof *e);
  if (!e || !(e->key = malloc(keylen))) {
    free(e);
    return NULL;
  }
  memcpy(e->key, key, keylen);
  e->keylen = keylen;
  s->entries++;
  s->bytes += keylen;
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

xf__share_role xf__share_begin(xf_share *s, const char *key, size_t keylen, int64_t now_ms,
                               int64_t deadline_ms, xf_interrupt_fn interrupt, void *ud,
                               char **data, size_t *len, int *rc) {
  check_fork(s);
  pthread_mutex_lock(&s->mu);
  slot *e = find(s, key, keylen);
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
    if (!e && !(e = new_slot(s, key, keylen))) {
      pthread_mutex_unlock(&s->mu);
      return XF_SHARE_ALONE;
    }
    e->loading = 1;
  }
  if (role != XF_SHARE_ALONE) {
    unlink_slot(s, e);
    push_front(s, e);
  }
  evict(s);
  pthread_mutex_unlock(&s->mu);
  return role;
}

void xf__share_end(xf_share *s, const char *key, size_t keylen, int rc, const char *data,
                   size_t len, int64_t expires_ms) {
  pthread_mutex_lock(&s->mu);
  slot *e = find(s, key, keylen);
  if (e) {
    drop_value(s, e);
    if (rc == XF_OK && data && (e->value = malloc(len ? len : 1))) {
      memcpy(e->value, data, len);
      e->len = len;
      s->bytes += len;
    }
    e->outcome = rc == XF_OK && !e->value ? XF_ENOMEM : rc;
    e->expires_ms = expires_ms;
    e->loading = 0;
    e->flight++;
    pthread_cond_broadcast(&s->landed);
    evict(s);
  }
  pthread_mutex_unlock(&s->mu);
}
