/* XF_EV_INVALIDATION (near.h, near_impl.h): what the near cache was told
 * (an invalidated key; a node's entries dropped by a flush or a lost
 * connection) kept in a bounded log as it happens, on the tracker thread or
 * wherever a drop comes from, and reported through the event hook by the
 * next get or get-or-compute of a client of the share that has a hook, on
 * that call's thread. Each record is reported once per share (one cursor):
 * a process's metrics count each invalidation once, whichever client
 * reports it. The hook never runs on the tracker thread nor under its
 * locks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "near_impl.h"

#define LOG_CAP 1024  /* records kept between two reports; older ones are lost */
#define REPORT_MAX 64 /* records one call reports (the rest: the next calls) */

typedef struct record {
  char *key; /* the Redis key (with the prefix); NULL: a node's drop */
  size_t keylen;
  char server[64]; /* a drop's node */
  int rc;          /* a drop: 0 a flush, XF_EIO a connection lost */
} record;

struct xf__near_log {
  pthread_mutex_t mu;
  record r[LOG_CAP];
  uint64_t next;     /* the sequence the next record gets */
  uint64_t reported; /* records before it were reported (or lost); written
                        under mu, __atomic */
  uint64_t pending;  /* __atomic: next, read without the lock by the calls */
};

struct xf__near_log *xf__near_log_open(void) {
  struct xf__near_log *l = calloc(1, sizeof *l);
  if (l)
    pthread_mutex_init(&l->mu, NULL);
  return l;
}

void xf__near_log_close(struct xf__near_log *l) {
  if (!l)
    return;
  for (int i = 0; i < LOG_CAP; i++)
    free(l->r[i].key);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

void xf__near_log_fork(struct xf__near_log *l, int phase) {
  if (!l)
    return;
  if (phase == 0) {
    pthread_mutex_lock(&l->mu);
    return;
  }
  if (phase == 2) {
    __atomic_store_n(&l->reported, l->next, __ATOMIC_RELEASE);
    __atomic_store_n(&l->pending, l->next, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&l->mu);
}

void xf__near_log_add(struct xf__near_log *l, const char *key, size_t keylen,
                      const struct xf__track_node *node, int rc) {
  if (!l)
    return;
  char *copy = key ? malloc(keylen + 1) : NULL;
  if (copy)
    memcpy(copy, key, keylen), copy[keylen] = '\0';
  pthread_mutex_lock(&l->mu);
  record *r = &l->r[l->next % LOG_CAP];
  free(r->key);
  *r = (record){.key = copy, .keylen = copy ? keylen : 0, .rc = rc};
  if (!key && node && node->host)
    snprintf(r->server, sizeof r->server, "%s:%d", node->host, node->port);
  else if (!key && node)
    snprintf(r->server, sizeof r->server, "%s", node->unix_path);
  /* out of memory for the key: reported as a drop without a server */
  l->next++;
  __atomic_store_n(&l->pending, l->next, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&l->mu);
}

void xf__near_report(struct xf__ncache *n, const xf_client *c, xf_driver driver) {
  struct xf__near_log *l = xf__near_log(n);
  if (!l || __atomic_load_n(&l->pending, __ATOMIC_ACQUIRE) ==
                __atomic_load_n(&l->reported, __ATOMIC_ACQUIRE))
    return; /* nothing new (read without the lock: at worst one call late) */
  record out[REPORT_MAX];
  int count = 0, lost = 0;
  pthread_mutex_lock(&l->mu);
  uint64_t at = l->reported;
  if (l->next - at > LOG_CAP) { /* overwritten before reported */
    lost = 1;
    at = l->next - LOG_CAP;
  }
  while (at < l->next && count < REPORT_MAX) {
    record *r = &l->r[at++ % LOG_CAP];
    out[count++] = *r; /* the key moves out: the slot forgets it */
    r->key = NULL;
  }
  __atomic_store_n(&l->reported, at, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&l->mu);
  if (lost) /* key and server NULL: some were not kept */
    xf__emit_invalidation(c, driver, NULL, 0, NULL, 0);
  for (int i = 0; i < count; i++) {
    xf__emit_invalidation(c, driver, out[i].key, out[i].keylen,
                          out[i].key ? NULL : out[i].server, out[i].rc);
    free(out[i].key);
  }
}
