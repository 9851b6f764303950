/* The fleet (fleet.h): route.c decides, this file keeps what every driver
 * needs to carry the decisions out (the seeds, the nodes' connections, the
 * question and whom to ask it) and turns each decision into what the driver
 * does next. Why resending is safe: see route.c. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "conn.h"
#include "fleet.h"
#include "script.h"

const xf__cmd xf__fleet_readonly_cmd = {.argc = 1, .argv = {"READONLY"}, .lens = {8}};
const xf__cmd xf__fleet_asking_cmd = {.argc = 1, .argv = {"ASKING"}, .lens = {6}};

int xf__fleet_init(xf__fleet *f, xf_client *c, const xf__fleet_ops *ops, void *ud,
                   void *const *seeds, int nseeds) {
  memset(f, 0, sizeof *f);
  f->c = c;
  f->routes = &c->routes;
  f->ops = ops;
  f->ud = ud;
  f->ask_avoid = -1;
  f->nseeds = nseeds;
  if (nseeds > 0) {
    if (!(f->seeds = malloc((size_t)nseeds * sizeof *f->seeds)))
      return XF_ENOMEM;
    memcpy(f->seeds, seeds, (size_t)nseeds * sizeof *f->seeds);
  }
  return XF_OK;
}

void xf__fleet_free(xf__fleet *f) {
  for (int i = 0; f->ops && f->ops->close && i < f->node_cap; i++)
    if (f->node[i])
      f->ops->close(f->ud, f->node[i]);
  free(f->node);
  free(f->seeds);
  f->node = f->seeds = NULL;
  f->node_cap = f->nseeds = 0;
}

/* ---- where commands go ------------------------------------------------------- */

int xf__fleet_ready(const xf__fleet *f) {
  const xf__routes *r = f->routes;
  if (r->mode == XF_ROUTE_CLUSTER && f->c->db != 0)
    return xf__fail(f->c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d",
                    f->c->db);
  if (r->mode == XF_ROUTE_UNKNOWN || (r->mode == XF_ROUTE_CLUSTER && !r->mapped))
    return XF__FLEET_ASK;
  return XF_OK;
}

void *xf__fleet_seed(const xf__fleet *f, int i) {
  return f->seeds[(f->server + i) % f->nseeds];
}

void xf__fleet_seed_where(const xf__fleet *f, int i, const char **host, int *port) {
  const xf__conn *seed = &f->c->seeds[(f->server + i) % f->c->nseeds];
  *host = seed->host;
  *port = seed->port;
}

int xf__fleet_seed_index(const xf__fleet *f, const void *conn) {
  for (int i = 0; i < f->nseeds; i++)
    if (f->seeds[i] == conn)
      return i;
  return -1;
}

void xf__fleet_seed_took(xf__fleet *f, const void *conn) {
  int at = xf__fleet_seed_index(f, conn);
  if (at >= 0)
    f->server = at;
}

void xf__fleet_seed_took_at(xf__fleet *f, int i) {
  if (f->nseeds > 0)
    f->server = (f->server + i) % f->nseeds;
}

void xf__fleet_seed_down(xf__fleet *f, const void *conn) {
  if (f->routes->mode == XF_ROUTE_STANDALONE && xf__fleet_seed_index(f, conn) == f->server)
    f->server = (f->server + 1) % f->nseeds;
}

void *xf__fleet_node(xf__fleet *f, int i) {
  if (i >= f->node_cap) {
    int cap = f->routes->nnodes > i ? f->routes->nnodes : i + 1;
    void **grown = realloc(f->node, (size_t)cap * sizeof *grown);
    if (!grown)
      return NULL;
    memset(grown + f->node_cap, 0, (size_t)(cap - f->node_cap) * sizeof *grown);
    f->node = grown;
    f->node_cap = cap;
  }
  if (!f->node[i])
    f->node[i] = f->ops->open(f->ud, f->routes->nodes[i].host, f->routes->nodes[i].port);
  return f->node[i];
}

void xf__fleet_node_where(const xf__fleet *f, int node, const char **host, int *port) {
  *host = f->routes->nodes[node].host;
  *port = f->routes->nodes[node].port;
}

int xf__fleet_readonly(xf__fleet *f, void *conn) {
  xf__link *l = f->ops->link(conn);
  if (l->flags & XF_SETUP_REPLICA)
    return 0;
  l->flags |= XF_SETUP_REPLICA;
  return f->ops->up(conn) && l->live;
}

void xf__fleet_readonly_refused(xf__fleet *f, void *conn) {
  f->ops->link(conn)->flags &= ~XF_SETUP_REPLICA;
}

/* What the driver does for the router's act: a map load that is not due
 * (one happened within the period, none on the wire) routes with the map
 * held. */
static xf__fleet_do settle(xf__fleet *f, xf__trip *t, const xf__cmd *cmd, xf__route_act act,
                           int arg, int64_t now_ms) {
  for (;;) {
    t->act = act;
    t->arg = arg;
    switch (act) {
    case XF_ROUTE_DONE:
      return XF__FLEET_DONE;
    case XF_ROUTE_FAIL:
      t->act = XF_ROUTE_DONE;
      return XF__FLEET_FAIL;
    case XF_ROUTE_BACKOFF:
      return XF__FLEET_WAIT;
    case XF_ROUTE_REFRESH:
      if (f->asking || xf__route_refresh_due(f->routes, now_ms))
        return XF__FLEET_MAP;
      act = xf__route_next(f->routes, cmd, &t->hop, now_ms, &arg);
      continue;
    default: /* SEND, LOAD_SCRIPT */
      return XF__FLEET_SEND;
    }
  }
}

xf__fleet_do xf__fleet_start(xf__fleet *f, xf__trip *t, const xf__cmd *cmd,
                             int64_t now_ms) {
  int arg = 0;
  xf__route_act act = xf__route_start(f->routes, cmd, &t->hop, now_ms, &arg);
  return settle(f, t, cmd, act, arg, now_ms);
}

xf__fleet_do xf__fleet_again(xf__fleet *f, xf__trip *t, const xf__cmd *cmd,
                             int64_t now_ms) {
  int arg = 0;
  xf__route_act act = xf__route_next(f->routes, cmd, &t->hop, now_ms, &arg);
  return settle(f, t, cmd, act, arg, now_ms);
}

xf__fleet_do xf__fleet_answered(xf__fleet *f, xf__trip *t, const xf__cmd *cmd, int rc,
                                const xf__reply *reply, int64_t now_ms) {
  int arg = 0;
  xf__route_act act;
  if (rc == XF_OK)
    act = xf__route_reply(f->routes, cmd, &t->hop, reply, now_ms, &arg);
  else if (rc == XF_EIO || rc == XF_ECONNECT)
    act = xf__route_io_error(f->routes, cmd, &t->hop, rc, now_ms, &arg);
  else
    act = XF_ROUTE_FAIL, arg = rc;
  return settle(f, t, cmd, act, arg, now_ms);
}

int xf__fleet_load_script(const xf__trip *t, const xf__cmd *cmd, xf__cmd *load) {
  if (t->act != XF_ROUTE_LOAD_SCRIPT)
    return 0;
  xf__route_script(cmd, load);
  return 1;
}

int xf__fleet_script_loaded(xf__fleet *f, const xf__cmd *cmd, int rc, xf__reply *reply) {
  if (rc == XF_OK)
    rc = xf__script_loaded(&f->c->rt, xf__route_script_of(cmd), reply);
  return rc; /* busy, loading: the command fails open */
}

/* ---- the question ------------------------------------------------------------ */

const xf__cmd *xf__fleet_question(const xf__fleet *f) {
  return f->routes->mode == XF_ROUTE_UNKNOWN ? &xf__route_info_cmd : &xf__route_map_cmd;
}

void xf__fleet_ask_begin(xf__fleet *f, int avoid, int64_t now_ms) {
  f->ask_tries = 0;
  f->ask_avoid = avoid;
  if (f->routes->mode != XF_ROUTE_UNKNOWN)
    xf__route_refreshing(f->routes, now_ms);
}

int xf__fleet_ask_due(const xf__fleet *f, int64_t now_ms) {
  return f->routes->mode == XF_ROUTE_UNKNOWN || xf__route_refresh_due(f->routes, now_ms);
}

/* The candidates in order: the nodes' connections, then the seeds from the
 * one in use (those that are not a node's connection too). */
static void *candidate(const xf__fleet *f, int i, const void *avoid) {
  for (int k = 0; k < f->node_cap; k++)
    if (f->node[k] && k != f->ask_avoid && i-- == 0)
      return f->node[k];
  for (int k = 0; k < f->nseeds; k++) {
    void *seed = xf__fleet_seed(f, k);
    int known = seed == avoid;
    for (int j = 0; j < f->node_cap && !known; j++)
      known = f->node[j] == seed;
    if (!known && i-- == 0)
      return seed;
  }
  return NULL;
}

void *xf__fleet_ask_next(xf__fleet *f) {
  const void *avoid =
      f->ask_avoid >= 0 && f->ask_avoid < f->node_cap ? f->node[f->ask_avoid] : NULL;
  int n = 0;
  while (candidate(f, n, avoid))
    n++;
  /* The open ones first, then the others: the tries-th of that order. */
  for (int pass = 0, at = 0; pass < 2; pass++)
    for (int i = 0; i < n; i++) {
      void *conn = candidate(f, i, avoid);
      if ((pass == 0) == (f->ops->connected(conn) != 0) && at++ == f->ask_tries) {
        f->ask_tries++;
        return conn;
      }
    }
  return NULL;
}

int xf__fleet_ask_where(const xf__fleet *f, int i, int avoid, const char **host,
                        int *port) {
  if (f->routes->mode == XF_ROUTE_UNKNOWN) {
    if (i >= f->c->nseeds)
      return 0;
    xf__fleet_seed_where(f, i, host, port);
    return 1;
  }
  int node = xf__route_map_node(f->routes, i, avoid);
  if (node < 0)
    return 0;
  xf__fleet_node_where(f, node, host, port);
  return 1;
}

int xf__fleet_answer(xf__fleet *f, void *conn, const xf__cmd *q, int rc, const xf__reply *r,
                     int64_t now_ms) {
  int seed = xf__fleet_seed_index(f, conn);
  xf__link *l = f->ops->link(conn);
  if (rc != XF_OK)
    return rc;
  rc = xf__fleet_answer_from(f, seed, l->host, q, XF_OK, r, now_ms);
  if (rc == XF_OK && seed >= 0 && f->ops->retire && f->routes->mode == XF_ROUTE_CLUSTER)
    f->ops->retire(conn); /* the nodes' connections take over */
  return rc;
}

int xf__fleet_answer_from(xf__fleet *f, int seed, const char *host, const xf__cmd *q,
                          int rc, const xf__reply *r, int64_t now_ms) {
  xf__routes *routes = f->routes;
  if (rc != XF_OK)
    return rc;
  if (q == &xf__route_map_cmd)
    return xf__route_take_map(routes, r, host, now_ms);
  if ((rc = xf__route_detect(routes, r)) != XF_OK)
    return rc;
  if (seed >= 0)
    f->server = seed; /* it answered: the seed in use */
  return routes->mode == XF_ROUTE_STANDALONE ? XF_OK : xf__fleet_ready(f);
}

int xf__fleet_ask_failed(xf__fleet *f, int rc) {
  if (rc == XF__FLEET_ASK)
    rc = xf__fail(f->c, XF_ECONNECT, "no cluster node left to ask for the map");
  if (rc != XF_EINVAL && f->routes->mode == XF_ROUTE_CLUSTER && f->routes->mapped)
    return XF_OK; /* a refresh failed: the map held routes the commands */
  return rc;
}

/* ---- counting ---------------------------------------------------------------- */

int xf__fleet_open_count(const xf__fleet *f) {
  int n = 0;
  for (int i = 0; i < f->node_cap; i++)
    n += f->node[i] && f->ops->up(f->node[i]);
  return n;
}
