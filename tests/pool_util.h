/* What the pool tests share (test_pool.c, test_pool_checkout.c): a pool on a
 * port, and callers, each one xf_pool_get_or_compute on its own thread. */
#ifndef XFT_POOL_UTIL_H
#define XFT_POOL_UTIL_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fixture.h"

static inline xf_pool *open_pool(int port, size_t max, int timeout_ms) {
  xf_options o = XF_OPTIONS_INIT;
  char host[32];
  snprintf(host, sizeof host, "127.0.0.1:%d", port);
  o.host = host; /* copied by the pool: this buffer may go */
  xf_pool *p = NULL;
  cr_assert_eq(xf_pool_open(&p, &o, max, timeout_ms), XF_OK);
  return p;
}

typedef struct caller {
  pthread_t th;
  xf_pool *pool;
  const char *key;
  xft_loader *loader;
  int rc;
  char value[64];
  xf_source source;
} caller;

static inline void *call(void *arg) {
  caller *c = arg;
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  c->rc =
      xf_pool_get_or_compute(c->pool, c->key, strlen(c->key), &p, xft_load, c->loader, &v);
  if (c->rc == XF_OK)
    snprintf(c->value, sizeof c->value, "%s", v.data);
  c->source = v.source;
  xf_value_free(&v);
  return NULL;
}

/* Runs the n callers at once; joins every one that started before it
 * asserts that all did (they write to cs). */
static inline void run_callers(caller *cs, int n) {
  int started = 0, rc = 0;
  while (started < n &&
         (rc = pthread_create(&cs[started].th, NULL, call, &cs[started])) == 0)
    started++;
  for (int i = 0; i < started; i++)
    pthread_join(cs[i].th, NULL);
  cr_assert_eq(rc, 0);
}

#endif /* XFT_POOL_UTIL_H */
