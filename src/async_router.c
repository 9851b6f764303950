/* Where the event-loop driver's commands go: the one server, or, in a Redis
 * Cluster, the master of each command's key slot, with the decisions of
 * cluster.c (slots, the map, redirections, backoff) made on the loop: the
 * map is asked for with CLUSTER SLOTS on a connection like any command,
 * TRYAGAIN / CLUSTERDOWN wait on the handle's timer, never in a sleep.
 *
 * The mode (options.cluster AUTO) and the map are learnt by a probe: INFO
 * cluster, then CLUSTER SLOTS, on the first connection that answers. Calls
 * that need them wait parked until the probe is over.
 *
 * Why resending is safe: as in router.c, every command xfetch sends can be
 * sent twice (the read is read-only, the lease answers "won" again to its own
 * token, the write refuses a second application, release, delete and SCRIPT
 * LOAD are idempotent), and a MOVED / ASK / TRYAGAIN / CLUSTERDOWN reply means
 * the node did not run the command at all. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "router.h"
#include "script.h"

/* The probe's command in flight: orphaned (cn NULL) by xf_async_close. */
struct xf__aprobe {
  xf__aconn *cn;
};

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
  k->attempts = 0;
  k->script_reloaded = 0;
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

/* ---- the map -------------------------------------------------------------- */

/* Forgets which connection each node has: after the map changed. */
static int reset_nodes(xf_async *ac) {
  if (ac->map.nnodes > ac->node_conn_cap) {
    xf__aconn **grown = realloc(ac->node_conn, (size_t)ac->map.nnodes * sizeof *grown);
    if (!grown)
      return XF_ENOMEM;
    ac->node_conn = grown;
    ac->node_conn_cap = ac->map.nnodes;
  }
  for (int i = 0; i < ac->map.nnodes; i++)
    ac->node_conn[i] = NULL;
  return XF_OK;
}

static xf__aconn *node_conn(xf_async *ac, int node) {
  if (!ac->node_conn[node]) {
    const xf__cluster_node *n = &ac->map.nodes[node];
    ac->node_conn[node] = xf__aconn_at(ac, n->host, n->port);
  }
  return ac->node_conn[node];
}

/* A CLUSTER SLOTS reply from cn becomes the map. */
static int take_map(xf_async *ac, xf__aconn *cn, const redisReply *r) {
  xf_client *c = ac->core;
  if (r->type == REDIS_REPLY_ERROR)
    return xf__fail(c, XF_EPROTO, "CLUSTER SLOTS: %s", r->str);
  xf__cluster_map *fresh = malloc(sizeof *fresh);
  if (!fresh)
    return xf__fail(c, XF_ENOMEM, "out of memory for the cluster map");
  xf__cluster_map_init(fresh);
  char err[160] = "";
  int rc =
      xf__cluster_map_parse(fresh, r, cn->host ? cn->host : "127.0.0.1", err, sizeof err);
  if (rc == XF_OK && xf__cluster_map_covered(fresh) == 0)
    rc = XF_EPROTO, snprintf(err, sizeof err, "no slot is served");
  if (rc != XF_OK) {
    free(fresh);
    return xf__fail(c, rc, "CLUSTER SLOTS: %s", err);
  }
  xf__cluster_map_free(&ac->map);
  memcpy(&ac->map, fresh, sizeof *fresh);
  free(fresh);
  ac->mapped = 1;
  c->stats.map_refreshes++;
  return reset_nodes(ac);
}

/* ---- the probe: INFO cluster, CLUSTER SLOTS -------------------------------- */

enum { ASKED_AGAIN = 1, NONE_ASKED = 2 };

static void on_probe(redisAsyncContext *rac, void *reply, void *privdata);

/* Asks cn the probe's question: INFO cluster while the mode is unknown,
 * CLUSTER SLOTS in cluster mode. */
static int ask(xf_async *ac, xf__aconn *cn) {
  static const xf__cmd info = {.argc = 2, .argv = {"INFO", "cluster"}, .lens = {4, 7}};
  static const xf__cmd slots = {.argc = 2, .argv = {"CLUSTER", "SLOTS"}, .lens = {7, 5}};
  int rc = xf__aconn_open(cn);
  if (rc != XF_OK)
    return rc;
  struct xf__aprobe *p = malloc(sizeof *p);
  if (!p)
    return xf__fail(ac->core, XF_ENOMEM, "out of memory for the cluster probe");
  p->cn = cn;
  rc = xf__aconn_queue(cn, on_probe, p, ac->mode == XF__AMODE_UNKNOWN ? &info : &slots);
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
    if (ac->conns[i] != avoid && ac->conns[i]->connected && ac->conns[i]->usable) {
      ac->probe_at = i;
      break;
    }
  ac->refreshed_ms = xf__now_ms();
  return probe_next(ac, avoid, NONE_ASKED);
}

/* A map load unless one is on the wire or happened within
 * XF_ROUTE_REFRESH_MS (a burst of MOVED or failures loads it once). Returns
 * whether one is on the wire. */
static int refresh_soon(xf_async *ac, xf__aconn *avoid) {
  if (ac->probing)
    return 1;
  if (xf__now_ms() - ac->refreshed_ms < XF_ROUTE_REFRESH_MS)
    return 0;
  return probe_start(ac, avoid) == XF_OK;
}

/* What cn's answer to the probe says: XF_OK (the mode or the map is known),
 * ASKED_AGAIN (a cluster: now its map), or why another node must be asked. */
static int answer(xf_async *ac, xf__aconn *cn, const redisReply *r) {
  xf_client *c = ac->core;
  if (!r)
    return xf__fail(c, XF_EIO, "%s", c->conn_err);
  if (cn->setup_rc != XF_OK)
    return xf__fail(c, cn->setup_rc, "%s", c->conn_err);
  if (ac->mode == XF__AMODE_CLUSTER)
    return take_map(ac, cn, r);
  /* A server that refuses INFO (an ACL, a proxy) is taken as standalone. */
  int on = r->type == REDIS_REPLY_STRING ? xf__cluster_info_enabled(r->str, r->len) : 0;
  if (on < 0)
    return xf__fail(c, XF_EPROTO, "INFO cluster: no cluster_enabled field");
  if (!on) {
    ac->mode = XF__AMODE_STANDALONE;
    ac->main = cn;
    return XF_OK;
  }
  ac->mode = XF__AMODE_CLUSTER;
  if (c->db != 0)
    return xf__fail(c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d", c->db);
  int rc = ask(ac, cn);
  return rc == XF_OK ? ASKED_AGAIN : rc;
}

static void on_probe(redisAsyncContext *rac, void *reply, void *privdata) {
  xf__aconn *cn = ((struct xf__aprobe *)privdata)->cn;
  free(privdata);
  if (!cn) /* the handle was closed */
    return;
  xf_async *ac = cn->ac;
  ac->probe = NULL;
  xf__aconn_replied(cn, rac, reply);
  if (ac->closing)
    return;
  xf__async_enter(ac);
  int rc = answer(ac, cn, reply);
  if (rc != XF_OK && rc != ASKED_AGAIN && rc != XF_EINVAL)
    rc = probe_next(ac, cn, rc);
  if (rc != XF_OK && ac->mode == XF__AMODE_CLUSTER && ac->mapped && rc != XF_EINVAL)
    rc = XF_OK; /* a refresh failed: the map we have routes the calls */
  if (rc != ASKED_AGAIN && !(rc == XF_OK && ac->probe))
    unpark(ac, rc);
  xf__async_leave(ac);
}

/* ---- sending ------------------------------------------------------------------ */

int xf__aroute_send(xf__acall *k) {
  xf_async *ac = k->ac;
  if (ac->mode == XF__AMODE_STANDALONE)
    return xf__aseeds_send(k);
  xf_client *c = ac->core;
  if (ac->mode == XF__AMODE_CLUSTER && c->db != 0)
    return xf__fail(c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d", c->db);
  if (ac->mode == XF__AMODE_UNKNOWN || !ac->mapped) {
    int rc = ac->probing ? XF_OK : probe_start(ac, NULL);
    if (rc == XF_OK)
      park(ac, k);
    return rc;
  }
  xf__aconn *to = k->pin;
  int asking = k->pin_asking;
  k->pin = NULL;
  k->pin_asking = 0;
  if (!to && !k->f.cmd.key) { /* any node: one that is up */
    to = ac->conns[0];
    for (int i = 0; i < ac->nconns; i++)
      if (ac->conns[i]->connected && ac->conns[i]->usable) {
        to = ac->conns[i];
        break;
      }
  } else if (!to) {
    int slot = xf__cluster_keyslot(k->f.cmd.key, k->f.cmd.keylen);
    int node = xf__cluster_map_master(&ac->map, slot);
    if (node < 0 && refresh_soon(ac, NULL)) {
      park(ac, k);
      return XF_OK;
    }
    if (node < 0)
      return xf__fail(c, XF_EUNAVAILABLE, "slot %d has no master in the cluster map", slot);
    if (!(to = node_conn(ac, node)))
      return xf__fail(c, XF_ENOMEM, "out of memory for a node connection");
  }
  int rc = xf__aconn_send(k, to, asking);
  if (rc == XF_ECONNECT || rc == XF_EIO) /* down (its breaker): a failover? */
    refresh_soon(ac, to);
  return rc;
}

/* ---- replies ------------------------------------------------------------------ */

/* The node did not answer: another node's map may know its successor (a
 * failover). The same node again: the flow fails open. */
static int node_failed(xf_async *ac, xf__acall *k, xf__aconn *from) {
  if (!k->f.cmd.key || ++k->attempts > XF_CLUSTER_MAX_REDIRECTS)
    return 0;
  if (refresh_soon(ac, from)) {
    park(ac, k);
    return 1;
  }
  int node =
      xf__cluster_map_master(&ac->map, xf__cluster_keyslot(k->f.cmd.key, k->f.cmd.keylen));
  if (node < 0 || node_conn(ac, node) == from)
    return 0;
  xf__async_advance(k, XF_STEP_SEND);
  return 1;
}

/* NOSCRIPT from a node that lost its scripts (restarted, flushed, a promoted
 * replica: SCRIPT LOAD is not replicated): loaded on that very node, then the
 * command again, in one pipeline. 0 when it cannot be. */
static int reload_script(xf__acall *k, xf__aconn *from, int asked) {
  const xf__cmd *cmd = &k->f.cmd;
  int script = cmd->argc > 1 ? xf__script_by_sha(cmd->argv[1], cmd->lens[1]) : -1;
  if (script < 0 || k->script_reloaded)
    return 0;
  k->script_reloaded = 1;
  xf__cmd load;
  xf__script_load_cmd(&load, script, cmd->key, cmd->keylen);
  if (xf__aconn_open(from) != XF_OK || xf__aconn_queue_ignored(from, &load) != XF_OK)
    return 0;
  k->pin = from;
  k->pin_asking = asked;
  xf__async_advance(k, XF_STEP_SEND);
  return 1;
}

int xf__aroute_reply(xf__acall *k, int rc, const redisReply *r) {
  xf_async *ac = k->ac;
  xf_client *c = ac->core;
  xf__aconn *from = k->conn;
  int asked = k->asking;
  k->asking = 0;
  if (rc != XF_OK)
    return node_failed(ac, k, from);
  if (r->type != REDIS_REPLY_ERROR)
    return 0;
  if (xf__script_missing(r))
    return reload_script(k, from, asked);
  xf__cluster_redirect d;
  if (xf__cluster_redirect_parse(r->str, r->len, &d) != XF_OK || d.kind == XF_CLUSTER_REPLY)
    return 0; /* an error reply of the command itself: the flow's */
  int redirect = d.kind == XF_CLUSTER_MOVED || d.kind == XF_CLUSTER_ASK;
  int delay = xf__cluster_retry_delay_ms(d.kind, ++k->attempts);
  if (delay < 0 && redirect) {
    give_up(k, xf__fail(c, XF_EREDIS, "%s: still redirected after %d redirections: %s",
                        k->f.cmd.argv[0], XF_CLUSTER_MAX_REDIRECTS, r->str));
    return 1;
  }
  if (delay < 0) /* TRYAGAIN / CLUSTERDOWN for too long: the flow fails open */
    return 0;
  const char *host = d.host[0] ? d.host : from->host ? from->host : "127.0.0.1";
  if (redirect)
    c->stats.redirects++;
  if (d.kind == XF_CLUSTER_MOVED) {
    if (xf__cluster_map_set_slot(&ac->map, d.slot, host, d.port) < 0 ||
        reset_nodes(ac) != XF_OK) {
      give_up(k, xf__fail(c, XF_ENOMEM, "out of memory for the cluster map"));
      return 1;
    }
    refresh_soon(ac, NULL);              /* a resharding moves many slots: learn them all */
  } else if (d.kind == XF_CLUSTER_ASK) { /* the map stays: the slot is only migrating */
    if (!(k->pin = xf__aconn_at(ac, host, d.port))) {
      give_up(k, xf__fail(c, XF_ENOMEM, "out of memory for a node connection"));
      return 1;
    }
    k->pin_asking = 1;
  } else {
    if (d.kind == XF_CLUSTER_DOWN)
      refresh_soon(ac, NULL);
    k->resend = 1; /* the handle's timer sends it again */
    k->wake_ms = xf__now_ms() + delay;
    xf__aheap_push(ac, k);
    return 1;
  }
  xf__async_advance(k, XF_STEP_SEND);
  return 1;
}

/* ---- life cycle --------------------------------------------------------------- */

int xf__aroute_open(xf_async *ac, int connect_now) {
  xf_client *c = ac->core;
  xf__cluster_map_init(&ac->map);
  ac->refreshed_ms = INT64_MIN / 2;
  for (int i = 0; i < (c->unix_path ? 1 : c->nseeds); i++)
    if (!xf__aconn_at(ac, c->unix_path ? NULL : c->seeds[i].host,
                      c->unix_path ? 0 : c->seeds[i].port))
      return xf__fail(c, XF_ENOMEM, "out of memory for a connection");
  ac->main = ac->conns[0];
  ac->mode = c->cluster == XF_CLUSTER_ON                    ? XF__AMODE_CLUSTER
             : c->cluster == XF_CLUSTER_OFF || c->unix_path ? XF__AMODE_STANDALONE
                                                            : XF__AMODE_UNKNOWN;
  if (ac->mode == XF__AMODE_CLUSTER && c->db != 0)
    return xf__fail(c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d", c->db);
  if (!connect_now)
    return XF_OK;
  return ac->mode == XF__AMODE_STANDALONE ? xf__aseeds_open(ac) : probe_start(ac, NULL);
}

void xf__aroute_free(xf_async *ac) {
  if (ac->probe)
    ac->probe->cn = NULL;
  ac->probe = NULL;
  xf__cluster_map_free(&ac->map);
  free(ac->node_conn);
  ac->node_conn = NULL;
}
