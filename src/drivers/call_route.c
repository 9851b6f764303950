/* Where a sans-I/O call's SEND goes, for drivers outside C: the server (the
 * seed in use), or in a Redis Cluster the node route.c picks. The driver
 * only writes the call's bytes to the connection xf_call_target names: what
 * the router needs first (INFO cluster, CLUSTER SLOTS) goes out as the call's
 * own SEND, and its answer is taken in by the client's router, shared by
 * every call of the client; READONLY, ASKING and a SCRIPT LOAD go in the
 * same bytes as the command, before it (its reply is the last one). A
 * backoff is the call's WAIT step. */
#include <stdlib.h>

#include "call.h"
#include "client_io.h"
#include "entry.h"
#include "fleet.h"
#include "reply.h"
#include "script.h"

/* Another call is asking for the map: look again after this long. */
#define MAP_POLL_MS 5

static const xf__cmd readonly_cmd = {.argc = 1, .argv = {"READONLY"}, .lens = {8}};
static const xf__cmd asking_cmd = {.argc = 1, .argv = {"ASKING"}, .lens = {6}};

static xf__routes *routes_of(xf_call *call) { return &call->f.c->routes; }

/* The n commands, for host:port. A plain read (the flow's HMGET or GET) goes
 * as the read script until the driver names a connection whose estimate of
 * its server's clock is fresh (xf_call_use_conn: call_conn.c). */
static int encode(xf_call *call, const char *host, int port, const xf__cmd *const *cmds,
                  int n) {
  xf__cmd script;
  call->request.len = 0;
  call->conn = NULL; /* said again for each SEND */
  call->pre = 0;
  call->send_cmd = cmds[n - 1];
  for (int i = 0; i < n; i++) {
    const xf__cmd *cmd = cmds[i];
    if (i < n - 1)
      call->pre |= cmd == &readonly_cmd ? PRE_READONLY
                   : cmd == &asking_cmd ? PRE_ASKING
                                        : PRE_LOAD;
    if (i == n - 1) {
      call->cmd_at = call->request.len;
      cmd = xf__entry_read_as(cmd, NULL, 0, &script); /* no clock known yet */
    }
    if (xf__resp_append_cmd(&call->request, cmd) != 0)
      return xf__fail(call->f.c, XF_ENOMEM, "out of memory for a %d-argument command",
                      cmd->argc);
  }
  call->host = host;
  call->port = port;
  call->replies = n;
  return XF__CALL_SENDING;
}

/* The seed in use (standalone), or the one tries seeds after it. */
static int to_seed(xf_call *call, const xf__cmd *cmd, int tries) {
  xf_client *c = call->f.c;
  const xf__conn *seed = &c->seeds[(c->fleet->server + tries) % c->nseeds];
  return encode(call, seed->host, seed->port, &cmd, 1);
}

/* Asks what the router needs: the mode (the seeds, in turn), or the map
 * (its nodes, seeds first, in turn; never node avoid). */
static int probe(xf_call *call, int what, int avoid, int64_t now_ms) {
  xf__routes *r = routes_of(call);
  call->probe = what;
  if (what == PROBE_MODE)
    return to_seed(call, &xf__route_info_cmd, call->tries);
  xf__route_refreshing(r, now_ms);
  int node = xf__route_map_node(r, call->tries, avoid);
  if (node < 0)
    return xf__fail(call->f.c, XF_ECONNECT, "no cluster node left to ask for the map");
  const xf__cmd *cmd = &xf__route_map_cmd;
  return encode(call, r->nodes[node].host, r->nodes[node].port, &cmd, 1);
}

static int backoff(xf_call *call, int ms, int64_t now_ms) {
  call->backoff = 1;
  call->wake_ms = now_ms + ms;
  return XF__CALL_BACKING_OFF;
}

/* Does the router's act for cmd. */
static int perform(xf_call *call, const xf__cmd *cmd, xf__route_act act, int arg,
                   int64_t now_ms) {
  xf__routes *r = routes_of(call);
  for (;;) {
    call->route_act = act;
    if (act == XF_ROUTE_DONE || act == XF_ROUTE_FAIL) {
      call->route_act = XF_ROUTE_DONE;
      return act == XF_ROUTE_DONE ? XF__CALL_REPLY : arg;
    }
    if (act == XF_ROUTE_BACKOFF)
      return backoff(call, arg, now_ms);
    if (act == XF_ROUTE_REFRESH && xf__route_refresh_due(r, now_ms)) {
      call->tries = 0;
      return probe(call, PROBE_MAP, call->hop.failed, now_ms);
    }
    if (act == XF_ROUTE_REFRESH) {
      act = xf__route_next(r, cmd, &call->hop, now_ms, &arg);
      continue;
    }
    const xf__cmd *cmds[4];
    int n = 0;
    xf__cmd load;
    if (act == XF_ROUTE_LOAD_SCRIPT) {
      xf__route_script(cmd, &load);
      cmds[n++] = &load;
    }
    if (call->hop.replica) /* the driver's connection may lack it: always first */
      cmds[n++] = &readonly_cmd;
    if (call->hop.asking)
      cmds[n++] = &asking_cmd;
    cmds[n++] = cmd;
    call->route_act = XF_ROUTE_SEND;
    const xf__route_node *node = &r->nodes[call->hop.node];
    return encode(call, node->host, node->port, cmds, n);
  }
}

/* Routes cmd once the mode is known. */
static int route(xf_call *call, const xf__cmd *cmd, int64_t now_ms) {
  xf__routes *r = routes_of(call);
  xf_client *c = call->f.c;
  call->probe = PROBE_NONE;
  if (r->mode == XF_ROUTE_STANDALONE && c->unix_path)
    return encode(call, NULL, 0, &cmd, 1);
  if (r->mode == XF_ROUTE_STANDALONE)
    return to_seed(call, cmd, 0);
  if (r->mode == XF_ROUTE_UNKNOWN)
    return probe(call, PROBE_MODE, -1, now_ms);
  if (c->db != 0)
    return xf__fail(c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d", c->db);
  if (!r->mapped && xf__route_refresh_due(r, now_ms))
    return probe(call, PROBE_MAP, -1, now_ms);
  if (!r->mapped) /* another call's CLUSTER SLOTS is on the wire */
    return backoff(call, MAP_POLL_MS, now_ms);
  int arg = 0;
  xf__route_act act =
      call->route_act == XF_ROUTE_DONE
          ? xf__route_start(r, cmd, &call->hop, now_ms, &arg)
          : xf__route_next(r, cmd, &call->hop, now_ms, &arg); /* a backoff, a map */
  return perform(call, cmd, act, arg, now_ms);
}

int xf__call_route(xf_call *call, const xf__cmd *cmd, int64_t now_ms) {
  call->backoff = 0;
  call->tries = 0;
  return route(call, cmd, now_ms);
}

/* The answer to a probe: r (freed), or the failure rc. */
static int probed(xf_call *call, const xf__cmd *cmd, xf__reply *r, int rc, int64_t now_ms) {
  xf__routes *r_ = routes_of(call);
  xf_client *c = call->f.c;
  int what = call->probe;
  call->probe = PROBE_NONE;
  if (r) {
    rc = what == PROBE_MODE ? xf__route_detect(r_, r)
                            : xf__route_take_map(r_, r, call->host, now_ms);
    xf__reply_free(r);
    if (rc == XF_OK && what == PROBE_MODE && c->nseeds > 0)
      c->fleet->server = (c->fleet->server + call->tries) % c->nseeds; /* it answered */
    if (rc == XF_OK)
      return route(call, cmd, now_ms);
    if (rc == XF_EINVAL)
      return rc;
  }
  int candidates = what == PROBE_MODE ? c->nseeds : r_->nnodes;
  if (++call->tries < candidates) /* the next server */
    return probe(call, what, what == PROBE_MAP ? call->hop.failed : -1, now_ms);
  if (what == PROBE_MAP && r_->mapped) /* a refresh failed: the map we have */
    return route(call, cmd, now_ms);
  call->route_act = XF_ROUTE_DONE;
  return rc;
}

int xf__call_route_reply(xf_call *call, const xf__cmd *cmd, xf__reply **r, int rc,
                         int64_t now_ms) {
  xf__routes *rt = routes_of(call);
  xf_client *c = call->f.c;
  if (call->probe != PROBE_NONE) {
    xf__reply *reply = *r;
    *r = NULL;
    return probed(call, cmd, reply, rc, now_ms);
  }
  if (rt->mode != XF_ROUTE_CLUSTER) {
    /* A seed that cannot be reached: the next one, for this command and the
     * calls after it (the blocking client's walk). */
    if (!*r && rc == XF_ECONNECT && !c->unix_path && ++call->tries < c->nseeds) {
      c->fleet->server = (c->fleet->server + 1) % c->nseeds;
      return to_seed(call, cmd, 0);
    }
    return *r ? XF__CALL_REPLY : rc;
  }
  int arg = 0;
  xf__route_act act = *r ? xf__route_reply(rt, cmd, &call->hop, *r, now_ms, &arg)
                         : xf__route_io_error(rt, cmd, &call->hop, rc, now_ms, &arg);
  if (act != XF_ROUTE_DONE && *r) {
    xf__reply_free(*r);
    *r = NULL;
  }
  return perform(call, cmd, act, arg, now_ms);
}
