/* Where the event-loop driver's commands go: the one server (async_seeds.c),
 * or in a Redis Cluster where route.c says, its decisions performed on the
 * loop: the mode and the map are asked for (INFO cluster, CLUSTER SLOTS) on a
 * connection like any command, backoffs wait on the handle's timer, never in
 * a sleep. Calls that need the mode or the map wait parked until the probe
 * asking for it is over. Why resending is safe: see route.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "client_io.h"
#include "reply.h"
#include "script.h"

/* The probe's command in flight: orphaned (cn NULL) by xf_async_close. */
struct xf__aprobe {
  xf__aconn *cn;
};

static xf__routes *routes(xf_async *ac) { return &ac->core->routes; }

/* ---- parked calls --------------------------------------------------------- */

static void park(xf_async *ac, xf__acall *k) {
  k->next_parked = NULL;
  if (ac->parked_tail)
    ac->parked_tail->next_parked = k;
  else
    ac->parked = k;
  ac->parked_tail = k;
}

/* Feeds the flow an outcome the router decided: its current command is over. */
static void give_up(xf__acall *k, int rc) {
  k->route_act = XF_ROUTE_DONE;
  xf__async_advance(k, xf__flow_reply(&k->f, rc, NULL, xf__now_ms()));
}

/* The probe is over: every parked call is sent (rc XF_OK) or gets rc. A
 * call's loader may run from here: calls it starts park on a new list. */
static void unpark(xf_async *ac, int rc) {
  xf__acall *k = ac->parked;
  ac->parked = ac->parked_tail = NULL;
  ac->probing = 0;
  while (k && !ac->closing) {
    xf__acall *next = k->next_parked;
    if (rc == XF_OK)
      xf__async_advance(k, XF_STEP_SEND);
    else
      give_up(k, rc);
    k = next;
  }
}

/* The connection of the router's node i; NULL when out of memory. */
static xf__aconn *conn_of(xf_async *ac, int i) {
  if (i >= ac->node_conn_cap) {
    int cap = routes(ac)->nnodes > i ? routes(ac)->nnodes : i + 1;
    xf__aconn **grown = realloc(ac->node_conn, (size_t)cap * sizeof *grown);
    if (!grown)
      return NULL;
    memset(grown + ac->node_conn_cap, 0, (size_t)(cap - ac->node_conn_cap) * sizeof *grown);
    ac->node_conn = grown;
    ac->node_conn_cap = cap;
  }
  if (!ac->node_conn[i])
    ac->node_conn[i] =
        xf__aconn_at(ac, routes(ac)->nodes[i].host, routes(ac)->nodes[i].port);
  return ac->node_conn[i];
}

/* ---- the probe: INFO cluster, CLUSTER SLOTS -------------------------------- */

enum { ASKED_AGAIN = 1, NONE_ASKED = 2 };

static void on_probe(xf__link *from, void *privdata, int rc, xf__reply **reply);

/* Asks cn the probe's question: INFO cluster while the mode is unknown,
 * CLUSTER SLOTS in cluster mode. */
static int ask(xf_async *ac, xf__aconn *cn) {
  int rc = xf__aconn_open(cn);
  if (rc != XF_OK)
    return rc;
  struct xf__aprobe *p = malloc(sizeof *p);
  if (!p)
    return xf__fail(ac->core, XF_ENOMEM, "out of memory for the cluster probe");
  p->cn = cn;
  int unknown = routes(ac)->mode == XF_ROUTE_UNKNOWN;
  rc = xf__aconn_queue(cn, on_probe, p, unknown ? &xf__route_info_cmd : &xf__route_map_cmd);
  if (rc != XF_OK) {
    free(p);
    return rc;
  }
  ac->probe = p;
  ac->probing = 1;
  return XF_OK;
}

/* Asks the next connection that takes the question (each at most once per
 * probe, never avoid). XF_OK, or the last failure (rc when none was tried). */
static int probe_next(xf_async *ac, xf__aconn *avoid, int rc) {
  while (ac->probe_tries < ac->nconns) {
    xf__aconn *cn = ac->conns[ac->probe_at];
    ac->probe_at = (ac->probe_at + 1) % ac->nconns;
    ac->probe_tries++;
    if (cn != avoid && (rc = ask(ac, cn)) == XF_OK)
      return XF_OK;
  }
  if (rc == NONE_ASKED)
    rc = xf__fail(ac->core, XF_ECONNECT, "no cluster node left to ask for the map");
  return rc;
}

/* Starts a probe on a connection that is up (else the seeds first). */
static int probe_start(xf_async *ac, xf__aconn *avoid) {
  ac->probe_tries = ac->probe_at = 0;
  for (int i = 0; i < ac->nconns; i++)
    if (ac->conns[i] != avoid && ac->conns[i]->connected && ac->conns[i]->link.live) {
      ac->probe_at = i;
      break;
    }
  xf__route_refreshing(routes(ac), xf__now_ms());
  return probe_next(ac, avoid, NONE_ASKED);
}

/* A map load unless one is on the wire or happened within
 * XF_ROUTE_REFRESH_MS. Returns whether one is on the wire. */
static int refresh_soon(xf_async *ac, xf__aconn *avoid) {
  if (ac->probing)
    return 1;
  if (!xf__route_refresh_due(routes(ac), xf__now_ms()))
    return 0;
  return probe_start(ac, avoid) == XF_OK;
}

/* What cn's answer to the probe says: XF_OK (the mode or the map is known),
 * ASKED_AGAIN (a cluster: now its map), or why another node must be asked. */
static int answer(xf_async *ac, xf__aconn *cn, int rc, const xf__reply *r) {
  xf_client *c = ac->core;
  if (rc != XF_OK)
    return xf__fail(c, rc, "%s", cn->link.why);
  if (routes(ac)->mode == XF_ROUTE_CLUSTER)
    return xf__route_take_map(routes(ac), r, cn->host, xf__now_ms());
  rc = xf__route_detect(routes(ac), r);
  if (rc != XF_OK)
    return rc;
  if (routes(ac)->mode == XF_ROUTE_STANDALONE) {
    ac->main = cn;
    return XF_OK;
  }
  rc = ask(ac, cn);
  return rc == XF_OK ? ASKED_AGAIN : rc;
}

static void on_probe(xf__link *from, void *privdata, int rc, xf__reply **reply) {
  (void)from;
  xf__aconn *cn = ((struct xf__aprobe *)privdata)->cn;
  free(privdata);
  if (!cn) /* the handle was closed */
    return;
  xf_async *ac = cn->ac;
  ac->probe = NULL;
  if (ac->closing)
    return;
  xf__async_enter(ac);
  rc = answer(ac, cn, rc, *reply);
  if (rc != XF_OK && rc != ASKED_AGAIN && rc != XF_EINVAL)
    rc = probe_next(ac, cn, rc);
  if (rc != XF_OK && routes(ac)->mode == XF_ROUTE_CLUSTER && routes(ac)->mapped &&
      rc != XF_EINVAL)
    rc = XF_OK; /* a refresh failed: the map we have routes the calls */
  if (rc != ASKED_AGAIN && !(rc == XF_OK && ac->probe))
    unpark(ac, rc);
  xf__async_leave(ac);
}

/* ---- performing the router's decisions -------------------------------------- */

/* A read on a replica needs READONLY on its connection, or the replica
 * answers MOVED (a connection opened while its node was a master lacks it);
 * async_conn.c sends it again on every reconnect. */
static int readonly(xf__aconn *cn) {
  static const xf__cmd cmd = {.argc = 1, .argv = {"READONLY"}, .lens = {8}};
  if (cn->link.flags & XF_SETUP_REPLICA)
    return XF_OK;
  cn->link.flags |= XF_SETUP_REPLICA;
  return cn->up && cn->link.live ? xf__aconn_queue_ignored(cn, &cmd) : XF_OK;
}

/* Does act for the call's command. XF_OK when it is on its way (sent,
 * parked, backing off), else the code its flow is to be fed. */
static int perform(xf__acall *k, xf__route_act act, int arg) {
  xf_async *ac = k->ac;
  const xf__cmd *cmd = &k->f.cmd;
  for (;;) {
    k->route_act = act;
    if (act == XF_ROUTE_FAIL || act == XF_ROUTE_DONE) {
      k->route_act = XF_ROUTE_DONE;
      return act == XF_ROUTE_FAIL ? arg : XF_OK;
    }
    if (act == XF_ROUTE_BACKOFF) { /* the handle's timer sends it again */
      k->resend = 1;
      k->wake_ms = xf__now_ms() + arg;
      xf__aheap_push(ac, k);
      return XF_OK;
    }
    if (act == XF_ROUTE_REFRESH) {
      if (refresh_soon(ac, k->hop.failed >= 0 ? conn_of(ac, k->hop.failed) : NULL)) {
        park(ac, k);
        return XF_OK;
      }
      act = xf__route_next(routes(ac), cmd, &k->hop, xf__now_ms(), &arg);
      continue;
    }
    xf__aconn *cn = conn_of(ac, k->hop.node);
    if (!cn)
      return xf__fail(ac->core, XF_ENOMEM, "out of memory for a node connection");
    int rc = XF_OK;
    if (act == XF_ROUTE_LOAD_SCRIPT) { /* then the command, in one pipeline */
      xf__cmd load;
      xf__route_script(cmd, &load);
      if ((rc = xf__aconn_open(cn)) == XF_OK)
        rc = xf__aconn_queue_ignored(cn, &load);
    } else if (k->hop.replica) {
      rc = readonly(cn);
    }
    if (rc == XF_OK)
      rc = xf__aconn_send(k, cn, k->hop.asking);
    if (rc == XF_OK) {
      k->route_act = XF_ROUTE_SEND;
      return XF_OK;
    }
    if (rc != XF_ECONNECT && rc != XF_EIO)
      return rc;
    act = xf__route_io_error(routes(ac), cmd, &k->hop, rc, xf__now_ms(), &arg);
  }
}

int xf__aroute_send(xf__acall *k) {
  xf_async *ac = k->ac;
  xf_client *c = ac->core;
  int mode = routes(ac)->mode;
  if (mode == XF_ROUTE_STANDALONE)
    return xf__aseeds_send(k);
  if (mode == XF_ROUTE_CLUSTER && c->db != 0)
    return xf__fail(c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d", c->db);
  if (mode == XF_ROUTE_UNKNOWN || !routes(ac)->mapped) {
    int rc = ac->probing ? XF_OK : probe_start(ac, NULL);
    if (rc == XF_OK)
      park(ac, k);
    return rc;
  }
  int arg = 0;
  xf__route_act act;
  if (k->route_act == XF_ROUTE_DONE) /* the flow's next command */
    act = xf__route_start(routes(ac), &k->f.cmd, &k->hop, xf__now_ms(), &arg);
  else if (k->route_act == XF_ROUTE_SEND) /* parked while the mode was probed */
    act = XF_ROUTE_SEND;
  else /* after a backoff or a map load */
    act = xf__route_next(routes(ac), &k->f.cmd, &k->hop, xf__now_ms(), &arg);
  return perform(k, act, arg);
}

int xf__aroute_reply(xf__acall *k, int rc, const xf__reply *r) {
  xf__routes *rt = routes(k->ac);
  int arg = 0;
  xf__route_act act =
      rc != XF_OK ? xf__route_io_error(rt, &k->f.cmd, &k->hop, rc, xf__now_ms(), &arg)
                  : xf__route_reply(rt, &k->f.cmd, &k->hop, r, xf__now_ms(), &arg);
  if (act == XF_ROUTE_DONE) {
    k->route_act = XF_ROUTE_DONE;
    return 0; /* the command's reply: the flow's */
  }
  if ((rc = perform(k, act, arg)) != XF_OK)
    give_up(k, rc);
  return 1;
}

/* ---- life cycle --------------------------------------------------------------- */

int xf__aroute_open(xf_async *ac, int connect_now) {
  xf_client *c = ac->core;
  for (int i = 0; i < (c->unix_path ? 1 : c->nseeds); i++)
    if (!xf__aconn_at(ac, c->unix_path ? NULL : c->seeds[i].host,
                      c->unix_path ? 0 : c->seeds[i].port))
      return xf__fail(c, XF_ENOMEM, "out of memory for a connection");
  ac->main = ac->conns[0];
  int mode = routes(ac)->mode;
  if (mode == XF_ROUTE_CLUSTER && c->db != 0)
    return xf__fail(c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d", c->db);
  if (!connect_now)
    return XF_OK;
  return mode == XF_ROUTE_STANDALONE ? xf__aseeds_open(ac) : probe_start(ac, NULL);
}

void xf__aroute_free(xf_async *ac) {
  if (ac->probe)
    ac->probe->cn = NULL;
  ac->probe = NULL;
  free(ac->node_conn);
  ac->node_conn = NULL;
  ac->node_conn_cap = 0;
}
