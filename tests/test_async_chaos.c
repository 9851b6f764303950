/* The event-loop driver under load while the cluster changes under it: a
 * resharding of 1,000 slots by redis-cli, and a master killed until its
 * replica takes over. The loop keeps up to PENDING calls in flight on 300
 * keys while another thread changes the cluster; each test has its own
 * cluster, in its own process (ctest --filter). Asserted: every call ends
 * XF_OK with the right value (a call may fail open while a master is gone,
 * never error), and afterwards every key is a cache hit. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <xfetch_libuv.h>

#include "cluster_fixture.h"

#define HOST "127.0.0.1"
#define KEYS 300
#define PENDING 200 /* calls in flight */

static xft_cluster cl; /* this test's own: it changes it for good */
static int loads[KEYS];
static int chaos_over; /* set by the chaos thread */

typedef struct load {
  uv_loop_t loop;
  uv_timer_t tick;
  xf_async *ac;
  unsigned seed;
  int pending, stopping;
  long calls, errors, wrong, fail_open, hits;
  char first_error[256];
} load;

typedef struct call {
  load *l;
  int key;
} call;

static void key_of(int i, char *key, size_t size) { snprintf(key, size, "achaos:%d", i); }

static void loader(void *ud, const char *key, size_t keylen, xf_async_load *ld) {
  loads[(intptr_t)ud]++;
  char v[64];
  int len = snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  xf_async_load_done(ld, v, (size_t)len);
}

static void on_done(int rc, const xf_value *v, void *privdata) {
  call *k = privdata;
  load *l = k->l;
  char key[32], want[40];
  key_of(k->key, key, sizeof key);
  snprintf(want, sizeof want, "v-%s", key);
  l->calls++;
  if (rc != XF_OK) {
    if (l->errors++ == 0)
      snprintf(l->first_error, sizeof l->first_error, "%s: %s (%s)", key, xf_errname(rc),
               xf_async_errmsg(l->ac));
  } else if (v->len != strlen(want) || memcmp(v->data, want, v->len) != 0) {
    l->wrong++;
  } else if (v->source == XF_SOURCE_UNCACHED) {
    l->fail_open++;
  } else if (v->source == XF_SOURCE_CACHE) {
    l->hits++;
  }
  free(k);
  if (--l->pending == 0 && l->stopping)
    uv_stop(&l->loop);
}

static void start_call(load *l, int i) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600 * 1000;
  p.beta = 0;
  p.wait_ms = 3000;
  call *k = malloc(sizeof *k);
  cr_assert_not_null(k);
  *k = (call){.l = l, .key = i};
  char key[32];
  key_of(i, key, sizeof key);
  int rc = xf_async_get_or_compute(l->ac, key, strlen(key), &p, loader, (void *)(intptr_t)i,
                                   on_done, k);
  cr_assert_eq(rc, XF_OK);
  l->pending++;
}

/* Every millisecond: tops the calls in flight up, until the chaos is over. */
static void on_tick(uv_timer_t *t) {
  load *l = t->data;
  if (__atomic_load_n(&chaos_over, __ATOMIC_SEQ_CST)) {
    l->stopping = 1;
    uv_timer_stop(t);
    if (l->pending == 0)
      uv_stop(&l->loop);
    return;
  }
  for (int n = 0; n < 20 && l->pending < PENDING; n++) {
    l->seed = l->seed * 1103515245u + 12345u;
    start_call(l, (int)((l->seed >> 8) % KEYS));
  }
}

static void open_load(load *l, int command_timeout_ms) {
  memset(l, 0, sizeof *l);
  char seeds[256];
  int at = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    at += snprintf(seeds + at, sizeof seeds - (size_t)at, "%s" HOST ":%d", i ? "," : "",
                   cl.port[i]);
  cr_assert_eq(uv_loop_init(&l->loop), 0);
  xf_options o = XF_OPTIONS_INIT;
  o.host = seeds;
  o.breaker_ms = 200;
  o.command_timeout_ms = command_timeout_ms;
  cr_assert_eq(xf_async_open_libuv(&l->ac, &o, &l->loop), XF_OK);
  l->seed = 1;
}

/* Every key once, all at once; runs the loop until they are done. */
static void each_key_once(load *l) {
  l->stopping = 1;
  for (int i = 0; i < KEYS; i++)
    start_call(l, i);
  uv_run(&l->loop, UV_RUN_DEFAULT);
  l->stopping = 0;
}

/* Runs the load on the loop until the chaos thread is done. */
static void run_load(load *l, void *(*chaos)(void *)) {
  each_key_once(l); /* warm */
  cr_assert_eq(l->errors, 0, "%s", l->first_error);
  for (int i = 0; i < KEYS; i++)
    cr_assert_eq(loads[i], 1);
  l->calls = l->hits = 0;
  pthread_t thread;
  cr_assert_eq(pthread_create(&thread, NULL, chaos, NULL), 0);
  uv_timer_init(&l->loop, &l->tick);
  l->tick.data = l;
  uv_timer_start(&l->tick, on_tick, 1, 1);
  uv_run(&l->loop, UV_RUN_DEFAULT);
  pthread_join(thread, NULL);
  uv_close((uv_handle_t *)&l->tick, NULL);
  cr_expect_eq(l->errors, 0, "%ld errors in %ld calls, first: %s", l->errors, l->calls,
               l->first_error);
  cr_expect_eq(l->wrong, 0, "%ld wrong values", l->wrong);
  cr_expect_gt(l->calls, 1000, "the load ran (%ld calls)", l->calls);
}

/* Afterwards: every key is a hit, with no loader call. */
static void expect_all_cached(load *l) {
  int before = 0, after = 0;
  for (int i = 0; i < KEYS; i++)
    before += loads[i];
  l->hits = l->errors = 0;
  each_key_once(l);
  for (int i = 0; i < KEYS; i++)
    after += loads[i];
  cr_expect_eq(l->errors, 0, "%s", l->first_error);
  cr_expect_eq(l->hits, KEYS, "%ld of %d keys were hits", l->hits, KEYS);
  cr_expect_eq(after, before, "no key loaded again");
  xf_stats st;
  xf_async_stats(l->ac, &st);
  cr_log_info("%ld calls, %ld failed open, %lu redirects, %lu map loads", l->calls,
              l->fail_open, (unsigned long)st.redirects, (unsigned long)st.map_refreshes);
  xf_async_close(l->ac);
  uv_run(&l->loop, UV_RUN_DEFAULT);
  cr_expect_eq(uv_loop_close(&l->loop), 0);
}

/* ---- the cluster ----------------------------------------------------------------- */

static int is_master(int port) {
  redisContext *r = xft_cluster_connect(port);
  redisReply *rep = r ? redisCommand(r, "ROLE") : NULL;
  int master =
      rep && rep->type == REDIS_REPLY_ARRAY && strcmp(rep->element[0]->str, "master") == 0;
  if (rep)
    freeReplyObject(rep);
  redisFree(r);
  return master;
}

static int masters[3], nmasters;

static void start_cluster(void) {
  cr_assert_eq(xft_cluster_start(&cl), 0, "cannot start the cluster");
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    if (is_master(cl.port[i]))
      masters[nmasters++] = cl.port[i];
  cr_assert_eq(nmasters, 3);
}

static void stop_cluster(void) { xft_cluster_stop(&cl); }

static char *reply_str(int port, const char *cmd) {
  redisContext *r = xft_cluster_connect(port);
  redisReply *rep = r ? redisCommand(r, cmd) : NULL;
  char *s = rep && rep->str ? strdup(rep->str) : NULL;
  if (rep)
    freeReplyObject(rep);
  redisFree(r);
  return s;
}

static int reshard_rc = -1, healed_ok;

static void *reshard(void *unused) {
  (void)unused;
  char *from = reply_str(masters[0], "CLUSTER MYID"),
       *to = reply_str(masters[1], "CLUSTER MYID");
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "redis-cli --cluster reshard " HOST ":%d --cluster-from %s --cluster-to %s "
           "--cluster-slots 1000 --cluster-yes >/dev/null 2>&1",
           masters[0], from ? from : "?", to ? to : "?");
  xft_cluster_sleep_ms(300);
  reshard_rc = system(cmd);
  xft_cluster_sleep_ms(300);
  free(from);
  free(to);
  __atomic_store_n(&chaos_over, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* Whether every surviving node says cluster_state:ok and lists no slot on
 * the dead master. */
static int healed(int dead) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    if (cl.port[i] == dead)
      continue;
    redisContext *r = xft_cluster_connect(cl.port[i]);
    redisReply *info = r ? redisCommand(r, "CLUSTER INFO") : NULL;
    redisReply *slots = r ? redisCommand(r, "CLUSTER SLOTS") : NULL;
    int ok = info && info->str && strstr(info->str, "cluster_state:ok") && slots &&
             slots->type == REDIS_REPLY_ARRAY;
    for (size_t s = 0; ok && s < slots->elements; s++)
      ok = slots->element[s]->element[2]->element[1]->integer != dead;
    if (info)
      freeReplyObject(info);
    if (slots)
      freeReplyObject(slots);
    redisFree(r);
    if (!ok)
      return 0;
  }
  return 1;
}

static void *failover(void *unused) {
  (void)unused;
  char *pid = reply_str(masters[0], "INFO server");
  const char *at = pid ? strstr(pid, "process_id:") : NULL;
  pid_t victim = at ? (pid_t)atoi(at + strlen("process_id:")) : 0;
  free(pid);
  xft_cluster_sleep_ms(300);
  if (victim > 0 && kill(victim, SIGKILL) == 0)
    for (int waited = 0; waited < 20000 && !(healed_ok = healed(masters[0])); waited += 100)
      xft_cluster_sleep_ms(100); /* node-timeout (3 s), then the election */
  xft_cluster_sleep_ms(1000);    /* calls served by the new master */
  __atomic_store_n(&chaos_over, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

TestSuite(async_chaos, .init = start_cluster, .fini = stop_cluster, .timeout = 90);

/* A 10 s command timeout: no node goes away, and a reply later than the
 * default 1 s on a busy machine (the load beside the reshard's MIGRATEs)
 * would open the breaker and fail calls open, read as a node gone. */
Test(async_chaos, resharding_1000_slots_under_load) {
  load l;
  open_load(&l, 10000);
  run_load(&l, reshard);
  cr_expect_eq(reshard_rc, 0, "redis-cli --cluster reshard failed");
  xf_stats st;
  xf_async_stats(l.ac, &st);
  cr_expect_gt(st.redirects, 0, "the load met the resharding");
  cr_expect_eq(l.fail_open, 0, "no node went away");
  for (int i = 0; i < KEYS; i++)
    cr_expect_eq(loads[i], 1, "key %d moved with its slot, never reloaded", i);
  expect_all_cached(&l);
}

Test(async_chaos, a_master_killed_under_load_fails_over_without_errors) {
  load l;
  open_load(&l, 1000);
  run_load(&l, failover);
  cr_expect(healed_ok, "no failover within 20 s");
  cr_expect_gt(l.fail_open, 0, "the load met the failover window");
  expect_all_cached(&l);
}
