/* Redis Cluster routing for the blocking drivers: slot -> node -> connection,
 * redirections, map refreshes.
 *
 * Why blind retries are safe here: every command xfetch sends can be sent
 * twice. The read is read-only; the lease script answers "won" again to its
 * own token; the write script refuses a second application (its lease is
 * gone, and newer-wins on `s` refuses an older computation); release, delete
 * and SCRIPT LOAD are idempotent. A MOVED / ASK / TRYAGAIN / CLUSTERDOWN
 * reply means the node did not run the command at all. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "router.h"
#include "script.h"

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* ---- connections ------------------------------------------------------------ */

/* The connection to host:port, added (not connected) if new; -1 = ENOMEM. */
static int conn_at(xf__router *r, const char *host, int port) {
  for (int i = 0; i < r->nconns; i++)
    if (r->conns[i].port == port && strcmp(r->conns[i].host, host) == 0)
      return i;
  if (r->nconns == r->cap) {
    int cap = r->cap ? 2 * r->cap : 8;
    xf__conn *grown = realloc(r->conns, (size_t)cap * sizeof *grown);
    if (!grown)
      return -1;
    r->conns = grown;
    r->cap = cap;
  }
  if (xf__conn_init(&r->conns[r->nconns], host, port, NULL) != XF_OK)
    return -1;
  return r->nconns++;
}

/* Forgets which connection each node has: after the map changed. */
static int reset_node_conns(xf__router *r) {
  if (r->map.nnodes > r->node_conn_cap) {
    int *grown = realloc(r->node_conn, (size_t)r->map.nnodes * sizeof *grown);
    if (!grown)
      return XF_ENOMEM;
    r->node_conn = grown;
    r->node_conn_cap = r->map.nnodes;
  }
  for (int i = 0; i < r->map.nnodes; i++)
    r->node_conn[i] = -1;
  return XF_OK;
}

/* The connection of map node i (a replica's sends READONLY); -1 = ENOMEM. */
static int node_conn(xf__router *r, int node) {
  if (r->node_conn[node] < 0) {
    const xf__cluster_node *n = &r->map.nodes[node];
    int k = conn_at(r, n->host, n->port);
    if (k < 0)
      return -1;
    r->conns[k].readonly |= n->master >= 0;
    r->node_conn[node] = k;
  }
  return r->node_conn[node];
}

/* ---- the map ------------------------------------------------------------------ */

/* CLUSTER SLOTS through conn k into r's map. */
static int load_map(xf_client *c, xf__router *r, xf__conn *k) {
  static const xf__cmd slots = {.argc = 2, .argv = {"CLUSTER", "SLOTS"}, .lens = {7, 5}};
  redisReply *reply;
  int rc = xf__conn_command(c, k, &slots, 0, &reply);
  if (rc != XF_OK)
    return rc;
  if (reply->type == REDIS_REPLY_ERROR) {
    rc = xf__fail(c, XF_EPROTO, "CLUSTER SLOTS: %s", reply->str);
    freeReplyObject(reply);
    return rc;
  }
  xf__cluster_map *fresh = malloc(sizeof *fresh);
  if (!fresh) {
    freeReplyObject(reply);
    return xf__fail(c, XF_ENOMEM, "out of memory for the cluster map");
  }
  xf__cluster_map_init(fresh);
  char err[160] = "";
  rc =
      xf__cluster_map_parse(fresh, reply, k->host ? k->host : "127.0.0.1", err, sizeof err);
  freeReplyObject(reply);
  if (rc == XF_OK && xf__cluster_map_covered(fresh) == 0)
    rc = XF_EPROTO, snprintf(err, sizeof err, "no slot is served");
  if (rc != XF_OK) {
    free(fresh);
    return xf__fail(c, rc, "CLUSTER SLOTS: %s", err);
  }
  xf__cluster_map_free(&r->map);
  memcpy(&r->map, fresh, sizeof *fresh);
  free(fresh);
  r->refreshed_ms = xf__now_ms();
  c->stats.map_refreshes++;
  return reset_node_conns(r);
}

/* Loads the map from the first node that answers: open connections first,
 * then the map's other nodes, then the seeds; never from `avoid` (a node that
 * just failed; -1 = none). */
static int refresh(xf_client *c, xf__router *r, int avoid) {
  int rc = XF_ECONNECT;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < r->nconns; i++)
      if (i != avoid && (pass == 1) == (r->conns[i].ctx == NULL) &&
          (rc = load_map(c, r, &r->conns[i])) == XF_OK)
        return XF_OK;
  for (int i = 0; i < c->nseeds; i++)
    if ((rc = load_map(c, r, &c->seeds[i])) == XF_OK) {
      xf__conn_forget(&c->seeds[i]); /* routed connections take over */
      return XF_OK;
    }
  return rc;
}

/* A refresh unless one happened within XF_ROUTER_REFRESH_MS. */
static void refresh_soon(xf_client *c, xf__router *r, int avoid) {
  if (xf__now_ms() - r->refreshed_ms >= XF_ROUTER_REFRESH_MS)
    refresh(c, r, avoid);
}

/* ---- routing ------------------------------------------------------------------ */

static int is_read_only(const xf__cmd *cmd) {
  return cmd->lens[0] == 10 && memcmp(cmd->argv[0], "EVALSHA_RO", 10) == 0;
}

/* The connection that should run cmd, or a negative XF_E* code. */
static int route(xf_client *c, xf__router *r, const xf__cmd *cmd, int master_only) {
  if (!cmd->key) /* any node: the first one connected */
    for (int i = 0; i < r->nconns; i++)
      if (r->conns[i].ctx)
        return i;
  int slot = cmd->key ? xf__cluster_keyslot(cmd->key, cmd->keylen) : 0;
  int node = xf__cluster_map_master(&r->map, slot);
  if (node < 0) {
    refresh_soon(c, r, -1);
    node = xf__cluster_map_master(&r->map, slot);
    if (node < 0)
      return xf__fail(c, XF_EUNAVAILABLE, "slot %d has no master in the cluster map", slot);
  }
  if (c->read_from_replicas && !master_only && is_read_only(cmd)) {
    int replicas[8];
    int n = xf__cluster_map_replicas(&r->map, node, replicas, 8);
    if (n > 8)
      n = 8;
    if (n > 0)
      node = replicas[r->next_replica++ % (uint32_t)n];
  }
  int k = node_conn(r, node);
  return k >= 0 ? k : xf__fail(c, XF_ENOMEM, "out of memory for a node connection");
}

/* A MOVED: the slot's new master, for this call and the next ones. */
static int follow_moved(xf_client *c, xf__router *r, const xf__cluster_redirect *d,
                        int from) {
  const char *host = d->host[0] ? d->host : r->conns[from].host;
  int node = xf__cluster_map_set_slot(&r->map, d->slot, host, d->port);
  if (node < 0 || reset_node_conns(r) != XF_OK)
    return xf__fail(c, XF_ENOMEM, "out of memory for the cluster map");
  refresh_soon(c, r, -1); /* a resharding moves many slots: learn them all */
  node = xf__cluster_map_find(&r->map, host, d->port);
  int k = node >= 0 ? node_conn(r, node) : conn_at(r, host, d->port);
  return k >= 0 ? k : xf__fail(c, XF_ENOMEM, "out of memory for a node connection");
}

/* A node that does not know the script cmd runs (a replica, a promoted
 * replica, a node restarted or flushed: Redis 7 does not replicate SCRIPT
 * LOAD) gets it loaded here, on that very node; the flow's own recovery
 * would route the SCRIPT LOAD to the slot's master. Returns XF_OK when the
 * script is now loaded and cmd may be sent again. */
static int load_script_on(xf_client *c, xf__conn *k, const xf__cmd *cmd) {
  int script = cmd->argc > 1 ? xf__script_by_sha(cmd->argv[1], cmd->lens[1]) : -1;
  if (script < 0)
    return XF_EREDIS;
  xf__cmd load;
  redisReply *reply;
  xf__script_load_cmd(&load, script, cmd->key, cmd->keylen);
  int rc = xf__conn_command(c, k, &load, 0, &reply);
  return rc == XF_OK ? xf__script_loaded(c, script, reply) : rc;
}

int xf__router_command(xf_client *c, xf__router *r, const xf__cmd *cmd,
                       redisReply **reply) {
  *reply = NULL;
  int master_only = 0, asking = 0, script_loaded = 0;
  int k = route(c, r, cmd, 0);
  for (int attempt = 1; k >= 0; attempt++) {
    int asked = asking;
    int rc = xf__conn_command(c, &r->conns[k], cmd, asking, reply);
    asking = 0;
    if (rc == XF_EIO || rc == XF_ECONNECT) {
      /* The node does not answer: a replica's reads go to the master; else
       * another node's map may know a new master (failover). Same node
       * again: give up at once, the flow fails open. */
      if (attempt > XF_CLUSTER_MAX_REDIRECTS || !cmd->key)
        return rc;
      int was = k;
      if (!master_only && r->conns[k].readonly) {
        master_only = 1;
      } else {
        refresh_soon(c, r, k);
      }
      k = route(c, r, cmd, master_only);
      if (k == was)
        return rc;
      continue;
    }
    if (rc != XF_OK || (*reply)->type != REDIS_REPLY_ERROR)
      return rc;
    if (xf__script_missing(*reply) && !script_loaded) {
      script_loaded = 1;
      int lrc = load_script_on(c, &r->conns[k], cmd);
      if (lrc == XF_OK ||
          lrc == XF_EUNAVAILABLE) { /* busy, loading: the caller fails open */
        freeReplyObject(*reply);
        *reply = NULL;
        if (lrc != XF_OK)
          return lrc;
        asking = asked;
        continue; /* the same node, now with the script */
      }
    }
    xf__cluster_redirect d;
    if (xf__cluster_redirect_parse((*reply)->str, (*reply)->len, &d) != XF_OK ||
        d.kind == XF_CLUSTER_REPLY)
      return XF_OK; /* an error reply of the command itself: the caller's */
    int delay = xf__cluster_retry_delay_ms(d.kind, attempt);
    if (delay < 0 && (d.kind == XF_CLUSTER_MOVED || d.kind == XF_CLUSTER_ASK)) {
      rc = xf__fail(c, XF_EREDIS, "%s: still redirected after %d redirections: %s",
                    cmd->argv[0], XF_CLUSTER_MAX_REDIRECTS, (*reply)->str);
      freeReplyObject(*reply);
      *reply = NULL;
      return rc;
    }
    if (delay < 0) /* TRYAGAIN / CLUSTERDOWN for too long: the flow fails open */
      return XF_OK;
    freeReplyObject(*reply);
    *reply = NULL;
    if (d.kind == XF_CLUSTER_MOVED || d.kind == XF_CLUSTER_ASK)
      c->stats.redirects++;
    if (d.kind == XF_CLUSTER_MOVED) {
      master_only = 1; /* a replica that answers MOVED points at the master */
      k = follow_moved(c, r, &d, k);
    } else if (d.kind == XF_CLUSTER_ASK) {
      asking = 1; /* the map stays: the slot is only migrating */
      k = conn_at(r, d.host[0] ? d.host : r->conns[k].host, d.port);
      if (k < 0)
        return xf__fail(c, XF_ENOMEM, "out of memory for a node connection");
    } else {
      sleep_ms(delay);
      if (d.kind == XF_CLUSTER_DOWN)
        refresh_soon(c, r, -1);
      k = route(c, r, cmd, master_only);
    }
  }
  return k; /* route failed: the code */
}

/* ---- pipelines ---------------------------------------------------------------- */

static int needs_router(int rc, const redisReply *reply) {
  if (rc == XF_EIO || rc == XF_ECONNECT)
    return 1;
  xf__cluster_redirect d;
  return rc == XF_OK && reply->type == REDIS_REPLY_ERROR &&
         (xf__script_missing(reply) ||
          (xf__cluster_redirect_parse(reply->str, reply->len, &d) == XF_OK &&
           d.kind != XF_CLUSTER_REPLY));
}

/* Every command alone, in order: when the pipeline's bookkeeping cannot be
 * allocated. */
static int one_by_one(xf_client *c, xf__router *r, size_t n, const xf__cmd *const *cmds,
                      int *rcs, redisReply **replies) {
  int all = XF_OK;
  for (size_t i = 0; i < n; i++)
    if ((rcs[i] = xf__router_command(c, r, cmds[i], &replies[i])) != XF_OK && all == XF_OK)
      all = rcs[i];
  return all;
}

int xf__router_pipeline(xf_client *c, xf__router *r, size_t n, const xf__cmd *const *cmds,
                        int *rcs, redisReply **replies) {
  memset(replies, 0, n * sizeof *replies);
  int *conn = malloc(n * sizeof *conn);
  size_t *who = malloc(n * sizeof *who);
  const xf__cmd **group = malloc(n * sizeof *group);
  int *grcs = malloc(n * sizeof *grcs);
  redisReply **greplies = malloc(n * sizeof *greplies);
  if (!conn || !who || !group || !grcs || !greplies) {
    free(conn), free(who), free(group), free(grcs), free(greplies);
    return one_by_one(c, r, n, cmds, rcs, replies);
  }
  for (size_t i = 0; i < n; i++)
    conn[i] = route(c, r, cmds[i], 0);
  /* One pipeline per node, in the order the nodes first appear. */
  for (size_t i = 0; i < n; i++) {
    if (conn[i] < 0)
      continue;
    int k = conn[i];
    size_t m = 0;
    for (size_t j = i; j < n; j++)
      if (conn[j] == k) {
        who[m] = j;
        group[m++] = cmds[j];
        conn[j] = INT_MIN; /* sent */
      }
    xf__conn_pipeline(c, &r->conns[k], m, group, grcs, greplies);
    for (size_t j = 0; j < m; j++) {
      rcs[who[j]] = grcs[j];
      replies[who[j]] = greplies[j];
    }
  }
  int all = XF_OK;
  for (size_t i = 0; i < n; i++) {
    if (conn[i] != INT_MIN) { /* not routed: route's code */
      rcs[i] = conn[i];
    } else if (needs_router(rcs[i], replies[i])) {
      if (replies[i])
        freeReplyObject(replies[i]);
      rcs[i] = xf__router_command(c, r, cmds[i], &replies[i]);
    }
    if (rcs[i] != XF_OK && all == XF_OK)
      all = rcs[i];
  }
  free(conn), free(who), free(group), free(grcs), free(greplies);
  return all;
}

/* ---- life cycle ----------------------------------------------------------------- */

int xf__router_open(xf_client *c, xf__router **out) {
  *out = NULL;
  xf__router *r = calloc(1, sizeof *r);
  if (!r)
    return xf__fail(c, XF_ENOMEM, "out of memory for the cluster router");
  xf__cluster_map_init(&r->map);
  r->refreshed_ms = INT64_MIN / 2;
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
  free(r->node_conn);
  xf__cluster_map_free(&r->map);
  free(r);
}

void xf__router_forget(xf__router *r) {
  for (int i = 0; r && i < r->nconns; i++)
    xf__conn_forget(&r->conns[i]);
}

int xf__router_open_connections(const xf__router *r) {
  int n = 0;
  for (int i = 0; r && i < r->nconns; i++)
    n += r->conns[i].ctx != NULL;
  return n;
}
