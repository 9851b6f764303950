/* Where the event-loop driver's commands go, as the fleet says (fleet.h):
 * the seed in use, or in a Redis Cluster its key's node, the fleet's
 * decisions performed on the loop. The mode and the map are asked for (INFO
 * cluster, CLUSTER SLOTS) on a connection like any command; calls that need
 * them wait parked until the answer; backoffs wait on the handle's timer,
 * never in a sleep.
 *
 * A connection comes up in the background: a dead seed (refused, or silent
 * until the connect timeout) is only known after calls were queued on it.
 * Those commands were never written, so they go to the next seed instead of
 * failing open; a connection that was up and dropped its commands does not
 * qualify (they may have run: the flow fails open as with one seed). */
#include <stdlib.h>

#include "async.h"
#include "client_io.h"

/* The question's command in flight: orphaned (cn NULL) by xf_async_close. */
struct xf__aprobe {
  xf__aconn *cn;
  const xf__cmd *q; /* the question */
};

/* ---- the fleet's connections ------------------------------------------------ */

static void *open_conn(void *ud, const char *host, int port) {
  return xf__aconn_at(ud, host, port);
}

static xf__link *link_of(void *conn) { return &((xf__aconn *)conn)->link; }

static int is_up(const void *conn) {
  const xf__aconn *cn = conn;
  return cn->up && cn->link.live;
}

static int is_connected(const void *conn) {
  const xf__aconn *cn = conn;
  return cn->connected && cn->link.live;
}

static const xf__fleet_ops async_ops = {open_conn, NULL,         link_of,
                                        is_up,     is_connected, NULL};

/* ---- the seeds (standalone) --------------------------------------------------- */

void xf__aseeds_down(xf__aconn *cn) { xf__fleet_seed_down(&cn->ac->fleet, cn); }

/* The seed in use, then the others in order: opens each (k NULL) or sends
 * k's command there until one is not XF_ECONNECT; that one is in use. */
static int walk(xf_async *ac, xf__acall *k) {
  xf__fleet *f = &ac->fleet;
  int rc = XF_ECONNECT;
  for (int i = 0; i < f->nseeds && rc == XF_ECONNECT; i++) {
    xf__aconn *cn = xf__fleet_seed(f, i);
    rc = k ? xf__aconn_send(k, cn, 0) : xf__aconn_open(cn);
    if (rc == XF_OK)
      xf__fleet_seed_took(f, cn);
  }
  return rc;
}

int xf__aseeds_resend(xf__acall *k, xf__aconn *cn) {
  xf__fleet *f = &k->ac->fleet;
  if (f->routes->mode != XF_ROUTE_STANDALONE || !cn->failed_connect ||
      xf__fleet_seed_index(f, cn) < 0 || ++k->attempts >= f->nseeds)
    return 0;
  return walk(k->ac, k) == XF_OK; /* from the seed after cn (xf__aseeds_down) */
}

/* ---- parked calls --------------------------------------------------------- */

static void park(xf_async *ac, xf__acall *k) {
  k->next_parked = NULL;
  if (ac->parked_tail)
    ac->parked_tail->next_parked = k;
  else
    ac->parked = k;
  ac->parked_tail = k;
}

/* Feeds the flow an outcome the fleet decided: its current command is over. */
static void give_up(xf__acall *k, int rc) {
  k->trip.act = XF_ROUTE_DONE;
  xf__async_advance(k, xf__flow_reply(&k->f, rc, NULL, xf__now_ms()));
}

/* The question is over: every parked call is sent (rc XF_OK) or gets rc. A
 * call's loader may run from here: calls it starts park on a new list. */
static void unpark(xf_async *ac, int rc) {
  xf__acall *k = ac->parked;
  ac->parked = ac->parked_tail = NULL;
  ac->fleet.asking = 0;
  while (k && !ac->closing) {
    xf__acall *next = k->next_parked;
    if (rc == XF_OK)
      xf__async_advance(k, XF_STEP_SEND);
    else
      give_up(k, rc);
    k = next;
  }
}

/* ---- the question: INFO cluster, CLUSTER SLOTS -------------------------------- */

static void on_answer(xf__link *from, void *privdata, int rc, xf__reply **reply);

/* Asks cn the fleet's question. */
static int ask(xf_async *ac, xf__aconn *cn) {
  int rc = xf__aconn_open(cn);
  if (rc != XF_OK)
    return rc;
  struct xf__aprobe *p = malloc(sizeof *p);
  if (!p)
    return xf__fail(ac->core, XF_ENOMEM, "out of memory for the cluster probe");
  p->cn = cn;
  p->q = xf__fleet_question(&ac->fleet);
  rc = xf__aconn_queue(cn, on_answer, p, p->q);
  if (rc != XF_OK) {
    free(p);
    return rc;
  }
  ac->probe = p;
  ac->fleet.asking = 1;
  return XF_OK;
}

/* Asks the next connection that takes the question. XF_OK, or the last
 * failure (rc when none was tried). */
static int ask_next(xf_async *ac, int rc) {
  xf__aconn *cn;
  while ((cn = xf__fleet_ask_next(&ac->fleet)))
    if ((rc = ask(ac, cn)) == XF_OK)
      return XF_OK;
  return rc;
}

/* Starts a question, of no connection of node avoid (-1 = none). */
static int ask_start(xf_async *ac, int avoid) {
  xf__fleet_ask_begin(&ac->fleet, avoid, xf__now_ms());
  return ask_next(ac, XF__FLEET_ASK);
}

static void on_answer(xf__link *from, void *privdata, int rc, xf__reply **reply) {
  (void)from;
  xf__aconn *cn = ((struct xf__aprobe *)privdata)->cn;
  const xf__cmd *q = ((struct xf__aprobe *)privdata)->q;
  free(privdata);
  if (!cn) /* the handle was closed */
    return;
  xf_async *ac = cn->ac;
  ac->probe = NULL;
  if (ac->closing)
    return;
  xf__async_enter(ac);
  if (rc == XF__LINK_AGAIN) /* asked again below, as after a failure */
    rc = XF_EIO;
  if (rc != XF_OK)
    xf__fail(ac->core, rc, "%s", cn->link.why);
  rc = xf__fleet_answer(&ac->fleet, cn, q, rc, *reply, xf__now_ms());
  if (rc == XF__FLEET_ASK) /* a cluster: now its map */
    rc = ask(ac, cn);
  if (rc != XF_OK && rc != XF_EINVAL)
    rc = ask_next(ac, rc);
  if (rc != XF_OK)
    unpark(ac, xf__fleet_ask_failed(&ac->fleet, rc));
  else if (!ac->probe) /* answered */
    unpark(ac, XF_OK);
  xf__async_leave(ac);
}

/* ---- performing the fleet's decisions --------------------------------------- */

/* Does what the fleet said for the call's command. XF_OK when it is on its
 * way (sent, parked, backing off), else the code its flow is to be fed. */
static int perform(xf__acall *k, xf__fleet_do go) {
  xf_async *ac = k->ac;
  xf__fleet *f = &ac->fleet;
  const xf__cmd *cmd = &k->f.cmd;
  for (;;) {
    if (go == XF__FLEET_FAIL)
      return k->trip.arg;
    if (go == XF__FLEET_DONE)
      return XF_OK;
    if (go == XF__FLEET_WAIT) { /* the handle's timer sends it again */
      k->resend = 1;
      k->wake_ms = xf__now_ms() + k->trip.arg;
      xf__aheap_push(ac, k);
      return XF_OK;
    }
    if (go == XF__FLEET_MAP) {
      if (f->asking || ask_start(ac, k->trip.hop.failed) == XF_OK) {
        park(ac, k);
        return XF_OK;
      }
      go = xf__fleet_again(f, &k->trip, cmd, xf__now_ms());
      continue;
    }
    xf__aconn *cn = xf__fleet_node(f, k->trip.hop.node);
    if (!cn)
      return xf__fail(ac->core, XF_ENOMEM, "out of memory for a node connection");
    int rc = XF_OK;
    xf__cmd load;
    if (xf__fleet_load_script(&k->trip, cmd,
                              &load)) { /* then the command, in one pipeline */
      if ((rc = xf__aconn_open(cn)) == XF_OK)
        rc = xf__aconn_queue_ignored(cn, &load);
    } else if (k->trip.hop.replica && xf__fleet_readonly(f, cn)) {
      rc = xf__aconn_queue_ignored(cn, &xf__fleet_readonly_cmd);
    }
    if (rc == XF_OK)
      rc = xf__aconn_send(k, cn, k->trip.hop.asking);
    if (rc == XF_OK) {
      k->trip.act = XF_ROUTE_SEND;
      return XF_OK;
    }
    if (rc != XF_ECONNECT && rc != XF_EIO)
      return rc;
    go = xf__fleet_answered(f, &k->trip, cmd, rc, NULL, xf__now_ms());
  }
}

int xf__aroute_send(xf__acall *k) {
  xf_async *ac = k->ac;
  xf__fleet *f = &ac->fleet;
  if (f->routes->mode == XF_ROUTE_STANDALONE)
    return walk(ac, k);
  int rc = xf__fleet_ready(f);
  if (rc == XF__FLEET_ASK) {
    rc = f->asking ? XF_OK : ask_start(ac, -1);
    if (rc == XF_OK)
      park(ac, k);
    return rc == XF_OK ? rc : xf__fleet_ask_failed(f, rc);
  }
  if (rc != XF_OK)
    return rc;
  xf__fleet_do go;
  if (k->trip.act == XF_ROUTE_DONE) /* the flow's next command */
    go = xf__fleet_start(f, &k->trip, &k->f.cmd, xf__now_ms());
  else if (k->trip.act == XF_ROUTE_SEND) /* parked while the mode was asked */
    go = XF__FLEET_SEND;
  else /* after a backoff or a map load */
    go = xf__fleet_again(f, &k->trip, &k->f.cmd, xf__now_ms());
  return perform(k, go);
}

int xf__aroute_reply(xf__acall *k, int rc, const xf__reply *r) {
  xf__fleet_do go =
      xf__fleet_answered(&k->ac->fleet, &k->trip, &k->f.cmd, rc, r, xf__now_ms());
  if (go == XF__FLEET_DONE)
    return 0; /* the command's reply: the flow's */
  if ((rc = perform(k, go)) != XF_OK)
    give_up(k, rc);
  return 1;
}

/* ---- a fork's child ------------------------------------------------------------- */

void xf__aroute_forget_question(xf_async *ac) {
  if (!ac->probe)
    return;
  ac->probe->cn = NULL; /* its completion frees it, as after xf_async_close */
  ac->probe = NULL;
  ac->fleet.asking = 0;
}

void xf__aroute_ask_again(xf_async *ac) {
  if (!ac->parked || ac->fleet.asking)
    return;
  int rc = ask_start(ac, -1);
  if (rc == XF_OK)
    return;
  rc = xf__fleet_ask_failed(&ac->fleet, rc);
  xf__acall *k = ac->parked;
  ac->parked = ac->parked_tail = NULL;
  for (; k; k = k->next_parked)
    xf__async_defer(ac, k, rc); /* no callback inside the call that noticed the fork */
}

/* ---- life cycle --------------------------------------------------------------- */

int xf__aroute_open(xf_async *ac, int connect_now) {
  xf_client *c = ac->core;
  int n = c->unix_path ? 1 : c->nseeds;
  void **seeds = calloc((size_t)n, sizeof *seeds);
  for (int i = 0; seeds && i < n; i++)
    if (!(seeds[i] = xf__aconn_at(ac, c->unix_path ? NULL : c->seeds[i].host,
                                  c->unix_path ? 0 : c->seeds[i].port)))
      free(seeds), seeds = NULL;
  int rc = seeds ? xf__fleet_init(&ac->fleet, c, &async_ops, ac, seeds, n) : XF_ENOMEM;
  free(seeds);
  if (rc != XF_OK)
    return xf__fail(c, XF_ENOMEM, "out of memory for a connection");
  if ((rc = xf__fleet_ready(&ac->fleet)) == XF_EINVAL)
    return rc;
  if (!connect_now)
    return XF_OK;
  if (c->routes.mode == XF_ROUTE_STANDALONE)
    return walk(ac, NULL);
  rc = ask_start(ac, -1);
  return rc == XF_OK ? rc : xf__fleet_ask_failed(&ac->fleet, rc);
}

void xf__aroute_free(xf_async *ac) {
  if (ac->probe)
    ac->probe->cn = NULL;
  ac->probe = NULL;
  xf__fleet_free(&ac->fleet);
}
