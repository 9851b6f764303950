/* The client handle: open (its options checked and copied by
 * client_options.c), standalone or cluster decided on the first connection,
 * commands to the seed in use, fork detection, close, and the handle's error
 * state and stats. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "client_io.h"
#include "codec.h"
#include "reply.h"
#include "script.h"
#include "share.h"
#include "tls.h"

static uint64_t random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
    v = (uint64_t)xf__now_us() ^ ((uint64_t)getpid() << 32);
  return v;
}

/* Fork detection without a syscall per command: the child bumps this. */
static unsigned long fork_generation;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) {
  __atomic_add_fetch(&fork_generation, 1, __ATOMIC_RELAXED);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static unsigned long current_fork_generation(void) {
  return __atomic_load_n(&fork_generation, __ATOMIC_RELAXED);
}

unsigned long xf__fork_generation(void) {
  pthread_once(&atfork_once, register_atfork);
  return current_fork_generation();
}

/* A forked child that keeps using the client gets a new identity: its own
 * connections, client id (the lease tokens' prefix) and XFetch stream, so it
 * can never release the parent's lease nor repeat its draws. */
static void renew_after_fork(xf_client *c) {
  xf__router_forget(c);
  pthread_once(&atfork_once, register_atfork);
  c->id = random_u64();
  c->lease_count = 0;
  xf__pcg32_seed(&c->rng, random_u64(), c->id);
  c->fork_generation = current_fork_generation();
}

void xf__client_check_fork(xf_client *c) {
  if (c->fork_generation != current_fork_generation())
    renew_after_fork(c);
}

int xf__command(xf_client *c, const xf__cmd *cmd, xf__reply **reply) {
  *reply = NULL;
  xf__client_check_fork(c);
  return xf__router_command(c, cmd, reply);
}

int xf__command_many(xf_client *c, size_t n, const xf__cmd *const *cmds, int *rcs,
                     xf__reply **replies) {
  memset(replies, 0, n * sizeof *replies);
  xf__client_check_fork(c);
  return xf__router_pipeline(c, n, cmds, rcs, replies);
}

int xf__clocks_fresh(xf_client *c, int64_t now_ms) {
  if (!c->mode_known)
    return 0;
  if (c->routes.mode != XF_ROUTE_CLUSTER)
    return xf__clock_fresh(xf__router_seed(c)->clock, now_ms);
  int open = 0;
  for (int i = 0; i < c->fleet->node_cap; i++) {
    const xf__conn *k = c->fleet->node[i];
    if (!k || !k->link)
      continue;
    if (!xf__clock_fresh(k->clock, now_ms))
      return 0;
    open++;
  }
  return open > 0;
}

/* Out of memory on demand, for the tests of the paths that handle it (a
 * pool's failed open): never set by the library itself. The failing open
 * takes 1 ms, as one that made the kernel reclaim memory first may: threads
 * racing it are then certain to overlap it. */
unsigned xf__test_fail_open_every, xf__test_failed_opens;
static unsigned opens_counted;

static int fail_this_open(void) {
  unsigned every = __atomic_load_n(&xf__test_fail_open_every, __ATOMIC_RELAXED);
  if (!every || __atomic_add_fetch(&opens_counted, 1, __ATOMIC_RELAXED) % every != 0)
    return 0;
  __atomic_add_fetch(&xf__test_failed_opens, 1, __ATOMIC_RELAXED);
  nanosleep(&(struct timespec){0, 1000000L}, NULL);
  return 1;
}

/* Why the calling thread's last xf_client_open failed (its *out is NULL, so
 * xf_errmsg(NULL) reads it here); "" after one that succeeded. Per thread, as
 * errno: nothing to free, nothing shared between threads. */
static _Thread_local char open_error[256];

static int open_failed(xf_client *c, int rc) {
  const char *why = c && c->errstr[0] ? c->errstr : NULL;
  if (why)
    snprintf(open_error, sizeof open_error, "%s", why);
  else if (rc == XF_ENOMEM)
    snprintf(open_error, sizeof open_error, "out of memory for a client");
  else if (!open_error[0])
    snprintf(open_error, sizeof open_error, "%s", xf_strerror(rc));
  xf_client_close(c);
  return rc;
}

void xf__open_failed(const char *why) {
  snprintf(open_error, sizeof open_error, "%s", why && why[0] ? why : "open failed");
}

int xf_client_open(xf_client **out, const xf_options *opts) {
  open_error[0] = '\0';
  if (!out) {
    snprintf(open_error, sizeof open_error, "xf_client_open: out is NULL");
    return XF_EINVAL;
  }
  *out = NULL;
  xf_options defaults = XF_OPTIONS_INIT;
  const xf_options *o = opts ? opts : &defaults;
  if (xf__options_check(o, open_error, sizeof open_error) != XF_OK)
    return open_failed(NULL, XF_EINVAL);
  xf_client *c = fail_this_open() ? NULL : calloc(1, sizeof *c);
  if (!c)
    return open_failed(NULL, XF_ENOMEM);
  int rc = xf__client_options_copy(c, o);
  if (rc == XF_OK && !(c->opened_with = xf__options_dup(o)))
    rc = XF_ENOMEM;
  if (rc != XF_OK)
    return open_failed(c, rc);
  c->on_event = o->on_event;
  c->on_event_ud = o->on_event_ud;
  c->disabled = o->disabled != 0;
  xf__route_init(&c->routes, c);
  /* The seeds first: the map is asked of them before any node is known. */
  for (int i = 0; !c->unix_path && i < c->nseeds; i++)
    xf__route_node_at(&c->routes, c->seeds[i].host, c->seeds[i].port); /* ENOMEM: fewer */
  c->id = random_u64();
  c->plain_hits = 1;
  /* A given seed makes the draws reproducible: fixed stream too. */
  if (o->seed)
    xf__pcg32_seed(&c->rng, o->seed, 0);
  else
    xf__pcg32_seed(&c->rng, random_u64(), c->id);
  pthread_once(&atfork_once, register_atfork);
  c->fork_generation = current_fork_generation();
  rc = xf__router_init(c);
  if (rc == XF_OK && !o->lazy_connect && !o->disabled)
    rc = xf__router_connect(c);
  if (rc != XF_OK)
    return open_failed(c, rc);
  *out = c;
  return XF_OK;
}

void xf_client_close(xf_client *c) {
  if (!c)
    return;
  if (c->fork_generation != current_fork_generation())
    xf__router_forget(c);    /* a fork's child: never a byte on the parent's connections */
  xf_call_wake_close(c, -1); /* a wake pipe left open: its write end */
  for (int i = 0; i < c->nseeds; i++)
    xf__conn_free(&c->seeds[i]);
  free(c->seeds);
  xf__router_free(c);
  xf__route_free(&c->routes);
  xf__tls_free(c->tls);
  free(c->host);
  free(c->unix_path);
  free(c->username);
  free(c->password);
  free(c->prefix);
  free(c->ns);
  free(c->opened_with);
  xf__buf_free(&c->request);
  xf__codec_release(&c->rt);
  xf__share_unref(c->share); /* after its connections: they report to its near cache */
  free(c);
}

int xf_ping(xf_client *c) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  static const xf__cmd ping = {.argc = 1, .argv = {"PING"}, .lens = {4}};
  xf__reply *r;
  int rc = xf__command(c, &ping, &r);
  if (rc != XF_OK)
    return rc;
  if (r->type == XF_REPLY_ERROR)
    rc = xf__fail(c, xf__reply_classify(r) == XF_REPLY_NOAUTH ? XF_EAUTH : XF_EREDIS,
                  "PING: %s", r->str);
  xf__reply_free(r);
  return rc;
}

const char *xf_errmsg(const xf_client *c) {
  if (c)
    return c->errstr;
  return open_error[0] ? open_error : "client is NULL";
}

int xf_loader_error(const xf_client *c) { return c ? c->loader_rc : 0; }

int xf_load_moved(const xf_client *c) { return c && c->load_moved; }

void xf_client_set_enabled(xf_client *c, int enabled) {
  if (c)
    c->disabled = !enabled;
}

void xf_client_stats(const xf_client *c, xf_stats *out) {
  if (!out)
    return;
  if (!c) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = c->stats;
  out->connections = c->fleet ? (uint64_t)xf__router_open_connections(c) : 0;
}
