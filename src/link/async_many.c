/* The event-loop driver's corked sends (xf_async_cork, xf_async_uncork):
 * while corked, a call's first plain read of an entry (a GET, on a connection
 * whose clock estimate is fresh) waits; uncorked, those waiting on one
 * connection go as one MGET per slot (many.h), and each call takes its own
 * part as if its own GET had answered (async_conn.c's reply path). */
#include <stdint.h>
#include <stdlib.h>

#include "async.h"
#include "client_io.h"
#include "many.h"

int xf__acork_take(xf__acall *k, xf__aconn *cn, int asking) {
  xf_async *ac = k->ac;
  if (!ac->corked || asking || k->again || !cn->connected || !cn->link.live ||
      !xf__many_fits(&k->f) || !xf__clock_fresh(cn->link.clock, xf__now_ms()))
    return 0;
  if (ac->ncorked == ac->corked_cap) {
    size_t cap = ac->corked_cap ? 2 * ac->corked_cap : 16;
    xf__acall **v = realloc(ac->cork, cap * sizeof *v);
    if (!v)
      return 0; /* it goes alone */
    ac->cork = v;
    ac->corked_cap = cap;
  }
  ac->cork[ac->ncorked++] = k;
  k->sent = 1;
  k->conn = cn;
  return 1;
}

/* The MGET's outcome for one call: as if its own GET had answered (many.h). */
static void many_reply(void *item, int rc, xf__reply **part) {
  xf__acall *k = item;
  xf__aconn_reply(&k->conn->link, k, rc, part);
}

static xf__flow *flow_of(void *item) { return &((xf__acall *)item)->f; }

/* Sends calls[0..n) (one connection, one slot) as one MGET. */
static int send_mget(xf__aconn *cn, xf__acall **calls, size_t n) {
  int rc;
  xf_client *c = cn->ac->core;
  xf__many_submit(&cn->link, &c->rt, c->near != NULL, n, (void *const *)calls, flow_of,
                  many_reply, xf__now_ms(), &rc);
  return rc;
}

static int slot_of(const xf__acall *k) {
  return xf__many_slot(&k->f, k->ac->core->routes.mode != XF_ROUTE_STANDALONE);
}

static int by_conn_and_slot(const void *pa, const void *pb) {
  const xf__acall *a = *(xf__acall *const *)pa, *b = *(xf__acall *const *)pb;
  uintptr_t ca = (uintptr_t)a->conn, cb = (uintptr_t)b->conn;
  if (ca != cb)
    return (ca > cb) - (ca < cb);
  int sa = slot_of(a), sb = slot_of(b);
  return (sa > sb) - (sa < sb);
}

void xf_async_cork(xf_async *ac) {
  if (ac && !ac->closing)
    ac->corked = 1;
}

void xf_async_set_autocork(xf_async *ac, int autocork) {
  if (ac)
    ac->autocork = autocork != 0;
}

void xf__acork_auto(xf_async *ac) {
  if (ac->autocork && ac->ncalls > 0 && !ac->corked && !ac->closing)
    ac->corked = ac->auto_corked = 1; /* rearm() arms the timer at 0 */
}

void xf_async_uncork(xf_async *ac) {
  if (ac)
    ac->auto_corked = 0;
  if (!ac || !ac->corked)
    return;
  ac->corked = 0;
  size_t n = ac->ncorked;
  ac->ncorked = 0;
  xf__async_enter(ac); /* a deferred send's error: fed on the next tick */
  if (n > 1)
    qsort(ac->cork, n, sizeof *ac->cork, by_conn_and_slot);
  for (size_t s = 0, e; s < n; s = e) {
    xf__acall **group = ac->cork + s;
    xf__aconn *cn = group[0]->conn;
    int slot = slot_of(group[0]);
    for (e = s + 1; e < n && e - s < XF__MANY_MAX_KEYS; e++)
      if (ac->cork[e]->conn != cn || slot_of(ac->cork[e]) != slot)
        break;
    /* cn went down meanwhile (lost, or the parent's in a fork's child):
     * each goes alone, opening it again. */
    if (e - s > 1 && cn->connected && cn->link.live &&
        send_mget(cn, group, e - s) == XF_OK) {
      xf__awire_rewatch(cn);
      continue;
    }
    for (size_t i = 0; i < e - s; i++) { /* one alone, or no memory for the MGET */
      xf__acall *k = group[i];
      k->sent = 0;
      int rc = xf__aconn_send(k, cn, 0);
      if (rc != XF_OK)
        xf__async_defer(ac, k, rc);
    }
  }
  xf__async_leave(ac);
}

void xf__acork_drop(xf_async *ac) {
  for (size_t i = 0; i < ac->ncorked; i++)
    ac->cork[i]->sent = 0;
  ac->ncorked = 0;
  ac->corked = 0;
  free(ac->cork);
  ac->cork = NULL;
}
