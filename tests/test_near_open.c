/* The near cache's invalidation connections opened one per node, each on
 * its own opener thread (near_arm.c): while one node's open is slow
 * (xf__near_test_open_delay_ms: every open sleeps first, as a stalled
 * server or a slow handshake would), the tracker thread keeps reading the
 * nodes already open: their invalidations are applied and their near hits
 * go on. A fork during a slow open leaves the child a working near cache
 * (it opens that node itself) and nothing of the parent's open. Two servers
 * of the test's own, A (slow to open) and B. An opener's thread is joined
 * once its open is done. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture.h"
#include "near_env.h"
#include "near_impl.h"
#include "share.h"

#define OPEN_DELAY_MS 3000 /* A's invalidation connection's open */

typedef struct two {
  xft_server a, b;
  xf_share *share;
  xf_client *cb;      /* B's, with the near cache */
  xf_client *other_b; /* another process's writer on B */
  pthread_t thread;   /* a call on A, waiting for A's slow open */
  int joined;         /* thread is */
  xf_client *ca;      /* its client (a forked child's copy stays reachable) */
  int a_rc;
} two;

static void *call_on_a(void *arg) {
  two *w = arg;
  xf_value v;
  w->a_rc = xf_get(w->ca, "a:k", 3, &v);
  xf_value_free(&v);
  return NULL;
}

/* Joins the call on A (once A's slow open ended): before an assertion that
 * fails while it runs, as it writes to w. */
static void end_call_on_a(two *w) {
  if (!w->joined)
    pthread_join(w->thread, NULL);
  w->joined = 1;
}

/* near_warm without the assertions: 1 once a read of key is want and a
 * near hit, 0 when a read fails, is not want, or never hits (BOUND_MS). */
static int warm_try(xf_client *c, const char *key, const char *want) {
  uint64_t before = near_hits(c);
  for (int64_t until = xft_now_ms() + BOUND_MS; xft_now_ms() < until; xft_sleep_ms(1)) {
    xf_value v;
    int rc = xf_get(c, key, strlen(key), &v);
    int same = rc == XF_OK && strcmp(v.data, want) == 0;
    xf_value_free(&v);
    if (!same)
      return 0;
    if (near_hits(c) > before)
      return 1;
  }
  return 0;
}

/* B's key near-cached (B's invalidation connection open), then a call on A
 * under way, A's invalidation connection being opened slowly. */
static void open_two(two *w) {
  memset(w, 0, sizeof *w);
  cr_assert_eq(xft_server_start(&w->a, NULL), 0);
  cr_assert_eq(xft_server_start(&w->b, NULL), 0);
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  cr_assert_eq(xf_share_open(&w->share, &so), XF_OK);
  w->cb = near_client(w->b.port, w->share, NULL, NULL);
  w->other_b = near_client(w->b.port, NULL, NULL, NULL);
  near_put(w->other_b, "b:k", "v1");
  near_warm(w->cb, "b:k", "v1");
  xf_options o = XF_OPTIONS_INIT;
  o.port = w->a.port;
  o.share = w->share;
  o.lazy_connect = 1; /* connected by its first call, on the thread */
  cr_assert_eq(xf_client_open(&w->ca, &o), XF_OK);
  xf__near_test_open_delay_ms = OPEN_DELAY_MS;
  cr_assert_eq(pthread_create(&w->thread, NULL, call_on_a, w), 0);
  int64_t until = xft_now_ms() + BOUND_MS;
  while (!near_opening(w->share, w->a.port) && xft_now_ms() < until)
    xft_sleep_ms(1);
  int opening = near_opening(w->share, w->a.port);
  if (!opening)
    end_call_on_a(w);
  cr_assert(opening, "A's open never began");
}

static void close_two(two *w) {
  end_call_on_a(w);
  xf_client_close(w->ca);
  xf__near_test_open_delay_ms = 0;
  cr_expect(w->a_rc == XF_ENOTFOUND || w->a_rc == XF_OK, "the call on A: %d", w->a_rc);
  xf_client_close(w->other_b);
  xf_client_close(w->cb);
  xf_share_close(w->share);
  xft_server_stop(&w->a);
  xft_server_stop(&w->b);
}

/* Before opener threads the tracker thread opened A itself: B's
 * invalidation waited on its socket until A's open ended (3 s), and B's
 * hits went to Redis meanwhile. */
Test(near_open, a_slow_open_does_not_stall_the_other_nodes_invalidations) {
  two w;
  open_two(&w);
  struct xf__ncache *n = xf__share_near(w.share);
  uint64_t seen = xf__near_invalidations(n);
  int64_t t0 = xft_now_ms();
  xf_policy p = XF_POLICY_INIT;
  int rc = xf_set(w.other_b, "b:k", 3, "v2", 2, &p); /* near_put, asserted below */
  if (rc != XF_OK)
    end_call_on_a(&w);
  cr_assert_eq(rc, XF_OK, "%s", xf_errmsg(w.other_b));
  int64_t until = t0 + BOUND_MS;
  while ((xf__near_invalidations(n) <= seen || xf__near_news_waiting(n)) &&
         near_opening(w.share, w.a.port) && xft_now_ms() < until)
    xft_sleep_ms(1);
  int64_t applied_ms = xft_now_ms() - t0;
  int still_opening = near_opening(w.share, w.a.port);
  cr_log_info("B's invalidation applied after %lld ms, A's open %s", (long long)applied_ms,
              still_opening ? "still under way" : "over");
  int applied =
      still_opening && xf__near_invalidations(n) > seen && !xf__near_news_waiting(n);
  if (!applied)
    end_call_on_a(&w);
  cr_assert(applied, "B's invalidation waited for A's open (%lld ms)",
            (long long)applied_ms);
  int warm = warm_try(w.cb, "b:k", "v2"); /* B's near hits resume */
  int a_opening = near_opening(w.share, w.a.port);
  end_call_on_a(&w);
  cr_assert(warm, "B's reads: not v2, or never a near hit (near_warm)");
  cr_assert(a_opening, "B's hits resumed only once A's open ended");
  close_two(&w);
}

/* The child's own tracker opens A when asked (nothing of the parent's
 * opener is waited for), serves B's key near again; valgrind (scripts/test
 * memcheck, --trace-children) sees what the child leaves. */
Test(near_open, a_fork_during_a_slow_open) {
  XFT_SKIP_THREADED_FORK(); /* the parent's opener and call threads have just started */
  two w;
  open_two(&w);
  xf_policy p = XF_POLICY_INIT;
  pid_t pid = fork();
  if (pid == 0) { /* no cr_assert here: the child reports by its exit code */
    alarm(60);    /* a child waiting for the parent's opener: killed, not hung */
    xf__near_test_open_delay_ms = 0;
    xf_options o = XF_OPTIONS_INIT;
    o.port = w.a.port;
    xf_client *ca = NULL, *other_a = NULL;
    int code = xf_client_open(&other_a, &o) != XF_OK                   ? 1
               : (o.share = w.share, xf_client_open(&ca, &o)) != XF_OK ? 1
               : xf_set(other_a, "a:k", 3, "va", 2, &p) != XF_OK       ? 2
               : !warm_try(ca, "a:k", "va")                            ? 3
               : !warm_try(w.cb, "b:k", "v1")                          ? 4
                                                                       : 0;
    xf_client_close(other_a);
    xf_client_close(ca);
    xf_client_close(w.other_b);
    xf_client_close(w.cb);
    xf_share_close(w.share);
    _exit(code);
  }
  int status = xft_wait_child(pid, 60);   /* a child alone takes < 5 s */
  int warm = warm_try(w.cb, "b:k", "v1"); /* the parent's cache works on */
  end_call_on_a(&w);
  cr_assert_neq(status, -1, "the child ended within 60 s");
  cr_assert(WIFEXITED(status), "the child was killed (signal %d)",
            WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cr_assert_eq(WEXITSTATUS(status), 0,
               "child exited %d: 1 = no client, 2 = a write failed, 3 = no near hit on A, "
               "4 = no near hit on B",
               WEXITSTATUS(status));
  cr_assert(warm, "the parent's reads: not v1, or never a near hit (near_warm)");
  close_two(&w);
}

/* The tracker thread joins an opener once its open is done (the opener's
 * wake byte brings it there), not only at the share's close: a process that
 * ends without closing its share, or a test that fails, leaves no finished
 * thread unjoined (ThreadSanitizer reports one as a thread leak). Margin:
 * BOUND_MS (5 s) for a wake and the join of a thread that has returned. */
Test(near_open, an_opener_is_joined_once_its_open_is_done) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "k", "v1");
  near_warm(e.c, "k", "v1"); /* armed: the node's open is done */
  int64_t until = xft_now_ms() + BOUND_MS;
  while (near_openers_unjoined(e.share) && xft_now_ms() < until)
    xft_sleep_ms(1);
  cr_assert_eq(near_openers_unjoined(e.share), 0, "an opener's thread is left unjoined");
  near_env_close(&e);
}

/* A connection set up while its node's invalidation connection could not be
 * opened (the server refused it: maxclients) serves untracked; once that
 * connection can be opened, a later call arms it again, and its reads are
 * kept: near hits, with no reconnect (before: untracked until the data
 * connection was lost, for the blocking drivers). */
Test(near_open, a_refused_invalidation_connection_is_asked_for_again) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  redisContext *r = xft_redis_port(s.port);
  freeReplyObject(xft_cmd(r, "CONFIG SET maxclients 2")); /* r and the data connection */
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  xf_share *share;
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  xf_client *c = near_client(s.port, share, NULL, NULL);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "k", 1, "v", 1, &p), XF_OK);
  xf_value v;
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(xf_get(c, "k", 1, &v), XF_OK, "%s", xf_errmsg(c));
    xf_value_free(&v);
  }
  xf_stats st;
  xf_client_stats(c, &st);
  cr_assert_eq(st.near_hits, 0, "untracked while the server refuses the connection");
  freeReplyObject(xft_cmd(r, "CONFIG SET maxclients 10000"));
  int64_t until = xft_now_ms() + BOUND_MS; /* the open's backoff: 100 ms to 5 s */
  do {
    cr_assert_lt(xft_now_ms(), until, "never a near hit");
    cr_assert_eq(xf_get(c, "k", 1, &v), XF_OK, "%s", xf_errmsg(c));
    xf_value_free(&v);
    xft_sleep_ms(10);
    xf_client_stats(c, &st);
  } while (st.near_hits == 0);
  xf_client_close(c);
  xf_share_close(share);
  redisFree(r);
  xft_server_stop(&s);
}
