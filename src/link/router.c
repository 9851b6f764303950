/* The blocking drivers' side of the fleet (fleet.h decides, over route.c):
 * the seeds' and the nodes' blocking connections, and the rounds that carry
 * a command, or a pipeline, out. In a round every command due is sent (one
 * pipeline per node), every reply is handed to the fleet, and what it
 * answers is done for all of them together before the next round: one map
 * load, one backoff (the longest asked for), so that a batch refused by a
 * slot mid-failover waits as long as one command would. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "client_io.h"
#include "reply.h"
#include "router.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* ---- the fleet's connections ---------------------------------------------------- */

static void *open_conn(void *ud, const char *host, int port) {
  (void)ud;
  xf__conn *k = calloc(1, sizeof *k);
  if (k && xf__conn_init(k, host, port, NULL) != XF_OK) {
    xf__conn_free(k);
    free(k), k = NULL;
  }
  return k;
}

static void close_conn(void *ud, void *conn) {
  (void)ud;
  xf__conn_free(conn);
  free(conn);
}

static xf__link *link_of(void *conn) { return &((xf__conn *)conn)->engine; }
static int is_up(const void *conn) { return ((const xf__conn *)conn)->link != NULL; }
static void retire(void *conn) { xf__conn_forget(conn); }

static const xf__fleet_ops blocking_ops = {open_conn, close_conn, link_of,
                                           is_up,     is_up,      retire};

int xf__router_init(xf_client *c) {
  void **seeds = malloc((size_t)(c->nseeds ? c->nseeds : 1) * sizeof *seeds);
  c->fleet = calloc(1, sizeof *c->fleet);
  int rc = seeds && c->fleet ? XF_OK : XF_ENOMEM;
  for (int i = 0; rc == XF_OK && i < c->nseeds; i++)
    seeds[i] = &c->seeds[i];
  if (rc == XF_OK)
    rc = xf__fleet_init(c->fleet, c, &blocking_ops, c, seeds, c->nseeds);
  free(seeds);
  return rc;
}

void xf__router_free(xf_client *c) {
  if (!c->fleet)
    return;
  xf__fleet_free(c->fleet);
  free(c->fleet);
  c->fleet = NULL;
}

void xf__router_forget(xf_client *c) {
  for (int i = 0; i < c->nseeds; i++)
    xf__conn_forget(&c->seeds[i]);
  for (int i = 0; c->fleet && i < c->fleet->node_cap; i++)
    if (c->fleet->node[i])
      xf__conn_forget(c->fleet->node[i]);
}

xf__conn *xf__router_seed(const xf_client *c) { return xf__fleet_seed(c->fleet, 0); }

int xf__router_open_connections(const xf_client *c) {
  if (c->routes.mode == XF_ROUTE_CLUSTER)
    return xf__fleet_open_count(c->fleet);
  return c->nseeds > 0 && xf__router_seed(c)->link != NULL;
}

/* ---- the seeds and the question ------------------------------------------------- */

/* Connects to the seed in use, else the first of the others that answers. */
static int open_a_seed(xf_client *c) {
  int rc = XF_ECONNECT;
  for (int i = 0; i < c->fleet->nseeds && rc == XF_ECONNECT; i++) {
    xf__conn *k = xf__fleet_seed(c->fleet, i);
    if ((rc = xf__conn_open(c, k)) == XF_OK)
      xf__fleet_seed_took(c->fleet, k);
  }
  return rc;
}

/* Asks the fleet's question (the mode, then a cluster's map; or a map
 * refresh) until a connection answers; never of node avoid (-1 = none). */
static int ask(xf_client *c, int avoid) {
  xf__fleet *f = c->fleet;
  xf__fleet_ask_begin(f, avoid, xf__now_ms());
  int rc = XF__FLEET_ASK;
  xf__conn *k;
  while ((k = xf__fleet_ask_next(f))) {
    do {
      xf__reply *reply = NULL;
      const xf__cmd *q = xf__fleet_question(f);
      rc = xf__conn_command(c, k, q, 0, &reply);
      rc = xf__fleet_answer(f, k, q, rc, reply, xf__now_ms());
      if (reply)
        xf__reply_free(reply);
    } while (rc == XF__FLEET_ASK); /* a cluster: now its map */
    if (rc == XF_OK || rc == XF_EINVAL)
      return rc;
  }
  return xf__fleet_ask_failed(f, rc);
}

/* Standalone or cluster (and its map), found out on the first command. */
static int ready(xf_client *c) {
  if (c->mode_known)
    return XF_OK;
  int rc = xf__fleet_ready(c->fleet);
  if (rc == XF__FLEET_ASK)
    rc = ask(c, -1);
  c->mode_known = rc == XF_OK;
  return rc;
}

int xf__router_connect(xf_client *c) {
  return c->routes.mode == XF_ROUTE_STANDALONE ? open_a_seed(c) : ready(c);
}

/* Standalone: the seed in use cannot be reached (connect failed, or its
 * breaker is open: nothing was sent), so the first of the others that
 * answers becomes the one in use. */
static int next_seed(xf_client *c, int rc) {
  return rc == XF_ECONNECT && c->nseeds >= 2 && open_a_seed(c) == XF_OK;
}

/* ---- rounds --------------------------------------------------------------------- */

/* Where each command of a run is. */
typedef struct pending {
  xf__trip t;
  xf__fleet_do go;
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
  p->go = xf__fleet_answered(c->fleet, &p->t, u->cmds[i], rc, reply, xf__now_ms());
  if (p->go == XF__FLEET_DONE) {
    u->rcs[i] = XF_OK;
    u->replies[i] = reply;
  } else if (reply) {
    xf__reply_free(reply);
  }
  if (p->go == XF__FLEET_FAIL)
    u->rcs[i] = p->t.arg;
}

/* A SCRIPT LOAD on the node that answered NOSCRIPT, before the command. */
static void load_script(xf_client *c, run *u, size_t i) {
  pending *p = &u->p[i];
  xf__cmd load;
  if (!xf__fleet_load_script(&p->t, u->cmds[i], &load))
    return;
  xf__conn *k = xf__fleet_node(c->fleet, p->t.hop.node);
  xf__reply *reply = NULL;
  int rc = k ? xf__conn_command(c, k, &load, 0, &reply) : XF_ENOMEM;
  rc = xf__fleet_script_loaded(c->fleet, u->cmds[i], rc, reply);
  p->t.act = XF_ROUTE_SEND;
  if (rc != XF_OK) /* busy, loading: fail open */
    p->go = XF__FLEET_FAIL, u->rcs[i] = p->t.arg = rc;
}

/* READONLY on k, when a replica's read goes there and it lacks it. */
static int readonly(xf_client *c, xf__conn *k) {
  if (!xf__fleet_readonly(c->fleet, k))
    return XF_OK;
  xf__reply *reply;
  int rc = xf__conn_command(c, k, &xf__fleet_readonly_cmd, 0, &reply);
  if (rc == XF_OK && reply->type == XF_REPLY_ERROR) {
    rc = xf__fail(c, XF_EREDIS, "READONLY: %s", reply->str);
    xf__fleet_readonly_refused(c->fleet, k);
  }
  if (reply)
    xf__reply_free(reply);
  return rc;
}

/* Whether command p goes out in this round's pipelines (a SCRIPT LOAD due
 * first waits for the next round's). */
static int sendable(const pending *p) {
  return p->go == XF__FLEET_SEND && p->t.act != XF_ROUTE_LOAD_SCRIPT;
}

/* Sends every command due to node, in one pipeline (ASKING ones alone: the
 * ASKING must come right before its command). */
static void send_to(xf_client *c, run *u, int node) {
  xf__conn *k = xf__fleet_node(c->fleet, node);
  size_t m = 0;
  int replica = 0;
  for (size_t i = 0; i < u->n; i++) {
    pending *p = &u->p[i];
    if (!sendable(p) || p->t.hop.node != node)
      continue;
    p->go = XF__FLEET_DONE; /* answered() sets the real one */
    if (!k) {
      answered(c, u, i, xf__fail(c, XF_ENOMEM, "out of memory for a connection"), NULL);
    } else if (p->t.hop.asking) {
      xf__reply *reply;
      int rc = xf__conn_command(c, k, u->cmds[i], 1, &reply);
      answered(c, u, i, rc, reply);
    } else {
      replica |= p->t.hop.replica;
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
static int round_trip(xf_client *c, run *u) {
  xf__fleet *f = c->fleet;
  int delay = -1, avoid = -1, reload = 0, due = 0;
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].go == XF__FLEET_WAIT && u->p[i].t.arg > delay)
      delay = u->p[i].t.arg;
  if (delay >= 0)
    sleep_ms(delay);
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].go == XF__FLEET_WAIT)
      u->p[i].go = xf__fleet_again(f, &u->p[i].t, u->cmds[i], xf__now_ms());
  for (size_t i = 0; i < u->n; i++)
    if (u->p[i].go == XF__FLEET_MAP)
      reload = 1, avoid = u->p[i].t.hop.failed;
  if (reload)
    ask(c, avoid); /* failed: the map held routes them, or they fail */
  for (size_t i = 0; i < u->n; i++) {
    pending *p = &u->p[i];
    if (p->go == XF__FLEET_MAP)
      p->go = xf__fleet_again(f, &p->t, u->cmds[i], xf__now_ms());
    if (p->go == XF__FLEET_SEND)
      load_script(c, u, i);
    if (p->go == XF__FLEET_FAIL)
      u->rcs[i] = p->t.arg;
  }
  for (size_t i = 0; i < u->n; i++)
    if (sendable(&u->p[i])) {
      send_to(c, u, u->p[i].t.hop.node);
      due = 1;
    }
  for (size_t i = 0; i < u->n; i++)
    due |= u->p[i].go != XF__FLEET_DONE && u->p[i].go != XF__FLEET_FAIL;
  return due;
}

static int finish(xf_client *c, run *u) {
  int64_t now_ms = xf__now_ms();
  memset(u->replies, 0, u->n * sizeof *u->replies);
  for (size_t i = 0; i < u->n; i++) {
    u->rcs[i] = XF_OK;
    u->p[i].go = xf__fleet_start(c->fleet, &u->p[i].t, u->cmds[i], now_ms);
  }
  while (round_trip(c, u))
    ;
  int all = XF_OK;
  for (size_t i = 0; i < u->n && all == XF_OK; i++)
    all = u->rcs[i];
  return all;
}

static int cluster_command(xf_client *c, const xf__cmd *cmd, xf__reply **reply) {
  pending p;
  size_t who;
  const xf__cmd *group;
  int rc, grc;
  xf__reply *greply;
  run u = {1, &cmd, &rc, reply, &p, &who, &group, &grc, &greply};
  return finish(c, &u);
}

int xf__router_command(xf_client *c, const xf__cmd *cmd, xf__reply **reply) {
  int rc = ready(c);
  if (rc != XF_OK)
    return rc;
  if (c->routes.mode == XF_ROUTE_CLUSTER)
    return cluster_command(c, cmd, reply);
  rc = xf__conn_command(c, xf__router_seed(c), cmd, 0, reply);
  if (next_seed(c, rc))
    rc = xf__conn_command(c, xf__router_seed(c), cmd, 0, reply);
  return rc;
}

int xf__router_pipeline(xf_client *c, size_t n, const xf__cmd *const *cmds, int *rcs,
                        xf__reply **replies) {
  int all = ready(c);
  for (size_t i = 0; all != XF_OK && i < n; i++)
    rcs[i] = all;
  if (all != XF_OK)
    return all;
  if (c->routes.mode != XF_ROUTE_CLUSTER) {
    all = xf__conn_pipeline(c, xf__router_seed(c), n, cmds, rcs, replies);
    if (next_seed(c, all)) /* XF_ECONNECT: no command went */
      all = xf__conn_pipeline(c, xf__router_seed(c), n, cmds, rcs, replies);
    return all;
  }
  run u = {n,
           cmds,
           rcs,
           replies,
           malloc(n * sizeof *u.p),
           malloc(n * sizeof *u.who),
           malloc(n * sizeof *u.group),
           malloc(n * sizeof *u.grcs),
           malloc(n * sizeof *u.greplies)};
  if (u.p && u.who && u.group && u.grcs && u.greplies) {
    all = finish(c, &u);
  } else { /* every command alone */
    for (size_t i = 0; i < n; i++)
      if ((rcs[i] = cluster_command(c, cmds[i], &replies[i])) != XF_OK && all == XF_OK)
        all = rcs[i];
  }
  free(u.p), free(u.who), free(u.group), free(u.grcs), free(u.greplies);
  return all;
}
