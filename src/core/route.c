/* The one Redis Cluster router: detection, map, node table, decisions.
 *
 * Why blind resends are safe: every command xfetch sends can be sent twice.
 * The read is read-only; the lease script answers "won" again to its own
 * token; the write script refuses a second application (its lease is gone,
 * and newer-wins on `s` refuses an older computation); release, delete and
 * SCRIPT LOAD are idempotent. A MOVED / ASK / TRYAGAIN / CLUSTERDOWN reply
 * means the node did not run the command at all, and a replica's error reply
 * means the replica did not (it only ever runs reads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "event.h"
#include "reply.h"
#include "route.h"
#include "script.h"

const xf__cmd xf__route_info_cmd = {.argc = 2, .argv = {"INFO", "cluster"}, .lens = {4, 7}};
const xf__cmd xf__route_map_cmd = {.argc = 2, .argv = {"CLUSTER", "SLOTS"}, .lens = {7, 5}};

/* ---- the node table ----------------------------------------------------------- */

int xf__route_node_at(xf__routes *r, const char *host, int port) {
  for (int i = 0; i < r->nnodes; i++)
    if (r->nodes[i].port == port && strcmp(r->nodes[i].host, host) == 0)
      return i;
  if (r->nnodes == r->cap) {
    int cap = r->cap ? 2 * r->cap : 8;
    xf__route_node *grown = realloc(r->nodes, (size_t)cap * sizeof *grown);
    if (!grown)
      return XF_ENOMEM;
    r->nodes = grown;
    r->cap = cap;
  }
  char *copy = strdup(host);
  if (!copy)
    return XF_ENOMEM;
  r->nodes[r->nnodes] = (xf__route_node){.host = copy, .port = port};
  return r->nnodes++;
}

void xf__route_init(xf__routes *r, xf_client *c) {
  memset(r, 0, sizeof *r);
  r->c = c;
  xf__cluster_map_init(&r->map);
  r->refreshed_ms = INT64_MIN / 2;
  r->mode = c->cluster == XF_CLUSTER_ON                    ? XF_ROUTE_CLUSTER
            : c->cluster == XF_CLUSTER_OFF || c->unix_path ? XF_ROUTE_STANDALONE
                                                           : XF_ROUTE_UNKNOWN;
  c->one_node = r->mode == XF_ROUTE_STANDALONE;
  c->slot_map = &r->map;
}

void xf__route_free(xf__routes *r) {
  for (int i = 0; i < r->nnodes; i++)
    free(r->nodes[i].host);
  free(r->nodes);
  free(r->node_of);
  xf__cluster_map_free(&r->map);
  r->nodes = NULL;
  r->node_of = NULL;
  r->nnodes = r->cap = r->node_of_cap = 0;
}

/* The table index of map node i; -1 when out of memory. */
static int node_of(xf__routes *r, int i) {
  if (r->node_of[i] < 0) {
    int at = xf__route_node_at(r, r->map.nodes[i].host, r->map.nodes[i].port);
    r->node_of[i] = at < 0 ? -1 : at;
  }
  return r->node_of[i];
}

/* After the map changed: which table node each map node is, and roles. */
static int remap(xf__routes *r) {
  if (r->map.nnodes > r->node_of_cap) {
    int *grown = realloc(r->node_of, (size_t)r->map.nnodes * sizeof *grown);
    if (!grown)
      return XF_ENOMEM;
    r->node_of = grown;
    r->node_of_cap = r->map.nnodes;
  }
  for (int i = 0; i < r->map.nnodes; i++)
    r->node_of[i] = -1;
  for (int i = 0; i < r->nnodes; i++) {
    int at = xf__cluster_map_find(&r->map, r->nodes[i].host, r->nodes[i].port);
    r->nodes[i].replica = at >= 0 && r->map.nodes[at].master >= 0;
  }
  return XF_OK;
}

/* ---- detection and the map ------------------------------------------------------ */

static int only_db0(xf__routes *r) {
  return xf__fail(r->c, XF_EINVAL, "Redis Cluster has only db 0; options.db is %d",
                  r->c->db);
}

int xf__route_detect(xf__routes *r, const xf__reply *info) {
  if (xf__reply_classify(info) == XF_REPLY_NOAUTH) /* not standalone: not let in */
    return xf__fail(r->c, XF_EAUTH, "INFO cluster: %s", info->str);
  int on =
      info->type == XF_REPLY_STRING ? xf__cluster_info_enabled(info->str, info->len) : 0;
  if (on < 0)
    return xf__fail(r->c, XF_EPROTO, "INFO cluster: no cluster_enabled field");
  r->mode = on ? XF_ROUTE_CLUSTER : XF_ROUTE_STANDALONE;
  r->c->one_node = !on;
  return on && r->c->db != 0 ? only_db0(r) : XF_OK;
}

int xf__route_take_map(xf__routes *r, const xf__reply *slots, const char *from_host,
                       int64_t now_ms) {
  xf_client *c = r->c;
  if (slots->type == XF_REPLY_ERROR)
    return xf__fail(c, XF_EPROTO, "CLUSTER SLOTS: %s", slots->str);
  xf__cluster_map *fresh = malloc(sizeof *fresh); /* 32 KiB: not on a stack */
  if (!fresh)
    return xf__fail(c, XF_ENOMEM, "out of memory for the cluster map");
  xf__cluster_map_init(fresh);
  char err[160] = "";
  int rc = xf__cluster_map_parse(fresh, slots, from_host ? from_host : "127.0.0.1", err,
                                 sizeof err);
  if (rc == XF_OK && xf__cluster_map_covered(fresh) == 0)
    rc = XF_EPROTO, snprintf(err, sizeof err, "no slot is served");
  if (rc != XF_OK) {
    free(fresh);
    return xf__fail(c, rc, "CLUSTER SLOTS: %s", err);
  }
  xf__cluster_map_free(&r->map);
  memcpy(&r->map, fresh, sizeof *fresh);
  free(fresh);
  r->mapped = 1;
  r->refreshed_ms = now_ms;
  c->stats.map_refreshes++;
  return remap(r) == XF_OK ? XF_OK
                           : xf__fail(c, XF_ENOMEM, "out of memory for the cluster map");
}

int xf__route_refresh_due(const xf__routes *r, int64_t now_ms) {
  return now_ms - r->refreshed_ms >= XF_ROUTE_REFRESH_MS;
}

void xf__route_refreshing(xf__routes *r, int64_t now_ms) { r->refreshed_ms = now_ms; }

int xf__route_map_node(const xf__routes *r, int i, int avoid) {
  for (int k = 0; k < r->nnodes; k++)
    if (k != avoid && i-- == 0)
      return k;
  return -1;
}

/* ---- routing -------------------------------------------------------------------- */

/* A read a replica may serve: the read scripts (EVALSHA_RO) and the hit
 * path's plain reads (HMGET; GET and MGET of format-2 entries). */
static int is_read_only(const xf__cmd *cmd) {
  return (cmd->lens[0] == 10 && memcmp(cmd->argv[0], "EVALSHA_RO", 10) == 0) ||
         (cmd->lens[0] == 5 && memcmp(cmd->argv[0], "HMGET", 5) == 0) ||
         (cmd->lens[0] == 3 && memcmp(cmd->argv[0], "GET", 3) == 0) ||
         (cmd->lens[0] == 4 && memcmp(cmd->argv[0], "MGET", 4) == 0);
}

static xf__route_act fail(int *arg, int rc) {
  *arg = rc;
  return XF_ROUTE_FAIL;
}

/* The node cmd goes to by its slot: the master, or one of its replicas for a
 * read when replicas may serve it. */
static xf__route_act pick(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int64_t now_ms,
                          int *arg) {
  xf_client *c = r->c;
  h->asking = h->replica = 0;
  if (!r->mapped)
    return XF_ROUTE_REFRESH;
  if (!cmd->key) { /* any node: the first master */
    for (int i = 0; i < r->map.nnodes; i++)
      if (r->map.nodes[i].master == -1 && (h->node = node_of(r, i)) >= 0)
        return XF_ROUTE_SEND;
    return fail(arg, xf__fail(c, XF_ENOMEM, "out of memory for a node"));
  }
  int slot = xf__cluster_keyslot(cmd->key, cmd->keylen);
  int node = xf__cluster_map_master(&r->map, slot);
  if (node < 0 && xf__route_refresh_due(r, now_ms))
    return XF_ROUTE_REFRESH;
  if (node < 0)
    return fail(arg, xf__fail(c, XF_EUNAVAILABLE,
                              "slot %d has no master in the cluster map", slot));
  /* Replicas only for reads that may be stale: a waiter's re-read (on_master)
   * and every write need the master's latest. */
  if (c->read_from_replicas && !h->master_only && !cmd->on_master && is_read_only(cmd)) {
    int replicas[8];
    int n = xf__cluster_map_replicas(&r->map, node, replicas, 8);
    if (n > 8)
      n = 8;
    if (n > 0) {
      node = replicas[r->next_replica++ % (uint32_t)n];
      h->replica = 1;
    }
  }
  if ((h->node = node_of(r, node)) < 0)
    return fail(arg, xf__fail(c, XF_ENOMEM, "out of memory for a node"));
  return XF_ROUTE_SEND;
}

xf__route_act xf__route_start(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int64_t now_ms,
                              int *arg) {
  *h = (xf__hop){.failed = -1};
  if (cmd->ask_node > 0 && r->mode == XF_ROUTE_CLUSTER && cmd->ask_node <= r->nnodes) {
    /* Where an ASK led the same read a moment ago: the slot's owner would
     * only answer ASK again. */
    h->node = cmd->ask_node - 1;
    h->asking = 1;
    return XF_ROUTE_SEND;
  }
  return pick(r, cmd, h, now_ms, arg);
}

xf__route_act xf__route_next(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int64_t now_ms,
                             int *arg) {
  if (h->reload && xf__route_refresh_due(r, now_ms)) {
    h->reload = 0;
    return XF_ROUTE_REFRESH;
  }
  xf__route_act act = pick(r, cmd, h, now_ms, arg);
  if (act == XF_ROUTE_REFRESH && r->mapped)
    act = fail(arg, xf__fail(r->c, XF_EUNAVAILABLE, "no master in the cluster map"));
  else if (act == XF_ROUTE_REFRESH) /* the map could not be loaded: its error */
    act = fail(arg, h->failed >= 0 ? h->failed_rc : XF_ECONNECT);
  if (act == XF_ROUTE_SEND && h->node == h->failed) /* nobody else: fail open */
    act = fail(arg, h->failed_rc);
  return act;
}

xf__route_act xf__route_io_error(xf__routes *r, const xf__cmd *cmd, xf__hop *h, int rc,
                                 int64_t now_ms, int *arg) {
  if (r->mode != XF_ROUTE_CLUSTER || !cmd->key || ++h->attempt > XF_CLUSTER_MAX_REDIRECTS)
    return fail(arg, rc);
  h->failed = h->node;
  h->failed_rc = rc;
  if (h->replica && !h->master_only) { /* a replica's reads go to the master */
    h->master_only = 1;
    return xf__route_next(r, cmd, h, now_ms, arg);
  }
  /* Another node's map may know a new master (a failover). */
  if (xf__route_refresh_due(r, now_ms))
    return XF_ROUTE_REFRESH;
  return xf__route_next(r, cmd, h, now_ms, arg);
}

int xf__route_script_of(const xf__cmd *cmd) {
  if (cmd->plain_out) /* the transport sent the read script in its place, or HMGET */
    return *cmd->plain_out ? -1 : XF_SCRIPT_READ;
  return cmd->argc < 2 ? -1 : xf__script_by_sha(cmd->argv[1], cmd->lens[1]);
}

void xf__route_script(const xf__cmd *cmd, xf__cmd *load) {
  xf__script_load_cmd(load, xf__route_script_of(cmd), cmd->key, cmd->keylen);
}

/* MOVED / ASK / TRYAGAIN / CLUSTERDOWN. */
static xf__route_act redirected(xf__routes *r, const xf__cmd *cmd, xf__hop *h,
                                const xf__cluster_redirect *d, const xf__reply *reply,
                                int64_t now_ms, int *arg) {
  xf_client *c = r->c;
  int delay = xf__cluster_retry_delay_ms(d->kind, ++h->attempt);
  int redirect = d->kind == XF_CLUSTER_MOVED || d->kind == XF_CLUSTER_ASK;
  if (delay < 0 && redirect)
    return fail(arg,
                xf__fail(c, XF_EREDIS, "%s: still redirected after %d redirections: %s",
                         cmd->argv[0], XF_CLUSTER_MAX_REDIRECTS, reply->str));
  if (delay < 0) /* TRYAGAIN / CLUSTERDOWN for too long: the flow fails open */
    return XF_ROUTE_DONE;
  if (!redirect) {
    h->reload = d->kind == XF_CLUSTER_DOWN; /* a failover may have moved the slot */
    *arg = delay;
    return XF_ROUTE_BACKOFF;
  }
  c->stats.redirects++;
  const char *host = d->host[0] ? d->host : r->nodes[h->node].host;
  if (c->on_event) {
    char name[300];
    snprintf(name, sizeof name, "%s:%d", host, d->port);
    xf__emit_server(c, XF_EV_REDIRECT, name, c->driver);
  }
  if (d->kind == XF_CLUSTER_ASK) { /* the map stays: the slot is only migrating */
    int at = xf__route_node_at(r, host, d->port);
    if (at < 0)
      return fail(arg, xf__fail(c, XF_ENOMEM, "out of memory for a node"));
    h->node = at;
    h->asking = 1;
    h->replica = 0;
    return XF_ROUTE_SEND;
  }
  h->master_only = 1; /* a replica that answers MOVED points at the master */
  int at = xf__cluster_map_set_slot(&r->map, d->slot, host, d->port);
  if (at < 0 || remap(r) != XF_OK)
    return fail(arg, xf__fail(c, XF_ENOMEM, "out of memory for the cluster map"));
  /* A resharding or a failover moves many slots: learn them all. */
  if (xf__route_refresh_due(r, now_ms))
    return XF_ROUTE_REFRESH;
  return pick(r, cmd, h, now_ms, arg);
}

xf__route_act xf__route_reply(xf__routes *r, const xf__cmd *cmd, xf__hop *h,
                              const xf__reply *reply, int64_t now_ms, int *arg) {
  if (cmd->asked_out) /* where this reply came from, if an ASK led there */
    *cmd->asked_out = h->asking ? h->node + 1 : 0;
  xf__reply_kind kind = xf__reply_classify(reply);
  if (kind == XF_REPLY_VALUE)
    return XF_ROUTE_DONE;
  if (kind == XF_REPLY_NOSCRIPT) {
    /* A node that lost its scripts (a promoted replica, a restart: SCRIPT
     * LOAD is not replicated) gets them loaded there, not on the slot's
     * master as the flow's own recovery would. */
    if (h->script_loaded || xf__route_script_of(cmd) < 0)
      return XF_ROUTE_DONE;
    h->script_loaded = 1;
    return XF_ROUTE_LOAD_SCRIPT;
  }
  xf__cluster_redirect d;
  if (xf__cluster_redirect_parse(reply->str, reply->len, &d) == XF_OK &&
      d.kind != XF_CLUSTER_REPLY && !(h->replica && d.kind != XF_CLUSTER_MOVED))
    return redirected(r, cmd, h, &d, reply, now_ms, arg);
  if (h->replica && !h->master_only) {
    /* A replica that cannot serve (MASTERDOWN with its link down, LOADING
     * after a restart, BUSY...) or refuses: its master holds the value. */
    h->master_only = 1;
    h->attempt++;
    return pick(r, cmd, h, now_ms, arg);
  }
  return XF_ROUTE_DONE; /* an error reply of the command itself: the flow's */
}
