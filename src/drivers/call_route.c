/* Where a sans-I/O call's SEND goes, for drivers outside C, as the client's
 * fleet says (fleet.h): the server (the seed in use), or in a Redis Cluster
 * its key's node. The driver only writes the call's bytes to the server
 * xf_call_target names: the fleet's question (INFO cluster, CLUSTER SLOTS)
 * goes out as the call's own SEND, and its answer is taken in by the fleet,
 * shared by every call of the client; READONLY, ASKING and a SCRIPT LOAD go
 * in the same bytes as the command, before it (its reply is the last one).
 * A backoff is the call's WAIT step. */
#include <stdlib.h>

#include "call.h"
#include "client_io.h"
#include "entry.h"
#include "reply.h"

/* Another call is asking for the map: look again after this long. */
#define MAP_POLL_MS 5

static xf__fleet *fleet_of(xf_call *call) { return call->f.c->fleet; }

/* The n commands, for host:port. A plain read (the flow's HMGET or GET) goes
 * as the read script: a call answered by hand has no clock estimate (a link
 * encodes the command again for its own: call_link.c). */
static int encode(xf_call *call, const char *host, int port, const xf__cmd *const *cmds,
                  int n) {
  xf__cmd script;
  call->request.len = 0;
  call->pre = 0;
  call->send_cmd = cmds[n - 1];
  for (int i = 0; i < n; i++) {
    const xf__cmd *cmd = cmds[i];
    if (i < n - 1)
      call->pre |= cmd == &xf__fleet_readonly_cmd ? PRE_READONLY
                   : cmd == &xf__fleet_asking_cmd ? PRE_ASKING
                                                  : PRE_LOAD;
    if (i == n - 1)
      cmd = xf__entry_read_as(cmd, NULL, 0, &script); /* no clock known yet */
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
  const char *host;
  int port;
  xf__fleet_seed_where(fleet_of(call), tries, &host, &port);
  return encode(call, host, port, &cmd, 1);
}

/* Asks the fleet's question of the call->tries-th server (never node avoid). */
static int probe(xf_call *call, int avoid, int64_t now_ms) {
  xf__fleet *f = fleet_of(call);
  const char *host;
  int port;
  call->probe = f->routes->mode == XF_ROUTE_UNKNOWN ? PROBE_MODE : PROBE_MAP;
  xf__fleet_ask_begin(f, avoid, now_ms);
  if (!xf__fleet_ask_where(f, call->tries, avoid, &host, &port))
    return xf__fail(call->f.c, XF_ECONNECT, "no cluster node left to ask for the map");
  const xf__cmd *cmd = xf__fleet_question(f);
  return encode(call, host, port, &cmd, 1);
}

static int backoff(xf_call *call, int ms, int64_t now_ms) {
  call->backoff = 1;
  call->wake_ms = now_ms + ms;
  return XF__CALL_BACKING_OFF;
}

/* Does what the fleet said for cmd. */
static int perform(xf_call *call, const xf__cmd *cmd, xf__fleet_do go, int64_t now_ms) {
  if (go == XF__FLEET_DONE)
    return XF__CALL_REPLY;
  if (go == XF__FLEET_FAIL)
    return call->trip.arg;
  if (go == XF__FLEET_WAIT)
    return backoff(call, call->trip.arg, now_ms);
  if (go == XF__FLEET_MAP) {
    call->tries = 0;
    return probe(call, call->trip.hop.failed, now_ms);
  }
  const xf__cmd *cmds[4];
  int n = 0;
  xf__cmd load;
  if (xf__fleet_load_script(&call->trip, cmd, &load))
    cmds[n++] = &load;
  if (call->trip.hop.replica) /* the driver's connection may lack it: always first */
    cmds[n++] = &xf__fleet_readonly_cmd;
  if (call->trip.hop.asking)
    cmds[n++] = &xf__fleet_asking_cmd;
  cmds[n++] = cmd;
  call->trip.act = XF_ROUTE_SEND;
  const char *host;
  int port;
  xf__fleet_node_where(fleet_of(call), call->trip.hop.node, &host, &port);
  return encode(call, host, port, cmds, n);
}

/* Routes cmd: the mode and the map first when they are not known. */
static int route(xf_call *call, const xf__cmd *cmd, int64_t now_ms) {
  xf__fleet *f = fleet_of(call);
  call->probe = PROBE_NONE;
  if (f->routes->mode == XF_ROUTE_STANDALONE && call->f.c->unix_path)
    return encode(call, NULL, 0, &cmd, 1);
  if (f->routes->mode == XF_ROUTE_STANDALONE)
    return to_seed(call, cmd, 0);
  int rc = xf__fleet_ready(f);
  if (rc == XF__FLEET_ASK && xf__fleet_ask_due(f, now_ms)) {
    call->tries = 0;
    return probe(call, -1, now_ms);
  }
  if (rc == XF__FLEET_ASK) /* another call's CLUSTER SLOTS is on the wire */
    return backoff(call, MAP_POLL_MS, now_ms);
  if (rc != XF_OK)
    return rc;
  xf__fleet_do go =
      call->trip.act == XF_ROUTE_DONE
          ? xf__fleet_start(f, &call->trip, cmd, now_ms)
          : xf__fleet_again(f, &call->trip, cmd, now_ms); /* a backoff, a map */
  return perform(call, cmd, go, now_ms);
}

int xf__call_route(xf_call *call, const xf__cmd *cmd, int64_t now_ms) {
  call->backoff = 0;
  call->tries = 0;
  return route(call, cmd, now_ms);
}

/* The answer to the fleet's question: r (freed), or the failure rc. */
static int probed(xf_call *call, const xf__cmd *cmd, xf__reply *r, int rc, int64_t now_ms) {
  xf__fleet *f = fleet_of(call);
  xf_client *c = call->f.c;
  int what = call->probe;
  call->probe = PROBE_NONE;
  int seed =
      what == PROBE_MODE && c->nseeds > 0 ? (f->server + call->tries) % c->nseeds : -1;
  rc =
      xf__fleet_answer_from(f, seed, call->host, call->send_cmd, r ? XF_OK : rc, r, now_ms);
  if (r)
    xf__reply_free(r);
  if (rc == XF_OK || rc == XF__FLEET_ASK) /* known; or a cluster: now its map */
    return route(call, cmd, now_ms);
  if (rc == XF_EINVAL)
    return rc;
  int candidates = what == PROBE_MODE ? c->nseeds : f->routes->nnodes;
  if (++call->tries < candidates) /* the next server */
    return probe(call, what == PROBE_MAP ? call->trip.hop.failed : -1, now_ms);
  if ((rc = xf__fleet_ask_failed(f, rc)) == XF_OK) /* a refresh failed: the map held */
    return route(call, cmd, now_ms);
  call->trip.act = XF_ROUTE_DONE;
  return rc;
}

int xf__call_route_reply(xf_call *call, const xf__cmd *cmd, xf__reply **r, int rc,
                         int64_t now_ms) {
  xf__fleet *f = fleet_of(call);
  xf_client *c = call->f.c;
  if (call->probe != PROBE_NONE) {
    xf__reply *reply = *r;
    *r = NULL;
    return probed(call, cmd, reply, rc, now_ms);
  }
  if (f->routes->mode != XF_ROUTE_CLUSTER) {
    /* A seed that cannot be reached: the next one, for this command and the
     * calls after it (the blocking client's walk). */
    if (!*r && rc == XF_ECONNECT && !c->unix_path && ++call->tries < c->nseeds) {
      xf__fleet_seed_took_at(f, 1);
      return to_seed(call, cmd, 0);
    }
    return *r ? XF__CALL_REPLY : rc;
  }
  xf__fleet_do go = xf__fleet_answered(f, &call->trip, cmd, *r ? XF_OK : rc, *r, now_ms);
  if (go != XF__FLEET_DONE && *r) {
    xf__reply_free(*r);
    *r = NULL;
  }
  return perform(call, cmd, go, now_ms);
}
