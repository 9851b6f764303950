/* The client under load while the cluster changes under it: a resharding of
 * 1,000 slots by redis-cli, and a master killed until its replica takes
 * over. Each test changes the cluster for good, so ctest runs each one in its
 * own process (--filter), with its own cluster. Asserted throughout:
 * every call returns XF_OK with the right value (a call may fail open while
 * a master is gone, never error), and one loader call per key episode.
 * Some keys carry 2 tags whose keys sit in other slots (on other masters,
 * mostly), which a thread keeps invalidating: their values are the right
 * key's, and through the resharding and the failover never one loaded
 * before an invalidation that had returned XF_OK. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "cluster_fixture.h"
#include "xfetch.h"

#define HOST "127.0.0.1"
#define THREADS 4
#define HOT 300  /* keys cached for the whole test: never reloaded */
#define CHURN 10 /* keys that expire every CHURN_TTL_MS: reloaded */
#define CHURN_TTL_MS 400
#define TAGGED 12 /* keys with 2 of 4 tags each, invalidated all along */
#define TAGS 4
#define TAG_EVERY_MS 20 /* between two invalidations */

static xft_cluster cl; /* this test's own: it changes it for good */
static int loads[HOT + CHURN + TAGGED];
static long gen, done[TAGS]; /* the tagged keys' data generation; per tag, the
                                highest whose invalidation returned */
static long invalidations, invalidation_errors;
static volatile int running = 1;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The tagged keys' and the tags' names, chosen by aim(): half of each in the
 * slots the test moves or whose master it kills, half elsewhere. */
static int tagged_salt[TAGGED];
static char tag_names[TAGS][16];

static int is_tagged(int i) { return i >= HOT + CHURN; }

static void key_of(int i, char *key, size_t size) {
  if (is_tagged(i))
    snprintf(key, size, "chaos:tagged:%d:%d", i, tagged_salt[i - HOT - CHURN]);
  else
    snprintf(key, size, "chaos:%s:%d", i < HOT ? "hot" : "churn", i);
}

static const char *tag_name(int t) { return tag_names[t]; }

/* Tagged key i carries tags i % 4 and (i + 1) % 4. */
static void tags_of(int i, const char **tags, int *t) {
  t[0] = i % TAGS, t[1] = (i + 1) % TAGS;
  tags[0] = tag_name(t[0]), tags[1] = tag_name(t[1]);
}

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  __atomic_add_fetch(&loads[(intptr_t)ud], 1, __ATOMIC_SEQ_CST);
  char v[96];
  int i = (int)(intptr_t)ud;
  int len = is_tagged(i) ? snprintf(v, sizeof v, "v-%.*s-g%ld", (int)keylen, key,
                                    __atomic_load_n(&gen, __ATOMIC_SEQ_CST))
                         : snprintf(v, sizeof v, "v-%.*s", (int)keylen, key);
  return xf_sink_set(sink, v, (size_t)len);
}

typedef struct worker {
  pthread_t thread;
  xf_client *c;
  unsigned seed;
  long calls, errors, wrong, fail_open;
  long stale; /* tagged: served from the cache, loaded before a returned invalidation */
  char first_error[256];
} worker;

static xf_share *share;

static xf_client *open_client(void) {
  char seeds[256];
  int at = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    at += snprintf(seeds + at, sizeof seeds - (size_t)at, "%s" HOST ":%d", i ? "," : "",
                   cl.port[i]);
  xf_options o = XF_OPTIONS_INIT;
  o.host = seeds;
  o.share = share;
  o.breaker_ms = 200;
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static xf_policy policy_of(int i) {
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = i < HOT || is_tagged(i) ? 3600 * 1000 : CHURN_TTL_MS;
  p.beta = i < HOT || is_tagged(i) ? 0 : 1;
  p.wait_ms = 3000;
  return p;
}

/* One call on key i; returns 0, or -1 with the worker's counters updated. */
static void call(worker *w, int i) {
  char key[64], want[80];
  key_of(i, key, sizeof key);
  snprintf(want, sizeof want, "v-%s", key);
  xf_policy p = policy_of(i);
  const char *tags[2];
  int t[2];
  long floor = 0;
  if (is_tagged(i)) {
    tags_of(i, tags, t);
    p.tags = tags, p.ntags = 2;
    long f0 = __atomic_load_n(&done[t[0]], __ATOMIC_SEQ_CST),
         f1 = __atomic_load_n(&done[t[1]], __ATOMIC_SEQ_CST);
    floor = f0 > f1 ? f0 : f1;
    strcat(want, "-g");
  }
  xf_value v;
  int rc = xf_get_or_compute(w->c, key, strlen(key), &p, loader, (void *)(intptr_t)i, &v);
  w->calls++;
  if (rc != XF_OK) {
    if (w->errors++ == 0)
      snprintf(w->first_error, sizeof w->first_error, "%s: %s (%s)", key, xf_errname(rc),
               xf_errmsg(w->c));
  } else if (!v.data || (is_tagged(i) ? strncmp(v.data, want, strlen(want)) != 0
                                      : strcmp(v.data, want) != 0)) {
    w->wrong++;
  } else if (is_tagged(i) && v.source != XF_SOURCE_UNCACHED &&
             v.source != XF_SOURCE_LOCAL && atol(v.data + strlen(want)) < floor) {
    w->stale++;
  } else if (v.source == XF_SOURCE_UNCACHED || v.source == XF_SOURCE_LOCAL) {
    w->fail_open++;
  }
  xf_value_free(&v);
}

static void *work(void *arg) {
  worker *w = arg;
  while (__atomic_load_n(&running, __ATOMIC_SEQ_CST)) {
    w->seed = w->seed * 1103515245u + 12345u;
    int i = (int)((w->seed >> 8) % (HOT + CHURN + TAGGED));
    call(w, i);
  }
  return NULL;
}

static worker workers[THREADS];

static int keyslot(redisContext *r, const char *key) {
  redisReply *rep = xft_cluster_cmd(r, "CLUSTER KEYSLOT %s", key);
  int slot = (int)rep->integer;
  freeReplyObject(rep);
  return slot;
}

/* The master serving slot, as the node at port sees it (its port). */
static int owner_of(int slot, int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "CLUSTER SLOTS");
  int owner = 0;
  for (size_t i = 0; i < rep->elements; i++) {
    redisReply *range = rep->element[i];
    if (range->element[0]->integer <= slot && slot <= range->element[1]->integer)
      owner = (int)range->element[2]->element[1]->integer;
  }
  freeReplyObject(rep);
  redisFree(r);
  return owner;
}

/* The lowest slot the master at port serves: redis-cli --cluster reshard
 * moves a master's slots from its lowest up, so [first, first + 1000) is
 * what the resharding moves, all of it the master's (3 masters of 5,461
 * slots each). */
static int first_slot_of(int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "CLUSTER SLOTS");
  int first = -1;
  for (size_t i = 0; i < rep->elements; i++) {
    redisReply *range = rep->element[i];
    int start = (int)range->element[0]->integer;
    if (range->element[2]->element[1]->integer == port && (first < 0 || start < first))
      first = start;
  }
  freeReplyObject(rep);
  redisFree(r);
  cr_assert_geq(first, 0, "node %d serves no slot", port);
  return first;
}

/* Names the tags (a tag's key, <prefix>xf-tag:{name}, is in name's slot) and
 * the tagged keys: the even ones in [first, first + 1000) of master port, the
 * odd ones outside. */
static void aim(int port) {
  int first = first_slot_of(port);
  redisContext *r = xft_cluster_redis(port);
  int n = 0;
  for (int t = 0; t < TAGS; t++) {
    for (;; n++) {
      char name[16];
      snprintf(name, sizeof name, "ct:%d", n);
      int slot = keyslot(r, name), in = slot >= first && slot < first + 1000;
      if (in == (t % 2 == 0)) {
        snprintf(tag_names[t], sizeof tag_names[t], "%s", name);
        n++;
        break;
      }
    }
  }
  for (int k = 0; k < TAGGED; k++) {
    for (int salt = 0;; salt++) {
      tagged_salt[k] = salt;
      char key[64];
      key_of(HOT + CHURN + k, key, sizeof key);
      int slot = keyslot(r, key), in = slot >= first && slot < first + 1000;
      if (in == (k % 2 == 0))
        break;
    }
  }
  redisFree(r);
}
static pthread_t invalidator_thread;

/* Raises the generation, then invalidates one tag, every TAG_EVERY_MS; an
 * invalidation may fail while its tag's master is gone, or return
 * XF_ENOTREPLICATED (counted, not an error of the test: the caller knows). */
static void *invalidator(void *arg) {
  xf_client *c = arg;
  for (int n = 0; __atomic_load_n(&running, __ATOMIC_SEQ_CST); n++) {
    int t = n % TAGS;
    long g = __atomic_add_fetch(&gen, 1, __ATOMIC_SEQ_CST);
    const char *tags[] = {tag_name(t)};
    if (xf_invalidate_tags(c, tags, 1) == XF_OK) {
      __atomic_store_n(&done[t], g, __ATOMIC_SEQ_CST); /* one thread: g only grows */
      __atomic_add_fetch(&invalidations, 1, __ATOMIC_SEQ_CST);
    } else
      __atomic_add_fetch(&invalidation_errors, 1, __ATOMIC_SEQ_CST);
    xft_cluster_sleep_ms(TAG_EVERY_MS);
  }
  xf_client_close(c);
  return NULL;
}

static void start_load(int aimed_port) {
  aim(aimed_port);
  cr_assert_eq(xf_share_open(&share, NULL), XF_OK);
  worker warm = {.c = open_client()};
  for (int i = 0; i < HOT + CHURN + TAGGED; i++)
    call(&warm, i);
  cr_assert_eq(warm.errors, 0, "%s", warm.first_error);
  xf_client_close(warm.c);
  for (int i = 0; i < HOT; i++)
    cr_assert_eq(loads[i], 1);
  for (int t = 0; t < THREADS; t++) {
    workers[t] = (worker){.c = open_client(), .seed = (unsigned)t + 1};
    cr_assert_eq(pthread_create(&workers[t].thread, NULL, work, &workers[t]), 0);
  }
  cr_assert_eq(pthread_create(&invalidator_thread, NULL, invalidator, open_client()), 0);
}

/* Stops the load and checks what the callers saw; returns the fail-opens;
 * *stale: the tagged reads of an invalidated value. */
static long stop_load(double seconds, xf_stats *sum, long *stale) {
  __atomic_store_n(&running, 0, __ATOMIC_SEQ_CST);
  pthread_join(invalidator_thread, NULL);
  long calls = 0, fail_open = 0, tagged_loads = 0;
  *stale = 0;
  memset(sum, 0, sizeof *sum);
  for (int t = 0; t < THREADS; t++) {
    worker *w = &workers[t];
    pthread_join(w->thread, NULL);
    cr_expect_eq(w->errors, 0, "thread %d: %ld errors, first: %s", t, w->errors,
                 w->first_error);
    cr_expect_eq(w->wrong, 0, "thread %d: %ld wrong values", t, w->wrong);
    calls += w->calls;
    fail_open += w->fail_open;
    *stale += w->stale;
    xf_stats st;
    xf_client_stats(w->c, &st);
    sum->redirects += st.redirects;
    sum->map_refreshes += st.map_refreshes;
    xf_client_close(w->c);
  }
  /* Each churn key lives CHURN_TTL_MS: one load per lifetime, but XFetch
   * refreshes a hot key before its ttl ends (so lifetimes run shorter), and a
   * failover's fail-open loads come on top: at most two per lifetime, plus the
   * first. A stampede would be about THREADS (4) per lifetime. */
  int lifetimes = (int)(seconds * 1000 / CHURN_TTL_MS) + 1;
  for (int i = HOT; i < HOT + CHURN; i++)
    cr_expect_leq(loads[i], 2 * lifetimes + 1, "churn key %d: %d loads for %d lifetimes", i,
                  loads[i], lifetimes);
  for (int i = HOT + CHURN; i < HOT + CHURN + TAGGED; i++)
    tagged_loads += loads[i];
  cr_expect_gt(invalidations, 10, "%ld invalidations", invalidations);
  cr_log_info("%ld calls in %.1f s, %ld failed open, %lu redirects, %lu map loads; tagged: "
              "%ld loads, %ld invalidations (%ld failed), %ld stale reads",
              calls, seconds, fail_open, (unsigned long)sum->redirects,
              (unsigned long)sum->map_refreshes, tagged_loads, invalidations,
              invalidation_errors, *stale);
  xf_share_close(share);
  share = NULL; /* the check after a failover opens clients of its own, without it */
  return fail_open;
}

/* node ids and roles */
static void node_id(int port, char id[41]) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "CLUSTER MYID");
  snprintf(id, 41, "%s", rep->str);
  freeReplyObject(rep);
  redisFree(r);
}

static int is_master(int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "ROLE");
  int master = strcmp(rep->element[0]->str, "master") == 0;
  freeReplyObject(rep);
  redisFree(r);
  return master;
}

static int masters(int *ports) {
  int n = 0;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    if (is_master(cl.port[i]))
      ports[n++] = cl.port[i];
  return n;
}

static void start_cluster(void) {
  cr_assert_eq(xft_cluster_start(&cl), 0, "cannot start the cluster");
}

static void stop_cluster(void) { xft_cluster_stop(&cl); }

TestSuite(cluster_chaos, .init = start_cluster, .fini = stop_cluster, .timeout = 90);

Test(cluster_chaos, resharding_1000_slots_under_load) {
  int m[XFT_CLUSTER_NODES];
  cr_assert_eq(masters(m), 3);
  start_load(m[0]);
  redisContext *r = xft_cluster_redis(m[0]);
  int moved_tag_slot = keyslot(r, tag_name(0));
  redisFree(r);
  char from[41], to[41];
  node_id(m[0], from);
  node_id(m[1], to);
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "redis-cli --cluster reshard " HOST ":%d --cluster-from %s --cluster-to %s "
           "--cluster-slots 1000 --cluster-yes >/dev/null 2>&1",
           m[0], from, to);
  double t0 = now_s();
  xft_cluster_sleep_ms(300);
  int rc = system(cmd);
  xft_cluster_sleep_ms(300);
  double t1 = now_s();
  xf_stats sum;
  long stale;
  stop_load(t1 - t0, &sum, &stale);
  cr_assert_eq(rc, 0, "redis-cli --cluster reshard failed");
  cr_expect_eq(owner_of(moved_tag_slot, m[1]), m[1],
               "tag %s's key moved with the resharding", tag_name(0));
  cr_expect_eq(stale, 0,
               "%ld tagged reads of a value loaded before a returned invalidation", stale);
  cr_expect_gt(sum.redirects, 0, "the load met the resharding");
  for (int i = 0; i < HOT; i++)
    cr_expect_eq(loads[i], 1, "hot key %d moved with its slot, never reloaded", i);
}

static pid_t pid_of(int port) {
  redisContext *r = xft_cluster_redis(port);
  redisReply *rep = xft_cluster_cmd(r, "INFO server");
  const char *at = strstr(rep->str, "process_id:");
  pid_t pid = at ? (pid_t)atoi(at + strlen("process_id:")) : 0;
  freeReplyObject(rep);
  redisFree(r);
  return pid;
}

/* Whether the surviving nodes agree the cluster is whole again: state ok,
 * and the dead node serves no slot. */
static int healed(int dead_port) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    int port = cl.port[i];
    if (port == dead_port)
      continue;
    redisContext *r = xft_cluster_redis(port);
    redisReply *info = xft_cluster_cmd(r, "CLUSTER INFO");
    int ok = strstr(info->str, "cluster_state:ok") != NULL;
    freeReplyObject(info);
    redisReply *slots = xft_cluster_cmd(r, "CLUSTER SLOTS");
    for (size_t s = 0; ok && s < slots->elements; s++)
      ok = slots->element[s]->element[2]->element[1]->integer != dead_port;
    freeReplyObject(slots);
    redisFree(r);
    if (!ok)
      return 0;
  }
  return 1;
}

Test(cluster_chaos, a_master_killed_under_load_fails_over_without_errors) {
  int m[XFT_CLUSTER_NODES];
  cr_assert_eq(masters(m), 3);
  start_load(m[0]);
  double t0 = now_s();
  xft_cluster_sleep_ms(300);
  pid_t victim = pid_of(m[0]);
  cr_assert_gt(victim, 0);
  cr_assert_eq(kill(victim, SIGKILL), 0);
  /* Down for node-timeout (3 s) until its replica is elected. */
  double deadline = now_s() + 20;
  while (!healed(m[0]) && now_s() < deadline)
    xft_cluster_sleep_ms(100);
  cr_assert(healed(m[0]), "no failover within 20 s");
  xft_cluster_sleep_ms(1000); /* calls served by the new master */
  xf_stats sum;
  long stale;
  long fail_open = stop_load(now_s() - t0, &sum, &stale);
  /* An invalidation returns XF_OK once a replica has its raise (WAIT): the
   * replica promoted has every one that returned. Those that did not (the
   * master gone, or no replica acknowledged in time: XF_ENOTREPLICATED)
   * raise no floor (invalidator()), so their entries may be served. */
  cr_expect_eq(stale, 0,
               "%ld tagged reads of a value loaded before a returned invalidation", stale);
  cr_expect_gt(fail_open, 0, "the load met the failover window");
  for (int i = 0; i < HOT; i++)
    cr_expect_leq(loads[i], 2, "hot key %d: %d loads", i, loads[i]);
  /* Afterwards every hot key is served from the cache again. */
  xf_client *c = open_client();
  for (int i = 0; i < HOT; i++) {
    char key[64];
    key_of(i, key, sizeof key);
    xf_policy p = policy_of(i);
    xf_value v;
    cr_expect_eq(
        xf_get_or_compute(c, key, strlen(key), &p, loader, (void *)(intptr_t)i, &v), XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_CACHE, "%s: source %d", key, v.source);
    xf_value_free(&v);
  }
  xf_client_close(c);
}
