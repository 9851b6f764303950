/* Arming a data connection for the near cache (near_impl.h): the node of its
 * server, whose invalidation connection an opener thread opens when asked
 * (as the asking client: xf__inval_who), outside the tracker's lock, never
 * on the caller's thread. A blocking driver's arming waits for the open (it
 * blocks anyway); an event loop's does not (XF__NEAR_LATER: its connection
 * serves untracked and arms again once xf__near_arm_due). A failed open is
 * logged (XF_EV_INVALIDATION, a drop with the open's code) and asked for in
 * the background again only after a backoff (100 ms, doubling to 5 s).
 * Each open runs on an opener thread of its own, which the tracker thread
 * starts and joins once the open is done (none is left to the close); the
 * tracker keeps reading the nodes already open meanwhile: a slow open
 * (a stalled server, a slow handshake) holds up no other node's
 * invalidations, nor their near hits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "client.h"
#include "link.h"
#include "near_track.h"
#include "stream.h"

static struct xf__track_node *find_node(struct xf__near_tracker *t, const char *host,
                                        int port, const char *unix_path) {
  for (struct xf__track_node *node = t->nodes; node; node = node->next)
    if (host ? node->host && node->port == port && strcmp(node->host, host) == 0
             : node->unix_path && strcmp(node->unix_path, unix_path) == 0)
      return node;
  struct xf__track_node *node = calloc(1, sizeof *node);
  if (!node)
    return NULL;
  node->tracker = t;
  node->port = port;
  node->inval_fd = node->open_fd = -1;
  if (host ? !(node->host = strdup(host)) : !(node->unix_path = strdup(unix_path))) {
    free(node);
    return NULL;
  }
  node->next = t->nodes;
  __atomic_store_n(&t->nodes, node, __ATOMIC_RELEASE); /* read without the lock too */
  return node;
}

/* What an open found, under t->mu: node's connection (the tracker's poll
 * set takes it), or the failure logged and the next background ask put
 * off (100 ms, doubling to 5 s); the arms waiting are told. */
static void opened(struct xf__near_tracker *t, struct xf__track_node *node, int rc,
                   xf__inval *v, long long id, const char *why) {
  node->opening = 0;
  __atomic_store_n(&node->asked, 0, __ATOMIC_RELEASE);
  node->opens++;
  if (rc == XF_OK) {
    node->ctx = v;
    node->id = id;
    node->backoff_ms = 0;
    __atomic_store_n(&node->inval_fd, xf__inval_fd(v), __ATOMIC_RELEASE);
  } else {
    node->open_rc = rc;
    snprintf(node->why, sizeof node->why, "%s", why);
    node->backoff_ms = node->backoff_ms ? node->backoff_ms * 2 : 100;
    if (node->backoff_ms > 5000)
      node->backoff_ms = 5000;
    __atomic_store_n(&node->retry_ms, xf__stream_now_ms() + node->backoff_ms,
                     __ATOMIC_RELEASE);
    if (xf__near_log(t->near))
      xf__near_log_add(xf__near_log(t->near), NULL, 0, node, rc);
  }
  pthread_cond_broadcast(&t->opened);
  xf__tracker_wake(t);
}

/* The opener's socket, connected (fd) or about to close (-1): a close of
 * the tracker shuts it down, so the open ends without waiting for its
 * timeouts; published under t->mu so its number is never a reused one's. */
static void on_fd(void *ud, int fd) {
  struct xf__track_node *node = ud;
  struct xf__near_tracker *t = node->tracker;
  pthread_mutex_lock(&t->mu);
  node->open_fd = fd;
  if (fd >= 0 && t->stopping)
    shutdown(fd, SHUT_RDWR);
  pthread_mutex_unlock(&t->mu);
}

/* The blocking open of one node's invalidation connection, on its own
 * thread: a slow one (a stalled server, a slow handshake) holds up no other
 * node's invalidations. */
static void open_node(struct xf__track_node *node) {
  struct xf__near_tracker *t = node->tracker;
  xf__inval *v;
  long long id = 0;
  char why[sizeof node->why];
  int rc = xf__inval_open_as(&v, node->as, node->host, node->port, node->unix_path, &id,
                             why, sizeof why);
  pthread_mutex_lock(&t->mu);
  xf__inval_who_free(node->as);
  node->as = NULL;
  opened(t, node, rc, v, id, why);
  pthread_mutex_unlock(&t->mu);
}

static void *opener(void *arg) {
  open_node(arg);
  return NULL;
}

int xf__tracker_open_wanted(struct xf__near_tracker *t) {
  int started = 0;
  for (struct xf__track_node *node = t->nodes; node && !t->stopping; node = node->next) {
    if (node->has_opener && !node->opening) { /* done: it returns without the lock */
      pthread_join(node->opener, NULL);
      node->has_opener = 0;
    }
    if (!node->want || node->opening)
      continue;
    node->as = node->want;
    node->want = NULL;
    node->opening = 1;
    xf__inval_who_watch(node->as, on_fd, node);
    node->has_opener = xf__tracker_spawn(&node->opener, opener, node);
    if (!node->has_opener) { /* no thread: opened here, as before */
      pthread_mutex_unlock(&t->mu);
      open_node(node);
      pthread_mutex_lock(&t->mu);
    }
    started = 1;
  }
  return started;
}

/* Asks the thread to open node's invalidation connection as c (started
 * if it is not running). XF_OK, or XF_ENOMEM. Under t->mu. */
static int ask(struct xf__near_tracker *t, xf_client *c, struct xf__track_node *node) {
  if (!t->running && !(t->running = xf__tracker_start(t)))
    return XF_ENOMEM;
  if (node->want || node->opening)
    return XF_OK;
  if (!(node->want = xf__inval_who_new(c)))
    return XF_ENOMEM;
  __atomic_store_n(&node->asked, 1, __ATOMIC_RELEASE);
  xf__tracker_wake(t);
  return XF_OK;
}

static int arm(struct xf__ncache *n, xf_client *c, const char *host, int port,
               const char *unix_path, long long *redirect_id, xf__track *tk, int later) {
  struct xf__near_tracker *t = xf__near_tracker(n);
  int rc = XF_OK;
  pthread_mutex_lock(&t->mu);
  struct xf__track_node *node = find_node(t, host, port, unix_path);
  if (!node) {
    rc = XF_ENOMEM;
  } else if (!node->ctx && later) { /* asked in the background, after a backoff */
    if (xf__stream_now_ms() >= __atomic_load_n(&node->retry_ms, __ATOMIC_ACQUIRE))
      rc = ask(t, c, node);
    if (rc == XF_OK) {
      tk->node = node;
      rc = XF__NEAR_LATER;
    }
  } else if (!node->ctx) { /* waited for: a blocking driver blocks anyway */
    uint64_t opens = node->opens;
    rc = ask(t, c, node);
    while (rc == XF_OK && node->opens == opens && !node->ctx)
      pthread_cond_wait(&t->opened, &t->mu);
    if (rc == XF_OK && !node->ctx) {
      rc = xf__fail(c, node->open_rc, "%s", node->why);
      tk->node = node; /* to arm before a later command, once due */
    }
  }
  if (rc == XF_OK) { /* open: so the thread runs */
    *redirect_id = node->id;
    tk->node = node;
    tk->gen = __atomic_load_n(&node->gen, __ATOMIC_ACQUIRE);
    xf__tracker_wake(t);
  }
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int xf__near_arm(struct xf__ncache *n, xf_client *c, const char *host, int port,
                 const char *unix_path, long long *redirect_id, xf__track *tk) {
  return arm(n, c, host, port, unix_path, redirect_id, tk, 0);
}

int xf__near_arm_later(struct xf__ncache *n, xf_client *c, const char *host, int port,
                       const char *unix_path, long long *redirect_id, xf__track *tk) {
  return arm(n, c, host, port, unix_path, redirect_id, tk, 1);
}

int xf__near_arm_due(struct xf__track_node *node) {
  return __atomic_load_n(&node->inval_fd, __ATOMIC_ACQUIRE) >= 0 ||
         (!__atomic_load_n(&node->asked, __ATOMIC_ACQUIRE) &&
          xf__stream_now_ms() >= __atomic_load_n(&node->retry_ms, __ATOMIC_ACQUIRE));
}

/* ---- the link layer's hooks (link.h) ------------------------------------------------- */

static int link_arm(struct xf__ncache *n, struct xf_client *c, const char *host, int port,
                    const char *unix_path, int wait, long long *redirect_id, xf__track *t) {
  return wait ? xf__near_arm(n, c, host, port, unix_path, redirect_id, t)
              : xf__near_arm_later(n, c, host, port, unix_path, redirect_id, t);
}

_Static_assert(XF__NEAR_LATER == XF__LINK_ARM_LATER, "one code for an arm that waits");

static int link_stale(const xf__track *t) { return xf__track_stale(t); }

static const xf__link_tracking link_hooks = {
    .arm = link_arm,
    .due = xf__near_arm_due,
    .watch = xf__near_watch,
    .lost = xf__near_lost,
    .stale = link_stale,
};

void xf__near_link_hooks(void) { xf__link_set_tracking(&link_hooks); }
