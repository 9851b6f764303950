/* A pool's spare clients for near hits (spares.h). */
#include "spares.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct xf__spares {
  pthread_mutex_t lock;
  const xf_options *opts;
  size_t max, made, nfree;
  xf_client **free; /* a stack */
  xf_client **all;
  xf_stats *seen;  /* all[i]'s counters already in totals */
  xf_stats totals; /* as of each spare's last give */
};

xf__spares *xf__spares_open(const xf_options *opts, size_t max) {
  xf__spares *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  s->opts = opts;
  s->max = max;
  s->free = calloc(max, sizeof *s->free);
  s->all = calloc(max, sizeof *s->all);
  s->seen = calloc(max, sizeof *s->seen);
  pthread_mutex_init(&s->lock, NULL);
  if (!s->free || !s->all || !s->seen) {
    xf__spares_close(s);
    return NULL;
  }
  return s;
}

xf_client *xf__spares_take(xf__spares *s) {
  pthread_mutex_lock(&s->lock);
  if (s->nfree > 0) {
    xf_client *c = s->free[--s->nfree];
    pthread_mutex_unlock(&s->lock);
    return c;
  }
  if (s->made == s->max) {
    pthread_mutex_unlock(&s->lock);
    return NULL;
  }
  size_t i = s->made++; /* reserved: filled below, or given back */
  pthread_mutex_unlock(&s->lock);
  xf_client *c = NULL;
  int rc = xf_client_open(&c, s->opts); /* lazy: no I/O */
  pthread_mutex_lock(&s->lock);
  if (rc == XF_OK) {
    c->driver = XF_DRIVER_POOL;
    s->all[i] = c;
  } else {
    xf_client_close(c);
    c = NULL;
    s->all[i] = NULL; /* a hole: never given, never counted */
  }
  pthread_mutex_unlock(&s->lock);
  return c;
}

int xf__spares_near_serve(xf__spares *s, const char *key, size_t keylen,
                          const xf_policy *policy, xf_value *out, xf_client **elected,
                          char *msg, size_t cap) {
  *elected = NULL;
  xf_client *c = xf__spares_take(s);
  if (!c)
    return XF_NEAR_NOT_SERVED;
  int rc = xf_near_serve(c, key, keylen, policy, XF_DRIVER_POOL, NULL, out);
  if (rc == XF_NEAR_NOT_SERVED && c->near_elect) {
    *elected = c;
    return rc;
  }
  if (rc != XF_NEAR_NOT_SERVED)
    snprintf(msg, cap, "%s", rc == XF_OK ? "" : c->errstr);
  xf__spares_give(s, c);
  return rc;
}

void xf__spares_give(xf__spares *s, xf_client *c) {
  pthread_mutex_lock(&s->lock);
  size_t i = 0;
  while (s->all[i] != c)
    i++;
  const uint64_t *now = (const uint64_t *)&c->stats;
  uint64_t *seen = (uint64_t *)&s->seen[i], *sum = (uint64_t *)&s->totals;
  for (size_t f = 0; f < sizeof(xf_stats) / sizeof(uint64_t); f++) {
    sum[f] += now[f] - seen[f];
    seen[f] = now[f];
  }
  s->free[s->nfree++] = c;
  pthread_mutex_unlock(&s->lock);
}

void xf__spares_add_stats(xf__spares *s, xf_stats *out) {
  pthread_mutex_lock(&s->lock);
  const uint64_t *from = (const uint64_t *)&s->totals;
  uint64_t *sum = (uint64_t *)out;
  for (size_t f = 0; f < sizeof(xf_stats) / sizeof(uint64_t); f++)
    sum[f] += from[f];
  pthread_mutex_unlock(&s->lock);
}

void xf__spares_close(xf__spares *s) {
  if (!s)
    return;
  for (size_t i = 0; s->all && i < s->made; i++)
    xf_client_close(s->all[i]);
  pthread_mutex_destroy(&s->lock);
  free(s->free);
  free(s->all);
  free(s->seen);
  free(s);
}
