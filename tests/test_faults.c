/* Production faults on a real redis-server: what a caller sees. Each test
 * that breaks its server starts its own. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "entry.h"
#include "entry_io.h"
#include "entry_peek.h"
#include "fixture.h"
#include "thread_fail.h"

static int get(xf_client *c, const char *key, const xf_policy *p, xft_loader *l,
               xf_value *v) {
  return xf_get_or_compute(c, key, strlen(key), p, xft_load, l, v);
}

/* A hit after the server cut the connection: one reconnection, no loader,
 * no breaker. */
static void expect_hit_after_cut(xf_client *c, const char *key) {
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "reloaded"};
  xf_value v;
  cr_assert_eq(get(c, key, &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "cached");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_value_free(&v);
  cr_assert_eq(get(c, key, &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_CACHE, "the breaker did not open");
  xf_value_free(&v);
}

Test(faults, idle_timeout_reconnects_without_the_breaker) {
  static const char *const conf[] = {"--timeout", "1", NULL};
  xft_server s;
  cr_assert_eq(xft_server_start(&s, conf), 0);
  xf_client *c = xft_client_port(s.port, 1);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "faults:idle", 11, "cached", 6, &p), XF_OK);
  /* The server's cut, seen before the call: a fresh probe sees itself alone
   * (past the 1 s idle timeout, checked by serverCron, however late a busy
   * machine runs it; bound 20 s). Cut while the call runs, the call would
   * meet another case. */
  xft_sleep_ms(1000);
  for (int64_t until = xft_now_ms() + 20000;; xft_sleep_ms(50)) {
    /* A probe that idled a second before its command (a busy machine) is
     * cut too: asked again. */
    redisContext *probe = xft_redis_port(s.port);
    redisReply *list = redisCommand(probe, "CLIENT LIST TYPE normal");
    int clients = 0;
    for (const char *at = list && list->type == REDIS_REPLY_STRING ? list->str : "";
         (at = strchr(at, '\n')) != NULL; at++)
      clients++;
    if (list)
      freeReplyObject(list);
    redisFree(probe);
    if (clients == 1)
      break;
    cr_assert_lt(xft_now_ms(), until, "the idle connection was never cut");
  }
  expect_hit_after_cut(c, "faults:idle");
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(faults, client_kill_reconnects_without_the_breaker) {
  xft_server s; /* its own: the kill below must reach no other test's connection */
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  redisContext *r = xft_redis_port(s.port);
  xf_client *c = xft_client_port(s.port, 1);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "faults:kill", 11, "cached", 6, &p), XF_OK);
  redisReply *id = xft_cmd(r, "CLIENT LIST");
  freeReplyObject(id);
  /* Kill every other normal connection of this server: ours. */
  freeReplyObject(xft_cmd(r, "CLIENT KILL TYPE normal SKIPME yes"));
  expect_hit_after_cut(c, "faults:kill");
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(faults, a_busy_script_fails_open) {
  static const char *const conf[] = {"--busy-reply-threshold", "50", NULL};
  xft_server s;
  cr_assert_eq(xft_server_start(&s, conf), 0);
  xf_client *c = xft_client_port(s.port, 1);
  cr_assert_eq(xf_ping(c), XF_OK);
  redisContext *busy = xft_redis_port(s.port);
  redisAppendCommand(busy, "EVAL %s 0", "while true do end");
  int done = 0;
  while (!done)
    cr_assert_eq(redisBufferWrite(busy, &done), REDIS_OK);
  /* Busy once a probe's PING is refused BUSY (past the 50 ms threshold;
   * bound 20 s however late a busy machine runs the script). */
  redisContext *probe = xft_redis_port(s.port);
  for (int64_t until = xft_now_ms() + 20000;; xft_sleep_ms(10)) {
    redisReply *pong = xft_cmd(probe, "PING");
    int refused = pong->type == REDIS_REPLY_ERROR && strncmp(pong->str, "BUSY", 4) == 0;
    freeReplyObject(pong);
    if (refused)
      break;
    cr_assert_lt(xft_now_ms(), until, "the script never made the server busy");
  }
  redisFree(probe);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "direct"};
  xf_value v;
  cr_assert_eq(get(c, "faults:busy", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "direct");
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&l), 1);
  cr_expect(strstr(xf_errmsg(c), "BUSY") != NULL, "message: %s", xf_errmsg(c));
  xf_value_free(&v);
  redisContext *r = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(r, "SCRIPT KILL"));
  redisFree(r);
  redisFree(busy);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(faults, an_acl_user_without_evalsha_is_a_loud_error) {
  redisContext *r = xft_redis();
  freeReplyObject(xft_cmd(r, "ACL SETUSER noscript on >pw ~* +@all -evalsha -evalsha_ro"));
  redisFree(r);
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.username = "noscript";
  o.password = "pw";
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_expect_eq(get(c, "faults:acl", &p, &l, &v), XF_ENOPERM);
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_client_close(c);
}

Test(faults, a_forked_child_gets_its_own_lease_tokens) {
  xf_client *c = xft_client(1);
  char token[40], child_token[40] = "";
  int64_t now;
  xf__lease_result won;
  xf__entry newer;
  cr_assert_eq(xft_entry_lease(c, "faults:fork", 11, 5000, 0, token, &now, &won, &newer),
               XF_OK);
  cr_assert_eq(won, XF_LEASE_WON);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  if (pid == 0) {
    char mine[40] = "";
    /* The child's first command renews the client's identity. */
    xft_entry_lease(c, "faults:fork-child", 17, 5000, 0, mine, &now, &won, &newer);
    xf__entry_free(&newer);
    /* It cannot release the parent's live lease. */
    xft_entry_release(c, "faults:fork", 11, mine);
    ssize_t n = write(fds[1], mine, sizeof mine);
    xf_client_close(c);
    _exit(n == (ssize_t)sizeof mine ? 0 : 1);
  }
  cr_assert_eq(read(fds[0], child_token, sizeof child_token), (ssize_t)sizeof child_token);
  int status;
  waitpid(pid, &status, 0);
  close(fds[0]);
  close(fds[1]);
  cr_expect_neq(strncmp(token, child_token, 16), 0, "client ids %.16s and %.16s", token,
                child_token);
  redisContext *r = xft_redis();
  xft_peek e;
  xft_peek_read(r, "faults:fork", token, &e);
  cr_expect(e.live && e.mine, "the parent's lease is intact (%s entry)", e.kind);
  xft_peek_free(&e);
  redisFree(r);
  xf_client_close(c);
}

Test(faults, a_read_only_replica_serves_hits_and_fails_open_on_misses) {
  static const char *const fast_sync[] = {"--repl-diskless-sync-delay", "0", NULL};
  xft_server master, replica;
  cr_assert_eq(xft_server_start(&master, fast_sync), 0);
  char port[16];
  snprintf(port, sizeof port, "%d", master.port);
  const char *const conf[] = {"--replicaof", "127.0.0.1", port, NULL};
  cr_assert_eq(xft_server_start(&replica, conf), 0);
  xf_client *m = xft_client_port(master.port, 1);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(m, "faults:replica", 14, "cached", 6, &p), XF_OK);
  redisContext *r = xft_redis_port(replica.port);
  for (int i = 0; i < 300 && xft_int(r, "EXISTS faults:replica") == 0; i++)
    xft_sleep_ms(10);
  cr_assert_eq(xft_int(r, "EXISTS faults:replica"), 1, "the replica never synced");
  xf_client *c = xft_client_port(replica.port, 1);
  xft_loader l = {.value = "direct"};
  xf_value v;
  cr_assert_eq(get(c, "faults:replica", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "cached");
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  xf_value_free(&v);
  cr_assert_eq(get(c, "faults:replica-miss", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "direct");
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
  redisFree(r);
  xf_client_close(c);
  xf_client_close(m);
  xft_server_stop(&replica);
  xft_server_stop(&master);
}

/* A client with short timeouts on its own server, a value cached. The server
 * is healthy here, but a busy machine can make its setup or the set miss the
 * 200 ms command timeout (an open failed so in a busy run): each is tried
 * again, past the breaker, for up to 20 s. */
static xf_client *short_client(int port) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.command_timeout_ms = 200;
  o.breaker_ms = 300;
  o.seed = 1;
  xf_client *c = NULL;
  int64_t until = xft_now_ms() + 20000;
  int rc;
  while ((rc = xf_client_open(&c, &o)) != XF_OK && xft_now_ms() < until)
    xft_sleep_ms(400);
  cr_assert_eq(rc, XF_OK, "%s", xf_errmsg(NULL));
  xf_policy p = XF_POLICY_INIT;
  while ((rc = xf_set(c, "faults:k", 8, "cached", 6, &p)) != XF_OK && xft_now_ms() < until)
    xft_sleep_ms(400);
  cr_assert_eq(rc, XF_OK, "%s", xf_errmsg(c));
  return c;
}

static void expect_fail_open(xf_client *c) {
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "direct"};
  xf_value v;
  cr_assert_eq(get(c, "faults:k", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_str_eq(v.data, "direct");
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
}

/* Hits again once the server answers: past breaker_ms, a call is a hit; on
 * a busy machine the server just resumed can still miss the 200 ms command
 * timeout (a fail-open, correct), so calls are tried until one hits (bound
 * 20 s), and that one must be the cached value. */
static void expect_hit_again(xf_client *c) {
  xft_sleep_ms(400); /* past breaker_ms */
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  for (int64_t until = xft_now_ms() + 20000;; xft_sleep_ms(400)) {
    xft_loader l = {.value = "direct"};
    cr_assert_eq(get(c, "faults:k", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
    if (v.source != XF_SOURCE_UNCACHED || xft_now_ms() >= until) {
      cr_expect_str_eq(v.data, "cached");
      cr_expect_eq(v.source, XF_SOURCE_CACHE);
      cr_expect_eq(xft_loader_calls(&l), 0);
      xf_value_free(&v);
      return;
    }
    xf_value_free(&v);
  }
}

Test(faults, sigstop_beyond_the_command_timeout_fails_open_then_recovers) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  xf_client *c = short_client(s.port);
  kill(s.pid, SIGSTOP);
  expect_fail_open(c);
  kill(s.pid, SIGCONT);
  expect_hit_again(c);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(faults, debug_sleep_fails_open_then_recovers) {
  static const char *const conf[] = {"--enable-debug-command", "yes", NULL};
  xft_server s;
  cr_assert_eq(xft_server_start(&s, conf), 0);
  xf_client *c = short_client(s.port);
  redisContext *r = xft_redis_port(s.port);
  redisAppendCommand(r, "DEBUG SLEEP 3");
  int done = 0;
  while (!done)
    cr_assert_eq(redisBufferWrite(r, &done), REDIS_OK);
  /* The sleep starts when the server reads it, which a busy machine can
   * delay past a call sent after it: a call answered from the cache came
   * before the sleep, and the next one is tried (each fail-open costs the
   * 200 ms command timeout; 2 s of the 3 s sleep to begin). */
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "direct"};
  xf_value v;
  for (int64_t until = xft_now_ms() + 2000;; xft_sleep_ms(10)) {
    cr_assert_eq(get(c, "faults:k", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
    int source = v.source;
    xf_value_free(&v);
    if (source != XF_SOURCE_CACHE) {
      cr_expect_eq(source, XF_SOURCE_UNCACHED);
      break;
    }
    cr_assert_lt(xft_now_ms(), until, "every call was a hit: the sleep never began");
  }
  cr_expect_eq(xft_loader_calls(&l), 1);
  redisReply *slept = NULL; /* its reply: the sleep is over */
  cr_assert_eq(redisGetReply(r, (void **)&slept), REDIS_OK);
  freeReplyObject(slept);
  expect_hit_again(c);
  redisFree(r);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(faults, kill_9_then_restart_fails_open_then_hits) {
  static const char *const conf[] = {"--save", "", NULL};
  xft_server s;
  cr_assert_eq(xft_server_start(&s, conf), 0);
  int port = s.port;
  xf_client *c = short_client(port);
  kill(s.pid, SIGKILL);
  waitpid(s.pid, NULL, 0);
  s.pid = 0;
  expect_fail_open(c);
  xft_server_stop(&s);
  cr_assert_eq(xft_server_start_on(&s, port, NULL), 0);
  xft_sleep_ms(400); /* past breaker_ms: the data died with the server */
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "reloaded"};
  xf_value v;
  /* The client's 200 ms command timeout may fail a call open while a busy
   * machine (ASan) runs the new server slowly: asked again, up to 10 s,
   * until one loads and caches; the next is a hit. */
  int source = XF_SOURCE_UNCACHED;
  for (int64_t until = xft_now_ms() + 10000;
       source == XF_SOURCE_UNCACHED && xft_now_ms() < until; xft_sleep_ms(50)) {
    cr_assert_eq(get(c, "faults:k", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
    source = v.source;
    xf_value_free(&v);
  }
  cr_expect_eq(source, XF_SOURCE_LOADER, "cached again in the new server");
  cr_assert_eq(get(c, "faults:k", &p, &l, &v), XF_OK, "%s", xf_errmsg(c));
  cr_expect_eq(v.source, XF_SOURCE_CACHE, "then a hit");
  cr_expect_str_eq(v.data, "reloaded");
  xf_value_free(&v);
  xf_client_close(c);
  xft_server_stop(&s);
}

/* ---- the batch loader and the share while Redis is down --------------------- */

enum { IDS = 3, THREADS = 8, ROUNDS = 3 };

/* Loads per id ("batch-down:<round>:<id>") in one 100 ms call. */
typedef struct id_loads {
  int loads[ROUNDS][IDS];
  int bad_keys;
} id_loads;

static int count_ids(void *ud, size_t n, const char *const *keys, const size_t *lens,
                     xf_sink *const *sinks) {
  id_loads *l = ud;
  for (size_t i = 0; i < n; i++) {
    int round, id;
    if (sscanf(keys[i], "batch-down:%d:%d", &round, &id) != 2 || round < 0 ||
        round >= ROUNDS || id < 0 || id >= IDS) {
      __atomic_add_fetch(&l->bad_keys, 1, __ATOMIC_SEQ_CST);
      continue;
    }
    __atomic_add_fetch(&l->loads[round][id], 1, __ATOMIC_SEQ_CST);
    xf_sink_set(sinks[i], keys[i], lens[i]);
  }
  xft_sleep_ms(100);
  return 0;
}

typedef struct batcher {
  xf_share *share;
  id_loads *loads;
  pthread_barrier_t *go; /* THREADS batchers wait there each round */
  const int *started;    /* atomic: 1 once all of them started, -1 if not all did */
  int index, wrong;
  xft_fail *fail; /* the test's */
} batcher;

/* Each round: the round's ids in an order of the thread's own (and one of
 * them twice), so that two calls lead different keys and want each other's.
 * A batcher whose client did not open still waits at the barrier each
 * round: the others go on. */
static void *batch_rounds(void *arg) {
  batcher *w = arg;
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nobody listens: Redis is down */
  o.lazy_connect = 1;
  o.share = w->share;
  xf_client *c = NULL;
  int opened = xft_record_open(xf_client_open(&c, &o), w->fail, "a batcher") == XF_OK;
  int started;
  while (!(started = __atomic_load_n(w->started, __ATOMIC_ACQUIRE)))
    xft_sleep_ms(1);
  if (started < 0) { /* too few at the barrier: none goes there */
    xf_client_close(c);
    return NULL;
  }
  xf_policy p = XF_POLICY_INIT;
  for (int round = 0; round < ROUNDS; round++) {
    char buf[IDS + 1][32];
    const char *keys[IDS + 1];
    size_t lens[IDS + 1];
    for (int j = 0; j <= IDS; j++) {
      snprintf(buf[j], sizeof buf[j], "batch-down:%d:%d", round, (w->index + j) % IDS);
      keys[j] = buf[j];
      lens[j] = strlen(buf[j]);
    }
    xf_value v[IDS + 1];
    int rcs[IDS + 1];
    pthread_barrier_wait(w->go);
    if (!opened)
      continue;
    if (xf_get_or_compute_many_batch(c, IDS + 1, keys, lens, &p, count_ids, w->loads, v,
                                     rcs) != XF_OK) {
      w->wrong++;
      continue;
    }
    for (int j = 0; j <= IDS; j++) {
      w->wrong += rcs[j] != XF_OK || !v[j].data || strcmp(v[j].data, buf[j]) != 0 ||
                  (v[j].source != XF_SOURCE_UNCACHED && v[j].source != XF_SOURCE_LOCAL);
      xf_value_free(&v[j]);
    }
  }
  xf_client_close(c);
  return NULL;
}

Test(faults, redis_down_batch_loaders_share_their_loads) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  id_loads loads = {0};
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, THREADS);
  batcher w[THREADS];
  pthread_t t[THREADS];
  xft_fail fail = {0};
  int started = 0, created = 0, rc = 0;
  while (created < THREADS) {
    int i = created;
    w[i] = (batcher){.share = s,
                     .loads = &loads,
                     .go = &go,
                     .started = &started,
                     .index = i,
                     .fail = &fail};
    if ((rc = pthread_create(&t[i], NULL, batch_rounds, &w[i])) != 0)
      break;
    created++;
  }
  __atomic_store_n(&started, rc == 0 ? 1 : -1, __ATOMIC_RELEASE);
  int wrong = 0;
  for (int i = 0; i < created; i++) {
    pthread_join(t[i], NULL);
    wrong += w[i].wrong;
  }
  cr_assert_eq(rc, 0);
  xft_assert_no_fail(&fail);
  cr_expect_eq(wrong, 0, "every key answered with its value, uncached or local");
  cr_expect_eq(__atomic_load_n(&loads.bad_keys, __ATOMIC_SEQ_CST), 0);
  for (int r = 0; r < ROUNDS; r++)
    for (int id = 0; id < IDS; id++)
      cr_expect_eq(loads.loads[r][id], 1, "round %d id %d loaded %d times", r, id,
                   loads.loads[r][id]);
  pthread_barrier_destroy(&go);
  xf_share_close(s);
}

/* ---- a loader asking for its own key -------------------------------------------- */

typedef struct selfish {
  xf_client *c;
  int batch; /* the nested call is a batch of one */
  int calls, inner_rc;
  char msg[256];
} selfish;

/* Asks for its own key once (the second load, if any, just answers). */
static int self_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  selfish *s = ud;
  if (++s->calls == 1) {
    xf_policy p = XF_POLICY_INIT;
    p.wait_ms = 300; /* what the nested call would stall for without the check */
    xf_value v = {0};
    if (s->batch)
      xf_get_or_compute_many(s->c, 1, &key, &keylen, &p, self_loader, s, &v, &s->inner_rc);
    else
      s->inner_rc = xf_get_or_compute(s->c, key, keylen, &p, self_loader, s, &v);
    snprintf(s->msg, sizeof s->msg, "%s", xf_errmsg(s->c));
    xf_value_free(&v);
  }
  return xf_sink_set(sink, "outer", 5);
}

static void expect_refused(const selfish *s, const char *key) {
  char want[128];
  snprintf(want, sizeof want, "%s asked for %s itself", key, key);
  cr_expect_eq(s->inner_rc, XF_EINVAL, "the nested call returned %s",
               xf_errname(s->inner_rc));
  cr_expect(strstr(s->msg, want) != NULL, "message: %s", s->msg);
  cr_expect_eq(s->calls, 1, "the loader ran %d times", s->calls);
}

static void own_key(xf_client *c, int batch, const char *key, xf_source source) {
  selfish s = {.c = c, .batch = batch};
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 300;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, self_loader, &s, &v), XF_OK, "%s",
               xf_errmsg(c));
  expect_refused(&s, key);
  cr_expect_str_eq(v.data, "outer");
  cr_expect_eq(v.source, source);
  xf_value_free(&v);
}

Test(faults, a_loader_asking_for_its_own_key_fails_at_once) {
  xf_client *c = xft_client(1);
  own_key(c, 0, "faults:self", XF_SOURCE_LOADER);
  own_key(c, 1, "faults:selfmany", XF_SOURCE_LOADER);
  xf_client_close(c);
}

Test(faults, a_loader_asking_for_its_own_key_fails_at_once_with_redis_down) {
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, NULL), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nobody listens: fail open, through the share */
  o.lazy_connect = 1;
  o.share = share;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  own_key(c, 0, "faults:selfdown", XF_SOURCE_UNCACHED);
  xf_client_close(c);
  xf_share_close(share);
}

/* A batch loader asking for one of the keys it is loading. */
static int self_batch_loader(void *ud, size_t n, const char *const *keys,
                             const size_t *keylens, xf_sink *const *sinks) {
  selfish *s = ud;
  xft_loader l = {.value = "inner"};
  if (++s->calls == 1) {
    xf_policy p = XF_POLICY_INIT;
    p.wait_ms = 300;
    xf_value v;
    s->inner_rc =
        xf_get_or_compute(s->c, keys[n - 1], keylens[n - 1], &p, xft_load, &l, &v);
    snprintf(s->msg, sizeof s->msg, "%s", xf_errmsg(s->c));
    xf_value_free(&v);
  }
  for (size_t i = 0; i < n; i++)
    xf_sink_set(sinks[i], "outer", 5);
  return 0;
}

Test(faults, a_batch_loader_asking_for_its_own_key_fails_at_once) {
  xf_client *c = xft_client(1);
  selfish s = {.c = c};
  const char *keys[] = {"faults:batchself:a", "faults:batchself:b"};
  size_t lens[] = {18, 18};
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 300;
  xf_value v[2];
  int rcs[2];
  cr_assert_eq(
      xf_get_or_compute_many_batch(c, 2, keys, lens, &p, self_batch_loader, &s, v, rcs),
      XF_OK);
  expect_refused(&s, "faults:batchself:b");
  for (int i = 0; i < 2; i++) {
    cr_expect_eq(rcs[i], XF_OK);
    xf_value_free(&v[i]);
  }
  xf_client_close(c);
}
