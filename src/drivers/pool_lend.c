/* Lending the pool's clients to calls (pool_impl.h): checkout waits for an
 * idle client or opens one while fewer than max exist; checkin gives it back
 * and adds what it counted to the pool's stats. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pool_impl.h"

#define INTERRUPT_SLICE_MS 50 /* how often a waiting call asks options.interrupt */

_Thread_local char xf__pool_error[XF__POOL_ERROR_LEN];

static int index_of(const xf_pool *p, const xf_client *c) {
  for (size_t i = 0; i < p->made; i++)
    if (p->all[i] == c)
      return (int)i;
  return -1;
}

/* Adds what c counted since its last check-in to the totals (lock held). */
static void collect(xf_pool *p, xf_client *c) {
  int i = index_of(p, c);
  const uint64_t *now = (const uint64_t *)&c->stats;
  uint64_t *seen = (uint64_t *)&p->seen[i], *sum = (uint64_t *)&p->totals;
  for (size_t f = 0; f < sizeof(xf_stats) / sizeof(uint64_t); f++) {
    sum[f] += now[f] - seen[f];
    seen[f] = now[f];
  }
}

/* One wait for a client checked in, until *until, at most 50 ms long when
 * options.interrupt is set: asked (without the lock: it may run a signal
 * handler) after each slice. The lock is held on return. 0, ETIMEDOUT (at
 * *until) or XF_ECANCELED. */
static int wait_slice(xf_pool *p, const struct timespec *until) {
  if (!p->opts.interrupt)
    return pthread_cond_timedwait(&p->freed, &p->lock, until);
  struct timespec slice = xf__deadline_in(INTERRUPT_SLICE_MS);
  int last = slice.tv_sec > until->tv_sec ||
             (slice.tv_sec == until->tv_sec && slice.tv_nsec >= until->tv_nsec);
  int rc = pthread_cond_timedwait(&p->freed, &p->lock, last ? until : &slice);
  if (rc != ETIMEDOUT || last)
    return rc;
  pthread_mutex_unlock(&p->lock);
  int stop = p->opts.interrupt(p->opts.interrupt_ud);
  pthread_mutex_lock(&p->lock);
  return stop ? XF_ECANCELED : 0;
}

/* pool_impl.h. */
int xf__pool_checkout(xf_pool *p, int wait_ms, xf_client **out) {
  struct timespec until = xf__deadline_in(wait_ms > 0 ? wait_ms : 0);
  pthread_mutex_lock(&p->lock);
  int waited = 0;
  while (p->nidle == 0 && (p->made + p->opening == p->max || wait_ms < 0)) {
    if (wait_ms == 0) {
      pthread_mutex_unlock(&p->lock);
      return XF_EBUSY;
    }
    waited = 1;
    int rc = wait_ms < 0 ? pthread_cond_wait(&p->freed, &p->lock) : wait_slice(p, &until);
    if (rc == XF_ECANCELED) {
      pthread_mutex_unlock(&p->lock);
      snprintf(xf__pool_error, sizeof xf__pool_error,
               "interrupted (options.interrupt) waiting for a pooled client");
      return XF_ECANCELED;
    }
    if (rc == ETIMEDOUT && p->nidle == 0 && p->made + p->opening == p->max) {
      p->timed_out++;
      pthread_mutex_unlock(&p->lock);
      snprintf(xf__pool_error, sizeof xf__pool_error,
               "no pooled client free within %d ms (max_connections %zu)", wait_ms, p->max);
      return XF_EBUSY;
    }
  }
  p->waited += waited;
  xf_client *c = NULL;
  if (p->nidle > 0) {
    c = p->idle[--p->nidle];
  } else { /* open outside the lock (lazy: no I/O) */
    /* Only a count is reserved, not a slot: other threads' opens finish in
     * any order, so a client takes the next slot once it exists and a failed
     * open has nothing to give back but its count. all[0..made) is always
     * made of open clients. */
    p->opening++;
    pthread_mutex_unlock(&p->lock);
    int rc = xf_client_open(&c, &p->opts);
    if (rc == XF_OK)
      c->driver = XF_DRIVER_POOL;
    pthread_mutex_lock(&p->lock);
    p->opening--;
    if (rc != XF_OK) {
      pthread_cond_signal(&p->freed); /* a waiter may open one in our place */
      pthread_mutex_unlock(&p->lock);
      snprintf(xf__pool_error, sizeof xf__pool_error, "opening a pooled client: %s",
               xf_strerror(rc));
      return rc;
    }
    p->all[p->made] = c;
    memset(&p->seen[p->made], 0, sizeof p->seen[p->made]);
    p->made++;
  }
  pthread_mutex_unlock(&p->lock);
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  *out = c;
  return XF_OK;
}

void xf__pool_checkin(xf_pool *p, xf_client *c) {
  pthread_mutex_lock(&p->lock);
  collect(p, c);
  p->idle[p->nidle++] = c;
  pthread_cond_signal(&p->freed);
  pthread_mutex_unlock(&p->lock);
}

int xf__pool_finish(xf_pool *p, xf_client *c, int rc) {
  if (rc != XF_OK)
    snprintf(xf__pool_error, sizeof xf__pool_error, "%s", c->errstr);
  else
    xf__pool_error[0] = '\0';
  xf__pool_checkin(p, c);
  return rc;
}

const char *xf_pool_errmsg(void) { return xf__pool_error; }

void xf_pool_stats(xf_pool *p, xf_pool_info *out) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  out->clients = p->totals;
  if (p->spares)
    xf__spares_add_stats(p->spares, &out->clients);
  out->clients.connections = 0;
  for (size_t i = 0; i < p->nidle; i++) { /* idle clients: no other thread writes them */
    xf_stats st;
    xf_client_stats(p->idle[i], &st);
    out->clients.connections += st.connections;
  }
  out->open = p->made;
  out->idle = p->nidle;
  out->waited = p->waited;
  out->timed_out = p->timed_out;
  pthread_mutex_unlock(&p->lock);
}
