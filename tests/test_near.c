/* The near cache (xf_share_options.near_cache_bytes) against a real
 * redis-server: hits served in the process, kept correct by CLIENT TRACKING
 * (another client's write, an invalidation overtaking a read, the loss of
 * the invalidation or of a data connection, FLUSHALL, own deletes, fork),
 * and waiters woken by the write. Each test runs its own server: some kill
 * connections or flush everything. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "near_env.h"
#include "near_impl.h"
#include "share.h"
#include "thread_fail.h"

Test(near, hits_send_nothing) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:hot", "v1");
  near_warm(e.c, "near:hot", "v1");
  long long before = xft_read_calls(e.r) + xft_command_calls(e.r, "evalsha");
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "loaded", .len = 6};
  for (int i = 0; i < 10000; i++) {
    xf_value v;
    cr_assert_eq(xf_get_or_compute(e.c, "near:hot", 8, &p, xft_load, &l, &v), XF_OK);
    cr_assert_str_eq(v.data, "v1");
    xf_value_free(&v);
  }
  long long sent = xft_read_calls(e.r) + xft_command_calls(e.r, "evalsha") - before;
  cr_assert_leq(sent, 100, "10,000 near hits sent %lld commands", sent);
  cr_assert_geq(near_hits(e.c), 9900);
  cr_assert_eq(xft_loader_calls(&l), 0);
  near_env_close(&e);
}

Test(near, another_clients_write_is_seen) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:w", "old");
  near_warm(e.c, "near:w", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  near_put(e.other, "near:w", "new");
  near_await_invalidations(e.share, seen);
  char got[64];
  near_get(e.c, "near:w", got, sizeof got);
  cr_assert_str_eq(got, "new");
  near_warm(e.c, "near:w", "new"); /* and kept again */
  near_env_close(&e);
}

/* The interleaving the pending marker exists for: a read's reply is in, and
 * before its value is kept, another client writes the key and its
 * invalidation arrives. */
static near_env *overtaking;
static int overtaken;

static void write_before_put(void) {
  if (!overtaking || __atomic_exchange_n(&overtaken, 1, __ATOMIC_SEQ_CST))
    return;
  uint64_t seen = xf__near_invalidations(xf__share_near(overtaking->share));
  near_put(overtaking->other, "near:race", "new");
  near_await_invalidations(overtaking->share, seen);
}

Test(near, read_overtaken_by_invalidation_is_not_kept) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:race", "old");
  overtaking = &e;
  xf__near_test_before_put = write_before_put;
  char got[64];
  near_get(e.c, "near:race", got, sizeof got); /* read "old"; "new" overtakes it */
  xf__near_test_before_put = NULL;
  cr_assert(__atomic_load_n(&overtaken, __ATOMIC_SEQ_CST));
  cr_assert_str_eq(got, "old");
  near_get(e.c, "near:race", got, sizeof got);
  cr_assert_str_eq(got, "new", "the overtaken read was kept and served");
  near_env_close(&e);
}

/* Redis invalidates nothing while a node's invalidation connection is gone:
 * losing it drops the node's entries, and the next call tracks again. */
Test(near, losing_the_invalidation_connection_drops_entries) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:k1", "old");
  near_warm(e.c, "near:k1", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  freeReplyObject(xft_cmd(e.r, "CLIENT KILL TYPE pubsub"));
  near_await_invalidations(e.share, seen);
  near_put(e.other, "near:k1", "new"); /* nobody is told */
  char got[64];
  near_get(e.c, "near:k1", got, sizeof got);
  cr_assert_str_eq(got, "new");
  near_warm(e.c, "near:k1", "new"); /* tracked again, under a new connection */
  seen = xf__near_invalidations(xf__share_near(e.share));
  near_put(e.other, "near:k1", "newer");
  near_await_invalidations(e.share, seen);
  near_get(e.c, "near:k1", got, sizeof got);
  cr_assert_str_eq(got, "newer");
  near_env_close(&e);
}

/* redis#13082: once a tracked data connection is gone, Redis no longer
 * invalidates the keys it read. */
Test(near, losing_a_data_connection_drops_entries) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:k2", "old");
  near_warm(e.c, "near:k2", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  freeReplyObject(xft_cmd(e.r, "CLIENT KILL TYPE normal")); /* e.c's and e.other's */
  near_await_invalidations(e.share, seen);
  near_put(e.other, "near:k2", "new");
  char got[64];
  near_get(e.c, "near:k2", got, sizeof got);
  cr_assert_str_eq(got, "new", "an entry outlived its tracked connection");
  near_env_close(&e);
}

Test(near, flushall_drops_entries) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:k3", "old");
  near_warm(e.c, "near:k3", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  freeReplyObject(xft_cmd(e.r, "FLUSHALL"));
  near_await_invalidations(e.share, seen);
  char got[64];
  near_get(e.c, "near:k3", got, sizeof got);
  cr_assert_str_eq(got, "");
  near_env_close(&e);
}

Test(near, own_delete_and_set_drop_before_returning) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:k4", "old");
  near_warm(e.c, "near:k4", "old");
  cr_assert_eq(xf_delete(e.c, "near:k4", 7), XF_OK);
  char got[64];
  near_get(e.c, "near:k4", got, sizeof got); /* at once: no invalidation awaited */
  cr_assert_str_eq(got, "");
  near_put(e.other, "near:k4", "v2");
  near_warm(e.c, "near:k4", "v2");
  near_put(e.c, "near:k4", "v3");
  near_get(e.c, "near:k4", got, sizeof got);
  cr_assert_str_eq(got, "v3");
  near_env_close(&e);
}

Test(near, a_forked_child_starts_empty) {
  /* The child allocates while the parent's tracker thread runs (and, for
   * TSan, the fork handler holds the 64 shards' locks and the tracker's and
   * notify locks at once: past 64 held locks TSan's deadlock detector
   * fails a CHECK). */
  XFT_SKIP_THREADED_FORK();
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:k5", "old");
  near_warm(e.c, "near:k5", "old");
  pid_t pid = fork();
  if (pid == 0) {
    uint64_t before = near_hits(e.c);
    xf_value v;
    int rc = xf_get(e.c, "near:k5", 7, &v);
    int bad = rc != XF_OK || strcmp(v.data, "old") != 0 ? 1
              : near_hits(e.c) != before                ? 3
                                                        : 0;
    xf_value_free(&v);
    int64_t until = xft_now_ms() + BOUND_MS; /* then its own entries (bounded) */
    while (!bad && near_hits(e.c) == before && xft_now_ms() < until) {
      bad = xf_get(e.c, "near:k5", 7, &v) != XF_OK;
      xf_value_free(&v);
      if (near_hits(e.c) == before)
        xft_sleep_ms(1);
    }
    int code = bad ? bad : near_hits(e.c) > before ? 0 : 2;
    redisFree(e.r); /* the child's copies (valgrind counts what it leaves) */
    xf_client_close(e.other);
    xf_client_close(e.c);
    xf_share_close(e.share); /* its tracker thread too */
    _exit(code);
  }
  int status = xft_wait_child(pid, 60); /* a child alone takes < 5 s */
  cr_assert_neq(status, -1, "the child ended within 60 s");
  cr_assert(WIFEXITED(status));
  cr_assert_eq(
      WEXITSTATUS(status), 0,
      "child exited %d: 1 = a read failed, 3 = served the parent's entry, 2 = no near hit",
      WEXITSTATUS(status));
  near_warm(e.c, "near:k5", "old"); /* the parent's cache works on */
  near_env_close(&e);
}

/* ---- wake-on-write ---- */

typedef struct waiter {
  int port;
  xf_share *share;
  xft_loader *loader;
  int start_ms; /* when it starts, after the leader */
  int rc;
  char value[16];
  int64_t began_ms, done_ms; /* its call */
  xft_fail fail;             /* what went wrong on its thread */
} waiter;

static void *wait_for_load(void *arg) {
  waiter *w = arg;
  xf_client *c;
  int rc = xft_record_open(near_client_open(&c, w->port, w->share, NULL, NULL), &w->fail,
                           "the waiter");
  if (rc != XF_OK)
    return NULL;
  near_wake_by_writes_only(c);
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = NEAR_WAIT_MS;
  xf_value v;
  xft_sleep_ms(w->start_ms);
  w->began_ms = xft_now_ms();
  w->rc = xf_get_or_compute(c, "near:slow", 9, &p, xft_load, w->loader, &v);
  w->done_ms = xft_now_ms();
  if (w->rc == XF_OK)
    snprintf(w->value, sizeof w->value, "%s", v.data);
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

/* Waiters of a 250 ms load read again when its write invalidates the key:
 * not on a poll schedule (~15 reads each), and not at their fallback poll,
 * made 30 s here (near_wake_by_writes_only): back within 15 s of the write,
 * they were woken by it. (Commandstats also counts the GET or HMGET a script
 * runs: a client's first read is the read script, a lease or write reads
 * the entry too.) */
Test(near, waiters_are_woken_by_the_write) {
  near_env e;
  near_env_open(&e);
  xft_loader l = {.value = "slow", .len = 4, .sleep_ms = 250},
             quick = {.value = "q", .len = 1};
  waiter w[4];
  pthread_t t[4];
  /* The scripts loaded first (read, lease, write), so no client's EVALSHA
   * meets NOSCRIPT below: how many did depended on who came first. */
  xf_policy warm = XF_POLICY_INIT;
  xf_value v;
  cr_assert_eq(xf_get_or_compute(e.c, "near:warm", 9, &warm, xft_load, &quick, &v), XF_OK);
  xf_value_free(&v);
  long long before = xft_read_calls(e.r) + xft_command_calls(e.r, "evalsha");
  for (int i = 0; i < 4; i++) { /* the first leads */
    w[i] = (waiter){.port = e.srv.port, .share = e.share, .loader = &l, .start_ms = 50 * i};
    pthread_create(&t[i], NULL, wait_for_load, &w[i]);
  }
  int64_t lag_ms = 0;
  long long allowed = 3; /* the leader: read, lease, write */
  /* join them all before an assertion leaves the frame they write to */
  for (int i = 0; i < 4; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(xft_fail_count(&w[i].fail), 0, "waiter %d: %s", i,
                 xft_fail_msg(&w[i].fail));
    cr_assert_eq(w[i].rc, XF_OK);
    cr_assert_str_eq(w[i].value, "slow");
    /* a waiter: its read, the re-read after the write, one wake by the
     * lease's own invalidation, a lease asked for when its read came before
     * the leader's lease (a slow machine), +1 */
    allowed += i ? 5 : 0;
  }
  for (int i = 1; i < 4; i++)
    lag_ms = w[i].done_ms - w[0].done_ms > lag_ms ? w[i].done_ms - w[0].done_ms : lag_ms;
  cr_assert_eq(xft_loader_calls(&l), 1);
  long long sent = xft_read_calls(e.r) + xft_command_calls(e.r, "evalsha") - before;
  cr_assert_leq(sent, allowed, "%lld commands (%lld allowed): the waiters polled", sent,
                allowed);
  /* Woken: back within 15 s of the write (155 ms was the slowest seen, under
   * valgrind at load average 14); left to the fallback poll, 30 s. */
  cr_assert_lt(lag_ms, NEAR_WOKEN_MS,
               "a waiter came back %lld ms after the write: not woken by it",
               (long long)lag_ms);
  cr_log_info("wake-on-write: %lld commands, the last waiter %lld ms after the write", sent,
              (long long)lag_ms);
  near_env_close(&e);
}

/* The batch driver is served from the near cache key by key (kept here by
 * the blocking reads; its own first round fills it too: test_near_batch.c). */
Test(near, a_batch_is_served_near) {
  near_env e;
  near_env_open(&e);
  const char *keys[3] = {"near:b0", "near:b1", "near:b2"};
  size_t lens[3] = {7, 7, 7};
  for (int i = 0; i < 3; i++) {
    near_put(e.other, keys[i], "v");
    near_warm(e.c, keys[i], "v");
  }
  near_put(e.other, "near:b1", "w"); /* one of them changed: Redis tells */
  uint64_t before = near_hits(e.c);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "loaded", .len = 6};
  int64_t until = xft_now_ms() + BOUND_MS;
  /* until the write is seen and the others came from the near cache (a hit
   * goes to Redis while an invalidation waits to be read: a loaded machine) */
  for (;;) {
    xf_value v[3];
    int rcs[3];
    cr_assert_eq(xf_get_or_compute_many(e.c, 3, keys, lens, &p, xft_load, &l, v, rcs),
                 XF_OK);
    int done = rcs[0] == XF_OK && rcs[2] == XF_OK && strcmp(v[0].data, "v") == 0 &&
               strcmp(v[2].data, "v") == 0 && rcs[1] == XF_OK &&
               strcmp(v[1].data, "w") == 0;
    for (int i = 0; i < 3; i++)
      xf_value_free(&v[i]);
    if (done && near_hits(e.c) - before >= 2)
      break;
    before = near_hits(e.c);
    cr_assert_lt(xft_now_ms(), until, "the batch never saw the write from near hits");
    xft_sleep_ms(1);
  }
  cr_assert_eq(xft_loader_calls(&l), 0);
  near_env_close(&e);
}

static void count_event(const xf_event *ev, void *ud) {
  int *counts = ud;
  if (ev->type >= 0 && ev->type <= XF_EV_INVALIDATION)
    counts[ev->type]++;
}

/* A near hit reports one result event, XF_EV_NEAR (source: cache). */
Test(near, a_near_hit_reports_one_near_event) {
  near_env e;
  near_env_open(&e);
  int counts[XF_EV_INVALIDATION + 1] = {0};
  xf_options o = XF_OPTIONS_INIT;
  o.port = e.srv.port;
  o.share = e.share;
  o.on_event = count_event;
  o.on_event_ud = counts;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  near_put(e.other, "near:ev", "v");
  near_warm(c, "near:ev", "v");
  memset(counts, 0, sizeof counts);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "loaded", .len = 6};
  int64_t until = xft_now_ms() + BOUND_MS;
  while (counts[XF_EV_NEAR] == 0) { /* a near hit, within the bound */
    memset(counts, 0, sizeof counts);
    xf_value v;
    cr_assert_eq(xf_get_or_compute(c, "near:ev", 7, &p, xft_load, &l, &v), XF_OK);
    cr_assert_eq(v.source, XF_SOURCE_CACHE);
    xf_value_free(&v);
    cr_assert_lt(xft_now_ms(), until, "never a near hit");
  }
  int results = counts[XF_EV_HIT] + counts[XF_EV_EARLY] + counts[XF_EV_MISS] +
                counts[XF_EV_STALE] + counts[XF_EV_FAIL_OPEN] + counts[XF_EV_NEAR];
  cr_assert_eq(results, 1, "one result event per call");
  xf_client_close(c);
  near_env_close(&e);
}

/* Over a Unix socket: the node is the socket's path. */
Test(near, over_a_unix_socket) {
  near_env e;
  near_env_open(&e);
  xf_options o = XF_OPTIONS_INIT;
  o.unix_path = e.srv.unix_path;
  o.share = e.share;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK, "%s", e.srv.unix_path);
  near_put(e.other, "near:unix", "old");
  near_warm(c, "near:unix", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  near_put(e.other, "near:unix", "new");
  near_await_invalidations(e.share, seen);
  char got[64];
  near_get(c, "near:unix", got, sizeof got);
  cr_assert_str_eq(got, "new");
  xf_client_close(c);
  near_env_close(&e);
}

/* A share closed before its clients (a garbage collector closes objects in
 * any order: Python's at interpreter exit crashed in xf__near_lost, the
 * client's connection reporting to the freed tracker) stays until the last
 * client closes; that client keeps working in between. */
Test(near, a_share_closed_before_its_clients_lives_until_the_last) {
  near_env e;
  near_env_open(&e);
  xf_client *second = near_client(e.srv.port, e.share, NULL, NULL);
  near_put(e.c, "near:order", "v1");
  char buf[16];
  near_get(e.c, "near:order", buf, sizeof buf);
  near_get(second, "near:order", buf, sizeof buf);
  xf_share_close(e.share);
  e.share = NULL;
  near_get(second, "near:order", buf, sizeof buf); /* its share is alive still */
  cr_assert_str_eq(buf, "v1");
  xf_client_close(second);
  near_env_close(&e); /* closes e.c: the share's last reference */
}
