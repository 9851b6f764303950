/* Load timeouts (policy.soft_timeout_ms, hard_timeout_ms) on the drivers
 * whose loader runs on the caller's thread: with a share, the loader runs
 * on its workers and the caller stops waiting at the timeout (the stale
 * value, or XF_ETIMEDOUT), the load goes on and is cached; without one,
 * the caller waits for its loader. Real redis-server.
 *
 * Timing margins: a 100 ms timeout against a 2 s loader; a call must end
 * within 1.2 s (the timeout plus 1.1 s for a busy 2-core machine: 500 ms
 * was too little for the Python faces beside two CPU loops), and the
 * loader's value must land within 6 s. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "fixture.h"
#include "thread_fail.h"

#define TIMEOUT_MS 100
#define LOAD_MS 2000
#define CALL_BOUND_MS 1200
#define LANDS_WITHIN_MS 6000

enum { BLOCKING, POOL };
static const char *const driver_names[] = {"blocking", "pool"};

typedef struct drv {
  int driver;
  xf_share *share;
  xf_client *c;
  xf_pool *pool;
} drv;

static drv drv_open(int driver) {
  drv d = {.driver = driver};
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.entry_format = xft_entry_format();
  if (driver == POOL) {
    cr_assert_eq(xf_pool_open(&d.pool, &o, 4, 0), XF_OK);
    return d;
  }
  cr_assert_eq(xf_share_open(&d.share, NULL), XF_OK);
  o.share = d.share;
  cr_assert_eq(xf_client_open(&d.c, &o), XF_OK);
  return d;
}

static void drv_close(drv *d) {
  xf_pool_close(d->pool);
  xf_client_close(d->c);
  xf_share_close(d->share);
}

static int get_or_compute(drv *d, const char *key, const xf_policy *p, xft_loader *l,
                          xf_value *v) {
  if (d->pool)
    return xf_pool_get_or_compute(d->pool, key, strlen(key), p, xft_load, l, v);
  return xf_get_or_compute(d->c, key, strlen(key), p, xft_load, l, v);
}

static xf_policy timed_policy(void) {
  xf_policy p = XF_POLICY_INIT;
  p.stale_ms = 60000;
  return p;
}

/* Waits until key holds want (the load that went on wrote it). */
static int64_t lands(const char *key, const char *want) {
  xf_client *c = xft_client(0);
  int64_t t0 = xft_now_ms();
  int found = 0;
  while (!found && xft_now_ms() - t0 < LANDS_WITHIN_MS) {
    xf_value v;
    found = xf_get(c, key, strlen(key), &v) == XF_OK && strcmp(v.data, want) == 0;
    xf_value_free(&v);
    if (!found)
      xft_sleep_ms(20);
  }
  xf_client_close(c);
  cr_expect(found, "%s never held %s", key, want);
  return xft_now_ms() - t0;
}

/* An expired value within stale_ms, and its load slower than the soft
 * timeout: the caller gets the stale value at the timeout. */
static void soft_timeout_serves_stale(int driver, const char *key) {
  drv d = drv_open(driver);
  xf_client *w = xft_client(0);
  xf_policy p = timed_policy();
  p.ttl_ms = 100;
  cr_assert_eq(xf_set(w, key, strlen(key), "old", 3, &p), XF_OK);
  xft_sleep_ms(200); /* past its ttl, within stale_ms */
  p = timed_policy();
  p.soft_timeout_ms = TIMEOUT_MS;
  xft_loader l = {.value = "new", .len = 3, .sleep_ms = LOAD_MS};
  xf_value v;
  int64_t t0 = xft_now_ms();
  int rc = get_or_compute(&d, key, &p, &l, &v);
  int64_t took = xft_now_ms() - t0;
  cr_log_info("%s: soft timeout %d ms, %d ms loader: returned after %lld ms",
              driver_names[driver], TIMEOUT_MS, LOAD_MS, (long long)took);
  cr_assert_eq(rc, XF_OK, "%s", xf_strerror(rc));
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(v.source, XF_SOURCE_STALE);
  cr_expect_geq(took, TIMEOUT_MS);
  cr_expect_leq(took, CALL_BOUND_MS, "%s: the caller waited %lld ms", driver_names[driver],
                (long long)took);
  if (d.c) /* the loader still runs, on a worker of the share */
    cr_expect_eq(xf_load_moved(d.c), 1);
  xf_value_free(&v);
  lands(key, "new");
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_client_close(w);
  drv_close(&d);
}

Test(load_timeout, soft_timeout_serves_stale_blocking) {
  soft_timeout_serves_stale(BLOCKING, "lt:soft:b");
}
Test(load_timeout, soft_timeout_serves_stale_pool) {
  soft_timeout_serves_stale(POOL, "lt:soft:p");
}

/* A cold key: the caller gets XF_ETIMEDOUT at the hard timeout, and the
 * load goes on and is cached. */
static void hard_timeout_on_a_cold_key(int driver, const char *key) {
  drv d = drv_open(driver);
  xf_policy p = timed_policy();
  p.soft_timeout_ms = TIMEOUT_MS; /* no value to give: not the soft one */
  p.hard_timeout_ms = 2 * TIMEOUT_MS;
  xft_loader l = {.value = "new", .len = 3, .sleep_ms = LOAD_MS};
  xf_value v;
  int64_t t0 = xft_now_ms();
  int rc = get_or_compute(&d, key, &p, &l, &v);
  int64_t took = xft_now_ms() - t0;
  cr_log_info("%s: hard timeout %d ms, %d ms loader: %s after %lld ms",
              driver_names[driver], 2 * TIMEOUT_MS, LOAD_MS, xf_errname(rc),
              (long long)took);
  cr_expect_eq(rc, XF_ETIMEDOUT, "%s", xf_strerror(rc));
  cr_expect_geq(took, 2 * TIMEOUT_MS);
  cr_expect_leq(took, 2 * TIMEOUT_MS + CALL_BOUND_MS - TIMEOUT_MS);
  xf_value_free(&v);
  lands(key, "new");
  cr_expect_eq(xft_loader_calls(&l), 1);
  drv_close(&d);
}

Test(load_timeout, hard_timeout_on_a_cold_key_blocking) {
  hard_timeout_on_a_cold_key(BLOCKING, "lt:hard:b");
}
Test(load_timeout, hard_timeout_on_a_cold_key_pool) {
  hard_timeout_on_a_cold_key(POOL, "lt:hard:p");
}

/* A load in time: its value, as without a timeout. */
Test(load_timeout, a_load_in_time_is_the_callers) {
  drv d = drv_open(BLOCKING);
  xf_policy p = timed_policy();
  p.hard_timeout_ms = 5000;
  xft_loader l = {.value = "quick", .len = 5, .sleep_ms = 10};
  xf_value v;
  cr_assert_eq(get_or_compute(&d, "lt:quick", &p, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "quick");
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  cr_expect_eq(xf_load_moved(d.c), 0);
  xf_value_free(&v);
  cr_assert_eq(get_or_compute(&d, "lt:quick", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_CACHE);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_value_free(&v);
  drv_close(&d);
}

typedef struct holder {
  const char *key;
  xft_loader *l;
  int rc;
  xft_fail fail; /* what went wrong on its thread */
} holder;

static void *hold(void *arg) {
  holder *h = arg;
  xf_client *c;
  int rc = xft_record_open(xft_client_open(&c, 0), &h->fail, "the holder");
  if (rc != XF_OK)
    return NULL;
  xf_policy p = timed_policy();
  xf_value v;
  h->rc = xf_get_or_compute(c, h->key, strlen(h->key), &p, xft_load, h->l, &v);
  xf_value_free(&v);
  xf_client_close(c);
  return NULL;
}

/* A caller waiting for another's load: no longer than its hard timeout
 * (a bound of the flow's: every driver, with a share or not). The holder's
 * loader sleeps 2 s from before the waiter starts: its value cannot end the
 * wait before the 100 ms timeout, whatever the waiter's delay up to 1.9 s. */
Test(load_timeout, a_waiter_waits_no_longer_than_its_hard_timeout) {
  const char *key = "lt:waiter";
  xft_loader slow = {.value = "held", .len = 4, .sleep_ms = LOAD_MS};
  holder h = {.key = key, .l = &slow};
  xf_client *c = xft_client(0); /* opened (asserted) before the holder runs */
  pthread_t t;
  pthread_create(&t, NULL, hold, &h);
  while (xft_loader_calls(&slow) == 0) {
    xft_assert_no_fail_join(&h.fail,
                            t); /* else its loader never runs: no end to this wait */
    xft_sleep_ms(5);
  }
  xf_policy p = timed_policy();
  p.hard_timeout_ms = TIMEOUT_MS;
  xft_loader l = {.value = "mine", .len = 4};
  xf_value v;
  int64_t t0 = xft_now_ms();
  int rc = xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v);
  int64_t took = xft_now_ms() - t0;
  cr_expect_eq(rc, XF_ETIMEDOUT, "%s", xf_strerror(rc));
  cr_expect_leq(took, CALL_BOUND_MS, "waited %lld ms", (long long)took);
  cr_expect_eq(xft_loader_calls(&l), 0);
  xf_value_free(&v);
  pthread_join(t, NULL);
  cr_expect_eq(h.rc, XF_OK);
  xf_client_close(c);
}

/* Without a share, the loader runs on the caller's thread: the timeout
 * cannot apply and the call waits for its loader (documented). */
Test(load_timeout, without_a_share_the_call_waits_for_its_loader) {
  xf_client *c = xft_client(0);
  xf_policy p = timed_policy();
  p.hard_timeout_ms = TIMEOUT_MS;
  xft_loader l = {.value = "late", .len = 4, .sleep_ms = 300};
  xf_value v;
  cr_assert_eq(xf_get_or_compute(c, "lt:noshare", 10, &p, xft_load, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "late");
  xf_value_free(&v);
  xf_client_close(c);
}

/* A tagged key's load that went on past the soft timeout writes the call's
 * tags' record: a call of the same tags then hits it (refused, it would be
 * a miss whose loader runs). Margins as above; the value lands within 6 s. */
static void a_moved_load_keeps_the_calls_tags(int driver, const char *key) {
  drv d = drv_open(driver);
  const char *tags[] = {"lt-tag"};
  xf_client *w = xft_client(0);
  xf_policy p = timed_policy();
  p.tags = tags, p.ntags = 1;
  xf_policy short_ttl = p;
  short_ttl.ttl_ms = 100;
  cr_assert_eq(xf_set(w, key, strlen(key), "old", 3, &short_ttl), XF_OK);
  xft_sleep_ms(200); /* past its ttl, within stale_ms */
  xf_policy soft = p;
  soft.soft_timeout_ms = TIMEOUT_MS;
  xft_loader l = {.value = "new", .len = 3, .sleep_ms = LOAD_MS};
  xf_value v;
  cr_assert_eq(get_or_compute(&d, key, &soft, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "old");
  cr_expect_eq(v.source, XF_SOURCE_STALE);
  xf_value_free(&v);
  xf_policy no_wait = p;
  no_wait.wait_ms = 0;
  no_wait.on_wait_timeout = XF_WAIT_FAIL;
  xft_loader never = {.value = "x", .len = 1};
  int64_t t0 = xft_now_ms();
  int hit = 0;
  while (!hit && xft_now_ms() - t0 < LANDS_WITHIN_MS) {
    int rc = xf_get_or_compute(w, key, strlen(key), &no_wait, xft_load, &never, &v);
    hit = rc == XF_OK && v.source == XF_SOURCE_CACHE && strcmp(v.data, "new") == 0;
    xf_value_free(&v);
    if (!hit)
      xft_sleep_ms(20);
  }
  cr_expect(hit, "%s: no tagged hit of the moved load's value", driver_names[driver]);
  cr_expect_eq(xft_loader_calls(&never), 0, "%s: the tagged entry was refused",
               driver_names[driver]);
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_client_close(w);
  drv_close(&d);
}

Test(load_timeout, a_moved_load_keeps_the_calls_tags_blocking) {
  a_moved_load_keeps_the_calls_tags(BLOCKING, "lt:tags:b");
}
Test(load_timeout, a_moved_load_keeps_the_calls_tags_pool) {
  a_moved_load_keeps_the_calls_tags(POOL, "lt:tags:p");
}
