/* The clients a share's blocking-client refreshes write through (refresh.h):
 * a few idle ones kept per share, each opened with a refresh's options (the
 * calling client's, per-call fields cleared), taken by the next refresh
 * opened alike, so a hot key refreshed every ttl costs no connect (no TLS
 * handshake). Their counters are summed into the share's refresh stats. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client_io.h"
#include "refresh.h"

struct xf__idle_clients {
  pthread_mutex_t mu;
  xf_client *idle[XF_REFRESH_IDLE]; /* [0, n): the oldest first */
  size_t n;
  int closed;
  xf_stats totals; /* the clients' counters, as of their last give */
};

xf__idle_clients *xf__idle_new(void) {
  xf__idle_clients *ic = calloc(1, sizeof *ic);
  if (ic)
    pthread_mutex_init(&ic->mu, NULL);
  return ic;
}

void xf__idle_close(xf__idle_clients *ic) {
  if (!ic)
    return;
  pthread_mutex_lock(&ic->mu);
  ic->closed = 1;
  size_t n = ic->n;
  xf_client *idle[XF_REFRESH_IDLE];
  memcpy(idle, ic->idle, sizeof idle);
  ic->n = 0;
  pthread_mutex_unlock(&ic->mu);
  for (size_t i = 0; i < n; i++)
    xf_client_close(idle[i]);
}

void xf__idle_free(xf__idle_clients *ic) {
  if (!ic)
    return;
  xf__idle_close(ic);
  pthread_mutex_destroy(&ic->mu);
  free(ic);
}

static int same_string(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

/* Whether a client opened with a would be one opened with b. */
static int same_options(const xf_options *a, const xf_options *b) {
  const xf_tls_options *ta = &a->tls, *tb = &b->tls;
  return same_string(a->host, b->host) && same_string(a->unix_path, b->unix_path) &&
         same_string(a->username, b->username) && same_string(a->password, b->password) &&
         same_string(a->key_prefix, b->key_prefix) && a->port == b->port &&
         a->db == b->db && a->connect_timeout_ms == b->connect_timeout_ms &&
         a->command_timeout_ms == b->command_timeout_ms && a->seed == b->seed &&
         a->max_key_len == b->max_key_len && a->max_value_len == b->max_value_len &&
         a->breaker_ms == b->breaker_ms && a->lazy_connect == b->lazy_connect &&
         a->share == b->share && a->tombstone_ms == b->tombstone_ms &&
         a->cluster == b->cluster && a->read_from_replicas == b->read_from_replicas &&
         a->interrupt == b->interrupt && a->interrupt_ud == b->interrupt_ud &&
         a->on_event == b->on_event && a->on_event_ud == b->on_event_ud &&
         a->disabled == b->disabled && a->entry_format == b->entry_format &&
         a->refresh_executor == b->refresh_executor &&
         a->refresh_executor_ud == b->refresh_executor_ud && ta->enable == tb->enable &&
         ta->no_verify == tb->no_verify && same_string(ta->ca_file, tb->ca_file) &&
         same_string(ta->ca_dir, tb->ca_dir) && same_string(ta->cert_file, tb->cert_file) &&
         same_string(ta->key_file, tb->key_file) &&
         same_string(ta->server_name, tb->server_name);
}

xf_client *xf__idle_take(xf__idle_clients *ic, const xf_options *o, xf_stats *seen) {
  memset(seen, 0, sizeof *seen);
  xf_client *c = NULL;
  if (ic) {
    pthread_mutex_lock(&ic->mu);
    for (size_t i = ic->n; i-- > 0;) /* the newest first: the likeliest warm */
      if (same_options(ic->idle[i]->opened_with, o)) {
        c = ic->idle[i];
        memmove(&ic->idle[i], &ic->idle[i + 1], (ic->n - i - 1) * sizeof c);
        ic->n--;
        break;
      }
    pthread_mutex_unlock(&ic->mu);
  }
  if (c)
    xf_client_stats(c, seen);
  else if (xf_client_open(&c, o) != XF_OK)
    c = NULL;
  return c;
}

void xf__idle_give(xf__idle_clients *ic, xf_client *c, const xf_stats *seen) {
  xf_client *out = c; /* closed, unless kept */
  if (ic) {
    xf_stats now;
    xf_client_stats(c, &now);
    pthread_mutex_lock(&ic->mu);
    uint64_t *sum = (uint64_t *)&ic->totals;
    const uint64_t *a = (const uint64_t *)&now, *b = (const uint64_t *)seen;
    for (size_t i = 0; i < sizeof now / sizeof(uint64_t); i++)
      sum[i] += a[i] - b[i];
    ic->totals.connections = 0; /* a gauge: not summed */
    if (!ic->closed) {
      if (ic->n == XF_REFRESH_IDLE) { /* full: the oldest goes */
        out = ic->idle[0];
        memmove(&ic->idle[0], &ic->idle[1], (ic->n - 1) * sizeof c);
        ic->n--;
      } else {
        out = NULL;
      }
      ic->idle[ic->n++] = c;
    }
    pthread_mutex_unlock(&ic->mu);
  }
  xf_client_close(out);
}

void xf__idle_stats(xf__idle_clients *ic, xf_stats *out) {
  memset(out, 0, sizeof *out);
  if (!ic)
    return;
  pthread_mutex_lock(&ic->mu);
  *out = ic->totals;
  for (size_t i = 0; i < ic->n; i++) { /* idle: no other thread writes them */
    xf_stats st;
    xf_client_stats(ic->idle[i], &st);
    out->connections += st.connections;
  }
  pthread_mutex_unlock(&ic->mu);
}
