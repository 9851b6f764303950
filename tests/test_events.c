/* The event hook (xf_options.on_event) and the bypass switch
 * (xf_client_set_enabled), against a real Redis: every driver reports the
 * same events. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define MAX_EVENTS 64

typedef struct recorded {
  int n;
  xf_event ev[MAX_EVENTS];
  char keys[MAX_EVENTS][64];
  char servers[MAX_EVENTS][64];
} recorded;

static void record(const xf_event *ev, void *ud) {
  recorded *r = ud;
  if (r->n == MAX_EVENTS)
    return;
  r->ev[r->n] = *ev;
  snprintf(r->keys[r->n], sizeof r->keys[0], "%.*s", ev->key ? (int)ev->keylen : 0,
           ev->key ? ev->key : "");
  snprintf(r->servers[r->n], sizeof r->servers[0], "%s", ev->server ? ev->server : "");
  r->n++;
}

/* The recorded types as names, space-separated: "miss lease_won ...". */
static const char *types(const recorded *r) {
  static char buf[1024];
  buf[0] = '\0';
  for (int i = 0; i < r->n; i++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? " " : "",
             xf_event_name(r->ev[i].type));
  return buf;
}

static xf_client *client_on(int port, recorded *r, int breaker_ms) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = 1;
  o.breaker_ms = breaker_ms;
  o.connect_timeout_ms = 200;
  o.on_event = record;
  o.on_event_ud = r;
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static int get(xf_client *c, const char *key, const xf_policy *p, xft_loader *l,
               xf_value *v) {
  return xf_get_or_compute(c, key, strlen(key), p, xft_load, l, v);
}

Test(events, names) {
  cr_expect_str_eq(xf_event_name(XF_EV_HIT), "hit");
  cr_expect_str_eq(xf_event_name(XF_EV_INVALIDATION), "invalidation");
  cr_expect_str_eq(xf_event_name(99), "?");
  cr_expect_str_eq(xf_driver_name(XF_DRIVER_CALL), "call");
  cr_expect_str_eq(xf_driver_name(-1), "?");
}

Test(events, miss_then_hit_with_key_driver_source_duration) {
  recorded r = {0};
  xf_client *c = client_on(xft_port(), &r, 1000);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v", .sleep_ms = 20};
  xf_value v;
  cr_assert_eq(get(c, "events:miss", &p, &l, &v), XF_OK);
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "miss lease_won load_start load_done");
  for (int i = 0; i < r.n; i++) {
    cr_expect_str_eq(r.keys[i], "events:miss");
    cr_expect_eq(r.ev[i].driver, XF_DRIVER_BLOCKING);
  }
  cr_expect_geq(r.ev[3].duration_us, 20000, "load_done: %lld us",
                (long long)r.ev[3].duration_us);
  cr_expect_eq(r.ev[3].rc, 0);
  r.n = 0;
  cr_assert_eq(get(c, "events:miss", &p, &l, &v), XF_OK);
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "hit");
  cr_expect_eq(r.ev[0].source, XF_SOURCE_CACHE);
  xf_client_close(c);
}

Test(events, early_refresh_and_a_failed_loader) {
  recorded r = {0};
  xf_client *c = client_on(xft_port(), &r, 1000);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_assert_eq(xf_set(c, "events:early", 12, "old", 3, &p), XF_OK);
  cr_expect_eq(r.n, 0, "a set reports nothing: %s", types(&r));
  p.beta = INFINITY;
  p.refresh_ahead = -1; /* XFetch: beta decides */
  l.fail_rc = 7;
  cr_assert_eq(get(c, "events:early", &p, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "old");
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "early lease_won load_start load_done");
  cr_expect_eq(r.ev[3].rc, 7);
  xf_client_close(c);
}

Test(events, stale_is_its_own_result_and_waits_are_timed) {
  recorded r = {0};
  xf_client *c = client_on(xft_port(), &r, 1000);
  redisContext *raw = xft_redis();
  long long now = xft_server_ms(raw);
  /* expired 10 ms ago, a live lease held by someone else for 1 s (the first
   * call must meet it alive: 1 s for a busy machine to get there) */
  freeReplyObject(xft_cmd(raw, "HSET events:stale v old d 1000 e %lld s %lld l x:%lld",
                          now - 10, now - 1000, now + 1000));
  freeReplyObject(xft_cmd(raw, "PEXPIRE events:stale 60000"));
  xf_policy p = XF_POLICY_INIT;
  p.stale_ms = 1000;
  xft_loader l = {.value = "new"};
  xf_value v;
  cr_assert_eq(get(c, "events:stale", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_STALE);
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "lease_lost stale");
  /* no stale window: wait for the lease (it dies within 1 s), then load */
  r.n = 0;
  p.stale_ms = 0;
  cr_assert_eq(get(c, "events:stale", &p, &l, &v), XF_OK);
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "lease_lost wait miss lease_won load_start load_done");
  cr_expect_geq(r.ev[1].duration_us, 50000, "wait: %lld us",
                (long long)r.ev[1].duration_us);
  redisFree(raw);
  xf_client_close(c);
}

Test(events, breaker_opens_once_and_closes_once) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  recorded r = {0};
  xf_client *c = client_on(s.port, &r, 100);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  int port = s.port;
  xft_server_stop(&s);
  for (int i = 0; i < 3; i++) { /* down: the first trips, the others skip */
    cr_assert_eq(get(c, "events:breaker", &p, &l, &v), XF_OK);
    cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
    xf_value_free(&v);
  }
  xft_sleep_ms(150); /* half-open: one more attempt fails, still one opening */
  cr_assert_eq(get(c, "events:breaker", &p, &l, &v), XF_OK);
  xf_value_free(&v);
  int opened = 0, closed = 0, fail_open = 0;
  for (int i = 0; i < r.n; i++) {
    opened += r.ev[i].type == XF_EV_BREAKER_OPEN;
    fail_open += r.ev[i].type == XF_EV_FAIL_OPEN;
    if (r.ev[i].type == XF_EV_BREAKER_OPEN) {
      char want[32];
      snprintf(want, sizeof want, "127.0.0.1:%d", port);
      cr_expect_str_eq(r.servers[i], want);
      cr_expect_null(r.ev[i].key);
    }
  }
  cr_expect_eq(opened, 1, "%s", types(&r));
  cr_expect_eq(fail_open, 4, "%s", types(&r));
  cr_assert_eq(xft_server_start_on(&s, port, NULL), 0);
  xft_sleep_ms(150);
  r.n = 0;
  cr_assert_eq(get(c, "events:breaker", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  xf_value_free(&v);
  for (int i = 0; i < r.n; i++)
    closed += r.ev[i].type == XF_EV_BREAKER_CLOSED;
  cr_expect_eq(closed, 1, "%s", types(&r));
  cr_expect_eq(r.ev[0].type, XF_EV_BREAKER_CLOSED);
  cr_expect_eq(r.ev[1].type, XF_EV_RECONNECT);
  xf_client_close(c);
  xft_server_stop(&s);
}

Test(events, the_batch_and_the_call_report_the_same_events) {
  recorded r = {0};
  xf_client *c = client_on(xft_port(), &r, 1000);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  const char *keys[] = {"events:batch"};
  size_t lens[] = {12};
  xf_value v[1];
  int rcs[1];
  cr_assert_eq(xf_get_or_compute_many(c, 1, keys, lens, &p, xft_load, &l, v, rcs), XF_OK);
  xf_value_free(&v[0]);
  cr_expect_str_eq(types(&r), "miss lease_won load_start load_done");
  cr_expect_eq(r.ev[0].driver, XF_DRIVER_BATCH);
  r.n = 0;
  xf_call *call = NULL;
  cr_assert_eq(xf_call_start(&call, c, "events:batch", 12, &p, xft_now_ms()), XF_OK);
  cr_expect_eq(xf_call_next(call), XF_CALL_SEND);
  cr_expect_eq(r.n, 0);
  xf_call_free(call);
  cr_assert_eq(xf_get_or_compute(c, "events:batch", 12, &p, xft_load, &l, &v[0]), XF_OK);
  xf_value_free(&v[0]);
  cr_expect_str_eq(types(&r), "hit");
  cr_expect_eq(r.ev[0].driver, XF_DRIVER_BLOCKING, "the call's driver did not stick");
  xf_client_close(c);
}

/* On a server of its own: the command counts are server-wide, and the other
 * tests of this binary run at the same time on the shared one. */
Test(events, bypass_sends_nothing_and_runs_the_loader_every_time) {
  xft_server own;
  cr_assert_eq(xft_server_start(&own, NULL), 0);
  recorded r = {0};
  xf_client *c = client_on(own.port, &r, 1000);
  redisContext *raw = xft_redis_port(own.port);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_assert_eq(xf_set(c, "events:bypass", 13, "cached", 6, &p), XF_OK);
  xf_client_set_enabled(c, 0);
  long long evalsha = xft_command_calls(raw, "evalsha");
  long long reads = xft_read_calls(raw);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(get(c, "events:bypass", &p, &l, &v), XF_OK);
    cr_expect_str_eq(v.data, "v");
    cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
    xf_value_free(&v);
  }
  cr_expect_eq(xft_loader_calls(&l), 3);
  cr_expect_eq(xf_get(c, "events:bypass", 13, &v), XF_ENOTFOUND);
  cr_expect_eq(xf_set(c, "events:bypass", 13, "x", 1, &p), XF_OK);
  cr_expect_eq(xf_delete(c, "events:bypass", 13), XF_OK);
  cr_expect_eq(xft_command_calls(raw, "evalsha"), evalsha);
  cr_expect_eq(xft_read_calls(raw), reads, "no read of any kind");
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.bypassed, 6);
  cr_expect_eq(st.uncached, 0, "a bypass is not a fail-open");
  xf_client_set_enabled(c, 1);
  cr_assert_eq(get(c, "events:bypass", &p, &l, &v), XF_OK);
  cr_expect_str_eq(v.data, "cached", "the disabled set or delete reached Redis");
  xf_value_free(&v);
  redisFree(raw);
  xf_client_close(c);
  xft_server_stop(&own);
}

Test(events, a_disabled_client_opens_without_redis) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = 1; /* nothing listens */
  o.disabled = 1;
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_assert_eq(get(c, "events:offline", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.redis_errors, 0);
  xf_client_close(c);
}

/* Redis down, a share: a call the share answers (its value kept from the
 * first call's load) reports fail_open with source LOCAL and then local, and
 * no load_start; a call whose loader runs reports fail_open, load_start and
 * load_done. Blocking driver, then the batch. */
Test(events, a_share_answer_is_no_load) {
  xft_server s;
  cr_assert_eq(xft_server_start(&s, NULL), 0);
  int port = s.port;
  xft_server_stop(&s);
  xf_share *share = NULL;
  cr_assert_eq(xf_share_open(&share, NULL), XF_OK);
  recorded r = {0};
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = 1;
  o.connect_timeout_ms = 200;
  o.on_event = record;
  o.on_event_ud = &r;
  o.share = share;
  o.lazy_connect = 1;
  xf_client *c = NULL;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xft_loader l = {.value = "v"};
  xf_value v;
  cr_assert_eq(get(c, "events:shared", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_UNCACHED);
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "breaker_opened fail_open load_start load_done");
  cr_expect_eq(r.ev[1].source, -1);
  cr_expect_eq(r.ev[1].rc, XF_ECONNECT);
  r.n = 0;
  cr_assert_eq(get(c, "events:shared", &p, &l, &v), XF_OK);
  cr_expect_eq(v.source, XF_SOURCE_LOCAL);
  xf_value_free(&v);
  cr_expect_str_eq(types(&r), "fail_open local");
  cr_expect_eq(r.ev[0].source, XF_SOURCE_LOCAL);
  cr_expect_eq(r.ev[0].rc, XF_ECONNECT);
  cr_expect_eq(xft_loader_calls(&l), 1);
  r.n = 0;
  const char *keys[] = {"events:shared"};
  size_t lens[] = {13};
  xf_value vs[1];
  int rcs[1];
  cr_assert_eq(xf_get_or_compute_many(c, 1, keys, lens, &p, xft_load, &l, vs, rcs), XF_OK);
  cr_expect_eq(rcs[0], XF_OK);
  xf_value_free(&vs[0]);
  cr_expect_str_eq(types(&r), "fail_open local");
  cr_expect_eq(xft_loader_calls(&l), 1);
  xf_client_close(c);
  xf_share_close(share);
}
