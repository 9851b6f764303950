/* The process-local share (xf_share) keeps the loader protected while Redis
 * cannot be used. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "fixture.h"

/* A client whose Redis is gone (lazy: nobody listens on port 1). */
static xf_client *down_client(xf_share *s) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1;
  o.lazy_connect = 1;
  o.share = s;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static int get(xf_client *c, const char *key, const xf_policy *p, xft_loader *l,
               xf_value *v) {
  return xf_get_or_compute(c, key, strlen(key), p, xft_load, l, v);
}

typedef struct worker {
  xf_share *share;
  xft_loader *loader;
  int wrong;
  int sources[5];
} worker;

static void *hammer(void *arg) {
  worker *w = arg;
  xf_client *c = down_client(w->share);
  xf_policy p = XF_POLICY_INIT;
  for (int i = 0; i < 300; i++) {
    xf_value v;
    int rc = get(c, "share:hot", &p, w->loader, &v);
    if (rc != XF_OK || strcmp(v.data, "right") != 0)
      w->wrong++;
    else
      w->sources[v.source]++;
    xf_value_free(&v);
  }
  xf_client_close(c);
  return NULL;
}

static int run_workers(xf_share *s, xft_loader *l, worker w[4]) {
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].share = s;
    w[i].loader = l;
    pthread_create(&t[i], NULL, hammer, &w[i]);
  }
  int wrong = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    wrong += w[i].wrong;
  }
  return wrong;
}

Test(share, redis_down_four_threads_load_once) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xft_loader l = {.value = "right", .sleep_ms = 20};
  worker w[4];
  cr_expect_eq(run_workers(s, &l, w), 0, "every call answered with the right value");
  cr_expect_leq(l.calls, 12, "%d loader calls for 1,200 calls", l.calls);
  cr_log_info("redis down, share: %d loader calls for 1,200 calls", l.calls);
  int local = 0;
  for (int i = 0; i < 4; i++) {
    cr_expect_eq(w[i].sources[XF_SOURCE_CACHE] + w[i].sources[XF_SOURCE_LOADER] +
                     w[i].sources[XF_SOURCE_STALE],
                 0);
    local += w[i].sources[XF_SOURCE_LOCAL];
  }
  cr_expect_eq(local, 1200 - l.calls);
  xf_share_close(s);
}

Test(share, without_a_share_every_call_loads) {
  xft_loader l = {.value = "right"};
  worker w[4];
  cr_expect_eq(run_workers(NULL, &l, w), 0);
  cr_expect_eq(l.calls, 1200);
}

Test(share, a_failure_is_not_kept) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  xft_loader bad = {.fail_rc = 3};
  xf_value v;
  cr_expect_eq(get(c, "share:fail", &p, &bad, &v), XF_ELOADER);
  xft_loader good = {.value = "ok"};
  cr_assert_eq(get(c, "share:fail", &p, &good, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(good.calls, 1);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

Test(share, values_expire_with_their_ttl) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 50;
  xft_loader l = {.value = "v"};
  xf_value v;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(get(c, "share:ttl", &p, &l, &v), XF_OK);
    xf_value_free(&v);
  }
  cr_expect_eq(l.calls, 1);
  xft_sleep_ms(80);
  cr_assert_eq(get(c, "share:ttl", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  cr_expect_eq(l.calls, 2);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

Test(share, bounded_by_entries_least_recently_used_first) {
  xf_share *s;
  xf_share_options o = {.max_entries = 2};
  cr_assert_eq(xf_share_open(&s, &o), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  xft_loader a = {.value = "a"}, b = {.value = "b"}, k = {.value = "c"};
  xf_value v;
  cr_assert_eq(get(c, "share:a", &p, &a, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:b", &p, &b, &v), XF_OK);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:a", &p, &a, &v), XF_OK); /* a is now the most recent */
  cr_expect_eq(v.source, XF_SOURCE_LOCAL);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:c", &p, &k, &v), XF_OK); /* evicts b */
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:a", &p, &a, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOCAL);
  xf_value_free(&v);
  cr_assert_eq(get(c, "share:b", &p, &b, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED, "b was evicted");
  cr_expect_eq(b.calls, 2);
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

Test(share, bounded_by_bytes) {
  xf_share *s;
  xf_share_options o = {.max_bytes = 64};
  cr_assert_eq(xf_share_open(&s, &o), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  static char big[100];
  memset(big, 'x', sizeof big - 1);
  xft_loader l = {.value = big};
  xf_value v;
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(get(c, "share:big", &p, &l, &v), XF_OK);
    xf_value_free(&v);
  }
  cr_expect_eq(l.calls, 2, "a value above max_bytes is not kept");
  xf_client_close(c);
  xf_share_close(s);
}

/* stats count what happened: loads are loader runs, the calls the share
 * answered are local (before: every call counted a load). */
Test(share, stats_count_loader_runs_and_share_answers) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xf_client *c = down_client(s);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  for (int i = 0; i < 100; i++) {
    xf_value v;
    cr_assert_eq(get(c, "share:stats", &p, &l, &v), XF_OK);
    xf_value_free(&v);
  }
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(l.calls, 1);
  cr_expect_eq(st.loads, 1, "loads %llu for 1 loader run", (unsigned long long)st.loads);
  cr_expect_eq(st.local, 99);
  cr_expect_eq(st.uncached, 1);
  xf_client_close(c);
  xf_share_close(s);
}

typedef struct {
  xf_share *share;
  xft_loader *l;
  int rc;
} share_call;

static void *slow_lead(void *arg) {
  share_call *sc = arg;
  xf_client *c = down_client(sc->share);
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  sc->rc = get(c, "share:intr", &p, sc->l, &v);
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

static int stop_now(void *ud) { return ++*(int *)ud >= 2; }

/* A thread waiting for another thread's load of the key in the share asks
 * options.interrupt between 50 ms slices and stops with XF_ECANCELED (before:
 * it slept on the condition until the load landed or wait_ms ran out). */
Test(share, interrupt_ends_a_wait_for_another_threads_load) {
  xf_share *s;
  cr_assert_eq(xf_share_open(&s, NULL), XF_OK);
  xft_loader slow = {.value = "v", .sleep_ms = 1500};
  share_call lead = {s, &slow, -100};
  pthread_t t;
  pthread_create(&t, NULL, slow_lead, &lead);
  xft_sleep_ms(100); /* the lead is loading */
  int checks = 0;
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1;
  o.lazy_connect = 1;
  o.share = s;
  o.interrupt = stop_now;
  o.interrupt_ud = &checks;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xft_loader mine = {.value = "mine"};
  xf_value v;
  cr_expect_eq(get(c, "share:intr", &p, &mine, &v), XF_ECANCELED, "%s", xf_errmsg(c));
  cr_expect_eq(checks, 2);
  cr_expect_eq(mine.calls, 0);
  cr_expect_eq(__atomic_load_n(&slow.calls, __ATOMIC_RELAXED), 1, "still loading");
  xf_client_close(c);
  pthread_join(t, NULL);
  cr_expect_eq(lead.rc, XF_OK);
  xf_share_close(s);
}
