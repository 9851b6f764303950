/* The event-loop driver's corked sends (xf_async_cork, xf_async_uncork):
 * while corked, a call's first plain read of an entry (a GET, on a connection
 * whose clock estimate is fresh) waits; uncorked, those waiting on one
 * connection go as one MGET per slot, and each call takes its own part as if
 * its own GET had answered (async_conn.c's reply path). */
#include <stdint.h>
#include <stdlib.h>

#include "async.h"
#include "client_io.h"
#include "cluster.h"
#include "entry.h"
#include "flow_steps.h"

/* Most keys one MGET carries: bound how long it keeps Redis from others. */
#define MANY_MAX_KEYS 512

typedef struct amany {
  size_t n;
  xf__acall **calls;
  const char **keys;
  size_t *lens;
  xf__cmd cmd;
  xf__clock *clock; /* whose server answered: each call's */
  xf__track track;  /* whose tracking it came under: each call's */
} amany;

static void many_free(amany *m) {
  free(m->calls);
  free(m->keys);
  free(m->lens);
  free(m);
}

int xf__acork_take(xf__acall *k, xf__aconn *cn, int asking) {
  xf_async *ac = k->ac;
  if (!ac->corked || asking || k->again || !cn->connected || !cn->link.live ||
      k->f.state != XF__READ || !k->f.cmd.plain_out ||
      k->f.read_format != XF_ENTRY_STRING || k->f.tag_in_read || k->f.cmd.argc != 2 ||
      !xf__clock_fresh(cn->link.clock, xf__now_ms()))
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

/* The MGET's outcome: each call gets its own part as if its own GET had
 * answered, or a copy of an error reply (to follow as its own: MOVED,
 * TRYAGAIN...), or the connection's failure. */
static void on_many(xf__link *l, void *ud, int rc, xf__reply **reply) {
  amany *m = ud;
  xf__reply *r = rc == XF_OK ? *reply : NULL, **parts = NULL;
  if (r)
    *reply = NULL;
  if (r && r->type != XF_REPLY_ERROR) {
    if (!(parts = calloc(m->n, sizeof *parts)))
      rc = XF_ENOMEM, xf__reply_free(r);
    else if ((rc = xf__entry_split_read_many(&XF__ACONN_OF(l)->ac->core->rt, r, m->n,
                                             parts)) != XF_OK)
      free(parts), parts = NULL;
    r = NULL; /* taken */
  }
  for (size_t i = 0; i < m->n; i++) {
    xf__acall *k = m->calls[i];
    xf__reply *own = NULL;
    if (parts) {
      k->f.clock = m->clock;
      k->f.track = m->track; /* its read offers its value to the near cache */
      k->f.plain_read = 1;
      own = parts[i];
    } else if (r && !(own = xf__reply_copy(r))) {
      rc = XF_ENOMEM;
    }
    xf__aconn_reply(l, k, own ? XF_OK : rc != XF_OK ? rc : XF_EIO, &own);
    xf__reply_free(own);
  }
  xf__reply_free(r);
  free(parts);
  many_free(m);
}

/* Sends calls[0..n) (one connection, one slot) as one MGET. */
static int send_mget(xf__aconn *cn, xf__acall **calls, size_t n) {
  amany *m = calloc(1, sizeof *m);
  if (!m || !(m->calls = malloc(n * sizeof *m->calls)) ||
      !(m->keys = malloc(n * sizeof *m->keys)) ||
      !(m->lens = malloc(n * sizeof *m->lens))) {
    if (m)
      many_free(m);
    return XF_ENOMEM;
  }
  m->n = n;
  for (size_t i = 0; i < n; i++) {
    m->calls[i] = calls[i];
    m->keys[i] = calls[i]->f.cmd.argv[1];
    m->lens[i] = calls[i]->f.cmd.lens[1];
  }
  xf__entry_mget_cmd(&m->cmd, n, m->keys, m->lens);
  m->cmd.clock_out = &m->clock;
  if (cn->ac->core->near)
    m->cmd.track_out = &m->track;
  int rc = xf__link_submit(&cn->link, &m->cmd, 0, xf__now_ms(), on_many, m);
  if (rc != XF_OK)
    many_free(m);
  return rc;
}

static int slot_of(const xf__acall *k) {
  return k->ac->core->routes.mode == XF_ROUTE_STANDALONE
             ? -1
             : xf__cluster_keyslot(k->f.cmd.argv[1], k->f.cmd.lens[1]);
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

void xf_async_uncork(xf_async *ac) {
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
    for (e = s + 1; e < n && e - s < MANY_MAX_KEYS; e++)
      if (ac->cork[e]->conn != cn || slot_of(ac->cork[e]) != slot)
        break;
    if (e - s > 1 && send_mget(cn, group, e - s) == XF_OK) {
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
