/* The blocking drivers' side of Redis Cluster routing: route.c decides, this
 * file performs over one blocking connection per node. A command, or a
 * pipeline, goes in rounds: every command due is sent (one pipeline per
 * node), every reply is handed to the router, and what it answers is done
 * for all of them together before the next round: one map load, one backoff
 * (the longest asked for), so that a batch refused by a slot mid-failover
 * waits as long as one command would. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "client_io.h"
#include "reply.h"
#include "router.h"
#include "script.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* ---- connections ------------------------------------------------------------ */

/* The connection of node i (set up, not connected, on first use). */
static xf__conn *conn_of(xf_client *c, xf__router *r, int i) {
  if (i >= r->nconns) {
    int n = c->routes.nnodes > i ? c->routes.nnodes : i + 1;
    xf__conn *grown = realloc(r->conns, (size_t)n * sizeof *grown);
    if (!grown)
      return NULL;
    memset(grown + r->nconns, 0, (size_t)(n - r->nconns) * sizeof *grown);
    r->conns = grown;
    r->nconns = n;
  }
  xf__conn *k = &r->conns[i];
  if (!k->host &&
      xf__conn_init(k, c->routes.nodes[i].host, c->routes.nodes[i].port, NULL) != XF_OK)
    return NULL;
  return k;
}

/* A read on a replica needs READONLY on its connection, or the replica
 * answers MOVED. A connection opened while its node was a master (before a
 * failover) lacks it: it is sent now, and by every reconnect (conn.c). */
static int readonly(xf_client *c, xf__conn *k) {
  static const xf__cmd cmd = {.argc = 1, .argv = {"READONLY"}, .lens = {8}};
  if (k->readonly)
    return XF_OK;
  k->readonly = 1;
  if (!k->link)
    return XF_OK;
  xf__reply *reply;
  int rc = xf__conn_command(c, k, &cmd, 0, &reply);
  if (rc == XF_OK && reply->type == XF_REPLY_ERROR)
    rc = xf__fail(c, XF_EREDIS, "READONLY: %s", reply->str), k->readonly = 0;
  if (reply)
    xf__reply_free(reply);
  return rc;
}

/* ---- the map ------------------------------------------------------------------ */

/* CLUSTER SLOTS through k into the client's routes. */
static int load_map(xf_client *c, xf__conn *k) {
  xf__reply *reply;
  int rc = xf__conn_command(c, k, &xf__route_map_cmd, 0, &reply);
  if (rc != XF_OK)
    return rc;
  rc = xf__route_take_map(&c->routes, reply, k->host, xf__now_ms());
  xf__reply_free(reply);
  return rc;
}

/* Loads the map from the first node that answers: open connections first,
 * then the other nodes, then the seeds; never from node `avoid` (one that
 * just failed; -1 = none). */
static int refresh(xf_client *c, xf__router *r, int avoid) {
  int rc = XF_ECONNECT;
  xf__route_refreshing(&c->routes, xf__now_ms());
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < r->nconns; i++)
      if (i != avoid && r->conns[i].host && (pass == 1) == (r->conns[i].link == NULL) &&
          (rc = load_map(c, &r->conns[i])) == XF_OK)
        return XF_OK;
  for (int i = 0; i < c->nseeds; i++)
    if ((rc = load_map(c, &c->seeds[i])) == XF_OK) {
      xf__conn_forget(&c->seeds[i]); /* routed connections take over */
      return XF_OK;
    }
  return rc;
}

/* ---- rounds --------------------------------------------------------------------- */

/* Where each command of a run is. */
typedef struct pending {
  xf__hop h;
  xf__route_act act;
  int arg;
} pending;

/* The run's arrays: n of each (one command: on the stack). */
typedef struct run {
  size_t n;
  const xf__cmd *const *cmds;
  int *rcs;
  xf__reply **replies;
  pending *p;
  size_t *who;
  const xf__cmd **group;
  int *grcs;
  xf__reply **greplies;
} run;

/* What came back for command i (rc, reply) decides its next act. */
static void answered(xf_client *c, run *u, size_t i, int rc, xf__reply *reply) {
  pending *p = &u->p[i];
  int64_t now_ms = xf__now_ms();
  if (rc == XF_EIO || rc == XF_ECONNECT) {
    p->act = xf__route_io_error(&c->routes, u->cmds[i], &p->h, rc, now_ms, &p->arg);
  } else if (rc != XF_OK) {
    p->act = XF_ROUTE_FAIL, p->arg = rc;
  } else {
    p->act = xf__route_reply(&c->routes, u->cmds[i], &p->h, reply, now_ms, &p->arg);
  }
  if (p->act == XF_ROUTE_DONE) {
    u->rcs[i] = XF_OK;
    u->replies[i] = reply;
  } else if (reply) {
    xf__reply_free(reply);
  }
  if (p->act == XF_ROUTE_FAIL)
    u->rcs[i] = p->arg;
}

/* A SCRIPT LOAD on the node that answered NOSCRIPT, then the command again. */
static void load_script(xf_client *c, xf__router *r, run *u, size_t i) {
  pending *p = &u->p[i];
  xf__conn *k = conn_of(c, r, p->h.node);
  xf__cmd load;
  xf__reply *reply;
  xf__route_script(u->cmds[i], &load);
  int rc = k ? xf__conn_command(c, k, &load, 0, &reply) : XF_ENOMEM;
  if (rc == XF_OK)
    rc = xf__script_loaded(&c->rt, xf__route_script_of(u->cmds[i]), reply);
  p->act = rc == XF_OK ? XF_ROUTE_SEND : XF_ROUTE_FAIL; /* busy, loading: fail open */
  u->rcs[i] = p->arg = rc;
}

/* Sends every command due to node, in one pipeline (ASKING ones alone: the
 * ASKING must come right before its command). */
static void send_to(xf_client *c, xf__router *r, run *u, int node) {
  xf__conn *k = conn_of(c, r, node);
  size_t m = 0;
  int replica = 0;
  for (size_t i = 0; i < u->n; i++) {
    pending *p = &u->p[i];
    if (p->act != XF_ROUTE_SEND || p->h.node != node)
      continue;
    p->act = XF_ROUTE_DONE; /* answered() sets the real one */
    if (!k) {
      answered(c, u, i, xf__fail(c, XF_ENOMEM, "out of memory for a connection"), NULL);
    } else if (p->h.asking) {
      xf__reply *reply;
      int rc = xf__conn_command(c, k, u->cmds[i], 1, &reply);
      answered(c, u, i, rc, reply);
    } else {
      replica |= p->h.replica;
      u->who[m] = i;
      u->group[m++] = u->cmds[i];
    }
  }
  if (m == 0)
    return;
  int rc = replica ? readonly(c, k) : XF_OK;
  if (rc != XF_OK) {
    for (size_t j = 0; j < m; j++)
      answered(c, u, u->who[j], rc, NULL);
    return;
  }
  xf__conn_pipeline(c, k, m, u->group, u->grcs, u->greplies);
  for (size_t j = 0; j < m; j++)
    answered(c, u, u->who[j], u->grcs[j], u->greplies[j]);
}

/* One round: waits and map loads first, then the sends. 0 when every
 * command is done. */
static int round_trip(xf_client *c, xf__router *r, run *u) {
  int delay = -1, avoid = -1, reload = 0, due = 0;
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].act == XF_ROUTE_BACKOFF && u->p[i].arg > delay)
      delay = u->p[i].arg;
  if (delay >= 0)
    sleep_ms(delay);
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].act == XF_ROUTE_BACKOFF)
      u->p[i].act =
          xf__route_next(&c->routes, u->cmds[i], &u->p[i].h, xf__now_ms(), &u->p[i].arg);
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].act == XF_ROUTE_REFRESH)
      reload = 1, avoid = u->p[i].h.failed;
  if (reload)
    refresh(c, r, avoid); /* failed: the map we have routes them, or they fail */
  for (size_t i = 0; i < u->n; i++) {
    pending *p = &u->p[i];
    if (p->act == XF_ROUTE_REFRESH)
      p->act = xf__route_next(&c->routes, u->cmds[i], &p->h, xf__now_ms(), &p->arg);
    if (p->act == XF_ROUTE_LOAD_SCRIPT)
      load_script(c, r, u, i);
    if (p->act == XF_ROUTE_FAIL)
      u->rcs[i] = p->arg;
  }
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].act == XF_ROUTE_SEND) {
      send_to(c, r, u, u->p[i].h.node);
      due = 1;
    }
  for (size_t i = 0; i < u->n; i++)
    due |= u->p[i].act != XF_ROUTE_DONE && u->p[i].act != XF_ROUTE_FAIL;
  return due;
}

static int finish(xf_client *c, xf__router *r, run *u) {
  int64_t now_ms = xf__now_ms();
  memset(u->replies, 0, u->n * sizeof *u->replies);
  for (size_t i = 0; i < u->n; i++) {
    u->rcs[i] = XF_OK;
    u->p[i].act = xf__route_start(&c->routes, u->cmds[i], &u->p[i].h, now_ms, &u->p[i].arg);
  }
  while (round_trip(c, r, u))
    ;
  int all = XF_OK;
  for (size_t i = 0; i < u->n && all == XF_OK; i++)
    all = u->rcs[i];
  return all;
}

int xf__router_command(xf_client *c, xf__router *r, const xf__cmd *cmd, xf__reply **reply) {
  pending p;
  size_t who;
  const xf__cmd *group;
  int rc, grc;
  xf__reply *greply;
  run u = {1, &cmd, &rc, reply, &p, &who, &group, &grc, &greply};
  return finish(c, r, &u);
}

int xf__router_pipeline(xf_client *c, xf__router *r, size_t n, const xf__cmd *const *cmds,
                        int *rcs, xf__reply **replies) {
  run u = {n,
           cmds,
           rcs,
           replies,
           malloc(n * sizeof *u.p),
           malloc(n * sizeof *u.who),
           malloc(n * sizeof *u.group),
           malloc(n * sizeof *u.grcs),
           malloc(n * sizeof *u.greplies)};
  int all = XF_OK;
  if (u.p && u.who && u.group && u.grcs && u.greplies) {
    all = finish(c, r, &u);
  } else { /* every command alone */
    for (size_t i = 0; i < n; i++)
      if ((rcs[i] = xf__router_command(c, r, cmds[i], &replies[i])) != XF_OK &&
          all == XF_OK)
        all = rcs[i];
  }
  free(u.p), free(u.who), free(u.group), free(u.grcs), free(u.greplies);
  return all;
}

/* ---- life cycle ----------------------------------------------------------------- */

int xf__router_open(xf_client *c, xf__router **out) {
  *out = NULL;
  xf__router *r = calloc(1, sizeof *r);
  if (!r)
    return xf__fail(c, XF_ENOMEM, "out of memory for the cluster router");
  int rc = refresh(c, r, -1);
  if (rc != XF_OK) {
    xf__router_free(r);
    return rc;
  }
  *out = r;
  return XF_OK;
}

void xf__router_free(xf__router *r) {
  if (!r)
    return;
  for (int i = 0; i < r->nconns; i++)
    xf__conn_free(&r->conns[i]);
  free(r->conns);
  free(r);
}

void xf__router_forget(xf__router *r) {
  for (int i = 0; r && i < r->nconns; i++)
    xf__conn_forget(&r->conns[i]);
}

int xf__router_open_connections(const xf__router *r) {
  int n = 0;
  for (int i = 0; r && i < r->nconns; i++)
    n += r->conns[i].link != NULL;
  return n;
}
